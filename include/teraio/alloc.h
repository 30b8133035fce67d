/*
 * teraio/alloc.h - the allocation wrappers every teraio allocation goes through.
 *
 * They count live bytes (for leak checks in tests) and support fault injection: after
 * tio_alloc_fail_after(n), the (n+1)-th allocation fails, which lets tests prove that every
 * error path cleans up. Memory from tio_malloc/tio_calloc/tio_realloc/tio_aligned_alloc is
 * released with tio_free. Thread-safe.
 */
#ifndef TERAIO_ALLOC_H
#define TERAIO_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#include <teraio/status.h>

#ifdef __cplusplus
extern "C" {
#endif

TIO_API void *tio_malloc(size_t bytes);
TIO_API void *tio_calloc(size_t n, size_t size);
TIO_API void *tio_realloc(void *p, size_t bytes);
/* tio_aligned_alloc: `alignment` a power of two >= sizeof(void*); free with tio_free. */
TIO_API void *tio_aligned_alloc(size_t alignment, size_t bytes);
/* tio_io_alloc: memory for I/O buffers, free with tio_free. 4 KiB-aligned (O_DIRECT); from
 * 2 MiB up, 2 MiB-aligned and advised for transparent huge pages (Linux MADV_HUGEPAGE, where
 * the system allows it), so that a transfer spans few physically contiguous segments: a 1 MiB
 * transfer from scattered 4 KiB pages is 256 segments, more than many block devices take in
 * one request (virtio-blk: 254), and the kernel then splits it in two. */
TIO_API void *tio_io_alloc(size_t bytes);
/* tio_free: accepts NULL. */
TIO_API void tio_free(void *p);
/* tio_strdup: copy of a NUL-terminated string (NULL on failure or NULL input); tio_free it. */
TIO_API char *tio_strdup(const char *s);

/* tio_alloc_live_count: number of allocations not yet freed (process-wide). */
TIO_API int64_t tio_alloc_live_count(void);
/* tio_alloc_fail_after: make the allocation after the next `n` fail; n < 0 disables. */
TIO_API void tio_alloc_fail_after(int64_t n);

#ifdef __cplusplus
}
#endif
#endif
