/*
 * The simulator on tiny hand-built traces and plans: ideal, OOM, prefetch stalls, plans, URGENT,
 * wrap-around, the host tier, CLEAN, LRU and bad input (ZeRO: test_sim_zero.c; demand eviction,
 * SSD budgets, host caps and long runs: test_sim_limits.c). Expected times are computed by hand in
 * the comments: durations in ms, every channel at 1e9 B/s unless said (so 4e6 bytes take 4 ms),
 * latencies 0 unless said.
 */
#include "sim_util.h"

/* ideal = sum of kernel durations: 1 + 2 + 3 = 6 ms; tokens 600 -> 100000 tokens/s. */
TIO_TEST(ideal_is_sum_of_durations) {
    struct tspec ts[] = { { 100, W, G }, { 50, ACT, 0 } };
    struct kspec ks[] = { { 1, 0, { 0, 1, -1 } }, { 2, 0, { 1, -1 } }, { 3, 0, { 0, -1 } } };
    struct tio_trace *tr = mk(ts, 2, ks, 3, "600");
    CHECK(tr != NULL);
    struct tio_hw hw = sim_test_hw(1, 10); /* far too small: ideal ignores capacity */
    struct tio_sim_result r;
    CHECK_OK(run(tr, &hw, NULL, 0, "ideal", &r, NULL));
    CHECK_NEAR(r.ideal_s, 6 * MS, 1e-12);
    CHECK_NEAR(r.iteration_s, 6 * MS, 1e-12);
    CHECK_NEAR(r.fraction_of_ideal, 1.0, 1e-9);
    CHECK_NEAR(r.tokens_per_s, 600 / 6e-3, 1e-6);
    CHECK_EQ_I(r.oom, 0);
    CHECK_EQ_U(r.gpu_peak_bytes, 150);
    /* "none" with enough memory is ideal too */
    hw = sim_test_hw(1, 1000);
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
    struct tio_hw hw = sim_test_hw(1, 1000);
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
    struct tio_hw hw = sim_test_hw(1, UINT64_C(1) << 30);
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
    struct tio_hw hw = sim_test_hw(1, UINT64_C(1) << 30);
    struct tio_move m[] = { mv(0, TIO_TIER_GPU, TIO_TIER_SSD, 1, 3, 0),
                            mv(0, TIO_TIER_SSD, TIO_TIER_GPU, 3, 4, 0) };
    struct tio_sim_result r;
    struct tio_sim *sim = NULL;
    CHECK_OK(run(tr, &hw, m, 2, NULL, &r, &sim));
    CHECK_NEAR(r.iteration_s, 23 * MS, 1e-9);
    CHECK_NEAR(r.stall_s, 0, 1e-12);
    CHECK_NEAR(r.overlap_s, 8 * MS, 1e-9);
    CHECK(sim != NULL);
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
    struct tio_hw hw = sim_test_hw(1, 5000000);
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
 * Earliest deadline first, whatever a plan flags URGENT: a (8e6) and b (4e6) offloaded at k1
 * (20 ms long) and prefetched at k2 (5 ms, t = 21..26); k3 uses b, k4 uses a (deadlines 3 and
 * 4). b's deadline is earlier, so b 21-25, a 25-33; k3 26-27; k4 33-34, with a flagged URGENT
 * or not: the flag does not put a ahead of b's earlier deadline (served first, a made b late
 * and k3 wait until 30). No move is late.
 */
TIO_TEST(deadline_order_over_urgent_flags) {
    struct tspec ts[] = { { 8000000, W, G }, { 4000000, W, G }, { 100, ACT, 0 } };
    struct kspec ks[] = { { 1, 0, { 0, 1, -1 } },
                          { 20, 0, { 2, -1 } },
                          { 5, 0, { 2, -1 } },
                          { 1, 0, { 1, -1 } },
                          { 1, 0, { 0, -1 } } };
    struct tio_trace *tr = mk(ts, 3, ks, 5, NULL);
    struct tio_hw hw = sim_test_hw(1, UINT64_C(1) << 30);
    for (int urgent = 0; urgent < 2; urgent++) {
        struct tio_move m[] = {
            mv(0, TIO_TIER_GPU, TIO_TIER_SSD, 1, 2, 0),
            mv(1, TIO_TIER_GPU, TIO_TIER_SSD, 1, 2, 0),
            mv(0, TIO_TIER_SSD, TIO_TIER_GPU, 2, 4, urgent ? TIO_MOVE_URGENT : 0),
            mv(1, TIO_TIER_SSD, TIO_TIER_GPU, 2, 3, 0),
        };
        struct tio_sim_result r;
        struct tio_sim *sim = NULL;
        CHECK_OK(run(tr, &hw, m, 4, NULL, &r, &sim));
        CHECK_NEAR(r.iteration_s, 34 * MS, 1e-9);
        CHECK_EQ_U(r.n_moves_late, 0);
        CHECK(sim != NULL);
        if (sim) {
            const double *st = tio_sim_kernel_start_s(sim);
            CHECK_NEAR(st[3], 26 * MS, 1e-9);
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
    struct tio_hw hw = sim_test_hw(1, UINT64_C(1) << 30);
    struct tio_move m[] = { mv(0, TIO_TIER_GPU, TIO_TIER_SSD, 2, 3, 0),
                            mv(0, TIO_TIER_SSD, TIO_TIER_GPU, 3, 4, TIO_MOVE_WRAPS),
                            mv(0, TIO_TIER_SSD, TIO_TIER_GPU, 1, 1, 0) /* resident: no-op */ };
    struct tio_sim_result r;
    struct tio_sim *sim = NULL;
    CHECK_OK(run(tr, &hw, m, 3, NULL, &r, &sim));
    CHECK_NEAR(r.iteration_s, 16 * MS, 1e-9);
    CHECK_NEAR(r.stall_s, 2 * MS, 1e-9);
    CHECK_EQ_U(r.n_moves_skipped, 1);
    CHECK(sim != NULL);
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
    struct tio_hw hw = sim_test_hw(1, UINT64_C(1) << 30);
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
    struct tio_hw hw = sim_test_hw(1, UINT64_C(1) << 30);
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
    struct tio_hw hw = sim_test_hw(1, 9000000);
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
    struct tio_hw hw = sim_test_hw(1, 1000);
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

int main(void) {
    RUN(ideal_is_sum_of_durations);
    RUN(none_reports_oom_kernel);
    RUN(prefetch_stall_hand_computed);
    RUN(hidden_prefetch_is_free);
    RUN(feasible_plan_stays_under_capacity);
    RUN(deadline_order_over_urgent_flags);
    RUN(wrap_around_moves);
    RUN(host_tier_uses_pcie_only);
    RUN(clean_offload_skips_write);
    RUN(lru_stalls_when_thrashing);
    RUN(bad_input_errors);
    return tio_test_done();
}
