/* The `posix` backend: pread/pwrite in a thread pool. Always built; the reference every other
 * backend is tested against. */
#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#include "common/common_impl.h"
#include "io/backend.h"
#include "io/pool.h"

struct posix_state {
    struct tio_pool *pool;
    const int *fds;
    uint32_t nfds;
};

/* One pread/pwrite; a short count goes back to the core, which resumes it. */
static int64_t posix_do(void *ctx, const struct tio_io_req *r, uint32_t worker) {
    struct posix_state *st = ctx;
    (void)worker;
    if (r->file < 0 || (uint32_t)r->file >= st->nfds || r->mem != TIO_MEM_HOST) {
        return -EINVAL;
    }
    int fd = st->fds[r->file];
    ssize_t n;
    do {
        n = r->op == TIO_IO_OP_WRITE ? pwrite(fd, r->buf, r->len, (off_t)r->off)
                                     : pread(fd, r->buf, r->len, (off_t)r->off);
    } while (n < 0 && errno == EINTR);
    return n < 0 ? -errno : (int64_t)n;
}

static int posix_probe(char *reason, size_t len) {
    (void)snprintf(reason, len, "pread/pwrite in a thread pool (always available)");
    return 50;
}

static int posix_init(const struct tio_io_config *cfg, void **state) {
    struct posix_state *st = tio_calloc(1, sizeof(*st));
    if (!st) {
        return TIO_ENOMEM;
    }
    st->fds = cfg->fds;
    st->nfds = cfg->nfds;
    int rc = tio_pool_new(cfg->threads, cfg->depth, posix_do, st, &st->pool);
    if (rc < 0) {
        tio_free(st);
        return rc;
    }
    *state = st;
    return 0;
}

static void posix_fini(void *state) {
    struct posix_state *st = state;
    tio_pool_free(st->pool);
    tio_free(st);
}

static int posix_submit(void *state, const struct tio_io_req *reqs, uint32_t n) {
    return tio_pool_submit(((struct posix_state *)state)->pool, reqs, n);
}

static int
posix_reap(void *state, uint32_t min, uint32_t max, int64_t timeout_ns, struct tio_io_cqe *out) {
    return tio_pool_reap(((struct posix_state *)state)->pool, min, max, timeout_ns, out);
}

static int posix_cancel(void *state, uint64_t user) {
    return tio_pool_cancel(((struct posix_state *)state)->pool, user);
}

static void posix_notify(void *state) {
    tio_pool_kick(((struct posix_state *)state)->pool);
}

const struct tio_io_backend_ops tio_io_backend_posix = {
    .api_version = TIO_IO_BACKEND_API,
    .name = "posix",
    .caps = TIO_IO_CAP_ASYNC | TIO_IO_CAP_SYNC,
    .probe = posix_probe,
    .init = posix_init,
    .fini = posix_fini,
    .submit = posix_submit,
    .reap = posix_reap,
    .cancel = posix_cancel,
    .notify = posix_notify,
};
