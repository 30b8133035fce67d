/* tio_sim_run: builds the view for a policy, runs the engine, derives the summary. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <teraio/sim.h>

#include "analysis/liveness.h"
#include "common/common_impl.h"
#include "plan/planner_impl.h"
#include "sim/sim_impl.h"

/* Calibrated against the paper's measured ZeRO results: docs/baselines.md#calibration. */
#define TIO_SIM_CPU_ADAM_PER_CORE   2.4e8
#define TIO_SIM_ZERO_PREFETCH       0
#define TIO_SIM_ZERO_FETCH_BPS      20e9
#define TIO_SIM_ZERO_FETCH_OVERHEAD 7.6e-3

/* The first versioned structs end with zero_fetch_overhead_s and pipeline_wait_s (fixed:
 * fields only grow). */
#define SIM_PARAMS_MIN TIO_SIZE_THROUGH(struct tio_sim_params, zero_fetch_overhead_s)
#define SIM_RESULT_MIN TIO_SIZE_THROUGH(struct tio_sim_result, pipeline_wait_s)

/* The defaults tio_sim_params_defaults hands out (the header's tio_sim_params_default goes through
 * it). */
static struct tio_sim_params builtin_defaults(void) {
    struct tio_sim_params p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.policy = NULL;
    p.warmup_iterations = 1;
    p.capacity_bytes = 0;
    p.ssd_bandwidth_scale = 1.0;
    p.pcie_bandwidth_scale = 1.0;
    p.host_latency_s = TIO_HW_HOST_LATENCY_S;
    p.iterations_per_day = 0.0;
    p.bins = 400;
    p.record_timeline = 0;
    p.cpu_adam_params_per_core_s = TIO_SIM_CPU_ADAM_PER_CORE;
    p.zero_prefetch_layers = TIO_SIM_ZERO_PREFETCH;
    p.zero_offload_fetch_Bps = TIO_SIM_ZERO_FETCH_BPS;
    p.zero_infinity_fetch_Bps = HUGE_VAL; /* no cap beyond the SSD array's rate */
    p.zero_fetch_overhead_s = TIO_SIM_ZERO_FETCH_OVERHEAD;
    p.zero_bytes_scale = 1.0; /* FP32, as the paper ran every system (paper §4.1) */
    p.zero_layers = 0;
    p.label = NULL;
    p.demand_evict = 0;
    return p;
}

/* The built-in policies are the baselines a plan's execution names (enum tio_plan_exec). */
int tio_sim_policy_is_builtin(const char *name) {
    return tio_plan_exec_parse(name) > TIO_PLAN_EXEC_MOVES;
}

const char *tio_sim_channel_name(int32_t channel) {
    static const char *const names[TIO_SIM_CHANNEL_COUNT] = {
        [TIO_SIM_SSD_READ] = "ssd_read",
        [TIO_SIM_SSD_WRITE] = "ssd_write",
        [TIO_SIM_PCIE_H2D] = "pcie_h2d",
        [TIO_SIM_PCIE_D2H] = "pcie_d2h",
    };
    _Static_assert(TIO_ARRAY_LEN(names) == TIO_SIM_CHANNEL_COUNT, "channel names");
    return tio_enum_name(names, TIO_SIM_CHANNEL_COUNT, channel, "unknown");
}

void sim_view_uses_refresh(struct sim_view *v) {
    const struct tio_liveness_csr csr = { .n_kernels = v->n_kernels,
                                          .n_tensors = v->n_tensors,
                                          .use_offset = v->use_offset,
                                          .use_tensor = v->use_tensor,
                                          .skip = v->skip_uses };
    tio_liveness_first_last(&csr, v->first_use, v->last_use);
}

int sim_view_init(struct sim_view *v, const struct tio_trace *trace) {
    memset(v, 0, sizeof *v);
    struct tio_trace_view tv;
    tio_trace_get_view(trace, &tv);
    size_t N = tv.n_kernels, T = tv.n_tensors;
    v->n_kernels = N;
    v->n_tensors = T;
    v->use_offset = tv.kernel_use_offset;
    v->use_tensor = tv.use_tensor;
    v->use_mode = tv.use_mode;
    size_t n1 = N ? N : 1, t1 = T ? T : 1;
    /* One zeroed block: the 8-byte columns (dur_s, cpu_s [N]; bytes, first_use, last_use [T]),
     * then the byte columns (skip_uses [N]; tflags, init_tier [T]). */
    _Static_assert(sizeof(double) == sizeof(uint64_t), "the columns share one block");
    const size_t wide = 2 * n1 + 3 * t1;
    uint64_t *block = tio_calloc(1, wide * sizeof(uint64_t) + n1 + 2 * t1);
    if (!block) {
        return TIO_ENOMEM;
    }
    v->dur_s = (double *)(void *)block;
    v->cpu_s = (double *)(void *)(block + n1);
    v->bytes = block + 2 * n1;
    v->first_use = block + 2 * n1 + t1;
    v->last_use = block + 2 * n1 + 2 * t1;
    uint8_t *narrow = (uint8_t *)(void *)(block + wide);
    v->skip_uses = narrow;
    v->tflags = narrow + n1;
    v->init_tier = narrow + n1 + t1;
    double ideal = 0.0;
    for (size_t k = 0; k < N; k++) {
        v->dur_s[k] = (double)tv.kernel_duration_ns[k] * 1e-9;
        ideal += v->dur_s[k];
    }
    v->ideal_s = (double)tio_trace_total_duration_ns(trace) * 1e-9;
    (void)ideal;
    for (size_t t = 0; t < T; t++) {
        v->bytes[t] = tv.tensor_bytes[t];
        if (tv.tensor_flags[t] & TIO_TENSOR_GLOBAL) {
            v->tflags[t] |= SV_GLOBAL;
        }
        if (tv.tensor_flags[t] & TIO_TENSOR_PINNED) {
            v->tflags[t] |= SV_PINNED;
        }
    }
    sim_view_uses_refresh(v);
    v->capacity = UINT64_MAX;
    return 0;
}

void sim_view_fini(struct sim_view *v) {
    tio_free(v->dur_s); /* the block of every column (sim_view_init) */
    tio_free(v->moves);
    tio_free(v->p2p);
    tio_free(v->p2p_link);
    memset(v, 0, sizeof *v);
}

static int move_cmp(const void *a, const void *b) {
    const struct tio_move *x = a, *y = b;
    int c = tio_move_cmp_issue(x, y);
    if (c != 0) {
        return c;
    }
    /* offloads before prefetches: freeing memory first lets the prefetch allocate */
    int px = x->to == TIO_TIER_GPU, py = y->to == TIO_TIER_GPU;
    if (px != py) {
        return px ? 1 : -1;
    }
    return x->tensor < y->tensor ? -1 : (x->tensor > y->tensor);
}

int sim_view_set_moves(struct sim_view *v, const struct tio_move *moves, size_t n) {
    tio_free(v->moves);
    v->moves = NULL;
    v->n_moves = 0;
    if (n == 0) {
        return 0;
    }
    size_t N = v->n_kernels;
    for (size_t i = 0; i < n; i++) {
        const struct tio_move *m = &moves[i];
        if (m->tensor >= v->n_tensors) {
            return tio_set_error(TIO_EINVAL,
                                 "sim: move %zu: tensor %u out of range (n_tensors %zu)", i,
                                 m->tensor, v->n_tensors);
        }
        if (m->from < 0 || m->from >= TIO_TIER_COUNT || m->to < 0 || m->to >= TIO_TIER_COUNT ||
            m->from == m->to) {
            return tio_set_error(TIO_EINVAL, "sim: move %zu: bad tiers from %d to %d", i, m->from,
                                 m->to);
        }
        if (m->trigger >= N || m->deadline < m->trigger || m->deadline > m->trigger + N) {
            return tio_set_error(TIO_EINVAL,
                                 "sim: move %zu: trigger %llu / deadline %llu outside [0, %zu) / "
                                 "[trigger, trigger + %zu]",
                                 i, (unsigned long long)m->trigger, (unsigned long long)m->deadline,
                                 N, N);
        }
    }
    v->moves = tio_malloc(n * sizeof *v->moves);
    if (!v->moves) {
        return TIO_ENOMEM;
    }
    memcpy(v->moves, moves, n * sizeof *v->moves);
    v->n_moves = n;
    qsort(v->moves, n, sizeof *v->moves, move_cmp);
    /* Global tensors start where the iteration's last move of each leaves them, so that the
     * warm-up iteration begins in the plan's steady state. */
    for (size_t i = 0; i < n; i++) {
        const struct tio_move *m = &v->moves[i];
        if (!(v->tflags[m->tensor] & SV_GLOBAL)) {
            continue;
        }
        if (m->to == TIO_TIER_GPU) {
            v->tflags[m->tensor] &= (uint8_t)~SV_INIT_OFF;
        } else {
            v->tflags[m->tensor] |= SV_INIT_OFF;
            v->init_tier[m->tensor] = (uint8_t)m->to;
        }
    }
    return 0;
}

double sim_hw_cost(const struct tio_hw *hw, size_t off) {
    if (hw->struct_size < off + sizeof(double)) {
        return 0.0;
    }
    double v;
    memcpy(&v, (const char *)hw + off, sizeof v);
    return v;
}

static int check_hw(const struct tio_hw *hw) {
    int rc = tio_struct_check("sim: hw", hw, sizeof *hw, TIO_HW_MIN_SIZE);
    if (rc < 0) {
        return rc;
    }
    static const struct {
        const char *name;
        size_t off;
    } costs[] = {
        { "kernel_launch_s", offsetof(struct tio_hw, kernel_launch_s) },
        { "kernel_executor_s", offsetof(struct tio_hw, kernel_executor_s) },
        { "move_issue_s", offsetof(struct tio_hw, move_issue_s) },
        { "kernel_io_slowdown", offsetof(struct tio_hw, kernel_io_slowdown) },
    };
    for (size_t i = 0; i < TIO_ARRAY_LEN(costs); i++) {
        double c = sim_hw_cost(hw, costs[i].off);
        if (!(c >= 0) || c > 100.0) {
            return tio_set_error(TIO_EINVAL, "sim: hw: %s must be in [0, 100] (got %g)",
                                 costs[i].name, c);
        }
    }
    if (!(hw->pcie_h2d_Bps > 0) || !(hw->pcie_d2h_Bps > 0)) {
        return tio_set_error(TIO_EINVAL, "sim: hw: pcie_h2d_Bps/pcie_d2h_Bps must be > 0");
    }
    if (hw->ssd_count > 0 && (!(hw->ssd_read_Bps > 0) || !(hw->ssd_write_Bps > 0))) {
        return tio_set_error(TIO_EINVAL, "sim: hw: ssd_read_Bps/ssd_write_Bps must be > 0");
    }
    if (hw->ssd_efficiency < 0 || hw->ssd_efficiency > 1) {
        return tio_set_error(TIO_EINVAL, "sim: hw: ssd_efficiency %g outside (0, 1]",
                             hw->ssd_efficiency);
    }
    if (hw->gpu_memory_bytes == 0 || hw->gpu_reserve_bytes >= hw->gpu_memory_bytes) {
        return tio_set_error(TIO_EINVAL, "sim: hw: gpu_memory_bytes %llu / gpu_reserve_bytes %llu",
                             (unsigned long long)hw->gpu_memory_bytes,
                             (unsigned long long)hw->gpu_reserve_bytes);
    }
    return 0;
}

static int check_params(const struct tio_sim_params *p) {
    if (!(p->ssd_bandwidth_scale > 0) || !(p->pcie_bandwidth_scale > 0)) {
        return tio_set_error(TIO_EINVAL, "sim: params: bandwidth scales must be > 0");
    }
    if (p->warmup_iterations > 16) {
        return tio_set_error(TIO_EINVAL, "sim: params: warmup_iterations %u > 16",
                             p->warmup_iterations);
    }
    if (p->bins == 0 || p->bins > 1000000) {
        return tio_set_error(TIO_EINVAL, "sim: params: bins %u outside [1, 1000000]", p->bins);
    }
    if (!(p->host_latency_s >= 0) || !(p->cpu_adam_params_per_core_s > 0) ||
        !(p->zero_bytes_scale > 0) || p->iterations_per_day < 0 ||
        !(p->zero_offload_fetch_Bps > 0) || !(p->zero_infinity_fetch_Bps > 0) ||
        !(p->zero_fetch_overhead_s >= 0) || !isfinite(p->zero_fetch_overhead_s) ||
        !isfinite(p->zero_offload_fetch_Bps)) {
        return tio_set_error(TIO_EINVAL, "sim: params: negative latency, rate or scale");
    }
    return 0;
}

int sim_series_alloc(struct tio_sim *sim, size_t N) {
    /* One zeroed block of N + 1 entries per series (never empty): start, stall and duration
     * (double) and GPU bytes (uint64_t), then the name ids (uint32_t). */
    _Static_assert(sizeof(double) == sizeof(uint64_t), "the series share one block");
    const size_t n1 = N + 1;
    uint64_t *block = tio_calloc(n1, 4 * sizeof(uint64_t) + sizeof(uint32_t));
    if (!block) {
        return TIO_ENOMEM;
    }
    sim->n_kernels = N;
    sim->k_start_s = (double *)(void *)block;
    sim->k_stall_s = (double *)(void *)(block + n1);
    sim->k_dur_s = (double *)(void *)(block + 2 * n1);
    sim->k_gpu = block + 3 * n1;
    sim->k_name = (uint32_t *)(void *)(block + 4 * n1);
    return 0;
}

/* Per-kernel copies kept by the sim (names for the timeline). */
static int keep_series(struct tio_sim *sim, const struct tio_trace *trace, size_t N) {
    if (sim_series_alloc(sim, N) < 0) {
        return TIO_ENOMEM;
    }
    struct tio_trace_view tv;
    tio_trace_get_view(trace, &tv);
    /* intern names by the trace's string ids: copy only the strings kernels use */
    uint32_t max_id = 0;
    for (size_t k = 0; k < N; k++) {
        sim->k_name[k] = tv.kernel_name[k];
        if (tv.kernel_name[k] != TIO_NO_NAME && tv.kernel_name[k] + 1 > max_id) {
            max_id = tv.kernel_name[k] + 1;
        }
    }
    sim->n_names = max_id;
    if (max_id) {
        sim->names = tio_calloc(max_id, sizeof *sim->names);
        if (!sim->names) {
            return TIO_ENOMEM;
        }
        for (size_t k = 0; k < N; k++) {
            uint32_t id = tv.kernel_name[k];
            if (id != TIO_NO_NAME && !sim->names[id]) {
                const char *s = tio_trace_string(trace, id);
                sim->names[id] = tio_strdup(s ? s : "");
                if (!sim->names[id]) {
                    return TIO_ENOMEM;
                }
            }
        }
    }
    return 0;
}

/*
 * Run the engine in the steady state of continuous training. The SSDs' write caches start
 * empty; when the measured iteration ends with more in them than it began with, every
 * iteration adds to them, so a long run fills them: the run is repeated with them full (the
 * drives then write at their sustained rate except after pauses that drain the cache). Coupled
 * stages (n > 1) each have their own drives: those whose caches grew start full in the repeat.
 */
int sim_run_steady(const struct sim_group *g,
                   const struct tio_hw *hw,
                   const struct tio_sim_params *p) {
    struct sim_view *const *v = g->v;
    struct tio_sim *const *sims = g->sims;
    const size_t n = g->n;
    double bin_s[SIM_MAX_STAGES];
    int grew[SIM_MAX_STAGES] = { 0 };
    if (n == 0 || n > SIM_MAX_STAGES) {
        return tio_set_error(TIO_EINVAL, "sim: %zu stages (1 to %d)", n, SIM_MAX_STAGES);
    }
    for (size_t i = 0; i < n; i++) {
        v[i]->cache_level0 = 0.0;
        bin_s[i] = sims[i]->bin_s;
    }
    int rc = sim_engine_run_group(g, hw, p);
    if (rc < 0 || hw->ssd_count == 0 || hw->ssd_write_cache_bytes == 0 ||
        !(hw->ssd_sustained_write_Bps > 0)) {
        return rc;
    }
    int any = 0;
    for (size_t i = 0; i < n; i++) {
        if (sims[i]->r.oom) {
            return rc;
        }
        grew[i] =
            sims[i]->r.ssd_cache_end_bytes > sims[i]->r.ssd_cache_start_bytes + (UINT64_C(1) << 20);
        any |= grew[i];
    }
    if (!any) {
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        struct tio_sim *sim = sims[i];
        uint64_t cap = sim->r.capacity_bytes;
        memset(&sim->r, 0, sizeof sim->r);
        sim->r.capacity_bytes = cap;
        sim->n_bins = 0;
        sim->bin_s = bin_s[i];
        sim->n_spans = 0;
        if (grew[i]) {
            v[i]->cache_level0 = (double)hw->ssd_count * (double)hw->ssd_write_cache_bytes;
        }
    }
    rc = sim_engine_run_group(g, hw, p);
    for (size_t i = 0; i < n; i++) {
        sims[i]->r.ssd_cache_full = grew[i];
    }
    return rc;
}

void sim_finish_result(struct tio_sim *sim,
                       const struct sim_view *v,
                       const struct tio_trace *trace,
                       const struct tio_hw *hw,
                       const struct tio_sim_params *p) {
    struct tio_sim_result *r = &sim->r;
    r->ideal_s = v->ideal_s;
    const char *tok = tio_trace_get_meta(trace, "tokens_per_iteration");
    if (tok) {
        char *end = NULL;
        double x = strtod(tok, &end);
        if (end != tok && x > 0 && isfinite(x)) {
            r->tokens_per_iteration = x;
        }
    }
    if (v->host_static_bytes > r->host_peak_bytes) {
        r->host_peak_bytes = v->host_static_bytes;
    }
    if (!r->oom && v->host_capped && r->host_peak_bytes > v->host_limit_bytes) {
        r->oom = TIO_SIM_OOM_HOST;
        r->oom_kernel = 0;
        r->oom_bytes = r->host_peak_bytes - v->host_limit_bytes;
    }
    if (r->oom) {
        r->iteration_s = 0;
        r->fraction_of_ideal = 0;
        r->tokens_per_s = 0;
        r->stall_s = r->stall_data_s = r->stall_memory_s = r->cpu_s = 0;
        r->stall_thread_s = r->kernel_slowdown_s = 0;
        return;
    }
    for (size_t k = 0; k < v->n_kernels; k++) {
        if (!v->p2p || v->p2p[k] != SIM_P2P_RECV) { /* a coupled receive's is its own */
            sim->k_dur_s[k] = v->dur_s[k] + v->cpu_s[k];
        }
        r->cpu_s += v->cpu_s[k];
    }
    r->stall_s += r->cpu_s;
    r->fraction_of_ideal = r->iteration_s > 0 ? r->ideal_s / r->iteration_s : 1.0;
    if (r->iteration_s > 0 && r->tokens_per_iteration > 0) {
        r->tokens_per_s = r->tokens_per_iteration / r->iteration_s;
    }
    r->ssd_bytes_written = r->bytes[TIO_SIM_SSD_WRITE];
    if (r->ssd_bytes_written > 0 && hw->ssd_tbw_bytes > 0 && r->iteration_s > 0) {
        double per_s = (double)r->ssd_bytes_written / r->iteration_s;
        if (p->iterations_per_day > 0) {
            per_s = (double)r->ssd_bytes_written * p->iterations_per_day / 86400.0;
        }
        double year_s = 365.25 * 86400.0;
        r->drive_life_years = hw->ssd_tbw_bytes * (double)hw->ssd_count / (per_s * year_s);
    }
    /* bins: bytes -> bytes/s; keep only the measured iteration */
    size_t nb = (size_t)ceil(r->iteration_s / sim->bin_s);
    if (nb < sim->n_bins) {
        sim->n_bins = nb;
    }
    for (size_t i = 0; i < sim->n_bins * TIO_SIM_CHANNEL_COUNT; i++) {
        sim->bins[i] /= sim->bin_s;
        size_t c = i % TIO_SIM_CHANNEL_COUNT;
        if (sim->bins[i] > r->peak_Bps[c]) {
            r->peak_Bps[c] = sim->bins[i];
        }
    }
}

/*
 * One trace's simulation before the run: checks, the sim with its series, the view for the
 * policy (a plan's moves, a baseline's rewriting). *host_oom = 1 when the policy's static host
 * memory already exceeds its cap (the result is set; nothing to run).
 */
int sim_stage_open(const struct tio_trace *trace,
                   const struct tio_hw *hw,
                   const struct tio_move *moves,
                   size_t n_moves,
                   const struct tio_sim_params *params,
                   struct tio_sim **out,
                   struct sim_view *v,
                   int *host_oom) {
    memset(v, 0, sizeof *v);
    *out = NULL;
    *host_oom = 0;
    if (!tio_trace_is_finished(trace)) {
        return tio_set_error(TIO_ESTATE, "sim: trace is not finished");
    }
    struct tio_sim_params p;
    int rc = sim_params_in(params, &p);
    if (rc < 0 || (rc = check_hw(hw)) < 0) {
        return rc;
    }
    rc = check_params(&p);
    if (rc < 0) {
        return rc;
    }
    const char *policy = p.policy && *p.policy ? p.policy : "plan";
    int32_t exec = strcmp(policy, "plan") == 0 ? TIO_PLAN_EXEC_MOVES : tio_plan_exec_parse(policy);
    if (exec < 0 || (exec == TIO_PLAN_EXEC_MOVES && strcmp(policy, "plan") != 0)) {
        return tio_set_error(TIO_ENOTFOUND,
                             "sim: unknown policy '%s' (built in: ideal, none, lru, zero-offload, "
                             "zero-infinity; others need a plan)",
                             policy);
    }
    struct tio_sim *sim = tio_calloc(1, sizeof *sim);
    if (!sim) {
        return TIO_ENOMEM;
    }
    (void)snprintf(sim->policy, sizeof sim->policy, "%s",
                   exec == TIO_PLAN_EXEC_MOVES && p.label && *p.label ? p.label : policy);
    rc = sim_view_init(v, trace);
    if (rc < 0) {
        tio_free(sim);
        return rc;
    }
    rc = keep_series(sim, trace, v->n_kernels);
    if (rc < 0) {
        goto fail;
    }
    uint64_t cap =
        p.capacity_bytes ? p.capacity_bytes : hw->gpu_memory_bytes - hw->gpu_reserve_bytes;
    v->capacity = cap;
    switch (exec) {
    case TIO_PLAN_EXEC_IDEAL:
        v->capacity = UINT64_MAX;
        break;
    case TIO_PLAN_EXEC_LRU:
        v->lru = 1;
        v->host_capped = 1; /* offloads and evictions stay within the per-GPU host cap */
        v->host_limit_bytes = hw->host_offload_cap_bytes;
        break;
    case TIO_PLAN_EXEC_ZERO_OFFLOAD:
    case TIO_PLAN_EXEC_ZERO_INFINITY:
        rc = sim_zero_build(v, trace, hw, &p, exec == TIO_PLAN_EXEC_ZERO_INFINITY);
        break;
    case TIO_PLAN_EXEC_MOVES:
        rc = sim_view_set_moves(v, moves, n_moves);
        v->demand_evict = p.demand_evict != 0;
        v->host_capped = 1; /* a plan holding more host memory than the cap is a host OOM */
        v->host_limit_bytes = hw->host_offload_cap_bytes;
        break;
    default: /* TIO_PLAN_EXEC_NONE: the trace as it is */
        break;
    }
    if (rc < 0) {
        goto fail;
    }
    /* the training thread launches every kernel but in the ideal (kernels back to back); the
     * offload runtime's executor runs for plans (docs/simulator.md, "Software costs") */
    v->launch_cost = exec != TIO_PLAN_EXEC_IDEAL;
    v->executor_cost = exec == TIO_PLAN_EXEC_MOVES;
    sim->bin_s = v->ideal_s > 0 ? v->ideal_s / (double)p.bins : 1.0;
    sim->r.capacity_bytes = exec == TIO_PLAN_EXEC_IDEAL ? cap : v->capacity;
    if (v->host_capped && v->host_static_bytes > v->host_limit_bytes) {
        /* the policy cannot even start: DeepSpeed allocates its host buffers at init */
        sim->r.oom = TIO_SIM_OOM_HOST;
        sim->r.oom_bytes = v->host_static_bytes - v->host_limit_bytes;
        sim->r.host_peak_bytes = v->host_static_bytes;
        *host_oom = 1;
    }
    *out = sim;
    return 0;
fail:
    sim_view_fini(v);
    tio_sim_free(sim);
    return rc;
}

int tio_sim_run(const struct tio_trace *trace,
                const struct tio_hw *hw,
                const struct tio_move *moves,
                size_t n_moves,
                const struct tio_sim_params *params,
                struct tio_sim **out) {
    if (!trace || !hw || !out || (n_moves && !moves)) {
        return tio_set_error(TIO_EINVAL, "sim: NULL argument");
    }
    *out = NULL;
    struct tio_sim_params p;
    int rc = sim_params_in(params, &p);
    if (rc < 0) {
        return rc;
    }
    double t_wall = tio_now_s();
    struct tio_sim *sim = NULL;
    struct sim_view v;
    int host_oom = 0;
    rc = sim_stage_open(trace, hw, moves, n_moves, &p, &sim, &v, &host_oom);
    if (rc < 0 || !sim) { /* sim_stage_open gives a sim whenever it returns 0 */
        return rc < 0 ? rc : tio_set_error(TIO_ESTATE, "sim: no simulation was set up");
    }
    if (!host_oom) {
        struct sim_view *vp = &v;
        const struct sim_group g = { .v = &vp, .n = 1, .n_links = 0, .sims = &sim, .out = NULL };
        rc = sim_run_steady(&g, hw, &p);
        if (rc < 0) {
            sim_view_fini(&v);
            tio_sim_free(sim);
            return rc;
        }
    }
    sim_finish_result(sim, &v, trace, hw, &p);
    sim_view_fini(&v);
    sim->r.sim_wall_s = tio_now_s() - t_wall;
    *out = sim;
    return 0;
}

void tio_sim_free(struct tio_sim *sim) {
    if (!sim) {
        return;
    }
    tio_free(sim->k_start_s); /* the block of every series (sim_series_alloc) */
    for (size_t i = 0; i < sim->n_names; i++) {
        tio_free(sim->names[i]);
    }
    tio_free(sim->names);
    tio_free(sim->bins);
    tio_free(sim->spans);
    tio_free(sim);
}

int tio_sim_params_defaults(struct tio_sim_params *out, size_t size) {
    struct tio_sim_params d = builtin_defaults();
    return tio_struct_out("tio_sim_params", out, size, &d, sizeof d, SIM_PARAMS_MIN);
}

int sim_params_in(const struct tio_sim_params *params, struct tio_sim_params *out) {
    *out = tio_sim_params_default();
    return params ? tio_struct_in("sim: params", out, sizeof *out, SIM_PARAMS_MIN, params) : 0;
}

int tio_sim_get_result(const struct tio_sim *sim, struct tio_sim_result *out, size_t size) {
    if (!sim) {
        return tio_set_error(TIO_EINVAL, "sim: NULL simulation");
    }
    return tio_struct_out("tio_sim_result", out, size, &sim->r, sizeof sim->r, SIM_RESULT_MIN);
}

const char *tio_sim_policy(const struct tio_sim *sim) {
    return sim->policy;
}

size_t tio_sim_kernel_count(const struct tio_sim *sim) {
    return sim->n_kernels;
}

const double *tio_sim_kernel_start_s(const struct tio_sim *sim) {
    return sim->k_start_s;
}

const double *tio_sim_kernel_stall_s(const struct tio_sim *sim) {
    return sim->k_stall_s;
}

const uint64_t *tio_sim_kernel_gpu_bytes(const struct tio_sim *sim) {
    return sim->k_gpu;
}

const double *tio_sim_bandwidth_bins(const struct tio_sim *sim, size_t *n, double *bin_s) {
    if (n) {
        *n = sim->n_bins;
    }
    if (bin_s) {
        *bin_s = sim->bin_s;
    }
    return sim->bins;
}
