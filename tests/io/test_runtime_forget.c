/*
 * tio_runtime_forget under the lagging-GPU emulator: an intermediate the caller frees while the
 * executor's offload of it may still be copying its bytes. The trace keeps A alive until its free
 * marker (kernel 6) after its last real use (kernel 2); the plan offloads it after kernel 2, to
 * the host tier or the SSDs. The caller forgets A at kernel 3 or 4, in random delay schedules,
 * and hands A's block at once to B, which kernel 4 writes: forget must not return before the copy
 * reading A's bytes has completed and been seen by the host, or the copy races with B's kernel
 * (the emulator's happens-before check, fake_cuda_racing_copies).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <teraio/io.h>
#include <teraio/plan.h>
#include <teraio/runtime.h>
#include <teraio/trace.h>

#include "io/fake_cuda.h"
#include "io/io_util.h"
#include "io/runtime_util.h"
#include "tio_test.h"

#define KiB       UINT64_C(1024)
#define NK        8
#define SCHEDULES 240

static struct fake_cuda fc;
static atomic_uint_fast64_t g_races;

enum { W, A, B, NT };
static const uint64_t bytes_of[NT] = { 64 * KiB, 128 * KiB, 128 * KiB };

static struct tio_trace *make_trace(void) {
    struct tio_trace *tr = NULL;
    if (tio_trace_new(NULL, &tr) < 0)
        return NULL;
    int rc = tio_trace_add_tensor(tr, bytes_of[W], TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, "W", NULL);
    rc |= tio_trace_add_tensor(tr, bytes_of[A], TIO_TENSOR_ACTIVATION, 0, "A", NULL);
    rc |= tio_trace_add_tensor(tr, bytes_of[B], TIO_TENSOR_ACTIVATION, 0, "B", NULL);
    static const struct {
        int t;
        int32_t mode;
        const char *name;
    } k[NK] = {
        { W, TIO_USE_READ_WRITE, "k" },
        { A, TIO_USE_WRITE, "k" },
        { A, TIO_USE_READ, "k" },
        { W, TIO_USE_READ, "k" },
        { B, TIO_USE_WRITE, "k" },
        { B, TIO_USE_READ, "k" },
        { A, TIO_USE_WRITE, TIO_RUNTIME_FREE_KERNEL },
        { W, TIO_USE_READ, "k" },
    };
    for (int i = 0; i < NK; i++) {
        rc |= tio_trace_add_kernel(tr, k[i].name, 100000, 0, NULL);
        rc |= tio_trace_add_use(tr, (uint32_t)k[i].t, k[i].mode);
    }
    return rt_trace_finish(tr, rc);
}

static struct tio_plan *make_plan(const struct tio_trace *tr, int32_t tier) {
    const struct tio_move m = { .tensor = A,
                                .from = TIO_TIER_GPU,
                                .to = tier,
                                .trigger = 3,
                                .deadline = 6,
                                .bytes = bytes_of[A] };
    return rt_plan(tr, NK, &m, 1);
}

/* A kernel writing B's bytes: no copy may touch them unordered. */
struct kern {
    void *dev;
    uint64_t n;
};
static void kernel_fn(void *u) {
    struct kern *k = u;
    if (fc.racing_copies(k->dev, k->n, 1))
        atomic_fetch_add(&g_races, 1);
    free(k);
}

static int launch(void *stream, void *dev, uint64_t n) {
    struct kern *k = malloc(sizeof *k);
    if (!k)
        return -1;
    *k = (struct kern){ dev, n };
    if (fc.launch_host_func(stream, kernel_fn, k) != 0) {
        free(k);
        return -1;
    }
    return 0;
}

/* One step of the trace; A is forgotten before kernel `at` and its block goes to B. */
static int step(struct tio_runtime *rt, void *stream, unsigned char *slab, uint32_t at) {
    struct tio_runtime_action act[NT];
    unsigned char *mem[NT] = { slab, slab + 256 * KiB, slab + 512 * KiB };
    int forgotten = 0;
    int n = tio_runtime_begin_iteration(rt, act, NT);
    for (uint32_t k = 0; k < NK && n >= 0; k++) {
        for (int i = 0; i < n; i++)
            if (act[i].kind != TIO_RUNTIME_RELEASE &&
                tio_runtime_bind(rt, act[i].tensor, mem[act[i].tensor]) < 0)
                return -1;
        if ((n = tio_runtime_before_kernel(rt, k, act, NT)) < 0)
            return n;
        for (int i = 0; i < n; i++)
            if (act[i].kind != TIO_RUNTIME_RELEASE &&
                tio_runtime_bind(rt, act[i].tensor, mem[act[i].tensor]) < 0)
                return -1;
        n = 0;
        if (k == at) { /* the owner frees A: its block is B's from now on */
            if (tio_runtime_forget(rt, A) < 0)
                return -1;
            forgotten = 1;
            mem[B] = mem[A];
        }
        if (tio_runtime_ready(rt, k) < 0)
            return -1;
        if (k == 6) { /* A's free marker: no kernel */
        } else if (launch(stream,
                          k == 4 || k == 5   ? mem[B]
                          : k == 1 || k == 2 ? mem[A]
                                             : mem[W],
                          k == 4 || k == 5   ? bytes_of[B]
                          : k == 1 || k == 2 ? bytes_of[A]
                                             : bytes_of[W]) < 0) {
            return -1;
        }
        if ((k == 1 || k == 4) &&
            tio_runtime_bind(rt, k == 1 ? A : B, k == 1 ? mem[A] : mem[B]) < 0)
            return -1;
        if (tio_runtime_after_kernel(rt, k) < 0)
            return -1;
    }
    if (n < 0 || !forgotten)
        return -1;
    n = tio_runtime_end_iteration(rt, act, NT);
    return n < 0 ? n : 0;
}

TIO_TEST(forget_waits_for_the_copy_of_its_bytes) {
    char dir[512];
    io_mkdtemp(dir, sizeof dir, "forget");
    struct tio_trace *tr = make_trace();
    struct tio_plan *plans[2] = { tr ? make_plan(tr, TIO_TIER_HOST) : NULL,
                                  tr ? make_plan(tr, TIO_TIER_SSD) : NULL };
    struct tio_engine *e = rt_engine(dir, "cuda", NULL, 1024 * KiB);
    void *slab = NULL, *stream = NULL;
    CHECK(tr && plans[0] && plans[1] && e);
    CHECK_EQ_I(fc.malloc_device(&slab, 1024 * KiB), 0);
    CHECK_EQ_I(fc.stream_create(&stream, 1), 0);
    uint64_t offloads = 0, failures = 0;
    for (uint64_t s = 1; s <= SCHEDULES && tr && plans[0] && plans[1] && e && slab; s++) {
        static const unsigned lags[] = { 0, 20, 100, 300 };
        fc.set_lag(lags[s % 4], s);
        struct tio_runtime_params rp = rt_params(tr, plans[s % 2], e);
        rp.mem = TIO_MEM_DEVICE;
        rp.stream = stream;
        rp.stream_ordered = 1;
        struct tio_runtime *rt = NULL;
        if (tio_runtime_new(&rp, &rt) < 0 || tio_runtime_bind(rt, W, slab) < 0 ||
            step(rt, stream, slab, 3 + (uint32_t)(s / 2 % 2)) < 0) {
            if (failures++ == 0)
                printf("  schedule %llu: %s\n", (unsigned long long)s, tio_last_error());
        }
        if (rt) {
            struct tio_runtime_stats st;
            tio_runtime_get_stats(rt, &st);
            offloads += st.offloads;
        }
        (void)fc.stream_synchronize(stream);
        tio_runtime_free(rt);
        (void)fc.device_synchronize();
    }
    fc.set_lag(0, 0);
    printf("  %d schedules, %llu offloads, %llu races\n", SCHEDULES, (unsigned long long)offloads,
           (unsigned long long)atomic_load(&g_races));
    CHECK_EQ_U(failures, 0);
    CHECK(offloads >= SCHEDULES / 2); /* A's offload ran (or was in flight at forget) */
    CHECK_EQ_U(atomic_load(&g_races), 0);
    CHECK_EQ_I(fc.stream_destroy(stream), 0);
    CHECK_EQ_I(fc.free_device(slab), 0);
    tio_plan_free(plans[0]);
    rt_free_inputs(plans[1], e, tr);
    (void)rmdir(dir);
}

int main(void) {
    if (fake_cuda_load(&fc) < 0)
        return 1;
    RUN(forget_waits_for_the_copy_of_its_bytes);
    return tio_test_done();
}
