/* Helpers shared by simulate, sweep and compare: plan-or-baseline dispatch. */
#ifndef TIO_CMD_SIM_COMMON_H
#define TIO_CMD_SIM_COMMON_H

#include <teraio/plan.h>
#include <teraio/sim.h>

/* What to simulate: on which hardware, which policy (a simulator baseline, simulated directly, or
 * any other policy, planned first with tio_plan_make on the same hw) and with which simulator
 * parameters. */
struct cli_sim_job {
    const struct tio_hw *hw;
    const char *policy;
    uint64_t min_tensor_bytes; /* tensors under it never move; 0 = the planner's default */
    const struct tio_sim_params *sp;
    double slack; /* the plans' memory_slack, when slack_set */
    int slack_set;
};

/* Simulate job->policy on one trace. *plan_feasible (may be NULL): the plan's own verdict (1 for
 * a simulator baseline, which has no plan). Returns 0 or a library status. */
int cli_sim_policy(const struct tio_trace *tr,
                   const struct cli_sim_job *job,
                   struct tio_sim **out,
                   int *plan_feasible);

/* At most this many pipeline stages on the command line. */
#define CLI_MAX_STAGES 64

/* The stages of a pipeline (trs in stage order) simulated together (tio_sim_run_pipeline): with
 * plans (one per stage, all of the same execution), their moves or the baseline their
 * execution names; else job->policy, a built-in baseline or planned per stage now. out gets n
 * results; *plan_feasible (may be NULL): every stage's plan is feasible. */
int cli_sim_pipeline(const struct tio_trace *const *trs,
                     size_t n,
                     const struct tio_plan *const *plans,
                     const struct cli_sim_job *job,
                     struct tio_sim **out,
                     int *plan_feasible);

#endif
