/* Helpers shared by simulate, sweep and compare. */
#include "cmd_sim_common.h"

#include <string.h>

#include <teraio/sim.h>
#include <teraio/teraio.h>

/* Plan `policy` for tr on job->hw, against the capacity that is simulated (sp->capacity_bytes
 * when set). */
static int make_plan(const struct tio_trace *tr,
                     const struct cli_sim_job *job,
                     const char *policy,
                     struct tio_plan **out) {
    struct tio_plan_params pp = tio_plan_params_default();
    pp.policy = policy;
    if (job->min_tensor_bytes) {
        pp.min_tensor_bytes = job->min_tensor_bytes;
    }
    if (job->slack_set) {
        pp.memory_slack = job->slack;
    }
    struct tio_hw h = *job->hw;
    if (job->sp->capacity_bytes) {
        h.gpu_reserve_bytes = 0;
        h.gpu_memory_bytes = job->sp->capacity_bytes;
    }
    return tio_plan_make(tr, &h, &pp, out);
}

int cli_sim_policy(const struct tio_trace *tr,
                   const struct cli_sim_job *job,
                   struct tio_sim **out,
                   int *plan_feasible) {
    if (plan_feasible) {
        *plan_feasible = 1;
    }
    if (tio_sim_policy_is_builtin(job->policy)) {
        struct tio_sim_params p = *job->sp;
        p.policy = job->policy;
        return tio_sim_run(tr, job->hw, NULL, 0, &p, out);
    }
    struct tio_plan *plan = NULL;
    int rc = make_plan(tr, job, job->policy, &plan);
    if (rc < 0) {
        return rc;
    }
    if (plan_feasible) {
        struct tio_plan_summary ps;
        tio_plan_get_summary(plan, &ps);
        *plan_feasible = ps.feasible != 0;
    }
    rc = tio_sim_run_plan(tr, job->hw, plan, job->sp, out);
    tio_plan_free(plan);
    return rc;
}

int cli_sim_pipeline(const struct tio_trace *const *trs,
                     size_t n,
                     const struct tio_plan *const *plans,
                     const struct cli_sim_job *job,
                     struct tio_sim **out,
                     int *plan_feasible) {
    const char *policy = job->policy;
    struct tio_sim_params p = *job->sp;
    if (plan_feasible) {
        *plan_feasible = 1;
    }
    if (n == 0 || n > CLI_MAX_STAGES) {
        return tio_set_error(TIO_EINVAL, "pipeline of %zu stages: 2 to %d", n, CLI_MAX_STAGES);
    }
    if (plans) { /* plans whose execution is a baseline: simulate the baseline */
        int32_t exec = tio_plan_execution(plans[0]);
        for (size_t i = 1; i < n; i++) {
            if (tio_plan_execution(plans[i]) != exec) {
                return tio_set_error(TIO_EINVAL,
                                     "the plans of stage 0 and stage %zu have different "
                                     "executions (%s, %s): give every stage a plan of the same "
                                     "policy",
                                     i, tio_plan_exec_name(exec),
                                     tio_plan_exec_name(tio_plan_execution(plans[i])));
            }
        }
        policy = exec == TIO_PLAN_EXEC_MOVES ? tio_plan_policy(plans[0]) : tio_plan_exec_name(exec);
        if (exec != TIO_PLAN_EXEC_MOVES) {
            plans = NULL;
        }
    }
    if (!plans && tio_sim_policy_is_builtin(policy)) {
        p.policy = policy;
        return tio_sim_run_pipeline(trs, NULL, NULL, n, job->hw, &p, NULL, out);
    }
    uint64_t cap[CLI_MAX_STAGES] = { 0 };
    struct tio_plan *made[CLI_MAX_STAGES] = { NULL };
    const struct tio_move *mv[CLI_MAX_STAGES];
    size_t nmv[CLI_MAX_STAGES];
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        const struct tio_plan *pl = plans ? plans[i] : NULL;
        if (!pl) {
            rc = make_plan(trs[i], job, policy, &made[i]);
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
        if (plans && !p.capacity_bytes) { /* simulate the capacity each plan was made for */
            cap[i] = ps.capacity_bytes;
        }
        mv[i] = tio_plan_moves(pl, &nmv[i]);
    }
    p.policy = NULL;
    p.label = policy;
    rc = tio_sim_run_pipeline(trs, mv, nmv, n, job->hw, &p, cap, out);
out:
    for (size_t i = 0; i < n; i++) {
        tio_plan_free(made[i]);
    }
    return rc;
}
