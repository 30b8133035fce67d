/*
 * bench_analysis: time tio_analysis_new on a synthetic Llama3-70B-sized trace (250,000 kernels,
 * 2,500,000 uses; the paper's §2 gives ~250k kernels per iteration on GPU0 for Llama3-70B).
 *
 * Transformer-like pattern: 80 layers x 8 micro-batches; per layer and micro-batch 120 forward
 * kernels (each writes a new activation and reads the previous ones and the layer's weights) and
 * 240 backward kernels (each reads the saved forward activations in reverse order, the layer's
 * weights and gradients, and the recent backward temporaries), then an optimizer step touching
 * weights, gradients and both Adam states. Every kernel uses exactly 10 distinct tensors.
 *
 * Anchors measured in the same run: one pass over all uses summing tensor bytes (the least any
 * analysis must do) and tio_trace_validate (the library's own linear pass over the trace).
 *
 *   usage: bench_analysis [repeats=5] [csv_dir|-] [save_trace.tio]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <teraio/teraio.h>

#include "benchutil.h"
#include "common/common_impl.h"

enum {
    LAYERS = 80,
    MICRO = 8,
    FWD = 120,
    BWD = 240,
    WPL = 8, /* weights per layer */
    USES = 10,
    KERNELS = 250000
};

static uint64_t rng = 88172645463325252ULL;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* The kernel being built: up to USES distinct tensors. */
struct kbuf {
    uint32_t t[USES];
    int32_t mode[USES];
    int n;
};

static void kadd(struct kbuf *k, uint32_t t, int32_t mode) {
    if (k->n >= USES) {
        return;
    }
    for (int i = 0; i < k->n; i++) {
        if (k->t[i] == t) {
            return;
        }
    }
    k->t[k->n] = t;
    k->mode[k->n] = mode;
    k->n++;
}

static int
kemit(struct tio_trace *tr, const char *name, uint64_t dur, uint32_t flags, const struct kbuf *k) {
    int rc = tio_trace_add_kernel(tr, name, dur, flags, NULL);
    for (int i = 0; i < k->n && rc == 0; i++) {
        rc = tio_trace_add_use(tr, k->t[i], k->mode[i]);
    }
    return rc;
}

/* The synthetic trace; exits with a message if it cannot be built. */
static struct tio_trace *build_trace(void) {
    struct tio_trace_params p = tio_trace_params_default();
    p.kernels_hint = KERNELS;
    p.uses_hint = (size_t)KERNELS * USES;
    p.tensors_hint = (size_t)LAYERS * WPL * 4 + (size_t)MICRO * LAYERS * (FWD + BWD);
    struct tio_trace *tr = NULL;
    int rc = tio_trace_new(&p, &tr);
    if (rc < 0) {
        return bench_trace_finish(tr, rc, "bench_analysis: building the trace");
    }
    /* Globals: weight, grad, adam m, adam v per weight; ~50-450 MB each (fp32 70B / 80 layers
     * / 8 tensors is ~440 MB). */
    uint32_t w[LAYERS][WPL], g[LAYERS][WPL], m1[LAYERS][WPL], m2[LAYERS][WPL];
    for (int l = 0; l < LAYERS && rc == 0; l++) {
        for (int i = 0; i < WPL && rc == 0; i++) {
            uint64_t bytes = 50000000 + next_rand() % 400000000;
            rc = tio_trace_add_tensor(tr, bytes, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, NULL,
                                      &w[l][i]);
            rc = rc ? rc
                    : tio_trace_add_tensor(tr, bytes, TIO_TENSOR_GRAD, TIO_TENSOR_GLOBAL, NULL,
                                           &g[l][i]);
            rc = rc ? rc
                    : tio_trace_add_tensor(tr, bytes, TIO_TENSOR_OPTIM_STATE, TIO_TENSOR_GLOBAL,
                                           NULL, &m1[l][i]);
            rc = rc ? rc
                    : tio_trace_add_tensor(tr, bytes, TIO_TENSOR_OPTIM_STATE, TIO_TENSOR_GLOBAL,
                                           NULL, &m2[l][i]);
        }
    }
    /* Activations: ids allocated up front per (micro-batch, layer, index). */
    static uint32_t act[MICRO][LAYERS][FWD];
    for (int mb = 0; mb < MICRO && rc == 0; mb++) {
        for (int l = 0; l < LAYERS && rc == 0; l++) {
            for (int j = 0; j < FWD && rc == 0; j++) {
                uint64_t bytes = 1000000 + next_rand() % 200000000;
                rc =
                    tio_trace_add_tensor(tr, bytes, TIO_TENSOR_ACTIVATION, 0, NULL, &act[mb][l][j]);
            }
        }
    }
    size_t kernels = 0;
    for (int mb = 0; mb < MICRO && rc == 0; mb++) {
        /* Forward: the chain of activations runs across layers. */
        for (int l = 0; l < LAYERS && rc == 0; l++) {
            for (int j = 0; j < FWD && rc == 0; j++, kernels++) {
                struct kbuf k = { .n = 0 };
                kadd(&k, act[mb][l][j], TIO_USE_WRITE);
                kadd(&k, w[l][j % WPL], TIO_USE_READ);
                kadd(&k, w[l][(j + 1) % WPL], TIO_USE_READ);
                for (int d = 1; d <= 7; d++) {
                    int c = l * FWD + j - d;
                    if (c >= 0) {
                        kadd(&k, act[mb][c / FWD][c % FWD], TIO_USE_READ);
                    }
                }
                /* Short of history at the start of the chain: pad with the layer's weights,
                 * then its Adam states (16 distinct candidates). */
                for (int i = 0; k.n < USES && i < 2 * WPL; i++) {
                    kadd(&k, i < WPL ? w[l][i] : m1[l][i - WPL], TIO_USE_READ);
                }
                rc = kemit(tr, "fwd", 200000 + next_rand() % 800000, 0, &k);
            }
        }
        /* Backward: layers in reverse; temporaries are intermediates that live 3 kernels. */
        uint32_t tmp[4] = { 0 };
        int ntmp = 0;
        for (int l = LAYERS - 1; l >= 0 && rc == 0; l--) {
            for (int b = 0; b < BWD && rc == 0; b++, kernels++) {
                uint32_t t;
                rc = tio_trace_add_tensor(tr, 1000000 + next_rand() % 50000000, TIO_TENSOR_TEMP, 0,
                                          NULL, &t);
                if (rc < 0) {
                    break;
                }
                struct kbuf k = { .n = 0 };
                kadd(&k, t, TIO_USE_WRITE);
                for (int i = 0; i < ntmp; i++) {
                    kadd(&k, tmp[i], TIO_USE_READ);
                }
                int x = FWD - 1 - b / 2;
                kadd(&k, act[mb][l][x], TIO_USE_READ);
                if (x > 0) {
                    kadd(&k, act[mb][l][x - 1], TIO_USE_READ);
                }
                kadd(&k, w[l][b % WPL], TIO_USE_READ);
                kadd(&k, g[l][b % WPL], TIO_USE_READ_WRITE);
                for (int i = 1; k.n < USES; i++) {
                    kadd(&k, (i & 1) ? w[l][(b + i) % WPL] : g[l][(b + i) % WPL], TIO_USE_READ);
                }
                rc = kemit(tr, "bwd", 400000 + next_rand() % 1600000, TIO_KERNEL_BACKWARD, &k);
                memmove(tmp + 1, tmp, 2 * sizeof tmp[0]);
                tmp[0] = t;
                ntmp = ntmp < 3 ? ntmp + 1 : 3;
            }
        }
    }
    /* Optimizer: the remaining kernels, spread over the layers. */
    for (size_t o = 0; kernels < KERNELS && rc == 0; o++, kernels++) {
        int l = (int)(o % LAYERS), i = (int)((o / LAYERS) % WPL);
        struct kbuf k = { .n = 0 };
        kadd(&k, w[l][i], TIO_USE_READ_WRITE);
        kadd(&k, g[l][i], TIO_USE_READ);
        kadd(&k, m1[l][i], TIO_USE_READ_WRITE);
        kadd(&k, m2[l][i], TIO_USE_READ_WRITE);
        for (int d = 1; k.n < USES; d++) {
            kadd(&k, (d & 1) ? m1[l][(i + d) % WPL] : m2[l][(i + d) % WPL], TIO_USE_READ);
        }
        rc = kemit(tr, "adam", 50000 + next_rand() % 50000, TIO_KERNEL_OPTIM, &k);
    }
    return bench_trace_finish(tr, rc, "bench_analysis: building the trace");
}

int main(int argc, char **argv) {
    int repeats = argc > 1 ? bench_int(argv[1]) : 5;
    if (repeats < 1 || repeats > 100) {
        repeats = 5;
    }
    double t0 = tio_now_s();
    struct tio_trace *tr = build_trace();
    int rc;
    double build_s = tio_now_s() - t0;
    struct tio_trace_view v;
    tio_trace_get_view(tr, &v);

    double ta[100], tv[100], tp[100];
    volatile uint64_t sink = 0;
    struct tio_analysis_summary s;
    for (int r = 0; r < repeats; r++) {
        /* Anchor 1: one pass over the uses. */
        t0 = tio_now_s();
        uint64_t sum = 0;
        for (size_t u = 0; u < v.n_uses; u++) {
            sum += v.tensor_bytes[v.use_tensor[u]];
        }
        sink += sum;
        tp[r] = tio_now_s() - t0;
        /* Anchor 2: the trace's own validation pass. */
        t0 = tio_now_s();
        rc = tio_trace_validate(tr);
        tv[r] = tio_now_s() - t0;
        if (rc < 0) {
            (void)fprintf(stderr, "bench_analysis: validate: %s\n", tio_last_error());
            return 1;
        }
        struct tio_analysis *a;
        t0 = tio_now_s();
        rc = tio_analysis_new(tr, NULL, &a);
        ta[r] = tio_now_s() - t0;
        if (rc < 0) {
            (void)fprintf(stderr, "bench_analysis: %s: %s\n", tio_strerror(rc), tio_last_error());
            return 1;
        }
        tio_analysis_get_summary(a, &s);
        if (r == 0 && argc > 2 && strcmp(argv[2], "-") != 0) {
            t0 = tio_now_s();
            rc = tio_analysis_write_csv(a, argv[2]);
            if (rc < 0) {
                (void)fprintf(stderr, "bench_analysis: %s\n", tio_last_error());
                return 1;
            }
            printf("write_csv: %.3f s\n", tio_now_s() - t0);
        }
        tio_analysis_free(a);
    }
    double ma = bench_median(ta, repeats), mv = bench_median(tv, repeats),
           mp = bench_median(tp, repeats);
    printf("trace: %zu kernels, %zu tensors, %zu uses (built in %.2f s)\n", v.n_kernels,
           v.n_tensors, v.n_uses, build_s);
    printf("analysis: %zu periods, peak resident %.1f GB, global %.1f GB, active/resident mean "
           "%.2f%% max %.2f%%, long idle [10MB,1GB) %.1f%%\n",
           s.n_periods, (double)s.peak_resident_bytes / 1e9, (double)s.global_bytes / 1e9,
           100 * s.active_fraction_mean, 100 * s.active_fraction_max,
           100 * s.long_idle_fraction_10mb_1gb);
    printf("median of %d: tio_analysis_new %.1f ms | anchors: uses pass %.1f ms, "
           "tio_trace_validate %.1f ms | ratio analysis/uses-pass %.1fx, analysis/validate "
           "%.2fx\n",
           repeats, 1e3 * ma, 1e3 * mp, 1e3 * mv, ma / mp, ma / mv);
    (void)sink;
    if (argc > 3) {
        rc = tio_trace_save(tr, argv[3], TIO_TRACE_FORMAT_AUTO);
        if (rc < 0) {
            (void)fprintf(stderr, "bench_analysis: saving %s: %s\n", argv[3], tio_last_error());
            tio_trace_free(tr);
            return 1;
        }
        printf("saved the trace to %s\n", argv[3]);
    }
    tio_trace_free(tr);
    return 0;
}
