/*
 * src/io/backend.h - the I/O backend interface of the migration engine (private).
 *
 * A backend moves bytes between a buffer and one of the engine's swap files. The engine core
 * (engine_*.c) owns files, extents, striping, staging, short transfers, retries and CRCs; a
 * backend only queues transfers and reports their results, like a fio ioengine:
 *
 *     ops->init(&cfg, &st);                  // files are registered at init
 *     n = ops->submit(st, reqs, k);          // accepted count, or -EAGAIN when full
 *     n = ops->reap(st, 1, 8, 2000000, cqe); // {user, res}: res = bytes moved or -errno
 *     ops->fini(st);
 *
 * Contract for every request handed to submit():
 *   - len is 1..TIO_IO_MAX_OP (the core splits larger transfers, io_uring takes 32-bit
 *     lengths);
 *   - the file range [off, round_up(off + len, 4096)) belongs to this request, so a backend
 *     that bounces through an aligned buffer may transfer the padded length (it must report
 *     at most len);
 *   - with cfg.direct set (O_DIRECT files), host buffers, offsets and lengths are 4 KiB
 *     aligned, except the final length of a device-memory request (bounced by the backend);
 *   - res may be smaller than len (short transfer): the core resumes the rest. Backends never
 *     loop on short transfers themselves; 0 is reported as 0 (the core makes it -EIO).
 * Backends are driven by one thread at a time (the engine's progress thread, or a caller that
 * waits, see arm/park), except probe(), notify(), park(), unpark() and mem_ok().
 *
 * The host tier is a backend too (backend_host.c, not in the registry: the engine makes one
 * beside its SSD backend when it has a host tier). It holds cfg.pool_bytes of memory instead
 * of files: a request's off is a byte offset in that pool and file is 0.
 */
#ifndef TIO_IO_BACKEND_H
#define TIO_IO_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include <teraio/io.h>

#define TIO_IO_BACKEND_API 1
/* Largest single transfer handed to a backend (bytes): below 4 GiB so 32-bit lengths hold. */
#define TIO_IO_MAX_OP (1u << 30)
/* Alignment of O_DIRECT buffers, offsets and lengths (bytes). */
#define TIO_IO_ALIGN 4096u

enum tio_io_op { TIO_IO_OP_READ = 0, TIO_IO_OP_WRITE = 1 };

/* tio_io_req.flags */
enum tio_io_req_flag {
    /* a device-memory copy need not be complete when its result is reaped: it is queued on
     * the engine's copy stream, and the engine waits for an event recorded after it (the
     * host tier; other backends ignore the flag) */
    TIO_IO_REQ_NO_WAIT = 1u << 0,
};

struct tio_io_req {
    uint64_t user;     /* core cookie, returned untouched in tio_io_cqe.user */
    void *buf;         /* host or device pointer (mem) */
    uint64_t off;      /* byte offset in the file */
    uint32_t len;      /* bytes, 1..TIO_IO_MAX_OP */
    int32_t op;        /* enum tio_io_op */
    int32_t mem;       /* enum tio_mem_kind */
    int32_t file;      /* index into cfg.fds */
    int32_t buf_index; /* index of a registered buffer containing buf, or -1 */
    uint32_t flags;    /* TIO_IO_REQ_* bits (0: none) */
    /* device memory on the cufile backend: a cudaEvent_t that must complete before any byte
     * moves, waited for on the worker's stream (cudaStreamWaitEvent) or, for a synchronous
     * cuFile call, on the host; NULL: none (the engine passed it already) */
    void *fence;
};

struct tio_io_cqe {
    uint64_t user; /* tio_io_req.user */
    int64_t res;   /* bytes moved (0..len) or -errno / TIO_E* */
};

struct tio_io_config {
    const int *fds;      /* swap files, one per directory (borrowed, outlive the backend) */
    uint32_t nfds;       /* count of fds */
    uint32_t depth;      /* transfers the core keeps in flight at most */
    uint32_t threads;    /* worker threads for thread-pool backends (>= 1) */
    int32_t direct;      /* files were opened with O_DIRECT */
    uint64_t max_op;     /* largest len the core will submit (<= TIO_IO_MAX_OP) */
    const char *options; /* tio_engine_params.backend_options (may be NULL) */
    uint64_t pool_bytes; /* memory-tier backends (host): bytes of memory to hold; else 0 */
    /* memory-tier backends: the engine's copy streams (cudaStream_t, one per direction; NULL:
     * no usable CUDA device, device memory is refused) */
    void *h2d_stream, *d2h_stream;
};

struct tio_io_backend_ops {
    uint32_t api_version; /* (required) TIO_IO_BACKEND_API */
    const char *name;     /* (required) short lower-case name, < 16 bytes */
    uint32_t caps;        /* (required) TIO_ENGINE_CAP_* bits */
    /* (required) can it run here? Returns a score (0: unavailable, higher is preferred by
     * "auto") and writes a one-line reason. Thread-safe, cheap, no lasting side effects. */
    int (*probe)(char *reason, size_t len);
    /* (required) create the backend state for cfg; 0 or < 0 (TIO_EUNAVAIL with a detail). */
    int (*init)(const struct tio_io_config *cfg, void **state);
    /* (required) wait for in-flight transfers (their results are dropped), free the state. */
    void (*fini)(void *state);
    /* (optional: default nothing, buf_index is then always -1) register buffers that stay
     * valid until unregister_bufs; returns 0 or < 0 (the core then runs unregistered). */
    int (*register_bufs)(void *state, void *const *bufs, const uint64_t *lens, uint32_t n);
    /* (optional: default nothing) drop the registration; no transfer on them is in flight. */
    void (*unregister_bufs)(void *state);
    /* (required) queue n transfers; returns how many were accepted (0..n) or -EAGAIN when
     * none fit. Never blocks waiting for room. */
    int (*submit)(void *state, const struct tio_io_req *reqs, uint32_t n);
    /* (required) wait up to timeout_ns (< 0: forever) for at least min results, return up
     * to max of them in out[]. Returns the count (may be < min on timeout) or < 0. */
    int (*reap)(
        void *state, uint32_t min, uint32_t max, int64_t timeout_ns, struct tio_io_cqe *out);
    /* (optional: default -ENOTSUP, the core waits for the transfer) try to cancel a queued
     * transfer; 0 if it will complete with -ECANCELED. */
    int (*cancel)(void *state, uint64_t user);
    /* (optional: default none; the core then polls reap every 0.5 ms for new work) make a
     * reap that is blocked now, or the next one, return early (possibly with 0 results).
     * The only member that may be called from another thread, concurrently with reap; it
     * must not block. */
    void (*notify)(void *state);
    /*
     * (optional, all three or none: caller-driven completions) With them, a caller blocked in
     * tio_engine_wait drives the backend itself (submit and reap, one thread at a time, handed
     * over under the engine lock) while the progress thread parks, so a request costs one
     * wake-up (the kernel wakes the caller) instead of two (kernel -> progress thread ->
     * caller). The progress thread takes over when no caller drives.
     *
     * arm(on), by the thread that drives: on = 1: results that arrive from now on make a
     * park() return; returns 1 if a result is already waiting to be reaped, else 0. on = 0:
     * they need not (the driver reaps them itself). < 0: unsupported (the core then uses the
     * progress thread for everything).
     * park(timeout_ns), by the progress thread only, possibly while another thread drives:
     * block until armed results arrive, unpark() is called or the timeout passes (< 0:
     * none). Consumes no results; may return early for no reason.
     * unpark(), any thread, never blocks: make a park() that is blocked now, or the next one,
     * return.
     */
    int (*arm)(void *state, int on);
    void (*park)(void *state, int64_t timeout_ns);
    void (*unpark)(void *state);
    /* (optional: default caps decides, TIO_ENGINE_CAP_DEVICE_MEM for device memory) can this
     * state move memory of kind `mem` (enum tio_mem_kind)? 1 or 0. For what init found (the
     * host tier: a usable CUDA device); thread-safe, never blocks. */
    int (*mem_ok)(void *state, int32_t mem);
};

/* The registry (registry.c): every backend compiled in, in a static array. */
size_t tio_io_backend_count(void);
const struct tio_io_backend_ops *tio_io_backend_at(size_t i);
/* By name; NULL if unknown or compiled out. */
const struct tio_io_backend_ops *tio_io_backend_find(const char *name);
/* Check api_version and the required members (done once for every entry). 0 or TIO_EINVAL. */
int tio_io_backend_validate(const struct tio_io_backend_ops *ops);

extern const struct tio_io_backend_ops tio_io_backend_posix;
extern const struct tio_io_backend_ops tio_io_backend_null;
extern const struct tio_io_backend_ops tio_io_backend_fault;
extern const struct tio_io_backend_ops tio_io_backend_cuda;
extern const struct tio_io_backend_ops tio_io_backend_cufile;
/* The host tier (not in the registry; see above). */
extern const struct tio_io_backend_ops tio_io_backend_host;
#if defined(TIO_HAVE_URING)
extern const struct tio_io_backend_ops tio_io_backend_uring;
#endif

/* Options string helper: value of `key` in "k=v,k=v" as u64; returns 1 if found, 0 if not,
 * TIO_EINVAL if the value is not a number (detail names the key). */
int tio_io_option_u64(const char *options, const char *key, uint64_t *out);

/* Null backend statistics for tests: largest transfer seen and total bytes (process-wide). */
uint64_t tio_io_null_max_len(void);
uint64_t tio_io_null_total_bytes(void);
void tio_io_null_reset(void);

#endif
