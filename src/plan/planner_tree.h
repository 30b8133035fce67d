/* Private: a segment tree over the kernels of one iteration (the planned memory curve M'[k]). */
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
 */
struct tio_stree {
    size_t n, size; /* leaves, power of two >= n */
    int64_t *mn, *mx, *lazy;
    double *st;  /* sum of tau */
    double *svt; /* sum of v * tau */
};

int tio_stree_init(struct tio_stree *t, size_t n, const int64_t *v, const double *tau);
void tio_stree_fini(struct tio_stree *t);
void tio_stree_add(struct tio_stree *t, size_t l, size_t r, int64_t d);
int64_t tio_stree_max(struct tio_stree *t, size_t l, size_t r);
double tio_stree_capped(struct tio_stree *t, size_t l, size_t r, int64_t c, int64_t s);
double tio_stree_crit(struct tio_stree *t, size_t l, size_t r, int64_t c);
/* tio_stree_last_above: the largest k in [l, r) with v[k] > thr, or SIZE_MAX. */
size_t tio_stree_last_above(struct tio_stree *t, size_t l, size_t r, int64_t thr);
/* tio_stree_values: write every leaf value to out[n]. */
void tio_stree_values(struct tio_stree *t, int64_t *out);

#endif
