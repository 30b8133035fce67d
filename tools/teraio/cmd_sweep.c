/* teraio sweep: normalized throughput against migration bandwidth (the paper's Figure 3). */
#include <stdlib.h>
#include <string.h>

#include <teraio/sim.h>
#include <teraio/teraio.h>

#include "cli.h"
#include "cmd_sim_common.h"

static const char *const CMD = "sweep";

#define MAX_POINTS 64

static void usage(FILE *f) {
    (void)fprintf(
        f,
        "usage: teraio sweep TRACE --hw HW [--policy P] [--bandwidths LIST] [--json]\n\n"
        "Normalized throughput (ideal / simulated iteration time) against the migration\n"
        "bandwidth per GPU, as in the paper's Figure 3. For each bandwidth B the SSD array of\n"
        "HW is set to B for reads and for writes (per-SSD rate = B / (ssd_count x efficiency)),\n"
        "the PCIe link to at least B, then P plans against that hardware and the plan is\n"
        "simulated.\n\n"
        "  --hw HW              hardware preset or JSON file\n"
        "  --policy P           planning policy (default teraio-ssd: all traffic on the SSDs)\n"
        "  --bandwidths LIST    comma-separated rates (default\n"
        "                       4,8,12,16,24,32,48,64GB/s; a unit on the last applies to all)\n"
        "  --capacity BYTES     GPU capacity (default: memory - reserve of HW)\n"
        "  --min-tensor SIZE    never move tensors smaller than SIZE (planner default 1MiB)\n"
        "  --demand-evict       where a plan leaves memory short, evict idle tensors on demand\n"
        "                       (default: plan-only, such a point is OOM)\n"
        "  --json               JSON on stdout: {\"policy\", \"points\": [{\"bandwidth_Bps\",\n"
        "                       \"fraction_of_ideal\", \"iteration_s\", \"oom\"}]}\n"
        "  -h, --help           this help\n\n"
        "examples:\n"
        "  teraio sweep llama3-8b.tio --hw paper-2xh100nvl\n"
        "  teraio sweep llama3-70b.tio --hw paper-2xh100nvl --bandwidths 16,32,48GB/s "
        "--json\n\n" TIO_CLI_EXIT_HELP);
}

/* "4,8,16GB/s": numbers without a unit take the unit of the last item. */
static int parse_list(const char *text, double *out, size_t *n) {
    char buf[1024];
    if (strlen(text) >= sizeof buf) {
        cli_error(CMD, "--bandwidths: list too long");
        return TIO_EXIT_USAGE;
    }
    (void)snprintf(buf, sizeof buf, "%s", text);
    const char *unit = "";
    char *last = strrchr(buf, ',');
    last = last ? last + 1 : buf;
    for (const char *u = last; *u; u++) {
        if ((*u < '0' || *u > '9') && *u != '.' && *u != 'e' && *u != 'E') {
            unit = u;
            break;
        }
    }
    *n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n >= MAX_POINTS) {
            cli_error(CMD, "--bandwidths: at most %d values", MAX_POINTS);
            return TIO_EXIT_USAGE;
        }
        char item[1100];
        int has_unit = 0;
        for (const char *c = tok; *c; c++) {
            if ((*c < '0' || *c > '9') && *c != '.') {
                has_unit = 1;
            }
        }
        (void)snprintf(item, sizeof item, "%s%s", tok, has_unit ? "" : unit);
        int rc = cli_parse_rate(CMD, "--bandwidths", item, &out[*n]);
        if (rc) {
            return rc;
        }
        if (!(out[*n] > 0)) {
            cli_error(CMD, "--bandwidths: '%s' must be > 0", tok);
            return TIO_EXIT_USAGE;
        }
        (*n)++;
    }
    if (*n == 0) {
        cli_error(CMD, "--bandwidths: empty list");
        return TIO_EXIT_USAGE;
    }
    return 0;
}

int cli_cmd_sweep(int argc, char **argv) {
    const char *trace_path = NULL, *hw_name = NULL, *policy = "teraio-ssd";
    const char *list = NULL; /* NULL: TIO_HW_SWEEP_BANDWIDTHS */
    int json = 0;
    struct tio_sim_params sp = tio_sim_params_default();
    uint64_t min_tensor = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return TIO_EXIT_OK;
        }
        if (strcmp(a, "--json") == 0) {
            json = 1;
            continue;
        }
        if (strcmp(a, "--demand-evict") == 0) {
            sp.demand_evict = 1;
            continue;
        }
        if (a[0] == '-' && a[1] != '\0' && !val) {
            cli_error(CMD, "%s needs a value (see --help)", a);
            return TIO_EXIT_USAGE;
        }
        if (strcmp(a, "--hw") == 0) {
            hw_name = val;
        } else if (strcmp(a, "--policy") == 0) {
            policy = val;
        } else if (strcmp(a, "--bandwidths") == 0) {
            list = val;
        } else if (strcmp(a, "--capacity") == 0) {
            rc = cli_parse_bytes_pos(CMD, a, val, &sp.capacity_bytes);
        } else if (strcmp(a, "--min-tensor") == 0) {
            rc = cli_parse_bytes(CMD, a, val, &min_tensor);
            if (rc == 0 && min_tensor == 0) {
                cli_error(CMD, "--min-tensor must be > 0");
                rc = TIO_EXIT_USAGE;
            }
        } else if (a[0] == '-') {
            cli_error(CMD, "unknown option '%s' (see --help)", a);
            return TIO_EXIT_USAGE;
        } else if (!trace_path) {
            trace_path = a;
            continue;
        } else {
            cli_error(CMD, "unexpected argument '%s' (see --help)", a);
            return TIO_EXIT_USAGE;
        }
        if (rc) {
            return rc;
        }
        i++;
    }
    if (!trace_path || !hw_name) {
        cli_error(CMD, "need TRACE and --hw (see --help)");
        return TIO_EXIT_USAGE;
    }
    static const double default_bws[] = TIO_HW_SWEEP_BANDWIDTHS;
    double bws[MAX_POINTS];
    size_t n = 0;
    int rc = 0;
    if (list) {
        rc = parse_list(list, bws, &n);
    } else {
        n = sizeof default_bws / sizeof default_bws[0];
        memcpy(bws, default_bws, sizeof default_bws);
    }
    if (rc) {
        return rc;
    }
    struct tio_hw hw;
    rc = tio_hw_load(hw_name, &hw);
    if (rc < 0) {
        return cli_fail(CMD, hw_name, rc);
    }
    if (hw.ssd_count == 0) {
        cli_error(CMD, "%s has no SSDs: the sweep varies the SSD array's bandwidth", hw_name);
        return TIO_EXIT_INPUT;
    }
    struct tio_trace *tr = NULL;
    rc = tio_trace_load(trace_path, TIO_TRACE_FORMAT_AUTO, &tr);
    if (rc < 0) {
        return cli_fail(CMD, trace_path, rc);
    }
    struct tio_sim_result res[MAX_POINTS];
    int code = TIO_EXIT_OK;
    for (size_t i = 0; i < n; i++) {
        struct tio_hw h;
        rc = tio_hw_at_ssd_bandwidth(&hw, bws[i], &h);
        struct tio_sim *sim = NULL;
        if (rc == 0) {
            const struct cli_sim_job job = {
                .hw = &h, .policy = policy, .min_tensor_bytes = min_tensor, .sp = &sp
            };
            rc = cli_sim_policy(tr, &job, &sim, NULL);
        }
        if (rc < 0) {
            code = cli_fail(CMD, policy, rc);
            goto out;
        }
        tio_sim_get_result(sim, &res[i]);
        tio_sim_free(sim);
        if (cli_stderr_is_tty()) {
            (void)fprintf(stderr, "\r%zu/%zu", i + 1, n);
        }
    }
    if (cli_stderr_is_tty()) {
        (void)fprintf(stderr, "\r");
    }
    if (json) {
        (void)printf("{\"trace\": ");
        cli_json_string(stdout, trace_path);
        (void)printf(", \"hw\": ");
        cli_json_string(stdout, hw.name);
        (void)printf(", \"policy\": ");
        cli_json_string(stdout, policy);
        (void)printf(", \"varied\": \"ssd_array_bandwidth\", \"points\": [\n");
        for (size_t i = 0; i < n; i++) {
            (void)printf(
                "  {\"bandwidth_Bps\": %.6g, \"fraction_of_ideal\": %.6f, \"iteration_s\": %.9g, "
                "\"ideal_s\": %.9g, \"stall_s\": %.9g, \"oom\": %s}%s\n",
                bws[i], res[i].fraction_of_ideal, res[i].iteration_s, res[i].ideal_s,
                res[i].stall_s, res[i].oom ? "true" : "false", i + 1 < n ? "," : "");
        }
        (void)printf("]}\n");
    } else {
        char a[32];
        (void)printf("policy %s on %s (SSD array bandwidth varied; ideal %.3f s)\n", policy,
                     hw.name, n ? res[0].ideal_s : 0.0);
        (void)printf("%14s  %10s  %12s\n", "bandwidth", "normalized", "iteration");
        for (size_t i = 0; i < n; i++) {
            if (res[i].oom) {
                (void)printf("%14s  %10s  %12s\n", tio_format_rate(bws[i], a, sizeof a), "OOM",
                             "-");
            } else {
                (void)printf("%14s  %10.3f  %11.3fs\n", tio_format_rate(bws[i], a, sizeof a),
                             res[i].fraction_of_ideal, res[i].iteration_s);
            }
        }
    }
out:
    tio_trace_free(tr);
    return code;
}
