/*
 * The `cufile` backend: GPUDirect Storage. Device memory goes to cuFileRead/cuFileWrite on
 * files that cuFileHandleRegister accepted; a file it refuses falls back to POSIX with
 * bounce buffers (policy TIO_GDS=auto; TIO_GDS=on makes a refusal an error, TIO_GDS=off
 * makes the backend unavailable). Host memory always uses pread/pwrite. The calls run in a
 * thread pool: where libcufile has the stream API, a worker queues cuFileReadAsync/
 * cuFileWriteAsync on its own stream (registered with cuFileStreamRegister), behind
 * cudaStreamWaitEvent on the request's fence, and waits for that stream; where the API is
 * missing, a stream cannot be registered or a call fails, it waits for the fence with
 * cudaEventSynchronize and calls cuFileRead/cuFileWrite (KvikIO's fallback).
 */
#include <errno.h>
#include <stdatomic.h>
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
    unsigned char *async_ok; /* per worker: its stream is registered (NULL: no stream API) */
    _Atomic int async_off;   /* a stream call failed: synchronous calls from then on */
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

/* A cuFile result: bytes, or -1 with errno for OS errors; other negative values are
 * -CUfileOpError. */
static int64_t cufile_res(ssize_t n, int err) {
    return n >= 0 ? (int64_t)n : n == -1 ? (err ? -err : -EIO) : TIO_ECUFILE;
}

/* r through the stream API on the worker's stream, waited for (its parameters live in this
 * frame). 1 with *res set, or 0 where the API is absent or refused the request (the caller
 * then uses the synchronous call). */
static int async_io(struct cufile_state *st,
                    tio_cufile_handle h,
                    const struct tio_io_req *r,
                    uint32_t worker,
                    int64_t *res) {
    uint32_t w = worker % st->bounce.n;
    if (!st->async_ok || !st->async_ok[w] || atomic_load(&st->async_off)) {
        return 0;
    }
    tio_bounce_bind(&st->bounce);
    tio_cuda_stream s = st->bounce.streams[w];
    if (r->fence && st->bounce.cu->stream_wait_event(s, r->fence, 0) != 0) {
        *res = tio_set_error(TIO_ECUDA, "cufile: cudaStreamWaitEvent on the request's fence");
        return 1;
    }
    size_t size = r->len;
    off_t off = (off_t)r->off, buf_off = 0;
    ssize_t bytes = -1;
    int write = r->op == TIO_IO_OP_WRITE;
    struct tio_cufile_error e =
        write ? st->cf->write_async(h, r->buf, &size, &off, &buf_off, &bytes, s)
              : st->cf->read_async(h, r->buf, &size, &off, &buf_off, &bytes, s);
    if (e.err != TIO_CU_FILE_SUCCESS) {
        if (!atomic_exchange(&st->async_off, 1)) {
            TIO_LOG_INFO("cufile: cuFile%sAsync: cufile error %d, CUDA error %d: synchronous "
                         "calls from now on",
                         write ? "Write" : "Read", e.err, e.cu_err);
        }
        return 0;
    }
    int err = st->bounce.cu->stream_synchronize(s);
    if (err != 0) {
        /* a stream in error keeps cuFile resources until it is deregistered */
        (void)st->cf->stream_deregister(s);
        st->async_ok[w] = 0;
        *res = tio_set_error(TIO_ECUDA, "cufile: waiting for cuFile%sAsync: CUDA error %d",
                             write ? "Write" : "Read", err);
        return 1;
    }
    *res = cufile_res(bytes, EIO);
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
    int64_t res;
    if (async_io(st, h, r, worker, &res)) {
        return res;
    }
    /* a synchronous call moves bytes at once: its fence is waited for here */
    if (r->fence && st->bounce.cu->event_synchronize(r->fence) != 0) {
        return tio_set_error(TIO_ECUDA, "cufile: cudaEventSynchronize on the request's fence");
    }
    ssize_t n;
    do {
        errno = 0;
        n = r->op == TIO_IO_OP_WRITE ? st->cf->write(h, r->buf, r->len, (off_t)r->off, 0)
                                     : st->cf->read(h, r->buf, r->len, (off_t)r->off, 0);
    } while (n == -1 && errno == EINTR);
    return cufile_res(n, errno);
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
    for (uint32_t w = 0; st->async_ok && w < st->bounce.n; w++) {
        if (st->async_ok[w]) { /* before the stream is destroyed */
            (void)st->cf->stream_deregister(st->bounce.streams[w]);
        }
    }
    tio_free(st->async_ok);
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

/* Register every worker's stream for the stream API where libcufile has it; a stream it
 * refuses leaves that worker on the synchronous calls. 0 or TIO_ENOMEM. */
static int register_streams(struct cufile_state *st, int direct) {
    const struct tio_cufile_api *cf = st->cf;
    if (!cf->read_async || !cf->write_async || !cf->stream_register || !cf->stream_deregister) {
        TIO_LOG_INFO("cufile: no stream API in %s: synchronous calls", tio_cufile_reason());
        return 0;
    }
    st->async_ok = tio_calloc(st->bounce.n ? st->bounce.n : 1, 1);
    if (!st->async_ok) {
        return TIO_ENOMEM;
    }
    /* sizes and offsets are final when queued; on O_DIRECT files they are 4 KiB aligned (an
     * unaligned request is bounced instead) */
    unsigned flags = TIO_CU_FILE_STREAM_FIXED_BUF_OFFSET | TIO_CU_FILE_STREAM_FIXED_FILE_OFFSET |
                     TIO_CU_FILE_STREAM_FIXED_FILE_SIZE |
                     (direct ? TIO_CU_FILE_STREAM_PAGE_ALIGNED_INPUTS : 0u);
    for (uint32_t w = 0; w < st->bounce.n; w++) {
        struct tio_cufile_error e = cf->stream_register(st->bounce.streams[w], flags);
        st->async_ok[w] = e.err == TIO_CU_FILE_SUCCESS;
        if (!st->async_ok[w]) {
            TIO_LOG_INFO("cufile: cuFileStreamRegister: cufile error %d: worker %u synchronous",
                         e.err, w);
        }
    }
    return 0;
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
    return rc >= 0 ? register_streams(st, cfg->direct) : rc;
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
