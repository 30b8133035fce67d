/* The executor's engine requests and the table updates their completions make. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <teraio/alloc.h>
#include <teraio/runtime.h>

#include "../common/common_impl.h"
#include "executor_impl.h"
#include "io/engine_ordered.h"

int tio_rt_sticky(struct tio_runtime *rt) {
    return tio_set_error(rt->fail_rc, "%s", rt->fail_msg);
}

/* Record the first engine failure; every later call reports it (sticky). */
static void fail(struct tio_runtime *rt, int rc, const char *what, uint32_t t, const char *detail) {
    if (rt->failed) {
        return;
    }
    rt->failed = 1;
    rt->fail_rc = rc;
    const char *name = tio_trace_tensor_name(rt->trace, t);
    (void)snprintf(rt->fail_msg, sizeof rt->fail_msg,
                   "runtime: %s of tensor %u (%s, %llu bytes): %s: %s", what, t,
                   name ? name : "unnamed", (unsigned long long)rt->v.tensor_bytes[t],
                   tio_strerror(rc), detail && *detail ? detail : "no detail");
}

/* Forget the engine's copy of t (best effort: a failure only leaks its extents until the tensor
 * is written again or the engine is freed). */
void tio_rt_drop_copy(struct tio_runtime *rt, uint32_t t) {
    if (tio_engine_drop(rt->engine, rt->eid[t]) < 0) {
        TIO_LOG_DEBUG("runtime: drop of tensor %u: %s", t, tio_last_error());
    }
    rt->tflags[t] &= ~(uint32_t)(TF_HAS_COPY | TF_HOSTCOPY);
}

/* The copy of t, in memory beside it, is given up (its next offload writes again). */
static void drop_kept(struct tio_runtime *rt, uint32_t t) {
    tio_rt_drop_copy(rt, t);
    tio_rt_touch(rt, t);
    rt->st.host_copies_dropped++;
}

void tio_rt_drop_stale(struct tio_runtime *rt, uint32_t t) {
    if (rt->state[t] == ST_RESIDENT && (rt->tflags[t] & TF_HAS_COPY)) {
        tio_rt_drop_copy(rt, t);
        tio_rt_touch(rt, t);
    }
}

/*
 * The host tier had no room for a write of `need` bytes: drop host-tier copies of tensors in memory
 * (IN_KEPT: read back and kept, so that an unchanged tensor's next offload writes nothing),
 * largest first, the lower id on ties, until `need` bytes are freed or none is left. The plan
 * counts a host copy as freed when its tensor is read back; such a copy holds room the plan has
 * given to later offloads. Returns the bytes freed.
 */
static uint64_t reclaim_host(struct tio_runtime *rt, uint64_t need) {
    const uint32_t *kept;
    size_t n = tio_rt_set_sorted(rt, TIO_RT_SET_KEPT, &kept);
    uint32_t *c = rt->scratch; /* == kept: a copy of the set, ours to reorder until we return */
    uint64_t freed = 0;
    while (n > 0 && freed < need) {
        size_t best = 0;
        for (size_t i = 1; i < n; i++) {
            if (rt->v.tensor_bytes[c[i]] > rt->v.tensor_bytes[c[best]]) {
                best = i; /* ties: the first, the lower id (c is in id order) */
            }
        }
        uint32_t t = c[best];
        memmove(&c[best], &c[best + 1], (n - best - 1) * sizeof *c);
        n--;
        freed += rt->v.tensor_bytes[t];
        drop_kept(rt, t);
    }
    return freed;
}

void tio_rt_add_resident(struct tio_runtime *rt, uint32_t t) {
    rt->st.resident_bytes += rt->v.tensor_bytes[t];
}

void tio_rt_sub_resident(struct tio_runtime *rt, uint32_t t) {
    uint64_t b = rt->v.tensor_bytes[t];
    rt->st.resident_bytes = rt->st.resident_bytes >= b ? rt->st.resident_bytes - b : 0;
}

/* Apply one completion to the table. */
static void complete(struct tio_runtime *rt, const struct tio_completion *c) {
    uint32_t t = (uint32_t)(c->tag & 0xffffffffu);
    int is_read = (c->tag & TAG_READ) != 0;
    if (rt->inflight > 0) {
        rt->inflight--;
    }
    if (is_read && rt->reads_inflight > 0) {
        rt->reads_inflight--;
    }
    if (t >= rt->v.n_tensors) {
        return;
    }
    uint64_t bytes = rt->v.tensor_bytes[t];
    if (c->res < 0 || (uint64_t)c->res != bytes) {
        int rc = c->res < 0 ? (int)c->res : TIO_EIO;
        fail(rt, rc, is_read ? "read" : "write", t, tio_engine_last_error(rt->engine));
        /* A failed write keeps the tensor resident (nothing was released); a failed read leaves
         * the memory undefined, which the sticky error reports before any kernel runs. */
        rt->state[t] = ST_RESIDENT;
        rt->tflags[t] &= ~(uint32_t)(TF_DONE | TF_KEEP | TF_WEV | TF_WHOST);
        if (!is_read) {
            rt->tflags[t] &= ~(uint32_t)(TF_HAS_COPY | TF_HOSTCOPY);
        }
        tio_rt_touch(rt, t);
        return;
    }
    if (is_read) {
        rt->state[t] = ST_RESIDENT;
        rt->tflags[t] &= ~(uint32_t)(TF_DIRTY | TF_URGENT);
        if (rt->cu) {
            rt->tflags[t] |= TF_LANDING;
        }
        rt->st.prefetches++;
        rt->st.bytes_prefetched += bytes;
        rt->st.stored_bytes -= rt->st.stored_bytes >= bytes ? bytes : rt->st.stored_bytes;
    } else {
        rt->tflags[t] |= TF_HAS_COPY;
        rt->tflags[t] = (rt->tflags[t] & ~(uint32_t)TF_HOSTCOPY) |
                        ((rt->tflags[t] & TF_WHOST) ? TF_HOSTCOPY : 0);
        rt->tflags[t] &= ~(uint32_t)TF_WHOST;
        if (rt->tflags[t] & TF_WEV) { /* its copies may still read the memory */
            rt->tflags[t] |= TF_WLAND;
        }
        rt->tflags[t] &= ~(uint32_t)(TF_DIRTY | TF_WEV);
        rt->st.offloads++;
        rt->st.bytes_offloaded += bytes;
        if (rt->tflags[t] & TF_KEEP) {
            rt->state[t] = ST_RESIDENT;
            rt->tflags[t] &= ~(uint32_t)TF_KEEP;
        } else {
            rt->tflags[t] |= TF_DONE; /* stays WRITING until the RELEASE is handed out */
        }
    }
    tio_rt_touch(rt, t);
}

/* Reap completions: wait for at least `min` (0: poll only). */
int tio_rt_reap(struct tio_runtime *rt, size_t min) {
    struct tio_completion c[64];
    for (;;) {
        size_t want = min > 64 ? 64 : min;
        if (want > rt->inflight) {
            want = rt->inflight;
        }
        int n;
        if (want) {
            if (rt->wait_hook) {
                rt->wait_hook(rt->wait_ctx, 1);
            }
            n = tio_engine_wait(rt->engine, c, want, 64, -1);
            if (rt->wait_hook) {
                rt->wait_hook(rt->wait_ctx, 0);
            }
        } else {
            n = tio_engine_poll(rt->engine, c, 64);
        }
        if (n < 0) {
            return n;
        }
        for (int i = 0; i < n; i++) {
            complete(rt, &c[i]);
        }
        size_t got = (size_t)n;
        min = min > got ? min - got : 0;
        if (min == 0 || rt->inflight == 0) {
            return 0;
        }
    }
}

void tio_rt_count_wait(struct tio_runtime *rt, int why, double dt) {
    struct tio_runtime_stats *s = &rt->st;
    switch (why) {
    case WAIT_READ:
        s->wait_read_count++;
        s->wait_read_s += dt;
        break;
    case WAIT_WRITE:
        s->wait_write_count++;
        s->wait_write_s += dt;
        break;
    case WAIT_BUDGET:
        s->wait_budget_count++;
        s->wait_budget_s += dt;
        break;
    case WAIT_END:
        s->wait_end_count++;
        s->wait_end_s += dt;
        break;
    default:
        s->wait_other_count++;
        s->wait_other_s += dt;
        break;
    }
}

/* Wait until tensor t has no request in flight; the time counts as a stall. */
int tio_rt_wait_tensor(struct tio_runtime *rt, uint32_t t, double *acc, int why) {
    double t0 = tio_now_s();
    int waited = 0;
    while ((rt->state[t] == ST_READING ||
            (rt->state[t] == ST_WRITING && !(rt->tflags[t] & TF_DONE))) &&
           rt->inflight > 0) {
        waited = 1;
        int rc = tio_rt_reap(rt, 1);
        if (rc < 0) {
            return rc;
        }
    }
    double dt = tio_now_s() - t0;
    *acc += dt;
    if (waited) {
        tio_rt_count_wait(rt, why, dt);
    }
    return 0;
}

int tio_rt_push(struct tio_runtime_action *out,
                size_t max,
                size_t *n,
                uint32_t t,
                int32_t kind,
                uint64_t bytes) {
    if (*n >= max) {
        return tio_set_error(TIO_EINVAL,
                             "runtime: action array too small (max %zu): pass "
                             "tio_runtime_max_actions() entries",
                             max);
    }
    out[*n].tensor = t;
    out[*n].kind = kind;
    out[*n].bytes = bytes;
    (*n)++;
    return 0;
}

/* A read of t completed with its bytes still on the way (TF_LANDING), or a write of t whose
 * copies may still read the memory (TF_WLAND): make the compute stream wait for them, so no
 * kernel launched from now on (nor the caching allocator's next user of the memory, once it is
 * released) sees the memory before a read's bytes land or changes it before a write's copies
 * read it. This is what makes a RELEASE stream-ordered: its memory may be reused at once by
 * work queued later on the compute stream. */
int tio_rt_settle(struct tio_runtime *rt, uint32_t t) {
    uint32_t f = rt->tflags[t] & (TF_LANDING | TF_WLAND);
    if (!f) {
        return 0;
    }
    rt->tflags[t] &= ~f;
    tio_rt_touch(rt, t);
    int err = rt->cu->stream_wait_event(rt->stream, rt->landed[t], 0);
    if (err) {
        char d[96];
        (void)snprintf(d, sizeof d, "cudaStreamWaitEvent on its %s: CUDA error %d",
                       f & TF_LANDING ? "read" : "write", err);
        fail(rt, TIO_ECUDA, f & TF_LANDING ? "read" : "write", t, d);
        return tio_rt_sticky(rt);
    }
    return 0;
}

int tio_rt_settle_all(struct tio_runtime *rt, int reads_only) {
    int rc = 0;
    const uint32_t *land;
    size_t n = tio_rt_set_sorted(rt, TIO_RT_SET_LAND, &land); /* in id order, as a scan */
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (!reads_only || (rt->tflags[land[i]] & TF_LANDING)) {
            rc = tio_rt_settle(rt, land[i]);
        }
    }
    return rc;
}

/* Release t if it is a completed, not-kept offload: RELEASE in out[], *over less its bytes. */
static int release_one(struct tio_runtime *rt,
                       uint32_t t,
                       struct tio_runtime_action *out,
                       size_t max,
                       size_t *n,
                       uint64_t *over) {
    if (rt->state[t] != ST_WRITING || !(rt->tflags[t] & TF_DONE)) {
        return 0;
    }
    uint64_t b = rt->v.tensor_bytes[t];
    *over = *over > b ? *over - b : 0;
    /* stream-ordered release: the compute stream waits for the write's copies (or the landing
     * read of a clean offload); the memory may then go to later work on it */
    int rc = tio_rt_settle(rt, t);
    if (rc == 0) {
        rc = tio_rt_push(out, max, n, t, TIO_RUNTIME_RELEASE, b);
    }
    if (rc < 0) {
        return rc;
    }
    rt->tflags[t] &= ~(uint32_t)TF_DONE;
    rt->state[t] = ST_STORED;
    rt->ptr[t] = NULL;
    tio_rt_touch(rt, t);
    rt->st.stored_bytes += b;
    tio_rt_sub_resident(rt, t);
    return 0;
}

static int by_write_seq(const void *a, const void *b) {
    const struct tio_rt_wkey *x = a, *y = b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Hand out RELEASE for the completed, not-kept offloads: all of them, except (lazy) those whose
 * copies may still read the memory (TF_WLAND) beyond what the budget needs. Releasing such a
 * tensor makes the compute stream wait for its copies, so it is released only when its memory
 * is needed: a kernel that runs meanwhile does not wait for the D2H stream, and a kernel that
 * needs the tensor again takes it back without a read. The ones the budget needs are taken in
 * the order their writes were queued, about the order their copies leave the engine's one D2H
 * stream (urgent writes go first): the compute stream then waits for the copies that end first,
 * not (as in id order)
 * for a copy queued behind a step's worth of others while completed ones were there to release.
 * No cudaEventQuery: the training thread does not poll the GPU, and the choice is the same
 * however far the GPU lags. */
int tio_rt_releases(
    struct tio_runtime *rt, struct tio_runtime_action *out, size_t max, size_t *n, int lazy) {
    const uint32_t *rel;
    size_t nr = tio_rt_set_sorted(rt, TIO_RT_SET_REL, &rel); /* in id order, as a scan */
    if (nr == 0) {
        return 0;
    }
    lazy = lazy && rt->budget && rt->cu;
    uint64_t over = rt->st.resident_bytes > rt->budget ? rt->st.resident_bytes - rt->budget : 0;
    size_t nw = 0;
    for (size_t i = 0; i < nr; i++) { /* the others first; TF_WLAND (lazy) set aside */
        uint32_t t = rel[i];
        if (lazy && (rt->tflags[t] & TF_WLAND)) {
            rt->wkeys[nw++] = (struct tio_rt_wkey){ rt->wseq[t], t };
            continue;
        }
        int rc = release_one(rt, t, out, max, n, &over);
        if (rc < 0) {
            return rc;
        }
    }
    if (nw == 0 || over == 0) {
        return 0;
    }
    qsort(rt->wkeys, nw, sizeof *rt->wkeys, by_write_seq);
    for (size_t i = 0; i < nw && over > 0; i++) {
        int rc = release_one(rt, rt->wkeys[i].t, out, max, n, &over);
        if (rc < 0) {
            return rc;
        }
    }
    return 0;
}

/*
 * t's event in `slots` (rt->fence or rt->landed), created on first use and, with `record`,
 * recorded on the compute stream now. NULL when not stream-ordered; on a CUDA error the executor
 * fails (sticky), naming `what`, and *rc says so.
 */
static void *tensor_event(struct tio_runtime *rt,
                          tio_cuda_event *slots,
                          uint32_t t,
                          int record,
                          const char *what,
                          int *rc) {
    *rc = 0;
    if (!rt->cu) {
        return NULL;
    }
    int err = slots[t] ? 0 : rt->cu->event_create(&slots[t], TIO_CUDA_EVENT_DISABLE_TIMING);
    if (!err && record) {
        err = rt->cu->event_record(slots[t], rt->stream);
    }
    if (err) {
        char d[96];
        (void)snprintf(d, sizeof d, "cudaEventCreate/Record of its %s: CUDA error %d", what, err);
        fail(rt, TIO_ECUDA, what, t, d);
        *rc = tio_rt_sticky(rt);
        return NULL;
    }
    return slots[t];
}

/*
 * The fence of a request on t: an event recorded on the compute stream now, so it completes once
 * every kernel queued so far has run (a write must not read t before its last user ran, nor a
 * read fill memory that queued kernels still use: the caching allocator hands a block back to its
 * stream as soon as its tensor is freed).
 */
static void *fence_now(struct tio_runtime *rt, uint32_t t, int *rc) {
    return tensor_event(rt, rt->fence, t, 1, "fence", rc);
}

/* Queue the write of t. soft: a full tier (-ENOSPC) is returned to the caller, not recorded as
 * the executor's failure (demand offloads then try elsewhere or give up). */
static int submit_write(struct tio_runtime *rt, uint32_t t, int32_t tier, int urgent, int soft) {
    /* landed[t] is about to carry this write's event: what it marked is waited for first */
    int rc = tio_rt_settle(rt, t);
    void *fence = rc < 0 ? NULL : fence_now(rt, t, &rc);
    /* host tier: the write completes once its copies are queued, its memory is released in
     * stream order (tio_rt_settle); the SSD tier completes once the SSD write succeeded */
    int ordered = rt->cu && tier == TIO_TIER_HOST;
    void *done = rc < 0 || !ordered ? NULL : tensor_event(rt, rt->landed, t, 0, "done event", &rc);
    if (rc < 0) {
        return rc;
    }
    const struct tio_engine_write_request req = {
        .struct_size = sizeof req,
        .tensor_id = rt->eid[t],
        .src = rt->ptr[t],
        .bytes = rt->v.tensor_bytes[t],
        .mem = rt->mem,
        .tier = tier,
        .priority = urgent ? TIO_PRIO_URGENT : TIO_PRIO_NORMAL,
        .tag = (uint64_t)t,
        .fence = fence,
    };
    for (;;) {
        rc = ordered ? tio_eng_write_ordered(rt->engine, &req, done)
                     : tio_engine_write(rt->engine, &req);
        if (rc == -EAGAIN && rt->inflight > 0) {
            if ((rc = tio_rt_reap(rt, 1)) < 0) {
                return rc;
            }
            continue;
        }
        if (rc == -ENOSPC && soft) {
            return rc;
        }
        if (rc < 0) {
            fail(rt, rc, "write request", t, tio_last_error());
            return tio_rt_sticky(rt);
        }
        rt->inflight++;
        rt->tflags[t] =
            (rt->tflags[t] & ~(uint32_t)TF_WHOST) | (tier == TIO_TIER_HOST ? TF_WHOST : 0);
        if (ordered) {
            rt->tflags[t] |= TF_WEV;
            rt->wseq[t] = ++rt->wseq_next;
        } else {
            rt->tflags[t] &= ~(uint32_t)TF_WEV;
        }
        return 0;
    }
}

/* submit_write, soft; a host-tier write that finds no free extent large enough (the planner and
 * demand_tier count bytes, the engine needs one extent) goes to the SSDs when `to_ssd` allows it
 * and there are any, counted in tier_fallbacks. -ENOSPC when no tier took it. */
static int write_or_ssd(struct tio_runtime *rt, uint32_t t, int32_t tier, int urgent, int to_ssd) {
    int rc = submit_write(rt, t, tier, urgent, 1);
    while (rc == -ENOSPC && tier == TIO_TIER_HOST && reclaim_host(rt, rt->v.tensor_bytes[t]) > 0) {
        rc = submit_write(rt, t, tier, urgent, 1);
    }
    if (rc == -ENOSPC && tier == TIO_TIER_HOST && to_ssd && rt->has_ssd) {
        TIO_LOG_DEBUG("runtime: offload of tensor %u to the host tier: %s; to the SSDs", t,
                      tio_last_error());
        rc = submit_write(rt, t, TIO_TIER_SSD, urgent, 1);
        if (rc == 0) {
            rt->st.tier_fallbacks++;
        }
    }
    return rc;
}

/* Queue a planned offload of t (state ST_WRITING) to `tier` (write_or_ssd); when no tier has
 * room t stays resident (the executor's demand offloads keep the budget if they must).
 * 0 queued, 1 kept resident, < 0 an error. */
int tio_rt_planned_write(struct tio_runtime *rt, uint32_t t, int32_t tier, int urgent) {
    int rc = write_or_ssd(rt, t, tier, urgent, 1);
    if (rc == -ENOSPC) {
        TIO_LOG_DEBUG("runtime: offload of tensor %u kept resident: %s", t, tio_last_error());
        rt->state[t] = ST_RESIDENT;
        tio_rt_touch(rt, t);
        rt->st.tier_full_kept++;
        return 1;
    }
    return rc;
}

/* Bytes of completed offloads whose RELEASE has not been handed out yet. */
uint64_t tio_rt_pending_release(const struct tio_runtime *rt) {
    return rt->pending_bytes;
}

/* Reorder out[0..n) so that the RELEASE actions out[m..n) come before the MATERIALIZE actions
 * out[0..m) (a caller performing them in order frees memory before allocating). */
void tio_rt_releases_first(struct tio_runtime_action *out, size_t m, size_t n) {
    if (m == 0 || m == n) {
        return;
    }
    /* Rotate left by m: three reversals. */
    struct tio_runtime_action tmp;
    size_t spans[3][2] = { { 0, m }, { m, n }, { 0, n } };
    for (int s = 0; s < 3; s++) {
        for (size_t i = spans[s][0], j = spans[s][1]; i + 1 < j; i++, j--) {
            tmp = out[i];
            out[i] = out[j - 1];
            out[j - 1] = tmp;
        }
    }
}

static int32_t demand_tier(struct tio_runtime *rt, uint32_t t) {
    if (rt->demand_tier != 0) {
        return rt->demand_tier;
    }
    struct tio_engine_stats es;
    (void)tio_engine_stats(rt->engine, &es);
    /* the host-tier copies of tensors in memory count as room: write_or_ssd drops them */
    if (es.host_capacity_bytes >= es.host_used_bytes &&
        es.host_capacity_bytes - es.host_used_bytes + rt->kept_bytes >= rt->v.tensor_bytes[t]) {
        return TIO_TIER_HOST;
    }
    return rt->has_ssd ? TIO_TIER_SSD : TIO_TIER_HOST; /* no SSD: the host tier says it is full */
}

int tio_rt_is_dead(const struct tio_runtime *rt, uint32_t t, uint64_t k) {
    return !(rt->tflags[t] & TF_GLOBAL) &&
           (rt->last_real[t] == TIO_NEVER_USED || rt->last_real[t] < k);
}

void tio_rt_release_dead(struct tio_runtime *rt, uint32_t t) {
    rt->state[t] = ST_WRITING;
    rt->tflags[t] = (rt->tflags[t] & ~(uint32_t)TF_KEEP) | TF_DONE;
    tio_rt_touch(rt, t);
    rt->st.offloads++;
    rt->st.dead_releases++;
}

/*
 * The tracked resident bytes exceed the budget before kernel k although no planned offload is
 * in flight: write resident tensors k does not use, furthest next use first, until they fit;
 * wait for those writes (a tensor is released only once its copy is complete). The RELEASE
 * actions are handed out by the caller's tio_rt_releases().
 */
int tio_rt_demand_offload(struct tio_runtime *rt,
                          uint64_t k,
                          struct tio_runtime_action *out,
                          size_t *n) {
    uint64_t pending = tio_rt_pending_release(rt);
    if (rt->st.resident_bytes - pending <= rt->budget) {
        return 0;
    }
    uint64_t over = rt->st.resident_bytes - pending - rt->budget;
    size_t nv = 0;
    int rc = 0;
    while (over > 0) {
        /* among the resident, bound, unpinned tensors k does not use and the prefetches handed
         * out by this call and not performed yet (they can be taken back) */
        uint32_t best = tio_rt_best_victim(rt, k);
        if (best == UINT32_MAX) {
            break;
        }
        uint32_t t = best;
        uint64_t b = rt->v.tensor_bytes[t];
        over = over > b ? over - b : 0;
        if (rt->state[t] == ST_MATERIALIZE) { /* defer the prefetch: it stays stored */
            size_t j = 0;
            while (j < *n && !(out[j].tensor == t && out[j].kind == TIO_RUNTIME_MATERIALIZE)) {
                j++;
            }
            if (j < *n) {
                memmove(&out[j], &out[j + 1], (*n - j - 1) * sizeof *out);
                (*n)--;
            }
            rt->state[t] = ST_STORED;
            tio_rt_touch(rt, t);
            tio_rt_sub_resident(rt, t);
            rt->st.deferred_prefetches++;
            continue;
        }
        rt->st.demand_offloads++;
        if (tio_rt_is_dead(rt, t, k)) { /* never read again: no write */
            tio_rt_release_dead(rt, t);
            continue;
        }
        rt->state[t] = ST_WRITING;
        rt->tflags[t] &= ~(uint32_t)(TF_DONE | TF_KEEP);
        tio_rt_touch(rt, t);
        if ((rt->tflags[t] & TF_HAS_COPY) && !(rt->tflags[t] & TF_DIRTY)) {
            rt->tflags[t] |= TF_DONE; /* clean: the stored copy is identical */
            tio_rt_touch(rt, t);
            rt->st.offloads++;
            rt->st.clean_offloads++;
            continue;
        }
        /* a tier chosen in params.demand_tier is not overridden */
        rc = write_or_ssd(rt, t, demand_tier(rt, t), 1, rt->demand_tier == 0);
        if (rc == -ENOSPC) { /* no room anywhere: keep it, run above the budget */
            TIO_LOG_DEBUG("runtime: demand offload of tensor %u: %s", t, tio_last_error());
            rt->state[t] = ST_RESIDENT;
            tio_rt_touch(rt, t);
            rt->st.demand_offloads--;
            over += b;
            rc = 0;
            break;
        }
        if (rc < 0) {
            break;
        }
        rt->st.bytes_demand_offloaded += b;
        rt->victims[nv++] = t;
    }
    tio_rt_victims_unstash(rt);
    for (size_t i = 0; i < nv && rc == 0; i++) {
        rc = tio_rt_wait_tensor(rt, rt->victims[i], &rt->st.demand_stall_s, WAIT_BUDGET);
    }
    if (rc < 0) {
        return rc;
    }
    if (over > 0) {
        rt->st.over_budget_kernels++;
    }
    if (over > 0 && TIO_LOG_DEBUG <= tio_log_get_level()) { /* the diagnosis scans the table */
        uint64_t unbound = 0, pinned = 0, incoming = 0, used = 0;
        for (uint32_t t = 0; t < rt->v.n_tensors; t++) {
            uint64_t b = rt->v.tensor_bytes[t];
            if (rt->state[t] == ST_MATERIALIZE || rt->state[t] == ST_READING) {
                incoming += rt->cursor[t] == k ? 0 : b;
            } else if (rt->state[t] != ST_RESIDENT && rt->state[t] != ST_WRITING) {
                continue;
            }
            if (rt->cursor[t] == k) {
                used += b;
            } else if (rt->tflags[t] & TF_PINNED) {
                pinned += b;
            } else if (!rt->ptr[t] && rt->state[t] == ST_RESIDENT) {
                unbound += b;
            }
        }
        TIO_LOG_DEBUG("runtime: kernel %llu runs %llu bytes above the budget: nothing movable "
                      "left (used by it %llu, pinned %llu, unbound %llu, prefetched for later "
                      "kernels %llu)",
                      (unsigned long long)k, (unsigned long long)over, (unsigned long long)used,
                      (unsigned long long)pinned, (unsigned long long)unbound,
                      (unsigned long long)incoming);
    }
    return rt->failed ? tio_rt_sticky(rt) : 0;
}

int tio_rt_submit_read(struct tio_runtime *rt, uint32_t t) {
    int rc;
    void *fence = fence_now(rt, t, &rc);
    /* the event the engine records once the read's copies are issued (`done`) */
    void *done = rc < 0 ? NULL : tensor_event(rt, rt->landed, t, 0, "done event", &rc);
    if (rc < 0) {
        return rc;
    }
    for (;;) {
        int urgent = (rt->tflags[t] & TF_URGENT) != 0;
        rc = tio_engine_read(rt->engine, &(struct tio_engine_read_request){
                                             .struct_size = sizeof(struct tio_engine_read_request),
                                             .tensor_id = rt->eid[t],
                                             .dst = rt->ptr[t],
                                             .bytes = rt->v.tensor_bytes[t],
                                             .mem = rt->mem,
                                             .priority = urgent ? TIO_PRIO_URGENT : TIO_PRIO_NORMAL,
                                             .tag = TAG_READ | t,
                                             .fence = fence,
                                             .done = done });
        if (rc == -EAGAIN && rt->inflight > 0) {
            if ((rc = tio_rt_reap(rt, 1)) < 0) {
                return rc;
            }
            continue;
        }
        if (rc < 0) {
            fail(rt, rc, "read request", t, tio_last_error());
            return tio_rt_sticky(rt);
        }
        rt->inflight++;
        rt->reads_inflight++;
        rt->state[t] = ST_READING;
        tio_rt_touch(rt, t);
        return 0;
    }
}
