/*
 * The fake CUDA runtime's timed mode (the GPU twin, tests/io/fakes/fake_cudart_timed.c) and its
 * pinned-memory rules: kernels last their durations back to back; one copy engine per PCIe
 * direction runs its copies one after another at its rate while the two directions overlap, and
 * the bytes arrive; a copy from pageable memory makes the caller wait, in timed mode and out of
 * it; a full launch queue blocks the host; cudaMalloc waits for the device. Times are asserted
 * from below (the schedule's end times) and, where two schedules differ by a whole copy, with a
 * margin of half a copy from above.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/fake_cuda.h"
#include "tio_test.h"

#define H2D  1
#define D2H  2
#define MiB  (1024u * 1024u)
#define RATE 10e6 /* bytes/s of both copy engines: 4 MiB take 0.42 s */

static struct fake_cuda fc;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int timed_on(unsigned depth) {
    return fc.set_timing(1, RATE, RATE, RATE / 4, depth);
}

TIO_TEST(kernels_run_back_to_back) {
    void *s = NULL;
    CHECK_EQ_I(timed_on(0), 0);
    CHECK_EQ_I(fc.stream_create(&s, 1), 0);
    double t0 = now_s();
    for (int i = 0; i < 20; i++)
        CHECK_EQ_I(fc.launch_kernel(s, 25000000), 0); /* 25 ms */
    double queued = now_s() - t0;
    CHECK(queued < 0.25); /* launching does not wait for the kernels (0.5 s) */
    CHECK_EQ_I(fc.stream_synchronize(s), 0);
    CHECK(now_s() - t0 >= 0.5);
    uint64_t st[FAKE_N_STATS] = { 0 };
    CHECK_EQ_I(fc.timed_stats(st, FAKE_N_STATS), FAKE_N_STATS);
    CHECK_EQ_U(st[FAKE_KERNELS], 20);
    CHECK_EQ_U(st[FAKE_KERNEL_NS], 500000000);
    CHECK_EQ_I(fc.stream_destroy(s), 0);
}

struct bufs {
    void *dev[2];
    unsigned char *host[2];
};

static int bufs_new(struct bufs *b) {
    for (int i = 0; i < 2; i++) {
        void *h = NULL;
        if (fc.malloc_device(&b->dev[i], 4 * MiB) != 0 || fc.host_alloc(&h, 4 * MiB, 0) != 0)
            return -1;
        b->host[i] = h;
        memset(b->host[i], 0x10 + i, 4 * MiB);
    }
    return 0;
}
static void bufs_free(struct bufs *b) {
    for (int i = 0; i < 2; i++) {
        (void)fc.free_device(b->dev[i]);
        (void)fc.free_host(b->host[i]);
    }
}

TIO_TEST(one_copy_engine_per_direction) {
    struct bufs b = { 0 };
    void *s[2] = { NULL, NULL };
    CHECK_EQ_I(timed_on(0), 0);
    CHECK_EQ_I(bufs_new(&b), 0);
    CHECK_EQ_I(fc.stream_create(&s[0], 1), 0);
    CHECK_EQ_I(fc.stream_create(&s[1], 1), 0);
    double one = 4.0 * MiB / RATE;
    /* two host-to-device copies on two streams share the engine: one after the other */
    double t0 = now_s();
    CHECK_EQ_I(fc.memcpy_async(b.dev[0], b.host[0], 4 * MiB, H2D, s[0]), 0);
    CHECK_EQ_I(fc.memcpy_async(b.dev[1], b.host[1], 4 * MiB, H2D, s[1]), 0);
    CHECK(now_s() - t0 < one); /* pinned: asynchronous (the two take 2 * one) */
    CHECK_EQ_I(fc.stream_synchronize(s[0]), 0);
    CHECK_EQ_I(fc.stream_synchronize(s[1]), 0);
    double same = now_s() - t0;
    CHECK(same >= 2 * one);
    const unsigned char *d1 = fc.translate(b.dev[1], 4 * MiB);
    CHECK(d1 && d1[0] == 0x11 && d1[4 * MiB - 1] == 0x11); /* the bytes moved */
    /* one copy each way overlaps */
    t0 = now_s();
    CHECK_EQ_I(fc.memcpy_async(b.dev[0], b.host[1], 4 * MiB, H2D, s[0]), 0);
    CHECK_EQ_I(fc.memcpy_async(b.host[0], b.dev[1], 4 * MiB, D2H, s[1]), 0);
    CHECK_EQ_I(fc.stream_synchronize(s[0]), 0);
    CHECK_EQ_I(fc.stream_synchronize(s[1]), 0);
    double both = now_s() - t0;
    CHECK(both >= one);
    CHECK(both < 1.5 * one);
    CHECK(b.host[0][0] == 0x11);
    uint64_t st[FAKE_N_STATS] = { 0 };
    (void)fc.timed_stats(st, FAKE_N_STATS);
    CHECK_EQ_U(st[FAKE_H2D_BYTES], 12 * MiB);
    CHECK_EQ_U(st[FAKE_D2H_BYTES], 4 * MiB);
    CHECK_EQ_U(st[FAKE_H2D_BUSY_NS], 3 * (uint64_t)(4.0 * MiB / RATE * 1e9));
    for (int i = 0; i < 2; i++)
        CHECK_EQ_I(fc.stream_destroy(s[i]), 0);
    bufs_free(&b);
}

TIO_TEST(a_copy_waits_for_the_kernel_it_follows) {
    void *s[2] = { NULL, NULL }, *e = NULL, *dev = NULL;
    void *host = NULL;
    CHECK_EQ_I(timed_on(0), 0);
    CHECK_EQ_I(fc.malloc_device(&dev, MiB), 0);
    CHECK_EQ_I(fc.host_alloc(&host, MiB, 0), 0);
    CHECK_EQ_I(fc.stream_create(&s[0], 1), 0);
    CHECK_EQ_I(fc.stream_create(&s[1], 1), 0);
    CHECK_EQ_I(fc.event_create(&e, 0), 0);
    double t0 = now_s();
    CHECK_EQ_I(fc.launch_kernel(s[0], 100000000), 0); /* 100 ms */
    CHECK_EQ_I(fc.event_record(e, s[0]), 0);
    CHECK_EQ_I(fc.stream_wait_event(s[1], e, 0), 0);
    CHECK_EQ_I(fc.memcpy_async(host, dev, MiB, D2H, s[1]), 0);
    CHECK_EQ_I(fc.stream_synchronize(s[1]), 0);
    CHECK(now_s() - t0 >= 0.1 + MiB / RATE);
    CHECK_EQ_I(fc.event_destroy(e), 0);
    for (int i = 0; i < 2; i++)
        CHECK_EQ_I(fc.stream_destroy(s[i]), 0);
    CHECK_EQ_I(fc.free_device(dev), 0);
    CHECK_EQ_I(fc.free_host(host), 0);
}

/* The counts of a kernel stream's idle time: a wait for a copy on another stream holds it back
 * for the copy (the copy stream's own wait for the kernel before it is not counted: it runs no
 * kernels), and a kernel queued after the stream drained counts as the host's lateness. */
TIO_TEST(a_kernel_streams_idle_time_is_counted) {
    void *s[2] = { NULL, NULL }, *e[2] = { NULL, NULL }, *dev = NULL, *host = NULL;
    CHECK_EQ_I(timed_on(0), 0);
    CHECK_EQ_I(fc.malloc_device(&dev, MiB), 0);
    CHECK_EQ_I(fc.host_alloc(&host, MiB, 0), 0);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ_I(fc.stream_create(&s[i], 1), 0);
        CHECK_EQ_I(fc.event_create(&e[i], 0), 0);
    }
    CHECK_EQ_I(fc.launch_kernel(s[0], 50000000), 0); /* 50 ms: time to queue the rest */
    CHECK_EQ_I(fc.event_record(e[0], s[0]), 0);
    CHECK_EQ_I(fc.stream_wait_event(s[1], e[0], 0), 0);
    CHECK_EQ_I(fc.memcpy_async(host, dev, MiB, D2H, s[1]), 0); /* 105 ms after the kernel */
    CHECK_EQ_I(fc.event_record(e[1], s[1]), 0);
    CHECK_EQ_I(fc.stream_wait_event(s[0], e[1], 0), 0);
    CHECK_EQ_I(fc.launch_kernel(s[0], 10000000), 0);
    CHECK_EQ_I(fc.stream_synchronize(s[0]), 0);
    struct timespec ts = { 0, 30000000 };
    nanosleep(&ts, NULL);
    CHECK_EQ_I(fc.launch_kernel(s[0], 10000000), 0); /* 30 ms after the stream drained */
    CHECK_EQ_I(fc.stream_synchronize(s[0]), 0);
    uint64_t st[FAKE_N_STATS] = { 0 };
    CHECK_EQ_I(fc.timed_stats(st, FAKE_N_STATS), FAKE_N_STATS);
    uint64_t copy = (uint64_t)(MiB / RATE * 1e9);
    CHECK_EQ_U(st[FAKE_DEP_WAITS], 1);
    CHECK(st[FAKE_DEP_WAIT_NS] >= copy && st[FAKE_DEP_WAIT_NS] <= copy + 1000000);
    CHECK(st[FAKE_LATE_NS] >= 30000000);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ_I(fc.event_destroy(e[i]), 0);
        CHECK_EQ_I(fc.stream_destroy(s[i]), 0);
    }
    CHECK_EQ_I(fc.free_device(dev), 0);
    CHECK_EQ_I(fc.free_host(host), 0);
}

TIO_TEST(pageable_copies_are_synchronous_and_slower) {
    void *s = NULL, *dev = NULL;
    unsigned char *page = malloc(MiB);
    REQUIRE(page != NULL);
    memset(page, 0x5A, MiB);
    CHECK_EQ_I(timed_on(0), 0);
    CHECK_EQ_I(fc.malloc_device(&dev, MiB), 0);
    CHECK_EQ_I(fc.stream_create(&s, 1), 0);
    uint64_t p0 = fc.pageable_copies();
    double t0 = now_s();
    CHECK_EQ_I(fc.memcpy_async(dev, page, MiB, H2D, s), 0);
    CHECK(now_s() - t0 >= MiB / (RATE / 4)); /* returned once done, at the pageable rate */
    CHECK_EQ_U(fc.pageable_copies(), p0 + 1);
    const unsigned char *d = fc.translate(dev, MiB);
    CHECK(d && d[MiB - 1] == 0x5A);
    /* registered memory is pinned: asynchronous again (the copy takes 0.1 s) */
    CHECK_EQ_I(fc.host_register(page, MiB, 0), 0);
    t0 = now_s();
    CHECK_EQ_I(fc.memcpy_async(page, dev, MiB, D2H, s), 0);
    CHECK(now_s() - t0 < MiB / RATE);
    CHECK_EQ_U(fc.pageable_copies(), p0 + 1);
    CHECK_EQ_I(fc.stream_synchronize(s), 0);
    CHECK_EQ_I(fc.host_unregister(page), 0);
    CHECK_EQ_I(fc.stream_destroy(s), 0);
    CHECK_EQ_I(fc.free_device(dev), 0);
    free(page);
}

/* Out of timed mode too: a pageable copy queued behind held work returns only after it ran. */
static void hold_fn(void *u) {
    struct timespec ts = { 0, 100000000 }; /* 100 ms */
    nanosleep(&ts, NULL);
    atomic_store((atomic_int *)u, 1);
}

TIO_TEST(pageable_copies_wait_without_timing) {
    void *s = NULL, *dev = NULL;
    unsigned char page[4096];
    memset(page, 1, sizeof page);
    CHECK_EQ_I(fc.set_timing(0, 0, 0, 0, 0), 0);
    CHECK_EQ_I(fc.malloc_device(&dev, sizeof page), 0);
    CHECK_EQ_I(fc.stream_create(&s, 1), 0);
    atomic_int held = 0;
    CHECK_EQ_I(fc.launch_host_func(s, hold_fn, &held), 0);
    uint64_t p0 = fc.pageable_copies();
    CHECK_EQ_I(fc.memcpy_async(dev, page, sizeof page, H2D, s), 0);
    CHECK_EQ_I(atomic_load(&held), 1); /* it waited for the stream's earlier work */
    CHECK_EQ_U(fc.pageable_copies(), p0 + 1);
    CHECK_EQ_I(fc.stream_destroy(s), 0);
    CHECK_EQ_I(fc.free_device(dev), 0);
}

TIO_TEST(a_full_launch_queue_blocks_the_host) {
    void *s = NULL;
    CHECK_EQ_I(timed_on(4), 0);
    CHECK_EQ_I(fc.stream_create(&s, 1), 0);
    fc.watch_thread();
    uint64_t w0 = fc.watched_waits();
    double t0 = now_s();
    for (int i = 0; i < 6; i++)
        CHECK_EQ_I(fc.launch_kernel(s, 50000000), 0); /* 50 ms each, 4 queued at most */
    /* the 5th found the queue full and waited until it drained to half (2 kernels ran) */
    CHECK(now_s() - t0 >= 0.1);
    uint64_t st[FAKE_N_STATS] = { 0 };
    (void)fc.timed_stats(st, FAKE_N_STATS);
    CHECK_EQ_U(st[FAKE_QUEUE_FULL], 1);
    CHECK_EQ_U(fc.watched_waits(), w0 + 1);
    CHECK_EQ_I(fc.stream_synchronize(s), 0);
    CHECK_EQ_U(fc.watched_waits(), w0 + 2);
    CHECK_EQ_I(fc.stream_destroy(s), 0);
}

TIO_TEST(malloc_waits_for_the_device) {
    void *s = NULL, *dev = NULL;
    CHECK_EQ_I(timed_on(0), 0);
    CHECK_EQ_I(fc.stream_create(&s, 1), 0);
    double t0 = now_s();
    CHECK_EQ_I(fc.launch_kernel(s, 100000000), 0);
    CHECK_EQ_I(fc.malloc_device(&dev, 4096), 0);
    CHECK(now_s() - t0 >= 0.1);
    CHECK_EQ_I(fc.free_device(dev), 0);
    CHECK_EQ_I(fc.stream_destroy(s), 0);
}

TIO_TEST(kernels_need_the_streams_device) {
    void *s = NULL;
    CHECK_EQ_I(fc.stream_create(&s, 1), 0);
    CHECK_EQ_I(fc.set_device(1), 0);
    CHECK_EQ_I(fc.launch_kernel(s, 1000), 400);
    CHECK_EQ_I(fc.set_device(0), 0);
    CHECK_EQ_I(fc.launch_kernel(s, 1000), 0);
    CHECK_EQ_I(fc.stream_destroy(s), 0);
}

int main(void) {
    if (setenv("FAKE_CUDA_DEVICES", "2", 1) != 0 || fake_cuda_load(&fc) < 0)
        return 1;
    RUN(kernels_run_back_to_back);
    RUN(one_copy_engine_per_direction);
    RUN(a_copy_waits_for_the_kernel_it_follows);
    RUN(a_kernel_streams_idle_time_is_counted);
    RUN(pageable_copies_are_synchronous_and_slower);
    RUN(pageable_copies_wait_without_timing);
    RUN(a_full_launch_queue_blocks_the_host);
    RUN(malloc_waits_for_the_device);
    RUN(kernels_need_the_streams_device);
    CHECK_EQ_I(fc.set_timing(0, 0, 0, 0, 0), 0);
    return tio_test_done();
}
