/* Segment tree with lazy range add over the memory curve (planner_tree.h). Recursion depth is
 * log2(N) <= 29, so the recursive walks are bounded. */
#include "plan/planner_tree.h"

#include <string.h>

#include "common/common_impl.h"

static void pull(struct tio_stree *t, size_t x) {
    size_t a = 2 * x, b = 2 * x + 1;
    t->mn[x] = TIO_MIN(t->mn[a], t->mn[b]) + t->lazy[x];
    t->mx[x] = TIO_MAX(t->mx[a], t->mx[b]) + t->lazy[x];
    t->svt[x] = t->svt[a] + t->svt[b] + (double)t->lazy[x] * t->st[x];
}

int tio_stree_init(struct tio_stree *t, size_t n, const int64_t *v, const double *tau) {
    memset(t, 0, sizeof *t);
    size_t size = 1;
    while (size < n) {
        size *= 2;
    }
    t->n = n;
    t->size = size;
    /* One allocation: three int64 arrays then two double arrays of 2 * size nodes each. */
    _Static_assert(sizeof(int64_t) == sizeof(double), "the node arrays share one block");
    int64_t *block = tio_calloc(size * 10, sizeof *block);
    if (!block) {
        return TIO_ENOMEM;
    }
    t->mn = block;
    t->mx = block + 2 * size;
    t->lazy = block + 4 * size;
    t->st = (double *)(void *)(block + 6 * size);
    t->svt = (double *)(void *)(block + 8 * size);
    for (size_t i = 0; i < size; i++) {
        size_t x = size + i;
        /* padding leaves: never queried; INT64_MIN/2 keeps max() and min() harmless */
        int64_t val = i < n ? v[i] : INT64_MIN / 4;
        t->mn[x] = i < n ? val : INT64_MAX / 4;
        t->mx[x] = val;
        t->st[x] = i < n ? tau[i] : 0;
        t->svt[x] = i < n ? (double)val * tau[i] : 0;
    }
    for (size_t x = size - 1; x >= 1; x--) {
        t->st[x] = t->st[2 * x] + t->st[2 * x + 1];
        pull(t, x);
    }
    return 0;
}

void tio_stree_fini(struct tio_stree *t) {
    tio_free(t->mn); /* the block of every array (tio_stree_init) */
    memset(t, 0, sizeof *t);
}

// NOLINTBEGIN(misc-no-recursion): segment-tree descents, depth log2(n)
static void
add_rec(struct tio_stree *t, size_t x, size_t lo, size_t hi, size_t l, size_t r, int64_t d) {
    if (r <= lo || hi <= l) {
        return;
    }
    if (l <= lo && hi <= r) {
        t->mn[x] += d;
        t->mx[x] += d;
        t->lazy[x] += d;
        t->svt[x] += (double)d * t->st[x];
        return;
    }
    size_t mid = (lo + hi) / 2;
    add_rec(t, 2 * x, lo, mid, l, r, d);
    add_rec(t, 2 * x + 1, mid, hi, l, r, d);
    pull(t, x);
}

void tio_stree_add(struct tio_stree *t, size_t l, size_t r, int64_t d) {
    if (l < r && d != 0) {
        add_rec(t, 1, 0, t->size, l, TIO_MIN(r, t->n), d);
    }
}

/* `acc` is the sum of the lazies above x: the node's true values are mn/mx + acc. */
static int64_t max_rec(
    const struct tio_stree *t, size_t x, size_t lo, size_t hi, size_t l, size_t r, int64_t acc) {
    if (r <= lo || hi <= l) {
        return INT64_MIN;
    }
    if (l <= lo && hi <= r) {
        return t->mx[x] + acc;
    }
    size_t mid = (lo + hi) / 2;
    acc += t->lazy[x];
    int64_t a = max_rec(t, 2 * x, lo, mid, l, r, acc);
    int64_t b = max_rec(t, 2 * x + 1, mid, hi, l, r, acc);
    return TIO_MAX(a, b);
}

int64_t tio_stree_max(struct tio_stree *t, size_t l, size_t r) {
    return l < r ? max_rec(t, 1, 0, t->size, l, TIO_MIN(r, t->n), 0) : INT64_MIN;
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

static double capped_rec(const struct tio_stree *t,
                         const struct capped_query *q,
                         size_t x,
                         size_t lo,
                         size_t hi,
                         int64_t acc) {
    if (q->r <= lo || hi <= q->l) {
        return 0;
    }
    const int64_t c = q->c, s = q->s;
    int64_t mn = t->mn[x] + acc, mx = t->mx[x] + acc;
    if (mx <= c) {
        return 0;
    }
    if (q->l <= lo && hi <= q->r) {
        if (mn >= c + s) {
            return (double)s * t->st[x];
        }
        if (!q->by_leaf && mn >= c && mx <= c + s) {
            return t->svt[x] + (double)acc * t->st[x] - (double)c * t->st[x];
        }
        if (hi - lo == 1) { /* a leaf is always one of the cases above */
            return 0;
        }
    }
    size_t mid = (lo + hi) / 2;
    acc += t->lazy[x];
    return capped_rec(t, q, 2 * x, lo, mid, acc) + capped_rec(t, q, 2 * x + 1, mid, hi, acc);
}

double tio_stree_capped(struct tio_stree *t, size_t l, size_t r, int64_t c, int64_t s) {
    const struct capped_query q = { .l = l, .r = TIO_MIN(r, t->n), .c = c, .s = s, .by_leaf = 0 };
    return l < r ? capped_rec(t, &q, 1, 0, t->size, 0) : 0;
}

double tio_stree_crit(struct tio_stree *t, size_t l, size_t r, int64_t c) {
    const struct capped_query q = { .l = l, .r = TIO_MIN(r, t->n), .c = c, .s = 1, .by_leaf = 1 };
    return l < r ? capped_rec(t, &q, 1, 0, t->size, 0) : 0;
}

static size_t last_rec(const struct tio_stree *t,
                       size_t x,
                       size_t lo,
                       size_t hi,
                       size_t l,
                       size_t r,
                       int64_t acc,
                       int64_t thr) {
    if (r <= lo || hi <= l || t->mx[x] + acc <= thr) {
        return SIZE_MAX;
    }
    if (hi - lo == 1) {
        return lo;
    }
    size_t mid = (lo + hi) / 2;
    acc += t->lazy[x];
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
        if (t->lazy[x]) {
            for (size_t c = 2 * x; c <= 2 * x + 1; c++) {
                t->mn[c] += t->lazy[x];
                t->mx[c] += t->lazy[x];
                t->lazy[c] += t->lazy[x];
                t->svt[c] += (double)t->lazy[x] * t->st[c];
            }
            t->lazy[x] = 0;
        }
    }
    for (size_t i = 0; i < t->n; i++) {
        out[i] = t->mx[t->size + i];
    }
}
