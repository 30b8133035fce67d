/* Placeholder while the planner lands (next commit). */
#include "common/common_impl.h"
#include "plan/planner_impl.h"

int tio_planner_teraio(const struct tio_pmodel *m,
                       const struct tio_plan_params *params,
                       int variant,
                       struct tio_plan *plan) {
    (void)m;
    (void)params;
    (void)variant;
    (void)plan;
    return tio_set_error(TIO_EUNAVAIL, "plan: the teraio planners land in the next commit");
}

int tio_plan_verify(const struct tio_plan *plan,
                    const struct tio_trace *trace,
                    const struct tio_hw *hw,
                    const struct tio_plan_params *params,
                    uint64_t *peak_out) {
    (void)plan;
    (void)trace;
    (void)hw;
    (void)params;
    (void)peak_out;
    return TIO_EUNAVAIL;
}
