/*
 * Private to the fake CUDA runtime (fake_cudart.c, the runtime API, over fake_cudart_sched.c,
 * the streams, events, device memory bookkeeping and test hooks): the state they share, under
 * one lock, and the scheduler's calls. Hidden: the library exports only the CUDA entry points
 * and the fake_cuda_* hooks.
 */
#ifndef TIO_FAKE_CUDART_IMPL_H
#define TIO_FAKE_CUDART_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define FAKE_DEV_BYTES   (UINT64_C(1) << 32) /* reserved, never touched unless used */
#define FAKE_CUDA_POISON 0xDB                /* freed device bytes */
#define MAX_VC           64 /* vector clocks (happens-before) cover the first MAX_VC stream slots */

enum {
    ERR_INVALID_VALUE = 1,
    ERR_MEMORY_ALLOCATION = 2,
    ERR_INVALID_DEVICE = 101,
    ERR_INVALID_RESOURCE_HANDLE = 400,
    ERR_NOT_READY = 600
};
enum { KIND_H2H = 0, KIND_H2D = 1, KIND_D2H = 2, KIND_D2D = 3, KIND_DEFAULT = 4 };
enum { OP_MARK, OP_COPY, OP_HOST, OP_KERNEL };
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
uint64_t fake_cuda_cross_device_copies(void);
uint64_t fake_cuda_copy_races(void);
int fake_cuda_set_timing(
    int on, double h2d_Bps, double d2h_Bps, double pageable_Bps, unsigned depth);
int fake_cuda_launch_kernel(void *stream, uint64_t ns);
int fake_cuda_timed_stats(uint64_t *out, size_t n);
uint64_t fake_cuda_pageable_copies(void);
void fake_cuda_watch_thread(void);
uint64_t fake_cuda_watched_waits(void);

#pragma GCC visibility push(hidden)

/* ---- state (fake_cudart_sched.c) --------------------------------------------------------- */
/* One lock and one condition variable for everything: completions are broadcast. */
extern pthread_mutex_t mu;
extern pthread_cond_t cv;

extern _Atomic(unsigned char *) dev_base;
extern unsigned char *shadow_base;
struct extent {
    uint64_t off, len;
    int dev; /* an allocation's device (cudaSetDevice current when it was made) */
};
extern struct extent *allocs; /* live allocations (unsorted) */
extern size_t n_allocs, cap_allocs;

extern _Atomic uint64_t memcpy_calls, blocking_copies, bad_accesses, cross_device_copies;
/* The calling thread's current device (cudaSetDevice; 0 until set). */
extern _Thread_local int cur_dev;

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
    const unsigned char *wdev;          /* the device range a copy writes (NULL: host memory) */
    const unsigned char *rdev;          /* the device range a copy reads (NULL: host memory) */
    const unsigned char *whost, *rhost; /* the host ranges a copy writes, reads (NULL: device) */
    void (*fn)(void *);
    void *user;
    uint64_t t_enq;  /* CLOCK_MONOTONIC ns when it was queued */
    uint64_t dur_ns; /* OP_KERNEL: its duration (timed mode) */
    int pageable;    /* OP_COPY: its host memory is not pinned */
    int64_t ev_idx;  /* an event record: the event's index (else -1) ... */
    uint32_t ev_gen; /* ... and generation */
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
    int dev; /* the device current when the stream was created (slot 0: see slot_dev) */
    uint64_t enqueued, completed;
    uint64_t clock[MAX_VC]; /* the vector clock of its last queued operation */
    uint64_t vt_last;       /* timed mode: the end time of its last completed operation */
    uint64_t *vt_ring;      /* timed mode: end times by position % VT_RING (NULL: none yet) */
    int kernels;            /* timed mode: fake_cuda_launch_kernel queued work on it */
};
#define VT_RING 4096

struct event {
    int live;
    uint32_t gen;
    int recorded;
    int dev; /* the device current when the event was created */
    uint32_t slot;
    uint64_t pos;
    uint64_t vc[MAX_VC]; /* the record's vector clock */
    int64_t t_done;      /* when the record completed (timed mode: its end time); -1: not yet */
};

extern struct slot *slots;
extern size_t n_slots, cap_slots;
extern struct event *events;
extern size_t n_events, cap_events;

/* ---- timed mode, pinned memory, the watched thread (fake_cudart_timed.c) ------------------ */
struct timing {
    int on;
    double h2d_Bps, d2h_Bps; /* the copy engines' rates, bytes/s */
    double pageable_Bps;     /* a copy from or to pageable host memory, bytes/s */
    unsigned depth;          /* launch queue entries per stream (0: unbounded) */
};
extern struct timing timing; /* under mu */
uint64_t now_ns(void);
void sleep_until_ns(uint64_t t);
/* Under mu: when o ends in timed mode: it starts once its stream's previous operation, the
 * operations it depends on and (a copy) its copy engine are done, and no earlier than it was
 * queued; it lasts its duration (a kernel) or its bytes at its engine's rate (a copy). */
uint64_t timed_end(struct op *o);
/* Under mu: o completed at end (timed mode). */
void timed_done(const struct op *o, uint64_t end);
/* Under mu: an operation of slot completed, or the stream went away (wakes hosts waiting for room
 * in its launch queue). */
void timed_wake(uint32_t slot);
/* Under mu: block while the stream's launch queue is full (timed mode); the slot of handle h
 * again afterwards (-1: the stream went away). */
int64_t queue_room(void *h, int64_t slot);
/* Under mu: is host range [p, p+n) pinned (cudaHostAlloc, cudaHostRegister)? */
int host_pinned(const void *p, size_t n);
int pin_add(const void *p, size_t n); /* under mu */
int pin_remove(const void *p);        /* under mu: 0, or -1 when p was not pinned */
/* Under mu: the calling thread blocks on device progress (counted when it is the watched one). */
void count_wait(void);
extern _Atomic uint64_t pageable_copies;

/* ---- the scheduler (fake_cudart_sched.c) ------------------------------------------------- */
int grow(void **arr, size_t *cap, size_t need, size_t elem);
void *encode(uint32_t idx, uint32_t gen, unsigned tag);
/* Is [p, p+n) inside a live allocation (or host memory, FAKE_CUDA_HOST_DEVICE)? Under mu. */
int dev_live(const unsigned char *p, size_t n);
/* FAKE_CUDA_HOST_DEVICE=1 (see fake_cudart.c)? */
int host_as_device(void);
struct stream *start_stream(uint32_t slot);
/* Under mu: make sure the legacy stream exists. */
int init_locked(void);
/* Under mu: the slot of a stream handle, or -1. */
int64_t stream_slot(void *h);
/* Under mu: the device of a stream slot. The legacy stream (slot 0) stands for the legacy stream
 * of the calling thread's current device. */
int slot_dev(uint32_t slot);
/* Under mu: the device owning device address p (a live allocation), or -1. */
int dev_owner(const unsigned char *p);
/* The number of devices (FAKE_CUDA_DEVICES, default 1). */
int device_count(void);
struct event *event_of(void *h);
/* Under mu: a new op for `slot` with room for the legacy-stream dependencies and `extra`. */
struct op *new_op(uint32_t slot, size_t extra);
/* Under mu: queue o on slot; returns its position (completed >= position: done). */
uint64_t enqueue(uint32_t slot, struct op *o);
/* Under mu: the host saw the operations of clock vc complete. */
void observe(const uint64_t *vc);
/* Under mu: wait until slot completes position pos, whose clock was vc, and observe it. */
void wait_observe(uint32_t slot, uint64_t pos, const uint64_t *vc);
/* A call that blocks the host on device work (fake_cuda_sync_calls). */
void count_sync(void);
/* Under mu: wait for the work queued so far on every stream of device dev (-1: every device). */
void device_sync_locked(int dev);

#pragma GCC visibility pop

#endif
