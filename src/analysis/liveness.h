/*
 * Private: liveness of a trace, the one definition that the analysis, the planners, the
 * simulator and the executor share (docs/code-tour.md, "Liveness"; the public definitions are in
 * teraio/analysis.h).
 *
 *   uses of tensor t:  the kernels u_0 < u_1 < ... < u_m that use it; kernels flagged in an
 *                      optional `skip` mask do not count (the simulator's kernels whose work moved
 *                      to the host, the executor's free markers).
 *   first/last use:    u_0 and u_m, or TIO_NEVER_USED (teraio/analysis.h) for a tensor with no
 *                      (counted) use: the one "never used" value of the project.
 *   resident curve:    bytes resident at each kernel with nothing offloaded: a global tensor over
 *                      the whole iteration, an intermediate over [u_0, u_m].
 *   inactive periods:  the gaps [u_i + 1, u_{i+1}) between consecutive uses, then for a global
 *                      tensor the wrap-around [u_m + 1, u_0 + N) (TIO_PERIOD_WRAPS), or [0, N)
 *                      (TIO_PERIOD_UNUSED) for a global tensor never used.
 */
#ifndef TIO_LIVENESS_H
#define TIO_LIVENESS_H

#include <stddef.h>
#include <stdint.h>

#include <teraio/analysis.h>
#include <teraio/trace.h>

/*
 * The kernel -> use CSR the liveness functions read: use_offset [n_kernels + 1] and use_tensor
 * [n_uses] (borrowed, e.g. from a struct tio_trace_view), and an optional skip mask [n_kernels]
 * (skip[k] != 0: kernel k's uses do not count; NULL: all count).
 */
struct tio_liveness_csr {
    size_t n_kernels, n_tensors;
    const uint64_t *use_offset;
    const uint32_t *use_tensor;
    const uint8_t *skip;
};

/* tio_liveness_csr_of: the CSR of a trace view with the given skip mask (may be NULL). */
struct tio_liveness_csr tio_liveness_csr_of(const struct tio_trace_view *v, const uint8_t *skip);

/*
 * tio_liveness_first_last: first[t] and last[t] [n_tensors], the first and last kernel whose uses
 * count, TIO_NEVER_USED for both when none does.
 */
void tio_liveness_first_last(const struct tio_liveness_csr *c, uint64_t *first, uint64_t *last);

/*
 * tio_liveness_next_use: next[u] for every use u [n_uses]: the next kernel after u's whose uses
 * count and that uses the same tensor, TIO_NEVER_USED if there is none in the iteration; and
 * first[t] [n_tensors] as tio_liveness_first_last sets it.
 */
void tio_liveness_next_use(const struct tio_liveness_csr *c, uint64_t *next, uint64_t *first);

/*
 * tio_liveness_resident: out[k] [v->n_kernels] = bytes resident at kernel k with nothing
 * offloaded, over the tensors t of the trace view v with exclude[t] == 0 (exclude may be NULL):
 * v->tensor_bytes[t] over the whole iteration when v->tensor_flags[t] has TIO_TENSOR_GLOBAL, over
 * [first[t], last[t]] otherwise (none when never used).
 */
void tio_liveness_resident(const struct tio_trace_view *v,
                           const uint64_t *first,
                           const uint64_t *last,
                           const uint8_t *exclude,
                           uint64_t *out);

/*
 * tio_liveness_trace_view: *v = the view of a finished trace; TIO_ESTATE "<who>: the trace is not
 * finished (call tio_trace_finish first)" for one still being built.
 */
int tio_liveness_trace_view(const struct tio_trace *trace,
                            const char *who,
                            struct tio_trace_view *v);

/* Per-tensor uses of a trace (all kernels count): the kernel -> use CSR transposed. */
struct tio_liveness {
    size_t n_kernels, n_tensors;
    size_t *use_off;      /* [n_tensors + 1] CSR offsets into use_kernel and use_mode */
    uint32_t *use_kernel; /* [n_uses] kernels, ascending per tensor */
    uint8_t *use_mode;    /* [n_uses] TIO_USE_* */
    uint64_t *first_use;  /* [n_tensors] kernel or TIO_NEVER_USED */
    uint64_t *last_use;   /* [n_tensors] kernel or TIO_NEVER_USED */
    uint64_t *resident;   /* [n_kernels] bytes, every tensor (tio_liveness_resident) */
    uint64_t *active;     /* [n_kernels] bytes of the tensors each kernel uses */
};

/* tio_liveness_build: fill *lv from a trace view. Returns 0 or TIO_ENOMEM (*lv then zeroed). */
int tio_liveness_build(const struct tio_trace_view *v, struct tio_liveness *lv);
/* tio_liveness_free: free the arrays of *lv and zero it (accepts a zeroed *lv). */
void tio_liveness_free(struct tio_liveness *lv);

/* One inactive period of a tensor (see above): kernels [start, end), end may exceed N. */
struct tio_liveness_period {
    uint64_t start, end;
    uint32_t flags;     /* TIO_PERIOD_* */
    uint32_t use_index; /* the use before the period, in the tensor's list (wrap: the last) */
};

/* Iterator over one tensor's inactive periods in time order. */
struct tio_liveness_iter {
    const uint32_t *uses; /* its use kernels, ascending */
    size_t m, n;          /* uses, kernels */
    size_t i;             /* next gap to look at */
    int global;           /* still owes its wrap-around (or unused) period */
};

/* tio_liveness_iter_init: iterate over the periods of tensor t of lv (global: TIO_TENSOR_GLOBAL).
 */
void tio_liveness_iter_init(struct tio_liveness_iter *it,
                            const struct tio_liveness *lv,
                            uint32_t t,
                            int global);
/* tio_liveness_iter_next: the next period into *p; 0 when there is none left. */
int tio_liveness_iter_next(struct tio_liveness_iter *it, struct tio_liveness_period *p);

#endif
