/*
 * The engine's requests: the two priority queues (urgent first, FIFO within each), pick() with
 * the fences it checks, the completion ring callers reap from, and the end of a request
 * (settling the tensor's copies, counting, its completion). Everything here runs under mu
 * (H1); finishing a request is the only place that frees one (H3).
 */
#include <stdio.h>

#include "common/common_impl.h"
#include "io/engine_internal.h"

void tio_eng_queue_push(struct tio_engine *e, struct request *rq, int front) {
    if (rq->queued) {
        return;
    }
    int q = rq->prio;
    rq->qprev = rq->qnext = NULL;
    if (!e->qhead[q]) {
        e->qhead[q] = e->qtail[q] = rq;
    } else if (front) {
        rq->qnext = e->qhead[q];
        e->qhead[q]->qprev = rq;
        e->qhead[q] = rq;
    } else {
        rq->qprev = e->qtail[q];
        e->qtail[q]->qnext = rq;
        e->qtail[q] = rq;
    }
    rq->queued = 1;
}

static void queue_remove(struct tio_engine *e, struct request *rq) {
    if (!rq->queued) {
        return;
    }
    int q = rq->prio;
    if (rq->qprev) {
        rq->qprev->qnext = rq->qnext;
    } else {
        e->qhead[q] = rq->qnext;
    }
    if (rq->qnext) {
        rq->qnext->qprev = rq->qprev;
    } else {
        e->qtail[q] = rq->qprev;
    }
    rq->queued = 0;
}

static int push_completion(struct tio_engine *e, uint64_t tag, int64_t res) {
    if (e->cq_count == e->cq_cap) {
        /* grow the ring, unrolling it (outstanding <= max_requests bounds it) */
        size_t ncap = e->cq_cap ? e->cq_cap * 2 : 64;
        struct tio_completion *n = tio_malloc(ncap * sizeof(*n));
        TIO_ASSERT(n != NULL); /* sized at init for max_requests: only grows past that */
        for (size_t i = 0; i < e->cq_count; i++) {
            n[i] = e->cq[(e->cq_head + i) % e->cq_cap];
        }
        tio_free(e->cq);
        e->cq = n;
        e->cq_cap = ncap;
        e->cq_head = 0;
    }
    e->cq[(e->cq_head + e->cq_count) % e->cq_cap] = (struct tio_completion){ tag, res };
    e->cq_count++;
    if (e->waiters) { /* (no system call when nobody sleeps on done_cv: a driving waiter) */
        pthread_cond_broadcast(&e->done_cv);
    }
    return 0;
}

/*
 * Under mu: must done_cv be broadcast because the backend was handed back and a waiter that
 * found it busy may drive now? (Completions broadcast at once, in push_completion: a wake-up
 * deferred to the unlock let a waiter among several sleep through to its deadline.)
 */
int tio_eng_done_wake_due(struct tio_engine *e) {
    if (!e->wake_waiters) {
        return 0;
    }
    e->wake_waiters = 0;
    return e->waiters != NULL;
}

/* Release mu, then wake the waiters that may drive the backend now. */
void tio_eng_unlock_signal(struct tio_engine *e) {
    int wake = tio_eng_done_wake_due(e);
    pthread_mutex_unlock(&e->mu);
    if (wake) {
        pthread_cond_broadcast(&e->done_cv);
    }
}

void tio_eng_request_free(struct request *rq) {
    tio_free(rq->redo);
    tio_free(rq->chunk_left);
    tio_free(rq->chunk_retries);
    tio_free(rq);
}

/*
 * Finish a request whose pieces are all done or abandoned (under mu). H3: this is the only
 * place a request is freed, and only once no piece of it is in the backend or being copied
 * (inflight == 0: whoever released mu while using it still counts in inflight).
 */
void tio_eng_request_finish(struct tio_engine *e, struct request *rq) {
    TIO_ASSERT(rq->inflight == 0);
    queue_remove(e, rq);
    if (rq->tail) {
        return; /* settling already: tio_eng_gpu_poll finishes it */
    }
    /* H7: device copies still queued keep the request (and its memory) until they ran; a read
     * with `done` records it after them and finishes now */
    int settle = tio_eng_gpu_settle(e, rq);
    if (settle > 0) {
        return;
    }
    if (settle < 0 && !rq->error) {
        rq->error = settle;
        (void)snprintf(e->last_error, sizeof e->last_error,
                       "read of tensor %llu (tag %llu): cudaEventRecord of its done event "
                       "failed",
                       (unsigned long long)rq->t->id, (unsigned long long)rq->tag);
    }
    if (rq->aprev) {
        rq->aprev->anext = rq->anext;
    } else {
        e->active = rq->anext;
    }
    if (rq->anext) {
        rq->anext->aprev = rq->aprev;
    }
    int64_t res = rq->error;
    if (!res && rq->canceled) {
        res = TIO_ECANCELED;
    }
    struct tensor *t = rq->t;
    /* H6: the old copy is freed only now that the new one is complete; no read uses it (a
     * write is refused while t->readers, and reads while t->pending) */
    if (rq->op == TIO_IO_OP_WRITE) {
        if (res == 0) {
            tio_eng_placement_free(e, t->stored); /* the new copy is complete: drop the old one */
            t->stored = rq->pl;
            e->st.bytes_written += rq->bytes;
        } else {
            tio_eng_placement_free(e, rq->pl); /* the old copy, if any, stays readable */
        }
        t->pending = NULL;
    } else {
        t->readers--;
        if (res == 0) {
            e->st.bytes_read += rq->bytes;
        }
    }
    tio_eng_tensor_maybe_remove(e, t);
    if (res == TIO_ECANCELED) {
        e->st.requests_canceled++;
    } else if (res < 0) {
        e->st.requests_failed++;
    }
    e->st.requests_completed++;
    /* H4: from here on the caller may free or reuse rq->buf (it may reap the completion as
     * soon as mu is released): nothing of this request is touched after this point */
    push_completion(e, rq->tag, res ? res : (int64_t)rq->bytes);
    tio_eng_request_free(rq);
}

void tio_eng_request_fail(struct tio_engine *e,
                          struct request *rq,
                          int64_t err,
                          uint32_t chunk,
                          uint32_t attempts,
                          const char *why) {
    if (rq->error) {
        return;
    }
    rq->error = err;
    const char *where = "host tier";
    char loc[300] = "";
    if (rq->pl->tier == TIO_TIER_SSD) {
        uint32_t fi = tio_eng_chunk_file(e, rq->pl, chunk);
        (void)snprintf(loc, sizeof loc, "directory %s, offset %llu", e->files[fi].dir,
                       (unsigned long long)rq->pl->off[chunk]);
        where = loc;
    }
    (void)snprintf(
        e->last_error, sizeof e->last_error,
        "%s of tensor %llu (%llu bytes, tag %llu) failed at chunk %u (%s): %s: %s after %u "
        "attempt(s)%s",
        rq->op == TIO_IO_OP_WRITE ? "write" : "read", (unsigned long long)rq->t->id,
        (unsigned long long)rq->bytes, (unsigned long long)rq->tag, chunk, where,
        tio_strerror((int)err), why, attempts,
        rq->op == TIO_IO_OP_WRITE ? "; the tensor's previous copy (if any) is kept" : "");
    TIO_LOG_ERROR("engine: %s", e->last_error);
}

int tio_eng_request_has_work(const struct request *rq) {
    if (rq->error || rq->canceled) {
        return 0;
    }
    return rq->nredo > 0 || rq->cur_chunk < rq->pl->nchunks;
}

/* Has rq's fence completed? 1 yes (the fence is then forgotten), 0 not yet (fence_blocked is
 * set: whoever drives polls again soon), -1 the query failed (the request has failed). */
static int fence_passed(struct tio_engine *e, struct request *rq) {
    /* gpu: the copy stream waits on it (engine_gpu.c); cuFile: the backend's stream does */
    if (!rq->fence || rq->gpu || tio_eng_fence_to_backend(e, rq)) {
        return 1;
    }
    const struct tio_cudart_api *cu = tio_cudart();
    int err = cu ? cu->event_query(rq->fence) : -1;
    if (err == 0) {
        rq->fence = NULL;
        return 1;
    }
    if (err == TIO_CUDA_NOT_READY) {
        e->fence_blocked = 1;
        return 0;
    }
    tio_eng_request_fail(e, rq, TIO_ECUDA, 0, 1, "cudaEventQuery on the request's fence failed");
    return -1;
}

/* A GPU-path write to the SSD tier: each piece is copied to staging on the D2H staging stream,
 * behind the request's fence (cudaStreamWaitEvent), so the stream runs the pieces in the order
 * they were staged. */
static int staged_write(const struct request *rq) {
    return rq->gpu && rq->op == TIO_IO_OP_WRITE && rq->pl->tier == TIO_TIER_SSD;
}

/* Staged writes are staged in the order they were submitted, whatever their priority: the
 * caller issues them in the order of their fences, and an urgent write staged ahead of an
 * earlier normal one would make the staging stream wait for its later fence (a caller far
 * ahead of the GPU: a kernel the GPU reaches much later) before it copies the earlier pieces,
 * whose fences have passed, while the drive idles. Returns the earliest-submitted normal staged
 * write with work submitted before urgent staged write `u`, or `u`. */
static struct request *staged_in_order(struct tio_engine *e, struct request *u) {
    struct request *best = u;
    for (struct request *rq = e->qhead[TIO_PRIO_NORMAL]; rq; rq = rq->qnext) {
        if (rq->seq < best->seq && staged_write(rq) && tio_eng_request_has_work(rq)) {
            best = rq;
        }
    }
    return best;
}

/* Pick the request to serve next: urgent first, whose fence has completed; drop
 * finished/canceled ones on the way. */
struct request *tio_eng_pick(struct tio_engine *e) {
    e->fence_blocked = 0;
    for (int q = TIO_PRIO_URGENT; q >= TIO_PRIO_NORMAL; q--) {
        struct request *rq = e->qhead[q];
        while (rq) {
            struct request *next = rq->qnext;
            if (rq->gpu && rq->pl->tier == TIO_TIER_SSD &&
                !e->gpu.ring[rq->op == TIO_IO_OP_READ ? 0 : 1].nfree &&
                tio_eng_request_has_work(rq)) {
                e->gpu_pending = 1; /* no staging buffer free: polled until one is */
                rq = next;
                continue;
            }
            if (tio_eng_request_has_work(rq) && fence_passed(e, rq) > 0) {
                return q == TIO_PRIO_URGENT && staged_write(rq) ? staged_in_order(e, rq) : rq;
            }
            if (tio_eng_request_has_work(rq)) { /* waiting for its fence */
                rq = next;
                continue;
            }
            queue_remove(e, rq);
            if (rq->inflight == 0) {
                tio_eng_request_finish(e, rq);
            }
            rq = next;
        }
    }
    return NULL;
}
