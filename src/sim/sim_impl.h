/* Private state of the simulator: the view of a trace the engine replays, and the results. */
#ifndef TIO_SIM_IMPL_H
#define TIO_SIM_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <teraio/analysis.h>
#include <teraio/hw.h>
#include <teraio/plan.h>
#include <teraio/sim.h>
#include <teraio/trace.h>

/* Per-tensor flags of a view (uint8_t). */
enum {
    SV_GLOBAL = 1u << 0,   /* resident across iterations (never freed) */
    SV_EXTERNAL = 1u << 1, /* never on the GPU (ZeRO: optimizer state kept by the host) */
    SV_FRESH = 1u << 2,    /* every use re-creates it: never fetched (ZeRO's per-micro-batch
                              gradients, accumulated on the host) */
    SV_PINNED = 1u << 3,   /* never evicted by LRU */
    SV_INIT_OFF = 1u << 4, /* starts off the GPU, in tier init_tier */
    SV_HOSTCOPY = 1u << 5  /* its host copy persists (ZeRO's parameter partition): fetching
                              it does not free host memory, which the policy counts itself */
};

/*
 * What the engine replays: the trace's uses with per-kernel times and per-tensor sizes that a
 * baseline may rewrite (ZeRO: fp16 bytes, CPU optimizer instead of GPU kernels).
 */
struct sim_view {
    size_t n_kernels;
    size_t n_tensors;
    const uint64_t *use_offset; /* [N + 1] borrowed from the trace */
    const uint32_t *use_tensor; /* [n_uses] */
    const uint8_t *use_mode;    /* [n_uses] */
    double *dur_s;              /* [N] GPU time of each kernel, s */
    double *cpu_s;              /* [N] host-side time before the kernel (stream waits), s */
    uint8_t *skip_uses;         /* [N] 1: ignore the kernel's uses (work moved to the host) */
    uint64_t *bytes;            /* [T] bytes on the GPU */
    uint8_t *tflags;            /* [T] SV_* */
    uint8_t *init_tier;         /* [T] tier of SV_INIT_OFF tensors */
    uint64_t *first_use;        /* [T] first non-skipped use, TIO_NEVER_USED if none */
    uint64_t *last_use;         /* [T] last non-skipped use, TIO_NEVER_USED if none */
    struct tio_move *moves;     /* sorted by trigger, owned */
    size_t n_moves;
    uint64_t capacity; /* GPU bytes; UINT64_MAX = unlimited */
    int lru;           /* 1: evict least-recently-used tensors on demand */
    int demand_evict;  /* 1: when a plan leaves memory short and nothing in flight frees it, evict
                          idle tensors on demand (the runtime's order: furthest next use) */
    double ideal_s;    /* sum of the trace's kernel durations */
    uint64_t host_static_bytes; /* host memory the policy holds besides offloads (per GPU) */
    uint64_t host_limit_bytes;  /* per-GPU host memory available to the policy */
    int host_capped;            /* 1: host_limit_bytes is enforced (a host OOM beyond it) */
    double chan_cap_Bps[TIO_SIM_CHANNEL_COUNT]; /* > 0: the policy reaches at most this rate on
                                                   the channel (ZeRO's effective fetch rate) */
    double cache_level0; /* bytes in the SSD array's write caches when the run starts */
    /* software costs (docs/simulator.md, "Software costs"): which the policy pays */
    int launch_cost;   /* 1: the training thread launches every kernel (hw kernel_launch_s) */
    int executor_cost; /* 1: ... and runs the executor per kernel and per move (plans) */
    /* pipeline coupling (sim_pipeline.c); NULL for a stage simulated alone */
    uint8_t *p2p;       /* [N] SIM_P2P_*: the kernel sends or receives a message */
    uint32_t *p2p_link; /* [N] the link it sends on or receives from */
};

/* What a kernel of a coupled pipeline stage does (sim_view.p2p). */
enum { SIM_P2P_NONE = 0, SIM_P2P_SEND = 1, SIM_P2P_RECV = 2 };

/* At most this many pipeline stages are simulated together. */
#define SIM_MAX_STAGES 64

/* Per stage, after a group run: its own end in the measured iteration (from the common start),
 * the time its receives waited for their messages, and its OOM kind (0 none). */
struct sim_stage_out {
    double end_s;
    double wait_s;
    int oom;
};

/* One transfer event kept for the timeline. */
struct sim_span {
    double t0, t1;
    uint64_t bytes;
    uint32_t tensor;
    int32_t channel; /* the channel that names the track */
    int32_t prefetch;
    int32_t urgent;
};

struct tio_sim {
    char policy[32];
    struct tio_sim_result r;
    size_t n_kernels;
    double *k_start_s; /* [N] */
    double *k_stall_s; /* [N] */
    double *k_dur_s;   /* [N] */
    uint64_t *k_gpu;   /* [N] */
    uint32_t *k_name;  /* [N] string ids, for the timeline */
    char **names;      /* [n_names] copied kernel names (timeline) */
    size_t n_names;
    double *bins; /* [n_bins * TIO_SIM_CHANNEL_COUNT] bytes per bin, then bytes/s */
    size_t n_bins, cap_bins;
    double bin_s;
    struct sim_span *spans;
    size_t n_spans, cap_spans;
};

/* sim_series_alloc: sim's per-kernel series (k_*) for N kernels, zeroed, in one block that
 * tio_sim_free frees. 0 or TIO_ENOMEM. */
/* sim_hw_cost: the double at byte offset `off` of *hw (a software cost), 0 when the caller's
 * older header has no such field. */
double sim_hw_cost(const struct tio_hw *hw, size_t off);
/* sim_params_in: the caller's params (NULL: defaults) as this library's struct (sim.c):
 * tio_struct_in over the defaults. */
int sim_params_in(const struct tio_sim_params *params, struct tio_sim_params *out);

int sim_series_alloc(struct tio_sim *sim, size_t N);

/* sim_view_init / sim_view_fini: a view of the trace with its own times and sizes. */
int sim_view_init(struct sim_view *v, const struct tio_trace *trace);
void sim_view_fini(struct sim_view *v);
/* sim_view_uses_refresh: recompute first/last use after skip_uses changed (liveness.h). */
void sim_view_uses_refresh(struct sim_view *v);
/* sim_view_set_moves: copy and sort moves; mark globals whose last move leaves them off. */
int sim_view_set_moves(struct sim_view *v, const struct tio_move *moves, size_t n);

/*
 * Stages simulated together, coupled by their p2p kernels over n_links directed links (a
 * receive ends once the matching send has; an iteration starts when every stage has finished
 * the previous one); one stage alone is n = 1 without links. sims[i] gets stage i's results,
 * out[i] (out may be NULL) its end and waits.
 */
struct sim_group {
    struct sim_view *const *v; /* [n] */
    size_t n;                  /* 1 to SIM_MAX_STAGES */
    size_t n_links;
    struct tio_sim *const *sims; /* [n] */
    struct sim_stage_out *out;   /* [n] or NULL */
};

/* sim_engine_run_group: replay the group's views once (the engine only reads them). */
int sim_engine_run_group(const struct sim_group *g,
                         const struct tio_hw *hw,
                         const struct tio_sim_params *p);

/* sim.c: one stage's sim and view before the run (sim_stage_open), the steady-state run of
 * one or more coupled stages (sim_run_steady), and the summary after it (sim_finish_result). */
int sim_stage_open(const struct tio_trace *trace,
                   const struct tio_hw *hw,
                   const struct tio_move *moves,
                   size_t n_moves,
                   const struct tio_sim_params *params,
                   struct tio_sim **out,
                   struct sim_view *v,
                   int *host_oom);
int sim_run_steady(const struct sim_group *g,
                   const struct tio_hw *hw,
                   const struct tio_sim_params *p);
void sim_finish_result(struct tio_sim *sim,
                       const struct sim_view *v,
                       const struct tio_trace *trace,
                       const struct tio_hw *hw,
                       const struct tio_sim_params *p);

/* ZeRO views (sim_zero.c). */
int sim_zero_build(struct sim_view *v,
                   const struct tio_trace *trace,
                   const struct tio_hw *hw,
                   const struct tio_sim_params *p,
                   int infinity);

#endif
