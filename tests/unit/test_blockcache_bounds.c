/* Block cache bounds: follow_peak, cache_bytes, max_mapped and cold bounds (checked with
 * mincore), trim, set_bounds and the resizing of hot blocks. */
#include "blockcache_util.h"

/* Allocates `sz`, fills it with `v` and checks every page is resident. */
static void *alloc_filled(struct tio_bcache *c, uint64_t sz, int v) {
    void *p = NULL;
    CHECK_OK(tio_bcache_alloc(c, sz, &p));
    CHECK(p != NULL);
    if (p) {
        memset(p, v, (size_t)sz);
        CHECK_EQ_I(resident_pages(p, sz), pages_of(sz));
    }
    return p;
}

TIO_TEST(follow_peak_bound) {
    struct tio_bcache_params p = params(0, 1, 0, 256 * MiB);
    struct tio_bcache *c = mk(&p);
    REQUIRE(c != NULL);
    const uint64_t sz = 4 * MiB;
    void *a = alloc_filled(c, sz, 0xA1);
    void *b = alloc_filled(c, sz, 0xB2);
    void *d = alloc_filled(c, sz, 0xC3);
    REQUIRE_OR(a && b && d, tio_bcache_free(c));
    CHECK_EQ_U(st(c).peak_in_use_bytes, 12 * MiB);
    CHECK_OK(tio_bcache_release(c, a));
    CHECK_EQ_U(st(c).hot_bytes, 4 * MiB);
    CHECK_OK(tio_bcache_release(c, b));
    CHECK_EQ_U(st(c).hot_bytes, 8 * MiB);
    CHECK_OK(tio_bcache_release(c, d));
    struct tio_bcache_stats s = st(c);
    CHECK_EQ_U(s.hot_bytes, 12 * MiB); /* room = peak 12 - in use 0 */
    CHECK_EQ_U(s.cold_bytes, 0);
    CHECK_EQ_U(s.evicted_bytes, 0);
    CHECK_EQ_U(s.mapped_bytes, 12 * MiB);
    CHECK_EQ_I(resident_pages(a, sz), pages_of(sz));
    CHECK_EQ_I(resident_pages(b, sz), pages_of(sz));
    CHECK_EQ_I(resident_pages(d, sz), pages_of(sz));

    /* 8 MiB blocks (another class). After the first: in use 8, peak 12, room 4: the two oldest
     * hot blocks (a, b) go cold, d stays hot. */
    void *e[3] = { NULL, NULL, NULL };
    e[0] = alloc_filled(c, 8 * MiB, 0xE0);
    s = st(c);
    CHECK_EQ_U(s.in_use_bytes, 8 * MiB);
    CHECK_EQ_U(s.peak_in_use_bytes, 12 * MiB);
    CHECK_EQ_U(s.hot_bytes, 4 * MiB);
    CHECK_EQ_U(s.cold_bytes, 8 * MiB);
    CHECK_EQ_U(s.evicted_bytes, 8 * MiB);
    CHECK_EQ_I(resident_pages(a, sz), 0);
    CHECK_EQ_I(resident_pages(b, sz), 0);
    CHECK_EQ_I(resident_pages(d, sz), pages_of(sz));
    CHECK_CONSISTENT(s);

    e[1] = alloc_filled(c, 8 * MiB, 0xE1);
    e[2] = alloc_filled(c, 8 * MiB, 0xE2);
    s = st(c);
    CHECK_EQ_U(s.in_use_bytes, 24 * MiB);
    CHECK_EQ_U(s.peak_in_use_bytes, 24 * MiB);
    CHECK_EQ_U(s.hot_bytes, 0);
    CHECK_EQ_U(s.cold_bytes, 12 * MiB); /* within max(peak 24, 256 MiB): kept */
    CHECK_EQ_U(s.evicted_bytes, 12 * MiB);
    CHECK_EQ_U(s.unmapped_bytes, 0);
    CHECK_EQ_U(s.mapped_bytes, 36 * MiB);
    CHECK_EQ_U(s.blocks, 6);
    CHECK_EQ_U(s.maps, 6);
    CHECK_EQ_I(resident_pages(a, sz), 0);
    CHECK_EQ_I(resident_pages(b, sz), 0);
    CHECK_EQ_I(resident_pages(d, sz), 0);
    for (int i = 0; i < 3; i++) {
        if (e[i]) {
            CHECK_EQ_I(resident_pages(e[i], 8 * MiB), pages_of(8 * MiB));
            CHECK_EQ_U(count_not(e[i], 8 * MiB, (uint8_t)(0xE0 + i)), 0);
        }
    }
    CHECK_CONSISTENT(s);

    /* A 4 MiB request now is a cold hit reading zeros. */
    void *f = NULL;
    CHECK_OK(tio_bcache_alloc(c, sz, &f));
    struct tio_bcache_stats s2 = st(c);
    CHECK_EQ_U(s2.cold_hits, s.cold_hits + 1);
    CHECK_EQ_U(s2.maps, s.maps);
    CHECK(f == a || f == b || f == d);
    if (f) {
        CHECK_EQ_U(count_nonzero(f, sz), 0);
    }
    tio_bcache_free(c);
}

TIO_TEST(cache_bytes_bound_without_follow_peak) {
    const uint64_t sz = 4 * MiB;
    /* cache_bytes 0: a released block goes cold at once. */
    struct tio_bcache_params p = params(0, 0, 0, 256 * MiB);
    struct tio_bcache *c = mk(&p);
    REQUIRE(c != NULL);
    void *a = alloc_filled(c, sz, 0x5A);
    if (a) {
        CHECK_OK(tio_bcache_release(c, a));
        struct tio_bcache_stats s = st(c);
        CHECK_EQ_U(s.hot_bytes, 0);
        CHECK_EQ_U(s.cold_bytes, sz);
        CHECK_EQ_U(s.mapped_bytes, sz);
        CHECK_EQ_I(resident_pages(a, sz), 0);
    }
    tio_bcache_free(c);

    /* cache_bytes 8 MiB: two 4 MiB blocks stay hot; the third release makes the first cold. */
    p = params(8 * MiB, 0, 0, 256 * MiB);
    c = mk(&p);
    REQUIRE(c != NULL);
    a = alloc_filled(c, sz, 0x1A);
    void *b = alloc_filled(c, sz, 0x2B);
    void *d = alloc_filled(c, sz, 0x3C);
    REQUIRE_OR(a && b && d, tio_bcache_free(c));
    CHECK_OK(tio_bcache_release(c, a));
    CHECK_OK(tio_bcache_release(c, b));
    struct tio_bcache_stats s = st(c);
    CHECK_EQ_U(s.hot_bytes, 8 * MiB);
    CHECK_EQ_U(s.cold_bytes, 0);
    CHECK_EQ_I(resident_pages(a, sz), pages_of(sz));
    CHECK_EQ_I(resident_pages(b, sz), pages_of(sz));
    CHECK_OK(tio_bcache_release(c, d));
    s = st(c);
    CHECK_EQ_U(s.hot_bytes, 8 * MiB);
    CHECK_EQ_U(s.cold_bytes, 4 * MiB);
    CHECK_EQ_U(s.evicted_bytes, 4 * MiB);
    CHECK_EQ_U(s.mapped_bytes, 12 * MiB);
    CHECK_EQ_I(resident_pages(a, sz), 0); /* FIFO: the first released goes cold first */
    CHECK_EQ_I(resident_pages(b, sz), pages_of(sz));
    CHECK_EQ_I(resident_pages(d, sz), pages_of(sz));
    CHECK_CONSISTENT(s);

    /* Two 4 MiB requests: hot hits (b and d, contents kept), then the cold a. */
    void *x = NULL, *y = NULL, *z = NULL;
    CHECK_OK(tio_bcache_alloc(c, sz, &x));
    CHECK_OK(tio_bcache_alloc(c, sz, &y));
    struct tio_bcache_stats s2 = st(c);
    CHECK_EQ_U(s2.hot_hits, s.hot_hits + 2);
    CHECK_EQ_U(s2.maps, s.maps);
    CHECK((x == b && y == d) || (x == d && y == b));
    if (x == b || x == d) {
        CHECK_EQ_U(count_not(x, sz, (uint8_t)(x == b ? 0x2B : 0x3C)), 0);
    }
    if (y == b || y == d) {
        CHECK_EQ_U(count_not(y, sz, (uint8_t)(y == b ? 0x2B : 0x3C)), 0);
    }
    CHECK_OK(tio_bcache_alloc(c, sz, &z));
    struct tio_bcache_stats s3 = st(c);
    CHECK(z == a);
    CHECK_EQ_U(s3.cold_hits, s2.cold_hits + 1);
    CHECK_EQ_U(s3.maps, s2.maps);
    if (z) {
        CHECK_EQ_U(count_nonzero(z, sz), 0);
    }
    tio_bcache_free(c);
}

TIO_TEST(max_mapped_bytes) {
    const uint64_t sz = 4 * MiB;
    struct tio_bcache_params p = params(0, 1, 8 * MiB, 256 * MiB);
    struct tio_bcache *c = mk(&p);
    REQUIRE(c != NULL);
    void *a = NULL, *b = NULL, *x = (void *)&p, *d = NULL;
    CHECK_OK(tio_bcache_alloc(c, sz, &a));
    CHECK_OK(tio_bcache_alloc(c, sz, &b));
    struct tio_bcache_stats s0 = st(c);
    CHECK_RC(tio_bcache_alloc(c, sz, &x), TIO_ENOMEM);
    CHECK_ERR_HAS("over max_mapped_bytes 8388608");
    CHECK_RC(tio_bcache_alloc(c, 1, &x), TIO_ENOMEM);
    struct tio_bcache_stats s1 = st(c);
    CHECK_STATS_SAME(s0, s1);
    CHECK_EQ_U(s1.mapped_bytes, 8 * MiB);
    if (a) {
        memset(a, 0x99, sz);
        CHECK_OK(tio_bcache_release(c, a));
    }
    CHECK_OK(tio_bcache_alloc(c, sz, &d));
    CHECK(d == a); /* the kept block */
    struct tio_bcache_stats s2 = st(c);
    CHECK_EQ_U(s2.mapped_bytes, 8 * MiB);
    CHECK_EQ_U(s2.allocs, s1.allocs + 1);
    tio_bcache_free(c);

    /* Cold kept blocks are unmapped to make room under the limit. */
    p = params(0, 0, 8 * MiB, 256 * MiB);
    c = mk(&p);
    REQUIRE(c != NULL);
    a = b = d = NULL;
    CHECK_OK(tio_bcache_alloc(c, sz, &a));
    CHECK_OK(tio_bcache_alloc(c, sz, &b));
    CHECK_RC(tio_bcache_alloc(c, sz, &x), TIO_ENOMEM);
    CHECK_OK(tio_bcache_release(c, a)); /* cold at once (cache_bytes 0, no follow_peak) */
    s0 = st(c);
    CHECK_EQ_U(s0.cold_bytes, 4 * MiB);
    CHECK_OK(tio_bcache_alloc(c, 3 * MiB, &d)); /* another class: needs a's 4 MiB back */
    s1 = st(c);
    CHECK_EQ_U(s1.unmapped_bytes, s0.unmapped_bytes + 4 * MiB);
    CHECK_EQ_U(s1.cold_bytes, 0);
    CHECK_EQ_U(s1.mapped_bytes, 7 * MiB);
    CHECK_EQ_U(s1.in_use_bytes, 7 * MiB);
    CHECK_EQ_U(s1.maps, s0.maps + 1);
    CHECK_EQ_U(s1.blocks, 2);
    if (d) {
        memset(d, 0x12, 3 * MiB);
    }
    CHECK_RC(tio_bcache_alloc(c, 2 * MiB, &x), TIO_ENOMEM); /* 7 + 2 > 8 */
    CHECK_OK(tio_bcache_alloc(c, 1 * MiB, &x));             /* 7 + 1 = 8 */
    CHECK_EQ_U(st(c).mapped_bytes, 8 * MiB);
    tio_bcache_free(c);
}

TIO_TEST(cold_bound) {
    /* cold_bytes_min 1 MiB: cold kept bytes are bounded by the peak. */
    struct tio_bcache_params p = params(0, 0, 0, 1 * MiB);
    struct tio_bcache *c = mk(&p);
    REQUIRE(c != NULL);
    void *a = alloc_filled(c, 4 * MiB, 1);
    if (a) {
        CHECK_OK(tio_bcache_release(c, a));
    }
    struct tio_bcache_stats s = st(c);
    CHECK_EQ_U(s.cold_bytes, 4 * MiB); /* 4 <= max(peak 4, 1) */
    CHECK_EQ_U(s.unmapped_bytes, 0);
    void *b = alloc_filled(c, 6 * MiB, 2);
    if (b) {
        CHECK_OK(tio_bcache_release(c, b));
    }
    /* cold would be 10 > max(peak 6, 1): the oldest (a) is unmapped. */
    s = st(c);
    CHECK_EQ_U(s.cold_bytes, 6 * MiB);
    CHECK_EQ_U(s.unmapped_bytes, 4 * MiB);
    CHECK_EQ_U(s.mapped_bytes, 6 * MiB);
    CHECK_EQ_U(s.blocks, 1);
    CHECK_CONSISTENT(s);
    /* a's class is no longer kept: a new mapping. b's class is: a cold hit. */
    void *x = NULL, *y = NULL;
    CHECK_OK(tio_bcache_alloc(c, 4 * MiB, &x));
    struct tio_bcache_stats s2 = st(c);
    CHECK_EQ_U(s2.maps, s.maps + 1);
    CHECK_EQ_U(s2.cold_hits, s.cold_hits);
    CHECK_OK(tio_bcache_alloc(c, 6 * MiB, &y));
    struct tio_bcache_stats s3 = st(c);
    CHECK_EQ_U(s3.cold_hits, s2.cold_hits + 1);
    CHECK(y == b);
    tio_bcache_free(c);

    /* cold_bytes_min 16 MiB: the same sequence keeps both. */
    p = params(0, 0, 0, 16 * MiB);
    c = mk(&p);
    REQUIRE(c != NULL);
    a = alloc_filled(c, 4 * MiB, 1);
    if (a) {
        CHECK_OK(tio_bcache_release(c, a));
    }
    b = alloc_filled(c, 6 * MiB, 2);
    if (b) {
        CHECK_OK(tio_bcache_release(c, b));
    }
    s = st(c);
    CHECK_EQ_U(s.cold_bytes, 10 * MiB);
    CHECK_EQ_U(s.unmapped_bytes, 0);
    CHECK_EQ_U(s.mapped_bytes, 10 * MiB);
    CHECK_EQ_U(s.blocks, 2);
    /* Three more classes in use at once raise the peak, then go cold on release until cold
     * exceeds max(peak, 16 MiB). */
    void *q[3] = { NULL, NULL, NULL };
    for (int i = 0; i < 3; i++) {
        q[i] = alloc_filled(c, (uint64_t)(5 + 2 * i) * MiB + 512 * KiB, 3 + i);
    }
    /* classes 5.5, 7.5, 9.5 MiB: in use 22.5, peak 22.5 */
    s = st(c);
    CHECK_EQ_U(s.peak_in_use_bytes, 22 * MiB + 512 * KiB);
    for (int i = 0; i < 3; i++) {
        if (q[i]) {
            CHECK_OK(tio_bcache_release(c, q[i]));
        }
    }
    /* cold would be 10 + 22.5 = 32.5 > max(22.5, 16): the oldest (a 4, b 6) are unmapped. */
    s = st(c);
    CHECK_EQ_U(s.cold_bytes, 22 * MiB + 512 * KiB);
    CHECK_EQ_U(s.unmapped_bytes, 10 * MiB);
    CHECK_EQ_U(s.mapped_bytes, 22 * MiB + 512 * KiB);
    CHECK_EQ_U(s.blocks, 3);
    CHECK_CONSISTENT(s);
    tio_bcache_free(c);
}

TIO_TEST(trim_unmaps_kept_blocks) {
    struct tio_bcache *c = mk(NULL);
    REQUIRE(c != NULL);
    void *l1 = NULL, *l2 = NULL, *k1 = NULL, *k2 = NULL;
    CHECK_OK(tio_bcache_alloc(c, 3 * MiB, &l1));
    CHECK_OK(tio_bcache_alloc(c, 5 * MiB, &l2));
    CHECK_OK(tio_bcache_alloc(c, 4 * MiB, &k1));
    CHECK_OK(tio_bcache_alloc(c, 7 * MiB, &k2));
    REQUIRE_OR(l1 && l2 && k1 && k2, tio_bcache_free(c));
    visit(l1, 3 * MiB, 101, FILL);
    visit(l2, 5 * MiB, 102, FILL);
    memset(k1, 0x44, 4 * MiB);
    memset(k2, 0x55, 7 * MiB);
    CHECK_OK(tio_bcache_release(c, k1)); /* hot */
    CHECK_OK(tio_bcache_discard(c, k2));
    CHECK_OK(tio_bcache_release(c, k2)); /* cold */
    struct tio_bcache_stats s0 = st(c);
    CHECK_EQ_U(s0.hot_bytes, 4 * MiB);
    CHECK_EQ_U(s0.cold_bytes, 7 * MiB);
    CHECK_EQ_U(s0.mapped_bytes, 19 * MiB);

    CHECK_EQ_U(tio_bcache_trim(c), 11 * MiB);
    struct tio_bcache_stats s1 = st(c);
    CHECK_EQ_U(s1.hot_bytes, 0);
    CHECK_EQ_U(s1.cold_bytes, 0);
    CHECK_EQ_U(s1.in_use_bytes, 8 * MiB);
    CHECK_EQ_U(s1.mapped_bytes, s1.in_use_bytes);
    CHECK_EQ_U(s1.unmapped_bytes, s0.unmapped_bytes + 11 * MiB);
    CHECK_EQ_U(s1.blocks, 2);
    /* In-use blocks are intact and writable. */
    CHECK_EQ_U(visit(l1, 3 * MiB, 101, VERIFY), 0);
    CHECK_EQ_U(visit(l2, 5 * MiB, 102, VERIFY), 0);
    memset(l1, 0x66, 3 * MiB);
    memset(l2, 0x67, 5 * MiB);
    CHECK_EQ_U(count_not(l1, 3 * MiB, 0x66), 0);
    CHECK_EQ_U(count_not(l2, 5 * MiB, 0x67), 0);
    CHECK_EQ_U(tio_bcache_block_size(c, l1), 3 * MiB);
    CHECK_EQ_U(tio_bcache_block_size(c, l2), 5 * MiB);
    /* Nothing kept: the next 4 MiB request maps. */
    void *n = NULL;
    CHECK_OK(tio_bcache_alloc(c, 4 * MiB, &n));
    CHECK_EQ_U(st(c).maps, s1.maps + 1);
    CHECK_EQ_U(tio_bcache_trim(c), 0);
    CHECK(n != NULL);
    if (n) {
        CHECK_OK(tio_bcache_release(c, n));
    }
    CHECK_OK(tio_bcache_release(c, l1));
    CHECK_OK(tio_bcache_release(c, l2));
    struct tio_bcache_stats s2 = st(c);
    CHECK_EQ_U(s2.in_use_bytes, 0);
    uint64_t kept = s2.hot_bytes + s2.cold_bytes;
    CHECK_EQ_U(kept, 12 * MiB);
    CHECK_EQ_U(tio_bcache_trim(c), 12 * MiB);
    struct tio_bcache_stats s3 = st(c);
    CHECK_EQ_U(s3.mapped_bytes, 0);
    CHECK_EQ_U(s3.blocks, 0);
    CHECK_EQ_U(s3.unmapped_bytes, s2.unmapped_bytes + 12 * MiB);
    tio_bcache_free(c);
}

/* set_bounds: nothing hot while follow_peak is off (teraio's warm-up), then the peak restarts
 * from the bytes in use when it is turned on, so an earlier, higher peak leaves no room. */
TIO_TEST(set_bounds_restarts_the_peak) {
    const uint64_t sz = 4 * MiB;
    struct tio_bcache_params p = params(0, 0, 0, 256 * MiB);
    struct tio_bcache *c = mk(&p);
    REQUIRE(c != NULL);
    void *v[4] = { NULL, NULL, NULL, NULL };
    for (int i = 0; i < 4; i++) {
        v[i] = alloc_filled(c, sz, 0x40 + i);
        REQUIRE_OR(v[i] != NULL, tio_bcache_free(c));
    }
    /* follow_peak off: a release goes cold at once although the peak (16 MiB) has room */
    CHECK_OK(tio_bcache_release(c, v[3]));
    struct tio_bcache_stats s = st(c);
    CHECK_EQ_U(s.hot_bytes, 0);
    CHECK_EQ_U(s.cold_bytes, sz);
    CHECK_EQ_U(s.peak_in_use_bytes, 4 * sz);
    CHECK_EQ_I(resident_pages(v[3], sz), 0);
    /* on, with the peak restarted at the 12 MiB in use: releasing one leaves 4 MiB of room */
    tio_bcache_set_bounds(c, 0, 1);
    s = st(c);
    CHECK_EQ_U(s.peak_in_use_bytes, 3 * sz);
    CHECK_OK(tio_bcache_release(c, v[2]));
    s = st(c);
    CHECK_EQ_U(s.hot_bytes, sz);
    CHECK_EQ_I(resident_pages(v[2], sz), pages_of(sz));
    /* off again: the hot block goes cold at once (its pages leave) */
    tio_bcache_set_bounds(c, 0, 0);
    s = st(c);
    CHECK_EQ_U(s.hot_bytes, 0);
    CHECK_EQ_U(s.cold_bytes, 2 * sz);
    CHECK_EQ_I(resident_pages(v[2], sz), 0);
    /* cache_bytes alone keeps one block hot */
    tio_bcache_set_bounds(c, sz, 0);
    CHECK_OK(tio_bcache_release(c, v[1]));
    CHECK_OK(tio_bcache_release(c, v[0]));
    s = st(c);
    CHECK_EQ_U(s.hot_bytes, sz);
    CHECK_EQ_I(resident_pages(v[1], sz), 0); /* the older release went cold */
    CHECK_EQ_I(resident_pages(v[0], sz), pages_of(sz));
    CHECK_CONSISTENT(s);
    tio_bcache_set_bounds(NULL, 0, 0); /* a no-op */
    tio_bcache_free(c);
}

/* resize_kept: a request with no hot block of its class is served from hot blocks of other
 * classes without faulting in what is already resident: a larger aligned block is split in
 * place (its tail stays hot), a tail is moved to an aligned address, smaller blocks are moved
 * into one new mapping (only what they do not cover faults in), and a block made of several
 * pieces moves again whole. Off, the same request maps a new block. */
TIO_TEST(resize_hot_blocks) {
    struct tio_bcache_params p = params(0, 1, 0, 256 * MiB);
    p.resize_kept = 1;
    struct tio_bcache *c = mk(&p);
    REQUIRE(c != NULL);
    void *a = NULL, *h = NULL, *t = NULL, *g = NULL;
    CHECK_OK(tio_bcache_alloc(c, 8 * MiB, &a));
    REQUIRE_OR(a != NULL, tio_bcache_free(c));
    memset(a, 0x5A, 8 * MiB);
    CHECK_OK(tio_bcache_release(c, a));
    struct tio_bcache_stats s0 = st(c);
    CHECK_EQ_U(s0.hot_bytes, 8 * MiB);
    CHECK_EQ_U(s0.faulting_bytes, 8 * MiB);

    /* split in place: the head keeps a's address and contents, no fault, the tail stays hot */
    CHECK_OK(tio_bcache_alloc(c, 3 * MiB, &h));
    CHECK(h == a);
    struct tio_bcache_stats s1 = st(c);
    CHECK_EQ_U(s1.resized_hits, 1);
    CHECK_EQ_U(s1.maps, 1);
    CHECK_EQ_U(s1.faulting_bytes, 8 * MiB);
    CHECK_EQ_U(s1.blocks, 2);
    CHECK_EQ_U(s1.mapped_bytes, 8 * MiB);
    CHECK_EQ_U(s1.in_use_bytes, 3 * MiB);
    CHECK_EQ_U(s1.hot_bytes, 5 * MiB);
    CHECK_CONSISTENT(s1);
    if (h) {
        CHECK_EQ_U(tio_bcache_block_size(c, h), 3 * MiB);
        CHECK_EQ_U(count_not(h, 3 * MiB, 0x5A), 0);
        CHECK_EQ_I(resident_pages((char *)h + 3 * MiB, 5 * MiB), pages_of(5 * MiB));
    }

    /* the tail (5 MiB at a + 3 MiB, not 2 MiB-aligned) serves a 5 MiB request: moved to an
     * aligned address with its pages, nothing faults in, a + 3 MiB is no longer mapped */
    CHECK_OK(tio_bcache_alloc(c, 5 * MiB, &t));
    struct tio_bcache_stats s2 = st(c);
    CHECK(t != NULL && aligned_2m(t) && t != (char *)a + 3 * MiB);
    CHECK_EQ_U(s2.resized_hits, 2);
    CHECK_EQ_U(s2.maps, 1);
    CHECK_EQ_U(s2.faulting_bytes, 8 * MiB);
    CHECK_EQ_U(s2.blocks, 2);
    CHECK_EQ_U(s2.mapped_bytes, 8 * MiB);
    CHECK_EQ_U(s2.hot_bytes, 0);
    CHECK_EQ_I(resident_pages((char *)a + 3 * MiB, 5 * MiB), -1);
    if (t) {
        CHECK_EQ_I(resident_pages(t, 5 * MiB), pages_of(5 * MiB));
        CHECK_EQ_U(count_not(t, 5 * MiB, 0x5A), 0);
        CHECK_EQ_U(tio_bcache_block_size(c, t), 5 * MiB);
        memset(t, 0x6B, 5 * MiB);
        CHECK_OK(tio_bcache_release(c, t));
    }
    if (h) {
        CHECK_OK(tio_bcache_release(c, h));
    }

    /* 12 MiB, larger than every hot block: a new aligned mapping filled by moving the pages of
     * the largest (5 MiB), then the next (3 MiB); only the last 4 MiB are new: not resident
     * until touched, zeros */
    CHECK_OK(tio_bcache_alloc(c, 12 * MiB, &g));
    struct tio_bcache_stats s3 = st(c);
    CHECK(g != NULL && aligned_2m(g));
    CHECK_EQ_U(s3.resized_hits, 3);
    CHECK_EQ_U(s3.grown_bytes, 4 * MiB);
    CHECK_EQ_U(s3.faulting_bytes, 12 * MiB);
    CHECK_EQ_U(s3.maps, 1);
    CHECK_EQ_U(s3.blocks, 1);
    CHECK_EQ_U(s3.mapped_bytes, 12 * MiB);
    CHECK_EQ_U(s3.hot_bytes, 0);
    CHECK_EQ_U(s3.cold_bytes, 0);
    CHECK_CONSISTENT(s3);
    if (g) {
        CHECK_EQ_I(resident_pages(g, 12 * MiB), pages_of(8 * MiB));
        CHECK_EQ_U(count_not(g, 5 * MiB, 0x6B), 0);
        CHECK_EQ_U(count_not((char *)g + 5 * MiB, 3 * MiB, 0x5A), 0);
        CHECK_EQ_U(count_nonzero((char *)g + 8 * MiB, 4 * MiB), 0);
        if (thp_available()) {
            CHECK_EQ_I(vma_has_flag(g, "hg"), 1);
        }
        /* g spans three kernel mappings now; moving it again (13 MiB) must move every piece */
        memset(g, 0x7C, 12 * MiB);
        CHECK_OK(tio_bcache_release(c, g));
        void *g2 = NULL;
        CHECK_OK(tio_bcache_alloc(c, 13 * MiB, &g2));
        struct tio_bcache_stats s4 = st(c);
        CHECK(g2 != NULL && g2 != g);
        CHECK_EQ_U(s4.resized_hits, 4);
        CHECK_EQ_U(s4.grown_bytes, 5 * MiB);
        CHECK_EQ_U(s4.mapped_bytes, 13 * MiB);
        CHECK_EQ_U(s4.blocks, 1);
        if (g2) {
            CHECK_EQ_I(resident_pages(g2, 13 * MiB), pages_of(12 * MiB));
            CHECK_EQ_U(count_not(g2, 12 * MiB, 0x7C), 0);
            CHECK_EQ_U(count_nonzero((char *)g2 + 12 * MiB, 1 * MiB), 0);
            CHECK_EQ_I(resident_pages(g, 12 * MiB), -1); /* nothing left at the old place */
            CHECK_OK(tio_bcache_release(c, g2));
        }
    }
    tio_bcache_free(c);

    /* resize_kept 0: the same first request maps a new block */
    p.resize_kept = 0;
    c = mk(&p);
    REQUIRE(c != NULL);
    CHECK_OK(tio_bcache_alloc(c, 8 * MiB, &a));
    CHECK_OK(tio_bcache_release(c, a));
    CHECK_OK(tio_bcache_alloc(c, 3 * MiB, &h));
    CHECK(h != NULL && h != a);
    s1 = st(c);
    CHECK_EQ_U(s1.resized_hits, 0);
    CHECK_EQ_U(s1.maps, 2);
    CHECK_EQ_U(s1.blocks, 2);
    if (h) {
        CHECK_OK(tio_bcache_release(c, h));
    }
    tio_bcache_free(c);
}

int main(void) {
    RUN(follow_peak_bound);
    RUN(set_bounds_restarts_the_peak);
    RUN(cache_bytes_bound_without_follow_peak);
    RUN(max_mapped_bytes);
    RUN(cold_bound);
    RUN(trim_unmaps_kept_blocks);
    RUN(resize_hot_blocks);
    return tio_test_done();
}
