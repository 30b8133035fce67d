/*
 * The random traces and plans of test_runtime_stream.c (header-only; that test is one
 * executable): a trace of globals and intermediates with random uses, the planner's plan at a
 * capacity between the largest working set and the peak, a random plan (offloads and prefetches
 * in the gaps between uses), and a plan with every move sent to one tier.
 */
#ifndef TIO_TESTS_IO_STREAM_SPEC_H
#define TIO_TESTS_IO_STREAM_SPEC_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <teraio/hw.h>
#include <teraio/plan.h>
#include <teraio/trace.h>

#include "io/runtime_util.h"

#define KiB      UINT64_C(1024)
#define MAX_T    24
#define MAX_K    32
#define MAX_USES 16 /* >= the tensors of a trace: add_use never fails */

/* ---- random numbers ---------------------------------------------------------------------- */
static uint64_t rng_next(uint64_t *x) {
    uint64_t z = (*x += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}
static uint64_t rng_below(uint64_t *x, uint64_t n) {
    return n ? rng_next(x) % n : 0;
}

/* ---- the trace ------------------------------------------------------------------------------ */
struct use {
    uint32_t t;
    int32_t mode;
};
struct spec {
    uint32_t nt, ng, nk; /* tensors 0..ng-1 are globals */
    uint64_t bytes[MAX_T];
    uint32_t first[MAX_T], last[MAX_T]; /* intermediates: first (a write) and last use */
    uint32_t nu[MAX_K];
    struct use u[MAX_K][MAX_USES];
};

static int has_use(const struct spec *s, uint32_t k, uint32_t t) {
    for (uint32_t i = 0; i < s->nu[k]; i++)
        if (s->u[k][i].t == t)
            return 1;
    return 0;
}
static void add_use(struct spec *s, uint32_t k, uint32_t t, int32_t mode) {
    if (s->nu[k] < MAX_USES && !has_use(s, k, t))
        s->u[k][s->nu[k]++] = (struct use){ t, mode };
}

static void make_spec(struct spec *s, uint64_t seed) {
    uint64_t x = seed;
    memset(s, 0, sizeof *s);
    s->ng = 2 + (uint32_t)rng_below(&x, 3);
    s->nt = s->ng + 4 + (uint32_t)rng_below(&x, 9);
    s->nk = 8 + (uint32_t)rng_below(&x, 14);
    for (uint32_t t = 0; t < s->nt; t++) /* 4 KiB .. 128 KiB, now and then 1 MiB */
        s->bytes[t] = rng_below(&x, 24) == 0 ? 1024 * KiB : (4 * KiB) << rng_below(&x, 6);
    for (uint32_t t = s->ng; t < s->nt; t++) { /* written at first, read at last, some between */
        uint32_t f = (uint32_t)rng_below(&x, s->nk - 2);
        uint32_t l = f + 2 + (uint32_t)rng_below(&x, s->nk - f - 2);
        s->first[t] = f;
        s->last[t] = l;
        add_use(s, f, t, TIO_USE_WRITE);
        for (uint32_t k = f + 1; k < l; k++)
            if (rng_below(&x, 5) == 0)
                add_use(s, k, t, rng_below(&x, 2) ? TIO_USE_READ : TIO_USE_READ_WRITE);
        if (!has_use(s, l, t) && s->nu[l] < MAX_USES) {
            add_use(s, l, t, rng_below(&x, 2) ? TIO_USE_READ : TIO_USE_READ_WRITE);
        } else if (!has_use(s, l, t)) { /* kernel full: end where the last use landed */
            uint32_t k = l;
            while (k > f && !has_use(s, k, t))
                k--;
            s->last[t] = k;
        }
    }
    for (uint32_t g = 0; g < s->ng; g++) {
        int n = 0;
        for (uint32_t k = 0; k < s->nk; k++) {
            if (rng_below(&x, 4) != 0)
                continue;
            uint64_t r = rng_below(&x, 10);
            int32_t mode = r < 6 ? TIO_USE_READ : r < 9 ? TIO_USE_READ_WRITE : TIO_USE_WRITE;
            add_use(s, k, g, mode);
            n++;
        }
        for (; n < 2; n++)
            add_use(s, (uint32_t)rng_below(&x, s->nk), g, TIO_USE_READ);
    }
    /* an intermediate alive over a full kernel keeps a use list in step with [first, last] */
    for (uint32_t t = s->ng; t < s->nt; t++) {
        uint32_t f = s->nk, l = 0;
        for (uint32_t k = 0; k < s->nk; k++)
            if (has_use(s, k, t)) {
                f = k < f ? k : f;
                l = k;
            }
        s->first[t] = f;
        s->last[t] = l;
    }
}

static struct tio_trace *spec_trace(const struct spec *s) {
    struct tio_trace *tr = NULL;
    if (tio_trace_new(NULL, &tr) < 0)
        return NULL;
    int rc = 0;
    for (uint32_t t = 0; t < s->nt; t++) {
        char name[16];
        (void)snprintf(name, sizeof name, "t%u", t);
        rc |= tio_trace_add_tensor(tr, s->bytes[t],
                                   t < s->ng ? TIO_TENSOR_WEIGHT : TIO_TENSOR_ACTIVATION,
                                   t < s->ng ? TIO_TENSOR_GLOBAL : 0, name, NULL);
    }
    for (uint32_t k = 0; k < s->nk; k++) {
        rc |= tio_trace_add_kernel(tr, "k", 100000, 0, NULL);
        for (uint32_t i = 0; i < s->nu[k]; i++)
            rc |= tio_trace_add_use(tr, s->u[k][i].t, s->u[k][i].mode);
    }
    return rt_trace_finish(tr, rc);
}

/* Bytes resident at k if nothing moved; the largest kernel working set. */
static void spec_sizes(const struct spec *s, uint64_t *peak, uint64_t *max_ws) {
    *peak = *max_ws = 0;
    for (uint32_t k = 0; k < s->nk; k++) {
        uint64_t live = 0, ws = 0;
        for (uint32_t t = 0; t < s->nt; t++)
            if (t < s->ng || (s->first[t] <= k && k <= s->last[t]))
                live += s->bytes[t];
        for (uint32_t i = 0; i < s->nu[k]; i++)
            ws += s->bytes[s->u[k][i].t];
        *peak = live > *peak ? live : *peak;
        *max_ws = ws > *max_ws ? ws : *max_ws;
    }
}

/* The planner's plan at a capacity between the largest working set and the peak. */
static struct tio_plan *
planner_plan(const struct tio_trace *tr, const struct spec *s, uint64_t *x, uint64_t *cap) {
    uint64_t peak, ws;
    spec_sizes(s, &peak, &ws);
    struct tio_hw hw;
    if (tio_hw_preset("cpu-ci", &hw) < 0)
        return NULL;
    uint64_t c = peak / 2 + rng_below(x, peak / 4);
    *cap = c > ws ? c : ws;
    hw.gpu_memory_bytes = *cap;
    hw.gpu_reserve_bytes = 0;
    hw.host_offload_cap_bytes = 2 * 1024 * KiB;
    struct tio_plan_params pp = tio_plan_params_default();
    pp.policy = "teraio-mixed";
    pp.min_tensor_bytes = 4 * KiB;
    struct tio_plan *plan = NULL;
    if (tio_plan_make(tr, &hw, &pp, &plan) < 0) {
        printf("  planner: %s\n", tio_last_error());
        return NULL;
    }
    return plan;
}

/* A random plan: for each gap between two uses of a tensor (a global's wrap-around gap too),
 * maybe an offload after the first, then maybe a prefetch before the second. */
static struct tio_plan *
random_plan(const struct tio_trace *tr, const struct spec *s, uint64_t *x, int32_t only) {
    struct tio_move m[256];
    size_t nm = 0;
    for (uint32_t t = 0; t < s->nt; t++) {
        uint32_t at[MAX_K], n = 0;
        for (uint32_t k = 0; k < s->nk; k++)
            if (has_use(s, k, t))
                at[n++] = k;
        for (uint32_t i = 0; i < n && nm + 2 <= sizeof m / sizeof m[0]; i++) {
            uint64_t a = at[i], b;
            if (i + 1 < n)
                b = at[i + 1];
            else if (t < s->ng)
                b = at[0] + s->nk; /* the next iteration's first use */
            else
                break;
            if (b - a < 2 || rng_below(x, 3) == 0)
                continue;
            uint64_t off = a + 1 + rng_below(x, b - a - 1);
            if (off >= s->nk)
                continue;
            int32_t tier = only ? only : rng_below(x, 2) ? TIO_TIER_HOST : TIO_TIER_SSD;
            m[nm++] = (struct tio_move){ .tensor = t,
                                         .from = TIO_TIER_GPU,
                                         .to = tier,
                                         .trigger = off,
                                         .deadline = b,
                                         .bytes = s->bytes[t] };
            if (b - off >= 2 && rng_below(x, 5) != 0) { /* else read when needed */
                uint64_t pre = off + 1 + rng_below(x, b - off - 1);
                if (pre < s->nk)
                    m[nm++] = (struct tio_move){ .tensor = t,
                                                 .from = tier,
                                                 .to = TIO_TIER_GPU,
                                                 .trigger = pre,
                                                 .deadline = b,
                                                 .bytes = s->bytes[t] };
            }
        }
    }
    return rt_plan(tr, s->nk, m, nm);
}

/* p with every move to or from a tier sent to or from `only` instead (p is freed). */
static struct tio_plan *
only_tier(struct tio_plan *p, const struct tio_trace *tr, uint64_t nk, int32_t only) {
    size_t nm = 0;
    const struct tio_move *pm = p ? tio_plan_moves(p, &nm) : NULL;
    struct tio_move *m = malloc((nm ? nm : 1) * sizeof *m);
    for (size_t i = 0; m && i < nm; i++) {
        m[i] = pm[i];
        m[i].from = m[i].from == TIO_TIER_GPU ? TIO_TIER_GPU : only;
        m[i].to = m[i].to == TIO_TIER_GPU ? TIO_TIER_GPU : only;
    }
    struct tio_plan *q = m && p ? rt_plan(tr, nk, m, nm) : NULL;
    free(m);
    tio_plan_free(p);
    return q;
}

#endif
