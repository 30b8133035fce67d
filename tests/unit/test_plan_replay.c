/*
 * The paper's matrix (`teraio compare --paper`, docs/bench/sim.md) checked against its replay.
 * Every cell is planned as `compare` plans it (paper-2xh100nvl, the GPU's 500 GB share of host
 * memory for teraio-mixed, teraio-paper and g10; teraio-ssd on the 128 GB server with none; the
 * planner's default slack), both pipeline stages, and replayed coupled in the simulator as
 * `compare` replays it. For every stage's plan:
 *
 *   reported feasible         =>  tio_plan_verify accepts it, and the replay of the cell has no
 *                                 move late and no out-of-memory (GPU or host);
 *   rejected by the verifier  =>  not reported feasible;
 *
 * and the planner's model is held against the verifier's (which shares no code with it): the
 * planner's GPU and host memory curves equal the verifier's, kernel by kernel (so do the peaks).
 *
 * CI runs one cell per model at its smallest batch (Llama3-8B bs32 @2048, Granite-8B bs32
 * @4096, Llama3-70B bs8 @2048), every planned policy of the matrix: about 4 s in a Release
 * build (CTest label "slow", which the ASan run skips). `TIO_PLAN_MATRIX=full` runs all 15
 * cells and prints one line per cell and policy, infeasible plans replayed too (bench/
 * plan_matrix.sh; results in docs/bench/plan.md, "Plans against their replay").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <teraio/hw.h>
#include <teraio/model.h>
#include <teraio/plan.h>
#include <teraio/sim.h>
#include <teraio/trace.h>

#include "plan/planner_impl.h"
#include "plan/planner_verify.h"
#include "tio_test.h"

#define STAGES 2

struct cell {
    const char *model;
    uint32_t batch, seq;
};

static const struct cell full_matrix[] = {
    { "llama3-8b", 32, 2048 },       { "llama3-8b", 64, 2048 },
    { "llama3-8b", 128, 2048 },      { "llama3-8b", 64, 1024 },
    { "llama3-8b", 64, 4096 },       { "granite-code-8b", 32, 4096 },
    { "granite-code-8b", 64, 4096 }, { "granite-code-8b", 128, 4096 },
    { "granite-code-8b", 64, 2048 }, { "granite-code-8b", 64, 8192 },
    { "llama3-70b", 8, 2048 },       { "llama3-70b", 16, 2048 },
    { "llama3-70b", 32, 2048 },      { "llama3-70b", 16, 3072 },
    { "llama3-70b", 16, 4096 },
};
static const struct cell ci_cells[] = {
    { "llama3-8b", 32, 2048 },
    { "granite-code-8b", 32, 4096 },
    { "llama3-70b", 8, 2048 },
};
static const char *const policies[] = { "teraio-ssd", "teraio-mixed", "teraio-paper", "g10" };

struct tally {
    int feasible, verified, infeasible;
};

/* The hardware `compare` gives `policy`. */
static void hw_for(const char *policy, struct tio_hw *hw) {
    int ssd_only = strcmp(policy, "teraio-ssd") == 0;
    CHECK_OK(tio_hw_preset(ssd_only ? "paper-2xh100nvl-128g" : "paper-2xh100nvl", hw));
    uint32_t gpus = hw->gpus ? hw->gpus : 1;
    hw->host_offload_cap_bytes = ssd_only ? 0 : hw->host_memory_bytes / gpus;
}

static struct tio_trace *stage_trace(const struct cell *c, uint32_t rank) {
    struct tio_model_params mp;
    CHECK_OK(tio_model_preset(c->model, &mp));
    mp.global_batch = c->batch;
    mp.seq_len = c->seq;
    mp.rank = rank;
    mp.grad_accum = 0;
    if (mp.micro_batch * mp.dp > mp.global_batch) {
        mp.micro_batch = mp.global_batch / mp.dp;
    }
    struct tio_trace *tr = NULL;
    CHECK_OK(tio_model_generate(&mp, &tr, NULL));
    return tr;
}

/* The planner's curves (pgpu, phost: tio_plan_make_curves) against the verifier's curves of the
 * same plan, kernel by kernel, and its peaks against theirs. */
static void cross_check(const struct tio_plan *plan,
                        const struct tio_trace *tr,
                        const struct tio_hw *hw,
                        const struct tio_plan_params *pp,
                        const uint64_t *pgpu,
                        const uint64_t *phost) {
    size_t n = tio_trace_kernel_count(tr);
    uint64_t *gpu = malloc(n * sizeof *gpu), *host = malloc(n * sizeof *host);
    if (!gpu || !host) {
        abort();
    }
    CHECK_OK(tio_plan_verify_curves(plan, tr, hw, pp, gpu, host));
    uint64_t gp = 0, hp = 0;
    size_t gbad = 0, hbad = 0;
    for (size_t k = 0; k < n; k++) {
        gp = gpu[k] > gp ? gpu[k] : gp;
        hp = host[k] > hp ? host[k] : hp;
        gbad += gpu[k] != pgpu[k];
        hbad += host[k] != phost[k];
    }
    if (gbad || hbad) {
        printf("  %s: %zu of %zu kernels with other GPU bytes, %zu with other host bytes\n",
               pp->policy, gbad, n, hbad);
    }
    CHECK_EQ_U(gbad, 0);
    CHECK_EQ_U(hbad, 0);
    struct tio_plan_summary s;
    tio_plan_get_summary(plan, &s);
    CHECK_EQ_U(gp, s.planned_peak_bytes);
    CHECK_EQ_U(hp, s.host_peak_bytes);
    free(gpu);
    free(host);
}

static void check_cell(const struct cell *c, const char *policy, int full, struct tally *t) {
    struct tio_hw hw;
    hw_for(policy, &hw);
    struct tio_plan_params pp = tio_plan_params_default();
    pp.policy = policy;
    struct tio_trace *tr[STAGES] = { NULL };
    struct tio_plan *plan[STAGES] = { NULL };
    int feasible[STAGES], verified[STAGES];
    size_t stalls[STAGES];
    char why[STAGES][160];
    for (uint32_t r = 0; r < STAGES; r++) {
        tr[r] = stage_trace(c, r);
        REQUIRE_OR(tr[r] != NULL, (void)0);
        size_t n = tio_trace_kernel_count(tr[r]);
        uint64_t *pgpu = malloc(n * sizeof *pgpu), *phost = malloc(n * sizeof *phost);
        if (!pgpu || !phost) {
            abort();
        }
        memset(pgpu, 0xff, n * sizeof *pgpu);
        memset(phost, 0xff, n * sizeof *phost);
        CHECK_OK(tio_plan_make_curves(tr[r], &hw, &pp, &plan[r], pgpu, phost));
        REQUIRE_OR(plan[r] != NULL, (tio_trace_free(tr[r]), free(pgpu), free(phost)));
        struct tio_plan_summary s;
        tio_plan_get_summary(plan[r], &s);
        feasible[r] = s.feasible != 0;
        int vrc = tio_plan_verify(plan[r], tr[r], &hw, &pp, NULL);
        verified[r] = vrc == 0;
        (void)snprintf(why[r], sizeof why[r], "%s", vrc == 0 ? "" : tio_last_error());
        stalls[r] = 0;
        const struct tio_move *mv = tio_plan_moves(plan[r], NULL);
        for (size_t i = 0; i < s.n_moves; i++) {
            stalls[r] += (mv[i].flags & TIO_MOVE_STALL) != 0;
        }
        cross_check(plan[r], tr[r], &hw, &pp, pgpu, phost);
        free(pgpu);
        free(phost);
        /* feasible => verified; rejected => not feasible (the same statement, kept as both) */
        if (feasible[r] && !verified[r]) {
            printf("  %s bs%u @%u stage %u %s: feasible but rejected: %s\n", c->model, c->batch,
                   c->seq, r, policy, why[r]);
        }
        CHECK(!feasible[r] || verified[r]);
        t->feasible += feasible[r];
        t->verified += verified[r];
        t->infeasible += !feasible[r];
    }
    int all_feasible = feasible[0] && feasible[1];
    if (all_feasible || full) {
        const struct tio_trace *trs[STAGES] = { tr[0], tr[1] };
        const struct tio_move *mv[STAGES];
        size_t nmv[STAGES];
        for (uint32_t r = 0; r < STAGES; r++) {
            mv[r] = tio_plan_moves(plan[r], &nmv[r]);
        }
        struct tio_sim_params sp = tio_sim_params_default();
        sp.label = policy;
        struct tio_sim *sims[STAGES] = { NULL };
        CHECK_OK(tio_sim_run_pipeline(trs, mv, nmv, STAGES, &hw, &sp, NULL, sims));
        if (sims[0] && sims[1]) {
            struct tio_sim_result r0, r1;
            tio_sim_get_result(sims[0], &r0, sizeof r0);
            tio_sim_get_result(sims[1], &r1, sizeof r1);
            uint64_t late = r0.n_moves_late + r1.n_moves_late;
            const char *oom = r0.oom == TIO_SIM_OOM_HOST ? "host" : r0.oom ? "gpu" : "none";
            printf("  %-15s bs%-3u @%-4u %-12s feasible %d/%d, verified %d/%d, stall moves "
                   "%zu+%zu; replay: oom %s (%.1f MB), %llu late, %.1f%% of ideal%s%s\n",
                   c->model, c->batch, c->seq, policy, feasible[0], feasible[1], verified[0],
                   verified[1], stalls[0], stalls[1], oom, (double)r0.oom_bytes / 1e6,
                   (unsigned long long)late, 100 * r0.fraction_of_ideal,
                   verified[0] && verified[1] ? "" : "; verifier: ", verified[0] ? why[1] : why[0]);
            if (all_feasible) {
                CHECK_EQ_I(r0.oom, 0);
                CHECK_EQ_U(late, 0);
            }
        }
        tio_sim_free(sims[0]);
        tio_sim_free(sims[1]);
    }
    for (uint32_t r = 0; r < STAGES; r++) {
        tio_plan_free(plan[r]);
        tio_trace_free(tr[r]);
    }
}

TIO_TEST(feasible_plans_replay_cleanly) {
    const char *env = getenv("TIO_PLAN_MATRIX");
    int full = env && strcmp(env, "full") == 0;
    const struct cell *cells = full ? full_matrix : ci_cells;
    size_t nc =
        full ? sizeof full_matrix / sizeof full_matrix[0] : sizeof ci_cells / sizeof ci_cells[0];
    struct tally t = { 0, 0, 0 };
    for (size_t i = 0; i < nc; i++) {
        for (size_t p = 0; p < sizeof policies / sizeof policies[0]; p++) {
            check_cell(&cells[i], policies[p], full, &t);
        }
    }
    printf("  plans: %d feasible, %d verified, %d not feasible\n", t.feasible, t.verified,
           t.infeasible);
    CHECK(t.feasible > 0); /* both implications were exercised */
    CHECK(t.infeasible > 0);
}

int main(void) {
    RUN(feasible_plans_replay_cleanly);
    return tio_test_done();
}
