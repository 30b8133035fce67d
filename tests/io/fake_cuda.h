/*
 * The fake CUDA runtime's entry points for tests (tests/io/fakes/fake_cudart.c, the lagging-GPU
 * emulator), looked up in the library TIO_CUDART_LIB names: the cudart calls the shim does not
 * resolve (cudaLaunchHostFunc, cudaDeviceSynchronize, cudaSetDevice, cudaGetDevice) and the fake's
 * test hooks. Header-only.
 */
#ifndef TIO_TESTS_IO_FAKE_CUDA_H
#define TIO_TESTS_IO_FAKE_CUDA_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fake_cuda {
    /* the runtime */
    int (*malloc_device)(void **p, size_t n);
    int (*free_device)(void *p);
    int (*memcpy)(void *dst, const void *src, size_t n, int kind);
    int (*memcpy_async)(void *dst, const void *src, size_t n, int kind, void *stream);
    int (*stream_create)(void **s, unsigned flags);
    int (*stream_destroy)(void *s);
    int (*stream_synchronize)(void *s);
    int (*stream_wait_event)(void *s, void *e, unsigned flags);
    int (*event_create)(void **e, unsigned flags);
    int (*event_destroy)(void *e);
    int (*event_record)(void *e, void *s);
    int (*event_query)(void *e);
    int (*event_synchronize)(void *e);
    int (*event_elapsed)(float *ms, void *start, void *end);
    int (*device_synchronize)(void);
    int (*launch_host_func)(void *s, void (*fn)(void *), void *user);
    int (*set_device)(int dev);
    int (*get_device)(int *dev);
    int (*host_alloc)(void **p, size_t n, unsigned flags);
    int (*free_host)(void *p);
    int (*host_register)(void *p, size_t n, unsigned flags);
    int (*host_unregister)(void *p);
    /* test hooks */
    void *(*translate)(const void *p, size_t len);
    void (*set_lag)(unsigned max_us, uint64_t seed);
    uint64_t (*sync_calls)(void);
    uint64_t (*thread_sync_calls)(void);
    uint64_t (*blocking_copies)(void);
    uint64_t (*bad_accesses)(void);
    uint64_t (*live_streams)(void);
    uint64_t (*memcpy_calls)(void);
    uint64_t (*racing_copies)(const void *p, size_t n, int writes);
    uint64_t (*cross_device_copies)(void);
    uint64_t (*copy_races)(void);
    /* timed mode (the GPU twin) and the stricter checks */
    int (*set_timing)(int on, double h2d_Bps, double d2h_Bps, double pageable_Bps, unsigned depth);
    int (*launch_kernel)(void *s, uint64_t ns);
    int (*timed_stats)(uint64_t *out, size_t n); /* enum fake_timed_stat order */
    uint64_t (*pageable_copies)(void);
    void (*watch_thread)(void);
    uint64_t (*watched_waits)(void);
};

/* fake_cuda_timed_stats's values, in order. */
enum fake_timed_stat {
    FAKE_H2D_BYTES,
    FAKE_D2H_BYTES,
    FAKE_H2D_BUSY_NS,
    FAKE_D2H_BUSY_NS,
    FAKE_KERNEL_NS,
    FAKE_KERNELS,
    FAKE_QUEUE_FULL,
    FAKE_DEP_WAIT_NS, /* kernel streams: held back by other streams (events waited for) */
    FAKE_DEP_WAITS,
    FAKE_LATE_NS, /* kernel streams: idle until the host queued their next operation */
    FAKE_N_STATS
};

/* Fill *f from $TIO_CUDART_LIB; 0, or -1 with a message (the library or a symbol missing). */
static inline int fake_cuda_load(struct fake_cuda *f) {
    const char *path = getenv("TIO_CUDART_LIB");
    void *lib = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!lib) {
        printf("  the fake cudart is not loadable (TIO_CUDART_LIB=%s)\n", path ? path : "unset");
        return -1;
    }
    static const struct {
        const char *name;
        size_t off;
    } syms[] = {
        { "cudaMalloc", offsetof(struct fake_cuda, malloc_device) },
        { "cudaFree", offsetof(struct fake_cuda, free_device) },
        { "cudaMemcpy", offsetof(struct fake_cuda, memcpy) },
        { "cudaMemcpyAsync", offsetof(struct fake_cuda, memcpy_async) },
        { "cudaStreamCreateWithFlags", offsetof(struct fake_cuda, stream_create) },
        { "cudaStreamDestroy", offsetof(struct fake_cuda, stream_destroy) },
        { "cudaStreamSynchronize", offsetof(struct fake_cuda, stream_synchronize) },
        { "cudaStreamWaitEvent", offsetof(struct fake_cuda, stream_wait_event) },
        { "cudaEventCreateWithFlags", offsetof(struct fake_cuda, event_create) },
        { "cudaEventDestroy", offsetof(struct fake_cuda, event_destroy) },
        { "cudaEventRecord", offsetof(struct fake_cuda, event_record) },
        { "cudaEventQuery", offsetof(struct fake_cuda, event_query) },
        { "cudaEventSynchronize", offsetof(struct fake_cuda, event_synchronize) },
        { "cudaEventElapsedTime", offsetof(struct fake_cuda, event_elapsed) },
        { "cudaDeviceSynchronize", offsetof(struct fake_cuda, device_synchronize) },
        { "cudaLaunchHostFunc", offsetof(struct fake_cuda, launch_host_func) },
        { "cudaSetDevice", offsetof(struct fake_cuda, set_device) },
        { "cudaGetDevice", offsetof(struct fake_cuda, get_device) },
        { "cudaHostAlloc", offsetof(struct fake_cuda, host_alloc) },
        { "cudaFreeHost", offsetof(struct fake_cuda, free_host) },
        { "cudaHostRegister", offsetof(struct fake_cuda, host_register) },
        { "cudaHostUnregister", offsetof(struct fake_cuda, host_unregister) },
        { "fake_cuda_translate", offsetof(struct fake_cuda, translate) },
        { "fake_cuda_set_lag", offsetof(struct fake_cuda, set_lag) },
        { "fake_cuda_sync_calls", offsetof(struct fake_cuda, sync_calls) },
        { "fake_cuda_thread_sync_calls", offsetof(struct fake_cuda, thread_sync_calls) },
        { "fake_cuda_blocking_copies", offsetof(struct fake_cuda, blocking_copies) },
        { "fake_cuda_bad_accesses", offsetof(struct fake_cuda, bad_accesses) },
        { "fake_cuda_live_streams", offsetof(struct fake_cuda, live_streams) },
        { "fake_cuda_memcpy_calls", offsetof(struct fake_cuda, memcpy_calls) },
        { "fake_cuda_racing_copies", offsetof(struct fake_cuda, racing_copies) },
        { "fake_cuda_cross_device_copies", offsetof(struct fake_cuda, cross_device_copies) },
        { "fake_cuda_copy_races", offsetof(struct fake_cuda, copy_races) },
        { "fake_cuda_set_timing", offsetof(struct fake_cuda, set_timing) },
        { "fake_cuda_launch_kernel", offsetof(struct fake_cuda, launch_kernel) },
        { "fake_cuda_timed_stats", offsetof(struct fake_cuda, timed_stats) },
        { "fake_cuda_pageable_copies", offsetof(struct fake_cuda, pageable_copies) },
        { "fake_cuda_watch_thread", offsetof(struct fake_cuda, watch_thread) },
        { "fake_cuda_watched_waits", offsetof(struct fake_cuda, watched_waits) },
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *p = dlsym(lib, syms[i].name);
        if (!p) {
            printf("  %s lacks %s\n", path, syms[i].name);
            return -1;
        }
        memcpy((char *)f + syms[i].off, &p, sizeof p); /* object to function pointer */
    }
    return 0;
}

#endif
