/* The plan executor against the real engine (posix backend, host tier, fault backend). Expected
 * actions and counters are worked out by hand from the tiny trace below. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <teraio/alloc.h>
#include <teraio/io.h>
#include <teraio/plan.h>
#include <teraio/runtime.h>
#include <teraio/trace.h>

#include "../tio_test.h"
#include "runtime_util.h"

#define MB (UINT64_C(1) << 20)

/*
 * Trace (N = 8 kernels), tensors:
 *   0 W  (global, 2 MiB)  read by k0, read-written by k7 (the "optimizer")
 *   1 A  (activation, 1 MiB) written by k1, read by k6
 *   2 T  (temp, 1 MiB)    written by k2, read by k3
 * Plan: offload W at 1, offload A at 2, prefetch A at 5 (deadline 6), prefetch W at 6
 * (deadline 7). The executor's budget of 1.5 MiB makes it wait for each offload as soon as it
 * is issued (resident bytes exceed the budget), so the outcome does not depend on I/O timing:
 *   k1: W + A = 3 MiB > 1.5: wait for W, release it -> 1 MiB
 *   k2: A + T = 2 MiB > 1.5: wait for A, release it -> 1 MiB
 *   k5: A materialised (T died after k3) -> 1 MiB;  k6: W's prefetch (for k7) would make
 *   A + W = 3 MiB: the executor takes it back to stay in the budget (a deferred prefetch) -> 1 MiB;
 *   k7: A died, W is read at once (an urgent read) -> 2 MiB, the peak. k0 and k7 run above the
 *   budget: W alone is their working set (2 per iteration in over_budget_kernels).
 */
#define NK 8
static struct tio_trace *make_trace(void) {
    struct tio_trace *tr;
    if (tio_trace_new(NULL, &tr) < 0) {
        return NULL;
    }
    int rc = 0;
    rc |= tio_trace_add_tensor(tr, 2 * MB, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, "W", NULL);
    rc |= tio_trace_add_tensor(tr, MB, TIO_TENSOR_ACTIVATION, 0, "A", NULL);
    rc |= tio_trace_add_tensor(tr, MB, TIO_TENSOR_TEMP, 0, "T", NULL);
    static const int use_t[NK] = { 0, 1, 2, 2, -1, -1, 1, 0 };
    static const int use_m[NK] = {
        TIO_USE_READ, TIO_USE_WRITE,     TIO_USE_WRITE, TIO_USE_READ, 0, 0,
        TIO_USE_READ, TIO_USE_READ_WRITE
    };
    for (int k = 0; k < NK; k++) {
        char name[8];
        snprintf(name, sizeof name, "k%d", k);
        rc |= tio_trace_add_kernel(tr, name, 1000, k == 7 ? TIO_KERNEL_OPTIM : 0, NULL);
        if (use_t[k] >= 0) {
            rc |= tio_trace_add_use(tr, (uint32_t)use_t[k], use_m[k]);
        }
    }
    return rt_trace_finish(tr, rc);
}

static struct tio_plan *make_plan(const struct tio_trace *tr, int32_t tier, int with_prefetch) {
    const struct tio_move all[4] = {
        { .tensor = 0,
          .from = TIO_TIER_GPU,
          .to = tier,
          .trigger = 1,
          .deadline = 2,
          .bytes = 2 * MB },
        { .tensor = 1, .from = TIO_TIER_GPU, .to = tier, .trigger = 2, .deadline = 3, .bytes = MB },
        { .tensor = 1, .from = tier, .to = TIO_TIER_GPU, .trigger = 5, .deadline = 6, .bytes = MB },
        { .tensor = 0,
          .from = tier,
          .to = TIO_TIER_GPU,
          .trigger = 6,
          .deadline = 7,
          .bytes = 2 * MB },
    };
    struct tio_move m[4];
    size_t nm = 0;
    for (int i = 0; i < 4; i++) {
        if (with_prefetch || all[i].to != TIO_TIER_GPU) {
            m[nm++] = all[i];
        }
    }
    return rt_plan(tr, NK, m, nm);
}

static char g_dir[] = "/tmp/tio_rt_XXXXXX";

static struct tio_engine *make_engine(const char *backend, const char *opts) {
    return rt_engine(g_dir, backend, opts, 8 * MB);
}

static void fill(uint8_t *p, size_t n, uint8_t seed) {
    for (size_t i = 0; i < n; i++) {
        p[i] = (uint8_t)(seed + i * 7u);
    }
}

static int same(const uint8_t *p, size_t n, uint8_t seed) {
    for (size_t i = 0; i < n; i++) {
        if (p[i] != (uint8_t)(seed + i * 7u)) {
            return 0;
        }
    }
    return 1;
}

/* A caller that owns real buffers and performs the actions. */
struct host {
    uint8_t *buf[3];
    uint64_t bytes[3];
    int released[3], materialized[3];
};

static int apply(struct tio_runtime *rt, struct host *h, struct tio_runtime_action *a, int n) {
    for (int i = 0; i < n; i++) {
        uint32_t t = a[i].tensor;
        if (a[i].kind == TIO_RUNTIME_RELEASE) {
            memset(h->buf[t], 0xEE, h->bytes[t]); /* poison, as a real free would */
            free(h->buf[t]);
            h->buf[t] = NULL;
            h->released[t]++;
        } else {
            h->buf[t] = malloc(a[i].bytes);
            memset(h->buf[t], 0xCD, a[i].bytes);
            h->materialized[t]++;
            if (tio_runtime_bind(rt, t, h->buf[t]) < 0) {
                return -1;
            }
        }
    }
    return 0;
}

/* Run one iteration; kernels produce/check the pattern data. Returns 0 or the failing rc. */
static int iterate(struct tio_runtime *rt, struct host *h, int *data_ok) {
    struct tio_runtime_action a[8];
    int rc = tio_runtime_begin_iteration(rt, a, 8);
    if (rc < 0 || apply(rt, h, a, rc) < 0) {
        return rc < 0 ? rc : -1;
    }
    for (uint64_t k = 0; k < NK; k++) {
        int n = tio_runtime_before_kernel(rt, k, a, 8);
        if (n < 0) {
            return n;
        }
        if (apply(rt, h, a, n) < 0) {
            return -1;
        }
        if ((rc = tio_runtime_ready(rt, k)) < 0) {
            return rc;
        }
        switch (k) {
        case 0:
            *data_ok &= h->buf[0] && same(h->buf[0], h->bytes[0], 1);
            break;
        case 1:
            h->buf[1] = malloc(MB);
            fill(h->buf[1], MB, 2);
            if (tio_runtime_bind(rt, 1, h->buf[1]) < 0) {
                return -1;
            }
            break;
        case 2:
            h->buf[2] = malloc(MB);
            fill(h->buf[2], MB, 3);
            break;
        case 3:
            *data_ok &= same(h->buf[2], MB, 3);
            free(h->buf[2]);
            h->buf[2] = NULL;
            break;
        case 6:
            *data_ok &= h->buf[1] && same(h->buf[1], MB, 2);
            free(h->buf[1]);
            h->buf[1] = NULL;
            break;
        case 7:
            *data_ok &= h->buf[0] && same(h->buf[0], h->bytes[0], 1);
            break;
        default:
            break;
        }
        if ((rc = tio_runtime_after_kernel(rt, k)) < 0) {
            return rc;
        }
    }
    int n = tio_runtime_end_iteration(rt, a, 8);
    if (n < 0) {
        return n;
    }
    return apply(rt, h, a, n);
}

/* The executor over tr, plan and e with the 1.5 MiB budget the trace above is worked out for,
 * and the caller h with W (2 MiB, pattern 1) bound. */
static struct tio_runtime *start(const struct tio_trace *tr,
                                 const struct tio_plan *plan,
                                 struct tio_engine *e,
                                 struct host *h) {
    struct tio_runtime_params rp = rt_params(tr, plan, e);
    rp.budget_bytes = 3 * MB / 2;
    struct tio_runtime *rt = NULL;
    CHECK_OK(tio_runtime_new(&rp, &rt));
    *h = (struct host){ .bytes = { 2 * MB, MB, MB } };
    h->buf[0] = malloc(2 * MB);
    fill(h->buf[0], 2 * MB, 1);
    CHECK_OK(tio_runtime_bind(rt, 0, h->buf[0]));
    return rt;
}

/* Three iterations of the plan for `tier` (prefetches included) over an engine with the SSD
 * directory dir (NULL: none) and a host tier of host_tier bytes, with the data checks: the
 * executor's stats and the caller's release and materialise counts in *h. 0, or -1 if the inputs
 * could not be made. */
static int run_three(int32_t tier,
                     const char *dir,
                     uint64_t host_tier,
                     struct tio_runtime_stats *s,
                     struct host *h) {
    struct tio_trace *tr = make_trace();
    struct tio_plan *plan = tr ? make_plan(tr, tier, 1) : NULL;
    struct tio_engine *e = rt_engine(dir, "posix", NULL, host_tier);
    CHECK(tr && plan && e);
    if (!tr || !plan || !e) {
        return -1;
    }
    struct tio_runtime *rt = start(tr, plan, e, h);
    int ok = 1;
    for (int it = 0; it < 3; it++) {
        CHECK_OK(iterate(rt, h, &ok));
    }
    CHECK(ok);
    tio_runtime_get_stats(rt, s);
    tio_runtime_free(rt);
    free(h->buf[0]);
    h->buf[0] = NULL;
    rt_free_inputs(plan, e, tr);
    return 0;
}

static void run_tier(int32_t tier) {
    struct tio_runtime_stats s;
    struct host h;
    if (run_three(tier, g_dir, 8 * MB, &s, &h) < 0) {
        return;
    }
    /* Per iteration W (dirty again after k7 writes it) and A are written and read back once:
     * 2 offloads and 3 MiB each way; W's read is the urgent one at k7. */
    CHECK_EQ_U(s.iterations, 3);
    CHECK_EQ_U(s.kernels, 3 * NK);
    CHECK_EQ_U(s.offloads, 6);
    CHECK_EQ_U(s.bytes_offloaded, 9 * MB);
    CHECK_EQ_U(s.bytes_prefetched, 9 * MB);
    CHECK_EQ_U(s.urgent_reads, 3);
    CHECK_EQ_U(s.deferred_prefetches, 3);
    CHECK_EQ_U(s.over_budget_kernels, 6);
    CHECK_EQ_U(s.demand_offloads, 0);
    CHECK_EQ_U(h.released[0], 3);
    CHECK_EQ_U(h.materialized[0], 3);
    CHECK_EQ_U(h.released[1], 3);
    CHECK_EQ_U(h.materialized[1], 3);
    CHECK_EQ_U(s.peak_resident_bytes, 2 * MB);
    CHECK(s.pressure_stall_s >= 0.0);
    CHECK_EQ_U(s.resident_bytes, 2 * MB);
}

TIO_TEST(ssd_tier_round_trip) {
    run_tier(TIO_TIER_SSD);
}

TIO_TEST(host_tier_round_trip) {
    run_tier(TIO_TIER_HOST);
}

/* The planner counts bytes; the engine needs one free extent. A host tier of 1 MiB cannot take W
 * (2 MiB): W goes to the SSD instead (A still fits the host tier) and the iterations run as with a
 * large enough tier: the same data, bytes and releases. */
TIO_TEST(full_host_tier_falls_back_to_the_ssd) {
    struct tio_runtime_stats s;
    struct host h;
    REQUIRE(run_three(TIO_TIER_HOST, g_dir, MB, &s, &h) >= 0);
    CHECK_EQ_U(s.tier_fallbacks, 3); /* W, once per iteration */
    CHECK_EQ_U(s.tier_full_kept, 0);
    CHECK_EQ_U(s.offloads, 6);
    CHECK_EQ_U(s.bytes_offloaded, 9 * MB);
    CHECK_EQ_U(s.bytes_prefetched, 9 * MB);
    CHECK_EQ_U(h.released[0], 3);
    CHECK_EQ_U(h.released[1], 3);
}

/* No tier has room for W (a 1 MiB host tier, no SSD): W stays resident (its planned offloads are
 * dropped, the kernels run above the budget) instead of failing the training; A still goes to the
 * host tier and comes back intact. */
TIO_TEST(no_room_in_any_tier_keeps_the_tensor) {
    struct tio_runtime_stats s;
    struct host h;
    REQUIRE(run_three(TIO_TIER_HOST, NULL, MB, &s, &h) >= 0);
    CHECK(s.tier_full_kept >= 3); /* W's planned offload, every iteration */
    CHECK_EQ_U(s.tier_fallbacks, 0);
    CHECK_EQ_U(h.released[0], 0); /* W never left */
    CHECK_EQ_U(h.released[1], 3); /* A did, each iteration */
    CHECK(s.over_budget_kernels > 0);
}

TIO_TEST(missing_prefetch_becomes_urgent_read) {
    struct tio_trace *tr = make_trace();
    struct tio_plan *plan = tr ? make_plan(tr, TIO_TIER_SSD, 0) : NULL;
    struct tio_engine *e = make_engine("posix", NULL);
    REQUIRE(tr && plan && e);
    struct host h;
    struct tio_runtime *rt = start(tr, plan, e, &h);
    int ok = 1;
    CHECK_OK(iterate(rt, &h, &ok));
    CHECK(ok);
    struct tio_runtime_stats s;
    tio_runtime_get_stats(rt, &s);
    /* W's last move is an offload, so the plan's steady state has W stored at iteration start:
     * begin_iteration writes it, k0 reads it back (urgent), then A at k6 and W at k7. */
    CHECK_EQ_U(s.urgent_reads, 3);
    CHECK_EQ_U(s.prefetches, 3);
    tio_runtime_free(rt);
    free(h.buf[0]);
    rt_free_inputs(plan, e, tr);
}

TIO_TEST(plan_of_another_trace_is_refused) {
    struct tio_trace *tr = make_trace();
    struct tio_plan *p = NULL;
    struct tio_engine *e = make_engine("posix", NULL);
    REQUIRE(tr && e);
    CHECK_OK(tio_plan_new(12345, NK, "test", &p));
    CHECK_OK(tio_plan_finish(p));
    struct tio_runtime_params rp = rt_params(tr, p, e);
    struct tio_runtime *rt = NULL;
    CHECK_RC(tio_runtime_new(&rp, &rt), TIO_EPLAN);
    rp.engine = NULL;
    CHECK_RC(tio_runtime_new(&rp, &rt), TIO_EINVAL);
    CHECK_ERR_HAS("engine");
    rt_free_inputs(p, e, tr);
}

TIO_TEST(io_fault_is_reported_and_data_kept) {
    struct tio_trace *tr = make_trace();
    struct tio_plan *plan = tr ? make_plan(tr, TIO_TIER_SSD, 1) : NULL;
    /* The third write and every retry of it fail: W is written in iteration 1 (write 1), A
     * (write 2), then W again in iteration 2 (writes 3..): the error surfaces there. */
    struct tio_engine *e = make_engine("fault", "write_fail=3,write_fail_count=100");
    REQUIRE(tr && plan && e);
    struct host h;
    struct tio_runtime *rt = start(tr, plan, e, &h);
    int ok = 1, rc = 0;
    for (int it = 0; it < 3 && rc == 0; it++) {
        rc = iterate(rt, &h, &ok);
    }
    CHECK(rc < 0);
    CHECK_ERR_HAS("tensor");
    printf("  reported: %s\n", tio_last_error());
    /* The weight whose write failed was never released: its bytes are intact. */
    CHECK(h.buf[0] != NULL && same(h.buf[0], 2 * MB, 1));
    tio_runtime_free(rt);
    free(h.buf[0]);
    free(h.buf[1]);
    free(h.buf[2]);
    rt_free_inputs(plan, e, tr);
}

/* The wait hook (tio_runtime_set_wait_hook) brackets every wait for the engine and nothing
 * else: enter and leave alternate, starting with enter. */
struct hook_log {
    int inside, waits, misordered;
};

static void wait_hook(void *ctx, int waiting) {
    struct hook_log *l = ctx;
    l->misordered += waiting == l->inside;
    l->inside = waiting;
    l->waits += waiting;
}

TIO_TEST(wait_hook_brackets_every_wait) {
    struct tio_trace *tr = make_trace();
    struct tio_plan *plan = tr ? make_plan(tr, TIO_TIER_SSD, 1) : NULL;
    struct tio_plan *none = tr ? rt_plan(tr, NK, NULL, 0) : NULL;
    struct tio_engine *e = make_engine("posix", NULL);
    REQUIRE_OR(tr && plan && none && e, (tio_plan_free(none), rt_free_inputs(plan, e, tr)));
    /* The budget makes kernels 1 and 2 wait for the offloads they issue (see the trace above),
     * in every iteration. */
    struct host h;
    struct tio_runtime *rt = start(tr, plan, e, &h);
    struct hook_log log = { 0 };
    tio_runtime_set_wait_hook(rt, wait_hook, &log);
    int ok = 1;
    for (int it = 0; it < 3; it++) {
        CHECK_OK(iterate(rt, &h, &ok));
    }
    CHECK(ok);
    CHECK_EQ_I(log.misordered, 0);
    CHECK_EQ_I(log.inside, 0);
    CHECK(log.waits >= 6);
    int waits = log.waits;
    tio_runtime_set_wait_hook(rt, NULL, &log); /* removed: not called again */
    CHECK_OK(iterate(rt, &h, &ok));
    CHECK_EQ_I(log.waits, waits);
    tio_runtime_free(rt);
    free(h.buf[0]);
    /* No move and no budget: nothing to wait for, so the hook is never called. */
    struct tio_runtime_params rp = rt_params(tr, none, e);
    CHECK_OK(tio_runtime_new(&rp, &rt));
    h = (struct host){ .bytes = { 2 * MB, MB, MB } };
    h.buf[0] = malloc(2 * MB);
    fill(h.buf[0], 2 * MB, 1);
    CHECK_OK(tio_runtime_bind(rt, 0, h.buf[0]));
    log = (struct hook_log){ 0 };
    tio_runtime_set_wait_hook(rt, wait_hook, &log);
    for (int it = 0; it < 2; it++) {
        CHECK_OK(iterate(rt, &h, &ok));
    }
    CHECK(ok);
    CHECK_EQ_I(log.waits, 0);
    CHECK_EQ_I(log.misordered, 0);
    tio_runtime_free(rt);
    free(h.buf[0]);
    tio_plan_free(none);
    rt_free_inputs(plan, e, tr);
}

int main(void) {
    if (!mkdtemp(g_dir)) {
        return 1;
    }
    RUN(ssd_tier_round_trip);
    RUN(host_tier_round_trip);
    RUN(full_host_tier_falls_back_to_the_ssd);
    RUN(no_room_in_any_tier_keeps_the_tensor);
    RUN(missing_prefetch_becomes_urgent_read);
    RUN(plan_of_another_trace_is_refused);
    RUN(io_fault_is_reported_and_data_kept);
    RUN(wait_hook_brackets_every_wait);
    rmdir(g_dir);
    return tio_test_done();
}
