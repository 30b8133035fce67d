/*
 * src/dl/cudart_shim.h - the CUDA runtime, reached only through dlopen (never linked).
 *
 * One function table, loaded once (pthread_once + dlopen(RTLD_NOW | RTLD_LOCAL)), never
 * dlclosed. The library is TIO_CUDART_LIB if set, else the first of libcudart.so.13, .so.12,
 * .so.11.0, libcudart.so that loads. Every symbol in the table must resolve or the table is
 * unavailable as a whole. "Loaded" is not "usable": tio_cudart_usable() also asks for the
 * device count, and an error (35, "driver version is insufficient", on machines with the
 * toolkit but no driver) or a count of 0 means unavailable.
 *
 *     const struct tio_cudart_api *cu = tio_cudart();
 *     char why[200];
 *     if (!cu || !tio_cudart_usable(why, sizeof why)) ... fall back
 *     cu->memcpy(dst, src, n, TIO_CUDA_MEMCPY_DEFAULT);
 */
#ifndef TIO_DL_CUDART_SHIM_H
#define TIO_DL_CUDART_SHIM_H

#include <stddef.h>

/* cudaMemcpyKind values (stable across CUDA 11-13). */
enum {
    TIO_CUDA_MEMCPY_H2H = 0,
    TIO_CUDA_MEMCPY_H2D = 1,
    TIO_CUDA_MEMCPY_D2H = 2,
    TIO_CUDA_MEMCPY_D2D = 3,
    TIO_CUDA_MEMCPY_DEFAULT = 4
};

/* cudaErrorNotReady: cudaEventQuery's answer for work not completed yet. */
#define TIO_CUDA_NOT_READY 600
/* cudaStreamNonBlocking: a stream that does not synchronize with the legacy default stream. */
#define TIO_CUDA_STREAM_NON_BLOCKING 0x1u
/* cudaEventDisableTiming: the cheapest event (no timestamps). */
#define TIO_CUDA_EVENT_DISABLE_TIMING 0x2u
/* cudaHostAllocPortable: pinned memory usable by every device, not only the current one. */
#define TIO_CUDA_HOST_ALLOC_PORTABLE 0x1u

/* Streams and events are opaque handles (cudaStream_t, cudaEvent_t). NULL as a stream is the
 * legacy default stream, which synchronizes with every blocking stream of the device. */
typedef void *tio_cuda_stream;
typedef void *tio_cuda_event;

/* All return a cudaError_t (0 = cudaSuccess) as int. */
struct tio_cudart_api {
    int (*get_device_count)(int *count);                           /* cudaGetDeviceCount */
    int (*malloc_device)(void **p, size_t bytes);                  /* cudaMalloc */
    int (*free_device)(void *p);                                   /* cudaFree */
    int (*host_alloc)(void **p, size_t bytes, unsigned flags);     /* cudaHostAlloc */
    int (*free_host)(void *p);                                     /* cudaFreeHost */
    int (*memcpy)(void *dst, const void *src, size_t n, int kind); /* cudaMemcpy */
    const char *(*get_error_string)(int err);                      /* cudaGetErrorString */
    /* Stream-ordered execution (the executor's fences, the engine's copy streams). */
    int (*stream_create)(tio_cuda_stream *s, unsigned flags); /* cudaStreamCreateWithFlags */
    int (*stream_destroy)(tio_cuda_stream s);                 /* cudaStreamDestroy */
    int (*stream_synchronize)(tio_cuda_stream s);             /* cudaStreamSynchronize */
    int (*stream_wait_event)(tio_cuda_stream s, tio_cuda_event e, unsigned flags);
    /* cudaStreamWaitEvent */
    int (*event_create)(tio_cuda_event *e, unsigned flags);   /* cudaEventCreateWithFlags */
    int (*event_destroy)(tio_cuda_event e);                   /* cudaEventDestroy */
    int (*event_record)(tio_cuda_event e, tio_cuda_stream s); /* cudaEventRecord */
    int (*event_query)(tio_cuda_event e);       /* cudaEventQuery: 0 done, TIO_CUDA_NOT_READY */
    int (*event_synchronize)(tio_cuda_event e); /* cudaEventSynchronize */
    int (*memcpy_async)(void *dst, const void *src, size_t n, int kind, tio_cuda_stream s);
    /* cudaMemcpyAsync */
    /* Device identity: streams, events and device memory belong to the device current on the
     * thread that made them; the engine binds its threads to its device. */
    int (*set_device)(int device);  /* cudaSetDevice */
    int (*get_device)(int *device); /* cudaGetDevice */
};

/* The loaded table (or the one set for tests), NULL if no library loads or a symbol is
 * missing; tio_cudart_reason() says which. Thread-safe. */
const struct tio_cudart_api *tio_cudart(void);
/* Why tio_cudart() is NULL (or the library it loaded). */
const char *tio_cudart_reason(void);
/* 1 if the table exists and at least one device answers; else 0 with the reason. */
int tio_cudart_usable(char *reason, size_t len);
/* Tests: replace the table (NULL restores the loaded one). Not thread-safe with I/O. */
void tio_cudart_set_api(const struct tio_cudart_api *fake);

#endif
