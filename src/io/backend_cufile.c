/*
 * The `cufile` backend: GPUDirect Storage. Device memory goes to cuFileRead/cuFileWrite on
 * files that cuFileHandleRegister accepted; a file it refuses falls back to POSIX with
 * bounce buffers (policy TIO_GDS=auto; TIO_GDS=on makes a refusal an error, TIO_GDS=off
 * makes the backend unavailable). Host memory always uses pread/pwrite. cuFile calls are
 * synchronous, so they run in a thread pool.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "dl/cudart_shim.h"
#include "dl/cufile_shim.h"
#include "io/backend.h"
#include "io/bounce.h"
#include "io/pool.h"

struct cufile_state {
    struct tio_pool_backend base; /* first: the shared pool members take the state as it */
    struct tio_bounce_set bounce;
    const struct tio_cufile_api *cf;
    int direct;                 /* files opened with O_DIRECT */
    tio_cufile_handle *handles; /* per file; NULL: POSIX fallback */
    int driver_open;
};

/* "auto", "on" or "off" from TIO_GDS (read once per init). */
static int gds_policy(void) {
    const char *v = getenv("TIO_GDS"); /* NOLINT(concurrency-mt-unsafe): read at init */
    if (v && !strcmp(v, "off")) {
        return 0;
    }
    if (v && !strcmp(v, "on")) {
        return 2;
    }
    return 1;
}

static int64_t cufile_do(void *ctx, const struct tio_io_req *r, uint32_t worker) {
    struct cufile_state *st = ctx;
    int fd = tio_pool_backend_fd(&st->base, r, 1);
    if (fd < 0) {
        return fd;
    }
    if (r->mem != TIO_MEM_DEVICE) {
        return tio_posix_io(fd, r);
    }
    tio_cufile_handle h = st->handles[r->file];
    /* cuFile on an O_DIRECT file wants 4 KiB aligned offsets, sizes and buffers: the
     * (small) unaligned tail of a tensor goes through a bounce buffer instead */
    int unaligned = ((uintptr_t)r->buf | r->off | r->len) % TIO_IO_ALIGN != 0;
    if (!h || (st->direct && unaligned)) {
        return tio_bounce_io(&st->bounce, fd, r, worker);
    }
    ssize_t n;
    do {
        errno = 0;
        n = r->op == TIO_IO_OP_WRITE ? st->cf->write(h, r->buf, r->len, (off_t)r->off, 0)
                                     : st->cf->read(h, r->buf, r->len, (off_t)r->off, 0);
    } while (n == -1 && errno == EINTR);
    if (n >= 0) {
        return (int64_t)n;
    }
    /* -1 with errno for OS errors; other negative values are -CUfileOpError */
    return n == -1 ? (errno ? -errno : -EIO) : TIO_ECUFILE;
}

static int cufile_probe(char *reason, size_t len) {
    if (!gds_policy()) {
        (void)snprintf(reason, len, "disabled by TIO_GDS=off");
        return 0;
    }
    char why[200];
    if (!tio_cudart_usable(why, sizeof why)) {
        (void)snprintf(reason, len, "%s", why);
        return 0;
    }
    const struct tio_cufile_api *cf = tio_cufile();
    if (!cf) {
        (void)snprintf(reason, len, "%s", tio_cufile_reason());
        return 0;
    }
    struct tio_cufile_error e = cf->driver_open();
    if (e.err != TIO_CU_FILE_SUCCESS) {
        (void)snprintf(reason, len, "cuFileDriverOpen: cufile error %d, CUDA error %d", e.err,
                       e.cu_err);
        return 0;
    }
    (void)cf->driver_close();
    (void)snprintf(reason, len, "GPUDirect Storage driver opened (%s)", tio_cufile_reason());
    return 110;
}

/* Undoes cufile_setup, also one that failed half-way (the workers have stopped). */
static void cufile_teardown(void *state) {
    struct cufile_state *st = state;
    tio_bounce_fini(&st->bounce);
    for (uint32_t i = 0; st->handles && i < st->base.nfds; i++) {
        if (st->handles[i]) {
            st->cf->handle_deregister(st->handles[i]);
        }
    }
    if (st->driver_open) {
        (void)st->cf->driver_close();
    }
    tio_free(st->handles);
}

static int cufile_setup(void *state, const struct tio_io_config *cfg) {
    struct cufile_state *st = state;
    char why[256];
    if (cufile_probe(why, sizeof why) <= 0) {
        return tio_set_error(TIO_EUNAVAIL, "cufile backend: %s", why);
    }
    int policy = gds_policy();
    st->base.teardown = cufile_teardown;
    st->cf = tio_cufile();
    st->direct = cfg->direct;
    st->handles = tio_calloc(cfg->nfds ? cfg->nfds : 1, sizeof(*st->handles));
    int rc = st->handles ? 0 : TIO_ENOMEM;
    if (rc >= 0) {
        struct tio_cufile_error e = st->cf->driver_open();
        if (e.err != TIO_CU_FILE_SUCCESS) {
            rc = tio_set_error(TIO_ECUFILE, "cuFileDriverOpen: cufile error %d", e.err);
        } else {
            st->driver_open = 1;
        }
    }
    for (uint32_t i = 0; rc >= 0 && i < cfg->nfds; i++) {
        struct tio_cufile_descr d;
        memset(&d, 0, sizeof d);
        d.type = TIO_CU_FILE_HANDLE_TYPE_OPAQUE_FD;
        d.handle.fd = cfg->fds[i];
        d.fs_ops = NULL;
        struct tio_cufile_error e = st->cf->handle_register(&st->handles[i], &d);
        if (e.err != TIO_CU_FILE_SUCCESS) {
            st->handles[i] = NULL;
            if (policy == 2) {
                rc = tio_set_error(TIO_ECUFILE,
                                   "cuFileHandleRegister(file %u): cufile error %d (TIO_GDS=on)", i,
                                   e.err);
            } else {
                TIO_LOG_INFO("cufile: file %u not registered (cufile error %d): POSIX fallback", i,
                             e.err);
            }
        }
    }
    if (rc >= 0) {
        rc = tio_bounce_init(&st->bounce, tio_cudart(), cfg->threads, 0);
    }
    return rc;
}

static int cufile_init(const struct tio_io_config *cfg, void **state) {
    return tio_pool_backend_init(sizeof(struct cufile_state), cfg, cufile_setup, cufile_do, state);
}

const struct tio_io_backend_ops tio_io_backend_cufile = {
    .api_version = TIO_IO_BACKEND_API,
    .name = "cufile",
    .caps = TIO_ENGINE_CAP_ASYNC | TIO_ENGINE_CAP_SYNC | TIO_ENGINE_CAP_DEVICE_MEM,
    .probe = cufile_probe,
    .init = cufile_init,
    TIO_POOL_BACKEND_OPS,
};
