/* The executor's setup (per-tensor liveness and the plan's moves by trigger) and teardown. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <teraio/alloc_internal.h>
#include <teraio/runtime.h>

#include "../analysis/liveness.h"
#include "../common/common_impl.h"
#include "executor_impl.h"

/* The first versioned struct tio_runtime_params ends with `stream_ordered` (fixed: fields only
 * grow). */
#define RUNTIME_PARAMS_MIN TIO_SIZE_THROUGH(struct tio_runtime_params, stream_ordered)

/* The defaults tio_runtime_params_defaults hands out (the header's tio_runtime_params_default goes
 * through it). */
static struct tio_runtime_params builtin_defaults(void) {
    struct tio_runtime_params p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.mem = TIO_MEM_HOST;
    return p;
}

int tio_runtime_params_defaults(struct tio_runtime_params *out, size_t size) {
    struct tio_runtime_params d = builtin_defaults();
    return tio_struct_out("tio_runtime_params", out, size, &d, sizeof d, RUNTIME_PARAMS_MIN);
}

int tio_runtime_new(const struct tio_runtime_params *caller, struct tio_runtime **out) {
    if (!caller || !out) {
        return tio_set_error(TIO_EINVAL, "runtime: params and out must not be NULL");
    }
    struct tio_runtime_params copy = tio_runtime_params_default();
    int rc = tio_struct_in("runtime: params", &copy, sizeof copy, RUNTIME_PARAMS_MIN, caller);
    if (rc < 0) {
        return rc;
    }
    const struct tio_runtime_params *p = &copy;
    if (!p->trace || !p->plan || !p->engine) {
        return tio_set_error(TIO_EINVAL, "runtime: params.%s must not be NULL",
                             !p->trace  ? "trace"
                             : !p->plan ? "plan"
                                        : "engine");
    }
    if (p->mem != TIO_MEM_HOST && p->mem != TIO_MEM_DEVICE) {
        return tio_set_error(TIO_EINVAL, "runtime: params.mem: unknown memory kind %d", p->mem);
    }
    if (p->stream_ordered && p->mem != TIO_MEM_DEVICE) {
        return tio_set_error(TIO_EINVAL,
                             "runtime: params.stream_ordered needs params.mem TIO_MEM_DEVICE");
    }
    if (p->stream_ordered && !tio_cudart()) {
        return tio_set_error(TIO_EUNAVAIL, "runtime: params.stream_ordered needs cudart: %s",
                             tio_cudart_reason());
    }
    if (p->demand_tier != 0 && p->demand_tier != TIO_TIER_HOST && p->demand_tier != TIO_TIER_SSD) {
        return tio_set_error(TIO_EINVAL,
                             "runtime: params.demand_tier: %d is not 0, TIO_TIER_HOST or "
                             "TIO_TIER_SSD",
                             p->demand_tier);
    }
    rc = tio_plan_check_trace(p->plan, p->trace);
    if (rc < 0) {
        return rc;
    }
    struct tio_runtime *rt = tio_calloc(1, sizeof *rt);
    if (!rt) {
        return TIO_ENOMEM;
    }
    rt->trace = p->trace;
    rt->plan = p->plan;
    rt->engine = p->engine;
    rt->budget = p->budget_bytes;
    rt->id_base = p->engine_id_base;
    rt->mem = p->mem;
    tio_trace_get_view(p->trace, &rt->v);
    size_t nk = rt->v.n_kernels, nt = rt->v.n_tensors;
    rt->moves = tio_plan_moves(p->plan, &rt->n_moves);
    rt->move_off = tio_calloc(nk + 1, sizeof *rt->move_off);
    rt->first_use = tio_malloc((nt ? nt : 1) * sizeof *rt->first_use);
    rt->last_use = tio_malloc((nt ? nt : 1) * sizeof *rt->last_use);
    rt->state = tio_calloc(nt ? nt : 1, 1);
    rt->tflags = tio_calloc(nt ? nt : 1, sizeof *rt->tflags);
    rt->ptr = tio_calloc(nt ? nt : 1, sizeof *rt->ptr);
    rt->last_real = tio_malloc((nt ? nt : 1) * sizeof *rt->last_real);
    rt->is_free = tio_calloc(nk ? nk : 1, 1);
    rt->next_of_use = tio_malloc((rt->v.n_uses ? rt->v.n_uses : 1) * sizeof *rt->next_of_use);
    rt->first_real = tio_malloc((nt ? nt : 1) * sizeof *rt->first_real);
    rt->cursor = tio_malloc((nt ? nt : 1) * sizeof *rt->cursor);
    rt->victims = tio_malloc((nt ? nt : 1) * sizeof *rt->victims);
    rt->eid = tio_malloc((nt ? nt : 1) * sizeof *rt->eid);
    rt->demand_tier = p->demand_tier;
    if (p->stream_ordered) {
        rt->cu = tio_cudart();
        rt->stream = p->stream;
        rt->fence = tio_calloc(nt ? nt : 1, sizeof *rt->fence);
        rt->landed = tio_calloc(nt ? nt : 1, sizeof *rt->landed);
        rt->wseq = tio_calloc(nt ? nt : 1, sizeof *rt->wseq);
        rt->wkeys = tio_malloc((nt ? nt : 1) * sizeof *rt->wkeys);
    }
    {
        struct tio_engine_stats es;
        rt->has_ssd = tio_engine_stats(p->engine, &es) == 0 && es.ssd_dirs > 0;
    }
    if (!rt->move_off || !rt->first_use || !rt->last_use || !rt->state || !rt->tflags || !rt->ptr ||
        !rt->last_real || !rt->is_free || !rt->next_of_use || !rt->first_real || !rt->cursor ||
        !rt->victims || !rt->eid ||
        (p->stream_ordered && (!rt->fence || !rt->landed || !rt->wseq || !rt->wkeys)) ||
        tio_rt_sets_alloc(rt) < 0) {
        tio_runtime_free(rt);
        return TIO_ENOMEM;
    }
    for (size_t i = 0; i < rt->n_moves; i++) {
        const struct tio_move *m = &rt->moves[i];
        if (m->tensor >= nt || m->trigger >= nk) {
            rc = tio_set_error(TIO_EPLAN,
                               "runtime: plan move %zu: tensor %u / trigger %llu out of range "
                               "(trace has %zu tensors, %zu kernels)",
                               i, m->tensor, (unsigned long long)m->trigger, nt, nk);
            tio_runtime_free(rt);
            return rc;
        }
        if (i > 0 && m->trigger < rt->moves[i - 1].trigger) {
            rc = tio_set_error(TIO_EPLAN, "runtime: plan move %zu: not sorted by trigger", i);
            tio_runtime_free(rt);
            return rc;
        }
        rt->move_off[m->trigger + 1]++;
    }
    for (size_t k = 0; k < nk; k++) {
        rt->move_off[k + 1] += rt->move_off[k];
    }
    for (size_t t = 0; t < nt; t++) {
        if (rt->v.tensor_flags[t] & TIO_TENSOR_GLOBAL) {
            rt->tflags[t] |= TF_GLOBAL;
        }
        if (rt->v.tensor_flags[t] & TIO_TENSOR_PINNED) {
            rt->tflags[t] |= TF_PINNED;
        }
    }
    for (size_t k = 0; k < nk; k++) {
        const char *kn = tio_trace_kernel_name(p->trace, (uint32_t)k);
        rt->is_free[k] = kn && strcmp(kn, TIO_RUNTIME_FREE_KERNEL) == 0;
    }
    /* Liveness (analysis/liveness.h): every use counts for a tensor's life; free markers are
     * not uses that need the tensor, so they do not count for its real uses. */
    const struct tio_liveness_csr all = tio_liveness_csr_of(&rt->v, NULL);
    const struct tio_liveness_csr real = tio_liveness_csr_of(&rt->v, rt->is_free);
    tio_liveness_first_last(&all, rt->first_use, rt->last_use);
    tio_liveness_first_last(&real, rt->first_real, rt->last_real);
    tio_liveness_next_use(&real, rt->next_of_use, rt->cursor);
    for (size_t k = 0; k < nk; k++) {
        if (rt->v.kernel_flags[k] & TIO_KERNEL_COMM) {
            for (uint64_t u = rt->v.kernel_use_offset[k]; u < rt->v.kernel_use_offset[k + 1]; u++) {
                rt->tflags[rt->v.use_tensor[u]] |= TF_PINNED;
            }
        }
    }
    for (uint32_t t = 0; t < nt; t++) {
        rt->eid[t] = rt->id_base + t;
        if (rt->tflags[t] & TF_GLOBAL) {
            rt->state[t] = ST_RESIDENT;
            tio_rt_add_resident(rt, t);
            tio_rt_touch(rt, t);
        }
    }
    *out = rt;
    return 0;
}

static void drain_quiet(struct tio_runtime *rt) {
    while (rt->inflight > 0) {
        if (tio_rt_reap(rt, 1) < 0) {
            break;
        }
    }
}

void tio_runtime_free(struct tio_runtime *rt) {
    if (!rt) {
        return;
    }
    rt->wait_hook = NULL; /* its waits are the caller's to bracket (teraio/runtime.h) */
    if (rt->engine && rt->tflags && rt->eid) {
        drain_quiet(rt);
        if (rt->cu && rt->set_item && rt->scratch && !rt->failed) {
            /* the caller frees what is still bound in stream order: after the reads landed and
             * the writes' copies ran */
            (void)tio_rt_settle_all(rt, 0);
        }
        for (uint32_t t = 0; t < rt->v.n_tensors; t++) {
            if (rt->tflags[t] & TF_HAS_COPY) {
                tio_rt_drop_copy(rt, t);
            }
        }
    }
    tio_free(rt->move_off);
    tio_free(rt->first_use);
    tio_free(rt->last_use);
    tio_free(rt->state);
    tio_free(rt->tflags);
    tio_free(rt->ptr);
    tio_free(rt->last_real);
    tio_free(rt->is_free);
    tio_free(rt->next_of_use);
    tio_free(rt->first_real);
    tio_free(rt->cursor);
    tio_free(rt->victims);
    tio_free(rt->eid);
    for (size_t t = 0; rt->cu && t < rt->v.n_tensors; t++) {
        if (rt->fence && rt->fence[t]) {
            (void)rt->cu->event_destroy(rt->fence[t]);
        }
        if (rt->landed && rt->landed[t]) {
            (void)rt->cu->event_destroy(rt->landed[t]);
        }
    }
    tio_free(rt->fence);
    tio_free(rt->landed);
    tio_free(rt->wseq);
    tio_free(rt->wkeys);
    tio_rt_sets_free(rt);
    tio_free(rt);
}

size_t tio_runtime_max_actions(const struct tio_runtime *rt) {
    return rt->v.n_tensors;
}

int tio_runtime_bind(struct tio_runtime *rt, uint32_t tensor, void *ptr) {
    if (tensor >= rt->v.n_tensors || !ptr) {
        return tio_set_error(TIO_EINVAL, "runtime: bind: tensor %u (of %zu) ptr %p", tensor,
                             rt->v.n_tensors, ptr);
    }
    if (rt->state[tensor] == ST_WRITING || rt->state[tensor] == ST_READING) {
        if (ptr == rt->ptr[tensor]) { /* bound again where it is (e.g. an offload that went on
                                         past the last iteration, its memory never released) */
            return 0;
        }
        if (rt->in_iter) {
            return tio_set_error(TIO_ESTATE, "runtime: bind: tensor %u has I/O in flight", tensor);
        }
        /* between iterations: an offload that went on past the last one, and the caller's
         * tensor now lives elsewhere (its storage replaced). The boundary is drained for it, as
         * end_iteration once drained every request: the copy completes and the compute stream
         * waits for its copies before the new memory is used. */
        double waited = 0;
        int rc = tio_rt_wait_tensor(rt, tensor, &waited, WAIT_OTHER);
        if (rc == 0) {
            rc = tio_rt_settle(rt, tensor);
        }
        if (rc < 0) {
            return rc;
        }
    }
    rt->ptr[tensor] = ptr;
    tio_rt_touch(rt, tensor);
    return 0;
}
