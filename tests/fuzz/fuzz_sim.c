/*
 * libFuzzer target: the simulator on traces, plans and hardware built from the input bytes.
 *
 * The bytes are decoded into a small trace (up to 48 tensors, 160 kernels, 6 uses each) whose
 * sizes and durations come from tables with the extremes (1 byte and 2^50 bytes, 1 ns and the
 * longest kernel, 2^44 ns, so that the clock runs far past 2^14 s), hardware with rates from
 * 1000 B/s to 1 TB/s, and either the planner's plan or raw moves decoded from the bytes. Every
 * run must finish (a hang is a libFuzzer timeout) with status 0, or TIO_EINVAL /
 * TIO_EINFEASIBLE for inputs the API refuses; the engine's step limit (TIO_ENOMEM "step
 * limit") or any other error is a finding. Results must be finite and the bandwidth bins
 * within 2 x bins.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <teraio/hw.h>
#include <teraio/plan.h>
#include <teraio/sim.h>
#include <teraio/trace.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct rd {
    const uint8_t *p;
    size_t n;
};

static unsigned next(struct rd *r) {
    if (r->n == 0) {
        return 0;
    }
    r->n--;
    return *r->p++;
}

static uint64_t pick_bytes(struct rd *r) {
    static const uint64_t table[] = { 1,
                                      7,
                                      4096,
                                      1000003,
                                      UINT64_C(1) << 20,
                                      UINT64_C(3) << 28,
                                      UINT64_C(1) << 34,
                                      UINT64_C(1) << 50 };
    unsigned b = next(r);
    return b < 8 ? table[b] : (uint64_t)b * 65537u + next(r);
}

static uint64_t pick_ns(struct rd *r) {
    static const uint64_t table[] = {
        1, 13, 1000, 1000000, UINT64_C(1) << 40, TIO_TRACE_MAX_DURATION
    };
    unsigned b = next(r);
    return b < 6 ? table[b] : (uint64_t)b * 7919u + next(r);
}

static double pick_rate(struct rd *r) {
    static const double table[] = { 1000.0, 3.3e6, 6.7e9, 53e9, 1e12 };
    return table[next(r) % 5];
}

static void check_sim(const struct tio_sim *sim, const struct tio_sim_params *sp) {
    struct tio_sim_result res;
    tio_sim_get_result(sim, &res, sizeof res);
    if (!isfinite(res.iteration_s) || res.iteration_s < 0 || !isfinite(res.stall_s)) {
        abort();
    }
    size_t nb = 0;
    double bin_s = 0;
    (void)tio_sim_bandwidth_bins(sim, &nb, &bin_s);
    if (nb > 2 * (size_t)sp->bins || !(bin_s > 0)) {
        abort();
    }
}

static void run_one(const struct tio_trace *tr,
                    const struct tio_hw *hw,
                    const struct tio_move *mv,
                    size_t n,
                    const char *policy,
                    uint64_t capacity) {
    struct tio_sim_params sp = tio_sim_params_default();
    sp.policy = policy;
    sp.capacity_bytes = capacity;
    sp.bins = 16;
    struct tio_sim *sim = NULL;
    int rc = tio_sim_run(tr, hw, mv, n, &sp, &sim);
    if (rc == 0) {
        check_sim(sim, &sp);
    } else if (rc != TIO_EINVAL && rc != TIO_EINFEASIBLE) {
        abort(); /* the step limit (TIO_ENOMEM) or anything unexpected */
    }
    tio_sim_free(sim);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct rd r = { data, size };
    struct tio_trace *tr = NULL;
    if (tio_trace_new(NULL, &tr) < 0) {
        return 0;
    }
    unsigned nt = 1 + next(&r) % 48, nk = 1 + next(&r) % 160;
    uint64_t big = 0; /* the largest tensor: capacities are multiples of it */
    for (unsigned t = 0; t < nt; t++) {
        unsigned f = next(&r);
        uint64_t bytes = pick_bytes(&r);
        big = bytes > big ? bytes : big;
        uint32_t flags = (f & 1 ? (uint32_t)TIO_TENSOR_GLOBAL : 0u) |
                         ((f & 0x62) == 0x62 ? (uint32_t)TIO_TENSOR_PINNED : 0u);
        int32_t kind = (int32_t)((f >> 2) % TIO_TENSOR_KIND_COUNT);
        if (tio_trace_add_tensor(tr, bytes, kind, flags, NULL, NULL) < 0) {
            goto out;
        }
    }
    for (unsigned k = 0; k < nk; k++) {
        if (tio_trace_add_kernel(tr, NULL, pick_ns(&r), next(&r) & TIO_KERNEL_FLAGS_ALL, NULL) <
            0) {
            goto out;
        }
        unsigned nu = next(&r) % 7;
        uint64_t used = 0; /* a tensor once per kernel (nt <= 48 < 64) */
        for (unsigned u = 0; u < nu; u++) {
            unsigned t = next(&r) % nt;
            if (used & (UINT64_C(1) << t)) {
                continue;
            }
            used |= UINT64_C(1) << t;
            int32_t mode = 1 + (int32_t)(next(&r) % 3);
            if (tio_trace_add_use(tr, t, mode) < 0) {
                goto out;
            }
        }
    }
    if (tio_trace_finish(tr) < 0) {
        goto out;
    }
    struct tio_hw hw = tio_hw_default();
    hw.pcie_h2d_Bps = pick_rate(&r);
    hw.pcie_d2h_Bps = pick_rate(&r);
    hw.ssd_count = next(&r) % 3;
    hw.ssd_read_Bps = pick_rate(&r);
    hw.ssd_write_Bps = pick_rate(&r);
    hw.host_offload_cap_bytes = pick_bytes(&r) % (hw.host_memory_bytes + 1);
    hw.gpu_reserve_bytes = UINT64_C(1) << 30;
    hw.gpu_memory_bytes = hw.gpu_reserve_bytes + big / 2 * (2 + next(&r) % 14);
    /* software costs: none up to milliseconds per kernel and move, contention up to 1.5
     * (docs/simulator.md, "Software costs") */
    hw.kernel_launch_s = (double)(next(&r) % 4) * 1e-3;
    hw.kernel_executor_s = (double)(next(&r) % 4) * 1e-3;
    hw.move_issue_s = (double)(next(&r) % 4) * 1e-3;
    hw.kernel_io_slowdown = (double)(next(&r) % 4) * 0.5;
    uint64_t capacity = next(&r) & 1 ? big / 2 * (2 + next(&r) % 14) : 0;
    unsigned mode = next(&r) % 4;
    if (mode == 0) { /* the planner's plan */
        struct tio_plan_params pp = tio_plan_params_default();
        pp.min_tensor_bytes = 1;
        struct tio_plan *plan = NULL;
        struct tio_hw ph = hw;
        if (capacity) {
            ph.gpu_memory_bytes = capacity + ph.gpu_reserve_bytes;
        }
        if (tio_plan_make(tr, &ph, &pp, &plan) == 0) {
            size_t n = 0;
            const struct tio_move *mv = tio_plan_moves(plan, &n);
            run_one(tr, &hw, mv, n, NULL, capacity);
        }
        tio_plan_free(plan);
    } else if (mode == 1) { /* raw moves, valid by construction */
        struct tio_move mv[64];
        size_t n = next(&r) % 64;
        for (size_t i = 0; i < n; i++) {
            struct tio_move *m = &mv[i];
            memset(m, 0, sizeof *m);
            m->tensor = next(&r) % nt;
            int off = next(&r) & 1;
            int tier = next(&r) & 1 ? TIO_TIER_SSD : TIO_TIER_HOST;
            m->from = off ? TIO_TIER_GPU : tier;
            m->to = off ? tier : TIO_TIER_GPU;
            m->trigger = next(&r) % nk;
            m->deadline = m->trigger + next(&r) % (nk + 1);
            m->flags = next(&r) & (TIO_MOVE_URGENT | (off ? TIO_MOVE_CLEAN : 0u));
        }
        run_one(tr, &hw, mv, n, NULL, capacity);
    } else {
        static const char *const pol[] = { "lru", "none", "zero-offload", "zero-infinity" };
        run_one(tr, &hw, NULL, 0, pol[next(&r) % 4], capacity);
    }
out:
    tio_trace_free(tr);
    return 0;
}
