/*
 * A fake CUDA runtime for CI machines without a GPU: the cudart entry points the shim
 * resolves, over host memory, emulating a GPU that lags behind the host.
 *
 * Device memory. "Device" allocations come from a PROT_NONE region, so any access that does
 * not go through cudaMemcpy* (a pread straight into a device pointer, a plain memcpy) faults or
 * fails with EFAULT; the bytes live in a shadow mapping at the same offset
 * (fake_cuda_translate). cudaMalloc is first-fit over a free list; cudaFree synchronizes the
 * device (as the real one does), fills the freed bytes with FAKE_CUDA_POISON and makes them
 * reusable. A copy naming device bytes outside a live allocation fails with
 * cudaErrorInvalidValue and is counted (fake_cuda_bad_accesses).
 *
 * Streams. Every stream, the legacy default stream (NULL or cudaStreamLegacy) included, is a
 * worker thread running its queued operations in FIFO order, each after a random delay of 0..lag
 * microseconds (a seeded PRNG per stream; each stream scales lag by 1/4, 1 or 3, drawn from its
 * seed, so streams also run ahead of one another). Operations: cudaMemcpyAsync, cudaLaunchHostFunc,
 * cudaEventRecord (a marker: the event completes when the work queued before it has) and
 * cudaStreamWaitEvent (later work waits for the record current at call time). Legacy stream
 * rules: an operation queued on the legacy stream starts only after every operation queued
 * earlier on a blocking stream (flags 0) has completed, and an operation queued on a blocking
 * stream starts only after every operation queued earlier on the legacy stream; streams created
 * with cudaStreamNonBlocking are exempt. cudaMemcpy is a copy on the legacy stream that the
 * caller waits for. Bad stream or event handles give cudaErrorInvalidResourceHandle (400).
 *
 * Races: every operation carries a vector clock (what it comes after: its stream's order, the
 * legacy stream's rules, the events it waits for), and the host's synchronisations
 * (cudaStreamSynchronize, cudaEventSynchronize, a query answering 0, cudaDeviceSynchronize,
 * cudaMemcpy, cudaFree) are remembered. fake_cuda_racing_copies tells a host function running on
 * a stream (a test's kernel) how many copies touching its device bytes in a conflicting way are
 * ordered neither before it (nor seen complete by the host before it was queued) nor after it:
 * a missing event or wait shows up even when the timing happened to leave the bytes right.
 *
 * Environment: FAKE_CUDA_DEVICES=n (device count, default 1), FAKE_CUDA_ERROR=e
 * (cudaGetDeviceCount fails with e, e.g. 35), FAKE_CUDA_LAG_US=max (default 0: no delay),
 * FAKE_CUDA_SEED=s. Test hooks: fake_cuda_set_lag, the fake_cuda_* counters below.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define FAKE_DEV_BYTES   (UINT64_C(1) << 32) /* reserved, never touched unless used */
#define FAKE_CUDA_POISON 0xDB                /* freed device bytes */
#define MAX_VC           64 /* vector clocks (happens-before) cover the first MAX_VC stream slots */

enum {
    ERR_INVALID_VALUE = 1,
    ERR_MEMORY_ALLOCATION = 2,
    ERR_INVALID_RESOURCE_HANDLE = 400,
    ERR_NOT_READY = 600
};
enum { KIND_H2H = 0, KIND_H2D = 1, KIND_D2H = 2, KIND_D2D = 3, KIND_DEFAULT = 4 };
enum { OP_MARK, OP_COPY, OP_HOST };
enum { TAG_STREAM = 0x4, TAG_EVENT = 0x8 };
#define STREAM_NON_BLOCKING 0x1u
#define STREAM_LEGACY       ((void *)0x1)

/* ---- exported test hooks ------------------------------------------------------------------ */
void *fake_cuda_translate(const void *p, size_t len);
uint64_t fake_cuda_memcpy_calls(void);
void fake_cuda_set_lag(unsigned max_us, uint64_t seed);
uint64_t fake_cuda_sync_calls(void);
uint64_t fake_cuda_thread_sync_calls(void);
uint64_t fake_cuda_blocking_copies(void);
uint64_t fake_cuda_bad_accesses(void);
uint64_t fake_cuda_live_streams(void);
uint64_t fake_cuda_device_bytes_in_use(void);
uint64_t fake_cuda_racing_copies(const void *p, size_t n, int writes);

/* ---- state ------------------------------------------------------------------------------- */
/* One lock and one condition variable for everything: completions are broadcast. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

static _Atomic(unsigned char *) dev_base;
static unsigned char *shadow_base;
static uint64_t dev_top; /* bump pointer above every extent ever handed out */
struct extent {
    uint64_t off, len;
};
static struct extent *allocs, *holes; /* live allocations (unsorted), free holes (sorted) */
static size_t n_allocs, cap_allocs, n_holes, cap_holes;

static _Atomic uint64_t memcpy_calls, sync_calls, blocking_copies, bad_accesses, host_allocs;
static _Thread_local uint64_t thread_sync_calls;
static uint64_t completions; /* operations completed (under mu) */
/* What the host has seen complete (cudaStreamSynchronize, cudaEventSynchronize or a query that
 * answered 0, cudaDeviceSynchronize, cudaMemcpy, cudaFree): observed_vc[i] operations of slot i,
 * as one clock for every host thread (under mu). */
static uint64_t observed_vc[MAX_VC];
static _Atomic unsigned lag_max_us;
static uint64_t lag_seed; /* under mu */
static int lag_env_read;  /* under mu */

struct dep {
    uint32_t slot;
    uint64_t pos; /* done when slots[slot].completed >= pos */
};

struct op {
    struct op *next;
    int kind;
    uint32_t slot;
    uint64_t pos;            /* its position on its stream */
    uint64_t seen[MAX_VC];   /* observed_vc when it was queued */
    uint64_t vc[MAX_VC];     /* vc[i]: the operations of slot i it comes after */
    const uint64_t *wait_vc; /* cudaStreamWaitEvent: the record's clock, merged at enqueue */
    void *dst;
    const void *src;
    size_t n;
    const unsigned char *wdev; /* the device range a copy writes (NULL: host memory) */
    const unsigned char *rdev; /* the device range a copy reads (NULL: host memory) */
    void (*fn)(void *);
    void *user;
    size_t n_deps;
    struct dep deps[];
};

struct stream {
    pthread_t th;
    uint32_t slot;
    int stop;
    int active; /* the head's dependencies are met: it runs (after its delay) or is running */
    uint64_t rng;
    unsigned lag_quarters; /* this stream's maximum delay: lag_max_us * lag_quarters / 4 */
    struct op *head, *tail;
};

/* Slot 0 is the legacy stream. Counters survive the stream (dependencies name slots) and keep
 * counting when a slot is reused, so a satisfied dependency stays satisfied. */
struct slot {
    struct stream *s; /* NULL: free */
    int dying;        /* being destroyed: handle invalid, slot not reusable yet */
    uint32_t gen;
    unsigned flags;
    uint64_t enqueued, completed;
    uint64_t clock[MAX_VC]; /* the vector clock of its last queued operation */
};
static struct slot *slots;
static size_t n_slots, cap_slots;

struct event {
    int live;
    uint32_t gen;
    int recorded;
    uint32_t slot;
    uint64_t pos;
    uint64_t vc[MAX_VC]; /* the record's vector clock */
};
static struct event *events;
static size_t n_events, cap_events;

/* ---- helpers ----------------------------------------------------------------------------- */
static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static int grow(void **arr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : 16;
    while (nc < need)
        nc *= 2;
    void *p = realloc(*arr, nc * elem);
    if (!p)
        return -1;
    memset((char *)p + *cap * elem, 0, (nc - *cap) * elem);
    *arr = p;
    *cap = nc;
    return 0;
}

static void *encode(uint32_t idx, uint32_t gen, unsigned tag) {
    return (void *)(uintptr_t)(((uint64_t)gen << 32) | ((uint64_t)idx << 4) | tag);
}

static int decode(const void *h, unsigned tag, uint32_t *idx, uint32_t *gen) {
    uint64_t v = (uint64_t)(uintptr_t)h;
    if ((v & 0xF) != tag)
        return -1;
    *idx = (uint32_t)((v & 0xFFFFFFFFu) >> 4);
    *gen = (uint32_t)(v >> 32);
    return 0;
}

/* Each stream lags by its own scale of the maximum (a quarter, once or three times, drawn from
 * its seed), so that one stream runs well ahead of another in some schedules. */
static void seed_stream(struct stream *st, uint32_t gen) {
    static const unsigned quarters[] = { 1, 4, 4, 12 };
    st->rng = lag_seed ^ ((uint64_t)st->slot << 40) ^ ((uint64_t)gen << 20);
    st->lag_quarters = quarters[splitmix(&st->rng) % 4];
}

static void read_env_locked(void) {
    if (lag_env_read)
        return;
    lag_env_read = 1;
    const char *l = getenv("FAKE_CUDA_LAG_US");
    const char *s = getenv("FAKE_CUDA_SEED");
    if (l)
        atomic_store(&lag_max_us, (unsigned)strtoul(l, NULL, 10));
    if (s)
        lag_seed = strtoull(s, NULL, 10);
}

static void sleep_us(uint64_t us) {
    if (us == 0) {
        sched_yield();
        return;
    }
    struct timespec ts = { (time_t)(us / 1000000), (long)(us % 1000000) * 1000 };
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static int deps_done(const struct op *o) {
    for (size_t i = 0; i < o->n_deps; i++)
        if (slots[o->deps[i].slot].completed < o->deps[i].pos)
            return 0;
    return 1;
}

/* Is [p, p+n) inside a live allocation? Under mu. */
static int dev_live(const unsigned char *p, size_t n) {
    const unsigned char *b = atomic_load(&dev_base);
    uint64_t off = (uint64_t)(p - b);
    for (size_t i = 0; i < n_allocs; i++)
        if (off >= allocs[i].off && off + n <= allocs[i].off + allocs[i].len)
            return 1;
    return 0;
}

static void run_op(struct op *o) {
    if (o->kind == OP_COPY) {
        pthread_mutex_lock(&mu);
        int ok = (!o->wdev || dev_live(o->wdev, o->n)) && (!o->rdev || dev_live(o->rdev, o->n));
        pthread_mutex_unlock(&mu);
        if (ok)
            memmove(o->dst, o->src, o->n);
        else
            atomic_fetch_add(&bad_accesses, 1); /* freed under a queued copy */
    } else if (o->kind == OP_HOST) {
        o->fn(o->user);
    }
}

/* The last copies completed, for the race check (under mu). */
#define RING 1024
static struct done_copy {
    const unsigned char *wdev, *rdev;
    size_t n;
    uint32_t slot;
    uint64_t pos;
    uint64_t vc[MAX_VC];
} ring[RING];
static uint64_t ring_n;

static void *worker(void *arg) {
    struct stream *st = arg;
    pthread_mutex_lock(&mu);
    for (;;) {
        while (!st->head && !st->stop)
            pthread_cond_wait(&cv, &mu);
        if (!st->head)
            break;
        struct op *o = st->head;
        while (!deps_done(o))
            pthread_cond_wait(&cv, &mu);
        st->active = 1;
        uint64_t lag = (uint64_t)atomic_load(&lag_max_us) * st->lag_quarters / 4;
        uint64_t d = lag ? splitmix(&st->rng) % (lag + 1) : 0;
        pthread_mutex_unlock(&mu);
        if (lag)
            sleep_us(d);
        run_op(o);
        pthread_mutex_lock(&mu);
        st->active = 0;
        completions++;
        if (o->kind == OP_COPY && (o->wdev || o->rdev)) {
            struct done_copy *d = &ring[ring_n++ % RING];
            d->wdev = o->wdev;
            d->rdev = o->rdev;
            d->n = o->n;
            d->slot = o->slot;
            d->pos = o->pos;
            memcpy(d->vc, o->vc, sizeof d->vc);
        }
        st->head = o->next;
        if (!st->head)
            st->tail = NULL;
        slots[st->slot].completed++;
        pthread_cond_broadcast(&cv);
        free(o);
    }
    pthread_mutex_unlock(&mu);
    return NULL;
}

static struct stream *start_stream(uint32_t slot) {
    struct stream *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->slot = slot;
    seed_stream(st, slots[slot].gen);
    if (pthread_create(&st->th, NULL, worker, st) != 0) {
        free(st);
        return NULL;
    }
    return st;
}

/* Under mu: make sure the legacy stream exists. */
static int init_locked(void) {
    read_env_locked();
    if (n_slots == 0) {
        if (grow((void **)&slots, &cap_slots, 1, sizeof *slots) < 0)
            return -1;
        n_slots = 1;
    }
    if (!slots[0].s) {
        slots[0].s = start_stream(0);
        if (!slots[0].s)
            return -1;
    }
    return 0;
}

/* Under mu: the slot of a stream handle, or -1. */
static int64_t stream_slot(void *h) {
    if (init_locked() < 0)
        return -1;
    if (h == NULL || h == STREAM_LEGACY)
        return 0;
    uint32_t idx, gen;
    if (decode(h, TAG_STREAM, &idx, &gen) < 0 || idx == 0 || idx >= n_slots || !slots[idx].s ||
        slots[idx].dying || slots[idx].gen != gen)
        return -1;
    return idx;
}

static struct event *event_of(void *h) {
    uint32_t idx, gen;
    if (decode(h, TAG_EVENT, &idx, &gen) < 0 || idx >= n_events || !events[idx].live ||
        events[idx].gen != gen)
        return NULL;
    return &events[idx];
}

/* Under mu: a new op for `slot` with room for the legacy-stream dependencies and `extra`. */
static struct op *new_op(uint32_t slot, size_t extra) {
    struct op *o = calloc(1, sizeof *o + (n_slots + extra) * sizeof(struct dep));
    if (!o)
        return NULL;
    if (slot == 0) {
        for (uint32_t i = 1; i < n_slots; i++)
            if ((slots[i].s || slots[i].dying) && !(slots[i].flags & STREAM_NON_BLOCKING) &&
                slots[i].enqueued > slots[i].completed)
                o->deps[o->n_deps++] = (struct dep){ i, slots[i].enqueued };
    } else if (!(slots[slot].flags & STREAM_NON_BLOCKING) &&
               slots[0].enqueued > slots[0].completed) {
        o->deps[o->n_deps++] = (struct dep){ 0, slots[0].enqueued };
    }
    return o;
}

static void vc_merge(uint64_t *into, const uint64_t *from) {
    for (size_t i = 0; i < MAX_VC; i++)
        into[i] = from[i] > into[i] ? from[i] : into[i];
}

/* Under mu: queue o on slot; returns its position (completed >= position: done). Its vector
 * clock: the stream's, its legacy-stream dependencies' (each the other stream's last operation)
 * and the awaited record's. */
static uint64_t enqueue(uint32_t slot, struct op *o) {
    struct stream *st = slots[slot].s;
    memcpy(o->vc, slots[slot].clock, sizeof o->vc);
    for (size_t i = 0; i < o->n_deps; i++)
        if (o->deps[i].slot < MAX_VC && !(o->wait_vc && i == o->n_deps - 1))
            vc_merge(o->vc, slots[o->deps[i].slot].clock);
    if (o->wait_vc)
        vc_merge(o->vc, o->wait_vc);
    o->wait_vc = NULL;
    o->slot = slot;
    o->pos = slots[slot].enqueued + 1;
    memcpy(o->seen, observed_vc, sizeof o->seen);
    if (slot < MAX_VC) {
        o->vc[slot] = o->pos;
        memcpy(slots[slot].clock, o->vc, sizeof o->vc);
    }
    if (st->tail)
        st->tail->next = o;
    else
        st->head = o;
    st->tail = o;
    pthread_cond_broadcast(&cv);
    return ++slots[slot].enqueued;
}

/* Under mu: wait until slot has completed position pos. */
static void wait_pos(uint32_t slot, uint64_t pos) {
    while (slots[slot].completed < pos)
        pthread_cond_wait(&cv, &mu);
}

/* Under mu: the host saw the operations of clock vc complete. */
static void observe(const uint64_t *vc) {
    vc_merge(observed_vc, vc);
}

/* Under mu: wait until slot completes position pos, whose clock was vc, and observe it. */
static void wait_observe(uint32_t slot, uint64_t pos, const uint64_t *vc) {
    uint64_t copy[MAX_VC];
    memcpy(copy, vc, sizeof copy); /* vc may change while we wait */
    wait_pos(slot, pos);
    observe(copy);
}

static void count_sync(void) {
    atomic_fetch_add(&sync_calls, 1);
    thread_sync_calls++;
}

/* Under mu: wait for the work queued on every stream so far. */
static void device_sync_locked(void) {
    size_t n = n_slots;
    uint64_t *pos = malloc((n ? n : 1) * sizeof *pos);
    if (!pos) { /* wait stream by stream instead */
        for (size_t i = 0; i < n_slots; i++)
            wait_pos((uint32_t)i, slots[i].enqueued);
        return;
    }
    uint64_t vc[MAX_VC] = { 0 };
    for (size_t i = 0; i < n; i++) {
        pos[i] = slots[i].enqueued;
        vc_merge(vc, slots[i].clock);
    }
    for (size_t i = 0; i < n; i++)
        wait_pos((uint32_t)i, pos[i]);
    observe(vc);
    free(pos);
}

/* ---- exported hooks ---------------------------------------------------------------------- */
void *fake_cuda_translate(const void *p, size_t len) {
    const unsigned char *c = p, *b = atomic_load(&dev_base);
    if (!b || c < b || c + len > b + FAKE_DEV_BYTES)
        return NULL;
    return shadow_base + (c - b);
}

uint64_t fake_cuda_memcpy_calls(void) {
    return atomic_load(&memcpy_calls);
}

/* Every stream waits 0..max_us before each operation, drawn from a PRNG seeded by seed and
 * the stream; existing streams are reseeded. */
void fake_cuda_set_lag(unsigned max_us, uint64_t seed) {
    pthread_mutex_lock(&mu);
    read_env_locked();
    lag_seed = seed;
    atomic_store(&lag_max_us, max_us);
    for (size_t i = 0; i < n_slots; i++)
        if (slots[i].s)
            seed_stream(slots[i].s, slots[i].gen);
    pthread_mutex_unlock(&mu);
}

/* Calls that block the host on device work: cudaDeviceSynchronize, cudaStreamSynchronize of
 * the legacy stream, cudaEventSynchronize, cudaMemcpy, cudaFree, cudaFreeHost. */
uint64_t fake_cuda_sync_calls(void) {
    return atomic_load(&sync_calls);
}

/* The same, made by the calling thread. */
uint64_t fake_cuda_thread_sync_calls(void) {
    return thread_sync_calls;
}

/* Copies (cudaMemcpy, cudaMemcpyAsync) queued on the legacy stream or a blocking stream. */
uint64_t fake_cuda_blocking_copies(void) {
    return atomic_load(&blocking_copies);
}

/* Copies naming device bytes that are not (or no longer) allocated. */
uint64_t fake_cuda_bad_accesses(void) {
    return atomic_load(&bad_accesses);
}

/* Streams created and not destroyed (the legacy stream not counted). */
uint64_t fake_cuda_live_streams(void) {
    pthread_mutex_lock(&mu);
    uint64_t n = 0;
    for (size_t i = 1; i < n_slots; i++)
        n += slots[i].s != NULL;
    pthread_mutex_unlock(&mu);
    return n;
}

static int overlaps(const unsigned char *a, size_t an, const unsigned char *b, size_t bn) {
    return a && b && a < b + bn && b < a + an;
}

static int conflicts(const unsigned char *wdev,
                     const unsigned char *rdev,
                     size_t cn,
                     const void *p,
                     size_t n,
                     int writes) {
    return overlaps(wdev, cn, p, n) || (writes && overlaps(rdev, cn, p, n));
}

/* For a host function running on a stream (a test's kernel): how many copies touch device bytes
 * [p, p+n) in a conflicting way (writing them; or reading them too, writes != 0: the caller
 * writes them) without being ordered with the host function: neither before it (through the
 * streams' order, events, the legacy stream's rules, or by completing before it was queued)
 * nor after it. Such a copy is a race whether or not its timing happened to corrupt the bytes:
 * queued or running copies and the last RING completed ones are checked. 0 outside a host
 * function. */
uint64_t fake_cuda_racing_copies(const void *p, size_t n, int writes) {
    uint64_t hits = 0;
    pthread_mutex_lock(&mu);
    const struct op *h = NULL; /* the operation this stream thread runs: its stream's head */
    for (size_t i = 0; i < n_slots && !h; i++)
        if (slots[i].s && pthread_equal(slots[i].s->th, pthread_self()))
            h = slots[i].s->head;
    if (!h || h->slot >= MAX_VC) {
        pthread_mutex_unlock(&mu);
        return 0;
    }
    for (size_t i = 0; i < n_slots; i++) { /* not completed: is it queued after h? */
        for (const struct op *o = slots[i].s ? slots[i].s->head : NULL; o; o = o->next)
            if (o->kind == OP_COPY && conflicts(o->wdev, o->rdev, o->n, p, n, writes) &&
                o->vc[h->slot] < h->pos)
                hits++;
    }
    uint64_t first = ring_n > RING ? ring_n - RING : 0;
    for (uint64_t k = first; k < ring_n; k++) { /* completed: before h, or seen by the host? */
        const struct done_copy *d = &ring[k % RING];
        if (conflicts(d->wdev, d->rdev, d->n, p, n, writes) && d->slot < MAX_VC &&
            h->vc[d->slot] < d->pos && h->seen[d->slot] < d->pos)
            hits++;
    }
    pthread_mutex_unlock(&mu);
    return hits;
}

uint64_t fake_cuda_device_bytes_in_use(void) {
    pthread_mutex_lock(&mu);
    uint64_t n = 0;
    for (size_t i = 0; i < n_allocs; i++)
        n += allocs[i].len;
    pthread_mutex_unlock(&mu);
    return n;
}

/* ---- the CUDA runtime API ---------------------------------------------------------------- */
int cudaGetDeviceCount(int *count);
int cudaMalloc(void **p, size_t n);
int cudaFree(void *p);
int cudaHostAlloc(void **p, size_t n, unsigned flags);
int cudaFreeHost(void *p);
int cudaMemcpy(void *dst, const void *src, size_t n, int kind);
int cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *stream);
const char *cudaGetErrorString(int err);
int cudaStreamCreateWithFlags(void **s, unsigned flags);
int cudaStreamCreate(void **s);
int cudaStreamDestroy(void *s);
int cudaStreamSynchronize(void *s);
int cudaStreamQuery(void *s);
int cudaStreamWaitEvent(void *s, void *e, unsigned flags);
int cudaEventCreateWithFlags(void **e, unsigned flags);
int cudaEventCreate(void **e);
int cudaEventDestroy(void *e);
int cudaEventRecord(void *e, void *s);
int cudaEventQuery(void *e);
int cudaEventSynchronize(void *e);
int cudaDeviceSynchronize(void);
int cudaLaunchHostFunc(void *s, void (*fn)(void *), void *user);

int cudaGetDeviceCount(int *count) {
    const char *err = getenv("FAKE_CUDA_ERROR");
    if (err && atoi(err))
        return atoi(err);
    const char *n = getenv("FAKE_CUDA_DEVICES");
    *count = n ? atoi(n) : 1;
    return 0;
}

static int take_hole(uint64_t len, uint64_t *off) {
    for (size_t i = 0; i < n_holes; i++) {
        if (holes[i].len < len)
            continue;
        *off = holes[i].off;
        holes[i].off += len;
        holes[i].len -= len;
        if (holes[i].len == 0) {
            memmove(&holes[i], &holes[i + 1], (n_holes - i - 1) * sizeof *holes);
            n_holes--;
        }
        return 0;
    }
    return -1;
}

static int add_hole(uint64_t off, uint64_t len) {
    size_t i = 0;
    while (i < n_holes && holes[i].off < off)
        i++;
    int left = i > 0 && holes[i - 1].off + holes[i - 1].len == off;
    int right = i < n_holes && off + len == holes[i].off;
    if (left && right) {
        holes[i - 1].len += len + holes[i].len;
        memmove(&holes[i], &holes[i + 1], (n_holes - i - 1) * sizeof *holes);
        n_holes--;
    } else if (left) {
        holes[i - 1].len += len;
    } else if (right) {
        holes[i].off = off;
        holes[i].len += len;
    } else {
        if (grow((void **)&holes, &cap_holes, n_holes + 1, sizeof *holes) < 0)
            return -1;
        memmove(&holes[i + 1], &holes[i], (n_holes - i) * sizeof *holes);
        holes[i] = (struct extent){ off, len };
        n_holes++;
    }
    return 0;
}

int cudaMalloc(void **p, size_t n) {
    pthread_mutex_lock(&mu);
    if (!atomic_load(&dev_base)) {
        void *d = mmap(NULL, FAKE_DEV_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
        void *s = mmap(NULL, FAKE_DEV_BYTES, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (d == MAP_FAILED || s == MAP_FAILED) {
            pthread_mutex_unlock(&mu);
            return ERR_MEMORY_ALLOCATION;
        }
        shadow_base = s;
        atomic_store(&dev_base, (unsigned char *)d);
    }
    uint64_t len = ((n ? n : 1) + 4095) & ~(uint64_t)4095, off = 0;
    int fits = grow((void **)&allocs, &cap_allocs, n_allocs + 1, sizeof *allocs) == 0;
    if (fits && take_hole(len, &off) < 0) { /* no hole: above everything handed out */
        fits = dev_top + len <= FAKE_DEV_BYTES;
        off = dev_top;
        if (fits)
            dev_top += len;
    }
    if (!fits) {
        pthread_mutex_unlock(&mu);
        return ERR_MEMORY_ALLOCATION;
    }
    allocs[n_allocs++] = (struct extent){ off, len };
    *p = atomic_load(&dev_base) + off;
    pthread_mutex_unlock(&mu);
    return 0;
}

int cudaFree(void *p) {
    if (!p)
        return 0;
    pthread_mutex_lock(&mu);
    unsigned char *b = atomic_load(&dev_base);
    size_t i = 0;
    uint64_t off = b ? (uint64_t)((unsigned char *)p - b) : 0;
    while (i < n_allocs && !(b && allocs[i].off == off))
        i++;
    if (i == n_allocs) {
        pthread_mutex_unlock(&mu);
        return ERR_INVALID_VALUE;
    }
    if (init_locked() == 0)
        device_sync_locked(); /* cudaFree synchronizes the device */
    count_sync();
    struct extent x = allocs[i];
    allocs[i] = allocs[--n_allocs];
    memset(shadow_base + x.off, FAKE_CUDA_POISON, x.len);
    if (add_hole(x.off, x.len) < 0) { /* keep it allocated rather than lose track */
        allocs[n_allocs++] = x;
        pthread_mutex_unlock(&mu);
        return ERR_MEMORY_ALLOCATION;
    }
    pthread_mutex_unlock(&mu);
    return 0;
}

int cudaHostAlloc(void **p, size_t n, unsigned flags) {
    (void)flags;
    void *m = NULL;
    if (posix_memalign(&m, 4096, n ? n : 1) != 0)
        return ERR_MEMORY_ALLOCATION;
    atomic_fetch_add(&host_allocs, 1);
    *p = m;
    return 0;
}

int cudaFreeHost(void *p) {
    if (!p)
        return 0;
    pthread_mutex_lock(&mu);
    if (init_locked() == 0)
        device_sync_locked();
    count_sync();
    pthread_mutex_unlock(&mu);
    free(p);
    return 0;
}

/* Under mu: a copy op with translated pointers, or NULL with *err set. */
static struct op *copy_op(uint32_t slot, void *dst, const void *src, size_t n, int kind, int *err) {
    void *td = fake_cuda_translate(dst, n);
    const void *ts = fake_cuda_translate(src, n);
    int to_dev = kind == KIND_H2D || kind == KIND_D2D || (kind == KIND_DEFAULT && td);
    int from_dev = kind == KIND_D2H || kind == KIND_D2D || (kind == KIND_DEFAULT && ts);
    if (kind < KIND_H2H || kind > KIND_DEFAULT || (to_dev && !td) || (from_dev && !ts)) {
        *err = ERR_INVALID_VALUE;
        return NULL;
    }
    if ((to_dev && !dev_live(dst, n)) || (from_dev && !dev_live(src, n))) {
        atomic_fetch_add(&bad_accesses, 1);
        *err = ERR_INVALID_VALUE;
        return NULL;
    }
    struct op *o = new_op(slot, 0);
    if (!o) {
        *err = ERR_MEMORY_ALLOCATION;
        return NULL;
    }
    o->kind = OP_COPY;
    o->dst = to_dev ? td : dst;
    o->src = from_dev ? ts : src;
    o->n = n;
    o->wdev = to_dev ? dst : NULL;
    o->rdev = from_dev ? src : NULL;
    atomic_fetch_add(&memcpy_calls, 1);
    if (slot == 0 || !(slots[slot].flags & STREAM_NON_BLOCKING))
        atomic_fetch_add(&blocking_copies, 1);
    return o;
}

int cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *stream) {
    pthread_mutex_lock(&mu);
    int64_t slot = stream_slot(stream);
    int err = ERR_INVALID_RESOURCE_HANDLE;
    struct op *o = slot < 0 ? NULL : copy_op((uint32_t)slot, dst, src, n, kind, &err);
    if (o)
        (void)enqueue((uint32_t)slot, o);
    pthread_mutex_unlock(&mu);
    return o ? 0 : err;
}

/* Synchronous: a copy on the legacy stream (so it waits for the blocking streams' earlier work
 * and they wait for it), waited for. */
int cudaMemcpy(void *dst, const void *src, size_t n, int kind) {
    pthread_mutex_lock(&mu);
    int err = ERR_MEMORY_ALLOCATION;
    struct op *o = init_locked() < 0 ? NULL : copy_op(0, dst, src, n, kind, &err);
    if (o) {
        count_sync();
        uint64_t pos = enqueue(0, o);
        wait_observe(0, pos, slots[0].clock);
    }
    pthread_mutex_unlock(&mu);
    return o ? 0 : err;
}

const char *cudaGetErrorString(int err) {
    switch (err) {
    case 0:
        return "no error";
    case ERR_INVALID_VALUE:
        return "invalid argument";
    case ERR_MEMORY_ALLOCATION:
        return "out of memory";
    case 35:
        return "CUDA driver version is insufficient for CUDA runtime version";
    case ERR_INVALID_RESOURCE_HANDLE:
        return "invalid resource handle";
    case ERR_NOT_READY:
        return "device not ready";
    default:
        return "unknown error";
    }
}

int cudaStreamCreateWithFlags(void **s, unsigned flags) {
    if (!s || (flags & ~STREAM_NON_BLOCKING))
        return ERR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    if (init_locked() < 0) {
        pthread_mutex_unlock(&mu);
        return ERR_MEMORY_ALLOCATION;
    }
    uint32_t idx = 1;
    while (idx < n_slots && (slots[idx].s || slots[idx].dying))
        idx++;
    if (idx == n_slots) {
        if (idx >= (1u << 27) ||
            grow((void **)&slots, &cap_slots, n_slots + 1, sizeof *slots) < 0) {
            pthread_mutex_unlock(&mu);
            return ERR_MEMORY_ALLOCATION;
        }
        n_slots++;
    }
    slots[idx].gen++;
    slots[idx].flags = flags;
    slots[idx].s = start_stream(idx);
    if (!slots[idx].s) {
        pthread_mutex_unlock(&mu);
        return ERR_MEMORY_ALLOCATION;
    }
    *s = encode(idx, slots[idx].gen, TAG_STREAM);
    pthread_mutex_unlock(&mu);
    return 0;
}

int cudaStreamCreate(void **s) {
    return cudaStreamCreateWithFlags(s, 0);
}

/* The queued work completes first; then the worker is joined. */
int cudaStreamDestroy(void *s) {
    pthread_mutex_lock(&mu);
    int64_t slot = stream_slot(s);
    if (slot <= 0) {
        pthread_mutex_unlock(&mu);
        return ERR_INVALID_RESOURCE_HANDLE;
    }
    struct stream *st = slots[slot].s;
    slots[slot].dying = 1;
    st->stop = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    pthread_join(st->th, NULL);
    pthread_mutex_lock(&mu);
    slots[slot].s = NULL;
    slots[slot].dying = 0;
    pthread_mutex_unlock(&mu);
    free(st);
    return 0;
}

int cudaStreamSynchronize(void *s) {
    pthread_mutex_lock(&mu);
    int64_t slot = stream_slot(s);
    if (slot < 0) {
        pthread_mutex_unlock(&mu);
        return ERR_INVALID_RESOURCE_HANDLE;
    }
    if (slot == 0) { /* a marker on the legacy stream: the blocking streams' work too */
        struct op *o = new_op(0, 0);
        if (!o) {
            pthread_mutex_unlock(&mu);
            return ERR_MEMORY_ALLOCATION;
        }
        count_sync();
        uint64_t pos = enqueue(0, o);
        wait_observe(0, pos, slots[0].clock);
    } else {
        wait_observe((uint32_t)slot, slots[slot].enqueued, slots[slot].clock);
    }
    pthread_mutex_unlock(&mu);
    return 0;
}

int cudaStreamQuery(void *s) {
    pthread_mutex_lock(&mu);
    int64_t slot = stream_slot(s);
    int rc = slot < 0 ? ERR_INVALID_RESOURCE_HANDLE
                      : (slots[slot].completed >= slots[slot].enqueued ? 0 : ERR_NOT_READY);
    if (rc == 0)
        observe(slots[slot].clock);
    pthread_mutex_unlock(&mu);
    return rc;
}

int cudaStreamWaitEvent(void *s, void *e, unsigned flags) {
    pthread_mutex_lock(&mu);
    int64_t slot = stream_slot(s);
    struct event *ev = event_of(e);
    int rc = 0;
    if (slot < 0 || !ev) {
        rc = ERR_INVALID_RESOURCE_HANDLE;
    } else if (flags != 0) {
        rc = ERR_INVALID_VALUE;
    } else if (ev->recorded) {
        struct op *o = new_op((uint32_t)slot, 1);
        if (!o) {
            rc = ERR_MEMORY_ALLOCATION;
        } else {
            o->deps[o->n_deps++] = (struct dep){ ev->slot, ev->pos };
            o->wait_vc = ev->vc;
            (void)enqueue((uint32_t)slot, o);
        }
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

int cudaEventCreateWithFlags(void **e, unsigned flags) {
    if (!e || (flags & ~0xFu))
        return ERR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    size_t idx = 0;
    while (idx < n_events && events[idx].live)
        idx++;
    if (idx == n_events) {
        if (idx >= (1u << 27) ||
            grow((void **)&events, &cap_events, n_events + 1, sizeof *events) < 0) {
            pthread_mutex_unlock(&mu);
            return ERR_MEMORY_ALLOCATION;
        }
        n_events++;
    }
    struct event *ev = &events[idx];
    ev->live = 1;
    ev->gen++;
    ev->recorded = 0;
    *e = encode((uint32_t)idx, ev->gen, TAG_EVENT);
    pthread_mutex_unlock(&mu);
    return 0;
}

int cudaEventCreate(void **e) {
    return cudaEventCreateWithFlags(e, 0);
}

int cudaEventDestroy(void *e) {
    pthread_mutex_lock(&mu);
    struct event *ev = event_of(e);
    if (ev)
        ev->live = 0;
    pthread_mutex_unlock(&mu);
    return ev ? 0 : ERR_INVALID_RESOURCE_HANDLE;
}

int cudaEventRecord(void *e, void *s) {
    pthread_mutex_lock(&mu);
    int64_t slot = stream_slot(s);
    struct event *ev = event_of(e);
    int rc = 0;
    if (slot < 0 || !ev) {
        rc = ERR_INVALID_RESOURCE_HANDLE;
    } else {
        struct op *o = new_op((uint32_t)slot, 0);
        if (!o) {
            rc = ERR_MEMORY_ALLOCATION;
        } else {
            ev->recorded = 1;
            ev->slot = (uint32_t)slot;
            ev->pos = enqueue((uint32_t)slot, o);
            memcpy(ev->vc, o->vc, sizeof ev->vc);
        }
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

int cudaEventQuery(void *e) {
    pthread_mutex_lock(&mu);
    struct event *ev = event_of(e);
    int rc = !ev ? ERR_INVALID_RESOURCE_HANDLE
                 : (!ev->recorded || slots[ev->slot].completed >= ev->pos ? 0 : ERR_NOT_READY);
    if (rc == 0 && ev->recorded)
        observe(ev->vc);
    pthread_mutex_unlock(&mu);
    return rc;
}

int cudaEventSynchronize(void *e) {
    pthread_mutex_lock(&mu);
    struct event *ev = event_of(e);
    if (!ev) {
        pthread_mutex_unlock(&mu);
        return ERR_INVALID_RESOURCE_HANDLE;
    }
    count_sync();
    if (ev->recorded)
        wait_observe(ev->slot, ev->pos, ev->vc);
    pthread_mutex_unlock(&mu);
    return 0;
}

int cudaDeviceSynchronize(void) {
    pthread_mutex_lock(&mu);
    int rc = init_locked() < 0 ? ERR_MEMORY_ALLOCATION : 0;
    if (rc == 0) {
        count_sync();
        device_sync_locked();
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

int cudaLaunchHostFunc(void *s, void (*fn)(void *), void *user) {
    if (!fn)
        return ERR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    int64_t slot = stream_slot(s);
    struct op *o = slot < 0 ? NULL : new_op((uint32_t)slot, 0);
    if (o) {
        o->kind = OP_HOST;
        o->fn = fn;
        o->user = user;
        (void)enqueue((uint32_t)slot, o);
    }
    pthread_mutex_unlock(&mu);
    return o ? 0 : slot < 0 ? ERR_INVALID_RESOURCE_HANDLE : ERR_MEMORY_ALLOCATION;
}
