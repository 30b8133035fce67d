/* teraio simulate: replay a trace with a plan or a policy on a hardware model. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <teraio/sim.h>
#include <teraio/teraio.h>

#include "cli.h"
#include "cmd_sim_common.h"

static const char *const CMD = "simulate";

static void usage(FILE *f) {
    (void)fprintf(
        f,
        "usage: teraio simulate TRACE... --hw HW (--plan PLAN... | --policy P) [options]\n\n"
        "Replay one training iteration (after a warm-up one) on a hardware model: a compute\n"
        "stream that waits for tensors and memory, and SSD read/write and PCIe channels.\n"
        "Several traces are the stages of a pipeline, in stage order (`teraio model --rank R`,\n"
        "or the trace each stage's Offloader saved): simulated together, each on its own GPU,\n"
        "coupled by their send/receive kernels; the iteration is the coupled makespan.\n\n"
        "  TRACE                a trace file (.tio or .json); one per pipeline stage\n"
        "  --hw HW              hardware preset name or JSON file (teraio hw list)\n"
        "  --plan PLAN          a plan file from `teraio plan` (or Offloader.save_plan); with\n"
        "                       several traces, one --plan per trace, in the same order\n"
        "  --policy P           plan now with P, or simulate a built-in baseline: ideal, none,\n"
        "                       lru, zero-offload, zero-infinity (teraio, teraio-ssd,\n"
        "                       teraio-mixed, teraio-paper, g10 are planned first)\n"
        "  --json               print the results as JSON on stdout\n"
        "  --csv DIR            write kernels.csv and bandwidth.csv into DIR\n"
        "  --timeline FILE      write a Chrome/Perfetto trace-event JSON (ui.perfetto.dev)\n"
        "  --capacity BYTES     GPU capacity to simulate (default: the capacity the plan was\n"
        "                       made for with --plan, else memory - reserve of HW)\n"
        "  --min-tensor SIZE    with --policy: never move tensors smaller than SIZE (planner\n"
        "                       default 1MiB)\n"
        "  --ssd-scale X        multiply the SSD array bandwidth by X (default 1)\n"
        "  --warmup N           warm-up iterations before the measured one (default 1)\n"
        "  --iterations-per-day N   drive life at N iterations a day (default: continuous)\n"
        "  --demand-evict       when a plan leaves memory short, evict idle tensors on\n"
        "                       demand (LRU, a stall; counted in demand_evictions and\n"
        "                       demand_evicted_bytes). Default: plan-only, such a plan is OOM\n"
        "                       where it happens\n"
        "  --no-demand-evict    plan-only (the default)\n"
        "  -h, --help           this help\n\n"
        "JSON keys: iteration_s, ideal_s, fraction_of_ideal, stall_s, tokens_per_s, oom,\n"
        "gpu_peak_bytes, host_peak_bytes, ssd_bytes_written, ... (docs/simulator.md).\n"
        "Running out of memory is a result (\"oom\": true), not an error. A pipeline prints\n"
        "the coupled iteration_s, ideal_s, fraction_of_ideal, tokens_per_s, oom and \"stages\":\n"
        "each stage's keys plus stage_end_s and pipeline_wait_s (no --csv or --timeline).\n\n"
        "examples:\n"
        "  teraio simulate run.tio --hw paper-2xh100nvl --policy teraio-mixed\n"
        "  teraio simulate run.tio --hw my.json --plan run.plan --json --timeline run.trace.json\n"
        "  teraio simulate run.tio --hw paper-2xh100nvl --policy "
        "zero-infinity\n"
        "  teraio simulate r0.tio r1.tio --hw paper-2xh100nvl --policy teraio-mixed\n"
        "  teraio simulate s0.trace s1.trace --hw my.json --plan s0.plan --plan s1.plan --json\n"
        "\n" TIO_CLI_EXIT_HELP);
}

/*
 * The first lines of the human summary: where it ran out of memory (then the ideal time, and
 * 1 is returned), else the iteration against the ideal and the throughput (0). pipeline: the
 * result of coupled stages (the stage that ran out, the coupled makespan).
 */
static int print_outcome(const struct tio_sim_result *r, int pipeline) {
    char a[32], b[32], stage[32] = "";
    if (r->oom) {
        if (pipeline) {
            (void)snprintf(stage, sizeof stage, "stage %u, ", r->oom_stage);
        }
        (void)printf("OUT OF MEMORY     %s%s at kernel %llu (iteration %u): %s over\n", stage,
                     r->oom == TIO_SIM_OOM_HOST ? "host memory" : "GPU memory",
                     (unsigned long long)r->oom_kernel, r->oom_iteration,
                     tio_format_bytes(r->oom_bytes, a, sizeof a));
        (void)printf("ideal             %s\n", tio_format_duration(r->ideal_s, a, sizeof a));
        return 1;
    }
    (void)printf("iteration         %s%s (ideal %s, %.1f%% of ideal)\n",
                 tio_format_duration(r->iteration_s, a, sizeof a),
                 pipeline ? " coupled makespan" : "", tio_format_duration(r->ideal_s, b, sizeof b),
                 100.0 * r->fraction_of_ideal);
    if (r->tokens_per_s > 0) {
        (void)printf("throughput        %.1f tokens/s\n", r->tokens_per_s);
    }
    return 0;
}

static void print_human(const struct tio_sim *sim, const struct tio_hw *hw) {
    struct tio_sim_result r;
    tio_sim_get_result(sim, &r);
    char a[32], b[32], c[32], d[32];
    (void)printf("policy            %s on %s\n", tio_sim_policy(sim), hw->name);
    if (print_outcome(&r, 0)) {
        return;
    }
    (void)printf("stalls            %s (data %s, memory %s, host CPU %s)\n",
                 tio_format_duration(r.stall_s, a, sizeof a),
                 tio_format_duration(r.stall_data_s, b, sizeof b),
                 tio_format_duration(r.stall_memory_s, c, sizeof c),
                 tio_format_duration(r.cpu_s, d, sizeof d));
    (void)printf("I/O under compute %s of %s busy\n", tio_format_duration(r.overlap_s, a, sizeof a),
                 tio_format_duration(r.io_busy_s, b, sizeof b));
    for (int ch = 0; ch < TIO_SIM_CHANNEL_COUNT; ch++) {
        double avg = r.iteration_s > 0 ? (double)r.bytes[ch] / r.iteration_s : 0;
        (void)printf("  %-10s      %s moved, avg %s, peak %s\n", tio_sim_channel_name(ch),
                     tio_format_bytes(r.bytes[ch], a, sizeof a), tio_format_rate(avg, b, sizeof b),
                     tio_format_rate(r.peak_Bps[ch], c, sizeof c));
    }
    (void)printf("GPU memory peak   %s of %s\n", tio_format_bytes(r.gpu_peak_bytes, a, sizeof a),
                 tio_format_bytes(r.capacity_bytes, b, sizeof b));
    (void)printf("host memory peak  %s\n", tio_format_bytes(r.host_peak_bytes, a, sizeof a));
    (void)printf("SSD written       %s per iteration",
                 tio_format_bytes(r.ssd_bytes_written, a, sizeof a));
    if (r.drive_life_years > 0) {
        (void)printf(", drive life %.2f years (%u x %s TBW)", r.drive_life_years, hw->ssd_count,
                     tio_format_bytes((uint64_t)hw->ssd_tbw_bytes, b, sizeof b));
    }
    (void)printf(
        "\nmoves             %llu issued, %llu clean (no write: copy already stored), %llu "
        "no-ops, %llu late, %llu demand fetches, %llu demand evictions\n",
        (unsigned long long)r.n_moves_issued, (unsigned long long)r.n_moves_clean,
        (unsigned long long)r.n_moves_skipped, (unsigned long long)r.n_moves_late,
        (unsigned long long)r.n_demand_fetches, (unsigned long long)r.n_demand_evictions);
}

static int simulate_pipeline(const char *const *trace_paths,
                             size_t n,
                             const char *hw_name,
                             const char *const *plan_paths,
                             size_t n_plans,
                             const char *policy,
                             uint64_t min_tensor,
                             struct tio_sim_params *sp,
                             int json);

int cli_cmd_simulate(int argc, char **argv) {
    const char *trace_paths[CLI_MAX_STAGES], *plan_paths[CLI_MAX_STAGES];
    size_t n_traces = 0, n_plans = 0;
    const char *trace_path = NULL, *hw_name = NULL, *plan_path = NULL, *policy = NULL;
    const char *csv_dir = NULL, *timeline = NULL;
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
        } else if (strcmp(a, "--json") == 0) {
            json = 1;
            continue;
        } else if (strcmp(a, "--no-demand-evict") == 0) {
            sp.demand_evict = 0;
            continue;
        } else if (strcmp(a, "--demand-evict") == 0) {
            sp.demand_evict = 1;
            continue;
        } else if (a[0] == '-' && a[1] != '\0' && !val) {
            cli_error(CMD, "%s needs a value (see --help)", a);
            return TIO_EXIT_USAGE;
        } else if (strcmp(a, "--hw") == 0) {
            hw_name = val;
        } else if (strcmp(a, "--plan") == 0) {
            if (n_plans == CLI_MAX_STAGES) {
                cli_error(CMD, "at most %d --plan", CLI_MAX_STAGES);
                return TIO_EXIT_USAGE;
            }
            plan_paths[n_plans++] = val;
            plan_path = val;
        } else if (strcmp(a, "--policy") == 0) {
            policy = val;
        } else if (strcmp(a, "--csv") == 0) {
            csv_dir = val;
        } else if (strcmp(a, "--timeline") == 0) {
            timeline = val;
            sp.record_timeline = 1;
        } else if (strcmp(a, "--capacity") == 0) {
            rc = cli_parse_bytes_pos(CMD, a, val, &sp.capacity_bytes);
        } else if (strcmp(a, "--min-tensor") == 0) {
            rc = cli_parse_bytes_pos(CMD, a, val, &min_tensor);
        } else if (strcmp(a, "--ssd-scale") == 0) {
            rc = cli_parse_pos(CMD, a, val, &sp.ssd_bandwidth_scale);
        } else if (strcmp(a, "--warmup") == 0) {
            uint64_t w = 0;
            rc = cli_parse_u64(CMD, a, val, &w);
            if (rc == 0 && w > 16) {
                cli_error(CMD, "--warmup %llu: at most 16", (unsigned long long)w);
                rc = TIO_EXIT_USAGE;
            }
            sp.warmup_iterations = (uint32_t)w;
        } else if (strcmp(a, "--iterations-per-day") == 0) {
            rc = cli_parse_pos(CMD, a, val, &sp.iterations_per_day); /* omit: continuous */
        } else if (a[0] == '-') {
            cli_error(CMD, "unknown option '%s' (see --help)", a);
            return TIO_EXIT_USAGE;
        } else if (n_traces < CLI_MAX_STAGES) {
            trace_paths[n_traces++] = a;
            trace_path = trace_paths[0];
            continue;
        } else {
            cli_error(CMD, "unexpected argument '%s': at most %d traces (see --help)", a,
                      CLI_MAX_STAGES);
            return TIO_EXIT_USAGE;
        }
        if (rc) {
            return rc;
        }
        i++;
    }
    if (min_tensor && plan_path) {
        cli_error(CMD, "--min-tensor applies to --policy; a plan's sizes were fixed by `teraio "
                       "plan --min-tensor`");
        return TIO_EXIT_USAGE;
    }
    if (!trace_path || !hw_name || (!plan_path && !policy) || (plan_path && policy)) {
        cli_error(CMD, "need TRACE, --hw and exactly one of --plan or --policy (see --help)");
        return TIO_EXIT_USAGE;
    }
    if (n_plans && n_plans != n_traces) {
        cli_error(CMD, "%zu traces and %zu --plan: give one plan per trace, in the same order",
                  n_traces, n_plans);
        return TIO_EXIT_USAGE;
    }
    if (n_traces > 1) {
        if (csv_dir || timeline) {
            cli_error(CMD, "--csv and --timeline take one trace; simulate a pipeline's stages "
                           "without them");
            return TIO_EXIT_USAGE;
        }
        return simulate_pipeline(trace_paths, n_traces, hw_name, plan_paths, n_plans, policy,
                                 min_tensor, &sp, json);
    }
    struct tio_hw hw;
    int rc = tio_hw_load(hw_name, &hw);
    if (rc < 0) {
        return cli_fail(CMD, hw_name, rc);
    }
    struct tio_trace *tr = NULL;
    rc = tio_trace_load(trace_path, TIO_TRACE_FORMAT_AUTO, &tr);
    if (rc < 0) {
        return cli_fail(CMD, trace_path, rc);
    }
    struct tio_sim *sim = NULL;
    int code = TIO_EXIT_OK;
    if (plan_path) {
        struct tio_plan *plan = NULL;
        rc = tio_plan_load(plan_path, TIO_PLAN_FORMAT_AUTO, &plan);
        if (rc < 0) {
            code = cli_fail(CMD, plan_path, rc);
            goto out;
        }
        rc = tio_plan_check_trace(plan, tr);
        if (rc < 0) {
            tio_plan_free(plan);
            code = cli_fail(CMD, plan_path, rc);
            goto out;
        }
        if (sp.capacity_bytes == 0) { /* simulate the capacity the plan was made for */
            struct tio_plan_summary ps;
            tio_plan_get_summary(plan, &ps);
            sp.capacity_bytes = ps.capacity_bytes;
        }
        rc = tio_sim_run_plan(tr, &hw, plan, &sp, &sim);
        tio_plan_free(plan);
    } else {
        rc = cli_sim_policy(tr, &hw, policy, min_tensor, &sp, &sim);
    }
    if (rc < 0) {
        code = cli_fail(CMD, plan_path ? plan_path : policy, rc);
        goto out;
    }
    if (json) {
        rc = tio_sim_write_json(sim, stdout);
    } else {
        print_human(sim, &hw);
    }
    if (rc >= 0 && csv_dir) {
        rc = tio_sim_write_csv(sim, csv_dir);
    }
    if (rc >= 0 && timeline) {
        rc = tio_sim_write_timeline(sim, timeline);
    }
    if (rc < 0) {
        code = cli_fail(CMD, "writing results", rc);
    }
out:
    tio_sim_free(sim);
    tio_trace_free(tr);
    return code;
}

static void print_pipeline_human(struct tio_sim *const *sims, size_t n, const struct tio_hw *hw) {
    struct tio_sim_result r;
    tio_sim_get_result(sims[0], &r);
    char a[32], b[32], c[32], d[32];
    (void)printf("pipeline          %zu stages, %s on %s (each stage its own GPU)\n", n,
                 tio_sim_policy(sims[0]), hw->name);
    if (print_outcome(&r, 1)) {
        return;
    }
    for (size_t i = 0; i < n; i++) {
        tio_sim_get_result(sims[i], &r);
        (void)printf("stage %-3zu         ends at %s; stalls %s; waits for the other stages %s; "
                     "GPU peak %s\n",
                     i, tio_format_duration(r.stage_end_s, a, sizeof a),
                     tio_format_duration(r.stall_s, b, sizeof b),
                     tio_format_duration(r.pipeline_wait_s, c, sizeof c),
                     tio_format_bytes(r.gpu_peak_bytes, d, sizeof d));
    }
}

static int write_pipeline_json(struct tio_sim *const *sims, size_t n) {
    struct tio_sim_result r;
    tio_sim_get_result(sims[0], &r);
    (void)printf("{\n  \"pipeline_stages\": %zu,\n  \"policy\": \"%s\",\n", n,
                 tio_sim_policy(sims[0]));
    (void)printf("  \"iteration_s\": %.9g,\n  \"ideal_s\": %.9g,\n  \"fraction_of_ideal\": %.6f,\n",
                 r.iteration_s, r.ideal_s, r.fraction_of_ideal);
    (void)printf("  \"tokens_per_s\": %.6f,\n  \"oom\": %s,\n", r.tokens_per_s,
                 r.oom ? "true" : "false");
    if (r.oom) {
        (void)printf("  \"oom_stage\": %u,\n", r.oom_stage);
    } else {
        (void)printf("  \"oom_stage\": null,\n");
    }
    (void)printf("  \"stages\": [\n");
    for (size_t i = 0; i < n; i++) {
        int rc = tio_sim_write_json(sims[i], stdout);
        if (rc < 0) {
            return rc;
        }
        (void)printf("%s", i + 1 < n ? ",\n" : "");
    }
    (void)printf("  ]\n}\n");
    return ferror(stdout) ? tio_set_error(-EIO, "writing the JSON summary failed") : 0;
}

static int simulate_pipeline(const char *const *trace_paths,
                             size_t n,
                             const char *hw_name,
                             const char *const *plan_paths,
                             size_t n_plans,
                             const char *policy,
                             uint64_t min_tensor,
                             struct tio_sim_params *sp,
                             int json) {
    struct tio_hw hw;
    int rc = tio_hw_load(hw_name, &hw);
    if (rc < 0) {
        return cli_fail(CMD, hw_name, rc);
    }
    struct tio_trace *tr[CLI_MAX_STAGES] = { NULL };
    struct tio_plan *pl[CLI_MAX_STAGES] = { NULL };
    struct tio_sim *sims[CLI_MAX_STAGES] = { NULL };
    int code = TIO_EXIT_OK;
    for (size_t i = 0; i < n; i++) {
        rc = tio_trace_load(trace_paths[i], TIO_TRACE_FORMAT_AUTO, &tr[i]);
        if (rc < 0) {
            code = cli_fail(CMD, trace_paths[i], rc);
            goto out;
        }
        if (n_plans) {
            rc = tio_plan_load(plan_paths[i], TIO_PLAN_FORMAT_AUTO, &pl[i]);
            if (rc >= 0) {
                rc = tio_plan_check_trace(pl[i], tr[i]);
            }
            if (rc < 0) {
                code = cli_fail(CMD, plan_paths[i], rc);
                goto out;
            }
        }
    }
    rc = cli_sim_pipeline((const struct tio_trace *const *)tr, n, &hw,
                          n_plans ? (const struct tio_plan *const *)pl : NULL, policy, min_tensor,
                          sp, sims, NULL);
    if (rc < 0) {
        code = cli_fail(CMD, "pipeline", rc);
        goto out;
    }
    if (json) {
        rc = write_pipeline_json(sims, n);
        if (rc < 0) {
            code = cli_fail(CMD, "writing results", rc);
        }
    } else {
        print_pipeline_human(sims, n, &hw);
    }
out:
    for (size_t i = 0; i < n; i++) {
        tio_sim_free(sims[i]);
        tio_plan_free(pl[i]);
        tio_trace_free(tr[i]);
    }
    return code;
}
