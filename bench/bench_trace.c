/*
 * Trace format speed: a synthetic Llama-70B-sized iteration (250,000 kernels, 2,500,000 uses;
 * the scale a reader, the analysis and the planner must handle) written and read in both formats.
 *
 *     bench_trace [kernels] [uses_per_kernel] [repetitions] [dir]
 *
 * Prints a Markdown table of medians (docs/bench/trace.md). The anchor is a plain memcpy of the
 * binary image measured in the same run: the binary reader cannot be faster than copying its
 * input once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <teraio/alloc_internal.h>
#include <teraio/trace.h>

#include "benchutil.h"
#include "common/common_impl.h"

/* Process CPU time (s): robust against other processes on a shared machine, unlike wall time. */
static double cpu_now(void) {
    return bench_cpu_s(CLOCK_PROCESS_CPUTIME_ID);
}

/* One measurement: wall and CPU seconds. */
struct stamp {
    double wall, cpu;
};
static struct stamp start(void) {
    struct stamp s = { tio_now_s(), cpu_now() };
    return s;
}
static void stop(struct stamp s, double *wall, double *cpu) {
    *wall = tio_now_s() - s.wall;
    *cpu = cpu_now() - s.cpu;
}

/* xorshift64*: deterministic synthetic data. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

static const char *const op_names[] = {
    "aten::mm",          "aten::addmm",
    "aten::bmm",         "aten::add",
    "aten::mul",         "aten::silu",
    "aten::softmax",     "aten::rms_norm",
    "aten::embedding",   "aten::mm_backward",
    "aten::_fused_adam", "nccl:all_reduce",
    "aten::copy_",       "aten::cat",
    "aten::view",        "aten::scaled_dot_product_attention",
};

/* Kernels use a few long-lived weights (global) and a sliding window of activations. */
static struct tio_trace *build(size_t nk, size_t upk) {
    struct tio_trace_params p = tio_trace_params_default();
    p.kernels_hint = nk;
    p.tensors_hint = nk / 2;
    p.uses_hint = nk * upk;
    struct tio_trace *tr = NULL;
    if (tio_trace_new(&p, &tr) < 0) {
        return NULL;
    }
    size_t n_weights = nk / 25, n_act = nk / 2 - n_weights;
    if (n_weights == 0 || n_act == 0) { /* main refuses fewer than 100 kernels */
        tio_trace_free(tr);
        return NULL;
    }
    char name[64];
    for (size_t t = 0; t < n_weights + n_act; t++) {
        int global = t < n_weights;
        if (global) {
            (void)snprintf(name, sizeof name, "layers.%zu.weight", t);
        }
        if (tio_trace_add_tensor(tr, 4096 + (rnd() % (64u << 20)),
                                 global ? TIO_TENSOR_WEIGHT : TIO_TENSOR_ACTIVATION,
                                 global ? TIO_TENSOR_GLOBAL : 0, global ? name : NULL, NULL) < 0) {
            goto fail;
        }
    }
    for (size_t k = 0; k < nk; k++) {
        const char *op = op_names[rnd() % (sizeof op_names / sizeof op_names[0])];
        if (tio_trace_add_kernel(tr, op, 1000 + rnd() % 500000, (uint32_t)(rnd() % 8), NULL) < 0) {
            goto fail;
        }
        size_t base = n_weights + (k * n_act / nk);
        for (size_t u = 0; u < upk; u++) {
            /* distinct tensors per kernel: one weight, the rest consecutive activations */
            uint32_t t = u == 0 ? (uint32_t)(rnd() % n_weights)
                                : (uint32_t)(n_weights + (base - n_weights + u) % n_act);
            if (tio_trace_add_use(tr, t, (int32_t)(1 + rnd() % 3)) < 0) {
                goto fail;
            }
        }
    }
    if (tio_trace_set_meta(tr, "model", "synthetic") < 0 || tio_trace_finish(tr) < 0) {
        goto fail;
    }
    return tr;
fail:
    (void)fprintf(stderr, "bench_trace: build failed: %s\n", tio_last_error());
    tio_trace_free(tr);
    return NULL;
}

#define MAX_REPS 100

enum {
    MEMCPY,
    VALIDATE,
    BIN_SAVE,
    BIN_LOAD,
    BIN_FSAVE,
    BIN_FLOAD,
    JS_SAVE,
    JS_LOAD,
    JS_FSAVE,
    JS_FLOAD,
    N_ROWS
};
static const char *const row_names[N_ROWS] = {
    "anchor: memcpy of the binary image",
    "tio_trace_validate (inside every load)",
    "binary save_mem",
    "binary load_mem",
    "binary save (file, fsync)",
    "binary load (file)",
    "JSON save_mem",
    "JSON load_mem",
    "JSON save (file, fsync)",
    "JSON load (file)",
};

/* Run r of every row: times[row][r] (wall) and cpus[row][r]; the sizes of the binary and JSON
 * images. 0, 1 when a round trip changed the trace (said on stderr), -1 on a library error. */
static int one_run(struct tio_trace *tr,
                   uint64_t h0,
                   const char *pbin,
                   const char *pjson,
                   int r,
                   double (*times)[MAX_REPS],
                   double (*cpus)[MAX_REPS],
                   size_t *size_bin,
                   size_t *size_json) {
    void *d = NULL;
    size_t n = 0;
    struct tio_trace *back = NULL;
    struct stamp s = start();
    if (tio_trace_save_mem(tr, TIO_TRACE_FORMAT_BINARY, &d, &n) < 0) {
        return -1;
    }
    stop(s, &times[BIN_SAVE][r], &cpus[BIN_SAVE][r]);
    *size_bin = n;
    void *copy = tio_malloc(n);
    if (!copy) {
        return -1;
    }
    memset(copy, 1, n); /* fault the pages in first, as the readers' buffers are */
    s = start();
    memcpy(copy, d, n);
    stop(s, &times[MEMCPY][r], &cpus[MEMCPY][r]);
    tio_free(copy);
    s = start();
    if (tio_trace_load_mem(d, n, TIO_TRACE_FORMAT_BINARY, &back) < 0) {
        return -1;
    }
    stop(s, &times[BIN_LOAD][r], &cpus[BIN_LOAD][r]);
    s = start();
    if (tio_trace_validate(back) < 0) {
        return -1;
    }
    stop(s, &times[VALIDATE][r], &cpus[VALIDATE][r]);
    uint64_t h = 0;
    if (tio_trace_hash(back, &h) < 0 || h != h0) {
        (void)fprintf(stderr, "bench_trace: binary round trip changed the trace\n");
        return 1;
    }
    tio_trace_free(back);
    tio_free(d);

    s = start();
    if (tio_trace_save_mem(tr, TIO_TRACE_FORMAT_JSON, &d, &n) < 0) {
        return -1;
    }
    stop(s, &times[JS_SAVE][r], &cpus[JS_SAVE][r]);
    *size_json = n;
    s = start();
    if (tio_trace_load_mem(d, n, TIO_TRACE_FORMAT_JSON, &back) < 0) {
        return -1;
    }
    stop(s, &times[JS_LOAD][r], &cpus[JS_LOAD][r]);
    if (tio_trace_hash(back, &h) < 0 || h != h0) {
        (void)fprintf(stderr, "bench_trace: JSON round trip changed the trace\n");
        return 1;
    }
    tio_trace_free(back);
    tio_free(d);

    const char *paths[2] = { pbin, pjson };
    int32_t fmts[2] = { TIO_TRACE_FORMAT_BINARY, TIO_TRACE_FORMAT_JSON };
    int rows[2][2] = { { BIN_FSAVE, BIN_FLOAD }, { JS_FSAVE, JS_FLOAD } };
    for (int f = 0; f < 2; f++) {
        s = start();
        if (tio_trace_save(tr, paths[f], fmts[f]) < 0) {
            return -1;
        }
        stop(s, &times[rows[f][0]][r], &cpus[rows[f][0]][r]);
        s = start();
        if (tio_trace_load(paths[f], TIO_TRACE_FORMAT_AUTO, &back) < 0) {
            return -1;
        }
        stop(s, &times[rows[f][1]][r], &cpus[rows[f][1]][r]);
        tio_trace_free(back);
    }
    return 0;
}

int main(int argc, char **argv) {
    size_t nk = argc > 1 ? strtoul(argv[1], NULL, 10) : 250000;
    size_t upk = argc > 2 ? strtoul(argv[2], NULL, 10) : 10;
    int reps = argc > 3 ? bench_int(argv[3]) : 5;
    const char *dir = argc > 4 ? argv[4] : "/tmp";
    if (nk < 100 || upk < 2 || reps < 1 || reps > MAX_REPS) {
        (void)fprintf(stderr,
                      "usage: bench_trace [kernels>=100] [uses_per_kernel>=2] [reps] [dir]\n");
        return 1;
    }
    double t0 = tio_now_s();
    struct tio_trace *tr = build(nk, upk);
    if (!tr) {
        return 1;
    }
    double t_build = tio_now_s() - t0;
    uint64_t h0 = 0;
    if (tio_trace_hash(tr, &h0) < 0) {
        return 1;
    }

    double times[N_ROWS][MAX_REPS], cpus[N_ROWS][MAX_REPS];
    size_t size_bin = 0, size_json = 0;
    char pbin[512], pjson[512];
    (void)snprintf(pbin, sizeof pbin, "%s/bench_trace_%d.tio", dir, (int)getpid());
    (void)snprintf(pjson, sizeof pjson, "%s/bench_trace_%d.json", dir, (int)getpid());
    for (int r = 0; r < reps; r++) {
        int rc = one_run(tr, h0, pbin, pjson, r, times, cpus, &size_bin, &size_json);
        if (rc > 0) {
            return 1;
        }
        if (rc < 0) {
            goto fail;
        }
    }
    unlink(pbin);
    /* NOLINTNEXTLINE(concurrency-mt-unsafe): nothing sets the environment meanwhile */
    if (!getenv("BENCH_KEEP")) {
        unlink(pjson);
    }

    printf("trace: %zu kernels, %zu tensors, %zu uses; built in %.3f s\n",
           tio_trace_kernel_count(tr), tio_trace_tensor_count(tr), tio_trace_use_count(tr),
           t_build);
    printf("binary %.1f MB, JSON %.1f MB (%.2fx); median of %d runs\n\n", (double)size_bin / 1e6,
           (double)size_json / 1e6, (double)size_json / (double)size_bin, reps);
    printf("| operation | wall median (ms) | CPU median (ms) | MB/s (CPU) | CPU vs memcpy |\n"
           "|---|---:|---:|---:|---:|\n");
    double anchor = bench_median(cpus[MEMCPY], reps);
    for (int row = 0; row < N_ROWS; row++) {
        double m = bench_median(times[row], reps), c = bench_median(cpus[row], reps);
        size_t bytes = (row >= JS_SAVE) ? size_json : size_bin;
        printf("| %s | %.2f | %.2f | %.0f | %.1fx |\n", row_names[row], m * 1e3, c * 1e3,
               (double)bytes / 1e6 / c, c / anchor);
    }
    double bin_rt = bench_median(times[BIN_SAVE], reps) + bench_median(times[BIN_LOAD], reps);
    double js_rt = bench_median(times[JS_SAVE], reps) + bench_median(times[JS_LOAD], reps);
    double bin_cpu = bench_median(cpus[BIN_SAVE], reps) + bench_median(cpus[BIN_LOAD], reps);
    double js_cpu = bench_median(cpus[JS_SAVE], reps) + bench_median(cpus[JS_LOAD], reps);
    printf("\nsave+load in memory: binary %.1f ms wall / %.1f ms CPU; JSON %.1f ms wall / %.1f ms "
           "CPU (JSON/binary CPU %.0fx)\n",
           bin_rt * 1e3, bin_cpu * 1e3, js_rt * 1e3, js_cpu * 1e3, js_cpu / bin_cpu);
    tio_trace_free(tr);
    return 0;
fail:
    (void)fprintf(stderr, "bench_trace: %s\n", tio_last_error());
    return 1;
}
