/*
 * The `fault` backend: the posix backend plus injected failures, for tests. Options
 * (tio_engine_params.backend_options, "key=value,..."; ops are counted from 1 per kind):
 *   write_fail=N[,write_fail_count=C]  write ops N..N+C-1 fail with -EIO (C default 1)
 *   read_fail=N[,read_fail_count=C]    read ops N..N+C-1 fail with -EIO
 *   corrupt=N[,corrupt_count=C]        read ops N..N+C-1 succeed but flip the first byte
 *   zero=N[,zero_count=C]              ops (any kind) N..N+C-1 move 0 bytes
 *   short=BYTES                        every op moves at most BYTES (a short transfer)
 *   delay_us=U                         every op sleeps U microseconds first
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "common/common_impl.h"
#include "io/backend.h"
#include "io/pool.h"

struct window {
    uint64_t first, count; /* first == 0: off */
};

struct fault_state {
    struct tio_pool_backend base; /* first: the shared pool members take the state as it */
    struct window write_fail, read_fail, corrupt, zero;
    uint64_t short_bytes, delay_us;
    _Atomic uint64_t nwrites, nreads, nops;
};

static int in_window(const struct window *w, uint64_t n) {
    return w->first && n >= w->first && n - w->first < w->count;
}

static int64_t fault_do(void *ctx, const struct tio_io_req *r, uint32_t worker) {
    struct fault_state *st = ctx;
    (void)worker;
    int fd = tio_pool_backend_fd(&st->base, r, 0);
    if (fd < 0) {
        return fd;
    }
    if (st->delay_us) {
        struct timespec ts = { (time_t)(st->delay_us / 1000000),
                               (long)(st->delay_us % 1000000) * 1000 };
        nanosleep(&ts, NULL);
    }
    uint64_t nop = atomic_fetch_add(&st->nops, 1) + 1;
    uint64_t nkind = r->op == TIO_IO_OP_WRITE ? atomic_fetch_add(&st->nwrites, 1) + 1
                                              : atomic_fetch_add(&st->nreads, 1) + 1;
    if (r->op == TIO_IO_OP_WRITE && in_window(&st->write_fail, nkind)) {
        return -EIO;
    }
    if (r->op == TIO_IO_OP_READ && in_window(&st->read_fail, nkind)) {
        return -EIO;
    }
    if (in_window(&st->zero, nop)) {
        return 0;
    }
    size_t len = r->len;
    if (st->short_bytes && st->short_bytes < len) {
        len = (size_t)st->short_bytes;
    }
    int64_t n = tio_file_io(fd, r->op, r->buf, len, r->off);
    if (n > 0 && r->op == TIO_IO_OP_READ && in_window(&st->corrupt, nkind)) {
        ((unsigned char *)r->buf)[0] ^= 0x5a;
    }
    return n;
}

static int fault_probe(char *reason, size_t len) {
    (void)snprintf(reason, len,
                   "posix with injected errors, short transfers and corruption (tests)");
    return 1;
}

static int get_window(const char *opt, const char *key, const char *count_key, struct window *w) {
    int rc = tio_io_option_u64(opt, key, &w->first);
    if (rc < 0) {
        return rc;
    }
    w->count = 1;
    rc = tio_io_option_u64(opt, count_key, &w->count);
    return rc < 0 ? rc : 0;
}

/* The failures to inject, from cfg->options. */
static int fault_setup(void *state, const struct tio_io_config *cfg) {
    struct fault_state *st = state;
    const char *o = cfg->options;
    int rc = get_window(o, "write_fail", "write_fail_count", &st->write_fail);
    if (rc >= 0) {
        rc = get_window(o, "read_fail", "read_fail_count", &st->read_fail);
    }
    if (rc >= 0) {
        rc = get_window(o, "corrupt", "corrupt_count", &st->corrupt);
    }
    if (rc >= 0) {
        rc = get_window(o, "zero", "zero_count", &st->zero);
    }
    if (rc >= 0) {
        rc = tio_io_option_u64(o, "short", &st->short_bytes);
    }
    if (rc >= 0) {
        rc = tio_io_option_u64(o, "delay_us", &st->delay_us);
    }
    return rc;
}

static int fault_init(const struct tio_io_config *cfg, void **state) {
    return tio_pool_backend_init(sizeof(struct fault_state), cfg, fault_setup, fault_do, state);
}

const struct tio_io_backend_ops tio_io_backend_fault = {
    .api_version = TIO_IO_BACKEND_API,
    .name = "fault",
    .caps = TIO_ENGINE_CAP_ASYNC | TIO_ENGINE_CAP_SYNC | TIO_ENGINE_CAP_TEST_ONLY,
    .probe = fault_probe,
    .init = fault_init,
    TIO_POOL_BACKEND_OPS,
};
