/*
 * Private: the verifier's own model of a trace (planner_verify.c, planner_verify_io.c). It shares
 * nothing with the planners' struct tio_pmodel: the liveness, the curves, the kernels' times and
 * the budgets' rates are derived again from the trace and the hardware's fields, so that a
 * mistake in the planners' model is not repeated in the check (docs/planner.md, "The verifier").
 */
#ifndef TIO_PLANNER_VERIFY_H
#define TIO_PLANNER_VERIFY_H

#include <stddef.h>
#include <stdint.h>

#include "plan/planner_impl.h"

struct tio_vmodel {
    size_t n, nt;                   /* kernels, tensors */
    const uint64_t *bytes;          /* [nt] the trace's tensor sizes */
    const uint32_t *tflags;         /* [nt] TIO_TENSOR_* */
    size_t *uoff;                   /* [nt + 1] CSR of each tensor's distinct use kernels */
    uint32_t *uk;                   /* use kernels, ascending per tensor */
    uint8_t *umode;                 /* TIO_USE_* of each use kernel (or-ed over its uses) */
    uint64_t *resident;             /* [n + 1] resident bytes with nothing moved */
    double *start_s;                /* [4n + 1] start time of each kernel over four iterations */
    double iteration_s;             /* the iteration's kernel time */
    uint64_t capacity, host_cap;    /* GPU bytes a plan may use; host bytes offloads may hold */
    double ssd_read_Bps;            /* the array alone, at most the link (0: no SSDs) */
    double ssd_write_cached_Bps;    /* ... writing into its caches */
    double ssd_write_sustained_Bps; /* ... once the caches are spent (= cached if none) */
    int cache_modelled;
    double cache_bytes;                /* the array's write caches together */
    double ssd_mix;                    /* a byte read costs ssd_mix / read of the array's time */
    double d2h_host_Bps, h2d_host_Bps; /* the link less the SSDs' share, each way */
    double ssd_latency_s, host_latency_s;
};

int tio_vmodel_build(const struct tio_trace *trace,
                     const struct tio_hw *hw,
                     const struct tio_plan_params *pp,
                     struct tio_vmodel *m);
void tio_vmodel_free(struct tio_vmodel *m);

/* tio_vmodel_check_clean: every CLEAN offload has a current copy: SSD only, and a written
 * offload of the tensor to the SSDs precedes it (cyclically) with no write of the tensor in
 * between. 0 or TIO_EPLAN naming the move. */
int tio_vmodel_check_clean(const struct tio_vmodel *m, const struct tio_plan *plan);

/* tio_vmodel_check_bandwidth: earliest deadline first per budget in continuous time (planner_
 * verify_io.c). 0, TIO_EPLAN naming the first move that misses its deadline, TIO_ENOMEM. */
int tio_vmodel_check_bandwidth(const struct tio_vmodel *m, const struct tio_plan *plan);

/* tio_plan_verify_curves: the verifier's GPU and host memory curves of `plan` ([n] each, either
 * may be NULL), after pairing every move (errors as tio_plan_verify). For the tests that hold
 * the planners' model against this one. */
int tio_plan_verify_curves(const struct tio_plan *plan,
                           const struct tio_trace *trace,
                           const struct tio_hw *hw,
                           const struct tio_plan_params *params,
                           uint64_t *gpu,
                           uint64_t *host);

#endif
