/*
 * teraio/plan.h - migration plans and the policies that make them (docs/planner.md).
 *
 * A plan is, for one GPU and one steady-state iteration of a trace, the list of migrations
 * ("moves") sorted by trigger kernel. A move is issued just before kernel `trigger` runs and must
 * be complete before kernel `deadline` runs. Kernel positions are on the extended axis used by
 * analysis.h: trigger is in [0, N), deadline in [trigger, trigger + N]; a deadline >= N means
 * "kernel deadline - N of the next iteration" (wrap-around periods of global tensors).
 *
 *     struct tio_plan_params pp = tio_plan_params_default();
 *     pp.policy = "teraio-mixed";
 *     struct tio_plan *plan;
 *     if (tio_plan_make(trace, &hw, &pp, &plan) < 0) ...      // runs the policy
 *     struct tio_plan_summary s; tio_plan_get_summary(plan, &s);
 *     tio_plan_save(plan, "run.plan", TIO_PLAN_FORMAT_BINARY);
 *
 * A plan records the hash of its trace; tio_plan_check_trace() refuses a plan made for another
 * trace (TIO_EPLAN). Thread safety: immutable after tio_plan_finish / load.
 */
#ifndef TERAIO_PLAN_H
#define TERAIO_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include <teraio/hw.h>
#include <teraio/status.h>
#include <teraio/tier.h>
#include <teraio/trace.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Move flags (uint32_t bit set). */
enum tio_move_flag {
    TIO_MOVE_URGENT = 1u << 0, /* a kernel would wait for it: serve before normal moves */
    TIO_MOVE_WRAPS = 1u << 1,  /* deadline is in the next iteration */
    TIO_MOVE_CLEAN = 1u << 2,  /* offload may skip the write: an identical copy is stored */
    TIO_MOVE_STALL = 1u << 3,  /* planned beyond the bandwidth the kernels' time offers, to
                                  keep memory under the capacity: compute waits for it */
    TIO_MOVE_FLAGS_ALL = (1u << 4) - 1
};

/* One migration (a record). Offload: from GPU to HOST/SSD. Prefetch: from HOST/SSD to GPU. */
struct tio_move {
    uint32_t tensor;   /* tensor id in the trace */
    int32_t from;      /* enum tio_tier */
    int32_t to;        /* enum tio_tier */
    uint32_t flags;    /* TIO_MOVE_* */
    uint64_t trigger;  /* issue before this kernel runs, in [0, N) */
    uint64_t deadline; /* complete before this kernel runs, in [trigger, trigger + N] */
    uint64_t bytes;    /* tensor bytes */
};

/* Result of planning (also stored in the plan file). */
struct tio_plan_summary {
    size_t n_moves;
    size_t n_offloads;
    int32_t feasible;            /* 1: planned memory stays under the capacity at every kernel
                                    and no move is planned beyond the bandwidth (no
                                    TIO_MOVE_STALL): the plan replays without compute waiting */
    double planning_seconds;     /* wall time of the policy */
    uint64_t capacity_bytes;     /* the line planned against (tio_hw_plan_capacity) */
    uint64_t planned_peak_bytes; /* max over kernels of planned GPU memory */
    uint64_t shortfall_bytes;    /* when infeasible: max excess over capacity (0: the memory
                                    fits, by stall moves) ... */
    uint64_t shortfall_kernel;   /* ... and the first kernel where it occurs */
    uint64_t host_peak_bytes;    /* max host memory used by offloads */
    uint64_t ssd_peak_bytes;     /* max SSD bytes held (what the engine must reserve) */
    uint64_t bytes_to_ssd;       /* per iteration */
    uint64_t bytes_to_host;
};

enum tio_plan_format {
    TIO_PLAN_FORMAT_AUTO = 0,
    TIO_PLAN_FORMAT_BINARY = 1,
    TIO_PLAN_FORMAT_JSON = 2
};

struct tio_plan;

/*
 * How a plan is carried out (tio_plan_execution): by its moves, or as a baseline whose behaviour
 * the simulator models. A baseline's plan holds no moves, only the unplanned memory summary.
 * The simulator dispatches on this value, never on the plan's policy name (which is a label:
 * a renamed baseline still simulates as its execution, a plan named like a baseline as its
 * moves). Stored in plan files as "execution" (docs/planner.md, "Plan format").
 */
enum tio_plan_exec {
    TIO_PLAN_EXEC_MOVES = 0,         /* "moves": the plan's moves (teraio, g10, hand-made) */
    TIO_PLAN_EXEC_NONE = 1,          /* "none": no offloading (OOM if it does not fit) */
    TIO_PLAN_EXEC_IDEAL = 2,         /* "ideal": unlimited GPU memory */
    TIO_PLAN_EXEC_LRU = 3,           /* "lru": on-demand swapping */
    TIO_PLAN_EXEC_ZERO_OFFLOAD = 4,  /* "zero-offload": DeepSpeed ZeRO-Offload model */
    TIO_PLAN_EXEC_ZERO_INFINITY = 5, /* "zero-infinity": DeepSpeed ZeRO-Infinity model */
    TIO_PLAN_EXEC_COUNT
};

struct tio_plan_params {
    /* Size of this struct as the caller's header declares it: set by tio_plan_params_default(s)
     * (docs/style.md, "Versioned structs"). */
    uint32_t struct_size;
    const char *policy;        /* "teraio" (= teraio-mixed), "teraio-ssd", "teraio-mixed",
                                  "teraio-paper", "teraio-paper-ssd", "g10", "lru", "none",
                                  "ideal", "zero-offload", "zero-infinity" (default "teraio") */
    int32_t early_prefetch;    /* 1: move prefetches earlier while memory allows (default 1) */
    double bandwidth_scale;    /* multiply every bandwidth (sweeps), default 1.0 */
    uint64_t min_tensor_bytes; /* never move tensors smaller than this (default 1 MiB) */
    /* Added after the first API freeze (fields only grow at the end): */
    int32_t clean_copies; /* 1: an offload whose tensor was not written since an earlier
                             offload to the same tier is flagged TIO_MOVE_CLEAN and reserves
                             no write bandwidth (teraio, teraio-mixed, teraio-ssd only;
                             default 1). The executor / simulator then skips the write. */
    int32_t overcommit;   /* 1: when no move fits the bandwidth and memory is still over the
                             capacity, plan moves beyond the bandwidth (TIO_MOVE_STALL: compute
                             waits for them) until memory fits (teraio, teraio-mixed,
                             teraio-ssd only; default 1); such a plan is not feasible
                             (shortfall_bytes 0) but runs, stalling. 0: the plan stays
                             within the bandwidth and may not fit. */
    double memory_slack;  /* fraction of the planning capacity the planned policies
                             (teraio*, g10) keep free: they plan under
                             capacity x (1 - memory_slack), so that a plan replayed with
                             transfers a little late still fits; feasibility is judged against
                             the capacity itself. [0, 0.5], default TIO_PLAN_DEFAULT_SLACK. */
};

/* The default memory_slack (docs/decisions.md, "Planning slack"). */
#define TIO_PLAN_DEFAULT_SLACK 0.02

/* tio_plan_params_defaults: fill the `size` bytes of *out (size = sizeof *out) with the
 * defaults (policy "teraio", early_prefetch 1, scale 1.0, min 1 MiB, clean_copies 1, overcommit
 * 1, memory_slack TIO_PLAN_DEFAULT_SLACK) as far as this library knows them (a newer header's
 * extra fields are zeroed), and set out->struct_size. Returns 0; TIO_EINVAL (NULL),
 * TIO_EVERSION (size below the first versioned struct tio_plan_params). */
TIO_API int tio_plan_params_defaults(struct tio_plan_params *out, size_t size);
/* tio_plan_params_default: the same by value. Inline, so that the size is the one this header
 * declares: not an exported function, whose by-value struct would be the library's size
 * (docs/style.md, "Versioned structs"). */
static inline struct tio_plan_params tio_plan_params_default(void) {
    struct tio_plan_params p;
    (void)tio_plan_params_defaults(&p, sizeof p);
    return p;
}

/* tio_plan_policy_count / tio_plan_policy_name: enumerate policies. */
TIO_API size_t tio_plan_policy_count(void);
TIO_API const char *tio_plan_policy_name(size_t i);
/* tio_plan_policy_help: one line describing policy i (NULL if out of range). Added later. */
TIO_API const char *tio_plan_policy_help(size_t i);

/*
 * tio_plan_make: run a policy on a finished trace and hardware. An infeasible budget is not an
 * error: the plan is returned with feasible = 0 and the shortfall filled in. Errors: TIO_EINVAL
 * (bad hw or params: names the field), TIO_EINFEASIBLE (capacity below the largest kernel's
 * working set, i.e. its active bytes plus the idle bytes that can never move: names the kernel
 * and both sizes), TIO_ENOTFOUND (unknown policy), TIO_ESTATE (trace not finished), TIO_EVERSION
 * (params->struct_size: fill params with tio_plan_params_default(s) first; params NULL: the
 * defaults), TIO_ENOMEM.
 * Policies "lru", "none", "ideal", "zero-offload" and "zero-infinity" are modelled by the
 * simulator: their plan holds no moves, only its execution (the baseline, enum tio_plan_exec)
 * and the unplanned memory summary.
 * Deterministic: the same inputs give the same moves (ties broken by tensor id, then start).
 */
TIO_API TIO_MUST_CHECK int tio_plan_make(const struct tio_trace *trace,
                                         const struct tio_hw *hw,
                                         const struct tio_plan_params *params,
                                         struct tio_plan **out);

/* Building plans by hand (tests, other planners): new, add moves in any order, finish (sorts by
 * trigger, validates against n_kernels). */
TIO_API TIO_MUST_CHECK int
tio_plan_new(uint64_t trace_hash, uint64_t n_kernels, const char *policy, struct tio_plan **out);
TIO_API TIO_MUST_CHECK int tio_plan_add_move(struct tio_plan *plan, const struct tio_move *move);
TIO_API TIO_MUST_CHECK int tio_plan_finish(struct tio_plan *plan);
TIO_API void tio_plan_set_summary(struct tio_plan *plan, const struct tio_plan_summary *summary);
/* tio_plan_set_execution: how the plan is carried out (enum tio_plan_exec; a new plan's is
 * TIO_PLAN_EXEC_MOVES). Before tio_plan_finish, which refuses moves in a plan whose execution is
 * a baseline (TIO_EPLAN). Returns 0, TIO_EINVAL (NULL plan, value out of range: names it) or
 * TIO_ESTATE (finished plan). */
TIO_API TIO_MUST_CHECK int tio_plan_set_execution(struct tio_plan *plan, int32_t exec);

/* tio_plan_free: accepts NULL. */
TIO_API void tio_plan_free(struct tio_plan *plan);

/* Accessors. moves: sorted by (trigger, urgent first, tensor); owned by the plan. */
TIO_API const struct tio_move *tio_plan_moves(const struct tio_plan *plan, size_t *n);
TIO_API void tio_plan_get_summary(const struct tio_plan *plan, struct tio_plan_summary *out);
TIO_API const char *tio_plan_policy(const struct tio_plan *plan);
/* tio_plan_execution: enum tio_plan_exec (TIO_PLAN_EXEC_MOVES for NULL). */
TIO_API int32_t tio_plan_execution(const struct tio_plan *plan);
/* tio_plan_exec_name: "moves", "none", "ideal", "lru", "zero-offload", "zero-infinity" (the
 * names plan files use); NULL out of range. tio_plan_exec_parse: the inverse, -1 if unknown. */
TIO_API const char *tio_plan_exec_name(int32_t exec);
TIO_API int32_t tio_plan_exec_parse(const char *name);
TIO_API uint64_t tio_plan_trace_hash(const struct tio_plan *plan);
TIO_API uint64_t tio_plan_kernel_count(const struct tio_plan *plan);

/* tio_plan_check_trace: TIO_EPLAN (detail: both hashes) unless the plan was made for `trace`. */
TIO_API TIO_MUST_CHECK int tio_plan_check_trace(const struct tio_plan *plan,
                                                const struct tio_trace *trace);

/*
 * tio_plan_verify: an independent check of a plan, sharing no code with the planners' model: the
 * liveness, the memory curves, the kernels' times and the channels' rates are derived again from
 * the trace, the hardware and the moves (docs/planner.md, "The verifier"). It checks:
 *   - every offload of a tensor is followed by a prefetch of it from the same tier, whose
 *     deadline is the tensor's next use and which is triggered at or after the offload's
 *     deadline; each move has its tensor's size; a CLEAN offload has a current copy on the SSDs;
 *   - the GPU memory curve (a tensor away from its offload's deadline to its prefetch's
 *     trigger) stays under the capacity at every kernel when the plan says feasible, and the
 *     host memory curve (a host offload held from its trigger to its prefetch's deadline) under
 *     the host cap always;
 *   - every move, stall moves (TIO_MOVE_STALL) included, meets its deadline less the transfer
 *     latency on the budgets the simulator shares (the SSD array's time, the PCIe link's host
 *     share each way; writes at the sustained rate once the plan's writes spend the drives'
 *     caches), earliest deadline first: a plan whose memory fits only because compute waits for
 *     its moves fails, the detail naming a stall move ("planned beyond the bandwidth").
 * trace, hw and params are those the plan was made with (params NULL: the defaults). Returns 0,
 * TIO_EPLAN (the plan is for another trace, or the first violation, in the detail), TIO_EVERSION
 * (params->struct_size, as for tio_plan_make) or TIO_ENOMEM.
 * *peak_out (may be NULL): the peak of the verifier's GPU memory curve.
 */
TIO_API TIO_MUST_CHECK int tio_plan_verify(const struct tio_plan *plan,
                                           const struct tio_trace *trace,
                                           const struct tio_hw *hw,
                                           const struct tio_plan_params *params,
                                           uint64_t *peak_out);

/* Formats (binary: magic, version, CRC; JSON), validated like traces. tio_plan_save writes
 * `path` as tio_trace_save does: atomically through a temporary file created with O_EXCL, through
 * a symlink to its target, keeping an existing file's owner and mode, refusing anything that is
 * not a regular file (-EISDIR, TIO_EINVAL). */
TIO_API TIO_MUST_CHECK int
tio_plan_save(const struct tio_plan *plan, const char *path, int32_t format);
TIO_API TIO_MUST_CHECK int tio_plan_load(const char *path, int32_t format, struct tio_plan **out);
TIO_API TIO_MUST_CHECK int
tio_plan_load_mem(const void *data, size_t len, int32_t format, struct tio_plan **out);

#ifdef __cplusplus
}
#endif
#endif
