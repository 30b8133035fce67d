/* The `posix` backend: pread/pwrite in a thread pool. Always built; the reference every other
 * backend is tested against. */
#include <stdio.h>

#include "common/common_impl.h"
#include "io/backend.h"
#include "io/pool.h"

/* One pread/pwrite; a short count goes back to the core, which resumes it. */
static int64_t posix_do(void *ctx, const struct tio_io_req *r, uint32_t worker) {
    (void)worker;
    int fd = tio_pool_backend_fd(ctx, r, 0);
    return fd < 0 ? fd : tio_posix_io(fd, r);
}

static int posix_probe(char *reason, size_t len) {
    (void)snprintf(reason, len, "pread/pwrite in a thread pool (always available)");
    return 50;
}

static int posix_init(const struct tio_io_config *cfg, void **state) {
    return tio_pool_backend_init(sizeof(struct tio_pool_backend), cfg, NULL, posix_do, state);
}

const struct tio_io_backend_ops tio_io_backend_posix = {
    .api_version = TIO_IO_BACKEND_API,
    .name = "posix",
    .caps = TIO_ENGINE_CAP_ASYNC | TIO_ENGINE_CAP_SYNC,
    .probe = posix_probe,
    .init = posix_init,
    TIO_POOL_BACKEND_OPS,
};
