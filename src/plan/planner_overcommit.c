/* The teraio planner: committing a pick (the curve lowered, slots reserved, clean copies
 * updated), overcommit with stall moves, and early prefetch. See planner_teraio_impl.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "common/radix_sort.h"
#include "plan/planner_impl.h"
#include "plan/planner_teraio_impl.h"
#include "plan/planner_tree.h"

/* ---- picks --------------------------------------------------------------------------------- */

int pt_commit(struct planner *p, uint32_t pi, const struct eval *e) {
    const struct tio_pperiod *q = &p->m->periods[pi];
    double s = (double)q->bytes;
    if (!e->clean) {
        uint64_t j = pt_walk_fwd(p, e->tier, q->start, q->end, s, 1);
        TIO_ASSERT(j != NONE && j + 1 == e->off);
    }
    uint64_t i = pt_walk_bwd(p, e->tier, e->off, q->end, s, 1);
    TIO_ASSERT(i == e->pre);
    pt_ext_add(&p->mem, p->n, e->off, e->pre, -(int64_t)q->bytes);
    if (e->tier == TIO_TIER_HOST) {
        pt_host_add(p, q->start, pt_host_end(p, q), (int64_t)q->bytes);
    }
    if (tio_grow((void **)&p->picks, &p->cap_picks, p->n_picks + 1, sizeof *p->picks) < 0) {
        return TIO_ENOMEM;
    }
    struct pick *pk = &p->picks[p->n_picks];
    pk->period = pi;
    pk->tier = (uint8_t)e->tier;
    pk->clean = (uint8_t)e->clean;
    pk->stall_off = pk->stall_pre = 0;
    pk->off = (uint32_t)e->off;
    pk->pre = (uint32_t)e->pre;
    p->n_picks++;
    return 0;
}

static int rekey(struct planner *p, uint32_t pi, const uint8_t *alive) {
    if (pi == UINT32_MAX || !alive[pi]) {
        return 0;
    }
    const struct tio_pperiod *q = &p->m->periods[pi];
    double ub = pt_score_of(p, q, pt_ext_bound(p, q->start, q->end, (int64_t)q->bytes));
    if (ub <= 0) {
        return 0;
    }
    p->version[pi]++;
    return pt_heap_push(p, ub, pi);
}

/* After a pick, later periods in the same write segment have a clean copy on that tier:
 * their windows may grow, so re-key them with their full-window bound (each period at most
 * once per tier over the whole run: the segment minimum only falls). */
int pt_update_clean(struct planner *p, uint32_t picked, int tier, const uint8_t *alive) {
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
    uint32_t id = p->seg_id[gu], pos = pt_seg_pos(p, q->tensor, q->use_index, id);
    uint32_t *mn = &p->seg_min[pt_tier_slot(tier)][id];
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
    uint32_t hi = TIO_MIN(old, p->seg_len[id]);
    size_t first = p->seg_first[id]; /* local index of the segment's first use */
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
 * main loop's measure, over fixed windows), by lazy greedy with a wider eps (OC_EPS): benefits
 * only fall as memory falls, so stale keys are upper bounds. Host memory (within the cap over
 * the whole period; faster than the SSDs) is used for new periods when the policy allows it.
 */
/* The pass's lazy-greedy margin where the main loop has one (teraio-mixed, teraio-ssd): each move
 * applied lowers about a dozen overlapping candidates a little, and at the main loop's 10% the
 * pass re-scored 19 candidates per move applied (docs/decisions.md). */
#define OC_EPS  0.3
#define OC_PICK 0x80000000u /* cand.version: the candidate widens pick (version & ~OC_PICK) */

/* The widest window of period q on a tier chosen for it: [*a, end - 1). 0 if empty. */
static int overcommit_window(
    struct planner *p, const struct tio_pperiod *q, int *tier, int *clean, uint64_t *a) {
    if (p->use_host && pt_host_allowed(p, q)) {
        *tier = TIO_TIER_HOST;
    } else if (p->use_ssd) {
        *tier = TIO_TIER_SSD;
    } else {
        return 0;
    }
    *clean = pt_has_clean_copy(p, q, *tier);
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
        b += pt_ext_benefit(p, a, pk->off, s);
    }
    if (q->end >= 1 && pk->pre < q->end - 1) {
        b += pt_ext_benefit(p, pk->pre, q->end - 1, s);
    }
    return b / (double)s;
}

/* The start of overcommit_window's window, without its host cap query where the tier cannot
 * move the start: with no clean copy on the SSDs, both tiers start at start + 1 (a host copy is
 * never clean). The query is a descent of the host tree; most scores need none (1.6% of a
 * 0.25M-kernel plan's instructions). 0 if the window is empty or no tier can take q. */
static int oc_window_start(struct planner *p, const struct tio_pperiod *q, uint64_t *a) {
    if (p->use_ssd && !pt_has_clean_copy(p, q, TIO_TIER_SSD)) {
        *a = q->start + 1;
        return q->end >= 1 && q->end - 1 > *a;
    }
    int tier, clean;
    return overcommit_window(p, q, &tier, &clean, a);
}

static double oc_score(struct planner *p, const struct cand *c) {
    if (c->version & OC_PICK) {
        return widen_score(p, &p->picks[c->version & ~OC_PICK]);
    }
    const struct tio_pperiod *q = &p->m->periods[c->period];
    uint64_t a;
    if (!oc_window_start(p, q, &a)) {
        return 0;
    }
    return pt_ext_benefit(p, a, q->end - 1, (int64_t)q->bytes) / (double)q->bytes;
}

static int oc_apply(struct planner *p, const struct cand *c, uint8_t *alive) {
    const struct tio_pmodel *m = p->m;
    const struct tio_pperiod *q = &m->periods[c->period];
    int64_t s = (int64_t)q->bytes;
    if (c->version & OC_PICK) {
        struct pick *pk = &p->picks[c->version & ~OC_PICK];
        uint64_t a = pk->clean ? q->start : q->start + 1;
        if (a < pk->off) {
            pt_ext_add(&p->mem, p->n, a, pk->off, -s);
            pk->off = (uint32_t)a;
            pk->stall_off = 1;
        }
        if (pk->pre < q->end - 1) {
            pt_ext_add(&p->mem, p->n, pk->pre, q->end - 1, -s);
            pk->pre = (uint32_t)(q->end - 1);
            pk->stall_pre = 1;
        }
        return 0;
    }
    int tier = TIO_TIER_SSD, clean = 0;
    uint64_t a = 0;
    if (!overcommit_window(p, q, &tier, &clean, &a)) {
        return 0; /* scored > 0 just before, so not reached; kept for the analyzer */
    }
    pt_ext_add(&p->mem, p->n, a, q->end - 1, -s);
    if (tier == TIO_TIER_HOST) {
        pt_host_add(p, q->start, pt_host_end(p, q), s);
    }
    if (tio_grow((void **)&p->picks, &p->cap_picks, p->n_picks + 1, sizeof *p->picks) < 0) {
        return TIO_ENOMEM;
    }
    struct pick *pk = &p->picks[p->n_picks++];
    pk->period = c->period;
    pk->tier = (uint8_t)tier;
    pk->clean = (uint8_t)clean;
    pk->stall_off = pk->stall_pre = 1;
    pk->off = (uint32_t)a;
    pk->pre = (uint32_t)(q->end - 1);
    alive[c->period] = 0;
    return pt_update_clean(p, c->period, tier, alive);
}

/* Sizes whose candidates take their first scores from a table (tio_stree_table, 1 B per kernel
 * each): a model's tensors come in a handful of sizes (6 on the Llama3-70B stage), and a trace
 * with more scores the rest by descents. */
#define OC_TABLES 16

/* The tables for up to OC_TABLES sizes among the candidates, each filled: returns how many
 * (0 when none could be allocated: then every score is a descent). */
static size_t oc_tables(struct planner *p, const uint8_t *taken, struct tio_stree_table *tb) {
    const struct tio_pmodel *m = p->m;
    size_t n = 0;
    for (size_t i = 0; i < m->n_periods + p->n_picks && n < OC_TABLES; i++) {
        size_t pi = i < m->n_periods ? i : p->picks[i - m->n_periods].period;
        uint64_t b = m->periods[pi].bytes;
        size_t j = 0;
        while (j < n && (uint64_t)tb[j].s != b) {
            j++;
        }
        if (j < n || (i < m->n_periods && taken[i]) || b == 0 || b > INT64_MAX) {
            continue;
        }
        int rc = n == 0 ? tio_stree_table_init(&p->mem, p->cap, &tb[0])
                        : tio_stree_table_share(&p->mem, &tb[0], &tb[n]);
        if (rc < 0) {
            break;
        }
        tio_stree_table_fill(&p->mem, &tb[n++], (int64_t)b, 0);
    }
    return n;
}

/* Every candidate's first score, on a curve that does not change until the first move is
 * applied (from its size's table where it has one), and its queueing: the periods not taken,
 * then the picks. */
static int oc_push_first(struct planner *p, const uint8_t *taken) {
    const struct tio_pmodel *m = p->m;
    struct tio_stree_table tb[OC_TABLES];
    size_t n_tb = oc_tables(p, taken, tb);
    int rc = 0;
    for (size_t i = 0; i < m->n_periods + p->n_picks && rc == 0; i++) {
        struct cand c = { 0, (uint32_t)i, 0 };
        if (i >= m->n_periods) {
            size_t k = i - m->n_periods;
            c = (struct cand){ 0, p->picks[k].period, OC_PICK | (uint32_t)k };
        } else if (taken[i]) {
            continue;
        }
        uint64_t b = m->periods[c.period].bytes;
        size_t j = 0;
        while (j < n_tb && (uint64_t)tb[j].s != b) {
            j++;
        }
        p->fixed = j < n_tb ? &tb[j] : NULL;
        double sc = oc_score(p, &c);
        rc = sc > 0 ? pt_heap_push_version(p, sc, c.period, c.version) : 0;
    }
    p->fixed = NULL;
    for (size_t j = n_tb; j-- > 0;) { /* tb[0] last: the others borrow its pending adds */
        tio_stree_table_fini(&tb[j]);
    }
    return rc;
}

int pt_overcommit(struct planner *p, const uint8_t *taken, uint8_t *alive) {
    p->n_heap = 0;
    int rc = oc_push_first(p, taken);
    const double oc_eps = p->eps > 0 ? OC_EPS : 0;
    while (rc == 0 && p->n_heap > 0 && tio_stree_max(&p->mem, 0, p->n) > p->cap) {
        struct cand c = pt_heap_pop(p);
        double sc = oc_score(p, &c);
        if (!(sc > 0)) {
            continue; /* frees nothing over the line any more (and never will again) */
        }
        if (p->n_heap > 0 && sc < (1.0 - oc_eps) * p->heap[0].key) {
            rc = pt_heap_push_version(p, sc, c.period,
                                      c.version); /* fell behind: re-queue, fresh score */
            continue;
        }
        rc = oc_apply(p, &c, alive);
    }
    return rc;
}

static inline uint64_t relax_pre(const struct pt_relax_key *k) {
    return k->pre;
}

/* Each radix pass is stable: keys that start in index order end in (pre, index) order, the
 * stable merge sort's that this replaces, in 2 or 3 streamed passes instead of log2(n) passes
 * each followed by a copy back (10% of the cache misses of a 0.25M-kernel plan under cachegrind,
 * most of them this sort's). */
TIO_RADIX_SORT_DEFINE(relax_radix, struct pt_relax_key, relax_pre)

struct pt_relax_key *
pt_relax_sort(struct pt_relax_key *keys, struct pt_relax_key *tmp, size_t n, uint64_t lim) {
    return relax_radix(keys, tmp, n, lim);
}

/* G10's relaxation: move each prefetch earlier while the curve stays under the line with the
 * tensor back; drop pairs that would then never leave (they no longer save anything). The
 * picks go in order of their prefetch's start, ties by index. */
void pt_relax_prefetches(struct planner *p, uint8_t *dropped) {
    size_t np = p->n_picks;
    struct pt_relax_key *buf = tio_malloc((np ? np : 1) * sizeof *buf);
    struct pt_relax_key *tmp = tio_malloc((np ? np : 1) * sizeof *tmp);
    if (!buf || !tmp) {
        tio_free(buf);
        tio_free(tmp);
        return; /* relaxation is optional: keep the latest-start plan */
    }
    /* from here on only the curve's maxima are asked (the last kernel above a line, the moves'
     * urgency, the summary's values): an add that keeps the sums too costs half as much again */
    tio_stree_keep_max_only(&p->mem);
    uint64_t lim = 0;
    for (size_t i = 0; i < np; i++) {
        buf[i].pre = p->picks[i].pre;
        buf[i].idx = (uint32_t)i;
        lim = TIO_MAX(lim, buf[i].pre);
    }
    const struct pt_relax_key *keys = pt_relax_sort(buf, tmp, np, lim);
    if (!keys) {
        tio_free(buf);
        tio_free(tmp);
        return;
    }
    for (size_t r = 0; r < np; r++) {
        struct pick *pk = &p->picks[keys[r].idx];
        const struct tio_pperiod *q = &p->m->periods[pk->period];
        int64_t s = (int64_t)q->bytes;
        uint64_t k = pt_ext_last_above(p, pk->off, pk->pre, p->cap - s);
        uint64_t x = k == NONE ? pk->off : k + 1;
        if (x < pk->pre) {
            pt_ext_add(&p->mem, p->n, x, pk->pre, s);
            pk->pre = (uint32_t)x;
        }
        /* stays resident the whole time: no traffic at all; but an SSD write that later clean
         * offloads of the tensor may count on stays (its prefetch, at the offload's end, only
         * cancels the free) */
        if (pk->pre <= pk->off && (pk->clean || pk->tier != TIO_TIER_SSD || !p->clean_copies)) {
            dropped[keys[r].idx] = 1;
            if (pk->tier == TIO_TIER_HOST) { /* no copy on the host: the summary's host peak */
                pt_host_add(p, q->start, pt_host_end(p, q), -s);
            }
        }
    }
    tio_free(tmp);
    tio_free(buf);
}
