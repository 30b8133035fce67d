/*
 * tio_plan_verify (planner_impl.h): an independent check of a plan against its trace and
 * hardware, used by the tests. It rebuilds everything from the moves alone:
 *   - pairing: every offload of tensor t issued at kernel a is matched by one prefetch of t from
 *     the same tier whose deadline is t's next use after a and which starts after the offload's
 *     deadline; intermediates are only moved while they are alive;
 *   - bandwidth: per channel, the moves are jobs (release = trigger, due = deadline, size =
 *     bytes) on slots of capacity bw x tau; earliest-deadline-first is an optimal preemptive
 *     schedule on one resource, so if EDF misses a deadline no reservation can fit. Three
 *     iterations are unrolled so that wrap-around moves meet their successors. Stall moves
 *     (TIO_MOVE_STALL) are jobs like any other: a plan that needs compute to wait for its moves
 *     fails here, naming the stall move, so a plan that passes is one the kernels' time carries
 *     (the simulator serves its queues in the same deadline order, docs/simulator.md);
 *   - memory: resident bytes minus the tensors away between an offload's deadline and its
 *     prefetch's trigger must stay under the capacity when the plan says feasible.
 */
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "plan/planner_impl.h"

struct job {
    uint64_t release, due;
    double rem;
    int stall; /* a TIO_MOVE_STALL move's */
};

/* min-heap of job indices by due */
struct jheap {
    uint32_t *a;
    size_t n;
};

static void jpush(struct jheap *h, const struct job *jobs, uint32_t j) {
    size_t i = h->n++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (jobs[h->a[up]].due <= jobs[j].due) {
            break;
        }
        h->a[i] = h->a[up];
        i = up;
    }
    h->a[i] = j;
}

static void jpop(struct jheap *h, const struct job *jobs) {
    uint32_t last = h->a[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, b = i;
        uint64_t bd = jobs[last].due;
        if (l < h->n && jobs[h->a[l]].due < bd) {
            b = l;
            bd = jobs[h->a[l]].due;
        }
        if (r < h->n && jobs[h->a[r]].due < bd) {
            b = r;
        }
        if (b == i) {
            break;
        }
        h->a[i] = h->a[b];
        i = b;
    }
    if (h->n > 0) {
        h->a[i] = last;
    }
}

static int job_cmp(const void *x, const void *y) {
    const struct job *a = x, *b = y;
    if (a->release != b->release) {
        return a->release < b->release ? -1 : 1;
    }
    return (a->due > b->due) - (a->due < b->due);
}

/* EDF over the unrolled iterations on one channel: each kernel k offers rate x tau_k of
 * capacity, in the jobs' unit (bytes, or seconds of the SSD array's shared time, rate 1);
 * `tol` is what a job may miss by (rounding of 16 bytes in the jobs' unit). with_stalls = 0:
 * the stall moves' jobs are left out (the other moves were reserved in the slots and must fit
 * by themselves); 1: every job, and a miss is the stall moves' doing. */
static int edf_channel(const struct tio_pmodel *m,
                       double rate,
                       double tol,
                       const char *name,
                       const struct job *all,
                       size_t n_all,
                       int with_stalls) {
    struct job *jobs = tio_malloc((n_all ? n_all : 1) * sizeof *jobs);
    struct jheap h = { tio_malloc((n_all ? n_all : 1) * sizeof(uint32_t)), 0 };
    if (!jobs || !h.a) {
        tio_free(jobs);
        tio_free(h.a);
        return TIO_ENOMEM;
    }
    size_t nj = 0;
    for (size_t i = 0; i < n_all; i++) {
        if (with_stalls || !all[i].stall) {
            jobs[nj++] = all[i];
        }
    }
    if (nj == 0) {
        tio_free(jobs);
        tio_free(h.a);
        return 0;
    }
    qsort(jobs, nj, sizeof *jobs, job_cmp);
    size_t n = m->n, next = 0;
    uint64_t horizon = jobs[nj - 1].due + 1;
    int rc = 0;
    for (uint64_t k = 0; k < horizon && rc == 0; k++) {
        while (next < nj && jobs[next].release <= k) {
            jpush(&h, jobs, (uint32_t)next++);
        }
        while (h.n > 0 && jobs[h.a[0]].due <= k) {
            struct job *j = &jobs[h.a[0]];
            if (j->rem > tol + 1e-9 * j->rem) {
                rc = tio_set_error(
                    TIO_EPLAN,
                    "plan: channel %s: a %s released at kernel %llu misses its "
                    "deadline %llu by %.0f bytes (%s)",
                    name, j->stall ? "stall move" : "move", (unsigned long long)(j->release % n),
                    (unsigned long long)(j->due % n), j->rem * 16.0 / tol,
                    with_stalls ? "planned beyond the bandwidth: compute waits for it"
                                : "slots over capacity");
                break;
            }
            jpop(&h, jobs);
        }
        double cap = rate * m->tau[k % n];
        while (rc == 0 && cap > 0 && h.n > 0) {
            struct job *j = &jobs[h.a[0]];
            double take = TIO_MIN(cap, j->rem);
            j->rem -= take;
            cap -= take;
            if (j->rem <= 0) {
                jpop(&h, jobs);
            }
        }
    }
    tio_free(jobs);
    tio_free(h.a);
    return rc;
}

/* First use of tensor t at or after extended kernel a (cyclic for globals); NONE if none. */
static uint64_t next_use(const struct tio_pmodel *m, uint32_t t, int global, uint64_t a) {
    const uint32_t *uk = m->use_kernel + m->use_off[t];
    size_t cnt = m->use_off[t + 1] - m->use_off[t];
    size_t n = m->n;
    uint64_t base = (a / n) * n, r = a % n;
    for (size_t i = 0; i < cnt; i++) { /* lists are short; linear is fine for a checker */
        if (uk[i] >= r) {
            return base + uk[i];
        }
    }
    if (global) {
        return cnt ? base + n + uk[0] : base + n; /* unused global: back at the next start */
    }
    return UINT64_MAX;
}

/* Offload move i (o): the right size, inside an intermediate's life, complete before the
 * tensor's next use, and paired with one unmatched prefetch of it from the same tier (marked in
 * matched[]); the bytes it is away are subtracted from the memory curve's differences. 0 or
 * TIO_EPLAN naming the move. */
static int check_offload(const struct tio_pmodel *m,
                         const struct tio_trace_view *v,
                         const struct tio_move *mv,
                         size_t i,
                         const size_t *pre_off,
                         const size_t *pre_idx,
                         uint8_t *matched,
                         int64_t *diff) {
    const struct tio_move *o = &mv[i];
    size_t n = m->n;
    uint32_t t = o->tensor;
    int global = (v->tensor_flags[t] & TIO_TENSOR_GLOBAL) != 0;
    const uint32_t *uk = m->use_kernel + m->use_off[t];
    size_t cnt = m->use_off[t + 1] - m->use_off[t];
    if (v->tensor_bytes[t] != o->bytes) {
        return tio_set_error(TIO_EPLAN, "plan: move %zu: tensor %u has %llu bytes, move %llu", i, t,
                             (unsigned long long)v->tensor_bytes[t], (unsigned long long)o->bytes);
    }
    if (!global && (cnt == 0 || o->trigger <= uk[0] || o->trigger > uk[cnt - 1])) {
        return tio_set_error(TIO_EPLAN,
                             "plan: move %zu: intermediate tensor %u offloaded at kernel %llu "
                             "outside its life",
                             i, t, (unsigned long long)o->trigger);
    }
    uint64_t nu = next_use(m, t, global, o->trigger);
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
    /* the matching prefetch */
    size_t found = SIZE_MAX;
    uint64_t pt = 0;
    for (size_t jj = pre_off[t]; jj < pre_off[t + 1]; jj++) {
        size_t j = pre_idx[jj];
        const struct tio_move *q = &mv[j];
        if (matched[j] || q->tensor != t || q->to != TIO_TIER_GPU || q->from != o->to) {
            continue;
        }
        uint64_t a = q->trigger, d = q->deadline;
        if (a < o->trigger) {
            a += n;
            d += n;
        }
        if (d == nu && a >= o->deadline && a <= d) {
            found = j;
            pt = a;
            break;
        }
    }
    if (found == SIZE_MAX) {
        return tio_set_error(TIO_EPLAN,
                             "plan: move %zu: offload of tensor %u at kernel %llu has no "
                             "prefetch completing by its next use %llu after the offload",
                             i, t, (unsigned long long)o->trigger, (unsigned long long)nu);
    }
    matched[found] = 1;
    /* away over [o->deadline, pt) */
    uint64_t a = o->deadline, b = pt;
    if (a >= n) {
        a -= n;
        b -= n;
    }
    if (a < b) {
        if (b <= n) {
            diff[a] -= (int64_t)o->bytes;
            diff[b] += (int64_t)o->bytes;
        } else {
            diff[a] -= (int64_t)o->bytes;
            diff[n] += (int64_t)o->bytes;
            diff[0] -= (int64_t)o->bytes;
            diff[b - n] += (int64_t)o->bytes;
        }
    }
    return 0;
}

/* The jobs move q puts on the channels it uses (three unrolled iterations each); none for a
 * clean offload (no write). */
static void add_jobs(const struct tio_pmodel *m,
                     const struct tio_move *q,
                     struct job *jobs[TIO_CH_COUNT],
                     size_t nj[TIO_CH_COUNT]) {
    size_t n = m->n;
    int off = q->from == TIO_TIER_GPU;
    if (off && (q->flags & TIO_MOVE_CLEAN)) {
        return; /* no write */
    }
    int tier = off ? q->to : q->from;
    int chs[2] = { -1, -1 };
    if (tier == TIO_TIER_SSD) { /* on the link's SSD share: not a PCIe channel's job */
        chs[0] = off ? TIO_CH_SSD_W : TIO_CH_SSD_R;
    } else {
        chs[0] = off ? TIO_CH_D2H : TIO_CH_H2D;
    }
    for (int c = 0; c < 2; c++) {
        if (chs[c] < 0) {
            continue;
        }
        /* SSD reads and writes share the array's time: one job list, in seconds */
        int list = chs[c] == TIO_CH_SSD_R ? TIO_CH_SSD_W : chs[c];
        double amount = (double)q->bytes;
        if (list == TIO_CH_SSD_W) {
            amount *= m->ssd_mix / m->bw[chs[c]];
        }
        for (uint64_t r = 0; r < 3; r++) {
            jobs[list][nj[list]++] = (struct job){ q->trigger + r * n, q->deadline + r * n, amount,
                                                   (q->flags & TIO_MOVE_STALL) != 0 };
        }
    }
}

int tio_plan_verify(const struct tio_plan *plan,
                    const struct tio_trace *trace,
                    const struct tio_hw *hw,
                    const struct tio_plan_params *params,
                    uint64_t *peak_out) {
    struct tio_plan_params pp;
    struct tio_pmodel m;
    int rc = tio_plan_check_trace(plan, trace);
    if (rc < 0 || (rc = tio_plan_params_in("plan verify: params", params, &pp)) < 0) {
        return rc;
    }
    if ((rc = tio_pmodel_build(trace, hw, &pp, &m)) < 0) {
        return rc;
    }
    struct tio_trace_view v;
    tio_trace_get_view(trace, &v);
    size_t nm = 0, n = m.n;
    const struct tio_move *mv = tio_plan_moves(plan, &nm);
    uint8_t *matched = tio_calloc(nm ? nm : 1, 1);
    int64_t *diff = tio_calloc(n + 1, sizeof *diff);
    struct job *jobs[TIO_CH_COUNT] = { 0 };
    size_t nj[TIO_CH_COUNT] = { 0 };
    size_t *pre_off = NULL, *pre_idx = NULL;
    rc = TIO_ENOMEM;
    if (!matched || !diff) {
        goto out;
    }
    for (int c = 0; c < TIO_CH_COUNT; c++) {
        jobs[c] = tio_malloc((3 * nm + 1) * sizeof(struct job));
        if (!jobs[c]) {
            goto out;
        }
    }
    /* prefetches grouped by tensor (CSR), so pairing costs the tensor's moves, not all */
    pre_off = tio_calloc(v.n_tensors + 2, sizeof *pre_off);
    pre_idx = tio_malloc((nm ? nm : 1) * sizeof *pre_idx);
    if (!pre_off || !pre_idx) {
        goto out;
    }
    for (size_t j = 0; j < nm; j++) {
        if (mv[j].to == TIO_TIER_GPU) {
            pre_off[mv[j].tensor + 2]++;
        }
    }
    for (size_t t = 0; t < v.n_tensors; t++) {
        pre_off[t + 2] += pre_off[t + 1];
    }
    for (size_t j = 0; j < nm; j++) {
        if (mv[j].to == TIO_TIER_GPU) {
            pre_idx[pre_off[mv[j].tensor + 1]++] = j;
        }
    }
    rc = 0;
    for (size_t i = 0; i < nm && rc == 0; i++) {
        if (mv[i].from == TIO_TIER_GPU) {
            rc = check_offload(&m, &v, mv, i, pre_off, pre_idx, matched, diff);
        }
    }
    for (size_t j = 0; j < nm && rc == 0; j++) {
        if (mv[j].to == TIO_TIER_GPU && !matched[j]) {
            rc =
                tio_set_error(TIO_EPLAN, "plan: move %zu: prefetch of tensor %u without an offload",
                              j, mv[j].tensor);
        }
    }
    if (rc < 0) {
        goto out;
    }
    /* memory */
    int64_t acc = 0;
    uint64_t peak = 0;
    size_t over = SIZE_MAX;
    for (size_t k = 0; k < n; k++) {
        acc += diff[k];
        int64_t val = (int64_t)m.resident[k] + acc;
        uint64_t u = val > 0 ? (uint64_t)val : 0;
        peak = TIO_MAX(peak, u);
        if (u > m.capacity && over == SIZE_MAX) {
            over = k;
        }
    }
    if (peak_out) {
        *peak_out = peak;
    }
    struct tio_plan_summary s;
    tio_plan_get_summary(plan, &s);
    if (s.feasible && over != SIZE_MAX) {
        rc = tio_set_error(TIO_EPLAN, "plan: says feasible but kernel %zu is over capacity", over);
        goto out;
    }
    /* bandwidth */
    for (size_t i = 0; i < nm; i++) {
        add_jobs(&m, &mv[i], jobs, nj);
    }
    static const char *const names[TIO_CH_COUNT] = { "ssd", "ssd-read", "pcie-d2h", "pcie-h2d" };
    for (int c = 0; c < TIO_CH_COUNT && rc == 0; c++) {
        double rate = c == TIO_CH_SSD_W ? 1.0 : m.bw[c];
        double tol = c == TIO_CH_SSD_W ? 16.0 * m.ssd_mix / TIO_MAX(m.bw[TIO_CH_SSD_R], 1.0) : 16.0;
        rc = edf_channel(&m, rate, tol, names[c], jobs[c], nj[c], 0);
    }
    for (int c = 0; c < TIO_CH_COUNT && rc == 0; c++) {
        double rate = c == TIO_CH_SSD_W ? 1.0 : m.bw[c];
        double tol = c == TIO_CH_SSD_W ? 16.0 * m.ssd_mix / TIO_MAX(m.bw[TIO_CH_SSD_R], 1.0) : 16.0;
        int stalls = 0;
        for (size_t i = 0; i < nj[c] && !stalls; i++) {
            stalls = jobs[c][i].stall;
        }
        rc = stalls ? edf_channel(&m, rate, tol, names[c], jobs[c], nj[c], 1) : 0;
    }
out:
    for (int c = 0; c < TIO_CH_COUNT; c++) {
        tio_free(jobs[c]);
    }
    tio_free(matched);
    tio_free(diff);
    tio_free(pre_off);
    tio_free(pre_idx);
    tio_pmodel_free(&m);
    return rc;
}
