/*
 * Pipeline stages simulated together (tio_sim_run_pipeline) on hand-built two-stage 1F1B
 * traces. Every expected time is worked out by hand in the comments: durations in ms, the SSD
 * at 1 GB/s (4e6 bytes take 4 ms), PCIe 10 GB/s, no latencies.
 *
 * Two micro-batches, 1F1B (stage 0 runs one warm-up forward):
 *   stage 0: F0 10 | send 1 | F1 10 | send 1 | recv(b) | B0 20 | recv(b) | B1 20
 *   stage 1: recv(f) | F0 10 | B0 20 | send 1 | recv(f) | F1 10 | B1 20 | send 1
 * The receives are recorded at 5 ms (a bubble a profiler saw); coupled, a receive takes
 * max(its start + the send kernel's 1 ms, the send's end) instead.
 */
#include "sim_util.h"

struct k {
    const char *name;
    double ms;
    uint32_t flags;
    int tensor; /* -1: none */
};

/* A stage's trace: tensor 0 is a 4e6-byte global weight, tensor 1 a small activation. */
static struct tio_trace *mk_stage(const struct k *ks, size_t nk) {
    struct tio_trace *tr = NULL;
    if (tio_trace_new(NULL, &tr) < 0) {
        return NULL;
    }
    if (tio_trace_add_tensor(tr, 4000000, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, "w", NULL) < 0 ||
        tio_trace_add_tensor(tr, 100, TIO_TENSOR_ACTIVATION, 0, "x", NULL) < 0 ||
        tio_trace_set_meta(tr, "tokens_per_iteration", "940") < 0) {
        goto fail;
    }
    for (size_t i = 0; i < nk; i++) {
        uint64_t ns = (uint64_t)(ks[i].ms * 1e6 + 0.5);
        if (tio_trace_add_kernel(tr, ks[i].name, ns, ks[i].flags, NULL) < 0 ||
            tio_trace_add_use(tr, ks[i].tensor >= 0 ? (uint32_t)ks[i].tensor : 1, TIO_USE_READ) <
                0) {
            goto fail;
        }
    }
    if (tio_trace_finish(tr) < 0) {
        goto fail;
    }
    return tr;
fail:
    tio_trace_free(tr);
    return NULL;
}

#define BW TIO_KERNEL_BACKWARD
#define CM TIO_KERNEL_COMM

static const struct k stage0[] = {
    { "F0", 10, 0, -1 },
    { "nccl:send", 1, CM, -1 },
    { "F1", 10, 0, -1 },
    { "nccl:send", 1, CM, -1 },
    { "nccl:recv", 5, CM | BW, -1 },
    { "B0", 20, BW, -1 },
    { "nccl:recv", 5, CM | BW, -1 },
    { "B1", 20, BW, -1 },
};
/* stage 1's F1 (kernel 5) uses the weight w */
static const struct k stage1[] = {
    { "nccl:recv", 5, CM, -1 }, { "F0", 10, 0, -1 },
    { "B0", 20, BW, -1 },       { "nccl:send", 1, CM | BW, -1 },
    { "nccl:recv", 5, CM, -1 }, { "F1", 10, 0, 0 },
    { "B1", 20, BW, -1 },       { "nccl:send", 1, CM | BW, -1 },
};

static int run2(struct tio_trace *const *tr,
                const struct tio_move *const *mv,
                const size_t *nmv,
                const char *policy,
                struct tio_sim_result *r) {
    struct tio_hw hw = sim_test_hw(2, UINT64_C(1) << 30);
    struct tio_sim_params p = tio_sim_params_default();
    p.host_latency_s = 0;
    p.policy = policy;
    struct tio_sim *out[2] = { NULL, NULL };
    int rc =
        tio_sim_run_pipeline((const struct tio_trace *const *)tr, mv, nmv, 2, &hw, &p, NULL, out);
    if (rc < 0) {
        printf("  tio_sim_run_pipeline: %s: %s\n", tio_strerror(rc), tio_last_error());
        return rc;
    }
    tio_sim_get_result(out[0], &r[0], sizeof r[0]);
    tio_sim_get_result(out[1], &r[1], sizeof r[1]);
    tio_sim_free(out[0]);
    tio_sim_free(out[1]);
    return 0;
}

/*
 * Unlimited memory. Stage 0: F0 0-10, send 10-11 (message f0 at 11), F1 11-21, send 21-22
 * (f1 at 22), recv from 22. Stage 1: recv 0 - max(0 + 1, 11) = 11, F0 11-21, B0 21-41, send
 * 41-42 (b0 at 42), recv 42 - max(43, 22) = 43, F1 43-53, B1 53-73, send 73-74 (b1 at 74).
 * Stage 0: recv 22 - max(23, 42) = 42, B0 42-62, recv 62 - max(63, 74) = 74, B1 74-94.
 * Makespan 94 ms (stage 1 ends at 74). Waits: stage 0 (42 - 23) + (74 - 63) = 30 ms; stage 1
 * (11 - 1) + 0 + (94 - 74) after its end = 30 ms. Alone, stage 0's trace sums to 72 ms.
 */
TIO_TEST(coupled_makespan_hand_computed) {
    struct tio_trace *tr[2] = { mk_stage(stage0, 8), mk_stage(stage1, 8) };
    CHECK(tr[0] && tr[1]);
    struct tio_sim_result r[2];
    CHECK_OK(run2(tr, NULL, NULL, "ideal", r));
    for (int s = 0; s < 2; s++) {
        CHECK_EQ_U(r[s].pipeline_stages, 2);
        CHECK_EQ_U(r[s].pipeline_stage, (unsigned)s);
        CHECK_NEAR(r[s].iteration_s, 94 * MS, 1e-9);
        CHECK_NEAR(r[s].ideal_s, 94 * MS, 1e-9);
        CHECK_NEAR(r[s].fraction_of_ideal, 1.0, 1e-9);
        CHECK_NEAR(r[s].tokens_per_s, 940 / (94 * MS), 1e-6);
        CHECK_NEAR(r[s].pipeline_wait_s, 30 * MS, 1e-9);
        CHECK_NEAR(r[s].stall_s, 0, 1e-12);
    }
    CHECK_NEAR(r[0].stage_end_s, 94 * MS, 1e-9);
    CHECK_NEAR(r[1].stage_end_s, 74 * MS, 1e-9);
    /* simulated alone, a stage is its own trace */
    struct tio_hw hw = sim_test_hw(2, UINT64_C(1) << 30);
    struct tio_sim_params p = tio_sim_params_default();
    p.policy = "ideal";
    struct tio_sim *one = NULL;
    CHECK_OK(tio_sim_run(tr[0], &hw, NULL, 0, &p, &one));
    struct tio_sim_result a;
    tio_sim_get_result(one, &a, sizeof a);
    CHECK_NEAR(a.iteration_s, 72 * MS, 1e-9);
    CHECK_EQ_U(a.pipeline_stages, 0);
    tio_sim_free(one);
    tio_trace_free(tr[0]);
    tio_trace_free(tr[1]);
}

/*
 * A stall in stage 1 delays stage 0. Stage 1's plan offloads w to the SSD at B0 (kernel 2, done
 * 21-25) and fetches it back only at F1 (kernel 5, its own deadline). Stage 1: recv ends at 43
 * as above, the prefetch is issued then and reads 4e6 bytes in 4 ms: F1 47-57, B1 57-77, send
 * 77-78. Stage 0's second backward receive, started at 62, ends at max(63, 78) = 78; B1 78-98.
 * Makespan 98 ms, ideal 94 ms; stage 1 stalled 4 ms, stage 0 waited 4 ms longer (34 ms).
 */
TIO_TEST(stall_in_stage_1_delays_stage_0) {
    struct tio_trace *tr[2] = { mk_stage(stage0, 8), mk_stage(stage1, 8) };
    CHECK(tr[0] && tr[1]);
    struct tio_move m1[2];
    memset(m1, 0, sizeof m1);
    m1[0].tensor = 0;
    m1[0].from = TIO_TIER_GPU;
    m1[0].to = TIO_TIER_SSD;
    m1[0].trigger = 2;
    m1[0].deadline = 5;
    m1[1].tensor = 0;
    m1[1].from = TIO_TIER_SSD;
    m1[1].to = TIO_TIER_GPU;
    m1[1].trigger = 5;
    m1[1].deadline = 5;
    const struct tio_move *mv[2] = { NULL, m1 };
    size_t nmv[2] = { 0, 2 };
    struct tio_sim_result r[2];
    CHECK_OK(run2(tr, mv, nmv, NULL, r));
    for (int s = 0; s < 2; s++) {
        CHECK_EQ_I(r[s].oom, 0);
        CHECK_NEAR(r[s].iteration_s, 98 * MS, 1e-9);
        CHECK_NEAR(r[s].ideal_s, 94 * MS, 1e-9);
        CHECK_NEAR(r[s].fraction_of_ideal, 94.0 / 98.0, 1e-9);
    }
    CHECK_NEAR(r[1].stall_data_s, 4 * MS, 1e-9);
    CHECK_NEAR(r[0].stall_s, 0, 1e-12); /* stage 0 never stalls: it waits in its receive */
    CHECK_NEAR(r[0].stage_end_s, 98 * MS, 1e-9);
    CHECK_NEAR(r[1].stage_end_s, 78 * MS, 1e-9);
    CHECK_NEAR(r[0].pipeline_wait_s, 34 * MS, 1e-9);
    CHECK_EQ_U(r[1].bytes[TIO_SIM_SSD_READ], 4000000);
    tio_trace_free(tr[0]);
    tio_trace_free(tr[1]);
}

/* Sends and receives that do not pair up, one stage, and a deadlock are errors naming them. */
TIO_TEST(mismatched_stages_are_errors) {
    struct tio_trace *a = mk_stage(stage0, 8);
    struct tio_trace *b = mk_stage(stage1, 7); /* no final send: stage 0 misses a gradient */
    CHECK(a && b);
    struct tio_trace *tr[2] = { a, b };
    struct tio_sim_result r[2];
    CHECK_RC(run2(tr, NULL, NULL, "ideal", r), TIO_EINVAL);
    CHECK_ERR_HAS("stage 1 sends 1 gradients back per iteration, stage 0 receives 2");
    struct tio_hw hw = sim_test_hw(2, UINT64_C(1) << 30);
    struct tio_sim *out[1] = { NULL };
    CHECK_RC(tio_sim_run_pipeline((const struct tio_trace *const *)tr, NULL, NULL, 1, &hw, NULL,
                                  NULL, out),
             TIO_EINVAL);
    CHECK_ERR_HAS("2 to 64");
    /* stage 1 receives its second forward before sending the first gradient, and stage 0
     * sends its second forward only after that gradient: each waits for the other */
    static const struct k s0[] = {
        { "F0", 1, 0, -1 },
        { "nccl:send", 1, CM, -1 },
        { "nccl:recv", 1, CM | BW, -1 },
        { "nccl:send", 1, CM, -1 },
        { "nccl:recv", 1, CM | BW, -1 },
    };
    static const struct k s1[] = {
        { "nccl:recv", 1, CM, -1 },
        { "nccl:recv", 1, CM, -1 },
        { "nccl:send", 1, CM | BW, -1 },
        { "nccl:send", 1, CM | BW, -1 },
    };
    struct tio_trace *c = mk_stage(s0, 5), *d = mk_stage(s1, 4);
    CHECK(c && d);
    struct tio_trace *tr2[2] = { c, d };
    CHECK_RC(run2(tr2, NULL, NULL, "ideal", r), TIO_EINVAL);
    CHECK_ERR_HAS("pipeline deadlock: stage 0 waits at kernel 2");
    tio_trace_free(a);
    tio_trace_free(b);
    tio_trace_free(c);
    tio_trace_free(d);
}

int main(void) {
    RUN(coupled_makespan_hand_computed);
    RUN(stall_in_stage_1_delays_stage_0);
    RUN(mismatched_stages_are_errors);
    return tio_test_done();
}
