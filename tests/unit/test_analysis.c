/* Lifetime analysis: hand-computed fixtures (periods with wrap-around, memory curves, summary,
 * buckets, CSV). The naive O(N*T) reference on random traces is test_analysis_reference.c. */
#include <errno.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

#include <teraio/teraio.h>

#include "tio_test.h"

#define TIO_ARRAY_LEN_T(a) (sizeof(a) / sizeof((a)[0]))

/* ---- Building fixtures ---------------------------------------------------------------------- */

struct tensor_spec {
    uint64_t bytes;
    int32_t kind;
    uint32_t flags;
};

/* Build a finished trace: kernel k has duration dur[k] and uses uses[k][0..] (terminated by -1). */
static struct tio_trace *build(size_t n_tensors,
                               const struct tensor_spec *tensors,
                               size_t n_kernels,
                               const uint64_t *dur,
                               const int uses[][8]) {
    struct tio_trace *tr = NULL;
    if (tio_trace_new(NULL, &tr) < 0) {
        return NULL;
    }
    for (size_t t = 0; t < n_tensors; t++) {
        char name[32];
        (void)snprintf(name, sizeof name, "t%zu", t);
        if (tio_trace_add_tensor(tr, tensors[t].bytes, tensors[t].kind, tensors[t].flags, name,
                                 NULL) < 0) {
            goto fail;
        }
    }
    for (size_t k = 0; k < n_kernels; k++) {
        char name[32];
        (void)snprintf(name, sizeof name, "k%zu", k);
        if (tio_trace_add_kernel(tr, name, dur[k], 0, NULL) < 0) {
            goto fail;
        }
        for (int i = 0; i < 8 && uses[k][i] >= 0; i++) {
            if (tio_trace_add_use(tr, (uint32_t)uses[k][i], TIO_USE_READ) < 0) {
                goto fail;
            }
        }
    }
    if (tio_trace_finish(tr) < 0) {
        goto fail;
    }
    return tr;
fail:
    printf("  fixture: %s\n", tio_last_error());
    tio_trace_free(tr);
    return NULL;
}

#define G TIO_TENSOR_GLOBAL

/*
 * Fixture A: 6 kernels, durations 10..60 ns (start_ns = 0 10 30 60 100 150 210).
 *
 *   t0 global 100 B weight       uses k1 k4
 *   t1 global 200 B optim_state  uses k2           (used once: wraps from k3 to k2+6)
 *   t2 global 400 B weight       never used        ([0, 6) UNUSED)
 *   t3        1000 B activation  uses k0 k3
 *   t4        2000 B activation  uses k3 k4 k5     (consecutive: no period)
 *   t5 global 50 B grad          uses k0 k5        (wrap start 6 = end 6: no wrap period)
 *   t6 global 10 B weight        uses k0 k2        (wrap [3, 6): ends exactly at N, WRAPS)
 *   t7 global 5 B weight         uses k3 k5        (wrap [6, 9): starts at N)
 *   t8        3000 B temp        never used        (never resident, no period)
 *
 *   k0: t3 t5 t6   k1: t0   k2: t1 t6   k3: t3 t4 t7   k4: t0 t4   k5: t4 t5 t7
 */
static const struct tensor_spec fix_a_tensors[] = {
    { 100, TIO_TENSOR_WEIGHT, G },      { 200, TIO_TENSOR_OPTIM_STATE, G },
    { 400, TIO_TENSOR_WEIGHT, G },      { 1000, TIO_TENSOR_ACTIVATION, 0 },
    { 2000, TIO_TENSOR_ACTIVATION, 0 }, { 50, TIO_TENSOR_GRAD, G },
    { 10, TIO_TENSOR_WEIGHT, G },       { 5, TIO_TENSOR_WEIGHT, G },
    { 3000, TIO_TENSOR_TEMP, 0 },
};
static const uint64_t fix_a_dur[] = { 10, 20, 30, 40, 50, 60 };
static const int fix_a_uses[][8] = {
    { 3, 5, 6, -1 }, { 0, -1 }, { 1, 6, -1 }, { 3, 4, 7, -1 }, { 0, 4, -1 }, { 4, 5, 7, -1 },
};

static struct tio_trace *fixture_a(void) {
    return build(9, fix_a_tensors, 6, fix_a_dur, fix_a_uses);
}

/*
 * Expected periods of fixture A, sorted by (start, tensor):
 *   t0: gap [2,4) = k2+k3 = 30+40 = 70;  wrap [5,7) = k5+k0 = 60+10 = 70
 *   t1: wrap [3,8) = k3 k4 k5 k0 k1 = 40+50+60+10+20 = 180
 *   t2: [0,6) unused = 210
 *   t3: gap [1,3) = 20+30 = 50
 *   t5: gap [1,5) = 20+30+40+50 = 140
 *   t6: gap [1,2) = 20;  wrap [3,6) = 40+50+60 = 150
 *   t7: gap [4,5) = 50;  wrap [6,9) = k0 k1 k2 = 10+20+30 = 60
 */
static const struct tio_period fix_a_periods[] = {
    { 2, TIO_PERIOD_UNUSED, 0, 6, 400, 210 },
    { 3, 0, 1, 3, 1000, 50 },
    { 5, 0, 1, 5, 50, 140 },
    { 6, 0, 1, 2, 10, 20 },
    { 0, 0, 2, 4, 100, 70 },
    { 1, TIO_PERIOD_WRAPS, 3, 8, 200, 180 },
    { 6, TIO_PERIOD_WRAPS, 3, 6, 10, 150 },
    { 7, 0, 4, 5, 5, 50 },
    { 0, TIO_PERIOD_WRAPS, 5, 7, 100, 70 },
    { 7, TIO_PERIOD_WRAPS, 6, 9, 5, 60 },
};

TIO_TEST(fixture_a_periods) {
    struct tio_trace *tr = fixture_a();
    REQUIRE(tr != NULL);
    struct tio_analysis *a = NULL;
    CHECK_OK(tio_analysis_new(tr, NULL, &a));
    REQUIRE_OR(a != NULL, tio_trace_free(tr));
    size_t n = 0;
    const struct tio_period *p = tio_analysis_periods(a, &n);
    CHECK_EQ_U(n, TIO_ARRAY_LEN_T(fix_a_periods));
    for (size_t i = 0; i < n && i < TIO_ARRAY_LEN_T(fix_a_periods); i++) {
        const struct tio_period *e = &fix_a_periods[i];
        if (p[i].tensor != e->tensor || p[i].flags != e->flags || p[i].start != e->start ||
            p[i].end != e->end || p[i].bytes != e->bytes || p[i].duration_ns != e->duration_ns) {
            TIO_T_FAIL("period %zu: got t%u f%u [%llu,%llu) %llu B %llu ns, want t%u f%u "
                       "[%llu,%llu) %llu B %llu ns",
                       i, p[i].tensor, p[i].flags, (unsigned long long)p[i].start,
                       (unsigned long long)p[i].end, (unsigned long long)p[i].bytes,
                       (unsigned long long)p[i].duration_ns, e->tensor, e->flags,
                       (unsigned long long)e->start, (unsigned long long)e->end,
                       (unsigned long long)e->bytes, (unsigned long long)e->duration_ns);
        }
    }
    /* Per-tensor period indices into the sorted array, in time order. */
    static const struct {
        uint32_t tensor;
        size_t n;
        uint32_t idx[2];
    } per_tensor[] = {
        { 0, 2, { 4, 8 } }, { 1, 1, { 5, 0 } }, { 2, 1, { 0, 0 } },
        { 3, 1, { 1, 0 } }, { 4, 0, { 0, 0 } }, { 5, 1, { 2, 0 } },
        { 6, 2, { 3, 6 } }, { 7, 2, { 7, 9 } }, { 8, 0, { 0, 0 } },
    };
    for (size_t i = 0; i < TIO_ARRAY_LEN_T(per_tensor); i++) {
        size_t m = 99;
        const uint32_t *idx = tio_analysis_tensor_periods(a, per_tensor[i].tensor, &m);
        CHECK_EQ_U(m, per_tensor[i].n);
        if (m == 0) {
            CHECK(idx == NULL);
        }
        for (size_t j = 0; j < m && j < 2 && idx; j++) {
            CHECK_EQ_U(idx[j], per_tensor[i].idx[j]);
        }
    }
    size_t m = 99;
    CHECK(tio_analysis_tensor_periods(a, 9, &m) == NULL);
    CHECK_EQ_U(m, 0);

    /* First / last uses. */
    static const uint64_t first[] = { 1, 2, UINT64_MAX, 0, 3, 0, 0, 3, UINT64_MAX };
    static const uint64_t last[] = { 4, 2, UINT64_MAX, 3, 5, 5, 2, 5, UINT64_MAX };
    for (uint32_t t = 0; t < 9; t++) {
        CHECK_EQ_U(tio_analysis_first_use(a, t), first[t]);
        CHECK_EQ_U(tio_analysis_last_use(a, t), last[t]);
    }
    CHECK_EQ_U(tio_analysis_first_use(a, 9), UINT64_MAX);
    CHECK_EQ_U(tio_analysis_last_use(a, 1000), UINT64_MAX);
    tio_analysis_free(a);
    tio_trace_free(tr);
}

TIO_TEST(fixture_a_curves_and_summary) {
    struct tio_trace *tr = fixture_a();
    REQUIRE(tr != NULL);
    struct tio_analysis_params prm = tio_analysis_params_default();
    CHECK_EQ_U(prm.capacity_bytes, 0);
    CHECK_EQ_U(prm.long_idle_ns, 10000000);
    prm.capacity_bytes = 10000;
    struct tio_analysis *a = NULL;
    CHECK_OK(tio_analysis_new(tr, &prm, &a));
    REQUIRE_OR(a != NULL, tio_trace_free(tr));
    /* Globals 100+200+400+50+10+5 = 765 everywhere; t3 (1000) on [0,3]; t4 (2000) on [3,5];
     * t8 never. */
    static const uint64_t resident[] = { 1765, 1765, 1765, 3765, 2765, 2765 };
    /* k0: 1000+50+10; k1: 100; k2: 200+10; k3: 1000+2000+5; k4: 100+2000; k5: 2000+50+5 */
    static const uint64_t active[] = { 1060, 100, 210, 3005, 2100, 2055 };
    static const uint64_t start[] = { 0, 10, 30, 60, 100, 150, 210 };
    const uint64_t *r = tio_analysis_resident_bytes(a);
    const uint64_t *ac = tio_analysis_active_bytes(a);
    const uint64_t *st = tio_analysis_kernel_start_ns(a);
    for (size_t k = 0; k < 6; k++) {
        CHECK_EQ_U(r[k], resident[k]);
        CHECK_EQ_U(ac[k], active[k]);
    }
    for (size_t k = 0; k < 7; k++) {
        CHECK_EQ_U(st[k], start[k]);
    }
    struct tio_analysis_summary s;
    tio_analysis_get_summary(a, &s);
    CHECK_EQ_U(s.n_kernels, 6);
    CHECK_EQ_U(s.n_tensors, 9);
    CHECK_EQ_U(s.n_uses, 14);
    CHECK_EQ_U(s.n_periods, 10);
    CHECK_EQ_U(s.iteration_ns, 210);
    CHECK_EQ_U(s.global_bytes, 765);
    CHECK_EQ_U(s.peak_resident_bytes, 3765);
    CHECK_EQ_U(s.peak_kernel, 3);
    CHECK_EQ_U(s.peak_active_bytes, 3005);
    double mean = (1060.0 / 1765 + 100.0 / 1765 + 210.0 / 1765 + 3005.0 / 3765 + 2100.0 / 2765 +
                   2055.0 / 2765) /
                  6;
    CHECK_NEAR(s.active_fraction_mean, mean, 1e-12);
    CHECK_NEAR(s.active_fraction_max, 3005.0 / 3765, 1e-12);
    /* (1060+100+210+3005+2100+2055) / 6 / 10000 = 8530 / 60000 */
    CHECK_NEAR(s.active_capacity_fraction_mean, 8530.0 / 60000, 1e-12);
    CHECK_NEAR(s.active_capacity_fraction_max, 0.3005, 1e-12);
    CHECK_NEAR(s.long_idle_fraction_10mb_1gb, 0.0, 0);
    CHECK_EQ_U(s.tensors_per_bucket[TIO_BUCKET_LT_1MB], 9);
    CHECK_EQ_U(s.periods_per_bucket[TIO_BUCKET_LT_1MB], 10);
    for (int b = 1; b < TIO_BUCKET_COUNT; b++) {
        CHECK_EQ_U(s.tensors_per_bucket[b], 0);
        CHECK_EQ_U(s.periods_per_bucket[b], 0);
    }
    static const uint64_t sorted[] = { 20, 50, 50, 60, 70, 70, 140, 150, 180, 210 };
    size_t n = 0;
    const uint64_t *d = tio_analysis_bucket_durations(a, TIO_BUCKET_LT_1MB, &n);
    CHECK_EQ_U(n, 10);
    for (size_t i = 0; i < n && i < 10; i++) {
        CHECK_EQ_U(d[i], sorted[i]);
    }
    tio_analysis_bucket_durations(a, TIO_BUCKET_GE_1GB, &n);
    CHECK_EQ_U(n, 0);
    n = 99;
    CHECK(tio_analysis_bucket_durations(a, TIO_BUCKET_COUNT, &n) == NULL);
    CHECK_EQ_U(n, 0);
    CHECK(tio_analysis_bucket_durations(a, -1, &n) == NULL);
    tio_analysis_free(a);
    tio_trace_free(tr);
}

TIO_TEST(bucket_boundaries) {
    CHECK_EQ_I(tio_size_bucket_of(0), TIO_BUCKET_LT_1MB);
    CHECK_EQ_I(tio_size_bucket_of(999999), TIO_BUCKET_LT_1MB);
    CHECK_EQ_I(tio_size_bucket_of(1000000), TIO_BUCKET_1_10MB);
    CHECK_EQ_I(tio_size_bucket_of(9999999), TIO_BUCKET_1_10MB);
    CHECK_EQ_I(tio_size_bucket_of(10000000), TIO_BUCKET_10_100MB);
    CHECK_EQ_I(tio_size_bucket_of(99999999), TIO_BUCKET_10_100MB);
    CHECK_EQ_I(tio_size_bucket_of(100000000), TIO_BUCKET_100MB_1GB);
    CHECK_EQ_I(tio_size_bucket_of(999999999), TIO_BUCKET_100MB_1GB);
    CHECK_EQ_I(tio_size_bucket_of(1000000000), TIO_BUCKET_GE_1GB);
    CHECK_EQ_I(tio_size_bucket_of(UINT64_MAX), TIO_BUCKET_GE_1GB);
    /* 1 MiB is >= 1 MB: decimal bounds. */
    CHECK_EQ_I(tio_size_bucket_of(1u << 20), TIO_BUCKET_1_10MB);
    CHECK_STR(tio_size_bucket_name(TIO_BUCKET_LT_1MB), "<1MB");
    CHECK_STR(tio_size_bucket_name(TIO_BUCKET_1_10MB), "1-10MB");
    CHECK_STR(tio_size_bucket_name(TIO_BUCKET_10_100MB), "10-100MB");
    CHECK_STR(tio_size_bucket_name(TIO_BUCKET_100MB_1GB), "100MB-1GB");
    CHECK_STR(tio_size_bucket_name(TIO_BUCKET_GE_1GB), ">=1GB");
    CHECK_STR(tio_size_bucket_name(TIO_BUCKET_COUNT), "unknown");
    CHECK_STR(tio_size_bucket_name(-1), "unknown");
}

/*
 * Fixture B (Observation 2): 4 kernels of 5, 10, 1, 20 ms (iteration 36 ms).
 *   t0 10,000,000 B (10-100MB)   uses k0 k2    gap [1,2) = 10 ms (not > 10 ms)
 *   t1 999,999,999 B (100MB-1GB) global, k1    wrap [2,5) = k2 k3 k0 = 1+20+5 = 26 ms
 *   t2 9,999,999 B (1-10MB)      uses k0 k3    gap [1,3) = 10+1 = 11 ms (not in [10MB,1GB))
 *   t3 1,000,000,000 B (>=1GB)   global, k0    wrap [1,4) = 10+1+20 = 31 ms (ends at N)
 *   t4 100,000,000 B (100MB-1GB) uses k0 k1 k3 gap [2,3) = 1 ms
 * Periods of [10 MB, 1 GB): t0 10 ms, t1 26 ms, t4 1 ms -> 1 of 3 longer than 10 ms; with a
 * threshold of 9,999,999 ns, 2 of 3.
 */
static struct tio_trace *fixture_b(void) {
    static const struct tensor_spec tensors[] = {
        { 10000000, TIO_TENSOR_ACTIVATION, 0 },  { 999999999, TIO_TENSOR_WEIGHT, G },
        { 9999999, TIO_TENSOR_ACTIVATION, 0 },   { 1000000000, TIO_TENSOR_OPTIM_STATE, G },
        { 100000000, TIO_TENSOR_ACTIVATION, 0 },
    };
    static const uint64_t dur[] = { 5000000, 10000000, 1000000, 20000000 };
    static const int uses[][8] = { { 0, 2, 3, 4, -1 }, { 1, 4, -1 }, { 0, -1 }, { 2, 4, -1 } };
    return build(5, tensors, 4, dur, uses);
}

TIO_TEST(fixture_b_long_idle_and_buckets) {
    struct tio_trace *tr = fixture_b();
    REQUIRE(tr != NULL);
    struct tio_analysis *a = NULL;
    CHECK_OK(tio_analysis_new(tr, NULL, &a));
    REQUIRE_OR(a != NULL, tio_trace_free(tr));
    struct tio_analysis_summary s;
    tio_analysis_get_summary(a, &s);
    CHECK_EQ_U(s.n_periods, 5);
    CHECK_NEAR(s.long_idle_fraction_10mb_1gb, 1.0 / 3, 1e-15);
    CHECK_EQ_U(s.tensors_per_bucket[TIO_BUCKET_LT_1MB], 0);
    CHECK_EQ_U(s.tensors_per_bucket[TIO_BUCKET_1_10MB], 1);
    CHECK_EQ_U(s.tensors_per_bucket[TIO_BUCKET_10_100MB], 1);
    CHECK_EQ_U(s.tensors_per_bucket[TIO_BUCKET_100MB_1GB], 2);
    CHECK_EQ_U(s.tensors_per_bucket[TIO_BUCKET_GE_1GB], 1);
    CHECK_EQ_U(s.periods_per_bucket[TIO_BUCKET_1_10MB], 1);
    CHECK_EQ_U(s.periods_per_bucket[TIO_BUCKET_10_100MB], 1);
    CHECK_EQ_U(s.periods_per_bucket[TIO_BUCKET_100MB_1GB], 2);
    CHECK_EQ_U(s.periods_per_bucket[TIO_BUCKET_GE_1GB], 1);
    size_t n;
    const uint64_t *d = tio_analysis_bucket_durations(a, TIO_BUCKET_100MB_1GB, &n);
    CHECK_EQ_U(n, 2);
    if (n == 2) {
        CHECK_EQ_U(d[0], 1000000);
        CHECK_EQ_U(d[1], 26000000);
    }
    d = tio_analysis_bucket_durations(a, TIO_BUCKET_GE_1GB, &n);
    CHECK_EQ_U(n, 1);
    if (n == 1) {
        CHECK_EQ_U(d[0], 31000000);
    }
    d = tio_analysis_bucket_durations(a, TIO_BUCKET_1_10MB, &n);
    CHECK_EQ_U(n, 1);
    if (n == 1) {
        CHECK_EQ_U(d[0], 11000000);
    }
    size_t np;
    const struct tio_period *p = tio_analysis_periods(a, &np);
    /* Sorted by (start, tensor): t0 [1,2), t2 [1,3), t3 [1,4) W, t1 [2,5) W, t4 [2,3). */
    static const uint32_t order[] = { 0, 2, 3, 1, 4 };
    for (size_t i = 0; i < np && i < 5; i++) {
        CHECK_EQ_U(p[i].tensor, order[i]);
    }
    CHECK_EQ_U(p[2].end, 4);
    CHECK_EQ_U(p[2].flags, TIO_PERIOD_WRAPS);
    tio_analysis_free(a);

    struct tio_analysis_params prm = tio_analysis_params_default();
    prm.long_idle_ns = 9999999;
    CHECK_OK(tio_analysis_new(tr, &prm, &a));
    tio_analysis_get_summary(a, &s);
    CHECK_NEAR(s.long_idle_fraction_10mb_1gb, 2.0 / 3, 1e-15);
    tio_analysis_free(a);
    tio_trace_free(tr);
}

/*
 * Per-bucket median and long-idle counts, worked by hand. Fixture A's ten periods are all < 1 MB;
 * sorted: 20 50 50 60 70 70 140 150 180 210 ns, lower median the 5th = 70. Longer than 70: 140
 * 150 180 210 (4); than 69: also both 70s (6); than 50: 60 and up (7); than 49: all but 20 (9).
 * Fixture B's 100MB-1GB bucket holds 1 ms and 26 ms (lower median 1 ms), >= 1 GB holds 31 ms.
 */
TIO_TEST(bucket_median_and_count_above) {
    struct tio_trace *tr = fixture_a();
    REQUIRE(tr != NULL);
    struct tio_analysis *a = NULL;
    CHECK_OK(tio_analysis_new(tr, NULL, &a));
    REQUIRE_OR(a != NULL, tio_trace_free(tr));
    CHECK_EQ_U(tio_analysis_bucket_median(a, TIO_BUCKET_LT_1MB), 70);
    static const struct {
        uint64_t threshold;
        size_t above;
    } lt1[] = { { 0, 10 }, { 19, 10 }, { 20, 9 },  { 49, 9 },  { 50, 7 },
                { 69, 6 }, { 70, 4 },  { 209, 1 }, { 210, 0 }, { UINT64_MAX, 0 } };
    for (size_t i = 0; i < TIO_ARRAY_LEN_T(lt1); i++) {
        CHECK_EQ_U(tio_analysis_bucket_count_above(a, TIO_BUCKET_LT_1MB, lt1[i].threshold),
                   lt1[i].above);
    }
    for (int b = TIO_BUCKET_1_10MB; b < TIO_BUCKET_COUNT; b++) { /* empty buckets */
        CHECK_EQ_U(tio_analysis_bucket_median(a, b), 0);
        CHECK_EQ_U(tio_analysis_bucket_count_above(a, b, 0), 0);
    }
    CHECK_EQ_U(tio_analysis_bucket_median(a, -1), 0); /* out of range */
    CHECK_EQ_U(tio_analysis_bucket_median(a, TIO_BUCKET_COUNT), 0);
    CHECK_EQ_U(tio_analysis_bucket_count_above(a, -1, 0), 0);
    CHECK_EQ_U(tio_analysis_bucket_count_above(a, TIO_BUCKET_COUNT, 0), 0);
    tio_analysis_free(a);
    tio_trace_free(tr);

    tr = fixture_b();
    REQUIRE(tr != NULL);
    CHECK_OK(tio_analysis_new(tr, NULL, &a));
    if (a) {
        CHECK_EQ_U(tio_analysis_bucket_median(a, TIO_BUCKET_100MB_1GB), 1000000);
        CHECK_EQ_U(tio_analysis_bucket_count_above(a, TIO_BUCKET_100MB_1GB, 999999), 2);
        CHECK_EQ_U(tio_analysis_bucket_count_above(a, TIO_BUCKET_100MB_1GB, 10000000), 1);
        CHECK_EQ_U(tio_analysis_bucket_count_above(a, TIO_BUCKET_100MB_1GB, 26000000), 0);
        CHECK_EQ_U(tio_analysis_bucket_median(a, TIO_BUCKET_GE_1GB), 31000000);
        CHECK_EQ_U(tio_analysis_bucket_count_above(a, TIO_BUCKET_GE_1GB, 30999999), 1);
        CHECK_EQ_U(tio_analysis_bucket_count_above(a, TIO_BUCKET_GE_1GB, 31000000), 0);
        CHECK_EQ_U(tio_analysis_bucket_median(a, TIO_BUCKET_LT_1MB), 0);
    }
    tio_analysis_free(a);
    tio_trace_free(tr);
}

/* Kernels where nothing is resident are left out of the mean of active/resident; the capacity
 * fractions average over every kernel. */
TIO_TEST(zero_resident_kernels_excluded) {
    static const struct tensor_spec tensors[] = { { 100, TIO_TENSOR_ACTIVATION, 0 } };
    static const uint64_t dur[] = { 1, 1, 1 };
    static const int uses[][8] = { { -1 }, { 0, -1 }, { -1 } };
    struct tio_trace *tr = build(1, tensors, 3, dur, uses);
    REQUIRE(tr != NULL);
    struct tio_analysis_params prm = tio_analysis_params_default();
    prm.capacity_bytes = 1000;
    struct tio_analysis *a = NULL;
    CHECK_OK(tio_analysis_new(tr, &prm, &a));
    struct tio_analysis_summary s;
    tio_analysis_get_summary(a, &s);
    CHECK_EQ_U(tio_analysis_resident_bytes(a)[0], 0);
    CHECK_EQ_U(tio_analysis_resident_bytes(a)[1], 100);
    CHECK_EQ_U(tio_analysis_resident_bytes(a)[2], 0);
    CHECK_NEAR(s.active_fraction_mean, 1.0, 0);
    CHECK_NEAR(s.active_fraction_max, 1.0, 0);
    CHECK_NEAR(s.active_capacity_fraction_mean, 100.0 / 1000 / 3, 1e-15);
    CHECK_NEAR(s.active_capacity_fraction_max, 0.1, 1e-15);
    CHECK_EQ_U(s.peak_kernel, 1);
    CHECK_EQ_U(s.n_periods, 0);
    tio_analysis_free(a);
    tio_trace_free(tr);
}

/* A single kernel: a global used once has no period (u0+1 == u0+N); an unused one has [0,1). */
TIO_TEST(one_kernel_and_empty_trace) {
    static const struct tensor_spec tensors[] = { { 8, TIO_TENSOR_WEIGHT, G },
                                                  { 16, TIO_TENSOR_WEIGHT, G } };
    static const uint64_t dur[] = { 7 };
    static const int uses[][8] = { { 0, -1 } };
    struct tio_trace *tr = build(2, tensors, 1, dur, uses);
    REQUIRE(tr != NULL);
    struct tio_analysis *a = NULL;
    CHECK_OK(tio_analysis_new(tr, NULL, &a));
    size_t n;
    const struct tio_period *p = tio_analysis_periods(a, &n);
    CHECK_EQ_U(n, 1);
    if (n == 1) {
        CHECK_EQ_U(p[0].tensor, 1);
        CHECK_EQ_U(p[0].flags, TIO_PERIOD_UNUSED);
        CHECK_EQ_U(p[0].start, 0);
        CHECK_EQ_U(p[0].end, 1);
        CHECK_EQ_U(p[0].duration_ns, 7);
    }
    CHECK_EQ_U(tio_analysis_resident_bytes(a)[0], 24);
    CHECK_EQ_U(tio_analysis_active_bytes(a)[0], 8);
    tio_analysis_free(a);
    tio_trace_free(tr);

    /* No kernels at all: no periods (an unused global's [0, 0) is empty), zero summary. */
    tr = build(2, tensors, 0, dur, uses);
    REQUIRE(tr != NULL);
    CHECK_OK(tio_analysis_new(tr, NULL, &a));
    struct tio_analysis_summary s;
    tio_analysis_get_summary(a, &s);
    CHECK_EQ_U(s.n_kernels, 0);
    CHECK_EQ_U(s.n_periods, 0);
    CHECK_EQ_U(s.global_bytes, 24);
    CHECK_EQ_U(s.peak_resident_bytes, 0);
    CHECK_NEAR(s.active_fraction_mean, 0, 0);
    CHECK_EQ_U(tio_analysis_kernel_start_ns(a)[0], 0);
    tio_analysis_free(a);
    tio_trace_free(tr);
}

TIO_TEST(errors) {
    struct tio_analysis *a = (struct tio_analysis *)1;
    struct tio_trace *tr;
    CHECK_OK(tio_trace_new(NULL, &tr));
    CHECK_RC(tio_analysis_new(tr, NULL, &a), TIO_ESTATE);
    CHECK_ERR_HAS("not finished");
    CHECK(a == NULL);
    CHECK_RC(tio_analysis_new(NULL, NULL, &a), TIO_EINVAL);
    CHECK_RC(tio_analysis_new(tr, NULL, NULL), TIO_EINVAL);
    tio_trace_free(tr);
    tio_analysis_free(NULL);
}

/* Every allocation failure is reported as TIO_ENOMEM and leaks nothing. */
TIO_TEST(allocation_failures) {
    struct tio_trace *tr = fixture_a();
    REQUIRE(tr != NULL);
    int64_t base = tio_alloc_live_count();
    int ok = 0;
    for (int64_t i = 0; i < 100 && !ok; i++) {
        struct tio_analysis *a = NULL;
        tio_alloc_fail_after(i);
        int rc = tio_analysis_new(tr, NULL, &a);
        tio_alloc_fail_after(-1);
        if (rc == 0) {
            ok = 1;
            tio_analysis_free(a);
        } else {
            CHECK_RC(rc, TIO_ENOMEM);
            CHECK(a == NULL);
        }
        CHECK_EQ_I(tio_alloc_live_count(), base);
    }
    CHECK(ok);
    tio_trace_free(tr);
}

/* ---- CSV ------------------------------------------------------------------------------------ */

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        return NULL;
    }
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    (void)fclose(f);
    return buf;
}

TIO_TEST(csv_output) {
    struct tio_trace *tr = fixture_a();
    REQUIRE(tr != NULL);
    struct tio_analysis *a = NULL;
    CHECK_OK(tio_analysis_new(tr, NULL, &a));
    char dir[256], sub[300], path[400];
    (void)snprintf(dir, sizeof dir, "/tmp/tio_test_analysis_%d", (int)getpid());
    (void)snprintf(sub, sizeof sub, "%s/nested/out", dir); /* created with its parents */
    CHECK_OK(tio_analysis_write_csv(a, sub));
    CHECK_OK(tio_analysis_write_csv(a, sub)); /* existing directory: overwritten */

    (void)snprintf(path, sizeof path, "%s/memory.csv", sub);
    const char *mem = slurp(path);
    CHECK(mem != NULL);
    if (mem) {
        CHECK_STR(mem, "kernel,start_ns,duration_ns,resident_bytes,active_bytes\n"
                       "0,0,10,1765,1060\n"
                       "1,10,20,1765,100\n"
                       "2,30,30,1765,210\n"
                       "3,60,40,3765,3005\n"
                       "4,100,50,2765,2100\n"
                       "5,150,60,2765,2055\n");
    }
    /* min_bandwidth_Bps = 2 * bytes / (duration_ns * 1e-9), rounded up: 800 B / 210 ns =
     * 3809523809.52 -> 3809523810, 100 B / 140 ns = 714285714.29 -> 714285715, ... */
    (void)snprintf(path, sizeof path, "%s/periods.csv", sub);
    const char *per = slurp(path);
    CHECK(per != NULL);
    if (per) {
        CHECK_STR(per, "tensor,kind,bytes,start,end,duration_ns,wraps,min_bandwidth_Bps\n"
                       "2,weight,400,0,6,210,0,3809523810\n"
                       "3,activation,1000,1,3,50,0,40000000000\n"
                       "5,grad,50,1,5,140,0,714285715\n"
                       "6,weight,10,1,2,20,0,1000000000\n"
                       "0,weight,100,2,4,70,0,2857142858\n"
                       "1,optim_state,200,3,8,180,1,2222222223\n"
                       "6,weight,10,3,6,150,1,133333334\n"
                       "7,weight,5,4,5,50,0,200000000\n"
                       "0,weight,100,5,7,70,1,2857142858\n"
                       "7,weight,5,6,9,60,1,166666667\n");
    }
    /* Sorted durations 20 50 50 60 70 70 140 150 180 210: one row per distinct value. */
    (void)snprintf(path, sizeof path, "%s/cdf.csv", sub);
    const char *cdf = slurp(path);
    CHECK(cdf != NULL);
    if (cdf) {
        CHECK_STR(cdf, "bucket,duration_ns,fraction\n"
                       "<1MB,20,0.1\n"
                       "<1MB,50,0.3\n"
                       "<1MB,60,0.4\n"
                       "<1MB,70,0.6\n"
                       "<1MB,140,0.7\n"
                       "<1MB,150,0.8\n"
                       "<1MB,180,0.9\n"
                       "<1MB,210,1\n");
    }

    /* A directory below a regular file cannot be created: the error names the path. */
    char bad[400];
    (void)snprintf(path, sizeof path, "%s/memory.csv", sub);
    (void)snprintf(bad, sizeof bad, "%s/memory.csv/x", sub);
    int rc = tio_analysis_write_csv(a, bad);
    CHECK(rc < 0);
    CHECK_ERR_HAS("memory.csv");
    /* A regular file given as the directory. */
    rc = tio_analysis_write_csv(a, path);
    CHECK(rc < 0);
    CHECK_ERR_HAS("memory.csv");

    /* Clean up. */
    static const char *const files[] = { "memory.csv", "periods.csv", "cdf.csv" };
    for (size_t i = 0; i < 3; i++) {
        (void)snprintf(path, sizeof path, "%s/%s", sub, files[i]);
        (void)unlink(path);
    }
    (void)rmdir(sub);
    (void)snprintf(path, sizeof path, "%s/nested", dir);
    (void)rmdir(path);
    (void)rmdir(dir);
    tio_analysis_free(a);
    tio_trace_free(tr);
}

int main(void) {
    RUN(fixture_a_periods);
    RUN(fixture_a_curves_and_summary);
    RUN(bucket_boundaries);
    RUN(fixture_b_long_idle_and_buckets);
    RUN(bucket_median_and_count_above);
    RUN(zero_resident_kernels_excluded);
    RUN(one_kernel_and_empty_trace);
    RUN(errors);
    RUN(allocation_failures);
    RUN(csv_output);
    return tio_test_done();
}
