/*
 * The training thread does not wait for the GPU where the plan says it need not: on the
 * stream-ordered executor, with the GPU held (a host function on the compute stream that blocks
 * until the test opens it), the training thread must queue the rest of the step: its offloads'
 * copies wait on the GPU, the thread does not, neither directly (the fake counts every
 * synchronisation, failed query and pageable copy of the watched thread) nor through the engine
 * (a thread that waits for an engine request whose fence is behind the held GPU would hang: a
 * watchdog opens the GPU after 3 s and the test fails).
 *
 * A second test runs the same steps under a budget that the first offload must free (see
 * budget_release_does_not_wait_for_the_gpu), a third on device 1 of 2 (executor_on_device_1);
 * budget_release_takes_the_oldest_write checks which completed offload such a release takes.
 *
 * The held section starts after the step's first kernel is launched (its input, read back from
 * the host tier, is queued before the GPU is held: today's engine starts a read only once its
 * fence has passed) and ends after the last kernel's after_kernel (end_iteration reaps the
 * requests in flight). In between, the plan offloads tensors to the host tier and reads nothing.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <teraio/io.h>
#include <teraio/plan.h>
#include <teraio/runtime.h>
#include <teraio/trace.h>

#include "io/fake_cuda.h"
#include "io/io_util.h"
#include "io/runtime_util.h"
#include "tio_test.h"

#define KiB UINT64_C(1024)
#define NK  8
#define NT  5

static struct fake_cuda fc;

/* ---- the held GPU -------------------------------------------------------------------------- */
struct hold {
    atomic_int open, forced, left;
};
static void hold_fn(void *u) {
    struct hold *h = u;
    while (!atomic_load(&h->open)) {
        struct timespec ts = { 0, 200000 };
        nanosleep(&ts, NULL);
    }
    atomic_store(&h->left, 1);
}
static void *watchdog(void *u) {
    struct hold *h = u;
    for (int i = 0; i < 3000 && !atomic_load(&h->open); i++) {
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
    if (!atomic_exchange(&h->open, 1))
        atomic_store(&h->forced, 1); /* the training thread did not get there by itself */
    return NULL;
}

/* W and G1 (globals, 256 and 64 KiB) are updated by kernel 0 (so their offloads write), G1 read
 * again by kernel 3; G2 (64 KiB) by
 * kernel 5; A and B (activations, 128 KiB) live from kernel 1 to 6 and from 2 to 7. */
static struct tio_trace *make_trace(void) {
    struct tio_trace *tr = NULL;
    if (tio_trace_new(NULL, &tr) < 0)
        return NULL;
    int rc = 0;
    rc |= tio_trace_add_tensor(tr, 256 * KiB, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, "W", NULL);
    rc |= tio_trace_add_tensor(tr, 64 * KiB, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, "G1", NULL);
    rc |= tio_trace_add_tensor(tr, 64 * KiB, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, "G2", NULL);
    rc |= tio_trace_add_tensor(tr, 128 * KiB, TIO_TENSOR_ACTIVATION, 0, "A", NULL);
    rc |= tio_trace_add_tensor(tr, 128 * KiB, TIO_TENSOR_ACTIVATION, 0, "B", NULL);
    static const struct {
        uint32_t t;
        int32_t mode;
    } uses[NK][2] = {
        { { 0, TIO_USE_READ_WRITE }, { 1, TIO_USE_READ_WRITE } },
        { { 3, TIO_USE_WRITE }, { 0, 0 } },
        { { 4, TIO_USE_WRITE }, { 0, 0 } },
        { { 1, TIO_USE_READ }, { 4, TIO_USE_READ } },
        { { 4, TIO_USE_READ }, { 0, 0 } },
        { { 2, TIO_USE_READ }, { 0, 0 } },
        { { 3, TIO_USE_READ }, { 0, 0 } },
        { { 4, TIO_USE_READ }, { 0, 0 } },
    };
    for (uint32_t k = 0; k < NK; k++) {
        rc |= tio_trace_add_kernel(tr, "k", 100000, 0, NULL);
        for (int i = 0; i < 2; i++)
            if (uses[k][i].mode)
                rc |= tio_trace_add_use(tr, uses[k][i].t, uses[k][i].mode);
    }
    return rt_trace_finish(tr, rc);
}

/* The plan offloads W after kernel 0 to the host tier and G1 after kernel 3 (to g1_tier), both
 * read back when the next step's kernel 0 needs them: inside the held section it only offloads. */
static struct tio_plan *make_plan(const struct tio_trace *tr, int32_t g1_tier) {
    const struct tio_move m[] = {
        { .tensor = 0,
          .from = TIO_TIER_GPU,
          .to = TIO_TIER_HOST,
          .trigger = 1,
          .deadline = NK,
          .bytes = 256 * KiB },
        { .tensor = 1,
          .from = TIO_TIER_GPU,
          .to = g1_tier,
          .trigger = 4,
          .deadline = NK,
          .bytes = 64 * KiB },
    };
    return rt_plan(tr, NK, m, sizeof m / sizeof m[0]);
}

struct run {
    struct tio_runtime *rt;
    void *stream;
    unsigned char *slab;
    int err;
    int held;              /* inside the held section */
    uint64_t held_release; /* RELEASE actions handed out inside it */
};

static void apply(struct run *r, const struct tio_runtime_action *a, int n) {
    for (int i = 0; i < n; i++)
        r->held_release += r->held && a[i].kind == TIO_RUNTIME_RELEASE;
    for (int i = 0; i < n; i++)
        if (a[i].kind != TIO_RUNTIME_RELEASE &&
            tio_runtime_bind(r->rt, a[i].tensor, r->slab + a[i].tensor * 256 * KiB) < 0)
            r->err = 1;
}

/* One step; with h, the GPU is held from after kernel 0's launch to after_kernel(NK - 1). Returns
 * the watched thread's waits inside the held section. */
static uint64_t step(struct run *r, struct hold *h) {
    struct tio_runtime_action act[NT];
    int n = tio_runtime_begin_iteration(r->rt, act, NT);
    if (n < 0) {
        r->err = 1;
        return 0;
    }
    apply(r, act, n);
    uint64_t w0 = 0;
    pthread_t dog;
    int dog_on = 0;
    for (uint32_t k = 0; k < NK && !r->err; k++) {
        if ((n = tio_runtime_before_kernel(r->rt, k, act, NT)) < 0) {
            r->err = 1;
            break;
        }
        apply(r, act, n);
        if (tio_runtime_ready(r->rt, k) < 0) {
            printf("  kernel %u: %s\n", k, tio_last_error());
            r->err = 1;
            break;
        }
        if (fc.launch_kernel(r->stream, 1000) != 0)
            r->err = 1;
        if (k == 1 || k == 2) /* A and B are created */
            if (tio_runtime_bind(r->rt, k == 1 ? 3 : 4, r->slab + (k == 1 ? 3 : 4) * 256 * KiB) < 0)
                r->err = 1;
        if (k == 0 && h) { /* hold the GPU from here on */
            if (fc.launch_host_func(r->stream, hold_fn, h) != 0 ||
                pthread_create(&dog, NULL, watchdog, h) != 0) {
                r->err = 1;
                break;
            }
            dog_on = 1;
            r->held = 1;
            w0 = fc.watched_waits();
        }
        if (tio_runtime_after_kernel(r->rt, k) < 0)
            r->err = 1;
    }
    uint64_t waits = h ? fc.watched_waits() - w0 : 0;
    r->held = 0;
    if (dog_on) {
        atomic_store(&h->open, 1);
        pthread_join(dog, NULL);
        while (!atomic_load(&h->left)) { /* h is the caller's: let the hold end first */
            struct timespec ts = { 0, 100000 };
            nanosleep(&ts, NULL);
        }
    }
    if (!r->err && (n = tio_runtime_end_iteration(r->rt, act, NT)) >= 0)
        apply(r, act, n);
    else
        r->err = 1;
    return waits;
}

TIO_TEST(offloads_do_not_hold_the_training_thread) {
    struct tio_trace *tr = make_trace();
    struct tio_plan *plan = tr ? make_plan(tr, TIO_TIER_HOST) : NULL;
    struct tio_engine *e = rt_engine(NULL, "cuda", NULL, 4 * 256 * KiB);
    CHECK(tr && plan && e);
    void *slab = NULL, *stream = NULL;
    CHECK_EQ_I(fc.malloc_device(&slab, NT * 256 * KiB), 0);
    CHECK_EQ_I(fc.stream_create(&stream, 1), 0);
    struct run r = { .stream = stream, .slab = slab };
    struct tio_runtime_params rp = rt_params(tr, plan, e);
    rp.mem = TIO_MEM_DEVICE;
    rp.stream = stream;
    rp.stream_ordered = 1;
    CHECK(tr && plan && e && slab && tio_runtime_new(&rp, &r.rt) == 0);
    REQUIRE_OR(r.rt != NULL, rt_free_inputs(plan, e, tr));
    for (uint32_t g = 0; g < 3; g++)
        CHECK_EQ_I(tio_runtime_bind(r.rt, g, r.slab + g * 256 * KiB), 0);
    fc.watch_thread();
    (void)step(&r, NULL); /* the steady state: W and G1 stored at the start of a step */
    for (int i = 0; i < 3 && !r.err; i++) {
        struct hold h = { 0 };
        uint64_t waits = step(&r, &h);
        CHECK_EQ_U(waits, 0);
        CHECK_EQ_I(atomic_load(&h.forced), 0); /* it queued the held section by itself */
    }
    CHECK_EQ_I(r.err, 0);
    struct tio_runtime_stats st;
    tio_runtime_get_stats(r.rt, &st);
    printf("  %llu offloads, %llu reads (%llu urgent), %llu moves skipped\n",
           (unsigned long long)st.offloads, (unsigned long long)st.prefetches,
           (unsigned long long)st.urgent_reads, (unsigned long long)st.moves_skipped);
    CHECK(st.offloads >= 8); /* W and G1 in each of the 4 steps */
    (void)fc.stream_synchronize(stream);
    tio_runtime_free(r.rt);
    rt_free_inputs(plan, e, tr);
    CHECK_EQ_I(fc.stream_destroy(stream), 0);
    CHECK_EQ_I(fc.free_device(slab), 0);
}

/* The same steps under a budget of 448 KiB: when A (128 KiB) is created at kernel 1 the tracked
 * bytes are W + G1 + G2 + A = 512 KiB, so the executor must release W (whose host-tier offload is
 * triggered there) before kernel 1 runs, while the GPU is held before W's fence. The release is
 * stream-ordered: W's write completes once its copy is queued and the compute stream waits for
 * the copy, so the training thread gets W's RELEASE at once instead of waiting for the GPU. */
TIO_TEST(budget_release_does_not_wait_for_the_gpu) {
    struct tio_trace *tr = make_trace();
    struct tio_plan *plan = tr ? make_plan(tr, TIO_TIER_HOST) : NULL;
    struct tio_engine *e = rt_engine(NULL, "cuda", NULL, 4 * 256 * KiB);
    void *slab = NULL, *stream = NULL;
    CHECK_EQ_I(fc.malloc_device(&slab, NT * 256 * KiB), 0);
    CHECK_EQ_I(fc.stream_create(&stream, 1), 0);
    struct run r = { .stream = stream, .slab = slab };
    struct tio_runtime_params rp = rt_params(tr, plan, e);
    rp.mem = TIO_MEM_DEVICE;
    rp.stream = stream;
    rp.stream_ordered = 1;
    rp.budget_bytes = 448 * KiB;
    CHECK(tr && plan && e && slab && tio_runtime_new(&rp, &r.rt) == 0);
    CHECK(r.rt != NULL);
    if (r.rt) {
        for (uint32_t g = 0; g < 3; g++)
            CHECK_EQ_I(tio_runtime_bind(r.rt, g, r.slab + g * 256 * KiB), 0);
        fc.watch_thread();
        (void)step(&r, NULL);
        for (int i = 0; i < 2 && !r.err; i++) {
            struct hold h = { 0 };
            r.held_release = 0;
            uint64_t waits = step(&r, &h);
            CHECK_EQ_U(waits, 0);
            CHECK_EQ_I(atomic_load(&h.forced), 0); /* it did not wait for the held GPU */
            CHECK(r.held_release >= 1);            /* W, released while the GPU is held */
        }
        CHECK_EQ_I(r.err, 0);
        struct tio_runtime_stats st;
        tio_runtime_get_stats(r.rt, &st);
        CHECK(st.peak_resident_bytes <= 448 * KiB);
        (void)fc.stream_synchronize(stream);
        tio_runtime_free(r.rt);
    }
    rt_free_inputs(plan, e, tr);
    CHECK_EQ_I(fc.stream_destroy(stream), 0);
    CHECK_EQ_I(fc.free_device(slab), 0);
}

/* Under the budget test's 448 KiB, G1's host-tier offload (triggered at kernel 4) is not needed
 * under the budget when the step ends: end_iteration neither waits for it nor releases it, so it
 * goes on into the next step (state WRITING). give_stored between steps waits for it and gives
 * its copy, which holds G1's bytes; the executor no longer manages G1. */
TIO_TEST(give_stored_waits_for_an_offload_past_the_step) {
    struct tio_trace *tr = make_trace();
    struct tio_plan *plan = tr ? make_plan(tr, TIO_TIER_HOST) : NULL;
    struct tio_engine *e = rt_engine(NULL, "cuda", NULL, 4 * 256 * KiB);
    void *slab = NULL, *stream = NULL;
    CHECK_EQ_I(fc.malloc_device(&slab, NT * 256 * KiB), 0);
    CHECK_EQ_I(fc.stream_create(&stream, 1), 0);
    struct run r = { .stream = stream, .slab = slab };
    struct tio_runtime_params rp = rt_params(tr, plan, e);
    rp.mem = TIO_MEM_DEVICE;
    rp.stream = stream;
    rp.stream_ordered = 1;
    rp.budget_bytes = 448 * KiB;
    unsigned char *g1 = slab ? fc.translate(r.slab + 256 * KiB, 64 * KiB) : NULL;
    CHECK(g1 != NULL);
    CHECK(tr && plan && e && slab && g1 && tio_runtime_new(&rp, &r.rt) == 0);
    CHECK(r.rt != NULL);
    if (r.rt && g1) {
        for (uint64_t i = 0; i < 64 * KiB; i++) /* the kernels (timed no-ops) keep these bytes */
            g1[i] = (unsigned char)(i * 7 + 3);
        for (uint32_t g = 0; g < 3; g++)
            CHECK_EQ_I(tio_runtime_bind(r.rt, g, r.slab + g * 256 * KiB), 0);
        for (int i = 0; i < 2 && !r.err; i++)
            (void)step(&r, NULL);
        CHECK_EQ_I(r.err, 0);
        CHECK_EQ_I(tio_runtime_tensor_state(r.rt, 1), 2); /* G1: still offloading */
        /* a caller that binds every global before a step binds G1 where it is: accepted */
        CHECK_EQ_I(tio_runtime_bind(r.rt, 1, r.slab + 256 * KiB), 0);
        /* elsewhere (its storage replaced between steps): the write completes first, as at a
         * drained step boundary; then back where it was */
        CHECK_EQ_I(tio_runtime_bind(r.rt, 1, r.slab + 4 * 256 * KiB), 0);
        CHECK_EQ_I(tio_runtime_bind(r.rt, 1, r.slab + 256 * KiB), 0);
        uint64_t id = UINT64_MAX;
        CHECK_EQ_I(tio_runtime_give_stored(r.rt, 1, &id), 1);
        CHECK_EQ_U(id, 1); /* engine ids are the trace's (id_base 0) */
        CHECK_EQ_I(tio_runtime_tensor_state(r.rt, 1), 0);     /* no longer the executor's */
        CHECK_EQ_I(tio_runtime_give_stored(r.rt, 1, &id), 0); /* given once */
        (void)fc.stream_synchronize(stream);
        tio_runtime_free(r.rt);
        unsigned char *back = calloc(1, 64 * KiB);
        struct tio_completion c = { 0, 0 };
        CHECK(back != NULL);
        if (back) {
            CHECK_EQ_I(io_read(e, 1, back, 64 * KiB, TIO_MEM_HOST, TIO_PRIO_NORMAL, 9, NULL, NULL),
                       0);
            CHECK_EQ_I(tio_engine_wait(e, &c, 1, 1, -1), 1);
            CHECK_EQ_I((int)c.res, (int)(64 * KiB));
            CHECK(memcmp(back, g1, 64 * KiB) == 0); /* the copy holds G1's bytes */
            free(back);
        }
    }
    rt_free_inputs(plan, e, tr);
    CHECK_EQ_I(fc.stream_destroy(stream), 0);
    CHECK_EQ_I(fc.free_device(slab), 0);
}

/* The same steps with every CUDA object of the caller on device 1 of 2, G1 on the SSD tier: the
 * executor's events and the engine's streams and copies must be device 1's too (an event recorded
 * on another device's stream fails, a copy of device 1's memory on a device-0 stream is counted).
 */
TIO_TEST(executor_on_device_1) {
    char dir[512];
    io_mkdtemp(dir, sizeof dir, "waits");
    CHECK_EQ_I(fc.set_device(1), 0);
    struct tio_trace *tr = make_trace();
    struct tio_plan *plan = tr ? make_plan(tr, TIO_TIER_SSD) : NULL;
    struct tio_engine *e = rt_engine(dir, "cuda", NULL, 4 * 256 * KiB);
    void *slab = NULL, *stream = NULL;
    CHECK_EQ_I(fc.malloc_device(&slab, NT * 256 * KiB), 0);
    CHECK_EQ_I(fc.stream_create(&stream, 1), 0);
    struct run r = { .stream = stream, .slab = slab };
    struct tio_runtime_params rp = rt_params(tr, plan, e);
    rp.mem = TIO_MEM_DEVICE;
    rp.stream = stream;
    rp.stream_ordered = 1;
    CHECK(tr && plan && e && slab && tio_runtime_new(&rp, &r.rt) == 0);
    CHECK(r.rt != NULL);
    if (r.rt) {
        for (uint32_t g = 0; g < 3; g++)
            CHECK_EQ_I(tio_runtime_bind(r.rt, g, r.slab + g * 256 * KiB), 0);
        uint64_t x0 = fc.cross_device_copies();
        for (int i = 0; i < 3 && !r.err; i++)
            (void)step(&r, NULL);
        CHECK_EQ_I(r.err, 0);
        CHECK_EQ_U(fc.cross_device_copies(), x0);
        struct tio_runtime_stats st;
        tio_runtime_get_stats(r.rt, &st);
        CHECK(st.offloads >= 6);
        (void)fc.stream_synchronize(stream);
        tio_runtime_free(r.rt);
    }
    rt_free_inputs(plan, e, tr);
    CHECK_EQ_I(fc.stream_destroy(stream), 0);
    CHECK_EQ_I(fc.free_device(slab), 0);
    CHECK_EQ_I(fc.set_device(0), 0);
    (void)rmdir(dir);
}

/* Which completed offload a budget release takes. X and Y (globals, 64 KiB each) are updated by
 * kernels 0 and 1; the plan offloads Y after kernel 0 and X after kernel 1 (Y's write is queued
 * first, X has the lower id); kernel 2 reads Z (64 KiB), kernel 3 creates A (64 KiB). Both writes
 * have completed (their copies queued) before kernel 3, and under a budget of 192 KiB one of them
 * must be released there. Its release makes the compute stream wait for its copies: it must be
 * Y's, queued first and so done first on the one D2H stream, not X's (the lower id). */
/* Apply n actions of the next test's executor (memory in slab at 64 KiB per tensor); count the
 * RELEASEs per tensor in released (if not NULL). 1 if n or a bind failed. */
static int take(struct tio_runtime *rt,
                unsigned char *slab,
                const struct tio_runtime_action *a,
                int n,
                int *released) {
    int bad = n < 0;
    for (int i = 0; i < n; i++) {
        if (a[i].kind != TIO_RUNTIME_RELEASE)
            bad |= tio_runtime_bind(rt, a[i].tensor, slab + a[i].tensor * 64 * KiB) < 0;
        else if (released && a[i].tensor < 4)
            released[a[i].tensor]++;
    }
    return bad;
}

TIO_TEST(budget_release_takes_the_oldest_write) {
    struct tio_trace *tr = NULL;
    int rc = tio_trace_new(NULL, &tr);
    const char *names[] = { "X", "Y", "Z", "A" };
    for (int t = 0; t < 4 && rc == 0; t++)
        rc = tio_trace_add_tensor(tr, 64 * KiB, t < 3 ? TIO_TENSOR_WEIGHT : TIO_TENSOR_ACTIVATION,
                                  t < 3 ? TIO_TENSOR_GLOBAL : 0, names[t], NULL);
    static const struct {
        uint32_t t;
        int32_t mode;
    } uses[] = { { 1, TIO_USE_READ_WRITE },
                 { 0, TIO_USE_READ_WRITE },
                 { 2, TIO_USE_READ },
                 { 3, TIO_USE_WRITE },
                 { 3, TIO_USE_READ } };
    for (uint32_t k = 0; k < 5 && rc == 0; k++) {
        rc = tio_trace_add_kernel(tr, "k", 100000, 0, NULL);
        rc = rc ? rc : tio_trace_add_use(tr, uses[k].t, uses[k].mode);
    }
    tr = rt_trace_finish(tr, rc);
    const struct tio_move m[] = {
        { .tensor = 1,
          .from = TIO_TIER_GPU,
          .to = TIO_TIER_HOST,
          .trigger = 1,
          .deadline = 5,
          .bytes = 64 * KiB },
        { .tensor = 0,
          .from = TIO_TIER_GPU,
          .to = TIO_TIER_HOST,
          .trigger = 2,
          .deadline = 5,
          .bytes = 64 * KiB },
    };
    struct tio_plan *plan = tr ? rt_plan(tr, 5, m, 2) : NULL;
    struct tio_engine *e = rt_engine(NULL, "cuda", NULL, 4 * 64 * KiB);
    unsigned char *slab = NULL;
    void *stream = NULL;
    CHECK_EQ_I(fc.malloc_device((void **)&slab, 4 * 64 * KiB), 0);
    CHECK_EQ_I(fc.stream_create(&stream, 1), 0);
    struct tio_runtime *rt = NULL;
    struct tio_runtime_params rp = rt_params(tr, plan, e);
    rp.mem = TIO_MEM_DEVICE;
    rp.stream = stream;
    rp.stream_ordered = 1;
    rp.budget_bytes = 192 * KiB;
    CHECK(tr && plan && e && slab && tio_runtime_new(&rp, &rt) == 0);
    struct tio_runtime_action act[4];
    int released[4] = { 0 }, bad = 0;
    for (uint32_t g = 0; rt && g < 3; g++)
        CHECK_EQ_I(tio_runtime_bind(rt, g, slab + g * 64 * KiB), 0);
    for (int step = 0; step < 2 && rt && !bad; step++) { /* the second in the steady state */
        bad |= take(rt, slab, act, tio_runtime_begin_iteration(rt, act, 4), NULL);
        for (uint32_t k = 0; k < 5 && !bad; k++) {
            if (k == 3 && step == 1) { /* every request completed before kernel 3 is prepared */
                struct tio_engine_stats es = { 0 };
                for (int i = 0; i < 5000 && tio_engine_stats(e, &es) == 0 &&
                                es.requests_completed < es.requests_submitted;
                     i++) {
                    (void)fc.stream_synchronize(stream);
                    struct timespec ts = { 0, 1000000 };
                    nanosleep(&ts, NULL);
                }
                CHECK_EQ_U(es.requests_completed, es.requests_submitted);
            }
            bad |= take(rt, slab, act, tio_runtime_before_kernel(rt, k, act, 4),
                        k == 3 && step == 1 ? released : NULL);
            bad |= tio_runtime_ready(rt, k) < 0 || fc.launch_kernel(stream, 0) != 0 ||
                   (k == 3 && tio_runtime_bind(rt, 3, slab + 3 * 64 * KiB) < 0) ||
                   tio_runtime_after_kernel(rt, k) < 0;
        }
        bad |= take(rt, slab, act, tio_runtime_end_iteration(rt, act, 4), NULL);
    }
    CHECK_EQ_I(bad, 0);
    CHECK_EQ_I(released[1], 1); /* Y: its write was queued first */
    CHECK_EQ_I(released[0], 0); /* X stays until the budget needs it */
    if (stream)
        (void)fc.stream_synchronize(stream);
    tio_runtime_free(rt);
    rt_free_inputs(plan, e, tr);
    CHECK_EQ_I(fc.stream_destroy(stream), 0);
    CHECK_EQ_I(fc.free_device(slab), 0);
}

int main(void) {
    if (setenv("FAKE_CUDA_DEVICES", "2", 1) != 0 || fake_cuda_load(&fc) < 0)
        return 1;
    RUN(offloads_do_not_hold_the_training_thread);
    RUN(budget_release_does_not_wait_for_the_gpu);
    RUN(budget_release_takes_the_oldest_write);
    RUN(give_stored_waits_for_an_offload_past_the_step);
    RUN(executor_on_device_1);
    return tio_test_done();
}
