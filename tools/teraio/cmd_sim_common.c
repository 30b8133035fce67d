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
