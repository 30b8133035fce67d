/*
 * The GPU twin's runs (gpu_twin.h): one trace on one tier, planned, predicted by the simulator and
 * run by the real stream-ordered executor and migration engine on the fake CUDA runtime's timed
 * mode; docs/bench/twin.md has the method.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <teraio/hw.h>
#include <teraio/io.h>
#include <teraio/plan.h>
#include <teraio/runtime.h>
#include <teraio/sim.h>
#include <teraio/status.h>
#include <teraio/trace.h>

#include "benchutil.h"
#include "gpu_twin.h"
#include "io/throttle.h"

static double now_s(void) {
    struct timespec ts;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

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
        twin_die("calloc", TIO_ENOMEM);
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

uint64_t twin_raw_peak(const struct tio_trace *tr) {
    size_t n = tio_trace_tensor_count(tr);
    uint32_t *first = malloc((n ? n : 1) * sizeof *first),
             *last = malloc((n ? n : 1) * sizeof *last);
    if (!first || !last) {
        twin_die("malloc", TIO_ENOMEM);
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
        twin_die("tio_hw_preset", -1);
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
            if (twin_fc.launch_kernel(c->stream, c->v.kernel_duration_ns[k]) != 0) {
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
        if (twin_fc.launch_kernel(c->stream, ns) != 0) {
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

/* ---- one run ------------------------------------------------------------------------------ */

/* What one run holds (freed by run_free). */
struct run {
    const struct opts *o;
    enum tier tier;
    struct tio_trace_view v;
    struct tio_hw hw;
    uint64_t host_cap, total; /* the host tier's bytes; the device bytes of every tensor */
    struct tio_plan *plan;
    struct tio_sim *sim;
    struct tio_engine *e;
    struct caller c;
    uint32_t *first, *last; /* [n_tensors] each tensor's first and last kernel (c's) */
    void *ev[2];            /* recorded after the warm-up and after the last measured iteration */
    char drive[200];
};

/* The plan for the run's hardware and the simulator's prediction of it. */
static int
predict(struct run *x, const struct tio_trace *tr, uint64_t min_bytes, struct result *r) {
    struct tio_plan_params pp = tio_plan_params_default();
    pp.policy = x->tier <= TIER_NONE ? "none" : x->tier == TIER_SSD ? "teraio-ssd" : "teraio-mixed";
    pp.min_tensor_bytes = min_bytes;
    int rc = tio_plan_make(tr, &x->hw, &pp, &x->plan);
    if (rc < 0) {
        fail(r, "tio_plan_make", rc);
        return rc;
    }
    size_t nm = 0;
    const struct tio_move *mv = tio_plan_moves(x->plan, &nm);
    r->moves = nm;
    struct tio_sim_params sp = tio_sim_params_default();
    int moves = x->tier > TIER_NONE;
    if (!moves) {
        sp.policy = "ideal";
    }
    if ((rc = tio_sim_run(tr, &x->hw, moves ? mv : NULL, moves ? nm : 0, &sp, &x->sim)) < 0) {
        fail(r, "tio_sim_run", rc);
        return rc;
    }
    struct tio_sim_result sr;
    tio_sim_get_result(x->sim, &sr, sizeof sr);
    r->predicted_s = sr.oom ? (double)NAN : sr.iteration_s;
    r->sim_rd_B = (double)sr.bytes[TIO_SIM_SSD_READ];
    r->sim_wr_B = (double)sr.bytes[TIO_SIM_SSD_WRITE];
    r->sim_stall_data_s = sr.stall_data_s;
    r->sim_stall_mem_s = sr.stall_memory_s;
    return 0;
}

/* The twin's copy engines and the engine over the run's tiers (the SSD tier behind the emulated
 * drive unless --no-throttle). */
static int make_engine(struct run *x, struct result *r) {
    const struct tio_hw *hw = &x->hw;
    /* copy engines at the modelled PCIe rates, pageable copies at 40% of them */
    int rc =
        twin_fc.set_timing(1, hw->pcie_h2d_Bps, hw->pcie_d2h_Bps, 0.4 * hw->pcie_h2d_Bps, 1024);
    if (rc != 0) {
        fail(r, "fake_cuda_set_timing", -rc);
        return -rc;
    }
    int ssd = x->tier == TIER_SSD || x->tier == TIER_BOTH;
    const char *dirs[] = { x->o->dir };
    struct tio_engine_params ep = tio_engine_params_default();
    ep.backend = "cuda";
    ep.dirs = ssd ? dirs : NULL;
    ep.ndirs = ssd ? 1 : 0;
    ep.host_tier_bytes = x->tier == TIER_SSD ? 0 : x->tier <= TIER_NONE ? 16 * PAGE : x->host_cap;
    ep.preallocate = 0;
    if (x->o->depth) {
        ep.queue_depth = (uint32_t)x->o->depth;
    }
    if (ssd && !x->o->no_throttle) {
        /* the SSD stage at the simulator's rates: the array as one emulated drive */
        r->drive_read_Bps = tio_hw_ssd_read_Bps(hw);
        r->drive_write_Bps = tio_hw_ssd_write_Bps(hw);
        (void)snprintf(x->drive, sizeof x->drive,
                       "throttle_read=%.0f,throttle_write=%.0f,throttle_latency_ns=%.0f",
                       r->drive_read_Bps, r->drive_write_Bps, hw->ssd_latency_s * 1e9);
        ep.backend_options = x->drive;
    }
    if ((rc = tio_engine_new(&ep, &x->e)) < 0) {
        fail(r, "tio_engine_new", rc);
    }
    return rc;
}

/* The device memory, the compute stream, the executor and its bound globals. */
static int make_executor(struct run *x, const struct tio_trace *tr, struct result *r) {
    struct caller *c = &x->c;
    void *slab = NULL;
    if (twin_fc.malloc_device(&slab, x->total) != 0 || twin_fc.stream_create(&c->stream, 1) != 0) {
        fail(r, "device memory or stream", TIO_ECUDA);
        return TIO_ECUDA;
    }
    c->slab = slab;
    struct tio_runtime_params rp = tio_runtime_params_default();
    rp.trace = tr;
    rp.plan = x->plan;
    rp.engine = x->e;
    rp.mem = TIO_MEM_DEVICE;
    rp.budget_bytes = x->tier <= TIER_NONE ? 0 : r->budget;
    rp.demand_tier = x->tier == TIER_HOST ? TIO_TIER_HOST : x->tier == TIER_SSD ? TIO_TIER_SSD : 0;
    rp.stream = c->stream;
    rp.stream_ordered = 1;
    int rc = tio_runtime_new(&rp, &c->rt);
    if (rc < 0) {
        fail(r, "tio_runtime_new", rc);
        return rc;
    }
    c->cap = tio_runtime_max_actions(c->rt);
    c->act = calloc(c->cap ? c->cap : 1, sizeof *c->act);
    if (!c->act) {
        twin_die("calloc", TIO_ENOMEM);
    }
    for (size_t t = 0; t < x->v.n_tensors; t++) {
        if ((x->v.tensor_flags[t] & TIO_TENSOR_GLOBAL) &&
            (rc = tio_runtime_bind(c->rt, (uint32_t)t, c->slab + c->off[t])) < 0) {
            fail(r, "bind", rc);
            return rc;
        }
    }
    return 0;
}

/* The counters read before and after the measured iterations. */
struct counts {
    struct tio_runtime_stats rt;
    uint64_t fake[FAKE_N_STATS];
    uint64_t pageable;
    struct tio_throttle_counts drive;
};

static void read_counts(const struct caller *c, struct counts *n) {
    tio_runtime_get_stats(c->rt, &n->rt);
    memset(n->fake, 0, sizeof n->fake);
    (void)twin_fc.timed_stats(n->fake, FAKE_N_STATS);
    n->pageable = twin_fc.pageable_copies();
    tio_io_throttle_counts(&n->drive);
}

/* Per step, from the counts before (a) and after (b) `iters` iterations that took `wall` s on
 * the compute stream. */
static void
per_step(const struct counts *a, const struct counts *b, int iters, double wall, struct result *r) {
    const struct tio_runtime_stats *s0 = &a->rt, *s1 = &b->rt;
    const uint64_t *st0 = a->fake, *st1 = b->fake;
    uint64_t n = (uint64_t)iters;
    r->drive_behind_s = (double)(b->drive.behind_ns - a->drive.behind_ns) * 1e-9 / iters;
    r->drive_behind_max_s = (double)b->drive.max_behind_ns * 1e-9; /* since the process started */
    r->drive_rd_B = (double)(b->drive.read_bytes - a->drive.read_bytes) / iters;
    r->drive_wr_B = (double)(b->drive.write_bytes - a->drive.write_bytes) / iters;
    r->drive_busy_s = (double)(b->drive.busy_ns - a->drive.busy_ns) * 1e-9 / iters;
    r->twin_s = wall / iters;
    r->read_stall_s = (s1->stall_s - s0->stall_s) / iters;
    r->pressure_s = (s1->pressure_stall_s - s0->pressure_stall_s) / iters;
    r->demand_s = (s1->demand_stall_s - s0->demand_stall_s) / iters;
    r->stall_s = r->read_stall_s + r->pressure_s + r->demand_s;
    r->urgent = (s1->urgent_reads - s0->urgent_reads) / n;
    r->offloads = (s1->offloads - s0->offloads) / n;
    r->prefetches = (s1->prefetches - s0->prefetches) / n;
    r->fallbacks = (s1->tier_fallbacks - s0->tier_fallbacks) / n;
    r->copies_dropped = (s1->host_copies_dropped - s0->host_copies_dropped) / n;
    r->clean = (s1->clean_offloads - s0->clean_offloads) / n;
    r->queue_full = (st1[FAKE_QUEUE_FULL] - st0[FAKE_QUEUE_FULL]) / n;
    r->h2d_util = (double)(st1[FAKE_H2D_BUSY_NS] - st0[FAKE_H2D_BUSY_NS]) * 1e-9 / wall;
    r->d2h_util = (double)(st1[FAKE_D2H_BUSY_NS] - st0[FAKE_D2H_BUSY_NS]) * 1e-9 / wall;
    r->pageable = b->pageable - a->pageable;
    r->dep_wait_s = (double)(st1[FAKE_DEP_WAIT_NS] - st0[FAKE_DEP_WAIT_NS]) * 1e-9 / iters;
    r->dep_waits = (double)(st1[FAKE_DEP_WAITS] - st0[FAKE_DEP_WAITS]) / iters;
    r->late_s = (double)(st1[FAKE_LATE_NS] - st0[FAKE_LATE_NS]) * 1e-9 / iters;
    const uint64_t n1[5] = { s1->wait_read_count, s1->wait_write_count, s1->wait_budget_count,
                             s1->wait_end_count, s1->wait_other_count },
                   n0[5] = { s0->wait_read_count, s0->wait_write_count, s0->wait_budget_count,
                             s0->wait_end_count, s0->wait_other_count };
    const double w1[5] = { s1->wait_read_s, s1->wait_write_s, s1->wait_budget_s, s1->wait_end_s,
                           s1->wait_other_s },
                 w0[5] = { s0->wait_read_s, s0->wait_write_s, s0->wait_budget_s, s0->wait_end_s,
                           s0->wait_other_s };
    for (int i = 0; i < 5; i++) {
        r->wait_n[i] = (double)(n1[i] - n0[i]) / iters;
        r->wait_s[i] = (w1[i] - w0[i]) / iters;
    }
}

/* One warm-up iteration, then the measured ones, queued without a pause: the step time is the
 * steady state's, between events recorded after the warm-up and after the last one. */
static int measure(struct run *x, struct result *r) {
    struct caller *c = &x->c;
    int iters = x->o->iters;
    if (twin_fc.event_create(&x->ev[0], 0) != 0 || twin_fc.event_create(&x->ev[1], 0) != 0) {
        fail(r, "cudaEventCreate", TIO_ECUDA);
        return TIO_ECUDA;
    }
    int rc = iteration(c);
    if (rc < 0) {
        fail(r, "warm-up iteration", rc);
        return rc;
    }
    (void)twin_fc.event_record(x->ev[0], c->stream);
    struct counts a, b;
    read_counts(c, &a);
    double cpu0 = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID), t0 = now_s();
    for (int it = 0; it < iters; it++) {
        if ((rc = iteration(c)) < 0) {
            fail(r, "iteration", rc);
            return rc;
        }
    }
    (void)twin_fc.event_record(x->ev[1], c->stream);
    double cpu = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID) - cpu0;
    r->host_s = (now_s() - t0) / iters; /* the training thread has queued everything */
    (void)twin_fc.stream_synchronize(c->stream);
    float ms = 0;
    if (twin_fc.event_elapsed(&ms, x->ev[0], x->ev[1]) != 0) {
        fail(r, "cudaEventElapsedTime", TIO_ECUDA);
        return TIO_ECUDA;
    }
    read_counts(c, &b);
    per_step(&a, &b, iters, (double)ms * 1e-3, r);
    r->us_per_kernel = cpu * 1e6 / ((double)iters * (double)x->v.n_kernels);
    return 0;
}

static void run_free(struct run *x) {
    struct caller *c = &x->c;
    if (c->stream) {
        (void)twin_fc.stream_synchronize(c->stream);
    }
    for (int i = 0; i < 2; i++) {
        if (x->ev[i]) {
            (void)twin_fc.event_destroy(x->ev[i]);
        }
    }
    tio_runtime_free(c->rt);
    tio_engine_free(x->e);
    if (c->stream) {
        (void)twin_fc.stream_destroy(c->stream);
    }
    if (c->slab) {
        (void)twin_fc.free_device(c->slab);
    }
    (void)twin_fc.set_timing(0, 0, 0, 0, 0);
    free(c->act);
    tio_sim_free(x->sim);
    tio_plan_free(x->plan);
    free(x->first);
    free(x->last);
    free(c->off);
}

void twin_run(const struct opts *o,
              const char *name,
              const struct tio_trace *tr,
              double bs,
              double ts,
              uint64_t min_bytes,
              enum tier tier,
              struct result *r) {
    struct run x = { .o = o, .tier = tier };
    tio_trace_get_view(tr, &x.v);
    memset(r, 0, sizeof *r);
    r->trace = name;
    r->tier = tier;
    r->time_scale = ts;
    r->byte_scale = bs;
    r->tensors = x.v.n_tensors;
    r->kernels = x.v.n_kernels;
    r->ideal_s = (double)tio_trace_total_duration_ns(tr) * 1e-9;
    size_t nt = x.v.n_tensors ? x.v.n_tensors : 1;
    x.first = malloc(nt * sizeof *x.first);
    x.last = malloc(nt * sizeof *x.last);
    uint64_t *off = malloc(nt * sizeof *off);
    if (!x.first || !x.last || !off) {
        twin_die("malloc", TIO_ENOMEM);
    }
    x.c = (struct caller){
        .v = x.v, .first = x.first, .last = x.last, .off = off, .bare = tier == TIER_BARE
    };
    r->peak = peak_bytes(tr, x.first, x.last);
    for (size_t t = 0; t < x.v.n_tensors; t++) {
        off[t] = x.total;
        x.total += (x.v.tensor_bytes[t] + PAGE - 1) & ~(PAGE - 1);
    }
    r->budget_frac = tier <= TIER_NONE ? 1.0 : o->budget_frac;
    r->budget = tier <= TIER_NONE ? r->peak : (uint64_t)((double)r->peak * o->budget_frac);
    /* the host tier: room for every tensor (host), for half of what must leave the device
     * (both: the SSDs take the rest), none (ssd) */
    uint64_t need = r->peak - r->budget;
    x.host_cap = tier == TIER_BOTH ? need / 2 : x.total;
    x.hw = twin_hw(bs, ts, tier, r->budget, x.host_cap);
    if (predict(&x, tr, min_bytes, r) == 0 && make_engine(&x, r) == 0 &&
        make_executor(&x, tr, r) == 0) {
        (void)measure(&x, r);
    }
    run_free(&x);
}
