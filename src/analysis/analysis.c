/* Liveness, inactive periods and memory curves of a trace (teraio/analysis.h, DESIGN.md s.5).
 *
 * Everything is linear in n_uses + n_kernels + n_tensors, plus a radix sort of the period
 * durations per size bucket:
 *   1. kernel start times: prefix sums of durations;
 *   2. tensor -> use kernels: counting-sort transpose of the kernel -> use CSR (kernels come out
 *      ascending per tensor because the kernels are scanned in order);
 *   3. periods: counted per start kernel, then scattered in (start, tensor) order (tensors are
 *      visited ascending, so a counting sort on start is enough);
 *   4. resident bytes: a difference array over [first use, last use] of intermediates plus the
 *      global bytes everywhere; active bytes: one pass over the uses.
 * Period durations use the prefix sums: [s, e) is start[e] - start[s]; a wrap-around period is
 * (start[N] - start[s]) + start[e - N].
 */
#include <math.h>
#include <string.h>

#include <teraio/analysis.h>

#include "analysis/analysis_impl.h"
#include "common/common_impl.h"

struct tio_analysis {
    const struct tio_trace *trace; /* borrowed: must outlive the analysis */
    struct tio_analysis_params params;
    struct tio_analysis_summary summary;
    size_t n_kernels, n_tensors;
    uint64_t *start_ns;                      /* [n_kernels + 1] ns, prefix sums of durations */
    uint64_t *resident_bytes;                /* [n_kernels] bytes */
    uint64_t *active_bytes;                  /* [n_kernels] bytes */
    uint32_t *first_use;                     /* [n_tensors] kernel, UINT32_MAX if never used */
    uint32_t *last_use;                      /* [n_tensors] kernel, UINT32_MAX if never used */
    struct tio_period *periods;              /* [n_periods] sorted by (start, tensor) */
    uint64_t *tensor_period_off;             /* [n_tensors + 1] CSR into tensor_period_idx */
    uint32_t *tensor_period_idx;             /* [n_periods] indices into periods, time order */
    uint64_t *bucket_durations;              /* [n_periods] ns, grouped by bucket, sorted in each */
    size_t bucket_off[TIO_BUCKET_COUNT + 1]; /* offsets into bucket_durations */
};

static const char *const bucket_names[TIO_BUCKET_COUNT] = {
    [TIO_BUCKET_LT_1MB] = "<1MB",       [TIO_BUCKET_1_10MB] = "1-10MB",
    [TIO_BUCKET_10_100MB] = "10-100MB", [TIO_BUCKET_100MB_1GB] = "100MB-1GB",
    [TIO_BUCKET_GE_1GB] = ">=1GB",
};
_Static_assert(TIO_ARRAY_LEN(bucket_names) == TIO_BUCKET_COUNT, "bucket name table");

int tio_size_bucket_of(uint64_t bytes) {
    if (bytes < UINT64_C(1000000)) {
        return TIO_BUCKET_LT_1MB;
    }
    if (bytes < UINT64_C(10000000)) {
        return TIO_BUCKET_1_10MB;
    }
    if (bytes < UINT64_C(100000000)) {
        return TIO_BUCKET_10_100MB;
    }
    if (bytes < UINT64_C(1000000000)) {
        return TIO_BUCKET_100MB_1GB;
    }
    return TIO_BUCKET_GE_1GB;
}

const char *tio_size_bucket_name(int bucket) {
    if (bucket < 0 || bucket >= TIO_BUCKET_COUNT) {
        return "unknown";
    }
    return bucket_names[bucket];
}

struct tio_analysis_params tio_analysis_params_default(void) {
    struct tio_analysis_params p = { .capacity_bytes = 0, .long_idle_ns = UINT64_C(10000000) };
    return p;
}

/* Allocate n elements of `elem` bytes (at least one element, so that pointers are never NULL
 * for empty traces); NULL on overflow or failure. */
static void *alloc_array(size_t n, size_t elem) {
    size_t bytes;
    if (__builtin_mul_overflow(n ? n : 1, elem, &bytes)) {
        return NULL;
    }
    return tio_malloc(bytes);
}

/*
 * LSD radix sort of n keys, 11 bits per pass: the histograms of every pass come from one read of
 * the keys, and a pass whose digit is the same for every key is skipped. `tmp` has room for n
 * keys. The result ends up in `a`.
 */
static int radix_sort_u64(uint64_t *a, uint64_t *tmp, size_t n) {
    enum { BITS = 11, RADIX = 1 << BITS, PASSES = (64 + BITS - 1) / BITS };
    size_t *count = tio_calloc((size_t)PASSES * RADIX, sizeof *count);
    if (!count) {
        return TIO_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t x = a[i];
        for (int p = 0; p < PASSES; p++) {
            count[(size_t)p * RADIX + ((x >> (p * BITS)) & (RADIX - 1))]++;
        }
    }
    uint64_t *src = a, *dst = tmp;
    for (int p = 0; p < PASSES; p++) {
        size_t *c = count + (size_t)p * RADIX;
        unsigned shift = (unsigned)(p * BITS);
        if (n == 0 || c[(src[0] >> shift) & (RADIX - 1)] == n) {
            continue; /* every key has the same digit here */
        }
        size_t sum = 0;
        for (size_t d = 0; d < RADIX; d++) {
            size_t k = c[d];
            c[d] = sum;
            sum += k;
        }
        for (size_t i = 0; i < n; i++) {
            dst[c[(src[i] >> shift) & (RADIX - 1)]++] = src[i];
        }
        uint64_t *swap = src;
        src = dst;
        dst = swap;
    }
    if (src != a) {
        memcpy(a, src, n * sizeof *a);
    }
    tio_free(count);
    return 0;
}

/* Idle time of the kernels [s, e) where e may exceed N (wrap-around): tail plus head. */
static uint64_t period_ns(const uint64_t *start_ns, size_t n, uint64_t s, uint64_t e) {
    if (e <= n) {
        return start_ns[e] - start_ns[s];
    }
    return (start_ns[n] - start_ns[s]) + start_ns[e - n];
}

/*
 * Iterator over the inactive periods of one tensor, in time order: the gaps between consecutive
 * uses, then the wrap-around period of a global tensor (or [0, N) for a global never used).
 * `uses` are the kernels of its m uses, ascending.
 */
struct period_iter {
    const uint32_t *uses;
    size_t m, n; /* uses, kernels */
    size_t i;    /* next gap to look at */
    int global;  /* still owes its wrap-around (or unused) period */
};

static void
period_iter_init(struct period_iter *it, const uint32_t *uses, size_t m, size_t n, int global) {
    *it = (struct period_iter){ .uses = uses, .m = m, .n = n, .i = 0, .global = global };
}

/* Next period into *s, *e, *flags; 0 when there is none left. */
static int period_next(struct period_iter *it, uint64_t *s, uint64_t *e, uint32_t *flags) {
    while (it->i + 1 < it->m) {
        uint64_t ps = (uint64_t)it->uses[it->i] + 1, pe = it->uses[it->i + 1];
        it->i++;
        if (pe > ps) {
            *s = ps;
            *e = pe;
            *flags = 0;
            return 1;
        }
    }
    if (it->global) {
        it->global = 0;
        if (it->m == 0) {
            *s = 0;
            *e = it->n;
            *flags = TIO_PERIOD_UNUSED;
        } else {
            /* After the last use to the first use of the next iteration. When the first use is
             * kernel 0 the period ends exactly at N: it still ends in the next iteration. */
            *s = (uint64_t)it->uses[it->m - 1] + 1;
            *e = (uint64_t)it->uses[0] + it->n;
            *flags = TIO_PERIOD_WRAPS;
        }
        if (*e > *s) {
            return 1;
        }
    }
    return 0;
}

/* Per-kernel curves and Observation 1. */
static void
compute_curves(struct tio_analysis *a, const struct tio_trace_view *v, uint64_t global_bytes) {
    size_t n = v->n_kernels;
    uint64_t *res = a->resident_bytes;
    /* Difference array (modular arithmetic: every partial sum is a true resident size, which
     * fits in 64 bits because the trace's total bytes do). */
    memset(res, 0, n * sizeof *res);
    for (size_t t = 0; t < v->n_tensors; t++) {
        if ((v->tensor_flags[t] & TIO_TENSOR_GLOBAL) || a->first_use[t] == UINT32_MAX) {
            continue;
        }
        res[a->first_use[t]] += v->tensor_bytes[t];
        if ((size_t)a->last_use[t] + 1 < n) {
            res[a->last_use[t] + 1] -= v->tensor_bytes[t];
        }
    }
    uint64_t run = global_bytes;
    struct tio_analysis_summary *s = &a->summary;
    double cap = (double)a->params.capacity_bytes;
    double sum_frac = 0, sum_cap = 0;
    size_t n_frac = 0;
    for (size_t k = 0; k < n; k++) {
        run += res[k];
        res[k] = run;
        uint64_t act = 0;
        for (uint64_t u = v->kernel_use_offset[k]; u < v->kernel_use_offset[k + 1]; u++) {
            act += v->tensor_bytes[v->use_tensor[u]];
        }
        a->active_bytes[k] = act;
        if (run > s->peak_resident_bytes) {
            s->peak_resident_bytes = run;
            s->peak_kernel = k;
        }
        s->peak_active_bytes = TIO_MAX(s->peak_active_bytes, act);
        if (run > 0) {
            double f = (double)act / (double)run;
            sum_frac += f;
            n_frac++;
            s->active_fraction_max = fmax(s->active_fraction_max, f);
        }
        if (cap > 0) {
            double f = (double)act / cap;
            sum_cap += f;
            s->active_capacity_fraction_max = fmax(s->active_capacity_fraction_max, f);
        }
    }
    /* Kernels with nothing resident (hence nothing active) are left out of the mean. */
    s->active_fraction_mean = n_frac ? sum_frac / (double)n_frac : 0.0;
    s->active_capacity_fraction_mean = (cap > 0 && n) ? sum_cap / (double)n : 0.0;
}

/* Working arrays of tio_analysis_new, freed before it returns. */
struct scratch {
    uint64_t *use_off;    /* [n_tensors + 1] tensor -> use CSR offsets */
    uint32_t *use_kern;   /* [n_uses] kernel of each use, grouped by tensor, ascending */
    uint64_t *period_cnt; /* [n_kernels + 1] periods per start kernel, then scatter cursors */
    uint64_t *sort_tmp;   /* [n_periods] radix sort buffer */
};

static void scratch_free(struct scratch *w) {
    tio_free(w->use_off);
    tio_free(w->use_kern);
    tio_free(w->period_cnt);
    tio_free(w->sort_tmp);
}

/* Transpose the kernel -> use CSR: count per tensor, prefix sums, scatter the kernels in order
 * (so each tensor's list comes out sorted). use_off must be zeroed. */
static void transpose_uses(const struct tio_trace_view *v, struct scratch *w) {
    uint64_t *off = w->use_off;
    for (size_t u = 0; u < v->n_uses; u++) {
        off[v->use_tensor[u] + 1]++;
    }
    for (size_t t = 0; t < v->n_tensors; t++) {
        off[t + 1] += off[t];
    }
    for (size_t k = 0; k < v->n_kernels; k++) {
        for (uint64_t u = v->kernel_use_offset[k]; u < v->kernel_use_offset[k + 1]; u++) {
            w->use_kern[off[v->use_tensor[u]]++] = (uint32_t)k;
        }
    }
    /* The scatter advanced each offset to the next tensor's start: shift back by one. */
    for (size_t t = v->n_tensors; t > 0; t--) {
        off[t] = off[t - 1];
    }
    off[0] = 0;
}

/* First pass: first/last uses, global bytes, bucket counts, periods per tensor (CSR offsets)
 * and per start kernel. Returns the number of periods. */
static uint64_t
count_periods(struct tio_analysis *a, const struct tio_trace_view *v, struct scratch *w) {
    struct tio_analysis_summary *s = &a->summary;
    uint64_t n_periods = 0;
    for (size_t t = 0; t < v->n_tensors; t++) {
        const uint32_t *uk = w->use_kern + w->use_off[t];
        size_t m = (size_t)(w->use_off[t + 1] - w->use_off[t]);
        int global = (v->tensor_flags[t] & TIO_TENSOR_GLOBAL) != 0;
        a->first_use[t] = m ? uk[0] : UINT32_MAX;
        a->last_use[t] = m ? uk[m - 1] : UINT32_MAX;
        if (global) {
            s->global_bytes += v->tensor_bytes[t];
        }
        a->tensor_period_off[t] = n_periods;
        int bucket = tio_size_bucket_of(v->tensor_bytes[t]);
        s->tensors_per_bucket[bucket]++;
        struct period_iter it;
        uint64_t ps, pe;
        uint32_t pflags;
        period_iter_init(&it, uk, m, v->n_kernels, global);
        while (period_next(&it, &ps, &pe, &pflags)) {
            w->period_cnt[ps]++;
            n_periods++;
            s->periods_per_bucket[bucket]++;
        }
    }
    a->tensor_period_off[v->n_tensors] = n_periods;
    return n_periods;
}

/* Second pass: exclusive prefix sums of the per-start counts become cursors; tensors are visited
 * ascending, so equal starts come out in tensor order. Also fills the per-tensor index, the
 * bucket durations (unsorted) and Observation 2. */
static void
scatter_periods(struct tio_analysis *a, const struct tio_trace_view *v, struct scratch *w) {
    const size_t n = v->n_kernels;
    uint64_t sum = 0;
    for (size_t k = 0; k <= n; k++) {
        uint64_t c = w->period_cnt[k];
        w->period_cnt[k] = sum;
        sum += c;
    }
    a->bucket_off[0] = 0;
    for (int b = 0; b < TIO_BUCKET_COUNT; b++) {
        a->bucket_off[b + 1] = a->bucket_off[b] + a->summary.periods_per_bucket[b];
    }
    size_t fill[TIO_BUCKET_COUNT];
    memcpy(fill, a->bucket_off, sizeof fill);
    uint64_t long_idle = 0, mid_periods = 0;
    for (size_t t = 0; t < v->n_tensors; t++) {
        const uint32_t *uk = w->use_kern + w->use_off[t];
        size_t m = (size_t)(w->use_off[t + 1] - w->use_off[t]);
        int global = (v->tensor_flags[t] & TIO_TENSOR_GLOBAL) != 0;
        uint64_t bytes = v->tensor_bytes[t];
        int bucket = tio_size_bucket_of(bytes);
        int mid = bucket == TIO_BUCKET_10_100MB || bucket == TIO_BUCKET_100MB_1GB;
        uint64_t j = a->tensor_period_off[t];
        struct period_iter it;
        uint64_t ps, pe;
        uint32_t pflags;
        period_iter_init(&it, uk, m, n, global);
        while (period_next(&it, &ps, &pe, &pflags)) {
            uint64_t pos = w->period_cnt[ps]++;
            uint64_t d = period_ns(a->start_ns, n, ps, pe);
            a->periods[pos] = (struct tio_period){ .tensor = (uint32_t)t,
                                                   .flags = pflags,
                                                   .start = ps,
                                                   .end = pe,
                                                   .bytes = bytes,
                                                   .duration_ns = d };
            a->tensor_period_idx[j++] = (uint32_t)pos;
            a->bucket_durations[fill[bucket]++] = d;
            if (mid) {
                mid_periods++;
                long_idle += d > a->params.long_idle_ns;
            }
        }
    }
    a->summary.long_idle_fraction_10mb_1gb =
        mid_periods ? (double)long_idle / (double)mid_periods : 0.0;
}

int tio_analysis_new(const struct tio_trace *trace,
                     const struct tio_analysis_params *params,
                     struct tio_analysis **out) {
    if (!trace || !out) {
        return tio_set_error(TIO_EINVAL, "analysis: NULL trace or output pointer");
    }
    *out = NULL;
    if (!tio_trace_is_finished(trace)) {
        return tio_set_error(TIO_ESTATE, "analysis: the trace is not finished "
                                         "(call tio_trace_finish first)");
    }
    struct tio_trace_view v;
    tio_trace_get_view(trace, &v);
    const size_t n = v.n_kernels, nt = v.n_tensors, nu = v.n_uses;

    int rc = TIO_ENOMEM;
    struct scratch w = { NULL, NULL, NULL, NULL };
    struct tio_analysis *a = tio_calloc(1, sizeof *a);
    if (!a) {
        goto nomem;
    }
    a->trace = trace;
    a->params = params ? *params : tio_analysis_params_default();
    a->n_kernels = n;
    a->n_tensors = nt;
    struct tio_analysis_summary *s = &a->summary;
    s->n_kernels = n;
    s->n_tensors = nt;
    s->n_uses = nu;

    a->start_ns = alloc_array(n + 1, sizeof(uint64_t));
    a->resident_bytes = alloc_array(n, sizeof(uint64_t));
    a->active_bytes = alloc_array(n, sizeof(uint64_t));
    a->first_use = alloc_array(nt, sizeof(uint32_t));
    a->last_use = alloc_array(nt, sizeof(uint32_t));
    a->tensor_period_off = alloc_array(nt + 1, sizeof(uint64_t));
    w.use_off = tio_calloc(nt + 1, sizeof *w.use_off);
    w.use_kern = alloc_array(nu, sizeof *w.use_kern);
    w.period_cnt = tio_calloc(n + 1, sizeof *w.period_cnt);
    if (!a->start_ns || !a->resident_bytes || !a->active_bytes || !a->first_use || !a->last_use ||
        !a->tensor_period_off || !w.use_off || !w.use_kern || !w.period_cnt) {
        goto nomem;
    }

    /* 1. Kernel start times. */
    a->start_ns[0] = 0;
    for (size_t k = 0; k < n; k++) {
        a->start_ns[k + 1] = a->start_ns[k] + v.kernel_duration_ns[k];
    }
    s->iteration_ns = a->start_ns[n];

    /* 2. Tensor -> use kernels. */
    transpose_uses(&v, &w);

    /* 3. Periods: count, allocate, scatter, sort the bucket durations. */
    uint64_t n_periods = count_periods(a, &v, &w);
    if (n_periods > UINT32_MAX) {
        rc = tio_set_error(TIO_ENOMEM,
                           "analysis: %llu inactive periods exceed the 2^32 limit of the "
                           "period index",
                           (unsigned long long)n_periods);
        goto fail;
    }
    s->n_periods = (size_t)n_periods;
    a->periods = alloc_array(s->n_periods, sizeof *a->periods);
    a->tensor_period_idx = alloc_array(s->n_periods, sizeof *a->tensor_period_idx);
    a->bucket_durations = alloc_array(s->n_periods, sizeof *a->bucket_durations);
    w.sort_tmp = alloc_array(s->n_periods, sizeof *w.sort_tmp);
    if (!a->periods || !a->tensor_period_idx || !a->bucket_durations || !w.sort_tmp) {
        goto nomem;
    }
    scatter_periods(a, &v, &w);
    for (int b = 0; b < TIO_BUCKET_COUNT; b++) {
        rc = radix_sort_u64(a->bucket_durations + a->bucket_off[b], w.sort_tmp,
                            a->bucket_off[b + 1] - a->bucket_off[b]);
        if (rc < 0) {
            goto nomem;
        }
    }

    /* 4. Memory curves and Observation 1. */
    compute_curves(a, &v, s->global_bytes);

    scratch_free(&w);
    *out = a;
    return 0;

nomem:
    rc = tio_set_error(TIO_ENOMEM, "analysis: out of memory (%zu kernels, %zu tensors, %zu uses)",
                       n, nt, nu);
fail:
    scratch_free(&w);
    tio_analysis_free(a);
    return rc;
}

void tio_analysis_free(struct tio_analysis *a) {
    if (!a) {
        return;
    }
    tio_free(a->start_ns);
    tio_free(a->resident_bytes);
    tio_free(a->active_bytes);
    tio_free(a->first_use);
    tio_free(a->last_use);
    tio_free(a->periods);
    tio_free(a->tensor_period_off);
    tio_free(a->tensor_period_idx);
    tio_free(a->bucket_durations);
    tio_free(a);
}

const struct tio_trace *tio_analysis_borrowed_trace(const struct tio_analysis *a) {
    return a->trace;
}

void tio_analysis_get_summary(const struct tio_analysis *a, struct tio_analysis_summary *out) {
    *out = a->summary;
}

const uint64_t *tio_analysis_resident_bytes(const struct tio_analysis *a) {
    return a->resident_bytes;
}

const uint64_t *tio_analysis_active_bytes(const struct tio_analysis *a) {
    return a->active_bytes;
}

const uint64_t *tio_analysis_kernel_start_ns(const struct tio_analysis *a) {
    return a->start_ns;
}

const struct tio_period *tio_analysis_periods(const struct tio_analysis *a, size_t *n) {
    if (n) {
        *n = a->summary.n_periods;
    }
    return a->periods;
}

const uint32_t *
tio_analysis_tensor_periods(const struct tio_analysis *a, uint32_t tensor, size_t *n) {
    if (tensor >= a->n_tensors ||
        a->tensor_period_off[tensor + 1] == a->tensor_period_off[tensor]) {
        if (n) {
            *n = 0;
        }
        return NULL;
    }
    if (n) {
        *n = (size_t)(a->tensor_period_off[tensor + 1] - a->tensor_period_off[tensor]);
    }
    return a->tensor_period_idx + a->tensor_period_off[tensor];
}

uint64_t tio_analysis_first_use(const struct tio_analysis *a, uint32_t tensor) {
    if (tensor >= a->n_tensors || a->first_use[tensor] == UINT32_MAX) {
        return UINT64_MAX;
    }
    return a->first_use[tensor];
}

uint64_t tio_analysis_last_use(const struct tio_analysis *a, uint32_t tensor) {
    if (tensor >= a->n_tensors || a->last_use[tensor] == UINT32_MAX) {
        return UINT64_MAX;
    }
    return a->last_use[tensor];
}

const uint64_t *tio_analysis_bucket_durations(const struct tio_analysis *a, int bucket, size_t *n) {
    if (bucket < 0 || bucket >= TIO_BUCKET_COUNT) {
        if (n) {
            *n = 0;
        }
        return NULL;
    }
    if (n) {
        *n = a->bucket_off[bucket + 1] - a->bucket_off[bucket];
    }
    return a->bucket_durations + a->bucket_off[bucket];
}
