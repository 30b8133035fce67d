/*
 * The simulator's limits on tiny hand-built traces and plans: demand eviction, the SSD's shared
 * read/write budget and write cache, host memory caps, far-in-time runs and bounded bins. Expected
 * times are computed by hand in the comments: durations in ms, every channel at 1e9 B/s unless said
 * (so 4e6 bytes take 4 ms), latencies 0 unless said.
 */
#include "sim_util.h"

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
    struct tio_hw hw = sim_test_hw(1, 5000000);
    /* host room to spare: a plan's evictions still go to the SSD (the host budget is the
     * plan's) */
    hw.host_offload_cap_bytes = 100000000;
    struct tio_sim_params p = test_params();
    CHECK_EQ_I(p.demand_evict, 0); /* plan-only by default */
    p.demand_evict = 1;
    struct tio_sim *sim = NULL;
    struct tio_sim_result r;
    CHECK_OK(tio_sim_run(tr, &hw, NULL, 0, &p, &sim));
    CHECK(sim != NULL);
    if (sim) {
        tio_sim_get_result(sim, &r, sizeof r);
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
    CHECK(sim != NULL);
    if (sim) {
        tio_sim_get_result(sim, &r, sizeof r);
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
    struct tio_hw hw = sim_test_hw(1, UINT64_C(1) << 30);
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
    CHECK(sim != NULL);
    if (sim) {
        CHECK_NEAR(tio_sim_kernel_start_s(sim)[2], 15 * MS, 1e-9);
    }
    tio_sim_free(sim);
    sim = NULL;
    hw.ssd_mixed_Bps = 1.5e9;
    CHECK_OK(run(tr, &hw, m, 4, NULL, &r, &sim));
    CHECK(sim != NULL);
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
    struct tio_hw hw = sim_test_hw(1, 4500000);
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
    struct tio_hw hw = sim_test_hw(1, 4500000);
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
    struct tio_hw hw = sim_test_hw(1, UINT64_C(1) << 30);
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
 * and offloaded after their kernel on rates that divide nothing evenly; the kernels after the
 * first (0.613 ms each) leave the drives time for the 16 MB an iteration moves, so that every
 * offload is done before its tensor's next prefetch (the simulator serves transfers in deadline
 * order, and a late offload would keep its tensor on the GPU and skip the prefetch). The run
 * must finish (alarm: a hang fails the test) with every byte moved and the ideal time kept.
 */
TIO_TEST(far_in_time_finishes) {
    enum { NW = 16 };
    struct tspec ts[NW + 1];
    struct kspec ks[NW + 1];
    memset(ks, 0, sizeof ks);
    for (int i = 0; i < NW; i++) {
        ts[i] = (struct tspec){ 1000003 + 7919 * (uint64_t)i, W, G };
        ks[i + 1] = (struct kspec){ 0.613, 0, { i, -1, 0, 0, 0, 0 } };
    }
    ts[NW] = (struct tspec){ 100, ACT, 0 };
    ks[0] = (struct kspec){ (double)TIO_TRACE_MAX_DURATION * 1e-6, 0, { NW, -1, 0, 0, 0, 0 } };
    struct tio_trace *tr = mk(ts, NW + 1, ks, NW + 1, NULL);
    CHECK(tr != NULL);
    struct tio_hw hw = sim_test_hw(1, UINT64_C(1) << 30);
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
    /* no stall here: the iteration is the ideal up to the rounding of sums near 2^14 s */
    CHECK(r.iteration_s >= r.ideal_s * (1 - 1e-12));
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
    struct tio_hw hw = sim_test_hw(1, 5000000);
    hw.pcie_h2d_Bps = hw.pcie_d2h_Bps = 1000;
    hw.host_offload_cap_bytes = UINT64_C(1) << 30;
    struct tio_move m[] = { mv(0, TIO_TIER_GPU, TIO_TIER_HOST, 1, 2, 0),
                            mv(0, TIO_TIER_HOST, TIO_TIER_GPU, 2, 2, 0) };
    struct tio_sim_params p = test_params();
    struct tio_sim *sim = NULL;
    CHECK_OK(tio_sim_run(tr, &hw, m, 2, &p, &sim));
    CHECK(sim != NULL);
    if (sim) {
        struct tio_sim_result r;
        tio_sim_get_result(sim, &r, sizeof r);
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

/*
 * With demand eviction the simulator is the runtime, whose offload to a full host tier goes to
 * the SSDs (or, without SSDs, leaves the tensor on the GPU) instead of overrunning host memory.
 * Globals a and b (4 MB), host cap 4 MB, PCIe 1 GB/s each way. The plan holds a on the host over
 * kernels [0, 2) and b over [2, 4): within the cap by its count. a's offload (k0, 10 ms) ends
 * at 4 ms; its prefetch, issued at k1 (10 ms), ends at 14 ms, after k2's moves were issued at
 * 11 ms: b's offload finds a still on the host. It goes to the SSD (11-15 ms); k2 starts at
 * 14 ms, k3 at 16 fetches b from the SSD (16-20 ms), k4 runs 20-21 ms: 21 ms, the host never
 * above 4 MB. Without SSDs b stays on the GPU: k4 runs 17-18 ms. Plan-only: a host OOM.
 */
TIO_TEST(full_host_tier_spills_to_ssd_on_demand) {
    struct tspec ts[] = { { 4000000, W, G }, { 4000000, W, G }, { 100, ACT, 0 } };
    struct kspec ks[] = { { 10, 0, { 2, -1 } },
                          { 1, 0, { 2, -1 } },
                          { 2, 0, { 0, -1 } },
                          { 1, 0, { 2, -1 } },
                          { 1, 0, { 1, -1 } } };
    struct tio_trace *tr = mk(ts, 3, ks, 5, NULL);
    struct tio_hw hw = sim_test_hw(1, UINT64_C(1) << 30);
    hw.pcie_h2d_Bps = hw.pcie_d2h_Bps = 1e9;
    hw.host_offload_cap_bytes = 4000000;
    struct tio_move m[] = { mv(0, TIO_TIER_GPU, TIO_TIER_HOST, 0, 1, 0),
                            mv(0, TIO_TIER_HOST, TIO_TIER_GPU, 1, 2, 0),
                            mv(1, TIO_TIER_GPU, TIO_TIER_HOST, 2, 3, 0),
                            mv(1, TIO_TIER_HOST, TIO_TIER_GPU, 3, 4, 0) };
    struct tio_sim_params p = test_params();
    p.demand_evict = 1;
    struct tio_sim *sim = NULL;
    struct tio_sim_result r;
    CHECK_OK(tio_sim_run(tr, &hw, m, 4, &p, &sim));
    CHECK(sim != NULL);
    if (sim) {
        tio_sim_get_result(sim, &r, sizeof r);
        CHECK_EQ_I(r.oom, 0);
        CHECK_NEAR(r.iteration_s, 21 * MS, 1e-9);
        CHECK_EQ_U(r.host_peak_bytes, 4000000);
        CHECK_EQ_U(r.bytes[TIO_SIM_SSD_WRITE], 4000000);
        CHECK_EQ_U(r.bytes[TIO_SIM_SSD_READ], 4000000);
        CHECK_EQ_U(r.n_host_full_offloads, 1);
    }
    tio_sim_free(sim);
    hw.ssd_count = 0;
    CHECK_OK(tio_sim_run(tr, &hw, m, 4, &p, &sim));
    CHECK(sim != NULL);
    if (sim) {
        tio_sim_get_result(sim, &r, sizeof r);
        CHECK_EQ_I(r.oom, 0);
        CHECK_NEAR(r.iteration_s, 18 * MS, 1e-9);
        CHECK_EQ_U(r.host_peak_bytes, 4000000);
        CHECK_EQ_U(r.n_host_full_offloads, 1);
    }
    tio_sim_free(sim);
    hw.ssd_count = 1;
    p.demand_evict = 0;
    CHECK_OK(tio_sim_run(tr, &hw, m, 4, &p, &sim));
    CHECK(sim != NULL);
    if (sim) {
        tio_sim_get_result(sim, &r, sizeof r);
        CHECK_EQ_I(r.oom, TIO_SIM_OOM_HOST);
        CHECK_EQ_U(r.oom_bytes, 4000000);
        CHECK_EQ_U(r.n_host_full_offloads, 0);
    }
    tio_sim_free(sim);
    tio_trace_free(tr);
}

/*
 * Demand eviction in a plan's replay chooses its victims as the runtime does (docs/runtime.md):
 * the furthest next use first, not the least recently used. Globals a (2 MB, used by k0 and k3)
 * and b (6 MB, used by k1 and k4); k2 creates y (6 MB, dies at its end); 10 MB of GPU memory,
 * no moves, every eviction to the SSD at 1 GB/s. At k2 (t = 2 ms) 4 MB are missing.
 * Furthest next use: b (next use k4, after a's k3) alone frees enough: 2-8 ms; k2 8-18, k3
 * 18-19, b fetched on demand 19-25, k4 25-26: 26 ms, one eviction of 6 MB.
 * LRU (the `lru` policy, unchanged) evicts a (least recently used), then b: 2-4 and 4-10 ms;
 * k2 10-20, a fetched 20-22, k3 22-23, b fetched 23-29, k4 29-30: 30 ms, two evictions.
 */
TIO_TEST(demand_eviction_takes_the_furthest_next_use) {
    struct tspec ts[] = { { 2000000, W, G }, { 6000000, W, G }, { 6000000, ACT, 0 } };
    struct kspec ks[] = { { 1, 0, { 0, -1 } },
                          { 1, 0, { 1, -1 } },
                          { 10, 0, { 2, -1 } },
                          { 1, 0, { 0, -1 } },
                          { 1, 0, { 1, -1 } } };
    struct tio_trace *tr = mk(ts, 3, ks, 5, NULL);
    struct tio_hw hw = sim_test_hw(1, 10000000);
    struct tio_sim_params p = test_params();
    p.demand_evict = 1;
    struct tio_sim *sim = NULL;
    struct tio_sim_result r;
    CHECK_OK(tio_sim_run(tr, &hw, NULL, 0, &p, &sim));
    CHECK(sim != NULL);
    if (sim) {
        tio_sim_get_result(sim, &r, sizeof r);
        CHECK_EQ_I(r.oom, 0);
        CHECK_NEAR(r.iteration_s, 26 * MS, 1e-9);
        CHECK_EQ_U(r.n_demand_evictions, 1);
        CHECK_EQ_U(r.demand_evicted_bytes, 6000000);
        CHECK_EQ_U(r.bytes[TIO_SIM_SSD_WRITE], 6000000);
    }
    tio_sim_free(sim);
    CHECK_OK(run(tr, &hw, NULL, 0, "lru", &r, NULL));
    CHECK_EQ_I(r.oom, 0);
    CHECK_NEAR(r.iteration_s, 30 * MS, 1e-9);
    CHECK_EQ_U(r.n_demand_evictions, 2);
    CHECK_EQ_U(r.demand_evicted_bytes, 8000000);
    tio_trace_free(tr);
}

/*
 * No SSDs and a host tier without room: the runtime keeps the victim resident and runs above
 * its budget (docs/runtime.md), so a kernel that needs the memory cannot allocate it. Global a
 * (4 MB, used by k0 and k2), y (4 MB, created by k1), 5 MB of GPU memory, no host room: with
 * demand eviction (a plan's replay) and with the `lru` policy, an out-of-memory at k1 with
 * 3 MB missing, nothing moved.
 */
TIO_TEST(demand_eviction_without_ssds_or_host_room) {
    struct tspec ts[] = { { 4000000, W, G }, { 4000000, ACT, 0 } };
    struct kspec ks[] = { { 1, 0, { 0, -1 } }, { 10, 0, { 1, -1 } }, { 1, 0, { 0, -1 } } };
    struct tio_trace *tr = mk(ts, 2, ks, 3, NULL);
    struct tio_hw hw = sim_test_hw(1, 5000000);
    hw.ssd_count = 0;
    hw.host_offload_cap_bytes = 1000000;
    struct tio_sim_params p = test_params();
    p.demand_evict = 1;
    struct tio_sim *sim = NULL;
    struct tio_sim_result r;
    CHECK_OK(tio_sim_run(tr, &hw, NULL, 0, &p, &sim));
    CHECK(sim != NULL);
    if (sim) {
        tio_sim_get_result(sim, &r, sizeof r);
        CHECK_EQ_I(r.oom, TIO_SIM_OOM_GPU);
        CHECK_EQ_U(r.oom_kernel, 1);
        CHECK_EQ_U(r.oom_bytes, 3000000);
        CHECK_EQ_U(r.n_demand_evictions, 0);
        CHECK_EQ_U(r.bytes[TIO_SIM_SSD_WRITE], 0);
    }
    tio_sim_free(sim);
    CHECK_OK(run(tr, &hw, NULL, 0, "lru", &r, NULL));
    CHECK_EQ_I(r.oom, TIO_SIM_OOM_GPU);
    CHECK_EQ_U(r.oom_kernel, 1);
    CHECK_EQ_U(r.oom_bytes, 3000000);
    CHECK_EQ_U(r.n_demand_evictions, 0);
    CHECK_EQ_U(r.bytes[TIO_SIM_SSD_WRITE], 0);
    /* with host room a goes to the host tier: 1-5 ms, k1 5-15, a fetched 15-19, k2 19-20 */
    hw.host_offload_cap_bytes = 4000000;
    hw.pcie_h2d_Bps = hw.pcie_d2h_Bps = 1e9;
    CHECK_OK(tio_sim_run(tr, &hw, NULL, 0, &p, &sim));
    CHECK(sim != NULL);
    if (sim) {
        tio_sim_get_result(sim, &r, sizeof r);
        CHECK_EQ_I(r.oom, 0);
        CHECK_NEAR(r.iteration_s, 20 * MS, 1e-9);
        CHECK_EQ_U(r.bytes[TIO_SIM_PCIE_D2H], 4000000);
    }
    tio_sim_free(sim);
    tio_trace_free(tr);
}

int main(void) {
    RUN(demand_eviction_for_short_plans);
    RUN(ssd_reads_and_writes_share_one_budget);
    RUN(ssd_write_cache_then_sustained_rate);
    RUN(host_cap_enforced_for_plans);
    RUN(full_host_tier_spills_to_ssd_on_demand);
    RUN(demand_eviction_takes_the_furthest_next_use);
    RUN(demand_eviction_without_ssds_or_host_room);
    RUN(offload_of_a_kept_tensor_frees_it);
    RUN(far_in_time_finishes);
    RUN(bins_bounded_on_slow_link);
    return tio_test_done();
}
