/* Liveness, inactive periods and memory curves of a trace (teraio/analysis.h, docs/analysis.md).
 *
 * Everything is linear in n_uses + n_kernels + n_tensors, plus a radix sort of the period
 * durations per size bucket:
 *   1. kernel start times: prefix sums of durations;
 *   2. liveness (analysis/liveness.c, shared with the planners, the simulator and the executor):
 *      tensor -> use kernels, first/last use, the resident and active bytes, the periods;
 *   3. periods: counted per start kernel, then scattered in (start, tensor) order (tensors are
 *      visited ascending, so a counting sort on start is enough);
 *   4. Observation 1 over the curves.
 * Period durations use the prefix sums: [s, e) is start[e] - start[s]; a wrap-around period is
 * (start[N] - start[s]) + start[e - N].
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <teraio/analysis.h>

#include "analysis/analysis_impl.h"
#include "analysis/liveness.h"
#include "common/common_impl.h"
#include "common/radix_sort.h"

struct tio_analysis {
    const struct tio_trace *trace; /* borrowed: must outlive the analysis */
    struct tio_analysis_params params;
    struct tio_analysis_summary summary;
    size_t n_kernels, n_tensors;
    uint64_t *start_ns;                      /* [n_kernels + 1] ns, prefix sums of durations */
    struct tio_liveness lv;                  /* uses, first/last use, resident and active */
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
    return tio_enum_name(bucket_names, TIO_BUCKET_COUNT, bucket, "unknown");
}

/* The defaults tio_analysis_params_defaults hands out (the header's tio_analysis_params_default
 * goes through it). */
static struct tio_analysis_params builtin_defaults(void) {
    struct tio_analysis_params p = { .struct_size = sizeof p,
                                     .capacity_bytes = 0,
                                     .long_idle_ns = UINT64_C(10000000) };
    return p;
}

/* The first versioned struct tio_analysis_params ends with `long_idle_ns` (fixed: fields only
 * grow). */
#define ANALYSIS_PARAMS_MIN TIO_SIZE_THROUGH(struct tio_analysis_params, long_idle_ns)

int tio_analysis_params_defaults(struct tio_analysis_params *out, size_t size) {
    struct tio_analysis_params d = builtin_defaults();
    return tio_struct_out("tio_analysis_params", out, size, &d, sizeof d, ANALYSIS_PARAMS_MIN);
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

static inline uint64_t u64_key(const uint64_t *x) {
    return *x;
}

TIO_RADIX_SORT_DEFINE(radix_u64, uint64_t, u64_key)

/* Sorts a[n] ascending; `tmp` has room for n keys. Passes stop at the largest key's highest
 * digit. Returns 0, or TIO_ENOMEM. */
static int sort_u64(uint64_t *a, uint64_t *tmp, size_t n) {
    uint64_t max = 0;
    for (size_t i = 0; i < n; i++) {
        max = TIO_MAX(max, a[i]);
    }
    const uint64_t *sorted = radix_u64(a, tmp, n, max);
    if (!sorted) {
        return TIO_ENOMEM;
    }
    if (sorted != a) {
        memcpy(a, sorted, n * sizeof *a);
    }
    return 0;
}

/* Idle time of the kernels [s, e) where e may exceed N (wrap-around): tail plus head. */
static uint64_t period_ns(const uint64_t *start_ns, size_t n, uint64_t s, uint64_t e) {
    if (e <= n) {
        return start_ns[e] - start_ns[s];
    }
    return (start_ns[n] - start_ns[s]) + start_ns[e - n];
}

/* Observation 1 from the per-kernel curves. */
static void compute_curves(struct tio_analysis *a, const struct tio_trace_view *v) {
    size_t n = v->n_kernels;
    const uint64_t *res = a->lv.resident;
    struct tio_analysis_summary *s = &a->summary;
    double cap = (double)a->params.capacity_bytes;
    double sum_frac = 0, sum_cap = 0;
    size_t n_frac = 0;
    for (size_t k = 0; k < n; k++) {
        uint64_t run = res[k], act = a->lv.active[k];
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
    uint64_t *period_cnt; /* [n_kernels + 1] periods per start kernel, then scatter cursors */
    uint64_t *sort_tmp;   /* [n_periods] radix sort buffer */
};

static void scratch_free(struct scratch *w) {
    tio_free(w->period_cnt);
    tio_free(w->sort_tmp);
}

/* First pass: first/last uses, global bytes, bucket counts, periods per tensor (CSR offsets)
 * and per start kernel. Returns the number of periods. */
static uint64_t
count_periods(struct tio_analysis *a, const struct tio_trace_view *v, struct scratch *w) {
    struct tio_analysis_summary *s = &a->summary;
    uint64_t n_periods = 0;
    for (size_t t = 0; t < v->n_tensors; t++) {
        int global = (v->tensor_flags[t] & TIO_TENSOR_GLOBAL) != 0;
        if (global) {
            s->global_bytes += v->tensor_bytes[t];
        }
        a->tensor_period_off[t] = n_periods;
        int bucket = tio_size_bucket_of(v->tensor_bytes[t]);
        s->tensors_per_bucket[bucket]++;
        struct tio_liveness_iter it;
        struct tio_liveness_period p;
        tio_liveness_iter_init(&it, &a->lv, (uint32_t)t, global);
        while (tio_liveness_iter_next(&it, &p)) {
            w->period_cnt[p.start]++;
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
        int global = (v->tensor_flags[t] & TIO_TENSOR_GLOBAL) != 0;
        uint64_t bytes = v->tensor_bytes[t];
        int bucket = tio_size_bucket_of(bytes);
        int mid = bucket == TIO_BUCKET_10_100MB || bucket == TIO_BUCKET_100MB_1GB;
        uint64_t j = a->tensor_period_off[t];
        struct tio_liveness_iter it;
        struct tio_liveness_period p;
        tio_liveness_iter_init(&it, &a->lv, (uint32_t)t, global);
        while (tio_liveness_iter_next(&it, &p)) {
            uint64_t pos = w->period_cnt[p.start]++;
            uint64_t d = period_ns(a->start_ns, n, p.start, p.end);
            a->periods[pos] = (struct tio_period){ .tensor = (uint32_t)t,
                                                   .flags = p.flags,
                                                   .start = p.start,
                                                   .end = p.end,
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
    struct tio_analysis_params prm = tio_analysis_params_default();
    int rc = params
                 ? tio_struct_in("analysis: params", &prm, sizeof prm, ANALYSIS_PARAMS_MIN, params)
                 : 0;
    if (rc < 0) {
        return rc;
    }
    struct tio_trace_view v;
    if ((rc = tio_liveness_trace_view(trace, "analysis", &v)) < 0) {
        return rc;
    }
    const size_t n = v.n_kernels, nt = v.n_tensors, nu = v.n_uses;

    struct scratch w = { NULL, NULL };
    struct tio_analysis *a = tio_calloc(1, sizeof *a);
    if (!a) {
        goto nomem;
    }
    a->trace = trace;
    a->params = prm;
    a->n_kernels = n;
    a->n_tensors = nt;
    struct tio_analysis_summary *s = &a->summary;
    s->n_kernels = n;
    s->n_tensors = nt;
    s->n_uses = nu;

    a->start_ns = alloc_array(n + 1, sizeof(uint64_t));
    a->tensor_period_off = alloc_array(nt + 1, sizeof(uint64_t));
    w.period_cnt = tio_calloc(n + 1, sizeof *w.period_cnt);
    if (!a->start_ns || !a->tensor_period_off || !w.period_cnt ||
        tio_liveness_build(&v, &a->lv) < 0) {
        goto nomem;
    }

    /* 1. Kernel start times. */
    a->start_ns[0] = 0;
    for (size_t k = 0; k < n; k++) {
        a->start_ns[k + 1] = a->start_ns[k] + v.kernel_duration_ns[k];
    }
    s->iteration_ns = a->start_ns[n];

    /* 2. Uses, first/last use, resident and active bytes (analysis/liveness.h) were built
     * above. */

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
        rc = sort_u64(a->bucket_durations + a->bucket_off[b], w.sort_tmp,
                      a->bucket_off[b + 1] - a->bucket_off[b]);
        if (rc < 0) {
            goto nomem;
        }
    }

    /* 4. Memory curves and Observation 1. */
    compute_curves(a, &v);

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
    tio_liveness_free(&a->lv);
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
    return a->lv.resident;
}

const uint64_t *tio_analysis_active_bytes(const struct tio_analysis *a) {
    return a->lv.active;
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
    return tensor < a->n_tensors ? a->lv.first_use[tensor] : TIO_NEVER_USED;
}

uint64_t tio_analysis_last_use(const struct tio_analysis *a, uint32_t tensor) {
    return tensor < a->n_tensors ? a->lv.last_use[tensor] : TIO_NEVER_USED;
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

uint64_t tio_analysis_bucket_median(const struct tio_analysis *a, int bucket) {
    size_t n;
    const uint64_t *d = tio_analysis_bucket_durations(a, bucket, &n);
    return n ? d[(n - 1) / 2] : 0;
}

size_t
tio_analysis_bucket_count_above(const struct tio_analysis *a, int bucket, uint64_t threshold_ns) {
    size_t n;
    const uint64_t *d = tio_analysis_bucket_durations(a, bucket, &n);
    size_t lo = 0, hi = n; /* the first duration > threshold_ns is in [lo, hi] */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (d[mid] <= threshold_ns) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return n - lo;
}

static int cmp_idle(const void *pa, const void *pb) {
    const struct tio_idle_tensor *a = pa, *b = pb;
    if (a->longest.duration_ns != b->longest.duration_ns) {
        return a->longest.duration_ns < b->longest.duration_ns ? 1 : -1;
    }
    return (a->tensor > b->tensor) - (a->tensor < b->tensor);
}

int tio_analysis_top_idle(const struct tio_analysis *a,
                          uint64_t min_bytes,
                          struct tio_idle_tensor *out,
                          size_t max,
                          size_t *n) {
    if (!a || !n || (!out && max > 0)) {
        return tio_set_error(TIO_EINVAL, "analysis: top_idle: NULL analysis, n or out");
    }
    *n = 0;
    if (max == 0) {
        return 0;
    }
    struct tio_trace_view v;
    tio_trace_get_view(a->trace, &v);
    struct tio_idle_tensor *e = alloc_array(a->n_tensors, sizeof *e);
    if (!e) {
        return tio_set_error(TIO_ENOMEM, "analysis: top_idle: out of memory (%zu tensors)",
                             a->n_tensors);
    }
    size_t m = 0;
    for (uint32_t t = 0; t < a->n_tensors; t++) {
        const uint64_t p0 = a->tensor_period_off[t], p1 = a->tensor_period_off[t + 1];
        if (v.tensor_bytes[t] < min_bytes || p1 == p0) {
            continue;
        }
        struct tio_idle_tensor x = { .tensor = t, .n_periods = (uint32_t)(p1 - p0) };
        x.longest = a->periods[a->tensor_period_idx[p0]];
        for (uint64_t j = p0; j < p1; j++) {
            const struct tio_period *q = &a->periods[a->tensor_period_idx[j]];
            x.total_ns += q->duration_ns;
            if (q->duration_ns > x.longest.duration_ns) {
                x.longest = *q;
            }
        }
        e[m++] = x;
    }
    qsort(e, m, sizeof *e, cmp_idle);
    *n = m < max ? m : max;
    memcpy(out, e, *n * sizeof *out);
    tio_free(e);
    return 0;
}
