/* tio_sim_run_plan: a plan simulated as its execution says (teraio/sim.h). */
#include <teraio/plan.h>
#include <teraio/sim.h>

#include "common/common_impl.h"
#include "sim/sim_impl.h"

int tio_sim_run_plan(const struct tio_trace *trace,
                     const struct tio_hw *hw,
                     const struct tio_plan *plan,
                     const struct tio_sim_params *params,
                     struct tio_sim **out) {
    if (!plan) {
        return tio_set_error(TIO_EINVAL, "sim: NULL plan");
    }
    struct tio_sim_params p;
    int rc = sim_params_in(params, &p);
    if (rc < 0) {
        return rc;
    }
    int32_t exec = tio_plan_execution(plan);
    if (exec != TIO_PLAN_EXEC_MOVES) { /* a baseline the simulator models: no moves */
        p.policy = tio_plan_exec_name(exec);
        p.label = NULL;
        return tio_sim_run(trace, hw, NULL, 0, &p, out);
    }
    size_t n = 0;
    const struct tio_move *moves = tio_plan_moves(plan, &n);
    p.policy = NULL;
    p.label = tio_plan_policy(plan);
    return tio_sim_run(trace, hw, moves, n, &p, out);
}
