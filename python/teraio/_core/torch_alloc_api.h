/* The block cache as teraio._core hands it to teraio._torch_alloc (C++): a capsule,
 * teraio._core._block_cache_api, holding this table. Both sides include this header; the
 * version is checked when the allocator is installed. alloc returns NULL when the cache is not
 * enabled or cannot serve (the allocator then falls back to PyTorch's); release gives back a
 * pointer alloc returned and returns 0, or returns nonzero and does nothing when p is not a
 * block of the cache in use (c10's raw_deallocate passes every pointer through one deleter: the
 * adapter then hands p to the allocator that made it). Both may be called from any thread,
 * without the GIL. */
#ifndef TIO_PY_TORCH_ALLOC_API_H
#define TIO_PY_TORCH_ALLOC_API_H

#include <stdint.h>

#define TIO_TORCH_ALLOC_API_VERSION 2
#define TIO_TORCH_ALLOC_CAPSULE     "teraio._core._block_cache_api"

struct tio_torch_alloc_api {
    int32_t version;
    void *(*alloc)(uint64_t bytes);
    int (*release)(void *p);
};

#endif
