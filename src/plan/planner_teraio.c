/*
 * The teraio planners (DESIGN.md s.6, PAPER.md s.6 Algorithm 1, docs/planner.md):
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
#include "plan/planner_tree.h"

#define FULL_EPS     1.0  /* a slot with less than 1 byte free counts as full */
#define SSD_PREFER   0.90 /* mixed: SSD unless host saves more than 1/0.9 of SSD's benefit */
#define URGENT_SLACK 1.5  /* prefetch URGENT when its slack is under 1.5x its transfer time */
#define PICK_EPS     0.1  /* ours: a pick may be 2% below the true best score (lazy greedy) */
#define NONE         UINT64_MAX

struct cand {
    double key; /* upper bound of the score */
    uint32_t period;
    uint32_t version;
};

struct eval {
    int viable;
    int tier;     /* TIO_TIER_SSD or TIO_TIER_HOST */
    int clean;    /* the offload can skip the write */
    uint64_t off; /* extended kernel from which the tensor is gone */
    uint64_t pre; /* extended kernel at which the prefetch starts (memory is back) */
    double benefit;
};

struct pick {
    uint32_t period;
    int32_t tier;
    int clean;
    uint8_t stall_off, stall_pre; /* overcommitted: the move has no room in the slots, compute
                                     waits for it (TIO_MOVE_STALL) */
    uint64_t off, pre;
};

struct planner {
    const struct tio_pmodel *m;
    int variant;
    size_t n;
    int64_t cap;
    /* Slot capacity and use per channel. The two SSD channels share one array (the SSD's
     * time, seconds): used[SSD_W] == used[SSD_R]; unit[c] converts bytes to the slot's unit
     * (1 for the PCIe channels, ssd_mix / rate for the SSD ones). */
    double *used[TIO_CH_COUNT];
    double *capk[TIO_CH_COUNT];
    double unit[TIO_CH_COUNT];
    uint32_t *fnext[TIO_CH_COUNT]; /* DSU: next slot >= k with room (forward channels) */
    uint32_t *bprev[TIO_CH_COUNT]; /* DSU on k + 1: previous slot <= k with room (backward) */
    double *tprefix;               /* [n + 1] prefix sums of tau */
    struct tio_stree mem;          /* M'[k] */
    struct tio_stree host;         /* host bytes held per kernel */
    int use_host, use_ssd, clean_copies;
    double cost_per_byte; /* seconds per byte moved out and back on the reference tier */
    double eps;           /* accept a pick within (1 - eps) of the best bound (0: exact) */
    /* heap */
    struct cand *heap;
    size_t n_heap, cap_heap;
    uint32_t *version;
    /* picks */
    struct pick *picks;
    size_t n_picks, cap_picks;
    /* memo: a candidate's last evaluation stays exact until a pick touches its kernels */
    size_t mod_size;
    uint32_t *mod_max, *mod_tag; /* segment tree: latest commit number per kernel range */
    uint32_t n_commits;
    uint32_t *cstamp; /* per period: n_commits at its cached evaluation, UINT32_MAX = none */
    double *csc, *cub;
    struct eval *ce;
    /* clean copies, by write segment: the uses of a tensor from one write up to the next (cyclic
     * for globals). A copy stored after use i is still identical after use j when i and j are
     * in the same segment and i comes first. Indexed by global use index (use_off[t] + u). */
    uint32_t *seg_key;       /* per use: global index of its segment's first use */
    uint32_t *seg_pos;       /* per use: position within its segment */
    uint32_t *seg_len;       /* per segment key: number of uses in it */
    uint32_t *seg_min[2];    /* per segment key and tier (0 ssd, 1 host): lowest picked position */
    uint32_t *period_of_use; /* per use: the period that starts after it, UINT32_MAX if none */
    uint8_t *nowrite;        /* per tensor: global and never written (one cyclic segment) */
};

static int is_paper(int variant) {
    return variant == TIO_VAR_PAPER || variant == TIO_VAR_PAPER_SSD;
}

/* ---- slots --------------------------------------------------------------------------------- */

/* Free capacity of slot k of channel ch, in bytes of that channel's direction. */
static double slot_free(const struct planner *p, int ch, size_t k) {
    return (p->capk[ch][k] - p->used[ch][k]) / p->unit[ch];
}

static int is_ssd_ch(int ch) {
    return ch == TIO_CH_SSD_W || ch == TIO_CH_SSD_R;
}

/* Deposit `bytes` in slot k of channel ch. */
static void slot_take(struct planner *p, int ch, size_t k, double bytes) {
    p->used[ch][k] += bytes * p->unit[ch];
}

/* Root of k in a path-compressed "next non-full slot" forest. fnext links a full slot k to
 * k + 1; bprev is indexed by k + 1 (0 is the sentinel "nothing before") and links to k. */
static uint32_t dsu_find(uint32_t *parent, uint32_t k) {
    uint32_t r = k;
    while (parent[r] != r) {
        r = parent[r];
    }
    while (parent[k] != r) {
        uint32_t nx = parent[k];
        parent[k] = r;
        k = nx;
    }
    return r;
}

static void mark_one(struct planner *p, int ch, size_t k) {
    if (slot_free(p, ch, k) < FULL_EPS) {
        if (p->fnext[ch]) {
            p->fnext[ch][k] = (uint32_t)(k + 1);
        }
        if (p->bprev[ch]) {
            p->bprev[ch][k + 1] = (uint32_t)k;
        }
    }
}

/* Mark slot k full in the "next slot with room" forests of ch (both SSD directions when ch is
 * an SSD channel: they share the slot). */
static void mark_if_full(struct planner *p, int ch, size_t k) {
    if (is_ssd_ch(ch)) {
        mark_one(p, TIO_CH_SSD_W, k);
        mark_one(p, TIO_CH_SSD_R, k);
    } else {
        mark_one(p, ch, k);
    }
}

/* Channels a transfer uses: SSD traffic crosses the GPU's PCIe link too (with or without GDS:
 * GDS removes the host bounce, not the link), host traffic only the link. */
static void tier_channels(int tier, int offload, int *prim, int *sec) {
    if (tier == TIO_TIER_SSD) {
        *prim = offload ? TIO_CH_SSD_W : TIO_CH_SSD_R;
        *sec = offload ? TIO_CH_D2H : TIO_CH_H2D;
    } else {
        *prim = offload ? TIO_CH_D2H : TIO_CH_H2D;
        *sec = -1;
    }
}

/*
 * Forward walk over extended kernels [a, b): spread `bytes` over the free write capacity.
 * Returns the extended kernel during which the last byte moves, or NONE. reserve: commit.
 */
static uint64_t
walk_fwd(struct planner *p, int tier, uint64_t a, uint64_t b, double bytes, int reserve) {
    int prim, sec;
    tier_channels(tier, 1, &prim, &sec);
    size_t n = p->n;
    double rem = bytes;
    uint64_t x = a;
    while (x < b) {
        size_t k = (size_t)(x % n);
        uint32_t j = dsu_find(p->fnext[prim], (uint32_t)k);
        if (j >= n) {
            x += n - k; /* nothing free until the end of the iteration */
            continue;
        }
        x += j - k;
        if (x >= b) {
            break;
        }
        k = j;
        double f = slot_free(p, prim, k);
        if (sec >= 0) {
            f = TIO_MIN(f, slot_free(p, sec, k));
        }
        if (f >= FULL_EPS) {
            double take = TIO_MIN(f, rem);
            if (reserve) {
                slot_take(p, prim, k, take);
                mark_if_full(p, prim, k);
                if (sec >= 0) {
                    slot_take(p, sec, k, take);
                    mark_if_full(p, sec, k);
                }
            }
            rem -= take;
            if (rem < FULL_EPS) {
                return x;
            }
        }
        x++;
    }
    return NONE;
}

/* Backward walk over extended kernels [a, b) from b - 1 down: returns the extended kernel at
 * which the prefetch must start (its first byte moves there), or NONE. */
static uint64_t
walk_bwd(struct planner *p, int tier, uint64_t a, uint64_t b, double bytes, int reserve) {
    int prim, sec;
    tier_channels(tier, 0, &prim, &sec);
    size_t n = p->n;
    double rem = bytes;
    uint64_t x = b; /* exclusive */
    while (x > a) {
        size_t k1 = (size_t)((x - 1) % n) + 1; /* DSU index of kernel x - 1 */
        uint32_t j1 = dsu_find(p->bprev[prim], (uint32_t)k1);
        if (j1 == 0) {
            x -= k1; /* nothing free back to the start of the iteration */
            continue;
        }
        x -= k1 - j1;
        if (x <= a) {
            break;
        }
        size_t k = j1 - 1;
        double f = slot_free(p, prim, k);
        if (sec >= 0) {
            f = TIO_MIN(f, slot_free(p, sec, k));
        }
        if (f >= FULL_EPS) {
            double take = TIO_MIN(f, rem);
            if (reserve) {
                slot_take(p, prim, k, take);
                mark_if_full(p, prim, k);
                if (sec >= 0) {
                    slot_take(p, sec, k, take);
                    mark_if_full(p, sec, k);
                }
            }
            rem -= take;
            if (rem < FULL_EPS) {
                return x - 1;
            }
        }
        x--;
    }
    return NONE;
}

/* ---- extended-axis helpers (a window [a, b) with b - a <= n maps to one or two pieces) ----- */

static void ext_add(struct tio_stree *t, size_t n, uint64_t a, uint64_t b, int64_t d) {
    if (a >= b) {
        return;
    }
    if (a >= n) {
        a -= n;
        b -= n;
    }
    if (b <= n) {
        tio_stree_add(t, (size_t)a, (size_t)b, d);
    } else {
        tio_stree_add(t, (size_t)a, n, d);
        tio_stree_add(t, 0, (size_t)(b - n), d);
    }
}

static int64_t ext_max(struct tio_stree *t, size_t n, uint64_t a, uint64_t b) {
    if (a >= b) {
        return INT64_MIN;
    }
    if (a >= n) {
        a -= n;
        b -= n;
    }
    if (b <= n) {
        return tio_stree_max(t, (size_t)a, (size_t)b);
    }
    int64_t x = tio_stree_max(t, (size_t)a, n), y = tio_stree_max(t, 0, (size_t)(b - n));
    return TIO_MAX(x, y);
}

static double ext_benefit(struct planner *p, uint64_t a, uint64_t b, int64_t s) {
    size_t n = p->n;
    if (a >= b) {
        return 0;
    }
    if (a >= n) {
        a -= n;
        b -= n;
    }
    int paper = is_paper(p->variant) || p->variant == TIO_VAR_G10;
    double r = 0;
    size_t l1 = (size_t)a, r1 = (size_t)TIO_MIN(b, (uint64_t)n);
    r += paper ? (double)s * tio_stree_crit(&p->mem, l1, r1, p->cap)
               : tio_stree_capped(&p->mem, l1, r1, p->cap, s);
    if (b > n) {
        r += paper ? (double)s * tio_stree_crit(&p->mem, 0, (size_t)(b - n), p->cap)
                   : tio_stree_capped(&p->mem, 0, (size_t)(b - n), p->cap, s);
    }
    return r;
}

/* An upper bound of every benefit a period can have: s x (time over capacity in the period).
 * Cheaper than the capped integral (only crossings of the capacity line cost anything). */
static double ext_bound(struct planner *p, uint64_t a, uint64_t b, int64_t s) {
    size_t n = p->n;
    if (a >= b) {
        return 0;
    }
    if (a >= n) {
        a -= n;
        b -= n;
    }
    double r = tio_stree_crit(&p->mem, (size_t)a, (size_t)TIO_MIN(b, (uint64_t)n), p->cap);
    if (b > n) {
        r += tio_stree_crit(&p->mem, 0, (size_t)(b - n), p->cap);
    }
    return (double)s * r;
}

/* Last extended kernel k in [a, b) with M'[k] > thr, or NONE. */
static uint64_t ext_last_above(struct planner *p, uint64_t a, uint64_t b, int64_t thr) {
    size_t n = p->n;
    if (a >= b) {
        return NONE;
    }
    uint64_t shift = 0;
    if (a >= n) {
        a -= n;
        b -= n;
        shift = n;
    }
    if (b > n) {
        size_t k = tio_stree_last_above(&p->mem, 0, (size_t)(b - n), thr);
        if (k != SIZE_MAX) {
            return k + n + shift;
        }
        b = n;
    }
    size_t k = tio_stree_last_above(&p->mem, (size_t)a, (size_t)b, thr);
    return k != SIZE_MAX ? k + shift : NONE;
}

static double ext_time(const struct planner *p, uint64_t a, uint64_t b) {
    size_t n = p->n;
    double it = p->tprefix[n];
    uint64_t ia = a / n, ib = b / n; /* whole iterations */
    double ta = (double)ia * it + p->tprefix[a % n];
    double tb = (double)ib * it + p->tprefix[b % n];
    return tb - ta;
}

/* ---- clean copies -------------------------------------------------------------------------- */

static int tier_slot(int tier) {
    return tier == TIO_TIER_SSD ? 0 : 1;
}

/* Is there a stored copy of period q's tensor on `tier`, still identical at q's offload? */
static int has_clean_copy(const struct planner *p, const struct tio_pperiod *q, int tier) {
    if (!p->clean_copies || (q->flags & TIO_PPERIOD_UNUSED)) {
        return 0;
    }
    size_t gu = p->m->use_off[q->tensor] + q->use_index;
    uint32_t best = p->seg_min[tier_slot(tier)][p->seg_key[gu]];
    if (p->nowrite[q->tensor]) {
        return best != UINT32_MAX; /* never written: any copy is current */
    }
    return best < p->seg_pos[gu];
}

/* ---- evaluation ---------------------------------------------------------------------------- */

static int host_allowed(struct planner *p, const struct tio_pperiod *q) {
    if (!p->use_host) {
        return 0;
    }
    int64_t cap = (int64_t)p->m->host_cap, s = (int64_t)q->bytes;
    if (p->host.mx[1] + s <= cap) {
        return 1; /* the root holds the max over every kernel: fits anywhere */
    }
    return ext_max(&p->host, p->n, q->start, q->end) + s <= cap;
}

/* The windows of one tier: offload completion (forward walk) and latest prefetch start
 * (backward walk). e.viable = the window is non-empty; the benefit is filled separately. */
static struct eval eval_window(struct planner *p, const struct tio_pperiod *q, int tier) {
    struct eval e = { 0 };
    e.tier = tier;
    double s = (double)q->bytes;
    e.clean = has_clean_copy(p, q, tier);
    if (e.clean) {
        e.off = q->start;
    } else {
        uint64_t j = walk_fwd(p, tier, q->start, q->end, s, 0);
        if (j == NONE) {
            return e;
        }
        e.off = j + 1;
    }
    uint64_t i = walk_bwd(p, tier, e.off, q->end, s, 0);
    if (i == NONE || i <= e.off) {
        return e;
    }
    e.pre = i;
    e.viable = 1;
    return e;
}

static void eval_benefit(struct planner *p, const struct tio_pperiod *q, struct eval *e) {
    if (e->viable) {
        e->benefit = ext_benefit(p, e->off, e->pre, (int64_t)q->bytes);
        e->viable = e->benefit > 0;
    }
}

static double score_of(const struct planner *p, const struct tio_pperiod *q, double benefit) {
    if (p->variant == TIO_VAR_G10) {
        return benefit; /* G10: reducible area, no cost */
    }
    if (is_paper(p->variant)) {
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
static double evaluate(struct planner *p, uint32_t pi, struct eval *chosen, double *ub) {
    const struct tio_pperiod *q = &p->m->periods[pi];
    struct eval es = { 0 }, eh = { 0 };
    double s = (double)q->bytes;
    if (p->use_ssd) {
        es = eval_window(p, q, TIO_TIER_SSD);
        eval_benefit(p, q, &es);
    }
    if (host_allowed(p, q)) {
        eh = eval_window(p, q, TIO_TIER_HOST);
    }
    int paper = is_paper(p->variant) || p->variant == TIO_VAR_G10;
    double bs = es.viable ? es.benefit : 0;
    double bound_h = 0;
    if (eh.viable) {
        if (es.viable) {
            uint64_t lo = TIO_MAX(es.off, eh.off), hi = TIO_MIN(es.pre, eh.pre);
            double inter = hi > lo ? ext_time(p, lo, hi) : 0;
            bound_h = bs + s * (ext_time(p, eh.off, eh.pre) - inter);
        } else {
            bound_h = INFINITY;
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
    *ub = score_of(p, q, TIO_MAX(bs, isinf(bound_h) ? bh : bound_h));
    if (paper && ssd_sure) {
        /* The paper's rule scores the SSD path while it is viable; the key follows that
         * score (the possible later switch to host is seen when this key comes up again,
         * see docs/planner.md). Keeping the host score as the bound would make every round
         * re-examine nearly every period. */
        *ub = score_of(p, q, bs);
    }
    if (ssd_sure) {
        *chosen = es;
    } else if (paper) {
        *chosen = es.viable ? es : eh;
    } else {
        *chosen = (es.viable && bs >= SSD_PREFER * bh) ? es : eh;
    }
    return chosen->viable ? score_of(p, q, chosen->benefit) : 0;
}

/* ---- heap (max by key, ties: lower tensor, then earlier start) ----------------------------- */

static int cand_better(const struct planner *p, double ka, uint32_t a, double kb, uint32_t b) {
    if (ka != kb) {
        return ka > kb;
    }
    const struct tio_pperiod *x = &p->m->periods[a], *y = &p->m->periods[b];
    if (x->tensor != y->tensor) {
        return x->tensor < y->tensor;
    }
    return x->start < y->start;
}

/* Push a candidate of `version` (the planner's heap; the overcommit pass keeps its own
 * versions). */
static int heap_push_version(struct planner *p, double key, uint32_t period, uint32_t version) {
    if (tio_grow((void **)&p->heap, &p->cap_heap, p->n_heap + 1, sizeof *p->heap) < 0) {
        return TIO_ENOMEM;
    }
    size_t i = p->n_heap++;
    struct cand c = { key, period, version };
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!cand_better(p, c.key, c.period, p->heap[up].key, p->heap[up].period)) {
            break;
        }
        p->heap[i] = p->heap[up];
        i = up;
    }
    p->heap[i] = c;
    return 0;
}

static int heap_push(struct planner *p, double key, uint32_t period) {
    return heap_push_version(p, key, period, p->version[period]);
}

static struct cand heap_pop(struct planner *p) {
    struct cand top = p->heap[0];
    struct cand last = p->heap[--p->n_heap];
    size_t i = 0, n = p->n_heap;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, best = i;
        const struct cand *bc = &last;
        if (l < n && cand_better(p, p->heap[l].key, p->heap[l].period, bc->key, bc->period)) {
            best = l;
            bc = &p->heap[l];
        }
        if (r < n && cand_better(p, p->heap[r].key, p->heap[r].period, bc->key, bc->period)) {
            best = r;
        }
        if (best == i) {
            break;
        }
        p->heap[i] = p->heap[best];
        i = best;
    }
    if (n > 0) {
        p->heap[i] = last;
    }
    return top;
}

/* ---- the memo's modification tree ----------------------------------------------------------
 * Commit numbers only grow, so "assign T to a range" is "raise to T" and a node's max is the
 * max of its own tag and its children: no push-down needed. */

static void
mod_mark_rec(struct planner *p, size_t x, size_t lo, size_t hi, size_t l, size_t r, uint32_t t) {
    if (r <= lo || hi <= l) {
        return;
    }
    p->mod_max[x] = TIO_MAX(p->mod_max[x], t);
    if (l <= lo && hi <= r) {
        p->mod_tag[x] = t;
        return;
    }
    size_t mid = (lo + hi) / 2;
    mod_mark_rec(p, 2 * x, lo, mid, l, r, t);
    mod_mark_rec(p, 2 * x + 1, mid, hi, l, r, t);
}

static uint32_t
mod_max_rec(const struct planner *p, size_t x, size_t lo, size_t hi, size_t l, size_t r) {
    if (r <= lo || hi <= l) {
        return 0;
    }
    if (l <= lo && hi <= r) {
        return p->mod_max[x];
    }
    size_t mid = (lo + hi) / 2;
    uint32_t a = mod_max_rec(p, 2 * x, lo, mid, l, r), b = mod_max_rec(p, 2 * x + 1, mid, hi, l, r);
    return TIO_MAX(p->mod_tag[x], TIO_MAX(a, b));
}

/* Extended range [a, b) (length <= n) as one or two pieces. */
static void mod_mark(struct planner *p, uint64_t a, uint64_t b, uint32_t t) {
    size_t n = p->n;
    if (a >= n) {
        a -= n;
        b -= n;
    }
    mod_mark_rec(p, 1, 0, p->mod_size, (size_t)a, (size_t)TIO_MIN(b, (uint64_t)n), t);
    if (b > n) {
        mod_mark_rec(p, 1, 0, p->mod_size, 0, (size_t)(b - n), t);
    }
}

static uint32_t mod_max(const struct planner *p, uint64_t a, uint64_t b) {
    size_t n = p->n;
    if (a >= n) {
        a -= n;
        b -= n;
    }
    uint32_t r = mod_max_rec(p, 1, 0, p->mod_size, (size_t)a, (size_t)TIO_MIN(b, (uint64_t)n));
    if (b > n) {
        r = TIO_MAX(r, mod_max_rec(p, 1, 0, p->mod_size, 0, (size_t)(b - n)));
    }
    return r;
}

/* ---- picks --------------------------------------------------------------------------------- */

static int commit(struct planner *p, uint32_t pi, const struct eval *e) {
    const struct tio_pperiod *q = &p->m->periods[pi];
    double s = (double)q->bytes;
    if (!e->clean) {
        uint64_t j = walk_fwd(p, e->tier, q->start, q->end, s, 1);
        TIO_ASSERT(j != NONE && j + 1 == e->off);
    }
    uint64_t i = walk_bwd(p, e->tier, e->off, q->end, s, 1);
    TIO_ASSERT(i == e->pre);
    ext_add(&p->mem, p->n, e->off, e->pre, -(int64_t)q->bytes);
    mod_mark(p, q->start, q->end, ++p->n_commits); /* slots, memory and host all lie in here */
    if (e->tier == TIO_TIER_HOST) {
        ext_add(&p->host, p->n, q->start, q->end, (int64_t)q->bytes);
    }
    if (tio_grow((void **)&p->picks, &p->cap_picks, p->n_picks + 1, sizeof *p->picks) < 0) {
        return TIO_ENOMEM;
    }
    struct pick *pk = &p->picks[p->n_picks];
    pk->period = pi;
    pk->tier = e->tier;
    pk->clean = e->clean;
    pk->stall_off = pk->stall_pre = 0;
    pk->off = e->off;
    pk->pre = e->pre;
    p->n_picks++;
    return 0;
}

static int rekey(struct planner *p, uint32_t pi, const uint8_t *alive) {
    if (pi == UINT32_MAX || !alive[pi]) {
        return 0;
    }
    const struct tio_pperiod *q = &p->m->periods[pi];
    double ub = score_of(p, q, ext_bound(p, q->start, q->end, (int64_t)q->bytes));
    if (ub <= 0) {
        return 0;
    }
    p->version[pi]++;
    p->cstamp[pi] = UINT32_MAX; /* its clean status changed: re-evaluate */
    return heap_push(p, ub, pi);
}

/* After a pick, later periods in the same write segment have a clean copy on that tier:
 * their windows may grow, so re-key them with their full-window bound (each period at most
 * once per tier over the whole run: the segment minimum only falls). */
static int update_clean(struct planner *p, uint32_t picked, int tier, const uint8_t *alive) {
    if (!p->clean_copies) {
        return 0;
    }
    const struct tio_pmodel *m = p->m;
    const struct tio_pperiod *q = &m->periods[picked];
    if (q->flags & TIO_PPERIOD_UNUSED) {
        return 0;
    }
    size_t base = m->use_off[q->tensor];
    size_t cnt = m->use_off[q->tensor + 1] - base;
    size_t gu = base + q->use_index;
    uint32_t key = p->seg_key[gu], pos = p->seg_pos[gu];
    uint32_t *mn = &p->seg_min[tier_slot(tier)][key];
    uint32_t old = *mn;
    int rc = 0;
    if (p->nowrite[q->tensor]) {
        *mn = TIO_MIN(old, pos);
        for (size_t u = 0; old == UINT32_MAX && u < cnt && rc == 0; u++) {
            rc = rekey(p, p->period_of_use[base + u], alive);
        }
        return rc;
    }
    if (pos >= old) {
        return 0;
    }
    *mn = pos;
    uint32_t hi = TIO_MIN(old, p->seg_len[key]);
    size_t first = key - base; /* local index of the segment's first use */
    for (uint32_t k = pos + 1; k < hi && rc == 0; k++) {
        rc = rekey(p, p->period_of_use[base + (first + k) % cnt], alive);
    }
    return rc;
}

/*
 * Overcommit (ours): when no move fits the bandwidth any more and memory is still over the
 * capacity, keep memory under it with moves the kernels' time has no room for. A tensor can
 * be away over at most [start + 1, end - 1) of its idle period ([start, end - 1) with a clean
 * copy): offload issued right after its last use, prefetch just before its next. Candidates:
 * every period not yet picked, with that whole window, and every pick of the main loop, whose
 * bandwidth-limited window [off, pre) widens to it (the side that widens becomes a stall move).
 * The compute stream then waits for memory and data where the bandwidth falls short (a stall
 * the plan states, TIO_MOVE_STALL) instead of running out of memory or leaving the runtime to
 * evict on demand. Ranked by the capped benefit of the memory they free per byte moved (the
 * main loop's measure, over fixed windows), by lazy greedy with the main loop's eps: benefits
 * only fall as memory falls, so stale keys are upper bounds. Host memory (within the cap over
 * the whole period; faster than the SSDs) is used for new periods when the policy allows it.
 */
#define OC_PICK 0x80000000u /* cand.version: the candidate widens pick (version & ~OC_PICK) */

/* The widest window of period q on a tier chosen for it: [*a, end - 1). 0 if empty. */
static int overcommit_window(
    struct planner *p, const struct tio_pperiod *q, int *tier, int *clean, uint64_t *a) {
    if (p->use_host && host_allowed(p, q)) {
        *tier = TIO_TIER_HOST;
    } else if (p->use_ssd) {
        *tier = TIO_TIER_SSD;
    } else {
        return 0;
    }
    *clean = has_clean_copy(p, q, *tier);
    *a = *clean ? q->start : q->start + 1;
    return q->end >= 1 && q->end - 1 > *a;
}

/* Memory a widened pick frees beyond its window, per byte. */
static double widen_score(struct planner *p, const struct pick *pk) {
    const struct tio_pperiod *q = &p->m->periods[pk->period];
    int64_t s = (int64_t)q->bytes;
    uint64_t a = pk->clean ? q->start : q->start + 1;
    double b = 0;
    if (a < pk->off) {
        b += ext_benefit(p, a, pk->off, s);
    }
    if (q->end >= 1 && pk->pre < q->end - 1) {
        b += ext_benefit(p, pk->pre, q->end - 1, s);
    }
    return b / (double)s;
}

static double oc_score(struct planner *p, const struct cand *c) {
    if (c->version & OC_PICK) {
        return widen_score(p, &p->picks[c->version & ~OC_PICK]);
    }
    const struct tio_pperiod *q = &p->m->periods[c->period];
    int tier, clean;
    uint64_t a;
    if (!overcommit_window(p, q, &tier, &clean, &a)) {
        return 0;
    }
    return ext_benefit(p, a, q->end - 1, (int64_t)q->bytes) / (double)q->bytes;
}

static int oc_apply(struct planner *p, const struct cand *c, uint8_t *alive) {
    const struct tio_pmodel *m = p->m;
    const struct tio_pperiod *q = &m->periods[c->period];
    int64_t s = (int64_t)q->bytes;
    if (c->version & OC_PICK) {
        struct pick *pk = &p->picks[c->version & ~OC_PICK];
        uint64_t a = pk->clean ? q->start : q->start + 1;
        if (a < pk->off) {
            ext_add(&p->mem, p->n, a, pk->off, -s);
            pk->off = a;
            pk->stall_off = 1;
        }
        if (pk->pre < q->end - 1) {
            ext_add(&p->mem, p->n, pk->pre, q->end - 1, -s);
            pk->pre = q->end - 1;
            pk->stall_pre = 1;
        }
        mod_mark(p, q->start, q->end, ++p->n_commits);
        return 0;
    }
    int tier = TIO_TIER_SSD, clean = 0;
    uint64_t a = 0;
    if (!overcommit_window(p, q, &tier, &clean, &a)) {
        return 0; /* scored > 0 just before, so not reached; kept for the analyzer */
    }
    ext_add(&p->mem, p->n, a, q->end - 1, -s);
    mod_mark(p, q->start, q->end, ++p->n_commits);
    if (tier == TIO_TIER_HOST) {
        ext_add(&p->host, p->n, q->start, q->end, s);
    }
    if (tio_grow((void **)&p->picks, &p->cap_picks, p->n_picks + 1, sizeof *p->picks) < 0) {
        return TIO_ENOMEM;
    }
    struct pick *pk = &p->picks[p->n_picks++];
    pk->period = c->period;
    pk->tier = tier;
    pk->clean = clean;
    pk->stall_off = pk->stall_pre = 1;
    pk->off = a;
    pk->pre = q->end - 1;
    alive[c->period] = 0;
    return update_clean(p, c->period, tier, alive);
}

static int overcommit(struct planner *p, const uint8_t *taken, uint8_t *alive) {
    const struct tio_pmodel *m = p->m;
    p->n_heap = 0;
    int rc = 0;
    for (size_t i = 0; i < m->n_periods && rc == 0; i++) {
        if (!taken[i]) {
            struct cand c = { 0, (uint32_t)i, 0 };
            double sc = oc_score(p, &c);
            rc = sc > 0 ? heap_push_version(p, sc, (uint32_t)i, 0) : 0;
        }
    }
    for (size_t i = 0; i < p->n_picks && rc == 0; i++) {
        struct cand c = { 0, p->picks[i].period, OC_PICK | (uint32_t)i };
        double sc = oc_score(p, &c);
        rc = sc > 0 ? heap_push_version(p, sc, c.period, c.version) : 0;
    }
    while (rc == 0 && p->n_heap > 0 && tio_stree_max(&p->mem, 0, p->n) > p->cap) {
        struct cand c = heap_pop(p);
        double sc = oc_score(p, &c);
        if (!(sc > 0)) {
            continue; /* frees nothing over the line any more (and never will again) */
        }
        if (p->n_heap > 0 && sc < (1.0 - p->eps) * p->heap[0].key) {
            rc = heap_push_version(p, sc, c.period,
                                   c.version); /* fell behind: re-queue, fresh score */
            continue;
        }
        rc = oc_apply(p, &c, alive);
    }
    return rc;
}

/* G10's relaxation: move each prefetch earlier while the curve stays under the line with the
 * tensor back; drop pairs that would then never leave (they no longer save anything). */
static void relax_prefetches(struct planner *p, uint8_t *dropped) {
    size_t np = p->n_picks;
    uint32_t *order = tio_malloc((np ? np : 1) * sizeof *order);
    if (!order) {
        return; /* relaxation is optional: keep the latest-start plan */
    }
    for (size_t i = 0; i < np; i++) {
        order[i] = (uint32_t)i;
    }
    /* insertion-free: sort by (pre, period) with qsort through a static-free comparator */
    struct key {
        uint64_t pre;
        uint32_t idx;
    };
    struct key *keys = tio_malloc((np ? np : 1) * sizeof *keys);
    if (!keys) {
        tio_free(order);
        return;
    }
    for (size_t i = 0; i < np; i++) {
        keys[i].pre = p->picks[i].pre;
        keys[i].idx = (uint32_t)i;
    }
    /* simple bottom-up merge sort (stable, deterministic) */
    struct key *tmp = tio_malloc((np ? np : 1) * sizeof *tmp);
    if (!tmp) {
        tio_free(order);
        tio_free(keys);
        return;
    }
    for (size_t w = 1; w < np; w *= 2) {
        for (size_t lo = 0; lo < np; lo += 2 * w) {
            size_t mid = TIO_MIN(lo + w, np), hi = TIO_MIN(lo + 2 * w, np);
            size_t a = lo, b = mid, o = lo;
            while (a < mid || b < hi) {
                if (b >= hi || (a < mid && keys[a].pre <= keys[b].pre)) {
                    tmp[o++] = keys[a++];
                } else {
                    tmp[o++] = keys[b++];
                }
            }
        }
        memcpy(keys, tmp, np * sizeof *keys);
    }
    for (size_t r = 0; r < np; r++) {
        struct pick *pk = &p->picks[keys[r].idx];
        const struct tio_pperiod *q = &p->m->periods[pk->period];
        int64_t s = (int64_t)q->bytes;
        uint64_t k = ext_last_above(p, pk->off, pk->pre, p->cap - s);
        uint64_t x = k == NONE ? pk->off : k + 1;
        if (x < pk->pre) {
            ext_add(&p->mem, p->n, x, pk->pre, s);
            pk->pre = x;
        }
        if (pk->pre <= pk->off) {
            dropped[keys[r].idx] = 1; /* stays resident the whole time: no traffic at all */
        }
    }
    tio_free(tmp);
    tio_free(keys);
    tio_free(order);
}

/* ---- setup and main loop ------------------------------------------------------------------- */

static void planner_free(struct planner *p) {
    if (p->used[TIO_CH_SSD_R] == p->used[TIO_CH_SSD_W]) {
        p->used[TIO_CH_SSD_R] = NULL; /* shared with SSD_W */
        p->capk[TIO_CH_SSD_R] = NULL;
    }
    for (int c = 0; c < TIO_CH_COUNT; c++) {
        tio_free(p->used[c]);
        tio_free(p->capk[c]);
        tio_free(p->fnext[c]);
        tio_free(p->bprev[c]);
    }
    tio_free(p->tprefix);
    tio_stree_fini(&p->mem);
    tio_stree_fini(&p->host);
    tio_free(p->heap);
    tio_free(p->version);
    tio_free(p->picks);
    tio_free(p->seg_key);
    tio_free(p->seg_pos);
    tio_free(p->seg_len);
    tio_free(p->seg_min[0]);
    tio_free(p->seg_min[1]);
    tio_free(p->period_of_use);
    tio_free(p->nowrite);
    tio_free(p->mod_max);
    tio_free(p->mod_tag);
    tio_free(p->cstamp);
    tio_free(p->csc);
    tio_free(p->cub);
    tio_free(p->ce);
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
    p->cap = (int64_t)m->capacity;
    p->use_ssd = m->bw[TIO_CH_SSD_W] > 0 && m->bw[TIO_CH_SSD_R] > 0;
    p->use_host = variant != TIO_VAR_SSD && variant != TIO_VAR_PAPER_SSD && m->host_cap > 0;
    p->clean_copies =
        (variant == TIO_VAR_MIXED || variant == TIO_VAR_SSD) && (!params || params->clean_copies);
    double bw_w = p->use_ssd ? m->bw[TIO_CH_SSD_W] : m->bw[TIO_CH_D2H];
    double bw_r = p->use_ssd ? m->bw[TIO_CH_SSD_R] : m->bw[TIO_CH_H2D];
    p->cost_per_byte = (1.0 / bw_w + 1.0 / bw_r) * (p->use_ssd ? m->ssd_mix : 1.0);
    p->eps = (variant == TIO_VAR_MIXED || variant == TIO_VAR_SSD) ? PICK_EPS : 0;
    for (int c = 0; c < TIO_CH_COUNT; c++) {
        int shared = is_ssd_ch(c) && p->use_ssd;
        p->unit[c] = shared ? m->ssd_mix / m->bw[c] : 1.0;
        if (c == TIO_CH_SSD_R && shared) {
            p->used[c] = p->used[TIO_CH_SSD_W]; /* one budget for reads and writes */
            p->capk[c] = p->capk[TIO_CH_SSD_W];
        } else {
            p->used[c] = tio_calloc(n, sizeof(double));
            p->capk[c] = tio_malloc(n * sizeof(double));
            if (!p->used[c] || !p->capk[c]) {
                return TIO_ENOMEM;
            }
            for (size_t k = 0; k < n; k++) {
                /* bytes for PCIe, seconds of the array's time for the shared SSD slot */
                p->capk[c][k] = shared ? m->tau[k] : m->bw[c] * m->tau[k];
            }
        }
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
            mark_one(p, c, k); /* zero-length kernels have no room at all */
        }
    }
    p->mod_size = 1;
    while (p->mod_size < n) {
        p->mod_size *= 2;
    }
    size_t np = m->n_periods ? m->n_periods : 1;
    p->mod_max = tio_calloc(2 * p->mod_size, sizeof *p->mod_max);
    p->mod_tag = tio_calloc(2 * p->mod_size, sizeof *p->mod_tag);
    p->cstamp = tio_malloc(np * sizeof *p->cstamp);
    p->csc = tio_malloc(np * sizeof *p->csc);
    p->cub = tio_malloc(np * sizeof *p->cub);
    p->ce = tio_malloc(np * sizeof *p->ce);
    if (!p->mod_max || !p->mod_tag || !p->cstamp || !p->csc || !p->cub || !p->ce) {
        return TIO_ENOMEM;
    }
    for (size_t i = 0; i < np; i++) {
        p->cstamp[i] = UINT32_MAX;
    }
    p->tprefix = tio_malloc((n + 1) * sizeof(double));
    int64_t *vals = tio_malloc(n * sizeof *vals);
    p->version = tio_calloc(m->n_periods ? m->n_periods : 1, sizeof *p->version);
    size_t nu = m->use_off[m->n_tensors];
    size_t nu1 = nu ? nu : 1;
    p->seg_key = tio_malloc(nu1 * sizeof *p->seg_key);
    p->seg_pos = tio_malloc(nu1 * sizeof *p->seg_pos);
    p->seg_len = tio_calloc(nu1, sizeof *p->seg_len);
    p->seg_min[0] = tio_malloc(nu1 * sizeof(uint32_t));
    p->seg_min[1] = tio_malloc(nu1 * sizeof(uint32_t));
    p->period_of_use = tio_malloc(nu1 * sizeof *p->period_of_use);
    p->nowrite = tio_calloc(m->n_tensors ? m->n_tensors : 1, 1);
    if (!p->tprefix || !vals || !p->version || !p->seg_key || !p->seg_pos || !p->seg_len ||
        !p->seg_min[0] || !p->seg_min[1] || !p->period_of_use || !p->nowrite) {
        tio_free(vals);
        return TIO_ENOMEM;
    }
    p->tprefix[0] = 0;
    for (size_t k = 0; k < n; k++) {
        p->tprefix[k + 1] = p->tprefix[k] + m->tau[k];
        vals[k] = (int64_t)m->resident[k];
    }
    int rc = tio_stree_init(&p->mem, n, vals, m->tau);
    for (size_t k = 0; k < n; k++) {
        vals[k] = 0;
    }
    if (rc == 0) {
        rc = tio_stree_init(&p->host, n, vals, m->tau);
    }
    tio_free(vals);
    if (rc < 0) {
        return rc;
    }
    struct tio_trace_view v;
    tio_trace_get_view(m->trace, &v);
    for (size_t u = 0; u < nu; u++) {
        p->seg_min[0][u] = p->seg_min[1][u] = UINT32_MAX;
        p->period_of_use[u] = UINT32_MAX;
    }
    for (size_t i = 0; i < m->n_periods; i++) {
        const struct tio_pperiod *q = &m->periods[i];
        if (!(q->flags & TIO_PPERIOD_UNUSED)) {
            p->period_of_use[m->use_off[q->tensor] + q->use_index] = (uint32_t)i;
        }
    }
    for (size_t t = 0; t < m->n_tensors; t++) {
        size_t base = m->use_off[t], cnt = m->use_off[t + 1] - base;
        int global = (v.tensor_flags[t] & TIO_TENSOR_GLOBAL) != 0;
        size_t last_w = SIZE_MAX;
        for (size_t u = 0; u < cnt; u++) {
            if (m->use_mode[base + u] & TIO_USE_WRITE) {
                last_w = u;
            }
        }
        p->nowrite[t] = global && last_w == SIZE_MAX && cnt > 0;
        /* uses before the first write: a global continues the last write's segment (cyclic),
         * an intermediate starts a segment of its own at use 0 */
        size_t start = global && last_w != SIZE_MAX ? last_w : 0;
        for (size_t u = 0; u < cnt; u++) {
            if (m->use_mode[base + u] & TIO_USE_WRITE) {
                start = u;
            }
            size_t pos = u >= start ? u - start : u + cnt - start;
            p->seg_key[base + u] = (uint32_t)(base + start);
            p->seg_pos[base + u] = (uint32_t)pos;
            p->seg_len[base + start] = TIO_MAX(p->seg_len[base + start], (uint32_t)(pos + 1));
        }
    }
    return 0;
}

static int emit(struct planner *p, const uint8_t *dropped, struct tio_plan *plan) {
    const struct tio_pmodel *m = p->m;
    size_t n = p->n;
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
            ext_max(&p->mem, n, pk->off, pk->off + 1) + s > p->cap) {
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
        if (ext_time(p, pk->pre, q->end) < URGENT_SLACK * (double)q->bytes / bw) {
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
        if (v > s.planned_peak_bytes) {
            s.planned_peak_bytes = v;
        }
        if (v > m->capacity && v - m->capacity > s.shortfall_bytes) {
            s.shortfall_bytes = v - m->capacity;
            s.shortfall_kernel = k;
        }
    }
    s.feasible = s.shortfall_bytes == 0;
    int64_t hp = tio_stree_max(&p->host, 0, n);
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
    /* Candidates: periods long enough for a round trip on the fastest allowed path, with some
     * critical pressure in them. Periods are grouped by tensor (planner_model.c order). */
    double fast_w =
        TIO_MAX(p.use_ssd ? m->bw[TIO_CH_SSD_W] : 0, p.use_host ? m->bw[TIO_CH_D2H] : 0);
    double fast_r =
        TIO_MAX(p.use_ssd ? m->bw[TIO_CH_SSD_R] : 0, p.use_host ? m->bw[TIO_CH_H2D] : 0);
    for (size_t i = 0; i < m->n_periods; i++) {
        const struct tio_pperiod *q = &m->periods[i];
        if (fast_w <= 0 || fast_r <= 0) {
            continue;
        }
        /* (a clean offload needs no write, so then only the read must fit) */
        double need = (p.clean_copies ? 0 : (double)q->bytes / fast_w) + (double)q->bytes / fast_r;
        if (ext_time(&p, q->start, q->end) < need) {
            continue; /* too short for a round trip: can never be viable */
        }
        double ub = score_of(&p, q, ext_bound(&p, q->start, q->end, (int64_t)q->bytes));
        if (ub > 0) {
            alive[i] = 1;
            if ((rc = heap_push(&p, ub, (uint32_t)i)) < 0) {
                goto out;
            }
        }
    }
    /* Algorithm 1's while loop: one pick per round, each pick consumes a period. */
    while (p.n_heap > 0 && tio_stree_max(&p.mem, 0, p.n) > p.cap) {
        int have = 0;
        double best = 0;
        uint32_t best_pi = 0;
        struct eval best_e = { 0 };
        n_stash = 0;
        while (p.n_heap > 0) {
            const struct cand *top = &p.heap[0];
            if (have && !cand_better(&p, top->key, top->period, best, best_pi)) {
                break; /* no bound left above the best score found: it is the maximum */
            }
            if (have && p.eps > 0 && best >= (1.0 - p.eps) * top->key) {
                break; /* within eps of every remaining bound: good enough (docs/planner.md) */
            }
            struct cand c = heap_pop(&p);
            if (!alive[c.period] || c.version != p.version[c.period]) {
                continue; /* consumed, or superseded by a re-keyed copy */
            }
            struct eval e;
            double ub, sc;
            const struct tio_pperiod *cq = &m->periods[c.period];
            if (p.cstamp[c.period] != UINT32_MAX &&
                mod_max(&p, cq->start, cq->end) <= p.cstamp[c.period]) {
                e = p.ce[c.period]; /* nothing it depends on changed since */
                sc = p.csc[c.period];
                ub = p.cub[c.period];
            } else {
                sc = evaluate(&p, c.period, &e, &ub);
                p.cstamp[c.period] = p.n_commits;
                p.ce[c.period] = e;
                p.csc[c.period] = sc;
                p.cub[c.period] = ub;
            }
            if (ub <= 0) {
                alive[c.period] = 0; /* bounds only fall: never viable again */
                continue;
            }
            c.key = ub;
            if ((rc = tio_grow((void **)&stash, &cap_stash, n_stash + 1, sizeof *stash)) < 0) {
                goto out;
            }
            stash[n_stash++] = c;
            if (e.viable && sc > 0 && (!have || cand_better(&p, sc, c.period, best, best_pi))) {
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
            if ((rc = heap_push(&p, stash[i].key, stash[i].period)) < 0) {
                goto out;
            }
        }
        if (!have) {
            break; /* Algorithm 1 line 12: no viable candidate */
        }
        if ((rc = commit(&p, best_pi, &best_e)) < 0) {
            goto out;
        }
        alive[best_pi] = 0;
        taken[best_pi] = 1;
        if ((rc = update_clean(&p, best_pi, best_e.tier, alive)) < 0) {
            goto out;
        }
    }
    if ((variant == TIO_VAR_MIXED || variant == TIO_VAR_SSD) && params->overcommit &&
        tio_stree_max(&p.mem, 0, p.n) > p.cap && (rc = overcommit(&p, taken, alive)) < 0) {
        goto out;
    }
    dropped = tio_calloc(p.n_picks ? p.n_picks : 1, 1);
    if (!dropped) {
        rc = TIO_ENOMEM;
        goto out;
    }
    if (params->early_prefetch && !is_paper(variant)) {
        relax_prefetches(&p, dropped);
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
