/* The teraio planner: evaluating a candidate (window, tier, benefit, score), the lazy max-heap
 * of candidates. See planner_teraio_impl.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "plan/planner_impl.h"
#include "plan/planner_teraio_impl.h"
#include "plan/planner_tree.h"

/* ---- clean copies -------------------------------------------------------------------------- */

/* Is there a stored copy of period q's tensor on `tier`, still identical at q's offload? Only
 * on the SSDs: a host copy is freed when its tensor is fetched back (docs/simulator.md, "Moves";
 * the host memory counted here is held over the period only), so none outlives its period. */
int pt_has_clean_copy(const struct planner *p, const struct tio_pperiod *q, int tier) {
    if (!p->clean_copies || tier != TIO_TIER_SSD || (q->flags & TIO_PPERIOD_UNUSED)) {
        return 0;
    }
    uint32_t id = p->seg_id[p->m->use_off[q->tensor] + q->use_index];
    uint32_t best = p->seg_min[pt_tier_slot(tier)][id];
    if (p->nowrite[q->tensor]) {
        return best != UINT32_MAX; /* never written: any copy is current */
    }
    return best < pt_seg_pos(p, q->tensor, q->use_index, id);
}

/* ---- evaluation ---------------------------------------------------------------------------- */

/* A refusal is remembered: until early prefetch the host's curve only rises (each pick or
 * move to the host adds to it), so a period refused once is refused to the search's end; most
 * queries that get past the root's test are repeats of a refusal. */
int pt_host_allowed(struct planner *p, const struct tio_pperiod *q) {
    if (!p->use_host) {
        return 0;
    }
    size_t i = (size_t)(q - p->m->periods);
    uint8_t bit = (uint8_t)(1u << (i & 7));
    if (p->no_host && (p->no_host[i >> 3] & bit)) {
        return 0;
    }
    int64_t cap = (int64_t)p->m->host_cap, s = (int64_t)q->bytes;
    if (tio_mtree_top(&p->host) + s <= cap) {
        return 1; /* the root holds the max over every kernel: fits anywhere */
    }
    if (!pt_host_above(p, q->start, pt_host_end(p, q), cap - s)) {
        return 1;
    }
    if (p->no_host) {
        p->no_host[i >> 3] |= bit;
    }
    return 0;
}

/* The windows of one tier: offload completion (forward walk) and latest prefetch start
 * (backward walk). e.viable = the window is non-empty; the benefit is filled separately. */
static struct eval eval_window(struct planner *p, const struct tio_pperiod *q, int tier) {
    struct eval e = { 0 };
    e.tier = tier;
    double s = (double)q->bytes;
    e.clean = pt_has_clean_copy(p, q, tier);
    if (e.clean) {
        e.off = q->start;
    } else {
        uint64_t j = pt_walk_fwd(p, tier, q->start, q->end, s, 0);
        if (j == NONE) {
            return e;
        }
        e.off = j + 1;
    }
    uint64_t i = pt_walk_bwd(p, tier, e.off, q->end, s, 0);
    if (i == NONE || i <= e.off) {
        return e;
    }
    e.pre = i;
    e.viable = 1;
    return e;
}

static void eval_benefit(struct planner *p, const struct tio_pperiod *q, struct eval *e) {
    if (e->viable) {
        e->benefit = pt_ext_benefit(p, e->off, e->pre, (int64_t)q->bytes);
        e->viable = e->benefit > 0;
    }
}

double pt_score_of(const struct planner *p, const struct tio_pperiod *q, double benefit) {
    if (p->variant == TIO_VAR_G10) {
        return benefit; /* G10: reducible area, no cost */
    }
    if (pt_is_paper(p->variant)) {
        return benefit / (double)q->bytes; /* Algorithm 1 line 11: max B / s */
    }
    return benefit / ((double)q->bytes * p->cost_per_byte); /* benefit / cost */
}

/*
 * Evaluate a candidate: the policy's choice (*chosen), its score, and an upper bound (*ub) of
 * every score it can have from now on (the heap key). The host benefit is only computed when
 * it can change the decision: over window W2 it is at most the SSD benefit over W1 plus
 * s x tau(W2 \ W1), since no kernel contributes more than s x tau.
 */
double pt_evaluate(struct planner *p, uint32_t pi, struct eval *chosen, double *ub) {
    const struct tio_pperiod *q = &p->m->periods[pi];
    struct eval es = { 0 }, eh = { 0 };
    double s = (double)q->bytes;
    if (p->use_ssd) {
        es = eval_window(p, q, TIO_TIER_SSD);
        eval_benefit(p, q, &es);
    }
    if (pt_host_allowed(p, q)) {
        eh = eval_window(p, q, TIO_TIER_HOST);
    }
    int paper = pt_is_paper(p->variant) || p->variant == TIO_VAR_G10;
    double bs = es.viable ? es.benefit : 0;
    double bound_h = 0;
    if (eh.viable) {
        if (es.viable) {
            uint64_t lo = TIO_MAX(es.off, eh.off), hi = TIO_MIN(es.pre, eh.pre);
            double inter = hi > lo ? pt_ext_time(p, lo, hi) : 0;
            bound_h = bs + s * (pt_ext_time(p, eh.off, eh.pre) - inter);
        } else {
            bound_h = HUGE_VAL;
        }
    }
    /* SSD first: the paper uses host memory only when the SSD path is not viable; ours also
     * when host memory would save clearly more (SSD bandwidth saturated around this period) */
    int ssd_sure = es.viable && (paper || bs >= SSD_PREFER * bound_h);
    if (!ssd_sure && eh.viable) {
        eval_benefit(p, q, &eh);
        bound_h = eh.viable ? eh.benefit : 0;
    }
    double bh = ssd_sure ? 0 : (eh.viable ? eh.benefit : 0);
    *ub = pt_score_of(p, q, TIO_MAX(bs, isinf(bound_h) ? bh : bound_h));
    if (paper && ssd_sure) {
        /* The paper's rule scores the SSD path while it is viable; the key follows that
         * score (the possible later switch to host is seen when this key comes up again,
         * see docs/planner.md). Keeping the host score as the bound would make every round
         * re-examine nearly every period. */
        *ub = pt_score_of(p, q, bs);
    }
    if (ssd_sure) {
        *chosen = es;
    } else if (paper) {
        *chosen = es.viable ? es : eh;
    } else {
        *chosen = (es.viable && bs >= SSD_PREFER * bh) ? es : eh;
    }
    return chosen->viable ? pt_score_of(p, q, chosen->benefit) : 0;
}

/* ---- heap (max by key, ties: lower tensor, then earlier start) ----------------------------- */

int pt_cand_better(const struct planner *p, double ka, uint32_t a, double kb, uint32_t b) {
    if (ka != kb) {
        return ka > kb;
    }
    return p->rank ? p->rank[a] < p->rank[b] : a < b; /* lower tensor, then earlier start */
}

/* Heap entries: the period's place in the tie order instead of the period. */
static inline int ent_better(const struct cand *a, const struct cand *b) {
    return a->key != b->key ? a->key > b->key : a->period < b->period;
}

static inline struct cand ent_to_cand(const struct planner *p, struct cand e) {
    e.period = p->unrank ? p->unrank[e.period] : e.period;
    return e;
}

/* Push a candidate of `version` (the planner's heap; the overcommit pass keeps its own
 * versions). */
int pt_heap_push_version(struct planner *p, double key, uint32_t period, uint32_t version) {
    if (tio_grow((void **)&p->heap, &p->cap_heap, p->n_heap + 1, sizeof *p->heap) < 0) {
        return TIO_ENOMEM;
    }
    size_t i = p->n_heap++;
    struct cand c = { key, p->rank ? p->rank[period] : period, version };
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!ent_better(&c, &p->heap[up])) {
            break;
        }
        p->heap[i] = p->heap[up];
        i = up;
    }
    p->heap[i] = c;
    return 0;
}

int pt_heap_push(struct planner *p, double key, uint32_t period) {
    return pt_heap_push_version(p, key, period, p->version[period]);
}

struct cand pt_heap_top(const struct planner *p) {
    return ent_to_cand(p, p->heap[0]);
}

/* Floyd's pop: move the hole at the root down to a leaf along the better children (one
 * comparison per level), then sift the last entry up from there: it came from the bottom and
 * rarely climbs, so this costs about half the comparisons of sifting it down from the top. The
 * order of pops is the same either way (the heap order is strict between live entries). */
struct cand pt_heap_pop(struct planner *p) {
    struct cand top = p->heap[0];
    size_t n = --p->n_heap, i = 0;
    if (n == 0) {
        return ent_to_cand(p, top);
    }
    struct cand last = p->heap[n];
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1;
        if (l >= n) {
            break;
        }
        size_t c = r < n && ent_better(&p->heap[r], &p->heap[l]) ? r : l;
        p->heap[i] = p->heap[c];
        i = c;
    }
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!ent_better(&last, &p->heap[up])) {
            break;
        }
        p->heap[i] = p->heap[up];
        i = up;
    }
    p->heap[i] = last;
    return ent_to_cand(p, top);
}
