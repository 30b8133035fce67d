/*
 * Devices in the lagging-GPU emulator (tests/io/fakes/fake_cudart.c): a current device per host
 * thread, streams, events and memory owned by the device current when they were made, and CUDA's
 * rules across devices: cudaEventRecord of an event on a stream of another device fails,
 * cudaStreamWaitEvent may cross devices and orders them, cudaDeviceSynchronize waits for the
 * current device only, a copy of one device's memory on another device's stream is counted.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "io/fake_cuda.h"
#include "tio_test.h"

#define BAD_HANDLE 400
#define BAD_DEVICE 101
#define H2D        1

static struct fake_cuda fc;

static int wait_flag(atomic_int *f, int ms) {
    for (int i = 0; i < ms * 10 && !atomic_load(f); i++) {
        struct timespec ts = { 0, 100000 };
        nanosleep(&ts, NULL);
    }
    return atomic_load(f) != 0;
}

struct gate {
    atomic_int open, ran;
};
static void gate_fn(void *u) { /* holds its stream until the gate opens (5 s at most) */
    struct gate *g = u;
    (void)wait_flag(&g->open, 5000);
    atomic_store(&g->ran, 1);
}
static void set_fn(void *u) {
    atomic_store((atomic_int *)u, 1);
}

static void *other_thread(void *u) {
    int *dev = u;
    *dev = -1;
    (void)fc.get_device(dev);
    return NULL;
}

TIO_TEST(current_device_per_thread) {
    int d = -1;
    CHECK_EQ_I(fc.get_device(&d), 0);
    CHECK_EQ_I(d, 0);
    CHECK_EQ_I(fc.set_device(2), BAD_DEVICE);
    CHECK_EQ_I(fc.set_device(-1), BAD_DEVICE);
    CHECK_EQ_I(fc.set_device(1), 0);
    CHECK_EQ_I(fc.get_device(&d), 0);
    CHECK_EQ_I(d, 1);
    pthread_t th;
    int seen = -2;
    CHECK_EQ_I(pthread_create(&th, NULL, other_thread, &seen), 0);
    pthread_join(th, NULL);
    CHECK_EQ_I(seen, 0); /* a new thread starts on device 0 */
    CHECK_EQ_I(fc.set_device(0), 0);
}

TIO_TEST(event_record_needs_the_streams_device) {
    void *s0 = NULL, *s1 = NULL, *e0 = NULL, *e1 = NULL;
    CHECK_EQ_I(fc.stream_create(&s0, 1), 0);
    CHECK_EQ_I(fc.event_create(&e0, 0), 0);
    CHECK_EQ_I(fc.set_device(1), 0);
    CHECK_EQ_I(fc.stream_create(&s1, 1), 0);
    CHECK_EQ_I(fc.event_create(&e1, 0), 0);
    CHECK_EQ_I(fc.event_record(e0, s1), BAD_HANDLE);   /* device 0's event, device 1's stream */
    CHECK_EQ_I(fc.event_record(e0, NULL), BAD_HANDLE); /* the legacy stream of device 1 */
    CHECK_EQ_I(fc.event_record(e1, s1), 0);
    CHECK_EQ_I(fc.event_record(e1, NULL), 0);
    CHECK_EQ_I(fc.set_device(0), 0);
    CHECK_EQ_I(fc.event_record(e1, s0), BAD_HANDLE);
    CHECK_EQ_I(fc.event_record(e0, s0), 0);
    /* the current device does not matter once the stream is named: s1 is device 1's */
    CHECK_EQ_I(fc.event_record(e1, s1), 0);
    CHECK_EQ_I(fc.event_synchronize(e1), 0);
    CHECK_EQ_I(fc.event_destroy(e0), 0);
    CHECK_EQ_I(fc.event_destroy(e1), 0);
    CHECK_EQ_I(fc.stream_destroy(s0), 0);
    CHECK_EQ_I(fc.stream_destroy(s1), 0);
}

TIO_TEST(wait_event_crosses_devices) {
    void *s0 = NULL, *s1 = NULL, *e1 = NULL;
    CHECK_EQ_I(fc.stream_create(&s0, 1), 0);
    CHECK_EQ_I(fc.set_device(1), 0);
    CHECK_EQ_I(fc.stream_create(&s1, 1), 0);
    CHECK_EQ_I(fc.event_create(&e1, 0), 0);
    struct gate g = { 0 };
    atomic_int after = 0;
    CHECK_EQ_I(fc.launch_host_func(s1, gate_fn, &g), 0);
    CHECK_EQ_I(fc.event_record(e1, s1), 0);
    CHECK_EQ_I(fc.set_device(0), 0);
    CHECK_EQ_I(fc.stream_wait_event(s0, e1, 0), 0); /* device 0 waits for device 1 */
    CHECK_EQ_I(fc.launch_host_func(s0, set_fn, &after), 0);
    struct timespec ts = { 0, 20000000 };
    nanosleep(&ts, NULL);
    CHECK_EQ_I(atomic_load(&after), 0); /* held behind device 1's gate */
    /* cudaDeviceSynchronize on device 0 waits for s0 (held): open the gate from here first */
    CHECK_EQ_I(fc.set_device(1), 0);
    atomic_store(&g.open, 1);
    CHECK_EQ_I(fc.set_device(0), 0);
    CHECK_EQ_I(fc.device_synchronize(), 0);
    CHECK_EQ_I(atomic_load(&after), 1);
    CHECK_EQ_I(fc.event_destroy(e1), 0);
    CHECK_EQ_I(fc.stream_destroy(s0), 0);
    CHECK_EQ_I(fc.stream_destroy(s1), 0);
}

TIO_TEST(device_synchronize_waits_for_the_current_device) {
    void *s1 = NULL;
    CHECK_EQ_I(fc.set_device(1), 0);
    CHECK_EQ_I(fc.stream_create(&s1, 1), 0);
    struct gate g = { 0 };
    CHECK_EQ_I(fc.launch_host_func(s1, gate_fn, &g), 0);
    CHECK_EQ_I(fc.set_device(0), 0);
    CHECK_EQ_I(fc.device_synchronize(), 0); /* device 0 has nothing queued: returns at once */
    CHECK_EQ_I(atomic_load(&g.ran), 0);
    atomic_store(&g.open, 1);
    CHECK_EQ_I(fc.set_device(1), 0);
    CHECK_EQ_I(fc.device_synchronize(), 0);
    CHECK_EQ_I(atomic_load(&g.ran), 1);
    CHECK_EQ_I(fc.set_device(0), 0);
    CHECK_EQ_I(fc.stream_destroy(s1), 0);
}

TIO_TEST(copies_across_devices_are_counted) {
    void *s0 = NULL, *d0 = NULL, *d1 = NULL;
    unsigned char host[256] = { 7 };
    CHECK_EQ_I(fc.stream_create(&s0, 1), 0);
    CHECK_EQ_I(fc.malloc_device(&d0, sizeof host), 0);
    CHECK_EQ_I(fc.set_device(1), 0);
    CHECK_EQ_I(fc.malloc_device(&d1, sizeof host), 0);
    CHECK_EQ_I(fc.set_device(0), 0);
    uint64_t x0 = fc.cross_device_copies();
    CHECK_EQ_I(fc.memcpy_async(d0, host, sizeof host, H2D, s0), 0);
    CHECK_EQ_U(fc.cross_device_copies(), x0);
    CHECK_EQ_I(fc.memcpy_async(d1, host, sizeof host, H2D, s0), 0); /* device 1's memory */
    CHECK_EQ_U(fc.cross_device_copies(), x0 + 1);
    CHECK_EQ_I(fc.stream_synchronize(s0), 0);
    const unsigned char *b = fc.translate(d1, sizeof host);
    CHECK(b && b[0] == 7); /* it still works (unified addressing) */
    CHECK_EQ_I(fc.free_device(d0), 0);
    CHECK_EQ_I(fc.free_device(d1), 0);
    CHECK_EQ_I(fc.stream_destroy(s0), 0);
}

int main(void) {
    if (setenv("FAKE_CUDA_DEVICES", "2", 1) != 0 || fake_cuda_load(&fc) < 0)
        return 1;
    RUN(current_device_per_thread);
    RUN(event_record_needs_the_streams_device);
    RUN(wait_event_crosses_devices);
    RUN(device_synchronize_waits_for_the_current_device);
    RUN(copies_across_devices_are_counted);
    return tio_test_done();
}
