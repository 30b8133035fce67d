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
        "                       demand as the runtime does (furthest next use first, a\n"
        "                       stall; counted in demand_evictions and demand_evicted_bytes).\n"
        "                       Default: plan-only, such a plan is OOM\n"
        "                       where it happens\n"
        "  --no-demand-evict    plan-only (the default)\n"
        "  -h, --help           this help\n\n"
        "Software costs come from HW (docs/hardware.md; 0 = none): kernel_launch_s (the\n"
        "training thread's time to launch a kernel, every policy but ideal), kernel_executor_s\n"
        "and move_issue_s (the offload runtime's time per kernel and per move, plans only),\n"
        "kernel_io_slowdown (kernels run 1 + x * u times longer, u the PCIe link's use).\n"
        "paper-2xh100nvl has measured ones; set them in a JSON file with \"base\" to vary\n"
        "them. Their stalls are stall_thread_s, the slowdown kernel_slowdown_s.\n\n"
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
    tio_sim_get_result(sim, &r, sizeof r);
    char a[32], b[32], c[32], d[32];
    (void)printf("policy            %s on %s\n", tio_sim_policy(sim), hw->name);
    if (print_outcome(&r, 0)) {
        return;
    }
    char e[32], g[32];
    (void)printf("stalls            %s (data %s, memory %s, host CPU %s, training thread %s)\n",
                 tio_format_duration(r.stall_s, a, sizeof a),
                 tio_format_duration(r.stall_data_s, b, sizeof b),
                 tio_format_duration(r.stall_memory_s, c, sizeof c),
                 tio_format_duration(r.cpu_s, d, sizeof d),
                 tio_format_duration(r.stall_thread_s, e, sizeof e));
    if (r.kernel_slowdown_s > 0) {
        (void)printf("kernels slowed    %s by transfers beside them\n",
                     tio_format_duration(r.kernel_slowdown_s, g, sizeof g));
    }
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
    if (r.n_host_full_offloads > 0) {
        (void)printf(
            "host tier full    %llu offloads to host memory went to the SSDs (or stayed)\n",
            (unsigned long long)r.n_host_full_offloads);
    }
}

static void print_pipeline_human(struct tio_sim *const *sims, size_t n, const struct tio_hw *hw) {
    struct tio_sim_result r;
    tio_sim_get_result(sims[0], &r, sizeof r);
    char a[32], b[32], c[32], d[32];
    (void)printf("pipeline          %zu stages, %s on %s (each stage its own GPU)\n", n,
                 tio_sim_policy(sims[0]), hw->name);
    if (print_outcome(&r, 1)) {
        return;
    }
    for (size_t i = 0; i < n; i++) {
        tio_sim_get_result(sims[i], &r, sizeof r);
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
    tio_sim_get_result(sims[0], &r, sizeof r);
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

/* The command line of `teraio simulate`. */
struct opts {
    const char *traces[CLI_MAX_STAGES], *plans[CLI_MAX_STAGES];
    size_t n_traces, n_plans;
    const char *hw, *policy, *csv_dir, *timeline;
    int json;
    uint64_t min_tensor;
    struct tio_sim_params sp;
};

/* --plan, once per trace. */
static int add_plan(void *ctx, const char *opt, const char *text) {
    struct opts *o = ctx;
    if (o->n_plans == CLI_MAX_STAGES) {
        cli_error(CMD, "at most %d %s", CLI_MAX_STAGES, opt);
        return TIO_EXIT_USAGE;
    }
    o->plans[o->n_plans++] = text;
    return 0;
}

/* Parse argv into o. Returns 0, an exit code, or -1 when --help was printed. */
static int parse_args(int argc, char **argv, struct opts *o) {
    uint64_t warmup = o->sp.warmup_iterations;
    int demand = o->sp.demand_evict;
    const struct cli_opt opts[] = {
        { .name = "--json", .kind = CLI_FLAG, .dst = &o->json, .value = 1 },
        { .name = "--demand-evict", .kind = CLI_FLAG, .dst = &demand, .value = 1 },
        { .name = "--no-demand-evict", .kind = CLI_FLAG, .dst = &demand, .value = 0 },
        { .name = "--hw", .kind = CLI_TEXT, .dst = &o->hw },
        { .name = "--plan", .kind = CLI_CALL, .call = add_plan },
        { .name = "--policy", .kind = CLI_TEXT, .dst = &o->policy },
        { .name = "--csv", .kind = CLI_TEXT, .dst = &o->csv_dir },
        { .name = "--timeline", .kind = CLI_TEXT, .dst = &o->timeline },
        { .name = "--capacity",
          .kind = CLI_BYTES,
          .dst = &o->sp.capacity_bytes,
          CLI_LIMITS_MEMORY },
        { .name = "--min-tensor", .kind = CLI_BYTES, .dst = &o->min_tensor, CLI_LIMITS_MEMORY },
        { .name = "--ssd-scale",
          .kind = CLI_NUMBER,
          .dst = &o->sp.ssd_bandwidth_scale,
          CLI_LIMITS_SCALE },
        { .name = "--warmup", .kind = CLI_COUNT, .dst = &warmup, CLI_LIMITS_COUNT(0, 16) },
        /* omitted: continuous training */
        { .name = "--iterations-per-day",
          .kind = CLI_NUMBER,
          .dst = &o->sp.iterations_per_day,
          .min = 0,
          .max = 1e9,
          .min_excl = 1 },
    };
    struct cli_spec spec = { CMD,
                             opts,
                             sizeof opts / sizeof opts[0],
                             usage,
                             o->traces,
                             CLI_MAX_STAGES,
                             0,
                             "at most " TIO_CLI_STR(CLI_MAX_STAGES) " traces" };
    int rc = cli_parse_args(&spec, argc, argv, 1, o);
    o->n_traces = spec.n_pos;
    o->sp.warmup_iterations = (uint32_t)warmup;
    o->sp.demand_evict = demand;
    if (o->timeline) {
        o->sp.record_timeline = 1;
    }
    return rc;
}

/* The combinations of options. Returns 0 or TIO_EXIT_USAGE. */
static int check_args(const struct opts *o) {
    if (o->min_tensor && o->n_plans) {
        cli_error(CMD, "--min-tensor applies to --policy; a plan's sizes were fixed by `teraio "
                       "plan --min-tensor`");
        return TIO_EXIT_USAGE;
    }
    if (!o->n_traces || !o->hw || (!o->n_plans && !o->policy) || (o->n_plans && o->policy)) {
        cli_error(CMD, "need TRACE, --hw and exactly one of --plan or --policy (see --help)");
        return TIO_EXIT_USAGE;
    }
    if (o->n_plans && o->n_plans != o->n_traces) {
        cli_error(CMD, "%zu traces and %zu --plan: give one plan per trace, in the same order",
                  o->n_traces, o->n_plans);
        return TIO_EXIT_USAGE;
    }
    if (o->n_traces > 1 && (o->csv_dir || o->timeline)) {
        cli_error(CMD, "--csv and --timeline take one trace; simulate a pipeline's stages "
                       "without them");
        return TIO_EXIT_USAGE;
    }
    return 0;
}

/* Simulate one trace with the plan file at `path`, against the capacity it was made for unless
 * sp->capacity_bytes says otherwise. Returns 0 or an exit code. */
static int simulate_plan_file(const struct tio_trace *tr,
                              const struct tio_hw *hw,
                              const char *path,
                              struct tio_sim_params *sp,
                              struct tio_sim **sim) {
    struct tio_plan *plan = NULL;
    int rc = tio_plan_load(path, TIO_PLAN_FORMAT_AUTO, &plan);
    if (rc >= 0) {
        rc = tio_plan_check_trace(plan, tr);
    }
    if (rc >= 0) {
        if (sp->capacity_bytes == 0) { /* simulate the capacity the plan was made for */
            struct tio_plan_summary ps;
            tio_plan_get_summary(plan, &ps);
            sp->capacity_bytes = ps.capacity_bytes;
        }
        rc = tio_sim_run_plan(tr, hw, plan, sp, sim);
    }
    tio_plan_free(plan);
    return rc < 0 ? cli_fail(CMD, path, rc) : 0;
}

/* Write the results of one trace: the summary (JSON or human) and the --csv / --timeline
 * files. Returns 0 or an exit code. */
static int write_results(const struct tio_sim *sim, const struct tio_hw *hw, const struct opts *o) {
    int rc = 0;
    if (o->json) {
        rc = tio_sim_write_json(sim, stdout);
    } else {
        print_human(sim, hw);
    }
    if (rc >= 0 && o->csv_dir) {
        rc = tio_sim_write_csv(sim, o->csv_dir);
    }
    if (rc >= 0 && o->timeline) {
        rc = tio_sim_write_timeline(sim, o->timeline);
    }
    return rc < 0 ? cli_fail(CMD, "writing results", rc) : 0;
}

static int simulate_pipeline(struct opts *o);

int cli_cmd_simulate(int argc, char **argv) {
    struct opts o;
    memset(&o, 0, sizeof o);
    o.sp = tio_sim_params_default();
    int code = parse_args(argc, argv, &o);
    if (code) {
        return code < 0 ? TIO_EXIT_OK : code;
    }
    if ((code = check_args(&o)) != 0) {
        return code;
    }
    if (o.n_traces > 1) {
        return simulate_pipeline(&o);
    }
    struct tio_hw hw;
    int rc = tio_hw_load(o.hw, &hw);
    if (rc < 0) {
        return cli_fail(CMD, o.hw, rc);
    }
    struct tio_trace *tr = NULL;
    rc = tio_trace_load(o.traces[0], TIO_TRACE_FORMAT_AUTO, &tr);
    if (rc < 0) {
        return cli_fail(CMD, o.traces[0], rc);
    }
    struct tio_sim *sim = NULL;
    if (o.n_plans) {
        code = simulate_plan_file(tr, &hw, o.plans[0], &o.sp, &sim);
    } else {
        const struct cli_sim_job job = {
            .hw = &hw, .policy = o.policy, .min_tensor_bytes = o.min_tensor, .sp = &o.sp
        };
        rc = cli_sim_policy(tr, &job, &sim, NULL);
        code = rc < 0 ? cli_fail(CMD, o.policy, rc) : 0;
    }
    if (code == 0) {
        code = write_results(sim, &hw, &o);
    }
    tio_sim_free(sim);
    tio_trace_free(tr);
    return code;
}

static int simulate_pipeline(struct opts *o) {
    size_t n = o->n_traces;
    struct tio_hw hw;
    int rc = tio_hw_load(o->hw, &hw);
    if (rc < 0) {
        return cli_fail(CMD, o->hw, rc);
    }
    struct tio_trace *tr[CLI_MAX_STAGES] = { NULL };
    struct tio_plan *pl[CLI_MAX_STAGES] = { NULL };
    struct tio_sim *sims[CLI_MAX_STAGES] = { NULL };
    int code = TIO_EXIT_OK;
    for (size_t i = 0; i < n; i++) {
        rc = tio_trace_load(o->traces[i], TIO_TRACE_FORMAT_AUTO, &tr[i]);
        if (rc < 0) {
            code = cli_fail(CMD, o->traces[i], rc);
            goto out;
        }
        if (o->n_plans) {
            rc = tio_plan_load(o->plans[i], TIO_PLAN_FORMAT_AUTO, &pl[i]);
            if (rc >= 0) {
                rc = tio_plan_check_trace(pl[i], tr[i]);
            }
            if (rc < 0) {
                code = cli_fail(CMD, o->plans[i], rc);
                goto out;
            }
        }
    }
    const struct cli_sim_job job = {
        .hw = &hw, .policy = o->policy, .min_tensor_bytes = o->min_tensor, .sp = &o->sp
    };
    rc = cli_sim_pipeline((const struct tio_trace *const *)tr, n,
                          o->n_plans ? (const struct tio_plan *const *)pl : NULL, &job, sims, NULL);
    if (rc < 0) {
        code = cli_fail(CMD, "pipeline", rc);
        goto out;
    }
    if (o->json) {
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
