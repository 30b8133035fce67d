/*
 * Minimal test harness (docs/style.md): checks print file, line and both values; the last line is
 * "N passed, N failed" (", N skipped" where a case was skipped); exit 1 if a case failed, else 77
 * (CTest's SKIP_RETURN_CODE: listed as not run) if a case was skipped, else 0.
 *
 *     TIO_TEST(parses_sizes) { uint64_t v; CHECK_OK(tio_parse_bytes("1KiB", &v)); CHECK_EQ_U(v,
 * 1024); } int main(void) { RUN(parses_sizes); return tio_test_done(); }
 */
#ifndef TIO_TEST_H
#define TIO_TEST_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <teraio/alloc_internal.h> /* the library's allocation counters and fault injection */
#include <teraio/status.h>

static int tio_t_passed, tio_t_failed, tio_t_skipped, tio_t_cur_failed, tio_t_cur_skipped;
static const char *tio_t_name;

#define TIO_TEST(name) static void test_##name(void)

#define RUN(name)                       \
    do {                                \
        tio_t_name = #name;             \
        tio_t_cur_failed = 0;           \
        tio_t_cur_skipped = 0;          \
        test_##name();                  \
        if (tio_t_cur_failed) {         \
            tio_t_failed++;             \
            printf("FAIL %s\n", #name); \
        } else if (tio_t_cur_skipped) { \
            tio_t_skipped++;            \
            printf("skip %s\n", #name); \
        } else {                        \
            tio_t_passed++;             \
            printf("ok   %s\n", #name); \
        }                               \
        fflush(stdout);                 \
    } while (0)

#define TIO_T_FAIL(...)                          \
    do {                                         \
        printf("  %s:%d: ", __FILE__, __LINE__); \
        printf(__VA_ARGS__);                     \
        printf("\n");                            \
        tio_t_cur_failed = 1;                    \
    } while (0)

#define CHECK(cond)                                \
    do {                                           \
        if (!(cond))                               \
            TIO_T_FAIL("CHECK(%s) failed", #cond); \
    } while (0)

/* REQUIRE: like CHECK, but a failure also ends the test (what follows needs `cond`). */
#define REQUIRE(cond)                                \
    do {                                             \
        if (!(cond)) {                               \
            TIO_T_FAIL("REQUIRE(%s) failed", #cond); \
            return;                                  \
        }                                            \
    } while (0)

/*
 * REQUIRE_OR: like REQUIRE, but runs `cleanup` (an expression: a call, or calls joined by
 * commas) before ending the test, so that what the test holds is freed.
 *     CHECK_OK(tio_analysis_new(tr, NULL, &a));
 *     REQUIRE_OR(a != NULL, tio_trace_free(tr));
 */
#define REQUIRE_OR(cond, cleanup)                    \
    do {                                             \
        if (!(cond)) {                               \
            TIO_T_FAIL("REQUIRE(%s) failed", #cond); \
            (void)(cleanup);                         \
            return;                                  \
        }                                            \
    } while (0)

/*
 * SKIP_CASE: end the current case as skipped, with the reason, where what it checks cannot run
 * here (a kernel feature missing, not being root). A skipped case is not counted as passed: the
 * program exits 77 unless another case failed.
 */
#define SKIP_CASE(...)         \
    do {                       \
        printf("  skip: ");    \
        printf(__VA_ARGS__);   \
        printf("\n");          \
        tio_t_cur_skipped = 1; \
        return;                \
    } while (0)

#define CHECK_EQ_U(a, b)                                                       \
    do {                                                                       \
        uint64_t va_ = (uint64_t)(a), vb_ = (uint64_t)(b);                     \
        if (va_ != vb_)                                                        \
            TIO_T_FAIL("%s == %s: %" PRIu64 " != %" PRIu64, #a, #b, va_, vb_); \
    } while (0)

#define CHECK_EQ_I(a, b)                                                       \
    do {                                                                       \
        int64_t va_ = (int64_t)(a), vb_ = (int64_t)(b);                        \
        if (va_ != vb_)                                                        \
            TIO_T_FAIL("%s == %s: %" PRId64 " != %" PRId64, #a, #b, va_, vb_); \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                               \
    do {                                                                                    \
        double va_ = (double)(a), vb_ = (double)(b);                                        \
        if (!(fabs(va_ - vb_) <= (tol)))                                                    \
            TIO_T_FAIL("%s ~= %s: %.9g != %.9g (tol %g)", #a, #b, va_, vb_, (double)(tol)); \
    } while (0)

#define CHECK_STR(a, b)                                                            \
    do {                                                                           \
        const char *sa_ = (a), *sb_ = (b);                                         \
        if (!sa_ || !sb_ || strcmp(sa_, sb_) != 0)                                 \
            TIO_T_FAIL("%s == %s: \"%s\" != \"%s\"", #a, #b, sa_ ? sa_ : "(null)", \
                       sb_ ? sb_ : "(null)");                                      \
    } while (0)

/* The call must return >= 0; prints the status and detail otherwise. */
#define CHECK_OK(call)                                                                      \
    do {                                                                                    \
        int rc_ = (call);                                                                   \
        if (rc_ < 0)                                                                        \
            TIO_T_FAIL("%s: %d (%s: %s)", #call, rc_, tio_strerror(rc_), tio_last_error()); \
    } while (0)

/* The call must return exactly `code`. */
#define CHECK_RC(call, code)                                                                       \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != (code))                                                                         \
            TIO_T_FAIL("%s: got %d (%s), want %d (%s); detail: %s", #call, rc_, tio_strerror(rc_), \
                       (int)(code), tio_strerror(code), tio_last_error());                         \
    } while (0)

/* The detail of the last error must contain `needle`. */
#define CHECK_ERR_HAS(needle)                                                         \
    do {                                                                              \
        if (!strstr(tio_last_error(), (needle)))                                      \
            TIO_T_FAIL("last error \"%s\" lacks \"%s\"", tio_last_error(), (needle)); \
    } while (0)

/*
 * tio_test_run_cli: run "$TIO_CLI <args> 2>&1" (args are shell words), capture up to outlen-1
 * bytes of its output into out (NUL-terminated) and return its exit status, or -1 if it could
 * not run or was killed. For the CLI tests.
 */
static inline int tio_test_run_cli(const char *args, char *out, size_t outlen) {
    const char *cli = getenv("TIO_CLI");
    char cmd[8192];
    (void)snprintf(cmd, sizeof cmd, "%s %s 2>&1", cli ? cli : "teraio", args);
    FILE *p = popen(cmd, "r");
    if (!p) {
        return -1;
    }
    size_t n = fread(out, 1, outlen - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/*
 * tio_test_expand: copy a CLI test's argument template into out (NUL-terminated, cut at len-1
 * bytes) with "%T" replaced by `trace` and "%D" by `dir`.
 */
static inline void
tio_test_expand(const char *args, const char *trace, const char *dir, char *out, size_t len) {
    size_t n = 0;
    for (const char *p = args; *p && n + 1 < len; p++) {
        const char *sub = NULL;
        if (p[0] == '%' && p[1] == 'T') {
            sub = trace;
        } else if (p[0] == '%' && p[1] == 'D') {
            sub = dir;
        }
        if (sub) {
            n += (size_t)snprintf(out + n, len - n, "%s", sub);
            p++;
        } else {
            out[n++] = *p;
        }
        if (n >= len) {
            n = len - 1;
        }
    }
    out[n] = '\0';
}

/*
 * tio_test_bounded: run fn(arg) in a child process limited to `seconds` of wall time (alarm)
 * and, except under AddressSanitizer (which reserves terabytes of address space), to `mib` MiB
 * of address space; returns fn's result (its exit status), or -1 if the child was killed (a
 * hang or a blown memory limit) or could not start. For hostile-input tests.
 */
static inline int tio_test_bounded(int (*fn)(void *), void *arg, unsigned mib, unsigned seconds) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        return -1;
    }
    if (pid == 0) {
#if !defined(__SANITIZE_ADDRESS__)
        struct rlimit rl = { .rlim_cur = (rlim_t)mib << 20, .rlim_max = (rlim_t)mib << 20 };
        (void)setrlimit(RLIMIT_AS, &rl);
#else
        (void)mib;
#endif
        alarm(seconds);
        int r = fn(arg);
        fflush(stdout);
        _exit(r & 0xff);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0) {
    }
    if (WIFEXITED(st)) {
        return WEXITSTATUS(st);
    }
    printf("  child killed by signal %d (a hang or a memory limit)\n",
           WIFSIGNALED(st) ? WTERMSIG(st) : -1);
    return -1;
}

static inline int tio_test_done(void) {
    if (tio_t_skipped) {
        printf("%d passed, %d failed, %d skipped\n", tio_t_passed, tio_t_failed, tio_t_skipped);
    } else {
        printf("%d passed, %d failed\n", tio_t_passed, tio_t_failed);
    }
    return tio_t_failed ? 1 : tio_t_skipped ? 77 : 0;
}

/* Skip the whole test program (exit 77) with a reason. */
#define TIO_SKIP(...)                                \
    do {                                             \
        printf("skip: ");                            \
        printf(__VA_ARGS__);                         \
        printf("\n0 passed, 0 failed, 1 skipped\n"); \
        exit(77);                                    \
    } while (0)

#endif
