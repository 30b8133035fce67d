/* The teraio planner's internals (planner_teraio*.c): the planner's state and the helpers its
 * files share. Private; read planner_teraio.c first.
 *
 * Reading order: planner_teraio.c (setup, the selection loop, emitting the plan),
 * planner_slots.c (bandwidth slots and the memory curve on the extended axis),
 * planner_eval.c (a candidate's evaluation, the lazy heap, the memo), planner_overcommit.c
 * (committing picks, clean copies, overcommit and early prefetch). */
#ifndef TIO_PLANNER_TERAIO_IMPL_H
#define TIO_PLANNER_TERAIO_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "plan/planner_impl.h"
#include "plan/planner_tree.h"

#define FULL_EPS     1.0  /* a slot with less than 1 byte free counts as full */
#define SSD_PREFER   0.90 /* mixed: SSD unless host saves more than 1/0.9 of SSD's benefit */
#define URGENT_SLACK 1.5  /* prefetch URGENT when its slack is under 1.5x its transfer time */
#define PICK_EPS     0.1  /* ours: a pick may be 10% below the true best score (lazy greedy) */
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

/* A pick, 16 bytes: off and pre are extended kernels, under 2 x TIO_TRACE_MAX_KERNELS. */
struct pick {
    uint32_t period;
    uint32_t off, pre; /* as struct eval's */
    uint8_t tier;      /* TIO_TIER_SSD or TIO_TIER_HOST */
    uint8_t clean;
    uint8_t stall_off, stall_pre; /* overcommitted: the move has no room in the slots, compute
                                     waits for it (TIO_MOVE_STALL) */
};
_Static_assert(2 * (uint64_t)TIO_TRACE_MAX_KERNELS <= UINT32_MAX, "struct pick: extended kernels");

struct planner {
    const struct tio_pmodel *m;
    int variant;
    size_t n;
    int64_t cap;
    /* Slot capacity and use per channel. The two SSD channels share one array (the SSD's
     * time, seconds): used[SSD_W] == used[SSD_R]; unit[c] converts bytes to the slot's unit
     * (1 for the PCIe channels, ssd_mix / rate for the SSD ones). */
    double *used[TIO_CH_COUNT];
    double capmul[TIO_CH_COUNT]; /* slot capacity of kernel k: capmul x tau[k] */
    double unit[TIO_CH_COUNT];
    uint32_t *fnext[TIO_CH_COUNT]; /* DSU: next slot >= k with room (forward channels) */
    uint32_t *bprev[TIO_CH_COUNT]; /* DSU on k + 1: previous slot <= k with room (backward) */
    double *tprefix;               /* [n + 1] prefix sums of tau */
    struct tio_stree mem;          /* M'[k] */
    /* while the curve does not change (the first bounds, the overcommit pass's first scores):
     * its integrals over cap for one (s, kind), tabled; NULL otherwise */
    const struct tio_stree_table *fixed;
    struct tio_mtree host; /* host bytes held per kernel */
    /* during the search, one bit per period: refused by the host cap (the host's curve only
     * rises until early prefetch, so a refusal stands); NULL when not allocated */
    uint8_t *no_host;
    int use_host, use_ssd, clean_copies;
    double cost_per_byte; /* seconds per byte moved out and back on the reference tier */
    double eps;           /* accept a pick within (1 - eps) of the best bound (0: exact) */
    /* heap: its entries hold a period's place in the tie order (its rank, or the period itself
     * without ranks) in place of the period, so that a tie costs no read outside the heap */
    struct cand *heap;
    size_t n_heap, cap_heap;
    uint32_t *version;
    /* Heap ties are broken by (tensor, start) order: rank[i] is period i's place in it, or NULL
     * when the periods are already in that order (the usual case: then the index is the rank
     * and a tie costs no read of the periods). */
    uint32_t *rank;
    uint32_t *unrank; /* the period at each place, with rank */
    /* picks */
    struct pick *picks;
    size_t n_picks, cap_picks;
    /* clean copies, by write segment: the uses of a tensor from one write up to the next (cyclic
     * for globals). A copy stored after use i is still identical after use j when i and j are
     * in the same segment and i comes first. Per use (global use index use_off[t] + u): its
     * segment and the period after it; per segment: 16 bytes. */
    uint32_t *seg_id;        /* per use: its segment */
    uint32_t *seg_first;     /* per segment: local index (within the tensor) of its first use */
    uint32_t *seg_len;       /* per segment: number of uses in it */
    uint32_t *seg_min[2];    /* per segment and tier (0 ssd, 1 host): lowest picked position */
    uint32_t *period_of_use; /* per use: the period that starts after it, UINT32_MAX if none */
    uint8_t *nowrite;        /* per tensor: global and never written (one cyclic segment) */
};

/* The variants that follow Algorithm 1's ranking (teraio-paper, teraio-paper-ssd). */
static inline int pt_is_paper(int variant) {
    return variant == TIO_VAR_PAPER || variant == TIO_VAR_PAPER_SSD;
}

/* The two SSD channels (they share one slot array). */
static inline int pt_is_ssd_ch(int ch) {
    return ch == TIO_CH_SSD_W || ch == TIO_CH_SSD_R;
}

/* The clean-copy index of a tier: 0 SSD, 1 anything else (host). */
static inline int pt_tier_slot(int tier) {
    return tier == TIO_TIER_SSD ? 0 : 1;
}

/* Position of use u of tensor t within its segment `id` (0 = the segment's first use). */
static inline uint32_t pt_seg_pos(const struct planner *p, size_t t, size_t u, uint32_t id) {
    size_t cnt = p->m->use_off[t + 1] - p->m->use_off[t], first = p->seg_first[id];
    return (uint32_t)(u >= first ? u - first : u + cnt - first);
}

/* The end (exclusive, extended axis) of the kernels over which a host-tier period q holds its
 * host bytes: from its offload's issue (q->start) through the kernel its prefetch is due by
 * (q->end), within one iteration. The runtime and the simulator issue kernel k's offloads
 * before they wait for the prefetches kernel k needs, so a prefetch that is late (a stall move,
 * or one queued for GPU memory) still holds its host copy when the offloads of its deadline
 * kernel take theirs (docs/planner.md, "Model"). */
static inline uint64_t pt_host_end(const struct planner *p, const struct tio_pperiod *q) {
    return q->end + 1 < q->start + p->n ? q->end + 1 : q->start + p->n;
}

/* ---- planner_teraio.c ---- */

/* The heap's tie order: p->rank and p->unrank as struct planner says (both NULL when the
 * periods are in that order already). 0 or TIO_ENOMEM. */
int pt_build_rank(struct planner *p);

/* ---- planner_slots.c ---- */

/* Mark slot k of channel ch full (in its "next slot with room" forests) if under FULL_EPS. */
void pt_mark_one(struct planner *p, int ch, size_t k);

/*
 * Forward walk over extended kernels [a, b): spread `bytes` over the free write capacity.
 * Returns the extended kernel during which the last byte moves, or NONE. reserve: commit.
 */
uint64_t
pt_walk_fwd(struct planner *p, int tier, uint64_t a, uint64_t b, double bytes, int reserve);

/* Backward walk over extended kernels [a, b) from b - 1 down: returns the extended kernel at
 * which the prefetch must start (its first byte moves there), or NONE. */
uint64_t
pt_walk_bwd(struct planner *p, int tier, uint64_t a, uint64_t b, double bytes, int reserve);

/* Extended-axis helpers: a window [a, b) with b - a <= n maps to one or two pieces of a curve
 * of n kernels. ext_add adds d over it; ext_max is its maximum (INT64_MIN if empty). */
void pt_ext_add(struct tio_stree *t, size_t n, uint64_t a, uint64_t b, int64_t d);

int64_t pt_ext_max(struct tio_stree *t, size_t n, uint64_t a, uint64_t b);

/* The same two on the host tree. */
void pt_host_add(struct planner *p, uint64_t a, uint64_t b, int64_t d);

/* Whether the host bytes held exceed thr anywhere in [a, b). */
int pt_host_above(const struct planner *p, uint64_t a, uint64_t b, int64_t thr);

/* The benefit of freeing s bytes over [a, b): the capped integral over capacity (ours), or
 * s x the time of the kernels over it (teraio-paper, g10). */
double pt_ext_benefit(struct planner *p, uint64_t a, uint64_t b, int64_t s);

/* An upper bound of every benefit a period can have: s x (time over capacity in the period).
 * Cheaper than the capped integral (only crossings of the capacity line cost anything). */
double pt_ext_bound(struct planner *p, uint64_t a, uint64_t b, int64_t s);

/* Last extended kernel k in [a, b) with M'[k] > thr, or NONE. */
uint64_t pt_ext_last_above(struct planner *p, uint64_t a, uint64_t b, int64_t thr);

/* Kernel time over extended [a, b), seconds. */
double pt_ext_time(const struct planner *p, uint64_t a, uint64_t b);

/* ---- planner_eval.c ---- */

/* Is there a stored copy of period q's tensor on `tier`, still identical at q's offload? */
int pt_has_clean_copy(const struct planner *p, const struct tio_pperiod *q, int tier);

/* 1 if period q fits under the host cap over its whole period. */
int pt_host_allowed(struct planner *p, const struct tio_pperiod *q);

/* The policy's score of a benefit: B (g10), B / s (teraio-paper), B / cost (ours). */
double pt_score_of(const struct planner *p, const struct tio_pperiod *q, double benefit);

/*
 * Evaluate a candidate: the policy's choice (*chosen), its score, and an upper bound (*ub) of
 * every score it can have from now on (the heap key). The host benefit is only computed when
 * it can change the decision: over window W2 it is at most the SSD benefit over W1 plus
 * s x tau(W2 \ W1), since no kernel contributes more than s x tau.
 */
double pt_evaluate(struct planner *p, uint32_t pi, struct eval *chosen, double *ub);

/* Heap order: higher key first; ties: lower tensor, then earlier start. */
int pt_cand_better(const struct planner *p, double ka, uint32_t a, double kb, uint32_t b);

/* Push a candidate of `version` (the planner's heap; the overcommit pass keeps its own
 * versions). */
int pt_heap_push_version(struct planner *p, double key, uint32_t period, uint32_t version);

/* Push / pop the planner's heap (max by key). */
int pt_heap_push(struct planner *p, double key, uint32_t period);

struct cand pt_heap_pop(struct planner *p);

/* The heap's first entry (not removed): its key and its period. */
struct cand pt_heap_top(const struct planner *p);

/* ---- planner_overcommit.c ---- */

/* Commit period pi as evaluated in *e: reserve its slots, lower the curve, record the pick.
 * 0 or TIO_ENOMEM. */
int pt_commit(struct planner *p, uint32_t pi, const struct eval *e);

/* After a pick, later periods in the same write segment have a clean copy on that tier:
 * their windows may grow, so re-key them with their full-window bound (each period at most
 * once per tier over the whole run: the segment minimum only falls). */
int pt_update_clean(struct planner *p, uint32_t picked, int tier, const uint8_t *alive);

/* Overcommit (ours): moves the kernels' time has no room for, while memory is over the
 * capacity (see the comment at the top of planner_overcommit.c). 0 or TIO_ENOMEM. */
int pt_overcommit(struct planner *p, const uint8_t *taken, uint8_t *alive);

/* G10's relaxation: move each prefetch earlier while the curve stays under the line with the
 * tensor back; drop pairs that would then never leave (they no longer save anything). */
void pt_relax_prefetches(struct planner *p, uint8_t *dropped);

/* The relaxation's order: a pick's prefetch start, then its index. */
struct pt_relax_key {
    uint64_t pre;
    uint32_t idx;
};

/* Sort keys[n] by pre (every pre at most lim), stably: least significant digit first radix
 * passes between keys and tmp ([n]). Returns where the sorted keys are (keys or tmp), NULL
 * when out of memory. */
struct pt_relax_key *
pt_relax_sort(struct pt_relax_key *keys, struct pt_relax_key *tmp, size_t n, uint64_t lim);

#endif
