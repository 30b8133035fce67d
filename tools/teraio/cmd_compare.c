/* teraio compare --paper: the paper's evaluation matrix (paper §4.1) in simulation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <teraio/model.h>
#include <teraio/sim.h>
#include <teraio/teraio.h>

#include "cli.h"
#include "cmd_sim_common.h"

static const char *const CMD = "compare";

/* The matrix of Figure 7 (paper §4.1); the point shared by both sweeps appears once. */
struct cfg {
    const char *model;
    uint32_t batch, seq;
};
static const struct cfg paper_matrix[] = {
    { "llama3-8b", 32, 2048 },       { "llama3-8b", 64, 2048 },
    { "llama3-8b", 128, 2048 },      { "llama3-8b", 64, 1024 },
    { "llama3-8b", 64, 4096 },       { "granite-code-8b", 32, 4096 },
    { "granite-code-8b", 64, 4096 }, { "granite-code-8b", 128, 4096 },
    { "granite-code-8b", 64, 2048 }, { "granite-code-8b", 64, 8192 },
    { "llama3-70b", 8, 2048 },       { "llama3-70b", 16, 2048 },
    { "llama3-70b", 32, 2048 },      { "llama3-70b", 16, 3072 },
    { "llama3-70b", 16, 4096 },
};
#define N_CFG                TIO_CLI_ARRAY_LEN(paper_matrix)
#define TIO_CLI_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static const char *const all_systems[] = { "ideal",      "zero-offload", "zero-infinity",
                                           "teraio-ssd", "teraio-mixed", "teraio-paper",
                                           "g10" };
#define MAX_SYS 16

/* The paper's measured fractions of ideal (paper §4.2); NAN where not given. */
struct paper_num {
    const char *system, *model;
    double fraction;
    const char *what;
};
static const struct paper_num paper_nums[] = {
    { "zero-offload", "llama3-8b", 0.659, "ZeRO-Offload, Llama3-8B" },
    { "zero-offload", "granite-code-8b", 0.655, "ZeRO-Offload, Granite-8B" },
    { "zero-infinity", "llama3-70b", 0.430, "ZeRO-Infinity, Llama3-70B" },
    { "teraio-mixed", "llama3-70b", 0.597, "TeraIO-Mixed, Llama3-70B" },
    { "teraio-paper", "llama3-70b", 0.597, "TeraIO-Mixed (Algorithm 1), Llama3-70B" },
    { "teraio-mixed", NULL, 0.807, "TeraIO, all models run" },
    { "teraio-paper", NULL, 0.807, "TeraIO (Algorithm 1), all models run" },
};

/* A DeepSpeed ZeRO system (the simulator's model of it, not a plan of moves). */
static int is_zero(const char *sys) {
    int32_t exec = tio_plan_exec_parse(sys);
    return exec == TIO_PLAN_EXEC_ZERO_OFFLOAD || exec == TIO_PLAN_EXEC_ZERO_INFINITY;
}

/* Table 3: which server each system needs, and whether it uses the SSDs. */
static void
system_price(const char *sys, const struct tio_hw *hw1t, const struct tio_hw *hw128, double *usd) {
    if (strcmp(sys, "teraio-ssd") == 0) {
        *usd = hw128->server_price_usd + hw128->ssd_price_usd;
    } else if (strcmp(sys, "zero-offload") == 0) {
        *usd = hw1t->server_price_usd;
    } else if (strcmp(sys, "ideal") == 0) {
        *usd = 0; /* needs more GPUs than the server has: not priced here */
    } else {
        *usd = hw1t->server_price_usd + hw1t->ssd_price_usd;
    }
}

struct row {
    const struct cfg *c;
    const char *sys;
    double tokens_per_s, fraction, iteration_s;
    int oom;
    const char *oom_kind;
    uint32_t micro_batch;
    int plan_feasible;             /* the plan's verdict (1 for the simulator's baselines) */
    uint64_t host_cap_bytes;       /* per-GPU host memory the system may offload to */
    double fraction_demand_evict;  /* --demand-evict: with on-demand eviction (-1: not run) */
    uint64_t demand_evicted_bytes; /* ... bytes it evicted beyond the plan */
    uint32_t stages;               /* pipeline stages simulated together (1: one GPU's trace) */
    uint64_t moves_late;           /* late moves in the replay, summed over the stages */
};

/* The preset's pipeline stages (1 without pipeline parallelism). */
static uint32_t preset_stages(const char *model) {
    struct tio_model_params mp;
    if (tio_model_preset(model, &mp) < 0 || mp.pp < 1 || mp.dp != 1 || mp.tp != 1) {
        return 1;
    }
    return mp.pp > CLI_MAX_STAGES ? 1 : mp.pp;
}

/* Simulate `sys` on the stages (n = 1: one trace alone, else coupled); fills res (stage 0's
 * result, which carries the coupled makespan), *feasible and *late (the stages' late moves;
 * either may be NULL). */
static int sim_stages(struct tio_trace *const *tr,
                      uint32_t n,
                      const struct tio_hw *hw,
                      const char *sys,
                      const struct tio_sim_params *sp,
                      double slack,
                      struct tio_sim_result *res,
                      int *feasible,
                      uint64_t *late) {
    struct tio_sim *sims[CLI_MAX_STAGES] = { NULL };
    const struct cli_sim_job job = { .hw = hw,
                                     .policy = sys,
                                     .min_tensor_bytes = 0,
                                     .sp = sp,
                                     .slack = slack,
                                     .slack_set = slack >= 0 };
    int rc = n == 1 ? cli_sim_policy(tr[0], &job, &sims[0], feasible)
                    : cli_sim_pipeline((const struct tio_trace *const *)tr, n, NULL, &job, sims,
                                       feasible);
    if (rc < 0) {
        return rc;
    }
    for (uint32_t i = 0; late && i < n; i++) {
        struct tio_sim_result ri;
        tio_sim_get_result(sims[i], &ri, sizeof ri);
        *late = (i ? *late : 0) + ri.n_moves_late;
    }
    tio_sim_get_result(sims[0], res, sizeof *res);
    for (uint32_t i = 0; i < n; i++) {
        tio_sim_free(sims[i]);
    }
    return 0;
}

/*
 * Host memory each system may use per GPU: the same for every system, so that the comparison
 * is even: --host-per-gpu, or by default the GPU's share of the server's host memory
 * (host_memory_bytes / gpus: 500 GB on the paper's 1 TB, 2-GPU server). The planned systems
 * get it as their offload cap; the ZeRO models size their host memory against
 * host_memory_bytes / gpus, which is set to match. TeraIO-SSD and TeraIO-paper-SSD offload to
 * the SSDs only (TeraIO-SSD on the 128 GB server of Table 3): none.
 */
static uint64_t host_budget(const char *sys, const struct tio_hw *hw, uint64_t per_gpu) {
    if (strcmp(sys, "teraio-ssd") == 0 || strcmp(sys, "teraio-paper-ssd") == 0) {
        return 0;
    }
    uint32_t gpus = hw->gpus ? hw->gpus : 1;
    return per_gpu ? per_gpu : hw->host_memory_bytes / gpus;
}

static void usage(FILE *f) {
    (void)fprintf(
        f,
        "usage: teraio compare --paper [--json] [--systems LIST] [--models LIST] [--hw HW]\n"
        "                      [--host-per-gpu BYTES] [--slack F] [--demand-evict]\n\n"
        "Run the TeraIO paper's evaluation matrix in simulation (sec. 4.1): Llama3-8B bs32/64/128\n"
        "@2048 and bs64 @1024/2048/4096; Granite-8B bs32/64/128 @4096 and bs64 @2048/4096/8192;\n"
        "Llama3-70B bs8/16/32 @2048 and bs16 @2048/3072/4096, each trace from `teraio model`:\n"
        "both stages of the 2-stage pipeline, simulated together (the iteration is their coupled\n"
        "makespan). Every system on the same traces and simulator.\n"
        "The ZeRO baselines get the largest micro-batch (halving from the preset's) that fits\n"
        "GPU memory, as the paper tuned them per run.\n\n"
        "  --paper              the paper's matrix (required)\n"
        "  --systems LIST       comma-separated (default: ideal,zero-offload,zero-infinity,\n"
        "                       teraio-ssd,teraio-mixed,teraio-paper,g10)\n"
        "  --models LIST        restrict to these models (llama3-8b,granite-code-8b,llama3-70b)\n"
        "  --hw HW              the server (default paper-2xh100nvl; teraio-ssd uses\n"
        "                       paper-2xh100nvl-128g, the cheaper server of Table 3, and no\n"
        "                       host memory)\n"
        "  --slack F            the plans' memory slack (default: the planner's, 0.02)\n"
        "  --host-per-gpu BYTES host memory every system may use per GPU, the same for all\n"
        "                       (default: the server's host memory / its GPUs, 500 GB on\n"
        "                       paper-2xh100nvl); teraio-ssd uses none\n"
        "  --demand-evict       also simulate each plan with on-demand eviction where it falls\n"
        "                       short, as its own column (default: plan-only; an infeasible\n"
        "                       plan is reported as such)\n"
        "  --json               {\"rows\": [{model, batch, seq, system, tokens_per_s,\n"
        "                       fraction_of_ideal, oom, ...}], \"summary\": {system:\n"
        "                       {mean_fraction_of_ideal_all_runs (an OOM counts 0),\n"
        "                       mean_fraction_of_ideal (runs that fit), ...}},\n"
        "                       \"per_model\": ..., \"paper\": ...}\n"
        "ZeRO model knobs (calibrated defaults, docs/baselines.md):\n"
        "  --zero-offload-fetch RATE (host->GPU fetch rate, both ZeRO systems)\n"
        "  --zero-fetch-overhead SECONDS (per parameter tensor fetched, both)\n"
        "  --zero-infinity-fetch RATE (cap on ZeRO-Infinity's NVMe reads; default none)\n"
        "  --cpu-adam PARAMS_PER_CORE_S  --zero-prefetch LAYERS\n"
        "  -h, --help           this help\n\n"
        "examples:\n"
        "  teraio compare --paper\n"
        "  teraio compare --paper --models llama3-8b --systems "
        "ideal,zero-offload,teraio-mixed\n\n" TIO_CLI_EXIT_HELP);
}

static int has(const char *const *list, size_t n, const char *s) {
    for (size_t i = 0; i < n; i++) {
        if (strcmp(list[i], s) == 0) {
            return 1;
        }
    }
    return 0;
}

/* The trace of one configuration: stage `rank` of the preset's layout (TeraIO: 2-stage 1F1B),
 * or tensor parallelism over the server's GPUs for the ZeRO baselines (paper §4: "ZeRO
 * baselines used tensor parallelism"; rank 0). */
static int gen(const struct cfg *c,
               uint32_t micro_batch,
               uint32_t tp,
               uint32_t rank,
               struct tio_trace **tr,
               uint32_t *mb_out) {
    struct tio_model_params mp;
    int rc = tio_model_preset(c->model, &mp);
    if (rc < 0) {
        return rc;
    }
    if (tp > 1) {
        mp.tp = tp;
        mp.pp = 1;
        mp.dp = 1;
    }
    mp.global_batch = c->batch;
    mp.seq_len = c->seq;
    mp.rank = rank;
    mp.grad_accum = 0;
    if (micro_batch) {
        mp.micro_batch = micro_batch;
    }
    if (mp.micro_batch * mp.dp > mp.global_batch) {
        mp.micro_batch = mp.global_batch / mp.dp;
    }
    *mb_out = mp.micro_batch;
    return tio_model_generate(&mp, tr, NULL);
}

/* The parsed command line. */
struct opts {
    int json, paper, demand_col;
    uint64_t host_per_gpu; /* --host-per-gpu, 0: host_memory_bytes / gpus */
    double slack;          /* --slack, < 0: the planner's default */
    const char *systems[MAX_SYS], *models[MAX_SYS];
    size_t n_sys, n_models;
    char sbuf[512], mbuf[512];
    const char *hw_name;
    struct tio_sim_params sp;
};

/* Parse argv into *o. Returns -1 to go on, or the exit code to end with (0 after --help). */
static int parse_args(int argc, char **argv, struct opts *o) {
    o->n_sys = TIO_CLI_ARRAY_LEN(all_systems);
    o->hw_name = "paper-2xh100nvl";
    o->sp = tio_sim_params_default();
    o->slack = -1;
    for (size_t i = 0; i < o->n_sys; i++) {
        o->systems[i] = all_systems[i];
    }
    struct cli_list sys = { o->systems, MAX_SYS, o->n_sys, o->sbuf, sizeof o->sbuf };
    struct cli_list models = { o->models, MAX_SYS, 0, o->mbuf, sizeof o->mbuf };
    uint64_t prefetch = o->sp.zero_prefetch_layers;
    struct tio_sim_params *sp = &o->sp;
    const struct cli_opt opts[] = {
        { .name = "--json", .kind = CLI_FLAG, .dst = &o->json, .value = 1 },
        { .name = "--paper", .kind = CLI_FLAG, .dst = &o->paper, .value = 1 },
        { .name = "--demand-evict", .kind = CLI_FLAG, .dst = &o->demand_col, .value = 1 },
        { .name = "--systems", .kind = CLI_LIST, .dst = &sys },
        { .name = "--models", .kind = CLI_LIST, .dst = &models },
        { .name = "--hw", .kind = CLI_TEXT, .dst = &o->hw_name },
        { .name = "--zero-offload-fetch",
          .kind = CLI_RATE,
          .dst = &sp->zero_offload_fetch_Bps,
          CLI_LIMITS_RATE },
        { .name = "--zero-infinity-fetch",
          .kind = CLI_RATE,
          .dst = &sp->zero_infinity_fetch_Bps,
          CLI_LIMITS_RATE },
        { .name = "--zero-fetch-overhead",
          .kind = CLI_DURATION,
          .dst = &sp->zero_fetch_overhead_s,
          .min = 0,
          .max = 60 },
        { .name = "--cpu-adam",
          .kind = CLI_NUMBER,
          .dst = &sp->cpu_adam_params_per_core_s,
          .min = 0,
          .max = 1e15,
          .min_excl = 1 },
        { .name = "--slack", .kind = CLI_NUMBER, .dst = &o->slack, .min = 0, .max = 0.5 },
        { .name = "--host-per-gpu", .kind = CLI_BYTES, .dst = &o->host_per_gpu, CLI_LIMITS_MEMORY },
        { .name = "--zero-prefetch", .kind = CLI_COUNT, .dst = &prefetch, CLI_LIMITS_COUNT(0, 64) },
    };
    struct cli_spec spec = { CMD, opts,          sizeof opts / sizeof opts[0], usage, NULL, 0,
                             0,   "options only" };
    int rc = cli_parse_args(&spec, argc, argv, 1, NULL);
    o->n_sys = sys.n;
    o->n_models = models.n;
    sp->zero_prefetch_layers = (uint32_t)prefetch;
    return rc == CLI_HELP_SHOWN ? TIO_EXIT_OK : rc ? rc : -1;
}

/* --paper given, every model in the matrix, every system known. Returns 0 or an exit code. */
static int check_args(const struct opts *o) {
    if (!o->paper) {
        cli_error(CMD, "only the paper's matrix is available: pass --paper (see --help)");
        return TIO_EXIT_USAGE;
    }
    for (size_t i = 0; i < o->n_models; i++) {
        int known = 0;
        for (size_t k = 0; k < N_CFG; k++) {
            known |= strcmp(paper_matrix[k].model, o->models[i]) == 0;
        }
        if (!known) {
            cli_error(CMD,
                      "--models: '%s' is not in the paper's matrix (llama3-8b, "
                      "granite-code-8b, llama3-70b)",
                      o->models[i]);
            return TIO_EXIT_USAGE;
        }
    }
    for (size_t i = 0; i < o->n_sys; i++) {
        if (!has(all_systems, TIO_CLI_ARRAY_LEN(all_systems), o->systems[i]) &&
            strcmp(o->systems[i], "lru") != 0 && strcmp(o->systems[i], "none") != 0 &&
            strcmp(o->systems[i], "teraio") != 0) {
            cli_error(CMD, "--systems: unknown system '%s'", o->systems[i]);
            return TIO_EXIT_USAGE;
        }
    }
    return 0;
}

/* Simulate `sys` on configuration r->c into *r: the ZeRO baselines on their own
 * tensor-parallel trace, retried with half the micro-batch while the GPU runs out of memory;
 * the other systems on the n_st stage traces trs (at micro-batch mb0), coupled when n_st > 1.
 * Returns 0 or an exit code. */
static int simulate_system(const struct opts *o,
                           struct tio_trace *const *trs,
                           uint32_t n_st,
                           uint32_t mb0,
                           double ideal_s,
                           const struct tio_hw *hw,
                           struct row *r) {
    const char *sys = r->sys;
    int zero = is_zero(sys);
    struct tio_trace *ztr = NULL;
    uint32_t mb = mb0;
    int rc;
    if (zero) {
        rc = gen(r->c, mb0, hw->gpus > 1 ? hw->gpus : 2, 0, &ztr, &mb);
        if (rc < 0) {
            return cli_fail(CMD, r->c->model, rc);
        }
    } else {
        r->stages = n_st;
    }
    for (;;) {
        struct tio_sim_result res;
        rc = zero ? sim_stages(&ztr, 1, hw, sys, &o->sp, o->slack, &res, &r->plan_feasible,
                               &r->moves_late)
                  : sim_stages(trs, n_st, hw, sys, &o->sp, o->slack, &res, &r->plan_feasible,
                               &r->moves_late);
        if (rc < 0) {
            tio_trace_free(ztr);
            return cli_fail(CMD, sys, rc);
        }
        r->micro_batch = mb;
        r->oom = res.oom != 0;
        r->oom_kind = res.oom == TIO_SIM_OOM_HOST ? "host" : res.oom ? "gpu" : "none";
        r->iteration_s = res.iteration_s;
        r->tokens_per_s = res.tokens_per_s;
        r->fraction = res.oom ? 0 : ideal_s / res.iteration_s;
        /* ZeRO: retry with half the micro-batch while the GPU runs out of memory */
        if (!(zero && res.oom == TIO_SIM_OOM_GPU && mb > 1)) {
            break;
        }
        tio_trace_free(ztr);
        ztr = NULL;
        rc = gen(r->c, mb / 2, hw->gpus > 1 ? hw->gpus : 2, 0, &ztr, &mb);
        if (rc < 0) {
            return cli_fail(CMD, r->c->model, rc);
        }
    }
    tio_trace_free(ztr);
    return 0;
}

/* --demand-evict: the same plan with on-demand eviction where it falls short, its own column.
 * Returns 0 or an exit code. */
static int simulate_demand_evict(const struct opts *o,
                                 struct tio_trace *const *trs,
                                 uint32_t n_st,
                                 double ideal_s,
                                 const struct tio_hw *hw,
                                 struct row *r) {
    struct tio_sim_params sd = o->sp;
    sd.demand_evict = 1;
    struct tio_sim_result res;
    int rc = sim_stages(trs, n_st, hw, r->sys, &sd, o->slack, &res, NULL, NULL);
    if (rc < 0) {
        return cli_fail(CMD, r->sys, rc);
    }
    r->fraction_demand_evict = res.oom ? 0 : ideal_s / res.iteration_s;
    /* bytes evicted: the stage's own (stage 0: the pipeline's first GPU) */
    r->demand_evicted_bytes = res.demand_evicted_bytes;
    return 0;
}

/* Every selected system on configuration c: one row each, appended at rows[*n_rows].
 * Returns 0 or an exit code. */
static int run_config(const struct opts *o,
                      const struct cfg *c,
                      const struct tio_hw *hw1t,
                      const struct tio_hw *hw128,
                      struct row *rows,
                      size_t *n_rows) {
    /* every pipeline stage's trace: the planned systems run them coupled */
    struct tio_trace *trs[CLI_MAX_STAGES] = { NULL };
    uint32_t n_st = preset_stages(c->model), mb0 = 0;
    int code = 0;
    for (uint32_t st = 0; st < n_st && code == 0; st++) {
        int rc = gen(c, 0, 1, st, &trs[st], &mb0);
        if (rc < 0) {
            code = cli_fail(CMD, c->model, rc);
        }
    }
    /* the ideal: the coupled makespan with unlimited memory (a stage's kernels alone) */
    double ideal_s = code ? 0 : (double)tio_trace_total_duration_ns(trs[0]) * 1e-9;
    if (code == 0 && n_st > 1) {
        struct tio_sim_result ir;
        int rc = sim_stages(trs, n_st, hw1t, "ideal", &o->sp, o->slack, &ir, NULL, NULL);
        if (rc < 0) {
            code = cli_fail(CMD, c->model, rc);
        } else {
            ideal_s = ir.ideal_s;
        }
    }
    for (size_t si = 0; si < o->n_sys && code == 0; si++) {
        const char *sys = o->systems[si];
        struct row *r = &rows[(*n_rows)++];
        r->c = c;
        r->sys = sys;
        r->micro_batch = mb0;
        r->stages = 1;
        struct tio_hw hwc = strcmp(sys, "teraio-ssd") == 0 ? *hw128 : *hw1t;
        uint64_t budget = host_budget(sys, &hwc, o->host_per_gpu);
        if (is_zero(sys)) {
            uint32_t gpus = hwc.gpus ? hwc.gpus : 1;
            hwc.host_memory_bytes = budget * gpus;
            if (hwc.host_offload_cap_bytes > hwc.host_memory_bytes) {
                hwc.host_offload_cap_bytes = hwc.host_memory_bytes;
            }
        } else {
            hwc.host_offload_cap_bytes =
                budget < hwc.host_memory_bytes ? budget : hwc.host_memory_bytes;
        }
        r->host_cap_bytes = budget;
        r->fraction_demand_evict = -1;
        if (cli_stderr_is_tty()) {
            (void)fprintf(stderr, "\r%-16s bs%-4u seq%-5u %-14s", c->model, c->batch, c->seq, sys);
        }
        code = simulate_system(o, trs, n_st, mb0, ideal_s, &hwc, r);
        if (code == 0 && o->demand_col && !tio_sim_policy_is_builtin(sys)) {
            code = simulate_demand_evict(o, trs, n_st, ideal_s, &hwc, r);
        }
    }
    for (uint32_t j = 0; j < n_st; j++) {
        tio_trace_free(trs[j]);
    }
    return code;
}

/* The means over the matrix, per system and per model. */
static const char *const model_names[] = { "llama3-8b", "granite-code-8b", "llama3-70b" };
struct summary {
    double mean_frac[MAX_SYS], mean_speed[MAX_SYS], mean_tok[MAX_SYS];
    double mean_frac_all[MAX_SYS]; /* over every run, an OOM counted as 0 */
    int n_ok[MAX_SYS], n_sp[MAX_SYS], n_oom[MAX_SYS];
    double pm[3][MAX_SYS]; /* per model: sum of fractions of ideal over runs without OOM */
    int pn[3][MAX_SYS];    /* ... and their count */
};

static void summarize(const struct row *rows, size_t n_rows, size_t n_sys, struct summary *m) {
    memset(m, 0, sizeof *m);
    for (size_t i = 0; i < n_rows; i += n_sys) {
        double best_zero = 0;
        for (size_t s = 0; s < n_sys; s++) {
            const struct row *r = &rows[i + s];
            if (is_zero(r->sys) && !r->oom && r->tokens_per_s > best_zero) {
                best_zero = r->tokens_per_s;
            }
        }
        for (size_t s = 0; s < n_sys; s++) {
            const struct row *r = &rows[i + s];
            if (r->oom) {
                m->n_oom[s]++;
                continue;
            }
            m->mean_frac[s] += r->fraction;
            m->mean_tok[s] += r->tokens_per_s;
            m->n_ok[s]++;
            if (best_zero > 0) {
                m->mean_speed[s] += r->tokens_per_s / best_zero;
                m->n_sp[s]++;
            }
        }
    }
    for (size_t s = 0; s < n_sys; s++) {
        int all = m->n_ok[s] + m->n_oom[s];
        m->mean_frac_all[s] = all ? m->mean_frac[s] / all : 0;
        m->mean_frac[s] = m->n_ok[s] ? m->mean_frac[s] / m->n_ok[s] : 0;
        m->mean_tok[s] = m->n_ok[s] ? m->mean_tok[s] / m->n_ok[s] : 0;
        m->mean_speed[s] = m->n_sp[s] ? m->mean_speed[s] / m->n_sp[s] : 0;
    }
    /* per model means (for the paper's per-model numbers) */
    for (size_t i = 0; i < n_rows; i++) {
        const struct row *r = &rows[i];
        for (int k = 0; k < 3; k++) {
            if (strcmp(r->c->model, model_names[k]) == 0 && !r->oom) {
                m->pm[k][i % n_sys] += r->fraction;
                m->pn[k][i % n_sys]++;
            }
        }
    }
}

static void print_json(const struct opts *o,
                       const struct row *rows,
                       size_t n_rows,
                       const struct summary *m,
                       const struct tio_hw *hw1t,
                       const struct tio_hw *hw128) {
    size_t n_sys = o->n_sys;
    (void)printf("{\n\"hw\": ");
    cli_json_string(stdout, hw1t->name);
    (void)printf(",\n\"rows\": [\n");
    for (size_t i = 0; i < n_rows; i++) {
        const struct row *r = &rows[i];
        (void)printf(
            "  {\"model\": \"%s\", \"batch\": %u, \"seq\": %u, \"system\": \"%s\", "
            "\"tokens_per_s\": %.4f, \"fraction_of_ideal\": %.6f, \"iteration_s\": %.6f, "
            "\"oom\": %s, \"oom_kind\": \"%s\", \"micro_batch\": %u, \"plan_feasible\": %s, "
            "\"host_cap_bytes\": %llu, \"stages\": %u, \"moves_late\": %llu",
            r->c->model, r->c->batch, r->c->seq, r->sys, r->tokens_per_s, r->fraction,
            r->iteration_s, r->oom ? "true" : "false", r->oom_kind, r->micro_batch,
            r->plan_feasible ? "true" : "false", (unsigned long long)r->host_cap_bytes, r->stages,
            (unsigned long long)r->moves_late);
        if (r->fraction_demand_evict >= 0) {
            (void)printf(", \"fraction_demand_evict\": %.6f, \"demand_evicted_bytes\": %llu",
                         r->fraction_demand_evict, (unsigned long long)r->demand_evicted_bytes);
        }
        (void)printf("}%s\n", i + 1 < n_rows ? "," : "");
    }
    (void)printf("],\n\"summary\": {\n");
    for (size_t s = 0; s < n_sys; s++) {
        double usd = 0;
        system_price(o->systems[s], hw1t, hw128, &usd);
        (void)printf("  \"%s\": {\"mean_fraction_of_ideal_all_runs\": %.6f, ", o->systems[s],
                     m->mean_frac_all[s]);
        (void)printf("\"mean_fraction_of_ideal\": %.6f, \"mean_speedup_vs_best_zero\": "
                     "%.6f, \"mean_tokens_per_s\": %.4f, \"runs\": %d, \"oom\": %d, \"price_usd\": "
                     "%.1f, \"tokens_per_s_per_kusd\": %.6f}%s\n",
                     m->mean_frac[s], m->mean_speed[s], m->mean_tok[s], m->n_ok[s], m->n_oom[s],
                     usd, usd > 0 ? m->mean_tok[s] / (usd / 1000.0) : 0.0,
                     s + 1 < n_sys ? "," : "");
    }
    (void)printf("},\n\"per_model\": {\n");
    for (int k = 0; k < 3; k++) {
        (void)printf("  \"%s\": {", model_names[k]);
        for (size_t s = 0; s < n_sys; s++) {
            (void)printf("%s\"%s\": %.6f", s ? ", " : "", o->systems[s],
                         m->pn[k][s] ? m->pm[k][s] / m->pn[k][s] : 0.0);
        }
        (void)printf("}%s\n", k < 2 ? "," : "");
    }
    (void)printf("},\n\"paper\": [\n");
    for (size_t i = 0; i < TIO_CLI_ARRAY_LEN(paper_nums); i++) {
        (void)printf("  {\"system\": \"%s\", \"model\": %s%s%s, \"fraction_of_ideal\": %.3f}%s\n",
                     paper_nums[i].system, paper_nums[i].model ? "\"" : "",
                     paper_nums[i].model ? paper_nums[i].model : "null",
                     paper_nums[i].model ? "\"" : "", paper_nums[i].fraction,
                     i + 1 < TIO_CLI_ARRAY_LEN(paper_nums) ? "," : "");
    }
    (void)printf("]\n}\n");
}

/* The matrix as a table: one line per configuration, a cell per system. */
static void print_matrix(const struct opts *o, const struct row *rows, size_t n_rows) {
    size_t n_sys = o->n_sys;
    (void)printf("%-16s %5s %5s", "model", "batch", "seq");
    for (size_t s = 0; s < n_sys; s++) {
        (void)printf(" %15s", o->systems[s]);
    }
    (void)printf("\n");
    for (size_t i = 0; i < n_rows; i += n_sys) {
        (void)printf("%-16s %5u %5u", rows[i].c->model, rows[i].c->batch, rows[i].c->seq);
        for (size_t s = 0; s < n_sys; s++) {
            const struct row *r = &rows[i + s];
            if (r->oom) {
                (void)printf(" %15s", strcmp(r->oom_kind, "host") == 0 ? "OOM(host)"
                                      : r->plan_feasible               ? "OOM(gpu)"
                                                                       : "infeasible");
            } else {
                char cell[32];
                (void)snprintf(cell, sizeof cell, "%.0f t/s %3.0f%%", r->tokens_per_s,
                               100 * r->fraction);
                (void)printf(" %15s", cell);
            }
        }
        (void)printf("\n");
        if (o->demand_col) {
            (void)printf("%-16s %11s", "  +demand-evict", "");
            for (size_t s = 0; s < n_sys; s++) {
                const struct row *r = &rows[i + s];
                char cell[32] = "-";
                if (r->fraction_demand_evict > 0) {
                    (void)snprintf(cell, sizeof cell, "%3.0f%% %4.0fGB",
                                   100 * r->fraction_demand_evict,
                                   (double)r->demand_evicted_bytes / 1e9);
                }
                (void)printf(" %15s", cell);
            }
            (void)printf("\n");
        }
    }
}

/* The means per system, then the paper's numbers beside the simulated ones. */
static void print_summary(const struct opts *o,
                          const struct summary *m,
                          const struct tio_hw *hw1t,
                          const struct tio_hw *hw128) {
    size_t n_sys = o->n_sys;
    (void)printf("\n%-16s %10s %10s %10s %10s %12s\n", "system", "all runs", "fit runs", "vs best",
                 "OOM runs", "tok/s/k$");
    for (size_t s = 0; s < n_sys; s++) {
        double usd = 0;
        system_price(o->systems[s], hw1t, hw128, &usd);
        if (m->n_ok[s] == 0) {
            (void)printf("%-16s %9.1f%% %10s %10s %10d %12s\n", o->systems[s], 0.0, "-", "-",
                         m->n_oom[s], "-");
            continue;
        }
        (void)printf("%-16s %9.1f%% %9.1f%% %9.2fx %10d %12.3f\n", o->systems[s],
                     100 * m->mean_frac_all[s], 100 * m->mean_frac[s], m->mean_speed[s],
                     m->n_oom[s], usd > 0 ? m->mean_tok[s] / (usd / 1000.0) : 0.0);
    }
    (void)printf("\npaper (measured on real hardware) beside this simulation:\n");
    for (size_t i = 0; i < TIO_CLI_ARRAY_LEN(paper_nums); i++) {
        const struct paper_num *p = &paper_nums[i];
        double sim = (double)NAN;
        for (size_t s = 0; s < n_sys; s++) {
            if (strcmp(o->systems[s], p->system) != 0) {
                continue;
            }
            if (!p->model) {
                sim = m->mean_frac[s];
            }
            for (int k = 0; k < 3 && p->model; k++) {
                if (strcmp(model_names[k], p->model) == 0 && m->pn[k][s]) {
                    sim = m->pm[k][s] / m->pn[k][s];
                }
            }
        }
        if (isnan(sim)) {
            (void)printf("  %-42s paper %5.1f%%   simulated    -\n", p->what, 100 * p->fraction);
        } else {
            (void)printf("  %-42s paper %5.1f%%   simulated %5.1f%%  (%+.1f points)\n", p->what,
                         100 * p->fraction, 100 * sim, 100 * (sim - p->fraction));
        }
    }
}

int cli_cmd_compare(int argc, char **argv) {
    struct opts o;
    memset(&o, 0, sizeof o);
    int code = parse_args(argc, argv, &o);
    if (code >= 0) {
        return code;
    }
    code = check_args(&o);
    if (code) {
        return code;
    }
    struct tio_hw hw1t, hw128;
    int rc = tio_hw_load(o.hw_name, &hw1t);
    if (rc < 0) {
        return cli_fail(CMD, o.hw_name, rc);
    }
    hw128 = hw1t;
    if (strcmp(o.hw_name, "paper-2xh100nvl") == 0 &&
        tio_hw_preset("paper-2xh100nvl-128g", &hw128) < 0) {
        hw128 = hw1t;
    }
    struct row *rows = calloc(N_CFG * o.n_sys, sizeof *rows);
    if (!rows) {
        cli_error(CMD, "out of memory");
        return TIO_EXIT_RUNTIME;
    }
    size_t n_rows = 0;
    for (size_t ci = 0; ci < N_CFG && code == 0; ci++) {
        const struct cfg *c = &paper_matrix[ci];
        if (o.n_models && !has(o.models, o.n_models, c->model)) {
            continue;
        }
        code = run_config(&o, c, &hw1t, &hw128, rows, &n_rows);
    }
    if (code == 0) {
        if (cli_stderr_is_tty()) {
            (void)fprintf(stderr, "\r%60s\r", "");
        }
        struct summary m;
        summarize(rows, n_rows, o.n_sys, &m);
        if (o.json) {
            print_json(&o, rows, n_rows, &m, &hw1t, &hw128);
        } else {
            print_matrix(&o, rows, n_rows);
            print_summary(&o, &m, &hw1t, &hw128);
        }
    }
    free(rows);
    return code;
}
