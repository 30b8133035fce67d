/*
 * The staging rings of the cuda and cufile backends (src/io/bounce.c) against the lagging fake
 * cudart (tests/io/fakes), through a wrapper of its table that counts calls and can hold the
 * copy stream behind a gate:
 *
 *   - a transfer of several pieces round-trips bit for bit while every stream lags randomly
 *     (a buffer reused before its copy completed, or a piece written to the file before its
 *     device-to-host copy completed, corrupts bytes), with no whole-stream synchronize;
 *   - a read pipelines: while the first copy is held, the next piece is read from the file and
 *     its copy queued (SSD and PCIe overlap), and no buffer is reused (no further copy queued)
 *     until the held copy's event completed;
 *   - a write pipelines: while the first device-to-host copy is held, the next one is queued,
 *     and nothing reaches the file until the held copy completed;
 *   - a request's fence is waited for on the copy stream: a write stores what the producer
 *     wrote behind it, a read's bytes land only after it;
 *   - a copy that fails stops the transfer at the bytes before it, with every queued copy
 *     completed (freeing the device memory at once touches no queued copy).
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../tio_test.h"
#include "dl/cudart_shim.h"
#include "io/bounce.h"
#include "io/fake_cuda.h"
#include "io/io_util.h"

#define PIECE (64u << 10) /* a small ring buffer: many pieces for few bytes */

static struct fake_cuda fc;
static const struct tio_cudart_api *real;
static struct tio_cudart_api wrap;
static char g_dir[512];

static atomic_int n_copies, n_stream_syncs, fail_copy_at = -1;
static atomic_int gate_armed, gate_open, gate_passed, held_copies;

static void sleep_ms(long ms) {
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* Holds its stream until opened (or 5 s: a ring that never queues past it fails, not hangs). */
static void gate_fn(void *arg) {
    (void)arg;
    for (int i = 0; i < 5000 && !atomic_load(&gate_open); i++) {
        sleep_ms(1);
    }
    atomic_store(&gate_passed, 1);
}

/* The first copy after arming queues the gate before it; copies queued while the gate holds
 * the stream are counted. */
static int w_memcpy_async(void *dst, const void *src, size_t n, int kind, tio_cuda_stream s) {
    if (atomic_exchange(&gate_armed, 0) && fc.launch_host_func(s, gate_fn, NULL) != 0) {
        return 999;
    }
    int k = atomic_fetch_add(&n_copies, 1);
    if (k == atomic_load(&fail_copy_at)) {
        return 2; /* cudaErrorMemoryAllocation */
    }
    if (!atomic_load(&gate_passed)) {
        atomic_fetch_add(&held_copies, 1);
    }
    return real->memcpy_async(dst, src, n, kind, s);
}

static int w_stream_synchronize(tio_cuda_stream s) {
    atomic_fetch_add(&n_stream_syncs, 1);
    return real->stream_synchronize(s);
}

static void reset_counts(void) {
    atomic_store(&n_copies, 0);
    atomic_store(&n_stream_syncs, 0);
    atomic_store(&fail_copy_at, -1);
    atomic_store(&gate_armed, 0);
    atomic_store(&gate_open, 0);
    atomic_store(&gate_passed, 1);
    atomic_store(&held_copies, 0);
}

static void arm_gate(void) {
    atomic_store(&gate_open, 0);
    atomic_store(&gate_passed, 0);
    atomic_store(&held_copies, 0);
    atomic_store(&gate_armed, 1);
}

static int temp_file(void) {
    char path[600];
    (void)snprintf(path, sizeof path, "%s/f", g_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) {
        (void)unlink(path);
    }
    return fd;
}

static struct tio_io_req dev_req(void *dev, uint32_t len, int32_t op) {
    struct tio_io_req r = {
        .buf = dev, .off = 0, .len = len, .op = op, .mem = TIO_MEM_DEVICE, .buf_index = -1
    };
    return r;
}

/* Does the file hold the pattern of seed over [0, n)? */
static int file_has(int fd, uint64_t n, uint64_t seed) {
    unsigned char *got = malloc(n);
    int ok = got && pread(fd, got, n, 0) == (ssize_t)n && io_check(got, n, seed);
    free(got);
    return ok;
}

TIO_TEST(roundtrip_under_lag) {
    struct tio_bounce_set b;
    REQUIRE(tio_bounce_init(&b, &wrap, 2, PIECE) == 0);
    int fd = temp_file();
    uint32_t len = 9 * PIECE + 1000; /* a short last piece, padded to 4 KiB in the file */
    void *d1 = NULL, *d2 = NULL;
    REQUIRE(fd >= 0 && real->malloc_device(&d1, len) == 0 && real->malloc_device(&d2, len) == 0);
    uint64_t bad0 = fc.bad_accesses();
    reset_counts();
    for (uint64_t seed = 1; seed <= 3; seed++) {
        fc.set_lag(2000, seed);
        io_fill(fc.translate(d1, len), len, seed);
        memset(fc.translate(d2, len), 0, len);
        struct tio_io_req w = dev_req(d1, len, TIO_IO_OP_WRITE);
        CHECK_EQ_I(tio_bounce_io(&b, fd, &w, 1), len);
        CHECK(file_has(fd, len, seed));
        struct tio_io_req r = dev_req(d2, len, TIO_IO_OP_READ);
        CHECK_EQ_I(tio_bounce_io(&b, fd, &r, 1), len);
        CHECK(io_check(fc.translate(d2, len), len, seed));
    }
    fc.set_lag(0, 0);
    CHECK_EQ_I(atomic_load(&n_stream_syncs), 0); /* events per buffer, never the stream */
    CHECK_EQ_I(atomic_load(&n_copies), 3 * 2 * 10);
    CHECK_EQ_U(fc.bad_accesses(), bad0);
    CHECK_EQ_I(real->free_device(d1), 0);
    CHECK_EQ_I(real->free_device(d2), 0);
    close(fd);
    tio_bounce_fini(&b);
}

struct job {
    struct tio_bounce_set *b;
    int fd;
    struct tio_io_req r;
    int64_t res;
};

static void *run_job(void *arg) {
    struct job *j = arg;
    j->res = tio_bounce_io(j->b, j->fd, &j->r, 0);
    return NULL;
}

/* Wait (up to 5 s) until `want` copies are held behind the gate, then a moment more for a
 * copy that should not come. */
static void await_held(int want) {
    for (int i = 0; i < 5000 && atomic_load(&held_copies) < want; i++) {
        sleep_ms(1);
    }
    sleep_ms(50);
}

TIO_TEST(read_overlaps_and_waits_for_the_buffer) {
    struct tio_bounce_set b;
    REQUIRE(tio_bounce_init(&b, &wrap, 1, PIECE) == 0);
    int fd = temp_file();
    uint32_t len = 4 * PIECE;
    unsigned char *src = malloc(len);
    void *d = NULL;
    REQUIRE_OR(fd >= 0 && src && real->malloc_device(&d, len) == 0, free(src));
    io_fill(src, len, 7);
    REQUIRE_OR(pwrite(fd, src, len, 0) == (ssize_t)len, free(src));
    free(src);
    reset_counts();
    arm_gate();
    struct job j = { &b, fd, dev_req(d, len, TIO_IO_OP_READ), 0 };
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, run_job, &j) == 0);
    await_held((int)TIO_BOUNCE_RING);
    /* piece 1 was read and its copy queued while copy 0 was held; piece 2 waits for buffer 0 */
    CHECK_EQ_I(atomic_load(&held_copies), TIO_BOUNCE_RING);
    atomic_store(&gate_open, 1);
    pthread_join(th, NULL);
    CHECK_EQ_I(j.res, len);
    CHECK(io_check(fc.translate(d, len), len, 7));
    CHECK_EQ_I(atomic_load(&n_stream_syncs), 0);
    CHECK_EQ_I(real->free_device(d), 0);
    close(fd);
    tio_bounce_fini(&b);
}

TIO_TEST(write_overlaps_and_waits_for_the_copy) {
    struct tio_bounce_set b;
    REQUIRE(tio_bounce_init(&b, &wrap, 1, PIECE) == 0);
    int fd = temp_file();
    uint32_t len = 4 * PIECE;
    unsigned char *old = malloc(len);
    void *d = NULL;
    REQUIRE_OR(fd >= 0 && old && real->malloc_device(&d, len) == 0, free(old));
    io_fill(old, len, 11); /* the file's previous content */
    REQUIRE_OR(pwrite(fd, old, len, 0) == (ssize_t)len, free(old));
    free(old);
    io_fill(fc.translate(d, len), len, 12);
    reset_counts();
    arm_gate();
    struct job j = { &b, fd, dev_req(d, len, TIO_IO_OP_WRITE), 0 };
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, run_job, &j) == 0);
    await_held((int)TIO_BOUNCE_RING);
    /* copies 0 and 1 queued ahead; nothing written while copy 0 is held */
    CHECK_EQ_I(atomic_load(&held_copies), TIO_BOUNCE_RING);
    CHECK(file_has(fd, len, 11));
    atomic_store(&gate_open, 1);
    pthread_join(th, NULL);
    CHECK_EQ_I(j.res, len);
    CHECK(file_has(fd, len, 12));
    CHECK_EQ_I(atomic_load(&n_stream_syncs), 0);
    CHECK_EQ_I(real->free_device(d), 0);
    close(fd);
    tio_bounce_fini(&b);
}

/* A request's fence is waited for on the copy stream: a write stores what the producer wrote
 * after the fence's gate opened, a read's bytes land only after it. */
TIO_TEST(fence_is_waited_for_on_the_stream) {
    struct tio_bounce_set b;
    REQUIRE(tio_bounce_init(&b, &wrap, 1, PIECE) == 0);
    int fd = temp_file();
    uint32_t len = 3 * PIECE;
    void *d = NULL, *ps = NULL, *ev = NULL;
    REQUIRE(fd >= 0 && real->malloc_device(&d, len) == 0 && fc.stream_create(&ps, 1) == 0 &&
            fc.event_create(&ev, 2) == 0);
    reset_counts();
    io_fill(fc.translate(d, len), len, 31); /* before the producer */
    struct io_fill_arg f = { fc.translate(d, len), len, 32 };
    atomic_store(&gate_open, 0);
    CHECK_EQ_I(fc.launch_host_func(ps, gate_fn, NULL), 0);
    CHECK_EQ_I(fc.launch_host_func(ps, io_fill_fn, &f), 0);
    CHECK_EQ_I(fc.event_record(ev, ps), 0);
    struct job j = { &b, fd, dev_req(d, len, TIO_IO_OP_WRITE), 0 };
    j.r.fence = ev;
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, run_job, &j) == 0);
    sleep_ms(30);
    atomic_store(&gate_open, 1);
    pthread_join(th, NULL);
    CHECK_EQ_I(j.res, len);
    CHECK(file_has(fd, len, 32)); /* the producer's bytes */
    /* a read behind a held fence */
    memset(fc.translate(d, len), 0, len);
    atomic_store(&gate_open, 0);
    CHECK_EQ_I(fc.launch_host_func(ps, gate_fn, NULL), 0);
    CHECK_EQ_I(fc.event_record(ev, ps), 0);
    j = (struct job){ &b, fd, dev_req(d, len, TIO_IO_OP_READ), 0 };
    j.r.fence = ev;
    REQUIRE(pthread_create(&th, NULL, run_job, &j) == 0);
    sleep_ms(30);
    unsigned char *zero = calloc(1, len);
    CHECK(zero && memcmp(fc.translate(d, len), zero, len) == 0); /* nothing landed yet */
    free(zero);
    atomic_store(&gate_open, 1);
    pthread_join(th, NULL);
    CHECK_EQ_I(j.res, len);
    CHECK(io_check(fc.translate(d, len), len, 32));
    CHECK_EQ_I(fc.stream_synchronize(ps), 0);
    CHECK_EQ_I(fc.event_destroy(ev), 0);
    CHECK_EQ_I(fc.stream_destroy(ps), 0);
    CHECK_EQ_I(real->free_device(d), 0);
    close(fd);
    tio_bounce_fini(&b);
}

TIO_TEST(failed_copy_stops_at_the_bytes_before_it) {
    struct tio_bounce_set b;
    REQUIRE(tio_bounce_init(&b, &wrap, 1, PIECE) == 0);
    int fd = temp_file();
    uint32_t len = 6 * PIECE;
    void *d = NULL;
    REQUIRE(fd >= 0 && real->malloc_device(&d, len) == 0);
    uint64_t bad0 = fc.bad_accesses();
    fc.set_lag(2000, 5);
    for (int op = TIO_IO_OP_READ; op <= TIO_IO_OP_WRITE; op++) {
        io_fill(fc.translate(d, len), len, 21);
        if (op == TIO_IO_OP_READ) {
            unsigned char *src = malloc(len);
            REQUIRE(src);
            io_fill(src, len, 21);
            REQUIRE(pwrite(fd, src, len, 0) == (ssize_t)len);
            free(src);
            memset(fc.translate(d, len), 0, len);
        } else {
            REQUIRE(ftruncate(fd, 0) == 0);
        }
        reset_counts();
        atomic_store(&fail_copy_at, 3); /* the fourth copy fails */
        struct tio_io_req r = dev_req(d, len, op);
        CHECK_EQ_I(tio_bounce_io(&b, fd, &r, 0), 3 * PIECE);
        CHECK(op == TIO_IO_OP_READ ? io_check(fc.translate(d, 3u * PIECE), 3u * PIECE, 21)
                                   : file_has(fd, (uint64_t)3 * PIECE, 21));
        if (op == TIO_IO_OP_WRITE) { /* the piece of the failed copy was never written */
            CHECK_EQ_I(lseek(fd, 0, SEEK_END), 3 * PIECE);
        }
    }
    fc.set_lag(0, 0);
    CHECK_EQ_I(real->free_device(d), 0); /* no copy is left queued on it */
    CHECK_EQ_U(fc.bad_accesses(), bad0);
    close(fd);
    tio_bounce_fini(&b);
}

TIO_TEST(piece_must_be_aligned) {
    struct tio_bounce_set b;
    CHECK_RC(tio_bounce_init(&b, &wrap, 1, 1000), TIO_EINVAL);
}

int main(void) {
    (void)setenv("TIO_CUDART_LIB", TIO_FAKE_CUDART_LIB, 0);
    if (fake_cuda_load(&fc) < 0)
        return 1;
    real = tio_cudart();
    if (!real) {
        printf("cudart shim did not load the fake: %s\n", tio_cudart_reason());
        return 1;
    }
    wrap = *real;
    wrap.memcpy_async = w_memcpy_async;
    wrap.stream_synchronize = w_stream_synchronize;
    io_mkdtemp(g_dir, sizeof g_dir, "bounce");
    uint64_t streams0 = fc.live_streams(), races0 = fc.copy_races();
    RUN(roundtrip_under_lag);
    RUN(read_overlaps_and_waits_for_the_buffer);
    RUN(write_overlaps_and_waits_for_the_copy);
    RUN(fence_is_waited_for_on_the_stream);
    RUN(failed_copy_stops_at_the_bytes_before_it);
    RUN(piece_must_be_aligned);
    CHECK_EQ_U(fc.live_streams(), streams0); /* every ring destroyed its stream */
    CHECK_EQ_U(fc.copy_races(), races0);
    CHECK(rmdir(g_dir) == 0);
    return tio_test_done();
}
