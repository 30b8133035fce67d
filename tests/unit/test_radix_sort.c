/* The shared radix sort (common/radix_sort.h) against qsort on random keys: the same order, and
 * equal keys in their input order (qsort, not stable itself, breaks ties by the input index). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/radix_sort.h"
#include "tio_test.h"

static uint64_t rng_state = 1;

static uint64_t rnd64(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

struct item {
    uint64_t key;
    uint32_t idx; /* input position: what stability keeps in order among equal keys */
    uint32_t pad; /* no padding bytes: whole arrays compare with memcmp */
};

static inline uint64_t item_key(const struct item *it) {
    return it->key;
}

TIO_RADIX_SORT_DEFINE(sort_items, struct item, item_key)

static int item_cmp(const void *a, const void *b) {
    const struct item *x = a, *y = b;
    if (x->key != y->key) {
        return x->key < y->key ? -1 : 1;
    }
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* n keys: (random & mask) | set, so mask picks how many digits vary (few values: many ties) and
 * set fixes digits every key shares (passes skipped); but `most` of every 8 keys are just `set`
 * (one digit holds most keys, not all: that pass is not skipped). */
static void check_sort(size_t n, uint64_t mask, uint64_t set, unsigned most) {
    struct item *buf = calloc(3 * (n + 1), sizeof *buf); /* the input, tmp, the expected */
    CHECK(buf != NULL);
    struct item *a = buf, *tmp = buf + n + 1, *want = buf + 2 * (n + 1);
    uint64_t max = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t key = rnd64() % 8 < most ? set : (rnd64() & mask) | set;
        a[i] = (struct item){ .key = key, .idx = (uint32_t)i };
        max = a[i].key > max ? a[i].key : max;
    }
    memcpy(want, a, n * sizeof *a);
    qsort(want, n, sizeof *want, item_cmp);
    const struct item *got = sort_items(a, tmp, n, max);
    CHECK(got == a || got == tmp);
    CHECK_EQ_I(memcmp(got, want, n * sizeof *got), 0);
    free(buf);
}

TIO_TEST(sorts_like_qsort_and_keeps_ties_in_order) {
    check_sort(0, 0, 0, 0);
    check_sort(1, UINT64_MAX, 0, 0);
    check_sort(500, 0, 0, 0);                      /* every key 0: no pass */
    check_sort(5000, 7, 0, 0);                     /* 8 values: ties everywhere, one pass */
    check_sort(5000, 0xfff, 0, 0);                 /* the highest digit 0 or 1: still its pass */
    check_sort(5000, 0xff00ff, 0, 0);              /* three passes, ties */
    check_sort(5000, UINT64_MAX, 0, 0);            /* every digit, to bit 63 */
    check_sort(5000, 0x7ff, (uint64_t)5 << 22, 0); /* a shared middle digit: its pass skipped */
    check_sort(5000, 0xfff800, 1, 0);              /* a shared lowest digit */
    check_sort(5000, 0xffffff, 3, 7);              /* 7 keys in 8 equal: no pass skipped */
}

int main(void) {
    RUN(sorts_like_qsort_and_keeps_ties_in_order);
    return tio_test_done();
}
