/* The block cache's internals, shared by its files (src/blockcache/); never installed.
 *
 * Blocks live in one array (indices, -1 = none). Three intrusive doubly linked lists thread
 * through it: per class a hot list and a cold list (LIFO: the most recently kept block is
 * reused first, its pages the likeliest to be in cache), and two global FIFOs of hot and cold
 * blocks (the oldest goes cold, or is unmapped, first). An open-addressing table (linear
 * probing, backward-shift deletion) maps a block's address to its index. One mutex per cache;
 * every bc_ function is called with it held unless it says otherwise.
 *
 * Reading order: bcache_blocks.c (lists, address table, slots, classes, mappings, the hot and
 * cold bounds), blockcache.c (the public calls), bcache_resize.c (a request served from hot
 * blocks of other sizes), bcache_thread.c (fork handlers and the prefault thread). */
#ifndef TIO_BCACHE_IMPL_H
#define TIO_BCACHE_IMPL_H

#include <pthread.h>
#include <stdint.h>

#include <teraio/blockcache.h>

#define MIB        ((uint64_t)1 << 20)
#define HUGE_BYTES (2 * MIB)

#define PREFAULT_MAX (64 * MIB) /* the largest block the prefault thread maps at once */
#define MAX_CUTS     15         /* a block is made of at most MAX_CUTS + 1 kernel mappings */
#define CUT_UNIT     ((uint64_t)64 * 1024) /* every capacity and cut is a multiple of it */
#define SLACK_MIN \
    ((uint64_t)64 * 1024) /* resident pages past a request are handed back from this */

enum blk_state { B_UNUSED = 0, B_IN_USE, B_HOT, B_COLD, B_PREFAULT };

struct link {
    int32_t prev, next;
};

struct blk {
    char *addr;
    uint64_t cap;
    int32_t state;
    int32_t cls;       /* index in classes */
    struct link cl;    /* class hot or cold list */
    struct link age;   /* global hot or cold FIFO */
    int32_t next_free; /* unused slots */
    int32_t discarded; /* in use, pages handed back by tio_bcache_discard */
    int32_t ncut;      /* cut[0..ncut): where a kernel mapping (VMA) may begin inside the block,
                        * in CUT_UNITs from its start, ascending (see take_resized) */
    uint32_t cut[MAX_CUTS];
};

struct list {
    int32_t head, tail;
};

struct cls {
    uint64_t cap;
    int32_t unaligned; /* blocks not 2 MiB-aligned (tails left by a split): never handed out as
                        * they are, only moved (take_resized) */
    struct list hot, cold;
};

struct tio_bcache {
    pthread_mutex_t mu;
    struct tio_bcache *reg_next; /* the registry of live caches (fork handlers) */
    struct tio_bcache_params p;
    struct blk *b;
    int32_t nb, free_slot;
    size_t capb;
    struct cls *c;
    int32_t nc;
    size_t capc;
    int32_t *tab;  /* block index + 1 per slot; 0 = empty */
    uint32_t tabn; /* power of two */
    struct list hot_age, cold_age;
    struct tio_bcache_stats s;
    /* the prefault thread: started on the first release, stopped by tio_bcache_free */
    pthread_cond_t cv;
    pthread_t thr;
    int32_t thr_started, stop;
};

/* 1 if p is 2 MiB-aligned. */
int bc_aligned_2m(const void *p);

/* ---- bcache_blocks.c ---- */

/* The index of the block starting at a, or -1. */
int32_t bc_find(const struct tio_bcache *c, const void *a);
/* Enter block i in, or take address a out of, the address table. */
void bc_tab_put(struct tio_bcache *c, int32_t i);
void bc_tab_del(struct tio_bcache *c, const void *a);
/* Slot i back on the free list. */
void bc_free_slot(struct tio_bcache *c, int32_t i);
/* A slot for a new block (state B_UNUSED until set), the address table grown for it; -1. */
int32_t bc_reserve_slot(struct tio_bcache *c);
/* The class of capacity cap (unaligned: tails left by a split), made if create; -1 if absent,
 * TIO_ENOMEM. */
int32_t bc_class_index(struct tio_bcache *c, uint64_t cap, int32_t unaligned, int create);
/* Advise transparent huge pages for a block of cap bytes at a (huge_pages). */
void bc_advise_huge(const struct tio_bcache *c, char *a, uint64_t cap);
/* A new 2 MiB-aligned anonymous mapping of cap bytes, or NULL. */
char *bc_map_block(const struct tio_bcache *c, uint64_t cap);
/* Hand the pages of [a, a + cap) back (MADV_DONTNEED): 0 or -errno. No lock needed. */
int bc_drop_pages(char *a, uint64_t cap);
/* File block i (on no list) as kept, hot or cold; take kept block i off its lists. */
void bc_keep(struct tio_bcache *c, int32_t i, int cold);
void bc_unkeep(struct tio_bcache *c, int32_t i);
/* Unmap a kept (hot or cold) block and free its slot. */
void bc_unmap_kept(struct tio_bcache *c, int32_t i);
/* Hot kept bytes allowed now: cache_bytes, plus with follow_peak the room under the peak. */
uint64_t bc_hot_room(const struct tio_bcache *c);
/* Enforce both bounds: hot bytes (oldest go cold), cold bytes (oldest are unmapped). */
void bc_enforce(struct tio_bcache *c);
/* Map a new block of cap bytes in class k (in no state): 0 and *out, or TIO_ENOMEM. */
int bc_map_new(struct tio_bcache *c, uint64_t cap, int32_t k, int32_t *out);

/* ---- bcache_resize.c ---- */

/* Class k's request served from hot kept blocks of other classes; -1 if none could. */
int32_t bc_take_resized(struct tio_bcache *c, int32_t k);

/* ---- bcache_thread.c ---- */

/* Enter a new cache in, or take it out of, the registry the fork handlers lock (without the
 * cache's lock held). */
void bc_register(struct tio_bcache *c);
void bc_unregister(struct tio_bcache *c);
/* Wake the prefault thread, starting it the first time. */
void bc_prefault_kick(struct tio_bcache *c);

#endif
