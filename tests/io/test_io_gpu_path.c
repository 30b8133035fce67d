/*
 * The engine's GPU data path (src/io/engine_gpu.c) against the lagging-GPU emulator
 * (tests/io/fakes): device memory moves in two stages around pinned staging rings on copy
 * streams of their own (one per direction, beside the pool's), ordered by events on the GPU,
 * never by the host waiting for a fence.
 *
 *   - an SSD-only engine (posix backend, no host tier) takes device memory and a `done` event;
 *   - a read's SSD stage starts although its fence has not completed (the kernel before it is
 *     held back by a gate), its completion arrives while the gate is still closed, and its bytes
 *     land on the device only after the gate opened;
 *   - a write copies the device bytes only after its fence: what the producer wrote, not what
 *     was there before;
 *   - a write into the host tier (host memory, or device memory on the D2H stream) waits for a
 *     pool read still queued on the H2D stream (the extent it reuses is that read's source);
 *   - a failed SSD write keeps the tensor's previous copy and the caller's memory;
 *   - a stream-ordered host-tier write (a `done` event) completes while its fence is held,
 *     records `done` after its copies (the device memory may be overwritten after it), and a
 *     read of its copy is ordered after those copies on the H2D stream;
 *   - staged SSD writes whose fences have passed reach the SSD while a host-tier write and an
 *     urgent SSD write submitted after them still wait for a later fence (staging has copy
 *     streams of its own and stages writes in submission order);
 *   - an engine made on device 1 copies on device 1's streams, whatever device the thread
 *     that submits has, and gives that thread its device back;
 *   - without a usable CUDA device, device memory is refused at once.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <teraio/io.h>

#include "../tio_test.h"
#include "common/common_impl.h"
#include "dl/cudart_shim.h"
#include "io/engine_ordered.h"
#include "io/fake_cuda.h"
#include "io/io_util.h"

static struct fake_cuda fc;
static char g_dir[512];
static const char *g_dirv[1] = { g_dir };

/* ---- a gate: a host function that holds its stream until opened ------------------------- */
static atomic_int g_gate, g_gate2;
static void gate_fn(void *arg) {
    atomic_int *gate = arg ? arg : &g_gate; /* NULL: g_gate */
    /* opens itself after 5 s, so that an engine that waits for the stream under its lock makes
     * the test fail instead of hang */
    for (int i = 0; i < 25000 && !atomic_load(gate); i++) {
        struct timespec ts = { 0, 200000 };
        nanosleep(&ts, NULL);
    }
}

static struct tio_engine *engine(const char *backend, uint64_t host_bytes, int ssd) {
    struct tio_engine_params p = io_params(backend, ssd ? g_dirv : NULL, ssd ? 1 : 0);
    p.host_tier_bytes = host_bytes;
    p.chunk_bytes = 64 * 1024; /* pieces of 64 KiB: a tensor takes several trips of the ring */
    p.preallocate = 0;
    struct tio_engine *e = NULL;
    int rc = tio_engine_new(&p, &e);
    if (rc < 0) /* a failure of the case that asked for it (its checks cannot run) */
        TIO_T_FAIL("engine: %s: %s", tio_strerror(rc), tio_last_error());
    return e;
}

#define N ((1u << 20) + 12345u)

static void *dev_alloc(uint64_t n) {
    void *d = NULL;
    CHECK_EQ_I(fc.malloc_device(&d, n), 0);
    return d;
}

static void *new_event(void) {
    void *ev = NULL;
    CHECK_EQ_I(fc.event_create(&ev, TIO_CUDA_EVENT_DISABLE_TIMING), 0);
    return ev;
}

/* Bytes a read stages ahead of its fence: the H2D ring of an engine of depth 16 with 64 KiB
 * pieces is 16 buffers, one per op slot (engine_gpu.c). A larger read completes once the GPU
 * passed its fence. */
#define RING_BYTES (16u * 64u * 1024u)
#define SMALL      (RING_BYTES - 5000u)

/* Write `seed` bytes (n) of tensor id from device memory on tier, fenced by an event recorded
 * on a stream after a producer that fills the memory behind a gate: the write waits for it.
 * Then read them back into other memory with a fence held by a gate: a read that fits the
 * staging ring completes before the gate opens (its SSD stage ran), its bytes land after. */
static void round_trip(struct tio_engine *e, int32_t tier, uint64_t id, uint64_t seed, uint64_t n) {
    void *s = NULL, *d = dev_alloc(n), *d2 = dev_alloc(n), *fence = new_event(),
         *done = new_event();
    CHECK_EQ_I(fc.stream_create(&s, TIO_CUDA_STREAM_NON_BLOCKING), 0);
    REQUIRE(s && d && d2 && fence && done);
    unsigned char *sh2 = fc.translate(d2, n);
    memset(sh2, 0, n);
    atomic_store(&g_gate, 0);
    struct io_fill_arg f = { fc.translate(d, n), n, seed };
    memset(f.shadow, 0xEE, n);
    CHECK_EQ_I(fc.launch_host_func(s, gate_fn, NULL), 0);
    CHECK_EQ_I(fc.launch_host_func(s, io_fill_fn, &f), 0);
    CHECK_EQ_I(fc.event_record(fence, s), 0);
    CHECK_OK(io_write(e, id, d, n, TIO_MEM_DEVICE, tier, TIO_PRIO_NORMAL, 1, fence));
    struct tio_completion c;
    CHECK_EQ_I(tio_engine_wait(e, &c, 1, 1, 50000000), 0); /* held by the gate */
    atomic_store(&g_gate, 1);
    c = io_wait1(e);
    CHECK_EQ_U(c.tag, 1);
    CHECK_EQ_I(c.res, (int64_t)n);
    atomic_store(&g_gate, 0);
    CHECK_EQ_I(fc.launch_host_func(s, gate_fn, NULL), 0);
    CHECK_EQ_I(fc.event_record(fence, s), 0);
    CHECK_OK(io_read(e, id, d2, n, TIO_MEM_DEVICE, TIO_PRIO_NORMAL, 2, fence, done));
    int ahead = tier == TIO_TIER_HOST || n <= RING_BYTES; /* the pool needs no ring */
    if (ahead) {
        c = io_wait1(e);
    } else { /* the ring cannot hold it: it completes only once the GPU passed the fence */
        CHECK_EQ_I(tio_engine_wait(e, &c, 1, 1, 50000000), 0);
        CHECK(sh2[0] == 0 && sh2[n - 1] == 0);
        atomic_store(&g_gate, 1);
        c = io_wait1(e);
    }
    CHECK_EQ_U(c.tag, 2);
    CHECK_EQ_I(c.res, (int64_t)n);
    int untouched = 1;
    for (uint64_t i = 0; i < n && ahead; i += 4096)
        untouched &= sh2[i] == 0;
    CHECK(untouched); /* nothing landed before the fence */
    CHECK_EQ_I(fc.stream_wait_event(s, done, 0), 0);
    atomic_store(&g_gate, 1);
    CHECK_EQ_I(fc.stream_synchronize(s), 0);
    CHECK(io_check(sh2, n, seed));
    CHECK_EQ_I(fc.stream_destroy(s), 0);
    CHECK_EQ_I(fc.event_destroy(fence), 0);
    CHECK_EQ_I(fc.event_destroy(done), 0);
    CHECK_EQ_I(fc.free_device(d), 0);
    CHECK_EQ_I(fc.free_device(d2), 0);
}

TIO_TEST(ssd_only_takes_device_memory_and_done) {
    fc.set_lag(100, 1);
    struct tio_engine *e = engine("posix", 0, 1);
    REQUIRE(e != NULL);
    round_trip(e, TIO_TIER_SSD, 1, 11, SMALL);
    round_trip(e, TIO_TIER_SSD, 1, 12, N); /* again over the same tensor: replaced, read again */
    struct tio_engine_stats st;
    CHECK_OK(tio_engine_stats(e, &st));
    CHECK_EQ_U(st.requests_failed, 0);
    tio_engine_free(e);
    fc.set_lag(0, 0);
}

TIO_TEST(host_only_and_both_tiers) {
    fc.set_lag(100, 2);
    struct tio_engine *e = engine("posix", 8u << 20, 0);
    if (e) {
        round_trip(e, TIO_TIER_HOST, 1, 21, N); /* the pool needs no ring: read ahead whole */
        tio_engine_free(e);
    }
    e = engine("posix", 8u << 20, 1);
    if (e) {
        round_trip(e, TIO_TIER_HOST, 1, 31, SMALL);
        round_trip(e, TIO_TIER_SSD, 2, 32, SMALL);
        round_trip(e, TIO_TIER_SSD, 3, 33, N);
        tio_engine_free(e);
    }
    fc.set_lag(0, 0);
}

/* A write into the pool reuses the extent a read's device copy still reads (the read has
 * completed: its copy is only queued): it must wait for that copy, whether it copies host
 * memory (on the host) or device memory (on the D2H stream). */
static void pool_reuse(int32_t mem2) {
    uint64_t fails = 0;
    for (uint64_t round = 0; round < 8; round++) {
        fc.set_lag(300, 3 + round);
        struct tio_engine *e = engine("posix", 2u << 20, 0);
        void *d = dev_alloc(N), *d2 = dev_alloc(N), *done = new_event(), *s = NULL;
        CHECK_EQ_I(fc.stream_create(&s, TIO_CUDA_STREAM_NON_BLOCKING), 0);
        unsigned char *h = malloc(N);
        REQUIRE_OR(e && d && d2 && done && s && h, (free(h), tio_engine_free(e)));
        io_fill(h, N, 41);
        CHECK_OK(io_write(e, 1, h, N, TIO_MEM_HOST, TIO_TIER_HOST, TIO_PRIO_NORMAL, 1, NULL));
        CHECK_EQ_I(io_wait1(e).res, (int64_t)N);
        CHECK_OK(io_read(e, 1, d, N, TIO_MEM_DEVICE, TIO_PRIO_NORMAL, 2, NULL, done));
        CHECK_EQ_I(io_wait1(e).res, (int64_t)N); /* issued; the copy may still be queued */
        CHECK_OK(tio_engine_drop(e, 1));
        io_fill(h, N, 42); /* tensor 2 takes the freed extent */
        io_fill(fc.translate(d2, N), N, 42);
        CHECK_OK(io_write(e, 2, mem2 == TIO_MEM_HOST ? (void *)h : d2, N, mem2, TIO_TIER_HOST,
                          TIO_PRIO_NORMAL, 3, NULL));
        CHECK_EQ_I(io_wait1(e).res, (int64_t)N);
        CHECK_EQ_I(fc.stream_wait_event(s, done, 0), 0);
        CHECK_EQ_I(fc.stream_synchronize(s), 0);
        fails += !io_check(fc.translate(d, N), N, 41);
        free(h);
        tio_engine_free(e);
        CHECK_EQ_I(fc.stream_destroy(s), 0);
        CHECK_EQ_I(fc.event_destroy(done), 0);
        CHECK_EQ_I(fc.free_device(d), 0);
        CHECK_EQ_I(fc.free_device(d2), 0);
    }
    CHECK_EQ_U(fails, 0);
    fc.set_lag(0, 0);
}

TIO_TEST(pool_write_waits_for_queued_pool_reads) {
    pool_reuse(TIO_MEM_HOST);
}

TIO_TEST(pool_device_write_waits_for_queued_pool_reads) {
    pool_reuse(TIO_MEM_DEVICE);
}

/* A host-tier write with a done event completes once its copies are queued (its fence is still
 * held by a gate); `done` completes after them: the device memory, overwritten by work ordered
 * after `done`, leaves the stored copy intact; a read issued at once, with no fence, lands the
 * written bytes (the engine orders it after the write's copies), with no two copies unordered. */
TIO_TEST(ordered_write_releases_in_stream_order) {
    uint64_t races0 = fc.copy_races(), fails = 0;
    for (uint64_t round = 0; round < 6; round++) {
        fc.set_lag(300, 70 + round);
        struct tio_engine *e = engine("posix", 4u << 20, round % 2);
        void *d = dev_alloc(N), *d2 = dev_alloc(N), *fence = new_event(), *done = new_event(),
             *done2 = new_event(), *s = NULL;
        CHECK_EQ_I(fc.stream_create(&s, TIO_CUDA_STREAM_NON_BLOCKING), 0);
        REQUIRE_OR(e && d && d2 && fence && done && done2 && s, tio_engine_free(e));
        memset(fc.translate(d2, N), 0, N);
        struct io_fill_arg f1 = { fc.translate(d, N), N, 61 }, f2 = { fc.translate(d, N), N, 62 };
        atomic_store(&g_gate, 0);
        CHECK_EQ_I(fc.launch_host_func(s, gate_fn, NULL), 0);
        CHECK_EQ_I(fc.launch_host_func(s, io_fill_fn, &f1), 0);
        CHECK_EQ_I(fc.event_record(fence, s), 0);
        struct tio_engine_write_request w = { .struct_size = sizeof w,
                                              .tensor_id = 9,
                                              .src = d,
                                              .bytes = N,
                                              .mem = TIO_MEM_DEVICE,
                                              .tier = TIO_TIER_SSD,
                                              .priority = TIO_PRIO_NORMAL,
                                              .tag = 9,
                                              .fence = fence };
        if (round == 0) /* only the host tier takes a done event */
            CHECK_EQ_I(tio_eng_write_ordered(e, &w, done), TIO_EINVAL);
        w.tensor_id = 1;
        w.tier = TIO_TIER_HOST;
        w.tag = 1;
        if (round == 0) { /* and only device memory */
            w.mem = TIO_MEM_HOST;
            CHECK_EQ_I(tio_eng_write_ordered(e, &w, done), TIO_EINVAL);
            w.mem = TIO_MEM_DEVICE;
        }
        CHECK_OK(tio_eng_write_ordered(e, &w, done));
        struct tio_completion c;
        CHECK_EQ_I(tio_engine_wait(e, &c, 1, 1, 2000000000), 1); /* with the gate closed */
        CHECK_EQ_I(c.res, (int64_t)N);
        CHECK_EQ_I(atomic_load(&g_gate), 0);
        /* stream order: the memory is overwritten by work queued after `done` */
        CHECK_EQ_I(fc.stream_wait_event(s, done, 0), 0);
        CHECK_EQ_I(fc.launch_host_func(s, io_fill_fn, &f2), 0);
        CHECK_OK(io_read(e, 1, d2, N, TIO_MEM_DEVICE, TIO_PRIO_NORMAL, 2, NULL, done2));
        CHECK_EQ_I(io_wait1(e).res, (int64_t)N);
        atomic_store(&g_gate, 1);
        CHECK_EQ_I(fc.stream_wait_event(s, done2, 0), 0);
        CHECK_EQ_I(fc.stream_synchronize(s), 0);
        fails += !io_check(fc.translate(d2, N), N, 61);
        tio_engine_free(e);
        CHECK_EQ_I(fc.stream_destroy(s), 0);
        CHECK_EQ_I(fc.event_destroy(fence), 0);
        CHECK_EQ_I(fc.event_destroy(done), 0);
        CHECK_EQ_I(fc.event_destroy(done2), 0);
        CHECK_EQ_I(fc.free_device(d), 0);
        CHECK_EQ_I(fc.free_device(d2), 0);
    }
    CHECK_EQ_U(fails, 0);
    CHECK_EQ_U(fc.copy_races(), races0);
    fc.set_lag(0, 0);
}

/* A failed SSD write (the fault backend) completes with an error: the previous copy stays
 * readable and the caller still has its memory (nothing was freed on its behalf). */
TIO_TEST(failed_write_keeps_the_previous_copy) {
    struct tio_engine_params p = io_params("fault", g_dirv, 1);
    p.chunk_bytes = 64 * 1024;
    p.preallocate = 0;
    p.retries = 0;
    p.backend_options = "write_fail=20";
    struct tio_engine *e = NULL;
    CHECK_OK(tio_engine_new(&p, &e));
    void *d = dev_alloc(N), *d2 = dev_alloc(N);
    REQUIRE(e && d && d2);
    io_fill(fc.translate(d, N), N, 51);
    CHECK_OK(io_write(e, 1, d, N, TIO_MEM_DEVICE, TIO_TIER_SSD, TIO_PRIO_NORMAL, 1, NULL));
    CHECK_EQ_I(io_wait1(e).res, (int64_t)N); /* 17 pieces: writes 1..17 */
    io_fill(fc.translate(d, N), N, 52);
    CHECK_OK(io_write(e, 1, d, N, TIO_MEM_DEVICE, TIO_TIER_SSD, TIO_PRIO_NORMAL, 2, NULL));
    CHECK(io_wait1(e).res < 0);                 /* its third piece fails */
    CHECK(io_check(fc.translate(d, N), N, 52)); /* the caller's bytes are untouched */
    CHECK_OK(io_read(e, 1, d2, N, TIO_MEM_DEVICE, TIO_PRIO_NORMAL, 3, NULL, NULL));
    CHECK_EQ_I(io_wait1(e).res, (int64_t)N);
    CHECK(io_check(fc.translate(d2, N), N, 51)); /* the previous copy */
    tio_engine_free(e);
    CHECK_EQ_I(fc.free_device(d), 0);
    CHECK_EQ_I(fc.free_device(d2), 0);
}

/* The staging ring is full of the pieces of write C, held by its fence (gate 1). Then a
 * host-tier write H and an urgent SSD write B whose fences wait for gate 2, with a normal SSD
 * write A between them. Once gate 1 opens, C's last piece and A are staged as buffers free up:
 * they must reach the SSD while gate 2 is still closed. On one D2H stream shared with the pool,
 * their copies would queue behind H's wait for gate 2; staged in priority order, behind B's. */
TIO_TEST(staged_writes_pass_later_fences) {
    struct tio_engine *e = engine("posix", 4u << 20, 1);
    void *dc = dev_alloc(N), *dh = dev_alloc(SMALL), *da = dev_alloc(SMALL), *db = dev_alloc(SMALL),
         *f1 = new_event(), *f2 = new_event(), *s1 = NULL, *s2 = NULL;
    CHECK_EQ_I(fc.stream_create(&s1, TIO_CUDA_STREAM_NON_BLOCKING), 0);
    CHECK_EQ_I(fc.stream_create(&s2, TIO_CUDA_STREAM_NON_BLOCKING), 0);
    REQUIRE_OR(e && dc && dh && da && db && f1 && f2 && s1 && s2, tio_engine_free(e));
    io_fill(fc.translate(dc, N), N, 71);
    io_fill(fc.translate(dh, SMALL), SMALL, 72);
    io_fill(fc.translate(da, SMALL), SMALL, 73);
    io_fill(fc.translate(db, SMALL), SMALL, 74);
    atomic_store(&g_gate, 0);
    atomic_store(&g_gate2, 0);
    CHECK_EQ_I(fc.launch_host_func(s1, gate_fn, &g_gate), 0);
    CHECK_EQ_I(fc.event_record(f1, s1), 0);
    CHECK_EQ_I(fc.launch_host_func(s2, gate_fn, &g_gate2), 0);
    CHECK_EQ_I(fc.event_record(f2, s2), 0);
    CHECK_OK(io_write(e, 1, dc, N, TIO_MEM_DEVICE, TIO_TIER_SSD, TIO_PRIO_NORMAL, 1, f1));
    struct tio_completion c[4];
    CHECK_EQ_I(tio_engine_wait(e, c, 1, 1, 50000000), 0); /* C fills the ring, held by gate 1 */
    CHECK_OK(io_write(e, 2, dh, SMALL, TIO_MEM_DEVICE, TIO_TIER_HOST, TIO_PRIO_NORMAL, 2, f2));
    CHECK_OK(io_write(e, 3, da, SMALL, TIO_MEM_DEVICE, TIO_TIER_SSD, TIO_PRIO_NORMAL, 3, NULL));
    CHECK_OK(io_write(e, 4, db, SMALL, TIO_MEM_DEVICE, TIO_TIER_SSD, TIO_PRIO_URGENT, 4, f2));
    atomic_store(&g_gate, 1);
    uint64_t got = 0;
    int n = tio_engine_wait(e, c, 2, 2, 2000000000); /* gate 2 opens itself after 5 s */
    for (int i = 0; i < n; i++) {
        got |= 1u << c[i].tag;
        CHECK_EQ_I(c[i].res, (int64_t)(c[i].tag == 1 ? N : SMALL));
    }
    CHECK_EQ_I(n, 2);
    CHECK_EQ_U(got, (1u << 1) | (1u << 3)); /* C and A, while H and B wait for gate 2 */
    atomic_store(&g_gate2, 1);
    n = tio_engine_wait(e, c, 2, 2, WAIT_NS);
    CHECK_EQ_I(n, 2);
    for (int i = 0; i < n; i++)
        CHECK_EQ_I(c[i].res, (int64_t)SMALL);
    void *r = dev_alloc(N);
    const uint64_t size[4] = { N, SMALL, SMALL, SMALL }, seed[4] = { 71, 72, 73, 74 };
    for (uint64_t id = 1; id <= 4 && r; id++) { /* each stored copy is what it wrote */
        CHECK_OK(
            io_read(e, id, r, size[id - 1], TIO_MEM_DEVICE, TIO_PRIO_NORMAL, 10 + id, NULL, NULL));
        CHECK_EQ_I(io_wait1(e).res, (int64_t)size[id - 1]);
        CHECK(io_check(fc.translate(r, size[id - 1]), size[id - 1], seed[id - 1]));
    }
    tio_engine_free(e);
    CHECK_EQ_I(fc.stream_destroy(s1), 0);
    CHECK_EQ_I(fc.stream_destroy(s2), 0);
    CHECK_EQ_I(fc.event_destroy(f1), 0);
    CHECK_EQ_I(fc.event_destroy(f2), 0);
    void *mem[5] = { dc, dh, da, db, r };
    for (int i = 0; i < 5; i++)
        CHECK_EQ_I(fc.free_device(mem[i]), 0);
}

/* An engine made while device 1 is current (a second rank's) moves device 1's memory on copy
 * streams of device 1, whatever device the calling thread has when it submits: no copy crosses
 * devices and every event is recorded on a stream of its own device (the fake fails a record
 * across devices, as CUDA does). */
TIO_TEST(engine_is_bound_to_its_device) {
    CHECK_EQ_I(fc.set_device(1), 0);
    struct tio_engine *e = engine("posix", 8u << 20, 1);
    uint64_t cross0 = fc.cross_device_copies();
    fc.set_lag(50, 7);
    if (e) { /* the caller's memory, streams and events are device 1's (round_trip makes them) */
        CHECK_EQ_I(fc.set_device(1), 0);
        round_trip(e, TIO_TIER_HOST, 1, 61, SMALL);
        round_trip(e, TIO_TIER_SSD, 2, 62, N);
        /* a read without done settles on an event the engine makes: of its device too */
        void *d = dev_alloc(SMALL);
        CHECK_EQ_I(fc.set_device(0), 0); /* the submitting thread is elsewhere now */
        CHECK_OK(io_read(e, 1, d, SMALL, TIO_MEM_DEVICE, TIO_PRIO_NORMAL, 3, NULL, NULL));
        CHECK_EQ_I(io_wait1(e).res, (int64_t)SMALL);
        CHECK(io_check(fc.translate(d, SMALL), SMALL, 61));
        int cur = -1;
        CHECK_EQ_I(fc.get_device(&cur), 0);
        CHECK_EQ_I(cur, 0); /* the engine handed the caller its device back */
        CHECK_EQ_I(fc.set_device(1), 0);
        CHECK_EQ_I(fc.free_device(d), 0);
        tio_engine_free(e);
    }
    CHECK_EQ_U(fc.cross_device_copies(), cross0);
    CHECK_EQ_I(fc.set_device(0), 0);
    fc.set_lag(0, 0);
}

static int no_device_count(int *count) {
    *count = 0;
    return 35;
}
static const char *no_device_string(int err) {
    (void)err;
    return "CUDA driver version is insufficient";
}

TIO_TEST(device_memory_needs_a_usable_device) {
    struct tio_cudart_api none = { 0 };
    none.get_device_count = no_device_count;
    none.get_error_string = no_device_string;
    tio_cudart_set_api(&none);
    struct tio_engine *e = engine("posix", 1u << 20, 1);
    static unsigned char buf[8192];
    if (e) {
        CHECK_RC(
            io_write(e, 1, buf, sizeof buf, TIO_MEM_DEVICE, TIO_TIER_SSD, TIO_PRIO_NORMAL, 1, NULL),
            TIO_EUNAVAIL);
        CHECK_ERR_HAS("usable CUDA device");
        CHECK_RC(io_write(e, 1, buf, sizeof buf, TIO_MEM_DEVICE, TIO_TIER_HOST, TIO_PRIO_NORMAL, 1,
                          NULL),
                 TIO_EUNAVAIL);
        CHECK_OK(
            io_write(e, 1, buf, sizeof buf, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 1, NULL));
        CHECK_EQ_I(io_wait1(e).res, (int64_t)sizeof buf);
        CHECK_RC(io_read(e, 1, buf, sizeof buf, TIO_MEM_DEVICE, TIO_PRIO_NORMAL, 2, NULL, buf),
                 TIO_EINVAL); /* a done event without a device */
        tio_engine_free(e);
    }
    tio_cudart_set_api(NULL);
}

int main(void) {
    if (setenv("FAKE_CUDA_DEVICES", "2", 1) != 0 || fake_cuda_load(&fc) < 0)
        return 1;
    io_mkdtemp(g_dir, sizeof g_dir, "gpupath");
    uint64_t bad0 = fc.bad_accesses(), blocking0 = fc.blocking_copies();
    uint64_t streams0 = fc.live_streams();
    RUN(ssd_only_takes_device_memory_and_done);
    RUN(host_only_and_both_tiers);
    RUN(pool_write_waits_for_queued_pool_reads);
    RUN(pool_device_write_waits_for_queued_pool_reads);
    RUN(ordered_write_releases_in_stream_order);
    RUN(failed_write_keeps_the_previous_copy);
    RUN(staged_writes_pass_later_fences);
    RUN(engine_is_bound_to_its_device);
    RUN(device_memory_needs_a_usable_device);
    CHECK_EQ_U(fc.bad_accesses(), bad0);
    CHECK_EQ_U(fc.blocking_copies(), blocking0); /* the engine copies on non-blocking streams */
    CHECK_EQ_U(fc.live_streams(), streams0);     /* every engine destroyed its streams */
    CHECK(rmdir(g_dir) == 0);
    return tio_test_done();
}
