/* The `cuda` backend: device memory through pinned bounce buffers (cudart via dlopen), host
 * memory with pread/pwrite, both in a thread pool. */
#include <stdio.h>

#include "common/common_impl.h"
#include "dl/cudart_shim.h"
#include "io/backend.h"
#include "io/bounce.h"
#include "io/pool.h"

struct cuda_state {
    struct tio_pool_backend base; /* first: the shared pool members take the state as it */
    struct tio_bounce_set bounce;
};

static int64_t cuda_do(void *ctx, const struct tio_io_req *r, uint32_t worker) {
    struct cuda_state *st = ctx;
    int fd = tio_pool_backend_fd(&st->base, r, 1);
    if (fd < 0) {
        return fd;
    }
    return r->mem == TIO_MEM_DEVICE ? tio_bounce_io(&st->bounce, fd, r, worker)
                                    : tio_posix_io(fd, r);
}

static int cuda_probe(char *reason, size_t len) {
    return tio_cudart_usable(reason, len) ? 60 : 0;
}

static void cuda_teardown(void *state) {
    tio_bounce_fini(&((struct cuda_state *)state)->bounce);
}

static int cuda_setup(void *state, const struct tio_io_config *cfg) {
    struct cuda_state *st = state;
    char why[256];
    if (!tio_cudart_usable(why, sizeof why)) {
        return tio_set_error(TIO_EUNAVAIL, "cuda backend: %s", why);
    }
    st->base.teardown = cuda_teardown;
    return tio_bounce_init(&st->bounce, tio_cudart(), cfg->threads, 0);
}

static int cuda_init(const struct tio_io_config *cfg, void **state) {
    return tio_pool_backend_init(sizeof(struct cuda_state), cfg, cuda_setup, cuda_do, state);
}

const struct tio_io_backend_ops tio_io_backend_cuda = {
    .api_version = TIO_IO_BACKEND_API,
    .name = "cuda",
    .caps = TIO_ENGINE_CAP_ASYNC | TIO_ENGINE_CAP_SYNC | TIO_ENGINE_CAP_DEVICE_MEM,
    .probe = cuda_probe,
    .init = cuda_init,
    TIO_POOL_BACKEND_OPS,
};
