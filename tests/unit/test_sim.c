/*
 * The simulator on tiny hand-built traces and plans. Expected times are computed by hand in the
 * comments: durations in ms, every channel at 1e9 B/s unless said (so 4e6 bytes take 4 ms),
 * latencies 0 unless said.
 */
#include <string.h>
#include <unistd.h>

#include <teraio/sim.h>
#include <teraio/teraio.h>

#include "tio_test.h"

#define MS 1e-3

/* Test hardware: 1 SSD at 1 GB/s each way, PCIe 10 GB/s each way (never the bottleneck of an
 * SSD path), no latencies, capacity set per test. */
static struct tio_hw test_hw(uint64_t capacity) {
    struct tio_hw hw;
    memset(&hw, 0, sizeof hw);
    snprintf(hw.name, sizeof hw.name, "test");
    hw.gpus = 1;
    hw.gpu_memory_bytes = capacity;
    hw.gpu_reserve_bytes = 0;
    hw.pcie_h2d_Bps = 1e10;
    hw.pcie_d2h_Bps = 1e10;
    hw.ssd_count = 1;
    hw.ssd_read_Bps = 1e9;
    hw.ssd_write_Bps = 1e9;
    hw.ssd_efficiency = 1.0;
    hw.ssd_latency_s = 0.0;
    hw.ssd_tbw_bytes = 1.2e15;
    hw.host_memory_bytes = UINT64_C(1) << 40;
    hw.host_offload_cap_bytes = 0;
    hw.host_memory_Bps = 1e11;
    hw.gds = 1;
    hw.cpu_cores = 4;
    return hw;
}

static struct tio_sim_params test_params(void) {
    struct tio_sim_params p = tio_sim_params_default();
    p.host_latency_s = 0.0;
    return p;
}

/* Tensor and kernel specs: uses are tensor ids terminated by -1 (mode read+write). */
struct tspec {
    uint64_t bytes;
    int32_t kind;
    uint32_t flags;
};
struct kspec {
    double ms;
    uint32_t flags;
    int uses[6];
};

static struct tio_trace *
mk(const struct tspec *ts, size_t nt, const struct kspec *ks, size_t nk, const char *tokens) {
    struct tio_trace *tr = NULL;
    if (tio_trace_new(NULL, &tr) < 0) {
        return NULL;
    }
    for (size_t i = 0; i < nt; i++) {
        char name[32];
        snprintf(name, sizeof name, "t%zu", i);
        if (tio_trace_add_tensor(tr, ts[i].bytes, ts[i].kind, ts[i].flags, name, NULL) < 0) {
            goto fail;
        }
    }
    for (size_t k = 0; k < nk; k++) {
        uint64_t ns = (uint64_t)(ks[k].ms * 1e6 + 0.5);
        if (tio_trace_add_kernel(tr, "k", ns, ks[k].flags, NULL) < 0) {
            goto fail;
        }
        for (int u = 0; u < 6 && ks[k].uses[u] >= 0; u++) {
            if (tio_trace_add_use(tr, (uint32_t)ks[k].uses[u], TIO_USE_READ_WRITE) < 0) {
                goto fail;
            }
        }
    }
    if (tokens && tio_trace_set_meta(tr, "tokens_per_iteration", tokens) < 0) {
        goto fail;
    }
    if (tio_trace_finish(tr) < 0) {
        goto fail;
    }
    return tr;
fail:
    tio_trace_free(tr);
    return NULL;
}

#define W   TIO_TENSOR_WEIGHT
#define ACT TIO_TENSOR_ACTIVATION
#define G   TIO_TENSOR_GLOBAL

static struct tio_move mv(uint32_t t, int from, int to, uint64_t trig, uint64_t dl, uint32_t fl) {
    struct tio_move m = { .tensor = t,
                          .from = from,
                          .to = to,
                          .flags = fl,
                          .trigger = trig,
                          .deadline = dl,
                          .bytes = 0 };
    return m;
}

static int run(const struct tio_trace *tr,
               const struct tio_hw *hw,
               const struct tio_move *m,
               size_t n,
               const char *policy,
               struct tio_sim_result *r,
               struct tio_sim **keep) {
    struct tio_sim_params p = test_params();
    p.policy = policy;
    struct tio_sim *sim = NULL;
    int rc = tio_sim_run(tr, hw, m, n, &p, &sim);
    if (rc < 0) {
        printf("  tio_sim_run: %s: %s\n", tio_strerror(rc), tio_last_error());
        return rc;
    }
    tio_sim_get_result(sim, r);
    if (keep) {
        *keep = sim;
    } else {
        tio_sim_free(sim);
    }
    return 0;
}

/* ideal = sum of kernel durations: 1 + 2 + 3 = 6 ms; tokens 600 -> 100000 tokens/s. */
TIO_TEST(ideal_is_sum_of_durations) {
    struct tspec ts[] = { { 100, W, G }, { 50, ACT, 0 } };
    struct kspec ks[] = { { 1, 0, { 0, 1, -1 } }, { 2, 0, { 1, -1 } }, { 3, 0, { 0, -1 } } };
    struct tio_trace *tr = mk(ts, 2, ks, 3, "600");
    CHECK(tr != NULL);
    struct tio_hw hw = test_hw(10); /* far too small: ideal ignores capacity */
    struct tio_sim_result r;
    CHECK_OK(run(tr, &hw, NULL, 0, "ideal", &r, NULL));
    CHECK_NEAR(r.ideal_s, 6 * MS, 1e-12);
    CHECK_NEAR(r.iteration_s, 6 * MS, 1e-12);
    CHECK_NEAR(r.fraction_of_ideal, 1.0, 1e-9);
    CHECK_NEAR(r.tokens_per_s, 600 / 6e-3, 1e-6);
    CHECK_EQ_I(r.oom, 0);
    CHECK_EQ_U(r.gpu_peak_bytes, 150);
    /* "none" with enough memory is ideal too */
    hw = test_hw(1000);
    CHECK_OK(run(tr, &hw, NULL, 0, "none", &r, NULL));
    CHECK_NEAR(r.iteration_s, 6 * MS, 1e-12);
    CHECK_EQ_U(r.gpu_peak_bytes, 150);
    tio_trace_free(tr);
}

/*
 * OOM with the kernel: t0 (600, kernels 0-1) and t1 (600, born at kernel 1) on 1000 bytes:
 * kernel 1 needs 600 + 600 = 1200, 200 over, and nothing is in flight.
 */
TIO_TEST(none_reports_oom_kernel) {
    struct tspec ts[] = { { 600, ACT, 0 }, { 600, ACT, 0 } };
    struct kspec ks[] = { { 1, 0, { 0, -1 } }, { 1, 0, { 0, 1, -1 } }, { 1, 0, { 1, -1 } } };
    struct tio_trace *tr = mk(ts, 2, ks, 3, NULL);
    struct tio_hw hw = test_hw(1000);
    struct tio_sim_result r;
    CHECK_OK(run(tr, &hw, NULL, 0, "none", &r, NULL));
    CHECK_EQ_I(r.oom, TIO_SIM_OOM_GPU);
    CHECK_EQ_U(r.oom_kernel, 1);
    CHECK_EQ_U(r.oom_bytes, 200);
    CHECK_NEAR(r.fraction_of_ideal, 0.0, 0);
    tio_trace_free(tr);
}

/*
 * An unhidden prefetch: w (4e6 B, global) used by k0 and k2; k1 10 ms. Plan: offload w at k1
 * (deadline k2), prefetch at k2. Steady state: k0 0-1; offload 1-5 (4e6 / 1e9 B/s, SSD write
 * + D2H) under k1 (1-11); prefetch issued at 11, lands at 15 (+0.5 ms SSD latency = 15.5);
 * k2 15.5-16.5. Iteration 16.5 ms, ideal 12 ms, stall 4.5 ms; overlap = the 4 ms offload under
 * k1 (+0.5 ms of its latency, also under k1): 4.5 ms; I/O busy 4.5 + 4.5 = 9 ms.
 */
TIO_TEST(prefetch_stall_hand_computed) {
    struct tspec ts[] = { { 4000000, W, G }, { 100, ACT, 0 } };
    struct kspec ks[] = { { 1, 0, { 0, -1 } }, { 10, 0, { 1, -1 } }, { 1, 0, { 0, -1 } } };
    struct tio_trace *tr = mk(ts, 2, ks, 3, NULL);
    struct tio_hw hw = test_hw(UINT64_C(1) << 30);
    hw.ssd_latency_s = 0.5 * MS;
    struct tio_move m[] = { mv(0, TIO_TIER_GPU, TIO_TIER_SSD, 1, 2, 0),
                            mv(0, TIO_TIER_SSD, TIO_TIER_GPU, 2, 2, 0) };
    struct tio_sim_result r;
    struct tio_sim *sim = NULL;
    CHECK_OK(run(tr, &hw, m, 2, NULL, &r, &sim));
    CHECK_NEAR(r.ideal_s, 12 * MS, 1e-12);
    CHECK_NEAR(r.iteration_s, 16.5 * MS, 1e-9);
    CHECK_NEAR(r.stall_s, 4.5 * MS, 1e-9);
    CHECK_NEAR(r.stall_data_s, 4.5 * MS, 1e-9);
    CHECK_NEAR(r.overlap_s, 4.5 * MS, 1e-9);
    CHECK_NEAR(r.io_busy_s, 9 * MS, 1e-9);
    CHECK_EQ_U(r.bytes[TIO_SIM_SSD_WRITE], 4000000);
    CHECK_EQ_U(r.bytes[TIO_SIM_SSD_READ], 4000000);
    CHECK_EQ_U(r.bytes[TIO_SIM_PCIE_D2H], 4000000); /* SSD traffic crosses the GPU's link */
    CHECK_EQ_U(r.bytes[TIO_SIM_PCIE_H2D], 4000000);
    CHECK_EQ_U(r.ssd_bytes_written, 4000000);
    CHECK_NEAR(r.busy_s[TIO_SIM_SSD_WRITE], 4 * MS, 1e-9);
    CHECK_EQ_U(r.n_moves_late, 0); /* lands before k2 begins: the kernel waited instead */
    /* drive life: 4e6 B per 16.5 ms = 2.424e8 B/s; 1.2e15 B TBW x 1 SSD -> 4.95e6 s = 0.157 y */
    CHECK_NEAR(r.drive_life_years, 1.2e15 / (4e6 / 16.5e-3) / (365.25 * 86400), 1e-6);
    if (sim) {
        const double *st = tio_sim_kernel_start_s(sim);
        const double *sl = tio_sim_kernel_stall_s(sim);
        CHECK_NEAR(st[0], 0, 1e-12);
        CHECK_NEAR(st[1], 1 * MS, 1e-12);
        CHECK_NEAR(st[2], 15.5 * MS, 1e-9);
        CHECK_NEAR(sl[2], 4.5 * MS, 1e-9);
        /* k1 starts at 1 ms with w's offload just issued: its memory is freed only when the
         * offload completes (5.5 ms) */
        CHECK_EQ_U(tio_sim_kernel_gpu_bytes(sim)[1], 4000100);
    }
    tio_sim_free(sim);
    tio_trace_free(tr);
}

/*
 * A prefetch issued early enough is hidden: k0 1 (w), k1 1, k2 10, k3 10, k4 1 (w). Offload at
 * k1: 1-5 ms; prefetch at k3 (t = 12): 12-16, k3 runs 12-22. Iteration = ideal = 23 ms.
 */
TIO_TEST(hidden_prefetch_is_free) {
    struct tspec ts[] = { { 4000000, W, G }, { 100, ACT, 0 } };
    struct kspec ks[] = { { 1, 0, { 0, -1 } },
                          { 1, 0, { 1, -1 } },
                          { 10, 0, { 1, -1 } },
                          { 10, 0, { 1, -1 } },
                          { 1, 0, { 0, -1 } } };
    struct tio_trace *tr = mk(ts, 2, ks, 5, NULL);
    struct tio_hw hw = test_hw(UINT64_C(1) << 30);
    struct tio_move m[] = { mv(0, TIO_TIER_GPU, TIO_TIER_SSD, 1, 3, 0),
                            mv(0, TIO_TIER_SSD, TIO_TIER_GPU, 3, 4, 0) };
    struct tio_sim_result r;
    struct tio_sim *sim = NULL;
    CHECK_OK(run(tr, &hw, m, 2, NULL, &r, &sim));
    CHECK_NEAR(r.iteration_s, 23 * MS, 1e-9);
    CHECK_NEAR(r.stall_s, 0, 1e-12);
    CHECK_NEAR(r.overlap_s, 8 * MS, 1e-9);
    if (sim) {
        /* GPU memory: k2 (t = 2..12) after the offload finished at 5 ms is not sampled at a kernel
         * start; k2 starts at 2 ms with w still there (offload in flight) */
        CHECK_EQ_U(tio_sim_kernel_gpu_bytes(sim)[2], 4000100);
        CHECK_EQ_U(tio_sim_kernel_gpu_bytes(sim)[3], 4000100); /* prefetch allocated at issue */
    }
    tio_sim_free(sim);
    tio_trace_free(tr);
}

/*
 * Memory stall and a feasible plan: w (4e6, global) used by k0 and k2, y (4e6) by k1 only;
 * capacity 5e6. Without offloading, k1 needs 8e6 -> "none" runs out of memory at kernel 1.
 * Plan: offload w at k1, prefetch at k2. k0 0-1; k1 waits for the offload (1-5, 4 ms memory
 * stall) and runs 5-15; y dies; prefetch 15-19 (4 ms data stall); k2 19-20. Iteration 20 ms,
 * and GPU memory never exceeds 5e6.
 */
TIO_TEST(feasible_plan_stays_under_capacity) {
    struct tspec ts[] = { { 4000000, W, G }, { 4000000, ACT, 0 } };
    struct kspec ks[] = { { 1, 0, { 0, -1 } }, { 10, 0, { 1, -1 } }, { 1, 0, { 0, -1 } } };
    struct tio_trace *tr = mk(ts, 2, ks, 3, NULL);
    struct tio_hw hw = test_hw(5000000);
    struct tio_sim_result r;
    CHECK_OK(run(tr, &hw, NULL, 0, "none", &r, NULL));
    CHECK_EQ_I(r.oom, TIO_SIM_OOM_GPU);
    CHECK_EQ_U(r.oom_kernel, 1);
    CHECK_EQ_U(r.oom_bytes, 3000000);
    struct tio_move m[] = { mv(0, TIO_TIER_GPU, TIO_TIER_SSD, 1, 1, 0),
                            mv(0, TIO_TIER_SSD, TIO_TIER_GPU, 2, 2, 0) };
    struct tio_sim *sim = NULL;
    CHECK_OK(run(tr, &hw, m, 2, NULL, &r, &sim));
    CHECK_EQ_I(r.oom, 0);
    CHECK_NEAR(r.iteration_s, 20 * MS, 1e-9);
    CHECK_NEAR(r.stall_memory_s, 4 * MS, 1e-9);
    CHECK_NEAR(r.stall_data_s, 4 * MS, 1e-9);
    CHECK(r.gpu_peak_bytes <= 5000000);
    CHECK_EQ_U(r.gpu_peak_bytes, 4000000);
    if (sim) {
        for (size_t k = 0; k < tio_sim_kernel_count(sim); k++) {
            CHECK(tio_sim_kernel_gpu_bytes(sim)[k] <= 5000000);
        }
    }
    tio_sim_free(sim);
    tio_trace_free(tr);
}

/*
 * URGENT jumps the queue: a (8e6) and b (4e6) offloaded at k1 (20 ms long) and prefetched at
 * k2 (5 ms, t = 21..26); k3 uses b, k4 uses a. FIFO: a 21-29 then b; k3 finds b unfinished at
 * 26 and promotes it: b 26-30 (a paused, 5e6 done), k3 30-31, a resumes 30-33, k4 33-34.
 * With b flagged URGENT: b 21-25, a 25-33; k3 26-27; k4 33-34.
 */
TIO_TEST(urgent_moves_first) {
    struct tspec ts[] = { { 8000000, W, G }, { 4000000, W, G }, { 100, ACT, 0 } };
    struct kspec ks[] = { { 1, 0, { 0, 1, -1 } },
                          { 20, 0, { 2, -1 } },
                          { 5, 0, { 2, -1 } },
                          { 1, 0, { 1, -1 } },
                          { 1, 0, { 0, -1 } } };
    struct tio_trace *tr = mk(ts, 3, ks, 5, NULL);
    struct tio_hw hw = test_hw(UINT64_C(1) << 30);
    for (int urgent = 0; urgent < 2; urgent++) {
        struct tio_move m[] = {
            mv(0, TIO_TIER_GPU, TIO_TIER_SSD, 1, 2, 0),
            mv(1, TIO_TIER_GPU, TIO_TIER_SSD, 1, 2, 0),
            mv(0, TIO_TIER_SSD, TIO_TIER_GPU, 2, 4, 0),
            mv(1, TIO_TIER_SSD, TIO_TIER_GPU, 2, 3, urgent ? TIO_MOVE_URGENT : 0),
        };
        struct tio_sim_result r;
        struct tio_sim *sim = NULL;
        CHECK_OK(run(tr, &hw, m, 4, NULL, &r, &sim));
        CHECK_NEAR(r.iteration_s, 34 * MS, 1e-9);
        if (sim) {
            const double *st = tio_sim_kernel_start_s(sim);
            CHECK_NEAR(st[3], (urgent ? 26 : 30) * MS, 1e-9);
            CHECK_NEAR(st[4], 33 * MS, 1e-9);
        }
        tio_sim_free(sim);
    }
    tio_trace_free(tr);
}

/*
 * Wrap-around: w used by k0, k1; k2 10 ms, k3 2 ms. Offload at k2 (2-6 ms), prefetch at k3
 * (12 ms) with deadline 4 = kernel 0 of the next iteration; lands at 16 while the iteration's
 * k3 ends at 14: the next k0 waits 2 ms. Steady-state iteration = 2 + 14 = 16 ms, the stall
 * before kernel 0. A prefetch of a resident tensor is a no-op (counted as skipped).
 */
TIO_TEST(wrap_around_moves) {
    struct tspec ts[] = { { 4000000, W, G }, { 100, ACT, 0 } };
    struct kspec ks[] = {
        { 1, 0, { 0, -1 } }, { 1, 0, { 0, 1, -1 } }, { 10, 0, { 1, -1 } }, { 2, 0, { 1, -1 } }
    };
    struct tio_trace *tr = mk(ts, 2, ks, 4, NULL);
    struct tio_hw hw = test_hw(UINT64_C(1) << 30);
    struct tio_move m[] = { mv(0, TIO_TIER_GPU, TIO_TIER_SSD, 2, 3, 0),
                            mv(0, TIO_TIER_SSD, TIO_TIER_GPU, 3, 4, TIO_MOVE_WRAPS),
                            mv(0, TIO_TIER_SSD, TIO_TIER_GPU, 1, 1, 0) /* resident: no-op */ };
    struct tio_sim_result r;
    struct tio_sim *sim = NULL;
    CHECK_OK(run(tr, &hw, m, 3, NULL, &r, &sim));
    CHECK_NEAR(r.iteration_s, 16 * MS, 1e-9);
    CHECK_NEAR(r.stall_s, 2 * MS, 1e-9);
    CHECK_EQ_U(r.n_moves_skipped, 1);
    if (sim) {
        CHECK_NEAR(tio_sim_kernel_stall_s(sim)[0], 2 * MS, 1e-9);
    }
    tio_sim_free(sim);
    tio_trace_free(tr);
}

/* Host tier: offload over D2H, prefetch over H2D at 10 GB/s: 4e6 B take 0.4 ms each; host
 * memory holds w from the offload's issue to the prefetch's completion. Same shape as
 * prefetch_stall_hand_computed: iteration 12 + 0.4 = 12.4 ms. */
TIO_TEST(host_tier_uses_pcie_only) {
    struct tspec ts[] = { { 4000000, W, G }, { 100, ACT, 0 } };
    struct kspec ks[] = { { 1, 0, { 0, -1 } }, { 10, 0, { 1, -1 } }, { 1, 0, { 0, -1 } } };
    struct tio_trace *tr = mk(ts, 2, ks, 3, NULL);
    struct tio_hw hw = test_hw(UINT64_C(1) << 30);
    hw.host_offload_cap_bytes = 4000000; /* exactly what the plan holds */
    struct tio_move m[] = { mv(0, TIO_TIER_GPU, TIO_TIER_HOST, 1, 2, 0),
                            mv(0, TIO_TIER_HOST, TIO_TIER_GPU, 2, 2, 0) };
    struct tio_sim_result r;
    CHECK_OK(run(tr, &hw, m, 2, NULL, &r, NULL));
    CHECK_NEAR(r.iteration_s, 12.4 * MS, 1e-9);
    CHECK_EQ_U(r.bytes[TIO_SIM_SSD_WRITE], 0);
    CHECK_EQ_U(r.bytes[TIO_SIM_PCIE_D2H], 4000000);
    CHECK_EQ_U(r.host_peak_bytes, 4000000);
    CHECK_NEAR(r.drive_life_years, 0, 0);
    tio_trace_free(tr);
}

/* CLEAN: an offload of a tensor whose SSD copy is still valid writes nothing. w is read only
 * (mode read), so after the first round trip its SSD copy stays valid. */
TIO_TEST(clean_offload_skips_write) {
    struct tio_trace *tr = NULL;
    uint32_t w, x;
    CHECK_OK(tio_trace_new(NULL, &tr));
    CHECK_OK(tio_trace_add_tensor(tr, 4000000, W, G, "w", &w));
    CHECK_OK(tio_trace_add_tensor(tr, 100, ACT, 0, "x", &x));
    CHECK_OK(tio_trace_add_kernel(tr, "a", 1000000, 0, NULL));
    CHECK_OK(tio_trace_add_use(tr, w, TIO_USE_READ));
    CHECK_OK(tio_trace_add_kernel(tr, "b", 10000000, 0, NULL));
    CHECK_OK(tio_trace_add_use(tr, x, TIO_USE_WRITE));
    CHECK_OK(tio_trace_add_kernel(tr, "c", 1000000, 0, NULL));
    CHECK_OK(tio_trace_add_use(tr, w, TIO_USE_READ));
    CHECK_OK(tio_trace_finish(tr));
    struct tio_hw hw = test_hw(UINT64_C(1) << 30);
    struct tio_move m[] = { mv(w, TIO_TIER_GPU, TIO_TIER_SSD, 1, 2, TIO_MOVE_CLEAN),
                            mv(w, TIO_TIER_SSD, TIO_TIER_GPU, 2, 2, 0) };
    struct tio_sim_result r;
    CHECK_OK(run(tr, &hw, m, 2, NULL, &r, NULL));
    CHECK_EQ_U(r.ssd_bytes_written, 0);
    CHECK_EQ_U(r.n_moves_clean, 1);  /* the offload: the warm-up's write left a valid copy */
    CHECK_EQ_U(r.n_moves_issued, 1); /* the prefetch */
    CHECK_EQ_U(r.n_moves_skipped, 0);
    CHECK_EQ_U(r.bytes[TIO_SIM_SSD_READ], 4000000);
    CHECK_NEAR(r.iteration_s, 16 * MS, 1e-9); /* 12 ms + 4 ms unhidden prefetch */
    tio_trace_free(tr);
}

/*
 * LRU thrashes on a cyclic pattern: a, b, c (4e6 each) used in turn, capacity 9e6 (two fit).
 * Every kernel must evict the least recently used one and fetch its own on demand.
 */
TIO_TEST(lru_stalls_when_thrashing) {
    struct tspec ts[] = { { 4000000, W, G }, { 4000000, W, G }, { 4000000, W, G } };
    struct kspec ks[] = { { 1, 0, { 0, -1 } }, { 1, 0, { 1, -1 } }, { 1, 0, { 2, -1 } },
                          { 1, 0, { 0, -1 } }, { 1, 0, { 1, -1 } }, { 1, 0, { 2, -1 } } };
    struct tio_trace *tr = mk(ts, 3, ks, 6, NULL);
    struct tio_hw hw = test_hw(9000000);
    struct tio_sim_result r;
    struct tio_sim *sim = NULL;
    CHECK_OK(run(tr, &hw, NULL, 0, "none", &r, NULL));
    CHECK_EQ_I(r.oom, TIO_SIM_OOM_GPU); /* 12e6 > 9e6 */
    CHECK_OK(run(tr, &hw, NULL, 0, "lru", &r, &sim));
    CHECK_EQ_I(r.oom, 0);
    CHECK(r.gpu_peak_bytes <= 9000000);
    CHECK_EQ_U(r.n_demand_fetches, 6); /* every kernel's tensor is the one evicted */
    /* each kernel: evict (4 ms, SSD write; the SSD copy is clean after the first round, so
     * the eviction is free) then fetch (4 ms): at least 4 ms of stall per kernel */
    CHECK(r.stall_s >= 6 * 4 * MS - 1e-9);
    CHECK(r.fraction_of_ideal < 0.25);
    if (sim) {
        for (size_t k = 0; k < 6; k++) {
            CHECK(tio_sim_kernel_gpu_bytes(sim)[k] <= 9000000);
        }
    }
    tio_sim_free(sim);
    tio_trace_free(tr);
}

/* Bad input: a move outside the trace, an unknown policy, bad hw. */
TIO_TEST(bad_input_errors) {
    struct tspec ts[] = { { 100, W, G } };
    struct kspec ks[] = { { 1, 0, { 0, -1 } } };
    struct tio_trace *tr = mk(ts, 1, ks, 1, NULL);
    struct tio_hw hw = test_hw(1000);
    struct tio_sim *sim = NULL;
    struct tio_sim_params p = test_params();
    struct tio_move m = mv(5, TIO_TIER_GPU, TIO_TIER_SSD, 0, 0, 0);
    CHECK_RC(tio_sim_run(tr, &hw, &m, 1, &p, &sim), TIO_EINVAL);
    CHECK_ERR_HAS("tensor 5 out of range");
    m = mv(0, TIO_TIER_GPU, TIO_TIER_SSD, 1, 1, 0);
    CHECK_RC(tio_sim_run(tr, &hw, &m, 1, &p, &sim), TIO_EINVAL);
    CHECK_ERR_HAS("trigger 1");
    p.policy = "frobnicate";
    CHECK_RC(tio_sim_run(tr, &hw, NULL, 0, &p, &sim), TIO_ENOTFOUND);
    p = test_params();
    hw.pcie_h2d_Bps = 0;
    CHECK_RC(tio_sim_run(tr, &hw, NULL, 0, &p, &sim), TIO_EINVAL);
    CHECK_ERR_HAS("pcie_h2d_Bps");
    CHECK(sim == NULL);
    tio_trace_free(tr);
}

/*
 * ZeRO models on a toy step: w (4e6 B fp32 = 1e6 params), its grad g, optimizer state o
 * (8e6), activation x; k0 forward 10 ms, k1 backward 10 ms, k2 optimizer 5 ms (GPU).
 * ZeRO-Offload (stage 3): fp16 -> w 2e6, g 2e6 on the GPU; one layer, within the prefetch
 * depth, so w stays resident; CPU Adam 1e6 params / (4 cores x 1e6/s) = 250 ms updates the
 * host partition in place; the GPU optimizer kernel vanishes; g's copy to the host (0.2 ms)
 * runs under the CPU phase. Iteration = 10 + 10 + 250 = 270 ms; ideal 25 ms.
 */
TIO_TEST(zero_models) {
    struct tspec ts[] = {
        { 4000000, W, G },                      /* 0 w */
        { 4000000, TIO_TENSOR_GRAD, G },        /* 1 g */
        { 8000000, TIO_TENSOR_OPTIM_STATE, G }, /* 2 o */
        { 10000000, ACT, 0 },                   /* 3 x */
    };
    struct kspec ks[] = { { 10, 0, { 0, 3, -1 } },
                          { 10, TIO_KERNEL_BACKWARD, { 0, 1, 3, -1 } },
                          { 5, TIO_KERNEL_OPTIM, { 0, 1, 2, -1 } } };
    struct tio_trace *tr = mk(ts, 4, ks, 3, NULL);
    struct tio_hw hw = test_hw(4100000000);
    struct tio_sim_params p = test_params();
    CHECK_NEAR(p.zero_bytes_scale, 1.0, 0); /* FP32 by default, as the paper ran */
    p.zero_bytes_scale = 0.5;               /* this test: the mixed-precision what-if */
    p.cpu_adam_params_per_core_s = 1e6;
    p.policy = "zero-offload";
    struct tio_sim *sim = NULL;
    struct tio_sim_result r;
    CHECK_OK(tio_sim_run(tr, &hw, NULL, 0, &p, &sim));
    if (sim) {
        tio_sim_get_result(sim, &r);
        CHECK_EQ_I(r.oom, 0);
        CHECK_NEAR(r.ideal_s, 25 * MS, 1e-12);
        CHECK_NEAR(r.iteration_s, 270 * MS, 1e-9);
        CHECK_NEAR(r.cpu_s, 250 * MS, 1e-9);
        CHECK_EQ_U(r.bytes[TIO_SIM_PCIE_D2H], 2000000); /* the fp16 gradient */
        /* host: 24 B/param (DeepSpeed's estimator) = 24e6, less the gradient counted as it
         * arrives (2e6), plus the gradient itself */
        CHECK_EQ_U(r.host_peak_bytes, 24000000);
    }
    tio_sim_free(sim);
    /* ZeRO-Offload runs out of host memory when 24 B/param exceed the GPU's share */
    hw.host_memory_bytes = 20000000;
    CHECK_OK(tio_sim_run(tr, &hw, NULL, 0, &p, &sim));
    if (sim) {
        tio_sim_get_result(sim, &r);
        CHECK_EQ_I(r.oom, TIO_SIM_OOM_HOST);
    }
    tio_sim_free(sim);
    /* ZeRO-Infinity keeps activations on the GPU: x at fp16 is 5e6 B; with 6e6 B of GPU memory
     * left after ZeRO-3's reduce bucket (5e8 values, 1e9 B at fp16), x plus w (2e6) and g (2e6)
     * cannot fit -> GPU OOM */
    hw = test_hw(1006000000);
    p.policy = "zero-infinity";
    CHECK_OK(tio_sim_run(tr, &hw, NULL, 0, &p, &sim));
    if (sim) {
        tio_sim_get_result(sim, &r);
        CHECK_EQ_I(r.oom, TIO_SIM_OOM_GPU);
    }
    tio_sim_free(sim);
    hw = test_hw(4100000000);
    CHECK_OK(tio_sim_run(tr, &hw, NULL, 0, &p, &sim));
    if (sim) {
        tio_sim_get_result(sim, &r);
        CHECK_EQ_I(r.oom, 0);
        /* optimizer phase: max(CPU Adam 250 ms, 12e6 B read / 1e9 + 14e6 B written / 1e9 on
         * the shared SSD budget = 26 ms) = 250 ms; one layer group <= prefetch depth:
         * parameters stay resident */
        CHECK_NEAR(r.iteration_s, 270 * MS, 1e-9);
    }
    tio_sim_free(sim);
    /* FP32 (the default): ZeRO-3's reduce bucket is 5e8 values x 4 B = 2e9 B; w, g 4e6 B each
     * and x 10e6 B fit in 2.1e9 B. The gradient copied to the host is 4e6 B; host 24 B/param.
     * With 1.9e9 B the bucket alone does not fit: GPU OOM. */
    p.zero_bytes_scale = 1.0;
    p.policy = "zero-offload";
    hw = test_hw(2100000000);
    CHECK_OK(tio_sim_run(tr, &hw, NULL, 0, &p, &sim));
    if (sim) {
        tio_sim_get_result(sim, &r);
        CHECK_EQ_I(r.oom, 0);
        CHECK_NEAR(r.iteration_s, 270 * MS, 1e-9);
        CHECK_EQ_U(r.bytes[TIO_SIM_PCIE_D2H], 4000000);
        CHECK_EQ_U(r.host_peak_bytes, 24000000);
    }
    tio_sim_free(sim);
    hw = test_hw(1900000000);
    CHECK_OK(tio_sim_run(tr, &hw, NULL, 0, &p, &sim));
    if (sim) {
        tio_sim_get_result(sim, &r);
        CHECK_EQ_I(r.oom, TIO_SIM_OOM_GPU);
    }
    tio_sim_free(sim);
    tio_trace_free(tr);
}

/*
 * ZeRO-3 layer streaming: weights L0.w, L1.w, L2.w (2e6 B fp32 = 1e6 B fp16 each), one 10 ms
 * kernel per layer. Prefetch depth 0, effective fetch rate 1e8 B/s (1e6 B take 10 ms). Each
 * layer is fetched when its kernel is reached and dropped (clean) after it, except the last:
 * its release point would be kernel N, so it stays resident. k0: fetch L0 0-10, run 10-20; k1:
 * fetch L1 20-30, run 30-40; k2: L2 resident, run 40-50. Iteration 50 ms, ideal 30 ms; 2e6 B over
 * H2D.
 */
TIO_TEST(zero_layer_streaming) {
    struct tio_trace *tr = NULL;
    uint32_t w[3];
    CHECK_OK(tio_trace_new(NULL, &tr));
    for (int l = 0; l < 3; l++) {
        char name[16];
        snprintf(name, sizeof name, "L%d.w", l);
        CHECK_OK(tio_trace_add_tensor(tr, 2000000, W, G, name, &w[l]));
    }
    for (int l = 0; l < 3; l++) {
        CHECK_OK(tio_trace_add_kernel(tr, "mm", 10000000, 0, NULL));
        CHECK_OK(tio_trace_add_use(tr, w[l], TIO_USE_READ));
    }
    CHECK_OK(tio_trace_finish(tr));
    struct tio_hw hw = test_hw(4100000000);
    struct tio_sim_params p = test_params();
    p.policy = "zero-offload";
    p.zero_bytes_scale = 0.5; /* fp16 what-if: the numbers below are fp16 bytes */
    p.zero_prefetch_layers = 0;
    p.zero_offload_fetch_Bps = 1e8;
    p.zero_fetch_overhead_s = 0;
    p.cpu_adam_params_per_core_s = 1e15; /* no optimizer kernel: keep the CPU step negligible */
    struct tio_sim *sim = NULL;
    CHECK_OK(tio_sim_run(tr, &hw, NULL, 0, &p, &sim));
    if (sim) {
        struct tio_sim_result r;
        tio_sim_get_result(sim, &r);
        CHECK_EQ_I(r.oom, 0);
        CHECK_NEAR(r.ideal_s, 30 * MS, 1e-12);
        CHECK_NEAR(r.iteration_s, 50 * MS, 1e-9);
        CHECK_EQ_U(r.bytes[TIO_SIM_PCIE_H2D], 2000000);
        CHECK_EQ_U(r.bytes[TIO_SIM_PCIE_D2H], 0); /* clean drops write nothing */
        CHECK_NEAR(tio_sim_kernel_start_s(sim)[1], 30 * MS, 1e-9);
    }
    tio_sim_free(sim);
    /* one layer of prefetch: L1 is fetched while L0 runs (10-20 ms, fetch 10-20): k1 starts at
     * 20; L0 is fetched during k2 of the previous iteration: iteration = ideal = 30 ms */
    p.zero_prefetch_layers = 1;
    CHECK_OK(tio_sim_run(tr, &hw, NULL, 0, &p, &sim));
    if (sim) {
        struct tio_sim_result r;
        tio_sim_get_result(sim, &r);
        CHECK_NEAR(r.iteration_s, 30 * MS, 1e-9);
    }
    tio_sim_free(sim);
    tio_trace_free(tr);
}

/*
 * The ZeRO fetch path's fixed cost per parameter tensor, and DeepSpeed's persistence threshold:
 * the trace of zero_layer_streaming plus L0.norm, a 1000-byte weight (250 values, under 100K)
 * that k0 uses: it is not partitioned, never fetched. The three streamed tensors are 1e6 B each
 * (fp16 what-if), so with 5 ms per fetch the path runs at 1e6 / (5 ms + 1e6 / 1e8 B/s) =
 * 6.67e7 B/s: 15 ms a fetch. k0: fetch 0-15, run 15-25; k1: fetch 25-40, run 40-50; k2
 * resident, 50-60. Iteration 60 ms; 2e6 B over H2D (L0 and L1; the norm is not fetched).
 * ZeRO-Infinity takes the same host->GPU path after its NVMe read: the same 2e6 B read.
 */
TIO_TEST(zero_fetch_overhead_and_persistence) {
    struct tio_trace *tr = NULL;
    uint32_t w[3], norm = 0;
    CHECK_OK(tio_trace_new(NULL, &tr));
    for (int l = 0; l < 3; l++) {
        char name[16];
        snprintf(name, sizeof name, "L%d.w", l);
        CHECK_OK(tio_trace_add_tensor(tr, 2000000, W, G, name, &w[l]));
    }
    CHECK_OK(tio_trace_add_tensor(tr, 1000, W, G, "L0.norm", &norm));
    for (int l = 0; l < 3; l++) {
        CHECK_OK(tio_trace_add_kernel(tr, "mm", 10000000, 0, NULL));
        CHECK_OK(tio_trace_add_use(tr, w[l], TIO_USE_READ));
        if (l == 0) {
            CHECK_OK(tio_trace_add_use(tr, norm, TIO_USE_READ));
        }
    }
    CHECK_OK(tio_trace_finish(tr));
    struct tio_hw hw = test_hw(4100000000);
    struct tio_sim_params p = test_params();
    p.policy = "zero-offload";
    p.zero_bytes_scale = 0.5;
    p.zero_prefetch_layers = 0;
    p.zero_offload_fetch_Bps = 1e8;
    p.zero_fetch_overhead_s = 5 * MS;
    p.cpu_adam_params_per_core_s = 1e15;
    struct tio_sim *sim = NULL;
    CHECK_OK(tio_sim_run(tr, &hw, NULL, 0, &p, &sim));
    if (sim) {
        struct tio_sim_result r;
        tio_sim_get_result(sim, &r);
        CHECK_EQ_I(r.oom, 0);
        CHECK_NEAR(r.iteration_s, 60 * MS, 1e-9);
        CHECK_EQ_U(r.bytes[TIO_SIM_PCIE_H2D], 2000000);
        CHECK_NEAR(tio_sim_kernel_start_s(sim)[1], 40 * MS, 1e-9);
    }
    tio_sim_free(sim);
    p.policy = "zero-infinity";
    CHECK_OK(tio_sim_run(tr, &hw, NULL, 0, &p, &sim));
    if (sim) {
        struct tio_sim_result r;
        tio_sim_get_result(sim, &r);
        CHECK_EQ_I(r.oom, 0);
        CHECK_EQ_U(r.bytes[TIO_SIM_SSD_READ], 2000000);
        CHECK_EQ_U(r.bytes[TIO_SIM_PCIE_H2D], 2000000);
        /* k1 waits for the same 15 ms fetch as under ZeRO-Offload (plus nothing: the 1 GB/s
         * NVMe read is faster than the host->GPU leg) */
        CHECK_NEAR(tio_sim_kernel_start_s(sim)[2] - tio_sim_kernel_start_s(sim)[1], 10 * MS, 1e-9);
        CHECK_NEAR(r.iteration_s - r.cpu_s, 60 * MS, 1e-9); /* cpu_s: the optimizer swap */
    }
    tio_sim_free(sim);
    tio_trace_free(tr);
}

/*
 * A plan that leaves memory short (here: no moves at all, same trace as
 * feasible_plan_stays_under_capacity). With demand eviction (--demand-evict) the runtime evicts the
 * idle w when k1 cannot allocate y (4 ms to the SSD), then fetches w on demand for k2 (4 ms):
 * the same 20 ms as the explicit plan. Plan-only (the default): OOM at kernel 1.
 */
TIO_TEST(demand_eviction_for_short_plans) {
    struct tspec ts[] = { { 4000000, W, G }, { 4000000, ACT, 0 } };
    struct kspec ks[] = { { 1, 0, { 0, -1 } }, { 10, 0, { 1, -1 } }, { 1, 0, { 0, -1 } } };
    struct tio_trace *tr = mk(ts, 2, ks, 3, NULL);
    struct tio_hw hw = test_hw(5000000);
    /* host room to spare: a plan's evictions still go to the SSD (the host budget is the
     * plan's) */
    hw.host_offload_cap_bytes = 100000000;
    struct tio_sim_params p = test_params();
    CHECK_EQ_I(p.demand_evict, 0); /* plan-only by default */
    p.demand_evict = 1;
    struct tio_sim *sim = NULL;
    struct tio_sim_result r;
    CHECK_OK(tio_sim_run(tr, &hw, NULL, 0, &p, &sim));
    if (sim) {
        tio_sim_get_result(sim, &r);
        CHECK_EQ_I(r.oom, 0);
        CHECK_NEAR(r.iteration_s, 20 * MS, 1e-9);
        CHECK_EQ_U(r.n_demand_evictions, 1);
        CHECK_EQ_U(r.demand_evicted_bytes, 4000000);
        CHECK_EQ_U(r.bytes[TIO_SIM_SSD_WRITE], 4000000);
        CHECK_EQ_U(r.host_peak_bytes, 0);
        CHECK_EQ_U(r.n_demand_fetches, 1);
        CHECK(r.gpu_peak_bytes <= 5000000);
    }
    tio_sim_free(sim);
    p.demand_evict = 0;
    CHECK_OK(tio_sim_run(tr, &hw, NULL, 0, &p, &sim));
    if (sim) {
        tio_sim_get_result(sim, &r);
        CHECK_EQ_I(r.oom, TIO_SIM_OOM_GPU);
        CHECK_EQ_U(r.oom_kernel, 1);
    }
    tio_sim_free(sim);
    tio_trace_free(tr);
}

/*
 * The SSD array has one budget for reads and writes. Globals a (used by k2) and b (used by
 * k3), 4 MB each; k0 10 ms, k1..k3 1 ms; 1 GB/s per direction alone. a is offloaded during k0
 * (alone: done at 4 ms). At k1 (t = 10 ms) b's offload and a's prefetch are issued, the
 * offload first: it takes the whole budget, a gets nothing. At 11 ms k2 waits for a: its
 * prefetch turns urgent and takes the whole budget, 4 ms: k2 starts at 15 ms (with separate
 * read and write channels it would start at 14). b's offload resumes at 15 and ends at 18; k3
 * (16 ms) finds b still on the GPU (its prefetch keeps it): iteration 17 ms.
 * With ssd_mixed_Bps = 1.5 GB/s (k = 1 GB/s / 1.5 GB/s = 2/3, both directions in flight):
 * 10-11 ms b writes at 1 GB/s (its channel's limit) using 2/3 of the budget, a reads at
 * (1/3) / (2/3) GB/s = 0.5 GB/s: 0.5 MB; from 11 a reads 3.5 MB at 1 GB/s: k2 at 14.5 ms.
 */
TIO_TEST(ssd_reads_and_writes_share_one_budget) {
    struct tspec ts[] = { { 4000000, W, G }, { 4000000, W, G }, { 100, ACT, 0 } };
    struct kspec ks[] = {
        { 10, 0, { 2, -1 } }, { 1, 0, { 2, -1 } }, { 1, 0, { 0, -1 } }, { 1, 0, { 1, -1 } }
    };
    struct tio_trace *tr = mk(ts, 3, ks, 4, NULL);
    struct tio_hw hw = test_hw(UINT64_C(1) << 30);
    struct tio_move m[] = { mv(0, TIO_TIER_GPU, TIO_TIER_SSD, 0, 1, 0),
                            mv(0, TIO_TIER_SSD, TIO_TIER_GPU, 1, 2, 0),
                            mv(1, TIO_TIER_GPU, TIO_TIER_SSD, 1, 2, 0),
                            mv(1, TIO_TIER_SSD, TIO_TIER_GPU, 2, 3, 0) };
    struct tio_sim_result r;
    struct tio_sim *sim = NULL;
    CHECK_OK(run(tr, &hw, m, 4, NULL, &r, &sim));
    CHECK_EQ_I(r.oom, 0);
    CHECK_NEAR(r.ideal_s, 13 * MS, 1e-12);
    CHECK_NEAR(r.iteration_s, 17 * MS, 1e-9);
    if (sim) {
        CHECK_NEAR(tio_sim_kernel_start_s(sim)[2], 15 * MS, 1e-9);
    }
    tio_sim_free(sim);
    sim = NULL;
    hw.ssd_mixed_Bps = 1.5e9;
    CHECK_OK(run(tr, &hw, m, 4, NULL, &r, &sim));
    if (sim) {
        CHECK_NEAR(tio_sim_kernel_start_s(sim)[2], 14.5 * MS, 1e-9);
    }
    tio_sim_free(sim);
    tio_trace_free(tr);
}

/*
 * The write cache. w (4 MB, global) is used by k0 and k3, y (4 MB) by k2; capacity 4.5 MB, so
 * k2 waits for w's offload (issued at k1) to free its memory; w's prefetch is issued at k3,
 * which waits 4 ms for it. Kernels 1 ms each. 1 SSD, 1 GB/s each way.
 * (a) cache 2 MB, sustained 0.25 GB/s. Warm-up: the offload (from 1 ms) fills the cache at a
 *     net 0.75 GB/s, full at 1 + 8/3 ms with 8/3 MB written; the other 4/3 MB take 16/3 ms:
 *     done at 9; k2 9-10, prefetch 10-14, k3 14-15; the cache drains 6 ms x 0.25 = 1.5 MB to
 *     0.5 MB. Measured iteration (from 15): k0 drains it to 0.25 MB; the offload fills 1.75 MB
 *     in 7/3 ms, then 5/3 MB at 0.25 GB/s = 20/3 ms: 9 ms of writing, done at 25; k2 25-26,
 *     prefetch 26-30, k3 30-31: 16 ms; the cache ends at 0.5 MB as it began: steady.
 * (b) cache 8 MB, sustained 0.5 GB/s: the 4 MB fit; the cache drains to 0 by the end of each
 *     iteration: 1 + 4 + 1 + 4 + 1 = 11 ms, 4 ms of writing.
 * (c) cache 8 MB, sustained 0.1 GB/s: from empty the cache gains 2.9 MB per iteration, so
 *     continuous training fills it and the run is repeated from full. Warm-up: 7.9 MB after
 *     k0; 0.1 MB in 1/9 ms, 3.8889 MB at 0.1 GB/s: done at 40; k2 40-41, prefetch 41-45, k3
 *     45-46; the cache drains to 7.4 MB. Measured (from 46): k0 leaves 7.3 MB; 0.7 MB in 7/9
 *     ms, 3.2222 MB at 0.1 GB/s = 32.222 ms: 33 ms of writing, done at 80; k2 80-81,
 *     prefetch 81-85, k3 85-86: 40 ms.
 */
TIO_TEST(ssd_write_cache_then_sustained_rate) {
    struct tspec ts[] = { { 4000000, W, G }, { 4000000, ACT, 0 }, { 100, ACT, 0 } };
    struct kspec ks[] = {
        { 1, 0, { 0, -1 } }, { 1, 0, { 2, -1 } }, { 1, 0, { 1, -1 } }, { 1, 0, { 0, -1 } }
    };
    struct tio_trace *tr = mk(ts, 3, ks, 4, NULL);
    struct tio_hw hw = test_hw(4500000);
    struct tio_move m[] = { mv(0, TIO_TIER_GPU, TIO_TIER_SSD, 1, 2, 0),
                            mv(0, TIO_TIER_SSD, TIO_TIER_GPU, 3, 3, 0) };
    struct tio_sim_result r;
    hw.ssd_write_cache_bytes = 2000000;
    hw.ssd_sustained_write_Bps = 0.25e9;
    CHECK_OK(run(tr, &hw, m, 2, NULL, &r, NULL));
    CHECK_EQ_I(r.oom, 0);
    CHECK_NEAR(r.iteration_s, 16 * MS, 1e-9);
    CHECK_NEAR(r.busy_s[TIO_SIM_SSD_WRITE], 9 * MS, 1e-9);
    CHECK_EQ_I(r.ssd_cache_full, 0);
    hw.ssd_write_cache_bytes = 8000000;
    hw.ssd_sustained_write_Bps = 0.5e9;
    CHECK_OK(run(tr, &hw, m, 2, NULL, &r, NULL));
    CHECK_NEAR(r.iteration_s, 11 * MS, 1e-9);
    CHECK_NEAR(r.busy_s[TIO_SIM_SSD_WRITE], 4 * MS, 1e-9);
    CHECK_EQ_I(r.ssd_cache_full, 0);
    hw.ssd_sustained_write_Bps = 0.1e9;
    CHECK_OK(run(tr, &hw, m, 2, NULL, &r, NULL));
    CHECK_EQ_I(r.ssd_cache_full, 1);
    CHECK_NEAR(r.iteration_s, 40 * MS, 1e-9);
    CHECK_NEAR(r.busy_s[TIO_SIM_SSD_WRITE], 33 * MS, 1e-9);
    tio_trace_free(tr);
}

/*
 * A tensor used while its offload still runs is kept on the GPU; when the plan then offloads it
 * again, the running offload frees it after all (the write starts over: the use may have
 * changed it). w (4 MB) is used by k0, k2 and k5, y (4 MB) by k4; capacity 4.5 MB; 1 ms
 * kernels, SSD 1 GB/s. Offload w at k1 (1-5 ms); its prefetch at k2 finds it still offloading
 * (kept); k2 runs on it; offload again at k3 (t = 3): the write restarts, done at 7; k4 waits
 * for that memory, runs 7-8; prefetch at k5 8-12, k5 12-13: 13 ms, 2 + 4 MB written. Skipping
 * the second offload would leave w on the GPU and k4 out of memory.
 */
TIO_TEST(offload_of_a_kept_tensor_frees_it) {
    struct tspec ts[] = { { 4000000, W, G }, { 4000000, ACT, 0 }, { 100, ACT, 0 } };
    struct kspec ks[] = { { 1, 0, { 0, -1 } }, { 1, 0, { 2, -1 } }, { 1, 0, { 0, -1 } },
                          { 1, 0, { 2, -1 } }, { 1, 0, { 1, -1 } }, { 1, 0, { 0, -1 } } };
    struct tio_trace *tr = mk(ts, 3, ks, 6, NULL);
    struct tio_hw hw = test_hw(4500000);
    struct tio_move m[] = { mv(0, TIO_TIER_GPU, TIO_TIER_SSD, 1, 2, 0),
                            mv(0, TIO_TIER_SSD, TIO_TIER_GPU, 2, 2, 0),
                            mv(0, TIO_TIER_GPU, TIO_TIER_SSD, 3, 4, 0),
                            mv(0, TIO_TIER_SSD, TIO_TIER_GPU, 5, 5, 0) };
    struct tio_sim_result r;
    CHECK_OK(run(tr, &hw, m, 4, NULL, &r, NULL));
    CHECK_EQ_I(r.oom, 0);
    CHECK_NEAR(r.iteration_s, 13 * MS, 1e-9);
    CHECK_EQ_U(r.bytes[TIO_SIM_SSD_WRITE], 6000000);
    tio_trace_free(tr);
}

/* Host memory caps hold for plans too: a plan holding 4 MB on the host with a 3 MB cap is a
 * host OOM (3 MB: 1 MB over); teraio-ssd's cap of 0 admits no host move at all. */
TIO_TEST(host_cap_enforced_for_plans) {
    struct tspec ts[] = { { 4000000, W, G }, { 100, ACT, 0 } };
    struct kspec ks[] = { { 1, 0, { 0, -1 } }, { 10, 0, { 1, -1 } }, { 1, 0, { 0, -1 } } };
    struct tio_trace *tr = mk(ts, 2, ks, 3, NULL);
    struct tio_hw hw = test_hw(UINT64_C(1) << 30);
    hw.host_offload_cap_bytes = 3000000;
    struct tio_move m[] = { mv(0, TIO_TIER_GPU, TIO_TIER_HOST, 1, 2, 0),
                            mv(0, TIO_TIER_HOST, TIO_TIER_GPU, 2, 2, 0) };
    struct tio_sim_result r;
    CHECK_OK(run(tr, &hw, m, 2, NULL, &r, NULL));
    CHECK_EQ_I(r.oom, TIO_SIM_OOM_HOST);
    CHECK_EQ_U(r.oom_bytes, 1000000);
    CHECK_NEAR(r.iteration_s, 0, 0);
    hw.host_offload_cap_bytes = 0;
    CHECK_OK(run(tr, &hw, m, 2, NULL, &r, NULL));
    CHECK_EQ_I(r.oom, TIO_SIM_OOM_HOST);
    tio_trace_free(tr);
}

/*
 * Far in simulated time: a first kernel of the longest duration a trace allows (2^44 ns,
 * ~4.9 h) puts the measured iteration beyond 2^15 s, where a double's spacing (7.3e-12 s) is
 * coarser than the engine's old completion tolerance: a transfer's end rounded to the current
 * time and the loop spun without advancing. Sixteen weights of odd sizes are fetched before
 * and offloaded after their kernel on rates that divide nothing evenly. The run must finish
 * (alarm: a hang fails the test) with every byte moved and the ideal time kept.
 */
TIO_TEST(far_in_time_finishes) {
    enum { NW = 16 };
    struct tspec ts[NW + 1];
    struct kspec ks[NW + 1];
    memset(ks, 0, sizeof ks);
    for (int i = 0; i < NW; i++) {
        ts[i] = (struct tspec){ 1000003 + 7919 * (uint64_t)i, W, G };
        ks[i + 1] = (struct kspec){ 0.013, 0, { i, -1, 0, 0, 0, 0 } };
    }
    ts[NW] = (struct tspec){ 100, ACT, 0 };
    ks[0] = (struct kspec){ (double)TIO_TRACE_MAX_DURATION * 1e-6, 0, { NW, -1, 0, 0, 0, 0 } };
    struct tio_trace *tr = mk(ts, NW + 1, ks, NW + 1, NULL);
    CHECK(tr != NULL);
    struct tio_hw hw = test_hw(UINT64_C(1) << 30);
    hw.pcie_h2d_Bps = hw.pcie_d2h_Bps = 53e9;
    hw.ssd_read_Bps = 6.7e9;
    hw.ssd_write_Bps = 6.5e9;
    hw.ssd_efficiency = 16.0 / 26.0;
    hw.ssd_latency_s = 20e-6;
    struct tio_move m[2 * NW];
    size_t n = 0;
    for (uint32_t i = 0; i < NW; i++) {
        int tier = (i % 2) ? TIO_TIER_HOST : TIO_TIER_SSD;
        m[n++] = mv(i, tier, TIO_TIER_GPU, i, i + 1, 0);
        m[n++] = mv(i, TIO_TIER_GPU, tier, i + 1 < NW ? i + 2 : NW, NW, 0);
    }
    hw.host_offload_cap_bytes = UINT64_C(1) << 30;
    alarm(60);
    struct tio_sim_result r;
    CHECK_OK(run(tr, &hw, m, n, NULL, &r, NULL));
    alarm(0);
    CHECK_EQ_I(r.oom, 0);
    CHECK(r.iteration_s >= r.ideal_s);
    CHECK(r.ideal_s > 17592.0);
    uint64_t ssd_bytes = 0;
    for (int i = 0; i < NW; i += 2) {
        ssd_bytes += ts[i].bytes;
    }
    CHECK_EQ_U(r.bytes[TIO_SIM_SSD_READ], ssd_bytes);
    CHECK_EQ_U(r.bytes[TIO_SIM_SSD_WRITE], ssd_bytes);
    tio_trace_free(tr);
}

/*
 * Bandwidth bins are bounded by the parameters, not by simulated time: w (3e6 B) must leave
 * the GPU before k1 can allocate y and come back for k2, over a 1000 B/s link, which makes
 * the iteration ~12000 times the ideal one; the series keeps at most 2 x bins bins (widened by
 * merging pairs), and the bins still add up to the bytes moved.
 */
TIO_TEST(bins_bounded_on_slow_link) {
    struct tspec ts[] = { { 3000000, W, G }, { 3000000, ACT, 0 } };
    struct kspec ks[] = { { 1, 0, { 0, -1 } }, { 500, 0, { 1, -1 } }, { 1, 0, { 0, -1 } } };
    struct tio_trace *tr = mk(ts, 2, ks, 3, NULL);
    struct tio_hw hw = test_hw(5000000);
    hw.pcie_h2d_Bps = hw.pcie_d2h_Bps = 1000;
    hw.host_offload_cap_bytes = UINT64_C(1) << 30;
    struct tio_move m[] = { mv(0, TIO_TIER_GPU, TIO_TIER_HOST, 1, 2, 0),
                            mv(0, TIO_TIER_HOST, TIO_TIER_GPU, 2, 2, 0) };
    struct tio_sim_params p = test_params();
    struct tio_sim *sim = NULL;
    CHECK_OK(tio_sim_run(tr, &hw, m, 2, &p, &sim));
    if (sim) {
        struct tio_sim_result r;
        tio_sim_get_result(sim, &r);
        /* k1 waits 3000 s for w's offload (memory), k2 3000 s for its prefetch (data) */
        CHECK(r.iteration_s > 5999.0);
        size_t nb = 0;
        double bin_s = 0;
        const double *b = tio_sim_bandwidth_bins(sim, &nb, &bin_s);
        CHECK(nb >= 1 && nb <= 2 * (size_t)p.bins);
        CHECK(bin_s * 2.0 * (double)p.bins >= r.iteration_s); /* widened to fit */
        double h2d = 0;
        for (size_t i = 0; i < nb; i++) {
            h2d += b[i * TIO_SIM_CHANNEL_COUNT + TIO_SIM_PCIE_H2D] * bin_s;
        }
        CHECK_NEAR(h2d, 3000000.0, 1.0);
    }
    tio_sim_free(sim);
    tio_trace_free(tr);
}

int main(void) {
    RUN(ideal_is_sum_of_durations);
    RUN(none_reports_oom_kernel);
    RUN(prefetch_stall_hand_computed);
    RUN(hidden_prefetch_is_free);
    RUN(feasible_plan_stays_under_capacity);
    RUN(urgent_moves_first);
    RUN(wrap_around_moves);
    RUN(host_tier_uses_pcie_only);
    RUN(clean_offload_skips_write);
    RUN(lru_stalls_when_thrashing);
    RUN(bad_input_errors);
    RUN(zero_models);
    RUN(zero_layer_streaming);
    RUN(zero_fetch_overhead_and_persistence);
    RUN(demand_eviction_for_short_plans);
    RUN(ssd_reads_and_writes_share_one_budget);
    RUN(ssd_write_cache_then_sustained_rate);
    RUN(host_cap_enforced_for_plans);
    RUN(offload_of_a_kept_tensor_frees_it);
    RUN(far_in_time_finishes);
    RUN(bins_bounded_on_slow_link);
    return tio_test_done();
}
