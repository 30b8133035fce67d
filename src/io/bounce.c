/* Device memory <-> file through pinned staging rings (see bounce.h). */
#include "io/bounce.h"

#include <string.h>

#include "common/common_impl.h"
#include "io/pool.h"

#define RING TIO_BOUNCE_RING

/* Worker w's buffers, events and stream, made on the current device. 0 or TIO_ECUDA. */
static int worker_init(struct tio_bounce_set *b, uint32_t w) {
    const struct tio_cudart_api *cu = b->cu;
    size_t bytes = (size_t)b->piece * RING;
    void *p = NULL;
    int err = cu->host_alloc(&p, bytes, TIO_CUDA_HOST_ALLOC_PORTABLE);
    if (err != 0 || !p) {
        return tio_set_error(TIO_ECUDA, "cudaHostAlloc(%zu bytes): error %d", bytes, err);
    }
    /* cudaHostAlloc returns page-aligned memory; O_DIRECT needs 4 KiB */
    TIO_ASSERT(((uintptr_t)p % TIO_IO_ALIGN) == 0);
    b->bufs[w] = p;
    err = cu->stream_create(&b->streams[w], TIO_CUDA_STREAM_NON_BLOCKING);
    if (err != 0) {
        b->streams[w] = NULL;
        return tio_set_error(TIO_ECUDA, "cudaStreamCreateWithFlags: error %d", err);
    }
    for (uint32_t k = 0; k < RING; k++) {
        err = cu->event_create(&b->events[w * RING + k], TIO_CUDA_EVENT_DISABLE_TIMING);
        if (err != 0) {
            b->events[w * RING + k] = NULL;
            return tio_set_error(TIO_ECUDA, "cudaEventCreateWithFlags: error %d", err);
        }
    }
    return 0;
}

int tio_bounce_init(struct tio_bounce_set *b,
                    const struct tio_cudart_api *cu,
                    uint32_t n,
                    uint32_t piece) {
    memset(b, 0, sizeof(*b));
    b->cu = cu;
    b->device = -1;
    b->piece = piece ? piece : TIO_BOUNCE_BYTES;
    if (b->piece % TIO_IO_ALIGN != 0) {
        return tio_set_error(TIO_EINVAL, "bounce: a piece of %u bytes is not a multiple of %u",
                             b->piece, TIO_IO_ALIGN);
    }
    if (cu->get_device && cu->get_device(&b->device) != 0) {
        b->device = -1;
    }
    b->bufs = tio_calloc(n ? n : 1, sizeof(*b->bufs));
    b->streams = tio_calloc(n ? n : 1, sizeof(*b->streams));
    b->events = tio_calloc((size_t)(n ? n : 1) * RING, sizeof(*b->events));
    if (!b->bufs || !b->streams || !b->events) {
        tio_bounce_fini(b);
        return TIO_ENOMEM;
    }
    b->n = n;
    for (uint32_t w = 0; w < n; w++) {
        int rc = worker_init(b, w);
        if (rc < 0) {
            tio_bounce_fini(b);
            return rc;
        }
    }
    return 0;
}

/* Also undoes an init that failed half-way (what was not made is NULL). Every transfer has
 * waited for its copies, so nothing is queued on the streams. */
void tio_bounce_fini(struct tio_bounce_set *b) {
    for (uint32_t w = 0; b->bufs && b->streams && b->events && w < b->n; w++) {
        for (uint32_t k = 0; k < RING; k++) {
            if (b->events[w * RING + k]) {
                (void)b->cu->event_destroy(b->events[w * RING + k]);
            }
        }
        if (b->streams[w]) {
            (void)b->cu->stream_destroy(b->streams[w]);
        }
        if (b->bufs[w]) {
            (void)b->cu->free_host(b->bufs[w]);
        }
    }
    tio_free(b->bufs);
    tio_free(b->streams);
    tio_free(b->events);
    b->bufs = NULL;
    b->streams = NULL;
    b->events = NULL;
    b->n = 0;
}

/* One transfer on one worker's ring. */
struct pipe {
    const struct tio_bounce_set *b;
    uint32_t w;
    unsigned char *dev;  /* the request's device memory */
    void *fence;         /* r->fence, until the stream waits on it (NULL: none or queued) */
    uint64_t pend[RING]; /* 1 + the offset of the piece whose copy buffer k waits for; 0: none */
    uint64_t bad;        /* 1 + the offset of the first piece whose copy failed; 0: none */
};

static unsigned char *ring_buf(const struct pipe *p, uint32_t k) {
    return p->b->bufs[p->w] + (size_t)k * p->b->piece;
}

static tio_cuda_event ring_ev(const struct pipe *p, uint32_t k) {
    return p->b->events[p->w * RING + k];
}

/* Wait until buffer k's queued copy (if any) has completed: its event, not the stream. 0, or
 * -1 when the wait failed (that piece and the ones after it are not counted as moved). */
static int settle(struct pipe *p, uint32_t k) {
    if (!p->pend[k]) {
        return 0;
    }
    uint64_t at = p->pend[k];
    p->pend[k] = 0;
    if (p->b->cu->event_synchronize(ring_ev(p, k)) != 0) {
        p->bad = p->bad && p->bad < at ? p->bad : at;
        return -1;
    }
    return 0;
}

/* Queue a copy for the piece at offset `at` on the worker's stream and record buffer k's event
 * after it. 0, or the CUDA error (then nothing of it is left queued). */
static int queue_copy(
    struct pipe *p, uint32_t k, void *dst, const void *src, size_t n, int kind, uint64_t at) {
    const struct tio_cudart_api *cu = p->b->cu;
    tio_cuda_stream s = p->b->streams[p->w];
    int err = 0;
    if (p->fence) { /* the first copy touches device memory: the stream waits for the fence */
        err = cu->stream_wait_event(s, p->fence, 0);
        p->fence = err ? p->fence : NULL;
    }
    err = err ? err : cu->memcpy_async(dst, src, n, kind, s);
    if (err != 0) {
        return err;
    }
    err = cu->event_record(ring_ev(p, k), s);
    if (err != 0) {
        (void)cu->stream_synchronize(s); /* queued but untracked: an error path, wait it out */
        return err;
    }
    p->pend[k] = at + 1;
    return 0;
}

/* Every copy settled: bytes moved (those before a failed copy), else err or TIO_ECUDA. */
static int64_t finish(struct pipe *p, uint64_t done, int64_t err) {
    for (uint32_t k = 0; k < RING; k++) {
        (void)settle(p, k);
    }
    if (p->bad) {
        done = TIO_MIN(done, p->bad - 1);
        err = err ? err : TIO_ECUDA;
    }
    return done ? (int64_t)done : err;
}

/* pread piece i into buffer i % RING while the copies of the pieces before it run. */
static int64_t bounce_read(struct pipe *p, int fd, const struct tio_io_req *r) {
    uint64_t done = 0; /* bytes read and queued to the device */
    int64_t err = 0;
    for (uint64_t i = 0; done < r->len; i++) {
        uint32_t k = (uint32_t)(i % RING);
        size_t piece = (size_t)TIO_MIN((uint64_t)p->b->piece, r->len - done);
        /* the request owns its file range up to the next 4 KiB boundary (backend.h) */
        size_t io_len = (piece + TIO_IO_ALIGN - 1) & ~(size_t)(TIO_IO_ALIGN - 1);
        if (settle(p, k) < 0) {
            break; /* the buffer is free again only once its copy has run */
        }
        int64_t n = tio_file_io(fd, TIO_IO_OP_READ, ring_buf(p, k), io_len, r->off + done);
        if (n <= 0) {
            err = n;
            break;
        }
        size_t got = TIO_MIN((size_t)n, piece);
        if (queue_copy(p, k, p->dev + done, ring_buf(p, k), got, TIO_CUDA_MEMCPY_H2D, done) != 0) {
            err = TIO_ECUDA;
            break;
        }
        done += got;
        if (got < piece) {
            break; /* short: the core resumes the rest */
        }
    }
    return finish(p, done, err);
}

/* Up to RING pieces' D2H copies are queued ahead; pwrite piece i once its copy completed,
 * while the copies of the pieces after it run. */
static int64_t bounce_write(struct pipe *p, int fd, const struct tio_io_req *r) {
    uint64_t piece = p->b->piece;
    uint64_t npieces = (r->len + piece - 1) / piece, queued = 0;
    uint64_t done = 0; /* bytes on the file */
    int64_t err = 0;
    for (uint64_t i = 0; i < npieces; i++) {
        /* buffer q % RING last held piece q - RING < i: already written (host order) */
        for (; queued < npieces && queued < i + RING; queued++) {
            uint64_t at = queued * piece;
            uint32_t q = (uint32_t)(queued % RING);
            size_t len = (size_t)TIO_MIN(piece, r->len - at);
            if (queue_copy(p, q, ring_buf(p, q), p->dev + at, len, TIO_CUDA_MEMCPY_D2H, at) != 0) {
                err = TIO_ECUDA;
                npieces = queued; /* write what is queued, then stop */
                break;
            }
        }
        uint32_t k = (uint32_t)(i % RING);
        if (i >= npieces || settle(p, k) < 0) {
            break; /* a copy that did not run is never written */
        }
        size_t len = (size_t)TIO_MIN(piece, r->len - done);
        size_t io_len = (len + TIO_IO_ALIGN - 1) & ~(size_t)(TIO_IO_ALIGN - 1);
        memset(ring_buf(p, k) + len, 0, io_len - len);
        int64_t n = tio_file_io(fd, TIO_IO_OP_WRITE, ring_buf(p, k), io_len, r->off + done);
        if (n < 0) {
            err = n;
            break;
        }
        size_t moved = TIO_MIN((size_t)n, len);
        done += moved;
        if (moved < len) {
            break; /* short: the core resumes the rest */
        }
    }
    return finish(p, done, err);
}

/* The device a worker thread is bound to (-1: none yet). */
static _Thread_local int tl_device = -1;

void tio_bounce_bind(const struct tio_bounce_set *b) {
    if (b->device >= 0 && tl_device != b->device && b->cu->set_device &&
        b->cu->set_device(b->device) == 0) {
        tl_device = b->device; /* the streams, events and buffers are that device's */
    }
}

int64_t
tio_bounce_io(struct tio_bounce_set *b, int fd, const struct tio_io_req *r, uint32_t worker) {
    tio_bounce_bind(b);
    struct pipe p;
    memset(&p, 0, sizeof p);
    p.b = b;
    p.w = worker % b->n;
    p.dev = r->buf;
    p.fence = r->fence;
    return r->op == TIO_IO_OP_WRITE ? bounce_write(&p, fd, r) : bounce_read(&p, fd, r);
}
