/* Private: segment trees over the kernels of one iteration (the planned memory curve M'[k], and
 * the host bytes held per kernel). */
#ifndef TIO_PLANNER_TREE_H
#define TIO_PLANNER_TREE_H

#include <stddef.h>
#include <stdint.h>

/*
 * Leaves hold int64 values v[k] (bytes) and weights tau[k] (seconds). Range add, range max, and
 * the two benefit integrals of docs/planner.md:
 *   capped(l, r, c, s) = sum over k in [l, r) of min(s, max(0, v[k] - c)) * tau[k]
 *   crit(l, r, c)      = sum over k in [l, r) with v[k] > c of tau[k]
 * Both prune whole nodes that lie entirely under c, entirely in (c, c + s] or entirely above
 * c + s, so a smooth curve costs O(log N) per crossing of those two lines.
 *
 * Layout: the leaves are grouped in blocks of TIO_STREE_BLOCK; the tree's nodes, inner nodes
 * [1, size) and one node per block [size, 2 size), are one array of structs (a descent reads one
 * cache line per node, not four), and a query that reaches into part of a block scans that
 * block's leaves: the nodes of a million kernels take 4 MB, not 32, and the leaves 8 B each (the
 * value) plus the caller's tau, which the tree borrows. No inner node stores its pending add: it
 * is the node's maximum less its children's; a block's is stored (blazy).
 */
struct tio_stree_node {
    int64_t mn, mx; /* with the node's pending add */
    double st;      /* sum of tau */
    double svt;     /* sum of v * tau */
};

/* Leaves per block: a scan of 16 values and weights reads 6 adjacent cache lines where the
 * descent it replaces read 4 scattered ones. */
#define TIO_STREE_BLOCK 16

/* The last benefit integral over the whole of one node of TIO_STREE_MEMO_SPAN leaves, for the
 * same query (line c, cap s, kind, the pending adds above the node) while no add reaches into
 * the node: the planner re-evaluates the same windows after picks that changed only part of
 * them. 32 B per TIO_STREE_MEMO_SPAN leaves, two to a cache line (40 B straddled lines). */
#define TIO_STREE_MEMO_SPAN 64

struct tio_stree_memo {
    int64_t acc, c;
    int64_t key; /* a capped query's s; -1: crit; INT64_MIN: empty */
    double val;
};

struct tio_stree {
    size_t n, nb, size;          /* leaves, blocks, power of two >= nb */
    size_t memo_lo;              /* first node of TIO_STREE_MEMO_SPAN leaves; 0: no memo */
    struct tio_stree_memo *memo; /* [memo_lo]: node memo_lo + i at i */
    struct tio_stree_node *node; /* [2 size], index 0 unused; size + b: block b */
    int64_t *blazy;              /* [nb] the pending add of each block (its leaves lack it) */
    int64_t *v;                  /* [n] leaf values, less their block's pending add */
    const double *tau;           /* [n], borrowed: must outlive the tree */
    int max_only;                /* tio_stree_keep_max_only was called */
};

int tio_stree_init(struct tio_stree *t, size_t n, const int64_t *v, const double *tau);
void tio_stree_fini(struct tio_stree *t);
void tio_stree_add(struct tio_stree *t, size_t l, size_t r, int64_t d);
int64_t tio_stree_max(struct tio_stree *t, size_t l, size_t r);
double tio_stree_capped(struct tio_stree *t, size_t l, size_t r, int64_t c, int64_t s);
double tio_stree_crit(struct tio_stree *t, size_t l, size_t r, int64_t c);
/*
 * One of the two integrals (line c, cap s, kind) over many ranges of a curve that does not
 * change in between (the planner's first bounds, one per period; the overcommit pass's first
 * scores, one per candidate): each node's whole-node answer and the pending adds above it
 * tabled once, a query then climbs from its two end blocks to where they meet, where
 * tio_stree_capped and tio_stree_crit descend from the root into every node over the line. The
 * answers are theirs to the bit: the climb takes a node whole where the descent does and adds
 * the parts in the descent's order. 2 B per kernel while it lives; one table serves every
 * (s, kind) in turn, each fill a pass over the nodes.
 */
struct tio_stree_table {
    int64_t c, s;
    double *whole;    /* [2 size] the integral over the whole of each node */
    int64_t *acc;     /* [2 size] the pending adds above each node */
    int by_leaf;      /* 1: tio_stree_crit (s is 1), 0: tio_stree_capped */
    int acc_borrowed; /* acc is another table's (tio_stree_table_share) */
};

/* A table for line c on t as it is now, for no (s, kind) yet. 0 or TIO_ENOMEM. */
int tio_stree_table_init(const struct tio_stree *t, int64_t c, struct tio_stree_table *tb);
/* A second table for the same tree and line that borrows tb's pending adds (tb must outlive
 * it): 1 B per kernel more. 0 or TIO_ENOMEM. */
int tio_stree_table_share(const struct tio_stree *t,
                          const struct tio_stree_table *tb,
                          struct tio_stree_table *out);
/* Fill it for tio_stree_capped(., ., c, s) (by_leaf 0) or tio_stree_crit(., ., c) (by_leaf 1,
 * s 1). */
void tio_stree_table_fill(const struct tio_stree *t,
                          struct tio_stree_table *tb,
                          int64_t s,
                          int by_leaf);
void tio_stree_table_fini(struct tio_stree_table *tb);
/* The integral over [l, r) the table was filled for, while t has not changed since init. */
double tio_stree_table_sum(const struct tio_stree *t,
                           const struct tio_stree_table *tb,
                           size_t l,
                           size_t r);
/* tio_stree_last_above: the largest k in [l, r) with v[k] > thr, or SIZE_MAX. */
size_t tio_stree_last_above(struct tio_stree *t, size_t l, size_t r, int64_t thr);
/* tio_stree_keep_max_only: from now on, adds keep the leaves and the maxima only, not the
 * minima, the sums or the memo: half the work of an add, for a caller that only asks
 * tio_stree_max, tio_stree_last_above and tio_stree_values after (the integrals are then
 * refused by an assertion). */
void tio_stree_keep_max_only(struct tio_stree *t);
/* tio_stree_values: write every leaf value to out[n]. */
void tio_stree_values(struct tio_stree *t, int64_t *out);

/*
 * A max-only segment tree (range add, range max) over n values that start at 0: the host bytes
 * held per kernel, laid out as tio_stree (blocks of TIO_STREE_BLOCK leaves): 8 B per node (its
 * maximum, with its pending add), 8 B per leaf.
 */
struct tio_mtree {
    size_t n, nb, size; /* leaves, blocks, power of two >= nb */
    int64_t *node;      /* [2 size], index 0 unused; size + b: block b */
    int64_t *blazy;     /* [nb] the pending add of each block (its leaves lack it) */
    int64_t *leaf;      /* [n] values, less their block's pending add */
};

int tio_mtree_init(struct tio_mtree *t, size_t n);
void tio_mtree_fini(struct tio_mtree *t);
void tio_mtree_add(struct tio_mtree *t, size_t l, size_t r, int64_t d);
int64_t tio_mtree_max(const struct tio_mtree *t, size_t l, size_t r);
/* tio_mtree_any_above: whether some value in [l, r) exceeds thr (tio_mtree_max(l, r) > thr),
 * descending only into nodes whose maximum exceeds thr and stopping at the first such node
 * inside the range: cheaper than the maximum when most of the range lies under thr. */
int tio_mtree_any_above(const struct tio_mtree *t, size_t l, size_t r, int64_t thr);
/* tio_mtree_top: the maximum over every value (INT64_MIN when n is 0). */
int64_t tio_mtree_top(const struct tio_mtree *t);

#endif
