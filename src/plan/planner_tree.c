/* Segment trees with lazy range add over the memory curve (planner_tree.h). Recursion depth is
 * log2(N) <= 29, so the recursive walks are bounded. The memory curve's tree: node x < size is
 * an inner node, node x >= size the block x - size of TIO_STREE_BLOCK leaves (blocks past nb
 * are padding, never queried). */
#include "plan/planner_tree.h"

#include <string.h>

#include "common/common_impl.h"

/* Padding: INT64_MIN/4 and INT64_MAX/4 keep max() and min() harmless. */
#define PAD_MX (INT64_MIN / 4)
#define PAD_MN (INT64_MAX / 4)
#define BLK    TIO_STREE_BLOCK

_Static_assert(BLK >= 2 && BLK <= 64 && (BLK & (BLK - 1)) == 0,
               "TIO_STREE_BLOCK: a power of two, at most 64 (pair_sum's levels)");
_Static_assert(TIO_STREE_MEMO_SPAN >= 2 * BLK, "TIO_STREE_MEMO_SPAN: inner nodes");

/* The pending add of inner node x (what its subtree's values lack): not stored, it is the
 * node's maximum less its children's (every add keeps mx = max(children) + lazy exactly). */
static inline int64_t lazy_of(const struct tio_stree *t, size_t x) {
    return t->node[x].mx - TIO_MAX(t->node[2 * x].mx, t->node[2 * x + 1].mx);
}

/* Recompute inner node x from its children and its pending add `lazy`. */
static void pull(struct tio_stree *t, size_t x, int64_t lazy) {
    const struct tio_stree_node *a = &t->node[2 * x], *b = &t->node[2 * x + 1];
    struct tio_stree_node *nd = &t->node[x];
    nd->mn = TIO_MIN(a->mn, b->mn) + lazy;
    nd->mx = TIO_MAX(a->mx, b->mx) + lazy;
    nd->svt = a->svt + b->svt + (double)lazy * nd->st;
}

/* Pairwise sum of g[BLK], in the order of a binary tree over the block's leaves (left + right
 * at every level): a block sums its leaves as the tree above it sums its nodes, so a sum of
 * whole blocks and leaves does not depend on where the blocks begin. */
static inline double pair_sum(double *g) {
    /* one loop per level, each of a constant stride, so that the compiler unrolls them (it
     * did not unroll one loop nested in a loop over the stride) */
#define PAIR_LEVEL(w)                                       \
    if (BLK > (w)) {                                        \
        for (size_t i = 0; i < BLK; i += (size_t)2 * (w)) { \
            g[i] += g[i + (w)];                             \
        }                                                   \
    }
    PAIR_LEVEL(1)
    PAIR_LEVEL(2)
    PAIR_LEVEL(4)
    PAIR_LEVEL(8)
    PAIR_LEVEL(16)
    PAIR_LEVEL(32)
#undef PAIR_LEVEL
    return g[0];
}

/* Recompute block b's node from its leaves and its pending add. */
static void block_pull(struct tio_stree *t, size_t b) {
    size_t lo = b * BLK, hi = TIO_MIN(lo + BLK, t->n);
    int64_t mn = PAD_MN, mx = PAD_MX;
    double g[BLK] = { 0 };
    for (size_t i = lo; i < hi; i++) {
        int64_t v = t->v[i];
        mn = TIO_MIN(mn, v);
        mx = TIO_MAX(mx, v);
        g[i - lo] = (double)v * t->tau[i];
    }
    struct tio_stree_node *nd = &t->node[t->size + b];
    int64_t lz = t->blazy[b];
    nd->mn = mn + lz;
    nd->mx = mx + lz;
    nd->svt = pair_sum(g) + (double)lz * nd->st;
}

/* Recompute block b's maximum alone (tio_stree_keep_max_only). */
static void block_pull_max(struct tio_stree *t, size_t b) {
    size_t lo = b * BLK, hi = TIO_MIN(lo + BLK, t->n);
    int64_t mx = PAD_MX;
    for (size_t i = lo; i < hi; i++) {
        mx = TIO_MAX(mx, t->v[i]);
    }
    t->node[t->size + b].mx = mx + t->blazy[b];
}

/* Add d to the whole of node x (its pending add). */
static void apply(struct tio_stree *t, size_t x, int64_t d) {
    struct tio_stree_node *nd = &t->node[x];
    nd->mn += d;
    nd->mx += d; /* and so its pending add, mx less its children's */
    nd->svt += (double)d * nd->st;
    if (x >= t->size && x - t->size < t->nb) {
        t->blazy[x - t->size] += d;
    }
}

/* Memo keys: a capped query's s (>= 0), or one of these. */
#define MEMO_EMPTY INT64_MIN
#define MEMO_CRIT  (-1)

static void memo_clear(struct tio_stree *t) {
    for (size_t i = 0; i < t->memo_lo; i++) {
        t->memo[i].key = MEMO_EMPTY;
    }
}

int tio_stree_init(struct tio_stree *t, size_t n, const int64_t *v, const double *tau) {
    memset(t, 0, sizeof *t);
    size_t nb = (n + BLK - 1) / BLK, size = 1;
    while (size < nb) {
        size *= 2;
    }
    t->n = n;
    t->nb = nb;
    t->size = size;
    t->tau = tau;
    /* 64-byte aligned: a node's two children (32 B each) share one cache line */
    t->node = tio_aligned_alloc(64, 2 * size * sizeof *t->node);
    t->v = tio_malloc((n ? n : 1) * sizeof *t->v);
    t->blazy = tio_calloc(nb ? nb : 1, sizeof *t->blazy);
    const size_t span = TIO_STREE_MEMO_SPAN / BLK; /* blocks under a memo node */
    if (size >= 2 * span) {
        t->memo_lo = size / span;
        t->memo = tio_aligned_alloc(64, t->memo_lo * sizeof *t->memo);
    }
    if (!t->node || !t->v || !t->blazy || (t->memo_lo && !t->memo)) {
        tio_stree_fini(t);
        return TIO_ENOMEM;
    }
    memset(t->node, 0, 2 * size * sizeof *t->node);
    memo_clear(t);
    if (n) {
        memcpy(t->v, v, n * sizeof *t->v);
    }
    for (size_t b = 0; b < size; b++) {
        struct tio_stree_node *nd = &t->node[size + b];
        if (b >= nb) {
            *nd = (struct tio_stree_node){ .mn = PAD_MN, .mx = PAD_MX };
            continue;
        }
        double g[BLK] = { 0 };
        for (size_t i = b * BLK; i < TIO_MIN(b * BLK + BLK, n); i++) {
            g[i - b * BLK] = tau[i];
        }
        nd->st = pair_sum(g);
        block_pull(t, b);
    }
    for (size_t x = size - 1; x >= 1; x--) {
        t->node[x].st = t->node[2 * x].st + t->node[2 * x + 1].st;
        pull(t, x, 0);
    }
    return 0;
}

void tio_stree_fini(struct tio_stree *t) {
    tio_free(t->node);
    tio_free(t->v);
    tio_free(t->blazy);
    tio_free(t->memo);
    memset(t, 0, sizeof *t);
}

/* Forget node x's memo (an add reaches into it), if x is a memo node. */
static inline void memo_drop(struct tio_stree *t, size_t x) {
    if (x >= t->memo_lo && x < 2 * t->memo_lo) {
        t->memo[x - t->memo_lo].key = MEMO_EMPTY;
    }
}

/* The recursions run over leaf ranges: node x covers leaves [lo, hi), the root [0, size x BLK).
 * A node is taken whole only when [lo, hi) lies inside the (clipped) query, so a block with
 * padding leaves is always scanned. */

// NOLINTBEGIN(misc-no-recursion): segment-tree descents, depth log2(n)
/* Add d to the whole of node x. */
static inline void add_whole(struct tio_stree *t, size_t x, int64_t d) {
    memo_drop(t, x); /* an add to a node above changes only the pending adds above it */
    apply(t, x, d);
}

/* Add d to the maximum (and so the pending add) of the whole of node x alone. */
static inline void add_whole_max(struct tio_stree *t, size_t x, int64_t d) {
    t->node[x].mx += d;
    if (x >= t->size && x - t->size < t->nb) {
        t->blazy[x - t->size] += d;
    }
}

static inline void add_whole_as(struct tio_stree *t, size_t x, int64_t d, const int max_only) {
    if (max_only) {
        add_whole_max(t, x, d);
    } else {
        add_whole(t, x, d);
    }
}

static void
add_rec(struct tio_stree *t, size_t x, size_t lo, size_t hi, size_t l, size_t r, int64_t d);
static void
add_max_rec(struct tio_stree *t, size_t x, size_t lo, size_t hi, size_t l, size_t r, int64_t d);

/*
 * Add d over [l, r) below node x, which the range reaches into without covering it. Down a
 * path where one child only is partly covered (the range's edges), the other being covered
 * whole or not at all, it loops, keeping the nodes and their pending adds to recompute them
 * bottom-up after, instead of calling itself per node; it calls itself where both children
 * are partly covered (once per add). The nodes touched and each one's update are the same.
 * max_only is a constant in each of the two callers below (add_rec, add_max_rec), so the
 * compiler makes two loops of it: with it (a tree that keeps its maxima only,
 * tio_stree_keep_max_only) the same nodes' maxima and the leaves are updated, not the minima,
 * the sums or the memo.
 */
static inline void add_path(struct tio_stree *t,
                            size_t x,
                            size_t lo,
                            size_t hi,
                            size_t l,
                            size_t r,
                            int64_t d,
                            const int max_only) {
    size_t path[64];
    int64_t lazy[64];
    size_t depth = 0;
    for (;;) {
        if (!max_only) {
            memo_drop(t, x);
        }
        if (x >= t->size) { /* part of a block: its leaves, then the block */
            for (size_t i = TIO_MAX(l, lo); i < TIO_MIN(r, hi); i++) {
                t->v[i] += d;
            }
            if (max_only) {
                block_pull_max(t, x - t->size);
            } else {
                block_pull(t, x - t->size);
            }
            break;
        }
        size_t mid = (lo + hi) / 2;
        path[depth] = x;
        lazy[depth++] = lazy_of(t, x); /* before the children change */
        int in_a = l < mid, in_b = mid < r;
        int whole_a = in_a && l <= lo && mid <= r, whole_b = in_b && l <= mid && hi <= r;
        if (whole_a) {
            add_whole_as(t, 2 * x, d, max_only);
        }
        if (whole_b) {
            add_whole_as(t, 2 * x + 1, d, max_only);
        }
        int part_a = in_a && !whole_a, part_b = in_b && !whole_b;
        if (part_a && part_b) {
            (max_only ? add_max_rec : add_rec)(t, 2 * x, lo, mid, l, r, d);
        }
        if (part_b) {
            x = 2 * x + 1;
            lo = mid;
        } else if (part_a) {
            x = 2 * x;
            hi = mid;
        } else {
            break;
        }
    }
    while (depth > 0) {
        depth--;
        size_t y = path[depth];
        if (max_only) {
            t->node[y].mx = TIO_MAX(t->node[2 * y].mx, t->node[2 * y + 1].mx) + lazy[depth];
        } else {
            pull(t, y, lazy[depth]);
        }
    }
}

static void
add_rec(struct tio_stree *t, size_t x, size_t lo, size_t hi, size_t l, size_t r, int64_t d) {
    add_path(t, x, lo, hi, l, r, d, 0);
}

static void
add_max_rec(struct tio_stree *t, size_t x, size_t lo, size_t hi, size_t l, size_t r, int64_t d) {
    add_path(t, x, lo, hi, l, r, d, 1);
}

void tio_stree_add(struct tio_stree *t, size_t l, size_t r, int64_t d) {
    r = TIO_MIN(r, t->n);
    if (l >= r || d == 0) {
        return;
    }
    int whole = l == 0 && r == t->size * BLK;
    if (t->max_only && whole) {
        add_whole_max(t, 1, d);
    } else if (t->max_only) {
        add_max_rec(t, 1, 0, t->size * BLK, l, r, d);
    } else if (whole) {
        add_whole(t, 1, d);
    } else {
        add_rec(t, 1, 0, t->size * BLK, l, r, d);
    }
}

void tio_stree_keep_max_only(struct tio_stree *t) {
    t->max_only = 1;
}

/* `acc` is the sum of the pending adds above x: the node's true values are mn/mx + acc.
 * `xmx` is node x's mx, which the parent read to get its own pending add. */
static int64_t max_rec(const struct tio_stree *t,
                       size_t x,
                       size_t lo,
                       size_t hi,
                       size_t l,
                       size_t r,
                       int64_t acc,
                       int64_t xmx) { /* node x overlaps [l, r); one child: a loop, not a call */
    int64_t best = INT64_MIN;
    for (;;) {
        if (l <= lo && hi <= r) {
            return TIO_MAX(best, xmx + acc);
        }
        if (x >= t->size) {
            int64_t mx = INT64_MIN;
            for (size_t i = TIO_MAX(l, lo); i < TIO_MIN(r, hi); i++) {
                mx = TIO_MAX(mx, t->v[i]);
            }
            return TIO_MAX(best, mx + acc + t->blazy[x - t->size]);
        }
        size_t mid = (lo + hi) / 2;
        int64_t amx = t->node[2 * x].mx, bmx = t->node[2 * x + 1].mx;
        acc += xmx - TIO_MAX(amx, bmx); /* lazy_of(t, x) */
        int in_a = l < mid, in_b = mid < r;
        if (in_a && in_b) {
            best = TIO_MAX(best, max_rec(t, 2 * x, lo, mid, l, r, acc, amx));
        }
        x = in_b ? 2 * x + 1 : 2 * x;
        lo = in_b ? mid : lo;
        hi = in_b ? hi : mid;
        xmx = in_b ? bmx : amx;
    }
}

int64_t tio_stree_max(struct tio_stree *t, size_t l, size_t r) {
    if (l == 0 && r >= t->n && t->n) {
        return t->node[1].mx; /* the root: the padding's maximum is far below any value */
    }
    r = TIO_MIN(r, t->n);
    return l < r ? max_rec(t, 1, 0, t->size * BLK, l, r, 0, t->node[1].mx) : INT64_MIN;
}

/*
 * One benefit integral over [l, r): the sum of min(s, max(0, v - c)) * tau. With `by_leaf`, a
 * node partly inside (c, c + s] is split down to its leaves instead of being summed from svt: on
 * integer values and s = 1 that is exactly the time above c (crit), a sum of tau alone.
 */
struct capped_query {
    size_t l, r;
    int64_t c, s;
    int by_leaf;
};

static double capped_memo(struct tio_stree *t,
                          const struct capped_query *q,
                          size_t x,
                          size_t lo,
                          size_t hi,
                          int64_t acc,
                          int64_t xmx);

/* The leaves of block b in [lo, hi) one by one, `acc` the pending adds above the block. */
static double capped_block(const struct tio_stree *t,
                           const struct capped_query *q,
                           size_t b,
                           size_t lo,
                           size_t hi,
                           int64_t acc) {
    const int64_t c = q->c - acc - t->blazy[b], s = q->s; /* the line in the leaves' terms */
    size_t a = TIO_MAX(q->l, lo), e = TIO_MIN(q->r, hi);
    double g[BLK] = { 0 };
    for (size_t i = a; i < e; i++) {
        int64_t over = t->v[i] - c;
        if (over > 0) {
            g[i - lo] = (double)TIO_MIN(over, s) * t->tau[i];
        }
    }
    return pair_sum(g);
}

/* Where a descent from inner node x goes: the children inside the range and over the line
 * (the others add an exact 0), and the pending adds above them. */
struct capped_kids {
    size_t mid;
    int64_t acc, amx, bmx;
    int ga, gb;
};

static inline struct capped_kids capped_kids_of(const struct tio_stree *t,
                                                const struct capped_query *q,
                                                size_t x,
                                                size_t lo,
                                                size_t hi,
                                                int64_t acc,
                                                int64_t xmx) {
    struct capped_kids k = { .mid = (lo + hi) / 2 };
    k.amx = t->node[2 * x].mx;
    k.bmx = t->node[2 * x + 1].mx;
    k.acc = acc + xmx - TIO_MAX(k.amx, k.bmx); /* lazy_of(t, x) */
    k.ga = q->l < k.mid && k.amx + k.acc > q->c;
    k.gb = k.mid < q->r && k.bmx + k.acc > q->c;
    return k;
}

/*
 * Node x, which overlaps the query and has a value over the line (xmx + acc > c: the caller
 * checked both). `xmx` is node x's mx, which the parent read to get its pending add. A descent
 * into one child only (the range's edges) loops instead of calling itself: most nodes of an
 * integral are on such a path, and a call per node cost more instructions than the node's work.
 * The sums are those of the recursion: a node's value is its children's, left + right.
 */
static double capped_rec(struct tio_stree *t,
                         const struct capped_query *q,
                         size_t x,
                         size_t lo,
                         size_t hi,
                         int64_t acc,
                         int64_t xmx) {
    const int64_t c = q->c, s = q->s;
    for (;;) {
        if (q->l <= lo && hi <= q->r) {
            const struct tio_stree_node *nd = &t->node[x];
            int64_t mn = nd->mn + acc;
            if (mn >= c + s) {
                return (double)s * nd->st;
            }
            if (!q->by_leaf && mn >= c && xmx + acc <= c + s) {
                return nd->svt + (double)acc * nd->st - (double)c * nd->st;
            }
            if (x >= t->memo_lo && x < 2 * t->memo_lo) {
                return capped_memo(t, q, x, lo, hi, acc, xmx);
            }
        }
        if (x >= t->size) {
            return capped_block(t, q, x - t->size, lo, hi, acc);
        }
        const struct capped_kids k = capped_kids_of(t, q, x, lo, hi, acc, xmx);
        if (k.ga && k.gb) {
            return capped_rec(t, q, 2 * x, lo, k.mid, k.acc, k.amx) +
                   capped_rec(t, q, 2 * x + 1, k.mid, hi, k.acc, k.bmx);
        }
        if (!k.ga && !k.gb) {
            return 0;
        }
        x = k.ga ? 2 * x : 2 * x + 1;
        lo = k.ga ? lo : k.mid;
        hi = k.ga ? k.mid : hi;
        xmx = k.ga ? k.amx : k.bmx;
        acc = k.acc;
    }
}

/* The whole of memo node x, which its sums did not answer: the memo, or its children's
 * integrals, then kept. The value depends on the node, acc, c, s and the kind only. */
static double capped_memo(struct tio_stree *t,
                          const struct capped_query *q,
                          size_t x,
                          size_t lo,
                          size_t hi,
                          int64_t acc,
                          int64_t xmx) {
    const int64_t key = q->by_leaf ? MEMO_CRIT : q->s; /* crit's s is always 1 */
    struct tio_stree_memo *mo = &t->memo[x - t->memo_lo];
    if (mo->key == key && mo->acc == acc && mo->c == q->c) {
        return mo->val;
    }
    const struct capped_kids k = capped_kids_of(t, q, x, lo, hi, acc, xmx);
    double v = 0;
    if (k.ga && k.gb) {
        v = capped_rec(t, q, 2 * x, lo, k.mid, k.acc, k.amx) +
            capped_rec(t, q, 2 * x + 1, k.mid, hi, k.acc, k.bmx);
    } else if (k.ga || k.gb) {
        v = k.ga ? capped_rec(t, q, 2 * x, lo, k.mid, k.acc, k.amx)
                 : capped_rec(t, q, 2 * x + 1, k.mid, hi, k.acc, k.bmx);
    }
    /* a negative s (never asked: it is a tensor's size) would not be told from the other
     * keys, so it is not kept */
    mo->key = key >= 0 || q->by_leaf ? key : MEMO_EMPTY;
    mo->acc = acc;
    mo->c = q->c;
    mo->val = v;
    return v;
}

/* One integral from the root, which must overlap the range and be over the line. */
static double capped_root(struct tio_stree *t, const struct capped_query *q) {
    TIO_ASSERT(!t->max_only); /* the sums, minima and memo are stale */
    int64_t mx = t->node[1].mx;
    return q->l < q->r && mx > q->c ? capped_rec(t, q, 1, 0, t->size * BLK, 0, mx) : 0;
}

double tio_stree_capped(struct tio_stree *t, size_t l, size_t r, int64_t c, int64_t s) {
    const struct capped_query q = { .l = l, .r = TIO_MIN(r, t->n), .c = c, .s = s, .by_leaf = 0 };
    return capped_root(t, &q);
}

double tio_stree_crit(struct tio_stree *t, size_t l, size_t r, int64_t c) {
    const struct capped_query q = { .l = l, .r = TIO_MIN(r, t->n), .c = c, .s = 1, .by_leaf = 1 };
    return capped_root(t, &q);
}

int tio_stree_table_init(const struct tio_stree *t, int64_t c, struct tio_stree_table *tb) {
    size_t size = t->size;
    memset(tb, 0, sizeof *tb);
    tb->c = c;
    tb->whole = tio_malloc(2 * size * sizeof *tb->whole);
    tb->acc = tio_malloc(2 * size * sizeof *tb->acc);
    if (!tb->whole || !tb->acc) {
        tio_stree_table_fini(tb);
        return TIO_ENOMEM;
    }
    tb->acc[1] = 0;
    for (size_t x = 1; x < size; x++) {
        tb->acc[2 * x] = tb->acc[2 * x + 1] = tb->acc[x] + lazy_of(t, x);
    }
    return 0;
}

int tio_stree_table_share(const struct tio_stree *t,
                          const struct tio_stree_table *tb,
                          struct tio_stree_table *out) {
    *out = *tb;
    out->acc_borrowed = 1;
    out->whole = tio_malloc(2 * t->size * sizeof *out->whole);
    return out->whole ? 0 : TIO_ENOMEM;
}

void tio_stree_table_fini(struct tio_stree_table *tb) {
    tio_free(tb->whole);
    if (!tb->acc_borrowed) {
        tio_free(tb->acc);
    }
    tb->whole = NULL;
    tb->acc = NULL;
}

/* What capped_rec answers for the whole of node x: 0 under the line (its parent skips it), its
 * sums where they answer, a block's scan, else its children's answers summed (the memo's). */
static double table_whole(const struct tio_stree *t, const struct tio_stree_table *tb, size_t x) {
    const struct tio_stree_node *nd = &t->node[x];
    const int64_t acc = tb->acc[x], c = tb->c, s = tb->s, mn = nd->mn + acc;
    if (nd->mx + acc <= c) {
        return 0;
    }
    if (mn >= c + s) {
        return (double)s * nd->st;
    }
    if (!tb->by_leaf && mn >= c && nd->mx + acc <= c + s) {
        return nd->svt + (double)acc * nd->st - (double)c * nd->st;
    }
    if (x >= t->size) {
        const struct capped_query q = { .l = 0, .r = t->n, .c = c, .s = s, .by_leaf = tb->by_leaf };
        size_t b = x - t->size;
        return capped_block(t, &q, b, b * BLK, b * BLK + BLK, acc);
    }
    return tb->whole[2 * x] + tb->whole[2 * x + 1];
}

void tio_stree_table_fill(const struct tio_stree *t,
                          struct tio_stree_table *tb,
                          int64_t s,
                          int by_leaf) {
    tb->s = s;
    tb->by_leaf = by_leaf;
    for (size_t x = 2 * t->size - 1; x >= 1; x--) { /* children first */
        tb->whole[x] = table_whole(t, tb, x);
    }
}

/* One end block of a query: whole (a real block inside the range, as the descent takes it) or
 * scanned. */
static double table_end(const struct tio_stree *t,
                        const struct tio_stree_table *tb,
                        size_t b,
                        size_t l,
                        size_t r,
                        int *whole) {
    size_t lo = b * BLK, hi = lo + BLK;
    *whole = l <= lo && hi <= r;
    if (*whole) {
        return tb->whole[t->size + b];
    }
    const struct capped_query q = {
        .l = l, .r = r, .c = tb->c, .s = tb->s, .by_leaf = tb->by_leaf
    };
    return capped_block(t, &q, b, lo, hi, tb->acc[t->size + b]);
}

/* The descent's sum from its end blocks up. The left end's part gathers the whole nodes to its
 * right (part + node) and the right end's those to its left (node + part), until the two meet
 * under the node where the descent split; a part that is a whole node stays whole while its
 * parent lies inside the range (the descent takes the parent whole). Nodes under the line add
 * an exact 0 where the descent skipped them (every term is >= 0). */
double tio_stree_table_sum(const struct tio_stree *t,
                           const struct tio_stree_table *tb,
                           size_t l,
                           size_t r) {
    r = TIO_MIN(r, t->n);
    if (l >= r) {
        return 0;
    }
    size_t bl = l / BLK, br = (r - 1) / BLK, x = t->size + bl, y = t->size + br;
    int wa = 0, wb = 0;
    double a = table_end(t, tb, bl, l, r, &wa);
    if (x == y) {
        return a;
    }
    double b = table_end(t, tb, br, l, r, &wb);
    for (; x / 2 != y / 2; x /= 2, y /= 2) {
        if (x & 1) {
            wa = 0; /* its left sibling lies outside */
        } else {
            a = wa ? tb->whole[x / 2] : a + tb->whole[x + 1];
        }
        if (!(y & 1)) {
            wb = 0;
        } else {
            b = wb ? tb->whole[y / 2] : tb->whole[y - 1] + b;
        }
    }
    return wa && wb ? tb->whole[x / 2] : a + b;
}

/* The largest k in [l, r) below node x with v[k] > thr, or SIZE_MAX: node x overlaps the
 * range and its maximum exceeds thr (xmx + acc > thr, xmx its mx, read by the parent). Right
 * child first; one child to look into: a loop, not a call (as capped_rec). */
static size_t last_rec(const struct tio_stree *t,
                       size_t x,
                       size_t lo,
                       size_t hi,
                       size_t l,
                       size_t r,
                       int64_t acc,
                       int64_t thr,
                       int64_t xmx) {
    for (;;) {
        if (x >= t->size) {
            int64_t lthr = thr - acc - t->blazy[x - t->size]; /* thr in the leaves' terms */
            for (size_t i = TIO_MIN(r, hi); i > TIO_MAX(l, lo); i--) {
                if (t->v[i - 1] > lthr) {
                    return i - 1;
                }
            }
            return SIZE_MAX;
        }
        size_t mid = (lo + hi) / 2;
        int64_t amx = t->node[2 * x].mx, bmx = t->node[2 * x + 1].mx;
        acc += xmx - TIO_MAX(amx, bmx); /* lazy_of(t, x) */
        int ga = l < mid && amx + acc > thr, gb = mid < r && bmx + acc > thr;
        if (ga && gb) {
            size_t k = last_rec(t, 2 * x + 1, mid, hi, l, r, acc, thr, bmx);
            if (k != SIZE_MAX) {
                return k;
            }
        } else if (!ga && !gb) {
            return SIZE_MAX;
        }
        x = ga ? 2 * x : 2 * x + 1;
        lo = ga ? lo : mid;
        hi = ga ? mid : hi;
        xmx = ga ? amx : bmx;
    }
}
// NOLINTEND(misc-no-recursion)

size_t tio_stree_last_above(struct tio_stree *t, size_t l, size_t r, int64_t thr) {
    r = TIO_MIN(r, t->n);
    int64_t mx = t->node[1].mx;
    return l < r && mx > thr ? last_rec(t, 1, 0, t->size * BLK, l, r, 0, thr, mx) : SIZE_MAX;
}

void tio_stree_values(struct tio_stree *t, int64_t *out) {
    /* push every inner node's pending add down to the blocks, then read the leaves */
    for (size_t x = 1; x < t->size; x++) {
        int64_t d = lazy_of(t, x); /* top-down: x holds its parent's pushed add by now */
        if (d) {
            apply(t, 2 * x, d); /* x's own maximum stays: its pending add is now 0 */
            apply(t, 2 * x + 1, d);
        }
    }
    for (size_t i = 0; i < t->n; i++) {
        out[i] = t->v[i] + t->blazy[i / BLK];
    }
    memo_clear(t); /* the pending adds moved down */
}

/* ---- the max-only tree --------------------------------------------------------------------- */

/* The same layout as the memory curve's tree: node x < size inner, node size + b block b (its
 * maximum, with its pending add), blocks past nb padding. */

/* The pending add of inner node x: its maximum less its children's (as lazy_of). */
static inline int64_t mlazy_of(const struct tio_mtree *t, size_t x) {
    return t->node[x] - TIO_MAX(t->node[2 * x], t->node[2 * x + 1]);
}

/* Recompute block b's maximum from its leaves and its pending add. */
static void mblock_pull(struct tio_mtree *t, size_t b) {
    int64_t mx = PAD_MX;
    for (size_t i = b * BLK; i < TIO_MIN(b * BLK + BLK, t->n); i++) {
        mx = TIO_MAX(mx, t->leaf[i]);
    }
    t->node[t->size + b] = mx + t->blazy[b];
}

int tio_mtree_init(struct tio_mtree *t, size_t n) {
    memset(t, 0, sizeof *t);
    size_t nb = (n + BLK - 1) / BLK, size = 1;
    while (size < nb) {
        size *= 2;
    }
    t->n = n;
    t->nb = nb;
    t->size = size;
    t->node = tio_calloc(2 * size, sizeof *t->node);
    t->blazy = tio_calloc(nb ? nb : 1, sizeof *t->blazy);
    t->leaf = tio_calloc(n ? n : 1, sizeof *t->leaf);
    if (!t->node || !t->blazy || !t->leaf) {
        tio_mtree_fini(t);
        return TIO_ENOMEM;
    }
    for (size_t b = 0; b < size; b++) {
        t->node[size + b] = b < nb ? 0 : PAD_MX;
    }
    for (size_t x = size - 1; x >= 1; x--) {
        t->node[x] = TIO_MAX(t->node[2 * x], t->node[2 * x + 1]);
    }
    return 0;
}

void tio_mtree_fini(struct tio_mtree *t) {
    tio_free(t->node);
    tio_free(t->blazy);
    tio_free(t->leaf);
    memset(t, 0, sizeof *t);
}

// NOLINTBEGIN(misc-no-recursion): segment-tree descents, depth log2(n)
/* Add d to the whole of node x (its maximum, and so its pending add). */
static inline void madd_whole(struct tio_mtree *t, size_t x, int64_t d) {
    t->node[x] += d;
    if (x >= t->size) {
        t->blazy[x - t->size] += d; /* within [l, r), so never padding */
    }
}

/* Add d over [l, r) below node x, which the range reaches into without covering it: as
 * add_rec, a loop down the path of the one partly covered child, a call where both are. */
static void
madd_rec(struct tio_mtree *t, size_t x, size_t lo, size_t hi, size_t l, size_t r, int64_t d) {
    size_t path[64];
    int64_t lazy[64];
    size_t depth = 0;
    for (;;) {
        if (x >= t->size) {
            for (size_t i = TIO_MAX(l, lo); i < TIO_MIN(r, hi); i++) {
                t->leaf[i] += d;
            }
            mblock_pull(t, x - t->size);
            break;
        }
        size_t mid = (lo + hi) / 2;
        path[depth] = x;
        lazy[depth++] = mlazy_of(t, x); /* before the children change */
        int in_a = l < mid, in_b = mid < r;
        int whole_a = in_a && l <= lo && mid <= r, whole_b = in_b && l <= mid && hi <= r;
        if (whole_a) {
            madd_whole(t, 2 * x, d);
        }
        if (whole_b) {
            madd_whole(t, 2 * x + 1, d);
        }
        int part_a = in_a && !whole_a, part_b = in_b && !whole_b;
        if (part_a && part_b) {
            madd_rec(t, 2 * x, lo, mid, l, r, d);
        }
        if (part_b) {
            x = 2 * x + 1;
            lo = mid;
        } else if (part_a) {
            x = 2 * x;
            hi = mid;
        } else {
            break;
        }
    }
    while (depth > 0) {
        size_t y = path[--depth];
        t->node[y] = TIO_MAX(t->node[2 * y], t->node[2 * y + 1]) + lazy[depth];
    }
}

/* The largest leaf of block b in [l, r), in the leaves' terms (less the block's pending add). */
static int64_t mblock_max(const struct tio_mtree *t, size_t b, size_t l, size_t r) {
    int64_t mx = INT64_MIN;
    for (size_t i = TIO_MAX(l, b * BLK); i < TIO_MIN(r, b * BLK + BLK); i++) {
        mx = TIO_MAX(mx, t->leaf[i]);
    }
    return mx;
}

static int64_t mmax_rec(
    const struct tio_mtree *t, size_t x, size_t lo, size_t hi, size_t l, size_t r, int64_t acc) {
    if (r <= lo || hi <= l) {
        return INT64_MIN;
    }
    if (l <= lo && hi <= r) {
        return t->node[x] + acc;
    }
    if (x >= t->size) {
        return mblock_max(t, x - t->size, l, r) + acc + t->blazy[x - t->size];
    }
    size_t mid = (lo + hi) / 2;
    acc += mlazy_of(t, x);
    int64_t a = mmax_rec(t, 2 * x, lo, mid, l, r, acc);
    int64_t b = mmax_rec(t, 2 * x + 1, mid, hi, l, r, acc);
    return TIO_MAX(a, b);
}

/* Whether some value in [l, r) below node x exceeds thr: node x overlaps the range and its
 * maximum exceeds thr (xmx + acc > thr, xmx = t->node[x], read by the parent). One child to
 * look into: a loop, not a call (as capped_rec). */
static int many_rec(const struct tio_mtree *t,
                    size_t x,
                    size_t lo,
                    size_t hi,
                    size_t l,
                    size_t r,
                    int64_t acc,
                    int64_t thr,
                    int64_t xmx) {
    for (;;) {
        if (l <= lo && hi <= r) {
            return 1;
        }
        if (x >= t->size) {
            size_t b = x - t->size;
            return mblock_max(t, b, l, r) + acc + t->blazy[b] > thr;
        }
        size_t mid = (lo + hi) / 2;
        int64_t amx = t->node[2 * x], bmx = t->node[2 * x + 1];
        acc += xmx - TIO_MAX(amx, bmx); /* mlazy_of(t, x) */
        int ga = l < mid && amx + acc > thr, gb = mid < r && bmx + acc > thr;
        if (ga && gb && many_rec(t, 2 * x, lo, mid, l, r, acc, thr, amx)) {
            return 1;
        }
        if (!ga && !gb) {
            return 0;
        }
        x = gb ? 2 * x + 1 : 2 * x;
        lo = gb ? mid : lo;
        hi = gb ? hi : mid;
        xmx = gb ? bmx : amx;
    }
}
// NOLINTEND(misc-no-recursion)

int tio_mtree_any_above(const struct tio_mtree *t, size_t l, size_t r, int64_t thr) {
    r = TIO_MIN(r, t->n);
    return l < r && t->node[1] > thr && many_rec(t, 1, 0, t->size * BLK, l, r, 0, thr, t->node[1]);
}

void tio_mtree_add(struct tio_mtree *t, size_t l, size_t r, int64_t d) {
    r = TIO_MIN(r, t->n);
    if (l < r && d != 0) {
        if (l == 0 && r == t->size * BLK) {
            madd_whole(t, 1, d);
        } else {
            madd_rec(t, 1, 0, t->size * BLK, l, r, d);
        }
    }
}

int64_t tio_mtree_max(const struct tio_mtree *t, size_t l, size_t r) {
    if (l == 0 && r >= t->n && t->n) {
        return t->node[1]; /* the root: the padding's maximum is far below any value */
    }
    return l < r ? mmax_rec(t, 1, 0, t->size * BLK, l, TIO_MIN(r, t->n), 0) : INT64_MIN;
}

int64_t tio_mtree_top(const struct tio_mtree *t) {
    return t->n ? t->node[1] : INT64_MIN;
}
