/* The plan executor (teraio/runtime.h): a per-tensor state machine driven kernel by kernel. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <teraio/alloc_internal.h>
#include <teraio/runtime.h>

#include "../common/common_impl.h"
#include "executor_impl.h"

static int drain(struct tio_runtime *rt) {
    while (rt->inflight > 0) {
        int rc = tio_rt_reap(rt, rt->inflight);
        if (rc < 0) {
            return rc;
        }
    }
    return 0;
}

/* Globals whose last move of the iteration is an offload are stored when an iteration starts (the
 * plan's steady state). Before the first iteration they are all resident: write them now. */
static int
enter_steady_state(struct tio_runtime *rt, struct tio_runtime_action *out, size_t max, size_t *n) {
    size_t nt = rt->v.n_tensors;
    int32_t *last_to = tio_malloc((nt ? nt : 1) * sizeof *last_to);
    if (!last_to) {
        return TIO_ENOMEM;
    }
    for (size_t t = 0; t < nt; t++) {
        last_to[t] = -1;
    }
    for (size_t i = 0; i < rt->n_moves; i++) { /* sorted by trigger: the last one wins */
        last_to[rt->moves[i].tensor] = rt->moves[i].to;
    }
    int rc = 0;
    for (uint32_t t = 0; t < nt && rc == 0; t++) {
        if (last_to[t] > TIO_TIER_GPU && (rt->tflags[t] & TF_GLOBAL) &&
            !(rt->tflags[t] & TF_PINNED) && rt->state[t] == ST_RESIDENT && rt->ptr[t]) {
            rt->state[t] = ST_WRITING;
            rt->tflags[t] &= ~(uint32_t)(TF_DONE | TF_KEEP);
            tio_rt_touch(rt, t);
            rc = tio_rt_planned_write(rt, t, last_to[t], 0);
            rc = rc > 0 ? 0 : rc;
        }
    }
    tio_free(last_to);
    double t0 = tio_now_s();
    int waited = rt->inflight > 0;
    if (rc == 0) {
        rc = drain(rt);
    }
    double dt = tio_now_s() - t0;
    rt->st.pressure_stall_s += dt;
    if (waited) {
        tio_rt_count_wait(rt, WAIT_OTHER, dt);
    }
    if (rc == 0 && rt->failed) {
        rc = tio_rt_sticky(rt);
    }
    if (rc == 0) {
        rc = tio_rt_releases(rt, out, max, n, 0);
    }
    return rc;
}

int tio_runtime_adopt_stored(struct tio_runtime *rt, uint32_t tensor, uint64_t engine_id) {
    if (tensor >= rt->v.n_tensors) {
        return tio_set_error(TIO_EINVAL, "runtime: adopt_stored: tensor %u out of range (%zu)",
                             tensor, rt->v.n_tensors);
    }
    uint32_t t = tensor;
    if (!(rt->tflags[t] & TF_GLOBAL) || (rt->tflags[t] & TF_PINNED)) {
        return tio_set_error(TIO_EINVAL, "runtime: adopt_stored: tensor %u is %s", t,
                             (rt->tflags[t] & TF_GLOBAL) ? "pinned" : "not a global");
    }
    if (rt->in_iter || rt->steady || rt->state[t] != ST_RESIDENT || rt->ptr[t]) {
        return tio_set_error(TIO_ESTATE,
                             "runtime: adopt_stored: tensor %u must be an unbound resident global "
                             "before the first iteration",
                             t);
    }
    int32_t tier = TIO_TIER_SSD;
    if (tio_engine_tensor_info(rt->engine, engine_id, NULL, &tier) < 0) {
        tier = TIO_TIER_SSD; /* unknown: never dropped to make room in the host tier */
    }
    rt->eid[t] = engine_id;
    rt->state[t] = ST_STORED;
    rt->tflags[t] &= ~(uint32_t)(TF_DIRTY | TF_HOSTCOPY);
    rt->tflags[t] |= TF_HAS_COPY | (tier == TIO_TIER_HOST ? TF_HOSTCOPY : 0);
    tio_rt_touch(rt, t);
    tio_rt_sub_resident(rt, t);
    rt->st.stored_bytes += rt->v.tensor_bytes[t];
    return 0;
}

int tio_runtime_give_stored(struct tio_runtime *rt, uint32_t tensor, uint64_t *engine_id) {
    if (tensor >= rt->v.n_tensors || !engine_id) {
        return tio_set_error(TIO_EINVAL, "runtime: give_stored: tensor %u (of %zu), engine_id %p",
                             tensor, rt->v.n_tensors, (void *)engine_id);
    }
    uint32_t t = tensor;
    if (!(rt->tflags[t] & TF_GLOBAL)) {
        return tio_set_error(TIO_EINVAL, "runtime: give_stored: tensor %u is not a global", t);
    }
    if (rt->failed) {
        return tio_rt_sticky(rt);
    }
    if (rt->in_iter) {
        return tio_set_error(TIO_ESTATE, "runtime: give_stored: tensor %u: only between iterations",
                             t);
    }
    if (rt->state[t] == ST_WRITING) { /* an offload that went on past the last iteration */
        double dummy = 0;
        int rc = tio_rt_wait_tensor(rt, t, &dummy, WAIT_OTHER);
        if (rc < 0) {
            return rc;
        }
        if (rt->failed) {
            return tio_rt_sticky(rt);
        }
        if (rt->state[t] == ST_WRITING) { /* completed, not released: its memory holds the same
                                             bytes as the copy; the caller's use of the memory
                                             from now on is ordered after the write's copies */
            if ((rc = tio_rt_settle(rt, t)) < 0) {
                return rc;
            }
            rt->tflags[t] &= ~(uint32_t)(TF_DONE | TF_KEEP);
            rt->state[t] = ST_STORED; /* given as stored (below) */
            tio_rt_touch(rt, t);
            tio_rt_sub_resident(rt, t);
            rt->st.stored_bytes += rt->v.tensor_bytes[t];
        }
    }
    if (rt->state[t] != ST_STORED || !(rt->tflags[t] & TF_HAS_COPY)) {
        return 0;
    }
    *engine_id = rt->eid[t];
    rt->tflags[t] &= ~(uint32_t)(TF_HAS_COPY | TF_DIRTY);
    rt->state[t] = ST_ABSENT; /* no longer this executor's: neither resident nor stored */
    rt->ptr[t] = NULL;
    tio_rt_touch(rt, t);
    uint64_t b = rt->v.tensor_bytes[t];
    rt->st.stored_bytes = rt->st.stored_bytes >= b ? rt->st.stored_bytes - b : 0;
    return 1;
}

int tio_runtime_begin_iteration(struct tio_runtime *rt,
                                struct tio_runtime_action *out,
                                size_t max) {
    if (rt->failed) {
        return tio_rt_sticky(rt);
    }
    if (rt->in_iter) {
        return tio_set_error(TIO_ESTATE, "runtime: begin_iteration: iteration %llu not ended",
                             (unsigned long long)rt->st.iterations);
    }
    size_t n = 0;
    if (!rt->steady) {
        int rc = enter_steady_state(rt, out, max, &n);
        if (rc < 0) {
            return rc;
        }
        rt->steady = 1;
    }
    rt->in_iter = 1;
    rt->next_k = 0;
    memcpy(rt->cursor, rt->first_real,
           (rt->v.n_tensors ? rt->v.n_tensors : 1) * sizeof *rt->cursor);
    tio_rt_victims_rekey(rt);
    TIO_RT_VERIFY(rt);
    return (int)n;
}

static int check_k(struct tio_runtime *rt, uint64_t k, const char *fn) {
    if (rt->failed) {
        return tio_rt_sticky(rt);
    }
    if (!rt->in_iter || k != rt->next_k || k >= rt->v.n_kernels) {
        return tio_set_error(TIO_ESTATE, "runtime: %s(%llu): expected kernel %llu of %zu%s", fn,
                             (unsigned long long)k, (unsigned long long)rt->next_k, rt->v.n_kernels,
                             rt->in_iter ? "" : " (no iteration begun)");
    }
    return 0;
}

/* Wait for in-flight offloads until the tracked bytes fit the budget (or none is left). */
static int pressure_wait(struct tio_runtime *rt) {
    double p0 = tio_now_s();
    int waited = 0, rc = 0;
    while (rt->st.resident_bytes - tio_rt_pending_release(rt) > rt->budget && rt->inflight > 0 &&
           rt->n_writing > 0) { /* n_writing: offloads in flight that would free memory */
        waited = 1;
        if ((rc = tio_rt_reap(rt, 1)) < 0) {
            break;
        }
    }
    double dt = tio_now_s() - p0;
    rt->st.pressure_stall_s += dt;
    if (waited) {
        tio_rt_count_wait(rt, WAIT_BUDGET, dt);
    }
    return rc;
}

int tio_runtime_before_kernel(struct tio_runtime *rt,
                              uint64_t k,
                              struct tio_runtime_action *out,
                              size_t max) {
    int rc = check_k(rt, k, "before_kernel");
    if (rc < 0) {
        return rc;
    }
    double t0 = tio_now_s();
    size_t n = 0;
    if ((rc = tio_rt_reap(rt, 0)) < 0) {
        return rc;
    }
    const uint64_t u0 = rt->v.kernel_use_offset[k], u1 = rt->v.kernel_use_offset[k + 1];
    /* Tensors created by kernel k start resident. */
    for (uint64_t u = u0; u < u1; u++) {
        uint32_t t = rt->v.use_tensor[u];
        if (rt->state[t] == ST_ABSENT && rt->first_use[t] == k) {
            rt->state[t] = ST_RESIDENT;
            rt->tflags[t] &= ~(uint32_t)(TF_HAS_COPY | TF_DIRTY);
            tio_rt_touch(rt, t);
            tio_rt_add_resident(rt, t);
        }
    }
    /* The moves triggered at k. */
    for (size_t i = rt->move_off[k]; i < rt->move_off[k + 1]; i++) {
        const struct tio_move *m = &rt->moves[i];
        uint32_t t = m->tensor;
        if (m->to != TIO_TIER_GPU) { /* offload */
            int uses_k = 0;
            for (uint64_t u = u0; u < u1; u++) {
                uses_k |= rt->v.use_tensor[u] == t;
            }
            if (rt->state[t] != ST_RESIDENT || !rt->ptr[t] || (rt->tflags[t] & TF_PINNED) ||
                uses_k || (!(rt->tflags[t] & TF_GLOBAL) && rt->last_use[t] < k)) {
                rt->st.moves_skipped++;
                continue;
            }
            if (tio_rt_is_dead(rt, t, k)) {
                tio_rt_release_dead(rt, t);
                continue;
            }
            if ((rt->tflags[t] & TF_HAS_COPY) && !(rt->tflags[t] & TF_DIRTY)) {
                rt->state[t] = ST_WRITING; /* clean: the stored copy is identical */
                rt->tflags[t] |= TF_DONE;
                tio_rt_touch(rt, t);
                rt->st.offloads++;
                rt->st.clean_offloads++;
                continue;
            }
            rt->state[t] = ST_WRITING;
            rt->tflags[t] &= ~(uint32_t)(TF_DONE | TF_KEEP);
            tio_rt_touch(rt, t);
            if ((rc = tio_rt_planned_write(rt, t, m->to, (m->flags & TIO_MOVE_URGENT) != 0)) < 0) {
                return rc;
            }
        } else { /* prefetch */
            /* A dead intermediate (only its free marker is left) is never read back. */
            int dead = !(rt->tflags[t] & TF_GLOBAL) &&
                       (rt->last_real[t] == TIO_NEVER_USED || rt->last_real[t] < k);
            if (!dead && rt->state[t] == ST_STORED) {
                rt->state[t] = ST_MATERIALIZE;
                tio_rt_touch(rt, t);
                tio_rt_add_resident(rt, t);
                if ((rc = tio_rt_push(out, max, &n, t, TIO_RUNTIME_MATERIALIZE,
                                      rt->v.tensor_bytes[t])) < 0) {
                    return rc;
                }
            } else if (!dead && rt->state[t] == ST_WRITING) {
                if (rt->tflags[t] & TF_DONE) { /* completed but not released: keep it */
                    rt->tflags[t] &= ~(uint32_t)TF_DONE;
                    rt->state[t] = ST_RESIDENT;
                } else {
                    rt->tflags[t] |= TF_KEEP;
                }
                tio_rt_touch(rt, t);
            } else {
                rt->st.moves_skipped++;
            }
        }
    }
    /* Everything kernel k uses must be resident when it runs (a free marker uses nothing). */
    for (uint64_t u = rt->is_free[k] ? u1 : u0; u < u1; u++) {
        uint32_t t = rt->v.use_tensor[u];
        switch (rt->state[t]) {
        case ST_STORED:
            rt->state[t] = ST_MATERIALIZE;
            rt->tflags[t] |= TF_URGENT;
            tio_rt_touch(rt, t);
            rt->st.urgent_reads++;
            tio_rt_add_resident(rt, t);
            if ((rc = tio_rt_push(out, max, &n, t, TIO_RUNTIME_MATERIALIZE,
                                  rt->v.tensor_bytes[t])) < 0) {
                return rc;
            }
            break;
        case ST_MATERIALIZE:
            rt->tflags[t] |= TF_URGENT;
            tio_rt_touch(rt, t);
            break;
        case ST_WRITING:
            if (rt->tflags[t] & TF_DONE) {
                rt->tflags[t] &= ~(uint32_t)TF_DONE;
                rt->state[t] = ST_RESIDENT;
                tio_rt_touch(rt, t);
            } else {
                /* kept; a kernel that only reads it runs beside the write (both read the
                 * memory), one that modifies it waits until the write's copies are queued
                 * (ready() then orders the kernel after them) */
                rt->tflags[t] |= TF_KEEP;
                tio_rt_touch(rt, t);
                if ((rt->v.use_mode[u] & TIO_USE_WRITE) &&
                    (rc = tio_rt_wait_tensor(rt, t, &rt->st.stall_s, WAIT_WRITE)) < 0) {
                    return rc;
                }
            }
            break;
        default:
            break;
        }
    }
    /* Memory pressure: wait for in-flight offloads until under the budget. */
    if (rt->budget) {
        if ((rc = pressure_wait(rt)) < 0) {
            return rc;
        }
        /* Still above: the plan did not schedule enough; offload on demand. */
        if ((rc = tio_rt_demand_offload(rt, k, out, &n)) < 0) {
            return rc;
        }
    }
    size_t n_mat = n;
    if ((rc = tio_rt_releases(rt, out, max, &n, 1)) < 0) {
        return rc;
    }
    tio_rt_releases_first(out, n_mat, n);
    rt->st.io_issue_s += tio_now_s() - t0;
    if (rt->failed) {
        return tio_rt_sticky(rt);
    }
    TIO_RT_VERIFY(rt);
    return (int)n;
}

int tio_runtime_ready(struct tio_runtime *rt, uint64_t k) {
    int rc = check_k(rt, k, "ready");
    if (rc < 0) {
        return rc;
    }
    double t0 = tio_now_s();
    const uint32_t *mat;
    size_t n_mat = tio_rt_set_sorted(rt, TIO_RT_SET_MAT, &mat); /* in id order, as a scan */
    for (size_t i = 0; i < n_mat; i++) {
        uint32_t t = mat[i];
        if (rt->state[t] != ST_MATERIALIZE) {
            continue;
        }
        if (!rt->ptr[t]) {
            return tio_set_error(TIO_ESTATE,
                                 "runtime: ready(%llu): tensor %u was materialised but not bound",
                                 (unsigned long long)k, t);
        }
        if ((rc = tio_rt_submit_read(rt, t)) < 0) {
            return rc;
        }
    }
    double io = tio_now_s() - t0;
    for (uint64_t u = rt->v.kernel_use_offset[k]; u < rt->v.kernel_use_offset[k + 1]; u++) {
        uint32_t t = rt->v.use_tensor[u];
        if (rt->state[t] == ST_READING &&
            (rc = tio_rt_wait_tensor(rt, t, &rt->st.stall_s, WAIT_READ)) < 0) {
            return rc;
        }
        /* stream-ordered: the compute stream, not this thread, waits for a read's bytes to land,
         * and for a write's copies to read the memory before a kernel modifies it */
        if (((rt->tflags[t] & TF_LANDING) || (rt->v.use_mode[u] & TIO_USE_WRITE)) &&
            (rc = tio_rt_settle(rt, t)) < 0) {
            return rc;
        }
    }
    rt->st.io_issue_s += io;
    if (rt->failed) {
        return tio_rt_sticky(rt);
    }
    if (rt->st.resident_bytes > rt->st.peak_resident_bytes) {
        rt->st.peak_resident_bytes = rt->st.resident_bytes;
    }
    TIO_RT_VERIFY(rt);
    return 0;
}

/* t is forgotten (its owner frees the memory): absent, no longer counted resident, its copy
 * dropped. */
static void forget_tensor(struct tio_runtime *rt, uint32_t t) {
    rt->state[t] = ST_ABSENT;
    rt->ptr[t] = NULL;
    tio_rt_touch(rt, t);
    tio_rt_sub_resident(rt, t);
    if (rt->tflags[t] & TF_HAS_COPY) {
        tio_rt_drop_copy(rt, t);
    }
    rt->tflags[t] &= ~(uint32_t)(TF_HAS_COPY | TF_DIRTY);
}

/* A stored intermediate died: forget its copy; its memory was already released. */
static void retire_stored(struct tio_runtime *rt, uint32_t t) {
    uint64_t b = rt->v.tensor_bytes[t];
    rt->st.stored_bytes -= rt->st.stored_bytes >= b ? b : rt->st.stored_bytes;
    rt->state[t] = ST_ABSENT;
    rt->ptr[t] = NULL;
    if (rt->tflags[t] & TF_HAS_COPY) {
        tio_rt_drop_copy(rt, t);
    }
    rt->tflags[t] &= ~(uint32_t)(TF_HAS_COPY | TF_DIRTY | TF_URGENT);
    tio_rt_touch(rt, t);
}

int tio_runtime_forget(struct tio_runtime *rt, uint32_t tensor) {
    if (tensor >= rt->v.n_tensors) {
        return tio_set_error(TIO_EINVAL, "runtime: forget: tensor %u out of range", tensor);
    }
    uint32_t t = tensor;
    if (rt->tflags[t] & TF_GLOBAL) {
        return tio_set_error(TIO_EINVAL, "runtime: forget: tensor %u is global", t);
    }
    if (rt->state[t] == ST_WRITING || rt->state[t] == ST_READING) {
        double dummy = 0;
        int rc = tio_rt_wait_tensor(rt, t, &dummy, WAIT_OTHER);
        if (rc < 0) {
            return rc;
        }
        if (rt->state[t] == ST_WRITING) { /* completed: the memory is gone with the tensor */
            rt->tflags[t] &= ~(uint32_t)(TF_DONE | TF_KEEP);
            rt->state[t] = ST_RESIDENT;
            tio_rt_touch(rt, t);
        }
    }
    /* after the wait: a read that completed in it is landing only now. Its owner frees the
     * memory on the compute stream, which must wait for the bytes first */
    int src = tio_rt_settle(rt, t);
    if (src < 0) {
        return src;
    }
    if (rt->state[t] == ST_STORED) {
        retire_stored(rt, t);
    } else if (rt->state[t] == ST_MATERIALIZE) {
        rt->state[t] = ST_STORED;
        tio_rt_sub_resident(rt, t);
        retire_stored(rt, t);
    } else if (rt->state[t] == ST_RESIDENT) {
        forget_tensor(rt, t);
    }
    TIO_RT_VERIFY(rt);
    return rt->failed ? tio_rt_sticky(rt) : 0;
}

int tio_runtime_after_kernel(struct tio_runtime *rt, uint64_t k) {
    int rc = check_k(rt, k, "after_kernel");
    if (rc < 0) {
        return rc;
    }
    for (uint64_t u = rt->v.kernel_use_offset[k]; u < rt->v.kernel_use_offset[k + 1]; u++) {
        uint32_t t = rt->v.use_tensor[u];
        if (rt->v.use_mode[u] & TIO_USE_WRITE) {
            rt->tflags[t] |= TF_DIRTY;
            tio_rt_drop_stale(rt, t); /* its copy, if any, is never read again */
        }
        if (!rt->is_free[k]) {
            rt->cursor[t] = rt->next_of_use[u];
            tio_rt_cursor_moved(rt, t);
        }
        if (!(rt->tflags[t] & TF_GLOBAL) && rt->last_use[t] == k && rt->state[t] == ST_STORED) {
            retire_stored(rt, t);
        }
        int past = !(rt->tflags[t] & TF_GLOBAL) && (rt->last_use[t] == k || rt->last_real[t] == k);
        if (past && rt->state[t] == ST_WRITING && !(rt->tflags[t] & TF_DONE)) {
            /* kept for a kernel that only read it, and past its last real use now: from here on
             * its owner may free the memory at any time (the free marker only records when it
             * did), so the write's copies must be queued first, and the compute stream must wait
             * for them (below); a write must not read freed memory */
            rc = tio_rt_wait_tensor(rt, t, &rt->st.stall_s, WAIT_WRITE);
            if (rc < 0) {
                return rc;
            }
        }
        if (past && rt->last_real[t] == k && rt->last_use[t] != k && rt->state[t] == ST_WRITING &&
            (rc = tio_rt_settle(rt, t)) < 0) {
            return rc;
        }
        if (!(rt->tflags[t] & TF_GLOBAL) && rt->last_use[t] == k && rt->state[t] == ST_WRITING &&
            (rt->tflags[t] & TF_DONE)) {
            rt->tflags[t] &= ~(uint32_t)(TF_DONE | TF_KEEP);
            rt->state[t] = ST_RESIDENT;
            tio_rt_touch(rt, t);
        }
        if (!(rt->tflags[t] & TF_GLOBAL) && rt->last_use[t] == k && rt->state[t] == ST_RESIDENT) {
            rc = tio_rt_settle(rt, t); /* the owner frees it on the compute stream */
            if (rc < 0) {
                return rc;
            }
            rt->state[t] = ST_ABSENT;
            rt->ptr[t] = NULL;
            tio_rt_touch(rt, t);
            tio_rt_sub_resident(rt, t);
            if (rt->tflags[t] & TF_HAS_COPY) {
                tio_rt_drop_copy(rt, t);
                rt->tflags[t] &= ~(uint32_t)TF_HAS_COPY;
            }
        }
    }
    rt->next_k = k + 1;
    rt->st.kernels++;
    TIO_RT_VERIFY(rt);
    return 0;
}

/* The reads in flight: waited for (a read that completed lands in stream order). */
static int drain_reads(struct tio_runtime *rt) {
    while (rt->reads_inflight > 0 && rt->inflight > 0) {
        int rc = tio_rt_reap(rt, 1);
        if (rc < 0) {
            return rc;
        }
    }
    return 0;
}

int tio_runtime_end_iteration(struct tio_runtime *rt, struct tio_runtime_action *out, size_t max) {
    if (rt->failed) {
        return tio_rt_sticky(rt);
    }
    if (!rt->in_iter || rt->next_k != rt->v.n_kernels) {
        return tio_set_error(TIO_ESTATE, "runtime: end_iteration after %llu of %zu kernels",
                             (unsigned long long)rt->next_k, rt->v.n_kernels);
    }
    /* Stream-ordered: offloads still in flight stay in flight into the next iteration, whose
     * calls reap them and hand out their RELEASEs as within a step (a kernel that modifies such a
     * global waits for its write as within a step); only the reads are waited for. Host path:
     * everything is. */
    int ordered = rt->cu != NULL;
    double t0 = tio_now_s();
    int waited = ordered ? rt->reads_inflight > 0 : rt->inflight > 0;
    int rc = ordered ? drain_reads(rt) : drain(rt);
    if (rc == 0 && ordered) {
        rc = tio_rt_reap(rt, 0);
    }
    double dt = tio_now_s() - t0;
    rt->st.stall_s += dt;
    if (waited) {
        tio_rt_count_wait(rt, WAIT_END, dt);
    }
    /* what the caller does after the step sees every byte read in it; the copies of writes
     * still reading their memory are waited for where the memory is released or modified */
    if (rc == 0) {
        rc = tio_rt_settle_all(rt, ordered);
    }
    if (rc < 0) {
        return rc;
    }
    if (rt->failed) {
        return tio_rt_sticky(rt);
    }
    size_t n = 0;
    if ((rc = tio_rt_releases(rt, out, max, &n, ordered)) < 0) {
        return rc;
    }
    for (uint32_t t = 0; ordered && t < rt->v.n_tensors; t++) { /* once per iteration */
        rt->st.carried_offloads += rt->state[t] == ST_WRITING;
    }
    rt->in_iter = 0;
    rt->st.iterations++;
    TIO_RT_VERIFY(rt);
    return (int)n;
}

int tio_runtime_drain(struct tio_runtime *rt) {
    if (rt->failed) {
        return tio_rt_sticky(rt);
    }
    if (rt->in_iter) {
        return tio_set_error(TIO_ESTATE, "runtime: drain: only between iterations");
    }
    /* completed offloads stay as they are (WRITING until the next iteration hands out their
     * RELEASE; their memory still holds the same bytes as the copy) */
    int rc = drain(rt);
    if (rc < 0) {
        return rc;
    }
    return rt->failed ? tio_rt_sticky(rt) : 0;
}

int tio_runtime_restore_begin(struct tio_runtime *rt, struct tio_runtime_action *out, size_t max) {
    int rc = drain(rt);
    if (rc < 0) {
        return rc;
    }
    if (rt->failed) {
        return tio_rt_sticky(rt);
    }
    size_t n = 0;
    for (uint32_t t = 0; t < rt->v.n_tensors; t++) {
        if (rt->state[t] == ST_WRITING) { /* completed, never released: still in memory */
            rt->state[t] = ST_RESIDENT;
            rt->tflags[t] &= ~(uint32_t)(TF_DONE | TF_KEEP);
            tio_rt_touch(rt, t);
        } else if (rt->state[t] == ST_STORED || rt->state[t] == ST_MATERIALIZE) {
            if (rt->state[t] == ST_STORED) {
                tio_rt_add_resident(rt, t);
            }
            rt->state[t] = ST_MATERIALIZE;
            rt->tflags[t] |= TF_URGENT;
            tio_rt_touch(rt, t);
            if ((rc = tio_rt_push(out, max, &n, t, TIO_RUNTIME_MATERIALIZE,
                                  rt->v.tensor_bytes[t])) < 0) {
                return rc;
            }
        }
    }
    return (int)n;
}

int tio_runtime_restore_finish(struct tio_runtime *rt) {
    int rc;
    for (uint32_t t = 0; t < rt->v.n_tensors; t++) {
        if (rt->state[t] == ST_MATERIALIZE) {
            if (!rt->ptr[t]) {
                return tio_set_error(
                    TIO_ESTATE, "runtime: restore: tensor %u was materialised but not bound", t);
            }
            if ((rc = tio_rt_submit_read(rt, t)) < 0) {
                return rc;
            }
        }
    }
    if ((rc = drain(rt)) < 0 || (rc = tio_rt_settle_all(rt, 0)) < 0) {
        return rc;
    }
    if (rt->failed) {
        return tio_rt_sticky(rt);
    }
    /* Abandon the iteration: intermediates are forgotten (their owners hold them). */
    for (uint32_t t = 0; t < rt->v.n_tensors; t++) {
        if (!(rt->tflags[t] & TF_GLOBAL) && rt->state[t] != ST_ABSENT) {
            forget_tensor(rt, t);
        }
    }
    rt->in_iter = 0;
    rt->steady = 0; /* everything is resident again: the next iteration re-enters it */
    TIO_RT_VERIFY(rt);
    return 0;
}

void tio_runtime_set_wait_hook(struct tio_runtime *rt, tio_runtime_wait_hook hook, void *ctx) {
    rt->wait_hook = hook;
    rt->wait_ctx = hook ? ctx : NULL;
}

void tio_runtime_get_stats(const struct tio_runtime *rt, struct tio_runtime_stats *out) {
    *out = rt->st;
}

int tio_runtime_tensor_state(const struct tio_runtime *rt, uint32_t tensor) {
    return tensor < rt->v.n_tensors ? rt->state[tensor] : -1;
}
