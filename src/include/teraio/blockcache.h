/*
 * teraio/blockcache.h - a cache of large host memory blocks for tensors, which hands back to
 * the OS exactly the memory that was offloaded.
 *
 * Why: on CPU, the memory teraio frees by offloading must leave the process, or offloading
 * saves nothing (peak RSS). glibc's heap keeps freed blocks (no RSS drop); mapping every
 * block on its own (mallopt M_MMAP_THRESHOLD) gives the memory back but makes every
 * allocation of training fault in fresh pages (PyTorch 0.67x slower on CPU). The block cache
 * sits between: PyTorch's CPU allocator (teraio._torch_alloc) and teraio's own aligned
 * storages take their large blocks from it.
 *
 *   - Each block is its own anonymous mapping, 2 MiB-aligned, advised for transparent huge
 *     pages from 2 MiB (huge_pages), so page-aligned for O_DIRECT.
 *   - A released block stays mapped and is kept by its size class (the request rounded up to
 *     64 KiB below 2 MiB, 512 KiB below 16 MiB, 2 MiB above) for the next request of that
 *     class: no page faults, no system call.
 *   - Kept blocks are "hot" (their pages resident) or "cold" (pages handed back with
 *     MADV_DONTNEED; reuse faults in zero pages). Hot kept bytes are bounded by cache_bytes
 *     plus, with follow_peak, the room between the bytes in use now and the most ever in use
 *     (peak_in_use_bytes). So caching never raises the blocks' memory above the peak their
 *     live use reached on its own, and when live use grows toward that peak, the oldest hot
 *     kept blocks go cold first. tio_bcache_set_bounds changes the bounds and restarts the
 *     peak: teraio keeps nothing hot during the warm-up and profiled steps, whose peaks say
 *     nothing of the steady state, and follows the peak from the first planned step.
 *   - tio_bcache_discard drops an in-use block's pages at once: teraio calls it when it has
 *     offloaded the block's tensor and is about to free it.
 *   - With resize_kept, a request that finds no hot block of its class is served from hot kept
 *     blocks of other classes before a cold one: the smallest that holds it, if 2 MiB-aligned,
 *     is split in place (its tail stays hot); otherwise a new 2 MiB-aligned mapping of the
 *     request's size is filled by moving the pages of hot blocks into it (mremap: resident
 *     pages stay resident, contents kept), and only what they do not cover faults in. A cold
 *     block or a new mapping faults in (and the kernel zeroes) all of its pages; when live use
 *     climbs back toward its peak through other size classes than it left, resizing is what
 *     keeps training from zeroing memory it already has.
 *   - With prefault, a background thread maps blocks of up to 64 MiB and faults their pages in
 *     (MADV_POPULATE_WRITE) whenever the hot bound has room (it is woken by releases,
 *     tio_bcache_set_bounds and tio_bcache_set_prefault), so that the kernel zeroes memory on
 *     another core instead of in the first touch of a tensor. It never raises the hot bytes
 *     above the bound the cache keeps anyway.
 *   - Cold kept bytes are bounded by max(peak_in_use_bytes, cold_bytes_min); beyond that the
 *     oldest cold blocks are unmapped.
 *
 * All functions are thread-safe (one mutex per cache), and fork-safe: fork handlers
 * (pthread_atfork) hold every live cache's lock across fork(), so a child never inherits a lock
 * another thread held; the child's cache is a copy, usable on its own. Linux only: elsewhere
 * tio_bcache_new returns TIO_EUNAVAIL.
 *
 *   struct tio_bcache *c;
 *   struct tio_bcache_params p = tio_bcache_params_default();
 *   if (tio_bcache_new(&p, &c) < 0) ...
 *   void *a;
 *   if (tio_bcache_alloc(c, 8u << 20, &a) == 0) { ...; tio_bcache_release(c, a); }
 *   tio_bcache_free(c);
 */
#ifndef TERAIO_BLOCKCACHE_H
#define TERAIO_BLOCKCACHE_H

#include <stddef.h>
#include <stdint.h>

#include <teraio/status.h>

#ifdef __cplusplus
extern "C" {
#endif

struct tio_bcache;

struct tio_bcache_params {
    uint64_t cache_bytes;      /* hot kept bytes allowed beyond follow_peak's room (default 0) */
    int32_t follow_peak;       /* 1: also keep up to peak_in_use - in_use hot (default 1) */
    int32_t huge_pages;        /* 1: advise MADV_HUGEPAGE for blocks from 2 MiB (default 1) */
    uint64_t max_mapped_bytes; /* 0: unlimited; else tio_bcache_alloc fails with TIO_ENOMEM rather
                                * than map beyond it (after unmapping cold blocks) */
    uint64_t cold_bytes_min;   /* cold kept bytes allowed even below the peak (default 256 MiB) */
    int32_t resize_kept;       /* 1: a request with no hot block of its class takes the hot kept
                                * block nearest in size and resizes it (default 1) */
    int32_t prefault;          /* 1: a background thread faults in hot blocks ahead of requests,
                                * within the hot bound (default 0) */
};

struct tio_bcache_stats {
    uint64_t in_use_bytes;      /* capacity of blocks handed out and not released */
    uint64_t peak_in_use_bytes; /* the most in_use_bytes ever was */
    uint64_t hot_bytes;         /* kept blocks with resident pages */
    uint64_t cold_bytes;        /* kept blocks whose pages were handed back */
    uint64_t mapped_bytes;      /* all blocks: in use + hot + cold + prefaulting */
    uint64_t allocs;            /* successful tio_bcache_alloc calls */
    uint64_t hot_hits;          /* ... served by a hot kept block (no fault) */
    uint64_t cold_hits;         /* ... served by a cold kept block (pages fault in again) */
    uint64_t maps;              /* ... that mapped a new block */
    uint64_t resized_hits;      /* ... served by a hot kept block of another class, resized */
    uint64_t grown_bytes;       /* bytes mapped by growing resized blocks (their pages fault in) */
    uint64_t faulting_bytes;    /* bytes handed out without resident pages (cold hits, new
                                 * mappings, growth): the kernel zeroes them on first touch */
    uint64_t prefaulted_bytes;  /* bytes the prefault thread faulted in and kept hot */
    uint64_t prefaulting_bytes; /* mapped, being faulted in by the prefault thread now */
    uint64_t evicted_bytes;     /* hot kept bytes made cold to respect the bound */
    uint64_t discarded_bytes;   /* in-use bytes handed back by tio_bcache_discard */
    uint64_t unmapped_bytes;    /* blocks unmapped (cold bound, trim) */
    uint64_t blocks;            /* blocks mapped now */
};

/* Defaults: cache_bytes 0, follow_peak 1, huge_pages 1, max_mapped_bytes 0, cold_bytes_min
 * 256 MiB, resize_kept 1, prefault 0. */
struct tio_bcache_params tio_bcache_params_default(void);

/* tio_bcache_new: a new cache (params NULL: the defaults). 0, TIO_EINVAL (out NULL),
 * TIO_ENOMEM, TIO_EUNAVAIL (not Linux); the detail is in tio_last_error(). */
TIO_MUST_CHECK int tio_bcache_new(const struct tio_bcache_params *params, struct tio_bcache **out);

/* tio_bcache_free: stops the prefault thread and unmaps every block, those still in use
 * included (their memory becomes invalid): call it only when none is in use, or never (a
 * process-wide cache). NULL is a no-op. */
void tio_bcache_free(struct tio_bcache *c);

/* tio_bcache_alloc: a block of at least `bytes` (> 0), 2 MiB-aligned, its contents
 * unspecified (a reused block keeps what its last user wrote, a fresh or cold one reads as
 * zeros). The block's pages past `bytes` rounded up to 64 KiB are not resident (a reused
 * block's are handed back, so that its class's rounding costs no memory): they read as
 * zeros until written. 0 and *out set; TIO_EINVAL (bytes 0, or too large to round), TIO_ENOMEM
 * (mmap failed or max_mapped_bytes reached); the detail is in tio_last_error(). */
TIO_MUST_CHECK int tio_bcache_alloc(struct tio_bcache *c, uint64_t bytes, void **out);

/* tio_bcache_release: give a block from tio_bcache_alloc back (kept for reuse, or unmapped
 * under the bounds). 0, TIO_ENOTFOUND (p is not the start of a block of c in use: nothing done;
 * no detail is recorded, as a caller may offer any pointer and take a miss as the answer). */
int tio_bcache_release(struct tio_bcache *c, void *p);

/* tio_bcache_discard: hand the pages of an in-use block back to the OS now (MADV_DONTNEED);
 * the block stays in use and reads as zeros until written. 0, TIO_ENOTFOUND (not a block of c in
 * use), or -errno from madvise. */
int tio_bcache_discard(struct tio_bcache *c, void *p);

/* tio_bcache_block_size: the capacity of the in-use block starting at p (>= what was asked),
 * or 0 if p is not one. */
uint64_t tio_bcache_block_size(struct tio_bcache *c, const void *p);

/* tio_bcache_set_bounds: set cache_bytes and follow_peak, restart peak_in_use_bytes from the
 * bytes in use now, and apply the bounds at once (hot blocks beyond them go cold). */
void tio_bcache_set_bounds(struct tio_bcache *c, uint64_t cache_bytes, int32_t follow_peak);

/* tio_bcache_set_prefault: turn the prefault thread on or off (see prefault above); on, it
 * starts (or wakes) at once. A forked child's cache starts with it off. */
void tio_bcache_set_prefault(struct tio_bcache *c, int32_t on);

/* tio_bcache_trim: unmap every kept block (hot and cold); the bytes unmapped. */
uint64_t tio_bcache_trim(struct tio_bcache *c);

/* tio_bcache_stats: a snapshot of the counters. */
void tio_bcache_stats(struct tio_bcache *c, struct tio_bcache_stats *out);

/* tio_bcache_class_size: the capacity a request of `bytes` is rounded up to (0 if bytes is 0
 * or too large). */
uint64_t tio_bcache_class_size(uint64_t bytes);

#ifdef __cplusplus
}
#endif
#endif
