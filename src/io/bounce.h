/* src/io/bounce.h - device-memory transfers through a pinned host bounce buffer (cudart),
 * shared by the cuda backend and the cufile backend's per-file POSIX fallback. */
#ifndef TIO_IO_BOUNCE_H
#define TIO_IO_BOUNCE_H

#include "dl/cudart_shim.h"
#include "io/backend.h"

/* Bounce buffer size per worker (bytes, multiple of TIO_IO_ALIGN). */
#define TIO_BOUNCE_BYTES (8u << 20)

struct tio_bounce_set {
    const struct tio_cudart_api *cu;
    unsigned char **bufs;     /* one pinned buffer of TIO_BOUNCE_BYTES per worker */
    tio_cuda_stream *streams; /* one non-blocking stream per worker: its copies never wait
                                 for the legacy default stream, where kernels run */
    uint32_t n;
    int device; /* the device current at init (-1: unknown): workers bind to it */
};

/* Allocate n pinned buffers with cudaHostAlloc and n non-blocking streams. 0, TIO_ECUDA or
 * TIO_ENOMEM. */
int tio_bounce_init(struct tio_bounce_set *b, const struct tio_cudart_api *cu, uint32_t n);
void tio_bounce_fini(struct tio_bounce_set *b);
/* One transfer of r (device memory) through bounce buffer `worker`: copies piecewise,
 * returns bytes moved (stops at the first short piece) or < 0. */
int64_t
tio_bounce_io(struct tio_bounce_set *b, int fd, const struct tio_io_req *r, uint32_t worker);

#endif
