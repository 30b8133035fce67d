/* Segment trees with lazy range add over the memory curve (planner_tree.h). Recursion depth is
 * log2(N) <= 29, so the recursive walks are bounded. Node x < size is an inner node, node
 * x >= size the leaf x - size; leaves past n are padding, never queried. */
#include "plan/planner_tree.h"

#include <string.h>

#include "common/common_impl.h"

/* Padding leaves: INT64_MIN/4 and INT64_MAX/4 keep max() and min() harmless. */
#define PAD_MX (INT64_MIN / 4)
#define PAD_MN (INT64_MAX / 4)

static inline int64_t node_mn(const struct tio_stree *t, size_t x) {
    if (x < t->size) {
        return t->node[x].mn;
    }
    return x - t->size < t->n ? t->leaf[x - t->size].v : PAD_MN;
}

static inline int64_t node_mx(const struct tio_stree *t, size_t x) {
    if (x < t->size) {
        return t->node[x].mx;
    }
    return x - t->size < t->n ? t->leaf[x - t->size].v : PAD_MX;
}

static inline double node_st(const struct tio_stree *t, size_t x) {
    if (x < t->size) {
        return t->node[x].st;
    }
    return x - t->size < t->n ? t->tau[x - t->size] : 0;
}

static inline double node_svt(const struct tio_stree *t, size_t x) {
    if (x < t->size) {
        return t->node[x].svt;
    }
    return x - t->size < t->n ? t->leaf[x - t->size].svt : 0;
}

/* The pending add of inner node x (what its subtree's values lack): not stored, it is the
 * node's maximum less its children's (every add keeps mx = max(children) + lazy exactly). */
static inline int64_t lazy_of(const struct tio_stree *t, size_t x) {
    return t->node[x].mx - TIO_MAX(node_mx(t, 2 * x), node_mx(t, 2 * x + 1));
}

/* Recompute inner node x from its children and its pending add `lazy`. */
static void pull(struct tio_stree *t, size_t x, int64_t lazy) {
    size_t a = 2 * x, b = 2 * x + 1;
    struct tio_stree_node *nd = &t->node[x];
    nd->mn = TIO_MIN(node_mn(t, a), node_mn(t, b)) + lazy;
    nd->mx = TIO_MAX(node_mx(t, a), node_mx(t, b)) + lazy;
    nd->svt = node_svt(t, a) + node_svt(t, b) + (double)lazy * nd->st;
}

/* Add d to the whole of node x (its lazy, or the leaf itself). */
static void apply(struct tio_stree *t, size_t x, int64_t d) {
    if (x < t->size) {
        struct tio_stree_node *nd = &t->node[x];
        nd->mn += d;
        nd->mx += d; /* and so its pending add, mx less its children's */
        nd->svt += (double)d * nd->st;
    } else if (x - t->size < t->n) {
        size_t i = x - t->size;
        t->leaf[i].v += d;
        t->leaf[i].svt += (double)d * t->tau[i];
    }
}

int tio_stree_init(struct tio_stree *t, size_t n, const int64_t *v, const double *tau) {
    memset(t, 0, sizeof *t);
    size_t size = 1;
    while (size < n) {
        size *= 2;
    }
    t->n = n;
    t->size = size;
    t->tau = tau;
    /* 64-byte aligned: a node's two children (32 B each) share one cache line */
    t->node = tio_aligned_alloc(64, size * sizeof *t->node);
    t->leaf = tio_aligned_alloc(64, (n ? n : 1) * sizeof *t->leaf);
    if (size >= (size_t)2 * TIO_STREE_MEMO_SPAN) {
        t->memo_lo = size / TIO_STREE_MEMO_SPAN;
        t->memo = tio_calloc(t->memo_lo, sizeof *t->memo);
    }
    if (!t->node || !t->leaf || (t->memo_lo && !t->memo)) {
        tio_stree_fini(t);
        return TIO_ENOMEM;
    }
    memset(t->node, 0, size * sizeof *t->node);
    for (size_t i = 0; i < n; i++) {
        t->leaf[i].v = v[i];
        t->leaf[i].svt = (double)v[i] * tau[i];
    }
    for (size_t x = size - 1; x >= 1; x--) {
        t->node[x].st = node_st(t, 2 * x) + node_st(t, 2 * x + 1);
        pull(t, x, 0);
    }
    return 0;
}

void tio_stree_fini(struct tio_stree *t) {
    tio_free(t->node);
    tio_free(t->leaf);
    tio_free(t->memo);
    memset(t, 0, sizeof *t);
}

/* Forget node x's memo (an add reaches into it), if x is a memo node. */
static inline void memo_drop(struct tio_stree *t, size_t x) {
    if (x >= t->memo_lo && x < 2 * t->memo_lo) {
        t->memo[x - t->memo_lo].kind = 0;
    }
}

// NOLINTBEGIN(misc-no-recursion): segment-tree descents, depth log2(n)
static void
add_rec(struct tio_stree *t, size_t x, size_t lo, size_t hi, size_t l, size_t r, int64_t d) {
    if (r <= lo || hi <= l) {
        return;
    }
    memo_drop(t, x); /* an add to a node above changes only the pending adds above it */
    if (l <= lo && hi <= r) {
        apply(t, x, d);
        return;
    }
    size_t mid = (lo + hi) / 2;
    int64_t lazy = lazy_of(t, x); /* before the children change */
    add_rec(t, 2 * x, lo, mid, l, r, d);
    add_rec(t, 2 * x + 1, mid, hi, l, r, d);
    pull(t, x, lazy);
}

void tio_stree_add(struct tio_stree *t, size_t l, size_t r, int64_t d) {
    if (l < r && d != 0) {
        add_rec(t, 1, 0, t->size, l, TIO_MIN(r, t->n), d);
    }
}

/* `acc` is the sum of the pending adds above x: the node's true values are mn/mx + acc.
 * `xmx` is node_mx(t, x), which the parent read to get its own pending add. */
static int64_t max_rec(const struct tio_stree *t,
                       size_t x,
                       size_t lo,
                       size_t hi,
                       size_t l,
                       size_t r,
                       int64_t acc,
                       int64_t xmx) {
    if (r <= lo || hi <= l) {
        return INT64_MIN;
    }
    if (l <= lo && hi <= r) {
        return xmx + acc;
    }
    size_t mid = (lo + hi) / 2;
    int64_t amx = node_mx(t, 2 * x), bmx = node_mx(t, 2 * x + 1);
    acc += xmx - TIO_MAX(amx, bmx); /* lazy_of(t, x) */
    int64_t a = max_rec(t, 2 * x, lo, mid, l, r, acc, amx);
    int64_t b = max_rec(t, 2 * x + 1, mid, hi, l, r, acc, bmx);
    return TIO_MAX(a, b);
}

int64_t tio_stree_max(struct tio_stree *t, size_t l, size_t r) {
    return l < r ? max_rec(t, 1, 0, t->size, l, TIO_MIN(r, t->n), 0, node_mx(t, 1)) : INT64_MIN;
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

static double capped_split(struct tio_stree *t,
                           const struct capped_query *q,
                           size_t x,
                           size_t lo,
                           size_t hi,
                           int64_t acc,
                           int64_t xmx);

/* `xmx` is node_mx(t, x), which the parent read to get its pending add. */
static double capped_rec(struct tio_stree *t,
                         const struct capped_query *q,
                         size_t x,
                         size_t lo,
                         size_t hi,
                         int64_t acc,
                         int64_t xmx) {
    if (q->r <= lo || hi <= q->l) {
        return 0;
    }
    const int64_t c = q->c, s = q->s;
    int64_t mx = xmx + acc;
    if (mx <= c) {
        return 0;
    }
    if (q->l <= lo && hi <= q->r) {
        int64_t mn = node_mn(t, x) + acc;
        if (mn >= c + s) {
            return (double)s * node_st(t, x);
        }
        if (!q->by_leaf && mn >= c && mx <= c + s) {
            double st = node_st(t, x);
            return node_svt(t, x) + (double)acc * st - (double)c * st;
        }
        if (hi - lo == 1) { /* a leaf is always one of the cases above */
            return 0;
        }
        if (x >= t->memo_lo && x < 2 * t->memo_lo) {
            /* the whole node: its value depends on the node, acc, c, s and the kind only */
            uint32_t kind = q->by_leaf ? 2 : 1;
            struct tio_stree_memo *mo = &t->memo[x - t->memo_lo];
            if (mo->kind == kind && mo->acc == acc && mo->c == c && mo->s == s) {
                return mo->val;
            }
            double v = capped_split(t, q, x, lo, hi, acc, xmx);
            *mo = (struct tio_stree_memo){ .acc = acc, .c = c, .s = s, .val = v, .kind = kind };
            return v;
        }
    }
    return capped_split(t, q, x, lo, hi, acc, xmx);
}

/* capped_rec's descent into both children of node x. */
static double capped_split(struct tio_stree *t,
                           const struct capped_query *q,
                           size_t x,
                           size_t lo,
                           size_t hi,
                           int64_t acc,
                           int64_t xmx) {
    size_t mid = (lo + hi) / 2;
    int64_t amx = node_mx(t, 2 * x), bmx = node_mx(t, 2 * x + 1);
    acc += xmx - TIO_MAX(amx, bmx); /* lazy_of(t, x) */
    return capped_rec(t, q, 2 * x, lo, mid, acc, amx) +
           capped_rec(t, q, 2 * x + 1, mid, hi, acc, bmx);
}

double tio_stree_capped(struct tio_stree *t, size_t l, size_t r, int64_t c, int64_t s) {
    const struct capped_query q = { .l = l, .r = TIO_MIN(r, t->n), .c = c, .s = s, .by_leaf = 0 };
    return l < r ? capped_rec(t, &q, 1, 0, t->size, 0, node_mx(t, 1)) : 0;
}

double tio_stree_crit(struct tio_stree *t, size_t l, size_t r, int64_t c) {
    const struct capped_query q = { .l = l, .r = TIO_MIN(r, t->n), .c = c, .s = 1, .by_leaf = 1 };
    return l < r ? capped_rec(t, &q, 1, 0, t->size, 0, node_mx(t, 1)) : 0;
}

static size_t last_rec(const struct tio_stree *t,
                       size_t x,
                       size_t lo,
                       size_t hi,
                       size_t l,
                       size_t r,
                       int64_t acc,
                       int64_t thr) {
    if (r <= lo || hi <= l || node_mx(t, x) + acc <= thr) {
        return SIZE_MAX;
    }
    if (hi - lo == 1) {
        return lo;
    }
    size_t mid = (lo + hi) / 2;
    acc += lazy_of(t, x);
    size_t k = last_rec(t, 2 * x + 1, mid, hi, l, r, acc, thr);
    return k != SIZE_MAX ? k : last_rec(t, 2 * x, lo, mid, l, r, acc, thr);
}
// NOLINTEND(misc-no-recursion)

size_t tio_stree_last_above(struct tio_stree *t, size_t l, size_t r, int64_t thr) {
    return l < r ? last_rec(t, 1, 0, t->size, l, TIO_MIN(r, t->n), 0, thr) : SIZE_MAX;
}

void tio_stree_values(struct tio_stree *t, int64_t *out) {
    /* push every lazy down, then read the leaves */
    for (size_t x = 1; x < t->size; x++) {
        int64_t d = lazy_of(t, x); /* top-down: x holds its parent's pushed add by now */
        if (d) {
            apply(t, 2 * x, d); /* x's own maximum stays: its pending add is now 0 */
            apply(t, 2 * x + 1, d);
        }
    }
    for (size_t i = 0; i < t->n; i++) {
        out[i] = t->leaf[i].v;
    }
    if (t->memo) {
        memset(t->memo, 0, t->memo_lo * sizeof *t->memo); /* the pending adds moved down */
    }
}

/* ---- the max-only tree --------------------------------------------------------------------- */

static inline int64_t mnode_mx(const struct tio_mtree *t, size_t x) {
    if (x < t->size) {
        return t->node[x].mx;
    }
    return x - t->size < t->n ? t->leaf[x - t->size] : PAD_MX;
}

/* The pending add of inner node x: its maximum less its children's (as lazy_of). */
static inline int64_t mlazy_of(const struct tio_mtree *t, size_t x) {
    return t->node[x].mx - TIO_MAX(mnode_mx(t, 2 * x), mnode_mx(t, 2 * x + 1));
}

int tio_mtree_init(struct tio_mtree *t, size_t n) {
    memset(t, 0, sizeof *t);
    size_t size = 1;
    while (size < n) {
        size *= 2;
    }
    t->n = n;
    t->size = size;
    t->node = tio_calloc(size, sizeof *t->node);
    t->leaf = tio_calloc(n ? n : 1, sizeof *t->leaf);
    if (!t->node || !t->leaf) {
        tio_mtree_fini(t);
        return TIO_ENOMEM;
    }
    for (size_t x = size - 1; x >= 1; x--) {
        t->node[x].mx = TIO_MAX(mnode_mx(t, 2 * x), mnode_mx(t, 2 * x + 1));
    }
    return 0;
}

void tio_mtree_fini(struct tio_mtree *t) {
    tio_free(t->node);
    tio_free(t->leaf);
    memset(t, 0, sizeof *t);
}

// NOLINTBEGIN(misc-no-recursion): segment-tree descents, depth log2(n)
static void
madd_rec(struct tio_mtree *t, size_t x, size_t lo, size_t hi, size_t l, size_t r, int64_t d) {
    if (r <= lo || hi <= l) {
        return;
    }
    if (l <= lo && hi <= r) {
        if (x < t->size) {
            t->node[x].mx += d; /* and so its pending add */
        } else {
            t->leaf[x - t->size] += d; /* within [l, r), so never padding */
        }
        return;
    }
    size_t mid = (lo + hi) / 2;
    int64_t lazy = mlazy_of(t, x); /* before the children change */
    madd_rec(t, 2 * x, lo, mid, l, r, d);
    madd_rec(t, 2 * x + 1, mid, hi, l, r, d);
    t->node[x].mx = TIO_MAX(mnode_mx(t, 2 * x), mnode_mx(t, 2 * x + 1)) + lazy;
}

static int64_t mmax_rec(
    const struct tio_mtree *t, size_t x, size_t lo, size_t hi, size_t l, size_t r, int64_t acc) {
    if (r <= lo || hi <= l) {
        return INT64_MIN;
    }
    if (l <= lo && hi <= r) {
        return mnode_mx(t, x) + acc;
    }
    size_t mid = (lo + hi) / 2;
    acc += mlazy_of(t, x);
    int64_t a = mmax_rec(t, 2 * x, lo, mid, l, r, acc);
    int64_t b = mmax_rec(t, 2 * x + 1, mid, hi, l, r, acc);
    return TIO_MAX(a, b);
}

static int many_rec(const struct tio_mtree *t,
                    size_t x,
                    size_t lo,
                    size_t hi,
                    size_t l,
                    size_t r,
                    int64_t acc,
                    int64_t thr,
                    int64_t xmx) { /* xmx: mnode_mx(t, x), read by the parent */
    if (r <= lo || hi <= l || xmx + acc <= thr) {
        return 0;
    }
    if (l <= lo && hi <= r) {
        return 1;
    }
    size_t mid = (lo + hi) / 2;
    int64_t amx = mnode_mx(t, 2 * x), bmx = mnode_mx(t, 2 * x + 1);
    acc += xmx - TIO_MAX(amx, bmx); /* mlazy_of(t, x) */
    return many_rec(t, 2 * x, lo, mid, l, r, acc, thr, amx) ||
           many_rec(t, 2 * x + 1, mid, hi, l, r, acc, thr, bmx);
}
// NOLINTEND(misc-no-recursion)

int tio_mtree_any_above(const struct tio_mtree *t, size_t l, size_t r, int64_t thr) {
    return l < r && many_rec(t, 1, 0, t->size, l, TIO_MIN(r, t->n), 0, thr, mnode_mx(t, 1));
}

void tio_mtree_add(struct tio_mtree *t, size_t l, size_t r, int64_t d) {
    if (l < r && d != 0) {
        madd_rec(t, 1, 0, t->size, l, TIO_MIN(r, t->n), d);
    }
}

int64_t tio_mtree_max(const struct tio_mtree *t, size_t l, size_t r) {
    return l < r ? mmax_rec(t, 1, 0, t->size, l, TIO_MIN(r, t->n), 0) : INT64_MIN;
}

int64_t tio_mtree_top(const struct tio_mtree *t) {
    return t->n ? mnode_mx(t, 1) : INT64_MIN;
}
