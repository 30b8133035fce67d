/*
 * The fake CUDA runtime's timed mode (the GPU twin), pinned-memory tracking and the watched
 * thread's waits (fake_cudart.c has the description of the whole fake).
 *
 * Timed mode (fake_cuda_set_timing). Time is CLOCK_MONOTONIC. Every operation gets an end time
 * computed from the times, not from when a worker thread happened to wake up: it starts at the
 * latest of when it was queued, when its stream's previous operation ended and when the
 * operations it waits for (events, the legacy stream's rules) ended; a copy also waits for its
 * copy engine (one per device and PCIe direction, taking copies in the order streams reach
 * them); it lasts its duration (a kernel, fake_cuda_launch_kernel) or its bytes at its engine's
 * rate (pageable_Bps where its host memory is not pinned); markers and host functions take no
 * time. The stream's worker sleeps until that end, then does the work (copies move the bytes).
 * So a worker that wakes late delays what the host sees, never the schedule: a chain of kernels
 * ends at the sum of their durations however many wake-ups it took. Device-to-device and
 * host-to-host copies take no time. A stream holds at most `depth` queued operations: a launch
 * onto a full stream blocks the host until one completes.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_cudart_impl.h"

#define MAX_DEV 8 /* copy engines of the first MAX_DEV devices; the rest share the last ones */

struct timing timing; /* under mu */
_Atomic uint64_t pageable_copies;

static uint64_t engine_free[MAX_DEV][2]; /* when each copy engine is free (under mu) */
static uint64_t st_bytes[2], st_busy[2], st_kernel_ns, st_kernels, st_queue_waits; /* under mu */
/* kernel streams (those fake_cuda_launch_kernel used): ns and operations held back by other
 * streams' work (events, the legacy stream) beyond their own stream and their queueing, and ns
 * they were idle because the host queued the next operation late (under mu) */
static uint64_t st_dep_ns, st_dep_ops, st_late_ns;

struct pin {
    const unsigned char *p;
    size_t n;
};
static struct pin *pins; /* pinned host ranges (under mu) */
static size_t n_pins, cap_pins;

static _Atomic int watching;
static pthread_t watched; /* fake_cuda_watch_thread (written before watching is set) */
static _Atomic uint64_t watched_waits;

uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Early by at most SLACK_NS rather than a sleep: a worker that would sleep for less goes on (the
 * end times, not the wake-ups, make the schedule, so the slack never accumulates). */
#define SLACK_NS 20000

void sleep_until_ns(uint64_t t) {
    if (t <= now_ns() + SLACK_NS)
        return;
    struct timespec ts = { (time_t)(t / 1000000000u), (long)(t % 1000000000u) };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
}

static uint64_t max_u64(uint64_t a, uint64_t b) {
    return a > b ? a : b;
}

/* A host thread blocked on a full queue sleeps on room_cv until the queue has drained to half
 * its depth (one wake-up per depth/2 operations, not one per operation). */
static pthread_cond_t room_cv = PTHREAD_COND_INITIALIZER;
static int room_waiters; /* under mu */

int64_t queue_room(void *h, int64_t slot) {
    if (!timing.on || timing.depth == 0 || slot < 0 ||
        slots[slot].enqueued - slots[slot].completed < timing.depth)
        return slot;
    st_queue_waits++;
    count_wait();
    room_waiters++;
    while (slot >= 0 && slots[slot].enqueued - slots[slot].completed > timing.depth / 2) {
        pthread_cond_wait(&room_cv, &mu);
        slot = stream_slot(h);
    }
    room_waiters--;
    return slot;
}

/* Under mu: wake the hosts waiting for room when a stream drained to half its depth or went
 * away. */
static void room_wake(const struct slot *sl) {
    if (room_waiters && (!sl->s || sl->enqueued - sl->completed <= timing.depth / 2))
        pthread_cond_broadcast(&room_cv);
}

/* Under mu: the end time of the operation at position pos of slot (0 when long gone). */
static uint64_t end_of(uint32_t slot, uint64_t pos) {
    const struct slot *sl = &slots[slot];
    if (!sl->vt_ring || pos == 0 || sl->completed < pos || sl->completed - pos >= VT_RING)
        return 0;
    return sl->vt_ring[pos % VT_RING];
}

uint64_t timed_end(struct op *o) {
    const struct slot *sl = &slots[o->slot];
    uint64_t start = max_u64(sl->vt_last, o->t_enq);
    for (size_t i = 0; i < o->n_deps; i++)
        start = max_u64(start, end_of(o->deps[i].slot, o->deps[i].pos));
    if (sl->kernels && sl->vt_last) {
        uint64_t own = max_u64(sl->vt_last, o->t_enq);
        st_late_ns += own - sl->vt_last;
        st_dep_ns += start - own;
        st_dep_ops += start > own;
    }
    if (o->kind == OP_KERNEL) {
        st_kernel_ns += o->dur_ns;
        st_kernels++;
        return start + o->dur_ns;
    }
    if (o->kind != OP_COPY || (o->wdev && o->rdev) || (!o->wdev && !o->rdev))
        return start;          /* markers, host functions, on-device and host-to-host copies */
    int dir = o->wdev ? 0 : 1; /* 0: host to device, 1: device to host */
    int dev = slot_dev(o->slot);
    dev = dev < 0 ? 0 : dev >= MAX_DEV ? MAX_DEV - 1 : dev;
    double rate = o->pageable ? timing.pageable_Bps : dir == 0 ? timing.h2d_Bps : timing.d2h_Bps;
    uint64_t dur = rate > 0 ? (uint64_t)((double)o->n / rate * 1e9) : 0;
    start = max_u64(start, engine_free[dev][dir]);
    engine_free[dev][dir] = start + dur;
    st_bytes[dir] += o->n;
    st_busy[dir] += dur;
    return start + dur;
}

void timed_done(const struct op *o, uint64_t end) {
    struct slot *sl = &slots[o->slot];
    if (!sl->vt_ring)
        sl->vt_ring = calloc(VT_RING, sizeof *sl->vt_ring);
    if (sl->vt_ring)
        sl->vt_ring[o->pos % VT_RING] = end;
    sl->vt_last = end;
}

void timed_wake(uint32_t slot) {
    room_wake(&slots[slot]);
}

int host_pinned(const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n_pins; i++)
        if (c >= pins[i].p && c + n <= pins[i].p + pins[i].n)
            return 1;
    return 0;
}

int pin_add(const void *p, size_t n) {
    if (grow((void **)&pins, &cap_pins, n_pins + 1, sizeof *pins) < 0)
        return -1;
    pins[n_pins++] = (struct pin){ p, n };
    return 0;
}

int pin_remove(const void *p) {
    for (size_t i = 0; i < n_pins; i++)
        if (pins[i].p == p) {
            pins[i] = pins[--n_pins];
            return 0;
        }
    return -1;
}

void count_wait(void) {
    if (atomic_load(&watching) && pthread_equal(watched, pthread_self()))
        atomic_fetch_add(&watched_waits, 1);
}

/* ---- exported hooks ---------------------------------------------------------------------- */

/* Timed mode on (on != 0) or off, with the copy engines' rates (bytes/s per direction), the rate
 * of a copy from or to pageable memory and the launch queue's depth per stream (0: unbounded).
 * Statistics and the engines' clocks restart. Returns 0, or cudaErrorInvalidValue for a rate
 * that is not positive. */
int fake_cuda_set_timing(
    int on, double h2d_Bps, double d2h_Bps, double pageable_Bps, unsigned depth) {
    if (on && !(h2d_Bps > 0 && d2h_Bps > 0 && pageable_Bps > 0))
        return ERR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    timing = (struct timing){ on, h2d_Bps, d2h_Bps, pageable_Bps, depth };
    memset(engine_free, 0, sizeof engine_free);
    memset(st_bytes, 0, sizeof st_bytes);
    memset(st_busy, 0, sizeof st_busy);
    st_kernel_ns = st_kernels = st_queue_waits = st_dep_ns = st_dep_ops = st_late_ns = 0;
    pthread_mutex_unlock(&mu);
    return 0;
}

/* A kernel of `ns` nanoseconds on stream s (in timed mode it occupies the stream that long; else
 * it is a marker). As in CUDA, the stream must belong to the current device. */
int fake_cuda_launch_kernel(void *s, uint64_t ns) {
    pthread_mutex_lock(&mu);
    int64_t slot = queue_room(s, stream_slot(s));
    int rc = 0;
    if (slot < 0 || slot_dev((uint32_t)slot) != cur_dev) {
        rc = ERR_INVALID_RESOURCE_HANDLE;
    } else {
        struct op *o = new_op((uint32_t)slot, 0);
        if (!o) {
            rc = ERR_MEMORY_ALLOCATION;
        } else {
            slots[slot].kernels = 1;
            o->kind = OP_KERNEL;
            o->dur_ns = ns;
            (void)enqueue((uint32_t)slot, o);
        }
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

/* The timed mode's counts since fake_cuda_set_timing, in this order (the first n): bytes copied
 * host to device, device to host; ns each copy engine was busy (h2d, d2h); kernel ns and kernels
 * run; launches that found their stream's queue full; on the streams that run kernels: ns their
 * operations were held back by other streams' work (an event waited for, the legacy stream) past
 * the end of their stream's previous operation and their queueing, the number of operations so
 * held back, and ns they idled because the host queued the next operation after the previous one
 * ended. Returns how many it filled. */
int fake_cuda_timed_stats(uint64_t *out, size_t n) {
    pthread_mutex_lock(&mu);
    uint64_t v[] = { st_bytes[0], st_bytes[1],    st_busy[0], st_busy[1], st_kernel_ns,
                     st_kernels,  st_queue_waits, st_dep_ns,  st_dep_ops, st_late_ns };
    size_t k = n < sizeof v / sizeof v[0] ? n : sizeof v / sizeof v[0];
    memcpy(out, v, k * sizeof *v);
    pthread_mutex_unlock(&mu);
    return (int)k;
}

/* Copies between device memory and pageable (not pinned) host memory: each one made the caller
 * wait until it completed, as on a GPU. */
uint64_t fake_cuda_pageable_copies(void) {
    return atomic_load(&pageable_copies);
}

/* Watch the calling thread (a test's training thread): fake_cuda_watched_waits counts every time
 * it blocks on, or polls for, device progress. */
void fake_cuda_watch_thread(void) {
    watched = pthread_self();
    atomic_store(&watching, 1);
}

/* The watched thread's waits on device progress: synchronisations (stream, event, device,
 * cudaMemcpy, cudaFree, cudaFreeHost; cudaMalloc and cudaHostAlloc in timed mode), copies from or
 * to pageable memory, queries that answered "not ready", launches onto a full queue. */
uint64_t fake_cuda_watched_waits(void) {
    return atomic_load(&watched_waits);
}
