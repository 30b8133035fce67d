/*
 * The simulator's software costs (docs/simulator.md, "Software costs"): the training thread's
 * time per kernel (launch, executor) and per move, and kernels slowed by transfers beside them.
 * Each test's expected times are worked out by hand in its comment (durations in ms, PCIe at
 * 10 GB/s each way, so 1 MB takes 0.1 ms, latencies 0); with the cost left out, each gets the
 * trace's own time instead. One warm-up iteration runs before the measured one, from t0.
 */
#include <stddef.h>

#include "sim_util.h"

/*
 * Per-kernel cost. Two kernels of 1 ms, no tensors; launch 1 ms, executor 2 ms. Replaying a plan
 * (no moves), the thread needs 3 ms per kernel: it starts the iteration with the GPU (t0),
 * launches k0 at t0 + 3 (k0 runs to t0 + 4) and k1 at t0 + 6 (runs to t0 + 7): 7 ms, of
 * which 3 + 2 ms the stream waited for the thread. With the `none` policy only the launch
 * counts: k0 at t0 + 1 to t0 + 2, k1 launched at t0 + 2, runs to t0 + 3: 3 ms. The ideal pays
 * nothing: 2 ms. With kernels of 10 ms the thread stays ahead after the first launch:
 * 3 + 10 + 10 = 23 ms.
 */
TIO_TEST(kernel_cost_delays_kernels_the_thread_cannot_keep_up_with) {
    struct kspec ks[] = { { 1, 0, { -1 } }, { 1, 0, { -1 } } };
    struct tio_trace *tr = mk(NULL, 0, ks, 2, NULL);
    CHECK(tr != NULL);
    struct tio_hw hw = sim_test_hw(1, UINT64_C(1) << 30);
    struct tio_sim_result r;
    CHECK_OK(run(tr, &hw, NULL, 0, NULL, &r, NULL));
    CHECK_NEAR(r.iteration_s, 2 * MS, 1e-12); /* no costs: the trace's time */
    hw.kernel_launch_s = 1 * MS;
    hw.kernel_executor_s = 2 * MS;
    CHECK_OK(run(tr, &hw, NULL, 0, NULL, &r, NULL));
    CHECK_NEAR(r.ideal_s, 2 * MS, 1e-12);
    CHECK_NEAR(r.iteration_s, 7 * MS, 1e-9);
    CHECK_NEAR(r.stall_s, 5 * MS, 1e-9);
    CHECK_NEAR(r.stall_thread_s, 5 * MS, 1e-9);
    CHECK_NEAR(r.stall_data_s + r.stall_memory_s, 0, 1e-12);
    CHECK_OK(run(tr, &hw, NULL, 0, "none", &r, NULL));
    CHECK_NEAR(r.iteration_s, 3 * MS, 1e-9);
    CHECK_OK(run(tr, &hw, NULL, 0, "ideal", &r, NULL));
    CHECK_NEAR(r.iteration_s, 2 * MS, 1e-12);
    tio_trace_free(tr);

    struct kspec kl[] = { { 10, 0, { -1 } }, { 10, 0, { -1 } } };
    tr = mk(NULL, 0, kl, 2, NULL);
    CHECK(tr != NULL);
    CHECK_OK(run(tr, &hw, NULL, 0, NULL, &r, NULL));
    CHECK_NEAR(r.iteration_s, 23 * MS, 1e-9);
    CHECK_NEAR(r.stall_thread_s, 3 * MS, 1e-9);
    tio_trace_free(tr);
}

/*
 * Per-move cost, serialised on the thread. Globals a and b (1 MB each) are used by k0 and k3,
 * four kernels of 1 ms; the plan offloads both to host memory at k1 and prefetches both at k2
 * for k3. Free moves: 4 ms (each transfer takes 0.1 ms beside a kernel). At 1 ms per move the
 * thread issues k1's two moves by t0 + 2 (it launched k0 at t0): k1 runs t0 + 2 to t0 + 3, the
 * offloads from t0 + 2; k2's two by t0 + 4: k2 runs t0 + 4 to t0 + 5, its prefetches end at
 * t0 + 4.2; k3 (launched at t0 + 4) runs t0 + 5 to t0 + 6: 6 ms, 2 of them waiting for the
 * thread. The same plan's moves cost nothing to the `none` policy, which has none.
 */
TIO_TEST(move_cost_is_paid_on_the_thread_before_the_kernel) {
    struct tspec ts[] = { { 1000000, W, G }, { 1000000, W, G } };
    struct kspec ks[] = {
        { 1, 0, { 0, 1, -1 } }, { 1, 0, { -1 } }, { 1, 0, { -1 } }, { 1, 0, { 0, 1, -1 } }
    };
    struct tio_trace *tr = mk(ts, 2, ks, 4, NULL);
    CHECK(tr != NULL);
    struct tio_hw hw = sim_test_hw(1, UINT64_C(1) << 30);
    hw.host_offload_cap_bytes = 100000000;
    struct tio_move m[] = { mv(0, TIO_TIER_GPU, TIO_TIER_HOST, 1, 2, 0),
                            mv(1, TIO_TIER_GPU, TIO_TIER_HOST, 1, 2, 0),
                            mv(0, TIO_TIER_HOST, TIO_TIER_GPU, 2, 3, 0),
                            mv(1, TIO_TIER_HOST, TIO_TIER_GPU, 2, 3, 0) };
    struct tio_sim_result r;
    CHECK_OK(run(tr, &hw, m, 4, NULL, &r, NULL));
    CHECK_NEAR(r.iteration_s, 4 * MS, 1e-9);
    CHECK_EQ_U(r.n_moves_issued, 4);
    hw.move_issue_s = 1 * MS;
    struct tio_sim *sim = NULL;
    CHECK_OK(run(tr, &hw, m, 4, NULL, &r, &sim));
    CHECK_NEAR(r.iteration_s, 6 * MS, 1e-9);
    CHECK_NEAR(r.stall_thread_s, 2 * MS, 1e-9);
    CHECK_EQ_U(r.n_moves_issued, 4);
    CHECK_EQ_U(r.n_moves_late, 0);
    CHECK(sim != NULL);
    if (sim) {
        const double *start = tio_sim_kernel_start_s(sim);
        CHECK_NEAR(start[1], 2 * MS, 1e-9);
        CHECK_NEAR(start[2], 4 * MS, 1e-9);
        CHECK_NEAR(start[3], 5 * MS, 1e-9);
    }
    tio_sim_free(sim);
    CHECK_OK(run(tr, &hw, NULL, 0, "none", &r, NULL));
    CHECK_NEAR(r.iteration_s, 4 * MS, 1e-9);
    tio_trace_free(tr);
}

/*
 * A read the executor's thread waits for (from the SSDs: `ready` blocks until it is in) delays
 * the launch after it; one from host memory does not (the compute stream waits, in stream
 * order, while the thread goes on). Global a (4 MB) is used by k0 and k3; k0, k2, k3 1 ms, k1
 * 5 ms; the plan offloads a at k1 and prefetches it at k2 for k3; the SSD and the PCIe link at
 * 1 GB/s, so each transfer takes 4 ms. Free: k0 t0 .. t0 + 1, the offload t0 + 1 .. t0 + 5
 * (during k1, t0 + 1 .. t0 + 6), the prefetch t0 + 6 .. t0 + 10, k2 t0 + 6 .. t0 + 7, k3 waits
 * for a and runs t0 + 10 .. t0 + 11: 11 ms, either tier. With a launch cost L = 0.25 ms the
 * thread launches k0 at t0 + L (it starts the iteration with the GPU) and then stays ahead, so
 * everything shifts by L: the prefetch ends at t0 + 10.25. From the SSDs the thread waited for
 * it and launches k3 at t0 + 10.5: 11.5 ms. From host memory k3 was launched long before:
 * it starts at t0 + 10.25, 11.25 ms.
 */
TIO_TEST(thread_waits_for_ssd_reads_not_host_reads) {
    struct tspec ts[] = { { 4000000, W, G } };
    struct kspec ks[] = {
        { 1, 0, { 0, -1 } }, { 5, 0, { -1 } }, { 1, 0, { -1 } }, { 1, 0, { 0, -1 } }
    };
    struct tio_trace *tr = mk(ts, 1, ks, 4, NULL);
    CHECK(tr != NULL);
    struct tio_hw hw = sim_test_hw(1, UINT64_C(1) << 30);
    hw.host_offload_cap_bytes = 100000000;
    hw.pcie_h2d_Bps = hw.pcie_d2h_Bps = 1e9; /* the host path as fast as the SSD */
    for (int tier = TIO_TIER_HOST; tier <= TIO_TIER_SSD; tier++) {
        struct tio_move m[] = { mv(0, TIO_TIER_GPU, tier, 1, 2, 0),
                                mv(0, tier, TIO_TIER_GPU, 2, 3, 0) };
        hw.kernel_launch_s = 0;
        struct tio_sim_result r;
        CHECK_OK(run(tr, &hw, m, 2, NULL, &r, NULL));
        CHECK_NEAR(r.iteration_s, 11 * MS, 1e-9);
        CHECK_NEAR(r.stall_data_s, 3 * MS, 1e-9);
        hw.kernel_launch_s = 0.25 * MS;
        CHECK_OK(run(tr, &hw, m, 2, NULL, &r, NULL));
        CHECK_NEAR(r.iteration_s, (tier == TIO_TIER_SSD ? 11.5 : 11.25) * MS, 1e-9);
    }
    tio_trace_free(tr);
}

/*
 * Kernels slowed by transfers beside them. Global a (20 MB: 2 ms at 10 GB/s) is used by k0 and
 * k3; the plan offloads it to host memory at k1 and prefetches it at k2; four kernels of 10 ms:
 * 40 ms without contention. With kernel_io_slowdown 1, a transfer in one direction uses half
 * the link (u = 0.5): the kernel beside it runs at 1 / (1 + 0.5) = 2/3 speed for 2 ms, doing
 * 4/3 ms of work, and ends 2/3 ms late; k1 and k2 each: 40 + 4/3 ms, 4/3 ms of it slowdown.
 */
TIO_TEST(transfers_slow_the_kernels_beside_them) {
    struct tspec ts[] = { { 20000000, W, G } };
    struct kspec ks[] = {
        { 10, 0, { 0, -1 } }, { 10, 0, { -1 } }, { 10, 0, { -1 } }, { 10, 0, { 0, -1 } }
    };
    struct tio_trace *tr = mk(ts, 1, ks, 4, NULL);
    CHECK(tr != NULL);
    struct tio_hw hw = sim_test_hw(1, UINT64_C(1) << 30);
    hw.host_offload_cap_bytes = 100000000;
    struct tio_move m[] = { mv(0, TIO_TIER_GPU, TIO_TIER_HOST, 1, 2, 0),
                            mv(0, TIO_TIER_HOST, TIO_TIER_GPU, 2, 3, 0) };
    struct tio_sim_result r;
    CHECK_OK(run(tr, &hw, m, 2, NULL, &r, NULL));
    CHECK_NEAR(r.iteration_s, 40 * MS, 1e-9);
    CHECK_NEAR(r.kernel_slowdown_s, 0, 0);
    hw.kernel_io_slowdown = 1.0;
    CHECK_OK(run(tr, &hw, m, 2, NULL, &r, NULL));
    CHECK_NEAR(r.iteration_s, (40.0 + 4.0 / 3.0) * MS, 1e-9);
    CHECK_NEAR(r.kernel_slowdown_s, 4.0 / 3.0 * MS, 1e-9);
    CHECK_NEAR(r.stall_s, 0, 1e-12); /* a slowdown is not a stall */
    tio_trace_free(tr);
}

/* Bad costs are refused by name; a caller's older header without them gets none. */
TIO_TEST(bad_costs_are_refused_and_old_headers_get_none) {
    struct kspec ks[] = { { 1, 0, { -1 } }, { 1, 0, { -1 } } };
    struct tio_trace *tr = mk(NULL, 0, ks, 2, NULL);
    CHECK(tr != NULL);
    struct tio_hw hw = sim_test_hw(1, UINT64_C(1) << 30);
    struct tio_sim_result r;
    hw.kernel_executor_s = -1;
    CHECK_RC(run(tr, &hw, NULL, 0, NULL, &r, NULL), TIO_EINVAL);
    CHECK_ERR_HAS("kernel_executor_s");
    hw.kernel_executor_s = 1 * MS;
    hw.struct_size = (uint32_t)offsetof(struct tio_hw, kernel_launch_s);
    CHECK_OK(run(tr, &hw, NULL, 0, NULL, &r, NULL));
    CHECK_NEAR(r.iteration_s, 2 * MS, 1e-12);
    tio_trace_free(tr);
}

int main(void) {
    RUN(kernel_cost_delays_kernels_the_thread_cannot_keep_up_with);
    RUN(move_cost_is_paid_on_the_thread_before_the_kernel);
    RUN(thread_waits_for_ssd_reads_not_host_reads);
    RUN(transfers_slow_the_kernels_beside_them);
    RUN(bad_costs_are_refused_and_old_headers_get_none);
    return tio_test_done();
}
