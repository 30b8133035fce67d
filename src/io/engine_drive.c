/*
 * Who drives the backend (H2), and the progress thread. Without caller-driven completions the
 * progress thread alone submits and reaps (progress_loop). With them (a backend with
 * arm/park/unpark, today uring), a caller blocked in tio_engine_wait drives the backend
 * itself, a caller that submits does so when the backend is free, and the progress thread
 * carries on only while no caller drives, parked otherwise (progress_park_loop). The role is
 * taken and handed back under mu (drive_begin / tio_eng_drive_end); docs/engine.md, "Who
 * drives the backend", explains the waiter rules enforced here.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#if defined(TIO_ASAN)
#include <sanitizer/asan_interface.h>
#endif

#include "common/common_impl.h"
#include "io/engine_internal.h"

#if defined(TIO_ASAN)
static void asan_check(const struct tio_io_req *r) {
    if (r->mem != TIO_MEM_HOST) {
        return;
    }
    void *bad = __asan_region_is_poisoned(r->buf, r->len);
    if (bad) {
        TIO_LOG_ERROR("engine: buffer %p+%u handed to the kernel is poisoned at %p", r->buf, r->len,
                      bad);
        TIO_ASSERT(bad == NULL); /* an I/O buffer that is not addressable */
    }
}
#endif

/*
 * Submit what the queues hold, as far as op slots allow (under mu, by the thread that drives
 * the backend; mu is released around staging copies and the backend call). `copies`: see
 * tio_eng_build_batch. Returns the number of transfers issued.
 */
static uint32_t drive_submit(struct tio_engine *e, int copies) {
    uint32_t depth = e->p.queue_depth;
    struct batch_item *batch = e->batch;
    struct tio_io_req *reqs = e->reqs;
    struct tio_io_cqe *cqes = e->cqes;
    /* cancel requests: ask the backend to drop their queued transfers */
    if (e->ops->cancel) {
        for (uint32_t s = 0; s < depth; s++) {
            if (e->opv[s].rq && e->opv[s].rq->canceled) {
                (void)e->ops->cancel(e->bst, s);
            }
        }
    }
    uint32_t n = tio_eng_build_batch(e, batch, depth, copies);
    if (!n) {
        return 0;
    }
    if (depth - e->nop_free == n) { /* was idle */
        e->busy_since = tio_now_s();
    }
    /* mu released: batch/reqs/cqes and the backend are ours (H2), each staging buffer is its op
     * slot's (H5), each request is held by its pieces (H3) */
    tio_eng_unlock_signal(e);
    for (uint32_t i = 0; i < n; i++) {
        if (batch[i].copy_from) {
            size_t pad = (size_t)(batch[i].req.len - batch[i].copy_len);
            memcpy(batch[i].req.buf, batch[i].copy_from, (size_t)batch[i].copy_len);
            memset((unsigned char *)batch[i].req.buf + batch[i].copy_len, 0, pad);
        }
        reqs[i] = batch[i].req;
#if defined(TIO_ASAN)
        asan_check(&reqs[i]);
#endif
    }
    uint32_t done = 0;
    while (done < n) {
        int rc = e->ops->submit(e->bst, reqs + done, n - done);
        if (rc > 0) {
            done += (uint32_t)rc;
            continue;
        }
        if (rc == -EAGAIN || rc == 0) {
            /* the backend is full: make room by reaping one result */
            int k = e->ops->reap(e->bst, 1, depth, -1, cqes);
            pthread_mutex_lock(&e->mu);
            for (int i = 0; i < k; i++) {
                tio_eng_complete_op(e, (uint32_t)cqes[i].user, cqes[i].res);
            }
            tio_eng_unlock_signal(e);
            continue;
        }
        /* submit failed as a whole: fail these transfers */
        pthread_mutex_lock(&e->mu);
        for (uint32_t i = done; i < n; i++) {
            tio_eng_complete_op(e, (uint32_t)reqs[i].user, rc);
        }
        tio_eng_unlock_signal(e);
        break;
    }
    pthread_mutex_lock(&e->mu);
    e->st.ops_issued += done;
    return n;
}

/*
 * Reap results, waiting up to timeout_ns (0: only what is there, < 0: forever) for the first,
 * and complete them (under mu, by the thread that drives; mu is released while in the
 * backend). Returns the number reaped.
 */
static int drive_reap(struct tio_engine *e, int64_t timeout_ns) {
    uint32_t depth = e->p.queue_depth;
    e->in_reap = 1;
    tio_eng_unlock_signal(e);
    int k = e->ops->reap(e->bst, timeout_ns == 0 ? 0 : 1, depth, timeout_ns, e->cqes);
    pthread_mutex_lock(&e->mu);
    e->in_reap = 0;
    for (int i = 0; i < k; i++) {
        tio_eng_complete_op(e, (uint32_t)e->cqes[i].user, e->cqes[i].res);
    }
    if (k > 0 && depth - e->nop_free == 0) {
        e->st.busy_s += tio_now_s() - e->busy_since;
    }
    return k;
}

static int queued_work(const struct tio_engine *e) {
    return (e->qhead[TIO_PRIO_URGENT] || e->qhead[TIO_PRIO_NORMAL]) && e->nop_free;
}

/* Progress thread without caller-driven completions: it alone drives the backend. */
static void progress_loop(struct tio_engine *e) {
    uint32_t depth = e->p.queue_depth;
    for (;;) {
        if (drive_submit(e, 1)) {
            continue;
        }
        uint32_t inflight = depth - e->nop_free;
        if (inflight == 0) {
            if (e->stopping && !e->active) {
                break;
            }
            if (tio_eng_done_wake_due(e)) {
                pthread_cond_broadcast(&e->done_cv);
            }
            if (e->fence_blocked || e->gpu_pending) { /* nobody signals a CUDA event: poll */
                struct timespec ts;
                tio_deadline_in(TIO_FENCE_POLL_NS, &ts);
                (void)pthread_cond_timedwait(&e->work_cv, &e->mu, &ts);
            } else {
                pthread_cond_wait(&e->work_cv, &e->mu);
            }
            continue;
        }
        /* wait for results; new work wakes us through notify (or a short poll without it) */
        int full = e->nop_free == 0;
        int64_t wait_ns = (full || e->ops->notify) ? 100000000 : 500000;
        (void)drive_reap(e, (e->fence_blocked || e->gpu_pending) && !full ? TIO_FENCE_POLL_NS
                                                                          : wait_ns);
    }
}

/* Take the backend (under mu, !e->driving): this thread may now submit and reap. H2: every
 * caller checks `driving` under mu first, and only the thread that set it clears it
 * (tio_eng_drive_end), so there is one driver at a time. */
static void drive_begin(struct tio_engine *e) {
    TIO_DEBUG_ASSERT(!e->driving);
    e->driving = 1;
    (void)e->ops->arm(e->bst, 0); /* we reap ourselves: completions need not wake the parker */
}

/*
 * Give the backend back (under mu). Work that arrived meanwhile is submitted and (with
 * `copies`) results that are ready are reaped first; results still to come are armed to wake
 * the parked progress thread, which is unparked at once only when it has something to do now
 * (results ready that we may not complete, work we may not copy, it parked idle, or the engine
 * stops). Other waiters are woken so that one of them can drive.
 */
void tio_eng_drive_end(struct tio_engine *e, const struct waiter *self, int copies) {
    uint32_t inflight;
    int ready = 0;
    for (;;) {
        while (queued_work(e) && drive_submit(e, copies)) {
            ;
        }
        inflight = e->p.queue_depth - e->nop_free;
        if (!inflight || e->ops->arm(e->bst, 1) <= 0) {
            break;
        }
        if (!copies && e->nheavy) { /* completions that copy or CRC: the progress thread's */
            ready = 1;
            break;
        }
        /* results are ready already: take them here (no system call) rather than wake the
         * progress thread for them; their follow-up pieces are submitted by the loop */
        (void)e->ops->arm(e->bst, 0);
        if (drive_reap(e, 0) <= 0) {
            ready = 1; /* cannot happen; leave them to the progress thread */
            (void)e->ops->arm(e->bst, 1);
            break;
        }
    }
    e->driving = 0; /* H2: the backend is free; the next driver takes it under mu */
    if (e->parked && (ready || (inflight && e->park_idle) || queued_work(e) || e->stopping)) {
        e->park_idle = 0;
        e->ops->unpark(e->bst);
    }
    /* nobody drives now: if there is anything to drive, every other waiter is woken so that
     * one of them takes the backend (a waiter never sleeps on done_cv while transfers are in
     * flight and nobody reaps them; the parked progress thread only wakes on the eventfd) */
    if (inflight || queued_work(e)) {
        for (const struct waiter *w = e->waiters; w; w = w->next) {
            e->wake_waiters |= w != self && w->want_drive;
        }
    }
}

/* A result the progress thread missed (see uring_arm) is picked up after at most this long. */
#define TIO_PARK_SAFETY_NS 50000000

/*
 * Progress thread with caller-driven completions: when no caller drives, it submits what is
 * queued and reaps what is ready without blocking in the backend, then parks until a result
 * arrives (armed), new work is queued, or a driving caller hands the backend back with work
 * left. While a caller drives, it stays parked.
 */
static void progress_park_loop(struct tio_engine *e) {
    uint32_t depth = e->p.queue_depth;
    for (;;) {
        int64_t park_ns = TIO_PARK_SAFETY_NS;
        if (!e->driving) {
            drive_begin(e);
            for (;;) {
                uint32_t n = drive_submit(e, 1);
                int k = depth - e->nop_free ? drive_reap(e, 0) : 0;
                /* one pass only while a caller waits: it is woken by the hand-back below and
                 * drives the rest (waiter rule 2 in docs/engine.md) */
                if ((!n && k <= 0) || e->waiters) {
                    break;
                }
            }
            uint32_t inflight = depth - e->nop_free;
            if (e->stopping && !e->active && !inflight) {
                e->driving = 0;
                break;
            }
            tio_eng_drive_end(e, NULL, 1);
            if (depth - e->nop_free == 0 && !queued_work(e) && !e->gpu_pending) {
                park_ns = -1; /* idle: whoever queues work unparks us */
            } else if (e->fence_blocked || e->gpu_pending) {
                park_ns = TIO_FENCE_POLL_NS;
            }
        }
        e->park_idle = park_ns < 0;
        e->parked = 1;
        tio_eng_unlock_signal(e);
        e->ops->park(e->bst, park_ns);
        pthread_mutex_lock(&e->mu);
        e->parked = 0;
    }
}

void *tio_eng_progress_main(void *arg) {
    struct tio_engine *e = arg;
    tio_eng_gpu_bind_thread(e); /* its CUDA calls are on the engine's device */
    pthread_mutex_lock(&e->mu);
    if (e->caller_drive) {
        progress_park_loop(e);
    } else {
        progress_loop(e);
    }
    tio_eng_unlock_signal(e);
    return NULL;
}

/*
 * New work or a cancellation (under mu): wake whoever drives the backend. While at least half
 * of the queue depth is in flight, a normal request need not interrupt a reap: the next
 * completion (soon) picks it up, which saves a wake-up per request (measured: about a fifth
 * of the CPU per GiB at 1 MiB requests). Urgent requests and cancellations always interrupt.
 */
void tio_eng_wake_progress(struct tio_engine *e, int urgent) {
    uint32_t inflight = e->p.queue_depth - e->nop_free;
    if (e->in_reap && e->ops->notify && (urgent || inflight * 2 < e->p.queue_depth)) {
        e->ops->notify(e->bst);
    }
    if (!e->caller_drive) {
        pthread_cond_signal(&e->work_cv);
    } else if (e->parked && !e->driving) {
        e->park_idle = 0;
        e->ops->unpark(e->bst);
    }
}

/*
 * A request was queued by a caller (under mu). With caller-driven completions and the backend
 * free, the caller submits it itself (no wake-up) as far as that needs no copy (host tier,
 * staged writes and staged-read completions stay with the progress thread, so a submit stays
 * cheap for callers that overlap I/O with compute); otherwise whoever drives is told.
 */
void tio_eng_kick(struct tio_engine *e, int urgent) {
    if (e->caller_drive && !e->driving && !e->stopping) {
        drive_begin(e);
        (void)drive_submit(e, 0);
        tio_eng_drive_end(e, NULL, 0);
        return;
    }
    tio_eng_wake_progress(e, urgent);
}

/* Nanoseconds from now to an absolute CLOCK_REALTIME deadline (<= 0: passed). */
static int64_t ns_until(const struct timespec *deadline) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (int64_t)(deadline->tv_sec - now.tv_sec) * 1000000000 +
           (deadline->tv_nsec - now.tv_nsec);
}

/*
 * A waiter that took the backend (under mu, e->driving set by drive_begin here): submit and
 * reap until `min` completions are ready, nothing is in flight, or the deadline passes (then
 * returns 1).
 */
int tio_eng_drive_wait(struct tio_engine *e,
                       size_t min,
                       int64_t timeout_ns,
                       const struct timespec *deadline) {
    drive_begin(e);
    for (;;) {
        (void)drive_submit(e, 1);
        if (e->cq_count >= min || e->p.queue_depth == e->nop_free) {
            return 0;
        }
        int64_t left = -1;
        if (timeout_ns >= 0) {
            left = ns_until(deadline);
            if (left <= 0) {
                (void)drive_reap(e, 0); /* what is there already still counts */
                return e->cq_count < min;
            }
        }
        (void)drive_reap(e, (e->fence_blocked || e->gpu_pending) &&
                                    (left < 0 || left > TIO_FENCE_POLL_NS)
                                ? TIO_FENCE_POLL_NS
                                : left);
    }
}
