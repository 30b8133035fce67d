/* Block cache: size classes, alignment, hot and cold reuse, discard, the follow_peak, cache_bytes,
 * cold and max_mapped bounds (checked with mincore), trim, stats consistency under a random
 * workload, and threads. Expected values are computed here, independently of the library. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <teraio/blockcache.h>
#include <teraio/status.h>

#include "tio_test.h"

#define KiB (1024ull)
#define MiB (1024ull * 1024ull)

/* ------------------------------------------------------------------------------------------ */
/* Helpers                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* The size class from the header: rounded up to 64 KiB below 2 MiB, 512 KiB below 16 MiB, 2 MiB
 * above; 0 for 0 or when rounding up overflows. */
static uint64_t ref_class(uint64_t b) {
    if (b == 0) {
        return 0;
    }
    uint64_t g = b <= 2 * MiB ? 64 * KiB : b <= 16 * MiB ? 512 * KiB : 2 * MiB;
    if (b > UINT64_MAX - (g - 1)) {
        return 0;
    }
    return (b + g - 1) / g * g;
}

static struct tio_bcache_params
params(uint64_t cache_bytes, int32_t follow_peak, uint64_t max_mapped, uint64_t cold_min) {
    struct tio_bcache_params p;
    memset(&p, 0, sizeof p);
    p.cache_bytes = cache_bytes;
    p.follow_peak = follow_peak;
    p.huge_pages = 1;
    p.max_mapped_bytes = max_mapped;
    p.cold_bytes_min = cold_min;
    return p;
}

static struct tio_bcache *mk(const struct tio_bcache_params *p) {
    struct tio_bcache *c = NULL;
    CHECK_OK(tio_bcache_new(p, &c));
    CHECK(c != NULL);
    return c;
}

static struct tio_bcache_stats st(struct tio_bcache *c) {
    struct tio_bcache_stats s;
    memset(&s, 0xA5, sizeof s);
    tio_bcache_stats(c, &s);
    return s;
}

#define CHECK_STATS_SAME(a, b)                                    \
    do {                                                          \
        CHECK_EQ_U((a).in_use_bytes, (b).in_use_bytes);           \
        CHECK_EQ_U((a).peak_in_use_bytes, (b).peak_in_use_bytes); \
        CHECK_EQ_U((a).hot_bytes, (b).hot_bytes);                 \
        CHECK_EQ_U((a).cold_bytes, (b).cold_bytes);               \
        CHECK_EQ_U((a).mapped_bytes, (b).mapped_bytes);           \
        CHECK_EQ_U((a).allocs, (b).allocs);                       \
        CHECK_EQ_U((a).hot_hits, (b).hot_hits);                   \
        CHECK_EQ_U((a).cold_hits, (b).cold_hits);                 \
        CHECK_EQ_U((a).maps, (b).maps);                           \
        CHECK_EQ_U((a).resized_hits, (b).resized_hits);           \
        CHECK_EQ_U((a).grown_bytes, (b).grown_bytes);             \
        CHECK_EQ_U((a).faulting_bytes, (b).faulting_bytes);       \
        CHECK_EQ_U((a).evicted_bytes, (b).evicted_bytes);         \
        CHECK_EQ_U((a).discarded_bytes, (b).discarded_bytes);     \
        CHECK_EQ_U((a).unmapped_bytes, (b).unmapped_bytes);       \
        CHECK_EQ_U((a).blocks, (b).blocks);                       \
    } while (0)

#define CHECK_CONSISTENT(s)      \
    CHECK_EQ_U((s).mapped_bytes, \
               (s).in_use_bytes + (s).hot_bytes + (s).cold_bytes + (s).prefaulting_bytes)

static int aligned_2m(const void *p) {
    return ((uintptr_t)p & (uintptr_t)(2 * MiB - 1)) == 0;
}

/* Resident pages of [p, p + len) by mincore(2), or -1 if mincore fails (e.g. unmapped). */
static long resident_pages(void *p, uint64_t len) {
    long pg = sysconf(_SC_PAGESIZE);
    size_t n = (size_t)((len + (uint64_t)pg - 1) / (uint64_t)pg);
    unsigned char *v = malloc(n ? n : 1);
    if (!v) {
        return -1;
    }
    long res = 0;
    if (mincore(p, (size_t)len, v) != 0) {
        res = -1;
    } else {
        for (size_t i = 0; i < n; i++) {
            res += v[i] & 1;
        }
    }
    free(v);
    return res;
}

static long pages_of(uint64_t len) {
    long pg = sysconf(_SC_PAGESIZE);
    return (long)((len + (uint64_t)pg - 1) / (uint64_t)pg);
}

/* Whether the mapping holding p lists `flag` in its /proc/self/smaps VmFlags: 1, 0, or -1. */
static int vma_has_flag(const void *p, const char *flag) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) {
        return -1;
    }
    char line[1024];
    int in = 0, res = -1;
    uintptr_t a = (uintptr_t)p;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char dash;
        if (sscanf(line, "%lx%c%lx", &lo, &dash, &hi) == 3 && dash == '-') {
            in = a >= lo && a < hi;
            continue;
        }
        if (in && strncmp(line, "VmFlags:", 8) == 0) {
            res = 0;
            char *save = NULL;
            for (char *t = strtok_r(line + 8, " \t\n", &save); t;
                 t = strtok_r(NULL, " \t\n", &save)) {
                if (strcmp(t, flag) == 0) {
                    res = 1;
                }
            }
            break;
        }
    }
    (void)fclose(f);
    return res;
}

static int thp_available(void) {
    return access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0;
}

/* xorshift64*: a small fixed-seed PRNG. */
static uint64_t rng_next(uint64_t *s) {
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 2685821657736338717ull;
}

/* A per-block byte pattern at sampled offsets: the first 16 bytes, every 4093rd byte (so every
 * page and varying offsets within pages) and the last byte of the requested size. Never 0. */
static uint8_t pat(uint64_t id, uint64_t off) {
    uint64_t h = (id + 1) * 0x9E3779B97F4A7C15ull ^ (off + 0x51) * 0xC2B2AE3D27D4EB4Full;
    h ^= h >> 29;
    return (uint8_t)(h | 1);
}

enum { FILL, VERIFY, ZERO };

/* FILL writes the pattern; VERIFY and ZERO count the offsets that differ from the pattern or 0. */
static uint64_t visit(void *p, uint64_t size, uint64_t id, int mode) {
    uint8_t *b = p;
    uint64_t bad = 0;
    uint64_t off = 0;
    for (;;) {
        uint8_t want = mode == ZERO ? (uint8_t)0 : pat(id, off);
        if (mode == FILL) {
            b[off] = want;
        } else if (b[off] != want) {
            bad++;
        }
        uint64_t next = off < 16 ? off + 1 : off + 4093;
        if (off == size - 1) {
            break;
        }
        off = next < size - 1 ? next : size - 1;
    }
    return bad;
}

static uint64_t count_nonzero(const void *p, uint64_t len) {
    const uint64_t *w = p;
    uint64_t bad = 0;
    for (uint64_t i = 0; i < len / 8; i++) {
        bad += w[i] != 0;
    }
    return bad;
}

static uint64_t count_not(const void *p, uint64_t len, uint8_t v) {
    const uint8_t *b = p;
    uint64_t bad = 0;
    for (uint64_t i = 0; i < len; i++) {
        bad += b[i] != v;
    }
    return bad;
}

/* Stats once the prefault thread has faulted in `bytes` in all and is idle (at most 10 s). */
static struct tio_bcache_stats wait_prefaulted(struct tio_bcache *c, uint64_t bytes) {
    struct tio_bcache_stats s = st(c);
    for (int i = 0; i < 1000 && (s.prefaulted_bytes < bytes || s.prefaulting_bytes); i++) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        s = st(c);
    }
    return s;
}

static void wait_prefault_idle(struct tio_bcache *c) {
    (void)wait_prefaulted(c, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* Tests                                                                                       */
/* ------------------------------------------------------------------------------------------ */

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
    if (!c) {
        return;
    }
    struct tio_bcache_stats s0 = st(c);
    struct tio_bcache_stats zero;
    memset(&zero, 0, sizeof zero);
    CHECK_STATS_SAME(s0, zero);

    /* follow_peak 1, cache_bytes 0: a released block stays hot within the room under the peak. */
    void *a = NULL, *b = NULL, *d = NULL;
    CHECK_OK(tio_bcache_alloc(c, 4 * MiB, &a));
    if (!a) {
        tio_bcache_free(c);
        return;
    }
    memset(a, 0x11, 4 * MiB);
    CHECK_OK(tio_bcache_release(c, a));
    struct tio_bcache_stats s = st(c);
    CHECK_EQ_U(s.hot_bytes, 4 * MiB);
    CHECK_EQ_U(s.cold_bytes, 0);
    CHECK_EQ_U(s.peak_in_use_bytes, 4 * MiB);

    /* resize_kept 1: a 6 MiB request finds no hot 6 MiB block and grows the hot 4 MiB one
     * (moved to a new aligned mapping): its 4 MiB kept, 2 MiB new (zeros), one block. */
    CHECK_OK(tio_bcache_alloc(c, 6 * MiB, &b));
    if (!b) {
        tio_bcache_free(c);
        return;
    }
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
        return;
    }
    struct tio_bcache_params p = params(0, 1, 0, 256 * MiB);
    struct tio_bcache *c = mk(&p);
    p.huge_pages = 0;
    struct tio_bcache *n = mk(&p);
    if (!c || !n) {
        tio_bcache_free(c);
        tio_bcache_free(n);
        return;
    }
    void *a = NULL, *b = NULL, *x = NULL;
    CHECK_OK(tio_bcache_alloc(c, 4 * MiB, &a));
    CHECK_OK(tio_bcache_alloc(c, 2 * MiB, &b));
    CHECK_OK(tio_bcache_alloc(n, 4 * MiB, &x));
    if (a) {
        CHECK_EQ_I(vma_has_flag(a, "hg"), 1);
    }
    if (b) {
        CHECK_EQ_I(vma_has_flag(b, "hg"), 1);
    }
    if (x) {
        CHECK_EQ_I(vma_has_flag(x, "hg"), 0);
    }
    tio_bcache_free(c);
    tio_bcache_free(n);
}

TIO_TEST(alloc_alignment_and_block_size) {
    struct tio_bcache *c = mk(NULL);
    if (!c) {
        return;
    }
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
    if (!c) {
        return;
    }
    void *a = NULL, *b = NULL, *d = NULL;
    CHECK_OK(tio_bcache_alloc(c, 3 * MiB, &a));
    if (!a) {
        tio_bcache_free(c);
        return;
    }
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
    if (!c || !other) {
        tio_bcache_free(c);
        tio_bcache_free(other);
        return;
    }
    void *a = NULL, *o = NULL;
    CHECK_OK(tio_bcache_alloc(c, 4 * MiB, &a));
    CHECK_OK(tio_bcache_alloc(other, 4 * MiB, &o));
    if (!a || !o) {
        tio_bcache_free(c);
        tio_bcache_free(other);
        return;
    }
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
    if (!c) {
        return;
    }
    const uint64_t sz = 4 * MiB;
    void *a = NULL, *b = NULL;
    CHECK_OK(tio_bcache_alloc(c, sz, &a));
    if (!a) {
        tio_bcache_free(c);
        return;
    }
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

/* Allocates `sz`, fills it with `v` and checks every page is resident. */
static void *alloc_filled(struct tio_bcache *c, uint64_t sz, int v) {
    void *p = NULL;
    CHECK_OK(tio_bcache_alloc(c, sz, &p));
    if (p) {
        memset(p, v, (size_t)sz);
        CHECK_EQ_I(resident_pages(p, sz), pages_of(sz));
    }
    return p;
}

TIO_TEST(follow_peak_bound) {
    struct tio_bcache_params p = params(0, 1, 0, 256 * MiB);
    struct tio_bcache *c = mk(&p);
    if (!c) {
        return;
    }
    const uint64_t sz = 4 * MiB;
    void *a = alloc_filled(c, sz, 0xA1);
    void *b = alloc_filled(c, sz, 0xB2);
    void *d = alloc_filled(c, sz, 0xC3);
    if (!a || !b || !d) {
        tio_bcache_free(c);
        return;
    }
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
    if (!c) {
        return;
    }
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
    if (!c) {
        return;
    }
    a = alloc_filled(c, sz, 0x1A);
    void *b = alloc_filled(c, sz, 0x2B);
    void *d = alloc_filled(c, sz, 0x3C);
    if (!a || !b || !d) {
        tio_bcache_free(c);
        return;
    }
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
    if (!c) {
        return;
    }
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
    if (!c) {
        return;
    }
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
    if (!c) {
        return;
    }
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
    if (!c) {
        return;
    }
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
    if (!c) {
        return;
    }
    void *l1 = NULL, *l2 = NULL, *k1 = NULL, *k2 = NULL;
    CHECK_OK(tio_bcache_alloc(c, 3 * MiB, &l1));
    CHECK_OK(tio_bcache_alloc(c, 5 * MiB, &l2));
    CHECK_OK(tio_bcache_alloc(c, 4 * MiB, &k1));
    CHECK_OK(tio_bcache_alloc(c, 7 * MiB, &k2));
    if (!l1 || !l2 || !k1 || !k2) {
        tio_bcache_free(c);
        return;
    }
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
    if (!c) {
        return;
    }
    void *v[4] = { NULL, NULL, NULL, NULL };
    for (int i = 0; i < 4; i++) {
        v[i] = alloc_filled(c, sz, 0x40 + i);
        if (!v[i]) {
            tio_bcache_free(c);
            return;
        }
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
    if (!c) {
        return;
    }
    void *a = NULL, *h = NULL, *t = NULL, *g = NULL;
    CHECK_OK(tio_bcache_alloc(c, 8 * MiB, &a));
    if (!a) {
        tio_bcache_free(c);
        return;
    }
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
    if (!c) {
        return;
    }
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

/* Random alloc/release/discard sequence: every counter checked against a model after every step. */
struct live_block {
    void *p;
    uint64_t size, cls, id;
    int discarded;
};

static void random_sequence(int resize) {
    const uint64_t cache_bytes = 16 * MiB, cold_min = 64 * MiB, in_use_cap = 160 * MiB;
    struct tio_bcache_params p = params(cache_bytes, 1, 0, cold_min);
    p.resize_kept = resize;
    struct tio_bcache *c = mk(&p);
    if (!c) {
        return;
    }
    enum { MAXLIVE = 48, OPS = 2000 };
    struct live_block live[MAXLIVE];
    int nlive = 0;
    uint64_t rs = 0x9E3779B97F4A7C15ull, next_id = 1;
    uint64_t in_use = 0, peak = 0, allocs = 0, discarded = 0, mapped_total = 0;
    uint64_t n_hot = 0, n_cold = 0, n_maps = 0, n_res = 0;
    int failures = 0;
    struct tio_bcache_stats prev = st(c);

    for (int op = 0; op < OPS && failures < 10; op++) {
        uint64_t r = rng_next(&rs) % 100;
        int did = 0;
        if (r < 50 && nlive < MAXLIVE) {
            uint64_t bits = rng_next(&rs) % 26;
            uint64_t size = (1ull << bits) + rng_next(&rs) % (1ull << bits);
            if (size > 40 * MiB) {
                size = 40 * MiB;
            }
            if (rng_next(&rs) % 8 == 0) {
                size = ref_class(size); /* exactly a class */
            }
            uint64_t cls = ref_class(size);
            if (in_use + cls <= in_use_cap) {
                void *q = NULL;
                int rc = tio_bcache_alloc(c, size, &q);
                if (rc != 0 || !q) {
                    TIO_T_FAIL("op %d: alloc(%" PRIu64 ") = %d", op, size, rc);
                    failures++;
                    break;
                }
                struct tio_bcache_stats s = st(c);
                uint64_t dh = s.hot_hits - prev.hot_hits, dc = s.cold_hits - prev.cold_hits,
                         dm = s.maps - prev.maps, dr = s.resized_hits - prev.resized_hits,
                         grown = s.grown_bytes - prev.grown_bytes;
                if (dh + dc + dm + dr != 1 || (grown && !dr)) {
                    TIO_T_FAIL("op %d: hot %" PRIu64 " cold %" PRIu64 " maps %" PRIu64
                               " resized %" PRIu64 " hits for one alloc, grown %" PRIu64,
                               op, dh, dc, dm, dr, grown);
                    failures++;
                }
                n_res += dr;
                mapped_total += grown;
                n_hot += dh;
                n_cold += dc;
                n_maps += dm;
                if (dm) {
                    mapped_total += cls;
                }
                if (!aligned_2m(q) || tio_bcache_block_size(c, q) != cls) {
                    TIO_T_FAIL("op %d: block %p of %" PRIu64 ": size %" PRIu64 ", want %" PRIu64,
                               op, q, size, tio_bcache_block_size(c, q), cls);
                    failures++;
                }
                for (int i = 0; i < nlive; i++) {
                    uintptr_t a0 = (uintptr_t)q, b0 = (uintptr_t)live[i].p;
                    if (!(a0 + cls <= b0 || b0 + live[i].cls <= a0)) {
                        TIO_T_FAIL("op %d: new block %p overlaps live block %p", op, q, live[i].p);
                        failures++;
                    }
                }
                /* A fresh or cold block reads as zeros. */
                if ((dm || dc) && visit(q, size, 0, ZERO) != 0) {
                    TIO_T_FAIL("op %d: %s block of %" PRIu64 " not zero", op, dm ? "fresh" : "cold",
                               size);
                    failures++;
                }
                /* What a resized block grew by is new: zeros. */
                if (grown && size > cls - grown &&
                    count_nonzero((char *)q + (cls - grown), size - (cls - grown)) != 0) {
                    TIO_T_FAIL("op %d: the %" PRIu64 " B a block grew by are not zero", op, grown);
                    failures++;
                }
                struct live_block lb = { q, size, cls, next_id++, 0 };
                visit(q, size, lb.id, FILL);
                live[nlive++] = lb;
                in_use += cls;
                peak = in_use > peak ? in_use : peak;
                allocs++;
                did = 1;
            }
        }
        if (!did && nlive > 0 && r < 88) {
            int i = (int)(rng_next(&rs) % (uint64_t)nlive);
            struct live_block *lb = &live[i];
            uint64_t bad = visit(lb->p, lb->size, lb->id, lb->discarded ? ZERO : VERIFY);
            if (bad) {
                TIO_T_FAIL("op %d: block %" PRIu64 " (%" PRIu64 " B) corrupted at %" PRIu64
                           " offsets before release",
                           op, lb->id, lb->size, bad);
                failures++;
            }
            int rc = tio_bcache_release(c, lb->p);
            if (rc != 0) {
                TIO_T_FAIL("op %d: release = %d", op, rc);
                failures++;
            }
            in_use -= lb->cls;
            live[i] = live[--nlive];
            did = 1;
        }
        if (!did && nlive > 0) {
            int i = (int)(rng_next(&rs) % (uint64_t)nlive);
            struct live_block *lb = &live[i];
            if (!lb->discarded) {
                int rc = tio_bcache_discard(c, lb->p);
                if (rc != 0) {
                    TIO_T_FAIL("op %d: discard = %d", op, rc);
                    failures++;
                }
                lb->discarded = 1;
                discarded += lb->cls;
                if (visit(lb->p, lb->size, 0, ZERO) != 0) {
                    TIO_T_FAIL("op %d: discarded block %" PRIu64 " not zero", op, lb->id);
                    failures++;
                }
            }
        }
        struct tio_bcache_stats s = st(c);
        int ok = s.mapped_bytes == s.in_use_bytes + s.hot_bytes + s.cold_bytes &&
                 s.in_use_bytes == in_use && s.peak_in_use_bytes == peak && s.allocs == allocs &&
                 s.hot_hits == n_hot && s.cold_hits == n_cold && s.maps == n_maps &&
                 s.resized_hits == n_res && s.discarded_bytes == discarded &&
                 s.mapped_bytes == mapped_total - s.unmapped_bytes &&
                 s.hot_bytes <= cache_bytes + (peak - in_use) &&
                 s.cold_bytes <= (peak > cold_min ? peak : cold_min) &&
                 s.mapped_bytes <= 512 * MiB && s.blocks >= (uint64_t)nlive &&
                 s.evicted_bytes >= prev.evicted_bytes && s.unmapped_bytes >= prev.unmapped_bytes;
        if (!ok) {
            TIO_T_FAIL("op %d: stats: in_use %" PRIu64 " (want %" PRIu64 ") peak %" PRIu64
                       " (want %" PRIu64 ") hot %" PRIu64 " cold %" PRIu64 " mapped %" PRIu64
                       " (maps total %" PRIu64 " - unmapped %" PRIu64 ") allocs %" PRIu64
                       " (want %" PRIu64 ") discarded %" PRIu64 " (want %" PRIu64
                       ") blocks %" PRIu64 " live %d",
                       op, s.in_use_bytes, in_use, s.peak_in_use_bytes, peak, s.hot_bytes,
                       s.cold_bytes, s.mapped_bytes, mapped_total, s.unmapped_bytes, s.allocs,
                       allocs, s.discarded_bytes, discarded, s.blocks, nlive);
            failures++;
        }
        prev = s;
    }
    /* Hot reuse did not corrupt live blocks. */
    for (int i = 0; i < nlive; i++) {
        struct live_block *lb = &live[i];
        CHECK_EQ_U(visit(lb->p, lb->size, lb->id, lb->discarded ? ZERO : VERIFY), 0);
        CHECK_EQ_U(tio_bcache_block_size(c, lb->p), lb->cls);
    }
    for (int i = 0; i < nlive; i++) {
        CHECK_OK(tio_bcache_release(c, live[i].p));
    }
    struct tio_bcache_stats s = st(c);
    CHECK_EQ_U(s.in_use_bytes, 0);
    CHECK_CONSISTENT(s);
    CHECK(n_hot > 0); /* the workload exercised every path */
    CHECK(resize ? n_res > 0 && s.grown_bytes > 0 : n_cold > 0);
    CHECK(s.evicted_bytes > 0);
    CHECK(s.unmapped_bytes > 0);
    uint64_t kept = s.hot_bytes + s.cold_bytes;
    CHECK_EQ_U(tio_bcache_trim(c), kept);
    struct tio_bcache_stats s2 = st(c);
    CHECK_EQ_U(s2.mapped_bytes, 0);
    CHECK_EQ_U(s2.blocks, 0);
    CHECK_EQ_U(s2.unmapped_bytes, s.unmapped_bytes + kept);
    CHECK_EQ_I(failures, 0);
    tio_bcache_free(c);
}

TIO_TEST(random_sequence_stats_consistency) {
    random_sequence(0);
}

TIO_TEST(random_sequence_with_resizing) {
    random_sequence(1);
}

/* Threads: alloc/write/verify/release cycles on one cache. */
struct worker {
    struct tio_bcache *c;
    uint64_t seed, id, errors, cycles, discarded;
    char first[160];
};

static void worker_fail(struct worker *w, const char *what, uint64_t v) {
    if (!w->errors++) {
        (void)snprintf(w->first, sizeof w->first, "thread %" PRIu64 ": %s (%" PRIu64 ")", w->id,
                       what, v);
    }
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    uint64_t s = w->seed;
    for (uint64_t i = 0; i < w->cycles; i++) {
        uint64_t size = 1 * MiB + rng_next(&s) % (7 * MiB + 1);
        void *p = NULL;
        int rc = tio_bcache_alloc(w->c, size, &p);
        if (rc != 0 || !p) {
            worker_fail(w, "alloc failed", (uint64_t)(int64_t)rc);
            continue;
        }
        if (!aligned_2m(p)) {
            worker_fail(w, "unaligned block", (uint64_t)(uintptr_t)p);
        }
        if (tio_bcache_block_size(w->c, p) != ref_class(size)) {
            worker_fail(w, "block_size", tio_bcache_block_size(w->c, p));
        }
        uint64_t id = (w->id << 32) | i;
        visit(p, size, id, FILL);
        uint64_t bad = visit(p, size, id, VERIFY);
        if (bad) {
            worker_fail(w, "pattern mismatches", bad);
        }
        if (i % 16 == 5) {
            rc = tio_bcache_discard(w->c, p);
            if (rc != 0) {
                worker_fail(w, "discard failed", (uint64_t)(int64_t)rc);
            }
            w->discarded += ref_class(size);
            bad = visit(p, size, 0, ZERO);
            if (bad) {
                worker_fail(w, "discarded block not zero", bad);
            }
        }
        rc = tio_bcache_release(w->c, p);
        if (rc != 0) {
            worker_fail(w, "release failed", (uint64_t)(int64_t)rc);
        }
    }
    return NULL;
}

/* fork while another thread allocates and releases without pause: every child must be able to
 * allocate from its copy of the cache (a lock inherited locked would hang it; killed after 10 s
 * and counted as a failure). */
struct hammer {
    struct tio_bcache *c;
    atomic_int stop;
    atomic_long ops;
};

static void *hammer_run(void *arg) {
    struct hammer *h = arg;
    while (!atomic_load(&h->stop)) {
        void *p = NULL;
        if (tio_bcache_alloc(h->c, 3 * MiB, &p) == 0) {
            memset(p, 0x5a, 4096);
            (void)tio_bcache_release(h->c, p);
            atomic_fetch_add(&h->ops, 1);
        }
    }
    return NULL;
}

TIO_TEST(fork_while_another_thread_allocates) {
    struct tio_bcache_params p = params(16 * MiB, 1, 0, 256 * MiB);
    struct tio_bcache *c = mk(&p);
    if (!c) {
        return;
    }
    struct hammer h;
    h.c = c;
    atomic_init(&h.stop, 0);
    atomic_init(&h.ops, 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, hammer_run, &h) == 0);
    int hung = 0, bad = 0;
    for (int k = 0; k < 20; k++) {
        pid_t pid = fork();
        if (pid == 0) {
            void *q = NULL;
            int ok = tio_bcache_alloc(c, 5 * MiB, &q) == 0;
            if (ok) {
                memset(q, 0x11, 5 * MiB);
                ok = tio_bcache_release(c, q) == 0;
            }
            _exit(ok ? 0 : 3);
        }
        CHECK(pid > 0);
        if (pid < 0) {
            break;
        }
        int status = 0;
        pid_t w = 0;
        for (int waited = 0; waited < 1000 && (w = waitpid(pid, &status, WNOHANG)) == 0; waited++) {
            struct timespec ts = { 0, 10 * 1000 * 1000 };
            nanosleep(&ts, NULL);
        }
        if (w == 0) {
            hung++;
            kill(pid, SIGKILL);
            (void)waitpid(pid, &status, 0);
        } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            bad++;
        }
    }
    atomic_store(&h.stop, 1);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK_EQ_I(hung, 0);
    CHECK_EQ_I(bad, 0);
    CHECK(atomic_load(&h.ops) > 0);
    CHECK_CONSISTENT(st(c));
    tio_bcache_free(c);
}

static void run_threads(int resize, int prefault) {
    /* cache_bytes 48 MiB keeps most reuse hot (cold reuse faults pages in: slow); evictions,
     * cold hits and discards still happen. */
    struct tio_bcache_params p = params(48 * MiB, 1, 0, 256 * MiB);
    p.resize_kept = resize;
    p.prefault = prefault;
    struct tio_bcache *c = mk(&p);
    if (!c) {
        return;
    }
    enum { T = 4 };
    const uint64_t cycles = 2000;
    struct worker w[T];
    pthread_t th[T];
    int started[T];
    for (int i = 0; i < T; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].c = c;
        w[i].seed = 0xC0FFEE + (uint64_t)i * 7919;
        w[i].id = (uint64_t)i;
        w[i].cycles = cycles;
        started[i] = pthread_create(&th[i], NULL, worker_main, &w[i]) == 0;
        CHECK(started[i]);
    }
    uint64_t discarded = 0, ran = 0;
    for (int i = 0; i < T; i++) {
        if (started[i]) {
            (void)pthread_join(th[i], NULL);
            ran++;
        }
        if (w[i].errors) {
            TIO_T_FAIL("%" PRIu64 " errors; first: %s", w[i].errors, w[i].first);
        }
        discarded += w[i].discarded;
    }
    if (prefault) { /* off, and wait for a block being faulted in: then the counters stand */
        tio_bcache_set_prefault(c, 0);
        wait_prefault_idle(c);
    }
    struct tio_bcache_stats s = st(c);
    CHECK_EQ_U(s.in_use_bytes, 0);
    CHECK_EQ_U(s.prefaulting_bytes, 0);
    CHECK_EQ_U(s.mapped_bytes, s.hot_bytes + s.cold_bytes);
    CHECK_EQ_U(s.allocs, ran * cycles);
    CHECK_EQ_U(s.hot_hits + s.cold_hits + s.maps + s.resized_hits, s.allocs);
    CHECK_EQ_U(s.discarded_bytes, discarded);
    CHECK(s.hot_hits > 0);
    CHECK(resize ? s.resized_hits > 0 : s.cold_hits > 0);
    CHECK(!prefault || s.prefaulted_bytes > 0);
    CHECK(s.hot_bytes <= 48 * MiB + s.peak_in_use_bytes);
    CHECK(s.peak_in_use_bytes <= T * 8 * MiB);
    CHECK(s.peak_in_use_bytes >= 1 * MiB);
    uint64_t kept = s.hot_bytes + s.cold_bytes;
    CHECK_EQ_U(tio_bcache_trim(c), kept);
    CHECK_EQ_U(st(c).mapped_bytes, 0);
    tio_bcache_free(c);
}

TIO_TEST(threads) {
    run_threads(0, 0);
}

TIO_TEST(threads_with_resizing_and_prefault) {
    run_threads(1, 1);
}

/* prefault: room under the hot bound (a discarded block released) is filled by the thread with
 * resident memory, which the next request then uses without a fault; never beyond the bound; a
 * forked child does not prefault. */
TIO_TEST(prefault_fills_the_room) {
    struct tio_bcache_params p = params(0, 1, 0, 256 * MiB);
    p.resize_kept = 1;
    p.prefault = 1;
    struct tio_bcache *c = mk(&p);
    if (!c) {
        return;
    }
    void *a = NULL, *b = NULL;
    CHECK_OK(tio_bcache_alloc(c, 40 * MiB, &a));
    if (!a) {
        tio_bcache_free(c);
        return;
    }
    memset(a, 0x33, 40 * MiB);
    CHECK_OK(tio_bcache_discard(c, a));
    CHECK_OK(tio_bcache_release(c, a)); /* cold: 40 MiB of room under the 40 MiB peak */
    struct tio_bcache_stats s = wait_prefaulted(c, 40 * MiB);
    CHECK_EQ_U(s.prefaulted_bytes, 40 * MiB);
    CHECK_EQ_U(s.hot_bytes, 40 * MiB);
    CHECK_EQ_U(s.cold_bytes, 40 * MiB);
    CHECK_EQ_U(s.mapped_bytes, 80 * MiB);
    CHECK_EQ_U(s.faulting_bytes, 40 * MiB);
    CHECK_CONSISTENT(s);
    /* 30 MiB: split off the prefaulted block, already resident */
    CHECK_OK(tio_bcache_alloc(c, 30 * MiB, &b));
    struct tio_bcache_stats s2 = st(c);
    CHECK(b != NULL && b != a);
    CHECK_EQ_U(s2.resized_hits, 1);
    CHECK_EQ_U(s2.faulting_bytes, 40 * MiB);
    CHECK_EQ_U(s2.cold_hits, 0);
    if (b) {
        CHECK_EQ_I(resident_pages(b, 30 * MiB), pages_of(30 * MiB));
        CHECK_OK(tio_bcache_release(c, b));
    }
    s2 = wait_prefaulted(c, 40 * MiB); /* no room left: nothing more is faulted in */
    CHECK_EQ_U(s2.prefaulted_bytes, 40 * MiB);
    CHECK(s2.hot_bytes <= s2.peak_in_use_bytes - s2.in_use_bytes);
    /* a forked child never prefaults, whatever room it has */
    pid_t pid = fork();
    if (pid == 0) {
        void *q = NULL;
        int ok = tio_bcache_alloc(c, 60 * MiB, &q) == 0 && tio_bcache_discard(c, q) == 0 &&
                 tio_bcache_release(c, q) == 0;
        struct timespec ts = { 0, 300 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        struct tio_bcache_stats cs;
        tio_bcache_stats(c, &cs);
        _exit(ok && cs.prefaulted_bytes == 40 * MiB && cs.prefaulting_bytes == 0 ? 0 : 3);
    }
    CHECK(pid > 0);
    if (pid > 0) {
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    /* off: a new room stays empty */
    tio_bcache_set_prefault(c, 0);
    wait_prefault_idle(c);
    struct tio_bcache_stats s3 = st(c);
    void *d = NULL;
    CHECK_OK(tio_bcache_alloc(c, 64 * MiB, &d));
    if (d) {
        CHECK_OK(tio_bcache_discard(c, d));
        CHECK_OK(tio_bcache_release(c, d));
    }
    struct timespec ts = { 0, 200 * 1000 * 1000 };
    nanosleep(&ts, NULL);
    CHECK_EQ_U(st(c).prefaulted_bytes, s3.prefaulted_bytes);
    tio_bcache_free(c); /* joins the thread */
}

int main(void) {
    RUN(class_size_rounding);
    RUN(params_default_and_null_params);
    RUN(huge_pages_param);
    RUN(alloc_alignment_and_block_size);
    RUN(hot_reuse_keeps_contents);
    RUN(release_unknown_and_double);
    RUN(discard_hands_pages_back);
    RUN(follow_peak_bound);
    RUN(set_bounds_restarts_the_peak);
    RUN(cache_bytes_bound_without_follow_peak);
    RUN(max_mapped_bytes);
    RUN(cold_bound);
    RUN(trim_unmaps_kept_blocks);
    RUN(resize_hot_blocks);
    RUN(random_sequence_stats_consistency);
    RUN(random_sequence_with_resizing);
    RUN(threads);
    RUN(threads_with_resizing_and_prefault);
    RUN(prefault_fills_the_room);
    RUN(fork_while_another_thread_allocates);
    return tio_test_done();
}
