/* One least significant digit first radix sort for every element type that sorts by an unsigned
 * integer key (the planner's relaxation keys and moves, the analysis's period durations). */
#ifndef TIO_RADIX_SORT_H
#define TIO_RADIX_SORT_H

#include <stddef.h>
#include <stdint.h>

#include <teraio/alloc_internal.h>

/* 11 bits per pass: a pass's 2048 counters (16 KB) stay in L1, and a 32-bit key takes 3
 * passes. */
#define TIO_RADIX_BITS   11
#define TIO_RADIX_DIGITS ((size_t)1 << TIO_RADIX_BITS)

static inline size_t tio_radix_digit(uint64_t key, unsigned shift) {
    return (size_t)(key >> shift) & (TIO_RADIX_DIGITS - 1);
}

/* Passes for keys up to max_key: one per 11-bit digit up to its highest (0 for max_key 0). */
static inline unsigned tio_radix_passes(uint64_t max_key) {
    unsigned p = 0;
    for (; p * TIO_RADIX_BITS < 64 && (max_key >> (p * TIO_RADIX_BITS)) != 0; p++) {
    }
    return p;
}

/* Turns a pass's digit counts into each digit's first slot. Returns 0 when one digit holds all
 * n keys: that pass would only copy, so it is skipped. */
static inline int tio_radix_offsets(size_t *cnt, size_t first_digit, size_t n) {
    if (cnt[first_digit] == n) {
        return 0;
    }
    size_t sum = 0;
    for (size_t d = 0; d < TIO_RADIX_DIGITS; d++) {
        size_t c = cnt[d];
        cnt[d] = sum;
        sum += c;
    }
    return 1;
}

/* Defines `static TYPE *NAME(TYPE *a, TYPE *tmp, size_t n, uint64_t max_key)`: sorts a[n] by
 * KEY(const TYPE *) (a function or function-like macro, inlined: no call through a pointer in
 * the loops), every key at most max_key, stably. One read of the elements counts the digits of
 * every pass; then each pass reads the elements in order and appends each to its digit's run,
 * between `a` and `tmp` ([n]): memory is streamed, not visited at random. Passes stop at
 * max_key's highest digit; a pass whose digit is the same for every key is skipped. Returns
 * where the sorted elements are (a or tmp), or NULL when the counters (16 KB a pass) cannot
 * be allocated. */
// NOLINTBEGIN(bugprone-macro-parentheses): TYPE is a type name, KEY a function name
#define TIO_RADIX_SORT_DEFINE(NAME, TYPE, KEY)                                           \
    static TYPE *NAME(TYPE *a, TYPE *tmp, size_t n, uint64_t max_key) {                  \
        unsigned np = n > 0 ? tio_radix_passes(max_key) : 0;                             \
        size_t *cnt = tio_calloc((size_t)(np ? np : 1) * TIO_RADIX_DIGITS, sizeof *cnt); \
        if (!cnt) {                                                                      \
            return NULL;                                                                 \
        }                                                                                \
        for (size_t i = 0; i < n && np > 0; i++) {                                       \
            uint64_t k = KEY(&a[i]);                                                     \
            for (unsigned p = 0; p < np; p++) {                                          \
                cnt[p * TIO_RADIX_DIGITS + tio_radix_digit(k, p * TIO_RADIX_BITS)]++;    \
            }                                                                            \
        }                                                                                \
        for (unsigned p = 0; p < np; p++) {                                              \
            size_t *c = cnt + p * TIO_RADIX_DIGITS;                                      \
            unsigned sh = p * TIO_RADIX_BITS;                                            \
            if (!tio_radix_offsets(c, tio_radix_digit(KEY(&a[0]), sh), n)) {             \
                continue;                                                                \
            }                                                                            \
            for (size_t i = 0; i < n; i++) {                                             \
                tmp[c[tio_radix_digit(KEY(&a[i]), sh)]++] = a[i];                        \
            }                                                                            \
            TYPE *sw = a;                                                                \
            a = tmp;                                                                     \
            tmp = sw;                                                                    \
        }                                                                                \
        tio_free(cnt);                                                                   \
        return a;                                                                        \
    }
// NOLINTEND(bugprone-macro-parentheses)

#endif
