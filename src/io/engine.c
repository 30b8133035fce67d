/*
 * The migration engine's public calls (include/teraio/io.h): argument checks, then the work
 * under mu (H1) with the helpers of the other engine_*.c files (engine_internal.h lists them
 * in reading order). Any thread may call these; a request is queued and handed to whoever
 * drives the backend (tio_eng_kick).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <teraio/units.h>

#include "common/common_impl.h"
#include "io/engine_internal.h"
#include "io/engine_ordered.h"

int tio_engine_reserve(struct tio_engine *e, uint64_t bytes) {
    if (!e) {
        return tio_set_error(TIO_EINVAL, "engine: NULL engine");
    }
    if (!e->nfiles) {
        return bytes ? tio_set_error(-ENOSPC, "engine: reserve %llu bytes: no SSD directory",
                                     (unsigned long long)bytes)
                     : 0;
    }
    uint64_t nch = (bytes + e->p.chunk_bytes - 1) / e->p.chunk_bytes;
    uint64_t per_dir = (nch + e->nfiles - 1) / e->nfiles * e->p.chunk_bytes;
    per_dir = TIO_MIN(per_dir, (bytes + TIO_IO_ALIGN - 1) & ~(uint64_t)(TIO_IO_ALIGN - 1));
    pthread_mutex_lock(&e->mu);
    int rc = 0;
    /* check every directory first so that a shortage changes nothing */
    for (uint32_t i = 0; i < e->nfiles && rc == 0; i++) {
        struct tio_swapfile *sf = &e->files[i];
        if (sf->size >= per_dir || !e->p.preallocate) {
            continue;
        }
        uint64_t delta = per_dir - sf->size, avail = tio_swapfile_fs_available(sf);
        if (avail < delta) {
            char a[32], b[32], c[32];
            rc = tio_set_error(-ENOSPC,
                               "engine: reserving %s over %u dir(s): needed %s (%llu bytes), "
                               "available %s (%llu bytes) on %s",
                               tio_format_bytes(bytes, c, sizeof c), e->nfiles,
                               tio_format_bytes(delta, a, sizeof a), (unsigned long long)delta,
                               tio_format_bytes(avail, b, sizeof b), (unsigned long long)avail,
                               sf->dir);
        }
    }
    for (uint32_t i = 0; i < e->nfiles && rc == 0; i++) {
        rc = tio_swapfile_grow(&e->files[i], per_dir, e->p.preallocate);
        if (rc < 0) {
            char detail[400];
            (void)snprintf(detail, sizeof detail, "%s", tio_last_error());
            rc = tio_set_error(rc, "engine: reserving %llu bytes: %s", (unsigned long long)bytes,
                               detail);
        }
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

static int check_submit(struct tio_engine *e,
                        const void *ptr,
                        uint64_t bytes,
                        int32_t mem,
                        int32_t priority,
                        const char *what) {
    if (!e) {
        return tio_set_error(TIO_EINVAL, "engine %s: NULL engine", what);
    }
    if (!bytes) {
        return tio_set_error(TIO_EINVAL, "engine %s: bytes is 0 (zero-byte transfers are errors)",
                             what);
    }
    if (!ptr) {
        return tio_set_error(TIO_EINVAL, "engine %s: ptr is NULL", what);
    }
    if (mem != TIO_MEM_HOST && mem != TIO_MEM_DEVICE) {
        return tio_set_error(TIO_EINVAL, "engine %s: mem %d is not a memory kind", what, mem);
    }
    if (priority != TIO_PRIO_NORMAL && priority != TIO_PRIO_URGENT) {
        return tio_set_error(TIO_EINVAL, "engine %s: priority %d is not urgent or normal", what,
                             priority);
    }
    if ((uintptr_t)ptr > UINTPTR_MAX - bytes) {
        return tio_set_error(TIO_EINVAL, "engine %s: ptr + bytes overflows", what);
    }
    return 0;
}

static int check_mem(struct tio_engine *e, int32_t mem, int32_t tier, const char *what) {
    if (mem != TIO_MEM_DEVICE) {
        return 0;
    }
    if (tier == TIO_TIER_SSD && !(e->ops->caps & TIO_ENGINE_CAP_DEVICE_MEM) &&
        !tio_eng_gpu_path(e, mem, tier)) {
        return tio_set_error(TIO_EUNAVAIL,
                             "engine %s: device memory needs a usable CUDA device when the engine "
                             "was made (%s), or the cufile or cuda backend (this engine uses %s)",
                             what, tio_cudart_reason(), e->ops->name);
    }
    if (tier == TIO_TIER_HOST && !tio_eng_host_mem_ok(e, TIO_MEM_DEVICE)) {
        return tio_set_error(TIO_EUNAVAIL,
                             "engine %s: device memory to the host tier needs "
                             "cudart with a usable device when the engine was made: %s",
                             what, tio_cudart_reason());
    }
    return 0;
}

/* Create, register and queue a request (under mu). */
static int enqueue(struct tio_engine *e,
                   struct tensor *t,
                   struct placement *pl,
                   int32_t op,
                   void *ptr,
                   uint64_t bytes,
                   int32_t mem,
                   int32_t prio,
                   uint64_t tag,
                   void *fence,
                   void *done) {
    struct request *rq = tio_calloc(1, sizeof(*rq));
    if (!rq) {
        return TIO_ENOMEM;
    }
    rq->chunk_left = tio_malloc(pl->nchunks * sizeof(*rq->chunk_left));
    rq->chunk_retries = tio_calloc(pl->nchunks, sizeof(*rq->chunk_retries));
    if (!rq->chunk_left || !rq->chunk_retries) {
        tio_eng_request_free(rq);
        return TIO_ENOMEM;
    }
    for (uint32_t c = 0; c < pl->nchunks; c++) {
        rq->chunk_left[c] = tio_eng_chunk_len(e, pl, c);
    }
    rq->tag = tag;
    rq->fence = fence;
    rq->done = done;
    rq->gpu = tio_eng_gpu_path(e, mem, pl->tier);
    rq->op = op;
    rq->mem = mem;
    rq->prio = prio;
    rq->buf = ptr;
    rq->bytes = bytes;
    rq->t = t;
    rq->pl = pl;
    rq->anext = e->active;
    if (e->active) {
        e->active->aprev = rq;
    }
    e->active = rq;
    rq->seq = e->st.requests_submitted;
    tio_eng_queue_push(e, rq, 0);
    e->outstanding++;
    e->st.requests_submitted++;
    tio_eng_kick(e, prio == TIO_PRIO_URGENT);
    return 0;
}

/* A fence needs cudart (its events are queried by the engine's threads). */
static int check_fence(const void *fence, const char *what) {
    if (fence && !tio_cudart()) {
        return tio_set_error(TIO_EUNAVAIL, "engine %s: a fence needs cudart: %s", what,
                             tio_cudart_reason());
    }
    return 0;
}

/* A write's buffer as the request's (shared with reads) pointer type: the engine only reads
 * it (a union rather than a cast through an integer, which hides it from the optimizer). */
static void *writable(const void *ptr) {
    union {
        const void *c;
        void *m;
    } u = { .c = ptr };
    return u.m;
}

static int write_request(struct tio_engine *e,
                         uint64_t tensor_id,
                         const void *ptr,
                         uint64_t bytes,
                         int32_t mem,
                         int32_t tier,
                         int32_t priority,
                         uint64_t tag,
                         void *fence,
                         void *done) {
    int rc = check_submit(e, ptr, bytes, mem, priority, "write");
    if (rc == 0) {
        rc = check_fence(fence, "write");
    }
    if (rc == 0 && done &&
        (tier != TIO_TIER_HOST || !e->host_bst || !tio_eng_gpu_path(e, mem, tier))) {
        rc = tio_set_error(TIO_EINVAL,
                           "engine write: a done event needs device memory, the host tier and a "
                           "usable CUDA device when the engine was made");
    }
    if (rc < 0) {
        return rc;
    }
    if (tier != TIO_TIER_SSD && tier != TIO_TIER_HOST) {
        return tio_set_error(TIO_EINVAL, "engine write: tier %d is not SSD (%d) or HOST (%d)", tier,
                             TIO_TIER_SSD, TIO_TIER_HOST);
    }
    if (tier == TIO_TIER_SSD && !e->nfiles) {
        return tio_set_error(TIO_EUNAVAIL, "engine write: no SSD directory configured");
    }
    if (tier == TIO_TIER_HOST && !e->host_bst) {
        return tio_set_error(TIO_EUNAVAIL, "engine write: no host tier (host_tier_bytes is 0)");
    }
    rc = check_mem(e, mem, tier, "write");
    if (rc < 0) {
        return rc;
    }
    pthread_mutex_lock(&e->mu);
    if (e->outstanding >= e->p.max_requests) {
        uint32_t o = e->outstanding;
        pthread_mutex_unlock(&e->mu);
        return tio_set_error(-EAGAIN,
                             "engine write: %u requests outstanding (max_requests); reap "
                             "completions first",
                             o);
    }
    struct tensor *t = tio_eng_tensor_get(e, tensor_id);
    if (!t) {
        pthread_mutex_unlock(&e->mu);
        return TIO_ENOMEM;
    }
    if (t->pending || t->readers) {
        pthread_mutex_unlock(&e->mu);
        return tio_set_error(TIO_ESTATE, "engine write: tensor %llu has a request in flight",
                             (unsigned long long)tensor_id);
    }
    struct placement *pl = NULL;
    rc = tio_eng_placement_new(e, tensor_id, bytes, tier, &pl);
    if (rc >= 0) {
        t->pending = pl;
        rc = enqueue(e, t, pl, TIO_IO_OP_WRITE, writable(ptr), bytes, mem, priority, tag, fence,
                     done);
        if (rc < 0) {
            t->pending = NULL;
            tio_eng_placement_free(e, pl);
        }
    }
    if (rc < 0) {
        tio_eng_tensor_maybe_remove(e, t);
    }
    tio_eng_unlock_signal(e); /* kick may have completed requests */
    return rc;
}

static int engine_read(struct tio_engine *e,
                       uint64_t tensor_id,
                       void *ptr,
                       uint64_t bytes,
                       int32_t mem,
                       int32_t priority,
                       uint64_t tag,
                       void *fence,
                       void *done) {
    int rc = check_submit(e, ptr, bytes, mem, priority, "read");
    if (rc == 0) {
        rc = check_fence(fence, "read");
    }
    if (rc == 0 && done && (mem != TIO_MEM_DEVICE || !e->gpu.cu)) {
        rc = tio_set_error(TIO_EINVAL,
                           "engine read: a done event needs device memory and a usable CUDA "
                           "device when the engine was made");
    }
    if (rc < 0) {
        return rc;
    }
    pthread_mutex_lock(&e->mu);
    struct tensor *t = tio_eng_tensor_find(e, tensor_id);
    if (!t || !t->stored) {
        pthread_mutex_unlock(&e->mu);
        return tio_set_error(TIO_ENOTFOUND, "engine read: tensor %llu is not stored%s",
                             (unsigned long long)tensor_id,
                             t && t->pending ? " yet (its write is in flight)" : "");
    }
    if (t->pending) {
        pthread_mutex_unlock(&e->mu);
        return tio_set_error(TIO_ESTATE, "engine read: tensor %llu is being rewritten",
                             (unsigned long long)tensor_id);
    }
    if (t->stored->bytes != bytes) {
        pthread_mutex_unlock(&e->mu);
        return tio_set_error(TIO_EINVAL, "engine read: tensor %llu has %llu bytes, not %llu",
                             (unsigned long long)tensor_id, (unsigned long long)t->stored->bytes,
                             (unsigned long long)bytes);
    }
    rc = check_mem(e, mem, t->stored->tier, "read");
    if (rc >= 0 && e->outstanding >= e->p.max_requests) {
        rc = tio_set_error(-EAGAIN,
                           "engine read: %u requests outstanding (max_requests); reap "
                           "completions first",
                           e->outstanding);
    }
    if (rc >= 0) {
        t->readers++;
        rc = enqueue(e, t, t->stored, TIO_IO_OP_READ, ptr, bytes, mem, priority, tag, fence, done);
        if (rc < 0) {
            t->readers--;
        }
    }
    tio_eng_unlock_signal(e); /* kick may have completed requests */
    return rc;
}

/* Under mu: tensor `tensor_id` if it has a stored copy, else NULL with *rc set to
 * TIO_ENOTFOUND ("<who>: tensor N is not stored"). */
static struct tensor *
find_stored(struct tio_engine *e, uint64_t tensor_id, const char *who, int *rc) {
    struct tensor *t = tio_eng_tensor_find(e, tensor_id);
    if (t && t->stored) {
        return t;
    }
    *rc = tio_set_error(TIO_ENOTFOUND, "%s: tensor %llu is not stored", who,
                        (unsigned long long)tensor_id);
    return NULL;
}

int tio_engine_drop(struct tio_engine *e, uint64_t tensor_id) {
    if (!e) {
        return tio_set_error(TIO_EINVAL, "engine drop: NULL engine");
    }
    pthread_mutex_lock(&e->mu);
    int rc = 0;
    struct tensor *t = find_stored(e, tensor_id, "engine drop", &rc);
    if (t && (t->pending || t->readers)) { /* H6: a request still uses the stored copy */
        rc = tio_set_error(TIO_ESTATE, "engine drop: tensor %llu has a request in flight",
                           (unsigned long long)tensor_id);
    } else if (t) {
        tio_eng_placement_free(e, t->stored);
        t->stored = NULL;
        tio_eng_tensor_maybe_remove(e, t);
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

int tio_engine_tensor_info(struct tio_engine *e,
                           uint64_t tensor_id,
                           uint64_t *bytes,
                           int32_t *tier) {
    if (!e) {
        return tio_set_error(TIO_EINVAL, "engine: NULL engine");
    }
    pthread_mutex_lock(&e->mu);
    int rc = 0;
    struct tensor *t = find_stored(e, tensor_id, "engine", &rc);
    if (t && bytes) {
        *bytes = t->stored->bytes;
    }
    if (t && tier) {
        *tier = t->stored->tier;
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

static size_t take_completions(struct tio_engine *e, struct tio_completion *out, size_t max) {
    size_t k = TIO_MIN(max, e->cq_count);
    for (size_t i = 0; i < k; i++) {
        out[i] = e->cq[e->cq_head];
        e->cq_head = (e->cq_head + 1) % e->cq_cap;
    }
    e->cq_count -= k;
    e->outstanding -= (uint32_t)k;
    return k;
}

int tio_engine_poll(struct tio_engine *e, struct tio_completion *out, size_t max) {
    if (!e || (max && !out)) {
        return tio_set_error(TIO_EINVAL, "engine poll: NULL argument");
    }
    pthread_mutex_lock(&e->mu);
    size_t k = take_completions(e, out, max);
    pthread_mutex_unlock(&e->mu);
    return (int)k;
}

int tio_engine_wait(
    struct tio_engine *e, struct tio_completion *out, size_t min, size_t max, int64_t timeout_ns) {
    if (!e || (max && !out)) {
        return tio_set_error(TIO_EINVAL, "engine wait: NULL argument");
    }
    if (min > max) {
        return tio_set_error(TIO_EINVAL, "engine wait: min %zu > max %zu", min, max);
    }
    if (max > INT32_MAX) {
        max = INT32_MAX;
    }
    struct timespec deadline;
    tio_deadline_in(timeout_ns, &deadline);
    pthread_mutex_lock(&e->mu);
    if (min > e->outstanding) {
        uint32_t o = e->outstanding;
        pthread_mutex_unlock(&e->mu);
        return tio_set_error(TIO_EINVAL,
                             "engine wait: min %zu exceeds the %u outstanding request(s)", min, o);
    }
    struct waiter self = { min, 0, e->waiters };
    e->waiters = &self;
    while (e->cq_count < min) {
        if (e->caller_drive && !e->driving && !e->stopping) {
            /* drive the backend ourselves: the kernel wakes this thread, not the progress
             * thread that would then wake us */
            int timed_out = tio_eng_drive_wait(e, min, timeout_ns, &deadline);
            tio_eng_drive_end(e, &self, 1);
            if (timed_out) {
                break;
            }
            if (e->cq_count >= min || e->p.queue_depth - e->nop_free) {
                continue;
            }
            /* nothing in flight: our completions went to another thread; wait below until
             * a completion arrives or the backend is handed back with work to drive */
        }
        /* every sleeping waiter is a driver candidate: whoever hands the backend back with
         * work in flight (a submitting caller, the progress thread, another waiter) wakes it.
         * (Only waiters that found the backend busy were, and one that found nothing in
         * flight slept through later requests while the progress thread carried them.) */
        self.want_drive = e->caller_drive;
        if (tio_eng_done_wake_due(e)) { /* completions we reaped may meet another waiter's min */
            pthread_cond_broadcast(&e->done_cv);
        }
        int rc = timeout_ns < 0 ? pthread_cond_wait(&e->done_cv, &e->mu)
                                : pthread_cond_timedwait(&e->done_cv, &e->mu, &deadline);
        if (rc == ETIMEDOUT) {
            break;
        }
    }
    struct waiter **pp = &e->waiters;
    while (*pp != &self) {
        pp = &(*pp)->next;
    }
    *pp = self.next;
    size_t k = take_completions(e, out, max);
    tio_eng_unlock_signal(e);
    return (int)k;
}

int tio_engine_cancel(struct tio_engine *e, uint64_t tag) {
    if (!e) {
        return tio_set_error(TIO_EINVAL, "engine cancel: NULL engine");
    }
    int n = 0;
    pthread_mutex_lock(&e->mu);
    struct request *rq = e->active;
    while (rq) {
        struct request *next = rq->anext;
        if (rq->tag == tag && !rq->canceled) {
            rq->canceled = 1;
            n++;
            if (rq->inflight == 0 && !rq->tail) { /* (a settling one is finished by its poll) */
                tio_eng_request_finish(e, rq);    /* nothing in the backend: complete it now */
            }
        }
        rq = next;
    }
    tio_eng_wake_progress(e, 1);
    tio_eng_unlock_signal(e);
    if (!n) {
        return tio_set_error(TIO_ENOTFOUND, "engine cancel: no outstanding request with tag %llu",
                             (unsigned long long)tag);
    }
    return n;
}

int tio_engine_stats(struct tio_engine *e, struct tio_engine_stats *out) {
    if (!e || !out) {
        return tio_set_error(TIO_EINVAL, "engine stats: NULL argument");
    }
    pthread_mutex_lock(&e->mu);
    *out = e->st;
    out->ssd_capacity_bytes = 0;
    out->ssd_used_bytes = 0;
    for (uint32_t i = 0; i < e->nfiles; i++) {
        out->ssd_capacity_bytes += e->files[i].size;
        out->ssd_used_bytes += e->files[i].ext.used;
    }
    out->ssd_dirs = e->nfiles;
    out->host_capacity_bytes = e->host_ext.capacity;
    out->host_used_bytes = e->host_ext.used;
    out->outstanding = e->outstanding;
    out->inflight_ops = e->p.queue_depth - e->nop_free;
    size_t stored = 0;
    for (size_t i = 0; i < e->nbuckets; i++) {
        for (struct tensor *t = e->buckets[i]; t; t = t->next) {
            stored += t->stored != NULL;
        }
    }
    out->tensors = stored;
    if (out->inflight_ops) {
        out->busy_s += tio_now_s() - e->busy_since;
    }
    pthread_mutex_unlock(&e->mu);
    return 0;
}

const char *tio_engine_last_error(struct tio_engine *e) {
    /* the progress thread may overwrite e->last_error at any time: hand out a copy */
    static _Thread_local char copy[sizeof(((struct tio_engine *)0)->last_error)];
    if (!e) {
        return "";
    }
    pthread_mutex_lock(&e->mu);
    memcpy(copy, e->last_error, sizeof copy);
    pthread_mutex_unlock(&e->mu);
    return copy;
}

const char *tio_engine_backend(const struct tio_engine *e) {
    return e && e->ops ? e->ops->name : "";
}

/* The first versioned requests end with `fence` and `done` (fixed: fields only grow). */
#define WRITE_REQUEST_MIN TIO_SIZE_THROUGH(struct tio_engine_write_request, fence)
#define READ_REQUEST_MIN  TIO_SIZE_THROUGH(struct tio_engine_read_request, done)

/* A versioned write request, with the ordered write's `done` event (NULL: a plain write). */
static int
engine_write(struct tio_engine *e, const struct tio_engine_write_request *req, void *done) {
    struct tio_engine_write_request r;
    memset(&r, 0, sizeof r);
    int rc = tio_struct_in("engine write: request", &r, sizeof r, WRITE_REQUEST_MIN, req);
    if (rc < 0) {
        return rc;
    }
    return write_request(e, r.tensor_id, r.src, r.bytes, r.mem, r.tier, r.priority, r.tag, r.fence,
                         done);
}

int tio_engine_write(struct tio_engine *e, const struct tio_engine_write_request *req) {
    return engine_write(e, req, NULL);
}

int tio_eng_write_ordered(struct tio_engine *e,
                          const struct tio_engine_write_request *req,
                          void *done) {
    return engine_write(e, req, done);
}

int tio_engine_read(struct tio_engine *e, const struct tio_engine_read_request *req) {
    struct tio_engine_read_request r;
    memset(&r, 0, sizeof r);
    int rc = tio_struct_in("engine read: request", &r, sizeof r, READ_REQUEST_MIN, req);
    if (rc < 0) {
        return rc;
    }
    return engine_read(e, r.tensor_id, r.dst, r.bytes, r.mem, r.priority, r.tag, r.fence, r.done);
}
