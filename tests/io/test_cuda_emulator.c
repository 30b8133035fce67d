/*
 * The lagging-GPU emulator (tests/io/fakes/fake_cudart.c) keeps CUDA's ordering rules: FIFO per
 * stream under random delays, events and cudaStreamWaitEvent across streams, the legacy default
 * stream's synchronisation with blocking streams (and non-blocking streams' exemption),
 * cudaMemcpy on the legacy stream, cudaFree's device synchronisation and poison. Work that must
 * wait is held by a host function waiting on a gate the test opens; every wait has a timeout, so
 * an ordering bug fails the test instead of hanging it.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "io/fake_cuda.h"
#include "tio_test.h"

#define NON_BLOCKING 0x1u
#define NOT_READY    600
#define BAD_HANDLE   400
#define LEGACY       ((void *)0x1) /* cudaStreamLegacy */

static struct fake_cuda fc;

static void sleep_ms(int ms) {
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* Poll *f until it is 1; 0 after ms milliseconds. */
static int wait_flag(atomic_int *f, int ms) {
    for (int i = 0; i < ms * 10; i++) {
        if (atomic_load(f))
            return 1;
        struct timespec ts = { 0, 100000 };
        nanosleep(&ts, NULL);
    }
    return atomic_load(f) != 0;
}

/* A host function that holds its stream until the gate opens (10 s at most: then timed_out). */
struct gate {
    atomic_int open, timed_out;
};
static void gate_fn(void *u) {
    struct gate *g = u;
    if (!wait_flag(&g->open, 10000))
        atomic_store(&g->timed_out, 1);
}
static void set_fn(void *u) {
    atomic_store((atomic_int *)u, 1);
}

/* A host function that waits for another stream's op (5 s: then counts a timeout). */
struct waiter {
    atomic_int *flag;
    atomic_int timed_out;
};
static void wait_fn(void *u) {
    struct waiter *w = u;
    if (!wait_flag(w->flag, 5000))
        atomic_store(&w->timed_out, 1);
}

struct opener {
    struct gate *g;
    int after_ms;
};
static void *opener_main(void *u) {
    struct opener *o = u;
    sleep_ms(o->after_ms);
    atomic_store(&o->g->open, 1);
    return NULL;
}

/* ---- lag from the environment ----------------------------------------------------------- */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void nop_fn(void *u) {
    (void)u;
}

/* main sets FAKE_CUDA_LAG_US=2000 before the library's first call: 80 operations wait 0..500 us
 * each at least (a stream's scale is 1/4, 1 or 3): about 20 ms in all at the least, under 5 ms
 * has a probability far below 1e-12 */
TIO_TEST(lag_from_the_environment) {
    void *s = NULL;
    CHECK_EQ_I(fc.stream_create(&s, NON_BLOCKING), 0);
    double t0 = now_s();
    for (int i = 0; i < 80; i++)
        CHECK_EQ_I(fc.launch_host_func(s, nop_fn, NULL), 0);
    CHECK_EQ_I(fc.stream_synchronize(s), 0);
    double dt = now_s() - t0;
    printf("  80 operations at FAKE_CUDA_LAG_US=2000: %.1f ms\n", dt * 1e3);
    CHECK(dt > 0.005);
    fc.set_lag(0, 0); /* and the hook turns it off */
    t0 = now_s();
    for (int i = 0; i < 80; i++)
        CHECK_EQ_I(fc.launch_host_func(s, nop_fn, NULL), 0);
    CHECK_EQ_I(fc.stream_synchronize(s), 0);
    printf("  80 operations without lag: %.1f ms\n", (now_s() - t0) * 1e3);
    CHECK_EQ_I(fc.stream_destroy(s), 0);
}

/* ---- FIFO per stream --------------------------------------------------------------------- */
#define FIFO_OPS 150
struct fifo_log {
    int seen[FIFO_OPS]; /* written by the stream's thread only; read after a synchronize */
    int n;
};
struct fifo_item {
    struct fifo_log *log;
    int i;
};
static void fifo_fn(void *u) {
    struct fifo_item *it = u;
    it->log->seen[it->log->n++] = it->i;
}

TIO_TEST(fifo_per_stream_under_lag) {
    fc.set_lag(300, 1);
    void *s[2] = { NULL, NULL };
    CHECK_EQ_I(fc.stream_create(&s[0], NON_BLOCKING), 0);
    CHECK_EQ_I(fc.stream_create(&s[1], 0), 0);
    static struct fifo_log logs[2];
    static struct fifo_item items[2][FIFO_OPS];
    static uint64_t host_in[FIFO_OPS], host_out[2][FIFO_OPS];
    void *dev[2] = { NULL, NULL };
    CHECK_EQ_I(fc.malloc_device(&dev[0], 8), 0);
    CHECK_EQ_I(fc.malloc_device(&dev[1], 8), 0);
    for (int i = 0; i < FIFO_OPS; i++) {
        host_in[i] = (uint64_t)i * 7 + 1;
        for (int k = 0; k < 2; k++) {
            items[k][i] = (struct fifo_item){ &logs[k], i };
            CHECK_EQ_I(fc.launch_host_func(s[k], fifo_fn, &items[k][i]), 0);
            /* a copy in, a copy out through the same device word: FIFO makes each round trip
             * return its own value */
            CHECK_EQ_I(fc.memcpy_async(dev[k], &host_in[i], 8, 1, s[k]), 0);
            CHECK_EQ_I(fc.memcpy_async(&host_out[k][i], dev[k], 8, 2, s[k]), 0);
        }
    }
    for (int k = 0; k < 2; k++) {
        CHECK_EQ_I(fc.stream_synchronize(s[k]), 0);
        CHECK_EQ_I(logs[k].n, FIFO_OPS);
        int bad = 0;
        for (int i = 0; i < FIFO_OPS; i++)
            bad += logs[k].seen[i] != i || host_out[k][i] != host_in[i];
        CHECK_EQ_I(bad, 0);
        CHECK_EQ_I(fc.stream_destroy(s[k]), 0);
        CHECK_EQ_I(fc.free_device(dev[k]), 0);
    }
    fc.set_lag(0, 0);
}

/* ---- events ------------------------------------------------------------------------------ */
TIO_TEST(wait_event_holds_the_other_stream) {
    void *a = NULL, *b = NULL, *c = NULL, *ev = NULL, *never = NULL;
    CHECK_EQ_I(fc.stream_create(&a, NON_BLOCKING), 0);
    CHECK_EQ_I(fc.stream_create(&b, NON_BLOCKING), 0);
    CHECK_EQ_I(fc.stream_create(&c, NON_BLOCKING), 0);
    CHECK_EQ_I(fc.event_create(&ev, 0x2), 0);
    CHECK_EQ_I(fc.event_create(&never, 0x2), 0);

    /* b waits for the record on a, which waits for the gate */
    static struct gate g;
    static atomic_int done;
    CHECK_EQ_I(fc.launch_host_func(a, gate_fn, &g), 0);
    CHECK_EQ_I(fc.event_record(ev, a), 0);
    CHECK_EQ_I(fc.stream_wait_event(b, ev, 0), 0);
    CHECK_EQ_I(fc.launch_host_func(b, set_fn, &done), 0);
    sleep_ms(30);
    CHECK_EQ_I(atomic_load(&done), 0);
    CHECK_EQ_I(fc.event_query(ev), NOT_READY);
    atomic_store(&g.open, 1);
    CHECK_EQ_I(fc.stream_synchronize(b), 0);
    CHECK_EQ_I(atomic_load(&done), 1);
    CHECK_EQ_I(fc.event_query(ev), 0);
    CHECK_EQ_I(atomic_load(&g.timed_out), 0);

    /* an event never recorded: complete, and waiting on it is a no-op */
    static atomic_int done2;
    CHECK_EQ_I(fc.event_query(never), 0);
    CHECK_EQ_I(fc.event_synchronize(never), 0);
    CHECK_EQ_I(fc.stream_wait_event(b, never, 0), 0);
    CHECK_EQ_I(fc.launch_host_func(b, set_fn, &done2), 0);
    CHECK_EQ_I(fc.stream_synchronize(b), 0);
    CHECK_EQ_I(atomic_load(&done2), 1);

    /* cudaStreamWaitEvent waits for the record current at the call; a later record on an idle
     * stream replaces what cudaEventQuery/cudaEventSynchronize see, not what b waits for */
    static struct gate g2;
    static atomic_int done3;
    CHECK_EQ_I(fc.launch_host_func(a, gate_fn, &g2), 0);
    CHECK_EQ_I(fc.event_record(ev, a), 0);
    CHECK_EQ_I(fc.stream_wait_event(b, ev, 0), 0);
    CHECK_EQ_I(fc.launch_host_func(b, set_fn, &done3), 0);
    CHECK_EQ_I(fc.event_record(ev, c), 0);
    CHECK_EQ_I(fc.event_synchronize(ev), 0); /* returns although a is still held */
    CHECK_EQ_I(fc.event_query(ev), 0);
    sleep_ms(30);
    CHECK_EQ_I(atomic_load(&done3), 0);
    atomic_store(&g2.open, 1);
    CHECK_EQ_I(fc.stream_synchronize(b), 0);
    CHECK_EQ_I(atomic_load(&done3), 1);

    CHECK_EQ_I(fc.event_destroy(ev), 0);
    CHECK_EQ_I(fc.event_destroy(never), 0);
    CHECK_EQ_I(fc.stream_destroy(a), 0);
    CHECK_EQ_I(fc.stream_destroy(b), 0);
    CHECK_EQ_I(fc.stream_destroy(c), 0);
}

/* A plain (non-atomic) value handed from a's thread to b's through an event, under lag: the
 * reader must see the writer's value (and TSan must see the happens-before edge). */
struct handoff {
    int64_t value; /* plain on purpose */
    int64_t want;
    int64_t wrong;
};
static void handoff_write(void *u) {
    struct handoff *h = u;
    h->value = h->want;
}
static void handoff_read(void *u) {
    struct handoff *h = u;
    h->wrong += h->value != h->want;
}

TIO_TEST(events_order_streams_under_lag) {
    void *a = NULL, *b = NULL, *ev = NULL;
    CHECK_EQ_I(fc.stream_create(&a, NON_BLOCKING), 0);
    CHECK_EQ_I(fc.stream_create(&b, NON_BLOCKING), 0);
    CHECK_EQ_I(fc.event_create(&ev, 0x2), 0);
    static struct handoff h[200];
    for (int i = 0; i < 200; i++) {
        fc.set_lag((unsigned)(i % 4) * 100, (uint64_t)i);
        h[i].want = i + 1;
        CHECK_EQ_I(fc.launch_host_func(a, handoff_write, &h[i]), 0);
        CHECK_EQ_I(fc.event_record(ev, a), 0);
        CHECK_EQ_I(fc.stream_wait_event(b, ev, 0), 0);
        CHECK_EQ_I(fc.launch_host_func(b, handoff_read, &h[i]), 0);
    }
    CHECK_EQ_I(fc.stream_synchronize(b), 0);
    int64_t wrong = 0;
    for (int i = 0; i < 200; i++)
        wrong += h[i].wrong;
    CHECK_EQ_I(wrong, 0);
    fc.set_lag(0, 0);
    CHECK_EQ_I(fc.event_destroy(ev), 0);
    CHECK_EQ_I(fc.stream_destroy(a), 0);
    CHECK_EQ_I(fc.stream_destroy(b), 0);
}

/* ---- the legacy default stream ----------------------------------------------------------- */
static void legacy_vs_blocking(void *legacy) {
    void *s = NULL;
    CHECK_EQ_I(fc.stream_create(&s, 0), 0);
    /* legacy work waits for a blocking stream's earlier work */
    struct gate g = { 0 };
    atomic_int l = 0;
    CHECK_EQ_I(fc.launch_host_func(s, gate_fn, &g), 0);
    CHECK_EQ_I(fc.launch_host_func(legacy, set_fn, &l), 0);
    sleep_ms(30);
    CHECK_EQ_I(atomic_load(&l), 0);
    atomic_store(&g.open, 1);
    CHECK_EQ_I(fc.stream_synchronize(legacy), 0);
    CHECK_EQ_I(atomic_load(&l), 1);
    /* a blocking stream's work waits for the legacy stream's earlier work */
    struct gate g2 = { 0 };
    atomic_int b = 0;
    CHECK_EQ_I(fc.launch_host_func(legacy, gate_fn, &g2), 0);
    CHECK_EQ_I(fc.launch_host_func(s, set_fn, &b), 0);
    sleep_ms(30);
    CHECK_EQ_I(atomic_load(&b), 0);
    atomic_store(&g2.open, 1);
    CHECK_EQ_I(fc.stream_synchronize(s), 0);
    CHECK_EQ_I(atomic_load(&b), 1);
    /* cudaStreamSynchronize(legacy) covers the blocking streams' earlier work */
    struct gate g3 = { 0 };
    atomic_int b3 = 0;
    CHECK_EQ_I(fc.launch_host_func(s, gate_fn, &g3), 0);
    CHECK_EQ_I(fc.launch_host_func(s, set_fn, &b3), 0);
    pthread_t th;
    struct opener op = { &g3, 30 };
    CHECK_EQ_I(pthread_create(&th, NULL, opener_main, &op), 0);
    CHECK_EQ_I(fc.stream_synchronize(legacy), 0);
    CHECK_EQ_I(atomic_load(&b3), 1);
    pthread_join(th, NULL);
    CHECK_EQ_I(atomic_load(&g.timed_out) + atomic_load(&g2.timed_out) + atomic_load(&g3.timed_out),
               0);
    CHECK_EQ_I(fc.stream_destroy(s), 0);
}

TIO_TEST(legacy_stream_synchronizes_with_blocking_streams) {
    legacy_vs_blocking(NULL);
    legacy_vs_blocking(LEGACY);
}

TIO_TEST(non_blocking_streams_are_exempt) {
    void *n = NULL;
    CHECK_EQ_I(fc.stream_create(&n, NON_BLOCKING), 0);
    fc.set_lag(200, 7);
    for (int round = 0; round < 20; round++) {
        /* a legacy op waits (host function) for a non-blocking op queued after it: the
         * non-blocking op must not wait for the legacy stream */
        atomic_int nflag = 0;
        struct waiter w = { &nflag, 0 };
        CHECK_EQ_I(fc.launch_host_func(round % 2 ? LEGACY : NULL, wait_fn, &w), 0);
        CHECK_EQ_I(fc.launch_host_func(n, set_fn, &nflag), 0);
        CHECK_EQ_I(fc.stream_synchronize(NULL), 0);
        CHECK_EQ_I(atomic_load(&w.timed_out), 0);
        /* and the other way round */
        atomic_int lflag = 0;
        struct waiter w2 = { &lflag, 0 };
        CHECK_EQ_I(fc.launch_host_func(n, wait_fn, &w2), 0);
        CHECK_EQ_I(fc.launch_host_func(NULL, set_fn, &lflag), 0);
        CHECK_EQ_I(fc.stream_synchronize(n), 0);
        CHECK_EQ_I(fc.stream_synchronize(NULL), 0);
        CHECK_EQ_I(atomic_load(&w2.timed_out), 0);
        if (tio_t_cur_failed)
            break;
    }
    fc.set_lag(0, 0);
    CHECK_EQ_I(fc.stream_destroy(n), 0);
}

struct sync_copy {
    void *dst;
    const void *src;
    atomic_int done;
    int rc;
};
static void *sync_copy_main(void *u) {
    struct sync_copy *c = u;
    c->rc = fc.memcpy(c->dst, c->src, 64, 4);
    atomic_store(&c->done, 1);
    return NULL;
}

TIO_TEST(memcpy_is_on_the_legacy_stream) {
    void *s = NULL, *n = NULL, *d = NULL;
    CHECK_EQ_I(fc.stream_create(&s, 0), 0);
    CHECK_EQ_I(fc.stream_create(&n, NON_BLOCKING), 0);
    CHECK_EQ_I(fc.malloc_device(&d, 64), 0);
    unsigned char src[64];
    memset(src, 0x5A, sizeof src);
    /* behind a held blocking stream, cudaMemcpy waits */
    struct gate g = { 0 };
    struct sync_copy c = { d, src, 0, -1 };
    CHECK_EQ_I(fc.launch_host_func(s, gate_fn, &g), 0);
    pthread_t th;
    CHECK_EQ_I(pthread_create(&th, NULL, sync_copy_main, &c), 0);
    sleep_ms(30);
    CHECK_EQ_I(atomic_load(&c.done), 0);
    atomic_store(&g.open, 1);
    pthread_join(th, NULL);
    CHECK_EQ_I(c.rc, 0);
    /* behind a held non-blocking stream, it does not */
    struct gate g2 = { 0 };
    struct sync_copy c2 = { d, src, 0, -1 };
    CHECK_EQ_I(fc.launch_host_func(n, gate_fn, &g2), 0);
    CHECK_EQ_I(pthread_create(&th, NULL, sync_copy_main, &c2), 0);
    CHECK(wait_flag(&c2.done, 5000));
    atomic_store(&g2.open, 1);
    pthread_join(th, NULL);
    CHECK_EQ_I(c2.rc, 0);
    CHECK_EQ_I(((unsigned char *)fc.translate(d, 64))[63], 0x5A);
    /* the counter of copies that serialize with the legacy stream */
    uint64_t b0 = fc.blocking_copies();
    CHECK_EQ_I(fc.memcpy_async(d, src, 64, 1, n), 0);
    CHECK_EQ_U(fc.blocking_copies(), b0);
    /* the non-blocking stream is ordered with nothing: let its copy finish before the copies
     * below write the same bytes (otherwise the test itself races, as it would on a GPU) */
    CHECK_EQ_I(fc.stream_synchronize(n), 0);
    CHECK_EQ_I(fc.memcpy_async(d, src, 64, 1, s), 0);
    CHECK_EQ_U(fc.blocking_copies(), b0 + 1);
    CHECK_EQ_I(fc.memcpy_async(d, src, 64, 1, NULL), 0);
    CHECK_EQ_U(fc.blocking_copies(), b0 + 2);
    CHECK_EQ_I(fc.device_synchronize(), 0);
    CHECK_EQ_I(fc.free_device(d), 0);
    CHECK_EQ_I(fc.stream_destroy(s), 0);
    CHECK_EQ_I(fc.stream_destroy(n), 0);
}

/* ---- races between a host function and a copy ------------------------------------------ */
struct race_probe {
    void *dev;
    size_t n;
    int writes;
    atomic_int seen, timed_out;
    int wait; /* poll until a racing copy shows up (5 s at most) */
};
static void race_fn(void *u) {
    struct race_probe *r = u;
    for (int i = 0; i < 50000; i++) {
        if (fc.racing_copies(r->dev, r->n, r->writes)) {
            atomic_store(&r->seen, 1);
            return;
        }
        if (!r->wait)
            return;
        struct timespec ts = { 0, 100000 };
        nanosleep(&ts, NULL);
    }
    atomic_store(&r->timed_out, 1);
}

TIO_TEST(racing_copies_are_seen) {
    void *a = NULL, *b = NULL, *ev = NULL, *d = NULL, *d2 = NULL;
    size_t n = (size_t)64 << 20; /* a copy long enough to be caught running */
    CHECK_EQ_I(fc.stream_create(&a, NON_BLOCKING), 0);
    CHECK_EQ_I(fc.stream_create(&b, NON_BLOCKING), 0);
    CHECK_EQ_I(fc.event_create(&ev, 0x2), 0);
    CHECK_EQ_I(fc.malloc_device(&d, n), 0);
    CHECK_EQ_I(fc.malloc_device(&d2, n), 0);
    for (int rep = 0; rep < 3; rep++) {
        /* unordered: b's host function sees a's copy into d running */
        struct race_probe r = { d, n, 0, 0, 0, 1 };
        struct gate g = { 0 };
        CHECK_EQ_I(fc.launch_host_func(a, gate_fn, &g), 0);
        CHECK_EQ_I(fc.memcpy_async(d, d2, n, 3, a), 0);
        CHECK_EQ_I(fc.launch_host_func(b, race_fn, &r), 0);
        atomic_store(&g.open, 1);
        CHECK_EQ_I(fc.stream_synchronize(b), 0);
        CHECK_EQ_I(fc.stream_synchronize(a), 0);
        CHECK_EQ_I(atomic_load(&r.seen), 1);
        /* ordered by an event: never */
        struct race_probe r2 = { d, n, 1, 0, 0, 0 };
        CHECK_EQ_I(fc.memcpy_async(d2, d, n, 3, a), 0);
        CHECK_EQ_I(fc.event_record(ev, a), 0);
        CHECK_EQ_I(fc.stream_wait_event(b, ev, 0), 0);
        CHECK_EQ_I(fc.launch_host_func(b, race_fn, &r2), 0);
        CHECK_EQ_I(fc.stream_synchronize(b), 0);
        CHECK_EQ_I(atomic_load(&r2.seen), 0);
        /* a reader does not race with a copy that only reads the same bytes */
        struct race_probe r3 = { d, n, 0, 0, 0, 0 };
        struct gate g3 = { 0 };
        CHECK_EQ_I(fc.launch_host_func(a, gate_fn, &g3), 0);
        CHECK_EQ_I(fc.memcpy_async(d2, d, n, 3, a), 0);
        atomic_store(&g3.open, 1);
        CHECK_EQ_I(fc.launch_host_func(b, race_fn, &r3), 0);
        CHECK_EQ_I(fc.stream_synchronize(b), 0);
        CHECK_EQ_I(fc.stream_synchronize(a), 0);
        CHECK_EQ_I(atomic_load(&r3.seen), 0);
        CHECK_EQ_I(atomic_load(&r.timed_out) + atomic_load(&g.timed_out), 0);
    }
    CHECK_EQ_I(fc.free_device(d), 0);
    CHECK_EQ_I(fc.free_device(d2), 0);
    CHECK_EQ_I(fc.event_destroy(ev), 0);
    CHECK_EQ_I(fc.stream_destroy(a), 0);
    CHECK_EQ_I(fc.stream_destroy(b), 0);
}

/* ---- memory ------------------------------------------------------------------------------ */
TIO_TEST(free_synchronizes_and_poisons) {
    void *d = NULL, *n = NULL;
    CHECK_EQ_I(fc.stream_create(&n, NON_BLOCKING), 0);
    size_t len = 3 * 4096 + 100;
    CHECK_EQ_I(fc.malloc_device(&d, len), 0);
    unsigned char *src = malloc(len), *back = malloc(len);
    for (size_t i = 0; i < len; i++)
        src[i] = (unsigned char)(i * 31 + 7);
    memset(back, 0, len);
    CHECK_EQ_I(fc.memcpy(d, src, len, 1), 0);
    /* a copy out of d, held behind a gate: cudaFree waits for it */
    struct gate g = { 0 };
    CHECK_EQ_I(fc.launch_host_func(n, gate_fn, &g), 0);
    CHECK_EQ_I(fc.memcpy_async(back, d, len, 2, n), 0);
    uint64_t bad0 = fc.bad_accesses(), sync0 = fc.sync_calls();
    pthread_t th;
    struct opener op = { &g, 30 };
    CHECK_EQ_I(pthread_create(&th, NULL, opener_main, &op), 0);
    CHECK_EQ_I(fc.free_device(d), 0);
    pthread_join(th, NULL);
    CHECK(memcmp(back, src, len) == 0); /* the copy ran before the bytes were poisoned */
    CHECK_EQ_U(fc.bad_accesses(), bad0);
    CHECK(fc.sync_calls() > sync0);
    const unsigned char *sh = fc.translate(d, len);
    size_t poisoned = 0;
    for (size_t i = 0; sh && i < len; i++)
        poisoned += sh[i] == 0xDB;
    CHECK_EQ_U(poisoned, len);
    /* released bytes are no device memory any more; a new allocation reuses them */
    CHECK_EQ_I(fc.memcpy(d, src, len, 1), 1);
    CHECK_EQ_I(fc.memcpy_async(back, d, 16, 2, n), 1);
    CHECK_EQ_U(fc.bad_accesses(), bad0 + 2);
    CHECK_EQ_I(fc.free_device(d), 1); /* twice */
    void *d2 = NULL;
    CHECK_EQ_I(fc.malloc_device(&d2, len), 0);
    CHECK((char *)d2 <= (char *)d); /* first fit: in the freed bytes or a lower hole */
    CHECK_EQ_I(fc.free_device(d2), 0);
    CHECK_EQ_I(fc.free_device(NULL), 0);
    CHECK_EQ_I(fc.stream_destroy(n), 0);
    free(src);
    free(back);
}

TIO_TEST(bad_handles) {
    uint64_t live0 = fc.live_streams();
    void *s = NULL, *e = NULL, *junk = (void *)(uintptr_t)0x12345670;
    CHECK_EQ_I(fc.stream_synchronize(junk), BAD_HANDLE);
    CHECK_EQ_I(fc.launch_host_func(junk, set_fn, NULL), BAD_HANDLE);
    CHECK_EQ_I(fc.stream_create(&s, 0x80), 1);
    CHECK_EQ_I(fc.stream_create(&s, NON_BLOCKING), 0);
    CHECK_EQ_U(fc.live_streams(), live0 + 1);
    CHECK_EQ_I(fc.event_create(&e, 0), 0);
    CHECK_EQ_I(fc.event_query(s), BAD_HANDLE); /* a stream is no event */
    CHECK_EQ_I(fc.event_record(e, e), BAD_HANDLE);
    CHECK_EQ_I(fc.stream_wait_event(s, e, 5), 1);
    CHECK_EQ_I(fc.stream_destroy(NULL), BAD_HANDLE);
    CHECK_EQ_I(fc.stream_destroy(s), 0);
    CHECK_EQ_U(fc.live_streams(), live0);
    CHECK_EQ_I(fc.stream_synchronize(s), BAD_HANDLE); /* destroyed */
    CHECK_EQ_I(fc.event_record(e, s), BAD_HANDLE);
    CHECK_EQ_I(fc.event_destroy(e), 0);
    CHECK_EQ_I(fc.event_query(e), BAD_HANDLE);
    CHECK_EQ_I(fc.event_synchronize(e), BAD_HANDLE);
    CHECK_EQ_I(fc.event_destroy(e), BAD_HANDLE);
    /* a new stream in the old one's slot does not revive the old handle */
    void *s2 = NULL;
    CHECK_EQ_I(fc.stream_create(&s2, 0), 0);
    CHECK(s2 != s);
    CHECK_EQ_I(fc.stream_synchronize(s), BAD_HANDLE);
    CHECK_EQ_I(fc.stream_destroy(s2), 0);
    unsigned char h[16] = { 0 };
    CHECK_EQ_I(fc.memcpy(h, h + 8, 8, 9), 1); /* no such kind */
    CHECK_EQ_I(fc.memcpy(h, h + 8, 8, 1), 1); /* H2D to host memory */
    CHECK_EQ_I(fc.memcpy(h, h + 8, 8, 0), 0); /* H2H */
    CHECK_EQ_I(fc.memcpy_async(h, h + 8, 8, 2, NULL), 1);
}

int main(void) {
    setenv("FAKE_CUDA_LAG_US", "2000", 1); /* read at the first stream call */
    if (fake_cuda_load(&fc) < 0)
        return 1;
    RUN(lag_from_the_environment);
    RUN(fifo_per_stream_under_lag);
    RUN(wait_event_holds_the_other_stream);
    RUN(events_order_streams_under_lag);
    RUN(legacy_stream_synchronizes_with_blocking_streams);
    RUN(non_blocking_streams_are_exempt);
    RUN(memcpy_is_on_the_legacy_stream);
    RUN(racing_copies_are_seen);
    RUN(free_synchronizes_and_poisons);
    RUN(bad_handles);
    return tio_test_done();
}
