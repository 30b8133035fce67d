/*
 * tio_runtime_forget under the lagging-GPU emulator: an intermediate the caller frees while the
 * executor's offload of it may still be copying its bytes. The trace keeps A alive until its free
 * marker (kernel 6) after its last real use (kernel 2); the plan offloads it after kernel 2, to
 * the host tier or the SSDs. The caller forgets A at kernel 3 or 4, in random delay schedules,
 * and hands A's block at once to B, which kernel 4 writes: forget must not return before the copy
 * reading A's bytes has completed and been seen by the host, or the copy races with B's kernel
 * (the emulator's happens-before check, fake_cuda_racing_copies).
 *
 * On the host path (no CUDA), the owner does not wait for forget: it drops an intermediate at
 * any time after its last real use (PyTorch frees the storage; the death is seen later), so
 * after_kernel of that use must leave no write reading the bytes, and an offload planned past
 * it must not write at all (the bytes are never read again): the memory is unmapped there.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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

/* Host path: D (1 MiB, in its own mapping) is written at k0, read at k2 (its last real use) and
 * freed at k4 (free marker); W is a global. */
enum { HW, HD, HNT };
#define HNK 6
static struct tio_trace *make_host_trace(void) {
    struct tio_trace *tr = NULL;
    if (tio_trace_new(NULL, &tr) < 0)
        return NULL;
    int rc = tio_trace_add_tensor(tr, 64 * KiB, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, "W", NULL);
    rc |= tio_trace_add_tensor(tr, 1024 * KiB, TIO_TENSOR_ACTIVATION, 0, "D", NULL);
    static const struct {
        int t;
        int32_t mode;
        const char *name;
    } k[HNK] = {
        { HD, TIO_USE_WRITE, "k" },
        { HW, TIO_USE_READ, "k" },
        { HD, TIO_USE_READ, "k" },
        { HW, TIO_USE_READ, "k" },
        { HD, TIO_USE_WRITE, TIO_RUNTIME_FREE_KERNEL },
        { HW, TIO_USE_READ, "k" },
    };
    for (int i = 0; i < HNK; i++) {
        rc |= tio_trace_add_kernel(tr, k[i].name, 100000, 0, NULL);
        rc |= tio_trace_add_use(tr, (uint32_t)k[i].t, k[i].mode);
    }
    return rt_trace_finish(tr, rc);
}

/* One step with D's offload triggered before kernel `trigger`; the owner unmaps D's memory right
 * after after_kernel(2) and the caller forgets D before the next kernel, as the PyTorch layer
 * does. *offloads_at_2: the completed offloads then; *released: RELEASE actions for D. */
static int host_step(uint32_t trigger,
                     uint64_t *offloads_at_2,
                     int *released,
                     struct tio_runtime_stats *st,
                     struct tio_engine_stats *es) {
    char dir[512];
    io_mkdtemp(dir, sizeof dir, "forget-host");
    struct tio_trace *tr = make_host_trace();
    const struct tio_move m = { .tensor = HD,
                                .from = TIO_TIER_GPU,
                                .to = TIO_TIER_SSD,
                                .trigger = trigger,
                                .deadline = HNK,
                                .bytes = 1024 * KiB };
    struct tio_plan *plan = tr ? rt_plan(tr, HNK, &m, 1) : NULL;
    /* every engine op sleeps 20 ms: the write is still in flight at kernel 2 */
    struct tio_engine *e = rt_engine(dir, "fault", "delay_us=20000", 0);
    static unsigned char w[64 * KiB];
    unsigned char *d =
        mmap(NULL, 1024 * KiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct tio_runtime *rt = NULL;
    int rc = -1;
    if (!tr || !plan || !e || d == MAP_FAILED)
        goto out;
    memset(d, 0x5a, 1024 * KiB);
    struct tio_runtime_params rp = rt_params(tr, plan, e);
    if (tio_runtime_new(&rp, &rt) < 0 || tio_runtime_bind(rt, HW, w) < 0)
        goto out;
    struct tio_runtime_action act[HNT];
    int n = tio_runtime_begin_iteration(rt, act, HNT);
    for (uint32_t k = 0; k < HNK && n >= 0; k++) {
        if ((n = tio_runtime_before_kernel(rt, k, act, HNT)) < 0)
            break;
        for (int i = 0; i < n; i++)
            *released += act[i].tensor == HD && act[i].kind == TIO_RUNTIME_RELEASE;
        if (tio_runtime_ready(rt, k) < 0)
            goto out;
        if (k == 0 && tio_runtime_bind(rt, HD, d) < 0)
            goto out;
        if (tio_runtime_after_kernel(rt, k) < 0)
            goto out;
        if (k == 2) {
            tio_runtime_get_stats(rt, st);
            *offloads_at_2 = st->offloads;
            if (trigger < 2) { /* the owner drops D now; its death is seen before kernel 3 */
                (void)munmap(d, 1024 * KiB);
                d = MAP_FAILED;
                if (tio_runtime_forget(rt, HD) < 0)
                    goto out;
            }
        }
        if (k == 3 && d != MAP_FAILED) { /* here the owner drops D before its free marker */
            (void)munmap(d, 1024 * KiB);
            d = MAP_FAILED;
            if (tio_runtime_forget(rt, HD) < 0)
                goto out;
        }
    }
    if (n >= 0 && tio_runtime_end_iteration(rt, act, HNT) >= 0)
        rc = 0;
out:
    if (rc < 0)
        printf("  trigger %u: %s\n", trigger, tio_last_error());
    if (rt)
        tio_runtime_get_stats(rt, st);
    if (e)
        (void)tio_engine_stats(e, es);
    tio_runtime_free(rt);
    if (d != MAP_FAILED)
        (void)munmap(d, 1024 * KiB);
    rt_free_inputs(plan, e, tr);
    (void)rmdir(dir);
    return rc;
}

TIO_TEST(last_real_use_waits_for_the_write_in_flight) {
    uint64_t at2 = 0;
    int released = 0;
    struct tio_runtime_stats st = { 0 };
    struct tio_engine_stats es = { 0 };
    CHECK_EQ_I(host_step(1, &at2, &released, &st, &es), 0);
    CHECK_EQ_U(at2, 1); /* the write completed before after_kernel(2) returned */
    CHECK_EQ_U(st.offloads, 1);
    CHECK_EQ_U(st.dead_releases, 0);
    CHECK_EQ_U(st.bytes_offloaded, 1024 * KiB);
    CHECK(st.wait_write_count >= 1);
    CHECK_EQ_U(es.requests_failed, 0);
}

TIO_TEST(offload_past_the_last_real_use_releases_without_a_write) {
    uint64_t at2 = 0;
    int released = 0;
    struct tio_runtime_stats st = { 0 };
    struct tio_engine_stats es = { 0 };
    CHECK_EQ_I(host_step(3, &at2, &released, &st, &es), 0);
    CHECK_EQ_U(st.offloads, 1);
    CHECK_EQ_U(st.dead_releases, 1);
    CHECK_EQ_U(st.bytes_offloaded, 0);
    CHECK_EQ_U(es.bytes_written, 0);
    CHECK_EQ_I(released, 1); /* its memory went back at the planned point */
}

int main(void) {
    if (fake_cuda_load(&fc) < 0)
        return 1;
    RUN(forget_waits_for_the_copy_of_its_bytes);
    RUN(last_real_use_waits_for_the_write_in_flight);
    RUN(offload_past_the_last_real_use_releases_without_a_write);
    return tio_test_done();
}
