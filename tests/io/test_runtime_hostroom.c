/*
 * The executor's host-tier accounting against the plan's: the planner and the simulator count a
 * tensor's host copy as freed when the tensor is read back (and a stale one when it is modified),
 * so the host room a plan needs is the bytes its offloads hold over their inactive periods. The
 * executor may keep the copy of a tensor read back (an unchanged tensor's next offload then writes
 * nothing), but such a copy must not keep a planned host-tier offload out of the host tier.
 *
 * The engine has a host tier of 1 MiB, exactly what the plan holds at once, and an SSD directory
 * (where a host-tier offload that finds no room goes, counted in tier_fallbacks). Budget 1.5 MiB,
 * worked out by hand for the trace (N = 8 kernels):
 *
 *   A  global, 1 MiB      read by k0 and k4 (k4 modifies it in the `stale` case)
 *   B  intermediate, 512 KiB, written by k1, read by k7
 *   T  temp, 1 MiB        written by k2 (its only use)
 *
 *   plan: offload A to the host at 1, prefetch A at 3 (deadline 4), offload B to the host at 5,
 *         prefetch B at 6 (deadline 7); host bytes held: A over [1, 4), B over [5, 7): 1 MiB
 *   k2: A + B + T = 2.5 MiB > 1.5: the executor waits for A's write and releases A (stored)
 *   k4: A read back (ready waits for it); k5: B's offload needs host room while A is in memory
 *
 * Kept: B goes to the host tier because A's copy is dropped (host_copies_dropped), and A's next
 * offload (next iteration) writes again. Stale: A's copy is older than A after k4 and is dropped
 * there. Either way: no fallback, every byte read back intact.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <teraio/io.h>
#include <teraio/plan.h>
#include <teraio/runtime.h>
#include <teraio/trace.h>

#include "../tio_test.h"
#include "runtime_util.h"

#define KiB    UINT64_C(1024)
#define MiB    (KiB * KiB)
#define NK     8
#define ITERS  3
#define ACTMAX 8

enum { A, B, T, NT };
static const uint64_t bytes_of[NT] = { MiB, 512 * KiB, MiB };

static char g_dir[] = "/tmp/tio_hostroom_XXXXXX";

static struct tio_trace *make_trace(int stale) {
    struct tio_trace *tr;
    if (tio_trace_new(NULL, &tr) < 0) {
        return NULL;
    }
    int rc = tio_trace_add_tensor(tr, bytes_of[A], TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, "A", NULL);
    rc |= tio_trace_add_tensor(tr, bytes_of[B], TIO_TENSOR_ACTIVATION, 0, "B", NULL);
    rc |= tio_trace_add_tensor(tr, bytes_of[T], TIO_TENSOR_TEMP, 0, "T", NULL);
    static const int use_t[NK] = { A, B, T, -1, A, -1, -1, B };
    const int32_t use_m[NK] = { TIO_USE_READ,
                                TIO_USE_WRITE,
                                TIO_USE_WRITE,
                                0,
                                stale ? TIO_USE_READ_WRITE : TIO_USE_READ,
                                0,
                                0,
                                TIO_USE_READ };
    for (int k = 0; k < NK; k++) {
        rc |= tio_trace_add_kernel(tr, "k", 1000, 0, NULL);
        if (use_t[k] >= 0) {
            rc |= tio_trace_add_use(tr, (uint32_t)use_t[k], use_m[k]);
        }
    }
    return rt_trace_finish(tr, rc);
}

static struct tio_plan *make_plan(const struct tio_trace *tr) {
    const int32_t G = TIO_TIER_GPU, H = TIO_TIER_HOST;
    const struct tio_move m[4] = {
        { .tensor = A, .from = G, .to = H, .trigger = 1, .deadline = 2, .bytes = bytes_of[A] },
        { .tensor = A, .from = H, .to = G, .trigger = 3, .deadline = 4, .bytes = bytes_of[A] },
        { .tensor = B, .from = G, .to = H, .trigger = 5, .deadline = 6, .bytes = bytes_of[B] },
        { .tensor = B, .from = H, .to = G, .trigger = 6, .deadline = 7, .bytes = bytes_of[B] },
    };
    return rt_plan(tr, NK, m, 4);
}

/* The caller: owns the buffers, performs the actions, checks the bytes each kernel reads. */
struct caller {
    uint8_t *buf[NT];
    int ok;
};

static uint8_t pattern(uint32_t t, int gen, size_t i) {
    return (uint8_t)(t * 31u + (unsigned)gen * 17u + i * 7u);
}

static void fill(struct caller *c, uint32_t t, int gen) {
    for (size_t i = 0; i < bytes_of[t]; i++) {
        c->buf[t][i] = pattern(t, gen, i);
    }
}

static void check(struct caller *c, uint32_t t, int gen) {
    int same = c->buf[t] != NULL;
    for (size_t i = 0; same && i < bytes_of[t]; i++) {
        same = c->buf[t][i] == pattern(t, gen, i);
    }
    c->ok &= same;
}

static int
apply(struct tio_runtime *rt, struct caller *c, const struct tio_runtime_action *a, int n) {
    for (int i = 0; i < n; i++) {
        uint32_t t = a[i].tensor;
        if (a[i].kind == TIO_RUNTIME_RELEASE) {
            memset(c->buf[t], 0xEE, bytes_of[t]); /* poison, as a real free would */
            free(c->buf[t]);
            c->buf[t] = NULL;
        } else {
            c->buf[t] = malloc(a[i].bytes);
            if (!c->buf[t] || tio_runtime_bind(rt, t, c->buf[t]) < 0) {
                return -1;
            }
            memset(c->buf[t], 0xCD, a[i].bytes);
        }
    }
    return 0;
}

/* One iteration; `gen` is A's contents generation, advanced by k4 when it modifies A. */
static int iterate(struct tio_runtime *rt, struct caller *c, int stale, int *gen) {
    struct tio_runtime_action a[ACTMAX];
    int n = tio_runtime_begin_iteration(rt, a, ACTMAX);
    if (n < 0 || apply(rt, c, a, n) < 0) {
        return -1;
    }
    for (uint64_t k = 0; k < NK; k++) {
        n = tio_runtime_before_kernel(rt, k, a, ACTMAX);
        if (n < 0 || apply(rt, c, a, n) < 0 || tio_runtime_ready(rt, k) < 0) {
            return -1;
        }
        if (k == 0 || k == 4) {
            check(c, A, *gen);
        }
        if (k == 4 && stale) {
            fill(c, A, ++*gen);
        }
        if (k == 1 || k == 2) { /* B, T created */
            uint32_t t = k == 1 ? B : T;
            c->buf[t] = malloc(bytes_of[t]);
            if (!c->buf[t] || tio_runtime_bind(rt, t, c->buf[t]) < 0) {
                return -1;
            }
            fill(c, t, 0);
        }
        if (k == 2 || k == 7) {
            check(c, k == 2 ? T : B, 0);
        }
        if (tio_runtime_after_kernel(rt, k) < 0) {
            return -1;
        }
        if (k == 2 || k == 7) { /* T, B die: freed once after_kernel left no write reading them */
            uint32_t t = k == 2 ? T : B;
            free(c->buf[t]);
            c->buf[t] = NULL;
        }
    }
    n = tio_runtime_end_iteration(rt, a, ACTMAX);
    return n < 0 ? -1 : apply(rt, c, a, n);
}

static void run(int stale, struct tio_runtime_stats *s) {
    memset(s, 0, sizeof *s);
    struct tio_trace *tr = make_trace(stale);
    struct tio_plan *plan = tr ? make_plan(tr) : NULL;
    struct tio_engine *e = rt_engine(g_dir, "posix", NULL, MiB);
    struct tio_runtime *rt = NULL;
    struct caller c = { .ok = 1 };
    int gen = 0;
    REQUIRE_OR(tr && plan && e, rt_free_inputs(plan, e, tr));
    struct tio_runtime_params rp = rt_params(tr, plan, e);
    rp.budget_bytes = 3 * MiB / 2;
    CHECK_OK(tio_runtime_new(&rp, &rt));
    REQUIRE_OR(rt != NULL, rt_free_inputs(plan, e, tr));
    c.buf[A] = malloc(bytes_of[A]);
    REQUIRE_OR(c.buf[A] && tio_runtime_bind(rt, A, c.buf[A]) == 0,
               (free(c.buf[A]), tio_runtime_free(rt), rt_free_inputs(plan, e, tr)));
    fill(&c, A, gen);
    for (int it = 0; it < ITERS; it++) {
        int rc = iterate(rt, &c, stale, &gen);
        CHECK(rc == 0);
        if (rc != 0) {
            printf("  iteration %d: %s\n", it, tio_last_error());
            break;
        }
    }
    CHECK(c.ok);
    tio_runtime_get_stats(rt, s);
    tio_runtime_free(rt);
    for (int t = 0; t < NT; t++) {
        free(c.buf[t]);
    }
    rt_free_inputs(plan, e, tr);
}

/* A read back and unchanged holds its copy until B's offload needs the room. */
TIO_TEST(kept_copy_makes_room_for_a_planned_offload) {
    struct tio_runtime_stats s;
    run(0, &s);
    CHECK_EQ_U(s.iterations, ITERS);
    CHECK_EQ_U(s.tier_fallbacks, 0); /* B went to the host tier, every iteration */
    CHECK_EQ_U(s.tier_full_kept, 0);
    CHECK_EQ_U(s.host_copies_dropped, ITERS); /* A's, for B */
    CHECK_EQ_U(s.clean_offloads, 0);          /* so A's next offload writes again */
    /* per iteration A and B written once (B may come back without a read: its prefetch can
     * find its write not yet released) */
    CHECK_EQ_U(s.bytes_offloaded, ITERS * (bytes_of[A] + bytes_of[B]));
    CHECK_EQ_U(s.urgent_reads, 0);
    CHECK_EQ_U(s.demand_offloads, 0);
}

/* A modified after its read-back: the copy is stale and gone at once (not counted as a drop for
 * room: it is never read again). */
TIO_TEST(stale_copy_is_dropped_when_modified) {
    struct tio_runtime_stats s;
    run(1, &s);
    CHECK_EQ_U(s.iterations, ITERS);
    CHECK_EQ_U(s.tier_fallbacks, 0);
    CHECK_EQ_U(s.tier_full_kept, 0);
    CHECK_EQ_U(s.host_copies_dropped, 0);
    CHECK_EQ_U(s.clean_offloads, 0);
    CHECK_EQ_U(s.bytes_offloaded, ITERS * (bytes_of[A] + bytes_of[B]));
    CHECK_EQ_U(s.demand_offloads, 0);
}

int main(void) {
    if (!mkdtemp(g_dir)) {
        return 1;
    }
    RUN(kept_copy_makes_room_for_a_planned_offload);
    RUN(stale_copy_is_dropped_when_modified);
    rmdir(g_dir);
    return tio_test_done();
}
