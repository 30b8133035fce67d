/* Block cache basics: size classes, parameters and their defaults, huge pages, alignment, hot
 * reuse, unknown and double releases, discard. Bounds: test_blockcache_bounds.c; random
 * sequences, threads, fork and prefault: test_blockcache_stress.c. */
#include "blockcache_util.h"

TIO_TEST(class_size_rounding) {
    CHECK_EQ_U(tio_bcache_class_size(0), 0);
    CHECK_EQ_U(tio_bcache_class_size(1), 64 * KiB);
    CHECK_EQ_U(tio_bcache_class_size(64 * KiB), 64 * KiB);
    CHECK_EQ_U(tio_bcache_class_size(64 * KiB + 1), 128 * KiB);
    CHECK_EQ_U(tio_bcache_class_size(2 * MiB - 1), 2 * MiB);
    CHECK_EQ_U(tio_bcache_class_size(2 * MiB), 2 * MiB);
    CHECK_EQ_U(tio_bcache_class_size(2 * MiB + 1), 2 * MiB + 512 * KiB);
    CHECK_EQ_U(tio_bcache_class_size(3 * MiB), 3 * MiB);
    CHECK_EQ_U(tio_bcache_class_size(16 * MiB - 1), 16 * MiB);
    CHECK_EQ_U(tio_bcache_class_size(16 * MiB), 16 * MiB);
    CHECK_EQ_U(tio_bcache_class_size(16 * MiB + 1), 18 * MiB);
    CHECK_EQ_U(tio_bcache_class_size(17 * MiB), 18 * MiB);
    CHECK_EQ_U(tio_bcache_class_size(40 * MiB), 40 * MiB);
    CHECK_EQ_U(tio_bcache_class_size(1ull << 30), 1ull << 30);
    CHECK_EQ_U(tio_bcache_class_size((1ull << 30) + 1), (1ull << 30) + 2 * MiB);
    CHECK_EQ_U(tio_bcache_class_size(UINT64_MAX), 0);
    CHECK_EQ_U(tio_bcache_class_size(UINT64_MAX - 1), 0);
    CHECK_EQ_U(tio_bcache_class_size(UINT64_MAX - 2 * MiB + 2), 0); /* would round to 2^64 */

    /* Every class boundary +-1 up to 64 MiB, against the reference. */
    int bad = 0;
    for (uint64_t b = 64 * KiB; b <= 64 * MiB; b += 64 * KiB) {
        for (uint64_t d = 0; d < 3; d++) {
            uint64_t x = b + d - 1;
            if (tio_bcache_class_size(x) != ref_class(x) && bad++ < 5) {
                TIO_T_FAIL("class_size(%" PRIu64 ") = %" PRIu64 ", want %" PRIu64, x,
                           tio_bcache_class_size(x), ref_class(x));
            }
        }
    }
    /* Random sizes up to 1 TiB: the reference, >= the request, monotonic. */
    uint64_t s = 0x1234567ull;
    for (int i = 0; i < 20000; i++) {
        uint64_t x = 1 + rng_next(&s) % (1ull << (1 + rng_next(&s) % 40));
        uint64_t got = tio_bcache_class_size(x);
        if ((got != ref_class(x) || got < x || tio_bcache_class_size(x + 1) < got) && bad++ < 5) {
            TIO_T_FAIL("class_size(%" PRIu64 ") = %" PRIu64 ", want %" PRIu64, x, got,
                       ref_class(x));
        }
    }
    CHECK_EQ_I(bad, 0);
}

TIO_TEST(params_default_and_null_params) {
    struct tio_bcache_params p = tio_bcache_params_default();
    CHECK_EQ_U(p.cache_bytes, 0);
    CHECK_EQ_I(p.follow_peak, 1);
    CHECK_EQ_I(p.huge_pages, 1);
    CHECK_EQ_U(p.max_mapped_bytes, 0);
    CHECK_EQ_U(p.cold_bytes_min, 256 * MiB);

    tio_bcache_free(NULL); /* a no-op */

    struct tio_bcache *c = mk(NULL);
    REQUIRE(c != NULL);
    struct tio_bcache_stats s0 = st(c);
    struct tio_bcache_stats zero;
    memset(&zero, 0, sizeof zero);
    CHECK_STATS_SAME(s0, zero);

    /* follow_peak 1, cache_bytes 0: a released block stays hot within the room under the peak. */
    void *a = NULL, *b = NULL, *d = NULL;
    CHECK_OK(tio_bcache_alloc(c, 4 * MiB, &a));
    REQUIRE_OR(a != NULL, tio_bcache_free(c));
    memset(a, 0x11, 4 * MiB);
    CHECK_OK(tio_bcache_release(c, a));
    struct tio_bcache_stats s = st(c);
    CHECK_EQ_U(s.hot_bytes, 4 * MiB);
    CHECK_EQ_U(s.cold_bytes, 0);
    CHECK_EQ_U(s.peak_in_use_bytes, 4 * MiB);

    /* resize_kept 1: a 6 MiB request finds no hot 6 MiB block and grows the hot 4 MiB one
     * (moved to a new aligned mapping): its 4 MiB kept, 2 MiB new (zeros), one block. */
    CHECK_OK(tio_bcache_alloc(c, 6 * MiB, &b));
    REQUIRE_OR(b != NULL, tio_bcache_free(c));
    CHECK(aligned_2m(b));
    CHECK_EQ_U(count_not(b, 4 * MiB, 0x11), 0);
    CHECK_EQ_U(count_nonzero((char *)b + 4 * MiB, 2 * MiB), 0);
    s = st(c);
    CHECK_EQ_U(s.resized_hits, 1);
    CHECK_EQ_U(s.grown_bytes, 2 * MiB);
    CHECK_EQ_U(s.faulting_bytes, 6 * MiB); /* the first block's 4 MiB, then the growth */
    CHECK_EQ_U(s.maps, 1);
    CHECK_EQ_U(s.blocks, 1);
    CHECK_EQ_U(s.mapped_bytes, 6 * MiB);
    memset(b, 0x22, 6 * MiB);
    CHECK_OK(tio_bcache_release(c, b));
    s = st(c);
    CHECK_EQ_U(s.hot_bytes, 6 * MiB);
    CHECK_EQ_U(s.cold_bytes, 0);
    /* 8 MiB: grown again; nothing went cold, nothing was evicted or unmapped. */
    CHECK_OK(tio_bcache_alloc(c, 8 * MiB, &d));
    s = st(c);
    CHECK_EQ_U(s.in_use_bytes, 8 * MiB);
    CHECK_EQ_U(s.peak_in_use_bytes, 8 * MiB);
    CHECK_EQ_U(s.hot_bytes, 0);
    CHECK_EQ_U(s.cold_bytes, 0);
    CHECK_EQ_U(s.unmapped_bytes, 0);
    CHECK_EQ_U(s.mapped_bytes, 8 * MiB);
    CHECK_EQ_U(s.blocks, 1);
    CHECK_EQ_U(s.maps, 1);
    CHECK_EQ_U(s.resized_hits, 2);
    CHECK_EQ_U(s.evicted_bytes, 0);
    if (d) {
        CHECK_EQ_U(count_not(d, 6 * MiB, 0x22), 0);
    }
    /* huge_pages 1: the block's mapping is advised for huge pages. */
    if (d && thp_available()) {
        CHECK_EQ_I(vma_has_flag(d, "hg"), 1);
    }
    if (d) {
        CHECK_OK(tio_bcache_release(c, d));
    }
    tio_bcache_free(c);
}

TIO_TEST(huge_pages_param) {
    if (!thp_available()) {
        SKIP_CASE("transparent huge pages are not available (no "
                  "/sys/kernel/mm/transparent_hugepage)");
    }
    struct tio_bcache_params p = params(0, 1, 0, 256 * MiB);
    struct tio_bcache *c = mk(&p);
    p.huge_pages = 0;
    struct tio_bcache *n = mk(&p);
    REQUIRE_OR(c && n, (tio_bcache_free(c), tio_bcache_free(n)));
    void *a = NULL, *b = NULL, *x = NULL;
    CHECK_OK(tio_bcache_alloc(c, 4 * MiB, &a));
    CHECK_OK(tio_bcache_alloc(c, 2 * MiB, &b));
    CHECK_OK(tio_bcache_alloc(n, 4 * MiB, &x));
    REQUIRE_OR(a && b && x, (tio_bcache_free(c), tio_bcache_free(n)));
    CHECK_EQ_I(vma_has_flag(a, "hg"), 1);
    CHECK_EQ_I(vma_has_flag(b, "hg"), 1);
    CHECK_EQ_I(vma_has_flag(x, "hg"), 0);
    tio_bcache_free(c);
    tio_bcache_free(n);
}

TIO_TEST(alloc_alignment_and_block_size) {
    struct tio_bcache *c = mk(NULL);
    REQUIRE(c != NULL);
    static const uint64_t sizes[] = {
        1,       4095,        64 * KiB,        64 * KiB + 1, 1 * MiB + 3, 2 * MiB - 1,
        2 * MiB, 2 * MiB + 1, 5 * MiB + 12345, 16 * MiB + 1, 33 * MiB
    };
    enum { N = sizeof sizes / sizeof sizes[0] };
    void *ptrs[N];
    uint64_t sum = 0;
    for (int i = 0; i < N; i++) {
        ptrs[i] = NULL;
        CHECK_OK(tio_bcache_alloc(c, sizes[i], &ptrs[i]));
        if (!ptrs[i]) {
            continue;
        }
        CHECK(aligned_2m(ptrs[i]));
        uint64_t cls = ref_class(sizes[i]);
        sum += cls;
        CHECK_EQ_U(tio_bcache_block_size(c, ptrs[i]), cls);
        /* Writable over the whole capacity. */
        memset(ptrs[i], (int)(0x30 + i), (size_t)cls);
        CHECK_EQ_U(resident_pages(ptrs[i], cls), pages_of(cls));
        /* An interior pointer is not a block. */
        CHECK_EQ_U(tio_bcache_block_size(c, (char *)ptrs[i] + 4096), 0);
        CHECK_EQ_U(tio_bcache_block_size(c, (char *)ptrs[i] + 1), 0);
    }
    /* No two blocks overlap, every block keeps its own bytes. */
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < N; j++) {
            if (i == j || !ptrs[i] || !ptrs[j]) {
                continue;
            }
            uintptr_t a0 = (uintptr_t)ptrs[i], b0 = (uintptr_t)ptrs[j];
            CHECK(a0 + ref_class(sizes[i]) <= b0 || b0 + ref_class(sizes[j]) <= a0);
        }
        if (ptrs[i]) {
            CHECK_EQ_U(count_not(ptrs[i], ref_class(sizes[i]), (uint8_t)(0x30 + i)), 0);
        }
    }
    struct tio_bcache_stats s = st(c);
    CHECK_EQ_U(s.in_use_bytes, sum);
    CHECK_EQ_U(s.peak_in_use_bytes, sum);
    CHECK_EQ_U(s.mapped_bytes, sum);
    CHECK_EQ_U(s.allocs, N);
    CHECK_EQ_U(s.maps, N);
    CHECK_EQ_U(s.blocks, N);
    CHECK_CONSISTENT(s);

    /* Unknown pointers. */
    int local = 0;
    CHECK_EQ_U(tio_bcache_block_size(c, &local), 0);
    CHECK_EQ_U(tio_bcache_block_size(c, NULL), 0);

    /* Bad sizes: 0 and too large to round are TIO_EINVAL, with a detail that names the size;
     * nothing counted. The block cache speaks the library's status codes (teraio/status.h). */
    void *z = (void *)&local;
    struct tio_bcache_stats before = st(c);
    CHECK_RC(tio_bcache_alloc(c, 0, &z), TIO_EINVAL);
    CHECK_ERR_HAS("bytes 0");
    CHECK_RC(tio_bcache_alloc(c, UINT64_MAX, &z), TIO_EINVAL);
    CHECK_ERR_HAS("bytes 18446744073709551615");
    CHECK_RC(tio_bcache_alloc(NULL, 1, &z), TIO_EINVAL);
    CHECK_RC(tio_bcache_alloc(c, 1, NULL), TIO_EINVAL);
    CHECK_RC(tio_bcache_new(NULL, NULL), TIO_EINVAL);
    /* Roundable but unmappable: TIO_ENOMEM (or TIO_EINVAL if the class is refused as too
     * large). */
    int want = tio_bcache_class_size(1ull << 60) ? TIO_ENOMEM : TIO_EINVAL;
    CHECK_RC(tio_bcache_alloc(c, 1ull << 60, &z), want);
    struct tio_bcache_stats after = st(c);
    CHECK_STATS_SAME(before, after);

    /* Released blocks are no longer in use. */
    for (int i = 0; i < N; i++) {
        if (ptrs[i]) {
            CHECK_OK(tio_bcache_release(c, ptrs[i]));
            CHECK_EQ_U(tio_bcache_block_size(c, ptrs[i]), 0);
        }
    }
    s = st(c);
    CHECK_EQ_U(s.in_use_bytes, 0);
    CHECK_EQ_U(s.peak_in_use_bytes, sum);
    CHECK_CONSISTENT(s);
    tio_bcache_free(c);
}

TIO_TEST(hot_reuse_keeps_contents) {
    struct tio_bcache *c = mk(NULL);
    REQUIRE(c != NULL);
    void *a = NULL, *b = NULL, *d = NULL;
    CHECK_OK(tio_bcache_alloc(c, 3 * MiB, &a));
    REQUIRE_OR(a != NULL, tio_bcache_free(c));
    memset(a, 0x77, 3 * MiB);
    CHECK_OK(tio_bcache_release(c, a));
    struct tio_bcache_stats s1 = st(c);
    CHECK_EQ_U(s1.hot_bytes, 3 * MiB);
    CHECK_EQ_U(s1.in_use_bytes, 0);
    CHECK_EQ_U(s1.mapped_bytes, 3 * MiB);
    CHECK_EQ_U(s1.blocks, 1);

    /* A smaller request of the same class: the same block, contents kept, no new mapping. */
    CHECK_OK(tio_bcache_alloc(c, 3 * MiB - 100 * KiB, &b));
    CHECK(b == a);
    struct tio_bcache_stats s2 = st(c);
    CHECK_EQ_U(s2.hot_hits, s1.hot_hits + 1);
    CHECK_EQ_U(s2.cold_hits, s1.cold_hits);
    CHECK_EQ_U(s2.maps, s1.maps);
    CHECK_EQ_U(s2.allocs, s1.allocs + 1);
    CHECK_EQ_U(s2.hot_bytes, 0);
    CHECK_EQ_U(s2.in_use_bytes, 3 * MiB);
    CHECK_EQ_U(s2.mapped_bytes, 3 * MiB);
    if (b == a) {
        /* the bytes asked for keep their contents; past them (rounded up to 64 KiB) the pages
         * were handed back: not resident, zeros */
        const uint64_t used = 3 * MiB - 64 * KiB;
        CHECK_EQ_U(count_not(b, 3 * MiB - 100 * KiB, 0x77), 0);
        CHECK_EQ_I(resident_pages((char *)b + used, 64 * KiB), 0);
        CHECK_EQ_U(count_nonzero((char *)b + used, 64 * KiB), 0);
        CHECK_EQ_U(tio_bcache_block_size(c, b), 3 * MiB);
    }

    /* Another class maps a new block. */
    CHECK_OK(tio_bcache_alloc(c, 3 * MiB + 1, &d));
    CHECK(d != NULL && d != a);
    struct tio_bcache_stats s3 = st(c);
    CHECK_EQ_U(s3.maps, s2.maps + 1);
    CHECK_EQ_U(s3.hot_hits, s2.hot_hits);
    CHECK_EQ_U(s3.in_use_bytes, 3 * MiB + 3 * MiB + 512 * KiB);
    CHECK_EQ_U(s3.blocks, 2);
    if (d) {
        CHECK_EQ_U(tio_bcache_block_size(c, d), 3 * MiB + 512 * KiB);
        CHECK_EQ_U(count_nonzero(d, 3 * MiB + 512 * KiB), 0); /* fresh: zeros */
        CHECK_OK(tio_bcache_release(c, d));
    }
    if (b) {
        CHECK_OK(tio_bcache_release(c, b));
    }
    CHECK_CONSISTENT(st(c));
    tio_bcache_free(c);
}

TIO_TEST(release_unknown_and_double) {
    struct tio_bcache *c = mk(NULL);
    struct tio_bcache *other = mk(NULL);
    REQUIRE_OR(c && other, (tio_bcache_free(c), tio_bcache_free(other)));
    void *a = NULL, *o = NULL;
    CHECK_OK(tio_bcache_alloc(c, 4 * MiB, &a));
    CHECK_OK(tio_bcache_alloc(other, 4 * MiB, &o));
    REQUIRE_OR(a && o, (tio_bcache_free(c), tio_bcache_free(other)));
    memset(a, 0x42, 4 * MiB);
    struct tio_bcache_stats s0 = st(c);
    int local = 0;
    CHECK_RC(tio_bcache_release(c, &local), TIO_ENOTFOUND);
    CHECK_RC(tio_bcache_release(c, NULL), TIO_ENOTFOUND);
    CHECK_RC(tio_bcache_release(c, (char *)a + 4096), TIO_ENOTFOUND); /* interior */
    CHECK_RC(tio_bcache_release(c, o), TIO_ENOTFOUND);                /* another cache's block */
    CHECK_RC(tio_bcache_discard(c, &local), TIO_ENOTFOUND);
    CHECK_RC(tio_bcache_discard(c, (char *)a + 4096), TIO_ENOTFOUND);
    CHECK_RC(tio_bcache_discard(c, o), TIO_ENOTFOUND);
    struct tio_bcache_stats s1 = st(c);
    CHECK_STATS_SAME(s0, s1);
    /* Nothing was done: a is still in use and intact, o still belongs to other. */
    CHECK_EQ_U(tio_bcache_block_size(c, a), 4 * MiB);
    CHECK_EQ_U(resident_pages(a, 4 * MiB), pages_of(4 * MiB));
    CHECK_EQ_U(count_not(a, 4 * MiB, 0x42), 0);
    CHECK_EQ_U(tio_bcache_block_size(other, o), 4 * MiB);
    CHECK_EQ_U(tio_bcache_block_size(c, o), 0);

    CHECK_OK(tio_bcache_release(c, a));
    struct tio_bcache_stats s2 = st(c);
    CHECK_RC(tio_bcache_release(c, a), TIO_ENOTFOUND); /* double release */
    CHECK_RC(tio_bcache_discard(c, a), TIO_ENOTFOUND); /* kept, not in use */
    struct tio_bcache_stats s3 = st(c);
    CHECK_STATS_SAME(s2, s3);
    CHECK_EQ_U(s3.hot_bytes, 4 * MiB);
    CHECK_EQ_U(resident_pages(a, 4 * MiB), pages_of(4 * MiB)); /* the failed discard did nothing */
    CHECK_OK(tio_bcache_release(other, o));
    tio_bcache_free(c);
    tio_bcache_free(other);
}

TIO_TEST(discard_hands_pages_back) {
    struct tio_bcache *c = mk(NULL);
    REQUIRE(c != NULL);
    const uint64_t sz = 4 * MiB;
    void *a = NULL, *b = NULL;
    CHECK_OK(tio_bcache_alloc(c, sz, &a));
    REQUIRE_OR(a != NULL, tio_bcache_free(c));
    memset(a, 0xAB, sz);
    CHECK_EQ_I(resident_pages(a, sz), pages_of(sz));
    struct tio_bcache_stats s0 = st(c);
    CHECK_OK(tio_bcache_discard(c, a));
    CHECK_EQ_I(resident_pages(a, sz), 0);
    struct tio_bcache_stats s1 = st(c);
    CHECK_EQ_U(s1.discarded_bytes, s0.discarded_bytes + sz);
    CHECK_EQ_U(s1.in_use_bytes, sz); /* still in use */
    CHECK_EQ_U(s1.mapped_bytes, sz);
    CHECK_EQ_U(tio_bcache_block_size(c, a), sz);
    CHECK_EQ_U(count_nonzero(a, sz), 0);
    /* Writable again, then discarded again. */
    memset(a, 0xCD, sz);
    CHECK_EQ_I(resident_pages(a, sz), pages_of(sz));
    CHECK_EQ_U(count_not(a, sz, 0xCD), 0);
    CHECK_OK(tio_bcache_discard(c, a));
    CHECK_EQ_I(resident_pages(a, sz), 0);
    struct tio_bcache_stats s2 = st(c);
    CHECK_EQ_U(s2.discarded_bytes, s1.discarded_bytes + sz);

    /* Discarded then released: kept cold. */
    CHECK_OK(tio_bcache_release(c, a));
    struct tio_bcache_stats s3 = st(c);
    CHECK_EQ_U(s3.cold_bytes, sz);
    CHECK_EQ_U(s3.hot_bytes, 0);
    CHECK_EQ_U(s3.in_use_bytes, 0);
    CHECK_EQ_U(s3.mapped_bytes, sz);
    CHECK_CONSISTENT(s3);
    CHECK_EQ_I(resident_pages(a, sz), 0);

    /* The next request of its class is a cold hit on it, reading zeros. */
    CHECK_OK(tio_bcache_alloc(c, sz - 1000, &b));
    CHECK(b == a);
    struct tio_bcache_stats s4 = st(c);
    CHECK_EQ_U(s4.cold_hits, s3.cold_hits + 1);
    CHECK_EQ_U(s4.hot_hits, s3.hot_hits);
    CHECK_EQ_U(s4.maps, s3.maps);
    CHECK_EQ_U(s4.cold_bytes, 0);
    CHECK_EQ_U(s4.in_use_bytes, sz);
    if (b) {
        CHECK_EQ_U(count_nonzero(b, sz), 0);
        memset(b, 0x77, sz);
        CHECK_EQ_I(resident_pages(b, sz), pages_of(sz));
        CHECK_OK(tio_bcache_release(c, b));
    }
    tio_bcache_free(c);
}

int main(void) {
    RUN(class_size_rounding);
    RUN(params_default_and_null_params);
    RUN(huge_pages_param);
    RUN(alloc_alignment_and_block_size);
    RUN(hot_reuse_keeps_contents);
    RUN(release_unknown_and_double);
    RUN(discard_hands_pages_back);
    return tio_test_done();
}
