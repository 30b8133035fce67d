/*
 * Backend conformance: every available backend runs the same request stream as `posix` (the
 * reference) and must give the same completions and the same bytes, which are also checked
 * against an independent pattern generator: sizes from 1 byte to several MiB across chunk and
 * alignment boundaries, unaligned buffers, several directories, verify on/off, short
 * transfers, queue full, cancellation, priorities, several submitting threads, the host tier,
 * device memory (cuda/cufile against the fake libraries), and > 4 GiB requests (null backend,
 * sparse files: no disk space needed).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>

#include "../tio_test.h"
#include "common/common_impl.h"
#include "dl/cudart_shim.h"
#include "io/backend.h"
#include "io_util.h"

static char g_dirs[3][512];
static const char *g_dirv[3] = { g_dirs[0], g_dirs[1], g_dirs[2] };

static const uint64_t sizes[] = { 1,
                                  100,
                                  4095,
                                  4096,
                                  4097,
                                  65535,
                                  65536,
                                  65537,
                                  3 * 65536 + 5,
                                  1 << 20,
                                  (1 << 20) + 3 * 4096 + 1,
                                  5u << 20 };
static const unsigned misalign[] = { 0, 1, 4095 };
#define NS TIO_ARRAY_LEN(sizes)
#define NM TIO_ARRAY_LEN(misalign)

/* Outcome of one run of the stream on one backend: completion results, in tag order. */
struct outcome {
    int64_t wres[NS * NM], rres[NS * NM];
    int data_ok[NS * NM];
};

static void run_stream(const char *backend, int verify, struct outcome *out) {
    struct tio_engine_params p = io_params(backend, g_dirv, 3);
    p.chunk_bytes = 64 * 1024; /* many chunks, all three directories */
    p.queue_depth = 8;
    p.verify = verify;
    struct tio_engine *e = NULL;
    CHECK_OK(tio_engine_new(&p, &e));
    REQUIRE(e != NULL);
    unsigned char *src[NS * NM], *dst[NS * NM];
    for (size_t i = 0; i < NS; i++) {
        for (size_t m = 0; m < NM; m++) {
            size_t k = i * NM + m;
            src[k] = tio_aligned_alloc(4096, sizes[i] + 8192);
            dst[k] = tio_aligned_alloc(4096, sizes[i] + 8192);
            io_fill(src[k] + misalign[m], sizes[i], k + 1);
            int rc = io_write(e, k, src[k] + misalign[m], sizes[i], TIO_MEM_HOST, TIO_TIER_SSD,
                              TIO_PRIO_NORMAL, 1000 + k, NULL);
            while (rc == -EAGAIN) { /* max_requests 1024 > 48: should not happen */
                struct tio_completion c = io_wait1(e);
                out->wres[c.tag - 1000] = c.res;
                rc = io_write(e, k, src[k] + misalign[m], sizes[i], TIO_MEM_HOST, TIO_TIER_SSD,
                              TIO_PRIO_NORMAL, 1000 + k, NULL);
            }
            CHECK_OK(rc);
        }
    }
    for (size_t n = 0; n < NS * NM; n++) {
        struct tio_completion c = io_wait1(e);
        CHECK(c.res != INT64_MIN);
        if (c.tag >= 1000 && c.tag < 1000 + NS * NM)
            out->wres[c.tag - 1000] = c.res;
    }
    for (size_t i = 0; i < NS; i++) {
        for (size_t m = 0; m < NM; m++) {
            size_t k = i * NM + m;
            unsigned mis = misalign[(m + 1) % NM]; /* read into a differently aligned buffer */
            CHECK_OK(io_read(e, k, dst[k] + mis, sizes[i], TIO_MEM_HOST,
                             (k & 1) ? TIO_PRIO_URGENT : TIO_PRIO_NORMAL, 5000 + k, NULL, NULL));
        }
    }
    for (size_t n = 0; n < NS * NM; n++) {
        struct tio_completion c = io_wait1(e);
        CHECK(c.res != INT64_MIN);
        if (c.tag >= 5000 && c.tag < 5000 + NS * NM)
            out->rres[c.tag - 5000] = c.res;
    }
    for (size_t i = 0; i < NS; i++) {
        for (size_t m = 0; m < NM; m++) {
            size_t k = i * NM + m;
            out->data_ok[k] = io_check(dst[k] + misalign[(m + 1) % NM], sizes[i], k + 1);
            if (!out->data_ok[k])
                printf("  %s: size %llu misalign %u: data differs\n", backend,
                       (unsigned long long)sizes[i], misalign[m]);
            tio_free(src[k]);
            tio_free(dst[k]);
        }
    }
    struct tio_engine_stats st;
    CHECK_OK(tio_engine_stats(e, &st));
    CHECK_EQ_U(st.tensors, NS * NM);
    CHECK(st.ssd_used_bytes > 0);
    for (size_t k = 0; k < NS * NM; k++)
        CHECK_OK(tio_engine_drop(e, k));
    CHECK_OK(tio_engine_stats(e, &st));
    CHECK_EQ_U(st.ssd_used_bytes, 0); /* every extent came back */
    CHECK_EQ_U(st.tensors, 0);
    CHECK_EQ_U(st.requests_failed, 0);
    tio_engine_free(e);
}

static struct outcome ref_out;

static void compare_with_posix(const char *backend, int verify) {
    static struct outcome o;
    memset(&o, 0, sizeof o);
    run_stream(backend, verify, &o);
    for (size_t i = 0; i < NS; i++) {
        for (size_t m = 0; m < NM; m++) {
            size_t k = i * NM + m;
            CHECK_EQ_I(o.wres[k], (int64_t)sizes[i]);
            CHECK_EQ_I(o.rres[k], (int64_t)sizes[i]);
            CHECK_EQ_I(o.wres[k], ref_out.wres[k]);
            CHECK_EQ_I(o.rres[k], ref_out.rres[k]);
            CHECK(o.data_ok[k]);
        }
    }
}

static struct tio_engine_backend_info infos[16];
static int ninfos;

/* After a case's loop over the available backends: one probed but not available here (io_uring
 * refused by the kernel, a CUDA library missing) makes the case a reported skip (exit 77, not a
 * pass) naming it; a failure of those that ran still fails it. */
#define SKIP_IF_A_BACKEND_IS_MISSING()                                                      \
    do {                                                                                    \
        for (int m_ = 0; m_ < ninfos; m_++) {                                               \
            if (!infos[m_].available)                                                       \
                SKIP_CASE("backend %s is not available here (%s): not run", infos[m_].name, \
                          infos[m_].reason);                                                \
        }                                                                                   \
    } while (0)

TIO_TEST(reference_posix) {
    memset(&ref_out, 0, sizeof ref_out);
    run_stream("posix", 0, &ref_out);
    for (size_t k = 0; k < NS * NM; k++)
        CHECK(ref_out.data_ok[k]);
}

TIO_TEST(every_backend_matches_posix) {
    for (int i = 0; i < ninfos; i++) {
        if (!infos[i].available || !strcmp(infos[i].name, "null"))
            continue;
        printf("  backend %s (score %d): %s\n", infos[i].name, infos[i].score, infos[i].reason);
        compare_with_posix(infos[i].name, 0);
        compare_with_posix(infos[i].name, 1);
    }
    SKIP_IF_A_BACKEND_IS_MISSING();
}

/* > 4 GiB in one request and one chunk: the core must split it into transfers that fit
 * 32-bit lengths. The null backend touches no memory and the file is sparse. */
TIO_TEST(split_over_4gib_null) {
    uint64_t bytes = (UINT64_C(5) << 30) + 4096;
    void *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    REQUIRE(mem != MAP_FAILED);
    struct tio_engine_params p = io_params("null", g_dirv, 1);
    p.chunk_bytes = UINT64_C(8) << 30; /* one chunk holds the whole tensor */
    p.preallocate = 0;
    struct tio_engine *e = NULL;
    CHECK_OK(tio_engine_new(&p, &e));
    CHECK(e != NULL);
    if (e) {
        tio_io_null_reset();
        CHECK_OK(io_write(e, 1, mem, bytes, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 7, NULL));
        struct tio_completion c = io_wait1(e);
        CHECK_EQ_U(c.tag, 7);
        CHECK_EQ_I(c.res, (int64_t)bytes);
        CHECK_EQ_U(tio_io_null_total_bytes(), bytes);
        CHECK(tio_io_null_max_len() <= TIO_IO_MAX_OP);
        CHECK(tio_io_null_max_len() < (UINT64_C(1) << 32));
        CHECK_OK(io_read(e, 1, mem, bytes, TIO_MEM_HOST, TIO_PRIO_URGENT, 8, NULL, NULL));
        c = io_wait1(e);
        CHECK_EQ_I(c.res, (int64_t)bytes);
        CHECK_EQ_U(tio_io_null_total_bytes(), 2 * bytes);
        struct tio_engine_stats st;
        CHECK_OK(tio_engine_stats(e, &st));
        CHECK_EQ_U(st.ops_issued, 2 * ((bytes + TIO_IO_MAX_OP - 1) / TIO_IO_MAX_OP));
        tio_engine_free(e);
    }
    munmap(mem, bytes);
}

TIO_TEST(short_transfers_resumed) {
    struct tio_engine_params p = io_params("fault", g_dirv, 2);
    p.chunk_bytes = 256 * 1024;
    p.backend_options = "short=12288"; /* every transfer reports at most 3 pages */
    struct tio_engine *e = NULL;
    CHECK_OK(tio_engine_new(&p, &e));
    REQUIRE(e != NULL);
    uint64_t n = (1 << 20) + 777;
    unsigned char *a = tio_aligned_alloc(4096, n + 4096), *b = tio_aligned_alloc(4096, n + 4096);
    io_fill(a + 3, n, 99);
    CHECK_OK(io_write(e, 5, a + 3, n, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 1, NULL));
    CHECK_EQ_I(io_wait1(e).res, (int64_t)n);
    CHECK_OK(io_read(e, 5, b + 5, n, TIO_MEM_HOST, TIO_PRIO_NORMAL, 2, NULL, NULL));
    CHECK_EQ_I(io_wait1(e).res, (int64_t)n);
    CHECK(io_check(b + 5, n, 99));
    struct tio_engine_stats st;
    CHECK_OK(tio_engine_stats(e, &st));
    CHECK(st.short_transfers > 0);
    CHECK_EQ_U(st.retries, 0); /* short is not an error */
    tio_engine_free(e);
    tio_free(a);
    tio_free(b);
}

TIO_TEST(queue_full_is_reported_at_once) {
    struct tio_engine_params p = io_params("fault", g_dirv, 1);
    p.max_requests = 4;
    p.queue_depth = 2;
    p.backend_options = "delay_us=20000";
    struct tio_engine *e = NULL;
    CHECK_OK(tio_engine_new(&p, &e));
    REQUIRE(e != NULL);
    static unsigned char buf[8][4096];
    for (int i = 0; i < 4; i++)
        CHECK_OK(io_write(e, (uint64_t)i, buf[i], 4096, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL,
                          (uint64_t)i, NULL));
    double t0 = tio_now_s();
    CHECK_RC(io_write(e, 9, buf[5], 4096, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 9, NULL),
             -EAGAIN);
    CHECK(tio_now_s() - t0 < 0.015); /* not blocking (loose bound: reported, not waited) */
    struct tio_completion c[4];
    CHECK_EQ_I(tio_engine_wait(e, c, 4, 4, WAIT_NS), 4);
    CHECK_OK(io_write(e, 9, buf[5], 4096, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 9, NULL));
    CHECK_EQ_I(io_wait1(e).res, 4096);
    CHECK_RC(tio_engine_wait(e, c, 1, 1, 0), TIO_EINVAL); /* nothing outstanding */
    tio_engine_free(e);
}

TIO_TEST(cancellation) {
    struct tio_engine_params p = io_params("fault", g_dirv, 2);
    p.queue_depth = 1;
    p.chunk_bytes = 64 * 1024;
    p.backend_options = "delay_us=30000";
    struct tio_engine *e = NULL;
    CHECK_OK(tio_engine_new(&p, &e));
    REQUIRE(e != NULL);
    uint64_t n = 512 * 1024; /* 8 chunks x 30 ms */
    unsigned char *a = tio_aligned_alloc(4096, n);
    io_fill(a, n, 3);
    CHECK_OK(io_write(e, 1, a, n, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 1, NULL));
    CHECK_OK(io_write(e, 2, a, n, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 2, NULL));
    CHECK_OK(io_write(e, 3, a, n, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 3, NULL));
    CHECK_EQ_I(tio_engine_cancel(e, 3), 1);
    CHECK_RC(tio_engine_cancel(e, 77), TIO_ENOTFOUND);
    struct timespec ts = { 0, 50 * 1000 * 1000 };
    nanosleep(&ts, NULL);
    CHECK_EQ_I(tio_engine_cancel(e, 1), 1); /* in flight: finishes its chunk, drops the rest */
    int64_t res[4] = { 0, 0, 0, 0 };
    for (int i = 0; i < 3; i++) {
        struct tio_completion c = io_wait1(e);
        if (c.tag >= 1 && c.tag <= 3)
            res[c.tag] = c.res;
    }
    CHECK_EQ_I(res[1], TIO_ECANCELED);
    CHECK_EQ_I(res[2], (int64_t)n);
    CHECK_EQ_I(res[3], TIO_ECANCELED);
    uint64_t bytes;
    CHECK_RC(tio_engine_tensor_info(e, 1, &bytes, NULL), TIO_ENOTFOUND);
    CHECK_RC(tio_engine_tensor_info(e, 3, &bytes, NULL), TIO_ENOTFOUND);
    CHECK_OK(tio_engine_tensor_info(e, 2, &bytes, NULL));
    struct tio_engine_stats st;
    CHECK_OK(tio_engine_stats(e, &st));
    CHECK_EQ_U(st.requests_canceled, 2);
    CHECK_EQ_U(st.ssd_used_bytes, n); /* only tensor 2's extents remain */
    tio_engine_free(e);
    tio_free(a);
}

TIO_TEST(urgent_overtakes_normal) {
    struct tio_engine_params p = io_params("fault", g_dirv, 1);
    p.queue_depth = 1;
    p.backend_options = "delay_us=20000";
    struct tio_engine *e = NULL;
    CHECK_OK(tio_engine_new(&p, &e));
    REQUIRE(e != NULL);
    static unsigned char buf[4096];
    for (int i = 0; i < 6; i++)
        CHECK_OK(io_write(e, (uint64_t)i, buf, 4096, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL,
                          (uint64_t)i, NULL));
    CHECK_OK(io_write(e, 100, buf, 4096, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_URGENT, 100, NULL));
    int pos = -1;
    for (int i = 0; i < 7; i++) {
        struct tio_completion c = io_wait1(e);
        if (c.tag == 100)
            pos = i;
    }
    CHECK(pos >= 0 && pos <= 2); /* at most the one or two normal writes already issued */
    tio_engine_free(e);
}

struct thread_arg {
    struct tio_engine *e;
    int index, phase;
    unsigned char *bufs[32];
    uint64_t sizes[32];
};

static void *submitter(void *arg) {
    struct thread_arg *a = arg;
    for (int i = 0; i < 32; i++) {
        uint64_t id = (uint64_t)a->index * 100 + (uint64_t)i;
        int rc;
        do {
            rc = a->phase == 0 ? io_write(a->e, id, a->bufs[i], a->sizes[i], TIO_MEM_HOST,
                                          TIO_TIER_SSD, TIO_PRIO_NORMAL, id, NULL)
                               : io_read(a->e, id, a->bufs[i], a->sizes[i], TIO_MEM_HOST,
                                         TIO_PRIO_URGENT, id, NULL, NULL);
            if (rc == -EAGAIN) {
                struct timespec ts = { 0, 200000 };
                nanosleep(&ts, NULL);
            }
        } while (rc == -EAGAIN);
        if (rc < 0)
            printf("  thread %d: submit %d: %s\n", a->index, i, tio_strerror(rc));
    }
    return NULL;
}

static void threads_on(const char *backend) {
    struct tio_engine_params p = io_params(backend, g_dirv, 3);
    p.chunk_bytes = 64 * 1024;
    p.max_requests = 16; /* submitters hit -EAGAIN and retry */
    p.verify = 1;
    struct tio_engine *e = NULL;
    CHECK_OK(tio_engine_new(&p, &e));
    REQUIRE(e != NULL);
    struct thread_arg args[4];
    for (int t = 0; t < 4; t++) {
        args[t].e = e;
        args[t].index = t;
        for (int i = 0; i < 32; i++) {
            args[t].sizes[i] = 1 + (uint64_t)((t * 7919 + i * 104729) % (160 * 1024));
            args[t].bufs[i] = tio_malloc(args[t].sizes[i]); /* malloc alignment only */
            io_fill(args[t].bufs[i], args[t].sizes[i], (uint64_t)(t * 100 + i));
        }
    }
    for (int phase = 0; phase < 2; phase++) {
        pthread_t th[4];
        for (int t = 0; t < 4; t++) {
            args[t].phase = phase;
            if (phase == 1) {
                for (int i = 0; i < 32; i++)
                    memset(args[t].bufs[i], 0, args[t].sizes[i]);
            }
            pthread_create(&th[t], NULL, submitter, &args[t]);
        }
        int got = 0, bad = 0;
        while (got < 128) {
            struct tio_completion c[8];
            int k = tio_engine_wait(e, c, 0, 8, 1000000);
            for (int i = 0; i < k; i++) {
                uint64_t t = c[i].tag / 100, j = c[i].tag % 100;
                bad += c[i].res != (int64_t)args[t].sizes[j];
            }
            got += k > 0 ? k : 0;
        }
        for (int t = 0; t < 4; t++)
            pthread_join(th[t], NULL);
        CHECK_EQ_I(bad, 0);
    }
    for (int t = 0; t < 4; t++) {
        for (int i = 0; i < 32; i++) {
            CHECK(io_check(args[t].bufs[i], args[t].sizes[i], (uint64_t)(t * 100 + i)));
            tio_free(args[t].bufs[i]);
        }
    }
    tio_engine_free(e);
}

TIO_TEST(several_submitting_threads) {
    for (int i = 0; i < ninfos; i++) {
        if (infos[i].available && strcmp(infos[i].name, "null") != 0)
            threads_on(infos[i].name);
    }
    SKIP_IF_A_BACKEND_IS_MISSING();
}

TIO_TEST(host_tier) {
    struct tio_engine *e = io_host_tier_engine(g_dirv, 1 << 20);
    REQUIRE(e != NULL);
    uint64_t n = 600 * 1024 + 3;
    unsigned char *a = tio_malloc(n), *b = tio_malloc(n);
    io_fill(a, n, 11);
    CHECK_OK(io_write(e, 1, a, n, TIO_MEM_HOST, TIO_TIER_HOST, TIO_PRIO_NORMAL, 1, NULL));
    CHECK_EQ_I(io_wait1(e).res, (int64_t)n);
    CHECK_RC(io_write(e, 2, a, n, TIO_MEM_HOST, TIO_TIER_HOST, TIO_PRIO_NORMAL, 2, NULL), -ENOSPC);
    CHECK_ERR_HAS("host tier");
    CHECK_ERR_HAS("needed");
    CHECK_OK(io_read(e, 1, b, n, TIO_MEM_HOST, TIO_PRIO_URGENT, 3, NULL, NULL));
    CHECK_EQ_I(io_wait1(e).res, (int64_t)n);
    CHECK(io_check(b, n, 11));
    int32_t tier = -1;
    CHECK_OK(tio_engine_tensor_info(e, 1, NULL, &tier));
    CHECK_EQ_I(tier, TIO_TIER_HOST);
    CHECK_OK(tio_engine_drop(e, 1));
    CHECK_OK(io_write(e, 2, a, n, TIO_MEM_HOST, TIO_TIER_HOST, TIO_PRIO_NORMAL, 2, NULL));
    CHECK_EQ_I(io_wait1(e).res, (int64_t)n);
    tio_engine_free(e);
    tio_free(a);
    tio_free(b);
}

TIO_TEST(overwrite_keeps_latest) {
    struct tio_engine_params p = io_params("posix", g_dirv, 2);
    p.chunk_bytes = 8192;
    struct tio_engine *e = NULL;
    CHECK_OK(tio_engine_new(&p, &e));
    REQUIRE(e != NULL);
    uint64_t n = 50000;
    unsigned char *a = tio_malloc(n), *b = tio_malloc(n);
    io_fill(a, n, 1);
    CHECK_OK(io_write(e, 4, a, n, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 1, NULL));
    CHECK_EQ_I(io_wait1(e).res, (int64_t)n);
    io_fill(a, n, 2);
    CHECK_OK(io_write(e, 4, a, n, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 2, NULL));
    CHECK_EQ_I(io_wait1(e).res, (int64_t)n);
    CHECK_OK(io_read(e, 4, b, n, TIO_MEM_HOST, TIO_PRIO_NORMAL, 3, NULL, NULL));
    CHECK_EQ_I(io_wait1(e).res, (int64_t)n);
    CHECK(io_check(b, n, 2));
    struct tio_engine_stats st;
    CHECK_OK(tio_engine_stats(e, &st));
    /* 6 chunks of 8192 + a 848-byte tail padded to 4096; the old copy was freed */
    CHECK_EQ_U(st.ssd_used_bytes, 6 * 8192 + 4096);
    tio_engine_free(e);
    tio_free(a);
    tio_free(b);
}

TIO_TEST(bad_requests) {
    struct tio_engine_params p = io_params("fault", g_dirv, 1);
    p.backend_options = "delay_us=20000";
    struct tio_engine *e = NULL;
    CHECK_OK(tio_engine_new(&p, &e));
    REQUIRE(e != NULL);
    static unsigned char buf[8192];
    CHECK_RC(io_write(e, 1, buf, 0, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 1, NULL),
             TIO_EINVAL);
    CHECK_ERR_HAS("zero-byte");
    CHECK_RC(io_write(e, 1, NULL, 10, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 1, NULL),
             TIO_EINVAL);
    CHECK_RC(io_write(e, 1, buf, 10, 7, TIO_TIER_SSD, TIO_PRIO_NORMAL, 1, NULL), TIO_EINVAL);
    CHECK_RC(io_write(e, 1, buf, 10, TIO_MEM_HOST, TIO_TIER_GPU, TIO_PRIO_NORMAL, 1, NULL),
             TIO_EINVAL);
    CHECK_RC(io_write(e, 1, buf, 10, TIO_MEM_HOST, TIO_TIER_SSD, 5, 1, NULL), TIO_EINVAL);
    CHECK_RC(io_write(e, 1, buf, 10, TIO_MEM_HOST, TIO_TIER_HOST, TIO_PRIO_NORMAL, 1, NULL),
             TIO_EUNAVAIL);
    /* (device memory without a usable CUDA device: test_io_gpu_path) */
    CHECK_RC(io_read(e, 1, buf, 10, TIO_MEM_HOST, TIO_PRIO_NORMAL, 1, NULL, NULL), TIO_ENOTFOUND);
    CHECK_OK(io_write(e, 1, buf, 8192, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 1, NULL));
    /* in flight: no second write, no read, no drop */
    CHECK_RC(io_write(e, 1, buf, 8192, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 2, NULL),
             TIO_ESTATE);
    CHECK_RC(io_read(e, 1, buf, 8192, TIO_MEM_HOST, TIO_PRIO_NORMAL, 2, NULL, NULL), TIO_ENOTFOUND);
    CHECK_EQ_I(io_wait1(e).res, 8192);
    CHECK_RC(io_read(e, 1, buf, 100, TIO_MEM_HOST, TIO_PRIO_NORMAL, 2, NULL, NULL), TIO_EINVAL);
    CHECK_ERR_HAS("8192");
    CHECK_OK(io_read(e, 1, buf, 8192, TIO_MEM_HOST, TIO_PRIO_NORMAL, 2, NULL, NULL));
    CHECK_RC(tio_engine_drop(e, 1), TIO_ESTATE);
    CHECK_RC(io_write(e, 1, buf, 8192, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 2, NULL),
             TIO_ESTATE);
    CHECK_EQ_I(io_wait1(e).res, 8192);
    CHECK_OK(tio_engine_drop(e, 1));
    CHECK_RC(tio_engine_drop(e, 1), TIO_ENOTFOUND);
    tio_engine_free(e);

    struct tio_engine *e2 = NULL;
    p = io_params("nosuch", g_dirv, 1);
    CHECK_RC(tio_engine_new(&p, &e2), TIO_ENOTFOUND);
    CHECK_ERR_HAS("nosuch");
    p = io_params("posix", g_dirv, 1);
    p.chunk_bytes = 1000;
    CHECK_RC(tio_engine_new(&p, &e2), TIO_EINVAL);
    CHECK_ERR_HAS("chunk_bytes");
    p = io_params("posix", NULL, 0);
    CHECK_RC(tio_engine_new(&p, &e2), TIO_EINVAL);
    const char *twice[2] = { g_dirs[0], g_dirs[0] };
    p = io_params("posix", twice, 2);
    CHECK_RC(tio_engine_new(&p, &e2), TIO_EINVAL);
    CHECK_ERR_HAS("repeats");
    const char *missing[1] = { "/nonexistent/teraio/dir" };
    p = io_params("posix", missing, 1);
    CHECK_RC(tio_engine_new(&p, &e2), -ENOENT);
    CHECK_ERR_HAS("/nonexistent/teraio/dir");
    CHECK(e2 == NULL);
}

/* Device memory through the cuda and cufile backends, against the fake libraries (the fake's
 * device pointers are PROT_NONE: any path that touches them without cudaMemcpy/cuFile fails). */
static void device_roundtrip(const char *backend, int tier) {
    const struct tio_cudart_api *cu = tio_cudart();
    struct tio_engine_params p = io_params(backend, g_dirv, 2);
    p.chunk_bytes = 64 * 1024;
    p.host_tier_bytes = 4 << 20;
    struct tio_engine *e = NULL;
    CHECK_OK(tio_engine_new(&p, &e));
    REQUIRE(e != NULL);
    uint64_t n = (1 << 20) + 12345;
    void *d1 = NULL, *d2 = NULL;
    CHECK_EQ_I(cu->malloc_device(&d1, n), 0);
    CHECK_EQ_I(cu->malloc_device(&d2, n), 0);
    unsigned char *h = tio_malloc(n);
    io_fill(h, n, 42);
    CHECK_EQ_I(cu->memcpy(d1, h, n, TIO_CUDA_MEMCPY_H2D), 0);
    CHECK_OK(io_write(e, 1, d1, n, TIO_MEM_DEVICE, tier, TIO_PRIO_NORMAL, 1, NULL));
    CHECK_EQ_I(io_wait1(e).res, (int64_t)n);
    CHECK_OK(io_read(e, 1, d2, n, TIO_MEM_DEVICE, TIO_PRIO_URGENT, 2, NULL, NULL));
    CHECK_EQ_I(io_wait1(e).res, (int64_t)n);
    memset(h, 0, n);
    CHECK_EQ_I(cu->memcpy(h, d2, n, TIO_CUDA_MEMCPY_D2H), 0);
    CHECK(io_check(h, n, 42));
    tio_free(h);
    tio_engine_free(e);
}

static uint64_t fake_counter(const char *env, const char *sym) {
    const char *path = getenv(env);
    void *lib = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    void *f = lib ? dlsym(lib, sym) : NULL;
    uint64_t (*fn)(void) = NULL;
    if (!f)
        return 0;
    memcpy(&fn, &f, sizeof f);
    return fn();
}

/* Reads and writes the fake libcufile did, synchronous or on a stream. */
static uint64_t cufile_calls(void) {
    return fake_counter("TIO_CUFILE_LIB", "fake_cufile_io_calls") +
           fake_counter("TIO_CUFILE_LIB", "fake_cufile_async_calls");
}

TIO_TEST(device_memory_fakes) {
    char why[256];
    REQUIRE(tio_cudart_usable(why, sizeof why));
    REQUIRE(tio_cudart() != NULL);
    uint64_t m0 = fake_counter("TIO_CUDART_LIB", "fake_cuda_memcpy_calls");
    device_roundtrip("cuda", TIO_TIER_SSD);
    CHECK(fake_counter("TIO_CUDART_LIB", "fake_cuda_memcpy_calls") > m0); /* bounced */
    uint64_t f0 = cufile_calls();
    device_roundtrip("cufile", TIO_TIER_SSD);
    uint64_t f1 = cufile_calls();
    CHECK(f1 > f0);                       /* through cuFile (test_io_cufile: which calls) */
    setenv("FAKE_CUFILE_REFUSE", "1", 1); /* per-file fallback to POSIX + bounce buffers */
    device_roundtrip("cufile", TIO_TIER_SSD);
    CHECK_EQ_U(cufile_calls(), f1);
    setenv("TIO_GDS", "on", 1); /* a refusal is now an error */
    struct tio_engine_params p = io_params("cufile", g_dirv, 1);
    struct tio_engine *e = NULL;
    CHECK_RC(tio_engine_new(&p, &e), TIO_ECUFILE);
    CHECK_ERR_HAS("cuFileHandleRegister");
    unsetenv("TIO_GDS");
    unsetenv("FAKE_CUFILE_REFUSE");
    device_roundtrip("cuda", TIO_TIER_HOST); /* device memory to the host tier */
}

TIO_TEST(nothing_left_on_disk) {
    for (int i = 0; i < 3; i++) {
        if (io_dir_entries(g_dirs[i]) != 0)
            printf("  %s is not empty after the engines were freed\n", g_dirs[i]);
        CHECK(rmdir(g_dirs[i]) == 0); /* empty: nothing was left on disk */
    }
}

int main(void) {
    /* the fakes built with the tests (ctest sets the same paths), before the first probe */
    (void)setenv("TIO_CUDART_LIB", TIO_FAKE_CUDART_LIB, 0);
    (void)setenv("TIO_CUFILE_LIB", TIO_FAKE_CUFILE_LIB, 0);
    for (int i = 0; i < 3; i++)
        io_mkdtemp(g_dirs[i], sizeof g_dirs[i], "conf");
    ninfos = tio_engine_probe_all(infos, TIO_ARRAY_LEN(infos));
    RUN(reference_posix);
    RUN(every_backend_matches_posix);
    RUN(split_over_4gib_null);
    RUN(short_transfers_resumed);
    RUN(queue_full_is_reported_at_once);
    RUN(cancellation);
    RUN(urgent_overtakes_normal);
    RUN(several_submitting_threads);
    RUN(host_tier);
    RUN(overwrite_keeps_latest);
    RUN(bad_requests);
    RUN(device_memory_fakes);
    RUN(nothing_left_on_disk);
    return tio_test_done();
}
