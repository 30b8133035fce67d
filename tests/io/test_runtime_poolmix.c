/*
 * Mixed host-memory and device-memory traffic on one engine's host pool, against the
 * lagging-GPU emulator (tests/io/fakes): seeded random schedules over a small pool (extents are
 * dropped and reused all the time) in which every tensor is written and read back, each time
 * from either device memory through the stream-ordered path (a fence recorded on the caller's
 * stream after the kernel that produced the bytes, a `done` event the stream waits on before
 * any use of the read's bytes) or a plain host buffer, interleaved in random order with drops.
 * Half the reads are followed, as soon as they complete, by a drop of their tensor and a write
 * of another one: a device read completes once its copies are queued, so that write may take the
 * extent a queued copy still reads. As the stream-ordered executor does, the caller's stream
 * waits for a device read's `done` only before the next use of the memory, not at completion.
 *
 * The requests go through the engine API directly: the executor reaps every completion of its
 * engine and counts it as one of its own, so no other caller's requests may be in flight on an
 * engine an executor drives. The device requests here are the ones the stream-ordered executor
 * issues (a write fenced after the last kernel, a read with a fence and a `done` event).
 *
 * Checked: every read's bytes (a host read when it completes; a device read by a kernel queued
 * on the stream after its `done` event at that next use, which also asks the emulator whether a
 * copy still runs on the memory), the whole content of every stored tensor at the end of each
 * schedule, and that the emulator saw no copy-versus-copy race, no bad access, no blocking or
 * pageable copy.
 *
 * Environment: TIO_POOLMIX_SCHEDULES (default 300; 40 under sanitizers), TIO_POOLMIX_SEED
 * (first seed, default 1). A failure prints its seed: rerun with TIO_POOLMIX_SEED=that and
 * TIO_POOLMIX_SCHEDULES=1.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <teraio/io.h>

#include "../tio_test.h"
#include "dl/cudart_shim.h"
#include "io/fake_cuda.h"
#include "io/io_util.h"

#define NSLOT    10
#define STEPS    48
#define POOL     (3u << 20) /* smaller than the slots together: ENOSPC and extent reuse */
#define MAX_SIZE (768u << 10)

static struct fake_cuda fc;

/* ---- failures (recorded by kernels on the stream thread too) ------------------------------- */
static atomic_uint_fast64_t g_failures;
static pthread_mutex_t g_fail_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_first[400];

__attribute__((format(printf, 1, 2))) static void record_failure(const char *fmt, ...) {
    if (atomic_fetch_add(&g_failures, 1) != 0) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&g_fail_mu);
    (void)vsnprintf(g_first, sizeof g_first, fmt, ap);
    pthread_mutex_unlock(&g_fail_mu);
    va_end(ap);
}

static uint64_t rng(uint64_t *x) {
    uint64_t z = (*x += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* The content of version v of slot i in schedule seed (never 0: a read fills nothing else). */
static uint64_t content(uint64_t seed, uint32_t i, uint64_t v) {
    return (seed << 24) ^ ((uint64_t)i << 16) ^ (v + 1);
}

/* ---- kernels: host functions on the caller's stream ------------------------------------- */
struct kern {
    unsigned char *dev, *shadow;
    uint64_t n, content, seed;
    uint32_t slot;
    int check; /* 0: produce the content (a kernel writing the tensor); 1: check it */
};

static void kern_fn(void *arg) {
    struct kern *k = arg;
    if (fc.racing_copies(k->dev, k->n, !k->check)) {
        record_failure("seed %llu slot %u: a copy of the engine still runs on the device memory "
                       "while a kernel %s it",
                       (unsigned long long)k->seed, k->slot, k->check ? "reads" : "writes");
    }
    if (!k->check) {
        io_fill(k->shadow, k->n, k->content);
    } else if (!io_check(k->shadow, k->n, k->content)) {
        record_failure("seed %llu slot %u: a device read found other bytes than its version "
                       "(first word %016llx)",
                       (unsigned long long)k->seed, k->slot,
                       (unsigned long long)*(const uint64_t *)(const void *)k->shadow);
    }
    free(k);
}

/* ---- the schedule ---------------------------------------------------------------------------- */
enum { IDLE, WRITING, READING };
struct slot {
    uint64_t bytes, version; /* the stored (or being written) version */
    int stored, busy;        /* busy: IDLE, WRITING or READING */
    int landing;             /* a device read completed: its bytes land when `done` has */
    int32_t mem;             /* of the request in flight */
    unsigned char *host;     /* malloc'd */
    void *dev, *fence, *done;
};
struct sched {
    uint64_t seed, x;
    void *stream;
    struct tio_engine *e;
    struct slot s[NSLOT];
    uint64_t reads_dev, reads_host, writes_dev, writes_host, nospace;
    size_t inflight;
};

static int queue_kernel(struct sched *sc, uint32_t i, int check) {
    struct slot *sl = &sc->s[i];
    struct kern *k = malloc(sizeof *k);
    if (!k) {
        return -1;
    }
    *k = (struct kern){ sl->dev,   fc.translate(sl->dev, sl->bytes),
                        sl->bytes, content(sc->seed, i, sl->version),
                        sc->seed,  i,
                        check };
    if (fc.launch_host_func(sc->stream, kern_fn, k) != 0) {
        free(k);
        return -1;
    }
    return 0;
}

static void drop_and_reuse(struct sched *sc, uint32_t i);

/* Before the next use of slot i's device memory after a device read: the stream waits for the
 * read's bytes to land, then a kernel checks them. */
static void settle(struct sched *sc, uint32_t i) {
    struct slot *sl = &sc->s[i];
    if (!sl->landing) {
        return;
    }
    sl->landing = 0;
    if (fc.stream_wait_event(sc->stream, sl->done, 0) != 0 || queue_kernel(sc, i, 1) < 0) {
        record_failure("seed %llu slot %u: queueing the check failed", (unsigned long long)sc->seed,
                       i);
    }
}

static void complete(struct sched *sc, const struct tio_completion *c) {
    uint32_t i = (uint32_t)(c->tag & 0xff);
    struct slot *sl = &sc->s[i];
    sc->inflight--;
    if (i >= NSLOT || sl->busy == IDLE || c->res != (int64_t)sl->bytes) {
        record_failure("seed %llu slot %u: completion res %lld for %llu bytes: %s",
                       (unsigned long long)sc->seed, i, (long long)c->res,
                       (unsigned long long)(i < NSLOT ? sl->bytes : 0),
                       tio_engine_last_error(sc->e));
        if (i < NSLOT) {
            sl->busy = IDLE;
        }
        return;
    }
    if (sl->busy == WRITING) {
        sl->stored = 1;
    } else if (sl->mem == TIO_MEM_HOST &&
               !io_check(sl->host, sl->bytes, content(sc->seed, i, sl->version))) {
        record_failure("seed %llu slot %u: a host read found other bytes than version %llu",
                       (unsigned long long)sc->seed, i, (unsigned long long)sl->version);
    } else if (sl->mem == TIO_MEM_DEVICE) {
        sl->landing = 1; /* checked when the memory is next used (settle), as the executor does */
    }
    int was_read = sl->busy == READING;
    sl->busy = IDLE;
    if (was_read && rng(&sc->x) % 2) { /* the read's copy may still be queued: reuse its extent */
        drop_and_reuse(sc, i);
    }
}

/* Reap what has completed (wait: for at least one, or, with `all`, for everything). */
static void reap(struct sched *sc, int wait, int all) {
    struct tio_completion c[16];
    do {
        size_t want = wait && sc->inflight ? (all && sc->inflight < 16 ? sc->inflight : 1) : 0;
        int n = want ? tio_engine_wait(sc->e, c, want, 16, WAIT_NS) : tio_engine_poll(sc->e, c, 16);
        if (n < 0 || (size_t)n < want) {
            record_failure("seed %llu: waiting for %zu of %zu completions: %d (%s)",
                           (unsigned long long)sc->seed, want, sc->inflight, n, tio_last_error());
            sc->inflight = 0;
            return;
        }
        for (int k = 0; k < n; k++) {
            complete(sc, &c[k]);
        }
    } while (all && sc->inflight > 0);
}

/* Write slot i's next version from host or device memory. */
static void do_write(struct sched *sc, uint32_t i, int32_t mem) {
    struct slot *sl = &sc->s[i];
    settle(sc, i);
    uint64_t v = sl->version + 1;
    void *fence = NULL;
    if (mem == TIO_MEM_DEVICE) { /* a kernel produces the bytes; the write is fenced after it */
        uint64_t keep = sl->version;
        sl->version = v;
        int bad = queue_kernel(sc, i, 0) < 0 || fc.event_record(sl->fence, sc->stream) != 0;
        sl->version = keep;
        if (bad) {
            record_failure("seed %llu slot %u: queueing the producer failed",
                           (unsigned long long)sc->seed, i);
            return;
        }
        fence = sl->fence;
    } else {
        io_fill(sl->host, sl->bytes, content(sc->seed, i, v));
    }
    int rc = io_write(sc->e, i + 1, mem == TIO_MEM_DEVICE ? sl->dev : sl->host, sl->bytes, mem,
                      TIO_TIER_HOST, TIO_PRIO_NORMAL, i, fence);
    if (rc == -ENOSPC) {
        sc->nospace++;
        return; /* a device producer ran for nothing: the memory holds the next version */
    }
    if (rc < 0) {
        record_failure("seed %llu slot %u: tio_engine_write: %s", (unsigned long long)sc->seed, i,
                       tio_last_error());
        return;
    }
    sl->version = v;
    sl->busy = WRITING;
    sl->mem = mem;
    sl->stored = 0; /* until the completion: the previous copy is replaced */
    sc->inflight++;
    *(mem == TIO_MEM_DEVICE ? &sc->writes_dev : &sc->writes_host) += 1;
}

static void do_read(struct sched *sc, uint32_t i, int32_t mem) {
    struct slot *sl = &sc->s[i];
    settle(sc, i);
    void *fence = NULL, *done = NULL;
    if (mem == TIO_MEM_DEVICE) { /* the memory's earlier kernels run before the bytes move */
        if (fc.event_record(sl->fence, sc->stream) != 0) {
            record_failure("seed %llu slot %u: cudaEventRecord failed",
                           (unsigned long long)sc->seed, i);
            return;
        }
        fence = sl->fence;
        done = sl->done;
    } else {
        memset(sl->host, 0, sl->bytes);
    }
    int rc = io_read(sc->e, i + 1, mem == TIO_MEM_DEVICE ? sl->dev : sl->host, sl->bytes, mem,
                     TIO_PRIO_NORMAL, i | 0x100, fence, done);
    if (rc < 0) {
        record_failure("seed %llu slot %u: tio_engine_read: %s", (unsigned long long)sc->seed, i,
                       tio_last_error());
        return;
    }
    sl->busy = READING;
    sl->mem = mem;
    sc->inflight++;
    *(mem == TIO_MEM_DEVICE ? &sc->reads_dev : &sc->reads_host) += 1;
}

/* Drop slot i and write another idle slot at once, from either memory: the write may take
 * the extent a queued copy of i's read still reads. */
static void drop_and_reuse(struct sched *sc, uint32_t i) {
    if (tio_engine_drop(sc->e, i + 1) < 0) {
        record_failure("seed %llu slot %u: tio_engine_drop: %s", (unsigned long long)sc->seed, i,
                       tio_last_error());
        return;
    }
    sc->s[i].stored = 0;
    uint32_t j0 = (uint32_t)(rng(&sc->x) % NSLOT);
    for (uint32_t k = 0; k < NSLOT; k++) {
        uint32_t j = (j0 + k) % NSLOT;
        if (j != i && sc->s[j].busy == IDLE) {
            do_write(sc, j, rng(&sc->x) % 2 ? TIO_MEM_DEVICE : TIO_MEM_HOST);
            return;
        }
    }
}

static void step(struct sched *sc) {
    uint32_t i = (uint32_t)(rng(&sc->x) % NSLOT);
    struct slot *sl = &sc->s[i];
    if (sl->busy != IDLE) {
        return;
    }
    int32_t mem = rng(&sc->x) % 2 ? TIO_MEM_DEVICE : TIO_MEM_HOST;
    uint64_t r = rng(&sc->x) % 9;
    if (r == 8) { /* a kernel uses the memory */
        settle(sc, i);
        return;
    }
    if (!sl->stored || r < 2) {
        do_write(sc, i, mem);
    } else if (r < 7) {
        do_read(sc, i, mem);
    } else {
        drop_and_reuse(sc, i);
    }
}

static void run_schedule(uint64_t seed, struct sched *sc) {
    sc->seed = seed;
    sc->x = seed * UINT64_C(0x2545F4914F6CDD1D);
    static const unsigned lags[] = { 0, 20, 100, 300 };
    fc.set_lag(lags[rng(&sc->x) % 4], seed);
    struct tio_engine_params p = io_params("posix", NULL, 0);
    p.host_tier_bytes = POOL;
    p.chunk_bytes = UINT64_C(64) * 1024;
    p.preallocate = 0;
    if (tio_engine_new(&p, &sc->e) < 0) {
        record_failure("seed %llu: tio_engine_new: %s", (unsigned long long)seed, tio_last_error());
        return;
    }
    for (uint32_t i = 0; i < NSLOT; i++) {
        struct slot *sl = &sc->s[i];
        sl->bytes = ((4096u << (rng(&sc->x) % 8)) + 8 * (rng(&sc->x) % 512)) % MAX_SIZE + 8;
        sl->version = 0;
        sl->stored = 0;
        sl->busy = IDLE;
        sl->landing = 0;
    }
    for (int k = 0; k < STEPS; k++) {
        step(sc);
        reap(sc, rng(&sc->x) % 4 == 0, 0);
    }
    reap(sc, 1, 1);
    for (uint32_t i = 0; i < NSLOT; i++) { /* every stored tensor, into either memory */
        if (sc->s[i].stored) {
            do_read(sc, i, i % 2 ? TIO_MEM_DEVICE : TIO_MEM_HOST);
        }
    }
    reap(sc, 1, 1);
    for (uint32_t i = 0; i < NSLOT; i++) {
        settle(sc, i);
    }
    (void)fc.stream_synchronize(sc->stream); /* the checks of the device reads ran */
    tio_engine_free(sc->e);
    sc->e = NULL;
}

static uint64_t env_u64(const char *name, uint64_t def) {
    const char *v = getenv(name); // NOLINT(concurrency-mt-unsafe): before any thread
    return v && *v ? strtoull(v, NULL, 10) : def;
}

TIO_TEST(mixed_host_and_device_traffic_on_the_pool) {
#ifdef TIO_SANITIZED
    uint64_t n = env_u64("TIO_POOLMIX_SCHEDULES", 40);
#else
    uint64_t n = env_u64("TIO_POOLMIX_SCHEDULES", 300);
#endif
    uint64_t seed0 = env_u64("TIO_POOLMIX_SEED", 1);
    uint64_t bad0 = fc.bad_accesses(), blocking0 = fc.blocking_copies();
    uint64_t pageable0 = fc.pageable_copies(), races0 = fc.copy_races();
    static struct sched sc;
    memset(&sc, 0, sizeof sc);
    CHECK_EQ_I(fc.stream_create(&sc.stream, TIO_CUDA_STREAM_NON_BLOCKING), 0);
    int ok = sc.stream != NULL;
    for (uint32_t i = 0; i < NSLOT && ok; i++) {
        struct slot *sl = &sc.s[i];
        sl->host = malloc(MAX_SIZE);
        ok = sl->host && fc.malloc_device(&sl->dev, MAX_SIZE) == 0 &&
             fc.event_create(&sl->fence, TIO_CUDA_EVENT_DISABLE_TIMING) == 0 &&
             fc.event_create(&sl->done, TIO_CUDA_EVENT_DISABLE_TIMING) == 0;
    }
    CHECK(ok);
    uint64_t ran = 0;
    for (uint64_t k = 0; ok && k < n && atomic_load(&g_failures) == 0; k++, ran++) {
        uint64_t races = fc.copy_races(), bad = fc.bad_accesses();
        run_schedule(seed0 + k, &sc);
        if (fc.copy_races() != races || fc.bad_accesses() != bad) {
            record_failure("seed %llu: the emulator saw %llu copy races and %llu bad accesses",
                           (unsigned long long)seed0 + k,
                           (unsigned long long)(fc.copy_races() - races),
                           (unsigned long long)(fc.bad_accesses() - bad));
        }
    }
    if (atomic_load(&g_failures)) {
        printf("  %s\n", g_first);
    }
    printf("  %llu schedules: %llu device and %llu host writes, %llu device and %llu host reads, "
           "%llu pool full\n",
           (unsigned long long)ran, (unsigned long long)sc.writes_dev,
           (unsigned long long)sc.writes_host, (unsigned long long)sc.reads_dev,
           (unsigned long long)sc.reads_host, (unsigned long long)sc.nospace);
    CHECK_EQ_U(atomic_load(&g_failures), 0);
    CHECK_EQ_U(ran, n);
    CHECK(sc.writes_dev > n && sc.writes_host > n && sc.reads_dev > n && sc.reads_host > n);
    CHECK_EQ_U(fc.bad_accesses(), bad0);
    CHECK_EQ_U(fc.blocking_copies(), blocking0);
    CHECK_EQ_U(fc.pageable_copies(), pageable0);
    CHECK_EQ_U(fc.copy_races(), races0);
    for (uint32_t i = 0; i < NSLOT; i++) {
        free(sc.s[i].host);
        if (sc.s[i].dev) {
            CHECK_EQ_I(fc.free_device(sc.s[i].dev), 0);
        }
        if (sc.s[i].fence) {
            CHECK_EQ_I(fc.event_destroy(sc.s[i].fence), 0);
        }
        if (sc.s[i].done) {
            CHECK_EQ_I(fc.event_destroy(sc.s[i].done), 0);
        }
    }
    if (sc.stream) {
        CHECK_EQ_I(fc.stream_destroy(sc.stream), 0);
    }
    fc.set_lag(0, 0);
}

int main(void) {
    if (fake_cuda_load(&fc) < 0) {
        return 1;
    }
    RUN(mixed_host_and_device_traffic_on_the_pool);
    return tio_test_done();
}
