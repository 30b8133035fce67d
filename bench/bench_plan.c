/*
 * bench_plan: planning time of teraio-mixed and teraio-paper (one core), on synthetic layered
 * traces the size of the paper's (about 50k kernels for Llama3-8B, 250k for Llama3-70B per GPU,
 * the paper's §2) and, when the workload model is built in, on the model's Llama3 traces.
 * The paper reports 31.2 s (Llama3-8B) and 396.6 s (Llama3-70B) for its planner (Table 1).
 *
 *   bench_plan [--quick] [--runs N] [--hw PRESET]
 *   bench_plan --scale [--runs N] [--min-kernels N] [--max-kernels N]
 *
 * Prints a Markdown table (median of N runs) for docs/bench/plan.md. --scale plans the model's
 * Llama3-70B stage with more micro-batches (about 0.25M, 0.5M, 1M and 2M kernels) and reports
 * CPU time and the planner's peak memory per kernel (Linux: VmHWM after resetting it through
 * /proc/self/clear_refs, minus the resident size before planning; the whole process's peak is
 * given too).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <teraio/hw.h>
#include <teraio/plan.h>
#include <teraio/trace.h>
#include <teraio/units.h>

#if defined(__has_include)
#if __has_include(<teraio/model.h>)
#include <teraio/model.h>
#define HAVE_MODEL 1
#endif
#endif

#include "benchutil.h"
#include "common/common_impl.h"

#define MB 1000000ull

/*
 * A Llama-like stage: `layers` blocks of width h / ffn, `micro` micro-batches of `tokens`
 * tokens run forward then backward (gradient accumulation), then AdamW per parameter. FP32.
 * Durations: matmuls at 50 TFLOP/s, the rest at 2.5 TB/s, plus 5 us launch overhead.
 */
struct synth {
    const char *name;
    uint32_t layers, h, kv, ffn, micro, tokens;
};

static uint64_t mm_ns(double flops) {
    return (uint64_t)(flops / 50e12 * 1e9) + 5000;
}

static uint64_t mem_ns(double bytes) {
    return (uint64_t)(bytes / 2.5e12 * 1e9) + 5000;
}

/* One forward kernel of a layer: reads its input `in`, the weight `w` and, unless it is
 * UINT32_MAX, the residual `res`; writes `out`. */
static int layer_op(struct tio_trace *tr,
                    const char *name,
                    uint64_t ns,
                    uint32_t in,
                    uint32_t w,
                    uint32_t res,
                    uint32_t out) {
    int rc = tio_trace_add_kernel(tr, name, ns, 0, NULL);
    rc |= tio_trace_add_use(tr, in, TIO_USE_READ);
    rc |= tio_trace_add_use(tr, w, TIO_USE_READ);
    if (res != UINT32_MAX) {
        rc |= tio_trace_add_use(tr, res, TIO_USE_READ);
    }
    rc |= tio_trace_add_use(tr, out, TIO_USE_WRITE);
    return rc;
}

/* The synthetic trace of `s`; exits with a message if it cannot be built. */
static struct tio_trace *synth_trace(const struct synth *s) {
    struct tio_trace *tr = NULL;
    int rc = tio_trace_new(NULL, &tr);
    if (rc < 0) {
        return bench_trace_finish(tr, rc, "synth");
    }
    uint32_t L = s->layers;
    double h = s->h, kv = s->kv, f = s->ffn, T = s->tokens;
    /* per layer: 7 matrices + 2 norms; each has weight, grad, 2 Adam moments */
    const double wsz[9] = { h * h, h * kv, h * kv, h * h, h * f, h * f, f * h, h, h };
    uint32_t *w = calloc((size_t)L * 9 * 4, sizeof *w);
    if (!w) {
        return bench_trace_finish(tr, TIO_ENOMEM, "synth");
    }
    for (uint32_t l = 0; l < L && rc == 0; l++) {
        for (int j = 0; j < 9 && rc == 0; j++) {
            uint64_t b = (uint64_t)(wsz[j] * 4);
            uint32_t *x = &w[((size_t)l * 9 + (size_t)j) * 4];
            rc |= tio_trace_add_tensor(tr, b, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, NULL, &x[0]);
            rc |= tio_trace_add_tensor(tr, b, TIO_TENSOR_GRAD, TIO_TENSOR_GLOBAL, NULL, &x[1]);
            rc |=
                tio_trace_add_tensor(tr, b, TIO_TENSOR_OPTIM_STATE, TIO_TENSOR_GLOBAL, NULL, &x[2]);
            rc |=
                tio_trace_add_tensor(tr, b, TIO_TENSOR_OPTIM_STATE, TIO_TENSOR_GLOBAL, NULL, &x[3]);
        }
    }
    uint64_t act = (uint64_t)(T * h * 4), actf = (uint64_t)(T * f * 4);
    uint32_t k, prev = UINT32_MAX;
    /* saved activations per layer: x_norm, q, k, v, attn_out, h_norm, gate, up, act */
    uint32_t *sv = calloc((size_t)L * 9, sizeof *sv);
    if (!sv) {
        free(w);
        return bench_trace_finish(tr, TIO_ENOMEM, "synth");
    }
    for (uint32_t mb = 0; mb < s->micro && rc == 0; mb++) {
        uint32_t x;
        rc |= tio_trace_add_tensor(tr, act, TIO_TENSOR_INPUT, 0, NULL, &x);
        rc |= tio_trace_add_kernel(tr, "recv", mem_ns((double)act), TIO_KERNEL_COMM, &k);
        rc |= tio_trace_add_use(tr, x, TIO_USE_WRITE);
        prev = x;
        for (uint32_t l = 0; l < L && rc == 0; l++) {
            const uint32_t *W = &w[(size_t)l * 36];
            uint32_t *a = &sv[(size_t)l * 9];
            uint64_t asz[9] = {
                act, act, (uint64_t)(T * kv * 4), (uint64_t)(T * kv * 4), act, act, actf, actf, actf
            };
            for (int j = 0; j < 9; j++) {
                rc |= tio_trace_add_tensor(tr, asz[j], TIO_TENSOR_ACTIVATION, 0, NULL, &a[j]);
            }
            /* rmsnorm, q, k, v, rope x2, attention, o, residual, rmsnorm, gate, up, silu*mul,
             * down, residual: 15 kernels */
            rc |= layer_op(tr, "rmsnorm", mem_ns(2.0 * (double)act), prev, W[28], UINT32_MAX, a[0]);
            for (int j = 0; j < 3; j++) {
                rc |= layer_op(tr, "mm", mm_ns(2 * T * wsz[j]), a[0], W[(size_t)j * 4], UINT32_MAX,
                               a[1 + j]);
            }
            for (int j = 0; j < 2; j++) {
                rc |= tio_trace_add_kernel(tr, "rope", mem_ns(2.0 * (double)act), 0, &k);
                rc |= tio_trace_add_use(tr, a[1 + j], TIO_USE_READ_WRITE);
            }
            rc |= tio_trace_add_kernel(tr, "attn", mm_ns(4 * T * T * h / 2), 0, &k);
            for (int j = 1; j <= 4; j++) {
                rc |= tio_trace_add_use(tr, a[j], j == 4 ? TIO_USE_WRITE : TIO_USE_READ);
            }
            uint32_t r1;
            rc |= tio_trace_add_tensor(tr, act, TIO_TENSOR_ACTIVATION, 0, NULL, &r1);
            rc |= layer_op(tr, "mm_o", mm_ns(2 * T * wsz[3]), a[4], W[12], prev, r1);
            rc |= layer_op(tr, "rmsnorm", mem_ns(2.0 * (double)act), r1, W[32], UINT32_MAX, a[5]);
            for (int j = 0; j < 2; j++) {
                rc |= layer_op(tr, "mm", mm_ns(2 * T * wsz[4 + j]), a[5], W[(size_t)(4 + j) * 4],
                               UINT32_MAX, a[6 + j]);
            }
            rc |= tio_trace_add_kernel(tr, "silu_mul", mem_ns(3.0 * (double)actf), 0, &k);
            rc |= tio_trace_add_use(tr, a[6], TIO_USE_READ);
            rc |= tio_trace_add_use(tr, a[7], TIO_USE_READ);
            rc |= tio_trace_add_use(tr, a[8], TIO_USE_WRITE);
            uint32_t r2;
            rc |= tio_trace_add_tensor(tr, act, TIO_TENSOR_ACTIVATION, 0, NULL, &r2);
            rc |= layer_op(tr, "mm_down", mm_ns(2 * T * wsz[6]), a[8], W[24], r1, r2);
            prev = r2;
        }
        /* loss / send, then backward in reverse: per layer 2 kernels per matrix (dX, dW) plus
         * the elementwise backward ops, reading the saved activations */
        uint32_t g;
        rc |= tio_trace_add_tensor(tr, act, TIO_TENSOR_ACTIVATION, 0, NULL, &g);
        rc |= tio_trace_add_kernel(tr, "send_recv", mem_ns((double)act), TIO_KERNEL_COMM, &k);
        rc |= tio_trace_add_use(tr, prev, TIO_USE_READ);
        rc |= tio_trace_add_use(tr, g, TIO_USE_WRITE);
        for (uint32_t l = L; l-- > 0 && rc == 0;) {
            const uint32_t *W = &w[(size_t)l * 36];
            const uint32_t *a = &sv[(size_t)l * 9];
            static const int saved_in[9] = { 0, 0, 0, 4, 5, 5, 8, 0, 0 }; /* input per matrix */
            for (int j = 6; j >= 0 && rc == 0; j--) {
                rc |= tio_trace_add_kernel(tr, "mm_dx", mm_ns(2 * T * wsz[j]), TIO_KERNEL_BACKWARD,
                                           &k);
                rc |= tio_trace_add_use(tr, g, TIO_USE_READ_WRITE);
                rc |= tio_trace_add_use(tr, W[(size_t)j * 4], TIO_USE_READ);
                rc |= tio_trace_add_kernel(tr, "mm_dw", mm_ns(2 * T * wsz[j]), TIO_KERNEL_BACKWARD,
                                           &k);
                rc |= tio_trace_add_use(tr, g, TIO_USE_READ);
                rc |= tio_trace_add_use(tr, a[saved_in[j]], TIO_USE_READ);
                rc |= tio_trace_add_use(tr, W[j * 4 + 1],
                                        mb == 0 ? TIO_USE_WRITE : TIO_USE_READ_WRITE);
                if (j == 6) {
                    rc |= tio_trace_add_kernel(tr, "silu_mul_bwd", mem_ns(4.0 * (double)actf),
                                               TIO_KERNEL_BACKWARD, &k);
                    rc |= tio_trace_add_use(tr, a[6], TIO_USE_READ);
                    rc |= tio_trace_add_use(tr, a[7], TIO_USE_READ);
                    rc |= tio_trace_add_use(tr, g, TIO_USE_READ_WRITE);
                }
                if (j == 3) {
                    rc |= tio_trace_add_kernel(tr, "attn_bwd", mm_ns(2.5 * 4 * T * T * h / 2),
                                               TIO_KERNEL_BACKWARD, &k);
                    for (int q = 1; q <= 4; q++) {
                        rc |= tio_trace_add_use(tr, a[q], TIO_USE_READ);
                    }
                    rc |= tio_trace_add_use(tr, g, TIO_USE_READ_WRITE);
                }
            }
            for (int j = 7; j < 9; j++) { /* norms */
                rc |= tio_trace_add_kernel(tr, "rmsnorm_bwd", mem_ns(3.0 * (double)act),
                                           TIO_KERNEL_BACKWARD, &k);
                rc |= tio_trace_add_use(tr, g, TIO_USE_READ_WRITE);
                rc |= tio_trace_add_use(tr, W[(size_t)j * 4], TIO_USE_READ);
                rc |= tio_trace_add_use(tr, W[j * 4 + 1],
                                        mb == 0 ? TIO_USE_WRITE : TIO_USE_READ_WRITE);
            }
        }
        rc |= tio_trace_add_kernel(tr, "send", mem_ns((double)act), TIO_KERNEL_COMM, &k);
        rc |= tio_trace_add_use(tr, g, TIO_USE_READ);
    }
    /* AdamW, PyTorch's per-parameter loop: a few kernels per parameter */
    for (uint32_t i = 0; i < L * 9 && rc == 0; i++) {
        const uint32_t *x = &w[(size_t)i * 4];
        double b = wsz[i % 9] * 4;
        static const int uses[4][3] = { { 2, 1, -1 }, { 3, 1, -1 }, { 0, 2, 3 }, { 1, -1, -1 } };
        for (int j = 0; j < 4; j++) {
            rc |= tio_trace_add_kernel(tr, "adamw", mem_ns(3 * b), TIO_KERNEL_OPTIM, &k);
            for (int u = 0; u < 3 && uses[j][u] >= 0; u++) {
                rc |= tio_trace_add_use(tr, x[uses[j][u]], TIO_USE_READ_WRITE);
            }
        }
    }
    free(w);
    free(sv);
    return bench_trace_finish(tr, rc, "synth");
}

/* CPU seconds of this thread: the machine the numbers come from is shared, so wall time
 * measures the neighbours as much as the planner; both are reported. */
static double cpu_now(void) {
    return bench_cpu_s(CLOCK_THREAD_CPUTIME_ID);
}

/*
 * With BENCH_SAVE_PLANS=DIR set, the first run's plan of each case is written there (binary),
 * named after the trace's kernel count (distinct for every case) and the policy, so that two
 * builds' plans can be compared byte for byte (`cmp`).
 */
static void save_plan(const struct tio_plan *plan, size_t n, const char *pol, int run) {
    /* NOLINTNEXTLINE(concurrency-mt-unsafe): nothing sets the environment meanwhile */
    const char *dir = getenv("BENCH_SAVE_PLANS");
    if (!dir || run != 0) {
        return;
    }
    char path[512];
    (void)snprintf(path, sizeof path, "%s/%zu-%s.plan", dir, n, pol);
    if (tio_plan_save(plan, path, TIO_PLAN_FORMAT_BINARY) < 0) {
        (void)fprintf(stderr, "%s: %s\n", path, tio_last_error());
    }
}

static void bench_one(const char *name,
                      const struct tio_trace *tr,
                      const struct tio_hw *hw,
                      int runs,
                      double paper_s) {
    const char *pols[] = { "teraio-mixed", "teraio-paper" };
    /* NOLINTNEXTLINE(concurrency-mt-unsafe): nothing sets the environment meanwhile */
    int npol = getenv("BENCH_MIXED_ONLY") ? 1 : 2;
    struct tio_plan_params np = tio_plan_params_default();
    np.policy = "none";
    struct tio_plan *none = NULL;
    struct tio_plan_summary ns = { 0 };
    if (tio_plan_make(tr, hw, &np, &none) == 0) {
        tio_plan_get_summary(none, &ns);
    }
    tio_plan_free(none);
    for (size_t p = 0; p < (size_t)npol; p++) {
        double t[16], w[16];
        struct tio_plan_summary s = { 0 };
        int ok = 1;
        for (int r = 0; r < runs; r++) {
            struct tio_plan_params pp = tio_plan_params_default();
            pp.policy = pols[p];
            struct tio_plan *plan = NULL;
            double t0 = cpu_now(), w0 = tio_now_s();
            int rc = tio_plan_make(tr, hw, &pp, &plan);
            t[r] = cpu_now() - t0;
            w[r] = tio_now_s() - w0;
            if (rc < 0) {
                (void)fprintf(stderr, "%s %s: %s: %s\n", name, pols[p], tio_strerror(rc),
                              tio_last_error());
                ok = 0;
                break;
            }
            tio_plan_get_summary(plan, &s);
            save_plan(plan, tio_trace_kernel_count(tr), pols[p], r);
            tio_plan_free(plan);
        }
        if (!ok) {
            continue;
        }
        bench_sort(t, (size_t)runs);
        bench_sort(w, (size_t)runs);
        double med = t[runs / 2], wmed = w[runs / 2];
        char a[32], b[32], c[32];
        printf("| %s | %zu | %.0f%% | %s | %.3f | %.3f | %s | %zu | %s | %s | %s |\n", name,
               tio_trace_kernel_count(tr),
               100.0 * (double)ns.planned_peak_bytes / (double)hw->gpu_memory_bytes, pols[p], med,
               wmed,
               paper_s > 0 ? (snprintf(c, sizeof c, "%.1f (%.0fx)", paper_s, paper_s / med), c)
                           : "-",
               s.n_moves, s.feasible ? "yes" : "no", tio_format_bytes(s.bytes_to_ssd, a, sizeof a),
               tio_format_bytes(s.bytes_to_host, b, sizeof b));
        (void)fflush(stdout);
    }
}

#ifdef HAVE_MODEL
/* A field of /proc/self/status in bytes ("VmRSS", "VmHWM"), 0 if unreadable (not Linux). */
static uint64_t proc_status_bytes(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    uint64_t v = 0;
    size_t len = strlen(field);
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, field, len) == 0 && line[len] == ':') {
            v = strtoull(line + len + 1, NULL, 10) * 1024;
            break;
        }
    }
    if (f) {
        (void)fclose(f);
    }
    return v;
}

/* Reset the process's peak resident size to the current one (Linux 4.0+); 0 on success. */
static int reset_peak_rss(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) {
        return -1;
    }
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* The Llama3-70B preset (rank 0) with `micro` micro-batches of 4 sequences. */
static struct tio_trace *llama70_micro(uint32_t micro) {
    struct tio_model_params mp;
    struct tio_trace *tr = NULL;
    if (tio_model_preset("llama3-70b", &mp) < 0) {
        return NULL;
    }
    mp.global_batch = micro * mp.micro_batch;
    if (tio_model_generate(&mp, &tr, NULL) < 0) {
        (void)fprintf(stderr, "llama3-70b x%u: %s\n", micro, tio_last_error());
        return NULL;
    }
    return tr;
}

/* Planning time and memory against the kernel count (docs/bench/plan.md, "Scaling"). */
static int bench_scale(const struct tio_hw *hw, int runs, size_t min_kernels, size_t max_kernels) {
    struct tio_trace *a = llama70_micro(8), *b = llama70_micro(16);
    if (!a || !b) {
        tio_trace_free(a);
        tio_trace_free(b);
        return 1;
    }
    double per_mb = (double)(tio_trace_kernel_count(b) - tio_trace_kernel_count(a)) / 8.0;
    double base = (double)tio_trace_kernel_count(a) - 8.0 * per_mb;
    tio_trace_free(a);
    tio_trace_free(b);
    const double targets[] = { 250e3, 500e3, 1e6, 2e6 };
    const char *pols[] = { "teraio-mixed", "teraio-paper" };
    /* NOLINTNEXTLINE(concurrency-mt-unsafe): nothing sets the environment meanwhile */
    int npol = getenv("BENCH_MIXED_ONLY") ? 1 : 2;
    printf("| kernels | micro-batches | policy | planning CPU s | wall s | planner peak B/kernel "
           "| process peak B/kernel | moves | feasible | to SSD/iter | to host/iter |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < TIO_ARRAY_LEN(targets); i++) {
        if (targets[i] > (double)max_kernels || targets[i] < (double)min_kernels) {
            continue;
        }
        uint32_t micro = (uint32_t)((targets[i] - base) / per_mb + 0.5);
        struct tio_trace *tr = llama70_micro(micro);
        if (!tr) {
            return 1;
        }
        size_t n = tio_trace_kernel_count(tr);
        for (int p = 0; p < npol; p++) {
            double t[16], w[16], mem[16], tot[16];
            struct tio_plan_summary s = { 0 };
            for (int r = 0; r < runs; r++) {
                struct tio_plan_params pp = tio_plan_params_default();
                pp.policy = pols[p];
                struct tio_plan *plan = NULL;
                int have_peak = reset_peak_rss() == 0;
                uint64_t rss0 = proc_status_bytes("VmRSS");
                double t0 = cpu_now(), w0 = tio_now_s();
                int rc = tio_plan_make(tr, hw, &pp, &plan);
                t[r] = cpu_now() - t0;
                w[r] = tio_now_s() - w0;
                uint64_t hwm = proc_status_bytes("VmHWM");
                mem[r] = have_peak && hwm > rss0 ? (double)(hwm - rss0) / (double)n : -1;
                tot[r] = have_peak ? (double)hwm / (double)n : -1;
                if (rc < 0) {
                    (void)fprintf(stderr, "%zu kernels %s: %s: %s\n", n, pols[p], tio_strerror(rc),
                                  tio_last_error());
                    tio_trace_free(tr);
                    return 1;
                }
                tio_plan_get_summary(plan, &s);
                save_plan(plan, n, pols[p], r);
                tio_plan_free(plan);
            }
            char x[32], y[32];
            printf("| %zu | %u | %s | %.3f | %.3f | %.0f | %.0f | %zu | %s | %s | %s |\n", n, micro,
                   pols[p], bench_median(t, runs), bench_median(w, runs), bench_median(mem, runs),
                   bench_median(tot, runs), s.n_moves, s.feasible ? "yes" : "no",
                   tio_format_bytes(s.bytes_to_ssd, x, sizeof x),
                   tio_format_bytes(s.bytes_to_host, y, sizeof y));
            (void)fflush(stdout);
        }
        tio_trace_free(tr);
    }
    return 0;
}
#endif

int main(int argc, char **argv) {
    int quick = 0, runs = 3, scale = 0;
    size_t min_kernels = 0, max_kernels = 2100000;
    const char *only = NULL;
    uint32_t micro = 0;
    const char *hwname = "paper-2xh100nvl";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else if (strcmp(argv[i], "--scale") == 0) {
            scale = 1;
        } else if (strcmp(argv[i], "--max-kernels") == 0 && i + 1 < argc) {
            max_kernels = (size_t)strtoull(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--min-kernels") == 0 && i + 1 < argc) {
            min_kernels = (size_t)strtoull(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
            runs = bench_int(argv[++i]);
        } else if (strcmp(argv[i], "--micro") == 0 && i + 1 < argc) {
            micro = (uint32_t)bench_int(argv[++i]);
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else if (strcmp(argv[i], "--hw") == 0 && i + 1 < argc) {
            hwname = argv[++i];
        } else {
            (void)fprintf(stderr,
                          "usage: bench_plan [--quick] [--runs N] [--hw PRESET] [--only 8b|70b] "
                          "[--micro N] [--scale [--min-kernels N] [--max-kernels N]]\n");
            return 1;
        }
    }
    if (runs < 1 || runs > 15) {
        runs = 3;
    }
    struct tio_hw hw;
    if (tio_hw_preset(hwname, &hw) < 0) {
        (void)fprintf(stderr, "%s\n", tio_last_error());
        return 1;
    }
    printf("hw %s, median of %d runs, one thread\n\n", hw.name, runs);
    if (scale) {
#ifdef HAVE_MODEL
        return bench_scale(&hw, runs, min_kernels, max_kernels);
#else
        (void)fprintf(stderr, "bench_plan --scale needs the workload model (teraio/model.h)\n");
        return 1;
#endif
    }
    printf("| trace | kernels | M (peak/GPU) | policy | planning CPU s | wall s | paper s (ratio) "
           "| moves | feasible | to SSD/iter | to host/iter |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    /* Llama3-8B-like stage: 16 of 32 blocks, 4096/1024/14336; Llama3-70B-like: 40 of 80,
     * 8192/1024/28672; micro-batch counts set so the kernel counts match the paper's Figure 1. */
    struct synth syn[] = {
        { "synthetic-8b (16 layers, 96 mb x 16k tokens)", 16, 4096, 1024, 14336, 96, 16384 },
        { "synthetic-70b (40 layers, 190 mb x 2k tokens)", 40, 8192, 1024, 28672, 190, 2048 },
    };
    double paper[] = { 31.2, 396.6 };
    for (size_t i = 0; i < (quick ? 1u : 2u); i++) {
        struct synth s = syn[i];
        if (only && !strstr(s.name, only)) {
            continue;
        }
        if (quick) {
            s.micro = 4;
        }
        if (micro) {
            s.micro = micro;
        }
        struct tio_trace *tr = synth_trace(&s);
        bench_one(s.name, tr, &hw, runs, quick ? 0 : paper[i]);
        tio_trace_free(tr);
    }
#ifdef HAVE_MODEL
    const char *models[] = { "llama3-8b", "llama3-70b" };
    for (size_t i = 0; i < (quick ? 0u : 2u); i++) {
        struct tio_model_params mp;
        struct tio_trace *tr = NULL;
        if (only && !strstr(models[i], only)) {
            continue;
        }
        if (tio_model_preset(models[i], &mp) < 0 || tio_model_generate(&mp, &tr, NULL) < 0) {
            (void)fprintf(stderr, "model %s: %s\n", models[i], tio_last_error());
            continue;
        }
        char label[64];
        (void)snprintf(label, sizeof label, "model %s (rank 0)", models[i]);
        bench_one(label, tr, &hw, runs, paper[i]);
        tio_trace_free(tr);
    }
#endif
    return 0;
}
