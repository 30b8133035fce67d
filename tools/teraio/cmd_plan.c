/* teraio plan: run a policy on a trace and a hardware description, write the plan. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <teraio/hw.h>
#include <teraio/plan.h>
#include <teraio/trace.h>
#include <teraio/units.h>

#include "cli.h"

static const char *const CMD = "plan";

static void plan_usage(FILE *f) {
    (void)fprintf(
        f,
        "usage: teraio plan TRACE [--hw HW] [--policy P] [-o PLAN] [options]\n\n"
        "Plan offloads and prefetches of inactive tensors for one GPU (docs/planner.md).\n\n"
        "  --hw HW               preset name or JSON file (default paper-2xh100nvl; see\n"
        "                        `teraio hw list`)\n"
        "  --policy P            teraio (= teraio-mixed), teraio-ssd, teraio-paper,\n"
        "                        teraio-paper-ssd, g10, or a simulator-modelled baseline\n"
        "                        (none, ideal, lru, zero-offload, zero-infinity: no moves)\n"
        "  -o, --output PLAN     write the plan (binary unless it ends in .json)\n"
        "  --format F            binary or json (overrides the extension)\n"
        "  --json                print the summary as JSON on stdout\n"
        "  --no-early-prefetch   keep prefetches at their latest start\n"
        "  --no-clean-copies     rewrite every offload even if an identical copy is stored\n"
        "  --no-overcommit       keep every move within the bandwidth (the plan may then be\n"
        "                        infeasible) instead of planning stalls to fit memory\n"
        "  --capacity SIZE       override the GPU memory (e.g. 80GiB)\n"
        "  --reserve SIZE        override the GPU reserve kept free\n"
        "  --host-cap SIZE       override the host-memory cap for offloading (0 = SSD only)\n"
        "  --ssds N              override the SSDs per GPU\n"
        "  --bandwidth-scale X   multiply every bandwidth (sweeps)\n"
        "  --slack F             fraction of the capacity the plan keeps free (default 0.02)\n"
        "  --min-tensor SIZE     never move tensors smaller than this (default 1MiB)\n"
        "  --verify              re-check the plan independently (pairing, GPU and host memory,\n"
        "                        every move's deadline on the bandwidth, stall moves too)\n"
        "  --strict              exit 2 when the plan cannot fit the capacity\n\n"
        "examples:\n"
        "  teraio plan llama3-8b.tio --hw paper-2xh100nvl --policy teraio -o l8b.plan\n"
        "  teraio plan llama3-70b.tio --policy teraio-paper --json -o l70b.plan.json\n"
        "  teraio plan run.tio --hw my-box.json --host-cap 0 --policy teraio-ssd --verify\n\n"
        "An infeasible budget still gives a plan; the shortfall (bytes and kernel) is reported.\n"
        "with --strict, a plan that cannot fit the capacity is exit 2.\n" TIO_CLI_EXIT_HELP);
}

static void json_u64(FILE *f, const char *key, uint64_t v, int comma) {
    (void)fprintf(f, "  \"%s\": %llu%s\n", key, (unsigned long long)v, comma ? "," : "");
}

/* The --capacity, --reserve, --host-cap and --ssds overrides (UINT64_MAX / 0: not given).
 * Returns 0 or an exit code. */
static int override_hw(
    struct tio_hw *hw, uint64_t capacity, uint64_t reserve, uint64_t host_cap, uint64_t ssds) {
    if (capacity) {
        hw->gpu_memory_bytes = capacity;
    }
    if (reserve != UINT64_MAX) {
        hw->gpu_reserve_bytes = reserve;
    }
    if (host_cap != UINT64_MAX) {
        hw->host_offload_cap_bytes = host_cap;
        if (host_cap > hw->host_memory_bytes) {
            hw->host_memory_bytes = host_cap;
        }
    }
    if (ssds != UINT64_MAX) {
        if (ssds > 1024) {
            cli_error(CMD, "--ssds: %llu is more than 1024", (unsigned long long)ssds);
            return TIO_EXIT_USAGE;
        }
        hw->ssd_count = (uint32_t)ssds;
    }
    return 0;
}

/* The summary as JSON on stdout. */
static void print_json(const struct tio_plan *plan,
                       const struct tio_plan_summary *s,
                       const struct tio_hw *hw,
                       const char *trace_path,
                       const char *out,
                       int verified) {
    uint64_t hash = tio_plan_trace_hash(plan);
    printf("{\n  \"policy\": ");
    cli_json_string(stdout, tio_plan_policy(plan));
    printf(",\n  \"hw\": ");
    cli_json_string(stdout, hw->name);
    printf(",\n  \"trace\": ");
    cli_json_string(stdout, trace_path);
    printf(",\n  \"output\": ");
    if (out) {
        cli_json_string(stdout, out);
    } else {
        printf("null");
    }
    printf(",\n  \"trace_hash\": \"%016llx\",\n", (unsigned long long)hash);
    json_u64(stdout, "n_kernels", tio_plan_kernel_count(plan), 1);
    printf("  \"planning_seconds\": %.6f,\n", s->planning_seconds);
    json_u64(stdout, "moves", s->n_moves, 1);
    json_u64(stdout, "offloads", s->n_offloads, 1);
    printf("  \"feasible\": %s,\n", s->feasible ? "true" : "false");
    json_u64(stdout, "capacity_bytes", s->capacity_bytes, 1);
    json_u64(stdout, "planned_peak_bytes", s->planned_peak_bytes, 1);
    json_u64(stdout, "shortfall_bytes", s->shortfall_bytes, 1);
    if (s->feasible) {
        printf("  \"shortfall_kernel\": null,\n");
    } else {
        json_u64(stdout, "shortfall_kernel", s->shortfall_kernel, 1);
    }
    json_u64(stdout, "host_peak_bytes", s->host_peak_bytes, 1);
    json_u64(stdout, "ssd_peak_bytes", s->ssd_peak_bytes, 1);
    json_u64(stdout, "bytes_to_ssd", s->bytes_to_ssd, 1);
    json_u64(stdout, "bytes_to_host", s->bytes_to_host, 1);
    printf("  \"verified\": %s\n}\n", verified ? "true" : "false");
}

/* The summary as text on stdout. */
static void print_text(const struct tio_plan *plan,
                       const struct tio_plan_summary *s,
                       const struct tio_hw *hw,
                       const char *out) {
    char a[32], b[32], c[32], d[32], e[32], t[32];
    printf("policy %s on %s: %zu moves (%zu offloads) in %s\n", tio_plan_policy(plan), hw->name,
           s->n_moves, s->n_offloads, tio_format_duration(s->planning_seconds, t, sizeof t));
    printf("planned peak %s of %s capacity; to SSD %s, to host %s per iteration\n",
           tio_format_bytes(s->planned_peak_bytes, a, sizeof a),
           tio_format_bytes(s->capacity_bytes, b, sizeof b),
           tio_format_bytes(s->bytes_to_ssd, c, sizeof c),
           tio_format_bytes(s->bytes_to_host, d, sizeof d));
    printf("host memory held at most %s, SSD space %s\n",
           tio_format_bytes(s->host_peak_bytes, a, sizeof a),
           tio_format_bytes(s->ssd_peak_bytes, e, sizeof e));
    if (out) {
        printf("wrote %s\n", out);
    }
}

/* An infeasible plan: where it falls short, as an error (--strict) or a warning. */
static void report_infeasible(const struct tio_trace *tr,
                              const struct tio_plan *plan,
                              const struct tio_plan_summary *s,
                              int strict) {
    char a[32];
    if (s->shortfall_bytes == 0) { /* the memory fits, by moves beyond the bandwidth */
        size_t nm = 0, stalls = 0;
        const struct tio_move *mv = tio_plan_moves(plan, &nm);
        for (size_t i = 0; i < nm; i++) {
            stalls += (mv[i].flags & TIO_MOVE_STALL) != 0;
        }
        cli_error(CMD,
                  "%s: infeasible: the memory fits only with %zu stall moves, planned beyond "
                  "the bandwidth; simulated, compute waits for them (--no-overcommit: plan "
                  "within the bandwidth)",
                  strict ? "error" : "warning", stalls);
        return;
    }
    const char *kname = tio_trace_kernel_name(tr, (uint32_t)s->shortfall_kernel);
    cli_error(CMD,
              "%s: infeasible: %llu bytes (%s) over capacity at kernel %llu (%s); "
              "simulated plan-only, that kernel runs out of memory (--demand-evict: it "
              "stalls for evictions instead)",
              strict ? "error" : "warning", (unsigned long long)s->shortfall_bytes,
              tio_format_bytes(s->shortfall_bytes, a, sizeof a),
              (unsigned long long)s->shortfall_kernel, kname ? kname : "unnamed");
}

/* --format: binary or json. */
static int parse_format(void *ctx, const char *opt, const char *text) {
    int32_t *format = ctx;
    if (strcmp(text, "binary") == 0) {
        *format = TIO_PLAN_FORMAT_BINARY;
    } else if (strcmp(text, "json") == 0) {
        *format = TIO_PLAN_FORMAT_JSON;
    } else {
        cli_error(CMD, "%s: '%s' is not binary or json", opt, text);
        return TIO_EXIT_USAGE;
    }
    return 0;
}

int cli_cmd_plan(int argc, char **argv) {
    const char *trace_path = NULL, *hw_name = "paper-2xh100nvl", *out = NULL;
    int json = 0, verify = 0, strict = 0, early = 1, clean = 1, overcommit = 1;
    int32_t format = TIO_PLAN_FORMAT_AUTO;
    struct tio_plan_params pp = tio_plan_params_default();
    uint64_t capacity = 0, reserve = UINT64_MAX, host_cap = UINT64_MAX, ssds = UINT64_MAX;
    int rc;
    const struct cli_opt opts[] = {
        { .name = "--hw", .kind = CLI_TEXT, .dst = &hw_name },
        { .name = "--policy", .kind = CLI_TEXT, .dst = &pp.policy },
        { .name = "--output", .alias = "-o", .kind = CLI_TEXT, .dst = &out },
        { .name = "--format", .kind = CLI_CALL, .call = parse_format },
        { .name = "--json", .kind = CLI_FLAG, .dst = &json, .value = 1 },
        { .name = "--verify", .kind = CLI_FLAG, .dst = &verify, .value = 1 },
        { .name = "--strict", .kind = CLI_FLAG, .dst = &strict, .value = 1 },
        { .name = "--no-early-prefetch", .kind = CLI_FLAG, .dst = &early, .value = 0 },
        { .name = "--no-clean-copies", .kind = CLI_FLAG, .dst = &clean, .value = 0 },
        { .name = "--no-overcommit", .kind = CLI_FLAG, .dst = &overcommit, .value = 0 },
        { .name = "--capacity", .kind = CLI_BYTES, .dst = &capacity, CLI_LIMITS_MEMORY },
        { .name = "--reserve", .kind = CLI_BYTES, .dst = &reserve, .max = CLI_MAX_MEMORY },
        { .name = "--host-cap", .kind = CLI_BYTES, .dst = &host_cap, .max = CLI_MAX_MEMORY },
        { .name = "--ssds", .kind = CLI_COUNT, .dst = &ssds, CLI_LIMITS_COUNT(0, 1024) },
        { .name = "--min-tensor",
          .kind = CLI_BYTES,
          .dst = &pp.min_tensor_bytes,
          .max = CLI_MAX_MEMORY },
        { .name = "--slack", .kind = CLI_NUMBER, .dst = &pp.memory_slack, .min = 0, .max = 0.5 },
        { .name = "--bandwidth-scale",
          .kind = CLI_NUMBER,
          .dst = &pp.bandwidth_scale,
          CLI_LIMITS_SCALE },
    };
    struct cli_spec spec = { CMD, opts, sizeof opts / sizeof opts[0], plan_usage, &trace_path,
                             1,   0,    "one trace per run" };
    if ((rc = cli_parse_args(&spec, argc, argv, 1, &format)) != 0) {
        return rc == CLI_HELP_SHOWN ? TIO_EXIT_OK : rc;
    }
    pp.early_prefetch = early;
    pp.clean_copies = clean;
    pp.overcommit = overcommit;
    if (!trace_path) {
        cli_error(CMD, "missing TRACE (see --help)");
        return TIO_EXIT_USAGE;
    }
    struct tio_hw hw;
    if ((rc = tio_hw_load(hw_name, &hw)) < 0) {
        return cli_fail(CMD, "--hw", rc);
    }
    if ((rc = override_hw(&hw, capacity, reserve, host_cap, ssds)) != 0) {
        return rc;
    }
    if ((rc = tio_hw_validate(&hw)) < 0) {
        return cli_fail(CMD, "hardware", rc);
    }
    struct tio_trace *tr = NULL;
    if ((rc = tio_trace_load(trace_path, TIO_TRACE_FORMAT_AUTO, &tr)) < 0) {
        return cli_fail(CMD, trace_path, rc);
    }
    struct tio_plan *plan = NULL;
    if ((rc = tio_plan_make(tr, &hw, &pp, &plan)) < 0) {
        tio_trace_free(tr);
        return cli_fail(CMD, "planning", rc);
    }
    int exit_code = TIO_EXIT_OK;
    if (verify && (rc = tio_plan_verify(plan, tr, &hw, &pp, NULL)) < 0) {
        struct tio_plan_summary vs;
        tio_plan_get_summary(plan, &vs);
        if (rc != TIO_EPLAN) {
            exit_code = cli_fail(CMD, "verify", rc);
        } else if (vs.feasible) { /* a feasible plan that fails the check is a planner bug */
            cli_error(CMD, "verify: a plan reported feasible fails the independent check: %s",
                      tio_last_error());
            exit_code = TIO_EXIT_RUNTIME;
        } else { /* not feasible, as the plan says: stall moves, or over the capacity */
            cli_error(CMD, "verify: the plan is not feasible: %s", tio_last_error());
            exit_code = TIO_EXIT_INPUT;
        }
        goto done;
    }
    if (out && (rc = tio_plan_save(plan, out, format)) < 0) {
        exit_code = cli_fail(CMD, out, rc);
        goto done;
    }
    struct tio_plan_summary s;
    tio_plan_get_summary(plan, &s);
    if (json) {
        print_json(plan, &s, &hw, trace_path, out, verify);
    } else {
        print_text(plan, &s, &hw, out);
    }
    if (!s.feasible && strcmp(tio_plan_policy(plan), "ideal") != 0) {
        report_infeasible(tr, plan, &s, strict);
        if (strict) {
            exit_code = TIO_EXIT_INPUT;
        }
    }
done:
    tio_plan_free(plan);
    tio_trace_free(tr);
    return exit_code;
}
