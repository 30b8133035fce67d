/*
 * The migration engine core (include/teraio/io.h). Everything that is not "move these bytes"
 * lives here, once, for every backend: the tensor table, striping and extents, aligned
 * staging for unaligned buffers, splitting (<= TIO_IO_MAX_OP per transfer), short transfers
 * (resume the rest; 0 bytes is -EIO), retries, CRC32C per chunk, priorities, cancellation.
 *
 * Threads: callers take `mu` to queue requests and reap completions. One progress thread
 * owns the backend: it turns queued requests into transfers ("pieces"), submits them, reaps
 * results and finishes requests. Pieces are issued from the urgent queue first.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <teraio/io.h>
#include <teraio/units.h>

#include "common/common_impl.h"
#include "dl/cudart_shim.h"
#include "io/backend.h"
#include "io/swapfile.h"

#if defined(TIO_ASAN)
#include <sanitizer/asan_interface.h>
#endif

/* Where a stored tensor's chunks are. */
struct placement {
    uint64_t bytes;   /* tensor size */
    int32_t tier;     /* TIO_TIER_SSD or TIO_TIER_HOST */
    uint32_t nchunks; /* ceil(bytes / chunk) */
    uint32_t first;   /* directory of chunk 0 (chunk c is on (first + c) % ndirs) */
    uint64_t *off;    /* per chunk: byte offset in the swap file / host pool */
    uint32_t *crc;    /* per chunk CRC32C (verify on), else NULL */
};

struct tensor {
    uint64_t id;
    struct placement *stored;  /* readable copy, or NULL */
    struct placement *pending; /* a write in flight */
    uint32_t readers;          /* reads in flight */
    struct tensor *next;       /* hash chain */
};

/* A transfer still to issue: bytes [pos, pos + len) of chunk `chunk`. */
struct piece {
    uint32_t chunk;
    uint32_t attempts; /* failures so far */
    uint64_t pos, len;
};

struct request {
    uint64_t tag;
    int32_t op, mem, prio;
    unsigned char *buf;
    uint64_t bytes;
    struct tensor *t;
    struct placement *pl; /* write: pl == t->pending; read: t->stored */
    /* issue cursor */
    uint32_t cur_chunk;
    uint64_t cur_pos;
    struct piece *redo; /* pieces to reissue first (short transfers, retries) */
    size_t nredo, capredo;
    uint64_t *chunk_left;    /* per chunk: bytes not yet transferred */
    uint32_t *chunk_retries; /* per chunk: CRC retries */
    uint32_t inflight;       /* pieces in the backend */
    int64_t error;           /* first error (< 0) or 0 */
    int canceled;
    void *fence; /* cudaEvent_t that must complete before any byte moves (NULL: none) */
    int queued;  /* in a priority queue */
    struct request *qprev, *qnext;
    struct request *aprev, *anext; /* all active requests (cancel by tag) */
};

struct op {
    struct request *rq; /* NULL: free slot */
    struct piece pc;
    uint64_t io_len; /* bytes handed to the backend (padded when staged) */
    int32_t stage;   /* staging buffer index or -1 */
    int32_t file;
    int32_t heavy; /* completing it copies out of staging or computes a CRC */
};

struct batch_item {
    struct tio_io_req req;
    unsigned char *copy_from; /* staged write: copy len bytes from here into req.buf */
    uint64_t copy_len;
};

/* A caller blocked in tio_engine_wait until `min` completions are ready. */
struct waiter {
    size_t min;
    int want_drive; /* caller-driven: would drive the backend when it is handed back */
    struct waiter *next;
};

struct tio_engine {
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* progress thread waits for work */
    pthread_cond_t done_cv; /* callers wait for completions */
    struct waiter *waiters; /* callers blocked in tio_engine_wait (their stack frames) */
    pthread_t thread;
    int thread_started, stopping;
    int in_reap; /* the driving thread is (about to be) blocked in ops->reap */
    /* Caller-driven completions (backend has arm/park/unpark): the backend is driven by one
     * thread at a time, the one that set `driving` under mu: a caller in tio_engine_wait or
     * tio_engine_write/read, or the progress thread, which otherwise parks. */
    int caller_drive;
    int driving;      /* a thread drives the backend */
    int parked;       /* the progress thread is (about to be) in ops->park */
    int park_idle;    /* ... with no timeout: nothing was in flight */
    int wake_waiters; /* done_cv must be broadcast: the backend was handed back */

    struct tio_engine_params p; /* copy; strings below owned */
    char *backend_options;
    const struct tio_io_backend_ops *ops;
    void *bst; /* backend state */

    struct tio_swapfile *files;
    uint32_t nfiles;
    int *fds;
    uint32_t next_dir;
    uint64_t max_op;

    unsigned char *host_pool;    /* host tier */
    int host_pool_cuda;          /* allocated with cudaHostAlloc */
    tio_cuda_stream copy_stream; /* non-blocking stream of the host tier's device copies */
    int copy_stream_ok;
    int fence_blocked;  /* pick() passed over a request whose fence has not completed */
    size_t host_locked; /* bytes of host_pool under mlock (0: none) */
    struct tio_extents host_ext;

    unsigned char *stage_mem; /* depth buffers of stage_bytes, 4 KiB aligned */
    uint64_t stage_bytes;
    int32_t *stage_free;
    uint32_t nstage_free;

    struct batch_item *batch; /* progress thread scratch, depth entries each */
    struct tio_io_req *reqs;
    struct tio_io_cqe *cqes;

    struct op *opv; /* depth slots */
    uint32_t *op_free;
    uint32_t nop_free;
    uint32_t nheavy; /* ops in flight with heavy set */

    struct tensor **buckets;
    size_t nbuckets, ntensors;

    struct request *qhead[TIO_PRIO_COUNT], *qtail[TIO_PRIO_COUNT];
    struct request *active;

    struct tio_completion *cq; /* ring of completions */
    size_t cq_cap, cq_head, cq_count;
    uint32_t outstanding; /* submitted, not yet reaped by the caller */

    struct tio_engine_stats st;
    double busy_since;
    char last_error[512];
};

struct tio_engine_params tio_engine_params_default(void) {
    struct tio_engine_params p;
    memset(&p, 0, sizeof p);
    p.backend = "auto";
    p.chunk_bytes = TIO_ENGINE_DEFAULT_CHUNK;
    p.queue_depth = TIO_ENGINE_DEFAULT_DEPTH;
    p.max_requests = TIO_ENGINE_DEFAULT_MAX_REQUESTS;
    p.retries = 2;
    p.preallocate = 1;
    return p;
}

/* ------------------------------------------------------------------------------------------ */
/* Tensor table                                                                               */
/* ------------------------------------------------------------------------------------------ */

static size_t bucket_of(const struct tio_engine *e, uint64_t id) {
    return (size_t)(tio_hash64(TIO_HASH64_SEED, &id, sizeof id) & (e->nbuckets - 1));
}

static struct tensor *tensor_find(struct tio_engine *e, uint64_t id) {
    for (struct tensor *t = e->buckets[bucket_of(e, id)]; t; t = t->next) {
        if (t->id == id)
            return t;
    }
    return NULL;
}

static struct tensor *tensor_get(struct tio_engine *e, uint64_t id) {
    struct tensor *t = tensor_find(e, id);
    if (t)
        return t;
    if (e->ntensors + 1 > e->nbuckets) { /* rehash at load factor 1 */
        size_t nb = e->nbuckets * 2;
        struct tensor **b = tio_calloc(nb, sizeof(struct tensor *));
        if (b) {
            for (size_t i = 0; i < e->nbuckets; i++) {
                while (e->buckets[i]) {
                    struct tensor *x = e->buckets[i];
                    e->buckets[i] = x->next;
                    size_t h =
                        (size_t)(tio_hash64(TIO_HASH64_SEED, &x->id, sizeof x->id) & (nb - 1));
                    x->next = b[h];
                    b[h] = x;
                }
            }
            tio_free(e->buckets);
            e->buckets = b;
            e->nbuckets = nb;
        }
    }
    t = tio_calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->id = id;
    size_t h = bucket_of(e, id);
    t->next = e->buckets[h];
    e->buckets[h] = t;
    e->ntensors++;
    return t;
}

/* Remove t from the table if nothing references it any more. */
static void tensor_maybe_remove(struct tio_engine *e, struct tensor *t) {
    if (t->stored || t->pending || t->readers)
        return;
    struct tensor **pp = &e->buckets[bucket_of(e, t->id)];
    while (*pp != t)
        pp = &(*pp)->next;
    *pp = t->next;
    e->ntensors--;
    tio_free(t);
}

/* ------------------------------------------------------------------------------------------ */
/* Placement (extents)                                                                        */
/* ------------------------------------------------------------------------------------------ */

static uint64_t chunk_len(const struct tio_engine *e, const struct placement *pl, uint32_t c) {
    uint64_t start = (uint64_t)c * e->p.chunk_bytes;
    return TIO_MIN(e->p.chunk_bytes, pl->bytes - start);
}

static uint32_t chunk_file(const struct tio_engine *e, const struct placement *pl, uint32_t c) {
    return (uint32_t)((pl->first + (uint64_t)c) % e->nfiles);
}

static void placement_free(struct tio_engine *e, struct placement *pl) {
    if (!pl)
        return;
    for (uint32_t c = 0; c < pl->nchunks; c++) {
        if (pl->off[c] == UINT64_MAX)
            continue;
        int rc;
        if (pl->tier == TIO_TIER_HOST) {
            rc = c == 0 ? tio_extents_free(&e->host_ext, pl->off[0], pl->bytes) : 0;
        } else {
            struct tio_swapfile *sf = &e->files[chunk_file(e, pl, c)];
            rc = tio_extents_free(&sf->ext, pl->off[c], chunk_len(e, pl, c));
        }
        TIO_ASSERT(rc == 0); /* a double free would corrupt other tensors */
    }
    tio_free(pl->off);
    tio_free(pl->crc);
    tio_free(pl);
}

/* Room needed on each directory for n chunks of the engine's chunk size (upper bound). */
static int grow_for(struct tio_engine *e, uint32_t fi, uint64_t need) {
    struct tio_swapfile *sf = &e->files[fi];
    /* grow in steps of 64 chunks (at most 1 GiB unless needed) to keep fallocate rare */
    uint64_t step = TIO_MAX(need, TIO_MIN(64 * e->p.chunk_bytes, (uint64_t)1 << 30));
    int rc = tio_swapfile_grow(sf, sf->size + step, e->p.preallocate);
    if (rc < 0 && step > need)
        rc = tio_swapfile_grow(sf, sf->size + need, e->p.preallocate);
    return rc;
}

/* Allocate a placement for `bytes` on `tier` (under mu). 0, -ENOSPC (detail), TIO_ENOMEM. */
static int placement_new(
    struct tio_engine *e, uint64_t id, uint64_t bytes, int32_t tier, struct placement **out) {
    uint64_t nch = (bytes + e->p.chunk_bytes - 1) / e->p.chunk_bytes;
    if (nch > UINT32_MAX)
        return tio_set_error(TIO_EINVAL, "engine: tensor %llu: too many chunks",
                             (unsigned long long)id);
    struct placement *pl = tio_calloc(1, sizeof(*pl));
    if (!pl)
        return TIO_ENOMEM;
    pl->bytes = bytes;
    pl->tier = tier;
    pl->nchunks = (uint32_t)nch;
    pl->off = tio_malloc(nch * sizeof(*pl->off));
    if (e->p.verify)
        pl->crc = tio_calloc(nch, sizeof(*pl->crc));
    if (!pl->off || (e->p.verify && !pl->crc)) {
        tio_free(pl->off);
        tio_free(pl->crc);
        tio_free(pl);
        return TIO_ENOMEM;
    }
    for (uint32_t c = 0; c < pl->nchunks; c++)
        pl->off[c] = UINT64_MAX;
    int rc = 0;
    if (tier == TIO_TIER_HOST) {
        uint64_t off;
        rc = tio_extents_alloc(&e->host_ext, bytes, &off);
        if (rc < 0) {
            char a[32], b[32];
            uint64_t avail = e->host_ext.capacity - e->host_ext.used;
            rc = tio_set_error(-ENOSPC,
                               "engine: host tier full for tensor %llu: needed %s, available %s "
                               "(largest free extent %llu bytes; raise host_tier_bytes)",
                               (unsigned long long)id, tio_format_bytes(bytes, a, sizeof a),
                               tio_format_bytes(avail, b, sizeof b),
                               (unsigned long long)tio_extents_largest(&e->host_ext));
        } else {
            for (uint32_t c = 0; c < pl->nchunks; c++)
                pl->off[c] = off + (uint64_t)c * e->p.chunk_bytes;
        }
    } else {
        pl->first = e->next_dir++ % e->nfiles; /* rotate so small tensors spread too */
        for (uint32_t c = 0; c < pl->nchunks && rc >= 0; c++) {
            uint32_t fi = chunk_file(e, pl, c);
            uint64_t len = chunk_len(e, pl, c);
            rc = tio_extents_alloc(&e->files[fi].ext, len, &pl->off[c]);
            if (rc == -ENOSPC) {
                /* the rest of this tensor's chunks on this directory, at most */
                uint64_t left = (pl->nchunks - c + e->nfiles - 1) / e->nfiles;
                rc = grow_for(e, fi, TIO_MAX(left * e->p.chunk_bytes, len));
                if (rc >= 0)
                    rc = tio_extents_alloc(&e->files[fi].ext, len, &pl->off[c]);
                if (rc < 0) {
                    char detail[400];
                    (void)snprintf(detail, sizeof detail, "%s", tio_last_error());
                    rc = tio_set_error(-ENOSPC, "engine: no room for tensor %llu (%llu bytes): %s",
                                       (unsigned long long)id, (unsigned long long)bytes, detail);
                }
            }
        }
    }
    if (rc < 0) {
        placement_free(e, pl);
        return rc;
    }
    *out = pl;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Queues and completions (under mu)                                                          */
/* ------------------------------------------------------------------------------------------ */

static void queue_push(struct tio_engine *e, struct request *rq, int front) {
    if (rq->queued)
        return;
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
    if (!rq->queued)
        return;
    int q = rq->prio;
    if (rq->qprev)
        rq->qprev->qnext = rq->qnext;
    else
        e->qhead[q] = rq->qnext;
    if (rq->qnext)
        rq->qnext->qprev = rq->qprev;
    else
        e->qtail[q] = rq->qprev;
    rq->queued = 0;
}

static int push_completion(struct tio_engine *e, uint64_t tag, int64_t res) {
    if (e->cq_count == e->cq_cap) {
        /* grow the ring, unrolling it (outstanding <= max_requests bounds it) */
        size_t ncap = e->cq_cap ? e->cq_cap * 2 : 64;
        struct tio_completion *n = tio_malloc(ncap * sizeof(*n));
        TIO_ASSERT(n != NULL); /* sized at init for max_requests: only grows past that */
        for (size_t i = 0; i < e->cq_count; i++)
            n[i] = e->cq[(e->cq_head + i) % e->cq_cap];
        tio_free(e->cq);
        e->cq = n;
        e->cq_cap = ncap;
        e->cq_head = 0;
    }
    e->cq[(e->cq_head + e->cq_count) % e->cq_cap] = (struct tio_completion){ tag, res };
    e->cq_count++;
    if (e->waiters) /* (no system call when nobody sleeps on done_cv: a driving waiter) */
        pthread_cond_broadcast(&e->done_cv);
    return 0;
}

/*
 * Under mu: must done_cv be broadcast because the backend was handed back and a waiter that
 * found it busy may drive now? (Completions broadcast at once, in push_completion: a wake-up
 * deferred to the unlock let a waiter among several sleep through to its deadline.)
 */
static int done_wake_due(struct tio_engine *e) {
    if (!e->wake_waiters)
        return 0;
    e->wake_waiters = 0;
    return e->waiters != NULL;
}

/* Release mu, then wake the waiters that may drive the backend now. */
static void unlock_signal(struct tio_engine *e) {
    int wake = done_wake_due(e);
    pthread_mutex_unlock(&e->mu);
    if (wake)
        pthread_cond_broadcast(&e->done_cv);
}

static void request_free(struct request *rq) {
    tio_free(rq->redo);
    tio_free(rq->chunk_left);
    tio_free(rq->chunk_retries);
    tio_free(rq);
}

/* Finish a request whose pieces are all done or abandoned (inflight == 0). */
static void request_finish(struct tio_engine *e, struct request *rq) {
    TIO_ASSERT(rq->inflight == 0);
    queue_remove(e, rq);
    if (rq->aprev)
        rq->aprev->anext = rq->anext;
    else
        e->active = rq->anext;
    if (rq->anext)
        rq->anext->aprev = rq->aprev;
    int64_t res = rq->error;
    if (!res && rq->canceled)
        res = TIO_ECANCELED;
    struct tensor *t = rq->t;
    if (rq->op == TIO_IO_OP_WRITE) {
        if (res == 0) {
            placement_free(e, t->stored); /* the new copy is complete: drop the old one */
            t->stored = rq->pl;
            e->st.bytes_written += rq->bytes;
        } else {
            placement_free(e, rq->pl); /* the old copy, if any, stays readable */
        }
        t->pending = NULL;
    } else {
        t->readers--;
        if (res == 0)
            e->st.bytes_read += rq->bytes;
    }
    tensor_maybe_remove(e, t);
    if (res == TIO_ECANCELED)
        e->st.requests_canceled++;
    else if (res < 0)
        e->st.requests_failed++;
    e->st.requests_completed++;
    push_completion(e, rq->tag, res ? res : (int64_t)rq->bytes);
    request_free(rq);
}

static void request_fail(struct tio_engine *e,
                         struct request *rq,
                         int64_t err,
                         uint32_t chunk,
                         uint32_t attempts,
                         const char *why) {
    if (rq->error)
        return;
    rq->error = err;
    const char *where = "host tier";
    char loc[300] = "";
    if (rq->pl->tier == TIO_TIER_SSD) {
        uint32_t fi = chunk_file(e, rq->pl, chunk);
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

static int redo_push(struct request *rq, struct piece pc) {
    void *arr = rq->redo;
    if (tio_grow(&arr, &rq->capredo, rq->nredo + 1, sizeof(*rq->redo)) < 0)
        return TIO_ENOMEM;
    rq->redo = arr;
    rq->redo[rq->nredo++] = pc;
    return 0;
}

/* Requeue every piece of chunk c (CRC mismatch). */
static int redo_chunk(struct tio_engine *e, struct request *rq, uint32_t c, uint32_t attempts) {
    uint64_t len = chunk_len(e, rq->pl, c);
    rq->chunk_left[c] = len;
    return redo_push(rq, (struct piece){ c, attempts, 0, len });
}

static int request_has_work(const struct request *rq) {
    if (rq->error || rq->canceled)
        return 0;
    return rq->nredo > 0 || rq->cur_chunk < rq->pl->nchunks;
}

/* ------------------------------------------------------------------------------------------ */
/* Progress thread                                                                            */
/* ------------------------------------------------------------------------------------------ */

/* Next piece of rq (redo first, then the cursor), cut to at most `max` bytes. */
static struct piece next_piece(struct tio_engine *e, struct request *rq) {
    struct piece pc;
    if (rq->nredo) {
        pc = rq->redo[--rq->nredo];
    } else {
        uint32_t c = rq->cur_chunk;
        pc = (struct piece){ c, 0, rq->cur_pos, chunk_len(e, rq->pl, c) - rq->cur_pos };
    }
    return pc;
}

/* Give back the part of a piece that was not issued. */
static void piece_unissue(struct tio_engine *e, struct request *rq, struct piece pc) {
    (void)e;
    if (redo_push(rq, pc) < 0)
        request_fail(e, rq, TIO_ENOMEM, pc.chunk, pc.attempts, "out of memory");
}

static void
advance_cursor(struct tio_engine *e, struct request *rq, const struct piece *full, uint64_t used) {
    /* called when `full` came from the cursor: move it past the issued bytes */
    rq->cur_pos += used;
    if (rq->cur_pos >= chunk_len(e, rq->pl, full->chunk)) {
        rq->cur_chunk++;
        rq->cur_pos = 0;
    }
}

/* Host-tier transfer of one piece (done by the progress thread, mu released). */
static int64_t host_copy(struct tio_engine *e, struct request *rq, const struct piece *pc) {
    unsigned char *user = rq->buf + (uint64_t)pc->chunk * e->p.chunk_bytes + pc->pos;
    unsigned char *pool = e->host_pool + rq->pl->off[pc->chunk] + pc->pos;
    if (rq->mem == TIO_MEM_DEVICE) {
        const struct tio_cudart_api *cu = tio_cudart();
        if (!cu)
            return TIO_EUNAVAIL;
        if (!e->copy_stream_ok)
            return TIO_EUNAVAIL;
        /* on the engine's non-blocking stream: cudaMemcpy would run on the legacy default
         * stream and so wait for every kernel queued there (and hold back the later ones) */
        int err = rq->op == TIO_IO_OP_WRITE ? cu->memcpy_async(pool, user, (size_t)pc->len,
                                                               TIO_CUDA_MEMCPY_D2H, e->copy_stream)
                                            : cu->memcpy_async(user, pool, (size_t)pc->len,
                                                               TIO_CUDA_MEMCPY_H2D, e->copy_stream);
        if (!err)
            err = cu->stream_synchronize(e->copy_stream);
        return err ? TIO_ECUDA : (int64_t)pc->len;
    }
    if (rq->op == TIO_IO_OP_WRITE)
        memcpy(pool, user, (size_t)pc->len);
    else
        memcpy(user, pool, (size_t)pc->len);
    return (int64_t)pc->len;
}

/* Account a chunk whose bytes have all arrived: CRC on write, verification on read. */
static void chunk_done(struct tio_engine *e, struct request *rq, uint32_t c, uint32_t attempts) {
    if (!rq->pl->crc || rq->mem != TIO_MEM_HOST || rq->pl->tier != TIO_TIER_SSD)
        return;
    const unsigned char *data = rq->buf + (uint64_t)c * e->p.chunk_bytes;
    uint32_t crc = tio_crc32c(0, data, (size_t)chunk_len(e, rq->pl, c));
    if (rq->op == TIO_IO_OP_WRITE) {
        rq->pl->crc[c] = crc;
        return;
    }
    if (crc == rq->pl->crc[c])
        return;
    e->st.crc_errors++;
    if (rq->chunk_retries[c] < e->p.retries) {
        rq->chunk_retries[c]++;
        e->st.retries++;
        if (redo_chunk(e, rq, c, attempts) == 0) {
            queue_push(e, rq, 1);
            return;
        }
    }
    request_fail(e, rq, TIO_ECORRUPT, c, rq->chunk_retries[c] + 1,
                 "CRC32C mismatch (data read back differs from what was written)");
}

static void
piece_progress(struct tio_engine *e, struct request *rq, const struct piece *pc, uint64_t moved) {
    rq->chunk_left[pc->chunk] -= moved;
    if (moved < pc->len) {
        struct piece rest = { pc->chunk, pc->attempts, pc->pos + moved, pc->len - moved };
        if (redo_push(rq, rest) < 0)
            request_fail(e, rq, TIO_ENOMEM, pc->chunk, pc->attempts, "out of memory");
        else
            queue_push(e, rq, 1);
    } else if (rq->chunk_left[pc->chunk] == 0) {
        chunk_done(e, rq, pc->chunk, pc->attempts);
    }
}

/* Handle one backend result (under mu). */
static void complete_op(struct tio_engine *e, uint32_t slot, int64_t res) {
    struct op *o = &e->opv[slot];
    struct request *rq = o->rq;
    struct piece pc = o->pc;
    unsigned char *stage =
        o->stage >= 0 ? e->stage_mem + (uint64_t)o->stage * e->stage_bytes : NULL;
    rq->inflight--;
    e->nheavy -= (uint32_t)o->heavy;
    if (res > 0) {
        uint64_t moved = TIO_MIN((uint64_t)res, pc.len);
        if (moved < pc.len && e->files[o->file].direct) {
            moved &= ~(uint64_t)(TIO_IO_ALIGN - 1); /* O_DIRECT resumes at an aligned offset */
        }
        if (stage && rq->op == TIO_IO_OP_READ && moved)
            memcpy(rq->buf + (uint64_t)pc.chunk * e->p.chunk_bytes + pc.pos, stage, (size_t)moved);
        if (moved < pc.len)
            e->st.short_transfers++;
        if (moved == 0) { /* a short transfer below the alignment: counts as a failure */
            res = -EIO;
        } else {
            piece_progress(e, rq, &pc, moved);
        }
    }
    if (res <= 0 && !rq->error) {
        int64_t err = res == 0 ? -EIO : res;
        if (rq->canceled && err == -ECANCELED) {
            /* dropped by cancel */
        } else if (pc.attempts < e->p.retries && !rq->canceled) {
            pc.attempts++;
            e->st.retries++;
            if (redo_push(rq, pc) == 0)
                queue_push(e, rq, 1);
            else
                request_fail(e, rq, TIO_ENOMEM, pc.chunk, pc.attempts, "out of memory");
        } else {
            request_fail(e, rq, rq->op == TIO_IO_OP_READ ? TIO_EIO : err, pc.chunk, pc.attempts + 1,
                         res == 0 ? "transfer moved 0 bytes" : "transfer failed");
        }
    }
    if (o->stage >= 0)
        e->stage_free[e->nstage_free++] = o->stage;
    o->rq = NULL;
    e->op_free[e->nop_free++] = slot;
    if (rq->inflight == 0 && !request_has_work(rq))
        request_finish(e, rq);
}

/* Has rq's fence completed? 1 yes (the fence is then forgotten), 0 not yet (fence_blocked is
 * set: whoever drives polls again soon), -1 the query failed (the request has failed). */
static int fence_passed(struct tio_engine *e, struct request *rq) {
    if (!rq->fence)
        return 1;
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
    request_fail(e, rq, TIO_ECUDA, 0, 1, "cudaEventQuery on the request's fence failed");
    return -1;
}

/* Pick the request to serve next: urgent first, whose fence has completed; drop
 * finished/canceled ones on the way. */
static struct request *pick(struct tio_engine *e) {
    e->fence_blocked = 0;
    for (int q = TIO_PRIO_URGENT; q >= TIO_PRIO_NORMAL; q--) {
        struct request *rq = e->qhead[q];
        while (rq) {
            struct request *next = rq->qnext;
            if (request_has_work(rq) && fence_passed(e, rq) > 0)
                return rq;
            if (request_has_work(rq)) { /* waiting for its fence */
                rq = next;
                continue;
            }
            queue_remove(e, rq);
            if (rq->inflight == 0)
                request_finish(e, rq);
            rq = next;
        }
    }
    return NULL;
}

#if defined(TIO_ASAN)
static void asan_check(const struct tio_io_req *r) {
    if (r->mem != TIO_MEM_HOST)
        return;
    void *bad = __asan_region_is_poisoned(r->buf, r->len);
    if (bad) {
        TIO_LOG_ERROR("engine: buffer %p+%u handed to the kernel is poisoned at %p", r->buf, r->len,
                      bad);
        TIO_ASSERT(!"I/O buffer not addressable");
    }
}
#endif

/*
 * Build up to `max` transfers from the queues into batch[] (under mu). Host-tier pieces are
 * copied right here with mu released. Without `copies` (a caller submitting), a host-tier
 * piece or a write that needs a staging copy ends the batch instead (left queued for the
 * progress thread). Returns the number of transfers built.
 */
static uint32_t
build_batch(struct tio_engine *e, struct batch_item *batch, uint32_t max, int copies) {
    uint32_t n = 0;
    while (n < max && e->nop_free) {
        struct request *rq = pick(e);
        if (!rq || (rq->pl->tier == TIO_TIER_HOST && !copies))
            break;
        int from_cursor = rq->nredo == 0;
        struct piece pc = next_piece(e, rq);
        if (rq->pl->tier == TIO_TIER_HOST) {
            pc.len = TIO_MIN(pc.len, e->p.chunk_bytes);
            if (from_cursor)
                advance_cursor(e, rq, &pc, pc.len);
            rq->inflight++;
            unlock_signal(e);
            int64_t res = host_copy(e, rq, &pc);
            pthread_mutex_lock(&e->mu);
            rq->inflight--;
            if (res < 0)
                request_fail(e, rq, res, pc.chunk, 1, "host tier copy");
            else
                piece_progress(e, rq, &pc, (uint64_t)res);
            if (rq->inflight == 0 && !request_has_work(rq))
                request_finish(e, rq);
            continue;
        }
        uint32_t fi = chunk_file(e, rq->pl, pc.chunk);
        unsigned char *user = rq->buf + (uint64_t)pc.chunk * e->p.chunk_bytes + pc.pos;
        uint64_t len = TIO_MIN(pc.len, e->max_op);
        int staged = 0;
        if (e->files[fi].direct && rq->mem == TIO_MEM_HOST) {
            if ((uintptr_t)user % TIO_IO_ALIGN) {
                staged = 1;
            } else if (len % TIO_IO_ALIGN) {
                if (len > TIO_IO_ALIGN)
                    len &= ~(uint64_t)(TIO_IO_ALIGN - 1); /* aligned body now, tail staged */
                else
                    staged = 1;
            }
        } else if (e->files[fi].direct && len > TIO_IO_ALIGN && len % TIO_IO_ALIGN) {
            /* device memory: the backend bounces unaligned pieces; keep those small */
            len &= ~(uint64_t)(TIO_IO_ALIGN - 1);
        }
        if (staged && !copies && rq->op == TIO_IO_OP_WRITE) {
            if (!from_cursor) /* a submitting caller copies nothing: leave it queued */
                piece_unissue(e, rq, pc);
            break;
        }
        if (staged) {
            if (!e->nstage_free) { /* cannot happen: one stage per op slot */
                piece_unissue(e, rq, pc);
                break;
            }
            len = TIO_MIN(len, e->stage_bytes);
        }
        /* issue [pos, pos+len); give back the rest */
        if (from_cursor) {
            advance_cursor(e, rq, &pc, len);
        } else if (len < pc.len) {
            struct piece rest = { pc.chunk, pc.attempts, pc.pos + len, pc.len - len };
            piece_unissue(e, rq, rest);
        }
        pc.len = len;
        uint32_t slot = e->op_free[--e->nop_free];
        struct op *o = &e->opv[slot];
        o->rq = rq;
        o->pc = pc;
        o->file = (int32_t)fi;
        o->stage = -1;
        o->io_len = len;
        struct batch_item *b = &batch[n++];
        memset(b, 0, sizeof(*b));
        b->req.user = slot;
        b->req.op = rq->op;
        b->req.mem = rq->mem;
        b->req.file = (int32_t)fi;
        b->req.off = rq->pl->off[pc.chunk] + pc.pos;
        b->req.buf_index = -1;
        b->req.buf = user;
        if (staged) {
            o->stage = e->stage_free[--e->nstage_free];
            o->io_len = (len + TIO_IO_ALIGN - 1) & ~(uint64_t)(TIO_IO_ALIGN - 1);
            b->req.buf = e->stage_mem + (uint64_t)o->stage * e->stage_bytes;
            b->req.buf_index = o->stage;
            e->st.staged_bytes += len;
            if (rq->op == TIO_IO_OP_WRITE) {
                b->copy_from = user;
                b->copy_len = len;
            }
        }
        b->req.len = (uint32_t)o->io_len;
        o->heavy = (staged && rq->op == TIO_IO_OP_READ) || rq->pl->crc != NULL;
        e->nheavy += (uint32_t)o->heavy;
        rq->inflight++;
    }
    return n;
}

/*
 * Submit what the queues hold, as far as op slots allow (under mu, by the thread that drives
 * the backend; mu is released around staging copies and the backend call). `copies`: see
 * build_batch. Returns the number of transfers issued.
 */
static uint32_t drive_submit(struct tio_engine *e, int copies) {
    uint32_t depth = e->p.queue_depth;
    struct batch_item *batch = e->batch;
    struct tio_io_req *reqs = e->reqs;
    struct tio_io_cqe *cqes = e->cqes;
    /* cancel requests: ask the backend to drop their queued transfers */
    if (e->ops->cancel) {
        for (uint32_t s = 0; s < depth; s++) {
            if (e->opv[s].rq && e->opv[s].rq->canceled)
                (void)e->ops->cancel(e->bst, s);
        }
    }
    uint32_t n = build_batch(e, batch, depth, copies);
    if (!n)
        return 0;
    if (depth - e->nop_free == n) /* was idle */
        e->busy_since = tio_now_s();
    unlock_signal(e);
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
            for (int i = 0; i < k; i++)
                complete_op(e, (uint32_t)cqes[i].user, cqes[i].res);
            unlock_signal(e);
            continue;
        }
        /* submit failed as a whole: fail these transfers */
        pthread_mutex_lock(&e->mu);
        for (uint32_t i = done; i < n; i++)
            complete_op(e, (uint32_t)reqs[i].user, rc);
        unlock_signal(e);
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
    unlock_signal(e);
    int k = e->ops->reap(e->bst, timeout_ns == 0 ? 0 : 1, depth, timeout_ns, e->cqes);
    pthread_mutex_lock(&e->mu);
    e->in_reap = 0;
    for (int i = 0; i < k; i++)
        complete_op(e, (uint32_t)e->cqes[i].user, e->cqes[i].res);
    if (k > 0 && depth - e->nop_free == 0)
        e->st.busy_s += tio_now_s() - e->busy_since;
    return k;
}

static int queued_work(const struct tio_engine *e) {
    return (e->qhead[TIO_PRIO_URGENT] || e->qhead[TIO_PRIO_NORMAL]) && e->nop_free;
}

/* How often a request waiting for its fence (a CUDA event) is polled while nothing else wakes
 * the thread that drives (a completion does): the delay it may add to a transfer's start. */
#define TIO_FENCE_POLL_NS 50000

/* Progress thread without caller-driven completions: it alone drives the backend. */
static void progress_loop(struct tio_engine *e) {
    uint32_t depth = e->p.queue_depth;
    for (;;) {
        if (drive_submit(e, 1))
            continue;
        uint32_t inflight = depth - e->nop_free;
        if (inflight == 0) {
            if (e->stopping && !e->active)
                break;
            if (done_wake_due(e))
                pthread_cond_broadcast(&e->done_cv);
            if (e->fence_blocked) { /* poll the fences: nobody signals a CUDA event */
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += TIO_FENCE_POLL_NS;
                if (ts.tv_nsec >= 1000000000) {
                    ts.tv_sec++;
                    ts.tv_nsec -= 1000000000;
                }
                (void)pthread_cond_timedwait(&e->work_cv, &e->mu, &ts);
            } else {
                pthread_cond_wait(&e->work_cv, &e->mu);
            }
            continue;
        }
        /* wait for results; new work wakes us through notify (or a short poll without it) */
        int full = e->nop_free == 0;
        int64_t wait_ns = (full || e->ops->notify) ? 100000000 : 500000;
        (void)drive_reap(e, e->fence_blocked && !full ? TIO_FENCE_POLL_NS : wait_ns);
    }
}

/* Take the backend (under mu, !e->driving): this thread may now submit and reap. */
static void drive_begin(struct tio_engine *e) {
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
static void drive_end(struct tio_engine *e, const struct waiter *self, int copies) {
    uint32_t inflight;
    int ready = 0;
    for (;;) {
        while (queued_work(e) && drive_submit(e, copies))
            ;
        inflight = e->p.queue_depth - e->nop_free;
        if (!inflight || e->ops->arm(e->bst, 1) <= 0)
            break;
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
    e->driving = 0;
    if (e->parked && (ready || (inflight && e->park_idle) || queued_work(e) || e->stopping)) {
        e->park_idle = 0;
        e->ops->unpark(e->bst);
    }
    /* nobody drives now: if there is anything to drive, every other waiter is woken so that
     * one of them takes the backend (a waiter never sleeps on done_cv while transfers are in
     * flight and nobody reaps them; the parked progress thread only wakes on the eventfd) */
    if (inflight || queued_work(e)) {
        for (const struct waiter *w = e->waiters; w; w = w->next)
            e->wake_waiters |= w != self && w->want_drive;
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
                if ((!n && k <= 0) || e->waiters)
                    break;
            }
            uint32_t inflight = depth - e->nop_free;
            if (e->stopping && !e->active && !inflight) {
                e->driving = 0;
                break;
            }
            drive_end(e, NULL, 1);
            if (depth - e->nop_free == 0 && !queued_work(e))
                park_ns = -1; /* idle: whoever queues work unparks us */
            else if (e->fence_blocked)
                park_ns = TIO_FENCE_POLL_NS;
        }
        e->park_idle = park_ns < 0;
        e->parked = 1;
        unlock_signal(e);
        e->ops->park(e->bst, park_ns);
        pthread_mutex_lock(&e->mu);
        e->parked = 0;
    }
}

static void *progress_main(void *arg) {
    struct tio_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    if (e->caller_drive)
        progress_park_loop(e);
    else
        progress_loop(e);
    unlock_signal(e);
    return NULL;
}

/*
 * New work or a cancellation (under mu): wake whoever drives the backend. While at least half
 * of the queue depth is in flight, a normal request need not interrupt a reap: the next
 * completion (soon) picks it up, which saves a wake-up per request (measured: about a fifth
 * of the CPU per GiB at 1 MiB requests). Urgent requests and cancellations always interrupt.
 */
static void wake_progress(struct tio_engine *e, int urgent) {
    uint32_t inflight = e->p.queue_depth - e->nop_free;
    if (e->in_reap && e->ops->notify && (urgent || inflight * 2 < e->p.queue_depth))
        e->ops->notify(e->bst);
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
static void kick(struct tio_engine *e, int urgent) {
    if (e->caller_drive && !e->driving && !e->stopping) {
        drive_begin(e);
        (void)drive_submit(e, 0);
        drive_end(e, NULL, 0);
        return;
    }
    wake_progress(e, urgent);
}

/* ------------------------------------------------------------------------------------------ */
/* Creation                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static int select_backend(struct tio_engine *e, const char *name) {
    if (!name || !*name || !strcmp(name, "auto")) {
        const char *env = getenv("TIO_IO_BACKEND"); /* NOLINT(concurrency-mt-unsafe) */
        if (env && *env && strcmp(env, "auto") != 0)
            name = env;
    }
    char reason[256];
    if (name && *name && strcmp(name, "auto") != 0) {
        const struct tio_io_backend_ops *ops = tio_io_backend_find(name);
        if (!ops) {
            int known = 0;
            const char *list[] = { "posix", "uring", "cufile", "cuda", "null", "fault" };
            for (size_t i = 0; i < TIO_ARRAY_LEN(list); i++)
                known |= !strcmp(list[i], name);
            return tio_set_error(known ? TIO_EUNAVAIL : TIO_ENOTFOUND,
                                 known ? "engine: backend %s was not compiled in"
                                       : "engine: unknown backend \"%s\" (posix, uring, cufile, "
                                         "cuda, null, fault or auto)",
                                 name);
        }
        int rc = tio_io_backend_validate(ops);
        if (rc < 0)
            return rc;
        if (ops->probe(reason, sizeof reason) <= 0)
            return tio_set_error(TIO_EUNAVAIL, "engine: backend %s is not available here: %s",
                                 ops->name, reason);
        e->ops = ops;
        return 0;
    }
    int best = 0;
    for (size_t i = 0; i < tio_io_backend_count(); i++) {
        const struct tio_io_backend_ops *ops = tio_io_backend_at(i);
        if ((ops->caps & TIO_IO_CAP_TEST_ONLY) || tio_io_backend_validate(ops) < 0)
            continue;
        int score = ops->probe(reason, sizeof reason);
        TIO_LOG_DEBUG("engine: backend %s: score %d (%s)", ops->name, score, reason);
        if (score > best) {
            best = score;
            e->ops = ops;
        }
    }
    if (!e->ops)
        return tio_set_error(TIO_EUNAVAIL, "engine: no I/O backend is available");
    return 0;
}

static int check_params(const struct tio_engine_params *p) {
    if (!p)
        return tio_set_error(TIO_EINVAL, "engine: params is NULL");
    if (p->ndirs && !p->dirs)
        return tio_set_error(TIO_EINVAL, "engine: dirs is NULL but ndirs is %zu", p->ndirs);
    if (p->ndirs > 256)
        return tio_set_error(TIO_EINVAL, "engine: ndirs %zu exceeds 256", p->ndirs);
    for (size_t i = 0; i < p->ndirs; i++) {
        if (!p->dirs[i] || !*p->dirs[i])
            return tio_set_error(TIO_EINVAL, "engine: dirs[%zu] is empty", i);
    }
    if (!p->ndirs && !p->host_tier_bytes)
        return tio_set_error(TIO_EINVAL,
                             "engine: no SSD directory (dirs) and no host tier (host_tier_bytes)");
    if (p->chunk_bytes < TIO_IO_ALIGN || p->chunk_bytes % TIO_IO_ALIGN)
        return tio_set_error(TIO_EINVAL,
                             "engine: chunk_bytes %llu must be a positive multiple of 4096",
                             (unsigned long long)p->chunk_bytes);
    if (p->queue_depth < 1 || p->queue_depth > 4096)
        return tio_set_error(TIO_EINVAL, "engine: queue_depth %u must be 1..4096", p->queue_depth);
    if (p->max_requests < 1 || p->max_requests > (1u << 24))
        return tio_set_error(TIO_EINVAL, "engine: max_requests %u must be 1..16777216",
                             p->max_requests);
    if (p->retries > 100)
        return tio_set_error(TIO_EINVAL, "engine: retries %u exceeds 100", p->retries);
    if (p->threads > 256)
        return tio_set_error(TIO_EINVAL, "engine: threads %u exceeds 256", p->threads);
    if (p->host_tier_bytes > (UINT64_C(1) << 50))
        return tio_set_error(TIO_EINVAL, "engine: host_tier_bytes is larger than 1 PiB");
    return 0;
}

int tio_engine_new(const struct tio_engine_params *params, struct tio_engine **out) {
    int rc = check_params(params);
    if (rc < 0)
        return rc;
    struct tio_engine *e = tio_calloc(1, sizeof(*e));
    if (!e)
        return TIO_ENOMEM;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->work_cv, NULL);
    pthread_cond_init(&e->done_cv, NULL);
    e->p = *params;
    e->p.dirs = NULL;
    e->p.backend = NULL;
    e->p.backend_options = NULL;
    if (!e->p.threads)
        e->p.threads = TIO_MIN(e->p.queue_depth, 64u);
    e->max_op = TIO_MIN((uint64_t)TIO_IO_MAX_OP, e->p.chunk_bytes);
    uint32_t depth = e->p.queue_depth;

    rc = select_backend(e, params->backend);
    if (rc < 0)
        goto fail;
    if (params->backend_options) {
        e->backend_options = tio_strdup(params->backend_options);
        if (!e->backend_options) {
            rc = TIO_ENOMEM;
            goto fail;
        }
    }
    (void)snprintf(e->st.backend, sizeof e->st.backend, "%s", e->ops->name);

    e->nbuckets = 64;
    e->buckets = tio_calloc(e->nbuckets, sizeof(struct tensor *));
    e->opv = tio_calloc(depth, sizeof(*e->opv));
    e->batch = tio_calloc(depth, sizeof(*e->batch));
    e->reqs = tio_calloc(depth, sizeof(*e->reqs));
    e->cqes = tio_calloc(depth, sizeof(*e->cqes));
    e->op_free = tio_calloc(depth, sizeof(*e->op_free));
    e->stage_free = tio_calloc(depth, sizeof(*e->stage_free));
    e->cq_cap = e->p.max_requests;
    e->cq = tio_calloc(e->cq_cap, sizeof(*e->cq));
    e->files = tio_calloc(params->ndirs ? params->ndirs : 1, sizeof(*e->files));
    e->fds = tio_calloc(params->ndirs ? params->ndirs : 1, sizeof(*e->fds));
    if (!e->buckets || !e->opv || !e->batch || !e->reqs || !e->cqes || !e->op_free ||
        !e->stage_free || !e->cq || !e->files || !e->fds) {
        rc = TIO_ENOMEM;
        goto fail;
    }
    for (uint32_t i = 0; i < depth; i++)
        e->op_free[e->nop_free++] = depth - 1 - i;

    int any_direct = 0;
    for (size_t i = 0; i < params->ndirs; i++) {
        for (size_t j = 0; j < i; j++) {
            if (!strcmp(params->dirs[i], params->dirs[j])) {
                rc = tio_set_error(TIO_EINVAL, "engine: dirs[%zu] repeats dirs[%zu] (%s)", i, j,
                                   params->dirs[i]);
                goto fail;
            }
        }
        rc = tio_swapfile_open(&e->files[i], params->dirs[i], 1);
        if (rc < 0)
            goto fail;
        e->nfiles++;
        e->fds[i] = e->files[i].fd;
        any_direct |= e->files[i].direct;
    }

    /* staging: one aligned buffer per in-flight transfer */
    e->stage_bytes = TIO_MIN(e->p.chunk_bytes, (uint64_t)(4u << 20));
    if (any_direct) {
        e->stage_mem = tio_io_alloc((size_t)(e->stage_bytes * depth));
        if (!e->stage_mem) {
            rc = TIO_ENOMEM;
            goto fail;
        }
        for (uint32_t i = 0; i < depth; i++)
            e->stage_free[e->nstage_free++] = (int32_t)(depth - 1 - i);
    }

    if (e->p.host_tier_bytes) {
        uint64_t hb = (e->p.host_tier_bytes + TIO_IO_ALIGN - 1) & ~(uint64_t)(TIO_IO_ALIGN - 1);
        char why[200];
        const struct tio_cudart_api *cu = tio_cudart_usable(why, sizeof why) ? tio_cudart() : NULL;
        void *mem = NULL;
        if (cu && cu->stream_create(&e->copy_stream, TIO_CUDA_STREAM_NON_BLOCKING) == 0)
            e->copy_stream_ok = 1;
        if (cu && cu->host_alloc(&mem, (size_t)hb, 0) == 0 && mem) {
            e->host_pool_cuda = 1;
        } else {
            mem = tio_io_alloc((size_t)hb);
            if (mem && mlock(mem, (size_t)hb) < 0)
                TIO_LOG_INFO("engine: host tier of %llu bytes not locked (RLIMIT_MEMLOCK); "
                             "pageable",
                             (unsigned long long)hb);
            else if (mem)
                e->host_locked = (size_t)hb;
        }
        if (!mem) {
            rc = tio_set_error(TIO_ENOMEM, "engine: cannot allocate a host tier of %llu bytes",
                               (unsigned long long)hb);
            goto fail;
        }
        e->host_pool = mem;
        tio_extents_init(&e->host_ext, TIO_IO_ALIGN);
        rc = tio_extents_add(&e->host_ext, 0, hb);
        if (rc < 0)
            goto fail;
    }

    struct tio_io_config cfg = {
        .fds = e->fds,
        .nfds = e->nfiles,
        .depth = depth,
        .threads = e->p.threads,
        .direct = any_direct,
        .max_op = e->max_op,
        .options = e->backend_options,
    };
    rc = e->ops->init(&cfg, &e->bst);
    if (rc < 0)
        goto fail;
    if (e->stage_mem && e->ops->register_bufs) {
        void **bufs = tio_calloc(depth, sizeof(*bufs));
        uint64_t *lens = tio_calloc(depth, sizeof(*lens));
        if (bufs && lens) {
            for (uint32_t i = 0; i < depth; i++) {
                bufs[i] = e->stage_mem + (uint64_t)i * e->stage_bytes;
                lens[i] = e->stage_bytes;
            }
            if (e->ops->register_bufs(e->bst, bufs, lens, depth) < 0)
                TIO_LOG_INFO("engine: staging buffers not registered with %s", e->ops->name);
        }
        tio_free(bufs);
        tio_free(lens);
    }
    /* caller-driven completions where the backend can park the progress thread */
    e->caller_drive = e->ops->arm && e->ops->arm(e->bst, 0) == 0;
    if (pthread_create(&e->thread, NULL, progress_main, e) != 0) {
        rc = tio_set_error(TIO_ENOMEM, "engine: cannot start the progress thread");
        goto fail;
    }
    e->thread_started = 1;
    TIO_LOG_INFO("engine: backend %s, %u dir(s), chunk %llu, depth %u", e->ops->name, e->nfiles,
                 (unsigned long long)e->p.chunk_bytes, depth);
    if (params->ssd_reserve_bytes) {
        rc = tio_engine_reserve(e, params->ssd_reserve_bytes);
        if (rc < 0)
            goto fail;
    }
    *out = e;
    return 0;
fail : {
    /* keep the failure detail across the cleanup */
    char detail[512];
    (void)snprintf(detail, sizeof detail, "%s", tio_last_error());
    tio_engine_free(e);
    return tio_set_error(rc, "%s", detail);
}
}

void tio_engine_free(struct tio_engine *e) {
    if (!e)
        return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->mu);
        e->stopping = 1;
        for (struct request *rq = e->active; rq; rq = rq->anext)
            rq->canceled = 1;
        wake_progress(e, 1);
        pthread_cond_broadcast(&e->work_cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    if (e->bst) {
        if (e->ops->unregister_bufs)
            e->ops->unregister_bufs(e->bst);
        e->ops->fini(e->bst);
    }
    while (e->active) { /* only if the thread never started */
        struct request *rq = e->active;
        e->active = rq->anext;
        request_free(rq);
    }
    for (size_t i = 0; e->buckets && i < e->nbuckets; i++) {
        while (e->buckets[i]) {
            struct tensor *t = e->buckets[i];
            e->buckets[i] = t->next;
            tio_free(t->stored ? t->stored->off : NULL);
            tio_free(t->stored ? t->stored->crc : NULL);
            tio_free(t->stored);
            tio_free(t);
        }
    }
    for (uint32_t i = 0; i < e->nfiles; i++)
        tio_swapfile_close(&e->files[i]);
    if (e->copy_stream_ok) {
        const struct tio_cudart_api *cu = tio_cudart();
        if (cu)
            (void)cu->stream_destroy(e->copy_stream);
    }
    if (e->host_pool) {
        if (e->host_pool_cuda) {
            const struct tio_cudart_api *cu = tio_cudart();
            if (cu)
                (void)cu->free_host(e->host_pool);
        } else {
            /* the memory may be malloc's heap: a lock left on it would outlive the free and pin
             * whatever malloc puts there next (and make MADV_DONTNEED on it fail) */
            if (e->host_locked)
                (void)munlock(e->host_pool, e->host_locked);
            tio_free(e->host_pool);
        }
        tio_extents_fini(&e->host_ext);
    }
    tio_free(e->stage_mem);
    tio_free(e->buckets);
    tio_free(e->opv);
    tio_free(e->batch);
    tio_free(e->reqs);
    tio_free(e->cqes);
    tio_free(e->op_free);
    tio_free(e->stage_free);
    tio_free(e->cq);
    tio_free(e->files);
    tio_free(e->fds);
    tio_free(e->backend_options);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->work_cv);
    pthread_cond_destroy(&e->done_cv);
    tio_free(e);
}

/* ------------------------------------------------------------------------------------------ */
/* Public calls                                                                               */
/* ------------------------------------------------------------------------------------------ */

int tio_engine_reserve(struct tio_engine *e, uint64_t bytes) {
    if (!e)
        return tio_set_error(TIO_EINVAL, "engine: NULL engine");
    if (!e->nfiles)
        return bytes ? tio_set_error(-ENOSPC, "engine: reserve %llu bytes: no SSD directory",
                                     (unsigned long long)bytes)
                     : 0;
    uint64_t nch = (bytes + e->p.chunk_bytes - 1) / e->p.chunk_bytes;
    uint64_t per_dir = (nch + e->nfiles - 1) / e->nfiles * e->p.chunk_bytes;
    per_dir = TIO_MIN(per_dir, (bytes + TIO_IO_ALIGN - 1) & ~(uint64_t)(TIO_IO_ALIGN - 1));
    pthread_mutex_lock(&e->mu);
    int rc = 0;
    /* check every directory first so that a shortage changes nothing */
    for (uint32_t i = 0; i < e->nfiles && rc == 0; i++) {
        struct tio_swapfile *sf = &e->files[i];
        if (sf->size >= per_dir || !e->p.preallocate)
            continue;
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
    if (!e)
        return tio_set_error(TIO_EINVAL, "engine %s: NULL engine", what);
    if (!bytes)
        return tio_set_error(TIO_EINVAL, "engine %s: bytes is 0 (zero-byte transfers are errors)",
                             what);
    if (!ptr)
        return tio_set_error(TIO_EINVAL, "engine %s: ptr is NULL", what);
    if (mem != TIO_MEM_HOST && mem != TIO_MEM_DEVICE)
        return tio_set_error(TIO_EINVAL, "engine %s: mem %d is not a memory kind", what, mem);
    if (priority != TIO_PRIO_NORMAL && priority != TIO_PRIO_URGENT)
        return tio_set_error(TIO_EINVAL, "engine %s: priority %d is not urgent or normal", what,
                             priority);
    if ((uintptr_t)ptr > UINTPTR_MAX - bytes)
        return tio_set_error(TIO_EINVAL, "engine %s: ptr + bytes overflows", what);
    return 0;
}

static int check_mem(struct tio_engine *e, int32_t mem, int32_t tier, const char *what) {
    if (mem != TIO_MEM_DEVICE)
        return 0;
    if (tier == TIO_TIER_SSD && !(e->ops->caps & TIO_IO_CAP_DEVICE_MEM))
        return tio_set_error(TIO_EUNAVAIL,
                             "engine %s: device memory needs the cufile or cuda backend (this "
                             "engine uses %s)",
                             what, e->ops->name);
    if (tier == TIO_TIER_HOST && (!tio_cudart() || !e->copy_stream_ok))
        return tio_set_error(TIO_EUNAVAIL,
                             "engine %s: device memory to the host tier needs "
                             "cudart with a usable device when the engine was made: %s",
                             what, tio_cudart_reason());
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
                   void *fence) {
    struct request *rq = tio_calloc(1, sizeof(*rq));
    if (!rq)
        return TIO_ENOMEM;
    rq->chunk_left = tio_malloc(pl->nchunks * sizeof(*rq->chunk_left));
    rq->chunk_retries = tio_calloc(pl->nchunks, sizeof(*rq->chunk_retries));
    if (!rq->chunk_left || !rq->chunk_retries) {
        request_free(rq);
        return TIO_ENOMEM;
    }
    for (uint32_t c = 0; c < pl->nchunks; c++)
        rq->chunk_left[c] = chunk_len(e, pl, c);
    rq->tag = tag;
    rq->fence = fence;
    rq->op = op;
    rq->mem = mem;
    rq->prio = prio;
    rq->buf = ptr;
    rq->bytes = bytes;
    rq->t = t;
    rq->pl = pl;
    rq->anext = e->active;
    if (e->active)
        e->active->aprev = rq;
    e->active = rq;
    queue_push(e, rq, 0);
    e->outstanding++;
    e->st.requests_submitted++;
    kick(e, prio == TIO_PRIO_URGENT);
    return 0;
}

/* A fence needs cudart (its events are queried by the engine's threads). */
static int check_fence(const void *fence, const char *what) {
    if (fence && !tio_cudart())
        return tio_set_error(TIO_EUNAVAIL, "engine %s: a fence needs cudart: %s", what,
                             tio_cudart_reason());
    return 0;
}

int tio_engine_write(struct tio_engine *e,
                     uint64_t tensor_id,
                     const void *ptr,
                     uint64_t bytes,
                     int32_t mem,
                     int32_t tier,
                     int32_t priority,
                     uint64_t tag) {
    return tio_engine_write_fenced(e, tensor_id, ptr, bytes, mem, tier, priority, tag, NULL);
}

int tio_engine_write_fenced(struct tio_engine *e,
                            uint64_t tensor_id,
                            const void *ptr,
                            uint64_t bytes,
                            int32_t mem,
                            int32_t tier,
                            int32_t priority,
                            uint64_t tag,
                            void *fence) {
    int rc = check_submit(e, ptr, bytes, mem, priority, "write");
    if (rc == 0)
        rc = check_fence(fence, "write");
    if (rc < 0)
        return rc;
    if (tier != TIO_TIER_SSD && tier != TIO_TIER_HOST)
        return tio_set_error(TIO_EINVAL, "engine write: tier %d is not SSD (%d) or HOST (%d)", tier,
                             TIO_TIER_SSD, TIO_TIER_HOST);
    if (tier == TIO_TIER_SSD && !e->nfiles)
        return tio_set_error(TIO_EUNAVAIL, "engine write: no SSD directory configured");
    if (tier == TIO_TIER_HOST && !e->host_pool)
        return tio_set_error(TIO_EUNAVAIL, "engine write: no host tier (host_tier_bytes is 0)");
    rc = check_mem(e, mem, tier, "write");
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&e->mu);
    if (e->outstanding >= e->p.max_requests) {
        uint32_t o = e->outstanding;
        pthread_mutex_unlock(&e->mu);
        return tio_set_error(-EAGAIN,
                             "engine write: %u requests outstanding (max_requests); reap "
                             "completions first",
                             o);
    }
    struct tensor *t = tensor_get(e, tensor_id);
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
    rc = placement_new(e, tensor_id, bytes, tier, &pl);
    if (rc >= 0) {
        t->pending = pl;
        rc = enqueue(e, t, pl, TIO_IO_OP_WRITE, (void *)(uintptr_t)ptr, bytes, mem, priority, tag,
                     fence);
        if (rc < 0) {
            t->pending = NULL;
            placement_free(e, pl);
        }
    }
    if (rc < 0)
        tensor_maybe_remove(e, t);
    unlock_signal(e); /* kick may have completed requests */
    return rc;
}

int tio_engine_read(struct tio_engine *e,
                    uint64_t tensor_id,
                    void *ptr,
                    uint64_t bytes,
                    int32_t mem,
                    int32_t priority,
                    uint64_t tag) {
    return tio_engine_read_fenced(e, tensor_id, ptr, bytes, mem, priority, tag, NULL);
}

int tio_engine_read_fenced(struct tio_engine *e,
                           uint64_t tensor_id,
                           void *ptr,
                           uint64_t bytes,
                           int32_t mem,
                           int32_t priority,
                           uint64_t tag,
                           void *fence) {
    int rc = check_submit(e, ptr, bytes, mem, priority, "read");
    if (rc == 0)
        rc = check_fence(fence, "read");
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&e->mu);
    struct tensor *t = tensor_find(e, tensor_id);
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
    if (rc >= 0 && e->outstanding >= e->p.max_requests)
        rc = tio_set_error(-EAGAIN,
                           "engine read: %u requests outstanding (max_requests); reap "
                           "completions first",
                           e->outstanding);
    if (rc >= 0) {
        t->readers++;
        rc = enqueue(e, t, t->stored, TIO_IO_OP_READ, ptr, bytes, mem, priority, tag, fence);
        if (rc < 0)
            t->readers--;
    }
    unlock_signal(e); /* kick may have completed requests */
    return rc;
}

int tio_engine_drop(struct tio_engine *e, uint64_t tensor_id) {
    if (!e)
        return tio_set_error(TIO_EINVAL, "engine drop: NULL engine");
    pthread_mutex_lock(&e->mu);
    struct tensor *t = tensor_find(e, tensor_id);
    int rc = 0;
    if (!t || !t->stored)
        rc = tio_set_error(TIO_ENOTFOUND, "engine drop: tensor %llu is not stored",
                           (unsigned long long)tensor_id);
    else if (t->pending || t->readers)
        rc = tio_set_error(TIO_ESTATE, "engine drop: tensor %llu has a request in flight",
                           (unsigned long long)tensor_id);
    else {
        placement_free(e, t->stored);
        t->stored = NULL;
        tensor_maybe_remove(e, t);
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

int tio_engine_tensor_info(struct tio_engine *e,
                           uint64_t tensor_id,
                           uint64_t *bytes,
                           int32_t *tier) {
    if (!e)
        return tio_set_error(TIO_EINVAL, "engine: NULL engine");
    pthread_mutex_lock(&e->mu);
    struct tensor *t = tensor_find(e, tensor_id);
    int rc = 0;
    if (!t || !t->stored) {
        rc = tio_set_error(TIO_ENOTFOUND, "engine: tensor %llu is not stored",
                           (unsigned long long)tensor_id);
    } else {
        if (bytes)
            *bytes = t->stored->bytes;
        if (tier)
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
    if (!e || (max && !out))
        return tio_set_error(TIO_EINVAL, "engine poll: NULL argument");
    pthread_mutex_lock(&e->mu);
    size_t k = take_completions(e, out, max);
    pthread_mutex_unlock(&e->mu);
    return (int)k;
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
static int
drive_wait(struct tio_engine *e, size_t min, int64_t timeout_ns, const struct timespec *deadline) {
    drive_begin(e);
    for (;;) {
        (void)drive_submit(e, 1);
        if (e->cq_count >= min || e->p.queue_depth == e->nop_free)
            return 0;
        int64_t left = -1;
        if (timeout_ns >= 0) {
            left = ns_until(deadline);
            if (left <= 0) {
                (void)drive_reap(e, 0); /* what is there already still counts */
                return e->cq_count < min;
            }
        }
        (void)drive_reap(e, e->fence_blocked && (left < 0 || left > TIO_FENCE_POLL_NS)
                                ? TIO_FENCE_POLL_NS
                                : left);
    }
}

int tio_engine_wait(
    struct tio_engine *e, struct tio_completion *out, size_t min, size_t max, int64_t timeout_ns) {
    if (!e || (max && !out))
        return tio_set_error(TIO_EINVAL, "engine wait: NULL argument");
    if (min > max)
        return tio_set_error(TIO_EINVAL, "engine wait: min %zu > max %zu", min, max);
    if (max > INT32_MAX)
        max = INT32_MAX;
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    if (timeout_ns >= 0) {
        int64_t ns = deadline.tv_nsec + timeout_ns % 1000000000;
        deadline.tv_sec += (time_t)(timeout_ns / 1000000000 + ns / 1000000000);
        deadline.tv_nsec = (long)(ns % 1000000000);
    }
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
            int timed_out = drive_wait(e, min, timeout_ns, &deadline);
            drive_end(e, &self, 1);
            if (timed_out)
                break;
            if (e->cq_count >= min || e->p.queue_depth - e->nop_free)
                continue;
            /* nothing in flight: our completions went to another thread; wait below until
             * a completion arrives or the backend is handed back with work to drive */
        }
        /* every sleeping waiter is a driver candidate: whoever hands the backend back with
         * work in flight (a submitting caller, the progress thread, another waiter) wakes it.
         * (Only waiters that found the backend busy were, and one that found nothing in
         * flight slept through later requests while the progress thread carried them.) */
        self.want_drive = e->caller_drive;
        if (done_wake_due(e)) /* completions we reaped may meet another waiter's min */
            pthread_cond_broadcast(&e->done_cv);
        int rc = timeout_ns < 0 ? pthread_cond_wait(&e->done_cv, &e->mu)
                                : pthread_cond_timedwait(&e->done_cv, &e->mu, &deadline);
        if (rc == ETIMEDOUT)
            break;
    }
    struct waiter **pp = &e->waiters;
    while (*pp != &self)
        pp = &(*pp)->next;
    *pp = self.next;
    size_t k = take_completions(e, out, max);
    unlock_signal(e);
    return (int)k;
}

int tio_engine_cancel(struct tio_engine *e, uint64_t tag) {
    if (!e)
        return tio_set_error(TIO_EINVAL, "engine cancel: NULL engine");
    int n = 0;
    pthread_mutex_lock(&e->mu);
    struct request *rq = e->active;
    while (rq) {
        struct request *next = rq->anext;
        if (rq->tag == tag && !rq->canceled) {
            rq->canceled = 1;
            n++;
            if (rq->inflight == 0)
                request_finish(e, rq); /* nothing in the backend: complete it now */
        }
        rq = next;
    }
    wake_progress(e, 1);
    unlock_signal(e);
    if (!n)
        return tio_set_error(TIO_ENOTFOUND, "engine cancel: no outstanding request with tag %llu",
                             (unsigned long long)tag);
    return n;
}

int tio_engine_stats(struct tio_engine *e, struct tio_engine_stats *out) {
    if (!e || !out)
        return tio_set_error(TIO_EINVAL, "engine stats: NULL argument");
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
        for (struct tensor *t = e->buckets[i]; t; t = t->next)
            stored += t->stored != NULL;
    }
    out->tensors = stored;
    if (out->inflight_ops)
        out->busy_s += tio_now_s() - e->busy_since;
    pthread_mutex_unlock(&e->mu);
    return 0;
}

const char *tio_engine_last_error(struct tio_engine *e) {
    /* the progress thread may overwrite e->last_error at any time: hand out a copy */
    static _Thread_local char copy[sizeof(((struct tio_engine *)0)->last_error)];
    if (!e)
        return "";
    pthread_mutex_lock(&e->mu);
    memcpy(copy, e->last_error, sizeof copy);
    pthread_mutex_unlock(&e->mu);
    return copy;
}

const char *tio_engine_backend(const struct tio_engine *e) {
    return e && e->ops ? e->ops->name : "";
}
