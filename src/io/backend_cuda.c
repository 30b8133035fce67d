/* The `cuda` backend: device memory through pinned bounce buffers (cudart via dlopen), host
 * memory with pread/pwrite, both in a thread pool. */
#include <errno.h>
#include <stdio.h>

#include "common/common_impl.h"
#include "dl/cudart_shim.h"
#include "io/backend.h"
#include "io/bounce.h"
#include "io/pool.h"

struct cuda_state {
    struct tio_pool *pool;
    struct tio_bounce_set bounce;
    const int *fds;
    uint32_t nfds;
};

static int64_t cuda_do(void *ctx, const struct tio_io_req *r, uint32_t worker) {
    struct cuda_state *st = ctx;
    if (r->file < 0 || (uint32_t)r->file >= st->nfds) {
        return -EINVAL;
    }
    int fd = st->fds[r->file];
    return r->mem == TIO_MEM_DEVICE ? tio_bounce_io(&st->bounce, fd, r, worker)
                                    : tio_posix_io(fd, r);
}

static int cuda_probe(char *reason, size_t len) {
    return tio_cudart_usable(reason, len) ? 60 : 0;
}

static int cuda_init(const struct tio_io_config *cfg, void **state) {
    char why[256];
    if (!tio_cudart_usable(why, sizeof why)) {
        return tio_set_error(TIO_EUNAVAIL, "cuda backend: %s", why);
    }
    struct cuda_state *st = tio_calloc(1, sizeof(*st));
    if (!st) {
        return TIO_ENOMEM;
    }
    st->fds = cfg->fds;
    st->nfds = cfg->nfds;
    int rc = tio_bounce_init(&st->bounce, tio_cudart(), cfg->threads);
    if (rc >= 0) {
        rc = tio_pool_new(cfg->threads, cfg->depth, cuda_do, st, &st->pool);
    }
    if (rc < 0) {
        tio_bounce_fini(&st->bounce);
        tio_free(st);
        return rc;
    }
    *state = st;
    return 0;
}

static void cuda_fini(void *state) {
    struct cuda_state *st = state;
    tio_pool_free(st->pool);
    tio_bounce_fini(&st->bounce);
    tio_free(st);
}

static int cuda_submit(void *state, const struct tio_io_req *reqs, uint32_t n) {
    return tio_pool_submit(((struct cuda_state *)state)->pool, reqs, n);
}

static int
cuda_reap(void *state, uint32_t min, uint32_t max, int64_t timeout_ns, struct tio_io_cqe *out) {
    return tio_pool_reap(((struct cuda_state *)state)->pool, min, max, timeout_ns, out);
}

static int cuda_cancel(void *state, uint64_t user) {
    return tio_pool_cancel(((struct cuda_state *)state)->pool, user);
}

static void cuda_notify(void *state) {
    tio_pool_kick(((struct cuda_state *)state)->pool);
}

const struct tio_io_backend_ops tio_io_backend_cuda = {
    .api_version = TIO_IO_BACKEND_API,
    .name = "cuda",
    .caps = TIO_IO_CAP_ASYNC | TIO_IO_CAP_SYNC | TIO_IO_CAP_DEVICE_MEM,
    .probe = cuda_probe,
    .init = cuda_init,
    .fini = cuda_fini,
    .submit = cuda_submit,
    .reap = cuda_reap,
    .cancel = cuda_cancel,
    .notify = cuda_notify,
};
