/*
 * teraio/analysis.h - liveness, inactive periods and memory curves of a trace (docs/analysis.md).
 *
 * Definitions (kernel indices are 0..N-1, N = n_kernels; "time" is the sum of kernel durations):
 *
 *   uses of tensor t:   u_0 < u_1 < ... < u_m (kernels that use t).
 *   intermediate t:     resident over kernels [u_0, u_m] (allocated at its first use, freed after
 *                       its last); inactive periods are the gaps between consecutive uses.
 *   global t:           resident over the whole iteration; besides the gaps, one wrap-around
 *                       period runs from after u_m to u_0 of the next iteration.
 *   inactive period:    kernels [start, end) with start = u_i + 1 and end = u_{i+1} (the next use),
 *                       only when end > start. For the wrap-around period end = u_0 + N (so
 *                       end >= N, = N when u_0 = 0; start = N when u_m = N-1; the kernels are
 *                       start..N-1 then 0..u_0-1) and it is flagged TIO_PERIOD_WRAPS. A global
 *                       tensor never used gets one period [0, N) flagged TIO_PERIOD_UNUSED.
 *   duration_ns:        sum of the durations of the period's kernels.
 *   resident_bytes[k]:  bytes of all tensors resident at kernel k if nothing is offloaded.
 *   active_bytes[k]:    bytes of the distinct tensors kernel k uses.
 *
 *     struct tio_analysis *a;
 *     if (tio_analysis_new(trace, NULL, &a) < 0) ...
 *     struct tio_analysis_summary s;
 *     tio_analysis_get_summary(a, &s);
 *     printf("peak %llu bytes at kernel %zu\n", (unsigned long long)s.peak_resident_bytes,
 *            s.peak_kernel);
 *     tio_analysis_free(a);
 *
 * The trace must outlive the analysis. Thread safety: immutable after creation.
 */
#ifndef TERAIO_ANALYSIS_H
#define TERAIO_ANALYSIS_H

#include <stddef.h>
#include <stdint.h>

#include <teraio/status.h>
#include <teraio/trace.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The first/last-use kernel of a tensor that is never used (every module uses this value). */
#define TIO_NEVER_USED UINT64_MAX

enum tio_period_flag {
    TIO_PERIOD_WRAPS = 1u << 0, /* crosses the iteration boundary (global tensors) */
    TIO_PERIOD_UNUSED = 1u << 1 /* global tensor never used in the iteration */
};

/* One inactive period (a record). */
struct tio_period {
    uint32_t tensor;      /* tensor id */
    uint32_t flags;       /* TIO_PERIOD_* */
    uint64_t start;       /* first idle kernel */
    uint64_t end;         /* next use (exclusive); >= n_kernels when the period wraps */
    uint64_t bytes;       /* tensor size in bytes */
    uint64_t duration_ns; /* idle time in ns */
};

/* Size buckets of Observation 2 (docs/analysis.md). Bounds are decimal (1 MB = 10^6 bytes). */
enum tio_size_bucket {
    TIO_BUCKET_LT_1MB = 0,    /* < 1 MB */
    TIO_BUCKET_1_10MB = 1,    /* [1 MB, 10 MB) */
    TIO_BUCKET_10_100MB = 2,  /* [10 MB, 100 MB) */
    TIO_BUCKET_100MB_1GB = 3, /* [100 MB, 1 GB) */
    TIO_BUCKET_GE_1GB = 4,    /* >= 1 GB */
    TIO_BUCKET_COUNT
};

/* tio_size_bucket_of: the bucket of a size in bytes. tio_size_bucket_name: "<1MB", "1-10MB",
 * "10-100MB", "100MB-1GB", ">=1GB". */
TIO_API int tio_size_bucket_of(uint64_t bytes);
TIO_API const char *tio_size_bucket_name(int bucket);

struct tio_analysis_params {
    /* Size of this struct as the caller's header declares it: set by
     * tio_analysis_params_default(s) (docs/style.md, "Versioned structs"). */
    uint32_t struct_size;
    uint64_t capacity_bytes; /* GPU capacity for capacity-relative fractions (0 = unknown) */
    uint64_t long_idle_ns;   /* threshold of "long idle" (default 10 ms = 10,000,000 ns) */
};

/* tio_analysis_params_defaults: fill the `size` bytes of *out (size = sizeof *out) with the
 * defaults (capacity 0, long_idle_ns 10 ms) as far as this library knows them (a newer header's
 * extra fields are zeroed), and set out->struct_size. Returns 0; TIO_EINVAL (NULL),
 * TIO_EVERSION (size below the first versioned struct tio_analysis_params). */
TIO_API int tio_analysis_params_defaults(struct tio_analysis_params *out, size_t size);
/* tio_analysis_params_default: the same by value. Inline, so that the size is the one this
 * header declares: not an exported function, whose by-value struct would be the library's size
 * (docs/style.md, "Versioned structs"). */
static inline struct tio_analysis_params tio_analysis_params_default(void) {
    struct tio_analysis_params p;
    (void)tio_analysis_params_defaults(&p, sizeof p);
    return p;
}

/* Aggregates; the JSON output of `teraio analyze --json` uses the same names. */
struct tio_analysis_summary {
    size_t n_kernels;
    size_t n_tensors;
    size_t n_uses;
    size_t n_periods;                     /* inactive periods, wrap-around ones included */
    uint64_t iteration_ns;                /* sum of kernel durations */
    uint64_t global_bytes;                /* bytes of global tensors */
    uint64_t peak_resident_bytes;         /* max over k of resident_bytes[k] */
    size_t peak_kernel;                   /* first kernel where the peak is reached */
    uint64_t peak_active_bytes;           /* max over k of active_bytes[k] */
    double active_fraction_mean;          /* mean over kernels of active/resident (Observation 1);
                                              kernels with resident 0 are left out */
    double active_fraction_max;           /* max over kernels of active/resident */
    double active_capacity_fraction_mean; /* mean of active/capacity (0 if capacity unknown) */
    double active_capacity_fraction_max;  /* max of active/capacity (0 if capacity unknown) */
    double long_idle_fraction_10mb_1gb;   /* among periods of tensors of [10 MB, 1 GB): the
                                              fraction idle longer than long_idle_ns
                                              (Observation 2); 0 if there are none */
    size_t periods_per_bucket[TIO_BUCKET_COUNT]; /* number of periods in each size bucket */
    size_t tensors_per_bucket[TIO_BUCKET_COUNT]; /* number of tensors in each size bucket */
};

struct tio_analysis;

/*
 * tio_analysis_new: analyse a finished trace (`params` may be NULL). O(n_uses + n_kernels) time
 * plus a sort of the periods per bucket. Returns 0, TIO_ESTATE (trace not finished),
 * TIO_EVERSION (params->struct_size: fill params with tio_analysis_params_default(s) first),
 * TIO_ENOMEM. Free with tio_analysis_free.
 */
TIO_API TIO_MUST_CHECK int tio_analysis_new(const struct tio_trace *trace,
                                            const struct tio_analysis_params *params,
                                            struct tio_analysis **out);

/* tio_analysis_free: accepts NULL. */
TIO_API void tio_analysis_free(struct tio_analysis *analysis);

/* tio_analysis_get_summary: fill *out. */
TIO_API void tio_analysis_get_summary(const struct tio_analysis *analysis,
                                      struct tio_analysis_summary *out);

/* Per-kernel arrays, [n_kernels] each, owned by the analysis. */
TIO_API const uint64_t *tio_analysis_resident_bytes(const struct tio_analysis *analysis);
TIO_API const uint64_t *tio_analysis_active_bytes(const struct tio_analysis *analysis);
/* kernel start times: [n_kernels + 1] prefix sums of durations in ns (start[0] = 0,
 * start[N] = iteration_ns). */
TIO_API const uint64_t *tio_analysis_kernel_start_ns(const struct tio_analysis *analysis);

/* tio_analysis_periods: all inactive periods sorted by (start, tensor); *n their count. */
TIO_API const struct tio_period *tio_analysis_periods(const struct tio_analysis *analysis,
                                                      size_t *n);

/*
 * tio_analysis_tensor_periods: the periods of one tensor, as indices into the array returned by
 * tio_analysis_periods, in time order; *n their count. NULL with *n = 0 if it has none.
 */
TIO_API const uint32_t *
tio_analysis_tensor_periods(const struct tio_analysis *analysis, uint32_t tensor, size_t *n);

/* tio_analysis_first_use / last_use: kernel of the first / last use of a tensor; TIO_NEVER_USED
 * (UINT64_MAX) if it is never used. */
TIO_API uint64_t tio_analysis_first_use(const struct tio_analysis *analysis, uint32_t tensor);
TIO_API uint64_t tio_analysis_last_use(const struct tio_analysis *analysis, uint32_t tensor);

/* One of the tensors idle the longest (a record; tio_analysis_top_idle). */
struct tio_idle_tensor {
    uint32_t tensor;           /* tensor id */
    uint32_t n_periods;        /* its inactive periods */
    uint64_t total_ns;         /* the sum of their durations in ns */
    struct tio_period longest; /* its longest period (the earliest of equal ones) */
};

/*
 * tio_analysis_top_idle: the tensors of at least min_bytes bytes that have an inactive period,
 * ranked by their longest period (longest first; ties: the lower tensor id); the first `max` of
 * them into out[0..*n). `teraio analyze` and teraio.Analysis.summary() list them with min_bytes
 * 10 MB (10^7 bytes). O(n_periods + n_tensors log n_tensors). Returns 0, TIO_EINVAL (NULL
 * analysis or n, or NULL out with max > 0) or TIO_ENOMEM.
 */
TIO_API TIO_MUST_CHECK int tio_analysis_top_idle(const struct tio_analysis *analysis,
                                                 uint64_t min_bytes,
                                                 struct tio_idle_tensor *out,
                                                 size_t max,
                                                 size_t *n);

/*
 * tio_analysis_liveness: the liveness of a finished trace without an analysis object (the
 * definitions above; the Python layer checks budgets and schedules releases with it).
 * first[t], last[t] [n_tensors]: the first and last kernel that uses tensor t, TIO_NEVER_USED
 * when none does; the kernels named skip_kernel (NULL: none, e.g. TIO_RUNTIME_FREE_KERNEL) do not
 * count. resident [n_kernels] (NULL: not wanted): the bytes resident at each kernel with nothing
 * offloaded, a global tensor always and another from its first to its last use as above, over
 * the tensors with exclude[t] == 0 (exclude [n_tensors] or NULL: every tensor). Returns 0,
 * TIO_EINVAL (NULL trace, first or last), TIO_ESTATE (trace not finished) or TIO_ENOMEM.
 */
TIO_API TIO_MUST_CHECK int tio_analysis_liveness(const struct tio_trace *trace,
                                                 const char *skip_kernel,
                                                 const uint8_t *exclude,
                                                 uint64_t *first,
                                                 uint64_t *last,
                                                 uint64_t *resident);

/*
 * tio_analysis_bucket_durations: the sorted (ascending) period durations in ns of one size
 * bucket, for CDF plots; *n their count.
 */
TIO_API const uint64_t *
tio_analysis_bucket_durations(const struct tio_analysis *analysis, int bucket, size_t *n);

/*
 * tio_analysis_bucket_median: the lower median period duration in ns of one size bucket, an
 * actual period's duration (element (n-1)/2 of tio_analysis_bucket_durations: of 4 periods the
 * 2nd shortest); 0 when the bucket has no period or is out of range. O(1).
 *
 * tio_analysis_bucket_count_above: how many periods of one size bucket last strictly longer than
 * threshold_ns (`teraio analyze` and teraio.Analysis.summary() list them per bucket with the
 * analysis's long_idle_ns); 0 when the bucket is out of range. O(log n), a binary search of the
 * sorted durations.
 */
TIO_API uint64_t tio_analysis_bucket_median(const struct tio_analysis *analysis, int bucket);
TIO_API size_t tio_analysis_bucket_count_above(const struct tio_analysis *analysis,
                                               int bucket,
                                               uint64_t threshold_ns);

/*
 * tio_analysis_write_csv: write memory.csv (kernel, start_ns, duration_ns, resident_bytes,
 * active_bytes), periods.csv (tensor, kind, bytes, start, end, duration_ns, wraps,
 * min_bandwidth_Bps = 2*bytes/duration) and cdf.csv (bucket, duration_ns, fraction) into an
 * existing or newly created directory. Returns 0 or -errno (detail names the file).
 */
TIO_API TIO_MUST_CHECK int tio_analysis_write_csv(const struct tio_analysis *analysis,
                                                  const char *dir);

#ifdef __cplusplus
}
#endif
#endif
