/*
 * src/io/extent.h - a first-fit extent allocator with coalescing, over one address range
 * (a swap file or the host-tier pool). Sizes and offsets in bytes, multiples of `unit`.
 *
 *     struct tio_extents x; tio_extents_init(&x, 4096);
 *     tio_extents_add(&x, 0, 1 << 30);            // grow the range (new space is free)
 *     uint64_t off; tio_extents_alloc(&x, 8192, &off);
 *     tio_extents_free(&x, off, 8192);            // merges with free neighbours
 *     tio_extents_fini(&x);
 * Not thread-safe (the engine locks around it).
 */
#ifndef TIO_IO_EXTENT_H
#define TIO_IO_EXTENT_H

#include <stddef.h>
#include <stdint.h>

struct tio_extent {
    uint64_t off, len; /* bytes */
};

struct tio_extents {
    struct tio_extent *free_list; /* sorted by off, never adjacent (coalesced) */
    size_t n, cap;
    uint64_t unit;     /* granularity (bytes, power of two) */
    uint64_t capacity; /* bytes managed */
    uint64_t used;     /* bytes allocated */
};

void tio_extents_init(struct tio_extents *x, uint64_t unit);
void tio_extents_fini(struct tio_extents *x);
/* Add the free range [off, off+len) (e.g. after growing the file). 0 or TIO_ENOMEM. */
int tio_extents_add(struct tio_extents *x, uint64_t off, uint64_t len);
/* Allocate `len` (rounded up to unit) bytes, first fit. 0, -ENOSPC, TIO_EINVAL (len 0). */
int tio_extents_alloc(struct tio_extents *x, uint64_t len, uint64_t *off);
/* Free an allocated range (len rounded up to unit as at alloc). 0, TIO_EINVAL (overlaps
 * free space: a double free), TIO_ENOMEM. */
int tio_extents_free(struct tio_extents *x, uint64_t off, uint64_t len);
/* Largest free extent (bytes). */
uint64_t tio_extents_largest(const struct tio_extents *x);
/* Round up to the unit. */
uint64_t tio_extents_round(const struct tio_extents *x, uint64_t len);

#endif
