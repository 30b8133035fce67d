/* The plan object, the policy registry and tio_plan_make (teraio/plan.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <teraio/plan.h>

#include "common/common_impl.h"
#include "common/radix_sort.h"
#include "plan/planner_impl.h"

/* A policy: planned here (exec TIO_PLAN_EXEC_MOVES, with a planner variant) or a baseline the
 * simulator models (its plan holds no moves, only the execution). */
struct policy {
    const char *name;
    int32_t exec; /* enum tio_plan_exec */
    int variant;
    const char *help;
};

static const struct policy policies[] = {
    { "teraio", TIO_PLAN_EXEC_MOVES, TIO_VAR_MIXED, "= teraio-mixed" },
    { "teraio-mixed", TIO_PLAN_EXEC_MOVES, TIO_VAR_MIXED,
      "improved Algorithm 1: SSD first, host memory within the cap" },
    { "teraio-ssd", TIO_PLAN_EXEC_MOVES, TIO_VAR_SSD, "improved Algorithm 1, SSD only" },
    { "teraio-paper", TIO_PLAN_EXEC_MOVES, TIO_VAR_PAPER, "Algorithm 1 exactly as printed" },
    { "teraio-paper-ssd", TIO_PLAN_EXEC_MOVES, TIO_VAR_PAPER_SSD,
      "Algorithm 1 as printed, SSD only" },
    { "g10", TIO_PLAN_EXEC_MOVES, TIO_VAR_G10, "G10: reducible area, no cost" },
    { "lru", TIO_PLAN_EXEC_LRU, 0, "on-demand swapping (simulator)" },
    { "none", TIO_PLAN_EXEC_NONE, 0, "no offloading (OOM if it does not fit)" },
    { "ideal", TIO_PLAN_EXEC_IDEAL, 0, "unlimited GPU memory" },
    { "zero-offload", TIO_PLAN_EXEC_ZERO_OFFLOAD, 0, "DeepSpeed ZeRO-Offload model (simulator)" },
    { "zero-infinity", TIO_PLAN_EXEC_ZERO_INFINITY, 0,
      "DeepSpeed ZeRO-Infinity model (simulator)" },
};

static const char *const exec_names[TIO_PLAN_EXEC_COUNT] = {
    [TIO_PLAN_EXEC_MOVES] = "moves",
    [TIO_PLAN_EXEC_NONE] = "none",
    [TIO_PLAN_EXEC_IDEAL] = "ideal",
    [TIO_PLAN_EXEC_LRU] = "lru",
    [TIO_PLAN_EXEC_ZERO_OFFLOAD] = "zero-offload",
    [TIO_PLAN_EXEC_ZERO_INFINITY] = "zero-infinity",
};
_Static_assert(TIO_ARRAY_LEN(exec_names) == TIO_PLAN_EXEC_COUNT, "one name per execution");

const char *tio_plan_exec_name(int32_t exec) {
    return tio_enum_name(exec_names, TIO_PLAN_EXEC_COUNT, exec, NULL);
}

int32_t tio_plan_exec_parse(const char *name) {
    return tio_enum_parse(exec_names, TIO_PLAN_EXEC_COUNT, name);
}

const char *tio_plan_policy_help(size_t i) {
    return i < TIO_ARRAY_LEN(policies) ? policies[i].help : NULL;
}

size_t tio_plan_policy_count(void) {
    return TIO_ARRAY_LEN(policies);
}

const char *tio_plan_policy_name(size_t i) {
    return i < TIO_ARRAY_LEN(policies) ? policies[i].name : NULL;
}

/* The defaults tio_plan_params_defaults hands out (the header's tio_plan_params_default goes
 * through it). */
static struct tio_plan_params builtin_defaults(void) {
    struct tio_plan_params p = {
        .policy = "teraio",
        .early_prefetch = 1,
        .bandwidth_scale = 1.0,
        .min_tensor_bytes = UINT64_C(1) << 20,
        .clean_copies = 1,
        .overcommit = 1,
        .memory_slack = TIO_PLAN_DEFAULT_SLACK,
    };
    p.struct_size = sizeof p;
    return p;
}

/* The first versioned struct tio_plan_params ends with `memory_slack` (fixed: fields only grow). */
#define PLAN_PARAMS_MIN TIO_SIZE_THROUGH(struct tio_plan_params, memory_slack)

int tio_plan_params_defaults(struct tio_plan_params *out, size_t size) {
    struct tio_plan_params d = builtin_defaults();
    return tio_struct_out("tio_plan_params", out, size, &d, sizeof d, PLAN_PARAMS_MIN);
}

int tio_plan_params_in(const char *what,
                       const struct tio_plan_params *params,
                       struct tio_plan_params *out) {
    *out = tio_plan_params_default();
    return params ? tio_struct_in(what, out, sizeof *out, PLAN_PARAMS_MIN, params) : 0;
}

const char *tio_tier_name(int32_t tier) {
    static const char *const names[TIO_TIER_COUNT] = {
        [TIO_TIER_GPU] = "gpu",
        [TIO_TIER_HOST] = "host",
        [TIO_TIER_SSD] = "ssd",
    };
    _Static_assert(TIO_ARRAY_LEN(names) == TIO_TIER_COUNT, "one name per tier");
    return tio_enum_name(names, TIO_TIER_COUNT, tier, "?");
}

int tio_plan_rewrap(int rc, const char *prefix, const char *suffix) {
    char buf[768];
    (void)snprintf(buf, sizeof buf, "%s", tio_last_error());
    return tio_set_error(rc, "%s%s%s", prefix ? prefix : "", buf, suffix ? suffix : "");
}

/* ---- the object ---------------------------------------------------------------------------- */

static int check_policy_name(const char *policy) {
    if (!policy || !*policy) {
        return tio_set_error(TIO_EINVAL, "plan: policy: empty name");
    }
    size_t len = strlen(policy);
    if (len >= TIO_PLAN_POLICY_MAX) {
        return tio_set_error(TIO_EINVAL, "plan: policy: name longer than %d bytes",
                             TIO_PLAN_POLICY_MAX - 1);
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)policy[i];
        if (c < 0x21 || c > 0x7e) {
            return tio_set_error(TIO_EINVAL, "plan: policy: byte %zu is not printable ASCII", i);
        }
    }
    return 0;
}

int tio_plan_new(uint64_t trace_hash,
                 uint64_t n_kernels,
                 const char *policy,
                 struct tio_plan **out) {
    int rc = check_policy_name(policy);
    if (rc < 0) {
        return rc;
    }
    if (n_kernels == 0 || n_kernels > TIO_TRACE_MAX_KERNELS) {
        return tio_set_error(TIO_EINVAL, "plan: n_kernels: must be in [1, %u] (got %llu)",
                             (unsigned)TIO_TRACE_MAX_KERNELS, (unsigned long long)n_kernels);
    }
    struct tio_plan *p = tio_calloc(1, sizeof *p);
    if (!p) {
        return TIO_ENOMEM;
    }
    (void)snprintf(p->policy, sizeof p->policy, "%s", policy);
    p->trace_hash = trace_hash;
    p->n_kernels = n_kernels;
    p->summary.feasible = 1;
    *out = p;
    return 0;
}

void tio_plan_free(struct tio_plan *plan) {
    if (!plan) {
        return;
    }
    tio_free(plan->moves);
    tio_free(plan);
}

int tio_plan_check_move(const struct tio_move *m, uint64_t n, size_t i) {
    if (m->trigger >= n) {
        return tio_set_error(TIO_EPLAN,
                             "plan: move %zu (tensor %u): trigger %llu >= n_kernels %llu", i,
                             m->tensor, (unsigned long long)m->trigger, (unsigned long long)n);
    }
    if (m->deadline < m->trigger || m->deadline > m->trigger + n) {
        return tio_set_error(TIO_EPLAN,
                             "plan: move %zu (tensor %u): deadline %llu outside [trigger %llu, "
                             "trigger + n_kernels %llu]",
                             i, m->tensor, (unsigned long long)m->deadline,
                             (unsigned long long)m->trigger,
                             (unsigned long long)m->trigger + (unsigned long long)n);
    }
    if (m->from < 0 || m->from >= TIO_TIER_COUNT || m->to < 0 || m->to >= TIO_TIER_COUNT) {
        return tio_set_error(TIO_EPLAN,
                             "plan: move %zu (tensor %u): tier out of range (from %d, to %d)", i,
                             m->tensor, m->from, m->to);
    }
    int offload = m->from == TIO_TIER_GPU && m->to != TIO_TIER_GPU;
    int prefetch = m->from != TIO_TIER_GPU && m->to == TIO_TIER_GPU;
    if (!offload && !prefetch) {
        return tio_set_error(TIO_EPLAN,
                             "plan: move %zu (tensor %u): %s -> %s is neither an offload (gpu -> "
                             "host/ssd) nor a prefetch (host/ssd -> gpu)",
                             i, m->tensor, tio_tier_name(m->from), tio_tier_name(m->to));
    }
    if (m->bytes == 0 || m->bytes > TIO_TRACE_MAX_BYTES) {
        return tio_set_error(TIO_EPLAN, "plan: move %zu (tensor %u): bytes %llu out of [1, 2^50]",
                             i, m->tensor, (unsigned long long)m->bytes);
    }
    if (m->flags & ~(uint32_t)TIO_MOVE_FLAGS_ALL) {
        return tio_set_error(TIO_EPLAN, "plan: move %zu (tensor %u): unknown flags 0x%x", i,
                             m->tensor, m->flags);
    }
    if (((m->flags & TIO_MOVE_WRAPS) != 0) != (m->deadline >= n)) {
        return tio_set_error(TIO_EPLAN,
                             "plan: move %zu (tensor %u): WRAPS flag %s but deadline %llu %s "
                             "n_kernels %llu",
                             i, m->tensor, (m->flags & TIO_MOVE_WRAPS) ? "set" : "clear",
                             (unsigned long long)m->deadline, m->deadline >= n ? ">=" : "<",
                             (unsigned long long)n);
    }
    if ((m->flags & TIO_MOVE_CLEAN) && !offload) {
        return tio_set_error(TIO_EPLAN, "plan: move %zu (tensor %u): CLEAN on a prefetch", i,
                             m->tensor);
    }
    return 0;
}

int tio_plan_add_move(struct tio_plan *plan, const struct tio_move *move) {
    if (!plan || !move) {
        return tio_set_error(TIO_EINVAL, "plan: NULL argument");
    }
    if (plan->finished) {
        return tio_set_error(TIO_ESTATE, "plan: add_move after finish");
    }
    struct tio_move m = *move;
    /* WRAPS follows from the deadline; set it here so hand-built plans need not. */
    if (m.deadline >= plan->n_kernels) {
        m.flags |= TIO_MOVE_WRAPS;
    } else {
        m.flags &= ~(uint32_t)TIO_MOVE_WRAPS;
    }
    int rc = tio_plan_check_move(&m, plan->n_kernels, plan->n_moves);
    if (rc < 0) {
        return rc;
    }
    if (plan->n_moves >= TIO_PLAN_MAX_MOVES) {
        return tio_set_error(TIO_ENOMEM, "plan: more than 2^32 moves");
    }
    if (tio_grow((void **)&plan->moves, &plan->cap_moves, plan->n_moves + 1, sizeof m) < 0) {
        return TIO_ENOMEM;
    }
    plan->moves[plan->n_moves++] = m;
    return 0;
}

int tio_move_cmp_issue(const struct tio_move *x, const struct tio_move *y) {
    if (x->trigger != y->trigger) {
        return x->trigger < y->trigger ? -1 : 1;
    }
    int ux = (x->flags & TIO_MOVE_URGENT) != 0, uy = (y->flags & TIO_MOVE_URGENT) != 0;
    if (ux != uy) {
        return ux ? -1 : 1;
    }
    return 0;
}

static int move_cmp(const void *a, const void *b) {
    const struct tio_move *x = a, *y = b;
    int c = tio_move_cmp_issue(x, y);
    if (c != 0) {
        return c;
    }
    if (x->tensor != y->tensor) {
        return x->tensor < y->tensor ? -1 : 1;
    }
    if (x->from != y->from) {
        return x->from < y->from ? -1 : 1;
    }
    if (x->to != y->to) {
        return x->to < y->to ? -1 : 1;
    }
    if (x->deadline != y->deadline) {
        return x->deadline < y->deadline ? -1 : 1;
    }
    if (x->bytes != y->bytes) {
        return x->bytes < y->bytes ? -1 : 1;
    }
    return x->flags < y->flags ? -1 : x->flags > y->flags;
}

/* Moves with one trigger, few in a planned plan: insertion sort, qsort past a handful. */
static void sort_bucket(struct tio_move *mv, size_t k) {
    if (k > 16) {
        qsort(mv, k, sizeof *mv, move_cmp);
        return;
    }
    for (size_t i = 1; i < k; i++) {
        struct tio_move x = mv[i];
        size_t j = i;
        for (; j > 0 && move_cmp(&mv[j - 1], &x) > 0; j--) {
            mv[j] = mv[j - 1];
        }
        mv[j] = x;
    }
}

static inline uint64_t move_trigger(const struct tio_move *m) {
    return m->trigger;
}

/* Sorts the moves by trigger (all under n) between the moves and a buffer: a 2M-kernel plan's
 * moves take 128 MB, which the radix passes stream instead of visiting at random. */
TIO_RADIX_SORT_DEFINE(radix_by_trigger, struct tio_move, move_trigger)

void tio_plan_sort(struct tio_plan *plan) {
    size_t nm = plan->n_moves, n = (size_t)plan->n_kernels;
    if (nm <= 1) {
        return;
    }
    int in_range = 1;
    for (size_t i = 0; i < nm && in_range; i++) {
        in_range = plan->moves[i].trigger < n;
    }
    struct tio_move *tmp = in_range ? tio_malloc(nm * sizeof *tmp) : NULL;
    struct tio_move *mv = tmp ? radix_by_trigger(plan->moves, tmp, nm, n - 1) : NULL;
    if (!mv) { /* a trigger out of range (unchecked moves), or no memory: the comparison sort */
        tio_free(tmp);
        qsort(plan->moves, nm, sizeof *plan->moves, move_cmp);
        return;
    }
    if (mv != plan->moves) { /* an odd number of passes: the moves now live in tmp */
        tio_free(plan->moves);
        plan->moves = mv;
        plan->cap_moves = nm;
    } else {
        tio_free(tmp);
    }
    size_t i = 0;
    while (i < nm) { /* then each trigger's moves, a few */
        size_t j = i + 1;
        while (j < nm && mv[j].trigger == mv[i].trigger) {
            j++;
        }
        sort_bucket(mv + i, j - i);
        i = j;
    }
}

int tio_plan_finish(struct tio_plan *plan) {
    if (!plan) {
        return tio_set_error(TIO_EINVAL, "plan: NULL argument");
    }
    if (plan->finished) {
        return 0;
    }
    int rc = tio_plan_check_execution(plan);
    if (rc < 0) {
        return rc;
    }
    tio_plan_sort(plan);
    size_t off = 0;
    for (size_t i = 0; i < plan->n_moves; i++) {
        off += plan->moves[i].from == TIO_TIER_GPU;
    }
    plan->summary.n_moves = plan->n_moves;
    plan->summary.n_offloads = off;
    plan->finished = 1;
    return 0;
}

void tio_plan_set_summary(struct tio_plan *plan, const struct tio_plan_summary *summary) {
    if (!plan || !summary) {
        return;
    }
    plan->summary = *summary;
    /* The counts always describe the moves actually held. */
    size_t off = 0;
    for (size_t i = 0; i < plan->n_moves; i++) {
        off += plan->moves[i].from == TIO_TIER_GPU;
    }
    plan->summary.n_moves = plan->n_moves;
    plan->summary.n_offloads = off;
}

const struct tio_move *tio_plan_moves(const struct tio_plan *plan, size_t *n) {
    if (n) {
        *n = plan ? plan->n_moves : 0;
    }
    return plan ? plan->moves : NULL;
}

void tio_plan_get_summary(const struct tio_plan *plan, struct tio_plan_summary *out) {
    if (plan && out) {
        *out = plan->summary;
    }
}

const char *tio_plan_policy(const struct tio_plan *plan) {
    return plan ? plan->policy : NULL;
}

int tio_plan_set_execution(struct tio_plan *plan, int32_t exec) {
    if (!plan) {
        return tio_set_error(TIO_EINVAL, "plan: NULL argument");
    }
    if (!tio_plan_exec_name(exec)) {
        return tio_set_error(TIO_EINVAL, "plan: execution %d out of range [0, %d)", (int)exec,
                             TIO_PLAN_EXEC_COUNT);
    }
    if (plan->finished) {
        return tio_set_error(TIO_ESTATE, "plan: execution set on a finished plan");
    }
    plan->exec = exec;
    return 0;
}

int32_t tio_plan_execution(const struct tio_plan *plan) {
    return plan ? plan->exec : TIO_PLAN_EXEC_MOVES;
}

int tio_plan_check_execution(const struct tio_plan *plan) {
    if (plan->exec != TIO_PLAN_EXEC_MOVES && plan->n_moves > 0) {
        return tio_set_error(TIO_EPLAN,
                             "plan: execution \"%s\" is a baseline the simulator models and "
                             "carries no moves, but the plan holds %zu",
                             tio_plan_exec_name(plan->exec), plan->n_moves);
    }
    return 0;
}

uint64_t tio_plan_trace_hash(const struct tio_plan *plan) {
    return plan ? plan->trace_hash : 0;
}

uint64_t tio_plan_kernel_count(const struct tio_plan *plan) {
    return plan ? plan->n_kernels : 0;
}

int tio_plan_check_trace(const struct tio_plan *plan, const struct tio_trace *trace) {
    if (!plan || !trace) {
        return tio_set_error(TIO_EINVAL, "plan: NULL argument");
    }
    uint64_t h;
    int rc = tio_trace_hash(trace, &h);
    if (rc < 0) {
        return rc;
    }
    if (h != plan->trace_hash) {
        return tio_set_error(TIO_EPLAN,
                             "plan was made for trace %016llx, this trace is %016llx (re-plan "
                             "with `teraio plan`)",
                             (unsigned long long)plan->trace_hash, (unsigned long long)h);
    }
    if (tio_trace_kernel_count(trace) != plan->n_kernels) {
        return tio_set_error(TIO_EPLAN, "plan has %llu kernels, the trace %zu",
                             (unsigned long long)plan->n_kernels, tio_trace_kernel_count(trace));
    }
    struct tio_trace_view tv;
    tio_trace_get_view(trace, &tv);
    for (size_t i = 0; i < plan->n_moves; i++) {
        const struct tio_move *m = &plan->moves[i];
        if (m->tensor >= tv.n_tensors) {
            return tio_set_error(TIO_EPLAN,
                                 "plan: move %zu: tensor %u out of range (n_tensors %zu)", i,
                                 m->tensor, tv.n_tensors);
        }
        /* the trace hash covers the sizes, but a plan file can be edited */
        if (m->bytes != tv.tensor_bytes[m->tensor]) {
            return tio_set_error(TIO_EPLAN,
                                 "plan: move %zu: %llu bytes, but tensor %u has %llu in the trace",
                                 i, (unsigned long long)m->bytes, m->tensor,
                                 (unsigned long long)tv.tensor_bytes[m->tensor]);
        }
    }
    return 0;
}

/* ---- tio_plan_make ------------------------------------------------------------------------- */

static const struct policy *find_policy(const char *name) {
    for (size_t i = 0; name && i < TIO_ARRAY_LEN(policies); i++) {
        if (strcmp(policies[i].name, name) == 0) {
            return &policies[i];
        }
    }
    return NULL;
}

int tio_plan_make(const struct tio_trace *trace,
                  const struct tio_hw *hw,
                  const struct tio_plan_params *params,
                  struct tio_plan **out) {
    return tio_plan_make_curves(trace, hw, params, out, NULL, NULL);
}

int tio_plan_make_curves(const struct tio_trace *trace,
                         const struct tio_hw *hw,
                         const struct tio_plan_params *params,
                         struct tio_plan **out,
                         uint64_t *gpu,
                         uint64_t *host) {
    if (!trace || !hw || !out) {
        return tio_set_error(TIO_EINVAL, "plan: NULL argument");
    }
    *out = NULL;
    struct tio_plan_params pp;
    int rc = tio_plan_params_in("plan: params", params, &pp);
    if (rc < 0) {
        return rc;
    }
    if (!pp.policy) {
        pp.policy = "teraio";
    }
    const struct policy *pol = find_policy(pp.policy);
    if (!pol) {
        char list[512] = "";
        size_t len = 0;
        for (size_t i = 0; i < TIO_ARRAY_LEN(policies) && len < sizeof list; i++) {
            int n =
                snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", policies[i].name);
            if (n < 0) {
                break;
            }
            len += (size_t)n;
        }
        return tio_set_error(TIO_ENOTFOUND, "plan: unknown policy '%s' (known: %s)", pp.policy,
                             list);
    }
    if (!(pp.bandwidth_scale > 0) || pp.bandwidth_scale > 1e6) {
        return tio_set_error(TIO_EINVAL, "plan: bandwidth_scale: must be in (0, 1e6] (got %g)",
                             pp.bandwidth_scale);
    }
    if (!(pp.memory_slack >= 0 && pp.memory_slack <= 0.5)) {
        return tio_set_error(TIO_EINVAL, "plan: memory_slack: must be in [0, 0.5] (got %g)",
                             pp.memory_slack);
    }
    if ((rc = tio_hw_validate(hw)) < 0) {
        return rc;
    }
    if (!tio_trace_is_finished(trace)) {
        return tio_set_error(TIO_ESTATE, "plan: the trace is not finished");
    }
    size_t n = tio_trace_kernel_count(trace);
    if (n == 0) {
        return tio_set_error(TIO_EINVAL, "plan: the trace has no kernels");
    }
    uint64_t hash;
    if ((rc = tio_trace_hash(trace, &hash)) < 0) {
        return rc;
    }
    double t0 = tio_now_s();
    struct tio_pmodel m;
    memset(&m, 0, sizeof m);
    struct tio_plan *plan = NULL;
    if ((rc = tio_pmodel_build(trace, hw, &pp, &m)) < 0) {
        goto fail;
    }
    m.out_gpu = gpu;
    m.out_host = host;
    if ((rc = tio_plan_new(hash, n, pol->name, &plan)) < 0) {
        goto fail;
    }
    if ((rc = tio_plan_set_execution(plan, pol->exec)) < 0) {
        goto fail;
    }
    if (pol->exec == TIO_PLAN_EXEC_MOVES) {
        if ((rc = tio_pmodel_check_working_set(&m)) < 0) {
            goto fail;
        }
        tio_free(m.pinned_extra); /* only the check reads it: not held through the search */
        m.pinned_extra = NULL;
        if ((rc = tio_planner_teraio(&m, &pp, pol->variant, plan)) < 0) {
            goto fail;
        }
    } else {
        /* No moves: the simulator models the policy. The summary describes the unplanned
         * curve so that `teraio plan --policy none` still tells whether it fits. */
        struct tio_plan_summary s;
        memset(&s, 0, sizeof s);
        s.capacity_bytes = m.capacity;
        for (size_t k = 0; k < m.n; k++) {
            if (m.resident[k] > s.planned_peak_bytes) {
                s.planned_peak_bytes = m.resident[k];
            }
            if (m.resident[k] > m.capacity && m.resident[k] - m.capacity > s.shortfall_bytes) {
                s.shortfall_kernel = k;
                s.shortfall_bytes = m.resident[k] - m.capacity;
            }
        }
        s.feasible = pol->exec == TIO_PLAN_EXEC_IDEAL || s.shortfall_bytes == 0;
        if (pol->exec == TIO_PLAN_EXEC_IDEAL) {
            s.shortfall_bytes = 0;
            s.shortfall_kernel = 0;
        }
        tio_plan_set_summary(plan, &s);
    }
    if (!plan || (rc = tio_plan_finish(plan)) < 0) {
        rc = rc < 0 ? rc : TIO_ENOMEM;
        goto fail;
    }
    plan->summary.planning_seconds = tio_now_s() - t0;
    tio_pmodel_free(&m);
    *out = plan;
    return 0;
fail:
    tio_pmodel_free(&m);
    tio_plan_free(plan);
    return rc;
}
