/*
 * The host tier's backend (backend_host.c) through the backend vtable alone: a valid member
 * table kept out of the registry (never an SSD backend), copies into and out of its pool by
 * offset with results reaped in submission order, -EAGAIN when its result queue is full, an
 * out-of-range offset refused, and device memory refused (and reported by mem_ok) when no
 * CUDA device was usable at init. The engine's use of it is covered by test_io_conformance
 * (host tier, device memory to the host tier) and the runtime tests.
 */
#include <errno.h>

#include "../tio_test.h"
#include "backend_util.h"
#include "common/common_impl.h"

static const struct tio_io_backend_ops *const host = &tio_io_backend_host;

TIO_TEST(vtable_and_not_in_registry) {
    CHECK_OK(tio_io_backend_validate(host));
    CHECK(host->mem_ok != NULL);
    CHECK(tio_io_backend_find("host") == NULL); /* "auto" and by-name never pick it for SSD */
    char why[128];
    CHECK(host->probe(why, sizeof why) > 0);
    struct tio_io_config cfg = { .depth = 1, .threads = 1, .max_op = TIO_IO_MAX_OP };
    void *st = NULL;
    CHECK_RC(host->init(&cfg, &st), TIO_EINVAL); /* no pool size */
    CHECK(st == NULL);
}

TIO_TEST(copies_by_offset) {
    struct tio_io_config cfg = {
        .depth = 2, .threads = 1, .max_op = TIO_IO_MAX_OP, .pool_bytes = 1u << 20
    };
    void *st = NULL;
    CHECK_OK(host->init(&cfg, &st));
    REQUIRE(st != NULL);
    CHECK_EQ_I(host->mem_ok(st, TIO_MEM_HOST), 1);
    unsigned char a[10000], b[10000], c[100];
    for (size_t i = 0; i < sizeof a; i++)
        a[i] = (unsigned char)(i * 7 + 3);
    memset(b, 0, sizeof b);
    memset(c, 0xAA, sizeof c);
    struct tio_io_req w[3] = { io_req(11, a, 4096, sizeof a, TIO_IO_OP_WRITE),
                               io_req(12, c, 4096 + sizeof a, sizeof c, TIO_IO_OP_WRITE),
                               io_req(13, c, 0, sizeof c, TIO_IO_OP_WRITE) };
    CHECK_EQ_I(host->submit(st, w, 3), 2); /* depth 2: the third does not fit */
    CHECK_EQ_I(host->submit(st, w + 2, 1), -EAGAIN);
    struct tio_io_cqe q[4];
    CHECK_EQ_I(host->reap(st, 1, 1, 0, q), 1);
    CHECK_EQ_U(q[0].user, 11);
    CHECK_EQ_I(q[0].res, (int64_t)sizeof a);
    CHECK_EQ_I(host->reap(st, 0, 4, 0, q), 1);
    CHECK_EQ_U(q[0].user, 12);
    CHECK_EQ_I(q[0].res, (int64_t)sizeof c);
    CHECK_EQ_I(host->reap(st, 0, 4, 0, q), 0);
    /* read back across both writes: the bytes come from the pool, not the caller's buffers */
    struct tio_io_req r = io_req(14, b, 4096 + 5000, 5100, TIO_IO_OP_READ);
    memset(a + 5000, 0, 5000);
    CHECK_EQ_I(host->submit(st, &r, 1), 1);
    CHECK_EQ_I(host->reap(st, 1, 4, 0, q), 1);
    CHECK_EQ_U(q[0].user, 14);
    CHECK_EQ_I(q[0].res, 5100);
    int same = 1;
    for (size_t i = 0; i < 5000; i++)
        same &= b[i] == (unsigned char)((i + 5000) * 7 + 3);
    for (size_t i = 5000; i < 5100; i++)
        same &= b[i] == 0xAA;
    CHECK(same);
    /* an offset past the pool is refused, not copied */
    struct tio_io_req bad = io_req(15, b, (1u << 20) - 100, 200, TIO_IO_OP_READ);
    CHECK_EQ_I(host->submit(st, &bad, 1), 1);
    CHECK_EQ_I(host->reap(st, 1, 4, 0, q), 1);
    CHECK_EQ_I(q[0].res, -EINVAL);
    host->fini(st);
}

TIO_TEST(device_memory_needs_a_usable_device) {
    struct tio_cudart_api fake = { 0 };
    fake.get_device_count = fake_err_count;
    fake.get_error_string = fake_err_string;
    tio_cudart_set_api(&fake);
    struct tio_io_config cfg = {
        .depth = 1, .threads = 1, .max_op = TIO_IO_MAX_OP, .pool_bytes = 65536
    };
    void *st = NULL;
    CHECK_OK(host->init(&cfg, &st));
    CHECK(st != NULL);
    if (st) {
        CHECK_EQ_I(host->mem_ok(st, TIO_MEM_DEVICE), 0);
        CHECK_EQ_I(host->mem_ok(st, TIO_MEM_HOST), 1);
        unsigned char buf[64];
        struct tio_io_req r = io_req(1, buf, 0, sizeof buf, TIO_IO_OP_WRITE);
        r.mem = TIO_MEM_DEVICE;
        struct tio_io_cqe q;
        CHECK_EQ_I(host->submit(st, &r, 1), 1);
        CHECK_EQ_I(host->reap(st, 1, 1, 0, &q), 1);
        CHECK_EQ_I(q.res, TIO_EUNAVAIL);
        host->fini(st);
    }
    tio_cudart_set_api(NULL);
}

int main(void) {
    RUN(vtable_and_not_in_registry);
    RUN(copies_by_offset);
    RUN(device_memory_needs_a_usable_device);
    return tio_test_done();
}
