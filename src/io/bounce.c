/* Device memory <-> file through pinned bounce buffers (see bounce.h). */
#include "io/bounce.h"

#include <string.h>

#include "common/common_impl.h"
#include "io/pool.h"

int tio_bounce_init(struct tio_bounce_set *b, const struct tio_cudart_api *cu, uint32_t n) {
    memset(b, 0, sizeof(*b));
    b->cu = cu;
    b->device = -1;
    if (cu->get_device && cu->get_device(&b->device) != 0) {
        b->device = -1;
    }
    b->bufs = tio_calloc(n, sizeof(*b->bufs));
    b->streams = tio_calloc(n, sizeof(*b->streams));
    if (!b->bufs || !b->streams) {
        tio_bounce_fini(b);
        return TIO_ENOMEM;
    }
    for (uint32_t i = 0; i < n; i++) {
        void *p = NULL;
        int err = cu->host_alloc(&p, TIO_BOUNCE_BYTES, TIO_CUDA_HOST_ALLOC_PORTABLE);
        if (err != 0 || !p) {
            tio_bounce_fini(b);
            return tio_set_error(TIO_ECUDA, "cudaHostAlloc(%u bytes): error %d", TIO_BOUNCE_BYTES,
                                 err);
        }
        err = cu->stream_create(&b->streams[i], TIO_CUDA_STREAM_NON_BLOCKING);
        if (err != 0) {
            (void)cu->free_host(p);
            tio_bounce_fini(b);
            return tio_set_error(TIO_ECUDA, "cudaStreamCreateWithFlags: error %d", err);
        }
        /* cudaHostAlloc returns page-aligned memory; O_DIRECT needs 4 KiB */
        TIO_ASSERT(((uintptr_t)p % TIO_IO_ALIGN) == 0);
        b->bufs[i] = p;
        b->n++;
    }
    return 0;
}

void tio_bounce_fini(struct tio_bounce_set *b) {
    for (uint32_t i = 0; b->bufs && b->streams && i < b->n; i++) {
        (void)b->cu->stream_destroy(b->streams[i]);
        (void)b->cu->free_host(b->bufs[i]);
    }
    tio_free(b->bufs);
    tio_free(b->streams);
    b->bufs = NULL;
    b->streams = NULL;
    b->n = 0;
}

/* cudaMemcpyAsync on the worker's stream, then wait for it. 0 or the CUDA error. */
static int
copy_on(struct tio_bounce_set *b, uint32_t i, void *dst, const void *src, size_t n, int kind) {
    int err = b->cu->memcpy_async(dst, src, n, kind, b->streams[i]);
    return err ? err : b->cu->stream_synchronize(b->streams[i]);
}

/* The device a worker thread is bound to (-1: none yet). */
static _Thread_local int tl_device = -1;

int64_t
tio_bounce_io(struct tio_bounce_set *b, int fd, const struct tio_io_req *r, uint32_t worker) {
    uint32_t w = worker % b->n;
    if (b->device >= 0 && tl_device != b->device && b->cu->set_device &&
        b->cu->set_device(b->device) == 0) {
        tl_device = b->device; /* the streams and buffers are that device's */
    }
    unsigned char *bounce = b->bufs[w];
    unsigned char *dev = r->buf;
    uint64_t done = 0;
    while (done < r->len) {
        size_t piece = (size_t)TIO_MIN((uint64_t)TIO_BOUNCE_BYTES, r->len - done);
        /* the request owns its file range up to the next 4 KiB boundary (backend.h) */
        size_t io_len = (piece + TIO_IO_ALIGN - 1) & ~(size_t)(TIO_IO_ALIGN - 1);
        if (r->op == TIO_IO_OP_WRITE) {
            int err = copy_on(b, w, bounce, dev + done, piece, TIO_CUDA_MEMCPY_D2H);
            if (err != 0) {
                return done ? (int64_t)done : TIO_ECUDA;
            }
            memset(bounce + piece, 0, io_len - piece);
        }
        int64_t n = tio_file_io(fd, r->op, bounce, io_len, r->off + done);
        if (r->op == TIO_IO_OP_READ && n > 0) {
            size_t got = TIO_MIN((size_t)n, piece);
            int err = copy_on(b, w, dev + done, bounce, got, TIO_CUDA_MEMCPY_H2D);
            if (err != 0) {
                return done ? (int64_t)done : TIO_ECUDA;
            }
        }
        if (n < 0) {
            return done ? (int64_t)done : n;
        }
        size_t moved = TIO_MIN((size_t)n, piece);
        done += moved;
        if (moved < piece) {
            break; /* short: the core resumes the rest */
        }
    }
    return (int64_t)done;
}
