/*
 * The emulated drive of the thread-pool backends (src/io/throttle.h, the throttle_* backend
 * options): a transfer never completes before the time a drive of the set rates and latency
 * would give it, in the order the transfers left the queue; reads and writes share the drive's
 * time and the latency does not occupy it; the bytes really move (read back and compared,
 * through the engine with CRC verification on); a bad value or a backend that cannot throttle
 * is a clear error. Only lower bounds on time are checked (a loaded machine makes transfers
 * later, never earlier).
 */
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include "../tio_test.h"
#include "backend_util.h"
#include "common/common_impl.h"
#include "io/throttle.h"
#include "io_util.h"

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The drive's arithmetic: back to back, a transfer starts when the one before it left the
 * drive (not after that one's latency), and takes len / rate of its direction. */
TIO_TEST(admit_shares_one_server_and_overlaps_latency) {
    struct tio_throttle t = { .read_Bps = 1e9, .write_Bps = 5e8, .latency_ns = 1000000 };
    uint64_t r1 = tio_throttle_admit(&t, TIO_IO_OP_READ, 1000000000); /* 1 s of the drive */
    uint64_t w1 = tio_throttle_admit(&t, TIO_IO_OP_WRITE, 500000000); /* 1 s more */
    uint64_t r2 = tio_throttle_admit(&t, TIO_IO_OP_READ, 250000000);  /* 0.25 s more */
    CHECK_EQ_U(w1 - r1, UINT64_C(1000000000));
    CHECK_EQ_U(r2 - w1, UINT64_C(250000000));
    CHECK_EQ_U(t.free_ns + t.latency_ns, r2);
    /* unlimited rates: latency alone */
    struct tio_throttle u = { .latency_ns = 5000 };
    uint64_t a = tio_throttle_admit(&u, TIO_IO_OP_WRITE, 1u << 30);
    uint64_t b = tio_throttle_admit(&u, TIO_IO_OP_READ, 1u << 30);
    CHECK(b - a < UINT64_C(1000000000)); /* the second did not wait for the first's bytes */
    CHECK_EQ_U(u.free_ns + u.latency_ns, b);
}

/* Submit the n 1 MiB requests (user ids first..first+n-1) at once and reap them: each must
 * complete no sooner than (its place in the queue + 1) x dur + lat after the submit. */
static void paced(void *st,
                  struct tio_io_req *reqs,
                  int n,
                  uint64_t first,
                  double dur,
                  double lat,
                  const char *what) {
    double t0 = mono_s();
    CHECK_EQ_I(tio_io_backend_posix.submit(st, reqs, n), n);
    for (int got = 0; got < n;) {
        struct tio_io_cqe q[8];
        int m = tio_io_backend_posix.reap(st, 1, n < 8 ? n : 8, WAIT_NS, q);
        REQUIRE(m > 0);
        double at = mono_s() - t0;
        for (int i = 0; i < m; i++, got++) {
            CHECK_EQ_I(q[i].res, 1 << 20);
            double due = (double)(q[i].user - first + 1) * dur + lat;
            if (at < due) {
                TIO_T_FAIL("%s %llu completed %.4f s after submit, the drive needs %.4f s", what,
                           (unsigned long long)q[i].user, at, due);
            }
        }
    }
}

/* Four 1 MiB writes at 40 MB/s queued at once on four workers: the k-th (in queue order)
 * completes at least k x 26.2 ms + latency after they were queued, and the bytes are there. */
TIO_TEST(posix_transfers_take_the_drives_time) {
    char path[] = "/tmp/tio_test_throttle_XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    (void)unlink(path);
    struct tio_io_config cfg = { .fds = &fd,
                                 .nfds = 1,
                                 .depth = 4,
                                 .threads = 4,
                                 .max_op = TIO_IO_MAX_OP,
                                 .options = "throttle_read=80000000,throttle_write=40000000,"
                                            "throttle_latency_ns=5000000" };
    void *st = NULL;
    CHECK_OK(tio_io_backend_posix.init(&cfg, &st));
    REQUIRE_OR(st != NULL, (void)close(fd));
    enum { N = 4, MIB = 1 << 20 };
    unsigned char *a = malloc((size_t)N * MIB), *b = calloc((size_t)N, MIB);
    REQUIRE(a && b);
    io_fill(a, (uint64_t)N * MIB, 7);
    struct tio_io_req w[N], r[N];
    for (int i = 0; i < N; i++) {
        w[i] = io_req((uint64_t)i, a + (size_t)i * MIB, (uint64_t)i * MIB, MIB, TIO_IO_OP_WRITE);
        r[i] =
            io_req((uint64_t)(N + i), b + (size_t)i * MIB, (uint64_t)i * MIB, MIB, TIO_IO_OP_READ);
    }
    const double wdur = (double)MIB / 40e6, rdur = (double)MIB / 80e6, lat = 5e-3;
    struct tio_throttle_counts c0, c1;
    tio_io_throttle_counts(&c0);
    /* queue order is submission order: the k-th leaves the drive after k + 1 transfers */
    paced(st, w, N, 0, wdur, lat, "write");
    paced(st, r, N, N, rdur, lat, "read");
    CHECK(memcmp(a, b, (size_t)N * MIB) == 0);
    tio_io_backend_posix.fini(st);
    tio_io_throttle_counts(&c1);
    CHECK_EQ_U(c1.transfers - c0.transfers, (uint64_t)(2 * N));
    CHECK_EQ_U(c1.read_bytes - c0.read_bytes, (uint64_t)N * MIB);
    CHECK_EQ_U(c1.write_bytes - c0.write_bytes, (uint64_t)N * MIB);
    /* the drive's time: N writes at 40 MB/s and N reads at 80 MB/s (rounded down to ns) */
    CHECK_NEAR((double)(c1.busy_ns - c0.busy_ns) * 1e-9, N * (wdur + rdur), 1e-8);
    CHECK(c1.max_behind_ns <= c1.behind_ns);
    free(a);
    free(b);
    (void)close(fd);
}

/* Through the engine: a tensor of 3 chunks and a tail written and read back with CRC
 * verification; the write alone needs its bytes / 50 MB/s. */
TIO_TEST(engine_round_trip_through_the_drive_is_bitwise) {
    char dir[256];
    io_mkdtemp(dir, sizeof dir, "throttle");
    const char *dirs[] = { dir };
    struct tio_engine_params p = io_params("posix", dirs, 1);
    p.chunk_bytes = 1u << 20;
    p.verify = 1;
    p.preallocate = 0;
    p.backend_options = "throttle_read=100000000,throttle_write=50000000";
    struct tio_engine *e = NULL;
    CHECK_OK(tio_engine_new(&p, &e));
    REQUIRE_OR(e != NULL, (void)rmdir(dir));
    const uint64_t bytes = (3u << 20) + 12345;
    unsigned char *a = malloc(bytes), *b = calloc(1, bytes);
    REQUIRE(a && b);
    io_fill(a, bytes, 11);
    double t0 = mono_s();
    CHECK_OK(io_write(e, 1, a, bytes, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 1, NULL));
    struct tio_completion c = io_wait1(e);
    double wt = mono_s() - t0;
    CHECK_EQ_I(c.res, (int64_t)bytes);
    CHECK(wt >= (double)bytes / 50e6);
    CHECK_OK(io_read(e, 1, b, bytes, TIO_MEM_HOST, TIO_PRIO_URGENT, 2, NULL, NULL));
    c = io_wait1(e);
    CHECK_EQ_I(c.res, (int64_t)bytes);
    CHECK(io_check(b, bytes, 11));
    tio_engine_free(e);
    free(a);
    free(b);
    CHECK_EQ_I(rmdir(dir), 0);
}

TIO_TEST(bad_values_and_backends_without_a_pool_are_refused) {
    char dir[256];
    io_mkdtemp(dir, sizeof dir, "throttle-bad");
    const char *dirs[] = { dir };
    struct tio_engine_params p = io_params("posix", dirs, 1);
    p.preallocate = 0;
    p.backend_options = "throttle_read=fast";
    struct tio_engine *e = NULL;
    CHECK_RC(tio_engine_new(&p, &e), TIO_EINVAL);
    CHECK_ERR_HAS("throttle_read");
    CHECK(e == NULL);
#if defined(TIO_HAVE_URING)
    p.backend = "uring";
    p.backend_options = "throttle_write=1000000";
    int rc = tio_engine_new(&p, &e);
    if (rc != TIO_EUNAVAIL) { /* io_uring may be off in this kernel: nothing to refuse then */
        CHECK_RC(rc, TIO_EINVAL);
        CHECK_ERR_HAS("thread-pool backend");
    }
    tio_engine_free(e);
#endif
    CHECK_EQ_I(rmdir(dir), 0);
}

int main(void) {
    RUN(admit_shares_one_server_and_overlaps_latency);
    RUN(posix_transfers_take_the_drives_time);
    RUN(engine_round_trip_through_the_drive_is_bitwise);
    RUN(bad_values_and_backends_without_a_pool_are_refused);
    return tio_test_done();
}
