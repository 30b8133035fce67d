/*
 * tio_plan_verify: an independent check of a plan against its trace and hardware. It shares no
 * code with the planners' model (no tio_pmodel, no liveness module, no slots): from the trace's
 * uses, the kernels' durations, the hardware's fields and the plan's moves alone it rebuilds
 * (docs/planner.md, "The verifier"):
 *   - liveness: each tensor's distinct use kernels (with their modes), an intermediate resident
 *     from its first to its last use, a global one always;
 *   - pairing: every offload of tensor t issued at kernel a is matched by one prefetch of t from
 *     the same tier whose deadline is t's next use after a and which starts at or after the
 *     offload's deadline; intermediates are only moved while they are alive; a CLEAN offload
 *     needs a copy on the SSDs written since the tensor's last write (planner_verify_io.c);
 *   - the GPU memory curve: resident bytes less the tensors away, from the kernel an offload
 *     must be complete by (its GPU copy is freed when it completes) to the kernel its prefetch
 *     is issued at (the buffer is allocated when it starts); under the capacity when the plan
 *     says feasible;
 *   - the host memory curve: a host offload holds its bytes from the kernel it is issued at
 *     through the kernel its prefetch must be complete by (that kernel's offloads are issued
 *     before it waits for a late prefetch); under the host cap always;
 *   - bandwidth (planner_verify_io.c): earliest deadline first on each budget, in continuous
 *     time, every move a job (stall moves too), due a latency before its deadline kernel starts.
 */
#include "plan/planner_verify.h"

#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"

void tio_vmodel_free(struct tio_vmodel *m) {
    if (!m) {
        return;
    }
    tio_free(m->uoff);
    tio_free(m->uk);
    tio_free(m->umode);
    tio_free(m->start_s);
    tio_free(m->resident);
    memset(m, 0, sizeof *m);
}

/* The budgets' rates from the hardware's fields (docs/hardware.md), scaled like every plan's. */
static void
vmodel_rates(struct tio_vmodel *m, const struct tio_hw *hw, const struct tio_plan_params *pp) {
    double scale = pp->bandwidth_scale > 0 ? pp->bandwidth_scale : 1.0;
    double d2h = hw->pcie_d2h_Bps * scale, h2d = hw->pcie_h2d_Bps * scale;
    double eff = hw->ssd_efficiency, cnt = (double)hw->ssd_count;
    double r = cnt * hw->ssd_read_Bps * eff * scale, w = cnt * hw->ssd_write_Bps * eff * scale;
    r = r < h2d ? r : h2d;
    w = w < d2h ? w : d2h;
    double ws = w;
    m->cache_modelled =
        hw->ssd_count > 0 && hw->ssd_write_cache_bytes > 0 && hw->ssd_sustained_write_Bps > 0;
    m->cache_bytes = cnt * (double)hw->ssd_write_cache_bytes;
    if (m->cache_modelled && cnt * hw->ssd_sustained_write_Bps * scale < ws) {
        ws = cnt * hw->ssd_sustained_write_Bps * scale;
    }
    m->ssd_read_Bps = r;
    m->ssd_write_cached_Bps = w;
    m->ssd_write_sustained_Bps = ws;
    double hr = hw->ssd_read_Bps, hwr = hw->ssd_write_Bps, mixed = hw->ssd_mixed_Bps;
    m->ssd_mix = (mixed > 0 && hr > 0 && hwr > 0) ? (2.0 / (1.0 / hr + 1.0 / hwr)) / mixed : 1.0;
    /* the link: SSD transfers first, up to what the array carries (its cached write rate: the
     * caches drain between bursts), host transfers on the rest */
    m->d2h_host_Bps = d2h - w;
    m->h2d_host_Bps = h2d - r;
    m->ssd_latency_s = hw->ssd_latency_s;
    m->host_latency_s = TIO_HW_HOST_LATENCY_S;
    m->capacity = hw->gpu_memory_bytes > hw->gpu_reserve_bytes
                      ? hw->gpu_memory_bytes - hw->gpu_reserve_bytes
                      : 0;
    m->host_cap = hw->host_offload_cap_bytes;
}

int tio_vmodel_build(const struct tio_trace *trace,
                     const struct tio_hw *hw,
                     const struct tio_plan_params *pp,
                     struct tio_vmodel *m) {
    memset(m, 0, sizeof *m);
    struct tio_trace_view v;
    tio_trace_get_view(trace, &v);
    size_t n = v.n_kernels, nt = v.n_tensors;
    m->n = n;
    m->nt = nt;
    m->bytes = v.tensor_bytes;
    m->tflags = v.tensor_flags;
    vmodel_rates(m, hw, pp);
    m->uoff = tio_calloc(nt + 1, sizeof *m->uoff);
    m->uk = tio_malloc((v.n_uses ? v.n_uses : 1) * sizeof *m->uk);
    m->umode = tio_malloc(v.n_uses ? v.n_uses : 1);
    m->start_s = tio_malloc((4 * n + 1) * sizeof *m->start_s);
    m->resident = tio_calloc(n + 1, sizeof *m->resident);
    size_t *fill = tio_calloc(nt ? nt : 1, sizeof *fill);
    uint64_t *last = tio_malloc((nt ? nt : 1) * sizeof *last);
    if (!m->uoff || !m->uk || !m->umode || !m->start_s || !m->resident || !fill || !last) {
        tio_free(fill);
        tio_free(last);
        tio_vmodel_free(m);
        return TIO_ENOMEM;
    }
    /* distinct use kernels per tensor (a tensor used twice by one kernel counts once, its
     * modes or-ed), CSR by tensor, ascending */
    for (size_t t = 0; t < nt; t++) {
        last[t] = UINT64_MAX;
    }
    for (size_t k = 0; k < n; k++) {
        for (uint64_t u = v.kernel_use_offset[k]; u < v.kernel_use_offset[k + 1]; u++) {
            uint32_t t = v.use_tensor[u];
            if (last[t] != k) {
                last[t] = k;
                m->uoff[t + 1]++;
            }
        }
    }
    for (size_t t = 0; t < nt; t++) {
        m->uoff[t + 1] += m->uoff[t];
        last[t] = UINT64_MAX;
    }
    for (size_t k = 0; k < n; k++) {
        for (uint64_t u = v.kernel_use_offset[k]; u < v.kernel_use_offset[k + 1]; u++) {
            uint32_t t = v.use_tensor[u];
            if (last[t] != k) {
                last[t] = k;
                size_t at = m->uoff[t] + fill[t]++;
                m->uk[at] = (uint32_t)k;
                m->umode[at] = v.use_mode[u];
            } else {
                m->umode[m->uoff[t] + fill[t] - 1] |= v.use_mode[u];
            }
        }
    }
    tio_free(fill);
    tio_free(last);
    /* resident curve with nothing moved, as differences and then summed */
    int64_t *d = (int64_t *)m->resident;
    for (size_t t = 0; t < nt; t++) {
        size_t c = m->uoff[t + 1] - m->uoff[t];
        int64_t b = (int64_t)v.tensor_bytes[t];
        if (v.tensor_flags[t] & TIO_TENSOR_GLOBAL) {
            d[0] += b;
            d[n] -= b;
        } else if (c > 0) {
            d[m->uk[m->uoff[t]]] += b;
            d[m->uk[m->uoff[t + 1] - 1] + 1] -= b;
        }
    }
    int64_t acc = 0;
    for (size_t k = 0; k < n; k++) {
        acc += d[k];
        m->resident[k] = (uint64_t)acc;
    }
    /* kernel start times over four iterations (the bandwidth check unrolls three) */
    double t = 0;
    for (size_t k = 0; k < 4 * n; k++) {
        m->start_s[k] = t;
        t += (double)v.kernel_duration_ns[k % n] * 1e-9;
    }
    m->start_s[4 * n] = t;
    m->iteration_s = n ? m->start_s[n] : 0;
    return 0;
}

/* First use of tensor t at or after extended kernel a (cyclic for globals); UINT64_MAX if none. */
static uint64_t next_use(const struct tio_vmodel *m, uint32_t t, uint64_t a) {
    const uint32_t *uk = m->uk + m->uoff[t];
    size_t cnt = m->uoff[t + 1] - m->uoff[t], n = m->n;
    int global = (m->tflags[t] & TIO_TENSOR_GLOBAL) != 0;
    if (n == 0) {
        return UINT64_MAX;
    }
    uint64_t base = (a / n) * n, r = a % n;
    size_t lo = 0, hi = cnt;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (uk[mid] < r) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if (lo < cnt) {
        return base + uk[lo];
    }
    if (global) {
        return cnt ? base + n + uk[0] : base + n; /* unused global: back at the next start */
    }
    return UINT64_MAX;
}

/* Add d over the extended range [a, b) (b - a <= n) of the difference array diff[n + 1]. */
static void range_add(int64_t *diff, size_t n, uint64_t a, uint64_t b, int64_t d) {
    if (a >= b || n == 0) {
        return;
    }
    uint64_t s = a % n, e = s + (b - a);
    if (e <= n) {
        diff[s] += d;
        diff[e] -= d;
    } else {
        diff[s] += d;
        diff[n] -= d;
        diff[0] += d;
        diff[e - n] -= d;
    }
}

/* Offload move i: the right size, inside an intermediate's life, complete by the tensor's next
 * use, and paired with one unmatched prefetch of it from the same tier (marked in matched[],
 * its index in *pair). 0 or TIO_EPLAN naming the move. */
static int pair_offload(const struct tio_vmodel *m,
                        const struct tio_move *mv,
                        size_t i,
                        const size_t *pre_off,
                        const size_t *pre_idx,
                        uint8_t *matched,
                        size_t *pair,
                        uint64_t *pre_trigger) {
    const struct tio_move *o = &mv[i];
    size_t n = m->n;
    uint32_t t = o->tensor;
    int global = (m->tflags[t] & TIO_TENSOR_GLOBAL) != 0;
    const uint32_t *uk = m->uk + m->uoff[t];
    size_t cnt = m->uoff[t + 1] - m->uoff[t];
    if (m->bytes[t] != o->bytes) {
        return tio_set_error(TIO_EPLAN, "plan: move %zu: tensor %u has %llu bytes, move %llu", i, t,
                             (unsigned long long)m->bytes[t], (unsigned long long)o->bytes);
    }
    if (!global && (cnt == 0 || o->trigger <= uk[0] || o->trigger > uk[cnt - 1])) {
        return tio_set_error(TIO_EPLAN,
                             "plan: move %zu: intermediate tensor %u offloaded at kernel %llu "
                             "outside its life",
                             i, t, (unsigned long long)o->trigger);
    }
    uint64_t nu = next_use(m, t, o->trigger);
    if (nu == UINT64_MAX || (!global && nu >= n)) {
        return tio_set_error(TIO_EPLAN, "plan: move %zu: tensor %u has no use after kernel %llu", i,
                             t, (unsigned long long)o->trigger);
    }
    if (o->deadline > nu) {
        return tio_set_error(TIO_EPLAN,
                             "plan: move %zu: offload of tensor %u completes at %llu, after its "
                             "next use %llu",
                             i, t, (unsigned long long)o->deadline, (unsigned long long)nu);
    }
    for (size_t jj = pre_off[t]; jj < pre_off[t + 1]; jj++) {
        size_t j = pre_idx[jj];
        const struct tio_move *q = &mv[j];
        if (matched[j] || q->from != o->to) {
            continue;
        }
        uint64_t a = q->trigger, d = q->deadline;
        if (a < o->trigger) {
            a += n;
            d += n;
        }
        if (d == nu && a >= o->deadline && a <= d) {
            matched[j] = 1;
            *pair = j;
            *pre_trigger = a;
            return 0;
        }
    }
    return tio_set_error(TIO_EPLAN,
                         "plan: move %zu: offload of tensor %u at kernel %llu has no prefetch "
                         "completing by its next use %llu after the offload",
                         i, t, (unsigned long long)o->trigger, (unsigned long long)nu);
}

/* Pair every move and build the curves (gpu, host: [n] each, may be NULL). */
static int
curves(const struct tio_vmodel *m, const struct tio_plan *plan, uint64_t *gpu, uint64_t *host) {
    size_t nm = 0, n = m->n;
    const struct tio_move *mv = tio_plan_moves(plan, &nm);
    uint8_t *matched = tio_calloc(nm ? nm : 1, 1);
    int64_t *dg = tio_calloc(n + 1, sizeof *dg), *dh = tio_calloc(n + 1, sizeof *dh);
    size_t *pre_off = tio_calloc(m->nt + 2, sizeof *pre_off);
    size_t *pre_idx = tio_malloc((nm ? nm : 1) * sizeof *pre_idx);
    int rc = TIO_ENOMEM;
    if (!matched || !dg || !dh || !pre_off || !pre_idx) {
        goto out;
    }
    /* prefetches grouped by tensor (CSR), so pairing costs the tensor's moves, not all */
    for (size_t j = 0; j < nm; j++) {
        if (mv[j].to == TIO_TIER_GPU) {
            pre_off[mv[j].tensor + 2]++;
        }
    }
    for (size_t t = 0; t < m->nt; t++) {
        pre_off[t + 2] += pre_off[t + 1];
    }
    for (size_t j = 0; j < nm; j++) {
        if (mv[j].to == TIO_TIER_GPU) {
            pre_idx[pre_off[mv[j].tensor + 1]++] = j;
        }
    }
    rc = 0;
    for (size_t i = 0; i < nm && rc == 0; i++) {
        const struct tio_move *o = &mv[i];
        if (o->from != TIO_TIER_GPU) {
            continue;
        }
        size_t j = 0;
        uint64_t pt = 0;
        rc = pair_offload(m, mv, i, pre_off, pre_idx, matched, &j, &pt);
        if (rc == 0) {
            /* away from the GPU over [offload deadline, prefetch trigger) */
            range_add(dg, n, o->deadline, pt, -(int64_t)o->bytes);
            if (o->to == TIO_TIER_HOST) {
                /* on the host from the offload's trigger through the prefetch's deadline
                 * kernel, an iteration at most */
                uint64_t end = pt + (mv[j].deadline - mv[j].trigger) + 1;
                range_add(dh, n, o->trigger, TIO_MIN(end, o->trigger + n), (int64_t)o->bytes);
            }
        }
    }
    for (size_t j = 0; j < nm && rc == 0; j++) {
        if (mv[j].to == TIO_TIER_GPU && !matched[j]) {
            rc =
                tio_set_error(TIO_EPLAN, "plan: move %zu: prefetch of tensor %u without an offload",
                              j, mv[j].tensor);
        }
    }
    int64_t ag = 0, ah = 0;
    for (size_t k = 0; k < n && rc == 0; k++) {
        ag += dg[k];
        ah += dh[k];
        int64_t g = (int64_t)m->resident[k] + ag;
        if (gpu) {
            gpu[k] = g > 0 ? (uint64_t)g : 0;
        }
        if (host) {
            host[k] = ah > 0 ? (uint64_t)ah : 0;
        }
    }
out:
    tio_free(matched);
    tio_free(dg);
    tio_free(dh);
    tio_free(pre_off);
    tio_free(pre_idx);
    return rc;
}

/* The verifier's model of trace for plan, after checking that plan belongs to trace. */
static int open_model(const struct tio_plan *plan,
                      const struct tio_trace *trace,
                      const struct tio_hw *hw,
                      const struct tio_plan_params *params,
                      struct tio_vmodel *m) {
    struct tio_plan_params pp;
    int rc = tio_plan_check_trace(plan, trace);
    if (rc < 0 || (rc = tio_plan_params_in("plan verify: params", params, &pp)) < 0) {
        return rc;
    }
    return tio_vmodel_build(trace, hw, &pp, m);
}

int tio_plan_verify_curves(const struct tio_plan *plan,
                           const struct tio_trace *trace,
                           const struct tio_hw *hw,
                           const struct tio_plan_params *params,
                           uint64_t *gpu,
                           uint64_t *host) {
    struct tio_vmodel m;
    int rc = open_model(plan, trace, hw, params, &m);
    if (rc < 0) {
        return rc;
    }
    rc = curves(&m, plan, gpu, host);
    tio_vmodel_free(&m);
    return rc;
}

int tio_plan_verify(const struct tio_plan *plan,
                    const struct tio_trace *trace,
                    const struct tio_hw *hw,
                    const struct tio_plan_params *params,
                    uint64_t *peak_out) {
    struct tio_vmodel m;
    int rc = open_model(plan, trace, hw, params, &m);
    if (rc < 0) {
        return rc;
    }
    size_t n = m.n;
    uint64_t *gpu = tio_malloc((n ? n : 1) * sizeof *gpu);
    uint64_t *host = tio_malloc((n ? n : 1) * sizeof *host);
    rc = gpu && host ? curves(&m, plan, gpu, host) : TIO_ENOMEM;
    if (rc < 0) {
        goto out;
    }
    uint64_t peak = 0, hpeak = 0;
    size_t over = SIZE_MAX, hover = SIZE_MAX;
    for (size_t k = 0; k < n; k++) {
        peak = TIO_MAX(peak, gpu[k]);
        hpeak = TIO_MAX(hpeak, host[k]);
        if (gpu[k] > m.capacity && over == SIZE_MAX) {
            over = k;
        }
        if (host[k] > m.host_cap && hover == SIZE_MAX) {
            hover = k;
        }
    }
    if (peak_out) {
        *peak_out = peak;
    }
    struct tio_plan_summary s;
    tio_plan_get_summary(plan, &s);
    if (s.feasible && over != SIZE_MAX) {
        rc = tio_set_error(TIO_EPLAN,
                           "plan: says feasible but kernel %zu is over capacity (%llu of %llu "
                           "bytes)",
                           over, (unsigned long long)gpu[over], (unsigned long long)m.capacity);
        goto out;
    }
    if (hover != SIZE_MAX) {
        rc = tio_set_error(TIO_EPLAN,
                           "plan: host memory at kernel %zu holds %llu bytes of offloads, over "
                           "the host cap of %llu",
                           hover, (unsigned long long)host[hover], (unsigned long long)m.host_cap);
        goto out;
    }
    rc = tio_vmodel_check_clean(&m, plan);
    if (rc == 0) {
        rc = tio_vmodel_check_bandwidth(&m, plan);
    }
out:
    tio_free(gpu);
    tio_free(host);
    tio_vmodel_free(&m);
    return rc;
}
