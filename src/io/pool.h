/*
 * src/io/pool.h - a worker-thread pool that turns a synchronous transfer function into an
 * asynchronous backend (submit/reap). Used by the posix, fault, cuda and cufile backends.
 *
 *     tio_pool_new(threads, depth, fn, ctx, &p);
 *     tio_pool_submit(p, reqs, n);   // accepted count or -EAGAIN
 *     tio_pool_reap(p, 1, 8, -1, out);
 *
 * A thread-pool backend's state starts with a struct tio_pool_backend (the pool and the file
 * set); its init calls tio_pool_backend_init, and TIO_POOL_BACKEND_OPS gives it the fini,
 * submit, reap, cancel and notify members:
 *
 *     struct cuda_state { struct tio_pool_backend base; ... };   // base first
 *     static int cuda_init(const struct tio_io_config *cfg, void **state) {
 *         return tio_pool_backend_init(sizeof(struct cuda_state), cfg, cuda_setup, cuda_do,
 *                                      state);  // cuda_do's ctx is the state
 *     }
 *     int fd = tio_pool_backend_fd(&st->base, r, 1);            // in cuda_do: fd or -EINVAL
 *     const struct tio_io_backend_ops ops = { ..., .init = cuda_init, TIO_POOL_BACKEND_OPS };
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
/* Pace every transfer by the emulated drive t (throttle.h) from now on; call before the first
 * submit. tio_pool_backend_init does it when the backend options set throttle_*. */
struct tio_throttle;
void tio_pool_set_throttle(struct tio_pool *p, const struct tio_throttle *t);
/* Make the current (or next) tio_pool_reap return early. Thread-safe, non-blocking. */
void tio_pool_kick(struct tio_pool *p);
/* Remove a queued (not yet running) transfer; it completes with -ECANCELED. 0 or -ENOENT. */
int tio_pool_cancel(struct tio_pool *p, uint64_t user);

/* One pwrite (op TIO_IO_OP_WRITE) or pread of len bytes at byte offset off, EINTR retried:
 * bytes moved (short counts included) or -errno. */
int64_t tio_file_io(int fd, int32_t op, void *buf, size_t len, uint64_t off);
/* tio_file_io of request r (host memory). */
int64_t tio_posix_io(int fd, const struct tio_io_req *r);

/* The first member of a thread-pool backend's state. */
struct tio_pool_backend {
    struct tio_pool *pool;
    const int *fds; /* cfg.fds (borrowed: outlive the backend) */
    uint32_t nfds;  /* count of fds */
    /* set by the backend's setup (NULL: nothing to undo): undoes it after the workers have
     * stopped; also after a setup that failed half-way */
    void (*teardown)(void *state);
};

/* The state's own initialization: 0 or < 0 (tio_pool_backend_init then undoes it). */
typedef int (*tio_pool_setup_fn)(void *state, const struct tio_io_config *cfg);

/* The init member of a thread-pool backend: a zeroed state of `size` bytes (a struct
 * tio_pool_backend first) with cfg's file set, setup(state, cfg) if setup is not NULL, then
 * cfg->threads workers (capacity cfg->depth) that run fn with ctx = the state, paced by the
 * emulated drive the options' throttle_* keys describe (throttle.h). 0, or < 0 with everything
 * undone (TIO_EINVAL for a throttle value that is not a number). */
int tio_pool_backend_init(size_t size,
                          const struct tio_io_config *cfg,
                          tio_pool_setup_fn setup,
                          tio_pool_fn fn,
                          void **state);
/* The descriptor of r's file, or -EINVAL if r names none of the set or is device memory while
 * device_mem is 0. */
int tio_pool_backend_fd(const struct tio_pool_backend *b,
                        const struct tio_io_req *r,
                        int device_mem);
/* The other vtable members of every thread-pool backend (TIO_POOL_BACKEND_OPS): fini stops
 * the workers, runs the teardown and frees the state. */
void tio_pool_backend_fini(void *state);
int tio_pool_backend_submit(void *state, const struct tio_io_req *reqs, uint32_t n);
int tio_pool_backend_reap(
    void *state, uint32_t min, uint32_t max, int64_t timeout_ns, struct tio_io_cqe *out);
int tio_pool_backend_cancel(void *state, uint64_t user);
void tio_pool_backend_notify(void *state);
#define TIO_POOL_BACKEND_OPS                                          \
    .fini = tio_pool_backend_fini, .submit = tio_pool_backend_submit, \
    .reap = tio_pool_backend_reap, .cancel = tio_pool_backend_cancel, \
    .notify = tio_pool_backend_notify

#endif
