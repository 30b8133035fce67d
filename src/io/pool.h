/*
 * src/io/pool.h - a worker-thread pool that turns a synchronous transfer function into an
 * asynchronous backend (submit/reap). Used by the posix, fault, cuda and cufile backends.
 *
 *     tio_pool_new(threads, depth, fn, ctx, &p);
 *     tio_pool_submit(p, reqs, n);   // accepted count or -EAGAIN
 *     tio_pool_reap(p, 1, 8, -1, out);
 */
#ifndef TIO_IO_POOL_H
#define TIO_IO_POOL_H

#include "io/backend.h"

struct tio_pool;

/* Run one transfer synchronously on worker `worker` (0..threads-1); return bytes moved or
 * -errno. Must not loop on short transfers. */
typedef int64_t (*tio_pool_fn)(void *ctx, const struct tio_io_req *req, uint32_t worker);

int tio_pool_new(
    uint32_t threads, uint32_t capacity, tio_pool_fn fn, void *ctx, struct tio_pool **out);
/* Waits for queued and running transfers, joins the workers. Accepts NULL. */
void tio_pool_free(struct tio_pool *p);
int tio_pool_submit(struct tio_pool *p, const struct tio_io_req *reqs, uint32_t n);
int tio_pool_reap(
    struct tio_pool *p, uint32_t min, uint32_t max, int64_t timeout_ns, struct tio_io_cqe *out);
/* Make the current (or next) tio_pool_reap return early. Thread-safe, non-blocking. */
void tio_pool_kick(struct tio_pool *p);
/* Remove a queued (not yet running) transfer; it completes with -ECANCELED. 0 or -ENOENT. */
int tio_pool_cancel(struct tio_pool *p, uint64_t user);

#endif
