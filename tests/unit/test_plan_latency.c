/*
 * A plan reported feasible without stall moves passes the verifier and replays without late
 * moves (docs/planner.md, "Plans against their replay"), on a trace whose kernels (about 5 us) are
 * shorter than a request's latency (50 us to the SSDs of cpu-ci, 10 us to host memory): the `small`
 * model's stage 0 on cpu-ci at 48 MiB, tensors from 64 KiB. Each of the model's causes of late
 * moves shows here: latency the planner did not allow for, URGENT flags served ahead of earlier
 * deadlines, host transfers taking the PCIe link from SSD transfers the slots had counted on, clean
 * host copies the simulator had freed. About 10 ms.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <teraio/hw.h>
#include <teraio/model.h>
#include <teraio/plan.h>
#include <teraio/sim.h>
#include <teraio/trace.h>

#include "tio_test.h"

TIO_TEST(feasible_small_plans_replay_without_late_moves) {
    struct tio_model_params mp;
    CHECK_OK(tio_model_preset("small", &mp));
    struct tio_trace *tr = NULL;
    CHECK_OK(tio_model_generate(&mp, &tr, NULL));
    struct tio_hw hw;
    CHECK_OK(tio_hw_preset("cpu-ci", &hw));
    hw.gpu_memory_bytes = UINT64_C(48) << 20;
    hw.gpu_reserve_bytes = 0;
    const char *pols[] = { "teraio-mixed", "teraio-ssd", "teraio-paper", "g10" };
    int feasible_seen = 0;
    for (size_t i = 0; tr && i < sizeof pols / sizeof pols[0]; i++) {
        struct tio_plan_params pp = tio_plan_params_default();
        pp.policy = pols[i];
        pp.min_tensor_bytes = 64 << 10;
        struct tio_plan *plan = NULL;
        CHECK_OK(tio_plan_make(tr, &hw, &pp, &plan));
        if (!plan) {
            continue;
        }
        struct tio_plan_summary s;
        tio_plan_get_summary(plan, &s);
        struct tio_sim_params sp = tio_sim_params_default();
        struct tio_sim *sim = NULL;
        CHECK_OK(tio_sim_run_plan(tr, &hw, plan, &sp, &sim));
        struct tio_sim_result r;
        memset(&r, 0, sizeof r);
        if (sim) {
            tio_sim_get_result(sim, &r, sizeof r);
        }
        printf("  %s: feasible %d, %zu moves; replay %llu late, oom %d, stall %.1f us\n", pols[i],
               (int)s.feasible, s.n_moves, (unsigned long long)r.n_moves_late, r.oom,
               r.stall_s * 1e6);
        size_t stalls = 0;
        const struct tio_move *mv = tio_plan_moves(plan, NULL);
        for (size_t k = 0; k < s.n_moves; k++) {
            stalls += (mv[k].flags & TIO_MOVE_STALL) != 0;
        }
        if (s.feasible) {
            CHECK_EQ_I(r.oom, 0);
        }
        /* feasible within the bandwidth (no stall move): the verifier accepts it and the replay
         * keeps every deadline; a plan with stall moves says compute waits for them */
        if (s.feasible && stalls == 0 && s.n_moves > 0) {
            feasible_seen++;
            CHECK_OK(tio_plan_verify(plan, tr, &hw, &pp, NULL));
            CHECK_EQ_U(r.n_moves_late, 0);
        }
        tio_sim_free(sim);
        tio_plan_free(plan);
    }
    CHECK(feasible_seen >= 2); /* the implication was tested */
    tio_trace_free(tr);
}

int main(void) {
    RUN(feasible_small_plans_replay_without_late_moves);
    return tio_test_done();
}
