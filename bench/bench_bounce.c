/*
 * The bounce path of the cufile backend (src/io/bounce.c: the files cuFile refused, the
 * unaligned tails) on the fake CUDA runtime's timed mode: a tensor of device memory written to
 * this machine's disk through the engine and read back, one worker thread, each chunk many ring
 * pieces. The copy engines run at --pcie-gbps; the disk is this machine's. Prints, per
 * direction, the median GB/s over the runs of the device tensor and, for reference, of the same
 * transfers from host memory (the disk alone). Pieces that overlap their copies approach
 * min(disk, PCIe); pieces one after the other approach 1 / (1/disk + 1/PCIe). The source uses
 * the public API only, so that it builds unchanged against an older revision (the anchor).
 * docs/bench/twin.md has the results.
 *
 * usage: bench_bounce [--mib N] [--runs N] [--pcie-gbps G] [--dir DIR]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <teraio/io.h>
#include <teraio/status.h>

#include "benchutil.h"
#include "io/fake_cuda.h"

#define MAX_RUNS 64

static struct fake_cuda fc;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, int rc) {
    (void)fprintf(stderr, "bench_bounce: %s: %s (%s)\n", what, tio_strerror(rc), tio_last_error());
    /* NOLINTNEXTLINE(concurrency-mt-unsafe): no other thread runs here */
    exit(1);
}

/* One request of n bytes at p (mem) and its completion; seconds. */
static double one(struct tio_engine *e, int write, void *p, uint64_t n, int32_t mem) {
    double t0 = now_s();
    int rc;
    if (write) {
        struct tio_engine_write_request r = { .struct_size = sizeof r,
                                              .tensor_id = 1,
                                              .src = p,
                                              .bytes = n,
                                              .mem = mem,
                                              .tier = TIO_TIER_SSD };
        rc = tio_engine_write(e, &r);
    } else {
        struct tio_engine_read_request r = {
            .struct_size = sizeof r, .tensor_id = 1, .dst = p, .bytes = n, .mem = mem
        };
        rc = tio_engine_read(e, &r);
    }
    if (rc < 0) {
        die(write ? "tio_engine_write" : "tio_engine_read", rc);
    }
    struct tio_completion c;
    if (tio_engine_wait(e, &c, 1, 1, INT64_C(60000000000)) != 1 || c.res != (int64_t)n) {
        die("transfer", c.res < 0 ? (int)c.res : TIO_EIO);
    }
    return now_s() - t0;
}

int main(int argc, char **argv) {
    uint64_t mib = 128;
    int runs = 5;
    double gbps = 3.0;
    const char *dir = "/tmp";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--mib")) {
            mib = strtoull(argv[i + 1], NULL, 10);
        } else if (!strcmp(argv[i], "--runs")) {
            runs = bench_int(argv[i + 1]);
        } else if (!strcmp(argv[i], "--pcie-gbps")) {
            gbps = bench_double(argv[i + 1]);
        } else if (!strcmp(argv[i], "--dir")) {
            dir = argv[i + 1];
        } else {
            (void)fprintf(stderr,
                          "usage: bench_bounce [--mib N] [--runs N] [--pcie-gbps G] [--dir D]\n");
            return 2;
        }
    }
    if (mib == 0 || runs < 1 || runs > MAX_RUNS || !(gbps > 0)) {
        (void)fprintf(stderr, "bench_bounce: --mib > 0, --runs 1..%d, --pcie-gbps > 0\n", MAX_RUNS);
        return 2;
    }
    /* the fakes, the cuFile one refusing every file: device memory goes through bounce.c */
    /* NOLINTBEGIN(concurrency-mt-unsafe): no other thread runs yet */
    if (setenv("TIO_CUDART_LIB", TIO_FAKE_CUDART_PATH, 0) != 0 ||
        setenv("TIO_CUFILE_LIB", TIO_FAKE_CUFILE_PATH, 0) != 0 ||
        setenv("FAKE_CUFILE_REFUSE", "1", 1) != 0 || fake_cuda_load(&fc) < 0) {
        (void)fprintf(stderr, "bench_bounce: the fake CUDA libraries are not loadable\n");
        return 1;
    }
    /* NOLINTEND(concurrency-mt-unsafe) */
    double bps = gbps * 1e9;
    if (fc.set_timing(1, bps, bps, bps / 4, 0) != 0) {
        (void)fprintf(stderr, "bench_bounce: fake_cuda_set_timing failed\n");
        return 1;
    }
    uint64_t n = mib << 20;
    struct tio_engine_params p = tio_engine_params_default();
    const char *dirs[1] = { dir };
    p.dirs = dirs;
    p.ndirs = 1;
    p.backend = "cufile";
    p.chunk_bytes = 64u << 20; /* many ring pieces per backend request */
    p.threads = 1;
    p.queue_depth = 4;
    struct tio_engine *e = NULL;
    int rc = tio_engine_new(&p, &e);
    if (rc < 0) {
        die("tio_engine_new", rc);
    }
    void *dev = NULL;
    unsigned char *host = malloc(n);
    if (fc.malloc_device(&dev, n) != 0 || !host) {
        (void)fprintf(stderr, "bench_bounce: %llu MiB of device and host memory\n",
                      (unsigned long long)mib);
        free(host);
        tio_engine_free(e);
        return 1;
    }
    memset(host, 0x5A, n);
    memset(fc.translate(dev, n), 0xA5, n);
    double t[4][MAX_RUNS];                   /* device write, device read, host write, host read */
    (void)one(e, 1, dev, n, TIO_MEM_DEVICE); /* warm-up: the file grows once */
    for (int r = 0; r < runs; r++) {
        t[0][r] = one(e, 1, dev, n, TIO_MEM_DEVICE);
        t[1][r] = one(e, 0, dev, n, TIO_MEM_DEVICE);
        t[2][r] = one(e, 1, host, n, TIO_MEM_HOST);
        t[3][r] = one(e, 0, host, n, TIO_MEM_HOST);
    }
    const char *names[4] = { "device write", "device read", "host write (disk alone)",
                             "host read (disk alone)" };
    printf("bench_bounce: %llu MiB, %d runs, PCIe %.2f GB/s each way, dir %s\n",
           (unsigned long long)mib, runs, gbps, dir);
    for (int k = 0; k < 4; k++) {
        printf("  %-24s %7.3f GB/s (median)\n", names[k],
               (double)n / bench_median(t[k], runs) / 1e9);
    }
    tio_engine_free(e);
    (void)fc.free_device(dev);
    free(host);
    return 0;
}
