/* The executor enforces the budget itself when the plan cannot (demand offloads, Belady order).
 * Traces are tiny and hand-built; the plans are empty (infeasible: they move nothing), and every
 * expected action, counter and peak below is worked out by hand in the comments. Besides the
 * executor's own counters, the caller measures the memory it really holds (sum of its live
 * buffers) after performing the actions and creating kernel k's outputs. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <teraio/io.h>
#include <teraio/plan.h>
#include <teraio/runtime.h>
#include <teraio/trace.h>

#include "../tio_test.h"
#include "io_util.h"
#include "runtime_util.h"

#define MB   (UINT64_C(1) << 20)
#define MAXT 8
#define MAXK 8
#define MAXU 4

struct use {
    int t, mode;
};

struct spec {
    int nt, nk;
    uint64_t bytes[MAXT];
    int global[MAXT];
    const char *kname[MAXK];
    struct use uses[MAXK][MAXU]; /* terminated by mode 0 */
};

static struct tio_trace *build(const struct spec *s) {
    struct tio_trace *tr;
    if (tio_trace_new(NULL, &tr) < 0) {
        return NULL;
    }
    int rc = 0;
    for (int t = 0; t < s->nt; t++) {
        rc |= tio_trace_add_tensor(tr, s->bytes[t],
                                   s->global[t] ? TIO_TENSOR_WEIGHT : TIO_TENSOR_ACTIVATION,
                                   s->global[t] ? TIO_TENSOR_GLOBAL : 0, NULL, NULL);
    }
    for (int k = 0; k < s->nk; k++) {
        rc |= tio_trace_add_kernel(tr, s->kname[k], 1000, 0, NULL);
        for (int i = 0; i < MAXU && s->uses[k][i].mode; i++) {
            rc |= tio_trace_add_use(tr, (uint32_t)s->uses[k][i].t, s->uses[k][i].mode);
        }
    }
    return rt_trace_finish(tr, rc);
}

static char g_dir[] = "/tmp/tio_rtd_XXXXXX";

static struct tio_engine *make_engine(uint64_t host_tier) {
    return rt_engine(g_dir, "posix", NULL, host_tier);
}

/* The caller: real buffers with a per-tensor pattern that changes with every write. */
struct host {
    const struct spec *s;
    uint8_t *buf[MAXT];
    uint8_t version[MAXT];
    int released[MAXT], materialized[MAXT];
    int stored[MAXT]; /* released and not materialised again */
    uint64_t held, peak_held;
    int data_ok;
    int k;                        /* the kernel whose actions apply() performs (-1: iteration) */
    char log[MAXK][4 * MAXT + 1]; /* per kernel of the last iteration: its actions in order,
                                     "r2" for RELEASE of tensor 2, "m0" for MATERIALIZE of 0 */
};

static uint8_t pat(int t, uint8_t version, size_t i) {
    return (uint8_t)(t * 31 + version * 7 + (int)(i % 251));
}

static void fill(struct host *h, int t) {
    for (size_t i = 0; i < h->s->bytes[t]; i++) {
        h->buf[t][i] = pat(t, h->version[t], i);
    }
}

static int check(struct host *h, int t) {
    if (!h->buf[t]) {
        return 0;
    }
    for (size_t i = 0; i < h->s->bytes[t]; i += 4093) {
        if (h->buf[t][i] != pat(t, h->version[t], i)) {
            return 0;
        }
    }
    return 1;
}

static void drop(struct host *h, int t) {
    memset(h->buf[t], 0xEE, h->s->bytes[t]); /* poison, as a real free would */
    free(h->buf[t]);
    h->buf[t] = NULL;
    h->held -= h->s->bytes[t];
}

static int alloc(struct tio_runtime *rt, struct host *h, int t) {
    h->buf[t] = malloc(h->s->bytes[t]);
    if (!h->buf[t]) {
        return -1;
    }
    memset(h->buf[t], 0xCD, h->s->bytes[t]);
    h->held += h->s->bytes[t];
    return tio_runtime_bind(rt, (uint32_t)t, h->buf[t]);
}

static int apply(struct tio_runtime *rt, struct host *h, struct tio_runtime_action *a, int n) {
    int seen_materialize = 0;
    if (h->k >= 0) {
        h->log[h->k][0] = 0;
    }
    for (int i = 0; i < n; i++) {
        int t = (int)a[i].tensor;
        if (h->k >= 0 && t < 10 && strlen(h->log[h->k]) + 2 < sizeof h->log[0]) {
            char e[3] = { a[i].kind == TIO_RUNTIME_RELEASE ? 'r' : 'm', (char)('0' + t), 0 };
            strcat(h->log[h->k], e);
        }
        if (a[i].kind == TIO_RUNTIME_RELEASE) {
            if (seen_materialize || !h->buf[t]) {
                return -1; /* releases come first; a released tensor was resident */
            }
            drop(h, t);
            h->released[t]++;
            h->stored[t] = 1;
        } else {
            seen_materialize = 1;
            if (h->buf[t] || alloc(rt, h, t) < 0) {
                return -1;
            }
            h->materialized[t]++;
            h->stored[t] = 0;
        }
    }
    return 0;
}

static int last_use(const struct spec *s, int t) {
    int last = -1;
    for (int k = 0; k < s->nk; k++) {
        for (int i = 0; i < MAXU && s->uses[k][i].mode; i++) {
            last = s->uses[k][i].t == t ? k : last;
        }
    }
    return last;
}

/* One iteration. Intermediates are created at their first use (a write) and freed after their
 * last use (free marker included), as their owner would. */
static int iterate(struct tio_runtime *rt, struct host *h) {
    const struct spec *s = h->s;
    struct tio_runtime_action a[MAXT];
    h->k = -1;
    int rc = tio_runtime_begin_iteration(rt, a, MAXT);
    if (rc < 0 || apply(rt, h, a, rc) < 0) {
        return rc < 0 ? rc : -1;
    }
    for (int k = 0; k < s->nk; k++) {
        h->k = k;
        int n = tio_runtime_before_kernel(rt, (uint64_t)k, a, MAXT);
        if (n < 0) {
            return n;
        }
        if (apply(rt, h, a, n) < 0) {
            return -1;
        }
        if ((rc = tio_runtime_ready(rt, (uint64_t)k)) < 0) {
            return rc;
        }
        int marker = strcmp(s->kname[k], TIO_RUNTIME_FREE_KERNEL) == 0;
        for (int i = 0; !marker && i < MAXU && s->uses[k][i].mode; i++) {
            int t = s->uses[k][i].t;
            if (!s->global[t] && !h->buf[t] && !h->stored[t]) {
                if (alloc(rt, h, t) < 0) { /* created by this kernel */
                    return -1;
                }
            } else {
                h->data_ok &= check(h, t);
            }
        }
        if (h->held > h->peak_held) {
            h->peak_held = h->held;
        }
        for (int i = 0; !marker && i < MAXU && s->uses[k][i].mode; i++) {
            int t = s->uses[k][i].t;
            if (s->uses[k][i].mode & TIO_USE_WRITE) {
                h->version[t]++;
                fill(h, t);
            }
        }
        if ((rc = tio_runtime_after_kernel(rt, (uint64_t)k)) < 0) {
            return rc;
        }
        for (int t = 0; t < s->nt; t++) {
            if (!s->global[t] && last_use(s, t) == k) {
                if (h->buf[t]) {
                    drop(h, t);
                }
                h->stored[t] = 0;
                h->version[t] = 0;
            }
        }
    }
    h->k = -1;
    int n = tio_runtime_end_iteration(rt, a, MAXT);
    if (n < 0) {
        return n;
    }
    return apply(rt, h, a, n);
}

struct run {
    struct tio_runtime_stats st;
    struct host h;
    int ok;
};

static void run_plan(const struct spec *s,
                     const struct tio_move *moves,
                     size_t nm,
                     uint64_t budget,
                     uint64_t host_tier,
                     int iterations,
                     struct run *out) {
    memset(out, 0, sizeof *out);
    struct tio_trace *tr = build(s);
    struct tio_plan *plan = tr ? rt_plan(tr, (uint64_t)s->nk, moves, nm) : NULL;
    struct tio_engine *e = make_engine(host_tier);
    REQUIRE_OR(tr && plan && e, rt_free_inputs(plan, e, tr));
    struct tio_runtime_params rp = rt_params(tr, plan, e);
    rp.budget_bytes = budget;
    struct tio_runtime *rt = NULL;
    CHECK_OK(tio_runtime_new(&rp, &rt));
    struct host *h = &out->h;
    h->s = s;
    h->data_ok = 1;
    h->k = -1;
    for (int t = 0; t < s->nt; t++) {
        if (s->global[t] && rt) {
            CHECK_OK(alloc(rt, h, t));
            fill(h, t);
        }
    }
    out->ok = rt != NULL;
    for (int it = 0; it < iterations && out->ok; it++) {
        int rc = iterate(rt, h);
        CHECK_EQ_I(rc, 0);
        if (rc != 0) {
            printf("  %s\n", tio_last_error());
            out->ok = 0;
        }
    }
    CHECK(h->data_ok);
    if (rt) {
        tio_runtime_get_stats(rt, &out->st);
    }
    tio_runtime_free(rt);
    for (int t = 0; t < s->nt; t++) {
        free(h->buf[t]);
        h->buf[t] = NULL;
    }
    rt_free_inputs(plan, e, tr);
}

/* With an empty plan: every move is the executor's own. */
static void run_spec(
    const struct spec *s, uint64_t budget, uint64_t host_tier, int iterations, struct run *out) {
    run_plan(s, NULL, 0, budget, host_tier, iterations, out);
}

/*
 * Two globals W0 (2 MiB), W1 (1 MiB); intermediates A (1 MiB), G (2 MiB).
 *   k0: R W0            resident W0+W1 = 3 MiB
 *   k1: R W1, W A       W0+W1+A = 4 > 3: the only candidate is W0 (next use k5): demand offload
 *                       -> 2 MiB
 *   k2: R A, W G        W1+A+G = 4 > 3: candidate W1 (next use k4) -> 3 MiB
 *   k3: R A, R G        A, G = 3 MiB; A dies
 *   k4: RW W1, R G      W1 STORED: urgent read -> G+W1 = 3 MiB; G dies
 *   k5: RW W0           W0 STORED: urgent read -> W1+W0 = 3 MiB
 * Budget 3 MiB: every kernel fits exactly; without demand offloads k2 would hold 6 MiB. Per
 * iteration: 2 demand offloads (3 MiB, both tensors are dirty again every iteration), 2 urgent
 * reads, each global released and materialised once.
 */
static const struct spec g_s1 = {
    .nt = 4,
    .nk = 6,
    .bytes = { 2 * MB, MB, MB, 2 * MB },
    .global = { 1, 1, 0, 0 },
    .kname = { "k0", "k1", "k2", "k3", "k4", "k5" },
    .uses = { { { 0, TIO_USE_READ } },
              { { 1, TIO_USE_READ }, { 2, TIO_USE_WRITE } },
              { { 2, TIO_USE_READ }, { 3, TIO_USE_WRITE } },
              { { 2, TIO_USE_READ }, { 3, TIO_USE_READ } },
              { { 1, TIO_USE_READ_WRITE }, { 3, TIO_USE_READ } },
              { { 0, TIO_USE_READ_WRITE } } },
};

TIO_TEST(infeasible_plan_is_kept_in_budget_by_demand_offloads) {
    struct run r;
    run_spec(&g_s1, 3 * MB, 0, 3, &r);
    CHECK(r.ok);
    CHECK_EQ_U(r.st.iterations, 3);
    CHECK_EQ_U(r.st.demand_offloads, 6);
    CHECK_EQ_U(r.st.bytes_demand_offloaded, 9 * MB);
    CHECK_EQ_U(r.st.offloads, 6);
    CHECK_EQ_U(r.st.clean_offloads, 0);
    CHECK_EQ_U(r.st.urgent_reads, 6);
    CHECK_EQ_U(r.st.bytes_prefetched, 9 * MB);
    CHECK_EQ_U(r.st.over_budget_kernels, 0);
    CHECK_EQ_U(r.st.peak_resident_bytes, 3 * MB);
    CHECK_EQ_U(r.h.peak_held, 3 * MB); /* what the caller really held */
    CHECK_EQ_U(r.h.released[0], 3);
    CHECK_EQ_U(r.h.materialized[0], 3);
    CHECK_EQ_U(r.h.released[1], 3);
    CHECK_EQ_U(r.h.materialized[1], 3);
    CHECK(r.st.demand_stall_s >= 0.0);
}

TIO_TEST(infeasible_plan_on_the_host_tier) {
    struct run r;
    run_spec(&g_s1, 3 * MB, 8 * MB, 2, &r); /* default demand tier: host while it has room */
    CHECK(r.ok);
    CHECK_EQ_U(r.st.demand_offloads, 4);
    CHECK_EQ_U(r.st.peak_resident_bytes, 3 * MB);
    CHECK_EQ_U(r.h.peak_held, 3 * MB);
}

TIO_TEST(no_budget_means_no_demand_offloads) {
    struct run r;
    run_spec(&g_s1, 0, 0, 1, &r);
    CHECK(r.ok);
    CHECK_EQ_U(r.st.demand_offloads, 0);
    CHECK_EQ_U(r.st.peak_resident_bytes, 6 * MB); /* k2: W0+W1+A+G */
    CHECK_EQ_U(r.h.peak_held, 6 * MB);
}

/*
 * Belady, with a free marker: global W (2 MiB) read at k0 and k3; gradient-like intermediate
 * Gr (1 MiB) written at k0, read at k1, freed at k4 (free marker); T (1 MiB) at k2 only.
 *   k0: W+Gr = 3;  k1: 3;  k2: W+Gr+T = 4 > 3: candidates W (next use k3) and Gr (only its
 *   free marker is left: never read again) -> Gr goes, W stays -> 3;  k3: W = 2;  k4 (marker):
 *   Gr is STORED and not made resident; it dies.
 * Per iteration: one demand offload, released without a write (Gr is never read again, and its
 * owner may free it at any time), nothing read back, W never released.
 */
static const struct spec g_s2 = {
    .nt = 3,
    .nk = 5,
    .bytes = { 2 * MB, MB, MB },
    .global = { 1, 0, 0 },
    .kname = { "k0", "k1", "k2", "k3", TIO_RUNTIME_FREE_KERNEL },
    .uses = { { { 0, TIO_USE_READ }, { 1, TIO_USE_WRITE } },
              { { 1, TIO_USE_READ } },
              { { 2, TIO_USE_WRITE } },
              { { 0, TIO_USE_READ } },
              { { 1, TIO_USE_WRITE } } },
};

TIO_TEST(furthest_next_use_goes_first) {
    struct run r;
    run_spec(&g_s2, 3 * MB, 0, 2, &r);
    CHECK(r.ok);
    CHECK_EQ_U(r.st.demand_offloads, 2);
    CHECK_EQ_U(r.st.dead_releases, 2);
    CHECK_EQ_U(r.st.bytes_demand_offloaded, 0);
    CHECK_EQ_U(r.st.bytes_offloaded, 0);
    CHECK_EQ_U(r.st.prefetches, 0);
    CHECK_EQ_U(r.st.urgent_reads, 0);
    CHECK_EQ_U(r.h.released[0], 0);
    CHECK_EQ_U(r.st.peak_resident_bytes, 3 * MB);
    CHECK_EQ_U(r.h.peak_held, 3 * MB);
    CHECK_EQ_U(r.st.stored_bytes, 0); /* Gr's copy went with it */
}

/*
 * A budget below what one kernel needs: g_s1 with 2 MiB.
 *   k0: W0+W1 = 3 > 2: W1 goes (W0 is used) -> 2
 *   k1: W1 urgent read, A created: W0+W1+A = 4 > 2: W0 goes -> 2
 *   k2: W1+A+G = 4 > 2: W1 goes -> 3; nothing else is movable (A, G are used): over budget
 *   k3: A+G = 3 > 2: nothing movable -> over budget; A dies -> 2
 *   k4: W1 urgent read: G+W1 = 3 > 2, both used -> over budget; G dies
 *   k5: W0 urgent read: W1+W0 = 3 > 2: W1 goes -> 2
 * Demand offloads W1, W0, W1, W1 (4); over_budget_kernels 3; peak 3 MiB. The step still runs.
 */
TIO_TEST(kernel_larger_than_budget_runs_and_is_counted) {
    struct run r;
    run_spec(&g_s1, 2 * MB, 0, 1, &r);
    CHECK(r.ok);
    CHECK_EQ_U(r.st.demand_offloads, 4);
    CHECK_EQ_U(r.st.over_budget_kernels, 3);
    CHECK_EQ_U(r.st.urgent_reads, 3);
    CHECK_EQ_U(r.st.peak_resident_bytes, 3 * MB);
    CHECK_EQ_U(r.h.peak_held, 3 * MB);
}

/*
 * A plan that prefetches too early: g_s1 with "offload W0 at k1, prefetch W0 at k2" (deadline k5).
 *   k1: the planned write of W0 is in flight; W0+W1+A = 4 > 3: wait for it (a pressure stall),
 *       release W0 -> 2
 *   k2: G created and W0 materialised for k5: W1+A+G+W0 = 6 > 3. Candidates: W0 (next use k5,
 *       the prefetch is taken back: no I/O) then W1 (k4, demand offload) -> 3
 *   k4: W1 urgent read -> 3;  k5: W0 urgent read -> 3
 * Per iteration: 1 planned offload, 1 deferred prefetch, 1 demand offload, 2 urgent reads.
 */
TIO_TEST(too_early_prefetch_is_deferred) {
    const struct tio_move m[2] = {
        { .tensor = 0,
          .from = TIO_TIER_GPU,
          .to = TIO_TIER_SSD,
          .trigger = 1,
          .deadline = 2,
          .bytes = 2 * MB },
        { .tensor = 0,
          .from = TIO_TIER_SSD,
          .to = TIO_TIER_GPU,
          .trigger = 2,
          .deadline = 5,
          .bytes = 2 * MB },
    };
    struct run r;
    run_plan(&g_s1, m, 2, 3 * MB, 0, 2, &r);
    CHECK(r.ok);
    CHECK_EQ_U(r.st.deferred_prefetches, 2);
    CHECK_EQ_U(r.st.demand_offloads, 2);
    CHECK_EQ_U(r.st.bytes_demand_offloaded, 2 * MB);
    CHECK_EQ_U(r.st.offloads, 4);
    CHECK_EQ_U(r.st.urgent_reads, 4);
    CHECK_EQ_U(r.st.over_budget_kernels, 0);
    CHECK_EQ_U(r.st.peak_resident_bytes, 3 * MB);
    CHECK_EQ_U(r.h.peak_held, 3 * MB);
    CHECK_EQ_U(r.h.materialized[0], 2); /* the taken-back MATERIALIZE never reached the caller */
}

/* A global the caller already wrote to the engine (e.g. while profiling) starts STORED: g_s1
 * without a budget, W0 adopted as engine tensor 999: k0 reads it back (urgent), with its data;
 * the executor drops the adopted copy when freed. */
TIO_TEST(adopted_global_is_read_back_when_needed) {
    struct tio_trace *tr = build(&g_s1);
    struct tio_plan *plan = tr ? rt_plan(tr, (uint64_t)g_s1.nk, NULL, 0) : NULL;
    struct tio_engine *e = make_engine(0);
    REQUIRE_OR(tr && plan && e, rt_free_inputs(plan, e, tr));
    struct tio_runtime_params rp = rt_params(tr, plan, e);
    struct tio_runtime *rt = NULL;
    CHECK_OK(tio_runtime_new(&rp, &rt));
    struct host h;
    memset(&h, 0, sizeof h);
    h.s = &g_s1;
    h.data_ok = 1;
    /* W0's contents go to the engine, its memory is freed; W1 stays in memory. */
    uint8_t *tmp = malloc(2 * MB);
    h.buf[0] = tmp;
    fill(&h, 0);
    h.buf[0] = NULL;
    struct tio_completion c = { 0, 0 };
    CHECK_OK(io_write(e, 999, tmp, 2 * MB, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 5, NULL));
    CHECK_EQ_I(tio_engine_wait(e, &c, 1, 1, -1), 1);
    CHECK_EQ_I(c.res, (int64_t)(2 * MB));
    memset(tmp, 0, 2 * MB);
    free(tmp);
    CHECK_OK(alloc(rt, &h, 1));
    fill(&h, 1);
    CHECK_RC(tio_runtime_adopt_stored(rt, 1, 998), TIO_ESTATE); /* bound: it is in memory */
    CHECK_RC(tio_runtime_adopt_stored(rt, 2, 997), TIO_EINVAL); /* not a global */
    CHECK_OK(tio_runtime_adopt_stored(rt, 0, 999));
    CHECK_EQ_I(tio_runtime_tensor_state(rt, 0), 3);
    CHECK_EQ_I(iterate(rt, &h), 0);
    CHECK(h.data_ok);
    CHECK_EQ_U(h.materialized[0], 1);
    struct tio_runtime_stats st;
    tio_runtime_get_stats(rt, &st);
    CHECK_EQ_U(st.urgent_reads, 1);
    CHECK_EQ_U(st.bytes_prefetched, 2 * MB);
    CHECK_RC(tio_runtime_adopt_stored(rt, 0, 999), TIO_ESTATE); /* iterations began */
    tio_runtime_free(rt);
    uint64_t b;
    int32_t tier;
    CHECK_RC(tio_engine_tensor_info(e, 999, &b, &tier), TIO_ENOTFOUND); /* dropped */
    for (int t = 0; t < g_s1.nt; t++) {
        free(h.buf[t]);
    }
    rt_free_inputs(plan, e, tr);
}

/* A stored global's copy goes from one executor to the next (a switch between plans): executor A
 * gives W0's copy (engine tensor 999) away, is freed without dropping it, and executor B adopts it
 * and reads W0 back with its data when k0 needs it. A resident global gives nothing; an
 * intermediate is refused. */
TIO_TEST(stored_global_is_handed_to_the_next_executor) {
    struct tio_trace *tr = build(&g_s1);
    struct tio_plan *plan = tr ? rt_plan(tr, (uint64_t)g_s1.nk, NULL, 0) : NULL;
    struct tio_engine *e = make_engine(0);
    REQUIRE_OR(tr && plan && e, rt_free_inputs(plan, e, tr));
    struct tio_runtime_params rp = rt_params(tr, plan, e);
    struct tio_runtime *a = NULL, *b = NULL;
    CHECK_OK(tio_runtime_new(&rp, &a));
    rp.engine_id_base = UINT64_C(1) << 32;
    CHECK_OK(tio_runtime_new(&rp, &b));
    struct host h;
    memset(&h, 0, sizeof h);
    h.s = &g_s1;
    h.data_ok = 1;
    uint8_t *tmp = malloc(2 * MB);
    h.buf[0] = tmp;
    fill(&h, 0);
    h.buf[0] = NULL;
    struct tio_completion c = { 0, 0 };
    CHECK_OK(io_write(e, 999, tmp, 2 * MB, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 5, NULL));
    CHECK_EQ_I(tio_engine_wait(e, &c, 1, 1, -1), 1);
    memset(tmp, 0, 2 * MB);
    free(tmp);
    CHECK_OK(tio_runtime_adopt_stored(a, 0, 999));
    uint64_t id = 0;
    CHECK_EQ_I(tio_runtime_give_stored(a, 1, &id), 0);        /* resident: nothing to give */
    CHECK_RC(tio_runtime_give_stored(a, 2, &id), TIO_EINVAL); /* not a global */
    CHECK_EQ_I(tio_runtime_give_stored(a, 0, &id), 1);
    CHECK_EQ_U(id, 999);
    CHECK_EQ_I(tio_runtime_give_stored(a, 0, &id), 0); /* given once */
    tio_runtime_free(a);
    uint64_t nb;
    int32_t tier;
    CHECK_OK(tio_engine_tensor_info(e, 999, &nb, &tier)); /* A did not drop it */
    CHECK_OK(tio_runtime_adopt_stored(b, 0, id));
    CHECK_OK(alloc(b, &h, 1));
    fill(&h, 1);
    CHECK_EQ_I(iterate(b, &h), 0);
    CHECK(h.data_ok);
    CHECK_EQ_U(h.materialized[0], 1);
    CHECK_RC(tio_runtime_give_stored(b, 0, NULL), TIO_EINVAL);
    tio_runtime_free(b);
    CHECK_RC(tio_engine_tensor_info(e, 999, &nb, &tier), TIO_ENOTFOUND); /* B dropped it */
    for (int t = 0; t < g_s1.nt; t++) {
        free(h.buf[t]);
    }
    rt_free_inputs(plan, e, tr);
}

TIO_TEST(bad_demand_tier_is_refused) {
    struct tio_trace *tr = build(&g_s1);
    struct tio_plan *plan = tr ? rt_plan(tr, (uint64_t)g_s1.nk, NULL, 0) : NULL;
    struct tio_engine *e = make_engine(0);
    CHECK(tr && plan && e);
    if (tr && plan && e) {
        struct tio_runtime_params rp = rt_params(tr, plan, e);
        rp.demand_tier = TIO_TIER_GPU + 7;
        struct tio_runtime *rt = NULL;
        CHECK_RC(tio_runtime_new(&rp, &rt), TIO_EINVAL);
        CHECK_ERR_HAS("demand_tier");
    }
    rt_free_inputs(plan, e, tr);
}

/*
 * The order of the actions within one call: RELEASE before MATERIALIZE, each kind by tensor id,
 * whatever the order in which the offloads completed or the victims were picked. Four globals
 * of 1 MiB, all read only, budget 2 MiB:
 *   k0: R 0, R 1   all 4 resident: victims 2 and 3 (both next used at k1; lower id first),
 *                  written, released: r2 r3
 *   k1: R 2, R 3   2 and 3 read back (urgent); victims 0 and 1 (next use k2): r0 r1 m2 m3
 *   k2: R 0, R 1   0 and 1 read back; victims 3 (next use k4) then 2 (k3), both clean (stored
 *                  and not written since): released at once, in id order: r2 r3 m0 m1
 *   k3: R 2        victims 0 and 1 tie (next use: k0 of the next iteration); the lower id, 0,
 *                  clean: r0 m2
 *   k4: R 3        victims 1 (next iteration's k0) and 2 (its k1): 2, clean: r2 m3
 * Per iteration: 8 demand offloads (4 clean: 4 MiB written), 6 urgent reads, 2 MiB held.
 */
static const struct spec g_s4 = {
    .nt = 4,
    .nk = 5,
    .bytes = { MB, MB, MB, MB },
    .global = { 1, 1, 1, 1 },
    .kname = { "k0", "k1", "k2", "k3", "k4" },
    .uses = { { { 0, TIO_USE_READ }, { 1, TIO_USE_READ } },
              { { 2, TIO_USE_READ }, { 3, TIO_USE_READ } },
              { { 0, TIO_USE_READ }, { 1, TIO_USE_READ } },
              { { 2, TIO_USE_READ } },
              { { 3, TIO_USE_READ } } },
};

TIO_TEST(actions_come_in_id_order_within_their_kind) {
    struct run r;
    run_spec(&g_s4, 2 * MB, 0, 1, &r);
    CHECK(r.ok);
    CHECK_STR(r.h.log[0], "r2r3");
    CHECK_STR(r.h.log[1], "r0r1m2m3");
    CHECK_STR(r.h.log[2], "r2r3m0m1");
    CHECK_STR(r.h.log[3], "r0m2");
    CHECK_STR(r.h.log[4], "r2m3");
    CHECK_EQ_U(r.st.demand_offloads, 8);
    CHECK_EQ_U(r.st.clean_offloads, 4);
    CHECK_EQ_U(r.st.bytes_demand_offloaded, 4 * MB);
    CHECK_EQ_U(r.st.urgent_reads, 6);
    CHECK_EQ_U(r.st.over_budget_kernels, 0);
    CHECK_EQ_U(r.st.peak_resident_bytes, 2 * MB);
    CHECK_EQ_U(r.h.peak_held, 2 * MB);
}

int main(void) {
    if (!mkdtemp(g_dir)) {
        return 1;
    }
    RUN(infeasible_plan_is_kept_in_budget_by_demand_offloads);
    RUN(infeasible_plan_on_the_host_tier);
    RUN(no_budget_means_no_demand_offloads);
    RUN(furthest_next_use_goes_first);
    RUN(kernel_larger_than_budget_runs_and_is_counted);
    RUN(too_early_prefetch_is_deferred);
    RUN(adopted_global_is_read_back_when_needed);
    RUN(stored_global_is_handed_to_the_next_executor);
    RUN(bad_demand_tier_is_refused);
    RUN(actions_come_in_id_order_within_their_kind);
    rmdir(g_dir);
    return tio_test_done();
}
