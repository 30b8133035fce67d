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

int main(void) {
    RUN(pops_in_key_then_tie_order);
    return tio_test_done();
}
