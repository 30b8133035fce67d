/*
 * The fake CUDA runtime's machinery (fake_cudart.c has the API and the description): one worker
 * thread per stream, dependencies and vector clocks, events, the host's synchronisations, and
 * the fake_cuda_* test hooks.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_cudart_impl.h"

/* ---- state ------------------------------------------------------------------------------- */
pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

_Atomic(unsigned char *) dev_base;
unsigned char *shadow_base;
struct extent *allocs;
size_t n_allocs, cap_allocs;

_Atomic uint64_t memcpy_calls, blocking_copies, bad_accesses, cross_device_copies;
_Thread_local int cur_dev;
static _Atomic uint64_t sync_calls;
static _Thread_local uint64_t thread_sync_calls;
static uint64_t completions; /* operations completed (under mu) */
/* What the host has seen complete (cudaStreamSynchronize, cudaEventSynchronize or a query that
 * answered 0, cudaDeviceSynchronize, cudaMemcpy, cudaFree): observed_vc[i] operations of slot i,
 * as one clock for every host thread (under mu). */
static uint64_t observed_vc[MAX_VC];
static _Atomic unsigned lag_max_us;
static uint64_t lag_seed; /* under mu */
static int lag_env_read;  /* under mu */

/* Slot 0 is the legacy stream. */
struct slot *slots;
size_t n_slots, cap_slots;
struct event *events;
size_t n_events, cap_events;

/* ---- helpers ----------------------------------------------------------------------------- */
static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

int grow(void **arr, size_t *cap, size_t need, size_t elem) {
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

void *encode(uint32_t idx, uint32_t gen, unsigned tag) {
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

/* FAKE_CUDA_HOST_DEVICE=1: host memory outside the device region counts as device memory of
 * device 0 (read once). */
int host_as_device(void) {
    static _Atomic int on = -1;
    int v = atomic_load(&on);
    if (v < 0) {
        const char *e = getenv("FAKE_CUDA_HOST_DEVICE");
        v = e && *e == '1';
        atomic_store(&on, v);
    }
    return v;
}

/* Is p outside the region of cudaMalloc's allocations? */
static int outside_region(const unsigned char *p, size_t n) {
    const unsigned char *b = atomic_load(&dev_base);
    return !b || p + n <= b || p >= b + FAKE_DEV_BYTES;
}

/* Is [p, p+n) inside a live allocation? Under mu. */
int dev_live(const unsigned char *p, size_t n) {
    if (host_as_device() && outside_region(p, n))
        return 1;
    const unsigned char *b = atomic_load(&dev_base);
    uint64_t off = (uint64_t)(p - b);
    for (size_t i = 0; i < n_allocs; i++)
        if (off >= allocs[i].off && off + n <= allocs[i].off + allocs[i].len)
            return 1;
    return 0;
}

int dev_owner(const unsigned char *p) {
    if (host_as_device() && outside_region(p, 1))
        return 0;
    const unsigned char *b = atomic_load(&dev_base);
    uint64_t off = (uint64_t)(p - b);
    for (size_t i = 0; i < n_allocs; i++)
        if (off >= allocs[i].off && off < allocs[i].off + allocs[i].len)
            return allocs[i].dev;
    return -1;
}

int slot_dev(uint32_t slot) {
    return slot == 0 ? cur_dev : slots[slot].dev;
}

int device_count(void) {
    const char *n = getenv("FAKE_CUDA_DEVICES");
    int c = n && *n ? atoi(n) : 1;
    return c > 0 ? c : 1;
}

/* The copies' bytes move one copy at a time: two copies that race (unordered on the GPU, which
 * copy_races_of counts) must not also race as threads of this process, where ThreadSanitizer
 * would report the fake's own memmoves instead of the test's finding. */
static pthread_mutex_t copy_mu = PTHREAD_MUTEX_INITIALIZER;

static void run_op(struct op *o) {
    if (o->kind == OP_COPY) {
        pthread_mutex_lock(&mu);
        int ok = (!o->wdev || dev_live(o->wdev, o->n)) && (!o->rdev || dev_live(o->rdev, o->n));
        pthread_mutex_unlock(&mu);
        if (ok) {
            pthread_mutex_lock(&copy_mu);
            memmove(o->dst, o->src, o->n);
            pthread_mutex_unlock(&copy_mu);
        } else
            atomic_fetch_add(&bad_accesses, 1); /* freed under a queued copy */
    } else if (o->kind == OP_HOST) {
        o->fn(o->user);
    }
}

/* The last copies completed, for the race check (under mu). */
#define RING 1024
static struct done_copy {
    const unsigned char *wdev, *rdev, *whost, *rhost;
    size_t n;
    uint32_t slot;
    uint64_t pos;
    uint64_t vc[MAX_VC];
} ring[RING];
static uint64_t ring_n;

static _Atomic uint64_t copy_races;

/* Do copies a (n bytes) and b (m bytes) conflict: one writes what the other
 * writes or reads, in device or host memory? */
static int copies_conflict(const unsigned char *const a[4],
                           size_t n,
                           const unsigned char *const b[4],
                           size_t m) {
    for (int s = 0; s < 4; s += 2) { /* [0] written, [1] read: device, then host */
        const unsigned char *aw = a[s], *ar = a[s + 1], *bw = b[s], *br = b[s + 1];
        if ((aw && bw && aw < bw + m && bw < aw + n) || (aw && br && aw < br + m && br < aw + n) ||
            (ar && bw && ar < bw + m && bw < ar + n))
            return 1;
    }
    return 0;
}

/* Under mu, copy o about to run: the copies that conflict with it and are ordered neither before
 * nor after it (queued or running on another stream; among the last RING completed, neither
 * before it nor seen complete by the host before it was queued). */
static uint64_t copy_races_of(const struct op *o) {
    if (o->slot >= MAX_VC)
        return 0;
    const unsigned char *mine[4] = { o->wdev, o->rdev, o->whost, o->rhost };
    uint64_t hits = 0;
    for (size_t i = 0; i < n_slots; i++) {
        if (i == o->slot || i >= MAX_VC)
            continue;
        for (const struct op *q = slots[i].s ? slots[i].s->head : NULL; q; q = q->next) {
            const unsigned char *theirs[4] = { q->wdev, q->rdev, q->whost, q->rhost };
            if (q->kind == OP_COPY && copies_conflict(mine, o->n, theirs, q->n) &&
                q->vc[o->slot] < o->pos && o->vc[i] < q->pos)
                hits++;
        }
    }
    uint64_t first = ring_n > RING ? ring_n - RING : 0;
    for (uint64_t k = first; k < ring_n; k++) {
        const struct done_copy *d = &ring[k % RING];
        const unsigned char *theirs[4] = { d->wdev, d->rdev, d->whost, d->rhost };
        if (d->slot != o->slot && d->slot < MAX_VC && copies_conflict(mine, o->n, theirs, d->n) &&
            o->vc[d->slot] < d->pos && o->seen[d->slot] < d->pos)
            hits++;
    }
    return hits;
}

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
        if (o->kind == OP_COPY)
            atomic_fetch_add(&copy_races, copy_races_of(o));
        int timed = timing.on;
        uint64_t end = timed ? timed_end(o) : 0;
        uint64_t lag = timed ? 0 : (uint64_t)atomic_load(&lag_max_us) * st->lag_quarters / 4;
        uint64_t d = lag ? splitmix(&st->rng) % (lag + 1) : 0;
        pthread_mutex_unlock(&mu);
        if (timed)
            sleep_until_ns(end);
        else if (lag)
            sleep_us(d);
        run_op(o);
        pthread_mutex_lock(&mu);
        if (timed)
            timed_done(o, end);
        if (o->ev_idx >= 0 && (size_t)o->ev_idx < n_events) {
            struct event *ev = &events[o->ev_idx];
            if (ev->live && ev->gen == o->ev_gen && ev->slot == o->slot && ev->pos == o->pos)
                ev->t_done = (int64_t)(timed ? end : now_ns());
        }
        st->active = 0;
        completions++;
        if (o->kind == OP_COPY) {
            struct done_copy *d = &ring[ring_n++ % RING];
            d->wdev = o->wdev;
            d->rdev = o->rdev;
            d->whost = o->whost;
            d->rhost = o->rhost;
            d->n = o->n;
            d->slot = o->slot;
            d->pos = o->pos;
            memcpy(d->vc, o->vc, sizeof d->vc);
        }
        st->head = o->next;
        if (!st->head)
            st->tail = NULL;
        slots[st->slot].completed++;
        if (timed)
            timed_wake(st->slot);
        pthread_cond_broadcast(&cv);
        free(o);
    }
    pthread_mutex_unlock(&mu);
    return NULL;
}

struct stream *start_stream(uint32_t slot) {
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
int init_locked(void) {
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
int64_t stream_slot(void *h) {
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

struct event *event_of(void *h) {
    uint32_t idx, gen;
    if (decode(h, TAG_EVENT, &idx, &gen) < 0 || idx >= n_events || !events[idx].live ||
        events[idx].gen != gen)
        return NULL;
    return &events[idx];
}

/* Under mu: a new op for `slot` with room for the legacy-stream dependencies and `extra`. */
struct op *new_op(uint32_t slot, size_t extra) {
    struct op *o = calloc(1, sizeof *o + (n_slots + extra) * sizeof(struct dep));
    if (!o)
        return NULL;
    o->ev_idx = -1;
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
uint64_t enqueue(uint32_t slot, struct op *o) {
    struct stream *st = slots[slot].s;
    memcpy(o->vc, slots[slot].clock, sizeof o->vc);
    for (size_t i = 0; i < o->n_deps; i++)
        if (o->deps[i].slot < MAX_VC && !(o->wait_vc && i == o->n_deps - 1))
            vc_merge(o->vc, slots[o->deps[i].slot].clock);
    if (o->wait_vc)
        vc_merge(o->vc, o->wait_vc);
    o->wait_vc = NULL;
    o->slot = slot;
    o->t_enq = now_ns();
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
void observe(const uint64_t *vc) {
    vc_merge(observed_vc, vc);
}

/* Under mu: wait until slot completes position pos, whose clock was vc, and observe it. */
void wait_observe(uint32_t slot, uint64_t pos, const uint64_t *vc) {
    uint64_t copy[MAX_VC];
    memcpy(copy, vc, sizeof copy); /* vc may change while we wait */
    wait_pos(slot, pos);
    observe(copy);
}

void count_sync(void) {
    atomic_fetch_add(&sync_calls, 1);
    thread_sync_calls++;
    count_wait();
}

/* Under mu: wait for the work queued so far on every stream of device dev (-1: of every device;
 * the legacy stream counts for every device). */
void device_sync_locked(int dev) {
    size_t n = n_slots;
    uint64_t *pos = malloc((n ? n : 1) * sizeof *pos);
    if (!pos) { /* wait stream by stream instead */
        for (size_t i = 0; i < n_slots; i++)
            wait_pos((uint32_t)i, slots[i].enqueued);
        return;
    }
    uint64_t vc[MAX_VC] = { 0 };
    for (size_t i = 0; i < n; i++) {
        int mine = dev < 0 || i == 0 || slots[i].dev == dev;
        pos[i] = mine ? slots[i].enqueued : 0;
        if (mine)
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
    if (host_as_device() && outside_region(c, len))
        return (void *)(uintptr_t)c; /* device memory that is host memory: the same bytes */
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

/* Copies of device memory queued on a stream of another device than the memory's (legal with
 * unified addressing, but a peer copy at a fraction of the bandwidth: a stream bound to the wrong
 * device). */
uint64_t fake_cuda_cross_device_copies(void) {
    return atomic_load(&cross_device_copies);
}

/* Pairs of copies that raced (see copy_races_of), counted when the later one started. */
uint64_t fake_cuda_copy_races(void) {
    return atomic_load(&copy_races);
}

uint64_t fake_cuda_device_bytes_in_use(void) {
    pthread_mutex_lock(&mu);
    uint64_t n = 0;
    for (size_t i = 0; i < n_allocs; i++)
        n += allocs[i].len;
    pthread_mutex_unlock(&mu);
    return n;
}
