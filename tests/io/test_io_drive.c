/*
 * Who drives the backend: with caller-driven completions (uring: arm/park/unpark), a caller
 * blocked in tio_engine_wait submits and reaps itself while the progress thread parks, and
 * the progress thread takes over when no caller waits. These tests run the same checks with
 * uring (caller-driven), uring with "park=0" (progress thread only) and posix: several threads
 * that each submit and wait (completions go to whichever thread reaps first), multi-piece
 * requests that need follow-up submissions while nobody waits, cancellation while a caller
 * reaps, and wait timeouts with two waiters on one request.
 */
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include "../tio_test.h"
#include "common/common_impl.h"
#include "io_util.h"

static char g_dirs[2][512];
static const char *g_dirv[2] = { g_dirs[0], g_dirs[1] };
static int g_have_uring;

struct mode {
    const char *backend, *options, *name;
};
static const struct mode modes[] = {
    { "uring", NULL, "uring (caller-driven)" },
    { "uring", "park=0", "uring park=0 (progress thread)" },
    { "posix", NULL, "posix" },
};

static int mode_usable(const struct mode *m) {
    return strcmp(m->backend, "uring") != 0 || g_have_uring;
}

/* A case whose uring modes cannot run here (io_uring missing) ends as a reported skip (exit 77,
 * not a pass) after the posix mode ran: a failure there still fails it. */
#define SKIP_IF_NO_URING()                                                   \
    do {                                                                     \
        if (!g_have_uring)                                                   \
            SKIP_CASE("io_uring is not available here: only posix was run"); \
    } while (0)

static struct tio_engine *engine_for(const struct mode *m, uint32_t depth, uint64_t chunk) {
    struct tio_engine_params p = io_params(m->backend, g_dirv, 2);
    p.backend_options = m->options;
    p.queue_depth = depth;
    p.chunk_bytes = chunk;
    p.verify = 1;
    p.max_requests = 64;
    struct tio_engine *e = NULL;
    int rc = tio_engine_new(&p, &e);
    if (rc < 0) {
        printf("  %s: %s\n", m->name, tio_last_error());
        return NULL;
    }
    return e;
}

/* ---- several threads, each submitting and waiting ---------------------------------------- */

#define NT  4
#define PER 24

struct shared {
    struct tio_engine *e;
    pthread_mutex_t mu;
    int done;              /* completions seen by any thread in this phase */
    int seen[NT * PER];    /* per tag: times completed */
    int64_t res[NT * PER]; /* per tag: result */
    int phase, errors;
    unsigned char *bufs[NT * PER];
    uint64_t sizes[NT * PER];
};

struct worker {
    struct shared *s;
    int index;
};

static void record(struct shared *s, const struct tio_completion *c, int k) {
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < k; i++) {
        if (c[i].tag >= (uint64_t)NT * PER) {
            s->errors++;
            continue;
        }
        s->seen[c[i].tag]++;
        s->res[c[i].tag] = c[i].res;
        s->done++;
    }
    pthread_mutex_unlock(&s->mu);
}

static int phase_done(struct shared *s) {
    pthread_mutex_lock(&s->mu);
    int d = s->done >= NT * PER;
    pthread_mutex_unlock(&s->mu);
    return d;
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    struct shared *s = w->s;
    int next = 0;
    double t0 = tio_now_s();
    while (!phase_done(s) && tio_now_s() - t0 < 30) {
        /* keep up to three of our own requests submitted */
        for (int k = 0; k < 3 && next < PER; k++) {
            uint64_t tag = (uint64_t)w->index * PER + (uint64_t)next;
            int urgent = s->phase == 1 && next % 3 == 0;
            int rc = s->phase == 0
                         ? io_write(s->e, tag, s->bufs[tag], s->sizes[tag], TIO_MEM_HOST,
                                    TIO_TIER_SSD, TIO_PRIO_NORMAL, tag, NULL)
                         : io_read(s->e, tag, s->bufs[tag], s->sizes[tag], TIO_MEM_HOST,
                                   urgent ? TIO_PRIO_URGENT : TIO_PRIO_NORMAL, tag, NULL, NULL);
            if (rc == -EAGAIN)
                break;
            if (rc < 0) {
                printf("  thread %d: submit %d: %s\n", w->index, next, tio_last_error());
                pthread_mutex_lock(&s->mu);
                s->errors++;
                pthread_mutex_unlock(&s->mu);
            }
            next++;
        }
        struct tio_completion c[4];
        int k = tio_engine_wait(s->e, c, 1, 4, 20000000); /* 20 ms */
        if (k > 0)
            record(s, c, k);
        else if (k == TIO_EINVAL) /* nothing outstanding: the others reaped it all */
            sched_yield();
        else if (k < 0)
            printf("  thread %d: wait: %s\n", w->index, tio_last_error());
    }
    return NULL;
}

static void threads_submit_and_wait(const struct mode *m) {
    struct shared s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.mu, NULL);
    /* depth 4, 64 KiB chunks: requests of up to ~300 KiB need follow-up pieces; odd sizes
     * and malloc alignment go through staging */
    s.e = engine_for(m, 4, UINT64_C(64) << 10);
    REQUIRE(s.e != NULL);
    for (int i = 0; i < NT * PER; i++) {
        s.sizes[i] = 1 + (uint64_t)((i * 104729 + 7) % (300 * 1024));
        if (i % 5 == 0)
            s.sizes[i] = UINT64_C(256) << 10; /* aligned, multi-chunk */
        s.bufs[i] = i % 5 == 0 ? tio_aligned_alloc(4096, s.sizes[i]) : tio_malloc(s.sizes[i]);
        io_fill(s.bufs[i], s.sizes[i], (uint64_t)i + 1000);
    }
    for (int phase = 0; phase < 2; phase++) {
        s.phase = phase;
        s.done = 0;
        memset(s.seen, 0, sizeof s.seen);
        if (phase == 1) {
            for (int i = 0; i < NT * PER; i++)
                memset(s.bufs[i], 0, s.sizes[i]);
        }
        pthread_t th[NT];
        struct worker w[NT];
        for (int t = 0; t < NT; t++) {
            w[t] = (struct worker){ &s, t };
            pthread_create(&th[t], NULL, worker_main, &w[t]);
        }
        for (int t = 0; t < NT; t++)
            pthread_join(th[t], NULL);
        int once = 1, ok = 1;
        for (int i = 0; i < NT * PER; i++) {
            once &= s.seen[i] == 1;
            ok &= s.res[i] == (int64_t)s.sizes[i];
        }
        CHECK_EQ_I(s.done, NT * PER);
        CHECK(once); /* every request completed exactly once */
        CHECK(ok);
        CHECK_EQ_I(s.errors, 0);
    }
    int data = 1;
    for (int i = 0; i < NT * PER; i++)
        data &= io_check(s.bufs[i], s.sizes[i], (uint64_t)i + 1000);
    CHECK(data);
    struct tio_engine_stats st;
    CHECK_OK(tio_engine_stats(s.e, &st));
    CHECK_EQ_U(st.requests_completed, 2 * NT * PER);
    CHECK_EQ_U(st.outstanding, 0);
    CHECK_EQ_U(st.crc_errors, 0);
    tio_engine_free(s.e);
    for (int i = 0; i < NT * PER; i++)
        tio_free(s.bufs[i]);
    pthread_mutex_destroy(&s.mu);
}

TIO_TEST(several_threads_submit_and_wait) {
    for (size_t i = 0; i < TIO_ARRAY_LEN(modes); i++) {
        if (mode_usable(&modes[i]))
            threads_submit_and_wait(&modes[i]);
    }
    SKIP_IF_NO_URING();
}

/* ---- three threads submit, one waits: every completion must wake it ---------------------- */

struct submit_only {
    struct tio_engine *e;
    int index;
    int *stop;
};

static void *submit_only_main(void *arg) {
    struct submit_only *a = arg;
    static unsigned char buf[3][8192];
    for (uint64_t i = 0; i < 40; i++) {
        uint64_t tag = (uint64_t)a->index * 100 + i;
        int rc;
        do {
            rc = io_write(a->e, tag, buf[a->index], 8192, TIO_MEM_HOST, TIO_TIER_SSD,
                          TIO_PRIO_NORMAL, tag, NULL);
            if (rc == -EAGAIN) {
                struct timespec ts = { 0, 100000 };
                nanosleep(&ts, NULL);
            }
        } while (rc == -EAGAIN);
        if (rc < 0)
            printf("  submitter %d: %s\n", a->index, tio_last_error());
    }
    return NULL;
}

static void one_waiter(const struct mode *m) {
    struct tio_engine *e = engine_for(m, 4, UINT64_C(64) << 10);
    REQUIRE(e != NULL);
    pthread_t th[3];
    struct submit_only a[3];
    for (int t = 0; t < 3; t++) {
        a[t] = (struct submit_only){ e, t, NULL };
        pthread_create(&th[t], NULL, submit_only_main, &a[t]);
    }
    int got = 0, late = 0;
    double t0 = tio_now_s();
    while (got < 120 && tio_now_s() - t0 < 30) {
        struct tio_completion c[8];
        double w0 = tio_now_s();
        int k = tio_engine_wait(e, c, 1, 8, 500000000); /* 500 ms */
        /* the only waiter: completions returned at its deadline were never signalled */
        if (k > 0 && tio_now_s() - w0 >= 0.499)
            late++;
        if (k > 0)
            got += k;
        else if (k == TIO_EINVAL) /* the submitters have not caught up */
            sched_yield();
    }
    for (int t = 0; t < 3; t++)
        pthread_join(th[t], NULL);
    CHECK_EQ_I(got, 120);
    if (late)
        printf("  %s: %d wait(s) returned completions only at their deadline\n", m->name, late);
    CHECK_EQ_I(late, 0);
    tio_engine_free(e);
}

TIO_TEST(one_waiter_is_woken_for_every_completion) {
    for (size_t i = 0; i < TIO_ARRAY_LEN(modes); i++) {
        if (mode_usable(&modes[i]))
            one_waiter(&modes[i]);
    }
    SKIP_IF_NO_URING();
}

/* ---- several waiters, two submitters: no wait returns completions only at its deadline ---- */

#define MW_WAITERS   4
#define MW_SUBMITTER 2
#define MW_PER       150

struct mw {
    struct tio_engine *e;
    pthread_mutex_t mu;
    int done, late, errors;
    int seen[MW_SUBMITTER * MW_PER];
    unsigned char *buf;
};

struct mw_arg {
    struct mw *s;
    int index;
};

static void *mw_submitter(void *arg) {
    struct mw_arg *a = arg;
    for (int i = 0; i < MW_PER; i++) {
        uint64_t id = (uint64_t)a->index * MW_PER + (uint64_t)i;
        uint64_t bytes = 4096 * (1 + id % 16); /* 4-64 KiB: one piece each */
        int rc;
        do {
            rc = io_write(a->s->e, id, a->s->buf, bytes, TIO_MEM_HOST, TIO_TIER_SSD,
                          TIO_PRIO_NORMAL, id, NULL);
            if (rc == -EAGAIN) {
                struct timespec ts = { 0, 200000 };
                nanosleep(&ts, NULL);
            }
        } while (rc == -EAGAIN);
        if (rc < 0) {
            printf("  submitter %d: %s\n", a->index, tio_last_error());
            pthread_mutex_lock(&a->s->mu);
            a->s->errors++;
            pthread_mutex_unlock(&a->s->mu);
        }
        if (i % 8 == 7) { /* pauses: waiters run out of work and sleep in between */
            struct timespec ts = { 0, 300000 };
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

static void *mw_waiter(void *arg) {
    struct mw *s = ((struct mw_arg *)arg)->s;
    /* 2 s: far beyond any 64 KiB write, even under ASan on a loaded machine (at 400 ms a write
     * queued behind a busy disk did take that long); a waiter that was not woken returns at the
     * deadline, one woken late by a slow write does not */
    const int64_t timeout = 2000000000;
    double t0 = tio_now_s();
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int finished = s->done >= MW_SUBMITTER * MW_PER;
        pthread_mutex_unlock(&s->mu);
        if (finished || tio_now_s() - t0 > 30)
            break;
        struct tio_completion c[2];
        double w0 = tio_now_s();
        int k = tio_engine_wait(s->e, c, 1, 2, timeout);
        double dt = tio_now_s() - w0;
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < k; i++) {
            if (c[i].tag < MW_SUBMITTER * MW_PER && c[i].res > 0)
                s->seen[c[i].tag]++;
            else
                s->errors++;
        }
        if (k > 0) {
            s->done += k;
            s->late += dt >= 1.98; /* completions there, but it was not woken for them */
        }
        pthread_mutex_unlock(&s->mu);
        if (k == TIO_EINVAL) { /* nothing outstanding right now */
            struct timespec ts = { 0, 100000 };
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

static void many_waiters(const struct mode *m) {
    struct mw s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.mu, NULL);
    struct tio_engine_params p = io_params(m->backend, g_dirv, 1);
    p.backend_options = m->options;
    p.queue_depth = 4;
    p.chunk_bytes = UINT64_C(64) << 10;
    p.max_requests = 16;
    CHECK_OK(tio_engine_new(&p, &s.e));
    REQUIRE(s.e != NULL);
    s.buf = tio_aligned_alloc(4096, UINT64_C(64) << 10);
    memset(s.buf, 0x5a, UINT64_C(64) << 10);
    pthread_t th[MW_WAITERS + MW_SUBMITTER];
    struct mw_arg a[MW_WAITERS + MW_SUBMITTER];
    for (int i = 0; i < MW_WAITERS + MW_SUBMITTER; i++) {
        a[i] = (struct mw_arg){ &s, i < MW_WAITERS ? i : i - MW_WAITERS };
        pthread_create(&th[i], NULL, i < MW_WAITERS ? mw_waiter : mw_submitter, &a[i]);
    }
    for (int i = 0; i < MW_WAITERS + MW_SUBMITTER; i++)
        pthread_join(th[i], NULL);
    int once = 1;
    for (int i = 0; i < MW_SUBMITTER * MW_PER; i++)
        once &= s.seen[i] == 1;
    CHECK_EQ_I(s.done, MW_SUBMITTER * MW_PER);
    CHECK(once);
    CHECK_EQ_I(s.errors, 0);
    if (s.late)
        printf("  %s: %d wait(s) returned completions only at their deadline\n", m->name, s.late);
    CHECK_EQ_I(s.late, 0);
    tio_engine_free(s.e);
    tio_free(s.buf);
    pthread_mutex_destroy(&s.mu);
}

TIO_TEST(several_waiters_are_woken) {
    for (size_t i = 0; i < TIO_ARRAY_LEN(modes); i++) {
        if (mode_usable(&modes[i]))
            many_waiters(&modes[i]);
    }
    SKIP_IF_NO_URING();
}

/* ---- a waiter that found nothing in flight drives the next request itself ----------------- */

/* Voluntary context switches of thread `tid` of this process (-1 if unreadable). */
static long thread_switches(long tid) {
    char path[64], line[256];
    (void)snprintf(path, sizeof path, "/proc/self/task/%ld/status", tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long v = -1;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1)
            break;
    }
    fclose(f);
    return v;
}

/* Thread ids of this process whose name does not start with "iou-" (io_uring's workers). */
static size_t list_threads(long *out, size_t max) {
    DIR *d = opendir("/proc/self/task");
    size_t n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL && n < max) {
        if (de->d_name[0] == '.')
            continue;
        char path[300], comm[64] = "";
        (void)snprintf(path, sizeof path, "/proc/self/task/%s/comm", de->d_name);
        FILE *f = fopen(path, "r");
        if (f) {
            if (!fgets(comm, sizeof comm, f))
                comm[0] = 0;
            fclose(f);
        }
        if (strncmp(comm, "iou-", 4) != 0)
            out[n++] = strtol(de->d_name, NULL, 10);
    }
    if (d)
        closedir(d);
    return n;
}

struct sleeper {
    struct tio_engine *e;
    pthread_mutex_t *mu;
    pthread_cond_t *cv;
    int *returned;
    int k;
    struct tio_completion c;
    double dt, end; /* wait duration; when it returned (tio_now_s) */
    double cpu;     /* CPU seconds this thread spent in the wait */
};

/* CPU seconds of thread `tid` of this process (the clock id pthread_getcpuclockid builds). */
static double thread_cpu_s(long tid) {
    struct timespec ts;
    clockid_t id = (clockid_t)((~(unsigned long)tid << 3) | 6); /* CPUCLOCK_SCHED, per thread */
    if (clock_gettime(id, &ts) < 0)
        return -1;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double self_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *sleeper_main(void *arg) {
    struct sleeper *s = arg;
    double t0 = tio_now_s(), c0 = self_cpu_s();
    s->k = tio_engine_wait(s->e, &s->c, 1, 1, 5000000000); /* 5 s: generous */
    s->cpu = self_cpu_s() - c0;
    s->end = tio_now_s();
    s->dt = s->end - t0;
    pthread_mutex_lock(s->mu);
    (*s->returned)++;
    pthread_cond_signal(s->cv);
    pthread_mutex_unlock(s->mu);
    return NULL;
}

/*
 * Two waiters, one request (32 MiB at depth 1): one of them takes it, the other finds
 * nothing in flight and sleeps. Then a 4 MiB request (64 pieces) is submitted by this thread.
 * The sleeper must get it well before its deadline, and, caller-driven, drive it itself: the
 * parked progress thread must not carry the pieces (before the fix it did, woken by the ring's
 * eventfd for every piece, while the sleeper waited on done_cv for its broadcast - and any
 * eventfd signal lost to the flag toggle cost up to the 50 ms park timeout).
 * Returns 0 if the setup did not happen (a waiter came in after the first request was done).
 */
static int sleeper_drives_once(const struct mode *m, int caller_driven) {
    long before[64], after[64];
    size_t nb = list_threads(before, 64);
    struct tio_engine_params p = io_params(m->backend, g_dirv, 1);
    p.backend_options = m->options;
    p.queue_depth = 1;
    p.chunk_bytes = UINT64_C(64) << 10;
    struct tio_engine *e = NULL;
    if (tio_engine_new(&p, &e) < 0) {
        printf("  %s: %s\n", m->name, tio_last_error());
        CHECK(0);
        return 1;
    }
    long progress = -1;
    size_t na = list_threads(after, 64);
    for (size_t i = 0; i < na; i++) {
        int old = 0;
        for (size_t j = 0; j < nb; j++)
            old |= after[i] == before[j];
        if (!old)
            progress = after[i];
    }
    uint64_t n0 = UINT64_C(32) << 20, n1 = UINT64_C(4) << 20;
    unsigned char *a = tio_aligned_alloc(4096, n0), *b = tio_aligned_alloc(4096, n1);
    io_fill(a, n0, 21);
    io_fill(b, n1, 22);
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    int returned = 0, setup = 1;
    struct sleeper s[2];
    pthread_t th[2];
    CHECK_OK(io_write(e, 1, a, n0, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 1, NULL));
    for (int i = 0; i < 2; i++) {
        s[i] = (struct sleeper){ e, &mu, &cv, &returned, 0, { 0, 0 }, 0, 0, 0 };
        pthread_create(&th[i], NULL, sleeper_main, &s[i]);
    }
    pthread_mutex_lock(&mu); /* one of them returns with the first request */
    while (returned == 0)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    pthread_mutex_lock(&mu);
    int first = s[0].dt > 0 ? 0 : 1; /* dt is set before `returned` */
    pthread_mutex_unlock(&mu);
    struct sleeper *w = &s[1 - first];
    if (s[first].k != 1 || s[first].c.tag != 1)
        setup = 0; /* a waiter came in after the first request was done: not exercised */
    struct timespec ts = { 0, 20000000 }; /* let the other one settle into its sleep */
    nanosleep(&ts, NULL);
    long sw0 = progress > 0 ? thread_switches(progress) : -1;
    double pc0 = progress > 0 ? thread_cpu_s(progress) : -1;
    CHECK_OK(io_write(e, 2, b, n1, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 2, NULL));
    pthread_join(th[1 - first], NULL);
    pthread_join(th[first], NULL);
    long sw1 = progress > 0 ? thread_switches(progress) : -1;
    double pc1 = progress > 0 ? thread_cpu_s(progress) : -1;
    if (w->k == TIO_EINVAL)
        setup = 0; /* it came in after the first request was reaped */
    if (setup) {
        CHECK_EQ_I(w->k, 1);
        CHECK_EQ_U(w->c.tag, 2);
        CHECK_EQ_I(w->c.res, (int64_t)n1);
        CHECK(w->dt < 2.5); /* woken for it, not at its deadline */
        if (caller_driven && pc0 >= 0 && pc1 >= 0) {
            /* who carried the 63 follow-up pieces (a submit and a reap each) shows in CPU
             * time whatever the disk's speed: the sleeper, not the progress thread (before the
             * fix the progress thread did, woken by the eventfd once per piece: 61-65 wake-ups
             * in three runs on a slow disk, 5 on a fast one) */
            printf("  %s: 64 pieces: progress thread %.0f us CPU (%ld wake-ups), sleeper %.0f "
                   "us CPU in its wait\n",
                   m->name, (pc1 - pc0) * 1e6, sw1 - sw0, w->cpu * 1e6);
            CHECK(pc1 - pc0 < w->cpu);
        }
    }
    tio_engine_free(e);
    tio_free(a);
    tio_free(b);
    return setup;
}

TIO_TEST(a_sleeping_waiter_drives_new_requests) {
    const char *late = NULL;
    for (size_t i = 0; i < TIO_ARRAY_LEN(modes); i++) {
        if (!mode_usable(&modes[i]))
            continue;
        int caller_driven = i == 0;
        int ok = 0;
        for (int attempt = 0; attempt < 3 && !ok; attempt++)
            ok = sleeper_drives_once(&modes[i], caller_driven);
        if (!ok)
            late = modes[i].name;
    }
    SKIP_IF_NO_URING();
    if (late) /* timing: not exercised, so not a pass */
        SKIP_CASE("%s: a waiter always came in late: not exercised", late);
}

/* ---- nobody waits: the progress thread must carry multi-piece requests to the end --------- */

static void progress_without_waiter(const struct mode *m) {
    struct tio_engine *e = engine_for(m, 2, UINT64_C(64) << 10);
    REQUIRE(e != NULL);
    uint64_t n = 4u << 20; /* 64 pieces at depth 2: 62 follow-up submissions */
    unsigned char *a = tio_aligned_alloc(4096, n), *b = tio_aligned_alloc(4096, n);
    io_fill(a, n, 77);
    memset(b, 0, n);
    struct tio_completion c = { 0, 0 };
    int got = 0;
    double t0 = tio_now_s();
    CHECK_OK(io_write(e, 1, a, n, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 1, NULL));
    while (!got && tio_now_s() - t0 < 30) {
        struct timespec ts = { 0, 2000000 }; /* "compute" without waiting, then poll */
        nanosleep(&ts, NULL);
        got = tio_engine_poll(e, &c, 1);
    }
    CHECK_EQ_I(got, 1);
    CHECK_EQ_I(c.res, (int64_t)n);
    got = 0;
    CHECK_OK(io_read(e, 1, b, n, TIO_MEM_HOST, TIO_PRIO_NORMAL, 2, NULL, NULL));
    while (!got && tio_now_s() - t0 < 30) {
        struct timespec ts = { 0, 2000000 };
        nanosleep(&ts, NULL);
        got = tio_engine_poll(e, &c, 1);
    }
    CHECK_EQ_I(got, 1);
    CHECK_EQ_I(c.res, (int64_t)n);
    CHECK(io_check(b, n, 77));
    tio_engine_free(e);
    tio_free(a);
    tio_free(b);
}

TIO_TEST(progress_continues_without_a_waiter) {
    for (size_t i = 0; i < TIO_ARRAY_LEN(modes); i++) {
        if (mode_usable(&modes[i]))
            progress_without_waiter(&modes[i]);
    }
    SKIP_IF_NO_URING();
}

/* ---- cancellation while a caller is blocked driving the backend --------------------------- */

struct reaper {
    struct tio_engine *e;
    int64_t res[5];
    int n;
};

static void *reaper_main(void *arg) {
    struct reaper *r = arg;
    for (int i = 0; i < r->n; i++) {
        struct tio_completion c = io_wait1(r->e);
        if (c.tag >= 1 && c.tag <= 4)
            r->res[c.tag] = c.res;
    }
    return NULL;
}

static void cancel_while_reaping(const struct mode *m) {
    struct tio_engine *e = engine_for(m, 1, UINT64_C(64) << 10);
    REQUIRE(e != NULL);
    uint64_t n = 8u << 20; /* 128 pieces each at depth 1 */
    unsigned char *a = tio_aligned_alloc(4096, n);
    io_fill(a, n, 5);
    struct reaper r = { e, { 0, 0, 0, 0, 0 }, 4 };
    for (uint64_t t = 1; t <= 4; t++)
        CHECK_OK(io_write(e, t, a, n, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, t, NULL));
    pthread_t th;
    pthread_create(&th, NULL, reaper_main, &r);
    struct timespec ts = { 0, 5000000 }; /* let the reaper block in the backend */
    nanosleep(&ts, NULL);
    /* tensor 4 is queued behind 384 pieces; a cancel that still finds it must complete it
     * with TIO_ECANCELED and store nothing, whether it has started or not */
    int rc = tio_engine_cancel(e, 4);
    pthread_join(th, NULL);
    CHECK_EQ_I(r.res[1], (int64_t)n);
    CHECK_EQ_I(r.res[2], (int64_t)n);
    CHECK_EQ_I(r.res[3], (int64_t)n);
    uint64_t bytes;
    struct tio_engine_stats st;
    CHECK_OK(tio_engine_stats(e, &st));
    if (rc == TIO_ENOTFOUND) { /* this thread slept through all four writes (loaded machine) */
        printf("  %s: cancel came after tensor 4 was written: not exercised\n", m->name);
        CHECK_EQ_I(r.res[4], (int64_t)n);
        CHECK_EQ_U(st.ssd_used_bytes, 4 * n);
    } else {
        CHECK_EQ_I(rc, 1);
        CHECK_EQ_I(r.res[4], TIO_ECANCELED);
        CHECK_RC(tio_engine_tensor_info(e, 4, &bytes, NULL), TIO_ENOTFOUND);
        CHECK_EQ_U(st.requests_canceled, 1);
        CHECK_EQ_U(st.ssd_used_bytes, 3 * n);
    }
    tio_engine_free(e);
    tio_free(a);
}

TIO_TEST(cancel_while_a_caller_reaps) {
    for (size_t i = 0; i < TIO_ARRAY_LEN(modes); i++) {
        if (mode_usable(&modes[i]))
            cancel_while_reaping(&modes[i]);
    }
    SKIP_IF_NO_URING();
}

/* ---- wait timeouts: two waiters, one completion ------------------------------------------- */

struct timed_waiter {
    struct tio_engine *e;
    int got, timeouts, early, late; /* completions; waits that returned 0: all, too early/late */
    int einval;                     /* waits refused: nothing outstanding any more */
};

/* Wait in rounds of 300 ms until one of the two threads has the completion. */
static void *timed_waiter_main(void *arg) {
    struct timed_waiter *w = arg;
    for (int round = 0; round < 100; round++) {
        struct tio_completion c;
        double t0 = tio_now_s();
        int k = tio_engine_wait(w->e, &c, 1, 1, 300000000);
        double dt = tio_now_s() - t0;
        if (k == 1) {
            w->got++;
            break;
        }
        if (k == TIO_EINVAL) { /* the other thread took it */
            w->einval++;
            break;
        }
        w->timeouts++;
        w->early += dt < 0.25; /* the timeout was not waited out */
        w->late += dt > 10;    /* ... or not honoured (loose bound: no hang) */
    }
    return NULL;
}

static void two_waiters_one_completion(const struct mode *m) {
    struct tio_engine *e = engine_for(m, 1, UINT64_C(64) << 10);
    REQUIRE(e != NULL);
    uint64_t n = 16u << 20; /* 256 pieces at depth 1: both waiters are in before it is done */
    unsigned char *a = tio_aligned_alloc(4096, n);
    io_fill(a, n, 9);
    CHECK_OK(io_write(e, 1, a, n, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 1, NULL));
    struct timed_waiter w[2] = { { e, 0, 0, 0, 0, 0 }, { e, 0, 0, 0, 0, 0 } };
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, timed_waiter_main, &w[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CHECK_EQ_I(w[0].got + w[1].got, 1); /* the completion went to exactly one of them */
    CHECK_EQ_I(w[0].early + w[1].early, 0);
    CHECK_EQ_I(w[0].late + w[1].late, 0);
    /* the other one either timed out at least once or came in after it was taken */
    int loser = w[0].got ? 1 : 0;
    CHECK(w[loser].timeouts > 0 || w[loser].einval == 1);
    /* timeout 0 returns at once, with or without the completion */
    CHECK_OK(io_read(e, 1, a, n, TIO_MEM_HOST, TIO_PRIO_NORMAL, 2, NULL, NULL));
    struct tio_completion c;
    double t0 = tio_now_s();
    int k = tio_engine_wait(e, &c, 1, 1, 0);
    CHECK(tio_now_s() - t0 < 5); /* loose bound: it did not wait for the 16 MiB read */
    CHECK(k == 0 || k == 1);
    if (k == 0)
        CHECK_EQ_I(io_wait1(e).res, (int64_t)n);
    CHECK(io_check(a, n, 9));
    tio_engine_free(e);
    tio_free(a);
}

TIO_TEST(wait_timeouts_are_honoured) {
    for (size_t i = 0; i < TIO_ARRAY_LEN(modes); i++) {
        if (mode_usable(&modes[i]))
            two_waiters_one_completion(&modes[i]);
    }
    SKIP_IF_NO_URING();
}

TIO_TEST(bad_park_option) {
    if (!g_have_uring)
        SKIP_CASE("io_uring is not available here");
    struct tio_engine_params p = io_params("uring", g_dirv, 1);
    p.backend_options = "park=yes";
    struct tio_engine *e = NULL;
    CHECK_RC(tio_engine_new(&p, &e), TIO_EINVAL);
    CHECK_ERR_HAS("park");
    CHECK(e == NULL);
}

int main(void) {
    for (int i = 0; i < 2; i++)
        io_mkdtemp(g_dirs[i], sizeof g_dirs[i], "drive");
    struct tio_engine_backend_info infos[16];
    int n = tio_engine_probe_all(infos, TIO_ARRAY_LEN(infos));
    for (int i = 0; i < n && i < 16; i++)
        g_have_uring |= !strcmp(infos[i].name, "uring") && infos[i].available;
    if (!g_have_uring)
        printf("  uring unavailable here: posix only\n");
    RUN(several_threads_submit_and_wait);
    RUN(one_waiter_is_woken_for_every_completion);
    RUN(several_waiters_are_woken);
    RUN(a_sleeping_waiter_drives_new_requests);
    RUN(progress_continues_without_a_waiter);
    RUN(cancel_while_a_caller_reaps);
    RUN(wait_timeouts_are_honoured);
    RUN(bad_park_option);
    for (int i = 0; i < 2; i++)
        rmdir(g_dirs[i]);
    return tio_test_done();
}
