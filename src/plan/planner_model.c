/*
 * The planners' view of a trace: per-tensor uses, inactive periods (with wrap-around for global
 * tensors), the unplanned memory curve and the working-set check. Same definitions as
 * teraio/analysis.h; kept private here so the planner does not depend on the analysis module's
 * schedule (docs/planner.md).
 */
#include <math.h>
#include <string.h>

#include <teraio/units.h>

#include "common/common_impl.h"
#include "plan/planner_impl.h"

void tio_pmodel_free(struct tio_pmodel *m) {
    if (!m) {
        return;
    }
    tio_free(m->tau);
    tio_free(m->resident);
    tio_free(m->active);
    tio_free(m->pinned_extra);
    tio_free(m->periods);
    tio_free(m->use_off);
    tio_free(m->use_kernel);
    tio_free(m->use_mode);
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
    double scale = params->bandwidth_scale > 0 ? params->bandwidth_scale : 1.0;
    m->bw[TIO_CH_SSD_W] = hw->ssd_count ? tio_hw_ssd_write_Bps(hw) * scale : 0;
    m->bw[TIO_CH_SSD_R] = hw->ssd_count ? tio_hw_ssd_read_Bps(hw) * scale : 0;
    m->bw[TIO_CH_D2H] = hw->pcie_d2h_Bps * scale;
    m->bw[TIO_CH_H2D] = hw->pcie_h2d_Bps * scale;
    m->ssd_mix = tio_hw_ssd_mix_factor(hw);
    m->gds = hw->gds;
    m->ssd_latency_s = hw->ssd_latency_s;
    m->host_cap = hw->host_offload_cap_bytes;
    m->min_bytes = params->min_tensor_bytes;

    int rc = TIO_ENOMEM;
    m->tau = tio_malloc((n ? n : 1) * sizeof *m->tau);
    m->resident = tio_calloc(n ? n : 1, sizeof *m->resident);
    m->active = tio_calloc(n ? n : 1, sizeof *m->active);
    m->pinned_extra = tio_calloc(n ? n : 1, sizeof *m->pinned_extra);
    m->use_off = tio_calloc(nt + 1, sizeof *m->use_off);
    m->use_kernel = tio_malloc((v.n_uses ? v.n_uses : 1) * sizeof *m->use_kernel);
    m->use_mode = tio_malloc((v.n_uses ? v.n_uses : 1) * sizeof *m->use_mode);
    int64_t *diff = tio_calloc(n + 1, sizeof *diff);   /* resident, difference array */
    int64_t *pdiff = tio_calloc(n + 1, sizeof *pdiff); /* unmovable idle bytes */
    size_t *fill = tio_calloc(nt + 1, sizeof *fill);
    if (!m->tau || !m->resident || !m->active || !m->pinned_extra || !m->use_off ||
        !m->use_kernel || !m->use_mode || !diff || !pdiff || !fill) {
        goto out;
    }
    for (size_t k = 0; k < n; k++) {
        m->tau[k] = (double)v.kernel_duration_ns[k] * 1e-9;
    }
    /* Per-tensor use lists (kernels ascending: the CSR is walked in kernel order). */
    for (size_t u = 0; u < v.n_uses; u++) {
        m->use_off[v.use_tensor[u] + 1]++;
    }
    for (size_t t = 0; t < nt; t++) {
        m->use_off[t + 1] += m->use_off[t];
        fill[t] = m->use_off[t];
    }
    for (size_t k = 0; k < n; k++) {
        for (uint64_t u = v.kernel_use_offset[k]; u < v.kernel_use_offset[k + 1]; u++) {
            uint32_t t = v.use_tensor[u];
            m->use_kernel[fill[t]] = (uint32_t)k;
            m->use_mode[fill[t]] = v.use_mode[u];
            fill[t]++;
            m->active[k] += v.tensor_bytes[t];
        }
    }
    /* Residency and periods. */
    size_t np = 0;
    for (size_t t = 0; t < nt; t++) {
        size_t cnt = m->use_off[t + 1] - m->use_off[t];
        int global = (v.tensor_flags[t] & TIO_TENSOR_GLOBAL) != 0;
        np += cnt + (global ? 1 : 0);
    }
    m->periods = tio_malloc((np ? np : 1) * sizeof *m->periods);
    if (!m->periods) {
        goto out;
    }
    np = 0;
    for (size_t t = 0; t < nt; t++) {
        const uint32_t *uk = m->use_kernel + m->use_off[t];
        size_t cnt = m->use_off[t + 1] - m->use_off[t];
        uint64_t b = v.tensor_bytes[t];
        int global = (v.tensor_flags[t] & TIO_TENSOR_GLOBAL) != 0;
        int movable = !(v.tensor_flags[t] & TIO_TENSOR_PINNED) && b >= m->min_bytes;
        if (global) {
            diff[0] += (int64_t)b;
            diff[n] -= (int64_t)b;
        } else if (cnt > 0) {
            diff[uk[0]] += (int64_t)b;
            diff[uk[cnt - 1] + 1] -= (int64_t)b;
        }
        if (!movable) {
            /* Idle kernels of an unmovable tensor count in every working set there. */
            if (global) {
                pdiff[0] += (int64_t)b;
                pdiff[n] -= (int64_t)b;
            } else if (cnt > 0) {
                pdiff[uk[0]] += (int64_t)b;
                pdiff[uk[cnt - 1] + 1] -= (int64_t)b;
            }
            for (size_t i = 0; i < cnt; i++) { /* active at its uses: not "extra" */
                pdiff[uk[i]] -= (int64_t)b;
                pdiff[uk[i] + 1] += (int64_t)b;
            }
            continue;
        }
        if (global && cnt == 0) {
            m->periods[np++] =
                (struct tio_pperiod){ .tensor = (uint32_t)t,
                                      .flags = TIO_PPERIOD_WRAPS | TIO_PPERIOD_UNUSED,
                                      .start = 0,
                                      .end = n,
                                      .bytes = b };
            continue;
        }
        for (size_t i = 0; i + 1 < cnt; i++) {
            if (uk[i + 1] > uk[i] + 1) {
                m->periods[np++] = (struct tio_pperiod){ .tensor = (uint32_t)t,
                                                         .start = uk[i] + 1,
                                                         .end = uk[i + 1],
                                                         .bytes = b,
                                                         .use_index = (uint32_t)i };
            }
        }
        if (global && cnt > 0) {
            uint64_t s = (uint64_t)uk[cnt - 1] + 1, e = (uint64_t)uk[0] + n;
            if (e > s) {
                struct tio_pperiod p = { .tensor = (uint32_t)t,
                                         .flags = TIO_PPERIOD_WRAPS,
                                         .start = s,
                                         .end = e,
                                         .bytes = b,
                                         .use_index = (uint32_t)(cnt - 1) };
                if (s >= n) { /* last use is the last kernel: the period is [0, u0) */
                    p.start -= n;
                    p.end -= n;
                    p.flags = 0;
                }
                m->periods[np++] = p;
            }
        }
    }
    m->n_periods = np;
    int64_t acc = 0, pacc = 0;
    for (size_t k = 0; k < n; k++) {
        acc += diff[k];
        pacc += pdiff[k];
        m->resident[k] = (uint64_t)acc;
        m->pinned_extra[k] = (uint64_t)pacc;
    }
    rc = 0;
out:
    tio_free(diff);
    tio_free(pdiff);
    tio_free(fill);
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
