/* Private: the plan object, the planners' shared model and validation helpers (docs/planner.md). */
#ifndef TIO_PLANNER_IMPL_H
#define TIO_PLANNER_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <teraio/hw.h>
#include <teraio/plan.h>
#include <teraio/trace.h>

#include "analysis/liveness.h"

#define TIO_PLAN_POLICY_MAX 64
#define TIO_PLAN_MAX_MOVES  (UINT64_C(1) << 32)
/* The first versioned struct tio_hw ends with ssd_sustained_write_Bps (fixed: fields only grow;
 * tio_struct_check in common_impl.h). */
#define TIO_HW_MIN_SIZE TIO_SIZE_THROUGH(struct tio_hw, ssd_sustained_write_Bps)

/* tio_plan_params_in: the caller's params (NULL: the defaults) as this library's struct (plan.c):
 * tio_struct_in over the defaults. 0, TIO_EVERSION (struct_size, naming `what`). */
int tio_plan_params_in(const char *what,
                       const struct tio_plan_params *params,
                       struct tio_plan_params *out);

/* The largest GPU capacity a plan (and a hardware description) may name: 2^60 bytes, 1 EiB. */
#define TIO_PLAN_MAX_CAPACITY (UINT64_C(1) << 60)

struct tio_plan {
    char policy[TIO_PLAN_POLICY_MAX];
    uint64_t trace_hash;
    uint64_t n_kernels;
    int finished;
    int32_t exec; /* enum tio_plan_exec */
    struct tio_move *moves;
    size_t n_moves, cap_moves;
    struct tio_plan_summary summary;
};

/* tio_move_cmp_issue: the order moves are issued in, by trigger and then urgent first: < 0, 0 (a
 * tie: the caller orders further) or > 0. */
int tio_move_cmp_issue(const struct tio_move *x, const struct tio_move *y);
/* tio_plan_rewrap: set the error detail to prefix + the current detail + suffix (copies the
 * detail first: tio_set_error must not read its own buffer). Returns rc. */
/* tio_hw_parse_json: a hardware description from JSON text in memory (what tio_hw_load does
 * with a file's contents; `name` stands for the path in errors and the default name), then
 * tio_hw_validate. A "base" still names a preset or a file. For the fuzzer. */
int tio_hw_parse_json(const void *text, size_t len, const char *name, struct tio_hw *out);
int tio_plan_rewrap(int rc, const char *prefix, const char *suffix);
/* tio_plan_check_execution: TIO_EPLAN (naming the execution and the count) if a plan whose
 * execution is a baseline holds moves; else 0. */
int tio_plan_check_execution(const struct tio_plan *plan);

/* tio_plan_check_move: validate one move against n_kernels; `i` names it in the detail. */
int tio_plan_check_move(const struct tio_move *m, uint64_t n_kernels, size_t i);

/* tio_plan_sort: sort moves by (trigger, urgent first, tensor, from, to, deadline). */
void tio_plan_sort(struct tio_plan *plan);

/* Channels of the slot model (docs/planner.md, "Bandwidth model"). */
enum tio_chan {
    TIO_CH_SSD_W = 0, /* GPU -> SSD */
    TIO_CH_SSD_R = 1, /* SSD -> GPU */
    TIO_CH_D2H = 2,   /* GPU -> host over PCIe */
    TIO_CH_H2D = 3,   /* host -> GPU over PCIe */
    TIO_CH_COUNT
};

/*
 * The planners' view of a trace (planner_model.c): liveness (analysis/liveness.h), the periods of
 * the tensors that may move, memory curves, slot capacities. Kernel axis: [0, N); a period may
 * wrap (end > N), kernel k >= N means k - N. A wrap-around period that starts at N is kept as the
 * plain period [0, u_0), and a global tensor never used has TIO_PPERIOD_WRAPS | _UNUSED.
 */
enum tio_pperiod_flag {
    TIO_PPERIOD_WRAPS = 1u << 0, /* crosses the iteration boundary (global tensors) */
    TIO_PPERIOD_UNUSED = 1u << 1 /* global tensor never used in the iteration */
};

/* 24 bytes: kernels, extended ones too, are under 2 x TIO_TRACE_MAX_KERNELS <= 2^32, tensors
 * under TIO_TRACE_MAX_TENSORS <= 2^30. */
struct tio_pperiod {
    uint64_t bytes;
    uint32_t tensor : 30;
    uint32_t flags : 2; /* TIO_PPERIOD_* */
    uint32_t start;     /* first idle kernel, < N */
    uint32_t end;       /* next use (exclusive), > N when wrapping */
    uint32_t use_index; /* index (in the tensor's use list) of the use before the period */
};
_Static_assert(2 * (uint64_t)TIO_TRACE_MAX_KERNELS <= UINT32_MAX &&
                   TIO_TRACE_MAX_TENSORS <= (UINT32_C(1) << 30),
               "struct tio_pperiod: kernel and tensor fields");

struct tio_pmodel {
    const struct tio_trace *trace;
    size_t n; /* kernels */
    size_t n_tensors;
    struct tio_liveness lv;     /* owns the arrays below but tau, pinned_extra and periods */
    double *tau;                /* [n] kernel durations in seconds */
    const uint64_t *resident;   /* [n] resident bytes with nothing offloaded (lv.resident) */
    const uint64_t *active;     /* [n] bytes of the tensors each kernel uses (lv.active) */
    uint64_t *pinned_extra;     /* [n] idle resident bytes that can never move (pinned, small);
                                   tio_plan_make frees it after the working-set check */
    uint8_t *movable;           /* [n_tensors] 1: not pinned and at least min_bytes */
    const size_t *use_off;      /* [n_tensors + 1] CSR of each tensor's uses (lv.use_off) */
    const uint32_t *use_kernel; /* [n_uses] kernels, ascending per tensor (lv.use_kernel) */
    const uint8_t *use_mode;    /* [n_uses] TIO_USE_* (lv.use_mode) */
    struct tio_pperiod *periods;
    size_t n_periods;
    uint64_t capacity;       /* tio_hw_plan_capacity: the line a feasible plan stays under */
    uint64_t plan_line;      /* capacity x (1 - memory_slack): the line the planners aim for */
    double bw[TIO_CH_COUNT]; /* bytes/s per channel (scaled); SSD channels 0 without SSDs;
                                the SSD rates are each direction alone */
    double ssd_mix;          /* tio_hw_ssd_mix_factor: SSD reads and writes share one budget,
                                a byte costs ssd_mix / bw[SSD_R or SSD_W] of the array's time */
    int gds;
    double ssd_latency_s;
    uint64_t host_cap;  /* bytes */
    uint64_t min_bytes; /* tensors below this never move */
    uint64_t *out_gpu;  /* [n] or NULL: the planner's GPU memory curve is copied here ... */
    uint64_t *out_host; /* [n] or NULL: ... and its host memory curve (tio_plan_make_curves) */
};

/* tio_pmodel_build: liveness and periods of `trace` (tensors below min_bytes, pinned tensors and
 * tensors used by COMM kernels' periods stay), capacities from hw. */
int tio_pmodel_build(const struct tio_trace *trace,
                     const struct tio_hw *hw,
                     const struct tio_plan_params *params,
                     struct tio_pmodel *m);
void tio_pmodel_free(struct tio_pmodel *m);

/* tio_plan_make_curves: tio_plan_make, also copying the planner's GPU and host memory curves
 * ([n] each, either may be NULL; a policy without moves leaves them untouched), for the tests
 * that hold the planners' model against the verifier's. */
int tio_plan_make_curves(const struct tio_trace *trace,
                         const struct tio_hw *hw,
                         const struct tio_plan_params *params,
                         struct tio_plan **out,
                         uint64_t *gpu,
                         uint64_t *host);

/* tio_pmodel_check_working_set: TIO_EINFEASIBLE naming the kernel if capacity is below any
 * kernel's working set (active bytes plus bytes that can never move). */
int tio_pmodel_check_working_set(const struct tio_pmodel *m);

/* Policies (one file each). */
int tio_planner_teraio(const struct tio_pmodel *m,
                       const struct tio_plan_params *params,
                       int variant,
                       struct tio_plan *plan);

enum tio_teraio_variant {
    TIO_VAR_MIXED = 0,    /* our planner, SSD then host */
    TIO_VAR_SSD = 1,      /* our planner, SSD only */
    TIO_VAR_PAPER = 2,    /* Algorithm 1 as printed */
    TIO_VAR_G10 = 3,      /* G10: benefit without cost */
    TIO_VAR_PAPER_SSD = 4 /* Algorithm 1 as printed, SSD only (the paper's TeraIO-SSD) */
};

#endif
