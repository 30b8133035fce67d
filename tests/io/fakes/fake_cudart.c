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
 * a missing event or wait shows up even when the timing happened to leave the bytes right. Copies
 * are checked against each other the same way when each starts (fake_cuda_copy_races): two copies
 * that write the same bytes, or one writes what the other reads, device or host memory, with
 * neither ordered before the other (streams, events, or the host seeing the first complete before
 * it queued the second).
 *
 * Devices: FAKE_CUDA_DEVICES of them, one address space. cudaSetDevice/cudaGetDevice keep a
 * current device per host thread (0 until set); a stream, an event and an allocation belong to the
 * device current when they were made. As in CUDA, cudaEventRecord fails (cudaErrorInvalidResource-
 * Handle) when the event's device is not the stream's; cudaStreamWaitEvent may cross devices;
 * cudaDeviceSynchronize waits for the current device's streams; a copy of device memory queued on
 * a stream of another device works (unified addressing) and is counted
 * (fake_cuda_cross_device_copies). One legacy stream serves every device, as the legacy stream of
 * the calling thread's current device.
 *
 * Pinned and pageable host memory: cudaHostAlloc and cudaHostRegister pin a range. A copy
 * between the device and host memory that is not pinned returns only once it completed (on a GPU
 * it is staged through a driver buffer) and is counted (fake_cuda_pageable_copies). The thread
 * registered by fake_cuda_watch_thread has its waits on device progress counted
 * (fake_cuda_watched_waits). Timed mode (fake_cuda_set_timing, the GPU twin): see
 * fake_cudart_timed.c.
 *
 * Environment: FAKE_CUDA_DEVICES=n (device count, default 1), FAKE_CUDA_ERROR=e
 * (cudaGetDeviceCount fails with e, e.g. 35), FAKE_CUDA_LAG_US=max (default 0: no delay),
 * FAKE_CUDA_SEED=s, FAKE_CUDA_HOST_DEVICE=1 (host memory outside the device region counts as
 * live device memory of device 0, translated to itself: a process's CPU tensors stand in for
 * device tensors, e.g. PyTorch's driven through the stream-ordered executor on a machine without
 * a GPU; a copy's direction is then the one its kind names). Test hooks: fake_cuda_set_lag, the
 * fake_cuda_* counters below.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "fake_cudart_impl.h"

static uint64_t dev_top;     /* bump pointer above every extent ever handed out (under mu) */
static struct extent *holes; /* free holes, sorted (under mu) */
static size_t n_holes, cap_holes;
static _Atomic uint64_t host_allocs;

/* ---- the CUDA runtime API ---------------------------------------------------------------- */
int cudaGetDeviceCount(int *count);
int cudaSetDevice(int dev);
int cudaGetDevice(int *dev);
int cudaMalloc(void **p, size_t n);
int cudaFree(void *p);
int cudaHostAlloc(void **p, size_t n, unsigned flags);
int cudaFreeHost(void *p);
int cudaHostRegister(void *p, size_t n, unsigned flags);
int cudaHostUnregister(void *p);
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
int cudaEventElapsedTime(float *ms, void *start, void *end);
int cudaDeviceSynchronize(void);
int cudaLaunchHostFunc(void *s, void (*fn)(void *), void *user);

int cudaGetDeviceCount(int *count) {
    const char *err = getenv("FAKE_CUDA_ERROR");
    if (err && atoi(err))
        return atoi(err);
    *count = device_count();
    return 0;
}

/* Per host thread, as in CUDA. */
int cudaSetDevice(int dev) {
    if (dev < 0 || dev >= device_count())
        return ERR_INVALID_DEVICE;
    cur_dev = dev;
    return 0;
}

int cudaGetDevice(int *dev) {
    if (!dev)
        return ERR_INVALID_VALUE;
    *dev = cur_dev;
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
        holes[i] = (struct extent){ off, len, 0 };
        n_holes++;
    }
    return 0;
}

/* Under mu, timed mode: allocations wait for the device, as on hardware. */
static void alloc_sync_locked(void) {
    if (timing.on && init_locked() == 0) {
        count_sync();
        device_sync_locked(-1);
    }
}

int cudaMalloc(void **p, size_t n) {
    pthread_mutex_lock(&mu);
    alloc_sync_locked();
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
    allocs[n_allocs++] = (struct extent){ off, len, cur_dev };
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
        device_sync_locked(-1); /* cudaFree synchronizes the device */
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

/* Pinned host memory: copies to and from it are asynchronous. */
int cudaHostAlloc(void **p, size_t n, unsigned flags) {
    (void)flags;
    void *m = NULL;
    if (posix_memalign(&m, 4096, n ? n : 1) != 0)
        return ERR_MEMORY_ALLOCATION;
    pthread_mutex_lock(&mu);
    alloc_sync_locked();
    int rc = pin_add(m, n ? n : 1);
    pthread_mutex_unlock(&mu);
    if (rc < 0) {
        free(m);
        return ERR_MEMORY_ALLOCATION;
    }
    atomic_fetch_add(&host_allocs, 1);
    *p = m;
    return 0;
}

int cudaFreeHost(void *p) {
    if (!p)
        return 0;
    pthread_mutex_lock(&mu);
    if (init_locked() == 0)
        device_sync_locked(-1);
    count_sync();
    int rc = pin_remove(p);
    pthread_mutex_unlock(&mu);
    if (rc < 0)
        return ERR_INVALID_VALUE;
    free(p);
    return 0;
}

/* Pins [p, p+n) of memory the caller allocated. */
int cudaHostRegister(void *p, size_t n, unsigned flags) {
    (void)flags;
    if (!p || n == 0)
        return ERR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    int rc = host_pinned(p, 1)   ? 712 /* cudaErrorHostMemoryAlreadyRegistered */
             : pin_add(p, n) < 0 ? ERR_MEMORY_ALLOCATION
                                 : 0;
    pthread_mutex_unlock(&mu);
    return rc;
}

int cudaHostUnregister(void *p) {
    pthread_mutex_lock(&mu);
    int rc = pin_remove(p) < 0 ? 713 /* cudaErrorHostMemoryNotRegistered */ : 0;
    pthread_mutex_unlock(&mu);
    return rc;
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
    int sdev = slot_dev(slot);
    if ((to_dev && dev_owner(dst) != sdev) || (from_dev && dev_owner(src) != sdev))
        atomic_fetch_add(&cross_device_copies, 1);
    struct op *o = new_op(slot, 0);
    if (!o) {
        *err = ERR_MEMORY_ALLOCATION;
        return NULL;
    }
    o->kind = OP_COPY;
    const void *host = to_dev && !from_dev ? src : from_dev && !to_dev ? dst : NULL;
    o->pageable = host && !host_pinned(host, n);
    o->dst = to_dev ? td : dst;
    o->src = from_dev ? ts : src;
    o->n = n;
    o->wdev = to_dev ? dst : NULL;
    o->rdev = from_dev ? src : NULL;
    o->whost = to_dev ? NULL : dst;
    o->rhost = from_dev ? NULL : src;
    atomic_fetch_add(&memcpy_calls, 1);
    if (slot == 0 || !(slots[slot].flags & STREAM_NON_BLOCKING))
        atomic_fetch_add(&blocking_copies, 1);
    return o;
}

/* A copy between device memory and pageable host memory returns only once it completed (on a
 * GPU it goes through a staging buffer): counted (fake_cuda_pageable_copies). */
int cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *stream) {
    pthread_mutex_lock(&mu);
    int64_t slot = queue_room(stream, stream_slot(stream));
    int err = ERR_INVALID_RESOURCE_HANDLE;
    struct op *o = slot < 0 ? NULL : copy_op((uint32_t)slot, dst, src, n, kind, &err);
    if (o) {
        int pageable = o->pageable;
        uint64_t pos = enqueue((uint32_t)slot, o);
        if (pageable) {
            atomic_fetch_add(&pageable_copies, 1);
            count_sync();
            wait_observe((uint32_t)slot, pos, slots[slot].clock);
        }
    }
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
    slots[idx].dev = cur_dev;
    slots[idx].kernels = 0;
    slots[idx].vt_last = 0; /* a reused slot: not its last stream's */
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
    timed_wake((uint32_t)slot);
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
        count_wait();
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
    else if (rc == ERR_NOT_READY)
        count_wait(); /* a poll for device progress */
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
    ev->dev = cur_dev;
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
    int64_t slot = queue_room(s, stream_slot(s));
    struct event *ev = event_of(e);
    int rc = 0;
    if (slot < 0 || !ev || ev->dev != slot_dev((uint32_t)slot)) {
        rc = ERR_INVALID_RESOURCE_HANDLE; /* the event and the stream must share a device */
    } else {
        struct op *o = new_op((uint32_t)slot, 0);
        if (!o) {
            rc = ERR_MEMORY_ALLOCATION;
        } else {
            ev->recorded = 1;
            ev->slot = (uint32_t)slot;
            ev->t_done = -1;
            o->ev_idx = ev - events;
            o->ev_gen = ev->gen;
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
    else if (rc == ERR_NOT_READY)
        count_wait(); /* a poll for device progress */
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

/* Milliseconds between two completed records (timed mode: between their end times). */
int cudaEventElapsedTime(float *ms, void *start, void *end) {
    if (!ms)
        return ERR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    struct event *a = event_of(start), *b = event_of(end);
    int rc = !a || !b || !a->recorded || !b->recorded ? ERR_INVALID_RESOURCE_HANDLE
             : a->t_done < 0 || b->t_done < 0         ? ERR_NOT_READY
                                                      : 0;
    if (rc == 0)
        *ms = (float)((double)(b->t_done - a->t_done) * 1e-6);
    pthread_mutex_unlock(&mu);
    return rc;
}

int cudaDeviceSynchronize(void) {
    pthread_mutex_lock(&mu);
    int rc = init_locked() < 0 ? ERR_MEMORY_ALLOCATION : 0;
    if (rc == 0) {
        count_sync();
        device_sync_locked(cur_dev);
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

int cudaLaunchHostFunc(void *s, void (*fn)(void *), void *user) {
    if (!fn)
        return ERR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    int64_t slot = queue_room(s, stream_slot(s));
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
