/*
 * The cufile backend's use of libcufile's optional calls (src/io/backend_cufile.c) against the
 * fake libcufile (tests/io/fakes/fake_cufile.c) and the lagging fake cudart:
 *
 *   - with the stream API (libtio_fake_cufile.so): device memory moves through
 *     cuFileReadAsync/cuFileWriteAsync on the workers' registered streams, not cuFileRead/
 *     cuFileWrite; a request completes only after its stream ran the operation (the fake reads
 *     the parameters and moves the bytes then, after a random lag); every stream is
 *     deregistered when the engine is freed;
 *   - an asynchronous call that fails falls back to the synchronous ones, bytes intact;
 *   - a request's fence (a CUDA event the producer's stream records) is waited for by the
 *     worker's stream, not polled by the engine: the request reaches cuFile while the fence is
 *     held, completes only after it, a write stores what the producer wrote, a read's bytes land
 *     only after it (synchronous calls: the worker waits for the fence on the host);
 *   - without the stream API (TIO_CUFILE_LIB=libtio_fake_cufile_sync.so, the ctest
 *     test_io_cufile_sync, TIO_TEST_CUFILE_SYNC=1): the synchronous calls, nothing registered.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <teraio/io.h>

#include "../tio_test.h"
#include "dl/cudart_shim.h"
#include "io/fake_cuda.h"
#include "io/io_util.h"

static struct fake_cuda fc;
static char g_dir[512];
static const char *g_dirv[1] = { g_dir };
static uint64_t (*io_calls)(void), (*async_calls)(void);
static int (*registered)(int streams);
static void (*set_async_error)(int e);
static int g_sync_only;

/* The fake cufile's hooks, from the library the shim loaded. 0 or -1. */
static int load_cufile_hooks(void) {
    const char *path = getenv("TIO_CUFILE_LIB");
    void *lib = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    void *a = lib ? dlsym(lib, "fake_cufile_io_calls") : NULL;
    void *b = lib ? dlsym(lib, "fake_cufile_async_calls") : NULL;
    void *c = lib ? dlsym(lib, "fake_cufile_registered") : NULL;
    void *d = lib ? dlsym(lib, "fake_cufile_set_async_error") : NULL;
    if (!a || !b || !c || !d) {
        printf("  the fake cufile is not loadable (TIO_CUFILE_LIB=%s)\n", path ? path : "unset");
        return -1;
    }
    memcpy(&io_calls, &a, sizeof a);
    memcpy(&async_calls, &b, sizeof b);
    memcpy(&registered, &c, sizeof c);
    memcpy(&set_async_error, &d, sizeof d);
    return 0;
}

/* Write n device bytes of pattern `seed` through a cufile engine and read them back into other
 * device memory, streams lagging; 1 if the bytes came back without a transfer reissued.
 * *streams: streams registered while the engine lived. */
static int roundtrip(uint64_t seed, int *streams) {
    const struct tio_cudart_api *cu = tio_cudart();
    struct tio_engine_params p = io_params("cufile", g_dirv, 1);
    p.chunk_bytes = 256 * 1024;
    p.threads = 2;
    struct tio_engine *e = NULL;
    if (tio_engine_new(&p, &e) != 0) {
        printf("  tio_engine_new(cufile): %s\n", tio_last_error());
        return 0;
    }
    *streams = registered(1);
    uint64_t n = (1u << 20) + 8192; /* four chunks and an aligned tail */
    void *d1 = NULL, *d2 = NULL;
    int ok = cu->malloc_device(&d1, n) == 0 && cu->malloc_device(&d2, n) == 0;
    if (ok) {
        io_fill(fc.translate(d1, n), n, seed);
        memset(fc.translate(d2, n), 0, n);
        fc.set_lag(1500, seed);
        ok = io_write(e, 1, d1, n, TIO_MEM_DEVICE, TIO_TIER_SSD, TIO_PRIO_NORMAL, 1, NULL) == 0 &&
             io_wait1(e).res == (int64_t)n &&
             io_read(e, 1, d2, n, TIO_MEM_DEVICE, TIO_PRIO_NORMAL, 2, NULL, NULL) == 0 &&
             io_wait1(e).res == (int64_t)n && io_check(fc.translate(d2, n), n, seed);
        fc.set_lag(0, 0);
    }
    struct tio_engine_stats st;
    ok = ok && tio_engine_stats(e, &st) == 0 && st.retries == 0; /* no failure on the way */
    tio_engine_free(e);
    (void)cu->free_device(d1);
    (void)cu->free_device(d2);
    return ok;
}

TIO_TEST(stream_api_where_the_library_has_it) {
    uint64_t s0 = io_calls(), a0 = async_calls();
    int streams = -1;
    CHECK(roundtrip(3, &streams));
    if (g_sync_only) {
        CHECK_EQ_I(streams, 0);
        CHECK(io_calls() > s0);
        CHECK_EQ_U(async_calls(), a0);
    } else {
        CHECK_EQ_I(streams, 2); /* one per worker */
        CHECK_EQ_U(io_calls(), s0);
        CHECK(async_calls() >= a0 + 8); /* 4 chunks written, 4 read */
    }
    CHECK_EQ_I(registered(1), 0); /* deregistered before the streams were destroyed */
}

TIO_TEST(failed_async_call_falls_back) {
    if (g_sync_only) {
        CHECK_EQ_U(async_calls(), 0); /* nothing to fail: the library lacks the calls */
        return;
    }
    uint64_t s0 = io_calls(), a0 = async_calls();
    set_async_error(5030); /* CU_FILE_IO_NOT_SUPPORTED */
    int streams = -1;
    CHECK(roundtrip(4, &streams));
    set_async_error(0);
    CHECK(async_calls() > a0);
    CHECK(io_calls() >= s0 + 8); /* the whole request went through cuFileRead/cuFileWrite */
    CHECK_EQ_I(registered(1), 0);
}

/* ---- a gate (a host function holding its stream until opened) and a producer ----------- */
static atomic_int g_gate;
static void gate_fn(void *arg) {
    (void)arg;
    for (int i = 0; i < 5000 && !atomic_load(&g_gate); i++) { /* opens itself after 5 s */
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
}
/* Wait up to 5 s for the fake to have queued more than `before` stream calls. */
static int async_queued(uint64_t before) {
    for (int i = 0; i < 5000 && async_calls() <= before; i++) {
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
    return async_calls() > before;
}

/* Nothing completes within 30 ms. */
static int no_completion(struct tio_engine *e) {
    struct tio_completion c;
    return tio_engine_wait(e, &c, 1, 1, 30000000) == 0;
}

TIO_TEST(fence_orders_the_transfer_on_the_gpu) {
    const struct tio_cudart_api *cu = tio_cudart();
    struct tio_engine_params p = io_params("cufile", g_dirv, 1);
    p.chunk_bytes = 256 * 1024;
    p.threads = 2;
    struct tio_engine *e = NULL;
    CHECK_OK(tio_engine_new(&p, &e));
    REQUIRE(e != NULL);
    uint64_t n = 1u << 20;
    void *d1 = NULL, *d2 = NULL, *ps = NULL, *ev = NULL;
    REQUIRE_OR(cu->malloc_device(&d1, n) == 0 && cu->malloc_device(&d2, n) == 0 &&
                   fc.stream_create(&ps, 1) == 0 && fc.event_create(&ev, 2) == 0,
               tio_engine_free(e));
    /* a write whose producer runs only once the gate opens: the fence follows the producer */
    io_fill(fc.translate(d1, n), n, 6);
    struct io_fill_arg f = { fc.translate(d1, n), n, 5 };
    atomic_store(&g_gate, 0);
    CHECK_EQ_I(fc.launch_host_func(ps, gate_fn, NULL), 0);
    CHECK_EQ_I(fc.launch_host_func(ps, io_fill_fn, &f), 0);
    CHECK_EQ_I(fc.event_record(ev, ps), 0);
    uint64_t a0 = async_calls();
    CHECK_OK(io_write(e, 1, d1, n, TIO_MEM_DEVICE, TIO_TIER_SSD, TIO_PRIO_NORMAL, 1, ev));
    if (!g_sync_only) {
        CHECK(async_queued(a0)); /* handed to cuFile before the fence completed */
    }
    CHECK(no_completion(e));
    atomic_store(&g_gate, 1);
    CHECK_EQ_I(io_wait1(e).res, (int64_t)n);
    /* a read behind a held fence: queued at once, the bytes land after the gate */
    memset(fc.translate(d2, n), 0, n);
    atomic_store(&g_gate, 0);
    CHECK_EQ_I(fc.launch_host_func(ps, gate_fn, NULL), 0);
    CHECK_EQ_I(fc.event_record(ev, ps), 0);
    a0 = async_calls();
    CHECK_OK(io_read(e, 1, d2, n, TIO_MEM_DEVICE, TIO_PRIO_NORMAL, 2, ev, NULL));
    if (!g_sync_only) {
        CHECK(async_queued(a0));
    }
    CHECK(no_completion(e));
    unsigned char *zero = calloc(1, n);
    CHECK(zero && memcmp(fc.translate(d2, n), zero, n) == 0); /* nothing landed yet */
    free(zero);
    atomic_store(&g_gate, 1);
    CHECK_EQ_I(io_wait1(e).res, (int64_t)n);
    CHECK(io_check(fc.translate(d2, n), n, 5)); /* what the producer wrote, not the old bytes */
    tio_engine_free(e);
    CHECK_EQ_I(fc.stream_synchronize(ps), 0);
    CHECK_EQ_I(fc.event_destroy(ev), 0);
    CHECK_EQ_I(fc.stream_destroy(ps), 0);
    CHECK_EQ_I(cu->free_device(d1), 0);
    CHECK_EQ_I(cu->free_device(d2), 0);
}

int main(void) {
    (void)setenv("TIO_CUDART_LIB", TIO_FAKE_CUDART_LIB, 0);
    (void)setenv("TIO_CUFILE_LIB", TIO_FAKE_CUFILE_LIB, 0);
    const char *so = getenv("TIO_TEST_CUFILE_SYNC");
    g_sync_only = so && *so == '1';
    if (fake_cuda_load(&fc) < 0 || load_cufile_hooks() < 0)
        return 1;
    io_mkdtemp(g_dir, sizeof g_dir, "cufile");
    uint64_t bad0 = fc.bad_accesses();
    RUN(stream_api_where_the_library_has_it);
    RUN(failed_async_call_falls_back);
    RUN(fence_orders_the_transfer_on_the_gpu);
    CHECK_EQ_U(fc.bad_accesses(), bad0);
    CHECK(rmdir(g_dir) == 0);
    return tio_test_done();
}
