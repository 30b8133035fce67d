/*
 * teraio/io.h - the migration engine: asynchronous tensor <-> storage I/O.
 *
 * An engine moves whole tensors between caller memory (host or GPU) and two tiers: SSD (one or
 * more directories, typically one per NVMe device; a tensor is striped in fixed chunks across
 * all of them, RAID-0 in software) and a pinned host-memory pool. Each directory holds one
 * preallocated swap file, mode 0600, opened with O_TMPFILE (or created and unlinked at once),
 * so nothing stays on disk after the process exits, even after SIGKILL. The engine tracks
 * where each tensor lives, keyed by a caller-chosen 64-bit tensor id.
 *
 *     const char *dirs[] = { "/mnt/nvme0/tio", "/mnt/nvme1/tio" };
 *     struct tio_engine_params p = tio_engine_params_default();
 *     p.dirs = dirs; p.ndirs = 2;
 *     struct tio_engine *e;
 *     int rc = tio_engine_new(&p, &e);
 *     if (rc < 0) { fprintf(stderr, "%s: %s\n", tio_strerror(rc), tio_last_error()); ... }
 *     rc = tio_engine_reserve(e, 64ull << 30);      // peak SSD bytes of the plan, up front
 *     struct tio_engine_write_request w = { .struct_size = sizeof w, .tensor_id = 42,
 *         .src = buf, .bytes = nbytes, .mem = TIO_MEM_HOST, .tier = TIO_TIER_SSD,
 *         .tag = 1001 };                            // tag 1001 comes back in the completion
 *     rc = tio_engine_write(e, &w);                 // no fence (NULL)
 *     struct tio_completion c;
 *     rc = tio_engine_wait(e, &c, 1, 1, -1);        // c.tag == 1001, c.res == nbytes or < 0
 *     struct tio_engine_read_request r = { .struct_size = sizeof r, .tensor_id = 42,
 *         .dst = buf, .bytes = nbytes, .mem = TIO_MEM_HOST, .priority = TIO_PRIO_URGENT,
 *         .tag = 1002 };
 *     rc = tio_engine_read(e, &r);                  // no fence, no done event
 *     ...
 *     tio_engine_drop(e, 42);                       // frees the tensor's extents
 *     tio_engine_free(e);
 *
 * Guarantees (no data loss):
 *   - The engine never frees or modifies caller memory. A write completes with res == bytes
 *     only once every chunk is written; until then the caller must keep its copy. A failed
 *     write completes with res < 0, and the tensor's previous copy (if any) stays readable.
 *   - A failed or corrupt read (CRC32C mismatch with verify on) is retried, then completes
 *     with TIO_EIO / TIO_ECORRUPT and a detail naming the tensor (tio_engine_last_error).
 *   - Capacity can be reserved up front (tio_engine_reserve): a shortage is reported there,
 *     with needed and available bytes and the directory, not in the middle of training.
 *   - Short transfers are resumed by the engine; a transfer of zero bytes is an I/O error;
 *     requests larger than 4 GiB are split.
 *
 * Thread safety: an engine is thread-safe. Any thread may submit, poll, wait, cancel, drop,
 * reserve and read stats concurrently; completions are delivered to whichever thread polls or
 * waits first. The engine runs one internal progress thread plus the backend's own threads.
 *
 * Memory kinds: TIO_MEM_HOST is ordinary host memory (any alignment: unaligned buffers go
 * through aligned staging buffers); TIO_MEM_DEVICE is CUDA device memory and needs a CUDA
 * device usable when the engine was made (any backend: the engine moves it through pinned
 * staging rings on copy streams of its own, docs/engine.md "The GPU data path"; the `cufile`
 * backend reads and writes it with cuFile), else TIO_EUNAVAIL. An engine belongs to the device
 * current on the thread that made it: its streams, events and threads are that device's.
 */
#ifndef TERAIO_IO_H
#define TERAIO_IO_H

#include <stddef.h>
#include <stdint.h>

#include <teraio/status.h>
#include <teraio/tier.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where the caller's buffer lives. Stored as int32_t in records. */
enum tio_mem_kind {
    TIO_MEM_HOST = 0,   /* host memory (pageable or pinned) */
    TIO_MEM_DEVICE = 1, /* CUDA device memory */
    TIO_MEM_KIND_COUNT
};

/* Tiers: the engine uses enum tio_tier from <teraio/tier.h> (TIO_TIER_HOST = 1: the pinned
 * host-memory pool of host_tier_bytes; TIO_TIER_SSD = 2: striped over the swap files of every
 * directory), so plan steps can be passed through unchanged. TIO_TIER_GPU is not a valid
 * engine tier. */

/* Scheduling class: urgent requests are issued before any queued normal request. */
enum tio_priority { TIO_PRIO_NORMAL = 0, TIO_PRIO_URGENT = 1, TIO_PRIO_COUNT };

/* Default stripe chunk (bytes): every TIO_ENGINE_DEFAULT_CHUNK bytes go to the next dir. */
#define TIO_ENGINE_DEFAULT_CHUNK (4u << 20)
/* Default number of chunk transfers in flight in the backend. */
#define TIO_ENGINE_DEFAULT_DEPTH 16u
/* Default number of outstanding (submitted, not yet reaped) requests. */
#define TIO_ENGINE_DEFAULT_MAX_REQUESTS 1024u

struct tio_engine_params {
    /* Size of this struct as the caller's header declares it: set by tio_engine_params_default(s)
     * (docs/style.md, "Versioned structs"). */
    uint32_t struct_size;
    /* SSD directories (borrowed: copied by tio_engine_new). Each must be a real directory,
     * not a symbolic link. May be empty (ndirs 0) for a host-tier-only engine. */
    const char *const *dirs;
    size_t ndirs;
    /* Size of the pinned host-memory tier in bytes (0: no host tier). */
    uint64_t host_tier_bytes;
    /* Backend name ("posix", "uring", "cufile", "cuda", "null", "fault") or "auto" (the
     * highest probe score among those fit for production). NULL means "auto". The environment
     * variable TIO_IO_BACKEND overrides "auto". */
    const char *backend;
    /* Stripe chunk in bytes (multiple of 4096; default 4 MiB). */
    uint64_t chunk_bytes;
    /* Chunk transfers in flight in the backend (1..4096; default 16). */
    uint32_t queue_depth;
    /* Non-zero: CRC32C per chunk computed on write and verified on read (SSD tier). Off by
     * default here; the Python Offloader turns it on. Its cost: docs/bench/io.md. */
    int32_t verify;
    /* SSD bytes preallocated at creation (total over all directories; 0: none, the files grow
     * on demand). Same as calling tio_engine_reserve right after creation. */
    uint64_t ssd_reserve_bytes;
    /* Outstanding requests before submit returns -EAGAIN (default 1024). */
    uint32_t max_requests;
    /* Attempts per chunk after the first one for failed or corrupt transfers (default 2). */
    uint32_t retries;
    /* Backend-specific options, "key=value,key=value" (NULL: none). The `fault` backend reads
     * e.g. "write_fail=3,short=1,corrupt=2" (see docs/engine.md). */
    const char *backend_options;
    /* Non-zero (default): fallocate the swap files; 0: grow them sparse with ftruncate
     * (tests that must not use disk space, together with the `null` backend). */
    int32_t preallocate;
    /* Threads of thread-pool backends (posix, cuda, cufile); 0: queue_depth, capped at 64. */
    uint32_t threads;
};

/* tio_engine_params_defaults: fill the `size` bytes of *out (size = sizeof *out) with the
 * defaults (zero dirs, no host tier, "auto", 4 MiB chunks, depth 16, no verify, no reservation,
 * 1024 requests, 2 retries, preallocate on) as far as this library knows them (a newer header's
 * extra fields are zeroed), and set out->struct_size. Returns 0; TIO_EINVAL (NULL),
 * TIO_EVERSION (size below the first versioned struct tio_engine_params). */
TIO_API int tio_engine_params_defaults(struct tio_engine_params *out, size_t size);
/* tio_engine_params_default: the same by value. Inline, so that the size is the one this header
 * declares: not an exported function, whose by-value struct would be the library's size
 * (docs/style.md, "Versioned structs"). */
static inline struct tio_engine_params tio_engine_params_default(void) {
    struct tio_engine_params p;
    (void)tio_engine_params_defaults(&p, sizeof p);
    return p;
}

struct tio_engine;

/*
 * tio_engine_new: create an engine. Opens one swap file per directory (0600, O_NOFOLLOW,
 * O_TMPFILE or unlinked at once, O_DIRECT where the filesystem allows), selects and starts
 * the backend, allocates staging buffers and the host tier. *out is set only on success.
 * Errors: TIO_EINVAL (field named in tio_last_error), -ELOOP/-ENOTDIR (a directory is a
 * symlink or not a directory), TIO_ENOTFOUND (unknown backend), TIO_EUNAVAIL (the backend
 * cannot run here; the probe's reason is in the detail), -ENOSPC (ssd_reserve_bytes), -errno.
 */
TIO_API TIO_MUST_CHECK int tio_engine_new(const struct tio_engine_params *params,
                                          struct tio_engine **out);

/* tio_engine_free: cancel what is queued, wait for what is in flight, close and thereby
 * delete the swap files, free everything. Accepts NULL. Not concurrent with other calls. */
TIO_API void tio_engine_free(struct tio_engine *e);

/*
 * tio_engine_reserve: make sure the SSD tier can hold `bytes` of tensors in total (striped
 * over all directories, chunk padding included), growing the swap files now. Returns 0 or
 * -ENOSPC with the detail "needed X, available Y on DIR" (both in bytes and human units).
 */
TIO_API TIO_MUST_CHECK int tio_engine_reserve(struct tio_engine *e, uint64_t bytes);

/*
 * tio_engine_write: copy req->bytes bytes at req->src (memory kind req->mem) into the engine as
 * the contents of tensor req->tensor_id, on tier req->tier. Asynchronous: returns 0 once queued,
 * and one completion {tag, res} arrives later, res == bytes on success or a negative status. `src`
 * must stay valid and unmodified until then. Writing a tensor that is already stored replaces
 * it: the old copy is freed only when the new one is complete.
 *
 * `fence` (a cudaEvent_t, or NULL for none): no byte of the request moves before it has
 * completed. For device memory the engine's copy stream waits on it (cudaStreamWaitEvent; on the
 * cufile backend, its worker's stream, or the worker before a synchronous cuFile call); for host
 * memory the engine's own threads poll it with cudaEventQuery (every 50 us while nothing else
 * wakes them); the caller never blocks on it. Use it for device memory
 * that kernels already queued on a stream may still use: a tensor offloaded after its last use,
 * memory the caching allocator just handed out (record the event on that stream first). The event
 * must stay alive and must not be recorded again until the request's completion is reaped. A failed
 * query completes the request with TIO_ECUDA.
 *
 * Errors (returned at once, no completion): TIO_EVERSION (req->struct_size, as for any
 * versioned struct), TIO_EINVAL (NULL req, bytes == 0, bad enum, NULL src),
 * -EAGAIN (max_requests outstanding: reap and retry), TIO_ESTATE (a request on this tensor
 * is still in flight), TIO_EUNAVAIL (device memory without a device-capable backend, host
 * tier of size 0, or a fence without cudart), -ENOSPC (tier full; detail gives needed and
 * available bytes).
 */
/* A write request (docs/style.md, "Versioned structs": set struct_size = sizeof it). */
struct tio_engine_write_request {
    uint32_t struct_size; /* sizeof(struct tio_engine_write_request) */
    int32_t mem;          /* enum tio_mem: where `src` lives */
    uint64_t tensor_id;   /* the caller's id of the tensor */
    const void *src;      /* `bytes` bytes to store; valid and unmodified until the completion */
    uint64_t bytes;       /* size of the tensor, bytes (> 0) */
    int32_t tier;         /* enum tio_tier: TIO_TIER_SSD or TIO_TIER_HOST */
    int32_t priority;     /* enum tio_priority */
    uint64_t tag;         /* returned in the completion */
    void *fence;          /* a cudaEvent_t to wait for before any byte moves, or NULL */
};

TIO_API TIO_MUST_CHECK int tio_engine_write(struct tio_engine *e,
                                            const struct tio_engine_write_request *req);

/*
 * tio_engine_read: copy tensor req->tensor_id back into req->dst (req->bytes must equal the
 * stored size). Asynchronous like tio_engine_write, with a `fence` as there (NULL: none); the
 * tensor stays stored (drop it explicitly).
 *
 * `done` (a cudaEvent_t, or NULL): the engine records it on its host-to-device copy stream once
 * every copy of the read to the device has been queued there, just before the completion. The
 * completion then means "queued" (from either tier), and the bytes are in place once `done` has
 * completed, so the caller makes its stream wait on it (cudaStreamWaitEvent) before any use of
 * the memory, freeing included. Without `done` the completion means the bytes are in place.
 *
 * Errors at once: TIO_ENOTFOUND (no such tensor), TIO_EINVAL (size mismatch; a `done` without
 * device memory or without a CUDA device usable when the engine was made), -EAGAIN,
 * TIO_ESTATE (a write of this tensor is in flight), TIO_EUNAVAIL (as tio_engine_write). In the
 * completion: TIO_EIO / TIO_ECORRUPT after retries, the detail in tio_engine_last_error.
 */
/* A read request (docs/style.md, "Versioned structs": set struct_size = sizeof it). */
struct tio_engine_read_request {
    uint32_t struct_size; /* sizeof(struct tio_engine_read_request) */
    int32_t mem;          /* enum tio_mem: where `dst` lives */
    uint64_t tensor_id;   /* the id the tensor was written under */
    void *dst;            /* `bytes` bytes to fill; valid until the completion */
    uint64_t bytes;       /* must equal the stored size */
    int32_t priority;     /* enum tio_priority */
    uint64_t tag;         /* returned in the completion */
    void *fence;          /* a cudaEvent_t to wait for before any byte moves, or NULL */
    void *done;           /* a cudaEvent_t the engine records when the copies are queued, or NULL */
};

TIO_API TIO_MUST_CHECK int tio_engine_read(struct tio_engine *e,
                                           const struct tio_engine_read_request *req);

/* tio_engine_drop: forget tensor `tensor_id` and free its extents. 0, TIO_ENOTFOUND, or
 * TIO_ESTATE if a request on it is in flight. */
TIO_API TIO_MUST_CHECK int tio_engine_drop(struct tio_engine *e, uint64_t tensor_id);

/* tio_engine_tensor_info: where a stored tensor lives. 0 or TIO_ENOTFOUND. */
TIO_API TIO_MUST_CHECK int
tio_engine_tensor_info(struct tio_engine *e, uint64_t tensor_id, uint64_t *bytes, int32_t *tier);

/* One finished request: the caller's tag and bytes moved (== the request size) or < 0. */
struct tio_completion {
    uint64_t tag;
    int64_t res;
};

/* tio_engine_poll: move up to `max` finished requests into out[] without blocking. Returns
 * the number moved (0..max). */
TIO_API TIO_MUST_CHECK int
tio_engine_poll(struct tio_engine *e, struct tio_completion *out, size_t max);

/*
 * tio_engine_wait: wait until at least `min` completions are available (or timeout_ns passed;
 * < 0: no limit), then move up to `max` into out[]. Returns the number moved (may be < min on
 * timeout), or TIO_EINVAL if min > max or min exceeds what is outstanding (would never wake).
 */
TIO_API TIO_MUST_CHECK int tio_engine_wait(
    struct tio_engine *e, struct tio_completion *out, size_t min, size_t max, int64_t timeout_ns);

/*
 * tio_engine_cancel: cancel every outstanding request with this tag. Chunks not yet issued
 * are dropped; chunks in flight finish first. The request still completes, with
 * res == TIO_ECANCELED (a canceled write leaves the previous copy, if any; a canceled read
 * leaves the buffer undefined). Returns the number of requests marked, or TIO_ENOTFOUND.
 */
TIO_API TIO_MUST_CHECK int tio_engine_cancel(struct tio_engine *e, uint64_t tag);

struct tio_engine_stats {
    char backend[16];             /* selected backend name */
    uint64_t requests_submitted;  /* accepted by write/read */
    uint64_t requests_completed;  /* completions produced (any result) */
    uint64_t requests_failed;     /* completions with res < 0, cancellations excluded */
    uint64_t requests_canceled;   /* completions with TIO_ECANCELED */
    uint64_t bytes_written;       /* payload bytes of successful writes (both tiers) */
    uint64_t bytes_read;          /* payload bytes of successful reads (both tiers) */
    uint64_t ops_issued;          /* transfers handed to the backend */
    uint64_t short_transfers;     /* transfers that moved fewer bytes than asked, resumed */
    uint64_t retries;             /* transfers reissued after an error or a CRC mismatch */
    uint64_t crc_errors;          /* CRC32C mismatches seen on read (verify on) */
    uint64_t staged_bytes;        /* bytes that went through aligned staging buffers */
    uint64_t ssd_capacity_bytes;  /* swap file sizes, total */
    uint64_t ssd_used_bytes;      /* allocated extents, total (chunk padding included) */
    uint64_t host_capacity_bytes; /* host tier size */
    uint64_t host_used_bytes;     /* allocated in the host tier */
    uint64_t tensors;             /* tensors stored */
    uint32_t outstanding;         /* requests submitted but not reaped */
    uint32_t inflight_ops;        /* transfers in the backend now */
    double busy_s;                /* seconds with at least one transfer in flight */
    uint32_t ssd_dirs;            /* SSD directories (swap files); 0: host tier only */
};

/* tio_engine_stats: a consistent snapshot of the counters. 0. */
TIO_API int tio_engine_stats(struct tio_engine *e, struct tio_engine_stats *out);

/* tio_engine_last_error: detail of the most recent failed completion of this engine (which
 * tensor, chunk, directory, offset and why); "" if none. A thread-local copy, valid until
 * the next call of it on this thread. Thread-safe. */
TIO_API const char *tio_engine_last_error(struct tio_engine *e);

/* tio_engine_backend: the selected backend's name (owned by the library). */
TIO_API const char *tio_engine_backend(const struct tio_engine *e);

/* ----------------------------------------------------------------------------------------- */
/* Probing the backends (teraio probe)                                                         */
/* ----------------------------------------------------------------------------------------- */

/* Backend capability bits (also in tio_engine_backend_info.caps). */
enum tio_engine_caps {
    TIO_ENGINE_CAP_ASYNC = 1u << 0,       /* submit returns before the transfer is done */
    TIO_ENGINE_CAP_SYNC = 1u << 1,        /* transfers run synchronously in worker threads */
    TIO_ENGINE_CAP_DEVICE_MEM = 1u << 2,  /* accepts TIO_MEM_DEVICE buffers */
    TIO_ENGINE_CAP_NEEDS_ALIGN = 1u << 3, /* needs 4 KiB aligned buffers/lengths (O_DIRECT) */
    TIO_ENGINE_CAP_REG_BUFS = 1u << 4,    /* can register buffers */
    TIO_ENGINE_CAP_REG_FILES = 1u << 5,   /* can register files */
    TIO_ENGINE_CAP_TEST_ONLY = 1u << 6    /* never picked by "auto" (null, fault) */
};

struct tio_engine_backend_info {
    char name[16];
    int32_t available; /* 1 if it can run here */
    int32_t score;     /* 0: unavailable; higher wins "auto" */
    uint32_t caps;     /* TIO_ENGINE_CAP_* */
    char reason[240];  /* why (un)available, e.g. "io_uring_setup: Operation not permitted" */
};

/*
 * tio_engine_probe_all: probe every backend known to this build (also those compiled out, which
 * report available 0 and why). Writes up to `max` entries to out[] and returns how many
 * backends exist (may exceed max). Thread-safe; probes may load vendor libraries.
 */
TIO_API int tio_engine_probe_all(struct tio_engine_backend_info *out, size_t max);

#ifdef __cplusplus
}
#endif
#endif
