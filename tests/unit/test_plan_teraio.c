/* The planners on hand-built traces (expected plans worked out by hand in the comments) and
 * invariants on random traces checked by the independent tio_plan_verify. */
#include <stdio.h>
#include <string.h>

#include <teraio/alloc.h>
#include <teraio/hw.h>
#include <teraio/plan.h>
#include <teraio/trace.h>

#include "plan/planner_impl.h"
#include "tio_test.h"

#define MB 1000000ull

static struct tio_hw
tiny_hw(uint64_t capacity, double ssd_Bps, double pcie_Bps, uint64_t host_cap) {
    struct tio_hw hw;
    if (tio_hw_preset("cpu-ci", &hw) < 0) {
        abort();
    }
    hw.gpu_memory_bytes = capacity;
    hw.gpu_reserve_bytes = 0;
    hw.ssd_count = ssd_Bps > 0 ? 1 : 0;
    hw.ssd_read_Bps = ssd_Bps;
    hw.ssd_write_Bps = ssd_Bps;
    hw.ssd_efficiency = 1.0;
    hw.ssd_latency_s = 0; /* the slot arithmetic below; latency: test_plan_latency.c */
    hw.ssd_latency_s = 0; /* the slot arithmetic below; the latency has its own test */
    hw.pcie_h2d_Bps = pcie_Bps;
    hw.pcie_d2h_Bps = pcie_Bps;
    hw.host_memory_bytes = 1000 * MB;
    hw.host_offload_cap_bytes = host_cap;
    return hw;
}

/*
 * 10 kernels of 1 ms. W: global 100 MB used at k0 (read) and k9 (read-write, the optimizer);
 * X: activation 100 MB used at k3 and k6; Y: activation 60 MB at k4 and k5.
 * Resident (MB): 100 100 100 200 260 260 200 100 100 100. Capacity 170 MB -> excess 30 90 90 30
 * at k3..k6. Candidates: W [1, 9) and X [4, 6) (Y has no gap; W's wrap period is empty).
 */
static struct tio_trace *trace_wxy(void) {
    struct tio_trace *tr = NULL;
    uint32_t w, x, y, k;
    if (tio_trace_new(NULL, &tr) < 0 ||
        tio_trace_add_tensor(tr, 100 * MB, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, "W", &w) < 0 ||
        tio_trace_add_tensor(tr, 100 * MB, TIO_TENSOR_ACTIVATION, 0, "X", &x) < 0 ||
        tio_trace_add_tensor(tr, 60 * MB, TIO_TENSOR_ACTIVATION, 0, "Y", &y) < 0) {
        abort();
    }
    for (uint32_t i = 0; i < 10; i++) {
        if (tio_trace_add_kernel(tr, "k", 1000000, 0, &k) < 0) {
            abort();
        }
        int rc = 0;
        if (i == 0) {
            rc = tio_trace_add_use(tr, w, TIO_USE_READ);
        } else if (i == 9) {
            rc = tio_trace_add_use(tr, w, TIO_USE_READ_WRITE);
        } else if (i == 3) {
            rc = tio_trace_add_use(tr, x, TIO_USE_WRITE);
        } else if (i == 6) {
            rc = tio_trace_add_use(tr, x, TIO_USE_READ);
        } else if (i == 4) {
            rc = tio_trace_add_use(tr, y, TIO_USE_WRITE);
        } else if (i == 5) {
            rc = tio_trace_add_use(tr, y, TIO_USE_READ);
        }
        if (rc < 0) {
            abort();
        }
    }
    if (tio_trace_finish(tr) < 0) {
        abort();
    }
    return tr;
}

static int check_move(const struct tio_move *m,
                      uint32_t tensor,
                      int32_t from,
                      int32_t to,
                      uint64_t trigger,
                      uint64_t deadline,
                      uint32_t flags) {
    int ok = m->tensor == tensor && m->from == from && m->to == to && m->trigger == trigger &&
             m->deadline == deadline && m->flags == flags;
    if (!ok) {
        printf("  got tensor %u %s->%s trigger %llu deadline %llu flags %u\n", m->tensor,
               tio_tier_name(m->from), tio_tier_name(m->to), (unsigned long long)m->trigger,
               (unsigned long long)m->deadline, m->flags);
    }
    return ok;
}

/*
 * SSD at 50 GB/s: 50 MB per 1 ms slot. W: the forward walk fills k1 and k2, so W is gone from
 * k3 (offload deadline 3); the backward walk fills k8 and k7 (prefetch trigger 7, deadline 9).
 * The window [3, 7) covers all the excess; after the pick the curve is 100 160 160 100 <= 170.
 * X: the offload fills k4, k5 -> gone from 6 = its next use: no window, not viable.
 * URGENT: k3 holds 100 + 100 > 170 if the offload is late; the prefetch has 2 ms for a 2 ms
 * transfer (< 1.5x). Early prefetch: every kernel in [3, 7) is above 170 - 100, no move.
 */
TIO_TEST(ssd_pick_by_hand) {
    struct tio_trace *tr = trace_wxy();
    struct tio_hw hw = tiny_hw(170 * MB, 50e9, 1000e9, 0);
    const char *pols[] = { "teraio-ssd", "teraio-mixed", "teraio-paper", "g10" };
    for (size_t i = 0; i < 4; i++) {
        struct tio_plan_params pp = tio_plan_params_default();
        pp.policy = pols[i];
        struct tio_plan *p = NULL;
        CHECK_OK(tio_plan_make(tr, &hw, &pp, &p));
        if (!p) {
            continue;
        }
        size_t n;
        const struct tio_move *m = tio_plan_moves(p, &n);
        CHECK_EQ_U(n, 2);
        if (n == 2) {
            CHECK(check_move(&m[0], 0, TIO_TIER_GPU, TIO_TIER_SSD, 1, 3, TIO_MOVE_URGENT));
            CHECK(check_move(&m[1], 0, TIO_TIER_SSD, TIO_TIER_GPU, 7, 9, TIO_MOVE_URGENT));
        }
        struct tio_plan_summary s;
        tio_plan_get_summary(p, &s);
        CHECK_EQ_I(s.feasible, 1);
        CHECK_EQ_U(s.planned_peak_bytes, 160 * MB);
        CHECK_EQ_U(s.bytes_to_ssd, 100 * MB);
        CHECK_EQ_U(s.ssd_peak_bytes, 100 * MB);
        CHECK_STR(tio_plan_policy(p), pols[i]);
        CHECK_OK(tio_plan_verify(p, tr, &hw, &pp, NULL));
        tio_plan_free(p);
    }
    tio_trace_free(tr);
}

/*
 * SSD at 20 GB/s (20 MB per slot): W's offload would end in k5 and its prefetch start at k4:
 * not viable on SSD. Host over PCIe at 120 GB/s less the SSDs' 20: 100 GB/s for host
 * transfers. The offload fills k1; its last byte may move at the end of k1 and a host request
 * completes 10 us after it (TIO_HW_HOST_LATENCY_S), so W is gone from k3 (deadline 3). The
 * latest prefetch must end 10 us before k9 starts: k8 is left out, it fills k7 (trigger 7).
 * With the cap at 100 MB the host holds it. After the pick the curve is 100 100 100 100 160
 * 160 100 100 100 100; early prefetch: every kernel of [3, 7) is above 170 - 100, no move.
 * The offload is URGENT (k3: 100 + 100 > 170); the prefetch is not (2 ms of slack for 1 ms).
 */
TIO_TEST(host_fallback_by_hand) {
    struct tio_trace *tr = trace_wxy();
    struct tio_hw hw = tiny_hw(170 * MB, 20e9, 120e9, 100 * MB);
    struct tio_plan_params pp = tio_plan_params_default();
    pp.policy = "teraio-mixed";
    for (int early = 1; early >= 0; early--) {
        pp.early_prefetch = early;
        struct tio_plan *p = NULL;
        CHECK_OK(tio_plan_make(tr, &hw, &pp, &p));
        size_t n = 0;
        const struct tio_move *m = tio_plan_moves(p, &n);
        CHECK_EQ_U(n, 2);
        if (n == 2) {
            CHECK(check_move(&m[0], 0, TIO_TIER_GPU, TIO_TIER_HOST, 1, 3, TIO_MOVE_URGENT));
            CHECK(check_move(&m[1], 0, TIO_TIER_HOST, TIO_TIER_GPU, 7, 9, 0));
        }
        struct tio_plan_summary s;
        tio_plan_get_summary(p, &s);
        CHECK_EQ_I(s.feasible, 1);
        CHECK_EQ_U(s.planned_peak_bytes, 160 * MB);
        CHECK_EQ_U(s.host_peak_bytes, 100 * MB);
        CHECK_EQ_U(s.bytes_to_host, 100 * MB);
        CHECK_OK(tio_plan_verify(p, tr, &hw, &pp, NULL));
        tio_plan_free(p);
    }
    struct tio_plan *p = NULL;
    struct tio_plan_summary s;
    const struct tio_move *m = NULL;
    size_t n = 0;
    /* SSD only, within the bandwidth (no overcommit): nothing viable -> infeasible, shortfall
     * 90 MB first at kernel 4 */
    pp.policy = "teraio-ssd";
    pp.overcommit = 0;
    CHECK_OK(tio_plan_make(tr, &hw, &pp, &p));
    tio_plan_get_summary(p, &s);
    CHECK_EQ_I(s.feasible, 0);
    CHECK_EQ_U(s.shortfall_bytes, 90 * MB);
    CHECK_EQ_U(s.shortfall_kernel, 4);
    CHECK_EQ_U(s.n_moves, 0);
    tio_plan_free(p);
    /* with overcommit (the default) the plan meets the capacity with moves the slots have no
     * room for, flagged STALL: W leaves over [2, 8) (offload issued at k1 after its use at k0,
     * prefetch at k8 before its use at k9; X's window [5, 5) is empty; early prefetch is still
     * off). The prefetch's slack (1 ms) is under 1.5 x 100 MB / 20 GB/s: URGENT; the offload's
     * deadline kernel k2 has room (0 + 100 <= 170): not urgent. */
    pp.overcommit = 1;
    CHECK_OK(tio_plan_make(tr, &hw, &pp, &p));
    tio_plan_get_summary(p, &s);
    CHECK_EQ_I(s.feasible, 0); /* the memory fits, by stall moves: compute waits in a replay */
    CHECK_EQ_U(s.shortfall_bytes, 0);
    CHECK_EQ_U(s.planned_peak_bytes, 160 * MB);
    m = tio_plan_moves(p, &n);
    CHECK_EQ_U(n, 2);
    if (n == 2) {
        CHECK(check_move(&m[0], 0, TIO_TIER_GPU, TIO_TIER_SSD, 1, 2, TIO_MOVE_STALL));
        CHECK(check_move(&m[1], 0, TIO_TIER_SSD, TIO_TIER_GPU, 8, 9,
                         TIO_MOVE_STALL | TIO_MOVE_URGENT));
    }
    /* stall moves are checked against the bandwidth like any other move: this plan's memory
     * fits only because compute waits for them, and the verifier names the stall move */
    CHECK_RC(tio_plan_verify(p, tr, &hw, &pp, NULL), TIO_EPLAN);
    CHECK_ERR_HAS("stall move");
    tio_plan_free(p);
    /* a host cap below W's size: the same without overcommit ... */
    hw.host_offload_cap_bytes = 50 * MB;
    pp.policy = "teraio-mixed";
    pp.overcommit = 0;
    CHECK_OK(tio_plan_make(tr, &hw, &pp, &p));
    tio_plan_get_summary(p, &s);
    CHECK_EQ_I(s.feasible, 0);
    CHECK_EQ_U(s.shortfall_bytes, 90 * MB);
    tio_plan_free(p);
    /* ... and with it, W goes to the SSD (the host cannot hold it) */
    pp.overcommit = 1;
    CHECK_OK(tio_plan_make(tr, &hw, &pp, &p));
    tio_plan_get_summary(p, &s);
    CHECK_EQ_I(s.feasible, 0);
    CHECK_EQ_U(s.shortfall_bytes, 0);
    CHECK_EQ_U(s.host_peak_bytes, 0);
    m = tio_plan_moves(p, &n);
    CHECK(n == 2 && m[0].to == TIO_TIER_SSD && (m[0].flags & TIO_MOVE_STALL));
    tio_plan_free(p);
    /* the paper's Algorithm 1 stays as printed: infeasible, no stall moves */
    pp.policy = "teraio-paper";
    CHECK_OK(tio_plan_make(tr, &hw, &pp, &p));
    tio_plan_get_summary(p, &s);
    CHECK_EQ_I(s.feasible, 0);
    tio_plan_free(p);
    tio_trace_free(tr);
}

/* Capacity 90 MB: kernel 0 alone uses W (100 MB): no plan can fit; the error names it. */
TIO_TEST(working_set_above_capacity) {
    struct tio_trace *tr = trace_wxy();
    struct tio_hw hw = tiny_hw(90 * MB, 50e9, 100e9, 0);
    struct tio_plan_params pp = tio_plan_params_default();
    struct tio_plan *p = NULL;
    CHECK_RC(tio_plan_make(tr, &hw, &pp, &p), TIO_EINFEASIBLE);
    CHECK_ERR_HAS("kernel 0");
    CHECK_ERR_HAS("100000000 bytes");
    CHECK_ERR_HAS("90000000 bytes");
    CHECK(p == NULL);
    /* baselines carry no moves and never fail for capacity */
    pp.policy = "zero-infinity";
    CHECK_OK(tio_plan_make(tr, &hw, &pp, &p));
    size_t n = 9;
    (void)tio_plan_moves(p, &n);
    CHECK_EQ_U(n, 0);
    CHECK_STR(tio_plan_policy(p), "zero-infinity");
    tio_plan_free(p);
    pp.policy = "lfu";
    CHECK_RC(tio_plan_make(tr, &hw, &pp, &p), TIO_ENOTFOUND);
    hw.pcie_h2d_Bps = -1;
    pp.policy = "teraio";
    CHECK_RC(tio_plan_make(tr, &hw, &pp, &p), TIO_EINVAL);
    CHECK_ERR_HAS("pcie_h2d_Bps");
    tio_trace_free(tr);
}

/*
 * Clean copies: a frozen weight F (global, 100 MB, only read) used at k0, k5 and k9 of 10 x 1 ms
 * kernels, and an activation Z (100 MB) used at k1 and k8. Resident 100 at k0 and k9, else 200;
 * capacity 150: excess 50 at k1..k8. SSD at 100 GB/s moves 100 MB per slot.
 *   Z [2, 8): offload fills k2 (gone from 3), prefetch fills k7: window [3, 7), benefit 4 x 50.
 *   F [1, 5): offload k1 (gone from 2), prefetch k4: window [2, 4), 2 x 50.
 *   F [6, 9): offload k6 (gone from 7), prefetch k8: window [7, 8), 1 x 50.
 * Pick Z. Then F [1, 5) (excess left at k2) and F [6, 9) (k7) tie at 50: the earlier start
 * wins; F [1, 5) is written to SSD. F was not written since, so F [6, 9) is now CLEAN: gone at
 * its start (deadline 6 = trigger), prefetch from k8, window [6, 8) covers k7. k1 and k8 stay
 * over (an offload issued at k1 still holds F during k1): infeasible, 50 MB short at kernel 1.
 */
TIO_TEST(clean_copies_for_unwritten_tensors) {
    struct tio_trace *tr = NULL;
    uint32_t f, z, k;
    CHECK_OK(tio_trace_new(NULL, &tr));
    CHECK_OK(tio_trace_add_tensor(tr, 100 * MB, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, "F", &f));
    CHECK_OK(tio_trace_add_tensor(tr, 100 * MB, TIO_TENSOR_ACTIVATION, 0, "Z", &z));
    for (uint32_t i = 0; i < 10; i++) {
        CHECK_OK(tio_trace_add_kernel(tr, "k", 1000000, 0, &k));
        if (i == 0 || i == 5 || i == 9) {
            CHECK_OK(tio_trace_add_use(tr, f, TIO_USE_READ));
        }
        if (i == 1 || i == 8) {
            CHECK_OK(tio_trace_add_use(tr, z, i == 1 ? TIO_USE_WRITE : TIO_USE_READ));
        }
    }
    CHECK_OK(tio_trace_finish(tr));
    struct tio_hw hw = tiny_hw(150 * MB, 100e9, 1000e9, 0);
    struct tio_plan_params pp = tio_plan_params_default();
    pp.policy = "teraio-ssd";
    struct tio_plan *p = NULL;
    CHECK_OK(tio_plan_make(tr, &hw, &pp, &p));
    struct tio_plan_summary s;
    tio_plan_get_summary(p, &s);
    CHECK_EQ_I(s.feasible, 0);
    CHECK_EQ_U(s.shortfall_bytes, 50 * MB);
    CHECK_EQ_U(s.shortfall_kernel, 1);
    size_t n = 0, clean = 0;
    const struct tio_move *m = tio_plan_moves(p, &n);
    CHECK_EQ_U(n, 6);
    for (size_t i = 0; i < n; i++) {
        if (m[i].flags & TIO_MOVE_CLEAN) {
            clean++;
            CHECK(check_move(&m[i], f, TIO_TIER_GPU, TIO_TIER_SSD, 6, 6, TIO_MOVE_CLEAN));
        }
    }
    CHECK_EQ_U(clean, 1);
    CHECK_EQ_U(s.bytes_to_ssd, 200 * MB); /* Z and the first F: the clean one writes nothing */
    CHECK_OK(tio_plan_verify(p, tr, &hw, &pp, NULL));
    tio_plan_free(p);
    /* the paper's algorithm writes every offload */
    pp.policy = "teraio-paper";
    CHECK_OK(tio_plan_make(tr, &hw, &pp, &p));
    m = tio_plan_moves(p, &n);
    for (size_t i = 0; i < n; i++) {
        CHECK(!(m[i].flags & TIO_MOVE_CLEAN));
    }
    CHECK_OK(tio_plan_verify(p, tr, &hw, &pp, NULL));
    tio_plan_free(p);
    tio_trace_free(tr);
}

/*
 * The overcommit pass's window start for a period with a clean copy on the SSDs that the host
 * takes (a host copy is never clean: the window starts at start + 1, not at start). 11 kernels
 * of 1 ms, k2 of 10 ms; links too slow for any move within the bandwidth, so the pass makes every
 * move; early prefetch off (it would drop a move that frees nothing). Capacity 150 MB, host cap
 * 200 MB, no slack.
 *   F: frozen weight (global, read only) 100 MB at k1, k6, k10: F1 [2, 6), F2 [7, 10).
 *   H: activation 150 MB at k0 and k5: [1, 5). J: 50 MB at k6 and k10: [7, 10).
 *   G and K: 50 MB each, at k7 and k8 only.
 * Resident (MB): 250 at k0..k5, 200 at k7 and k8, 150 elsewhere: excess 100, 50, 50.
 * First scores (capped benefit per byte, ms): H [2, 4) 10 x 2/3 + 2/3 = 7.33; F1 [3, 5) 2;
 * J [8, 9) 1; F2 [8, 9) 0.5.
 *   H to the host (empty): k2, k3 under the line. F1 [3, 5) now frees k4: 1, applied; the host
 *   holds H over [1, 6), and 150 + 100 > 200, so F1 goes to the SSD: F2 has a clean copy there.
 *   J to the host (150 + 50 <= 200): k8 under the line.
 *   F2: the host takes it (J's 50 + 100 <= 200), so its window is [8, 9): no excess, scored 0,
 *   dropped. Scored from 7 (the SSD's clean start), it would free k7's excess and be moved to
 *   the host over [8, 9), which frees nothing: 8 moves, 300 MB to the host.
 * Plan: 6 moves (H, F1, J), 200 MB to the host, 100 MB to the SSD.
 */
TIO_TEST(overcommit_clean_start_on_the_host) {
    struct tio_trace *tr = NULL;
    uint32_t f, h, j, g, kk, k;
    CHECK_OK(tio_trace_new(NULL, &tr));
    CHECK_OK(tio_trace_add_tensor(tr, 100 * MB, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, "F", &f));
    CHECK_OK(tio_trace_add_tensor(tr, 150 * MB, TIO_TENSOR_ACTIVATION, 0, "H", &h));
    CHECK_OK(tio_trace_add_tensor(tr, 50 * MB, TIO_TENSOR_ACTIVATION, 0, "J", &j));
    CHECK_OK(tio_trace_add_tensor(tr, 50 * MB, TIO_TENSOR_ACTIVATION, 0, "G", &g));
    CHECK_OK(tio_trace_add_tensor(tr, 50 * MB, TIO_TENSOR_ACTIVATION, 0, "K", &kk));
    for (uint32_t i = 0; i < 11; i++) {
        CHECK_OK(tio_trace_add_kernel(tr, "k", i == 2 ? 10000000 : 1000000, 0, &k));
        if (i == 1 || i == 6 || i == 10) {
            CHECK_OK(tio_trace_add_use(tr, f, TIO_USE_READ));
        }
        if (i == 0 || i == 5) {
            CHECK_OK(tio_trace_add_use(tr, h, i == 0 ? TIO_USE_WRITE : TIO_USE_READ));
        }
        if (i == 6 || i == 10) {
            CHECK_OK(tio_trace_add_use(tr, j, i == 6 ? TIO_USE_WRITE : TIO_USE_READ));
        }
        if (i == 7 || i == 8) {
            CHECK_OK(tio_trace_add_use(tr, i == 7 ? g : kk, TIO_USE_WRITE));
        }
    }
    CHECK_OK(tio_trace_finish(tr));
    struct tio_hw hw = tiny_hw(150 * MB, 1e6, 1e7, 200 * MB);
    struct tio_plan_params pp = tio_plan_params_default();
    pp.policy = "teraio-mixed";
    pp.early_prefetch = 0;
    pp.memory_slack = 0;
    struct tio_plan *p = NULL;
    CHECK_OK(tio_plan_make(tr, &hw, &pp, &p));
    size_t n = 0;
    const struct tio_move *m = tio_plan_moves(p, &n);
    CHECK_EQ_U(n, 6);
    if (n == 6) { /* every move a stall move; urgent where the slot has no room */
        const uint32_t st = TIO_MOVE_STALL, su = TIO_MOVE_STALL | TIO_MOVE_URGENT;
        CHECK(check_move(&m[0], h, TIO_TIER_GPU, TIO_TIER_HOST, 1, 2, su));
        CHECK(check_move(&m[1], f, TIO_TIER_GPU, TIO_TIER_SSD, 2, 3, st));
        CHECK(check_move(&m[2], h, TIO_TIER_HOST, TIO_TIER_GPU, 4, 5, su));
        CHECK(check_move(&m[3], f, TIO_TIER_SSD, TIO_TIER_GPU, 5, 6, su));
        CHECK(check_move(&m[4], j, TIO_TIER_GPU, TIO_TIER_HOST, 7, 8, su));
        CHECK(check_move(&m[5], j, TIO_TIER_HOST, TIO_TIER_GPU, 9, 10, su));
    }
    struct tio_plan_summary s;
    tio_plan_get_summary(p, &s);
    CHECK_EQ_U(s.bytes_to_host, 200 * MB);
    CHECK_EQ_U(s.bytes_to_ssd, 100 * MB);
    tio_plan_free(p);
    tio_trace_free(tr);
}

/* ---- random traces --------------------------------------------------------------------------- */

static uint64_t rng_state;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* A layered "training step": L layers forward (weights read, activations written), backward
 * (activations read, grads written), optimizer (weights and states read-write). */
static struct tio_trace *random_trace(uint64_t seed, uint64_t *total_out) {
    rng_state = seed * 2654435761u + 1;
    struct tio_trace *tr = NULL;
    if (tio_trace_new(NULL, &tr) < 0) {
        abort();
    }
    uint32_t L = 3 + (uint32_t)(rnd() % 6);
    uint32_t w[16], o[16], g[16], a[16], k;
    for (uint32_t l = 0; l < L; l++) {
        uint64_t wb = (1 + rnd() % 40) * MB, ab = (rnd() % 60 + 1) * MB / 2;
        if (tio_trace_add_tensor(tr, wb, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, NULL, &w[l]) < 0 ||
            tio_trace_add_tensor(tr, 2 * wb, TIO_TENSOR_OPTIM_STATE, TIO_TENSOR_GLOBAL, NULL,
                                 &o[l]) < 0 ||
            tio_trace_add_tensor(tr, wb, TIO_TENSOR_GRAD, 0, NULL, &g[l]) < 0 ||
            tio_trace_add_tensor(tr, ab, TIO_TENSOR_ACTIVATION, 0, NULL, &a[l]) < 0) {
            abort();
        }
    }
    uint32_t small;
    if (tio_trace_add_tensor(tr, 4096, TIO_TENSOR_TEMP, TIO_TENSOR_PINNED, "buf", &small) < 0) {
        abort();
    }
    int rc = 0;
#define KER(dur)     rc |= tio_trace_add_kernel(tr, NULL, (dur), 0, &k)
#define USE(t, mode) rc |= tio_trace_add_use(tr, (t), (mode))
    for (uint32_t l = 0; l < L; l++) { /* forward: a couple of kernels per layer */
        KER(100000 + rnd() % 2000000);
        USE(w[l], TIO_USE_READ);
        USE(a[l], TIO_USE_WRITE);
        if (l > 0) {
            USE(a[l - 1], TIO_USE_READ);
        }
        KER(50000 + rnd() % 1000000);
        USE(small, TIO_USE_READ_WRITE);
    }
    for (uint32_t l = L; l-- > 0;) { /* backward */
        KER(200000 + rnd() % 3000000);
        USE(w[l], TIO_USE_READ);
        USE(a[l], TIO_USE_READ);
        USE(g[l], TIO_USE_WRITE);
        KER(rnd() % 3 == 0 ? 0 : 10000 + rnd() % 500000); /* zero-length kernels happen */
        USE(small, TIO_USE_READ);
    }
    for (uint32_t l = 0; l < L; l++) { /* optimizer */
        KER(100000 + rnd() % 1000000);
        USE(w[l], TIO_USE_READ_WRITE);
        USE(o[l], TIO_USE_READ_WRITE);
        USE(g[l], TIO_USE_READ);
    }
#undef KER
#undef USE
    if (rc < 0 || tio_trace_finish(tr) < 0) {
        abort();
    }
    *total_out = 0;
    for (uint32_t t = 0; t < tio_trace_tensor_count(tr); t++) {
        struct tio_trace_view v;
        tio_trace_get_view(tr, &v);
        *total_out += v.tensor_bytes[t];
    }
    return tr;
}

/* tio_plan_verify on a plan that may hold stall moves: without any it must pass; with some it
 * passes, or fails only by naming a stall move that misses its deadline (the bandwidth check
 * covers them). */
static int verify_allowing_stalls(const struct tio_plan *p,
                                  const struct tio_trace *tr,
                                  const struct tio_hw *hw,
                                  const struct tio_plan_params *pp,
                                  uint64_t *peak) {
    size_t n = 0, stalls = 0;
    const struct tio_move *m = tio_plan_moves(p, &n);
    for (size_t i = 0; i < n; i++) {
        stalls += (m[i].flags & TIO_MOVE_STALL) != 0;
    }
    int rc = tio_plan_verify(p, tr, hw, pp, peak);
    if (rc == TIO_EPLAN && stalls > 0 && strstr(tio_last_error(), "planned beyond the bandwidth")) {
        return 0;
    }
    return rc;
}

static int plans_equal(const struct tio_plan *a, const struct tio_plan *b) {
    size_t na, nb;
    const struct tio_move *x = tio_plan_moves(a, &na), *y = tio_plan_moves(b, &nb);
    return na == nb && (na == 0 || memcmp(x, y, na * sizeof *x) == 0);
}

TIO_TEST(random_traces_invariants) {
    const char *pols[] = { "teraio-mixed", "teraio-ssd", "teraio-paper", "g10" };
    int feasible_seen = 0, infeasible_seen = 0, moves_seen = 0;
    for (uint64_t seed = 1; seed <= 60; seed++) {
        uint64_t total;
        struct tio_trace *tr = random_trace(seed, &total);
        rng_state = seed * 7919 + 3;
        double ssd = (double)(1 + rnd() % 40) * 1e9, pcie = (double)(5 + rnd() % 60) * 1e9;
        struct tio_hw hw = tiny_hw(total, ssd, pcie, (rnd() % 2) ? total / 3 : 0);
        struct tio_plan_params np = tio_plan_params_default();
        np.policy = "none";
        struct tio_plan *none = NULL;
        CHECK_OK(tio_plan_make(tr, &hw, &np, &none));
        struct tio_plan_summary ns;
        tio_plan_get_summary(none, &ns);
        tio_plan_free(none);
        /* capacity between 55% and 100% of the unplanned peak */
        uint64_t cap = ns.planned_peak_bytes / 100 * (55 + rnd() % 46);
        hw.gpu_memory_bytes = cap;
        for (size_t i = 0; i < 4; i++) {
            struct tio_plan_params pp = tio_plan_params_default();
            pp.policy = pols[i];
            pp.early_prefetch = (int32_t)(seed % 2);
            struct tio_plan *p = NULL, *q = NULL;
            int rc = tio_plan_make(tr, &hw, &pp, &p);
            if (rc == TIO_EINFEASIBLE) {
                continue; /* working set above capacity: an error, tested elsewhere */
            }
            CHECK_OK(rc);
            if (!p) {
                continue;
            }
            uint64_t peak = 0;
            rc = verify_allowing_stalls(p, tr, &hw, &pp, &peak);
            if (rc < 0) {
                printf("  seed %llu policy %s: %s\n", (unsigned long long)seed, pols[i],
                       tio_last_error());
            }
            CHECK_OK(rc);
            struct tio_plan_summary s;
            tio_plan_get_summary(p, &s);
            CHECK_EQ_U(peak, s.planned_peak_bytes);
            if (s.feasible) {
                CHECK(peak <= cap);
                feasible_seen++;
            } else if (s.shortfall_bytes == 0) { /* fits by stall moves */
                const struct tio_move *mv = tio_plan_moves(p, NULL);
                size_t stalls = 0;
                for (size_t j = 0; j < s.n_moves; j++) {
                    stalls += (mv[j].flags & TIO_MOVE_STALL) != 0;
                }
                CHECK(stalls > 0 && peak <= cap);
                infeasible_seen++;
            } else {
                CHECK_EQ_U(s.shortfall_bytes, peak - cap);
                infeasible_seen++;
            }
            moves_seen += s.n_moves > 0;
            CHECK_OK(tio_plan_make(tr, &hw, &pp, &q)); /* deterministic */
            CHECK(q && plans_equal(p, q));
            tio_plan_free(q);
            tio_plan_free(p);
        }
        tio_trace_free(tr);
    }
    printf("  feasible %d, infeasible %d, with moves %d\n", feasible_seen, infeasible_seen,
           moves_seen);
    CHECK(feasible_seen > 20);
    CHECK(infeasible_seen > 5);
    CHECK(moves_seen > 20);
}

/*
 * The planner takes its first bounds and the overcommit pass its first scores from tables of the
 * unchanged curve (planner_tree.h), and does without a table it cannot allocate: every
 * allocation failure in turn either fails the plan with TIO_ENOMEM or gives the plan made
 * without failures, the one where a table's allocation failed included (descents for every
 * candidate). Random traces of up to 8 layers (up to 25 tensor sizes, more than the pass tables)
 * on slow links, so that most of the plan is overcommitted; early prefetch off (its buffers are
 * optional too, and change the plan when missing).
 */
TIO_TEST(tables_change_no_plan) {
    int absorbed = 0;
    for (uint64_t seed = 1; seed <= 12; seed++) {
        uint64_t total;
        struct tio_trace *tr = random_trace(seed, &total);
        struct tio_hw hw = tiny_hw(total / 100 * 60, 2e8, 1e9, total / 3);
        struct tio_plan_params pp = tio_plan_params_default();
        pp.early_prefetch = 0;
        struct tio_plan *ref = NULL;
        int rc = tio_plan_make(tr, &hw, &pp, &ref);
        if (rc == TIO_EINFEASIBLE) {
            tio_trace_free(tr);
            continue;
        }
        CHECK_OK(rc);
        int failed_before = 0;
        for (int64_t i = 0; i < 400; i++) {
            struct tio_plan *p = NULL;
            tio_alloc_fail_after(i);
            rc = tio_plan_make(tr, &hw, &pp, &p);
            tio_alloc_fail_after(-1);
            if (rc == 0) {
                CHECK(plans_equal(p, ref));
                absorbed += failed_before; /* an allocation failed and the plan went on */
                failed_before = 0;
                tio_plan_free(p);
            } else {
                CHECK_RC(rc, TIO_ENOMEM);
                failed_before = 1;
            }
        }
        tio_plan_free(ref);
        tio_trace_free(tr);
    }
    CHECK(absorbed > 0);
}

/*
 * The planner's model on a hand trace: what it adds to the shared liveness (pinned and small
 * tensors are not candidates but count as unmovable idle bytes; a wrap-around period starting at
 * N is folded; a global never used is WRAPS | UNUSED). 4 kernels; min_tensor_bytes 1 MB.
 *   t0 G0 global 10 MB    k1 k3     periods [2,3) (use 0), wrap [4,5) folded to [0,1) (use 1)
 *   t1 G1 global 5 MB     never     [0,4) WRAPS|UNUSED
 *   t2 P  20 MB pinned    k0 k2     none; idle at k1
 *   t3 S  0.5 MB          k0 k3     none (small); idle at k1 k2
 *   t4 A  30 MB           k0 k3     [1,3) (use 0)
 *   t5 G2 global 7 MB     k0 k1     wrap [2,4) WRAPS (use 1)
 * resident (MB): 22 globals + P over [0,2] + S, A over [0,3] = 72.5 72.5 72.5 52.5
 * active (MB): 57.5 17 20 40.5; unmovable idle (MB): 0 20.5 0.5 0.
 */
TIO_TEST(model_by_hand) {
    static const struct {
        uint64_t bytes;
        int32_t kind;
        uint32_t flags;
    } ts[6] = {
        { 10 * MB, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL },
        { 5 * MB, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL },
        { 20 * MB, TIO_TENSOR_INPUT, TIO_TENSOR_PINNED },
        { MB / 2, TIO_TENSOR_ACTIVATION, 0 },
        { 30 * MB, TIO_TENSOR_ACTIVATION, 0 },
        { 7 * MB, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL },
    };
    static const int uses[4][5] = { { 2, 3, 4, 5, -1 }, { 0, 5, -1 }, { 2, -1 }, { 0, 3, 4, -1 } };
    struct tio_trace *tr = NULL;
    CHECK_OK(tio_trace_new(NULL, &tr));
    for (int t = 0; t < 6; t++) {
        CHECK_OK(tio_trace_add_tensor(tr, ts[t].bytes, ts[t].kind, ts[t].flags, "t", NULL));
    }
    for (int k = 0; k < 4; k++) {
        CHECK_OK(tio_trace_add_kernel(tr, "k", 1000000, 0, NULL));
        for (int i = 0; uses[k][i] >= 0; i++) {
            CHECK_OK(tio_trace_add_use(tr, (uint32_t)uses[k][i], TIO_USE_READ));
        }
    }
    CHECK_OK(tio_trace_finish(tr));
    struct tio_hw hw = tiny_hw(1000 * MB, 10e9, 10e9, 0);
    struct tio_plan_params pp = tio_plan_params_default();
    pp.min_tensor_bytes = MB;
    struct tio_pmodel m;
    CHECK_OK(tio_pmodel_build(tr, &hw, &pp, &m));
    const uint64_t res[4] = { 72500000, 72500000, 72500000, 52500000 };
    const uint64_t act[4] = { 57500000, 17 * MB, 20 * MB, 40500000 };
    const uint64_t extra[4] = { 0, 20500000, MB / 2, 0 };
    for (size_t k = 0; k < 4; k++) {
        CHECK_EQ_U(m.resident[k], res[k]);
        CHECK_EQ_U(m.active[k], act[k]);
        CHECK_EQ_U(m.pinned_extra[k], extra[k]);
    }
    static const struct tio_pperiod want[] = {
        { .tensor = 0, .flags = 0, .start = 2, .end = 3, .bytes = 10 * MB, .use_index = 0 },
        { .tensor = 0, .flags = 0, .start = 0, .end = 1, .bytes = 10 * MB, .use_index = 1 },
        { .tensor = 1,
          .flags = TIO_PPERIOD_WRAPS | TIO_PPERIOD_UNUSED,
          .start = 0,
          .end = 4,
          .bytes = 5 * MB,
          .use_index = 0 },
        { .tensor = 4, .flags = 0, .start = 1, .end = 3, .bytes = 30 * MB, .use_index = 0 },
        { .tensor = 5,
          .flags = TIO_PPERIOD_WRAPS,
          .start = 2,
          .end = 4,
          .bytes = 7 * MB,
          .use_index = 1 },
    };
    CHECK_EQ_U(m.n_periods, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < m.n_periods && i < sizeof want / sizeof want[0]; i++) {
        CHECK_EQ_U(m.periods[i].tensor, want[i].tensor);
        CHECK_EQ_U(m.periods[i].flags, want[i].flags);
        CHECK_EQ_U(m.periods[i].start, want[i].start);
        CHECK_EQ_U(m.periods[i].end, want[i].end);
        CHECK_EQ_U(m.periods[i].bytes, want[i].bytes);
        CHECK_EQ_U(m.periods[i].use_index, want[i].use_index);
    }
    tio_pmodel_free(&m);
    tio_trace_free(tr);
}

TIO_TEST(policy_registry) {
    const char *want[] = {
        "teraio", "teraio-mixed", "teraio-ssd", "teraio-paper", "teraio-paper-ssd", "g10",
        "lru",    "none",         "ideal",      "zero-offload", "zero-infinity"
    };
    CHECK_EQ_U(tio_plan_policy_count(), sizeof want / sizeof want[0]);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int found = 0;
        for (size_t j = 0; j < tio_plan_policy_count(); j++) {
            found |= strcmp(tio_plan_policy_name(j), want[i]) == 0;
        }
        CHECK(found);
    }
    CHECK(tio_plan_policy_name(99) == NULL);
    CHECK(tio_plan_policy_help(0) != NULL);
    struct tio_plan_params pp = tio_plan_params_default();
    CHECK_STR(pp.policy, "teraio");
    CHECK_EQ_I(pp.early_prefetch, 1);
    CHECK_EQ_I(pp.clean_copies, 1);
    CHECK_EQ_U(pp.min_tensor_bytes, 1u << 20);
}

/*
 * 10 kernels of 1 ms. A: global 100 MB used at k0 and k9; B: global 50 MB used by k1..k8 (its
 * idle period k9, k0 is too short for a round trip: it never moves). Resident 150 MB everywhere;
 * the largest working set is A's 100 MB at k0 and k9.
 */
static struct tio_trace *trace_ab(void) {
    struct tio_trace *tr = NULL;
    uint32_t a, b, k;
    if (tio_trace_new(NULL, &tr) < 0 ||
        tio_trace_add_tensor(tr, 100 * MB, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, "A", &a) < 0 ||
        tio_trace_add_tensor(tr, 50 * MB, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, "B", &b) < 0) {
        abort();
    }
    for (uint32_t i = 0; i < 10; i++) {
        int rc = tio_trace_add_kernel(tr, "k", 1000000, 0, &k);
        if (rc == 0 && (i == 0 || i == 9)) {
            rc = tio_trace_add_use(tr, a, TIO_USE_READ);
        }
        if (rc == 0 && i > 0 && i < 9) {
            rc = tio_trace_add_use(tr, b, TIO_USE_READ);
        }
        if (rc < 0) {
            abort();
        }
    }
    if (tio_trace_finish(tr) < 0) {
        abort();
    }
    return tr;
}

/*
 * Slack: at 160 MB the trace fits (150 MB) and needs no move; with memory_slack 0.1 the planner
 * aims for 144 MB and offloads A (the only tensor that can move), while the summary still
 * judges the plan against the 160 MB capacity. Out-of-range slack is an error naming it.
 */
TIO_TEST(slack_plans_under_the_margin) {
    struct tio_trace *tr = trace_ab();
    struct tio_hw hw = tiny_hw(160 * MB, 50e9, 1000e9, 0);
    struct tio_plan_params pp = tio_plan_params_default();
    pp.policy = "teraio-ssd";
    struct tio_plan *p = NULL;
    size_t n = 99;
    struct tio_plan_summary s;
    pp.memory_slack = 0;
    CHECK_OK(tio_plan_make(tr, &hw, &pp, &p));
    (void)tio_plan_moves(p, &n);
    CHECK_EQ_U(n, 0);
    tio_plan_free(p);
    pp.memory_slack = 0.1;
    p = NULL;
    CHECK_OK(tio_plan_make(tr, &hw, &pp, &p));
    const struct tio_move *m = tio_plan_moves(p, &n);
    CHECK(n >= 2);
    CHECK(n >= 2 && m[0].tensor == 0 && m[0].to == TIO_TIER_SSD);
    tio_plan_get_summary(p, &s);
    CHECK_EQ_I(s.feasible, 0); /* under the margin by stall moves: not stall-free */
    CHECK_EQ_U(s.shortfall_bytes, 0);
    CHECK_EQ_U(s.capacity_bytes, 160 * MB);
    CHECK(s.planned_peak_bytes <= 150 * MB);
    CHECK_RC(tio_plan_verify(p, tr, &hw, &pp, NULL), TIO_EPLAN); /* under the margin by stalls */
    CHECK_ERR_HAS("stall move");
    tio_plan_free(p);
    pp.memory_slack = 0.6;
    CHECK_RC(tio_plan_make(tr, &hw, &pp, &p), TIO_EINVAL);
    CHECK_ERR_HAS("memory_slack");
    CHECK_EQ_I(tio_plan_params_default().memory_slack == TIO_PLAN_DEFAULT_SLACK, 1);
    tio_trace_free(tr);
}

/*
 * The planner plans writes at the drives' sustained rate once a write cache is modelled: at
 * capacity 140 MB A must leave (no overcommit, so the walks alone decide). Without a cache
 * model the write runs at 50 GB/s (50 MB per slot): k1, k2, gone from k3. With a cache and a
 * sustained 25 GB/s: k1..k4, gone from k5. The prefetch reads at 50 GB/s: k8, k7 either way.
 */
TIO_TEST(writes_planned_at_the_sustained_rate) {
    struct tio_trace *tr = trace_ab();
    struct tio_hw hw = tiny_hw(140 * MB, 50e9, 1000e9, 0);
    struct tio_plan_params pp = tio_plan_params_default();
    pp.policy = "teraio-ssd";
    pp.overcommit = 0;
    pp.memory_slack = 0;
    for (int cache = 0; cache < 2; cache++) {
        hw.ssd_write_cache_bytes = cache ? 1000 * MB : 0;
        hw.ssd_sustained_write_Bps = cache ? 25e9 : 0;
        struct tio_plan *p = NULL;
        CHECK_OK(tio_plan_make(tr, &hw, &pp, &p));
        size_t n = 0;
        const struct tio_move *m = tio_plan_moves(p, &n);
        CHECK_EQ_U(n, 2);
        if (n == 2) {
            CHECK(check_move(&m[0], 0, TIO_TIER_GPU, TIO_TIER_SSD, 1, cache ? 5 : 3,
                             TIO_MOVE_URGENT));
            CHECK(check_move(&m[1], 0, TIO_TIER_SSD, TIO_TIER_GPU, 7, 9, TIO_MOVE_URGENT));
        }
        CHECK_OK(tio_plan_verify(p, tr, &hw, &pp, NULL));
        tio_plan_free(p);
    }
    tio_trace_free(tr);
}

/* verify catches broken plans: an offload without its prefetch, and a slot over capacity */
TIO_TEST(verify_rejects_bad_plans) {
    struct tio_trace *tr = trace_wxy();
    struct tio_hw hw = tiny_hw(170 * MB, 50e9, 1000e9, 0);
    uint64_t h;
    CHECK_OK(tio_trace_hash(tr, &h));
    struct tio_plan *p = NULL;
    CHECK_OK(tio_plan_new(h, 10, "hand", &p));
    struct tio_move off = { .tensor = 0,
                            .from = TIO_TIER_GPU,
                            .to = TIO_TIER_SSD,
                            .trigger = 1,
                            .deadline = 3,
                            .bytes = 100 * MB };
    CHECK_OK(tio_plan_add_move(p, &off));
    CHECK_OK(tio_plan_finish(p));
    CHECK_RC(tio_plan_verify(p, tr, &hw, NULL, NULL), TIO_EPLAN);
    CHECK_ERR_HAS("no prefetch");
    tio_plan_free(p);
    /* 100 MB in one 1 ms slot at 50 GB/s: over capacity */
    CHECK_OK(tio_plan_new(h, 10, "hand", &p));
    off.deadline = 2;
    struct tio_move pre = { .tensor = 0,
                            .from = TIO_TIER_SSD,
                            .to = TIO_TIER_GPU,
                            .trigger = 7,
                            .deadline = 9,
                            .bytes = 100 * MB };
    CHECK_OK(tio_plan_add_move(p, &off));
    CHECK_OK(tio_plan_add_move(p, &pre));
    CHECK_OK(tio_plan_finish(p));
    CHECK_RC(tio_plan_verify(p, tr, &hw, NULL, NULL), TIO_EPLAN);
    CHECK_ERR_HAS("channel ssd:");
    tio_plan_free(p);
    tio_trace_free(tr);
}

int main(void) {
    RUN(model_by_hand);
    RUN(ssd_pick_by_hand);
    RUN(host_fallback_by_hand);
    RUN(working_set_above_capacity);
    RUN(clean_copies_for_unwritten_tensors);
    RUN(overcommit_clean_start_on_the_host);
    RUN(verify_rejects_bad_plans);
    RUN(slack_plans_under_the_margin);
    RUN(writes_planned_at_the_sustained_rate);
    RUN(policy_registry);
    RUN(random_traces_invariants);
    RUN(tables_change_no_plan);
    return tio_test_done();
}
