/*
 * The thread-pool backends (posix, fault, cuda, cufile: pool.c's shared members) through the
 * backend vtable alone: pwrite/pread by offset on a file of the set, a request naming no file
 * of the set or (posix, fault) device memory completes with -EINVAL, a full queue answers
 * -EAGAIN at once, a queued transfer can be cancelled (-ECANCELED), notify makes a blocked
 * reap return, the fault backend's short option shortens the transfer, and an init that fails
 * part-way (a bad option, cudart without a usable device) leaves nothing allocated.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "../tio_test.h"
#include "backend_util.h"
#include "common/common_impl.h"

/* A scratch file, already unlinked; -1 on failure. */
static int scratch_fd(void) {
    char path[] = "/tmp/tio_test_pool_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) {
        (void)unlink(path);
    }
    return fd;
}

static struct tio_io_config config(const int *fd, uint32_t depth, uint32_t threads) {
    struct tio_io_config cfg = {
        .fds = fd, .nfds = 1, .depth = depth, .threads = threads, .max_op = TIO_IO_MAX_OP
    };
    return cfg;
}

/* Reap exactly one result, waiting for it. */
static struct tio_io_cqe reap_one(const struct tio_io_backend_ops *ops, void *st) {
    struct tio_io_cqe q = { 0, 1 };
    CHECK_EQ_I(ops->reap(st, 1, 1, -1, &q), 1);
    return q;
}

static void round_trip(const struct tio_io_backend_ops *ops) {
    printf("  %s\n", ops->name);
    CHECK_OK(tio_io_backend_validate(ops));
    CHECK(ops->cancel != NULL && ops->notify != NULL);
    int fd = scratch_fd();
    CHECK(fd >= 0);
    struct tio_io_config cfg = config(&fd, 4, 2);
    void *st = NULL;
    CHECK_OK(ops->init(&cfg, &st));
    REQUIRE_OR(st != NULL, (void)close(fd));
    unsigned char a[8192], b[8192];
    for (size_t i = 0; i < sizeof a; i++) {
        a[i] = (unsigned char)(i * 13 + 5);
    }
    memset(b, 0, sizeof b);
    struct tio_io_req w = io_req(1, a, 4096, sizeof a, TIO_IO_OP_WRITE);
    CHECK_EQ_I(ops->submit(st, &w, 1), 1);
    struct tio_io_cqe q = reap_one(ops, st);
    CHECK_EQ_U(q.user, 1);
    CHECK_EQ_I(q.res, (int64_t)sizeof a);
    struct tio_io_req r = io_req(2, b, 4096, sizeof b, TIO_IO_OP_READ);
    CHECK_EQ_I(ops->submit(st, &r, 1), 1);
    q = reap_one(ops, st);
    CHECK_EQ_U(q.user, 2);
    CHECK_EQ_I(q.res, (int64_t)sizeof b);
    CHECK(memcmp(a, b, sizeof a) == 0);
    /* past the end of the file: 0 bytes (the core makes that -EIO) */
    r = io_req(3, b, 1u << 20, 4096, TIO_IO_OP_READ);
    CHECK_EQ_I(ops->submit(st, &r, 1), 1);
    CHECK_EQ_I(reap_one(ops, st).res, 0);
    /* files outside the set */
    r.file = 1;
    CHECK_EQ_I(ops->submit(st, &r, 1), 1);
    CHECK_EQ_I(reap_one(ops, st).res, -EINVAL);
    r.file = -1;
    CHECK_EQ_I(ops->submit(st, &r, 1), 1);
    CHECK_EQ_I(reap_one(ops, st).res, -EINVAL);
    ops->fini(st);
    (void)close(fd);
}

TIO_TEST(posix_and_fault_move_bytes_by_offset) {
    round_trip(&tio_io_backend_posix);
    round_trip(&tio_io_backend_fault);
}

TIO_TEST(host_only_backends_refuse_device_memory) {
    const struct tio_io_backend_ops *host_only[] = { &tio_io_backend_posix, &tio_io_backend_fault };
    for (size_t i = 0; i < 2; i++) {
        const struct tio_io_backend_ops *ops = host_only[i];
        CHECK((ops->caps & TIO_ENGINE_CAP_DEVICE_MEM) == 0);
        int fd = scratch_fd();
        struct tio_io_config cfg = config(&fd, 2, 1);
        void *st = NULL;
        CHECK_OK(ops->init(&cfg, &st));
        CHECK(st != NULL);
        if (st) {
            unsigned char buf[4096] = { 0 };
            struct tio_io_req w = io_req(9, buf, 0, sizeof buf, TIO_IO_OP_WRITE);
            w.mem = TIO_MEM_DEVICE;
            CHECK_EQ_I(ops->submit(st, &w, 1), 1);
            struct tio_io_cqe q = reap_one(ops, st);
            CHECK_EQ_U(q.user, 9);
            CHECK_EQ_I(q.res, -EINVAL);
            ops->fini(st);
        }
        (void)close(fd);
    }
}

TIO_TEST(full_queue_cancel_and_notify) {
    const struct tio_io_backend_ops *ops = &tio_io_backend_fault;
    int fd = scratch_fd();
    struct tio_io_config cfg = config(&fd, 3, 1);
    cfg.options = "delay_us=1000000"; /* the one worker sleeps 1 s in each transfer */
    void *st = NULL;
    CHECK_OK(ops->init(&cfg, &st));
    REQUIRE_OR(st != NULL, (void)close(fd));
    unsigned char buf[4][4096];
    memset(buf, 0x3c, sizeof buf);
    struct tio_io_req w[4];
    for (uint32_t i = 0; i < 4; i++) {
        w[i] = io_req(100 + i, buf[i], (uint64_t)i * 4096, 4096, TIO_IO_OP_WRITE);
    }
    CHECK_EQ_I(ops->submit(st, w, 4), 3); /* depth 3 */
    CHECK_EQ_I(ops->submit(st, w + 3, 1), -EAGAIN);
    CHECK_EQ_I(ops->cancel(st, 102), 0);       /* queued behind the sleeping worker */
    CHECK_EQ_I(ops->cancel(st, 999), -ENOENT); /* no such transfer */
    struct tio_io_cqe q[3];
    CHECK_EQ_I(ops->reap(st, 1, 3, -1, q), 1); /* the cancellation is a result at once */
    CHECK_EQ_U(q[0].user, 102);
    CHECK_EQ_I(q[0].res, -ECANCELED);
    ops->notify(st); /* the next reap returns before its min is met (the worker still sleeps) */
    CHECK_EQ_I(ops->reap(st, 2, 3, -1, q), 0);
    int n = 0;
    while (n < 2) {
        int k = ops->reap(st, 1, 3, -1, q + n);
        CHECK(k > 0);
        if (k <= 0) {
            break;
        }
        n += k;
    }
    CHECK_EQ_I(n, 2);
    CHECK_EQ_U(q[0].user + q[1].user, 100 + 101);
    CHECK_EQ_I(q[0].res, 4096);
    CHECK_EQ_I(q[1].res, 4096);
    ops->fini(st);
    (void)close(fd);
}

TIO_TEST(fault_short_option_shortens_the_transfer) {
    const struct tio_io_backend_ops *ops = &tio_io_backend_fault;
    int fd = scratch_fd();
    struct tio_io_config cfg = config(&fd, 2, 1);
    cfg.options = "short=1000";
    void *st = NULL;
    CHECK_OK(ops->init(&cfg, &st));
    CHECK(st != NULL);
    if (st) {
        unsigned char buf[4096];
        memset(buf, 0x5b, sizeof buf);
        struct tio_io_req w = io_req(1, buf, 0, sizeof buf, TIO_IO_OP_WRITE);
        CHECK_EQ_I(ops->submit(st, &w, 1), 1);
        CHECK_EQ_I(reap_one(ops, st).res, 1000);
        CHECK_EQ_I(lseek(fd, 0, SEEK_END), 1000);
        ops->fini(st);
    }
    (void)close(fd);
}

TIO_TEST(failed_init_leaves_nothing_allocated) {
    int fd = scratch_fd();
    struct tio_io_config cfg = config(&fd, 2, 1);
    int64_t live = tio_alloc_live_count();
    void *st = NULL;
    cfg.options = "delay_us=abc";
    CHECK_RC(tio_io_backend_fault.init(&cfg, &st), TIO_EINVAL);
    CHECK(strstr(tio_last_error(), "delay_us") != NULL);
    CHECK(st == NULL);
    CHECK_EQ_I(tio_alloc_live_count(), live);
    cfg.options = NULL;
    cfg.threads = 0; /* the pool refuses: setup ran, the state goes again */
    CHECK_RC(tio_io_backend_posix.init(&cfg, &st), TIO_EINVAL);
    CHECK(st == NULL);
    CHECK_EQ_I(tio_alloc_live_count(), live);
    cfg.threads = 1;
    struct tio_cudart_api fake = { 0 };
    fake.get_device_count = fake_err_count;
    fake.get_error_string = fake_err_string;
    tio_cudart_set_api(&fake);
    CHECK_RC(tio_io_backend_cuda.init(&cfg, &st), TIO_EUNAVAIL);
    CHECK(strstr(tio_last_error(), "error 35") != NULL);
    CHECK_RC(tio_io_backend_cufile.init(&cfg, &st), TIO_EUNAVAIL);
    CHECK(st == NULL);
    CHECK_EQ_I(tio_alloc_live_count(), live);
    tio_cudart_set_api(NULL);
    (void)close(fd);
}

int main(void) {
    RUN(posix_and_fault_move_bytes_by_offset);
    RUN(host_only_backends_refuse_device_memory);
    RUN(full_queue_cancel_and_notify);
    RUN(fault_short_option_shortens_the_transfer);
    RUN(failed_init_leaves_nothing_allocated);
    return tio_test_done();
}
