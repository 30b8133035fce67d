/*
 * The planners' view of a trace: the liveness every module shares (analysis/liveness.h: uses,
 * resident and active curves, inactive periods with wrap-around for global tensors), the periods
 * of the tensors that may move, the bytes that never move and the working-set check
 * (docs/planner.md).
 */
#include <math.h>
#include <string.h>

#include <teraio/units.h>

#include "common/common_impl.h"
#include "plan/planner_impl.h"

/* struct tio_pperiod's bit fields: tensor (30 bits), flags (2) */
#define PPERIOD_TENSOR_MASK ((UINT32_C(1) << 30) - 1)
#define PPERIOD_FLAGS_MASK  3u

void tio_pmodel_free(struct tio_pmodel *m) {
    if (!m) {
        return;
    }
    tio_liveness_free(&m->lv);
    tio_free(m->tau);
    tio_free(m->pinned_extra);
    tio_free(m->periods);
    tio_free(m->movable);
    memset(m, 0, sizeof *m);
}

int tio_pmodel_build(const struct tio_trace *trace,
                     const struct tio_hw *hw,
                     const struct tio_plan_params *params,
                     struct tio_pmodel *m) {
    memset(m, 0, sizeof *m);
    struct tio_trace_view v;
    tio_trace_get_view(trace, &v);
    size_t n = v.n_kernels, nt = v.n_tensors;
    m->n = n;
    m->n_tensors = nt;
    m->trace = trace;
    m->capacity = tio_hw_plan_capacity(hw);
    double slack = params->memory_slack > 0 ? params->memory_slack : 0;
    m->plan_line = m->capacity - (uint64_t)((double)m->capacity * slack);
    double scale = params->bandwidth_scale > 0 ? params->bandwidth_scale : 1.0;
    /* The write rate of the steady state: an iteration's writes spend the drives' write
     * cache long before the next one, and the simulator runs them at the sustained rate. */
    double d2h = hw->pcie_d2h_Bps * scale, h2d = hw->pcie_h2d_Bps * scale;
    double w_sus = hw->ssd_count ? tio_hw_ssd_sustained_write_Bps(hw) * scale : 0;
    double w_max = hw->ssd_count ? tio_hw_ssd_write_Bps(hw) * scale : 0; /* caches not full */
    double r_max = hw->ssd_count ? tio_hw_ssd_read_Bps(hw) * scale : 0;
    /* SSD traffic crosses the GPU's PCIe link too. The link is split: SSD transfers may take
     * as much of it as the array can carry in that direction (at most the link), host
     * transfers are planned on the rest. With the shares separate, each of the three
     * budgets (the array's time, the link's host share each way) is one resource, served
     * earliest deadline first by the simulator and checked that way by tio_plan_verify
     * (docs/planner.md, "Bandwidth model"). */
    m->bw[TIO_CH_SSD_W] = TIO_MIN(w_sus, d2h);
    m->bw[TIO_CH_SSD_R] = TIO_MIN(r_max, h2d);
    m->bw[TIO_CH_D2H] = d2h - TIO_MIN(w_max, d2h);
    m->bw[TIO_CH_H2D] = h2d - TIO_MIN(r_max, h2d);
    m->ssd_mix = tio_hw_ssd_mix_factor(hw);
    m->gds = hw->gds;
    m->ssd_latency_s = hw->ssd_latency_s;
    m->host_cap = hw->host_offload_cap_bytes;
    m->min_bytes = params->min_tensor_bytes;

    int rc = TIO_ENOMEM;
    m->tau = tio_malloc((n ? n : 1) * sizeof *m->tau);
    m->pinned_extra = tio_malloc((n ? n : 1) * sizeof *m->pinned_extra);
    m->movable = tio_malloc(nt ? nt : 1);
    if (!m->tau || !m->pinned_extra || !m->movable || tio_liveness_build(&v, &m->lv) < 0) {
        goto out;
    }
    m->resident = m->lv.resident;
    m->active = m->lv.active;
    m->use_off = m->lv.use_off;
    m->use_kernel = m->lv.use_kernel;
    m->use_mode = m->lv.use_mode;
    for (size_t k = 0; k < n; k++) {
        m->tau[k] = (double)v.kernel_duration_ns[k] * 1e-9;
    }
    /* The idle kernels of a tensor that never moves count in every working set there: its
     * resident curve less its bytes at its own uses (active there, not "extra"). */
    size_t np = 0;
    for (size_t t = 0; t < nt; t++) {
        m->movable[t] =
            !(v.tensor_flags[t] & TIO_TENSOR_PINNED) && v.tensor_bytes[t] >= m->min_bytes;
        np += m->use_off[t + 1] - m->use_off[t] + ((v.tensor_flags[t] & TIO_TENSOR_GLOBAL) ? 1 : 0);
    }
    tio_liveness_resident(&v, m->lv.first_use, m->lv.last_use, m->movable, m->pinned_extra);
    for (size_t t = 0; t < nt; t++) {
        for (size_t i = m->use_off[t]; !m->movable[t] && i < m->use_off[t + 1]; i++) {
            m->pinned_extra[m->use_kernel[i]] -= v.tensor_bytes[t];
        }
    }
    /* The periods of the tensors that may move. */
    m->periods = tio_malloc((np ? np : 1) * sizeof *m->periods);
    if (!m->periods) {
        goto out;
    }
    np = 0;
    for (size_t t = 0; t < nt; t++) {
        if (!m->movable[t]) {
            continue;
        }
        struct tio_liveness_iter it;
        struct tio_liveness_period p;
        tio_liveness_iter_init(&it, &m->lv, (uint32_t)t,
                               (v.tensor_flags[t] & TIO_TENSOR_GLOBAL) != 0);
        while (tio_liveness_iter_next(&it, &p)) {
            unsigned flags = 0;
            if (p.flags & TIO_PERIOD_UNUSED) {
                flags = TIO_PPERIOD_WRAPS | TIO_PPERIOD_UNUSED;
            } else if ((p.flags & TIO_PERIOD_WRAPS) && p.start >= n) {
                p.start -= n; /* last use is the last kernel: the period is [0, u0) */
                p.end -= n;
            } else if (p.flags & TIO_PERIOD_WRAPS) {
                flags = TIO_PPERIOD_WRAPS;
            }
            /* both fields' ranges are asserted with struct tio_pperiod */
            struct tio_pperiod q = { .tensor = (uint32_t)t & PPERIOD_TENSOR_MASK,
                                     .flags = flags & PPERIOD_FLAGS_MASK,
                                     .start = (uint32_t)p.start,
                                     .end = (uint32_t)p.end,
                                     .bytes = v.tensor_bytes[t],
                                     .use_index = p.use_index };
            m->periods[np++] = q;
        }
    }
    m->n_periods = np;
    rc = 0;
out:
    if (rc < 0) {
        tio_pmodel_free(m);
    }
    return rc;
}

int tio_pmodel_check_working_set(const struct tio_pmodel *m) {
    size_t worst = 0;
    uint64_t worst_ws = 0;
    for (size_t k = 0; k < m->n; k++) {
        uint64_t ws = m->active[k] + m->pinned_extra[k];
        if (ws > worst_ws) {
            worst_ws = ws;
            worst = k;
        }
    }
    if (worst_ws > m->capacity) {
        char a[32], b[32], c[32], d[32];
        const char *name = tio_trace_kernel_name(m->trace, (uint32_t)worst);
        return tio_set_error(
            TIO_EINFEASIBLE,
            "plan: kernel %zu (%s) needs a working set of %llu bytes (%s: active %s + unmovable "
            "%s) but the planning capacity is %llu bytes (%s); no plan can fit it",
            worst, name ? name : "unnamed", (unsigned long long)worst_ws,
            tio_format_bytes(worst_ws, a, sizeof a),
            tio_format_bytes(m->active[worst], b, sizeof b),
            tio_format_bytes(m->pinned_extra[worst], c, sizeof c), (unsigned long long)m->capacity,
            tio_format_bytes(m->capacity, d, sizeof d));
    }
    return 0;
}
