/* Liveness (src/analysis/liveness.h) on a hand-written trace; every expected value below is
 * worked out by hand from the trace in the comment, not by the code under test.
 *
 *   N = 6 kernels of 1000 ns; kernel 5, named "free", is skipped where a test says so.
 *   tensor  bytes  flags    uses            periods (start, end, flags, use before)
 *   t0        100  GLOBAL   k1 k4           [2,4)   0      0;  [5,7) WRAPS 1
 *   t1         10  -        k0 k2           [1,2)   0      0
 *   t2       1000  -        never used      none
 *   t3          5  GLOBAL   never used      [0,6)   UNUSED 0
 *   t4          1  GLOBAL   k2 k5           [3,5)   0      0;  [6,8) WRAPS 1 (starts at N)
 *   t5         20  -        k3 k5           [4,5)   0      0
 *
 *   kernel uses: k0 {t1}, k1 {t0}, k2 {t1, t4}, k3 {t5}, k4 {t0}, k5 {t4, t5}
 *   (trace use indices 0..7 in that order).
 */
#include <teraio/teraio.h>

#include "analysis/liveness.h"
#include "tio_test.h"

#define N_K   6
#define N_T   6
#define NEVER TIO_NEVER_USED

static struct tio_trace *hand_trace(void) {
    static const struct {
        uint64_t bytes;
        int32_t kind;
        uint32_t flags;
    } tensors[N_T] = {
        { 100, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL },
        { 10, TIO_TENSOR_ACTIVATION, 0 },
        { 1000, TIO_TENSOR_ACTIVATION, 0 },
        { 5, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL },
        { 1, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL },
        { 20, TIO_TENSOR_ACTIVATION, 0 },
    };
    static const int uses[N_K][3] = { { 1, -1 },    { 0, -1 }, { 1, 4, -1 },
                                      { 5, -1, 0 }, { 0, -1 }, { 4, 5, -1 } };
    struct tio_trace *tr = NULL;
    if (tio_trace_new(NULL, &tr) < 0) {
        return NULL;
    }
    for (size_t t = 0; t < N_T; t++) {
        if (tio_trace_add_tensor(tr, tensors[t].bytes, tensors[t].kind, tensors[t].flags, "t",
                                 NULL) < 0) {
            goto fail;
        }
    }
    for (size_t k = 0; k < N_K; k++) {
        if (tio_trace_add_kernel(tr, k == 5 ? "free" : "k", 1000, 0, NULL) < 0) {
            goto fail;
        }
        for (int i = 0; i < 3 && uses[k][i] >= 0; i++) {
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

static const uint8_t skip_free[N_K] = { 0, 0, 0, 0, 0, 1 };

TIO_TEST(first_last) {
    struct tio_trace *tr = hand_trace();
    REQUIRE(tr != NULL);
    struct tio_trace_view v;
    tio_trace_get_view(tr, &v);
    uint64_t first[N_T], last[N_T];
    const uint64_t want_first[N_T] = { 1, 0, NEVER, NEVER, 2, 3 };
    const uint64_t want_last[N_T] = { 4, 2, NEVER, NEVER, 5, 5 };
    const struct tio_liveness_csr all = tio_liveness_csr_of(&v, NULL);
    CHECK_EQ_U(all.n_kernels, N_K);
    CHECK_EQ_U(all.n_tensors, N_T);
    tio_liveness_first_last(&all, first, last);
    for (size_t t = 0; t < N_T; t++) {
        CHECK_EQ_U(first[t], want_first[t]);
        CHECK_EQ_U(last[t], want_last[t]);
    }
    /* Kernel 5 skipped: t4 and t5 end at their earlier use. */
    const uint64_t want_last_skip[N_T] = { 4, 2, NEVER, NEVER, 2, 3 };
    const struct tio_liveness_csr real = tio_liveness_csr_of(&v, skip_free);
    tio_liveness_first_last(&real, first, last);
    for (size_t t = 0; t < N_T; t++) {
        CHECK_EQ_U(first[t], want_first[t]);
        CHECK_EQ_U(last[t], want_last_skip[t]);
    }
    tio_trace_free(tr);
}

TIO_TEST(next_use) {
    struct tio_trace *tr = hand_trace();
    REQUIRE(tr != NULL);
    struct tio_trace_view v;
    tio_trace_get_view(tr, &v);
    CHECK_EQ_U(v.n_uses, 8);
    uint64_t next[8], first[N_T];
    const uint64_t want_first[N_T] = { 1, 0, NEVER, NEVER, 2, 3 };
    const uint64_t want_all[8] = { 2, 4, NEVER, 5, 5, NEVER, NEVER, NEVER };
    const struct tio_liveness_csr all = tio_liveness_csr_of(&v, NULL);
    tio_liveness_next_use(&all, next, first);
    for (size_t u = 0; u < 8; u++) {
        CHECK_EQ_U(next[u], want_all[u]);
    }
    for (size_t t = 0; t < N_T; t++) {
        CHECK_EQ_U(first[t], want_first[t]);
    }
    /* Kernel 5 skipped: the uses at k2 (t4) and k3 (t5) have no next use any more. */
    const uint64_t want_skip[8] = { 2, 4, NEVER, NEVER, NEVER, NEVER, NEVER, NEVER };
    const struct tio_liveness_csr real = tio_liveness_csr_of(&v, skip_free);
    tio_liveness_next_use(&real, next, first);
    for (size_t u = 0; u < 8; u++) {
        CHECK_EQ_U(next[u], want_skip[u]);
    }
    tio_trace_free(tr);
}

TIO_TEST(build_curves_and_periods) {
    struct tio_trace *tr = hand_trace();
    REQUIRE(tr != NULL);
    struct tio_trace_view v;
    tio_trace_get_view(tr, &v);
    struct tio_liveness lv;
    CHECK_OK(tio_liveness_build(&v, &lv));
    /* Globals 100 + 5 + 1 everywhere; t1 (10) over [0,2], t5 (20) over [3,5]. */
    const uint64_t want_res[N_K] = { 116, 116, 116, 126, 126, 126 };
    const uint64_t want_act[N_K] = { 10, 100, 11, 20, 100, 21 };
    for (size_t k = 0; k < N_K; k++) {
        CHECK_EQ_U(lv.resident[k], want_res[k]);
        CHECK_EQ_U(lv.active[k], want_act[k]);
    }
    /* Per-tensor use lists: t0 {1,4}, t1 {0,2}, t2 {}, t3 {}, t4 {2,5}, t5 {3,5}. */
    const size_t want_off[N_T + 1] = { 0, 2, 4, 4, 4, 6, 8 };
    const uint32_t want_kernel[8] = { 1, 4, 0, 2, 2, 5, 3, 5 };
    for (size_t t = 0; t <= N_T; t++) {
        CHECK_EQ_U(lv.use_off[t], want_off[t]);
    }
    for (size_t i = 0; i < 8; i++) {
        CHECK_EQ_U(lv.use_kernel[i], want_kernel[i]);
    }
    CHECK_EQ_U(lv.first_use[2], NEVER);
    CHECK_EQ_U(lv.last_use[2], NEVER);
    /* Excluding t0: 100 bytes less everywhere. */
    uint64_t res[N_K];
    const uint8_t exclude[N_T] = { 1, 0, 0, 0, 0, 0 };
    tio_liveness_resident(&v, lv.first_use, lv.last_use, exclude, res);
    for (size_t k = 0; k < N_K; k++) {
        CHECK_EQ_U(res[k], want_res[k] - 100);
    }
    /* Periods, in time order per tensor. */
    static const struct {
        uint32_t tensor;
        uint64_t start, end;
        uint32_t flags, use_index;
    } want[] = {
        { 0, 2, 4, 0, 0 }, { 0, 5, 7, TIO_PERIOD_WRAPS, 1 },
        { 1, 1, 2, 0, 0 }, { 3, 0, 6, TIO_PERIOD_UNUSED, 0 },
        { 4, 3, 5, 0, 0 }, { 4, 6, 8, TIO_PERIOD_WRAPS, 1 },
        { 5, 4, 5, 0, 0 },
    };
    size_t i = 0;
    for (uint32_t t = 0; t < N_T; t++) {
        struct tio_liveness_iter it;
        struct tio_liveness_period p;
        tio_liveness_iter_init(&it, &lv, t, (v.tensor_flags[t] & TIO_TENSOR_GLOBAL) != 0);
        while (tio_liveness_iter_next(&it, &p)) {
            CHECK(i < sizeof want / sizeof want[0]);
            if (i >= sizeof want / sizeof want[0]) {
                break;
            }
            CHECK_EQ_U(t, want[i].tensor);
            CHECK_EQ_U(p.start, want[i].start);
            CHECK_EQ_U(p.end, want[i].end);
            CHECK_EQ_U(p.flags, want[i].flags);
            CHECK_EQ_U(p.use_index, want[i].use_index);
            i++;
        }
    }
    CHECK_EQ_U(i, sizeof want / sizeof want[0]);
    tio_liveness_free(&lv);
    tio_trace_free(tr);
}

/* The public face of the same liveness: the analysis reports the one sentinel. */
TIO_TEST(analysis_sentinel) {
    struct tio_trace *tr = hand_trace();
    REQUIRE(tr != NULL);
    struct tio_analysis *a = NULL;
    CHECK_OK(tio_analysis_new(tr, NULL, &a));
    if (a) {
        CHECK_EQ_U(tio_analysis_first_use(a, 2), TIO_NEVER_USED);
        CHECK_EQ_U(tio_analysis_last_use(a, 2), TIO_NEVER_USED);
        CHECK_EQ_U(tio_analysis_first_use(a, 4), 2);
        CHECK_EQ_U(tio_analysis_last_use(a, 4), 5);
        CHECK_EQ_U(tio_analysis_first_use(a, N_T), TIO_NEVER_USED); /* out of range */
        struct tio_analysis_summary s;
        tio_analysis_get_summary(a, &s);
        CHECK_EQ_U(s.n_periods, 7);
        CHECK_EQ_U(s.peak_resident_bytes, 126);
        CHECK_EQ_U(s.peak_kernel, 3);
    }
    tio_analysis_free(a);
    tio_trace_free(tr);
}

/* The public entry point: kernels skipped by name, resident bytes over the tensors not excluded. */
TIO_TEST(public_liveness) {
    struct tio_trace *tr = hand_trace();
    REQUIRE(tr != NULL);
    uint64_t first[N_T], last[N_T], res[N_K];
    const uint8_t exclude[N_T] = { 1, 0, 0, 0, 0, 0 };
    CHECK_OK(tio_analysis_liveness(tr, "free", exclude, first, last, res));
    const uint64_t want_first[N_T] = { 1, 0, NEVER, NEVER, 2, 3 };
    const uint64_t want_last[N_T] = { 4, 2, NEVER, NEVER, 2, 3 };
    /* Globals t3 + t4 = 6 everywhere; t1 (10) over [0,2]; t5 (20) at 3 only ("free" skipped). */
    const uint64_t want_res[N_K] = { 16, 16, 16, 26, 6, 6 };
    for (size_t t = 0; t < N_T; t++) {
        CHECK_EQ_U(first[t], want_first[t]);
        CHECK_EQ_U(last[t], want_last[t]);
    }
    for (size_t k = 0; k < N_K; k++) {
        CHECK_EQ_U(res[k], want_res[k]);
    }
    CHECK_OK(tio_analysis_liveness(tr, NULL, NULL, first, last, NULL));
    CHECK_EQ_U(last[5], 5);
    CHECK_RC(tio_analysis_liveness(tr, NULL, NULL, NULL, last, NULL), TIO_EINVAL);
    CHECK_ERR_HAS("NULL trace, first or last");
    struct tio_trace *open = NULL;
    CHECK_OK(tio_trace_new(NULL, &open));
    CHECK_RC(tio_analysis_liveness(open, NULL, NULL, first, last, NULL), TIO_ESTATE);
    CHECK_ERR_HAS("not finished");
    tio_trace_free(open);
    tio_trace_free(tr);
}

/* Tensors idle the longest: t3 [0,6) 6000 ns; t0 and t4 2000 ns each (ties: lower id first;
 * within t0 the earlier of its two 2000 ns periods); t1 and t5 1000 ns. */
TIO_TEST(top_idle) {
    struct tio_trace *tr = hand_trace();
    REQUIRE(tr != NULL);
    struct tio_analysis *a = NULL;
    CHECK_OK(tio_analysis_new(tr, NULL, &a));
    if (a) {
        struct tio_idle_tensor top[N_T];
        size_t n = 99;
        CHECK_OK(tio_analysis_top_idle(a, 0, top, 3, &n));
        CHECK_EQ_U(n, 3);
        CHECK_EQ_U(top[0].tensor, 3);
        CHECK_EQ_U(top[0].longest.duration_ns, 6000);
        CHECK_EQ_U(top[0].longest.flags, TIO_PERIOD_UNUSED);
        CHECK_EQ_U(top[1].tensor, 0);
        CHECK_EQ_U(top[1].longest.start, 2);
        CHECK_EQ_U(top[1].longest.end, 4);
        CHECK_EQ_U(top[1].total_ns, 4000);
        CHECK_EQ_U(top[1].n_periods, 2);
        CHECK_EQ_U(top[2].tensor, 4);
        CHECK_EQ_U(top[2].longest.start, 3);
        /* At least 10 bytes: t0, t1, t5 (t2 is never used: no period). */
        CHECK_OK(tio_analysis_top_idle(a, 10, top, N_T, &n));
        CHECK_EQ_U(n, 3);
        CHECK_EQ_U(top[0].tensor, 0);
        CHECK_EQ_U(top[1].tensor, 1);
        CHECK_EQ_U(top[2].tensor, 5);
        CHECK_OK(tio_analysis_top_idle(a, 0, NULL, 0, &n));
        CHECK_EQ_U(n, 0);
        CHECK_RC(tio_analysis_top_idle(a, 0, NULL, 1, &n), TIO_EINVAL);
    }
    tio_analysis_free(a);
    tio_trace_free(tr);
}

int main(void) {
    RUN(first_last);
    RUN(next_use);
    RUN(build_curves_and_periods);
    RUN(analysis_sentinel);
    RUN(public_liveness);
    RUN(top_idle);
    return tio_test_done();
}
