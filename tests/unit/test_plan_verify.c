/*
 * The verifier (src/plan/planner_verify*.c) on hand-built plans, one per rule it checks, each
 * worked out by hand below; and the planners' model (tio_pmodel) held against the verifier's
 * own (tio_vmodel), which shares no code with it, on hand traces and the `small` model.
 */
#include <stdio.h>
#include <string.h>

#include <teraio/hw.h>
#include <teraio/model.h>
#include <teraio/plan.h>
#include <teraio/trace.h>

#include "plan/planner_impl.h"
#include "plan/planner_verify.h"
#include "tio_test.h"

#define MB 1000000ull

/* One SSD of `ssd_Bps` each way (no mixing penalty, no cache, no latency), PCIe 1000 GB/s. */
static struct tio_hw hand_hw(double ssd_Bps, uint64_t host_cap) {
    struct tio_hw hw;
    if (tio_hw_preset("cpu-ci", &hw) < 0) {
        abort();
    }
    hw.gpu_memory_bytes = 1000 * MB;
    hw.gpu_reserve_bytes = 0;
    hw.ssd_count = 1;
    hw.ssd_read_Bps = ssd_Bps;
    hw.ssd_write_Bps = ssd_Bps;
    hw.ssd_mixed_Bps = 0;
    hw.ssd_efficiency = 1.0;
    hw.ssd_latency_s = 0;
    hw.ssd_write_cache_bytes = 0;
    hw.ssd_sustained_write_Bps = 0;
    hw.pcie_h2d_Bps = 1000e9;
    hw.pcie_d2h_Bps = 1000e9;
    hw.host_memory_bytes = 1000 * MB;
    hw.host_offload_cap_bytes = host_cap;
    return hw;
}

/* 10 kernels of 1 ms; W: global 100 MB used at k0 (read), k5 (mode5) and k9 (read-write). */
static struct tio_trace *trace_w(int mode5) {
    struct tio_trace *tr = NULL;
    uint32_t w, k;
    if (tio_trace_new(NULL, &tr) < 0 ||
        tio_trace_add_tensor(tr, 100 * MB, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, "W", &w) < 0) {
        abort();
    }
    for (uint32_t i = 0; i < 10; i++) {
        int rc = tio_trace_add_kernel(tr, "k", 1000000, 0, &k);
        if (rc == 0 && (i == 0 || i == 5 || i == 9)) {
            rc = tio_trace_add_use(tr, w,
                                   i == 0   ? TIO_USE_READ
                                   : i == 5 ? (enum tio_use_mode)mode5
                                            : TIO_USE_READ_WRITE);
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

/* A plan of the moves given, for trace tr (n kernels). */
static struct tio_plan *
hand_plan(const struct tio_trace *tr, const struct tio_move *mv, size_t nm, int feasible) {
    uint64_t h;
    struct tio_plan *p = NULL;
    if (tio_trace_hash(tr, &h) < 0 || tio_plan_new(h, tio_trace_kernel_count(tr), "hand", &p) < 0) {
        abort();
    }
    for (size_t i = 0; i < nm; i++) {
        if (tio_plan_add_move(p, &mv[i]) < 0) {
            abort();
        }
    }
    struct tio_plan_summary s;
    tio_plan_get_summary(p, &s);
    s.feasible = feasible;
    tio_plan_set_summary(p, &s);
    if (tio_plan_finish(p) < 0) {
        abort();
    }
    return p;
}

static struct tio_move mv_(uint32_t from, uint32_t to, uint64_t trig, uint64_t dl, uint32_t fl) {
    return (struct tio_move){ .tensor = 0,
                              .from = (int32_t)from,
                              .to = (int32_t)to,
                              .flags = fl,
                              .trigger = trig,
                              .deadline = dl,
                              .bytes = 100 * MB };
}

/* W to host memory over [1, 5]: held from the offload's trigger (k1) through the prefetch's
 * deadline (k5), whose offloads are issued before it waits for a late prefetch, 100 MB; a 50 MB
 * cap is exceeded, a 100 MB one is not. */
TIO_TEST(host_memory_against_the_cap) {
    struct tio_trace *tr = trace_w(TIO_USE_READ);
    struct tio_move mv[2] = { mv_(TIO_TIER_GPU, TIO_TIER_HOST, 1, 2, 0),
                              mv_(TIO_TIER_HOST, TIO_TIER_GPU, 4, 5, 0) };
    struct tio_plan *p = hand_plan(tr, mv, 2, 1);
    struct tio_hw hw = hand_hw(200e9, 50 * MB);
    CHECK_RC(tio_plan_verify(p, tr, &hw, NULL, NULL), TIO_EPLAN);
    CHECK_ERR_HAS("host cap");
    CHECK_ERR_HAS("kernel 1 ");
    hw.host_offload_cap_bytes = 100 * MB;
    CHECK_OK(tio_plan_verify(p, tr, &hw, NULL, NULL));
    uint64_t gpu[10], host[10];
    CHECK_OK(tio_plan_verify_curves(p, tr, &hw, NULL, gpu, host));
    /* away from the GPU over [2, 4); on the host over [1, 5] */
    static const uint64_t want_gpu[10] = { 100, 100, 0, 0, 100, 100, 100, 100, 100, 100 };
    static const uint64_t want_host[10] = { 0, 100, 100, 100, 100, 100, 0, 0, 0, 0 };
    for (size_t k = 0; k < 10; k++) {
        CHECK_EQ_U(gpu[k], want_gpu[k] * MB);
        CHECK_EQ_U(host[k], want_host[k] * MB);
    }
    tio_plan_free(p);
    tio_trace_free(tr);
}

/* A CLEAN offload at k6 relies on the copy the offload at k1 wrote: valid while k5 only reads W,
 * stale once k5 writes it; a CLEAN offload with no written one before it has no copy at all. */
TIO_TEST(clean_offloads_need_a_current_copy) {
    struct tio_move mv[4] = { mv_(TIO_TIER_GPU, TIO_TIER_SSD, 1, 2, 0),
                              mv_(TIO_TIER_SSD, TIO_TIER_GPU, 3, 5, 0),
                              mv_(TIO_TIER_GPU, TIO_TIER_SSD, 6, 6, TIO_MOVE_CLEAN),
                              mv_(TIO_TIER_SSD, TIO_TIER_GPU, 7, 9, 0) };
    struct tio_hw hw = hand_hw(200e9, 0);
    struct tio_trace *tr = trace_w(TIO_USE_READ);
    struct tio_plan *p = hand_plan(tr, mv, 4, 1);
    CHECK_OK(tio_plan_verify(p, tr, &hw, NULL, NULL));
    tio_plan_free(p);
    tio_trace_free(tr);
    tr = trace_w(TIO_USE_READ_WRITE);
    p = hand_plan(tr, mv, 4, 1);
    CHECK_RC(tio_plan_verify(p, tr, &hw, NULL, NULL), TIO_EPLAN);
    CHECK_ERR_HAS("written after its last offload to the SSDs (at kernel 1)");
    tio_plan_free(p);
    p = hand_plan(tr, mv + 2, 2, 1);
    CHECK_RC(tio_plan_verify(p, tr, &hw, NULL, NULL), TIO_EPLAN);
    CHECK_ERR_HAS("which no offload writes to the SSDs");
    tio_plan_free(p);
    tio_trace_free(tr);
}

/* The offload k1 -> k2 has 1 ms; 100 MB at 200 GB/s takes 0.5 ms. It must end a latency before
 * k2 starts: 0.4 ms of latency leaves 0.6 ms (fits), 0.6 ms leaves 0.4 ms (misses). */
TIO_TEST(latency_before_the_deadline) {
    struct tio_trace *tr = trace_w(TIO_USE_READ);
    struct tio_move mv[2] = { mv_(TIO_TIER_GPU, TIO_TIER_SSD, 1, 2, 0),
                              mv_(TIO_TIER_SSD, TIO_TIER_GPU, 3, 5, 0) };
    struct tio_plan *p = hand_plan(tr, mv, 2, 1);
    struct tio_hw hw = hand_hw(200e9, 0);
    hw.ssd_latency_s = 0.4e-3;
    CHECK_OK(tio_plan_verify(p, tr, &hw, NULL, NULL));
    hw.ssd_latency_s = 0.6e-3;
    CHECK_RC(tio_plan_verify(p, tr, &hw, NULL, NULL), TIO_EPLAN);
    CHECK_ERR_HAS("channel ssd: a move of tensor 0 released at kernel 1 misses its deadline 2");
    tio_plan_free(p);
    tio_trace_free(tr);
}

/* Drives with a write cache: 100 MB written per 10 ms iteration. At a sustained 50 GB/s the
 * caches (1 GB) drain 500 MB per iteration, never fill, and the write runs at the cached
 * 200 GB/s (0.5 ms: fits k1's 1 ms). At 5 GB/s they drain 50 MB: spent, the write takes 20 ms.
 * Caches of 100 MB are spent by the iteration's writes whatever the drain. */
TIO_TEST(sustained_rate_once_the_caches_are_spent) {
    struct tio_trace *tr = trace_w(TIO_USE_READ);
    struct tio_move mv[2] = { mv_(TIO_TIER_GPU, TIO_TIER_SSD, 1, 2, 0),
                              mv_(TIO_TIER_SSD, TIO_TIER_GPU, 3, 5, 0) };
    struct tio_plan *p = hand_plan(tr, mv, 2, 1);
    struct tio_hw hw = hand_hw(200e9, 0);
    hw.ssd_write_cache_bytes = 1000 * MB;
    hw.ssd_sustained_write_Bps = 50e9;
    CHECK_OK(tio_plan_verify(p, tr, &hw, NULL, NULL));
    hw.ssd_sustained_write_Bps = 5e9;
    CHECK_RC(tio_plan_verify(p, tr, &hw, NULL, NULL), TIO_EPLAN);
    CHECK_ERR_HAS("channel ssd:");
    /* at 50 GB/s again, with caches of 100 MB: the iteration's writes fill them (2 ms) */
    hw.ssd_sustained_write_Bps = 50e9;
    hw.ssd_write_cache_bytes = 100 * MB;
    CHECK_RC(tio_plan_verify(p, tr, &hw, NULL, NULL), TIO_EPLAN);
    CHECK_ERR_HAS("channel ssd:");
    tio_plan_free(p);
    tio_trace_free(tr);
}

/* Over capacity: checked only when the plan says feasible. */
TIO_TEST(capacity_when_feasible) {
    struct tio_trace *tr = trace_w(TIO_USE_READ);
    struct tio_hw hw = hand_hw(200e9, 0);
    hw.gpu_memory_bytes = 90 * MB;
    struct tio_plan *p = hand_plan(tr, NULL, 0, 1);
    uint64_t peak = 0;
    CHECK_RC(tio_plan_verify(p, tr, &hw, NULL, &peak), TIO_EPLAN);
    CHECK_ERR_HAS("kernel 0 is over capacity");
    CHECK_EQ_U(peak, 100 * MB);
    tio_plan_free(p);
    p = hand_plan(tr, NULL, 0, 0);
    CHECK_OK(tio_plan_verify(p, tr, &hw, NULL, NULL));
    tio_plan_free(p);
    tio_trace_free(tr);
}

/*
 * A hand trace with what the planners' model treats specially: a pinned tensor, one under
 * min_tensor_bytes, a global never used, a tensor used twice by one kernel, an intermediate.
 */
static struct tio_trace *trace_mixed(void) {
    struct tio_trace *tr = NULL;
    uint32_t g, u, pn, sm, a, k;
    if (tio_trace_new(NULL, &tr) < 0 ||
        tio_trace_add_tensor(tr, 40 * MB, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, "G", &g) < 0 ||
        tio_trace_add_tensor(tr, 30 * MB, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, "U", &u) < 0 ||
        tio_trace_add_tensor(tr, 20 * MB, TIO_TENSOR_OTHER, TIO_TENSOR_PINNED, "P", &pn) < 0 ||
        tio_trace_add_tensor(tr, MB / 2, TIO_TENSOR_TEMP, 0, "S", &sm) < 0 ||
        tio_trace_add_tensor(tr, 50 * MB, TIO_TENSOR_ACTIVATION, 0, "A", &a) < 0) {
        abort();
    }
    /* kernel: uses */
    static const char *const uses[12] = { "GPS", "A",  "",   "GG", "PA", "S",
                                          "",    "GA", "AA", "",   "G",  "" };
    for (uint32_t i = 0; i < 12; i++) {
        if (tio_trace_add_kernel(tr, "k", 1000000 + 250000ull * (i % 3), 0, &k) < 0) {
            abort();
        }
        for (const char *c = uses[i]; *c; c++) {
            uint32_t t = *c == 'G' ? g : *c == 'P' ? pn : *c == 'S' ? sm : a;
            if (tio_trace_add_use(tr, t, *c == 'A' ? TIO_USE_READ_WRITE : TIO_USE_READ) < 0) {
                abort();
            }
        }
    }
    if (tio_trace_finish(tr) < 0) {
        abort();
    }
    return tr;
}

static struct tio_trace *trace_small(uint32_t rank) {
    struct tio_model_params mp;
    struct tio_trace *tr = NULL;
    if (tio_model_preset("small", &mp) < 0) {
        abort();
    }
    mp.rank = rank;
    CHECK_OK(tio_model_generate(&mp, &tr, NULL));
    return tr;
}

/* The planners' model against the verifier's: resident curve, kernel times, the inactive periods
 * of every movable tensor (gaps between the verifier's distinct use kernels, a global's wrapping
 * one included), capacity and rates. They legitimately differ in one rate: the planners plan
 * every write at the sustained rate when the drives have caches, the verifier only once a
 * plan's writes spend them (the simulator's steady state), so the planners' rate is the lower. */
static void compare_models(const struct tio_trace *tr, const struct tio_hw *hw) {
    struct tio_plan_params pp = tio_plan_params_default();
    struct tio_pmodel pm;
    struct tio_vmodel vm;
    CHECK_OK(tio_pmodel_build(tr, hw, &pp, &pm));
    CHECK_OK(tio_vmodel_build(tr, hw, &pp, &vm));
    size_t n = pm.n;
    CHECK_EQ_U(vm.n, n);
    size_t bad = 0;
    for (size_t k = 0; k < n; k++) {
        bad += pm.resident[k] != vm.resident[k];
        double tau = vm.start_s[k + 1] - vm.start_s[k];
        bad += fabs(tau - pm.tau[k]) > 1e-12 * (1 + pm.tau[k]);
    }
    CHECK_EQ_U(bad, 0);
    /* periods: walk the planner's in order, tensor by tensor */
    size_t pi = 0, periods = 0;
    for (size_t t = 0; t < vm.nt && bad == 0; t++) {
        if (!pm.movable[t]) {
            continue;
        }
        const uint32_t *uk = vm.uk + vm.uoff[t];
        size_t c = vm.uoff[t + 1] - vm.uoff[t];
        int global = (vm.tflags[t] & TIO_TENSOR_GLOBAL) != 0;
        for (size_t i = 0; i + 1 < c; i++) {
            if (uk[i] + 1 < uk[i + 1]) { /* an idle gap */
                bad += pi >= pm.n_periods || pm.periods[pi].tensor != t ||
                       pm.periods[pi].start != uk[i] + 1 || pm.periods[pi].end != uk[i + 1];
                pi++;
                periods++;
            }
        }
        if (global) { /* the wrap-around gap, or the whole iteration when never used */
            uint64_t s = c ? uk[c - 1] + 1 : 0, e = c ? uk[0] + n : n;
            if (s == n) { /* folded to [0, first use) */
                s = 0;
                e = uk[0];
            }
            if (s < e) {
                bad += pi >= pm.n_periods || pm.periods[pi].tensor != t ||
                       pm.periods[pi].start != s || pm.periods[pi].end != e;
                pi++;
                periods++;
            }
        }
    }
    /* the planner keeps an empty period only where none would be idle: none here */
    CHECK_EQ_U(bad, 0);
    CHECK_EQ_U(pi, pm.n_periods);
    CHECK(periods > 0);
    CHECK_EQ_U(vm.capacity, pm.capacity);
    CHECK_EQ_U(vm.host_cap, pm.host_cap);
    CHECK(fabs(vm.ssd_read_Bps - pm.bw[TIO_CH_SSD_R]) <= 1e-9 * vm.ssd_read_Bps);
    CHECK(fabs(vm.ssd_write_sustained_Bps - pm.bw[TIO_CH_SSD_W]) <= 1e-9 * pm.bw[TIO_CH_SSD_W]);
    CHECK(vm.ssd_write_cached_Bps >= pm.bw[TIO_CH_SSD_W]);
    CHECK(fabs(vm.d2h_host_Bps - pm.bw[TIO_CH_D2H]) <= 1e-9 * (1 + vm.d2h_host_Bps));
    CHECK(fabs(vm.h2d_host_Bps - pm.bw[TIO_CH_H2D]) <= 1e-9 * (1 + vm.h2d_host_Bps));
    CHECK(fabs(vm.ssd_mix - pm.ssd_mix) <= 1e-12);
    tio_pmodel_free(&pm);
    tio_vmodel_free(&vm);
}

/* Plans whose host curve is not all zero, over compare_plans' calls. */
static int hosts_seen;

/* Each planned policy at a capacity that makes it move: the planner's GPU and host memory curves
 * equal the verifier's, kernel by kernel, and a feasible plan verifies. */
static void compare_plans(const struct tio_trace *tr, struct tio_hw hw, int *feasible_seen) {
    static const char *const pols[] = { "teraio-mixed", "teraio-ssd", "teraio-paper", "g10" };
    struct tio_plan_params pp = tio_plan_params_default();
    pp.policy = "none";
    struct tio_plan *p = NULL;
    CHECK_OK(tio_plan_make(tr, &hw, &pp, &p));
    struct tio_plan_summary s;
    tio_plan_get_summary(p, &s);
    tio_plan_free(p);
    hw.gpu_reserve_bytes = 0;
    hw.gpu_memory_bytes = s.planned_peak_bytes / 10 * 8;
    size_t n = tio_trace_kernel_count(tr);
    uint64_t *gpu = calloc(n, sizeof *gpu), *host = calloc(n, sizeof *host);
    uint64_t *pgpu = calloc(n, sizeof *pgpu), *phost = calloc(n, sizeof *phost);
    if (!gpu || !host || !pgpu || !phost) {
        abort();
    }
    for (size_t i = 0; i < sizeof pols / sizeof pols[0]; i++) {
        pp.policy = pols[i];
        pp.min_tensor_bytes = 64 * 1024;
        p = NULL;
        memset(pgpu, 0xff, n * sizeof *pgpu);
        memset(phost, 0xff, n * sizeof *phost);
        CHECK_OK(tio_plan_make_curves(tr, &hw, &pp, &p, pgpu, phost));
        if (!p) {
            continue;
        }
        tio_plan_get_summary(p, &s);
        CHECK_OK(tio_plan_verify_curves(p, tr, &hw, &pp, gpu, host));
        uint64_t gp = 0, hp = 0;
        size_t gbad = 0, hbad = 0, hnz = 0;
        for (size_t k = 0; k < n; k++) {
            gp = gpu[k] > gp ? gpu[k] : gp;
            hp = host[k] > hp ? host[k] : hp;
            gbad += gpu[k] != pgpu[k];
            hbad += host[k] != phost[k];
            hnz += host[k] > 0;
        }
        if (gbad || hbad) {
            printf("  %s: %zu kernels with other GPU bytes, %zu with other host bytes\n", pols[i],
                   gbad, hbad);
        }
        CHECK_EQ_U(gbad, 0);
        CHECK_EQ_U(hbad, 0);
        CHECK_EQ_U(gp, s.planned_peak_bytes);
        CHECK_EQ_U(hp, s.host_peak_bytes);
        hosts_seen += hnz > 0;
        CHECK(s.n_moves > 0);
        if (s.feasible) {
            CHECK_OK(tio_plan_verify(p, tr, &hw, &pp, NULL));
            (*feasible_seen)++;
        }
        tio_plan_free(p);
    }
    free(gpu);
    free(host);
    free(pgpu);
    free(phost);
}

TIO_TEST(planner_model_against_the_verifier) {
    struct tio_hw hw;
    CHECK_OK(tio_hw_preset("cpu-ci", &hw));
    hw.host_offload_cap_bytes = hw.host_memory_bytes / 4;
    struct tio_trace *trs[4] = { trace_w(TIO_USE_READ), trace_mixed(), trace_small(0),
                                 trace_small(1) };
    int feasible = 0;
    for (size_t i = 0; i < 4; i++) {
        compare_models(trs[i], &hw);
        struct tio_hw cached = hw;
        cached.ssd_write_cache_bytes = 1000 * MB;
        cached.ssd_sustained_write_Bps = hw.ssd_write_Bps / 3;
        compare_models(trs[i], &cached);
        if (i >= 2) {
            compare_plans(trs[i], hw, &feasible);
        }
        tio_trace_free(trs[i]);
    }
    CHECK(feasible > 0);
    CHECK(hosts_seen > 0); /* some plan holds host memory: the host curves were compared */
}

int main(void) {
    RUN(host_memory_against_the_cap);
    RUN(clean_offloads_need_a_current_copy);
    RUN(latency_before_the_deadline);
    RUN(sustained_rate_once_the_caches_are_spent);
    RUN(capacity_when_feasible);
    RUN(planner_model_against_the_verifier);
    return tio_test_done();
}
