/* Shared helpers of the tests/io programs (header-only; each test is one executable). */
#ifndef TIO_TESTS_IO_UTIL_H
#define TIO_TESTS_IO_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <teraio/alloc.h>
#include <teraio/io.h>

#define WAIT_NS INT64_C(30000000000) /* 30 s: a hang fails the test instead of CI */

/* A fresh directory under $TMPDIR (or the build dir, or /tmp). */
static inline void io_mkdtemp(char *out, size_t len, const char *tag) {
    const char *base = getenv("TMPDIR");
    if (!base || !*base)
        base = getenv("TIO_BUILD_DIR");
    if (!base || !*base)
        base = "/tmp";
    snprintf(out, len, "%s/tio-%s-XXXXXX", base, tag);
    if (!mkdtemp(out)) {
        perror("mkdtemp");
        exit(1);
    }
}

/* Number of entries (other than . and ..) in dir; -1 if unreadable. */
static inline int io_dir_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* Independent pattern: xorshift64* words from a seed (8 bytes per step, little-endian). */
static inline void io_fill(unsigned char *p, uint64_t n, uint64_t seed) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (uint64_t i = 0; i < n; i += 8) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        uint64_t w = x * 0x2545F4914F6CDD1Dull;
        size_t k = n - i < 8 ? (size_t)(n - i) : 8;
        memcpy(p + i, &w, k);
    }
}

/* A producer for the fake CUDA runtime's streams (`launch_host_func`): fills the shadow of
 * device memory with io_fill's pattern, as a kernel writing that memory would. */
struct io_fill_arg {
    unsigned char *shadow;
    uint64_t n, seed;
};
static inline void io_fill_fn(void *arg) {
    const struct io_fill_arg *f = arg;
    io_fill(f->shadow, f->n, f->seed);
}

/* 1 if p holds the pattern of seed. */
static inline int io_check(const unsigned char *p, uint64_t n, uint64_t seed) {
    unsigned char *want = malloc(n ? n : 1);
    io_fill(want, n, seed);
    int ok = memcmp(p, want, n) == 0;
    free(want);
    return ok;
}

static inline struct tio_engine_params
io_params(const char *backend, const char *const *dirs, size_t ndirs) {
    struct tio_engine_params p = tio_engine_params_default();
    p.backend = backend;
    p.dirs = dirs;
    p.ndirs = ndirs;
    return p;
}

/* A posix engine on one directory with a host tier of host_bytes; NULL, with the error printed,
 * if it cannot be made. */
static inline struct tio_engine *io_host_tier_engine(const char *const *dirs, uint64_t host_bytes) {
    struct tio_engine_params p = io_params("posix", dirs, 1);
    p.host_tier_bytes = host_bytes;
    struct tio_engine *e = NULL;
    if (tio_engine_new(&p, &e) != 0) {
        fprintf(stderr, "  tio_engine_new with a host tier: %s\n", tio_last_error());
        return NULL;
    }
    return e;
}

/* Wait for exactly one completion (30 s limit); res set to INT64_MIN on timeout. */
static inline struct tio_completion io_wait1(struct tio_engine *e) {
    struct tio_completion c = { 0, INT64_MIN };
    int n = tio_engine_wait(e, &c, 1, 1, WAIT_NS);
    if (n != 1)
        c.res = INT64_MIN;
    return c;
}

/* The engine's requests in the argument order the tests were written in (tests only: the
 * request structs name each field so that callers cannot swap them). */
static inline int io_write(struct tio_engine *e,
                           uint64_t tensor_id,
                           const void *src,
                           uint64_t bytes,
                           int32_t mem,
                           int32_t tier,
                           int32_t priority,
                           uint64_t tag,
                           void *fence) {
    struct tio_engine_write_request r = { .struct_size = sizeof r,
                                          .tensor_id = tensor_id,
                                          .src = src,
                                          .bytes = bytes,
                                          .mem = mem,
                                          .tier = tier,
                                          .priority = priority,
                                          .tag = tag,
                                          .fence = fence };
    return tio_engine_write(e, &r);
}

static inline int io_read(struct tio_engine *e,
                          uint64_t tensor_id,
                          void *dst,
                          uint64_t bytes,
                          int32_t mem,
                          int32_t priority,
                          uint64_t tag,
                          void *fence,
                          void *done) {
    struct tio_engine_read_request r = { .struct_size = sizeof r,
                                         .tensor_id = tensor_id,
                                         .dst = dst,
                                         .bytes = bytes,
                                         .mem = mem,
                                         .priority = priority,
                                         .tag = tag,
                                         .fence = fence,
                                         .done = done };
    return tio_engine_read(e, &r);
}

#endif
