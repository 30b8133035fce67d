/* Shared fixtures of the block cache tests (test_blockcache*.c; header-only, each test is one
 * executable): parameters, stats, the reference size class, residency and VMA probes, and the
 * byte patterns written into blocks. Expected values are computed here, independently of the
 * library. */
#ifndef TIO_TESTS_BLOCKCACHE_UTIL_H
#define TIO_TESTS_BLOCKCACHE_UTIL_H

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

/* The size class from the header: rounded up to 64 KiB below 2 MiB, 512 KiB below 16 MiB, 2 MiB
 * above; 0 for 0 or when rounding up overflows. */
static inline uint64_t ref_class(uint64_t b) {
    if (b == 0) {
        return 0;
    }
    uint64_t g = b <= 2 * MiB ? 64 * KiB : b <= 16 * MiB ? 512 * KiB : 2 * MiB;
    if (b > UINT64_MAX - (g - 1)) {
        return 0;
    }
    return (b + g - 1) / g * g;
}

static inline struct tio_bcache_params
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

static inline struct tio_bcache *mk(const struct tio_bcache_params *p) {
    struct tio_bcache *c = NULL;
    CHECK_OK(tio_bcache_new(p, &c));
    CHECK(c != NULL);
    return c;
}

static inline struct tio_bcache_stats st(struct tio_bcache *c) {
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

static inline int aligned_2m(const void *p) {
    return ((uintptr_t)p & (uintptr_t)(2 * MiB - 1)) == 0;
}

/* Resident pages of [p, p + len) by mincore(2), or -1 if mincore fails (e.g. unmapped). */
static inline long resident_pages(void *p, uint64_t len) {
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

static inline long pages_of(uint64_t len) {
    long pg = sysconf(_SC_PAGESIZE);
    return (long)((len + (uint64_t)pg - 1) / (uint64_t)pg);
}

/* Whether the mapping holding p lists `flag` in its /proc/self/smaps VmFlags: 1, 0, or -1. */
static inline int vma_has_flag(const void *p, const char *flag) {
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

static inline int thp_available(void) {
    return access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0;
}

/* xorshift64*: a small fixed-seed PRNG. */
static inline uint64_t rng_next(uint64_t *s) {
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 2685821657736338717ull;
}

/* A per-block byte pattern at sampled offsets: the first 16 bytes, every 4093rd byte (so every
 * page and varying offsets within pages) and the last byte of the requested size. Never 0. */
static inline uint8_t pat(uint64_t id, uint64_t off) {
    uint64_t h = (id + 1) * 0x9E3779B97F4A7C15ull ^ (off + 0x51) * 0xC2B2AE3D27D4EB4Full;
    h ^= h >> 29;
    return (uint8_t)(h | 1);
}

enum { FILL, VERIFY, ZERO };

/* FILL writes the pattern; VERIFY and ZERO count the offsets that differ from the pattern or 0. */
static inline uint64_t visit(void *p, uint64_t size, uint64_t id, int mode) {
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

static inline uint64_t count_nonzero(const void *p, uint64_t len) {
    const uint64_t *w = p;
    uint64_t bad = 0;
    for (uint64_t i = 0; i < len / 8; i++) {
        bad += w[i] != 0;
    }
    return bad;
}

static inline uint64_t count_not(const void *p, uint64_t len, uint8_t v) {
    const uint8_t *b = p;
    uint64_t bad = 0;
    for (uint64_t i = 0; i < len; i++) {
        bad += b[i] != v;
    }
    return bad;
}

/* Stats once the prefault thread has faulted in `bytes` in all and is idle (at most 10 s). */
static inline struct tio_bcache_stats wait_prefaulted(struct tio_bcache *c, uint64_t bytes) {
    struct tio_bcache_stats s = st(c);
    for (int i = 0; i < 1000 && (s.prefaulted_bytes < bytes || s.prefaulting_bytes); i++) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        s = st(c);
    }
    return s;
}

static inline void wait_prefault_idle(struct tio_bcache *c) {
    (void)wait_prefaulted(c, 0);
}

#endif
