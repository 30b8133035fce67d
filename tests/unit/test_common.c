/* Common infrastructure: status strings, error detail, units, allocation, CRC32C, logging. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <teraio/teraio.h>

#include "common/common_impl.h"
#include "tio_test.h"

TIO_TEST(strerror_covers_codes) {
    for (int c = TIO_STATUS_MIN; c <= TIO_EINVAL; c++) {
        CHECK(strcmp(tio_strerror(c), "unknown teraio status") != 0);
    }
    CHECK_STR(tio_strerror(0), "success");
    /* a version error says what to do, for files and structs alike */
    CHECK(strstr(tio_strerror(TIO_EVERSION), "newer or older teraio") != NULL);
    CHECK(strstr(tio_strerror(TIO_EVERSION), "regenerate/rebuild") != NULL);
    /* a plan error names every cause it is used for: another trace, a bad move, a failed check */
    CHECK(strstr(tio_strerror(TIO_EPLAN), "another trace") != NULL);
    CHECK(strstr(tio_strerror(TIO_EPLAN), "move out of range or inconsistent") != NULL);
    CHECK(strstr(tio_strerror(TIO_EPLAN), "over capacity") != NULL);
    CHECK(strstr(tio_strerror(-ENOSPC), "space") != NULL);
    CHECK_STR(tio_strerror(-999999), "unknown teraio status");
}

TIO_TEST(error_detail_is_kept) {
    CHECK_RC(tio_set_error(TIO_EFORMAT, "field %s = %d", "kernels", 7), TIO_EFORMAT);
    CHECK_STR(tio_last_error(), "field kernels = 7");
    tio_clear_error();
    CHECK_STR(tio_last_error(), "");
}

/* The input-error rule the CLI's exit codes and the Python report share, code by code. */
TIO_TEST(status_is_input_error) {
    const int input[] = { TIO_EINVAL,      TIO_EFORMAT,   TIO_EVERSION, TIO_EPLAN,
                          TIO_EINFEASIBLE, TIO_ENOTFOUND, -ENOENT,      -EISDIR,
                          -ENOTDIR,        -ELOOP,        -EACCES,      -EPERM };
    const int other[] = { 0,          1,           TIO_ENOMEM,   TIO_EUNAVAIL,
                          TIO_ECUDA,  TIO_ECUFILE, TIO_ECORRUPT, TIO_ECANCELED,
                          TIO_ESTATE, TIO_EIO,     -ENOSPC,      -EIO,
                          -EINVAL,    -999999 };
    for (size_t i = 0; i < sizeof input / sizeof input[0]; i++) {
        CHECK_EQ_I(tio_status_is_input_error(input[i]), 1);
    }
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        CHECK_EQ_I(tio_status_is_input_error(other[i]), 0);
    }
}

TIO_TEST(parse_bytes) {
    uint64_t v = 0;
    CHECK_OK(tio_parse_bytes("4096", &v));
    CHECK_EQ_U(v, 4096);
    CHECK_OK(tio_parse_bytes("94GiB", &v));
    CHECK_EQ_U(v, 94ULL * 1024 * 1024 * 1024);
    CHECK_OK(tio_parse_bytes("1.5 GB", &v));
    CHECK_EQ_U(v, 1500000000ULL);
    CHECK_OK(tio_parse_bytes("512MiB", &v));
    CHECK_EQ_U(v, 512ULL << 20);
    CHECK_RC(tio_parse_bytes("12 parsecs", &v), TIO_EINVAL);
    CHECK_ERR_HAS("parsecs");
    CHECK_RC(tio_parse_bytes("-1GB", &v), TIO_EINVAL);
    CHECK_RC(tio_parse_bytes("", &v), TIO_EINVAL);
    CHECK_RC(tio_parse_bytes("99999999999PiB", &v), TIO_EINVAL);
    /* exbibytes: tio_format_bytes prints "EiB", so it must parse */
    CHECK_OK(tio_parse_bytes("3EiB", &v));
    CHECK_EQ_U(v, UINT64_C(3) << 60);
    CHECK_OK(tio_parse_bytes("2 EB", &v));
    CHECK_EQ_U(v, UINT64_C(2000000000000000000));
    char buf[32];
    CHECK_STR(tio_format_bytes(UINT64_C(3) << 60, buf, sizeof buf), "3.00 EiB");
    CHECK_OK(tio_parse_bytes(buf, &v));
    CHECK_EQ_U(v, UINT64_C(3) << 60);
    CHECK_RC(tio_parse_bytes("16EiB", &v), TIO_EINVAL); /* 2^64 */
    CHECK_ERR_HAS("too large");
}

TIO_TEST(parse_rate_and_duration) {
    double r = 0, s = 0;
    CHECK_OK(tio_parse_rate("6.5GB/s", &r));
    CHECK_NEAR(r, 6.5e9, 1);
    CHECK_OK(tio_parse_rate("16GiB/s", &r));
    CHECK_NEAR(r, 16.0 * 1073741824.0, 1);
    CHECK_OK(tio_parse_duration("10ms", &s));
    CHECK_NEAR(s, 0.01, 1e-12);
    CHECK_OK(tio_parse_duration("300us", &s));
    CHECK_NEAR(s, 300e-6, 1e-12);
    CHECK_OK(tio_parse_duration("2min", &s));
    CHECK_NEAR(s, 120, 1e-9);
    CHECK_RC(tio_parse_duration("3 fortnights", &s), TIO_EINVAL);
}

/* One decimal grammar for every value: what strtod would also take is refused. */
TIO_TEST(parse_refuses_what_is_not_decimal) {
    uint64_t v = 0;
    double d = 0;
    static const char *const bad[] = { " 1MiB", "1MiB ", "0x10", "0x1p4", "inf", "nan", "infinity",
                                       "1e999", "",      " ",    "1e",    "e5",  "." };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_RC(tio_parse_bytes(bad[i], &v), TIO_EINVAL);
        CHECK_RC(tio_parse_rate(bad[i], &d), TIO_EINVAL);
        CHECK_RC(tio_parse_duration(bad[i], &d), TIO_EINVAL);
    }
    CHECK_RC(tio_parse_bytes("1.5", &v), TIO_EINVAL); /* not 2 bytes */
    CHECK_ERR_HAS("whole number of bytes");
    CHECK_RC(tio_parse_bytes("0.5B", &v), TIO_EINVAL);
    CHECK_RC(tio_parse_rate("1e308GB/s", &d), TIO_EINVAL); /* inf after the unit */
    CHECK_OK(tio_parse_bytes("1.5KiB", &v));
    CHECK_EQ_U(v, 1536);
    CHECK_OK(tio_parse_bytes("1e3", &v));
    CHECK_EQ_U(v, 1000);
    CHECK_OK(tio_parse_bytes(".5KiB", &v));
    CHECK_EQ_U(v, 512);
    CHECK_OK(tio_parse_duration("1.5e-3", &d));
    CHECK_NEAR(d, 1.5e-3, 1e-15);
}

TIO_TEST(format_units) {
    char buf[32];
    CHECK_STR(tio_format_bytes(512, buf, sizeof buf), "512 B");
    CHECK_STR(tio_format_bytes(1536, buf, sizeof buf), "1.50 KiB");
    CHECK_STR(tio_format_bytes(94ULL << 30, buf, sizeof buf), "94.0 GiB");
    CHECK_STR(tio_format_rate(6.5e9, buf, sizeof buf), "6.50 GB/s");
    CHECK_STR(tio_format_duration(0.00456, buf, sizeof buf), "4.56 ms");
}

TIO_TEST(alloc_counts_and_fault_injection) {
    int64_t before = tio_alloc_live_count();
    void *p = tio_malloc(100);
    CHECK(p != NULL);
    CHECK_EQ_I(tio_alloc_live_count(), before + 1);
    tio_free(p);
    CHECK_EQ_I(tio_alloc_live_count(), before);
    tio_alloc_fail_after(1);
    void *a = tio_malloc(8);
    void *b = tio_malloc(8);
    void *c = tio_malloc(8);
    CHECK(a != NULL);
    CHECK(b == NULL);
    CHECK(c != NULL);
    tio_free(a);
    tio_free(c);
    tio_alloc_fail_after(-1);
    void *al = tio_aligned_alloc(4096, 10);
    CHECK(al != NULL && ((uintptr_t)al % 4096) == 0);
    tio_free(al);
}

/* I/O memory: 4 KiB-aligned below 2 MiB, 2 MiB-aligned (and huge-page advised on Linux) from
 * 2 MiB up; usable to its last byte; freed by tio_free; allocation failures reported. */
TIO_TEST(io_alloc_alignment) {
    int64_t before = tio_alloc_live_count();
    const size_t sizes[] = { 1, 4096, 1u << 20, (2u << 20) - 4096, 2u << 20, (6u << 20) + 4096 };
    for (size_t i = 0; i < TIO_ARRAY_LEN(sizes); i++) {
        unsigned char *p = tio_io_alloc(sizes[i]);
        CHECK(p != NULL);
        size_t want = sizes[i] >= (2u << 20) ? (2u << 20) : 4096u;
        CHECK_EQ_U((uintptr_t)p % want, 0u);
        memset(p, 0xa5, sizes[i]);
        CHECK_EQ_U(p[sizes[i] - 1], 0xa5u);
        tio_free(p);
    }
    CHECK_EQ_I(tio_alloc_live_count(), before);
#if defined(__linux__)
    /* the advice is visible in the mapping's flags ("hg" in VmFlags) where THP is compiled in */
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f) {
        fclose(f);
        unsigned char *p = tio_io_alloc(4u << 20);
        CHECK(p != NULL);
        char line[512];
        int hg = 0;
        FILE *sm = fopen("/proc/self/smaps", "r");
        CHECK(sm != NULL);
        uintptr_t lo = 0, hi = 0, at = (uintptr_t)p;
        int inside = 0;
        while (sm && fgets(line, sizeof line, sm)) {
            if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) { /* a mapping's first line */
                inside = at >= lo && at < hi;
            } else if (inside && !strncmp(line, "VmFlags:", 8)) {
                hg = strstr(line, " hg") != NULL;
            }
        }
        if (sm)
            fclose(sm);
        CHECK(hg);
        tio_free(p);
    }
#endif
    tio_alloc_fail_after(0);
    CHECK(tio_io_alloc(4u << 20) == NULL);
    tio_alloc_fail_after(-1);
}

TIO_TEST(crc32c_known_vectors) {
    /* Standard check value of CRC-32C: "123456789" -> 0xE3069283 (RFC 3720 appendix). */
    CHECK_EQ_U(tio_crc32c(0, "123456789", 9), 0xE3069283u);
    /* 32 bytes of zeros -> 0x8A9136AA (RFC 3720 B.4). */
    unsigned char z[32] = { 0 };
    CHECK_EQ_U(tio_crc32c(0, z, sizeof z), 0x8A9136AAu);
    /* Streaming equals one shot. */
    CHECK_EQ_U(tio_crc32c(tio_crc32c(0, "12345", 5), "6789", 4), 0xE3069283u);
}

/* CRC-32C one bit at a time, the definition: the reference for the fast paths. */
static uint32_t crc_bitwise(const unsigned char *p, size_t len) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < len; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) {
            c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        }
    }
    return ~c;
}

TIO_TEST(crc32c_long_buffers_match_the_definition) {
    /* lengths around the interleaved rounds (3 x 4096 bytes), unaligned starts, streaming */
    enum { N = 3 * 3 * 4096 + 100 };
    unsigned char *buf = malloc(N + 8);
    CHECK(buf != NULL);
    uint32_t x = 12345;
    for (size_t i = 0; i < N + 8; i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = (unsigned char)(x >> 16);
    }
    const size_t lens[] = { 0, 1, 7, 4096, 12287, 12288, 12289, 24576 + 5, N };
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        for (size_t off = 0; off < 3; off++) {
            CHECK_EQ_U(tio_crc32c(0, buf + off, lens[i]), crc_bitwise(buf + off, lens[i]));
        }
    }
    uint32_t part = tio_crc32c(0, buf, 5000);
    CHECK_EQ_U(tio_crc32c(part, buf + 5000, N - 5000), crc_bitwise(buf, N));
    free(buf);
}

static int log_calls;
static char log_last[256];
static void sink(int level, const char *func, const char *msg, void *ud) {
    (void)func;
    (void)level;
    log_calls += *(int *)ud;
    snprintf(log_last, sizeof log_last, "%s", msg);
}

TIO_TEST(log_callback_and_level) {
    int inc = 1;
    tio_log_set(sink, &inc);
    tio_log_set_level(TIO_LOG_INFO);
    TIO_LOG_INFO("hello %d", 42);
    TIO_LOG_DEBUG("not shown %d", 1);
    CHECK_EQ_I(log_calls, 1);
    CHECK_STR(log_last, "hello 42");
    tio_log_set(NULL, NULL);
    tio_log_set_level(TIO_LOG_WARN);
}

/* A sink slow enough that the writing thread holds the library's sink lock most of the time. */
static atomic_int fork_spam_stop;
static void slow_sink(int level, const char *func, const char *msg, void *ud) {
    (void)level;
    (void)func;
    (void)msg;
    (void)ud;
    struct timespec ts = { 0, 2000000 };
    nanosleep(&ts, NULL);
}
static void *spam(void *unused) {
    (void)unused;
    while (!atomic_load(&fork_spam_stop)) {
        TIO_LOG_WARN("from another thread");
    }
    return NULL;
}

/* fork() while another thread is inside the sink: the child logs without a hang (it would wait
 * forever for a lock held by a thread it does not have). */
TIO_TEST(log_in_a_child_forked_while_another_thread_logs) {
    tio_log_set(slow_sink, NULL);
    atomic_store(&fork_spam_stop, 0);
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, spam, NULL) == 0);
    int hung = 0, bad = 0;
    for (int i = 0; i < 8; i++) {
        struct timespec ts = { 0, 3000000 };
        nanosleep(&ts, NULL);
        pid_t pid = fork();
        if (pid == 0) {
            tio_log_set(NULL, NULL); /* the sink lock first, then a message to stderr */
            TIO_LOG_ERROR("child %d logs", i);
            _exit(0);
        }
        REQUIRE(pid > 0);
        int status = 0, done = 0;
        for (int w = 0; w < 500 && !done; w++) { /* 5 s */
            done = waitpid(pid, &status, WNOHANG) == pid;
            if (!done) {
                struct timespec p = { 0, 10000000 };
                nanosleep(&p, NULL);
            }
        }
        if (!done) {
            hung++;
            (void)kill(pid, SIGKILL);
            (void)waitpid(pid, &status, 0);
        } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            bad++;
        }
    }
    atomic_store(&fork_spam_stop, 1);
    pthread_join(th, NULL);
    tio_log_set(NULL, NULL);
    CHECK_EQ_I(hung, 0);
    CHECK_EQ_I(bad, 0);
}

/* Nanoseconds from a to b. */
static int64_t ns_between(const struct timespec *a, const struct timespec *b) {
    return (int64_t)(b->tv_sec - a->tv_sec) * 1000000000 + (b->tv_nsec - a->tv_nsec);
}

TIO_TEST(deadline_in_is_normalized) {
    /* offsets whose nanoseconds carry into the seconds, and ones that do not */
    const int64_t ns[] = { 0, 1, 50000, 999999999, 1000000000, 1999999999, 3500000000 };
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        struct timespec before, d, after;
        clock_gettime(CLOCK_REALTIME, &before);
        tio_deadline_in(ns[i], &d);
        clock_gettime(CLOCK_REALTIME, &after);
        CHECK(d.tv_nsec >= 0 && d.tv_nsec < 1000000000);
        CHECK(ns_between(&before, &d) >= ns[i]);
        CHECK(ns_between(&after, &d) <= ns[i]);
    }
    struct timespec before, d, after; /* < 0: now */
    clock_gettime(CLOCK_REALTIME, &before);
    tio_deadline_in(-1, &d);
    clock_gettime(CLOCK_REALTIME, &after);
    CHECK(ns_between(&before, &d) >= 0 && ns_between(&d, &after) >= 0);
}

TIO_TEST(version) {
    CHECK_STR(tio_version(), TIO_VERSION_STRING);
    CHECK_EQ_I(tio_version_number(),
               TIO_VERSION_MAJOR * 10000 + TIO_VERSION_MINOR * 100 + TIO_VERSION_PATCH);
}

int main(void) {
    RUN(strerror_covers_codes);
    RUN(error_detail_is_kept);
    RUN(status_is_input_error);
    RUN(parse_bytes);
    RUN(parse_rate_and_duration);
    RUN(parse_refuses_what_is_not_decimal);
    RUN(format_units);
    RUN(alloc_counts_and_fault_injection);
    RUN(io_alloc_alignment);
    RUN(crc32c_known_vectors);
    RUN(crc32c_long_buffers_match_the_definition);
    RUN(log_callback_and_level);
    RUN(log_in_a_child_forked_while_another_thread_logs);
    RUN(deadline_in_is_normalized);
    RUN(version);
    return tio_test_done();
}
