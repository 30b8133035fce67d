/*
 * The GPU twin: the real stream-ordered executor and migration engine (libteraio, the "cuda"
 * backend) driving Llama-style traces on the fake CUDA runtime's timed mode
 * (tests/io/fakes/fake_cudart_timed.c): kernels last their trace durations on a compute stream,
 * one copy engine per PCIe direction moves the bytes at the configured rate, a full launch queue
 * blocks the host, the SSD tier is this machine's disk behind an emulated drive at the modelled
 * array's rates (the thread-pool backends' throttle_* options, src/io/throttle.h). Bytes and
 * bandwidths are divided by one factor (--byte-scale) so that a large model fits in this machine's
 * memory; times are unchanged. Per run it prints the twin's step time, the ideal (kernels back to
 * back), the simulator's prediction for the same trace, plan and rates, stalls by reason and the
 * training thread's CPU time per kernel. Self-check: with no moves the twin must equal its ideal
 * within 2% (exit 1 otherwise). docs/bench/twin.md has the method and the results.
 *
 * usage: bench_gpu_twin [--json] [--quick] [--iters N] [--byte-scale S] [--time-scale T]
 *                       [--tiers LIST] [--budget F] [--models LIST] [--trace FILE]...
 *                       [--no-model] [--no-offloader] [--dir DIR] [--no-throttle] [--depth N]
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <teraio/hw.h>
#include <teraio/io.h>
#include <teraio/model.h>
#include <teraio/plan.h>
#include <teraio/runtime.h>
#include <teraio/sim.h>
#include <teraio/status.h>
#include <teraio/trace.h>

#include "benchutil.h"
#include "io/fake_cuda.h"
#include "io/throttle.h"

#define MAX_TRACES 8
#define PAGE       UINT64_C(4096)

static struct fake_cuda fc;

struct opts {
    int json, iters, no_model, no_offloader;
    int no_throttle;    /* the SSD tier at the disk's own speed, not the modelled drive's */
    int depth;          /* the engine's queue_depth (0: its default) */
    const char *models; /* built-in traces, comma-separated (NULL: llama-1b) */
    double byte_scale, budget_frac;
    double time_scale; /* 0: per trace, so that an iteration's ideal is at most 1 s */
    /* byte_scale 0: per trace, the power of 2 that brings its peak under 400 MiB */
    const char *tiers, *dir;
    const char *traces[MAX_TRACES];
    int ntraces;
};

/* TIER_BARE: the self-check, the trace's kernels launched with no executor at all */
enum tier { TIER_BARE, TIER_NONE, TIER_HOST, TIER_SSD, TIER_BOTH };
static const char *const tier_names[] = { "bare", "none", "host", "ssd", "both" };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, int rc) {
    fprintf(stderr, "bench_gpu_twin: %s: %d (%s)\n", what, rc, tio_last_error());
    exit(1);
}

/* ---- traces ----------------------------------------------------------------------------- */

/* The built-in traces: a 1.1B Llama-style model, 16 layers of width 2048, fp32 on an H100 NVL
 * (about 3.2k tensors, 3.8k kernels), with two micro-batches per iteration. Equivalent to
 * `teraio model --preset custom --layers 16 --hidden 2048 --heads 16 --kv-heads 4
 * --ffn-hidden 8192 --vocab 32000 --pp 1` and then, for `llama-1b`, `--seq 1024 --batch 4
 * --micro-batch 2`; for `llama-1b-long`, `--seq 2048 --batch 8 --micro-batch 4` (four times the
 * tokens per micro-batch: more compute per byte moved, so that its plan at half the peak hides
 * every transfer). */
static const struct builtin {
    const char *name;
    uint32_t seq, batch, micro;
} builtins[] = { { "llama-1b", 1024, 4, 2 }, { "llama-1b-long", 2048, 8, 4 } };
#define N_BUILTINS (sizeof builtins / sizeof builtins[0])

/* name is one of the comma-separated list's items */
static int has_name(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) {
            return 1;
        }
        p = end ? end + 1 : NULL;
    }
    return 0;
}

static struct tio_trace *model_trace(const struct builtin *m) {
    struct tio_model_params p;
    int rc = tio_model_preset("llama3-8b", &p);
    if (rc < 0) {
        die("tio_model_preset", rc);
    }
    (void)snprintf(p.model, sizeof p.model, "custom");
    p.layers = 16;
    p.hidden = 2048;
    p.heads = 16;
    p.kv_heads = 4;
    p.head_dim = 0;
    p.ffn_hidden = 8192;
    p.vocab = 32000;
    p.seq_len = m->seq;
    p.global_batch = m->batch;
    p.micro_batch = m->micro;
    p.grad_accum = 0;
    p.pp = 1;
    p.rank = 0;
    struct tio_trace *tr = NULL;
    struct tio_model_info info;
    if ((rc = tio_model_generate(&p, &tr, &info)) < 0) {
        die("tio_model_generate", rc);
    }
    return tr;
}

/* tr with every tensor's bytes divided by s (rounded up to 512) and every kernel's duration
 * multiplied by ts, uses unchanged. */
static struct tio_trace *scaled_trace(const struct tio_trace *tr, double s, double ts) {
    struct tio_trace_view v;
    tio_trace_get_view(tr, &v);
    struct tio_trace *out = NULL;
    int rc = tio_trace_new(NULL, &out);
    for (size_t t = 0; t < v.n_tensors && rc == 0; t++) {
        uint64_t b = (uint64_t)ceil((double)v.tensor_bytes[t] / s);
        b = (b + 511) & ~(uint64_t)511;
        rc = tio_trace_add_tensor(out, b, v.tensor_kind[t], v.tensor_flags[t],
                                  tio_trace_string(tr, v.tensor_name[t]), NULL);
    }
    for (size_t k = 0; k < v.n_kernels && rc == 0; k++) {
        rc = tio_trace_add_kernel(out, tio_trace_string(tr, v.kernel_name[k]),
                                  (uint64_t)((double)v.kernel_duration_ns[k] * ts),
                                  v.kernel_flags[k], NULL);
        for (uint64_t u = v.kernel_use_offset[k]; u < v.kernel_use_offset[k + 1] && rc == 0; u++) {
            rc = tio_trace_add_use(out, v.use_tensor[u], v.use_mode[u]);
        }
    }
    return bench_trace_finish(out, rc, "scaled trace");
}

/* ---- one run ------------------------------------------------------------------------------ */

struct result {
    const char *trace;
    enum tier tier;
    double time_scale, byte_scale;
    double budget_frac;
    uint64_t budget, peak, tensors, kernels, moves;
    double twin_s, ideal_s, predicted_s, stall_s, read_stall_s, pressure_s, demand_s, us_per_kernel,
        h2d_util, d2h_util, host_s;
    /* per step, the compute stream: held back by copies' events; idle for the host */
    double dep_wait_s, dep_waits, late_s;
    uint64_t queue_full, urgent, offloads, prefetches, pageable;
    /* per step: host-tier offloads the host tier had no room for, sent to the SSD instead; host
     * copies of tensors in memory dropped to make room; offloads that wrote nothing (clean) */
    uint64_t fallbacks, copies_dropped, clean;
    /* the emulated drive (SSD tiers): its read and write rates (B/s), and per step the time
     * the real transfers ended past their modelled completion (sum, largest one) */
    double drive_read_Bps, drive_write_Bps, drive_behind_s, drive_behind_max_s;
    /* per step: the drive's bytes (read, write) and its busy time, on the twin and predicted;
     * the predicted stall waiting for data and for memory */
    double drive_rd_B, drive_wr_B, drive_busy_s, sim_rd_B, sim_wr_B, sim_stall_data_s,
        sim_stall_mem_s;
    /* the training thread's waits per step by reason (tio_runtime_stats): read, write, budget,
     * end, other */
    double wait_n[5], wait_s[5];
    char error[300];
};

/* Bytes resident at each kernel when nothing moves: the peak. */
static uint64_t peak_bytes(const struct tio_trace *tr, uint32_t *first, uint32_t *last) {
    struct tio_trace_view v;
    tio_trace_get_view(tr, &v);
    for (size_t t = 0; t < v.n_tensors; t++) {
        first[t] = UINT32_MAX;
        last[t] = 0;
    }
    for (size_t k = 0; k < v.n_kernels; k++) {
        for (uint64_t u = v.kernel_use_offset[k]; u < v.kernel_use_offset[k + 1]; u++) {
            uint32_t t = v.use_tensor[u];
            first[t] = first[t] == UINT32_MAX ? (uint32_t)k : first[t];
            last[t] = (uint32_t)k;
        }
    }
    int64_t *delta = calloc(v.n_kernels + 1, sizeof *delta);
    if (!delta) {
        die("calloc", TIO_ENOMEM);
    }
    uint64_t globals = 0, peak = 0;
    for (size_t t = 0; t < v.n_tensors; t++) {
        if (v.tensor_flags[t] & TIO_TENSOR_GLOBAL) {
            globals += v.tensor_bytes[t];
        } else if (first[t] != UINT32_MAX) {
            delta[first[t]] += (int64_t)v.tensor_bytes[t];
            delta[last[t] + 1] -= (int64_t)v.tensor_bytes[t];
        }
    }
    int64_t live = 0;
    for (size_t k = 0; k < v.n_kernels; k++) {
        live += delta[k];
        peak = globals + (uint64_t)live > peak ? globals + (uint64_t)live : peak;
    }
    free(delta);
    return peak;
}

static uint64_t raw_peak(const struct tio_trace *tr) {
    size_t n = tio_trace_tensor_count(tr);
    uint32_t *first = malloc((n ? n : 1) * sizeof *first),
             *last = malloc((n ? n : 1) * sizeof *last);
    if (!first || !last) {
        die("malloc", TIO_ENOMEM);
    }
    uint64_t peak = peak_bytes(tr, first, last);
    free(first);
    free(last);
    return peak;
}

/* The paper's server with bytes divided by bs and bandwidths by bs * ts; the tiers a run may
 * use. */
static struct tio_hw
twin_hw(double bs, double ts, enum tier tier, uint64_t budget, uint64_t host_cap) {
    double s = bs * ts;
    struct tio_hw hw;
    if (tio_hw_preset("paper-2xh100nvl", &hw) < 0) {
        die("tio_hw_preset", -1);
    }
    hw.gpu_memory_bytes = budget;
    hw.gpu_reserve_bytes = 0;
    hw.pcie_h2d_Bps /= s;
    hw.pcie_d2h_Bps /= s;
    hw.ssd_read_Bps /= s;
    hw.ssd_write_Bps /= s;
    hw.ssd_mixed_Bps /= s;
    hw.ssd_sustained_write_Bps /= s;
    hw.ssd_write_cache_bytes = (uint64_t)((double)hw.ssd_write_cache_bytes / bs);
    hw.host_memory_Bps /= s;
    hw.host_memory_bytes = (uint64_t)((double)hw.host_memory_bytes / bs);
    hw.ssd_latency_s *= ts;
    /* the emulated drive (throttle.h) has one budget for reads and writes and no write cache */
    hw.ssd_mixed_Bps = 0;
    hw.ssd_write_cache_bytes = 0;
    hw.ssd_sustained_write_Bps = 0;
    hw.host_offload_cap_bytes = tier == TIER_SSD ? 0 : host_cap;
    if (tier <= TIER_HOST) {
        hw.ssd_count = 0; /* no SSD tier */
    }
    hw.gds = 0; /* the engine's cuda backend bounces through pinned host buffers */
    return hw;
}

/* The caller: every tensor has its own device bytes (kernels touch nothing), bound when the
 * executor or the trace creates it. */
struct caller {
    struct tio_runtime *rt;
    struct tio_trace_view v;
    const uint32_t *first, *last;
    unsigned char *slab;
    uint64_t *off;
    void *stream;
    struct tio_runtime_action *act;
    size_t cap;
    int bare; /* launch the kernels only */
};

static int apply(struct caller *c, int n) {
    for (int i = 0; i < n; i++) {
        if (c->act[i].kind != TIO_RUNTIME_RELEASE) {
            int rc = tio_runtime_bind(c->rt, c->act[i].tensor, c->slab + c->off[c->act[i].tensor]);
            if (rc < 0) {
                return rc;
            }
        }
    }
    return 0;
}

static int iteration(struct caller *c) {
    if (c->bare) {
        for (uint32_t k = 0; k < c->v.n_kernels; k++) {
            if (fc.launch_kernel(c->stream, c->v.kernel_duration_ns[k]) != 0) {
                return tio_set_error(TIO_ECUDA, "fake_cuda_launch_kernel failed");
            }
        }
        return 0;
    }
    int n = tio_runtime_begin_iteration(c->rt, c->act, c->cap);
    if (n < 0 || (n = apply(c, n)) < 0) {
        return n;
    }
    for (uint32_t k = 0; k < c->v.n_kernels; k++) {
        n = tio_runtime_before_kernel(c->rt, k, c->act, c->cap);
        if (n < 0 || (n = apply(c, n)) < 0) {
            return n;
        }
        int rc = tio_runtime_ready(c->rt, k);
        if (rc < 0) {
            return rc;
        }
        uint64_t ns = c->v.kernel_duration_ns[k];
        if (fc.launch_kernel(c->stream, ns) != 0) {
            return tio_set_error(TIO_ECUDA, "fake_cuda_launch_kernel failed");
        }
        for (uint64_t u = c->v.kernel_use_offset[k]; u < c->v.kernel_use_offset[k + 1]; u++) {
            uint32_t t = c->v.use_tensor[u];
            if (!(c->v.tensor_flags[t] & TIO_TENSOR_GLOBAL) && c->first[t] == k &&
                (rc = tio_runtime_bind(c->rt, t, c->slab + c->off[t])) < 0) {
                return rc;
            }
        }
        if ((rc = tio_runtime_after_kernel(c->rt, k)) < 0) {
            return rc;
        }
    }
    n = tio_runtime_end_iteration(c->rt, c->act, c->cap);
    return n < 0 ? n : apply(c, n);
}

static void fail(struct result *r, const char *what, int rc) {
    if (!r->error[0]) {
        (void)snprintf(r->error, sizeof r->error, "%s: %d (%s)", what, rc, tio_last_error());
    }
}

static void run(const struct opts *o,
                const char *name,
                const struct tio_trace *tr,
                double bs,
                double ts,
                uint64_t min_bytes,
                enum tier tier,
                struct result *r) {
    struct tio_trace_view v;
    tio_trace_get_view(tr, &v);
    memset(r, 0, sizeof *r);
    r->trace = name;
    r->tier = tier;
    r->time_scale = ts;
    r->byte_scale = bs;
    r->tensors = v.n_tensors;
    r->kernels = v.n_kernels;
    r->ideal_s = (double)tio_trace_total_duration_ns(tr) * 1e-9;
    uint32_t *first = malloc(v.n_tensors * sizeof *first),
             *last = malloc(v.n_tensors * sizeof *last);
    uint64_t *off = malloc(v.n_tensors * sizeof *off);
    if (!first || !last || !off) {
        die("malloc", TIO_ENOMEM);
    }
    r->peak = peak_bytes(tr, first, last);
    uint64_t total = 0;
    for (size_t t = 0; t < v.n_tensors; t++) {
        off[t] = total;
        total += (v.tensor_bytes[t] + PAGE - 1) & ~(PAGE - 1);
    }
    r->budget_frac = tier <= TIER_NONE ? 1.0 : o->budget_frac;
    r->budget = tier <= TIER_NONE ? r->peak : (uint64_t)((double)r->peak * o->budget_frac);
    /* the host tier: room for every tensor (host), for half of what must leave the device
     * (both: the SSDs take the rest), none (ssd) */
    uint64_t need = r->peak - r->budget, host_cap = tier == TIER_BOTH ? need / 2 : total;
    struct tio_hw hw = twin_hw(bs, ts, tier, r->budget, host_cap);
    struct tio_plan_params pp = tio_plan_params_default();
    pp.policy = tier <= TIER_NONE ? "none" : tier == TIER_SSD ? "teraio-ssd" : "teraio-mixed";
    pp.min_tensor_bytes = min_bytes;
    struct tio_plan *plan = NULL;
    struct tio_sim *sim = NULL;
    struct tio_engine *e = NULL;
    struct caller c = {
        .v = v, .first = first, .last = last, .off = off, .bare = tier == TIER_BARE
    };
    void *ev[2] = { NULL, NULL };
    int rc = tio_plan_make(tr, &hw, &pp, &plan);
    if (rc < 0) {
        fail(r, "tio_plan_make", rc);
        goto out;
    }
    size_t nm = 0;
    const struct tio_move *mv = tio_plan_moves(plan, &nm);
    r->moves = nm;
    struct tio_sim_params sp = tio_sim_params_default();
    if (tier <= TIER_NONE) {
        sp.policy = "ideal";
    }
    struct tio_sim_result sr;
    if ((rc = tio_sim_run(tr, &hw, tier <= TIER_NONE ? NULL : mv, tier <= TIER_NONE ? 0 : nm, &sp,
                          &sim)) < 0) {
        fail(r, "tio_sim_run", rc);
        goto out;
    }
    tio_sim_get_result(sim, &sr, sizeof sr);
    r->predicted_s = sr.oom ? (double)NAN : sr.iteration_s;
    r->sim_rd_B = (double)sr.bytes[TIO_SIM_SSD_READ];
    r->sim_wr_B = (double)sr.bytes[TIO_SIM_SSD_WRITE];
    r->sim_stall_data_s = sr.stall_data_s;
    r->sim_stall_mem_s = sr.stall_memory_s;

    /* the twin: copy engines at the modelled PCIe rates, pageable copies at 40% of them */
    if ((rc = fc.set_timing(1, hw.pcie_h2d_Bps, hw.pcie_d2h_Bps, 0.4 * hw.pcie_h2d_Bps, 1024)) !=
        0) {
        fail(r, "fake_cuda_set_timing", -rc);
        goto out;
    }
    const char *dirs[] = { o->dir };
    struct tio_engine_params ep = tio_engine_params_default();
    ep.backend = "cuda";
    ep.dirs = tier == TIER_SSD || tier == TIER_BOTH ? dirs : NULL;
    ep.ndirs = tier == TIER_SSD || tier == TIER_BOTH ? 1 : 0;
    ep.host_tier_bytes = tier == TIER_SSD ? 0 : tier <= TIER_NONE ? 16 * PAGE : host_cap;
    ep.preallocate = 0;
    if (o->depth) {
        ep.queue_depth = (uint32_t)o->depth;
    }
    char drive[200];
    if ((tier == TIER_SSD || tier == TIER_BOTH) && !o->no_throttle) {
        /* the SSD stage at the simulator's rates: the array as one emulated drive */
        r->drive_read_Bps = tio_hw_ssd_read_Bps(&hw);
        r->drive_write_Bps = tio_hw_ssd_write_Bps(&hw);
        (void)snprintf(drive, sizeof drive,
                       "throttle_read=%.0f,throttle_write=%.0f,throttle_latency_ns=%.0f",
                       r->drive_read_Bps, r->drive_write_Bps, hw.ssd_latency_s * 1e9);
        ep.backend_options = drive;
    }
    if ((rc = tio_engine_new(&ep, &e)) < 0) {
        fail(r, "tio_engine_new", rc);
        goto out;
    }
    void *slab = NULL;
    if (fc.malloc_device(&slab, total) != 0 || fc.stream_create(&c.stream, 1) != 0) {
        fail(r, "device memory or stream", TIO_ECUDA);
        goto out;
    }
    c.slab = slab;
    struct tio_runtime_params rp = tio_runtime_params_default();
    rp.trace = tr;
    rp.plan = plan;
    rp.engine = e;
    rp.mem = TIO_MEM_DEVICE;
    rp.budget_bytes = tier <= TIER_NONE ? 0 : r->budget;
    rp.demand_tier = tier == TIER_HOST ? TIO_TIER_HOST : tier == TIER_SSD ? TIO_TIER_SSD : 0;
    rp.stream = c.stream;
    rp.stream_ordered = 1;
    if ((rc = tio_runtime_new(&rp, &c.rt)) < 0) {
        fail(r, "tio_runtime_new", rc);
        goto out;
    }
    c.cap = tio_runtime_max_actions(c.rt);
    c.act = calloc(c.cap ? c.cap : 1, sizeof *c.act);
    if (!c.act) {
        die("calloc", TIO_ENOMEM);
    }
    for (size_t t = 0; t < v.n_tensors; t++) {
        if ((v.tensor_flags[t] & TIO_TENSOR_GLOBAL) &&
            (rc = tio_runtime_bind(c.rt, (uint32_t)t, c.slab + off[t])) < 0) {
            fail(r, "bind", rc);
            goto out;
        }
    }
    /* one warm-up iteration, then the measured ones, queued without a pause: the step time is
     * the steady state's, between events recorded after the warm-up and after the last one */
    if (fc.event_create(&ev[0], 0) != 0 || fc.event_create(&ev[1], 0) != 0) {
        fail(r, "cudaEventCreate", TIO_ECUDA);
        goto out;
    }
    if ((rc = iteration(&c)) < 0) {
        fail(r, "warm-up iteration", rc);
        goto out;
    }
    (void)fc.event_record(ev[0], c.stream);
    struct tio_runtime_stats s0, s1;
    tio_runtime_get_stats(c.rt, &s0);
    uint64_t st0[FAKE_N_STATS] = { 0 }, st1[FAKE_N_STATS] = { 0 };
    (void)fc.timed_stats(st0, FAKE_N_STATS);
    uint64_t pg0 = fc.pageable_copies();
    struct tio_throttle_counts d0, d1;
    tio_io_throttle_counts(&d0);
    double cpu0 = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID), t0 = now_s();
    for (int it = 0; it < o->iters; it++) {
        if ((rc = iteration(&c)) < 0) {
            fail(r, "iteration", rc);
            goto out;
        }
    }
    (void)fc.event_record(ev[1], c.stream);
    double cpu = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID) - cpu0;
    r->host_s = (now_s() - t0) / o->iters; /* the training thread has queued everything */
    (void)fc.stream_synchronize(c.stream);
    float ms = 0;
    if (fc.event_elapsed(&ms, ev[0], ev[1]) != 0) {
        fail(r, "cudaEventElapsedTime", TIO_ECUDA);
        goto out;
    }
    double wall = (double)ms * 1e-3;
    tio_runtime_get_stats(c.rt, &s1);
    (void)fc.timed_stats(st1, FAKE_N_STATS);
    tio_io_throttle_counts(&d1);
    r->drive_behind_s = (double)(d1.behind_ns - d0.behind_ns) * 1e-9 / o->iters;
    r->drive_behind_max_s = (double)d1.max_behind_ns * 1e-9; /* since the process started */
    r->drive_rd_B = (double)(d1.read_bytes - d0.read_bytes) / o->iters;
    r->drive_wr_B = (double)(d1.write_bytes - d0.write_bytes) / o->iters;
    r->drive_busy_s = (double)(d1.busy_ns - d0.busy_ns) * 1e-9 / o->iters;
    r->twin_s = wall / o->iters;
    r->us_per_kernel = cpu * 1e6 / ((double)o->iters * (double)v.n_kernels);
    r->read_stall_s = (s1.stall_s - s0.stall_s) / o->iters;
    r->pressure_s = (s1.pressure_stall_s - s0.pressure_stall_s) / o->iters;
    r->demand_s = (s1.demand_stall_s - s0.demand_stall_s) / o->iters;
    r->stall_s = r->read_stall_s + r->pressure_s + r->demand_s;
    r->urgent = (s1.urgent_reads - s0.urgent_reads) / (uint64_t)o->iters;
    r->offloads = (s1.offloads - s0.offloads) / (uint64_t)o->iters;
    r->prefetches = (s1.prefetches - s0.prefetches) / (uint64_t)o->iters;
    r->fallbacks = (s1.tier_fallbacks - s0.tier_fallbacks) / (uint64_t)o->iters;
    r->copies_dropped = (s1.host_copies_dropped - s0.host_copies_dropped) / (uint64_t)o->iters;
    r->clean = (s1.clean_offloads - s0.clean_offloads) / (uint64_t)o->iters;
    r->queue_full = (st1[FAKE_QUEUE_FULL] - st0[FAKE_QUEUE_FULL]) / (uint64_t)o->iters;
    r->h2d_util = (double)(st1[FAKE_H2D_BUSY_NS] - st0[FAKE_H2D_BUSY_NS]) * 1e-9 / wall;
    r->d2h_util = (double)(st1[FAKE_D2H_BUSY_NS] - st0[FAKE_D2H_BUSY_NS]) * 1e-9 / wall;
    r->pageable = fc.pageable_copies() - pg0;
    r->dep_wait_s = (double)(st1[FAKE_DEP_WAIT_NS] - st0[FAKE_DEP_WAIT_NS]) * 1e-9 / o->iters;
    r->dep_waits = (double)(st1[FAKE_DEP_WAITS] - st0[FAKE_DEP_WAITS]) / o->iters;
    r->late_s = (double)(st1[FAKE_LATE_NS] - st0[FAKE_LATE_NS]) * 1e-9 / o->iters;
    const uint64_t n1[5] = { s1.wait_read_count, s1.wait_write_count, s1.wait_budget_count,
                             s1.wait_end_count, s1.wait_other_count },
                   n0[5] = { s0.wait_read_count, s0.wait_write_count, s0.wait_budget_count,
                             s0.wait_end_count, s0.wait_other_count };
    const double w1[5] = { s1.wait_read_s, s1.wait_write_s, s1.wait_budget_s, s1.wait_end_s,
                           s1.wait_other_s },
                 w0[5] = { s0.wait_read_s, s0.wait_write_s, s0.wait_budget_s, s0.wait_end_s,
                           s0.wait_other_s };
    for (int i = 0; i < 5; i++) {
        r->wait_n[i] = (double)(n1[i] - n0[i]) / o->iters;
        r->wait_s[i] = (w1[i] - w0[i]) / o->iters;
    }
out:
    if (c.stream) {
        (void)fc.stream_synchronize(c.stream);
    }
    for (int i = 0; i < 2; i++) {
        if (ev[i]) {
            (void)fc.event_destroy(ev[i]);
        }
    }
    tio_runtime_free(c.rt);
    tio_engine_free(e);
    if (c.stream) {
        (void)fc.stream_destroy(c.stream);
    }
    if (c.slab) {
        (void)fc.free_device(c.slab);
    }
    (void)fc.set_timing(0, 0, 0, 0, 0);
    free(c.act);
    tio_sim_free(sim);
    tio_plan_free(plan);
    free(first);
    free(last);
    free(off);
}

/* ---- output ------------------------------------------------------------------------------- */

static void print_json(const struct result *r) {
    if (r->error[0]) {
        printf("{\"trace\":\"%s\",\"tier\":\"%s\",\"budget\":%.2f,\"budget_bytes\":%llu,"
               "\"tensors\":%llu,\"kernels\":%llu,\"error\":\"",
               r->trace, tier_names[r->tier], r->budget_frac, (unsigned long long)r->budget,
               (unsigned long long)r->tensors, (unsigned long long)r->kernels);
        for (const char *p = r->error; *p; p++) {
            printf(*p == '"' || *p == '\\' ? "\\%c" : (unsigned char)*p < 32 ? " " : "%c", *p);
        }
        printf("\"}\n");
        return;
    }
    printf("{\"trace\":\"%s\",\"tier\":\"%s\",\"budget\":%.2f,\"budget_bytes\":%llu,"
           "\"peak_bytes\":%llu,\"tensors\":%llu,\"kernels\":%llu,\"moves\":%llu,"
           "\"byte_scale\":%.0f,\"time_scale\":%.4f,\"twin_step_s\":%.6f,\"host_s\":%.6f,\"ideal_"
           "s\":%.6f,\"predicted_"
           "step_s\":%.6f,"
           "\"stall_s\":%.6f,"
           "\"read_stall_s\":%.6f,\"pressure_stall_s\":%.6f,\"demand_stall_s\":%.6f,"
           "\"queue_full\":%llu,\"urgent_reads\":%llu,\"offloads\":%llu,\"prefetches\":%llu,"
           "\"tier_fallbacks\":%llu,\"host_copies_dropped\":%llu,\"clean_offloads\":%llu,"
           "\"h2d_busy\":%.3f,\"d2h_busy\":%.3f,\"pageable_copies\":%llu,"
           "\"thread_us_per_kernel\":%.2f,\"gpu_event_wait_s\":%.6f,\"gpu_event_waits\":%.1f,"
           "\"gpu_host_late_s\":%.6f,\"drive_read_Bps\":%.0f,\"drive_write_Bps\":%.0f,"
           "\"drive_behind_s\":%.6f,\"drive_behind_max_s\":%.6f,\"drive_read_bytes\":%.0f,"
           "\"drive_write_bytes\":%.0f,\"drive_busy_s\":%.6f,\"predicted_ssd_read_bytes\":%.0f,"
           "\"predicted_ssd_write_bytes\":%.0f,\"predicted_stall_data_s\":%.6f,"
           "\"predicted_stall_memory_s\":%.6f,",
           r->trace, tier_names[r->tier], r->budget_frac, (unsigned long long)r->budget,
           (unsigned long long)r->peak, (unsigned long long)r->tensors,
           (unsigned long long)r->kernels, (unsigned long long)r->moves, r->byte_scale,
           r->time_scale, r->twin_s, r->host_s, r->ideal_s,
           isnan(r->predicted_s) ? -1.0 : r->predicted_s, r->stall_s, r->read_stall_s,
           r->pressure_s, r->demand_s, (unsigned long long)r->queue_full,
           (unsigned long long)r->urgent, (unsigned long long)r->offloads,
           (unsigned long long)r->prefetches, (unsigned long long)r->fallbacks,
           (unsigned long long)r->copies_dropped, (unsigned long long)r->clean, r->h2d_util,
           r->d2h_util, (unsigned long long)r->pageable, r->us_per_kernel, r->dep_wait_s,
           r->dep_waits, r->late_s, r->drive_read_Bps, r->drive_write_Bps, r->drive_behind_s,
           r->drive_behind_max_s, r->drive_rd_B, r->drive_wr_B, r->drive_busy_s, r->sim_rd_B,
           r->sim_wr_B, r->sim_stall_data_s, r->sim_stall_mem_s);
    static const char *const why[5] = { "read", "write", "budget", "end", "other" };
    for (int i = 0; i < 5; i++) { /* per step */
        printf("\"wait_%s_count\":%.1f,\"wait_%s_s\":%.6f%s", why[i], r->wait_n[i], why[i],
               r->wait_s[i], i < 4 ? "," : "}\n");
    }
}

static void print_row(const struct result *r) {
    if (r->error[0]) {
        printf("%-15s %-5s %4.0f%% %6llu  FAILED: %s\n", r->trace, tier_names[r->tier],
               100 * r->budget_frac, (unsigned long long)r->tensors, r->error);
        return;
    }
    printf("%-15s %-5s %4.0f%% %6llu %7.3f %7.3f %7.3f %6.3f %7.3f %6.3f %6.3f %6.3f %5llu %5.2f "
           "%5.2f %7.2f\n",
           r->trace, tier_names[r->tier], 100 * r->budget_frac, (unsigned long long)r->tensors,
           r->twin_s, r->ideal_s, r->predicted_s, r->twin_s / r->ideal_s, r->host_s,
           r->read_stall_s, r->pressure_s, r->demand_s, (unsigned long long)r->queue_full,
           r->h2d_util, r->d2h_util, r->us_per_kernel);
}

static void usage(void) {
    fprintf(stderr,
            "usage: bench_gpu_twin [--json] [--quick] [--iters N] [--byte-scale S] [--tiers "
            "LIST]\n"
            "                      [--budget F] [--models LIST] [--trace FILE]... [--no-model]\n"
            "                      [--no-offloader] [--time-scale T] [--dir DIR] [--no-throttle] "
            "[--depth N]\n"
            "  --tiers LIST   comma-separated of none,host,ssd,both (default all)\n"
            "  --budget F     device budget as a fraction of the peak (default 0.5)\n"
            "  --byte-scale S bytes and bandwidths divided by S (default: per trace, the power\n"
            "                 of 2 that brings its peak under 400 MiB)\n"
            "  --time-scale T kernel durations times T, bandwidths divided by T (default: 1, or\n"
            "                 less for a trace whose iteration takes over 1 s: then 1 s)\n"
            "  --iters N      measured iterations after one warm-up (default 3; --quick: 1)\n"
            "  --trace FILE   also run a saved trace (.tio or .json), e.g. an Offloader's\n"
            "  --models LIST  built-in 1.1B Llama traces (teraio model), comma-separated of\n"
            "                 llama-1b (2 x 2 x 1024 tokens; the default),\n"
            "                 llama-1b-long (2 x 4 x 2048 tokens)\n"
            "  --no-model     skip the built-in traces\n"
            "  --no-offloader skip the shipped Offloader trace (bench/data/offloader-llama.tio)\n"
            "  --dir DIR      the SSD tier's directory (default: a new one under $TMPDIR)\n"
            "  --depth N      the engine's queue depth (default: its own, 16)\n"
            "  --no-throttle  the SSD tier at the disk's own speed (default: an emulated drive\n"
            "                 at the modelled array's rates and latency, scaled)\n");
    exit(2);
}

static void parse(int argc, char **argv, struct opts *o) {
    *o = (struct opts){
        .iters = 3, .byte_scale = 0, .budget_frac = 0.5, .tiers = "none,host,ssd,both"
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "--quick")) {
            o->iters = 1;
        } else if (!strcmp(a, "--no-model")) {
            o->no_model = 1;
        } else if (!strcmp(a, "--no-offloader")) {
            o->no_offloader = 1;
        } else if (!strcmp(a, "--no-throttle")) {
            o->no_throttle = 1;
        } else if (val && !strcmp(a, "--iters")) {
            o->iters = atoi(val), i++;
        } else if (val && !strcmp(a, "--byte-scale")) {
            o->byte_scale = strtod(val, NULL), i++;
        } else if (val && !strcmp(a, "--time-scale")) {
            o->time_scale = strtod(val, NULL), i++;
        } else if (val && !strcmp(a, "--depth")) {
            o->depth = atoi(val), i++;
        } else if (val && !strcmp(a, "--budget")) {
            o->budget_frac = strtod(val, NULL), i++;
        } else if (val && !strcmp(a, "--models")) {
            o->models = val, i++;
        } else if (val && !strcmp(a, "--tiers")) {
            o->tiers = val, i++;
        } else if (val && !strcmp(a, "--dir")) {
            o->dir = val, i++;
        } else if (val && !strcmp(a, "--trace") && o->ntraces < MAX_TRACES) {
            o->traces[o->ntraces++] = val, i++;
        } else {
            fprintf(stderr, "bench_gpu_twin: unknown or incomplete option %s\n", a);
            usage();
        }
    }
    for (const char *p = o->models; p;) { /* every name a built-in one */
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p), k = 0;
        while (k < N_BUILTINS &&
               !(strlen(builtins[k].name) == len && !strncmp(p, builtins[k].name, len))) {
            k++;
        }
        if (k == N_BUILTINS) {
            fprintf(stderr, "bench_gpu_twin: --models: unknown trace '%.*s'\n", (int)len, p);
            usage();
        }
        p = end ? end + 1 : NULL;
    }
    if (o->iters < 1 || o->depth < 0 || o->depth > 4096 ||
        !(o->byte_scale == 0 || o->byte_scale >= 1) || !(o->time_scale >= 0) ||
        !(o->budget_frac > 0 && o->budget_frac <= 1)) {
        fprintf(stderr,
                "bench_gpu_twin: --iters >= 1, --byte-scale >= 1 (or 0: auto), 0 < --budget <= 1, "
                "--depth 0..4096\n");
        usage();
    }
}

int main(int argc, char **argv) {
    struct opts o;
    parse(argc, argv, &o);
#ifdef TIO_FAKE_CUDART_PATH
    if (setenv("TIO_CUDART_LIB", TIO_FAKE_CUDART_PATH, 0) != 0) {
        die("setenv", -errno);
    }
#endif
    if (fake_cuda_load(&fc) < 0) {
        return 1;
    }
    char tmp[512] = "";
    if (!o.dir) {
        const char *base = getenv("TMPDIR");
        (void)snprintf(tmp, sizeof tmp, "%s/tio-twin-XXXXXX", base && *base ? base : "/var/tmp");
        if (!mkdtemp(tmp)) {
            die("mkdtemp", -errno);
        }
        o.dir = tmp;
    }
    struct tio_trace *raw[MAX_TRACES + N_BUILTINS];
    const char *names[MAX_TRACES + N_BUILTINS];
    char *owned[MAX_TRACES + N_BUILTINS] = { NULL };
    int n = 0;
    for (size_t i = 0; i < N_BUILTINS && !o.no_model; i++) {
        if (o.models ? has_name(o.models, builtins[i].name) : i == 0) {
            raw[n] = model_trace(&builtins[i]);
            names[n++] = builtins[i].name;
        }
    }
#ifdef TIO_TWIN_OFFLOADER_TRACE
    if (!o.no_offloader && o.ntraces < MAX_TRACES) { /* shipped: bench/gpu_twin_offloader.py */
        o.traces[o.ntraces++] = TIO_TWIN_OFFLOADER_TRACE;
    }
#endif
    for (int i = 0; i < o.ntraces; i++) {
        int rc = tio_trace_load(o.traces[i], TIO_TRACE_FORMAT_AUTO, &raw[n]);
        if (rc < 0) {
            die(o.traces[i], rc);
        }
        const char *slash = strrchr(o.traces[i], '/');
        char *base = strdup(slash ? slash + 1 : o.traces[i]),
             *dot = base ? strrchr(base, '.') : NULL;
        if (!base) {
            die("strdup", TIO_ENOMEM);
        }
        if (dot && dot != base) {
            *dot = '\0';
        }
        owned[n] = base;
        names[n++] = base;
    }
    if (!o.json) {
        printf("%d measured iteration(s) after a warm-up, SSD tier in %s\n"
               "%-15s %-5s %5s %6s %7s %7s %7s %6s %7s %6s %6s %6s %5s %5s %5s %7s\n",
               o.iters, o.dir, "trace", "tier", "budg", "tens", "twin_s", "ideal", "predict",
               "x_idl", "host_s", "read", "press", "demand", "qfull", "h2d", "d2h", "us/kern");
    }
    int bad = 0;
    for (int i = 0; i < n; i++) {
        double ideal = (double)tio_trace_total_duration_ns(raw[i]) * 1e-9;
        double ts = o.time_scale > 0 ? o.time_scale : ideal > 1 ? 1 / ideal : 1;
        uint64_t peak = raw_peak(raw[i]);
        double bs = o.byte_scale;
        if (bs == 0) {
            for (bs = 1; (double)peak / bs > 400.0 * 1024 * 1024;) {
                bs *= 2;
            }
        }
        /* the planner's smallest movable tensor: 1 MiB, or a thousandth of a small trace's peak */
        uint64_t min_bytes =
            (uint64_t)((double)(peak / 1000 < (1u << 20) ? peak / 1000 : 1u << 20) / bs);
        struct tio_trace *tr = scaled_trace(raw[i], bs, ts);
        for (int t = TIER_BARE; t <= TIER_BOTH; t++) {
            if (t != TIER_BARE && !strstr(o.tiers, tier_names[t])) {
                continue;
            }
            struct result r;
            run(&o, names[i], tr, bs, ts, min_bytes, (enum tier)t, &r);
            if (o.json) {
                print_json(&r);
            } else {
                print_row(&r);
            }
            fflush(stdout);
            if (t == TIER_BARE && (r.error[0] || fabs(r.twin_s / r.ideal_s - 1) > 0.02)) {
                fprintf(stderr,
                        "bench_gpu_twin: self-check failed on %s: the kernels alone took "
                        "%.4f s on the twin, their ideal is %.4f s (more than 2%% apart)\n",
                        names[i], r.twin_s, r.ideal_s);
                bad = 1;
            }
        }
        tio_trace_free(tr);
        tio_trace_free(raw[i]);
        free(owned[i]);
    }
    if (tmp[0]) { /* the engine removed its files; the directory is ours */
        if (rmdir(tmp) != 0) {
            fprintf(stderr, "bench_gpu_twin: could not remove %s\n", tmp);
        }
    }
    return bad;
}
