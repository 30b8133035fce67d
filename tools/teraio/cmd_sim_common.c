/* Helpers shared by simulate, sweep and compare. */
#include "cmd_sim_common.h"

#include <string.h>

#include <teraio/sim.h>
#include <teraio/teraio.h>

int cli_sim_plan(const struct tio_trace *tr,
                 const struct tio_hw *hw,
                 const struct tio_plan *plan,
                 const struct tio_sim_params *sp,
                 struct tio_sim **out) {
    struct tio_sim_params p = *sp;
    size_t n = 0;
    const struct tio_move *mv = tio_plan_moves(plan, &n);
    const char *policy = tio_plan_policy(plan);
    if (n == 0 && tio_sim_policy_is_builtin(policy)) {
        p.policy = policy;
        return tio_sim_run(tr, hw, NULL, 0, &p, out);
    }
    p.policy = NULL;
    p.label = policy;
    return tio_sim_run(tr, hw, mv, n, &p, out);
}

int cli_sim_policy(const struct tio_trace *tr,
                   const struct tio_hw *hw,
                   const char *policy,
                   uint64_t min_tensor_bytes,
                   const struct tio_sim_params *sp,
                   struct tio_sim **out) {
    return cli_sim_policy_feasible(tr, hw, policy, min_tensor_bytes, sp, out, NULL);
}

int cli_sim_policy_feasible(const struct tio_trace *tr,
                            const struct tio_hw *hw,
                            const char *policy,
                            uint64_t min_tensor_bytes,
                            const struct tio_sim_params *sp,
                            struct tio_sim **out,
                            int *plan_feasible) {
    struct tio_sim_params p = *sp;
    if (plan_feasible) {
        *plan_feasible = 1;
    }
    if (tio_sim_policy_is_builtin(policy)) {
        p.policy = policy;
        return tio_sim_run(tr, hw, NULL, 0, &p, out);
    }
    struct tio_plan_params pp = tio_plan_params_default();
    pp.policy = policy;
    if (min_tensor_bytes) {
        pp.min_tensor_bytes = min_tensor_bytes;
    }
    struct tio_hw h = *hw;
    if (sp->capacity_bytes) { /* plan against the capacity that is simulated */
        h.gpu_reserve_bytes = 0;
        h.gpu_memory_bytes = sp->capacity_bytes;
    }
    struct tio_plan *plan = NULL;
    int rc = tio_plan_make(tr, &h, &pp, &plan);
    if (rc < 0) {
        return rc;
    }
    if (plan_feasible) {
        struct tio_plan_summary ps;
        tio_plan_get_summary(plan, &ps);
        *plan_feasible = ps.feasible != 0;
    }
    rc = cli_sim_plan(tr, hw, plan, sp, out);
    tio_plan_free(plan);
    return rc;
}

int cli_sim_pipeline(const struct tio_trace *const *trs,
                     size_t n,
                     const struct tio_hw *hw,
                     const struct tio_plan *const *plans,
                     const char *policy,
                     uint64_t min_tensor_bytes,
                     const struct tio_sim_params *sp,
                     struct tio_sim **out,
                     int *plan_feasible) {
    struct tio_sim_params p = *sp;
    if (plan_feasible) {
        *plan_feasible = 1;
    }
    if (n == 0 || n > CLI_MAX_STAGES) {
        return tio_set_error(TIO_EINVAL, "pipeline of %zu stages: 2 to %d", n, CLI_MAX_STAGES);
    }
    if (plans) { /* plans that hold no moves and name a baseline: simulate the baseline */
        size_t moves = 0;
        for (size_t i = 0; i < n; i++) {
            size_t m = 0;
            (void)tio_plan_moves(plans[i], &m);
            moves += m;
        }
        policy = tio_plan_policy(plans[0]);
        if (moves == 0 && tio_sim_policy_is_builtin(policy)) {
            plans = NULL;
        }
    }
    if (!plans && tio_sim_policy_is_builtin(policy)) {
        p.policy = policy;
        return tio_sim_run_pipeline(trs, NULL, NULL, n, hw, &p, NULL, out);
    }
    uint64_t cap[CLI_MAX_STAGES] = { 0 };
    struct tio_plan *made[CLI_MAX_STAGES] = { NULL };
    const struct tio_move *mv[CLI_MAX_STAGES];
    size_t nmv[CLI_MAX_STAGES];
    int rc = 0;
    struct tio_hw h = *hw;
    if (sp->capacity_bytes) { /* plan against the capacity that is simulated */
        h.gpu_reserve_bytes = 0;
        h.gpu_memory_bytes = sp->capacity_bytes;
    }
    for (size_t i = 0; i < n; i++) {
        const struct tio_plan *pl = plans ? plans[i] : NULL;
        if (!pl) {
            struct tio_plan_params pp = tio_plan_params_default();
            pp.policy = policy;
            if (min_tensor_bytes) {
                pp.min_tensor_bytes = min_tensor_bytes;
            }
            rc = tio_plan_make(trs[i], &h, &pp, &made[i]);
            if (rc < 0) {
                goto out;
            }
            pl = made[i];
        }
        struct tio_plan_summary ps;
        tio_plan_get_summary(pl, &ps);
        if (plan_feasible) {
            *plan_feasible &= ps.feasible != 0;
        }
        if (plans && !sp->capacity_bytes) { /* simulate the capacity each plan was made for */
            cap[i] = ps.capacity_bytes;
        }
        mv[i] = tio_plan_moves(pl, &nmv[i]);
    }
    p.policy = NULL;
    p.label = policy;
    rc = tio_sim_run_pipeline(trs, mv, nmv, n, hw, &p, cap, out);
out:
    for (size_t i = 0; i < n; i++) {
        tio_plan_free(made[i]);
    }
    return rc;
}
