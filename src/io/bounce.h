/* src/io/bounce.h - device-memory transfers through pinned host staging rings (cudart),
 * shared by the cuda backend and the cufile backend's per-file POSIX fallback.
 *
 * Each worker has a ring of TIO_BOUNCE_RING pinned buffers, an event per buffer and one
 * non-blocking copy stream. A transfer of several pieces is pipelined on that ring:
 *
 *   read   pread piece i+1 -> buf[(i+1) % R]   while   H2D copy buf[i % R] -> device runs
 *   write  D2H copy device -> buf[(i+1) % R]   while   pwrite buf[i % R] runs
 *
 * A buffer is reused only after the event recorded after its copy has completed
 * (cudaEventSynchronize on that buffer's event, never a whole-stream synchronize per piece);
 * a write's pwrite starts only once its piece's D2H event has completed. A request's fence
 * (r->fence) is waited for on the stream before its first copy (a read's preads do not wait for
 * it: they touch no device memory), never on the host. Before a transfer
 * returns, every copy it queued has completed (its result is final, the device memory and the
 * buffers may be reused at once). */
#ifndef TIO_IO_BOUNCE_H
#define TIO_IO_BOUNCE_H

#include "dl/cudart_shim.h"
#include "io/backend.h"

/* Buffers per worker ring (>= 2: one is filled while the other is copied). */
#define TIO_BOUNCE_RING 2u
/* Default piece size, bytes per buffer (a multiple of TIO_IO_ALIGN). */
#define TIO_BOUNCE_BYTES (4u << 20)

struct tio_bounce_set {
    const struct tio_cudart_api *cu;
    unsigned char **bufs;     /* per worker: one pinned block of TIO_BOUNCE_RING pieces */
    tio_cuda_event *events;   /* per worker and ring buffer: [w * TIO_BOUNCE_RING + k] */
    tio_cuda_stream *streams; /* one non-blocking stream per worker: its copies never wait
                                 for the legacy default stream, where kernels run */
    uint32_t n;               /* workers set up */
    uint32_t piece;           /* bytes per ring buffer (multiple of TIO_IO_ALIGN) */
    int device;               /* the device current at init (-1: unknown): workers bind to it */
};

/* Allocate n workers' rings (cudaHostAlloc, portable), events and non-blocking streams, on the
 * device current now. piece: bytes per buffer, a multiple of TIO_IO_ALIGN (0: TIO_BOUNCE_BYTES).
 * 0, TIO_EINVAL, TIO_ECUDA or TIO_ENOMEM. */
int tio_bounce_init(struct tio_bounce_set *b,
                    const struct tio_cudart_api *cu,
                    uint32_t n,
                    uint32_t piece);
void tio_bounce_fini(struct tio_bounce_set *b);
/* Bind the calling worker thread to the set's device (once per thread). */
void tio_bounce_bind(const struct tio_bounce_set *b);
/* One transfer of r (device memory) through worker `worker`'s ring, pipelined piece by piece;
 * returns bytes moved (stops at the first short piece) or < 0. Every copy it queued has
 * completed when it returns. One thread per worker at a time. */
int64_t
tio_bounce_io(struct tio_bounce_set *b, int fd, const struct tio_io_req *r, uint32_t worker);

#endif
