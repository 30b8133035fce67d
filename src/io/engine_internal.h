/*
 * src/io/engine_internal.h - the migration engine's shared state (private; never installed).
 *
 * The engine (include/teraio/io.h) is split by job; read the files in this order:
 *
 *   engine_table.c   the tensor table (id -> stored / pending copy) and placement: striping
 *                    over the swap files, extents, growing the files, the host tier's extents
 *   engine_queue.c   requests: the two priority queues, pick() (fences), the completion ring,
 *                    finishing and failing a request
 *   engine_piece.c   pieces: cutting a request into transfers (<= TIO_IO_MAX_OP), staging
 *                    through aligned buffers, short transfers, retries, CRC32C, the host tier's
 *                    copies, and a backend result's completion
 *   engine_drive.c   who drives the backend: the progress thread (two regimes) and callers
 *                    (caller-driven completions), submit / reap, wake-ups
 *   engine_gpu.c     the GPU data path: the copy streams (one per direction), the pinned
 *                    staging rings with an event per buffer, the device the engine is bound to
 *   engine_setup.c   parameters, backend selection, tio_engine_new / tio_engine_free
 *   engine.c         the public calls: reserve, write, read, drop, poll, wait, cancel, stats
 *
 * Hand-off rules between threads (each is repeated where it is enforced):
 *
 *  H1 `mu` guards every field of struct tio_engine below it except those marked otherwise,
 *     and every tensor, placement and request. Code that runs with mu released (backend
 *     calls, staging and host-tier copies, the CRC) touches only what H2-H5 give it.
 *  H2 One thread at a time drives the backend (submits, reaps, uses batch/reqs/cqes and the
 *     backend state): the progress thread, or with caller-driven completions whoever set
 *     `driving` under mu (tio_eng_drive_begin / tio_eng_drive_end).
 *  H3 A request is freed only by tio_eng_request_finish, under mu, when `inflight` is 0.
 *     Whoever releases mu while using a request (a piece in the backend, a host-tier copy)
 *     holds it through `inflight`, so it cannot be finished (and freed) meanwhile.
 *  H4 The caller's buffer is read or written only while its request is active; its
 *     completion is pushed last (tio_eng_request_finish), after which the engine never
 *     touches the buffer again and the caller may free it.
 *  H5 A staging buffer belongs to the op slot that took it from stage_free until that slot's
 *     result is completed (tio_eng_complete_op), and only the driving thread copies into or
 *     out of it.
 *  H6 A stored copy (placement) is freed only when no request uses it: a write's new copy
 *     replaces the old one when it completes; reads and a write of the same tensor exclude
 *     each other (TIO_ESTATE), so `readers` and `pending` keep a placement alive.
 *  H7 (the GPU data path, engine_gpu.c) A staging ring buffer is reused only once the copy
 *     stream is past its last use: an H2D buffer when the event recorded after its copy to the
 *     device has completed, a D2H buffer when its SSD write has completed. A request whose
 *     last device copies are still queued is finished only when their event has completed
 *     (or, with a `done` event, once `done` is recorded after them).
 *  H8 (host-tier writes with a `done` event) The pool bytes of such a copy are valid once its
 *     placement's `landing` event has completed: a copy from the pool to the device waits for it
 *     on the H2D stream (cudaStreamWaitEvent). Its extents may be freed and reused before: by
 *     another such copy, queued after it on the same D2H stream; a host-side copy into or out of
 *     the pool (host memory) first waits for the D2H stream (pool_d2h_pending).
 */
#ifndef TIO_IO_ENGINE_INTERNAL_H
#define TIO_IO_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <teraio/io.h>

#include "dl/cudart_shim.h"
#include "io/backend.h"
#include "io/extent.h"
#include "io/swapfile.h"

/* How often a request waiting for its fence (a CUDA event) is polled while nothing else wakes
 * the thread that drives (a completion does): the delay it may add to a transfer's start. */
#define TIO_FENCE_POLL_NS 50000

/* Where a stored tensor's chunks are. */
struct placement {
    uint64_t bytes;   /* tensor size */
    int32_t tier;     /* TIO_TIER_SSD or TIO_TIER_HOST */
    uint32_t nchunks; /* ceil(bytes / chunk) */
    uint32_t first;   /* directory of chunk 0 (chunk c is on (first + c) % ndirs) */
    uint64_t *off;    /* per chunk: byte offset in the swap file / host pool */
    uint32_t *crc;    /* per chunk CRC32C (verify on), else NULL */
    void *landing;    /* host tier, written with a `done` event (tio_eng_write_ordered): an
                         engine event recorded on the D2H stream after the write's last copy into
                         the pool; the pool bytes are valid once it completed (H8) */
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
    void *fence;      /* cudaEvent_t that must complete before any byte moves (NULL: none) */
    void *done;       /* cudaEvent_t recorded on the engine's copy stream (read: H2D, host-tier
                         write: D2H) once every copy is queued; the request then finishes without
                         waiting for its device copies (NULL: they are waited for) */
    int gpu;          /* device memory moved by the engine's copy streams (engine_gpu.c): its fence
                         is waited for on the copy stream (cudaStreamWaitEvent), never polled */
    int fence_queued; /* gpu: the copy stream already waits on the fence */
    int landed;       /* read: ordered after its placement's landing event (H8) */
    int copies;       /* gpu: device copies queued for it, not yet known complete */
    void *tail;       /* gpu: event after its last copy while it settles (engine_gpu.c) */
    struct request *snext; /* next in e->settling */
    int queued;            /* in a priority queue */
    uint64_t seq;          /* submission order (requests_submitted before it) */
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
    int32_t ring;  /* GPU path: the staging ring buffer (H7) the transfer uses, or -1 */
};

/* A pinned staging ring of one copy direction (H7): n buffers of `bytes`, an event each. */
struct gpu_ring {
    unsigned char *mem; /* n * bytes, cudaHostAlloc(portable), 4 KiB aligned */
    tio_cuda_event *ev; /* per buffer: recorded after its device copy */
    int32_t *free;      /* free buffers */
    uint32_t nfree;
    int32_t *busy; /* H2D: buffers whose copy to the device may still run */
    uint32_t nbusy;
    uint32_t n;
};

/* A device-to-staging copy queued on the D2H stream whose SSD write waits for its event. */
struct gpu_copy {
    struct request *rq; /* held through inflight (H3) */
    struct piece pc;
    int32_t ring;
};

/* The GPU data path (engine_gpu.c); cu NULL: none (no usable CUDA device at creation). */
struct tio_eng_gpu {
    const struct tio_cudart_api *cu; /* set at creation */
    int device;                      /* the device the engine was made on (set at creation) */
    tio_cuda_stream h2d, d2h;        /* one non-blocking copy stream per direction: the pool */
    /* and one per direction for the staging rings (SSD tier): a staged piece is queued only
     * when a ring buffer is free, and on a stream shared with the pool's copies it would queue
     * behind pool copies issued meanwhile, whose fences the GPU may reach much later */
    tio_cuda_stream sh2d, sd2h;
    struct gpu_ring ring[2];  /* [0] H2D (reads), [1] D2H (writes) */
    struct gpu_copy *copying; /* D2H copies waiting for their event */
    uint32_t ncopying;
    tio_cuda_event *evpool; /* spare events for settling requests */
    uint32_t nevpool;
    size_t capevpool;
    tio_cuda_event h2d_mark;  /* recorded on h2d so that d2h can wait for pool reads */
    struct request *settling; /* requests finished but for their last copies' event */
    int h2d_pending;          /* host-tier copies from the pool may still run on h2d */
    int pool_d2h_pending;     /* H8: copies into the pool of completed writes may still run */
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
    /* H1: mu guards everything below that is not marked "set at creation" (read-only until
     * tio_engine_free) or "driver only" (H2: the thread that drives the backend, with or
     * without mu). */
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* progress thread waits for work (progress_loop regime) */
    pthread_cond_t done_cv; /* callers wait for completions */
    struct waiter *waiters; /* callers blocked in tio_engine_wait (their stack frames) */
    pthread_t thread;       /* the progress thread (set at creation) */
    int thread_started, stopping;
    int in_reap; /* the driving thread is (about to be) blocked in ops->reap */
    /* Caller-driven completions (backend has arm/park/unpark): the backend is driven by one
     * thread at a time, the one that set `driving` under mu: a caller in tio_engine_wait or
     * tio_engine_write/read, or the progress thread, which otherwise parks. */
    int caller_drive; /* set at creation */
    int driving;      /* a thread drives the backend */
    int parked;       /* the progress thread is (about to be) in ops->park */
    int park_idle;    /* ... with no timeout: nothing was in flight */
    int wake_waiters; /* done_cv must be broadcast: the backend was handed back */

    struct tio_engine_params p; /* copy; strings below owned (set at creation) */
    char *backend_options;
    const struct tio_io_backend_ops *ops; /* set at creation */
    void *bst;                            /* backend state (driver only, H2) */

    struct tio_swapfile *files; /* fd and dir set at creation; size and extents under mu */
    uint32_t nfiles;
    int *fds;
    uint32_t next_dir;
    uint64_t max_op; /* largest transfer handed to the backend (bytes; set at creation) */

    /* The host tier: a backend of its own (backend_host.c) that holds the pool; NULL without
     * one (set at creation). Its state is driver only (H2), except mem_ok. */
    const struct tio_io_backend_ops *host_ops;
    void *host_bst;
    struct tio_extents host_ext; /* the pool's extents */
    int fence_blocked; /* tio_eng_pick() passed over a request whose fence has not completed */
    int gpu_pending;   /* copy events to poll (staging buffers, settling requests, copies) */
    struct tio_eng_gpu gpu;

    unsigned char *stage_mem; /* depth buffers of stage_bytes, 4 KiB aligned; a buffer's bytes
                                 belong to the op slot that holds it (H5) */
    uint64_t stage_bytes;
    int32_t *stage_free; /* free staging buffers (under mu) */
    uint32_t nstage_free;

    struct batch_item *batch; /* driver only (H2): scratch of depth entries each */
    struct tio_io_req *reqs;
    struct tio_io_cqe *cqes;

    struct op *opv; /* depth slots: transfers in the backend */
    uint32_t *op_free;
    uint32_t nop_free;
    uint32_t nheavy; /* ops in flight with heavy set */

    struct tensor **buckets; /* the tensor table (engine_table.c) */
    size_t nbuckets, ntensors;

    struct request *qhead[TIO_PRIO_COUNT], *qtail[TIO_PRIO_COUNT];
    struct request *active; /* every request not yet finished (H3) */

    struct tio_completion *cq; /* ring of completions */
    size_t cq_cap, cq_head, cq_count;
    uint32_t outstanding; /* submitted, not yet reaped by the caller */

    struct tio_engine_stats st;
    double busy_since;
    char last_error[512];
};

/* ---- engine_table.c: tensor table and placement (under mu) ---- */

/* The tensor with this id, or NULL. */
struct tensor *tio_eng_tensor_find(struct tio_engine *e, uint64_t id);
/* The tensor with this id, created (empty) if absent; NULL when out of memory. */
struct tensor *tio_eng_tensor_get(struct tio_engine *e, uint64_t id);
/* Remove t from the table (and free it) if nothing references it any more. */
void tio_eng_tensor_maybe_remove(struct tio_engine *e, struct tensor *t);
/* Bytes of chunk c of pl (the last one may be short). */
uint64_t tio_eng_chunk_len(const struct tio_engine *e, const struct placement *pl, uint32_t c);
/* Swap file (directory index) of chunk c of pl. */
uint32_t tio_eng_chunk_file(const struct tio_engine *e, const struct placement *pl, uint32_t c);
/* Allocate a placement for `bytes` on `tier`. 0, -ENOSPC (detail names the tier), TIO_ENOMEM. */
int tio_eng_placement_new(
    struct tio_engine *e, uint64_t id, uint64_t bytes, int32_t tier, struct placement **out);
/* Give pl's extents back and free it (NULL is fine). No request may use it (H6). */
void tio_eng_placement_free(struct tio_engine *e, struct placement *pl);

/* ---- engine_queue.c: requests, queues, completions (under mu) ---- */

void tio_eng_queue_push(struct tio_engine *e, struct request *rq, int front);
/* Must done_cv be broadcast because the backend was handed back? Clears the flag. */
int tio_eng_done_wake_due(struct tio_engine *e);
/* Release mu, then wake the waiters that may drive the backend now. */
void tio_eng_unlock_signal(struct tio_engine *e);
void tio_eng_request_free(struct request *rq);
/* Finish a request whose pieces are all done or abandoned (inflight == 0): settle the tensor,
 * count it, push its completion, free it (H3, H4). */
void tio_eng_request_finish(struct tio_engine *e, struct request *rq);
/* Record the request's first error with the tensor, chunk and place in last_error. */
void tio_eng_request_fail(struct tio_engine *e,
                          struct request *rq,
                          int64_t err,
                          uint32_t chunk,
                          uint32_t attempts,
                          const char *why);
/* Does rq still have pieces to issue (and neither failed nor was canceled)? */
int tio_eng_request_has_work(const struct request *rq);
/* The request to serve next: urgent first, whose fence has completed; NULL if none. */
struct request *tio_eng_pick(struct tio_engine *e);

/* ---- engine_piece.c: pieces, staging, CRC, host tier ---- */

/* Build up to `max` transfers from the queues into batch[] (under mu, by the driver). */
uint32_t
tio_eng_build_batch(struct tio_engine *e, struct batch_item *batch, uint32_t max, int copies);
/* Handle one backend result for op slot `slot` (under mu, by the driver). */
void tio_eng_complete_op(struct tio_engine *e, uint32_t slot, int64_t res);
/* Can the host tier take memory of kind mem (0 without a host tier)? Any thread. */
int tio_eng_host_mem_ok(const struct tio_engine *e, int32_t mem);

/* ---- engine_gpu.c: the GPU data path (under mu unless said otherwise) ---- */

/* Set up the copy streams and staging rings when a CUDA device is usable (else gpu.cu stays
 * NULL and device memory needs a device-capable backend). 0 or < 0. Not under mu. */
int tio_eng_gpu_init(struct tio_engine *e);
/* Wait for every queued copy and free the streams, rings and events. Not under mu. */
void tio_eng_gpu_fini(struct tio_engine *e);
/* Does device memory of a request on `tier` go through the engine's copy streams? */
int tio_eng_gpu_path(const struct tio_engine *e, int32_t mem, int32_t tier);
/* Is rq's fence handed to the backend with each piece (device memory on the cufile backend),
 * rather than polled before its first piece? */
int tio_eng_fence_to_backend(const struct tio_engine *e, const struct request *rq);
/* Bind the calling thread to the engine's device for CUDA calls; *prev for tio_eng_gpu_leave.
 * The engine's own threads are bound once, callers for the duration of the call. */
void tio_eng_gpu_enter(const struct tio_engine *e, int *prev);
void tio_eng_gpu_leave(const struct tio_engine *e, int prev);
/* The progress thread: bind it to the engine's device for its life. */
void tio_eng_gpu_bind_thread(const struct tio_engine *e);
/* Queue on `stream` a wait for the request's fence, once. 0 or TIO_ECUDA. */
int tio_eng_gpu_fence(struct tio_engine *e, struct request *rq, tio_cuda_stream stream);
/* Poll the copy events: give back staging buffers whose copies completed, submit ready
 * D2H pieces to batch[] (returns how many, at most max), finish settled requests. Sets
 * gpu_pending while anything is left to poll. */
uint32_t tio_eng_gpu_poll(struct tio_engine *e, struct batch_item *batch, uint32_t max);
/* A gpu read piece of `len` bytes: take an H2D staging buffer (-1: none free now). */
int32_t tio_eng_gpu_take(struct tio_engine *e, int dir);
/* Stage B of a read piece that arrived in ring buffer `ring`: queue its copy to the device
 * after the fence, record the buffer's event. 0 or TIO_ECUDA. */
int tio_eng_gpu_h2d(
    struct tio_engine *e, struct request *rq, const struct piece *pc, int32_t ring, uint64_t len);
/* Stage 1 of a write piece: queue its copy from the device into ring buffer `ring` after the
 * fence; the SSD write is submitted by tio_eng_gpu_poll once the copy's event completed. */
int tio_eng_gpu_d2h(struct tio_engine *e, struct request *rq, const struct piece *pc, int32_t ring);
/* Give a D2H ring buffer back after its SSD write completed (H7). */
void tio_eng_gpu_put(struct tio_engine *e, int dir, int32_t ring);
/* A request with every piece done: 1 if it must settle first (its last copies are queued:
 * record the tail event, finish later), 0 finish now (done recorded if it has one). */
int tio_eng_gpu_settle(struct tio_engine *e, struct request *rq);
/* H8: before a host-tier piece of rq: a device read waits on the H2D stream for its placement's
 * landing event; a host-memory copy waits on the host for every copy into the pool still queued
 * (by the driver: never the training thread of a device-memory caller). 0 or TIO_ECUDA (rq
 * failed). */
int tio_eng_gpu_landed(struct tio_engine *e, struct request *rq);
/* H8: give pl's landing event back (its extents are freed: see H8 for their reuse). */
void tio_eng_gpu_landing_free(struct tio_engine *e, struct placement *pl);
/* Address of ring buffer i of direction dir. */
unsigned char *tio_eng_gpu_buf(const struct tio_engine *e, int dir, int32_t i);

/* ---- engine_drive.c: driving the backend ---- */

void *tio_eng_progress_main(void *arg);
/* New work or a cancellation (under mu): wake whoever drives the backend. */
void tio_eng_wake_progress(struct tio_engine *e, int urgent);
/* A request was queued by a caller (under mu): submit it or tell whoever drives. */
void tio_eng_kick(struct tio_engine *e, int urgent);
/* Caller-driven: a waiter takes the backend and drives until min completions are ready,
 * nothing is in flight or the deadline passes (then 1); tio_eng_drive_end hands it back. */
int tio_eng_drive_wait(struct tio_engine *e,
                       size_t min,
                       int64_t timeout_ns,
                       const struct timespec *deadline);
void tio_eng_drive_end(struct tio_engine *e, const struct waiter *self, int copies);

#endif
