/*
 * No data loss under injected faults (the `fault` backend): a failed write keeps the previous
 * copy and reports the tensor; failed, zero-byte or corrupt reads are retried and then
 * reported with the tensor's identity; a full disk is reported at reservation with needed and
 * available bytes.
 */
#include <sys/statvfs.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "../tio_test.h"
#include "common/common_impl.h"
#include "io_util.h"

static char g_dir[512];
static const char *g_dirv[1] = { g_dir };

static struct tio_engine *make(const char *opts, int verify) {
    struct tio_engine_params p = io_params("fault", g_dirv, 1);
    p.backend_options = opts;
    p.verify = verify;
    p.retries = 2;
    struct tio_engine *e = NULL;
    int rc = tio_engine_new(&p, &e);
    if (rc < 0)
        printf("  engine: %s: %s\n", tio_strerror(rc), tio_last_error());
    return e;
}

/* 64 KiB, 4 KiB aligned: exactly one transfer per request with the default 4 MiB chunk. */
#define N 65536

TIO_TEST(failed_write_keeps_previous_copy) {
    /* write op 1 succeeds, ops 2..101 fail (beyond the 2 retries) */
    struct tio_engine *e = make("write_fail=2,write_fail_count=100", 0);
    REQUIRE(e != NULL);
    unsigned char *a = tio_aligned_alloc(4096, N), *b = tio_aligned_alloc(4096, N);
    io_fill(a, N, 1);
    CHECK_OK(io_write(e, 7, a, N, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 1, NULL));
    CHECK_EQ_I(io_wait1(e).res, N);
    io_fill(a, N, 2);
    CHECK_OK(io_write(e, 7, a, N, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 2, NULL));
    struct tio_completion c = io_wait1(e);
    CHECK_EQ_U(c.tag, 2);
    CHECK_EQ_I(c.res, -EIO);
    CHECK(strstr(tio_engine_last_error(e), "tensor 7") != NULL);
    CHECK(strstr(tio_engine_last_error(e), "3 attempt") != NULL);
    CHECK(io_check(a, N, 2)); /* the caller's buffer is untouched: it still has the tensor */
    CHECK_OK(io_read(e, 7, b, N, TIO_MEM_HOST, TIO_PRIO_URGENT, 3, NULL, NULL));
    CHECK_EQ_I(io_wait1(e).res, N);
    CHECK(io_check(b, N, 1)); /* the first copy survived */
    struct tio_engine_stats st;
    CHECK_OK(tio_engine_stats(e, &st));
    CHECK_EQ_U(st.retries, 2);
    CHECK_EQ_U(st.requests_failed, 1);
    CHECK_EQ_U(st.ssd_used_bytes, N); /* the failed copy's extents were freed */
    tio_engine_free(e);

    /* a first write that fails leaves no tensor behind */
    e = make("write_fail=1,write_fail_count=100", 0);
    CHECK_OK(io_write(e, 8, a, N, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 4, NULL));
    CHECK_EQ_I(io_wait1(e).res, -EIO);
    CHECK_RC(io_read(e, 8, b, N, TIO_MEM_HOST, TIO_PRIO_NORMAL, 5, NULL, NULL), TIO_ENOTFOUND);
    tio_engine_free(e);
    tio_free(a);
    tio_free(b);
}

TIO_TEST(transient_write_failure_is_retried) {
    struct tio_engine *e = make("write_fail=1", 1);
    REQUIRE(e != NULL);
    unsigned char *a = tio_aligned_alloc(4096, N), *b = tio_aligned_alloc(4096, N);
    io_fill(a, N, 3);
    CHECK_OK(io_write(e, 1, a, N, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 1, NULL));
    CHECK_EQ_I(io_wait1(e).res, N);
    CHECK_OK(io_read(e, 1, b, N, TIO_MEM_HOST, TIO_PRIO_NORMAL, 2, NULL, NULL));
    CHECK_EQ_I(io_wait1(e).res, N);
    CHECK(io_check(b, N, 3));
    tio_engine_free(e);
    tio_free(a);
    tio_free(b);
}

static void read_case(
    const char *opts, int verify, int64_t want_res, uint64_t want_retries, uint64_t want_crc) {
    struct tio_engine *e = make(opts, verify);
    REQUIRE(e != NULL);
    unsigned char *a = tio_aligned_alloc(4096, N), *b = tio_aligned_alloc(4096, N);
    io_fill(a, N, 4);
    CHECK_OK(io_write(e, 9, a, N, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 1, NULL));
    CHECK_EQ_I(io_wait1(e).res, N);
    CHECK_OK(io_read(e, 9, b, N, TIO_MEM_HOST, TIO_PRIO_NORMAL, 2, NULL, NULL));
    struct tio_completion c = io_wait1(e);
    CHECK_EQ_I(c.res, want_res);
    if (want_res == N) {
        CHECK(io_check(b, N, 4));
    } else {
        CHECK(strstr(tio_engine_last_error(e), "read of tensor 9") != NULL);
        printf("  reported: %s\n", tio_engine_last_error(e));
        /* the stored copy is still there: a later read (faults exhausted) works */
    }
    struct tio_engine_stats st;
    CHECK_OK(tio_engine_stats(e, &st));
    CHECK_EQ_U(st.retries, want_retries);
    CHECK_EQ_U(st.crc_errors, want_crc);
    tio_engine_free(e);
    tio_free(a);
    tio_free(b);
}

TIO_TEST(failed_read_retried_then_reported) {
    read_case("read_fail=1", 0, N, 1, 0);                           /* transient */
    read_case("read_fail=1,read_fail_count=100", 0, TIO_EIO, 2, 0); /* permanent */
}

TIO_TEST(zero_byte_transfer_is_an_error) {
    /* op 2 (the read) moves 0 bytes once: retried; always: -EIO after retries */
    read_case("zero=2", 0, N, 1, 0);
    read_case("zero=2,zero_count=100", 0, TIO_EIO, 2, 0);
}

TIO_TEST(corrupt_read_detected_by_crc) {
    read_case("corrupt=1", 1, N, 1, 1); /* retried, clean the 2nd time */
    read_case("corrupt=1,corrupt_count=100", 1, TIO_ECORRUPT, 2, 3); /* 1 + 2 retries */
}

TIO_TEST(full_disk_at_reservation) {
    struct statvfs vfs;
    CHECK(statvfs(g_dir, &vfs) == 0);
    uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    struct tio_engine_params p = io_params("posix", g_dirv, 1);
    struct tio_engine *e = NULL;
    CHECK_OK(tio_engine_new(&p, &e));
    REQUIRE(e != NULL);
    CHECK_RC(tio_engine_reserve(e, avail + (UINT64_C(1) << 40)), -ENOSPC);
    CHECK_ERR_HAS("needed");
    CHECK_ERR_HAS("available");
    CHECK_ERR_HAS(g_dir);
    printf("  reported: %s\n", tio_last_error());
    struct tio_engine_stats st;
    CHECK_OK(tio_engine_stats(e, &st));
    CHECK_EQ_U(st.ssd_capacity_bytes, 0); /* nothing was allocated */
    CHECK_OK(tio_engine_reserve(e, 1 << 20));
    CHECK_OK(tio_engine_stats(e, &st));
    CHECK_EQ_U(st.ssd_capacity_bytes, 1 << 20);
    tio_engine_free(e);
    /* the same through the creation parameters */
    p.ssd_reserve_bytes = avail + (UINT64_C(1) << 40);
    e = NULL;
    CHECK_RC(tio_engine_new(&p, &e), -ENOSPC);
    CHECK_ERR_HAS("needed");
    CHECK(e == NULL);
}

/* kB of locked memory (VmLck), -1 without /proc. */
static long vm_locked_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "VmLck:", 6) == 0) {
            kb = strtol(line + 6, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kb;
}

/* The host tier's lock goes with it: its memory can be malloc's heap, where a lock left behind
 * would pin (and refuse MADV_DONTNEED on) whatever malloc puts there next. Here, not in the
 * conformance test: that one runs with the fake cudart, whose host allocations are not locked. */
TIO_TEST(host_tier_lock_released) {
    long before = vm_locked_kb();
    REQUIRE(before >= 0); /* VmLck of /proc/self/status (Linux, the only system built for) */
#if defined(__GLIBC__)
    /* a 1 MiB block from the heap, as after glibc has raised its threshold (an mmapped block
     * would take its lock with it when unmapped) */
    (void)mallopt(M_MMAP_THRESHOLD, 32 << 20);
#endif
    struct tio_engine *e = io_host_tier_engine(g_dirv, 1 << 20);
    REQUIRE(e != NULL);
    void *above = malloc(1 << 20); /* from the heap top: keeps the pool off it (no trim) */
    long during = vm_locked_kb();
    tio_engine_free(e);
    long after = vm_locked_kb();
    free(above);
    CHECK(during >= before);
    CHECK_EQ_I(after, before);
#if defined(__GLIBC__)
    (void)mallopt(M_MMAP_THRESHOLD, 128 << 10);
#endif
}

TIO_TEST(bad_backend_options) {
    struct tio_engine_params p = io_params("fault", g_dirv, 1);
    p.backend_options = "write_fail=abc";
    struct tio_engine *e = NULL;
    CHECK_RC(tio_engine_new(&p, &e), TIO_EINVAL);
    CHECK_ERR_HAS("write_fail");
}

int main(void) {
    io_mkdtemp(g_dir, sizeof g_dir, "fault");
    RUN(failed_write_keeps_previous_copy);
    RUN(transient_write_failure_is_retried);
    RUN(failed_read_retried_then_reported);
    RUN(zero_byte_transfer_is_an_error);
    RUN(corrupt_read_detected_by_crc);
    RUN(full_disk_at_reservation);
    RUN(bad_backend_options);
    RUN(host_tier_lock_released);
    CHECK(rmdir(g_dir) == 0);
    return tio_test_done();
}
