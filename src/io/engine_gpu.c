/*
 * The engine's GPU data path: device memory moves in two stages around pinned staging rings,
 * so the disk never waits for the GPU and the GPU never waits for the host.
 *
 *   read   SSD --(backend, no fence)--> H2D ring buffer --(h2d stream, after
 *          cudaStreamWaitEvent(h2d, fence))--> device; the buffer's event is recorded after
 *          the copy, `done` after the request's last copy
 *   write  device --(d2h stream, after cudaStreamWaitEvent(d2h, fence))--> D2H ring buffer;
 *          its event completes --> backend write to the SSD; the buffer is reused once that
 *          write completed
 *   host   pool <-> device on the same two streams (the pool is pinned): reads after a wait
 *   tier   on the fence on h2d, writes after one on d2h (and after the pool reads queued on
 *          h2d, whose extents a write may reuse); a write with `done` (the executor's,
 *          engine_ordered.h) records its landing event and `done` on d2h after its copies and
 *          completes at once, and a read of that copy waits on h2d for the landing event (H8)
 *
 * One stream per direction, made on the device current when the engine was created; the
 * progress thread binds itself to that device, a caller thread that drives for a moment is
 * bound for the call and handed back its own. Nothing here waits for a stream on the host:
 * events are polled by whoever drives (gpu_pending makes it poll every TIO_FENCE_POLL_NS).
 * Rules H7 and H8 (engine_internal.h) say when a ring buffer, a request and a pool copy are free.
 */
#include <string.h>

#include "common/common_impl.h"
#include "io/engine_internal.h"

/* The engine whose progress thread this is (bound to its device once), or NULL. */
static _Thread_local const struct tio_engine *tl_bound;

void tio_eng_gpu_enter(const struct tio_engine *e, int *prev) {
    const struct tio_cudart_api *cu = e->gpu.cu;
    *prev = -1;
    if (!cu || tl_bound == e || !cu->get_device || !cu->set_device) {
        return;
    }
    int cur = -1;
    if (cu->get_device(&cur) == 0 && cur != e->gpu.device && cu->set_device(e->gpu.device) == 0) {
        *prev = cur;
    }
}

void tio_eng_gpu_leave(const struct tio_engine *e, int prev) {
    if (prev >= 0) {
        (void)e->gpu.cu->set_device(prev);
    }
}

/* The progress thread: bound to the engine's device for its life. */
void tio_eng_gpu_bind_thread(const struct tio_engine *e) {
    const struct tio_cudart_api *cu = e->gpu.cu;
    if (cu && cu->set_device && cu->set_device(e->gpu.device) == 0) {
        tl_bound = e;
    }
}

unsigned char *tio_eng_gpu_buf(const struct tio_engine *e, int dir, int32_t i) {
    return e->gpu.ring[dir].mem + (uint64_t)i * e->stage_bytes;
}

static int ring_init(struct tio_engine *e, struct gpu_ring *r, uint32_t n) {
    const struct tio_cudart_api *cu = e->gpu.cu;
    r->ev = tio_calloc(n, sizeof(*r->ev));
    r->free = tio_calloc(n, sizeof(*r->free));
    r->busy = tio_calloc(n, sizeof(*r->busy));
    if (!r->ev || !r->free || !r->busy) {
        return TIO_ENOMEM;
    }
    void *mem = NULL;
    int err = cu->host_alloc(&mem, (size_t)(e->stage_bytes * n), TIO_CUDA_HOST_ALLOC_PORTABLE);
    if (err || !mem) {
        return tio_set_error(TIO_ECUDA,
                             "engine: cudaHostAlloc of a %u x %llu byte staging ring: "
                             "CUDA error %d",
                             n, (unsigned long long)e->stage_bytes, err);
    }
    r->mem = mem;
    for (uint32_t i = 0; i < n; i++) {
        err = cu->event_create(&r->ev[i], TIO_CUDA_EVENT_DISABLE_TIMING);
        if (err) {
            return tio_set_error(TIO_ECUDA, "engine: cudaEventCreate: CUDA error %d", err);
        }
        r->n++;
        r->free[r->nfree++] = (int32_t)(n - 1 - i);
    }
    return 0;
}

int tio_eng_gpu_init(struct tio_engine *e) {
    char why[200];
    if (!tio_cudart_usable(why, sizeof why)) {
        return 0; /* no GPU path: device memory needs a device-capable backend */
    }
    const struct tio_cudart_api *cu = tio_cudart();
    struct tio_eng_gpu *g = &e->gpu;
    g->cu = cu;
    g->device = 0;
    if (cu->get_device && cu->get_device(&g->device) != 0) {
        g->device = 0;
    }
    /* both directions at once, a buffer per op slot (at most 16) each, so SSD and PCIe overlap
     * (H7): a read holds its buffer from its SSD stage until the GPU passed its fence and ran
     * its copy, so the ring bounds how far reads are staged ahead of a GPU that lags the
     * training thread (with a quarter of the slots, the GPU twin's SSD tier stalled on it) */
    uint32_t n = TIO_MAX(2u, TIO_MIN(16u, e->p.queue_depth));
    int err = cu->stream_create(&g->h2d, TIO_CUDA_STREAM_NON_BLOCKING);
    if (!err) {
        err = cu->stream_create(&g->d2h, TIO_CUDA_STREAM_NON_BLOCKING);
    }
    if (!err) {
        err = cu->stream_create(&g->sh2d, TIO_CUDA_STREAM_NON_BLOCKING);
    }
    if (!err) {
        err = cu->stream_create(&g->sd2h, TIO_CUDA_STREAM_NON_BLOCKING);
    }
    if (!err) {
        err = cu->event_create(&g->h2d_mark, TIO_CUDA_EVENT_DISABLE_TIMING);
    }
    g->copying = tio_calloc(n, sizeof(*g->copying));
    if (err) {
        return tio_set_error(TIO_ECUDA, "engine: copy streams on device %d: CUDA error %d",
                             g->device, err);
    }
    if (!g->copying) {
        return TIO_ENOMEM;
    }
    int rc = ring_init(e, &g->ring[0], n);
    return rc < 0 ? rc : ring_init(e, &g->ring[1], n);
}

void tio_eng_gpu_fini(struct tio_engine *e) {
    struct tio_eng_gpu *g = &e->gpu;
    const struct tio_cudart_api *cu = g->cu;
    if (!cu) {
        return;
    }
    int prev;
    tio_eng_gpu_enter(e, &prev);
    if (g->h2d) {
        (void)cu->stream_synchronize(g->h2d);
        (void)cu->stream_destroy(g->h2d);
    }
    if (g->d2h) {
        (void)cu->stream_synchronize(g->d2h);
        (void)cu->stream_destroy(g->d2h);
    }
    if (g->sh2d) {
        (void)cu->stream_synchronize(g->sh2d);
        (void)cu->stream_destroy(g->sh2d);
    }
    if (g->sd2h) {
        (void)cu->stream_synchronize(g->sd2h);
        (void)cu->stream_destroy(g->sd2h);
    }
    for (int d = 0; d < 2; d++) {
        struct gpu_ring *r = &g->ring[d];
        for (uint32_t i = 0; i < r->n; i++) {
            (void)cu->event_destroy(r->ev[i]);
        }
        if (r->mem) {
            (void)cu->free_host(r->mem);
        }
        tio_free(r->ev);
        tio_free(r->free);
        tio_free(r->busy);
    }
    for (uint32_t i = 0; i < g->nevpool; i++) {
        (void)cu->event_destroy(g->evpool[i]);
    }
    if (g->h2d_mark) {
        (void)cu->event_destroy(g->h2d_mark);
    }
    tio_free(g->evpool);
    tio_free(g->copying);
    tio_eng_gpu_leave(e, prev);
    memset(g, 0, sizeof(*g));
}

int tio_eng_gpu_path(const struct tio_engine *e, int32_t mem, int32_t tier) {
    if (mem != TIO_MEM_DEVICE || !e->gpu.cu) {
        return 0;
    }
    /* GPUDirect Storage moves device memory itself (cuFile); every other backend gets staged
     * host memory */
    return tier == TIO_TIER_HOST || e->ops != &tio_io_backend_cufile;
}

int tio_eng_fence_to_backend(const struct tio_engine *e, const struct request *rq) {
    return rq->mem == TIO_MEM_DEVICE && !rq->gpu && e->ops == &tio_io_backend_cufile;
}

int tio_eng_gpu_fence(struct tio_engine *e, struct request *rq, tio_cuda_stream stream) {
    if (!rq->fence || rq->fence_queued) {
        return 0;
    }
    int err = e->gpu.cu->stream_wait_event(stream, rq->fence, 0);
    if (err) {
        tio_eng_request_fail(e, rq, TIO_ECUDA, rq->cur_chunk, 1,
                             "cudaStreamWaitEvent on the request's fence failed");
        return TIO_ECUDA;
    }
    rq->fence_queued = 1;
    return 0;
}

int32_t tio_eng_gpu_take(struct tio_engine *e, int dir) {
    struct gpu_ring *r = &e->gpu.ring[dir];
    return r->nfree ? r->free[--r->nfree] : -1;
}

void tio_eng_gpu_put(struct tio_engine *e, int dir, int32_t ring) {
    struct gpu_ring *r = &e->gpu.ring[dir];
    r->free[r->nfree++] = ring;
}

int tio_eng_gpu_h2d(
    struct tio_engine *e, struct request *rq, const struct piece *pc, int32_t ring, uint64_t len) {
    struct tio_eng_gpu *g = &e->gpu;
    struct gpu_ring *r = &g->ring[0];
    int prev;
    tio_eng_gpu_enter(e, &prev);
    int rc = tio_eng_gpu_fence(e, rq, g->sh2d);
    int err = 0;
    if (rc == 0) {
        unsigned char *dev = rq->buf + (uint64_t)pc->chunk * e->p.chunk_bytes + pc->pos;
        err = g->cu->memcpy_async(dev, tio_eng_gpu_buf(e, 0, ring), (size_t)len,
                                  TIO_CUDA_MEMCPY_H2D, g->sh2d);
        if (!err) {
            rq->copies++;
            /* H7: the buffer is reused once this event completes, whether or not the record
             * itself worked (a failed record is waited out with the stream below) */
            err = g->cu->event_record(r->ev[ring], g->sh2d);
        }
    }
    if (err) {
        (void)g->cu->stream_synchronize(g->sh2d); /* the buffer is certainly free after this */
        tio_eng_request_fail(e, rq, TIO_ECUDA, pc->chunk, 1,
                             "cudaMemcpyAsync/EventRecord of a staged piece to the device");
        rc = TIO_ECUDA;
    }
    tio_eng_gpu_leave(e, prev);
    if (err || rc < 0) {
        tio_eng_gpu_put(e, 0, ring);
    } else {
        r->busy[r->nbusy++] = ring;
        e->gpu_pending = 1;
    }
    return rc;
}

int tio_eng_gpu_d2h(struct tio_engine *e,
                    struct request *rq,
                    const struct piece *pc,
                    int32_t ring) {
    struct tio_eng_gpu *g = &e->gpu;
    unsigned char *buf = tio_eng_gpu_buf(e, 1, ring);
    uint64_t io_len = (pc->len + TIO_IO_ALIGN - 1) & ~(uint64_t)(TIO_IO_ALIGN - 1);
    memset(buf + pc->len, 0, (size_t)(io_len - pc->len)); /* the padding the SSD write carries */
    int prev;
    tio_eng_gpu_enter(e, &prev);
    int rc = tio_eng_gpu_fence(e, rq, g->sd2h);
    int err = 0;
    if (rc == 0) {
        const unsigned char *dev = rq->buf + (uint64_t)pc->chunk * e->p.chunk_bytes + pc->pos;
        err = g->cu->memcpy_async(buf, dev, (size_t)pc->len, TIO_CUDA_MEMCPY_D2H, g->sd2h);
        if (!err) {
            err = g->cu->event_record(g->ring[1].ev[ring], g->sd2h);
            if (err) {
                (void)g->cu->stream_synchronize(g->sd2h);
            }
        }
    }
    tio_eng_gpu_leave(e, prev);
    if (err || rc < 0) {
        if (err) {
            tio_eng_request_fail(e, rq, TIO_ECUDA, pc->chunk, 1,
                                 "cudaMemcpyAsync/EventRecord of a piece to staging");
        }
        tio_eng_gpu_put(e, 1, ring);
        return TIO_ECUDA;
    }
    rq->inflight++; /* H3: the copy holds rq until its SSD write is submitted and completes */
    rq->copies++;
    g->copying[g->ncopying++] = (struct gpu_copy){ rq, *pc, ring };
    e->gpu_pending = 1;
    return 0;
}

/* 1 if ev has completed, 0 not yet, < 0 the query failed. */
static int event_done(const struct tio_eng_gpu *g, tio_cuda_event ev) {
    int err = g->cu->event_query(ev);
    return err == 0 ? 1 : err == TIO_CUDA_NOT_READY ? 0 : -1;
}

/* Turn a D2H copy whose event completed into an SSD write of its ring buffer (op slot taken,
 * batch item filled, H3 hold moved from the copy to the op). */
static void submit_copy(struct tio_engine *e, const struct gpu_copy *c, struct batch_item *b) {
    struct request *rq = c->rq;
    uint32_t fi = tio_eng_chunk_file(e, rq->pl, c->pc.chunk);
    uint32_t slot = e->op_free[--e->nop_free];
    struct op *o = &e->opv[slot];
    o->rq = rq;
    o->pc = c->pc;
    o->file = (int32_t)fi;
    o->stage = -1;
    o->ring = c->ring;
    o->heavy = 0;
    o->io_len = e->files[fi].direct ? (c->pc.len + TIO_IO_ALIGN - 1) & ~(uint64_t)(TIO_IO_ALIGN - 1)
                                    : c->pc.len;
    memset(b, 0, sizeof(*b));
    b->req.user = slot;
    b->req.op = TIO_IO_OP_WRITE;
    b->req.mem = TIO_MEM_HOST;
    b->req.file = (int32_t)fi;
    b->req.off = rq->pl->off[c->pc.chunk] + c->pc.pos;
    b->req.buf_index = -1;
    b->req.buf = tio_eng_gpu_buf(e, 1, c->ring);
    b->req.len = (uint32_t)o->io_len;
}

/* The event a settling request waits on, from the pool or new; NULL on a CUDA error. */
static tio_cuda_event take_event(struct tio_eng_gpu *g) {
    if (g->nevpool) {
        return g->evpool[--g->nevpool];
    }
    tio_cuda_event ev = NULL;
    return g->cu->event_create(&ev, TIO_CUDA_EVENT_DISABLE_TIMING) == 0 ? ev : NULL;
}

static void give_event(struct tio_eng_gpu *g, tio_cuda_event ev) {
    void *arr = g->evpool;
    if (tio_grow(&arr, &g->capevpool, g->nevpool + 1, sizeof(*g->evpool)) == 0) {
        g->evpool = arr;
        g->evpool[g->nevpool++] = ev;
    } else {
        (void)g->cu->event_destroy(ev);
    }
}

uint32_t tio_eng_gpu_poll(struct tio_engine *e, struct batch_item *batch, uint32_t max) {
    struct tio_eng_gpu *g = &e->gpu;
    if (!g->cu || !e->gpu_pending) {
        return 0;
    }
    int prev;
    tio_eng_gpu_enter(e, &prev);
    struct gpu_ring *r = &g->ring[0];
    for (uint32_t i = 0; i < r->nbusy;) {            /* H7: H2D buffers whose copy has run */
        if (event_done(g, r->ev[r->busy[i]]) != 0) { /* a failed query: the stream is broken */
            r->free[r->nfree++] = r->busy[i];
            r->busy[i] = r->busy[--r->nbusy];
        } else {
            i++;
        }
    }
    uint32_t n = 0;
    for (uint32_t i = 0; i < g->ncopying;) { /* D2H copies in staging: on to the SSD */
        struct gpu_copy c = g->copying[i];
        int dead = c.rq->error || c.rq->canceled;
        int ok = event_done(g, g->ring[1].ev[c.ring]);
        if (ok == 0) { /* H7: also a dead request's buffer waits for its copy */
            i++;
            continue;
        }
        if (!dead && ok > 0 && (n >= max || !e->nop_free)) {
            i++;
            continue;
        }
        g->copying[i] = g->copying[--g->ncopying];
        c.rq->copies--;
        if (!dead && ok > 0) {
            submit_copy(e, &c, &batch[n++]);
            continue;
        }
        if (ok < 0 && !dead) {
            tio_eng_request_fail(e, c.rq, TIO_ECUDA, c.pc.chunk, 1,
                                 "cudaEventQuery on a piece's copy to staging failed");
        }
        tio_eng_gpu_put(e, 1, c.ring);
        c.rq->inflight--;
        if (c.rq->inflight == 0 && !tio_eng_request_has_work(c.rq)) {
            tio_eng_request_finish(e, c.rq);
        }
    }
    for (struct request **pp = &g->settling; *pp;) { /* requests waiting for their copies */
        struct request *rq = *pp;
        int ok = event_done(g, rq->tail);
        if (ok == 0) {
            pp = &rq->snext;
            continue;
        }
        *pp = rq->snext;
        if (ok < 0 && !rq->error) {
            tio_eng_request_fail(e, rq, TIO_ECUDA, 0, 1, "cudaEventQuery on its last copy failed");
            (void)g->cu->event_synchronize(rq->tail);
        }
        give_event(g, rq->tail);
        rq->tail = NULL;
        rq->copies = 0;
        tio_eng_request_finish(e, rq);
    }
    e->gpu_pending = r->nbusy || g->ncopying || g->settling;
    tio_eng_gpu_leave(e, prev);
    return n;
}

int tio_eng_gpu_settle(struct tio_engine *e, struct request *rq) {
    struct tio_eng_gpu *g = &e->gpu;
    if (!g->cu || (!rq->copies && !rq->done)) {
        return 0;
    }
    int prev;
    tio_eng_gpu_enter(e, &prev);
    int rc = 0;
    /* the stream its copies were queued on: a staging ring's, or the pool's */
    int staged = rq->gpu && rq->pl->tier == TIO_TIER_SSD;
    tio_cuda_stream s =
        rq->op == TIO_IO_OP_READ ? (staged ? g->sh2d : g->h2d) : (staged ? g->sd2h : g->d2h);
    /* a write that failed or was canceled waits for its copies: its pool extents are freed */
    void *done = rq->op == TIO_IO_OP_READ || (!rq->error && !rq->canceled) ? rq->done : NULL;
    if (done && rq->op == TIO_IO_OP_WRITE) {
        /* H8: the engine's own event marks the pool bytes, whatever the caller does with done */
        rq->pl->landing = take_event(g);
        g->pool_d2h_pending = 1;
        if (!rq->pl->landing || g->cu->event_record(rq->pl->landing, s) != 0) {
            if (rq->pl->landing) {
                give_event(g, rq->pl->landing);
                rq->pl->landing = NULL;
            }
            (void)g->cu->stream_synchronize(s); /* the pool bytes are in place */
        }
    }
    if (done) {
        /* the caller's stream waits on it: a read's bytes land, a write's copies have read the
         * device memory, when it completes */
        rc = g->cu->event_record(done, s) ? TIO_ECUDA : 0;
        if (rc < 0) {
            (void)g->cu->stream_synchronize(s); /* the completion then means "landed" */
        }
    } else if (rq->copies) {
        rq->tail = take_event(g);
        if (rq->tail && g->cu->event_record(rq->tail, s) == 0) {
            rq->snext = g->settling;
            g->settling = rq;
            e->gpu_pending = 1;
            rc = 1;
        } else { /* no event: wait for the stream here rather than free memory in use */
            if (rq->tail) {
                give_event(g, rq->tail);
                rq->tail = NULL;
            }
            (void)g->cu->stream_synchronize(s);
            rq->copies = 0;
        }
    }
    tio_eng_gpu_leave(e, prev);
    return rc;
}

int tio_eng_gpu_landed(struct tio_engine *e, struct request *rq) {
    struct placement *pl = rq->pl;
    struct tio_eng_gpu *g = &e->gpu;
    int host = !rq->gpu && g->pool_d2h_pending;
    if (rq->landed || (!host && (!pl->landing || rq->op != TIO_IO_OP_READ))) {
        return 0;
    }
    int prev;
    tio_eng_gpu_enter(e, &prev);
    int err =
        host ? g->cu->stream_synchronize(g->d2h) : g->cu->stream_wait_event(g->h2d, pl->landing, 0);
    tio_eng_gpu_leave(e, prev);
    if (host && !err) {
        g->pool_d2h_pending = 0;
    }
    if (err) {
        tio_eng_request_fail(e, rq, TIO_ECUDA, 0, 1,
                             "ordering the read after the device copies that wrote its pool bytes");
        return TIO_ECUDA;
    }
    rq->landed = 1;
    return 0;
}

void tio_eng_gpu_landing_free(struct tio_engine *e, struct placement *pl) {
    if (pl->landing) {
        give_event(&e->gpu, pl->landing); /* no CUDA call: it may be recorded again later */
        pl->landing = NULL;
    }
}
