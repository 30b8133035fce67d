/*
 * The teraio planners (docs/method.md, the paper's Algorithm 1, docs/planner.md):
 *
 *   teraio-mixed / teraio-ssd   our planner: capped benefit, benefit/cost ranking, SSD first,
 *                               host memory within the cap, clean copies, early prefetch
 *   teraio-paper                Algorithm 1 as printed: B = s * sum of critical tau, rank B/s
 *   g10                         G10's ranking: B itself (no cost)
 *
 * One engine: a lazy max-heap of candidates (inactive periods) keyed by an upper bound of their
 * score; a selection round pops candidates, re-evaluates them against the current bandwidth
 * slots and memory curve, and stops as soon as the best score found is at least the next key.
 * Keys only go down (reservations only shrink windows, picks only lower the curve), so a round
 * finds exactly the candidate a full rescan would: the pick sequence is Algorithm 1's.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "plan/planner_impl.h"
#include "plan/planner_teraio_impl.h"
#include "plan/planner_tree.h"

/* ---- setup and main loop ------------------------------------------------------------------- */

/* Free what only the search needs (slots, heap, clean-copy index), so that early
 * prefetch and the plan's moves are not allocated on top of it. Safe to call twice. */
static void planner_free_search(struct planner *p) {
    if (p->used[TIO_CH_SSD_R] == p->used[TIO_CH_SSD_W]) {
        p->used[TIO_CH_SSD_R] = NULL; /* shared with SSD_W */
    }
    for (int c = 0; c < TIO_CH_COUNT; c++) {
        tio_free(p->used[c]);
        tio_free(p->fnext[c]);
        tio_free(p->bprev[c]);
        p->used[c] = NULL;
        p->fnext[c] = NULL;
        p->bprev[c] = NULL;
    }
    tio_free(p->heap);
    tio_free(p->version);
    tio_free(p->rank);
    tio_free(p->unrank);
    p->rank = p->unrank = NULL;
    tio_free(p->seg_id);
    tio_free(p->seg_first);
    tio_free(p->seg_len);
    tio_free(p->seg_min[0]);
    tio_free(p->seg_min[1]);
    tio_free(p->period_of_use);
    tio_free(p->nowrite);
    tio_free(p->no_host);
    p->no_host = NULL;
    p->heap = NULL;
    p->n_heap = p->cap_heap = 0;
    p->version = NULL;
    p->seg_id = p->seg_first = p->seg_len = p->seg_min[0] = p->seg_min[1] = NULL;
    p->period_of_use = NULL;
    p->nowrite = NULL;
}

static void planner_free(struct planner *p) {
    planner_free_search(p);
    tio_free(p->tprefix);
    tio_free(p->picks);
    tio_stree_fini(&p->mem);
    tio_mtree_fini(&p->host);
}

/* The write segments of every tensor's uses (the clean-copy index): a segment starts at a
 * write; uses before a tensor's first write continue its last write's segment if it is a global
 * (cyclic), else start a segment of their own at use 0. Returns the number of segments; with
 * `fill`, also writes seg_id of every use and seg_first and seg_len of every segment. */
static size_t build_segments(struct planner *p, const struct tio_trace_view *v, int fill) {
    const struct tio_pmodel *m = p->m;
    size_t ns = 0;
    for (size_t t = 0; t < m->n_tensors; t++) {
        size_t base = m->use_off[t], cnt = m->use_off[t + 1] - base;
        if (cnt == 0) {
            continue;
        }
        int global = (v->tensor_flags[t] & TIO_TENSOR_GLOBAL) != 0;
        size_t last_w = SIZE_MAX;
        for (size_t u = 0; u < cnt; u++) {
            if (m->use_mode[base + u] & TIO_USE_WRITE) {
                last_w = u;
            }
        }
        if (fill) {
            p->nowrite[t] = global && last_w == SIZE_MAX;
        }
        /* the segment holding use 0 starts at the last write (global) or at use 0 */
        size_t start = global && last_w != SIZE_MAX ? last_w : 0;
        size_t id = ns++, wrap = id;
        if (fill) {
            p->seg_first[id] = (uint32_t)start;
        }
        for (size_t u = 0; u < cnt; u++) {
            if ((m->use_mode[base + u] & TIO_USE_WRITE) && u != start) {
                start = u;
                id = u == last_w && global ? wrap : ns++; /* the cyclic segment again */
                if (fill) {
                    p->seg_first[id] = (uint32_t)start;
                }
            }
            if (fill) {
                size_t pos = u >= start ? u - start : u + cnt - start;
                p->seg_id[base + u] = (uint32_t)id;
                p->seg_len[id] = TIO_MAX(p->seg_len[id], (uint32_t)(pos + 1));
            }
        }
    }
    return ns;
}

/* A period's place in the heap's tie order: tensor, then start (both < 2^32). */
struct rank_key {
    uint64_t key;
    uint32_t period;
};

static int rank_key_cmp(const void *a, const void *b) {
    const struct rank_key *x = a, *y = b;
    if (x->key != y->key) {
        return (x->key > y->key) - (x->key < y->key);
    }
    return (x->period > y->period) - (x->period < y->period);
}

/* Order periods [i, j) of unrank, one tensor's, by start: insertion for a short run (a
 * tensor's periods come in order of their uses, so at most its folded wrap-around period,
 * which starts at kernel 0, is out of place), qsort of keys `k` for a long one. */
static void
rank_run(const struct tio_pperiod *pp, uint32_t *unrank, size_t i, size_t j, struct rank_key *k) {
    if (j - i > 32) {
        for (size_t x = i; x < j; x++) {
            k[x - i] = (struct rank_key){ pp[unrank[x]].start, unrank[x] };
        }
        qsort(k, j - i, sizeof *k, rank_key_cmp);
        for (size_t x = i; x < j; x++) {
            unrank[x] = k[x - i].period;
        }
        return;
    }
    for (size_t x = i + 1; x < j; x++) {
        uint32_t y = unrank[x];
        size_t z = x;
        for (; z > i && pp[unrank[z - 1]].start > pp[y].start; z--) {
            unrank[z] = unrank[z - 1];
        }
        unrank[z] = y;
    }
}

/* unrank: the periods in (tensor, start) order, when they come grouped by tensor in tensor
 * order (planner_model.c's order): each tensor's run ordered alone, linear in the periods
 * where one qsort of them all cost log2(periods) comparisons each. 0, or 1 when not grouped
 * (the caller sorts them all). */
static int
rank_grouped(const struct tio_pperiod *pp, size_t np, uint32_t *unrank, struct rank_key *k) {
    for (size_t i = 1; i < np; i++) {
        if (pp[i - 1].tensor > pp[i].tensor) {
            return 1;
        }
    }
    for (size_t i = 0; i < np; i++) {
        unrank[i] = (uint32_t)i;
    }
    size_t i = 0;
    while (i < np) {
        size_t j = i + 1;
        while (j < np && pp[j].tensor == pp[i].tensor) {
            j++;
        }
        rank_run(pp, unrank, i, j, k);
        i = j;
    }
    return 0;
}

/* p->rank: NULL when the periods are in (tensor, start) order, else every period's place in
 * that order, and p->unrank the period at each place (no two periods of a tensor start at one
 * kernel, so the places are distinct: equal keys would take the period's index as well). */
int pt_build_rank(struct planner *p) {
    const struct tio_pmodel *m = p->m;
    size_t np = m->n_periods;
    int sorted = 1;
    for (size_t i = 1; i < np && sorted; i++) {
        const struct tio_pperiod *x = &m->periods[i - 1], *y = &m->periods[i];
        sorted = x->tensor < y->tensor || (x->tensor == y->tensor && x->start < y->start);
    }
    if (sorted) {
        return 0;
    }
    struct rank_key *k = tio_malloc(np * sizeof *k);
    p->rank = tio_malloc(np * sizeof *p->rank);
    p->unrank = tio_malloc(np * sizeof *p->unrank);
    if (!k || !p->rank || !p->unrank) {
        tio_free(k);
        return TIO_ENOMEM;
    }
    if (rank_grouped(m->periods, np, p->unrank, k)) {
        for (size_t i = 0; i < np; i++) {
            k[i] = (struct rank_key){ ((uint64_t)m->periods[i].tensor << 32) | m->periods[i].start,
                                      (uint32_t)i };
        }
        qsort(k, np, sizeof *k, rank_key_cmp);
        for (size_t i = 0; i < np; i++) {
            p->unrank[i] = k[i].period;
        }
    }
    for (size_t i = 0; i < np; i++) {
        p->rank[p->unrank[i]] = (uint32_t)i;
    }
    tio_free(k);
    return 0;
}

static int planner_init(struct planner *p,
                        const struct tio_pmodel *m,
                        const struct tio_plan_params *params,
                        int variant) {
    memset(p, 0, sizeof *p);
    size_t n = m->n;
    p->m = m;
    p->variant = variant;
    p->n = n;
    p->cap = (int64_t)m->plan_line;
    p->use_ssd = m->bw[TIO_CH_SSD_W] > 0 && m->bw[TIO_CH_SSD_R] > 0;
    p->use_host = variant != TIO_VAR_SSD && variant != TIO_VAR_PAPER_SSD && m->host_cap > 0 &&
                  m->bw[TIO_CH_D2H] > 0 && m->bw[TIO_CH_H2D] > 0;
    p->clean_copies =
        (variant == TIO_VAR_MIXED || variant == TIO_VAR_SSD) && (!params || params->clean_copies);
    double bw_w = p->use_ssd ? m->bw[TIO_CH_SSD_W] : m->bw[TIO_CH_D2H];
    double bw_r = p->use_ssd ? m->bw[TIO_CH_SSD_R] : m->bw[TIO_CH_H2D];
    p->cost_per_byte = (1.0 / bw_w + 1.0 / bw_r) * (p->use_ssd ? m->ssd_mix : 1.0);
    p->eps = (variant == TIO_VAR_MIXED || variant == TIO_VAR_SSD) ? PICK_EPS : 0;
    for (int c = 0; c < TIO_CH_COUNT; c++) {
        int shared = pt_is_ssd_ch(c) && p->use_ssd;
        p->unit[c] = shared ? m->ssd_mix / m->bw[c] : 1.0;
        if (c == TIO_CH_SSD_R && shared) {
            p->used[c] = p->used[TIO_CH_SSD_W]; /* one budget for reads and writes */
        } else {
            p->used[c] = tio_calloc(n, sizeof(double));
            if (!p->used[c]) {
                return TIO_ENOMEM;
            }
        }
        /* bytes for PCIe, seconds of the array's time for the shared SSD slot */
        p->capmul[c] = shared ? 1.0 : m->bw[c];
        int fwd = c == TIO_CH_SSD_W || c == TIO_CH_D2H;
        if (fwd) {
            p->fnext[c] = tio_malloc((n + 1) * sizeof(uint32_t));
            if (!p->fnext[c]) {
                return TIO_ENOMEM;
            }
            for (size_t k = 0; k <= n; k++) {
                p->fnext[c][k] = (uint32_t)k;
            }
        } else {
            p->bprev[c] = tio_malloc((n + 1) * sizeof(uint32_t));
            if (!p->bprev[c]) {
                return TIO_ENOMEM;
            }
            for (size_t k = 0; k <= n; k++) {
                p->bprev[c][k] = (uint32_t)k;
            }
        }
    }
    for (int c = 0; c < TIO_CH_COUNT; c++) {
        for (size_t k = 0; k < n; k++) {
            pt_mark_one(p, c, k); /* zero-length kernels have no room at all */
        }
    }
    p->tprefix = tio_malloc((n + 1) * sizeof(double));
    int64_t *vals = tio_malloc(n * sizeof *vals);
    p->version = tio_calloc(m->n_periods ? m->n_periods : 1, sizeof *p->version);
    size_t nu = m->use_off[m->n_tensors];
    size_t nu1 = nu ? nu : 1;
    p->seg_id = tio_malloc(nu1 * sizeof *p->seg_id);
    p->period_of_use = tio_malloc(nu1 * sizeof *p->period_of_use);
    p->nowrite = tio_calloc(m->n_tensors ? m->n_tensors : 1, 1);
    if (!p->tprefix || !vals || !p->version || !p->seg_id || !p->period_of_use || !p->nowrite) {
        tio_free(vals);
        return TIO_ENOMEM;
    }
    p->tprefix[0] = 0;
    for (size_t k = 0; k < n; k++) {
        p->tprefix[k + 1] = p->tprefix[k] + m->tau[k];
        vals[k] = (int64_t)m->resident[k];
    }
    int rc = tio_stree_init(&p->mem, n, vals, m->tau);
    tio_free(vals);
    if (rc == 0) {
        rc = tio_mtree_init(&p->host, n);
    }
    if (rc < 0) {
        return rc;
    }
    struct tio_trace_view v;
    tio_trace_get_view(m->trace, &v);
    for (size_t u = 0; u < nu; u++) {
        p->period_of_use[u] = UINT32_MAX;
    }
    for (size_t i = 0; i < m->n_periods; i++) {
        const struct tio_pperiod *q = &m->periods[i];
        if (!(q->flags & TIO_PPERIOD_UNUSED)) {
            p->period_of_use[m->use_off[q->tensor] + q->use_index] = (uint32_t)i;
        }
    }
    size_t ns = build_segments(p, &v, 0);
    size_t ns1 = ns ? ns : 1;
    p->seg_first = tio_malloc(ns1 * sizeof *p->seg_first);
    p->seg_len = tio_calloc(ns1, sizeof *p->seg_len);
    p->seg_min[0] = tio_malloc(ns1 * sizeof(uint32_t));
    p->seg_min[1] = tio_malloc(ns1 * sizeof(uint32_t));
    if (!p->seg_first || !p->seg_len || !p->seg_min[0] || !p->seg_min[1]) {
        return TIO_ENOMEM;
    }
    for (size_t i = 0; i < ns; i++) {
        p->seg_min[0][i] = p->seg_min[1][i] = UINT32_MAX;
    }
    (void)build_segments(p, &v, 1);
    return pt_build_rank(p);
}

static int emit(struct planner *p, const uint8_t *dropped, struct tio_plan *plan) {
    const struct tio_pmodel *m = p->m;
    size_t n = p->n;
    size_t want = plan->n_moves;
    for (size_t i = 0; i < p->n_picks; i++) {
        want += dropped[i] ? 0 : 2;
    }
    if (want > plan->cap_moves) { /* exactly: doubling would leave up to half of it unused */
        struct tio_move *mv = tio_realloc(plan->moves, want * sizeof *mv);
        if (!mv) {
            return TIO_ENOMEM;
        }
        plan->moves = mv;
        plan->cap_moves = want;
    }
    for (size_t i = 0; i < p->n_picks; i++) {
        if (dropped[i]) {
            continue;
        }
        const struct pick *pk = &p->picks[i];
        const struct tio_pperiod *q = &m->periods[pk->period];
        int64_t s = (int64_t)q->bytes;
        struct tio_move off = {
            .tensor = q->tensor,
            .from = TIO_TIER_GPU,
            .to = pk->tier,
            .flags = (pk->clean ? TIO_MOVE_CLEAN : 0) | (pk->stall_off ? TIO_MOVE_STALL : 0),
            .trigger = q->start,
            .deadline = pk->off,
            .bytes = q->bytes,
        };
        /* the kernel at the deadline cannot fit without this offload: it would wait */
        if (!pk->clean && pk->off < q->end &&
            pt_ext_max(&p->mem, n, pk->off, pk->off + 1) + s > p->cap) {
            off.flags |= TIO_MOVE_URGENT;
        }
        uint64_t trig = pk->pre, dl = q->end;
        if (trig >= n) {
            trig -= n;
            dl -= n;
        }
        struct tio_move pre = {
            .tensor = q->tensor,
            .from = pk->tier,
            .to = TIO_TIER_GPU,
            .flags = pk->stall_pre ? TIO_MOVE_STALL : 0,
            .trigger = trig,
            .deadline = dl,
            .bytes = q->bytes,
        };
        double bw = pk->tier == TIO_TIER_SSD ? m->bw[TIO_CH_SSD_R] / m->ssd_mix : m->bw[TIO_CH_H2D];
        if (pt_ext_time(p, pk->pre, q->end) < URGENT_SLACK * (double)q->bytes / bw) {
            pre.flags |= TIO_MOVE_URGENT;
        }
        int rc = tio_plan_add_move(plan, &off);
        if (rc == 0) {
            rc = tio_plan_add_move(plan, &pre);
        }
        if (rc < 0) {
            return rc;
        }
    }
    return 0;
}

static int summarize(struct planner *p, const uint8_t *dropped, struct tio_plan *plan) {
    const struct tio_pmodel *m = p->m;
    size_t n = p->n;
    struct tio_plan_summary s;
    memset(&s, 0, sizeof s);
    s.capacity_bytes = m->capacity;
    int64_t *vals = tio_malloc(n * sizeof *vals);
    int64_t *ssd = tio_calloc(n + 1, sizeof *ssd);
    if (!vals || !ssd) {
        tio_free(vals);
        tio_free(ssd);
        return TIO_ENOMEM;
    }
    tio_stree_values(&p->mem, vals);
    for (size_t k = 0; k < n; k++) {
        uint64_t v = vals[k] > 0 ? (uint64_t)vals[k] : 0;
        if (m->out_gpu) {
            m->out_gpu[k] = v;
        }
        if (m->out_host) { /* the tests only: a query per kernel */
            int64_t h = tio_mtree_max(&p->host, k, k + 1);
            m->out_host[k] = h > 0 ? (uint64_t)h : 0;
        }
        if (v > s.planned_peak_bytes) {
            s.planned_peak_bytes = v;
        }
        if (v > m->capacity && v - m->capacity > s.shortfall_bytes) {
            s.shortfall_bytes = v - m->capacity;
            s.shortfall_kernel = k;
        }
    }
    /* feasible: the memory fits and no move waits for compute (a stall move is planned beyond
     * the bandwidth, so its replay has late moves: docs/planner.md, "Plans against their
     * replay") */
    size_t nm = 0;
    const struct tio_move *mv = tio_plan_moves(plan, &nm);
    int stalls = 0;
    for (size_t i = 0; i < nm && !stalls; i++) {
        stalls = (mv[i].flags & TIO_MOVE_STALL) != 0;
    }
    s.feasible = s.shortfall_bytes == 0 && !stalls;
    int64_t hp = tio_mtree_max(&p->host, 0, n);
    s.host_peak_bytes = hp > 0 ? (uint64_t)hp : 0;
    for (size_t i = 0; i < p->n_picks; i++) {
        if (dropped[i]) {
            continue;
        }
        const struct pick *pk = &p->picks[i];
        const struct tio_pperiod *q = &m->periods[pk->period];
        if (pk->tier == TIO_TIER_SSD) {
            if (!pk->clean) {
                s.bytes_to_ssd += q->bytes;
            }
            /* held on SSD from the offload to the end of the prefetch */
            uint64_t a = q->start, b = q->end;
            if (b <= n) {
                ssd[a] += (int64_t)q->bytes;
                ssd[b] -= (int64_t)q->bytes;
            } else {
                ssd[a] += (int64_t)q->bytes;
                ssd[n] -= (int64_t)q->bytes;
                ssd[0] += (int64_t)q->bytes;
                ssd[b - n] -= (int64_t)q->bytes;
            }
        } else if (!pk->clean) {
            s.bytes_to_host += q->bytes;
        }
    }
    int64_t acc = 0;
    for (size_t k = 0; k < n; k++) {
        acc += ssd[k];
        if (acc > 0 && (uint64_t)acc > s.ssd_peak_bytes) {
            s.ssd_peak_bytes = (uint64_t)acc;
        }
    }
    tio_free(vals);
    tio_free(ssd);
    tio_plan_set_summary(plan, &s);
    return 0;
}

int tio_planner_teraio(const struct tio_pmodel *m,
                       const struct tio_plan_params *params,
                       int variant,
                       struct tio_plan *plan) {
    struct planner p;
    int rc = planner_init(&p, m, params, variant);
    uint8_t *alive = NULL, *dropped = NULL, *taken = NULL;
    struct cand *stash = NULL;
    size_t n_stash = 0, cap_stash = 0;
    if (rc < 0) {
        goto out;
    }
    rc = TIO_ENOMEM;
    alive = tio_calloc(m->n_periods ? m->n_periods : 1, 1);
    taken = tio_calloc(m->n_periods ? m->n_periods : 1, 1);
    if (!alive || !taken) {
        goto out;
    }
    /* optional: without it a refused period's host query is asked again */
    p.no_host = p.use_host ? tio_calloc(m->n_periods / 8 + 1, 1) : NULL;
    /* Candidates: periods long enough for a round trip on the fastest allowed path, with some
     * critical pressure in them. Periods are grouped by tensor (planner_model.c order). */
    double fast_w =
        TIO_MAX(p.use_ssd ? m->bw[TIO_CH_SSD_W] : 0, p.use_host ? m->bw[TIO_CH_D2H] : 0);
    double fast_r =
        TIO_MAX(p.use_ssd ? m->bw[TIO_CH_SSD_R] : 0, p.use_host ? m->bw[TIO_CH_H2D] : 0);
    /* one bound per period on a curve that does not change until the first pick: tabled (a
     * table that cannot be allocated only leaves the bounds to the tree's descents) */
    struct tio_stree_table crit0;
    if (tio_stree_table_init(&p.mem, p.cap, &crit0) == 0) {
        tio_stree_table_fill(&p.mem, &crit0, 1, 1);
        p.fixed = &crit0;
    }
    rc = 0;
    for (size_t i = 0; i < m->n_periods && rc == 0; i++) {
        const struct tio_pperiod *q = &m->periods[i];
        if (fast_w <= 0 || fast_r <= 0) {
            continue;
        }
        /* (a clean offload needs no write, so then only the read must fit) */
        double need = (p.clean_copies ? 0 : (double)q->bytes / fast_w) + (double)q->bytes / fast_r;
        if (pt_ext_time(&p, q->start, q->end) < need) {
            continue; /* too short for a round trip: can never be viable */
        }
        double ub = pt_score_of(&p, q, pt_ext_bound(&p, q->start, q->end, (int64_t)q->bytes));
        if (ub > 0) {
            alive[i] = 1;
            rc = pt_heap_push(&p, ub, (uint32_t)i);
        }
    }
    if (p.fixed) {
        tio_stree_table_fini(&crit0);
        p.fixed = NULL;
    }
    if (rc < 0) {
        goto out;
    }
    /* Algorithm 1's while loop: one pick per round, each pick consumes a period. */
    while (p.n_heap > 0 && tio_stree_max(&p.mem, 0, p.n) > p.cap) {
        int have = 0;
        double best = 0;
        uint32_t best_pi = 0;
        struct eval best_e = { 0 };
        n_stash = 0;
        while (p.n_heap > 0) {
            const struct cand top = pt_heap_top(&p);
            if (have && !pt_cand_better(&p, top.key, top.period, best, best_pi)) {
                break; /* no bound left above the best score found: it is the maximum */
            }
            if (have && p.eps > 0 && best >= (1.0 - p.eps) * top.key) {
                break; /* within eps of every remaining bound: good enough (docs/planner.md) */
            }
            struct cand c = pt_heap_pop(&p);
            if (!alive[c.period] || c.version != p.version[c.period]) {
                continue; /* consumed, or superseded by a re-keyed copy */
            }
            struct eval e;
            double ub;
            double sc = pt_evaluate(&p, c.period, &e, &ub);
            if (ub <= 0) {
                alive[c.period] = 0; /* bounds only fall: never viable again */
                continue;
            }
            c.key = ub;
            if ((rc = tio_grow((void **)&stash, &cap_stash, n_stash + 1, sizeof *stash)) < 0) {
                goto out;
            }
            stash[n_stash++] = c;
            if (e.viable && sc > 0 && (!have || pt_cand_better(&p, sc, c.period, best, best_pi))) {
                have = 1;
                best = sc;
                best_pi = c.period;
                best_e = e;
            }
        }
        for (size_t i = 0; i < n_stash; i++) {
            if (stash[i].period == best_pi && have) {
                continue;
            }
            if (!alive[stash[i].period] || stash[i].version != p.version[stash[i].period]) {
                continue;
            }
            if ((rc = pt_heap_push(&p, stash[i].key, stash[i].period)) < 0) {
                goto out;
            }
        }
        if (!have) {
            break; /* Algorithm 1 line 12: no viable candidate */
        }
        if ((rc = pt_commit(&p, best_pi, &best_e)) < 0) {
            goto out;
        }
        alive[best_pi] = 0;
        taken[best_pi] = 1;
        if ((rc = pt_update_clean(&p, best_pi, best_e.tier, alive)) < 0) {
            goto out;
        }
    }
    if ((variant == TIO_VAR_MIXED || variant == TIO_VAR_SSD) && params->overcommit &&
        tio_stree_max(&p.mem, 0, p.n) > p.cap && (rc = pt_overcommit(&p, taken, alive)) < 0) {
        goto out;
    }
    /* The search is over: what follows (early prefetch, the moves, the summary) reads only the
     * picks, the curves and the model, so its memory is not allocated on top of the search's. */
    tio_free(alive);
    tio_free(taken);
    tio_free(stash);
    alive = taken = NULL;
    stash = NULL;
    planner_free_search(&p);
    dropped = tio_calloc(p.n_picks ? p.n_picks : 1, 1);
    if (!dropped) {
        rc = TIO_ENOMEM;
        goto out;
    }
    if (params->early_prefetch && !pt_is_paper(variant)) {
        pt_relax_prefetches(&p, dropped);
    }
    if ((rc = emit(&p, dropped, plan)) < 0) {
        goto out;
    }
    rc = summarize(&p, dropped, plan);
out:
    tio_free(alive);
    tio_free(taken);
    tio_free(dropped);
    tio_free(stash);
    planner_free(&p);
    return rc;
}
