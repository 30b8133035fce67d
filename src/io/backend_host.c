/*
 * The host tier as a backend: a pool of host memory (pinned with cudaHostAlloc when a CUDA
 * device is usable, else page-aligned and locked with mlock where RLIMIT_MEMLOCK allows) that
 * holds tensors instead of a swap file. A request's `off` is a byte offset in the pool.
 *
 * It is synchronous, like fio's psync engine: submit() makes the copy at once and keeps its
 * result, reap() hands the results back. The engine submits one piece and reaps it at once,
 * from the thread that drives, with the engine lock released, so host-tier copies interleave
 * chunk by chunk with SSD work (engine_piece.c). It is not in the registry: the engine makes
 * one beside its SSD backend when host_tier_bytes > 0.
 *
 * Device memory is copied with cudaMemcpyAsync on the engine's copy streams (cfg.h2d_stream
 * for reads, cfg.d2h_stream for writes; non-blocking, so no copy waits for the kernels on the
 * legacy default stream). A copy flagged TIO_IO_REQ_NO_WAIT is not waited for: the engine
 * records an event after the request's last copy and settles on it (engine_gpu.c). A write
 * of host memory into the pool first waits for the pool reads queued on the H2D stream: the
 * extent it fills may be a dropped tensor's that a queued copy still reads.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "common/common_impl.h"
#include "dl/cudart_shim.h"
#include "io/backend.h"

struct host_state {
    unsigned char *pool; /* pool_bytes of host memory */
    uint64_t pool_bytes;
    int pool_cuda;            /* allocated with cudaHostAlloc */
    size_t locked;            /* bytes under mlock (0: none) */
    tio_cuda_stream h2d, d2h; /* the engine's copy streams (not owned) */
    int stream_ok;            /* set at init: device copies are possible */
    /* copies on h2d not waited for (TIO_IO_REQ_NO_WAIT). Atomic: the thread that drives
     * changes from one request to the next (the engine lock orders them too) */
    _Atomic int copy_pending;
    struct tio_io_cqe *done; /* results of submitted copies, not yet reaped */
    uint32_t ndone, cap;
};

static int host_probe(char *reason, size_t len) {
    (void)snprintf(reason, len, "host memory (the engine's host tier)");
    return 1;
}

static void host_fini(void *state) {
    struct host_state *h = state;
    if (!h) {
        return;
    }
    const struct tio_cudart_api *cu = tio_cudart();
    if (h->stream_ok && cu) { /* copies not waited for (NO_WAIT) still use the pool */
        (void)cu->stream_synchronize(h->h2d);
        (void)cu->stream_synchronize(h->d2h);
    }
    if (h->pool && h->pool_cuda) {
        if (cu) {
            (void)cu->free_host(h->pool);
        }
    } else if (h->pool) {
        /* the memory may be malloc's heap: a lock left on it would outlive the free and pin
         * whatever malloc puts there next (and make MADV_DONTNEED on it fail) */
        if (h->locked) {
            (void)munlock(h->pool, h->locked);
        }
        tio_free(h->pool);
    }
    tio_free(h->done);
    tio_free(h);
}

static int host_init(const struct tio_io_config *cfg, void **state) {
    if (!cfg->pool_bytes) {
        return tio_set_error(TIO_EINVAL, "host tier: pool_bytes is 0");
    }
    struct host_state *h = tio_calloc(1, sizeof(*h));
    if (!h) {
        return TIO_ENOMEM;
    }
    h->cap = cfg->depth ? cfg->depth : 1;
    h->done = tio_calloc(h->cap, sizeof(*h->done));
    if (!h->done) {
        host_fini(h);
        return TIO_ENOMEM;
    }
    uint64_t hb = cfg->pool_bytes;
    char why[200];
    const struct tio_cudart_api *cu = tio_cudart_usable(why, sizeof why) ? tio_cudart() : NULL;
    void *mem = NULL;
    h->h2d = cfg->h2d_stream;
    h->d2h = cfg->d2h_stream;
    h->stream_ok = cu && h->h2d && h->d2h;
    /* portable: pinned for every device, whichever is current */
    if (cu && cu->host_alloc(&mem, (size_t)hb, TIO_CUDA_HOST_ALLOC_PORTABLE) == 0 && mem) {
        h->pool_cuda = 1;
    } else {
        mem = tio_io_alloc((size_t)hb);
        if (mem && mlock(mem, (size_t)hb) < 0) {
            TIO_LOG_INFO("engine: host tier of %llu bytes not locked (RLIMIT_MEMLOCK); pageable",
                         (unsigned long long)hb);
        } else if (mem) {
            h->locked = (size_t)hb;
        }
    }
    if (!mem) {
        host_fini(h);
        return tio_set_error(TIO_ENOMEM, "engine: cannot allocate a host tier of %llu bytes",
                             (unsigned long long)hb);
    }
    h->pool = mem;
    h->pool_bytes = hb;
    *state = h;
    return 0;
}

/* One copy between r->buf and the pool. Bytes moved or < 0. */
static int64_t host_copy(struct host_state *h, const struct tio_io_req *r) {
    if (r->off > h->pool_bytes || r->len > h->pool_bytes - r->off) {
        return -EINVAL; /* the engine's extents never do this */
    }
    unsigned char *pool = h->pool + r->off;
    unsigned char *user = r->buf;
    if (r->mem == TIO_MEM_DEVICE) {
        const struct tio_cudart_api *cu = tio_cudart();
        if (!cu || !h->stream_ok) {
            return TIO_EUNAVAIL;
        }
        /* on the engine's non-blocking copy streams: cudaMemcpy would run on the legacy
         * default stream and so wait for every kernel queued there (and hold back later ones) */
        tio_cuda_stream s = r->op == TIO_IO_OP_WRITE ? h->d2h : h->h2d;
        int err = r->op == TIO_IO_OP_WRITE
                      ? cu->memcpy_async(pool, user, r->len, TIO_CUDA_MEMCPY_D2H, s)
                      : cu->memcpy_async(user, pool, r->len, TIO_CUDA_MEMCPY_H2D, s);
        if (!err && r->op == TIO_IO_OP_READ) {
            atomic_store(&h->copy_pending, 1);
        }
        if (!err && !(r->flags & TIO_IO_REQ_NO_WAIT)) {
            err = cu->stream_synchronize(s);
        }
        return err ? TIO_ECUDA : (int64_t)r->len;
    }
    if (r->op == TIO_IO_OP_WRITE && atomic_exchange(&h->copy_pending, 0)) {
        /* a copy still reading the pool may read these bytes (a dropped tensor's extent) */
        const struct tio_cudart_api *cu = tio_cudart();
        if (!cu || cu->stream_synchronize(h->h2d)) {
            return TIO_ECUDA;
        }
    }
    if (r->op == TIO_IO_OP_WRITE) {
        memcpy(pool, user, r->len);
    } else {
        memcpy(user, pool, r->len);
    }
    return (int64_t)r->len;
}

static int host_submit(void *state, const struct tio_io_req *reqs, uint32_t n) {
    struct host_state *h = state;
    uint32_t k = 0;
    while (k < n && h->ndone < h->cap) {
        h->done[h->ndone].user = reqs[k].user;
        h->done[h->ndone].res = host_copy(h, &reqs[k]);
        h->ndone++;
        k++;
    }
    return k ? (int)k : -EAGAIN;
}

static int
host_reap(void *state, uint32_t min, uint32_t max, int64_t timeout_ns, struct tio_io_cqe *out) {
    struct host_state *h = state;
    (void)min; /* every submitted copy is done: waiting cannot bring more */
    (void)timeout_ns;
    uint32_t k = TIO_MIN(max, h->ndone);
    memcpy(out, h->done, k * sizeof(*out));
    memmove(h->done, h->done + k, (h->ndone - k) * sizeof(*h->done));
    h->ndone -= k;
    return (int)k;
}

static int host_mem_ok(void *state, int32_t mem) {
    const struct host_state *h = state;
    return mem == TIO_MEM_HOST || (mem == TIO_MEM_DEVICE && h->stream_ok && tio_cudart());
}

const struct tio_io_backend_ops tio_io_backend_host = {
    .api_version = TIO_IO_BACKEND_API,
    .name = "host",
    .caps = TIO_ENGINE_CAP_SYNC | TIO_ENGINE_CAP_DEVICE_MEM,
    .probe = host_probe,
    .init = host_init,
    .fini = host_fini,
    .submit = host_submit,
    .reap = host_reap,
    .mem_ok = host_mem_ok,
};
