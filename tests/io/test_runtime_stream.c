/*
 * The stream-ordered executor (tio_runtime_params.stream_ordered) against the lagging-GPU
 * emulator (tests/io/fakes/fake_cudart.c): random traces, the real planner's plans and random
 * plans, run over many random delay schedules of every emulated stream.
 *
 * The caller here behaves like PyTorch: kernels are host functions queued on the compute stream
 * (cudaLaunchHostFunc) and never waited for; memory comes from a stream-ordered caching
 * allocator that hands a freed block out again at once (no synchronisation), most recently
 * freed first. When the compute stream runs a kernel, the kernel checks every input against the
 * content of the version program order says it must see (a pattern derived from the tensor and
 * the version) and writes the next version of its outputs. Releases are stream-ordered (a
 * host-tier write completes once its copies are queued, and the compute stream waits for them
 * before the memory is reused; a clean offload writes nothing): a RELEASE'd block, like a freed
 * intermediate's, is poisoned by a host function queued on the stream, which checks that no
 * engine copy of the block is still unordered with it. Whatever the executor or the engine gets
 * wrong in ordering (a write that reads a tensor before its producer ran, a read that fills memory
 * before its previous user ran or that a kernel reads before it lands, memory released before its
 * copy completed) shows up as a kernel finding another version, poison or foreign bytes. The test
 * also checks that the training thread never synchronizes with the device while it drives the
 * iterations and that the engine never copies on the legacy stream or a blocking stream, nor
 * between the device and pageable host memory (a copy a GPU makes synchronous). Now and then the
 * caller forgets an intermediate the plan still holds (a read in flight preferred) and frees its
 * block on the stream, which the allocator hands out again at once.
 *
 * Environment: TIO_STREAM_TIERS (both, the default: the cuda backend with a host tier; ssd or
 * host: an engine with that tier alone, every planned move sent there, the posix backend),
 * TIO_STREAM_SCHEDULES (default 600; 120 under sanitizers), TIO_STREAM_SEED (first
 * seed, default 1), TIO_STREAM_LAG_US (every schedule's maximum delay per stream operation;
 * default: 0, 20, 100 or 300 us drawn per schedule), TIO_STREAM_VERBOSE=1 (print the actions and
 * kernels), TIO_STREAM_STRICT=1 (a release while a kernel using the memory is queued fails). A
 * failure prints the seed of its schedule: rerun with TIO_STREAM_SEED=that and
 * TIO_STREAM_SCHEDULES=1.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <teraio/io.h>
#include <teraio/runtime.h>

#include "io/fake_cuda.h"
#include "io/io_util.h"
#include "io/runtime_util.h"
#include "io/stream_spec.h"
#include "tio_test.h"

#define ITERS               2
#define SCHEDULES_PER_TRACE 6
#define POISON              UINT64_C(0xDBDBDBDBDBDBDBDB)

static struct fake_cuda fc;
static char g_dir[512];
static int32_t g_only; /* TIO_STREAM_TIERS: 0 both tiers, else the one tier */

/* ---- contents: version v of tensor t ------------------------------------------------------ */
static uint64_t pat_base(uint32_t t, uint64_t v) {
    uint64_t x = ((uint64_t)t << 40) ^ (v * UINT64_C(0x2545F4914F6CDD1D));
    return rng_next(&x) | 1; /* never all 0xDB */
}
static uint64_t pat_word(uint64_t base, uint64_t i) {
    return base + i * UINT64_C(0x9E3779B97F4A7C15);
}

/* ---- failures (recorded by kernels on the stream threads) --------------------------------- */
static atomic_uint_fast64_t g_failures;
static pthread_mutex_t g_fail_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_first[600];

static void record_failure(const char *fmt, ...) TIO_PRINTF(1, 2);
static void record_failure(const char *fmt, ...) {
    if (atomic_fetch_add(&g_failures, 1) != 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&g_fail_mu);
    (void)vsnprintf(g_first, sizeof g_first, fmt, ap);
    pthread_mutex_unlock(&g_fail_mu);
    va_end(ap);
}

/* ---- the caller's caching allocator --------------------------------------------------------- */
struct extent {
    uint64_t off, len;
};
static unsigned char *g_slab; /* cudaMalloc'd */
static uint64_t g_slab_bytes;
static struct extent g_holes[4 * MAX_T + 8];
static size_t g_nholes;
static uint64_t g_hint = UINT64_MAX; /* the most recently freed block */

static void pool_reset(void) {
    g_nholes = 1;
    g_holes[0] = (struct extent){ 0, g_slab_bytes };
    g_hint = UINT64_MAX;
}

static void *pool_alloc(uint64_t len) {
    len = (len + 511) & ~(uint64_t)511;
    size_t pick = g_nholes;
    for (size_t i = 0; i < g_nholes; i++) {
        if (g_holes[i].len < len)
            continue;
        if (g_holes[i].off == g_hint) { /* reuse what was just freed */
            pick = i;
            break;
        }
        if (pick == g_nholes)
            pick = i;
    }
    if (pick == g_nholes)
        return NULL;
    uint64_t off = g_holes[pick].off;
    g_holes[pick].off += len;
    g_holes[pick].len -= len;
    if (g_holes[pick].len == 0) {
        memmove(&g_holes[pick], &g_holes[pick + 1], (g_nholes - pick - 1) * sizeof *g_holes);
        g_nholes--;
    }
    return g_slab + off;
}

static void pool_free(void *p, uint64_t len) {
    len = (len + 511) & ~(uint64_t)511;
    uint64_t off = (uint64_t)((unsigned char *)p - g_slab);
    size_t i = 0;
    while (i < g_nholes && g_holes[i].off < off)
        i++;
    int left = i > 0 && g_holes[i - 1].off + g_holes[i - 1].len == off;
    int right = i < g_nholes && off + len == g_holes[i].off;
    if (left && right) {
        g_holes[i - 1].len += len + g_holes[i].len;
        memmove(&g_holes[i], &g_holes[i + 1], (g_nholes - i - 1) * sizeof *g_holes);
        g_nholes--;
    } else if (left) {
        g_holes[i - 1].len += len;
    } else if (right) {
        g_holes[i].off = off;
        g_holes[i].len += len;
    } else {
        memmove(&g_holes[i + 1], &g_holes[i], (g_nholes - i) * sizeof *g_holes);
        g_holes[i] = (struct extent){ off, len };
        g_nholes++;
    }
    g_hint = off;
}

/* ---- kernels and stream-ordered poison --------------------------------------------------- */
struct kuse {
    uint32_t t;
    int32_t mode;
    void *dev;   /* the tensor's device bytes */
    uint64_t *w; /* their shadow */
    uint64_t nw;
    uint64_t expect, write; /* versions */
};
struct kernel {
    uint64_t seed, iter, k, seq;
    uint32_t n;
    struct kuse u[MAX_USES];
};

static void describe(char *out, size_t len, const struct kuse *u, uint64_t i) {
    uint64_t got = u->w[i];
    if (got == POISON) {
        (void)snprintf(out, len, "poison (freed or released memory)");
        return;
    }
    for (uint64_t v = 0; v <= u->expect + 2; v++) {
        if (got == pat_word(pat_base(u->t, v), i)) {
            (void)snprintf(out, len, "version %llu", (unsigned long long)v);
            return;
        }
    }
    for (uint32_t t = 0; t < MAX_T; t++) /* another tensor's bytes? */
        for (uint64_t v = 0; v < 64; v++)
            if (got == pat_word(pat_base(t, v), i)) {
                (void)snprintf(out, len, "tensor %u's version %llu", t, (unsigned long long)v);
                return;
            }
    (void)snprintf(out, len, "foreign bytes %016llx", (unsigned long long)got);
}

/* Kernels launched and run so far (a stream runs them in order, so the first g_ran have run). */
static uint64_t g_launched;
static atomic_uint_fast64_t g_ran;

static void kernel_fn(void *arg) {
    struct kernel *kn = arg;
    for (uint32_t j = 0; j < kn->n; j++) { /* a copy running unordered with this kernel? */
        struct kuse *u = &kn->u[j];
        if (fc.racing_copies(u->dev, u->nw * 8, (u->mode & TIO_USE_WRITE) != 0))
            record_failure("seed %llu iteration %llu kernel %llu: tensor %u's memory is being "
                           "copied %s by the engine while the kernel runs (no event orders them)",
                           (unsigned long long)kn->seed, (unsigned long long)kn->iter,
                           (unsigned long long)kn->k, u->t,
                           u->mode & TIO_USE_WRITE ? "to or from" : "into");
    }
    for (uint32_t j = 0; j < kn->n; j++) {
        struct kuse *u = &kn->u[j];
        if (!(u->mode & TIO_USE_READ))
            continue;
        uint64_t base = pat_base(u->t, u->expect);
        for (uint64_t i = 0; i < u->nw; i++) {
            if (u->w[i] != pat_word(base, i)) {
                char what[96];
                describe(what, sizeof what, u, i);
                record_failure("seed %llu iteration %llu kernel %llu: tensor %u word %llu holds "
                               "%s, want version %llu",
                               (unsigned long long)kn->seed, (unsigned long long)kn->iter,
                               (unsigned long long)kn->k, u->t, (unsigned long long)i, what,
                               (unsigned long long)u->expect);
                break;
            }
        }
    }
    for (uint32_t j = 0; j < kn->n; j++) {
        struct kuse *u = &kn->u[j];
        if (!(u->mode & TIO_USE_WRITE))
            continue;
        uint64_t base = pat_base(u->t, u->write);
        for (uint64_t i = 0; i < u->nw; i++)
            u->w[i] = pat_word(base, i);
    }
    if (kn->seq)
        atomic_store(&g_ran, kn->seq);
    free(kn);
}

struct poison {
    uint64_t seed;
    uint32_t t;
    void *dev;
    uint64_t *w;
    uint64_t nw;
};
static void poison_fn(void *arg) {
    struct poison *p = arg;
    if (fc.racing_copies(p->dev, p->nw * 8, 1))
        record_failure("seed %llu: tensor %u's memory, freed on the stream, is being copied by the "
                       "engine (no event orders them)",
                       (unsigned long long)p->seed, p->t);
    for (uint64_t i = 0; i < p->nw; i++)
        p->w[i] = POISON;
    free(p);
}

/* ---- one schedule ------------------------------------------------------------------------ */
struct caller {
    const struct spec *s;
    struct tio_runtime *rt;
    void *stream;
    uint64_t seed;
    void *ptr[MAX_T];
    uint64_t version[MAX_T];  /* the version the next reader must see */
    uint64_t user[MAX_T];     /* the last kernel launched that uses t's current memory */
    uint64_t clean_queued;    /* clean releases while a kernel using the memory was queued */
    uint64_t released_queued; /* releases after a write, likewise */
    uint64_t forgets;         /* tio_runtime_forget calls, reads in flight among them */
    uint64_t forgets_reading;
    uint64_t crossed;          /* globals still offloading (not released) after end_iteration */
    uint64_t crossed_modified; /* of which the next iteration's first use modifies */
    uint64_t checkpoint_reads; /* stored copies read between iterations (drain_and_read) */
    struct tio_engine *engine;
    int crossing[MAX_T]; /* t is such a global, not used since */
    int dead[MAX_T];     /* forgotten in this iteration: its later uses are dropped */
    int err;             /* a harness or executor call failed */
};

static uint64_t *shadow(void *p, uint64_t bytes) {
    return fc.translate(p, bytes);
}

/* A call failed (rc < 0 from teraio: its detail is printed) or the caller found an error
 * (rc == 0). */
static void caller_error(struct caller *c, const char *what, int rc) {
    if (!c->err && rc < 0)
        record_failure("seed %llu: %s: %d (%s)", (unsigned long long)c->seed, what, rc,
                       tio_last_error());
    else if (!c->err)
        record_failure("seed %llu: %s", (unsigned long long)c->seed, what);
    c->err = 1;
}

/* Free t's block through the stream: poisoned when the stream gets there. */
static void free_on_stream(struct caller *c, uint32_t t) {
    struct poison *p = malloc(sizeof *p);
    if (!p || !c->ptr[t]) {
        free(p);
        caller_error(c, "free_on_stream", 0);
        return;
    }
    p->seed = c->seed;
    p->t = t;
    p->dev = c->ptr[t];
    p->w = shadow(c->ptr[t], c->s->bytes[t]);
    p->nw = c->s->bytes[t] / 8;
    if (fc.launch_host_func(c->stream, poison_fn, p) != 0) {
        free(p);
        caller_error(c, "cudaLaunchHostFunc", 0);
    }
    pool_free(c->ptr[t], c->s->bytes[t]);
    c->ptr[t] = NULL;
}

static int g_verbose; /* TIO_STREAM_VERBOSE=1: print the actions and kernels */
static int g_strict;  /* TIO_STREAM_STRICT=1: a release with queued users fails */

static uint64_t cleans(const struct caller *c) {
    struct tio_runtime_stats st;
    tio_runtime_get_stats(c->rt, &st);
    return st.clean_offloads;
}

/* Perform the actions a call returned; clean: the call made clean offloads. */
static void apply(struct caller *c, const struct tio_runtime_action *a, int n, int clean) {
    for (int i = 0; i < n && !c->err; i++) {
        uint32_t t = a[i].tensor;
        if (g_verbose)
            printf("    %s %u (%p)\n", a[i].kind == TIO_RUNTIME_RELEASE ? "RELEASE" : "MATERIALIZE",
                   t, c->ptr[t]);
        if (a[i].kind == TIO_RUNTIME_RELEASE) {
            if (!c->ptr[t]) {
                record_failure("seed %llu: RELEASE of tensor %u, which has no memory",
                               (unsigned long long)c->seed, t);
                c->err = 1;
                return;
            }
            int queued = c->user[t] > atomic_load(&g_ran); /* a kernel using it has not run */
            if (queued && g_strict) {
                record_failure("seed %llu: tensor %u released while kernel #%llu that uses it has "
                               "not run",
                               (unsigned long long)c->seed, t, (unsigned long long)c->user[t]);
                c->err = 1;
                return;
            }
            /* Releases are stream-ordered: kernels queued earlier may still use the memory, a
             * host-tier write's copies may still read it and a read that filled it may still be
             * landing (the compute stream waits for both). Stream-ordered reuse (PyTorch's
             * caching allocator) makes that safe: free it through the stream, where the poison
             * checks that no engine copy of it is still unordered with the stream. */
            c->clean_queued += (uint64_t)(queued && clean);
            c->released_queued += (uint64_t)(queued && !clean);
            free_on_stream(c, t);
        } else {
            if (c->ptr[t]) /* materialised again (restore): drop the block handed out before */
                free_on_stream(c, t);
            c->ptr[t] = pool_alloc(a[i].bytes);
            if (!c->ptr[t]) {
                caller_error(c, "the caller's pool is exhausted", 0);
                return;
            }
            int rc = tio_runtime_bind(c->rt, t, c->ptr[t]);
            if (rc < 0)
                caller_error(c, "tio_runtime_bind (MATERIALIZE)", rc);
        }
    }
}

static void launch(struct caller *c, uint64_t iter, uint32_t k) {
    const struct spec *s = c->s;
    struct kernel *kn = calloc(1, sizeof *kn);
    if (!kn) {
        caller_error(c, "calloc", 0);
        return;
    }
    *kn = (struct kernel){ .seed = c->seed, .iter = iter, .k = k };
    kn->seq = ++g_launched;
    for (uint32_t i = 0; i < s->nu[k]; i++) {
        uint32_t t = s->u[k][i].t;
        int32_t mode = s->u[k][i].mode;
        if (c->dead[t])
            continue;
        if (!c->ptr[t]) {
            record_failure("seed %llu iteration %llu kernel %u: tensor %u has no memory after "
                           "ready() (state %d)",
                           (unsigned long long)c->seed, (unsigned long long)iter, k, t,
                           tio_runtime_tensor_state(c->rt, t));
            c->err = 1;
            free(kn);
            return;
        }
        kn->u[kn->n++] = (struct kuse){ .t = t,
                                        .mode = mode,
                                        .dev = c->ptr[t],
                                        .w = shadow(c->ptr[t], s->bytes[t]),
                                        .nw = s->bytes[t] / 8,
                                        .expect = c->version[t],
                                        .write = c->version[t] + 1 };
        if (mode & TIO_USE_WRITE)
            c->version[t]++;
        c->crossed_modified += c->crossing[t] && (mode & TIO_USE_WRITE);
        c->crossing[t] = 0;
        c->user[t] = kn->seq;
    }
    if (g_verbose) {
        printf("    kernel %u:", k);
        for (uint32_t i = 0; i < kn->n; i++)
            printf(" t%u/%d v%llu->%llu", kn->u[i].t, kn->u[i].mode,
                   (unsigned long long)kn->u[i].expect, (unsigned long long)kn->u[i].write);
        printf("\n");
    }
    if (fc.launch_host_func(c->stream, kernel_fn, kn) != 0) {
        free(kn);
        caller_error(c, "cudaLaunchHostFunc", 0);
    }
}

/* A kernel that reads every global the caller holds (state resident), as code running after
 * the step would (the optimizer, a checkpoint): after end_iteration and after the restore. */
static void check_globals(struct caller *c, uint64_t iter, int all) {
    struct kernel *kn = calloc(1, sizeof *kn);
    if (!kn) {
        caller_error(c, "calloc", 0);
        return;
    }
    *kn = (struct kernel){ .seed = c->seed, .iter = iter, .k = UINT64_MAX };
    for (uint32_t g = 0; g < c->s->ng && kn->n < MAX_USES; g++) {
        if (!c->ptr[g] || tio_runtime_tensor_state(c->rt, g) != 1) {
            if (all)
                record_failure("seed %llu: global %u is not resident after restore (state %d)",
                               (unsigned long long)c->seed, g, tio_runtime_tensor_state(c->rt, g));
            continue;
        }
        kn->u[kn->n++] = (struct kuse){ .t = g,
                                        .mode = TIO_USE_READ,
                                        .dev = c->ptr[g],
                                        .w = shadow(c->ptr[g], c->s->bytes[g]),
                                        .nw = c->s->bytes[g] / 8,
                                        .expect = c->version[g] };
    }
    if (fc.launch_host_func(c->stream, kernel_fn, kn) != 0)
        free(kn);
}

/* Now and then the caller frees an intermediate the plan still holds (tio_runtime_forget), a read
 * in flight preferred, and frees its block on the stream: the allocator hands it out again at
 * once, so a read still filling it or landing in it would corrupt the next tensor. */
static void maybe_forget(struct caller *c, uint64_t *x) {
    uint32_t pick = MAX_T, nt = c->s->nt, off = (uint32_t)rng_below(x, nt);
    for (uint32_t i = 0; i < nt && rng_below(x, 3) == 0; i++) {
        uint32_t t = (off + i) % nt;
        int st = tio_runtime_tensor_state(c->rt, t);
        if (t >= c->s->ng && !c->dead[t] && c->ptr[t] && (st == 5 || (st == 1 && pick == MAX_T)))
            pick = t;
    }
    if (pick == MAX_T)
        return;
    c->forgets_reading += tio_runtime_tensor_state(c->rt, pick) == 5;
    int rc = tio_runtime_forget(c->rt, pick);
    if (rc < 0) {
        caller_error(c, "tio_runtime_forget", rc);
        return;
    }
    c->forgets++;
    c->dead[pick] = 1;
    free_on_stream(c, pick);
}

/* Between iterations, what a checkpoint between steps does: tio_runtime_drain, then read every
 * STORED global's copy with the engine itself (a waited-for read of its own) into host memory:
 * the copy holds the version a reader must see, and no completion of the executor's is left in
 * the engine to be taken by that wait. Returns how many copies it read. */
static uint64_t drain_and_read(struct caller *c) {
    int rc = tio_runtime_drain(c->rt);
    if (rc < 0) {
        caller_error(c, "drain", rc);
        return 0;
    }
    struct tio_engine_stats es;
    if ((rc = tio_engine_stats(c->engine, &es)) < 0) {
        caller_error(c, "tio_engine_stats", rc);
        return 0;
    }
    if (es.outstanding) { /* a waited-for read of the caller's could take their completions */
        record_failure("seed %llu: drained, yet %u requests are outstanding in the engine",
                       (unsigned long long)c->seed, es.outstanding);
        c->err = 1;
        return 0;
    }
    uint64_t n = 0;
    for (uint32_t g = 0; g < c->s->ng && !c->err; g++) {
        if (tio_runtime_tensor_state(c->rt, g) != 3)
            continue;
        uint64_t nb = c->s->bytes[g], *buf = malloc(nb);
        struct tio_completion done = { 0 };
        if (!buf ||
            (rc = io_read(c->engine, g, buf, nb, TIO_MEM_HOST, TIO_PRIO_URGENT, UINT64_MAX, NULL,
                          NULL)) < 0 ||
            (rc = tio_engine_wait(c->engine, &done, 1, 1, -1)) != 1) {
            caller_error(c, "the checkpoint's read", rc);
        } else if (done.tag != UINT64_MAX || done.res != (int64_t)nb) {
            record_failure("seed %llu: drained, yet the engine completed tag %llu (%lld) before "
                           "the checkpoint's read of global %u",
                           (unsigned long long)c->seed, (unsigned long long)done.tag,
                           (long long)done.res, g);
            c->err = 1;
        } else {
            uint64_t base = pat_base(g, c->version[g]);
            for (uint64_t i = 0; i < nb / 8; i++) {
                if (buf[i] != pat_word(base, i)) {
                    record_failure("seed %llu: global %u's stored copy differs at word %llu",
                                   (unsigned long long)c->seed, g, (unsigned long long)i);
                    c->err = 1;
                    break;
                }
            }
            n++;
        }
        free(buf);
    }
    return n;
}

static void iteration(struct caller *c, uint64_t iter, struct tio_runtime_action *act, size_t cap) {
    const struct spec *s = c->s;
    uint64_t c0 = cleans(c), x = c->seed * 31 + iter;
    memset(c->dead, 0, sizeof c->dead);
    int n = tio_runtime_begin_iteration(c->rt, act, cap);
    if (n < 0) {
        caller_error(c, "begin_iteration", n);
        return;
    }
    apply(c, act, n, cleans(c) != c0);
    for (uint32_t k = 0; k < s->nk && !c->err; k++) {
        c0 = cleans(c);
        n = tio_runtime_before_kernel(c->rt, k, act, cap);
        if (n < 0) {
            caller_error(c, "before_kernel", n);
            return;
        }
        apply(c, act, n, cleans(c) != c0);
        int rc = tio_runtime_ready(c->rt, k);
        if (rc < 0) {
            caller_error(c, "ready", rc);
            return;
        }
        uint32_t created[MAX_USES], nc = 0;
        for (uint32_t i = 0; i < s->nu[k]; i++) { /* outputs created by k */
            uint32_t t = s->u[k][i].t;
            if (t >= s->ng && s->first[t] == k) {
                c->ptr[t] = pool_alloc(s->bytes[t]);
                if (!c->ptr[t]) {
                    caller_error(c, "the caller's pool is exhausted", 0);
                    return;
                }
                created[nc++] = t;
            }
        }
        launch(c, iter, k);
        for (uint32_t i = 0; i < nc && !c->err; i++)
            if ((rc = tio_runtime_bind(c->rt, created[i], c->ptr[created[i]])) < 0) {
                caller_error(c, "bind", rc);
                return;
            }
        if ((rc = tio_runtime_after_kernel(c->rt, k)) < 0) {
            caller_error(c, "after_kernel", rc);
            return;
        }
        maybe_forget(c, &x);
        for (uint32_t i = 0; i < s->nu[k]; i++) { /* intermediates that died at k */
            uint32_t t = s->u[k][i].t;
            if (t >= s->ng && s->last[t] == k && c->ptr[t])
                free_on_stream(c, t);
        }
    }
    if (c->err)
        return;
    c0 = cleans(c);
    n = tio_runtime_end_iteration(c->rt, act, cap);
    if (n < 0) {
        caller_error(c, "end_iteration", n);
        return;
    }
    apply(c, act, n, cleans(c) != c0);
    for (uint32_t g = 0; g < s->ng; g++) { /* an offload that goes on into the next iteration */
        c->crossing[g] = tio_runtime_tensor_state(c->rt, g) == 2;
        c->crossed += (uint64_t)c->crossing[g];
    }
    if (!c->err)
        check_globals(c, iter, 0); /* the step's reads are all visible after end_iteration */
    if (!c->err && iter + 1 < ITERS)
        c->checkpoint_reads += drain_and_read(c); /* the next iteration goes on as before */
}

struct totals {
    uint64_t schedules, offloads, prefetches, bytes_offloaded, bytes_prefetched, urgent,
        demand_offloads, moves_planned, clean_offloads, clean_queued, forgets, forgets_reading,
        released_queued, wait_write, crossed, crossed_modified, checkpoint_reads;
};

static void run_schedule(const struct spec *s,
                         const struct tio_trace *tr,
                         const struct tio_plan *plan,
                         struct tio_engine *e,
                         uint64_t budget,
                         void *stream,
                         uint64_t seed,
                         struct totals *tot) {
    struct tio_runtime_params rp = rt_params(tr, plan, e);
    rp.mem = TIO_MEM_DEVICE;
    rp.budget_bytes = budget;
    rp.stream = stream;
    rp.stream_ordered = 1;
    struct caller c = { .s = s, .stream = stream, .seed = seed, .engine = e };
    int rc = tio_runtime_new(&rp, &c.rt);
    if (rc < 0) {
        caller_error(&c, "tio_runtime_new", rc);
        return;
    }
    pool_reset();
    for (uint32_t g = 0; g < s->ng; g++) { /* nothing queued yet: the host may fill them */
        c.ptr[g] = pool_alloc(s->bytes[g]);
        uint64_t *w = shadow(c.ptr[g], s->bytes[g]), base = pat_base(g, 0);
        for (uint64_t i = 0; i < s->bytes[g] / 8; i++)
            w[i] = pat_word(base, i);
        if ((rc = tio_runtime_bind(c.rt, g, c.ptr[g])) < 0)
            caller_error(&c, "bind global", rc);
    }
    struct tio_runtime_action act[MAX_T];
    uint64_t sync0 = fc.thread_sync_calls();
    for (uint64_t it = 0; it < ITERS && !c.err; it++)
        iteration(&c, it, act, MAX_T);
    if (fc.thread_sync_calls() != sync0)
        record_failure("seed %llu: the training thread synchronized with the device %llu times",
                       (unsigned long long)seed,
                       (unsigned long long)(fc.thread_sync_calls() - sync0));
    if (!c.err) {
        int n = tio_runtime_restore_begin(c.rt, act, MAX_T);
        if (n < 0)
            caller_error(&c, "restore_begin", n);
        else
            apply(&c, act, n, 0);
        if (!c.err && (rc = tio_runtime_restore_finish(c.rt)) < 0)
            caller_error(&c, "restore_finish", rc);
        if (!c.err)
            check_globals(&c, ITERS, 1);
    }
    (void)fc.stream_synchronize(stream);
    struct tio_runtime_stats st;
    tio_runtime_get_stats(c.rt, &st);
    tio_runtime_free(c.rt);
    (void)fc.device_synchronize(); /* nothing of this schedule may run into the next one */
    tot->schedules++;
    tot->offloads += st.offloads;
    tot->prefetches += st.prefetches;
    tot->bytes_offloaded += st.bytes_offloaded;
    tot->bytes_prefetched += st.bytes_prefetched;
    tot->urgent += st.urgent_reads;
    tot->demand_offloads += st.demand_offloads;
    tot->clean_offloads += st.clean_offloads;
    tot->clean_queued += c.clean_queued;
    tot->released_queued += c.released_queued;
    tot->wait_write += st.wait_write_count;
    /* the waits by reason are parts of the stall totals */
    if (st.wait_read_s + st.wait_write_s + st.wait_end_s > st.stall_s + 1e-9 ||
        st.wait_budget_s > st.pressure_stall_s + st.demand_stall_s + 1e-9)
        record_failure("seed %llu: waits by reason (%g read, %g write, %g end, %g budget s) exceed "
                       "the stalls (%g, %g + %g s)",
                       (unsigned long long)seed, st.wait_read_s, st.wait_write_s, st.wait_end_s,
                       st.wait_budget_s, st.stall_s, st.pressure_stall_s, st.demand_stall_s);
    if (st.carried_offloads != c.crossed) /* the stat counts what the caller saw */
        record_failure("seed %llu: carried_offloads %llu, %llu offloads went on past "
                       "end_iteration",
                       (unsigned long long)seed, (unsigned long long)st.carried_offloads,
                       (unsigned long long)c.crossed);
    tot->forgets += c.forgets;
    tot->forgets_reading += c.forgets_reading;
    tot->crossed += c.crossed;
    tot->crossed_modified += c.crossed_modified;
    tot->checkpoint_reads += c.checkpoint_reads;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t env_u64(const char *name, uint64_t def) {
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : def;
}

TIO_TEST(stream_ordered_executor_under_lag) {
#ifdef TIO_SANITIZED
    uint64_t n_sched = env_u64("TIO_STREAM_SCHEDULES", 120);
#else
    uint64_t n_sched = env_u64("TIO_STREAM_SCHEDULES", 600);
#endif
    uint64_t seed0 = env_u64("TIO_STREAM_SEED", 1);
    g_verbose = (int)env_u64("TIO_STREAM_VERBOSE", 0);
    g_strict = (int)env_u64("TIO_STREAM_STRICT", 0);
    const char *tiers = getenv("TIO_STREAM_TIERS");
    g_only = !tiers || !*tiers || !strcmp(tiers, "both") ? 0
             : !strcmp(tiers, "ssd")                     ? TIO_TIER_SSD
                                                         : TIO_TIER_HOST;
    const char *lag_env = getenv("TIO_STREAM_LAG_US");
    long lag_us = lag_env && *lag_env ? strtol(lag_env, NULL, 10) : -1;
    uint64_t bad0 = fc.bad_accesses(), blocking0 = fc.blocking_copies();
    uint64_t pageable0 = fc.pageable_copies(), races0 = fc.copy_races();
    uint64_t streams0 = fc.live_streams();
    g_slab_bytes = 64 * 1024 * KiB;
    void *slab = NULL;
    CHECK_EQ_I(fc.malloc_device(&slab, g_slab_bytes), 0);
    REQUIRE(slab != NULL);
    g_slab = slab;
    void *streams[3] = { NULL, NULL, NULL }; /* legacy, a blocking and a non-blocking stream */
    CHECK_EQ_I(fc.stream_create(&streams[1], 0), 0);
    CHECK_EQ_I(fc.stream_create(&streams[2], 0x1), 0);
    struct totals tot = { 0 };
    double t0 = now_s();
    /* Schedule `seed` runs on the trace of seed 1 + (seed - 1) / SCHEDULES_PER_TRACE * SPT, so
     * TIO_STREAM_SEED=seed TIO_STREAM_SCHEDULES=1 replays it on the same trace and plan. */
    for (uint64_t seed = seed0; seed < seed0 + n_sched && atomic_load(&g_failures) == 0;) {
        uint64_t trace_seed = seed - (seed - 1) % SCHEDULES_PER_TRACE, x = trace_seed * 7919;
        struct spec s;
        make_spec(&s, trace_seed);
        struct tio_trace *tr = spec_trace(&s);
        uint64_t cap = 0;
        struct tio_plan *plans[2] = { tr ? planner_plan(tr, &s, &x, &cap) : NULL,
                                      tr ? random_plan(tr, &s, &x, g_only) : NULL };
        if (g_only)
            plans[0] = only_tier(plans[0], tr, s.nk, g_only);
        uint64_t host = g_only == TIO_TIER_SSD ? 0 : 1024 * KiB + rng_below(&x, 2) * 1024 * KiB;
        struct tio_engine *e = rt_engine(g_only == TIO_TIER_HOST ? NULL : g_dir,
                                         g_only ? "posix" : "cuda", NULL, host);
        CHECK(tr && plans[0] && plans[1] && e);
        if (!tr || !plans[0] || !plans[1] || !e) {
            tio_plan_free(plans[0]);
            rt_free_inputs(plans[1], e, tr);
            break;
        }
        size_t nm0 = 0, nm1 = 0;
        (void)tio_plan_moves(plans[0], &nm0);
        (void)tio_plan_moves(plans[1], &nm1);
        tot.moves_planned += nm0 + nm1;
        for (; seed < trace_seed + SCHEDULES_PER_TRACE && seed < seed0 + n_sched; seed++) {
            uint64_t y = seed * 104729;
            static const unsigned lags[] = { 0, 20, 100, 300 };
            fc.set_lag(lag_us >= 0 ? (unsigned)lag_us : lags[rng_below(&y, 4)], seed);
            /* the planner's capacity (demand offloads keep it), sometimes a tighter one */
            uint64_t budget = rng_below(&y, 3) == 0 ? cap * 3 / 4 : cap;
            run_schedule(&s, tr, plans[seed % 2], e, budget, streams[rng_below(&y, 3)], seed, &tot);
            if (atomic_load(&g_failures))
                break;
        }
        tio_plan_free(plans[0]);
        rt_free_inputs(plans[1], e, tr);
    }
    double dt = now_s() - t0;
    printf("  %llu schedules in %.1f s: %llu offloads (%llu demand), %llu prefetches (%llu "
           "urgent), %.1f MiB written, %.1f MiB read, %llu moves planned\n",
           (unsigned long long)tot.schedules, dt, (unsigned long long)tot.offloads,
           (unsigned long long)tot.demand_offloads, (unsigned long long)tot.prefetches,
           (unsigned long long)tot.urgent, (double)tot.bytes_offloaded / (1024.0 * 1024.0),
           (double)tot.bytes_prefetched / (1024.0 * 1024.0), (unsigned long long)tot.moves_planned);
    printf("  %llu clean offloads, %llu of them released while a kernel using the memory was "
           "still queued; %llu releases after a write likewise (all freed through the stream); "
           "%llu forgets, %llu with a read in flight; %llu waits for a write a kernel modifies\n",
           (unsigned long long)tot.clean_offloads, (unsigned long long)tot.clean_queued,
           (unsigned long long)tot.released_queued, (unsigned long long)tot.forgets,
           (unsigned long long)tot.forgets_reading, (unsigned long long)tot.wait_write);
    printf("  %llu offloads of globals went on past end_iteration, %llu of them into a kernel "
           "of the next iteration that modifies the global\n",
           (unsigned long long)tot.crossed, (unsigned long long)tot.crossed_modified);
    printf("  %llu stored copies read with the engine between iterations, after "
           "tio_runtime_drain\n",
           (unsigned long long)tot.checkpoint_reads);
    uint64_t failures = atomic_load(&g_failures);
    if (failures) {
        pthread_mutex_lock(&g_fail_mu);
        printf("  %llu failure(s); the first: %s\n", (unsigned long long)failures, g_first);
        pthread_mutex_unlock(&g_fail_mu);
    }
    CHECK_EQ_U(failures, 0);
    CHECK_EQ_U(tot.schedules, n_sched);
    CHECK(tot.moves_planned > 0);
    CHECK(tot.bytes_offloaded > 0);
    CHECK(tot.bytes_prefetched > 0);
    CHECK(tot.forgets_reading > 0);
    if (g_only != TIO_TIER_SSD) /* host-tier releases run ahead of the GPU (stream-ordered) */
        CHECK(tot.released_queued > 0);
    CHECK(tot.wait_write > 0); /* kernels that modify a tensor being offloaded wait (counted) */
    CHECK(tot.crossed_modified > 0); /* and so across the end of an iteration */
    CHECK(tot.checkpoint_reads > 0);
    CHECK_EQ_U(fc.bad_accesses(), bad0);
    CHECK_EQ_U(fc.blocking_copies(), blocking0); /* the engine copies on non-blocking streams */
    CHECK_EQ_U(fc.pageable_copies(), pageable0); /* from pinned memory: asynchronous */
    CHECK_EQ_U(fc.copy_races(), races0);         /* no two copies unordered on the same bytes */
    for (int i = 1; i < 3; i++)
        CHECK_EQ_I(fc.stream_destroy(streams[i]), 0);
    CHECK_EQ_U(fc.live_streams(), streams0); /* every engine joined its streams */
    CHECK_EQ_I(fc.free_device(slab), 0);
    fc.set_lag(0, 0);
}

int main(void) {
    if (fake_cuda_load(&fc) < 0)
        return 1;
    io_mkdtemp(g_dir, sizeof g_dir, "stream");
    RUN(stream_ordered_executor_under_lag);
    (void)rmdir(g_dir);
    return tio_test_done();
}
