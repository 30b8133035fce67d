/*
 * bench_model: how long the workload model takes to generate the paper's traces (median of 3),
 * and what those traces say next to the paper: Observation 1 (active memory), Observation 2
 * (long inactive periods), kernels per iteration, peak-memory ratios M (paper §4.1) and the
 * ideal throughput. Prints Markdown (docs/bench/model.md is this output).
 *
 * The observation statistics are computed here with an independent sweep over the trace
 * (the same definitions as teraio/analysis.h), so the benchmark does not depend on the
 * analysis module.
 *
 *     build/bench_model > docs/bench/model.md
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <teraio/alloc.h>
#include <teraio/model.h>
#include <teraio/trace.h>

#include "benchutil.h"
#include "common/common_impl.h"

static double cpu_s(void) {
    return bench_cpu_s(CLOCK_PROCESS_CPUTIME_ID);
}

static struct tio_model_params preset(const char *name) {
    struct tio_model_params p;
    if (tio_model_preset(name, &p) < 0) {
        (void)fprintf(stderr, "bench_model: %s\n", tio_last_error());
        /* NOLINTNEXTLINE(concurrency-mt-unsafe): no other thread runs here */
        exit(1);
    }
    return p;
}

static struct tio_trace *gen(const struct tio_model_params *p, struct tio_model_info *in) {
    struct tio_trace *tr = NULL;
    if (tio_model_generate(p, &tr, in) < 0) {
        (void)fprintf(stderr, "bench_model: %s\n", tio_last_error());
        /* NOLINTNEXTLINE(concurrency-mt-unsafe): no other thread runs here */
        exit(1);
    }
    return tr;
}

struct obs {
    double active_mean, active_max; /* active bytes / capacity */
    double resident_mean;           /* resident / capacity */
    double long_idle;               /* fraction of 10 MB-1 GB periods idle > 10 ms */
    size_t periods_10mb_1gb;
    double bucket_tensors[5]; /* share of tensors per size bucket */
};

static int bucket(uint64_t b) {
    return b < 1000000ull      ? 0
           : b < 10000000ull   ? 1
           : b < 100000000ull  ? 2
           : b < 1000000000ull ? 3
                               : 4;
}

static void observe(const struct tio_trace *tr, uint64_t capacity, struct obs *o) {
    struct tio_trace_view v;
    tio_trace_get_view(tr, &v);
    size_t K = v.n_kernels, N = v.n_tensors;
    uint64_t *start = calloc(K + 1, sizeof *start);
    uint64_t *first = malloc(N * sizeof *first), *prev = malloc(N * sizeof *prev);
    int64_t *delta = calloc(K + 1, sizeof *delta);
    for (size_t k = 0; k < K; k++) {
        start[k + 1] = start[k] + v.kernel_duration_ns[k];
    }
    for (size_t t = 0; t < N; t++) {
        first[t] = prev[t] = UINT64_MAX;
    }
    size_t nlong = 0, nper = 0;
    double amean = 0, amax = 0;
    const uint64_t long_ns = 10000000ull;
    for (size_t k = 0; k < K; k++) {
        uint64_t active = 0;
        for (uint64_t x = v.kernel_use_offset[k]; x < v.kernel_use_offset[k + 1]; x++) {
            uint32_t t = v.use_tensor[x];
            active += v.tensor_bytes[t];
            if (first[t] == UINT64_MAX) {
                first[t] = k;
            } else if (prev[t] + 1 < k) { /* a gap [prev+1, k) */
                uint64_t b = v.tensor_bytes[t];
                if (b >= 10000000ull && b < 1000000000ull) {
                    nper++;
                    nlong += start[k] - start[prev[t] + 1] > long_ns;
                }
            }
            prev[t] = k;
        }
        double f = (double)active / (double)capacity;
        amean += f;
        amax = f > amax ? f : amax;
    }
    uint64_t base = 0;
    double counts[5] = { 0 };
    for (size_t t = 0; t < N; t++) {
        uint64_t b = v.tensor_bytes[t];
        counts[bucket(b)] += 1;
        if (first[t] == UINT64_MAX) {
            if (v.tensor_flags[t] & TIO_TENSOR_GLOBAL) {
                base += b;
            }
            continue;
        }
        if (v.tensor_flags[t] & TIO_TENSOR_GLOBAL) {
            base += b;
            /* wrap-around period: after the last use to the first use of the next iteration */
            uint64_t d = (start[K] - start[prev[t] + 1]) + start[first[t]];
            if (d > 0 && b >= 10000000ull && b < 1000000000ull) {
                nper++;
                nlong += d > long_ns;
            }
        } else {
            delta[first[t]] += (int64_t)b;
            delta[prev[t] + 1] -= (int64_t)b;
        }
    }
    int64_t cur = 0;
    double rmean = 0;
    for (size_t k = 0; k < K; k++) {
        cur += delta[k];
        rmean += (double)(base + (uint64_t)cur) / (double)capacity;
    }
    o->active_mean = amean / (double)K;
    o->active_max = amax;
    o->resident_mean = rmean / (double)K;
    o->long_idle = nper ? (double)nlong / (double)nper : 0;
    o->periods_10mb_1gb = nper;
    for (int i = 0; i < 5; i++) {
        o->bucket_tensors[i] = counts[i] / (double)N;
    }
    free(start);
    free(first);
    free(prev);
    free(delta);
}

/* Generation time, and as the anchor measured in the same run the time to load the same trace
 * from its binary .tio bytes in memory (what reading a profiled trace costs). */
static void timing(const char *name) {
    struct tio_model_params p = preset(name);
    double t[3], l[3], c[3];
    struct tio_model_info in;
    void *data = NULL;
    size_t len = 0;
    for (int i = 0; i < 3; i++) {
        double t0 = tio_now_s(), c0 = cpu_s();
        struct tio_trace *tr = gen(&p, &in);
        t[i] = tio_now_s() - t0;
        c[i] = cpu_s() - c0;
        if (!data && tio_trace_save_mem(tr, TIO_TRACE_FORMAT_BINARY, &data, &len) < 0) {
            (void)fprintf(stderr, "bench_model: %s\n", tio_last_error());
            /* NOLINTNEXTLINE(concurrency-mt-unsafe): no other thread runs here */
            exit(1);
        }
        tio_trace_free(tr);
    }
    for (int i = 0; i < 3; i++) {
        struct tio_trace *tr = NULL;
        double t0 = tio_now_s();
        if (tio_trace_load_mem(data, len, TIO_TRACE_FORMAT_BINARY, &tr) < 0) {
            (void)fprintf(stderr, "bench_model: %s\n", tio_last_error());
            /* NOLINTNEXTLINE(concurrency-mt-unsafe): no other thread runs here */
            exit(1);
        }
        l[i] = tio_now_s() - t0;
        tio_trace_free(tr);
    }
    tio_free(data);
    bench_sort(t, 3);
    bench_sort(l, 3);
    bench_sort(c, 3);
    printf("| %s (rank 0) | %zu | %zu | %zu | %.3f | %.3f | %.3f | %.3f | %.3f | %.2f |\n", name,
           in.n_kernels, in.n_tensors, in.n_uses, t[1], t[0], t[2], c[1], l[1], t[1] / l[1]);
}

static double mem_ratio(struct tio_model_params p, uint32_t mb, double *r1) {
    double r[2] = { 0, 0 };
    p.micro_batch = mb;
    for (uint32_t rank = 0; rank < 2; rank++) {
        p.rank = rank;
        struct tio_model_info in;
        tio_trace_free(gen(&p, &in));
        r[rank] = in.memory_ratio;
    }
    *r1 = r[1];
    return r[0];
}

int main(void) {
    printf("# Workload model benchmark\n\n");
    printf("Generated by `build/bench_model` (bench/bench_model.c). Machine: the shared "
           "development container (2 cores, shared with other jobs).\n\n");
    printf("## Generation time (median of 3)\n\n");
    printf("The paper's settings (2-stage 1F1B, fp32, micro-batch 4), trace of rank 0. Target: "
           "Llama3-70B under 5 s. Wall-clock seconds on a machine shared by several jobs (load "
           "average well above its 2 cores), so the CPU time of the process is given too. The "
           "anchor, measured in the same run, is loading the same trace from its binary .tio "
           "bytes in memory (tio_trace_load_mem, median of 3).\n\n");
    printf("| model | kernels | tensors | uses | median s | min s | max s | median CPU s | "
           "load .tio s (anchor) | generate / load |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    timing("llama3-8b");
    timing("llama3-70b");
    timing("granite-code-8b");

    printf("\n## Observations 1 and 2 (paper §2) on our traces\n\n");
    printf("Active = bytes of the tensors the running kernel uses, as a fraction of GPU capacity "
           "(94 GiB), per kernel; long idle = fraction of the inactive periods of tensors of "
           "10 MB-1 GB that last more than 10 ms (wrap-around periods of global tensors "
           "included).\n\n");
    printf("| trace | kernels | paper kernels (GPU0) | active mean | active max | long idle "
           "(10 MB-1 GB) | periods | tensors <1MB / 1-10MB / 10-100MB / 100MB-1GB / >1GB |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    const char *names[] = { "llama3-8b", "llama3-70b", "granite-code-8b" };
    const char *paper_k[] = { "~50,000", "~250,000", "-" };
    for (int i = 0; i < 3; i++) {
        for (uint32_t rank = 0; rank < 2; rank++) {
            struct tio_model_params p = preset(names[i]);
            p.rank = rank;
            struct tio_model_info in;
            struct tio_trace *tr = gen(&p, &in);
            struct obs o;
            observe(tr, in.capacity_bytes, &o);
            printf("| %s rank %u (bs %u, seq %u) | %zu | %s | %.2f%% | %.2f%% | %.1f%% | %zu | "
                   "%.1f / %.1f / %.1f / %.1f / %.1f %% |\n",
                   names[i], rank, p.global_batch, p.seq_len, in.n_kernels,
                   rank == 0 ? paper_k[i] : "-", 100 * o.active_mean, 100 * o.active_max,
                   100 * o.long_idle, o.periods_10mb_1gb, 100 * o.bucket_tensors[0],
                   100 * o.bucket_tensors[1], 100 * o.bucket_tensors[2], 100 * o.bucket_tensors[3],
                   100 * o.bucket_tensors[4]);
            tio_trace_free(tr);
        }
    }
    printf("| paper (all models) | | | 1.7%% | < 14%% | > 40%% | | |\n");

    printf("\n## Peak memory ratio M (paper §4.1, Figure 7 labels)\n\n");
    printf("M = peak resident bytes on one GPU / 94 GiB, nothing offloaded, 2-stage 1F1B, fp32, "
           "AdamW, no checkpointing. Ours for stage 0 (stage 1 in brackets) at micro-batch 4 "
           "(the default, which also reproduces the kernel counts) and at micro-batch 2.\n\n");
    printf("| model | batch | seq | paper M | ours mb 4 | diff | ours mb 2 | diff |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    struct {
        const char *name;
        uint32_t bs, seq;
        double paper;
    } cfg[] = {
        { "llama3-8b", 32, 2048, 1.8756 },       { "llama3-8b", 64, 2048, 1.8881 },
        { "llama3-8b", 128, 2048, 1.9132 },      { "granite-code-8b", 32, 4096, 3.7934 },
        { "granite-code-8b", 64, 4096, 3.8184 }, { "granite-code-8b", 128, 4096, 3.8684 },
        { "llama3-70b", 8, 2048, 9.4023 },       { "llama3-70b", 16, 2048, 9.4085 },
        { "llama3-70b", 32, 2048, 9.4210 },      { "llama3-70b", 16, 3072, 10.9180 },
        { "llama3-70b", 16, 4096, 12.4275 },
    };
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
        struct tio_model_params p = preset(cfg[i].name);
        p.global_batch = cfg[i].bs;
        p.seq_len = cfg[i].seq;
        double s1a, s1b;
        double a = mem_ratio(p, 4, &s1a), b = mem_ratio(p, 2, &s1b);
        printf("| %s | %u | %u | %.2f%% | %.2f%% (%.2f%%) | %+.1f%% | %.2f%% (%.2f%%) | %+.1f%% "
               "|\n",
               cfg[i].name, cfg[i].bs, cfg[i].seq, 100 * cfg[i].paper, 100 * a, 100 * s1a,
               100 * (a / cfg[i].paper - 1), 100 * b, 100 * s1b, 100 * (b / cfg[i].paper - 1));
    }
    printf("\nThe paper does not give its micro-batch. Micro-batch 4 puts Llama3-8B within 15%% "
           "and reproduces the kernel counts; Llama3-70B lands within 15%% at micro-batch 2, "
           "which is also what the slope of its sequence sweep implies; Granite-8B stays ~20%% "
           "below. docs/model.md section 5 explains the gap (allocator overhead a liveness sum "
           "leaves out, and a micro-batch the paper does not state).\n");

    printf("\n## Ideal throughput (infinite GPU memory), 2x H100 NVL, fp32\n\n");
    printf("1F1B makespan over both stages (pipeline bubbles included) from the roofline "
           "durations; the paper's Figure 7 y-axes reach about 2,000 (Llama3-8B), 1,500 "
           "(Granite-8B) and 200 (Llama3-70B) tokens/s.\n\n");
    printf("| model | batch | seq | iteration s | tokens/s | model TFLOP/s per GPU |\n");
    printf("|---|---|---|---|---|---|\n");
    struct {
        const char *name;
        uint32_t bs, seq;
    } thr[] = { { "llama3-8b", 32, 2048 },       { "llama3-8b", 128, 2048 },
                { "llama3-8b", 64, 1024 },       { "llama3-8b", 64, 4096 },
                { "granite-code-8b", 64, 4096 }, { "llama3-70b", 16, 2048 },
                { "llama3-70b", 16, 4096 } };
    for (size_t i = 0; i < sizeof thr / sizeof thr[0]; i++) {
        struct tio_model_params p = preset(thr[i].name);
        p.global_batch = thr[i].bs;
        p.seq_len = thr[i].seq;
        struct tio_model_info in;
        tio_trace_free(gen(&p, &in));
        printf("| %s | %u | %u | %.2f | %.0f | %.1f |\n", thr[i].name, thr[i].bs, thr[i].seq,
               in.ideal_iteration_s, in.ideal_tokens_per_s,
               in.model_flops_per_iteration / in.ideal_iteration_s / 2 / 1e12);
    }
    return 0;
}
