/* The planner's candidate heap (plan/planner_teraio_impl.h) against a sorted list: pops come in
 * order of key (highest first), ties in the periods' tie order (their rank, or their index when
 * the planner has no ranks), whatever order they were pushed in. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <teraio/teraio.h>

#include "plan/planner_teraio_impl.h"
#include "tio_test.h"

#define N_CANDS 500

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint64_t rnd(uint64_t n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state % n;
}

struct entry {
    double key;
    uint32_t period, place, version;
};

static int entry_cmp(const void *a, const void *b) {
    const struct entry *x = a, *y = b;
    if (x->key != y->key) {
        return x->key > y->key ? -1 : 1;
    }
    return (x->place > y->place) - (x->place < y->place);
}

/* Push N_CANDS candidates with keys of few distinct values (so most pops break a tie), pop
 * half, push the popped ones back with lower keys, then pop every entry. */
static void check_heap(int with_rank) {
    uint32_t rank[N_CANDS], unrank[N_CANDS], version[N_CANDS];
    for (uint32_t i = 0; i < N_CANDS; i++) {
        unrank[i] = i;
        version[i] = i * 7u;
    }
    for (uint32_t i = N_CANDS - 1; i > 0 && with_rank; i--) { /* a random tie order */
        uint32_t j = (uint32_t)rnd(i + 1), t = unrank[i];
        unrank[i] = unrank[j];
        unrank[j] = t;
    }
    for (uint32_t i = 0; i < N_CANDS; i++) {
        rank[unrank[i]] = i;
    }
    struct planner p;
    memset(&p, 0, sizeof p);
    p.version = version;
    p.rank = with_rank ? rank : NULL;
    p.unrank = with_rank ? unrank : NULL;
    struct entry want[N_CANDS];
    for (uint32_t i = 0; i < N_CANDS; i++) {
        want[i] = (struct entry){ (double)(1 + rnd(9)), i, with_rank ? rank[i] : i, i * 7u };
        CHECK_OK(pt_heap_push(&p, want[i].key, i));
    }
    size_t n = N_CANDS;
    for (int round = 0; round < 2; round++) {
        qsort(want, n, sizeof *want, entry_cmp);
        size_t pops = round == 0 ? n / 2 : n;
        for (size_t i = 0; i < pops; i++) {
            struct cand top = pt_heap_top(&p);
            struct cand c = pt_heap_pop(&p);
            CHECK(c.key == want[i].key && top.key == c.key);
            CHECK_EQ_U(c.period, want[i].period);
            CHECK_EQ_U(top.period, c.period);
            CHECK_EQ_U(c.version, want[i].version);
        }
        CHECK_EQ_U(p.n_heap, n - pops);
        if (round == 0) { /* the popped half back in, lower (as a re-evaluated candidate) */
            for (size_t i = 0; i < pops; i++) {
                want[i].key = (double)rnd((uint64_t)want[i].key);
                CHECK_OK(pt_heap_push(&p, want[i].key, want[i].period));
            }
        }
    }
    tio_free(p.heap);
}

TIO_TEST(pops_in_key_then_tie_order) {
    check_heap(0);
    check_heap(1);
}

/* The tie order of np periods given as (tensor, start) pairs ts[2 i], ts[2 i + 1]: rank and
 * unrank from the planner against the test's own sort of the pairs. */
static int pair_after(const uint32_t *ts, uint32_t a, uint32_t b) {
    return ts[2 * a] > ts[2 * b] || (ts[2 * a] == ts[2 * b] && ts[2 * a + 1] > ts[2 * b + 1]);
}

static void check_rank(const uint32_t *ts, size_t np) {
    struct tio_pperiod pp[64];
    uint32_t want[64];
    REQUIRE(np <= 64);
    for (size_t i = 0; i < np; i++) {
        memset(&pp[i], 0, sizeof pp[i]);
        pp[i].tensor = ts[2 * i] & ((UINT32_C(1) << 30) - 1); /* the field's 30 bits */
        pp[i].start = ts[2 * i + 1];
        size_t j = i; /* insertion of period i into want[0, i) */
        for (; j > 0 && pair_after(ts, want[j - 1], (uint32_t)i); j--) {
            want[j] = want[j - 1];
        }
        want[j] = (uint32_t)i;
    }
    struct tio_pmodel m;
    memset(&m, 0, sizeof m);
    m.periods = pp;
    m.n_periods = np;
    struct planner p;
    memset(&p, 0, sizeof p);
    p.m = &m;
    CHECK_OK(pt_build_rank(&p));
    REQUIRE(p.rank != NULL && p.unrank != NULL);
    size_t bad = 0;
    for (size_t i = 0; i < np; i++) {
        bad += p.unrank[i] != want[i] || p.rank[want[i]] != i;
    }
    CHECK_EQ_U(bad, 0);
    tio_free(p.rank);
    tio_free(p.unrank);
}

/* Grouped by tensor with each tensor's folded wrap-around period (start 0) last, a tensor of
 * 40 periods out of order, and periods not grouped by tensor at all. */
TIO_TEST(rank_is_tensor_then_start) {
    static const uint32_t folded[] = { 0, 5, 0, 9, 0, 0, 1, 3, 1, 7, 2, 4, 3, 8, 3, 0 };
    check_rank(folded, sizeof folded / sizeof folded[0] / 2);
    uint32_t long_run[2 * 42] = { 0, 1 };
    for (uint32_t i = 1; i < 41; i++) {
        long_run[2 * i] = 1;
        long_run[2 * i + 1] = (i * 7) % 40; /* distinct starts, scrambled */
    }
    long_run[2 * 41] = 2;
    long_run[2 * 41 + 1] = 0;
    check_rank(long_run, 42);
    static const uint32_t scattered[] = { 2, 4, 0, 5, 1, 3, 0, 1, 2, 0 };
    check_rank(scattered, sizeof scattered / sizeof scattered[0] / 2);
}

static int relax_cmp(const void *a, const void *b) {
    const struct pt_relax_key *x = a, *y = b;
    if (x->pre != y->pre) {
        return x->pre < y->pre ? -1 : 1;
    }
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* The relaxation's order against qsort by (pre, index): starts of few distinct values (ties)
 * that differ in every 11-bit digit of a 30-bit range, so each radix pass matters. */
static void check_relax_sort(size_t n, uint64_t span) {
    struct pt_relax_key *keys = malloc((n ? n : 1) * sizeof *keys);
    struct pt_relax_key *tmp = malloc((n ? n : 1) * sizeof *tmp);
    struct pt_relax_key *want = malloc((n ? n : 1) * sizeof *want);
    CHECK(keys && tmp && want);
    uint64_t lim = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t pre = span ? (rnd(40) * 0x9e3779b1u) % span : 0;
        keys[i] = (struct pt_relax_key){ .pre = pre, .idx = (uint32_t)i };
        lim = pre > lim ? pre : lim;
    }
    memcpy(want, keys, n * sizeof *keys);
    qsort(want, n, sizeof *want, relax_cmp);
    const struct pt_relax_key *got = pt_relax_sort(keys, tmp, n, lim);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        bad += got[i].pre != want[i].pre || got[i].idx != want[i].idx;
    }
    CHECK_EQ_U(bad, 0);
    free(keys);
    free(tmp);
    free(want);
}

TIO_TEST(relax_order_is_start_then_index) {
    check_relax_sort(0, 0);
    check_relax_sort(1, 1u << 30);
    check_relax_sort(300, 0);         /* every start 0: no pass */
    check_relax_sort(3000, 1u << 10); /* one pass */
    check_relax_sort(3000, 1u << 30); /* three passes */
}

int main(void) {
    RUN(pops_in_key_then_tie_order);
    RUN(rank_is_tensor_then_start);
    RUN(relax_order_is_start_then_index);
    return tio_test_done();
}
