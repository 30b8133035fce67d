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

/* "4,8,16GB/s": numbers without a unit take the unit of the last item. The list's elements are
 * already split and non-empty (CLI_LIST). */
static int parse_rates(const struct cli_list *l, double *out, size_t *n) {
    const char *unit = "";
    for (const char *u = l->items[l->n - 1]; *u; u++) {
        if ((*u < '0' || *u > '9') && *u != '.' && *u != 'e' && *u != 'E') {
            unit = u;
            break;
        }
    }
    for (*n = 0; *n < l->n; (*n)++) {
        const char *tok = l->items[*n];
        char item[1100];
        int has_unit = 0;
        for (const char *c = tok; *c; c++) {
            if ((*c < '0' || *c > '9') && *c != '.') {
                has_unit = 1;
            }
        }
        (void)snprintf(item, sizeof item, "%s%s", tok, has_unit ? "" : unit);
        int rc = cli_value_rate(CMD, "--bandwidths", item, &out[*n]);
        if (rc) {
            return rc;
        }
    }
    return 0;
}

int cli_cmd_sweep(int argc, char **argv) {
    const char *trace_path = NULL, *hw_name = NULL, *policy = "teraio-ssd";
    const char *items[MAX_POINTS];
    char list_buf[1024];
    struct cli_list list = { items, MAX_POINTS, 0, list_buf, sizeof list_buf }; /* n 0: default */
    int json = 0, demand = 0;
    struct tio_sim_params sp = tio_sim_params_default();
    uint64_t min_tensor = 0;
    const struct cli_opt opts[] = {
        { .name = "--json", .kind = CLI_FLAG, .dst = &json, .value = 1 },
        { .name = "--demand-evict", .kind = CLI_FLAG, .dst = &demand, .value = 1 },
        { .name = "--hw", .kind = CLI_TEXT, .dst = &hw_name },
        { .name = "--policy", .kind = CLI_TEXT, .dst = &policy },
        { .name = "--bandwidths", .kind = CLI_LIST, .dst = &list },
        { .name = "--capacity", .kind = CLI_BYTES, .dst = &sp.capacity_bytes, CLI_LIMITS_MEMORY },
        { .name = "--min-tensor", .kind = CLI_BYTES, .dst = &min_tensor, CLI_LIMITS_MEMORY },
    };
    struct cli_spec spec = { CMD, opts, sizeof opts / sizeof opts[0], usage, &trace_path,
                             1,   0,    "one trace per run" };
    int prc = cli_parse_args(&spec, argc, argv, 1, NULL);
    if (prc) {
        return prc == CLI_HELP_SHOWN ? TIO_EXIT_OK : prc;
    }
    if (demand) {
        sp.demand_evict = 1;
    }
    if (!trace_path || !hw_name) {
        cli_error(CMD, "need TRACE and --hw (see --help)");
        return TIO_EXIT_USAGE;
    }
    static const double default_bws[] = TIO_HW_SWEEP_BANDWIDTHS;
    double bws[MAX_POINTS];
    size_t n = 0;
    int rc = 0;
    if (list.n) {
        rc = parse_rates(&list, bws, &n);
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
        tio_sim_get_result(sim, &res[i], sizeof res[i]);
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
