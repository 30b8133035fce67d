/*
 * teraio/alloc_internal.h - the allocation wrappers every teraio allocation goes through
 * (private: the library, its tests, the CLI and the Python extension; never installed).
 *
 * They count live allocations (for leak checks in tests) and support fault injection: after
 * tio_alloc_fail_after(n), the (n+1)-th allocation fails, which lets tests prove that every
 * error path cleans up. Memory from tio_malloc/tio_calloc/tio_realloc/tio_aligned_alloc is
 * released with tio_free (teraio/alloc.h). Thread-safe.
 */
#ifndef TERAIO_ALLOC_INTERNAL_H
#define TERAIO_ALLOC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <teraio/alloc.h>

#ifdef __cplusplus
extern "C" {
#endif

void *tio_malloc(size_t bytes);
void *tio_calloc(size_t n, size_t size);
void *tio_realloc(void *p, size_t bytes);
/* tio_aligned_alloc: `alignment` a power of two >= sizeof(void*); free with tio_free. */
void *tio_aligned_alloc(size_t alignment, size_t bytes);
/* tio_strdup: copy of a NUL-terminated string (NULL on failure or NULL input); tio_free it. */
char *tio_strdup(const char *s);

/* tio_alloc_live_count: number of allocations not yet freed (process-wide). */
int64_t tio_alloc_live_count(void);
/* tio_alloc_fail_after: make the allocation after the next `n` fail; n < 0 disables. */
void tio_alloc_fail_after(int64_t n);

#ifdef __cplusplus
}
#endif
#endif
