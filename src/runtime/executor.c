/* The plan executor (teraio/runtime.h): a per-tensor state machine driven kernel by kernel. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <teraio/alloc.h>
#include <teraio/runtime.h>

#include "../common/common_impl.h"
#include "../dl/cudart_shim.h"

enum tensor_state {
    ST_ABSENT = 0,      /* intermediate not created yet or already dead */
    ST_RESIDENT = 1,    /* memory allocated (bound or not) */
    ST_WRITING = 2,     /* offload write in flight, memory still there */
    ST_STORED = 3,      /* memory released, copy in the engine */
    ST_MATERIALIZE = 4, /* MATERIALIZE returned, waiting for bind */
    ST_READING = 5      /* read in flight into bound memory */
};

/* Per-tensor flags. */
enum {
    TF_GLOBAL = 1u << 0,   /* alive across iterations */
    TF_PINNED = 1u << 1,   /* never moved (pinned, or used by a COMM kernel) */
    TF_HAS_COPY = 1u << 2, /* the engine holds a copy */
    TF_DIRTY = 1u << 3,    /* written since that copy */
    TF_KEEP = 1u << 4,     /* offload in flight but needed again: do not release */
    TF_DONE = 1u << 5,     /* write completed, RELEASE pending */
    TF_URGENT = 1u << 6,   /* read must be urgent (a kernel needs it now) */
    TF_LANDING = 1u << 7   /* stream-ordered: read completed, its bytes land on the device when
                              landed[t] does (the compute stream must wait on it before any use
                              of the memory, its release included) */
};

#define TAG_READ (UINT64_C(1) << 63)

struct tio_runtime {
    const struct tio_trace *trace;
    const struct tio_plan *plan;
    struct tio_engine *engine;
    struct tio_trace_view v;
    const struct tio_move *moves;
    size_t n_moves;
    size_t *move_off; /* [N + 1] moves triggered at kernel k: [move_off[k], move_off[k+1]) */
    uint64_t *first_use, *last_use; /* [n_tensors] kernel indices (UINT64_MAX: never used) */
    uint64_t *last_real;            /* [n_tensors] last use by a kernel that is not a free marker */
    uint8_t *is_free;               /* [n_kernels] 1: a TIO_RUNTIME_FREE_KERNEL marker */
    uint64_t *next_of_use; /* [n_uses] next kernel after this use's that really uses the tensor */
    uint64_t *first_real;  /* [n_tensors] first use by a kernel that is not a free marker */
    uint64_t *cursor;      /* [n_tensors] next real use at or after next_k (UINT64_MAX: none) */
    uint32_t *victims;     /* [n_tensors] scratch: the demand offloads of one kernel */
    int32_t demand_tier;   /* params.demand_tier */
    int has_ssd;           /* the engine has SSD directories */
    uint8_t *state;        /* [n_tensors] enum tensor_state */
    uint32_t *tflags;      /* [n_tensors] TF_* */
    void **ptr;            /* [n_tensors] bound memory or NULL */
    uint64_t budget;       /* bytes, 0 = none */
    uint64_t id_base;      /* engine tensor id = id_base + trace id (unless adopted) */
    uint64_t *eid;         /* [n_tensors] engine tensor id */
    int32_t mem;
    /* Stream-ordered execution (params.stream_ordered): kernels are queued on `stream` and may
     * not have run yet when the executor is called; each request that touches device memory
     * waits (on the engine's threads) for an event recorded on `stream` when it was issued. */
    const struct tio_cudart_api *cu; /* non-NULL when stream-ordered */
    tio_cuda_stream stream;
    tio_cuda_event *fence;  /* [n_tensors] created on first use; one request per tensor at once */
    tio_cuda_event *landed; /* [n_tensors] the reads' done events (TF_LANDING) */
    uint64_t next_k;        /* the kernel expected next */
    int in_iter;            /* between begin_iteration and end_iteration */
    int steady;             /* the plan's state at iteration start has been established */
    size_t inflight;        /* engine requests outstanding */
    int failed;             /* sticky engine failure */
    int fail_rc;
    char fail_msg[512];
    struct tio_runtime_stats st;
};

struct tio_runtime_params tio_runtime_params_default(void) {
    struct tio_runtime_params p;
    memset(&p, 0, sizeof p);
    p.mem = TIO_MEM_HOST;
    return p;
}

static int sticky(struct tio_runtime *rt) {
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

/* Forget the engine's copy of t (best effort: a failure only leaks its extents until exit). */
static void drop_copy(struct tio_runtime *rt, uint32_t t) {
    if (tio_engine_drop(rt->engine, rt->eid[t]) < 0) {
        TIO_LOG_DEBUG("runtime: drop of tensor %u: %s", t, tio_last_error());
    }
}

static void add_resident(struct tio_runtime *rt, uint32_t t) {
    rt->st.resident_bytes += rt->v.tensor_bytes[t];
}

static void sub_resident(struct tio_runtime *rt, uint32_t t) {
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
        rt->tflags[t] &= ~(uint32_t)(TF_DONE | TF_KEEP);
        if (!is_read) {
            rt->tflags[t] &= ~(uint32_t)TF_HAS_COPY;
        }
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
        rt->tflags[t] &= ~(uint32_t)TF_DIRTY;
        rt->st.offloads++;
        rt->st.bytes_offloaded += bytes;
        if (rt->tflags[t] & TF_KEEP) {
            rt->state[t] = ST_RESIDENT;
            rt->tflags[t] &= ~(uint32_t)TF_KEEP;
        } else {
            rt->tflags[t] |= TF_DONE; /* stays WRITING until the RELEASE is handed out */
        }
    }
}

/* Reap completions: wait for at least `min` (0: poll only). */
static int reap(struct tio_runtime *rt, size_t min) {
    struct tio_completion c[64];
    for (;;) {
        size_t want = min > 64 ? 64 : min;
        if (want > rt->inflight) {
            want = rt->inflight;
        }
        int n = want ? tio_engine_wait(rt->engine, c, want, 64, -1)
                     : tio_engine_poll(rt->engine, c, 64);
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

/* Wait until tensor t has no request in flight; the time counts as a stall. */
static int wait_tensor(struct tio_runtime *rt, uint32_t t, double *acc) {
    double t0 = tio_now_s();
    while ((rt->state[t] == ST_READING ||
            (rt->state[t] == ST_WRITING && !(rt->tflags[t] & TF_DONE))) &&
           rt->inflight > 0) {
        int rc = reap(rt, 1);
        if (rc < 0) {
            return rc;
        }
    }
    *acc += tio_now_s() - t0;
    return 0;
}

static int
push(struct tio_rt_action *out, size_t max, size_t *n, uint32_t t, int32_t kind, uint64_t bytes) {
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

/* A read of t completed with its bytes still on the way (TF_LANDING): make the compute stream
 * wait for them, so no kernel launched from now on (nor the caching allocator's next user of
 * the memory, once it is released) sees the memory before they land. */
static int settle(struct tio_runtime *rt, uint32_t t) {
    if (!(rt->tflags[t] & TF_LANDING)) {
        return 0;
    }
    rt->tflags[t] &= ~(uint32_t)TF_LANDING;
    int err = rt->cu->stream_wait_event(rt->stream, rt->landed[t], 0);
    if (err) {
        char d[96];
        (void)snprintf(d, sizeof d, "cudaStreamWaitEvent on its read: CUDA error %d", err);
        fail(rt, TIO_ECUDA, "read", t, d);
        return sticky(rt);
    }
    return 0;
}

static int settle_all(struct tio_runtime *rt) {
    int rc = 0;
    for (uint32_t t = 0; t < rt->v.n_tensors && rc == 0; t++) {
        rc = settle(rt, t);
    }
    return rc;
}

/* Hand out RELEASE for every completed, not-kept offload. */
static int releases(struct tio_runtime *rt, struct tio_rt_action *out, size_t max, size_t *n) {
    for (uint32_t t = 0; t < rt->v.n_tensors; t++) {
        if (rt->state[t] == ST_WRITING && (rt->tflags[t] & TF_DONE)) {
            int rc = settle(rt, t); /* a clean offload of a tensor still landing */
            if (rc == 0) {
                rc = push(out, max, n, t, TIO_RT_RELEASE, rt->v.tensor_bytes[t]);
            }
            if (rc < 0) {
                return rc;
            }
            rt->tflags[t] &= ~(uint32_t)TF_DONE;
            rt->state[t] = ST_STORED;
            rt->ptr[t] = NULL;
            rt->st.stored_bytes += rt->v.tensor_bytes[t];
            sub_resident(rt, t);
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
        *rc = sticky(rt);
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
    int rc;
    void *fence = fence_now(rt, t, &rc);
    if (rc < 0) {
        return rc;
    }
    for (;;) {
        rc = tio_engine_write_fenced(rt->engine, rt->eid[t], rt->ptr[t], rt->v.tensor_bytes[t],
                                     rt->mem, tier, urgent ? TIO_PRIO_URGENT : TIO_PRIO_NORMAL,
                                     (uint64_t)t, fence);
        if (rc == -EAGAIN && rt->inflight > 0) {
            if ((rc = reap(rt, 1)) < 0) {
                return rc;
            }
            continue;
        }
        if (rc == -ENOSPC && soft) {
            return rc;
        }
        if (rc < 0) {
            fail(rt, rc, "write request", t, tio_last_error());
            return sticky(rt);
        }
        rt->inflight++;
        return 0;
    }
}

/* submit_write, soft; a host-tier write that finds no free extent large enough (the planner and
 * demand_tier count bytes, the engine needs one extent) goes to the SSDs when `to_ssd` allows it
 * and there are any, counted in tier_fallbacks. -ENOSPC when no tier took it. */
static int write_or_ssd(struct tio_runtime *rt, uint32_t t, int32_t tier, int urgent, int to_ssd) {
    int rc = submit_write(rt, t, tier, urgent, 1);
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
static int planned_write(struct tio_runtime *rt, uint32_t t, int32_t tier, int urgent) {
    int rc = write_or_ssd(rt, t, tier, urgent, 1);
    if (rc == -ENOSPC) {
        TIO_LOG_DEBUG("runtime: offload of tensor %u kept resident: %s", t, tio_last_error());
        rt->state[t] = ST_RESIDENT;
        rt->st.tier_full_kept++;
        return 1;
    }
    return rc;
}

/* Bytes of completed offloads whose RELEASE has not been handed out yet. */
static uint64_t pending_release(const struct tio_runtime *rt) {
    uint64_t pending = 0;
    for (uint32_t t = 0; t < rt->v.n_tensors; t++) {
        if (rt->state[t] == ST_WRITING && (rt->tflags[t] & TF_DONE)) {
            pending += rt->v.tensor_bytes[t];
        }
    }
    return pending;
}

/* Reorder out[0..n) so that the RELEASE actions out[m..n) come before the MATERIALIZE actions
 * out[0..m) (a caller performing them in order frees memory before allocating). */
static void releases_first(struct tio_rt_action *out, size_t m, size_t n) {
    if (m == 0 || m == n) {
        return;
    }
    /* Rotate left by m: three reversals. */
    struct tio_rt_action tmp;
    size_t spans[3][2] = { { 0, m }, { m, n }, { 0, n } };
    for (int s = 0; s < 3; s++) {
        for (size_t i = spans[s][0], j = spans[s][1]; i + 1 < j; i++, j--) {
            tmp = out[i];
            out[i] = out[j - 1];
            out[j - 1] = tmp;
        }
    }
}

/* How far away tensor t's next use is, seen from the current kernel (larger: better victim). */
static uint64_t next_use_distance(const struct tio_runtime *rt, uint32_t t) {
    if (rt->cursor[t] != UINT64_MAX) {
        return rt->cursor[t];
    }
    if (rt->tflags[t] & TF_GLOBAL) { /* next iteration */
        return rt->first_real[t] == UINT64_MAX ? UINT64_MAX - 1
                                               : rt->v.n_kernels + rt->first_real[t];
    }
    return UINT64_MAX; /* only its free marker is left: never read again in this iteration */
}

static int32_t demand_tier(struct tio_runtime *rt, uint32_t t) {
    if (rt->demand_tier != 0) {
        return rt->demand_tier;
    }
    struct tio_engine_stats es;
    (void)tio_engine_stats(rt->engine, &es);
    if (es.host_capacity_bytes >= es.host_used_bytes &&
        es.host_capacity_bytes - es.host_used_bytes >= rt->v.tensor_bytes[t]) {
        return TIO_TIER_HOST;
    }
    return rt->has_ssd ? TIO_TIER_SSD : TIO_TIER_HOST; /* no SSD: the host tier says it is full */
}

/*
 * The tracked resident bytes exceed the budget before kernel k although no planned offload is
 * in flight: write resident tensors k does not use, furthest next use first, until they fit;
 * wait for those writes (a tensor is released only once its copy is complete). The RELEASE
 * actions are handed out by the caller's releases().
 */
static int
demand_offload(struct tio_runtime *rt, uint64_t k, struct tio_rt_action *out, size_t *n) {
    uint64_t pending = pending_release(rt);
    if (rt->st.resident_bytes - pending <= rt->budget) {
        return 0;
    }
    uint64_t over = rt->st.resident_bytes - pending - rt->budget;
    size_t nv = 0;
    int rc = 0;
    while (over > 0) {
        uint32_t best = UINT32_MAX;
        uint64_t best_d = 0;
        for (uint32_t t = 0; t < rt->v.n_tensors; t++) {
            /* a prefetch handed out by this call and not performed yet can be taken back */
            int fresh =
                rt->state[t] == ST_MATERIALIZE && !rt->ptr[t] && !(rt->tflags[t] & TF_URGENT);
            if ((rt->state[t] != ST_RESIDENT || !rt->ptr[t]) && !fresh) {
                continue;
            }
            if ((rt->tflags[t] & TF_PINNED) || rt->v.tensor_bytes[t] == 0 || rt->cursor[t] == k) {
                continue;
            }
            uint64_t d = next_use_distance(rt, t);
            if (best == UINT32_MAX || d > best_d ||
                (d == best_d && rt->v.tensor_bytes[t] > rt->v.tensor_bytes[best])) {
                best = t;
                best_d = d;
            }
        }
        if (best == UINT32_MAX) {
            break;
        }
        uint32_t t = best;
        uint64_t b = rt->v.tensor_bytes[t];
        over = over > b ? over - b : 0;
        if (rt->state[t] == ST_MATERIALIZE) { /* defer the prefetch: it stays stored */
            size_t j = 0;
            while (j < *n && !(out[j].tensor == t && out[j].kind == TIO_RT_MATERIALIZE)) {
                j++;
            }
            if (j < *n) {
                memmove(&out[j], &out[j + 1], (*n - j - 1) * sizeof *out);
                (*n)--;
            }
            rt->state[t] = ST_STORED;
            sub_resident(rt, t);
            rt->st.deferred_prefetches++;
            continue;
        }
        rt->st.demand_offloads++;
        rt->state[t] = ST_WRITING;
        rt->tflags[t] &= ~(uint32_t)(TF_DONE | TF_KEEP);
        if ((rt->tflags[t] & TF_HAS_COPY) && !(rt->tflags[t] & TF_DIRTY)) {
            rt->tflags[t] |= TF_DONE; /* clean: the stored copy is identical */
            rt->st.offloads++;
            rt->st.clean_offloads++;
            continue;
        }
        /* a tier chosen in params.demand_tier is not overridden */
        rc = write_or_ssd(rt, t, demand_tier(rt, t), 1, rt->demand_tier == 0);
        if (rc == -ENOSPC) { /* no room anywhere: keep it, run above the budget */
            TIO_LOG_DEBUG("runtime: demand offload of tensor %u: %s", t, tio_last_error());
            rt->state[t] = ST_RESIDENT;
            rt->st.demand_offloads--;
            over += b;
            rc = 0;
            break;
        }
        if (rc < 0) {
            return rc;
        }
        rt->st.bytes_demand_offloaded += b;
        rt->victims[nv++] = t;
    }
    for (size_t i = 0; i < nv && rc == 0; i++) {
        rc = wait_tensor(rt, rt->victims[i], &rt->st.demand_stall_s);
    }
    if (rc < 0) {
        return rc;
    }
    if (over > 0) {
        rt->st.over_budget_kernels++;
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
    return rt->failed ? sticky(rt) : 0;
}

static int submit_read(struct tio_runtime *rt, uint32_t t) {
    int rc;
    void *fence = fence_now(rt, t, &rc);
    /* the event the engine records once the read's copies are issued (`done`) */
    void *done = rc < 0 ? NULL : tensor_event(rt, rt->landed, t, 0, "done event", &rc);
    if (rc < 0) {
        return rc;
    }
    for (;;) {
        int urgent = (rt->tflags[t] & TF_URGENT) != 0;
        rc = tio_engine_read_fenced(rt->engine, rt->eid[t], rt->ptr[t], rt->v.tensor_bytes[t],
                                    rt->mem, urgent ? TIO_PRIO_URGENT : TIO_PRIO_NORMAL,
                                    TAG_READ | t, fence, done);
        if (rc == -EAGAIN && rt->inflight > 0) {
            if ((rc = reap(rt, 1)) < 0) {
                return rc;
            }
            continue;
        }
        if (rc < 0) {
            fail(rt, rc, "read request", t, tio_last_error());
            return sticky(rt);
        }
        rt->inflight++;
        rt->state[t] = ST_READING;
        return 0;
    }
}

int tio_runtime_new(const struct tio_runtime_params *p, struct tio_runtime **out) {
    if (!p || !out) {
        return tio_set_error(TIO_EINVAL, "runtime: params and out must not be NULL");
    }
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
    int rc = tio_plan_check_trace(p->plan, p->trace);
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
    rt->last_real = tio_calloc(nt ? nt : 1, sizeof *rt->last_real);
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
    }
    {
        struct tio_engine_stats es;
        rt->has_ssd = tio_engine_stats(p->engine, &es) == 0 && es.ssd_dirs > 0;
    }
    if (!rt->move_off || !rt->first_use || !rt->last_use || !rt->state || !rt->tflags || !rt->ptr ||
        !rt->last_real || !rt->is_free || !rt->next_of_use || !rt->first_real || !rt->cursor ||
        !rt->victims || !rt->eid || (p->stream_ordered && (!rt->fence || !rt->landed))) {
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
        rt->first_use[t] = UINT64_MAX;
        rt->last_use[t] = 0;
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
    for (size_t k = 0; k < nk; k++) {
        int comm = (rt->v.kernel_flags[k] & TIO_KERNEL_COMM) != 0;
        for (uint64_t u = rt->v.kernel_use_offset[k]; u < rt->v.kernel_use_offset[k + 1]; u++) {
            uint32_t t = rt->v.use_tensor[u];
            if (rt->first_use[t] == UINT64_MAX) {
                rt->first_use[t] = k;
            }
            rt->last_use[t] = k;
            if (!rt->is_free[k]) {
                rt->last_real[t] = k;
            }
            if (comm) {
                rt->tflags[t] |= TF_PINNED;
            }
        }
    }
    /* Next real use after each use (free markers are not uses that need the tensor). */
    for (size_t t = 0; t < nt; t++) {
        rt->first_real[t] = UINT64_MAX;
    }
    for (size_t k = nk; k-- > 0;) {
        const uint64_t u0 = rt->v.kernel_use_offset[k], u1 = rt->v.kernel_use_offset[k + 1];
        for (uint64_t u = u0; u < u1; u++) {
            rt->next_of_use[u] = rt->first_real[rt->v.use_tensor[u]];
        }
        if (!rt->is_free[k]) {
            for (uint64_t u = u0; u < u1; u++) {
                rt->first_real[rt->v.use_tensor[u]] = k;
            }
        }
    }
    memcpy(rt->cursor, rt->first_real, (nt ? nt : 1) * sizeof *rt->cursor);
    for (uint32_t t = 0; t < nt; t++) {
        rt->eid[t] = rt->id_base + t;
        if (rt->tflags[t] & TF_GLOBAL) {
            rt->state[t] = ST_RESIDENT;
            add_resident(rt, t);
        }
    }
    *out = rt;
    return 0;
}

static void drain_quiet(struct tio_runtime *rt) {
    while (rt->inflight > 0) {
        if (reap(rt, 1) < 0) {
            break;
        }
    }
}

void tio_runtime_free(struct tio_runtime *rt) {
    if (!rt) {
        return;
    }
    if (rt->engine && rt->tflags && rt->eid) {
        drain_quiet(rt);
        for (uint32_t t = 0; t < rt->v.n_tensors; t++) {
            if (rt->tflags[t] & TF_HAS_COPY) {
                drop_copy(rt, t);
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
        return tio_set_error(TIO_ESTATE, "runtime: bind: tensor %u has I/O in flight", tensor);
    }
    rt->ptr[tensor] = ptr;
    return 0;
}

static int drain(struct tio_runtime *rt) {
    while (rt->inflight > 0) {
        int rc = reap(rt, rt->inflight);
        if (rc < 0) {
            return rc;
        }
    }
    return 0;
}

/* Globals whose last move of the iteration is an offload are stored when an iteration starts (the
 * plan's steady state). Before the first iteration they are all resident: write them now. */
static int
enter_steady_state(struct tio_runtime *rt, struct tio_rt_action *out, size_t max, size_t *n) {
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
            rc = planned_write(rt, t, last_to[t], 0);
            rc = rc > 0 ? 0 : rc;
        }
    }
    tio_free(last_to);
    double t0 = tio_now_s();
    if (rc == 0) {
        rc = drain(rt);
    }
    rt->st.pressure_stall_s += tio_now_s() - t0;
    if (rc == 0 && rt->failed) {
        rc = sticky(rt);
    }
    if (rc == 0) {
        rc = releases(rt, out, max, n);
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
    rt->eid[t] = engine_id;
    rt->state[t] = ST_STORED;
    rt->tflags[t] |= TF_HAS_COPY;
    rt->tflags[t] &= ~(uint32_t)TF_DIRTY;
    sub_resident(rt, t);
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
        return sticky(rt);
    }
    if (rt->in_iter || rt->inflight > 0) {
        return tio_set_error(TIO_ESTATE, "runtime: give_stored: tensor %u: only between iterations",
                             t);
    }
    if (rt->state[t] != ST_STORED || !(rt->tflags[t] & TF_HAS_COPY)) {
        return 0;
    }
    *engine_id = rt->eid[t];
    rt->tflags[t] &= ~(uint32_t)(TF_HAS_COPY | TF_DIRTY);
    rt->state[t] = ST_ABSENT; /* no longer this executor's: neither resident nor stored */
    rt->ptr[t] = NULL;
    uint64_t b = rt->v.tensor_bytes[t];
    rt->st.stored_bytes = rt->st.stored_bytes >= b ? rt->st.stored_bytes - b : 0;
    return 1;
}

int tio_runtime_begin_iteration(struct tio_runtime *rt, struct tio_rt_action *out, size_t max) {
    if (rt->failed) {
        return sticky(rt);
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
    return (int)n;
}

static int check_k(struct tio_runtime *rt, uint64_t k, const char *fn) {
    if (rt->failed) {
        return sticky(rt);
    }
    if (!rt->in_iter || k != rt->next_k || k >= rt->v.n_kernels) {
        return tio_set_error(TIO_ESTATE, "runtime: %s(%llu): expected kernel %llu of %zu%s", fn,
                             (unsigned long long)k, (unsigned long long)rt->next_k, rt->v.n_kernels,
                             rt->in_iter ? "" : " (no iteration begun)");
    }
    return 0;
}

int tio_runtime_before_kernel(struct tio_runtime *rt,
                              uint64_t k,
                              struct tio_rt_action *out,
                              size_t max) {
    int rc = check_k(rt, k, "before_kernel");
    if (rc < 0) {
        return rc;
    }
    double t0 = tio_now_s();
    size_t n = 0;
    if ((rc = reap(rt, 0)) < 0) {
        return rc;
    }
    const uint64_t u0 = rt->v.kernel_use_offset[k], u1 = rt->v.kernel_use_offset[k + 1];
    /* Tensors created by kernel k start resident. */
    for (uint64_t u = u0; u < u1; u++) {
        uint32_t t = rt->v.use_tensor[u];
        if (rt->state[t] == ST_ABSENT && rt->first_use[t] == k) {
            rt->state[t] = ST_RESIDENT;
            rt->tflags[t] &= ~(uint32_t)(TF_HAS_COPY | TF_DIRTY);
            add_resident(rt, t);
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
            if ((rt->tflags[t] & TF_HAS_COPY) && !(rt->tflags[t] & TF_DIRTY)) {
                rt->state[t] = ST_WRITING; /* clean: the stored copy is identical */
                rt->tflags[t] |= TF_DONE;
                rt->st.offloads++;
                rt->st.clean_offloads++;
                continue;
            }
            rt->state[t] = ST_WRITING;
            rt->tflags[t] &= ~(uint32_t)(TF_DONE | TF_KEEP);
            if ((rc = planned_write(rt, t, m->to, (m->flags & TIO_MOVE_URGENT) != 0)) < 0) {
                return rc;
            }
        } else { /* prefetch */
            /* A dead intermediate (only its free marker is left) is never read back. */
            int dead = !(rt->tflags[t] & TF_GLOBAL) && rt->last_real[t] < k;
            if (!dead && rt->state[t] == ST_STORED) {
                rt->state[t] = ST_MATERIALIZE;
                add_resident(rt, t);
                if ((rc = push(out, max, &n, t, TIO_RT_MATERIALIZE, rt->v.tensor_bytes[t])) < 0) {
                    return rc;
                }
            } else if (!dead && rt->state[t] == ST_WRITING) {
                if (rt->tflags[t] & TF_DONE) { /* completed but not released: keep it */
                    rt->tflags[t] &= ~(uint32_t)TF_DONE;
                    rt->state[t] = ST_RESIDENT;
                } else {
                    rt->tflags[t] |= TF_KEEP;
                }
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
            rt->st.urgent_reads++;
            add_resident(rt, t);
            if ((rc = push(out, max, &n, t, TIO_RT_MATERIALIZE, rt->v.tensor_bytes[t])) < 0) {
                return rc;
            }
            break;
        case ST_MATERIALIZE:
            rt->tflags[t] |= TF_URGENT;
            break;
        case ST_WRITING:
            if (rt->tflags[t] & TF_DONE) {
                rt->tflags[t] &= ~(uint32_t)TF_DONE;
                rt->state[t] = ST_RESIDENT;
            } else {
                rt->tflags[t] |= TF_KEEP;
                if ((rc = wait_tensor(rt, t, &rt->st.stall_s)) < 0) {
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
        double p0 = tio_now_s();
        for (;;) {
            if (rt->st.resident_bytes - pending_release(rt) <= rt->budget || rt->inflight == 0) {
                break;
            }
            int writing = 0;
            for (uint32_t t = 0; t < rt->v.n_tensors && !writing; t++) {
                writing = rt->state[t] == ST_WRITING && !(rt->tflags[t] & (TF_DONE | TF_KEEP));
            }
            if (!writing) {
                break;
            }
            if ((rc = reap(rt, 1)) < 0) {
                return rc;
            }
        }
        rt->st.pressure_stall_s += tio_now_s() - p0;
        /* Still above: the plan did not schedule enough; offload on demand. */
        if ((rc = demand_offload(rt, k, out, &n)) < 0) {
            return rc;
        }
    }
    size_t n_mat = n;
    if ((rc = releases(rt, out, max, &n)) < 0) {
        return rc;
    }
    releases_first(out, n_mat, n);
    rt->st.io_issue_s += tio_now_s() - t0;
    if (rt->failed) {
        return sticky(rt);
    }
    return (int)n;
}

int tio_runtime_ready(struct tio_runtime *rt, uint64_t k) {
    int rc = check_k(rt, k, "ready");
    if (rc < 0) {
        return rc;
    }
    double t0 = tio_now_s();
    for (uint32_t t = 0; t < rt->v.n_tensors; t++) {
        if (rt->state[t] != ST_MATERIALIZE) {
            continue;
        }
        if (!rt->ptr[t]) {
            return tio_set_error(TIO_ESTATE,
                                 "runtime: ready(%llu): tensor %u was materialised but not bound",
                                 (unsigned long long)k, t);
        }
        if ((rc = submit_read(rt, t)) < 0) {
            return rc;
        }
    }
    double io = tio_now_s() - t0;
    for (uint64_t u = rt->v.kernel_use_offset[k]; u < rt->v.kernel_use_offset[k + 1]; u++) {
        uint32_t t = rt->v.use_tensor[u];
        if (rt->state[t] == ST_READING && (rc = wait_tensor(rt, t, &rt->st.stall_s)) < 0) {
            return rc;
        }
        /* stream-ordered: the compute stream, not this thread, waits for the bytes to land */
        if ((rc = settle(rt, t)) < 0) {
            return rc;
        }
    }
    rt->st.io_issue_s += io;
    if (rt->failed) {
        return sticky(rt);
    }
    if (rt->st.resident_bytes > rt->st.peak_resident_bytes) {
        rt->st.peak_resident_bytes = rt->st.resident_bytes;
    }
    return 0;
}

/* A stored intermediate died: forget its copy; its memory was already released. */
static void retire_stored(struct tio_runtime *rt, uint32_t t) {
    uint64_t b = rt->v.tensor_bytes[t];
    rt->st.stored_bytes -= rt->st.stored_bytes >= b ? b : rt->st.stored_bytes;
    rt->state[t] = ST_ABSENT;
    rt->ptr[t] = NULL;
    if (rt->tflags[t] & TF_HAS_COPY) {
        drop_copy(rt, t);
    }
    rt->tflags[t] &= ~(uint32_t)(TF_HAS_COPY | TF_DIRTY | TF_URGENT);
}

int tio_runtime_forget(struct tio_runtime *rt, uint32_t tensor) {
    if (tensor >= rt->v.n_tensors) {
        return tio_set_error(TIO_EINVAL, "runtime: forget: tensor %u out of range", tensor);
    }
    uint32_t t = tensor;
    if (rt->tflags[t] & TF_GLOBAL) {
        return tio_set_error(TIO_EINVAL, "runtime: forget: tensor %u is global", t);
    }
    int src = settle(rt, t); /* its owner frees the memory on the compute stream */
    if (src < 0) {
        return src;
    }
    if (rt->state[t] == ST_WRITING || rt->state[t] == ST_READING) {
        double dummy = 0;
        int rc = wait_tensor(rt, t, &dummy);
        if (rc < 0) {
            return rc;
        }
        if (rt->state[t] == ST_WRITING) { /* completed: the memory is gone with the tensor */
            rt->tflags[t] &= ~(uint32_t)(TF_DONE | TF_KEEP);
            rt->state[t] = ST_RESIDENT;
        }
    }
    if (rt->state[t] == ST_STORED) {
        retire_stored(rt, t);
    } else if (rt->state[t] == ST_MATERIALIZE) {
        rt->state[t] = ST_STORED;
        sub_resident(rt, t);
        retire_stored(rt, t);
    } else if (rt->state[t] == ST_RESIDENT) {
        rt->state[t] = ST_ABSENT;
        rt->ptr[t] = NULL;
        sub_resident(rt, t);
        if (rt->tflags[t] & TF_HAS_COPY) {
            drop_copy(rt, t);
        }
        rt->tflags[t] &= ~(uint32_t)(TF_HAS_COPY | TF_DIRTY);
    }
    return rt->failed ? sticky(rt) : 0;
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
        }
        if (!rt->is_free[k]) {
            rt->cursor[t] = rt->next_of_use[u];
        }
        if (!(rt->tflags[t] & TF_GLOBAL) && rt->last_use[t] == k && rt->state[t] == ST_STORED) {
            retire_stored(rt, t);
        }
        if (!(rt->tflags[t] & TF_GLOBAL) && rt->last_use[t] == k && rt->state[t] == ST_RESIDENT) {
            rt->state[t] = ST_ABSENT;
            rt->ptr[t] = NULL;
            sub_resident(rt, t);
            if (rt->tflags[t] & TF_HAS_COPY) {
                drop_copy(rt, t);
                rt->tflags[t] &= ~(uint32_t)TF_HAS_COPY;
            }
        }
    }
    rt->next_k = k + 1;
    rt->st.kernels++;
    return 0;
}

int tio_runtime_end_iteration(struct tio_runtime *rt, struct tio_rt_action *out, size_t max) {
    if (rt->failed) {
        return sticky(rt);
    }
    if (!rt->in_iter || rt->next_k != rt->v.n_kernels) {
        return tio_set_error(TIO_ESTATE, "runtime: end_iteration after %llu of %zu kernels",
                             (unsigned long long)rt->next_k, rt->v.n_kernels);
    }
    double t0 = tio_now_s();
    int rc = drain(rt);
    rt->st.stall_s += tio_now_s() - t0;
    if (rc == 0) { /* what the caller does after the step sees every byte read in it */
        rc = settle_all(rt);
    }
    if (rc < 0) {
        return rc;
    }
    if (rt->failed) {
        return sticky(rt);
    }
    size_t n = 0;
    if ((rc = releases(rt, out, max, &n)) < 0) {
        return rc;
    }
    rt->in_iter = 0;
    rt->st.iterations++;
    return (int)n;
}

int tio_runtime_restore_begin(struct tio_runtime *rt, struct tio_rt_action *out, size_t max) {
    int rc = drain(rt);
    if (rc < 0) {
        return rc;
    }
    if (rt->failed) {
        return sticky(rt);
    }
    size_t n = 0;
    for (uint32_t t = 0; t < rt->v.n_tensors; t++) {
        if (rt->state[t] == ST_WRITING) { /* completed, never released: still in memory */
            rt->state[t] = ST_RESIDENT;
            rt->tflags[t] &= ~(uint32_t)(TF_DONE | TF_KEEP);
        } else if (rt->state[t] == ST_STORED || rt->state[t] == ST_MATERIALIZE) {
            if (rt->state[t] == ST_STORED) {
                add_resident(rt, t);
            }
            rt->state[t] = ST_MATERIALIZE;
            rt->tflags[t] |= TF_URGENT;
            if ((rc = push(out, max, &n, t, TIO_RT_MATERIALIZE, rt->v.tensor_bytes[t])) < 0) {
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
            if ((rc = submit_read(rt, t)) < 0) {
                return rc;
            }
        }
    }
    if ((rc = drain(rt)) < 0 || (rc = settle_all(rt)) < 0) {
        return rc;
    }
    if (rt->failed) {
        return sticky(rt);
    }
    /* Abandon the iteration: intermediates are forgotten (their owners hold them). */
    for (uint32_t t = 0; t < rt->v.n_tensors; t++) {
        if (!(rt->tflags[t] & TF_GLOBAL) && rt->state[t] != ST_ABSENT) {
            rt->state[t] = ST_ABSENT;
            rt->ptr[t] = NULL;
            sub_resident(rt, t);
            if (rt->tflags[t] & TF_HAS_COPY) {
                drop_copy(rt, t);
            }
            rt->tflags[t] &= ~(uint32_t)(TF_HAS_COPY | TF_DIRTY);
        }
    }
    rt->in_iter = 0;
    rt->steady = 0; /* everything is resident again: the next iteration re-enters it */
    return 0;
}

void tio_runtime_get_stats(const struct tio_runtime *rt, struct tio_runtime_stats *out) {
    *out = rt->st;
}

int tio_runtime_tensor_state(const struct tio_runtime *rt, uint32_t tensor) {
    return tensor < rt->v.n_tensors ? rt->state[tensor] : -1;
}
