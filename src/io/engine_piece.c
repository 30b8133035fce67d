/*
 * The engine's pieces: a request is cut into chunk pieces of at most TIO_IO_MAX_OP bytes,
 * unaligned host buffers go through aligned staging buffers, a short transfer requeues the
 * rest (0 bytes is -EIO), a failure is retried, and CRC32C is computed / checked per chunk.
 * The driving thread (H2) builds a batch under mu and completes results under mu; the copies
 * into and out of staging buffers and the host tier's copies run with mu released.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "common/common_impl.h"
#include "io/engine_internal.h"

static int redo_push(struct request *rq, struct piece pc) {
    void *arr = rq->redo;
    if (tio_grow(&arr, &rq->capredo, rq->nredo + 1, sizeof(*rq->redo)) < 0) {
        return TIO_ENOMEM;
    }
    rq->redo = arr;
    rq->redo[rq->nredo++] = pc;
    return 0;
}

/* Requeue every piece of chunk c (CRC mismatch). */
static int redo_chunk(struct tio_engine *e, struct request *rq, uint32_t c, uint32_t attempts) {
    uint64_t len = tio_eng_chunk_len(e, rq->pl, c);
    rq->chunk_left[c] = len;
    return redo_push(rq, (struct piece){ c, attempts, 0, len });
}

/* Next piece of rq (redo first, then the cursor), cut to at most `max` bytes. */
static struct piece next_piece(struct tio_engine *e, struct request *rq) {
    struct piece pc;
    if (rq->nredo) {
        pc = rq->redo[--rq->nredo];
    } else {
        uint32_t c = rq->cur_chunk;
        pc = (struct piece){ c, 0, rq->cur_pos, tio_eng_chunk_len(e, rq->pl, c) - rq->cur_pos };
    }
    return pc;
}

/* Give back the part of a piece that was not issued. */
static void piece_unissue(struct tio_engine *e, struct request *rq, struct piece pc) {
    (void)e;
    if (redo_push(rq, pc) < 0) {
        tio_eng_request_fail(e, rq, TIO_ENOMEM, pc.chunk, pc.attempts, "out of memory");
    }
}

static void
advance_cursor(struct tio_engine *e, struct request *rq, const struct piece *full, uint64_t used) {
    /* called when `full` came from the cursor: move it past the issued bytes */
    rq->cur_pos += used;
    if (rq->cur_pos >= tio_eng_chunk_len(e, rq->pl, full->chunk)) {
        rq->cur_chunk++;
        rq->cur_pos = 0;
    }
}

/*
 * A host-tier piece, by the driver with mu released (H3: rq is held through inflight). The
 * host tier is a synchronous backend (backend_host.c): it copies in submit, so the result is
 * reaped at once. Returns the bytes moved or < 0.
 */
static int64_t host_piece(struct tio_engine *e, const struct request *rq, const struct piece *pc) {
    struct tio_io_req r = {
        .user = 0,
        .buf = rq->buf + (uint64_t)pc->chunk * e->p.chunk_bytes + pc->pos,
        .off = rq->pl->off[pc->chunk] + pc->pos,
        .len = (uint32_t)pc->len,
        .op = rq->op,
        .mem = rq->mem,
        .file = 0,
        .buf_index = -1,
        /* device copies are queued on the engine's copy streams: the request settles on
         * an event after its last one (engine_gpu.c) */
        .flags = rq->gpu ? TIO_IO_REQ_NO_WAIT : 0,
    };
    int rc = e->host_ops->submit(e->host_bst, &r, 1);
    if (rc < 0) {
        return rc;
    }
    struct tio_io_cqe c;
    if (rc != 1 || e->host_ops->reap(e->host_bst, 1, 1, 0, &c) != 1) {
        return -EIO; /* a synchronous backend has the result at once */
    }
    return c.res;
}

int tio_eng_host_mem_ok(const struct tio_engine *e, int32_t mem) {
    if (!e->host_bst) {
        return 0;
    }
    if (e->host_ops->mem_ok) {
        return e->host_ops->mem_ok(e->host_bst, mem);
    }
    return mem == TIO_MEM_HOST || (e->host_ops->caps & TIO_ENGINE_CAP_DEVICE_MEM);
}

/* Account a chunk whose bytes have all arrived: CRC on write, verification on read. */
static void chunk_done(struct tio_engine *e, struct request *rq, uint32_t c, uint32_t attempts) {
    if (!rq->pl->crc || rq->mem != TIO_MEM_HOST || rq->pl->tier != TIO_TIER_SSD) {
        return;
    }
    const unsigned char *data = rq->buf + (uint64_t)c * e->p.chunk_bytes;
    uint32_t crc = tio_crc32c(0, data, (size_t)tio_eng_chunk_len(e, rq->pl, c));
    if (rq->op == TIO_IO_OP_WRITE) {
        rq->pl->crc[c] = crc;
        return;
    }
    if (crc == rq->pl->crc[c]) {
        return;
    }
    e->st.crc_errors++;
    if (rq->chunk_retries[c] < e->p.retries) {
        rq->chunk_retries[c]++;
        e->st.retries++;
        TIO_LOG_WARN("engine: read of tensor %llu chunk %u: CRC32C mismatch (the data read back "
                     "differs from what was written), reading it again (retry %u of %u)",
                     (unsigned long long)rq->t->id, c, rq->chunk_retries[c], e->p.retries);
        if (redo_chunk(e, rq, c, attempts) == 0) {
            tio_eng_queue_push(e, rq, 1);
            return;
        }
    }
    tio_eng_request_fail(e, rq, TIO_ECORRUPT, c, rq->chunk_retries[c] + 1,
                         "CRC32C mismatch (data read back differs from what was written)");
}

static void
piece_progress(struct tio_engine *e, struct request *rq, const struct piece *pc, uint64_t moved) {
    rq->chunk_left[pc->chunk] -= moved;
    if (moved < pc->len) {
        struct piece rest = { pc->chunk, pc->attempts, pc->pos + moved, pc->len - moved };
        if (redo_push(rq, rest) < 0) {
            tio_eng_request_fail(e, rq, TIO_ENOMEM, pc->chunk, pc->attempts, "out of memory");
        } else {
            tio_eng_queue_push(e, rq, 1);
        }
    } else if (rq->chunk_left[pc->chunk] == 0) {
        chunk_done(e, rq, pc->chunk, pc->attempts);
    }
}

/*
 * Handle one backend result (under mu, by the driver). The slot's staging buffer is read
 * (a staged read) before it is given back (H5), and the request is released from the piece's
 * hold last (H3): finished here if nothing else of it is in flight or left to issue.
 */
void tio_eng_complete_op(struct tio_engine *e, uint32_t slot, int64_t res) {
    struct op *o = &e->opv[slot];
    struct request *rq = o->rq;
    struct piece pc = o->pc;
    unsigned char *stage =
        o->stage >= 0 ? e->stage_mem + (uint64_t)o->stage * e->stage_bytes : NULL;
    int32_t ring = o->ring;
    rq->inflight--;
    e->nheavy -= (uint32_t)o->heavy;
    if (res > 0) {
        uint64_t moved = TIO_MIN((uint64_t)res, pc.len);
        if (moved < pc.len && e->files[o->file].direct) {
            moved &= ~(uint64_t)(TIO_IO_ALIGN - 1); /* O_DIRECT resumes at an aligned offset */
        }
        if (stage && rq->op == TIO_IO_OP_READ && moved) {
            memcpy(rq->buf + (uint64_t)pc.chunk * e->p.chunk_bytes + pc.pos, stage, (size_t)moved);
        }
        if (ring >= 0 && rq->op == TIO_IO_OP_READ && moved && !rq->error && !rq->canceled) {
            /* stage B: the ring buffer goes to the device on the H2D stream (H7) */
            if (tio_eng_gpu_h2d(e, rq, &pc, ring, moved) == 0) {
                ring = -1; /* busy until its event completes */
            }
        }
        if (moved < pc.len) {
            e->st.short_transfers++;
        }
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
            TIO_LOG_WARN("engine: %s of tensor %llu chunk %u: %s, retrying (retry %u of %u)",
                         rq->op == TIO_IO_OP_WRITE ? "write" : "read",
                         (unsigned long long)rq->t->id, pc.chunk,
                         res == 0 ? "transfer moved 0 bytes" : tio_strerror((int)err), pc.attempts,
                         e->p.retries);
            if (redo_push(rq, pc) == 0) {
                tio_eng_queue_push(e, rq, 1);
            } else {
                tio_eng_request_fail(e, rq, TIO_ENOMEM, pc.chunk, pc.attempts, "out of memory");
            }
        } else {
            tio_eng_request_fail(e, rq, rq->op == TIO_IO_OP_READ ? TIO_EIO : err, pc.chunk,
                                 pc.attempts + 1,
                                 res == 0 ? "transfer moved 0 bytes" : "transfer failed");
        }
    }
    if (o->stage >= 0) {
        e->stage_free[e->nstage_free++] = o->stage;
    }
    if (ring >= 0) { /* a D2H buffer after its SSD write (H7), or a read's that went nowhere */
        tio_eng_gpu_put(e, rq->op == TIO_IO_OP_READ ? 0 : 1, ring);
    }
    o->ring = -1;
    o->rq = NULL;
    e->op_free[e->nop_free++] = slot;
    if (rq->inflight == 0 && !tio_eng_request_has_work(rq)) {
        tio_eng_request_finish(e, rq);
    }
}

/*
 * Build up to `max` transfers from the queues into batch[] (under mu). Host-tier pieces are
 * copied right here with mu released. Without `copies` (a caller submitting), a host-tier
 * piece or a write that needs a staging copy ends the batch instead (left queued for the
 * progress thread). Returns the number of transfers built.
 */
/* A GPU-path piece of an SSD request (engine_gpu.c): a read goes to the backend into an H2D
 * ring buffer (no fence: it touches no device memory); a write is first copied from the
 * device into a D2H ring buffer on the D2H stream, its SSD write follows from
 * tio_eng_gpu_poll. Returns 1 if a transfer was added to *b. */
static int gpu_piece(struct tio_engine *e, struct request *rq, struct batch_item *b) {
    int dir = rq->op == TIO_IO_OP_READ ? 0 : 1;
    int32_t ring = tio_eng_gpu_take(e, dir);
    TIO_ASSERT(ring >= 0); /* tio_eng_pick passes over it while its ring is empty */
    int from_cursor = rq->nredo == 0;
    struct piece pc = next_piece(e, rq);
    uint64_t len = TIO_MIN(TIO_MIN(pc.len, e->max_op), e->stage_bytes);
    if (from_cursor) {
        advance_cursor(e, rq, &pc, len);
    } else if (len < pc.len) {
        piece_unissue(e, rq, (struct piece){ pc.chunk, pc.attempts, pc.pos + len, pc.len - len });
    }
    pc.len = len;
    if (dir == 1) {
        (void)tio_eng_gpu_d2h(e, rq, &pc, ring); /* a failure fails rq */
        return 0;
    }
    uint32_t fi = tio_eng_chunk_file(e, rq->pl, pc.chunk);
    uint32_t slot = e->op_free[--e->nop_free];
    struct op *o = &e->opv[slot];
    o->rq = rq;
    o->pc = pc;
    o->file = (int32_t)fi;
    o->stage = -1;
    o->ring = ring;
    o->heavy = 0;
    o->io_len =
        e->files[fi].direct ? (len + TIO_IO_ALIGN - 1) & ~(uint64_t)(TIO_IO_ALIGN - 1) : len;
    memset(b, 0, sizeof(*b));
    b->req.user = slot;
    b->req.op = TIO_IO_OP_READ;
    b->req.mem = TIO_MEM_HOST;
    b->req.file = (int32_t)fi;
    b->req.off = rq->pl->off[pc.chunk] + pc.pos;
    b->req.buf_index = -1;
    b->req.buf = tio_eng_gpu_buf(e, 0, ring);
    b->req.len = (uint32_t)o->io_len;
    rq->inflight++; /* H3 */
    return 1;
}

/* Before a GPU-path host-tier piece: the copy stream waits on the fence (once), and a device
 * write into the pool waits for the pool reads queued on h2d (a dropped tensor's extent may
 * be this one). 0 or TIO_ECUDA (rq failed). */
static int gpu_host_prepare(struct tio_engine *e, struct request *rq) {
    struct tio_eng_gpu *g = &e->gpu;
    int prev;
    tio_eng_gpu_enter(e, &prev);
    int rc = tio_eng_gpu_fence(e, rq, rq->op == TIO_IO_OP_READ ? g->h2d : g->d2h);
    if (rc == 0 && rq->op == TIO_IO_OP_WRITE && g->h2d_pending) {
        if (g->cu->event_record(g->h2d_mark, g->h2d) ||
            g->cu->stream_wait_event(g->d2h, g->h2d_mark, 0)) {
            tio_eng_request_fail(e, rq, TIO_ECUDA, 0, 1,
                                 "ordering the D2H stream after the pool reads failed");
            rc = TIO_ECUDA;
        } else {
            g->h2d_pending = 0;
        }
    }
    if (rc == 0) {
        g->h2d_pending |= rq->op == TIO_IO_OP_READ;
        rq->copies++;
    }
    tio_eng_gpu_leave(e, prev);
    return rc;
}

uint32_t
tio_eng_build_batch(struct tio_engine *e, struct batch_item *batch, uint32_t max, int copies) {
    uint32_t n = copies ? tio_eng_gpu_poll(e, batch, max) : 0;
    while (n < max && e->nop_free) {
        struct request *rq = tio_eng_pick(e);
        if (!rq || ((rq->pl->tier == TIO_TIER_HOST || rq->gpu) && !copies)) {
            break;
        }
        if (rq->gpu && rq->pl->tier == TIO_TIER_SSD) {
            n += (uint32_t)gpu_piece(e, rq, &batch[n]);
            continue;
        }
        if (rq->gpu && rq->pl->tier == TIO_TIER_HOST && gpu_host_prepare(e, rq) < 0) {
            continue; /* failed: pick() finishes it */
        }
        if (rq->pl->tier == TIO_TIER_HOST && tio_eng_gpu_landed(e, rq) < 0) {
            continue; /* H8; failed: pick() finishes it */
        }
        int from_cursor = rq->nredo == 0;
        struct piece pc = next_piece(e, rq);
        if (rq->pl->tier == TIO_TIER_HOST) {
            uint64_t len = TIO_MIN(pc.len, e->max_op); /* backends take 32-bit lengths */
            if (from_cursor) {
                advance_cursor(e, rq, &pc, len);
            } else if (len < pc.len) {
                piece_unissue(e, rq,
                              (struct piece){ pc.chunk, pc.attempts, pc.pos + len, pc.len - len });
            }
            pc.len = len;
            rq->inflight++; /* H3: holds rq (and its buffer, H4) while mu is released */
            tio_eng_unlock_signal(e);
            int64_t res = host_piece(e, rq, &pc);
            pthread_mutex_lock(&e->mu);
            rq->inflight--;
            if (res < 0) {
                tio_eng_request_fail(e, rq, res, pc.chunk, 1, "host tier copy");
            } else {
                piece_progress(e, rq, &pc, (uint64_t)res);
            }
            if (rq->inflight == 0 && !tio_eng_request_has_work(rq)) {
                tio_eng_request_finish(e, rq);
            }
            continue;
        }
        uint32_t fi = tio_eng_chunk_file(e, rq->pl, pc.chunk);
        unsigned char *user = rq->buf + (uint64_t)pc.chunk * e->p.chunk_bytes + pc.pos;
        uint64_t len = TIO_MIN(pc.len, e->max_op);
        int staged = 0;
        if (e->files[fi].direct && rq->mem == TIO_MEM_HOST) {
            if ((uintptr_t)user % TIO_IO_ALIGN) {
                staged = 1;
            } else if (len % TIO_IO_ALIGN) {
                if (len > TIO_IO_ALIGN) {
                    len &= ~(uint64_t)(TIO_IO_ALIGN - 1); /* aligned body now, tail staged */
                } else {
                    staged = 1;
                }
            }
        } else if (e->files[fi].direct && len > TIO_IO_ALIGN && len % TIO_IO_ALIGN) {
            /* device memory: the backend bounces unaligned pieces; keep those small */
            len &= ~(uint64_t)(TIO_IO_ALIGN - 1);
        }
        if (staged && !copies && rq->op == TIO_IO_OP_WRITE) {
            if (!from_cursor) { /* a submitting caller copies nothing: leave it queued */
                piece_unissue(e, rq, pc);
            }
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
        o->ring = -1;
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
        b->req.fence = tio_eng_fence_to_backend(e, rq) ? rq->fence : NULL;
        if (staged) {
            /* H5: the buffer is this slot's until tio_eng_complete_op gives it back */
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
        rq->inflight++; /* H3: the piece in the backend holds rq until its result completes */
    }
    return n;
}
