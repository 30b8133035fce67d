/*
 * The simulated ZeRO-Offload and ZeRO-Infinity baselines on tiny hand-built traces. Expected times
 * are computed by hand in the comments: durations in ms, every channel at 1e9 B/s unless said (so
 * 4e6 bytes take 4 ms), latencies 0 unless said.
 */
#include "sim_util.h"

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
    struct tio_hw hw = sim_test_hw(1, 4100000000);
    struct tio_sim_params p = test_params();
    CHECK_NEAR(p.zero_bytes_scale, 1.0, 0); /* FP32 by default, as the paper ran */
    p.zero_bytes_scale = 0.5;               /* this test: the mixed-precision what-if */
    p.cpu_adam_params_per_core_s = 1e6;
    p.policy = "zero-offload";
    struct tio_sim *sim = NULL;
    struct tio_sim_result r;
    CHECK_OK(tio_sim_run(tr, &hw, NULL, 0, &p, &sim));
    CHECK(sim != NULL);
    if (sim) {
        tio_sim_get_result(sim, &r, sizeof r);
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
    CHECK(sim != NULL);
    if (sim) {
        tio_sim_get_result(sim, &r, sizeof r);
        CHECK_EQ_I(r.oom, TIO_SIM_OOM_HOST);
    }
    tio_sim_free(sim);
    /* ZeRO-Infinity keeps activations on the GPU: x at fp16 is 5e6 B; with 6e6 B of GPU memory
     * left after ZeRO-3's reduce bucket (5e8 values, 1e9 B at fp16), x plus w (2e6) and g (2e6)
     * cannot fit -> GPU OOM */
    hw = sim_test_hw(1, 1006000000);
    p.policy = "zero-infinity";
    CHECK_OK(tio_sim_run(tr, &hw, NULL, 0, &p, &sim));
    CHECK(sim != NULL);
    if (sim) {
        tio_sim_get_result(sim, &r, sizeof r);
        CHECK_EQ_I(r.oom, TIO_SIM_OOM_GPU);
    }
    tio_sim_free(sim);
    hw = sim_test_hw(1, 4100000000);
    CHECK_OK(tio_sim_run(tr, &hw, NULL, 0, &p, &sim));
    CHECK(sim != NULL);
    if (sim) {
        tio_sim_get_result(sim, &r, sizeof r);
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
    hw = sim_test_hw(1, 2100000000);
    CHECK_OK(tio_sim_run(tr, &hw, NULL, 0, &p, &sim));
    CHECK(sim != NULL);
    if (sim) {
        tio_sim_get_result(sim, &r, sizeof r);
        CHECK_EQ_I(r.oom, 0);
        CHECK_NEAR(r.iteration_s, 270 * MS, 1e-9);
        CHECK_EQ_U(r.bytes[TIO_SIM_PCIE_D2H], 4000000);
        CHECK_EQ_U(r.host_peak_bytes, 24000000);
    }
    tio_sim_free(sim);
    hw = sim_test_hw(1, 1900000000);
    CHECK_OK(tio_sim_run(tr, &hw, NULL, 0, &p, &sim));
    CHECK(sim != NULL);
    if (sim) {
        tio_sim_get_result(sim, &r, sizeof r);
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
    struct tio_hw hw = sim_test_hw(1, 4100000000);
    struct tio_sim_params p = test_params();
    p.policy = "zero-offload";
    p.zero_bytes_scale = 0.5; /* fp16 what-if: the numbers below are fp16 bytes */
    p.zero_prefetch_layers = 0;
    p.zero_offload_fetch_Bps = 1e8;
    p.zero_fetch_overhead_s = 0;
    p.cpu_adam_params_per_core_s = 1e15; /* no optimizer kernel: keep the CPU step negligible */
    struct tio_sim *sim = NULL;
    CHECK_OK(tio_sim_run(tr, &hw, NULL, 0, &p, &sim));
    CHECK(sim != NULL);
    if (sim) {
        struct tio_sim_result r;
        tio_sim_get_result(sim, &r, sizeof r);
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
    CHECK(sim != NULL);
    if (sim) {
        struct tio_sim_result r;
        tio_sim_get_result(sim, &r, sizeof r);
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
    struct tio_hw hw = sim_test_hw(1, 4100000000);
    struct tio_sim_params p = test_params();
    p.policy = "zero-offload";
    p.zero_bytes_scale = 0.5;
    p.zero_prefetch_layers = 0;
    p.zero_offload_fetch_Bps = 1e8;
    p.zero_fetch_overhead_s = 5 * MS;
    p.cpu_adam_params_per_core_s = 1e15;
    struct tio_sim *sim = NULL;
    CHECK_OK(tio_sim_run(tr, &hw, NULL, 0, &p, &sim));
    CHECK(sim != NULL);
    if (sim) {
        struct tio_sim_result r;
        tio_sim_get_result(sim, &r, sizeof r);
        CHECK_EQ_I(r.oom, 0);
        CHECK_NEAR(r.iteration_s, 60 * MS, 1e-9);
        CHECK_EQ_U(r.bytes[TIO_SIM_PCIE_H2D], 2000000);
        CHECK_NEAR(tio_sim_kernel_start_s(sim)[1], 40 * MS, 1e-9);
    }
    tio_sim_free(sim);
    p.policy = "zero-infinity";
    CHECK_OK(tio_sim_run(tr, &hw, NULL, 0, &p, &sim));
    CHECK(sim != NULL);
    if (sim) {
        struct tio_sim_result r;
        tio_sim_get_result(sim, &r, sizeof r);
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

int main(void) {
    RUN(zero_models);
    RUN(zero_layer_streaming);
    RUN(zero_fetch_overhead_and_persistence);
    return tio_test_done();
}
