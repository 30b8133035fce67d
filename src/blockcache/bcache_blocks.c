/* The block cache's data structures (bcache_impl.h): lists, the address table, slots,
 * size classes, mappings, and the hot and cold bounds. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <teraio/alloc_internal.h>

#include "../common/common_impl.h"
#include "bcache_impl.h"

int bc_aligned_2m(const void *p) {
    return ((uintptr_t)p & (HUGE_BYTES - 1)) == 0;
}

/* ---- lists ---------------------------------------------------------------------------- */

static struct link *lk(struct tio_bcache *c, int32_t i, int age) {
    return age ? &c->b[i].age : &c->b[i].cl;
}

/* put block i between prev and next (-1: the list's end) */
static void
link_between(struct tio_bcache *c, struct list *l, int32_t i, int32_t prev, int32_t next, int age) {
    struct link *x = lk(c, i, age);
    x->prev = prev;
    x->next = next;
    if (prev >= 0) {
        lk(c, prev, age)->next = i;
    } else {
        l->head = i;
    }
    if (next >= 0) {
        lk(c, next, age)->prev = i;
    } else {
        l->tail = i;
    }
}

static void push_head(struct tio_bcache *c, struct list *l, int32_t i, int age) {
    link_between(c, l, i, -1, l->head, age);
}

static void push_tail(struct tio_bcache *c, struct list *l, int32_t i, int age) {
    link_between(c, l, i, l->tail, -1, age);
}

static void unlink_from(struct tio_bcache *c, struct list *l, int32_t i, int age) {
    struct link *x = lk(c, i, age);
    if (x->prev >= 0) {
        lk(c, x->prev, age)->next = x->next;
    } else {
        l->head = x->next;
    }
    if (x->next >= 0) {
        lk(c, x->next, age)->prev = x->prev;
    } else {
        l->tail = x->prev;
    }
    x->prev = x->next = -1;
}

/* ---- address table --------------------------------------------------------------------- */

static uint32_t slot_of(const struct tio_bcache *c, const void *a) {
    uint64_t h = (uint64_t)((uintptr_t)a >> 21) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32) & (c->tabn - 1);
}

int32_t bc_find(const struct tio_bcache *c, const void *a) {
    if (!c->tabn) {
        return -1;
    }
    for (uint32_t s = slot_of(c, a);; s = (s + 1) & (c->tabn - 1)) {
        int32_t v = c->tab[s];
        if (!v) {
            return -1;
        }
        if (c->b[v - 1].addr == a) {
            return v - 1;
        }
    }
}

void bc_tab_put(struct tio_bcache *c, int32_t i) {
    uint32_t s = slot_of(c, c->b[i].addr);
    while (c->tab[s]) {
        s = (s + 1) & (c->tabn - 1);
    }
    c->tab[s] = i + 1;
}

void bc_tab_del(struct tio_bcache *c, const void *a) {
    uint32_t m = c->tabn - 1;
    uint32_t s = slot_of(c, a);
    while (c->tab[s] && c->b[c->tab[s] - 1].addr != a) {
        s = (s + 1) & m;
    }
    if (!c->tab[s]) {
        return;
    }
    /* backward-shift deletion: move later entries of the run into the hole when their home
     * slot does not lie cyclically in (hole, entry] */
    uint32_t hole = s;
    for (uint32_t j = (s + 1) & m; c->tab[j]; j = (j + 1) & m) {
        uint32_t home = slot_of(c, c->b[c->tab[j] - 1].addr);
        int stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!stays) {
            c->tab[hole] = c->tab[j];
            hole = j;
        }
    }
    c->tab[hole] = 0;
}

static int tab_grow(struct tio_bcache *c) {
    uint32_t n = c->tabn ? c->tabn * 2 : 64;
    int32_t *t = tio_calloc(n, sizeof *t);
    if (!t) {
        return tio_set_error(TIO_ENOMEM, "block cache: out of memory for %u table slots", n);
    }
    tio_free(c->tab);
    c->tab = t;
    c->tabn = n;
    for (int32_t i = 0; i < c->nb; i++) {
        if (c->b[i].state != B_UNUSED) {
            bc_tab_put(c, i);
        }
    }
    return 0;
}

/* ---- mapping --------------------------------------------------------------------------- */

void bc_advise_huge(const struct tio_bcache *c, char *a, uint64_t cap) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (c->p.huge_pages && cap >= HUGE_BYTES) {
        (void)madvise(a, (size_t)(cap & ~(HUGE_BYTES - 1)), MADV_HUGEPAGE);
    }
#else
    (void)c;
    (void)a;
    (void)cap;
#endif
}

char *bc_map_block(const struct tio_bcache *c, uint64_t cap) {
#if defined(__linux__)
    size_t len = (size_t)(cap + HUGE_BYTES);
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        return NULL;
    }
    char *a = p + ((HUGE_BYTES - ((uintptr_t)p & (HUGE_BYTES - 1))) & (HUGE_BYTES - 1));
    if (a > p) {
        (void)munmap(p, (size_t)(a - p));
    }
    size_t tail = (size_t)((p + len) - (a + cap));
    if (tail) {
        (void)munmap(a + cap, tail);
    }
    bc_advise_huge(c, a, cap);
    return a;
#else
    (void)c;
    (void)cap;
    return NULL;
#endif
}

int bc_drop_pages(char *a, uint64_t cap) {
#if defined(__linux__)
    return madvise(a, (size_t)cap, MADV_DONTNEED) == 0 ? 0 : -errno;
#else
    (void)a;
    (void)cap;
    return TIO_EUNAVAIL;
#endif
}

/* file block i as kept, hot or cold (it is on no list) */
void bc_keep(struct tio_bcache *c, int32_t i, int cold) {
    struct blk *b = &c->b[i];
    struct cls *k = &c->c[b->cls];
    b->state = cold ? B_COLD : B_HOT;
    push_head(c, cold ? &k->cold : &k->hot, i, 0);
    push_tail(c, cold ? &c->cold_age : &c->hot_age, i, 1);
    *(cold ? &c->s.cold_bytes : &c->s.hot_bytes) += b->cap;
}

/* take kept block i off its lists (it is then in no state until the caller sets one) */
void bc_unkeep(struct tio_bcache *c, int32_t i) {
    struct blk *b = &c->b[i];
    struct cls *k = &c->c[b->cls];
    int cold = b->state == B_COLD;
    unlink_from(c, cold ? &k->cold : &k->hot, i, 0);
    unlink_from(c, cold ? &c->cold_age : &c->hot_age, i, 1);
    *(cold ? &c->s.cold_bytes : &c->s.hot_bytes) -= b->cap;
}

/* unmap a kept (hot or cold) block and free its slot */
void bc_unmap_kept(struct tio_bcache *c, int32_t i) {
    struct blk *b = &c->b[i];
    bc_unkeep(c, i);
    bc_tab_del(c, b->addr);
#if defined(__linux__)
    (void)munmap(b->addr, (size_t)b->cap);
#endif
    c->s.mapped_bytes -= b->cap;
    c->s.unmapped_bytes += b->cap;
    c->s.blocks--;
    bc_free_slot(c, i);
}

static void make_cold(struct tio_bcache *c, int32_t i) {
    if (c->c[c->b[i].cls].unaligned) { /* a cold tail would have to move anyway: unmap it */
        c->s.evicted_bytes += c->b[i].cap;
        bc_unmap_kept(c, i);
        return;
    }
    bc_unkeep(c, i);
    (void)bc_drop_pages(c->b[i].addr, c->b[i].cap);
    bc_keep(c, i, 1);
    c->s.evicted_bytes += c->b[i].cap;
}

/* enforce both bounds: hot bytes (cache_bytes + follow_peak room), cold bytes */
/* hot kept bytes allowed now: cache_bytes, plus with follow_peak the room under the peak */
uint64_t bc_hot_room(const struct tio_bcache *c) {
    uint64_t room = c->p.cache_bytes;
    if (c->p.follow_peak) {
        room += c->s.peak_in_use_bytes - c->s.in_use_bytes;
    }
    return room;
}

void bc_enforce(struct tio_bcache *c) {
    uint64_t room = bc_hot_room(c);
    while (c->s.hot_bytes > room && c->hot_age.head >= 0) {
        make_cold(c, c->hot_age.head);
    }
    uint64_t cold_max =
        c->s.peak_in_use_bytes > c->p.cold_bytes_min ? c->s.peak_in_use_bytes : c->p.cold_bytes_min;
    while (c->s.cold_bytes > cold_max && c->cold_age.head >= 0) {
        bc_unmap_kept(c, c->cold_age.head);
    }
}

int32_t bc_class_index(struct tio_bcache *c, uint64_t cap, int32_t unaligned, int create) {
    for (int32_t k = 0; k < c->nc; k++) {
        if (c->c[k].cap == cap && c->c[k].unaligned == unaligned) {
            return k;
        }
    }
    if (!create) {
        return -1;
    }
    if (tio_grow((void **)&c->c, &c->capc, (size_t)c->nc + 1, sizeof *c->c) < 0) {
        return tio_set_error(TIO_ENOMEM, "block cache: out of memory for %d size classes",
                             (int)c->nc + 1);
    }
    struct cls *k = &c->c[c->nc];
    k->cap = cap;
    k->unaligned = unaligned;
    k->hot.head = k->hot.tail = k->cold.head = k->cold.tail = -1;
    return c->nc++;
}

static int32_t new_slot(struct tio_bcache *c) {
    if (c->free_slot >= 0) {
        int32_t i = c->free_slot;
        c->free_slot = c->b[i].next_free;
        return i;
    }
    if (tio_grow((void **)&c->b, &c->capb, (size_t)c->nb + 1, sizeof *c->b) < 0) {
        return tio_set_error(TIO_ENOMEM, "block cache: out of memory for %d blocks",
                             (int)c->nb + 1);
    }
    return c->nb++;
}

void bc_free_slot(struct tio_bcache *c, int32_t i) {
    c->b[i].state = B_UNUSED;
    c->b[i].addr = NULL;
    c->b[i].next_free = c->free_slot;
    c->free_slot = i;
}

/* A slot for a new block (state B_UNUSED until set), the address table grown for it; -1. */
int32_t bc_reserve_slot(struct tio_bcache *c) {
    if ((uint64_t)(c->nb + 1) * 2 > c->tabn && tab_grow(c) < 0) {
        return -1;
    }
    int32_t i = new_slot(c);
    if (i >= 0) {
        memset(&c->b[i], 0, sizeof c->b[i]);
        c->b[i].state = B_UNUSED;
        c->b[i].cl.prev = c->b[i].cl.next = c->b[i].age.prev = c->b[i].age.next = -1;
    }
    return i;
}

int bc_map_new(struct tio_bcache *c, uint64_t cap, int32_t k, int32_t *out) {
    /* room under max_mapped_bytes: unmap cold blocks (oldest first), then hot ones */
    while (c->p.max_mapped_bytes && c->s.mapped_bytes + cap > c->p.max_mapped_bytes) {
        int32_t v = c->cold_age.head >= 0 ? c->cold_age.head : c->hot_age.head;
        if (v < 0) {
            uint64_t total = c->s.mapped_bytes + cap;
            return tio_set_error(TIO_ENOMEM,
                                 "block cache: a block of %llu bytes would map %llu bytes, over "
                                 "max_mapped_bytes %llu",
                                 (unsigned long long)cap, (unsigned long long)total,
                                 (unsigned long long)c->p.max_mapped_bytes);
        }
        bc_unmap_kept(c, v);
    }
    if ((uint64_t)(c->nb + 1) * 2 > c->tabn) {
        int rc = tab_grow(c);
        if (rc < 0) {
            return rc;
        }
    }
    int32_t i = new_slot(c);
    if (i < 0) {
        return i;
    }
    char *a = bc_map_block(c, cap);
    if (!a) {
        bc_free_slot(c, i);
        return tio_set_error(TIO_ENOMEM, "block cache: mmap of %llu bytes failed",
                             (unsigned long long)cap);
    }
    struct blk *b = &c->b[i];
    memset(b, 0, sizeof *b);
    b->addr = a;
    b->cap = cap;
    b->cls = k;
    b->cl.prev = b->cl.next = b->age.prev = b->age.next = -1;
    bc_tab_put(c, i);
    c->s.mapped_bytes += cap;
    c->s.blocks++;
    *out = i;
    return 0;
}
