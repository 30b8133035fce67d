/* The analysis against a naive reference written from the definitions in teraio/analysis.h,
 * on random traces (the hand-worked fixtures are in test_analysis.c). */

#include <errno.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

#include <teraio/teraio.h>

#include "tio_test.h"

/* ---- Naive reference (independent of src/analysis) ----------------------------------------- */
/*
 * For each tensor t and each kernel k, the naive code asks "is t used at k?" by scanning k's
 * uses, then walks the kernels 0..N-1 once (and 0..N-1 again for the wrap) to find periods as
 * maximal runs of unused kernels between two uses: O(N * (T + U)), written straight from the
 * definitions in teraio/analysis.h.
 */

struct ref_period {
    uint32_t tensor, flags;
    uint64_t start, end, bytes, dur;
};

static bool ref_uses(const struct tio_trace_view *v, size_t k, uint32_t t) {
    for (uint64_t u = v->kernel_use_offset[k]; u < v->kernel_use_offset[k + 1]; u++) {
        if (v->use_tensor[u] == t) {
            return true;
        }
    }
    return false;
}

/* Returns the number of periods written to out (capacity cap). */
static size_t ref_periods(const struct tio_trace_view *v, struct ref_period *out, size_t cap) {
    size_t n = v->n_kernels, np = 0;
    for (uint32_t t = 0; t < v->n_tensors; t++) {
        bool global = v->tensor_flags[t] & TIO_TENSOR_GLOBAL;
        int64_t first = -1, prev = -1;
        for (size_t k = 0; k < n; k++) {
            if (!ref_uses(v, k, t)) {
                continue;
            }
            if (first < 0) {
                first = (int64_t)k;
            }
            if (prev >= 0 && (int64_t)k > prev + 1 && np < cap) {
                uint64_t d = 0;
                for (int64_t j = prev + 1; j < (int64_t)k; j++) {
                    d += v->kernel_duration_ns[j];
                }
                out[np++] =
                    (struct ref_period){ t, 0, (uint64_t)prev + 1, k, v->tensor_bytes[t], d };
            }
            prev = (int64_t)k;
        }
        if (!global || np >= cap) {
            continue;
        }
        if (first < 0) {
            if (n > 0) {
                uint64_t d = 0;
                for (size_t j = 0; j < n; j++) {
                    d += v->kernel_duration_ns[j];
                }
                out[np++] =
                    (struct ref_period){ t, TIO_PERIOD_UNUSED, 0, n, v->tensor_bytes[t], d };
            }
            continue;
        }
        /* Idle kernels after the last use to the end, then from 0 to the first use. */
        uint64_t d = 0, count = 0;
        for (size_t j = (size_t)prev + 1; j < n; j++) {
            d += v->kernel_duration_ns[j];
            count++;
        }
        for (size_t j = 0; j < (size_t)first; j++) {
            d += v->kernel_duration_ns[j];
            count++;
        }
        if (count > 0) {
            out[np++] = (struct ref_period){
                t, TIO_PERIOD_WRAPS, (uint64_t)prev + 1, (uint64_t)first + n, v->tensor_bytes[t], d
            };
        }
    }
    /* Order by (start, tensor): insertion sort, fine for the small reference traces. */
    for (size_t i = 1; i < np; i++) {
        struct ref_period x = out[i];
        size_t j = i;
        while (j > 0 && (out[j - 1].start > x.start ||
                         (out[j - 1].start == x.start && out[j - 1].tensor > x.tensor))) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = x;
    }
    return np;
}

static uint64_t rng_state;
static uint64_t rng_next(void) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return rng_state >> 33;
}

/* A random trace: sizes spread over every bucket, some globals, some unused tensors. */
static struct tio_trace *random_trace(uint64_t seed, size_t n_kernels, size_t n_tensors) {
    rng_state = seed;
    struct tio_trace *tr = NULL;
    if (tio_trace_new(NULL, &tr) < 0) {
        return NULL;
    }
    static const uint64_t scale[] = { 1000,     999999,    1000000,   5000000,    10000000,
                                      50000000, 100000000, 999999999, 1000000000, 3000000000 };
    for (size_t t = 0; t < n_tensors; t++) {
        uint64_t bytes = scale[rng_next() % 10] + rng_next() % 3;
        uint32_t flags = (rng_next() % 3 == 0) ? TIO_TENSOR_GLOBAL : 0;
        if (tio_trace_add_tensor(tr, bytes, TIO_TENSOR_OTHER, flags, NULL, NULL) < 0) {
            goto fail;
        }
    }
    for (size_t k = 0; k < n_kernels; k++) {
        uint64_t dur = (rng_next() % 4 == 0) ? 0 : rng_next() % 20000000;
        if (tio_trace_add_kernel(tr, NULL, dur, 0, NULL) < 0) {
            goto fail;
        }
        size_t nuse = rng_next() % 5;
        for (size_t i = 0; i < nuse; i++) {
            /* Tensors of the upper half are used often, the lower half rarely (some never). */
            uint32_t t = (uint32_t)(rng_next() % n_tensors);
            if (t < n_tensors / 2 && rng_next() % 8 != 0) {
                continue;
            }
            if (tio_trace_add_use(tr, t, (int32_t)(1 + rng_next() % 3)) < 0) {
                goto fail;
            }
        }
    }
    if (tio_trace_finish(tr) < 0) {
        goto fail;
    }
    return tr;
fail:
    tio_trace_free(tr);
    return NULL;
}

TIO_TEST(matches_naive_reference) {
    enum { CAP = 4096 };
    static struct ref_period ref[CAP];
    static const size_t shapes[][2] = { { 1, 3 }, { 2, 5 }, { 7, 4 }, { 40, 30 }, { 200, 60 } };
    for (uint64_t seed = 1; seed <= 40; seed++) {
        size_t nk = shapes[seed % 5][0], nt = shapes[seed % 5][1];
        struct tio_trace *tr = random_trace(seed, nk, nt);
        REQUIRE(tr != NULL);
        struct tio_trace_view v;
        tio_trace_get_view(tr, &v);
        struct tio_analysis_params prm = tio_analysis_params_default();
        prm.capacity_bytes = 1u << 30;
        prm.long_idle_ns = 10000000;
        struct tio_analysis *a = NULL;
        CHECK_OK(tio_analysis_new(tr, &prm, &a));
        REQUIRE_OR(a != NULL, tio_trace_free(tr));
        size_t nref = ref_periods(&v, ref, CAP), n;
        const struct tio_period *p = tio_analysis_periods(a, &n);
        CHECK_EQ_U(n, nref);
        for (size_t i = 0; i < n && i < nref; i++) {
            if (p[i].tensor != ref[i].tensor || p[i].flags != ref[i].flags ||
                p[i].start != ref[i].start || p[i].end != ref[i].end ||
                p[i].bytes != ref[i].bytes || p[i].duration_ns != ref[i].dur) {
                TIO_T_FAIL("seed %llu period %zu differs", (unsigned long long)seed, i);
                break;
            }
        }
        /* Curves: resident = globals + intermediates whose [first, last] contains k. */
        const uint64_t *res = tio_analysis_resident_bytes(a);
        const uint64_t *act = tio_analysis_active_bytes(a);
        uint64_t peak = 0, peak_act = 0;
        double sum = 0, mx = 0, sum_cap = 0;
        size_t nz = 0;
        for (size_t k = 0; k < nk; k++) {
            uint64_t r = 0, ac = 0;
            for (uint32_t t = 0; t < nt; t++) {
                bool used_before = false, used_after = false;
                for (size_t j = 0; j <= k; j++) {
                    used_before = used_before || ref_uses(&v, j, t);
                }
                for (size_t j = k; j < nk; j++) {
                    used_after = used_after || ref_uses(&v, j, t);
                }
                if ((v.tensor_flags[t] & TIO_TENSOR_GLOBAL) || (used_before && used_after)) {
                    r += v.tensor_bytes[t];
                }
                if (ref_uses(&v, k, t)) {
                    ac += v.tensor_bytes[t];
                }
            }
            CHECK_EQ_U(res[k], r);
            CHECK_EQ_U(act[k], ac);
            peak = r > peak ? r : peak;
            peak_act = ac > peak_act ? ac : peak_act;
            if (r) {
                sum += (double)ac / (double)r;
                mx = fmax(mx, (double)ac / (double)r);
                nz++;
            }
            sum_cap += (double)ac / (double)(1u << 30);
        }
        struct tio_analysis_summary s;
        tio_analysis_get_summary(a, &s);
        CHECK_EQ_U(s.peak_resident_bytes, peak);
        CHECK_EQ_U(s.peak_active_bytes, peak_act);
        CHECK_NEAR(s.active_fraction_mean, nz ? sum / (double)nz : 0, 1e-12);
        CHECK_NEAR(s.active_fraction_max, mx, 1e-12);
        CHECK_NEAR(s.active_capacity_fraction_mean, nk ? sum_cap / (double)nk : 0, 1e-12);
        /* Observation 2 from the reference periods. */
        size_t mid = 0, lng = 0;
        for (size_t i = 0; i < nref; i++) {
            if (ref[i].bytes >= 10000000 && ref[i].bytes < 1000000000) {
                mid++;
                lng += ref[i].dur > 10000000;
            }
        }
        CHECK_NEAR(s.long_idle_fraction_10mb_1gb, mid ? (double)lng / (double)mid : 0, 1e-12);
        /* Bucket durations: the reference periods' durations of that bucket, sorted. */
        for (int b = 0; b < TIO_BUCKET_COUNT; b++) {
            static uint64_t want[CAP];
            size_t nw = 0;
            for (size_t i = 0; i < nref; i++) {
                int rb = ref[i].bytes < 1000000      ? 0
                         : ref[i].bytes < 10000000   ? 1
                         : ref[i].bytes < 100000000  ? 2
                         : ref[i].bytes < 1000000000 ? 3
                                                     : 4;
                if (rb == b) {
                    size_t j = nw++;
                    while (j > 0 && want[j - 1] > ref[i].dur) {
                        want[j] = want[j - 1];
                        j--;
                    }
                    want[j] = ref[i].dur;
                }
            }
            size_t nd;
            const uint64_t *d = tio_analysis_bucket_durations(a, b, &nd);
            CHECK_EQ_U(nd, nw);
            CHECK_EQ_U(s.periods_per_bucket[b], nw);
            for (size_t i = 0; i < nd && i < nw; i++) {
                if (d[i] != want[i]) {
                    TIO_T_FAIL("seed %llu bucket %d duration %zu: %llu != %llu",
                               (unsigned long long)seed, b, i, (unsigned long long)d[i],
                               (unsigned long long)want[i]);
                    break;
                }
            }
        }
        tio_analysis_free(a);
        tio_trace_free(tr);
    }
}

int main(void) {
    RUN(matches_naive_reference);
    return tio_test_done();
}
