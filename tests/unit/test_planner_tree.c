/* The planner's segment tree (plan/planner_tree.h) against a plain array: range add, max, the
 * capped integral, the time above a line (crit) and the last kernel above a threshold. Values and
 * weights are small integers, so every sum is exact in double and compared with ==. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <teraio/teraio.h>

#include "plan/planner_tree.h"
#include "tio_test.h"

#define N_LEAVES 37 /* not a power of two: padding leaves exist */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(uint64_t n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state % n;
}

static double
ref_capped(const int64_t *v, const double *tau, size_t l, size_t r, int64_t c, int64_t s) {
    double sum = 0;
    for (size_t k = l; k < r && k < N_LEAVES; k++) {
        int64_t over = v[k] - c;
        sum += (double)(over <= 0 ? 0 : (over < s ? over : s)) * tau[k];
    }
    return sum;
}

static double ref_capped_n(
    const int64_t *v, const double *tau, size_t n, size_t l, size_t r, int64_t c, int64_t s) {
    double sum = 0;
    for (size_t k = l; k < r && k < n; k++) {
        int64_t over = v[k] - c;
        sum += (double)(over <= 0 ? 0 : (over < s ? over : s)) * tau[k];
    }
    return sum;
}

static double
ref_crit_n(const int64_t *v, const double *tau, size_t n, size_t l, size_t r, int64_t c) {
    double sum = 0;
    for (size_t k = l; k < r && k < n; k++) {
        sum += v[k] > c ? tau[k] : 0;
    }
    return sum;
}

static double ref_crit(const int64_t *v, const double *tau, size_t l, size_t r, int64_t c) {
    double sum = 0;
    for (size_t k = l; k < r && k < N_LEAVES; k++) {
        sum += v[k] > c ? tau[k] : 0;
    }
    return sum;
}

/* The tree's maximum over [l, r) and its last kernel above c against the plain array v[0, n). */
static void
check_max_and_last(struct tio_stree *t, const int64_t *v, size_t n, size_t l, size_t r, int64_t c) {
    int64_t mx = INT64_MIN;
    size_t last = SIZE_MAX;
    for (size_t k = l; k < r && k < n; k++) {
        mx = v[k] > mx ? v[k] : mx;
        last = v[k] > c ? k : last;
    }
    CHECK_EQ_I(tio_stree_max(t, l, r), mx);
    CHECK_EQ_U(tio_stree_last_above(t, l, r, c), last);
}

TIO_TEST(matches_a_plain_array) {
    int64_t v[N_LEAVES];
    double tau[N_LEAVES];
    for (size_t k = 0; k < N_LEAVES; k++) {
        v[k] = (int64_t)rnd(200);
        tau[k] = (double)(1 + rnd(8));
    }
    struct tio_stree t;
    CHECK_OK(tio_stree_init(&t, N_LEAVES, v, tau));
    for (int step = 0; step < 400; step++) {
        size_t l = (size_t)rnd(N_LEAVES + 1), r = (size_t)rnd(N_LEAVES + 3);
        int64_t c = (int64_t)rnd(260) - 30, s = 1 + (int64_t)rnd(60);
        CHECK(tio_stree_capped(&t, l, r, c, s) == (l < r ? ref_capped(v, tau, l, r, c, s) : 0));
        CHECK(tio_stree_crit(&t, l, r, c) == (l < r ? ref_crit(v, tau, l, r, c) : 0));
        check_max_and_last(&t, v, N_LEAVES, l, r, c);
        /* then move part of the curve */
        size_t al = (size_t)rnd(N_LEAVES), ar = al + (size_t)rnd(N_LEAVES - al + 1);
        int64_t d = (int64_t)rnd(41) - 20;
        tio_stree_add(&t, al, ar, d);
        for (size_t k = al; k < ar; k++) {
            v[k] += d;
        }
    }
    int64_t out[N_LEAVES];
    tio_stree_values(&t, out);
    for (size_t k = 0; k < N_LEAVES; k++) {
        CHECK_EQ_I(out[k], v[k]);
    }
    tio_stree_fini(&t);
}

/* The max-only tree (the host bytes per kernel) against a plain array that starts at 0. */
TIO_TEST(max_tree_matches_a_plain_array) {
    int64_t v[N_LEAVES] = { 0 };
    int n_above = 0, n_under = 0;
    struct tio_mtree t;
    CHECK_OK(tio_mtree_init(&t, N_LEAVES));
    CHECK_EQ_I(tio_mtree_top(&t), 0);
    for (int step = 0; step < 400; step++) {
        size_t al = (size_t)rnd(N_LEAVES), ar = al + (size_t)rnd(N_LEAVES - al + 1);
        int64_t d = (int64_t)rnd(41) - 20;
        tio_mtree_add(&t, al, ar, d);
        for (size_t k = al; k < ar; k++) {
            v[k] += d;
        }
        size_t l = (size_t)rnd(N_LEAVES + 1), r = (size_t)rnd(N_LEAVES + 3);
        int64_t mx = INT64_MIN, top = INT64_MIN;
        for (size_t k = 0; k < N_LEAVES; k++) {
            mx = k >= l && k < r && v[k] > mx ? v[k] : mx;
            top = v[k] > top ? v[k] : top;
        }
        CHECK_EQ_I(tio_mtree_max(&t, l, r), mx);
        CHECK_EQ_I(tio_mtree_top(&t), top);
        /* the threshold query: "some value in [l, r) above thr", for thresholds around the
         * values (every answer of the plain array's scan, both ways) */
        int64_t thr = (int64_t)rnd(61) - 30;
        int above = 0;
        for (size_t k = l; k < r && k < N_LEAVES; k++) {
            above |= v[k] > thr;
        }
        CHECK_EQ_I(tio_mtree_any_above(&t, l, r, thr), above);
        n_above += above;
        n_under += !above;
    }
    CHECK(n_above > 0 && n_under > 0); /* both answers were checked */
    tio_mtree_fini(&t);
}

/* The benefit memo (whole nodes of TIO_STREE_MEMO_SPAN leaves) against a plain array: wide
 * windows asked twice between adds, adds that reach into memo nodes and adds over the whole
 * curve (which change only the pending adds above them), two caps and both kinds of query. */
#define N_WIDE 300 /* 512 leaves with padding: 8 memo nodes */

TIO_TEST(benefit_memo_follows_adds) {
    int64_t v[N_WIDE];
    double tau[N_WIDE];
    for (size_t k = 0; k < N_WIDE; k++) {
        v[k] = (int64_t)rnd(200);
        tau[k] = (double)(1 + rnd(8));
    }
    struct tio_stree t;
    CHECK_OK(tio_stree_init(&t, N_WIDE, v, tau));
    CHECK(t.memo_lo == 8 && t.memo != NULL);
    int used = 0;
    for (int step = 0; step < 300; step++) {
        size_t l = (size_t)rnd(40), r = N_WIDE - (size_t)rnd(40);
        int64_t c = 100, s = step % 3 == 0 ? 25 : 60;
        /* each asked twice in a row (the second answer comes from the memo), the crit query
         * first on odd steps: the step before left its memo, from before the add */
        for (int q = 0; q < 4; q++) {
            if ((q < 2) == (step % 2 == 0)) {
                CHECK(tio_stree_capped(&t, l, r, c, s) == ref_capped_n(v, tau, N_WIDE, l, r, c, s));
            } else {
                CHECK(tio_stree_crit(&t, l, r, c) == ref_crit_n(v, tau, N_WIDE, l, r, c));
            }
        }
        for (size_t x = 0; x < t.memo_lo; x++) {
            used |= t.memo[x].key != INT64_MIN;
        }
        /* a narrow add (into one or two memo nodes) or one over every kernel */
        size_t al = step % 5 == 4 ? 0 : (size_t)rnd(N_WIDE);
        size_t ar =
            step % 5 == 4 ? N_WIDE : al + (size_t)rnd((N_WIDE - al < 20 ? N_WIDE - al : 20) + 1);
        int64_t d = (int64_t)rnd(21) - 10;
        tio_stree_add(&t, al, ar, d);
        for (size_t k = al; k < ar; k++) {
            v[k] += d;
        }
    }
    CHECK(used); /* the memo was filled (and so read back by the repeated queries) */
    tio_stree_fini(&t);
}

/* A random bound of a range over n leaves: often on a block boundary, or one off it, where a
 * node is taken whole or its block is scanned. */
static size_t rnd_edge(size_t n) {
    size_t k = (size_t)rnd(n + 1);
    if (rnd(2)) {
        k = k / TIO_STREE_BLOCK * TIO_STREE_BLOCK + (size_t)rnd(3) - (k >= TIO_STREE_BLOCK);
    }
    return k > n ? n : k;
}

/* Both trees over n leaves (one block, part of one, many blocks with a partial last one)
 * against plain arrays, with ranges that start and end inside blocks and on their edges. */
static void check_blocked(size_t n, int steps) {
    int64_t *v = malloc(n * sizeof *v), *hv = calloc(n, sizeof *hv), *out = malloc(n * sizeof *out);
    double *tau = malloc(n * sizeof *tau);
    CHECK(v && hv && out && tau);
    for (size_t k = 0; k < n; k++) {
        v[k] = (int64_t)rnd(200);
        tau[k] = (double)(1 + rnd(8));
    }
    struct tio_stree t;
    struct tio_mtree h;
    CHECK_OK(tio_stree_init(&t, n, v, tau));
    CHECK_OK(tio_mtree_init(&h, n));
    for (int step = 0; step < steps; step++) {
        size_t l = rnd_edge(n), r = rnd_edge(n) + (size_t)rnd(2);
        int64_t c = (int64_t)rnd(260) - 30, s = 1 + (int64_t)rnd(60);
        CHECK(tio_stree_capped(&t, l, r, c, s) ==
              (l < r ? ref_capped_n(v, tau, n, l, r, c, s) : 0));
        CHECK(tio_stree_crit(&t, l, r, c) == (l < r ? ref_crit_n(v, tau, n, l, r, c) : 0));
        int64_t mx = INT64_MIN, hmx = INT64_MIN, htop = INT64_MIN;
        size_t last = SIZE_MAX;
        for (size_t k = 0; k < n; k++) {
            htop = hv[k] > htop ? hv[k] : htop;
            if (k >= l && k < r) {
                mx = v[k] > mx ? v[k] : mx;
                hmx = hv[k] > hmx ? hv[k] : hmx;
                last = v[k] > c ? k : last;
            }
        }
        CHECK_EQ_I(tio_stree_max(&t, l, r), mx);
        CHECK_EQ_U(tio_stree_last_above(&t, l, r, c), last);
        CHECK_EQ_I(tio_mtree_max(&h, l, r), hmx);
        CHECK_EQ_I(tio_mtree_top(&h), htop);
        int64_t thr = hmx == INT64_MIN ? 0 : hmx - (int64_t)rnd(3); /* at the maximum or under */
        CHECK_EQ_I(tio_mtree_any_above(&h, l, r, thr), l < r && hmx > thr);
        size_t al = rnd_edge(n), ar = al + rnd_edge(n - al);
        int64_t d = (int64_t)rnd(41) - 20;
        tio_stree_add(&t, al, ar, d);
        tio_mtree_add(&h, al, ar, -d);
        for (size_t k = al; k < ar; k++) {
            v[k] += d;
            hv[k] -= d;
        }
    }
    /* the whole range (answered from the root) */
    int64_t amx = INT64_MIN, hamx = INT64_MIN;
    for (size_t k = 0; k < n; k++) {
        amx = v[k] > amx ? v[k] : amx;
        hamx = hv[k] > hamx ? hv[k] : hamx;
    }
    CHECK_EQ_I(tio_stree_max(&t, 0, n), amx);
    CHECK_EQ_I(tio_mtree_max(&h, 0, n + 1), hamx);
    tio_stree_values(&t, out);
    for (size_t k = 0; k < n; k++) {
        CHECK_EQ_I(out[k], v[k]);
    }
    tio_stree_fini(&t);
    tio_mtree_fini(&h);
    free(v);
    free(hv);
    free(out);
    free(tau);
}

TIO_TEST(blocked_trees_match_plain_arrays) {
    const size_t sizes[] = { 1, TIO_STREE_BLOCK - 1, TIO_STREE_BLOCK, TIO_STREE_BLOCK + 1, 700 };
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        check_blocked(sizes[i], 500);
    }
}

/* After tio_stree_keep_max_only (the planner's early prefetch), adds keep the maxima, the last
 * kernel above a line and the values right, from a tree whose sums and memo were in use: over
 * sizes with a partial block and the whole range, then once more over the whole curve. */
static void check_max_only(size_t n, int steps) {
    int64_t *v = malloc(n * sizeof *v), *out = malloc(n * sizeof *out);
    double *tau = malloc(n * sizeof *tau);
    CHECK(v && out && tau);
    for (size_t k = 0; k < n; k++) {
        v[k] = (int64_t)rnd(200);
        tau[k] = (double)(1 + rnd(8));
    }
    struct tio_stree t;
    CHECK_OK(tio_stree_init(&t, n, v, tau));
    for (int step = 0; step < 2 * steps; step++) {
        if (step == steps) {
            CHECK(tio_stree_capped(&t, 0, n, 100, 30) == ref_capped_n(v, tau, n, 0, n, 100, 30));
            tio_stree_keep_max_only(&t); /* half the steps before, half after */
        }
        size_t al = rnd_edge(n), ar = step % 50 == 7 ? n : al + rnd_edge(n - al);
        al = step % 50 == 7 ? 0 : al;
        int64_t d = (int64_t)rnd(41) - 20;
        tio_stree_add(&t, al, ar, d);
        for (size_t k = al; k < ar; k++) {
            v[k] += d;
        }
        size_t l = rnd_edge(n), r = rnd_edge(n) + (size_t)rnd(2);
        check_max_and_last(&t, v, n, l, r, (int64_t)rnd(260) - 30);
    }
    tio_stree_values(&t, out);
    for (size_t k = 0; k < n; k++) {
        CHECK_EQ_I(out[k], v[k]);
    }
    tio_stree_fini(&t);
    free(v);
    free(out);
    free(tau);
}

TIO_TEST(max_only_adds_keep_maxima) {
    const size_t sizes[] = { 1, TIO_STREE_BLOCK + 1, 700 };
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        check_max_only(sizes[i], 300);
    }
}

/* The tabled integrals answer as the tree's descents to the bit: durations that are not small
 * integers (so that the order of the additions shows), a curve moved by adds first (pending adds
 * above the blocks), caps s that make whole nodes answer from their sums (all over c + s, or all
 * within (c, c + s]), ranges inside one block, across many, whole nodes and the whole; then the
 * time above the line from the same table refilled. */
static void check_table(size_t n, int rounds) {
    int64_t *v = malloc(n * sizeof *v);
    double *tau = malloc(n * sizeof *tau);
    CHECK(v && tau);
    for (size_t k = 0; k < n; k++) {
        v[k] = (int64_t)rnd(200);
        tau[k] = 1e-3 * (double)(1 + rnd(1000)) / 7.0;
    }
    struct tio_stree t;
    CHECK_OK(tio_stree_init(&t, n, v, tau));
    int n_over = 0;
    for (int round = 0; round < rounds; round++) {
        for (int a = 0; a < 5; a++) {
            size_t al = rnd_edge(n), ar = al + rnd_edge(n - al);
            int64_t d = (int64_t)rnd(41) - 20;
            tio_stree_add(&t, al, ar, d);
            for (size_t k = al; k < ar; k++) {
                v[k] += d;
            }
        }
        int64_t c = (int64_t)rnd(220) - 10;
        struct tio_stree_table tb;
        CHECK_OK(tio_stree_table_init(&t, c, &tb));
        for (int kind = 0; kind < 3; kind++) {
            int64_t s =
                kind == 2 ? 1 : (kind == 0 ? 1 + (int64_t)rnd(20) : 100 + (int64_t)rnd(200));
            tio_stree_table_fill(&t, &tb, s, kind == 2);
            for (int qi = 0; qi < 150; qi++) {
                size_t l = qi == 0 ? 0 : rnd_edge(n);
                size_t r = qi == 0 ? n : rnd_edge(n) + (size_t)rnd(2);
                if (qi % 10 == 1 && n >= 4 * TIO_STREE_BLOCK) { /* a whole node of 4 blocks */
                    l = rnd(n / (4 * TIO_STREE_BLOCK)) * 4 * TIO_STREE_BLOCK;
                    r = l + 4 * TIO_STREE_BLOCK;
                }
                double want =
                    kind == 2 ? tio_stree_crit(&t, l, r, c) : tio_stree_capped(&t, l, r, c, s);
                CHECK(tio_stree_table_sum(&t, &tb, l, r) == want);
                double sum = 0; /* and it is the integral */
                for (size_t k = l; k < r && k < n; k++) {
                    int64_t over = v[k] - c;
                    sum += over <= 0 ? 0 : (double)(kind == 2 ? 1 : (over < s ? over : s)) * tau[k];
                }
                CHECK(fabs(want - sum) <= 1e-9 * (1 + sum));
                n_over += want > 0;
            }
        }
        tio_stree_table_fini(&tb);
    }
    CHECK(n_over > 0); /* not only empty answers */
    tio_stree_fini(&t);
    free(v);
    free(tau);
}

TIO_TEST(tables_answer_as_the_tree) {
    const size_t sizes[] = { 1, TIO_STREE_BLOCK, TIO_STREE_BLOCK + 1, 700, 5000 };
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        check_table(sizes[i], 20);
    }
}

int main(void) {
    RUN(matches_a_plain_array);
    RUN(max_tree_matches_a_plain_array);
    RUN(benefit_memo_follows_adds);
    RUN(blocked_trees_match_plain_arrays);
    RUN(max_only_adds_keep_maxima);
    RUN(tables_answer_as_the_tree);
    return tio_test_done();
}
