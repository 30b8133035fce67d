/* The block cache (teraio/blockcache.h): large host blocks kept by size class, hot or cold.
 *
 * Blocks live in one array (indices, -1 = none). Three intrusive doubly linked lists thread
 * through it: per class a hot list and a cold list (LIFO: the most recently kept block is
 * reused first, its pages the likeliest to be in cache), and two global FIFOs of hot and cold
 * blocks (the oldest goes cold, or is unmapped, first). An open-addressing table (linear
 * probing, backward-shift deletion) maps a block's address to its index. One mutex. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <teraio/alloc.h>
#include <teraio/blockcache.h>

#include "../common/common_impl.h"

#define MIB        ((uint64_t)1 << 20)
#define HUGE_BYTES (2 * MIB)

enum blk_state { B_UNUSED = 0, B_IN_USE, B_HOT, B_COLD };

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
};

struct list {
    int32_t head, tail;
};

struct cls {
    uint64_t cap;
    struct list hot, cold;
};

struct tio_bcache {
    pthread_mutex_t mu;
    struct tio_bcache *reg_next; /* the registry of live caches (fork handlers) */
    struct tio_bcache_params p;
    struct blk *b;
    int32_t nb, capb, free_slot;
    struct cls *c;
    int32_t nc, capc;
    int32_t *tab;  /* block index + 1 per slot; 0 = empty */
    uint32_t tabn; /* power of two */
    struct list hot_age, cold_age;
    struct tio_bcache_stats s;
};

uint64_t tio_bcache_class_size(uint64_t bytes) {
    if (bytes == 0 || bytes > (UINT64_MAX >> 2)) {
        return 0;
    }
    uint64_t g = bytes > 16 * MIB ? HUGE_BYTES : bytes > HUGE_BYTES ? 512 * 1024 : 64 * 1024;
    return (bytes + g - 1) / g * g;
}

struct tio_bcache_params tio_bcache_params_default(void) {
    struct tio_bcache_params p;
    memset(&p, 0, sizeof p);
    p.follow_peak = 1;
    p.huge_pages = 1;
    p.cold_bytes_min = 256 * MIB;
    return p;
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

static int32_t find(const struct tio_bcache *c, const void *a) {
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

static void tab_put(struct tio_bcache *c, int32_t i) {
    uint32_t s = slot_of(c, c->b[i].addr);
    while (c->tab[s]) {
        s = (s + 1) & (c->tabn - 1);
    }
    c->tab[s] = i + 1;
}

static void tab_del(struct tio_bcache *c, const void *a) {
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
        return -ENOMEM;
    }
    tio_free(c->tab);
    c->tab = t;
    c->tabn = n;
    for (int32_t i = 0; i < c->nb; i++) {
        if (c->b[i].state != B_UNUSED) {
            tab_put(c, i);
        }
    }
    return 0;
}

/* ---- mapping --------------------------------------------------------------------------- */

static char *map_block(const struct tio_bcache *c, uint64_t cap) {
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
#if defined(MADV_HUGEPAGE)
    if (c->p.huge_pages && cap >= HUGE_BYTES) {
        (void)madvise(a, (size_t)(cap & ~(HUGE_BYTES - 1)), MADV_HUGEPAGE);
    }
#endif
    return a;
#else
    (void)c;
    (void)cap;
    return NULL;
#endif
}

static int drop_pages(char *a, uint64_t cap) {
#if defined(__linux__)
    return madvise(a, (size_t)cap, MADV_DONTNEED) == 0 ? 0 : -errno;
#else
    (void)a;
    (void)cap;
    return TIO_EUNAVAIL;
#endif
}

/* file block i as kept, hot or cold (it is on no list) */
static void keep(struct tio_bcache *c, int32_t i, int cold) {
    struct blk *b = &c->b[i];
    struct cls *k = &c->c[b->cls];
    b->state = cold ? B_COLD : B_HOT;
    push_head(c, cold ? &k->cold : &k->hot, i, 0);
    push_tail(c, cold ? &c->cold_age : &c->hot_age, i, 1);
    *(cold ? &c->s.cold_bytes : &c->s.hot_bytes) += b->cap;
}

/* take kept block i off its lists (it is then in no state until the caller sets one) */
static void unkeep(struct tio_bcache *c, int32_t i) {
    struct blk *b = &c->b[i];
    struct cls *k = &c->c[b->cls];
    int cold = b->state == B_COLD;
    unlink_from(c, cold ? &k->cold : &k->hot, i, 0);
    unlink_from(c, cold ? &c->cold_age : &c->hot_age, i, 1);
    *(cold ? &c->s.cold_bytes : &c->s.hot_bytes) -= b->cap;
}

/* unmap a kept (hot or cold) block and free its slot */
static void unmap_kept(struct tio_bcache *c, int32_t i) {
    struct blk *b = &c->b[i];
    unkeep(c, i);
    tab_del(c, b->addr);
#if defined(__linux__)
    (void)munmap(b->addr, (size_t)b->cap);
#endif
    c->s.mapped_bytes -= b->cap;
    c->s.unmapped_bytes += b->cap;
    c->s.blocks--;
    b->state = B_UNUSED;
    b->addr = NULL;
    b->next_free = c->free_slot;
    c->free_slot = i;
}

static void make_cold(struct tio_bcache *c, int32_t i) {
    unkeep(c, i);
    (void)drop_pages(c->b[i].addr, c->b[i].cap);
    keep(c, i, 1);
    c->s.evicted_bytes += c->b[i].cap;
}

/* enforce both bounds: hot bytes (cache_bytes + follow_peak room), cold bytes */
static void enforce(struct tio_bcache *c) {
    uint64_t room = c->p.cache_bytes;
    if (c->p.follow_peak) {
        room += c->s.peak_in_use_bytes - c->s.in_use_bytes;
    }
    while (c->s.hot_bytes > room && c->hot_age.head >= 0) {
        make_cold(c, c->hot_age.head);
    }
    uint64_t cold_max =
        c->s.peak_in_use_bytes > c->p.cold_bytes_min ? c->s.peak_in_use_bytes : c->p.cold_bytes_min;
    while (c->s.cold_bytes > cold_max && c->cold_age.head >= 0) {
        unmap_kept(c, c->cold_age.head);
    }
}

static int32_t class_index(struct tio_bcache *c, uint64_t cap, int create) {
    for (int32_t k = 0; k < c->nc; k++) {
        if (c->c[k].cap == cap) {
            return k;
        }
    }
    if (!create) {
        return -1;
    }
    if (c->nc == c->capc) {
        int32_t n = c->capc ? c->capc * 2 : 16;
        struct cls *x = tio_realloc(c->c, (size_t)n * sizeof *x);
        if (!x) {
            return -ENOMEM;
        }
        c->c = x;
        c->capc = n;
    }
    struct cls *k = &c->c[c->nc];
    k->cap = cap;
    k->hot.head = k->hot.tail = k->cold.head = k->cold.tail = -1;
    return c->nc++;
}

static int32_t new_slot(struct tio_bcache *c) {
    if (c->free_slot >= 0) {
        int32_t i = c->free_slot;
        c->free_slot = c->b[i].next_free;
        return i;
    }
    if (c->nb == c->capb) {
        int32_t n = c->capb ? c->capb * 2 : 64;
        struct blk *x = tio_realloc(c->b, (size_t)n * sizeof *x);
        if (!x) {
            return -ENOMEM;
        }
        c->b = x;
        c->capb = n;
    }
    return c->nb++;
}

/* ---- fork ------------------------------------------------------------------------------
 * A process that forks while another thread holds a cache's lock (PyTorch allocating on an
 * intra-op thread while a DataLoader forks its workers) would hand the child a lock nobody will
 * release, and the child's first allocation would hang. The handlers take every live cache's
 * lock around fork(), as malloc implementations do. Lock order: registry, then caches. */

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct tio_bcache *reg_head;
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void) {
    pthread_mutex_lock(&reg_mu);
    for (struct tio_bcache *c = reg_head; c; c = c->reg_next) {
        pthread_mutex_lock(&c->mu);
    }
}

static void fork_release(void) {
    for (struct tio_bcache *c = reg_head; c; c = c->reg_next) {
        pthread_mutex_unlock(&c->mu);
    }
    pthread_mutex_unlock(&reg_mu);
}

static void reg_init(void) {
    (void)pthread_atfork(fork_prepare, fork_release, fork_release);
}

/* ---- public ---------------------------------------------------------------------------- */

int tio_bcache_new(const struct tio_bcache_params *params, struct tio_bcache **out) {
    if (!out) {
        return -EINVAL;
    }
    *out = NULL;
#if !defined(__linux__)
    (void)params;
    return TIO_EUNAVAIL;
#else
    struct tio_bcache *c = tio_calloc(1, sizeof *c);
    if (!c) {
        return -ENOMEM;
    }
    c->p = params ? *params : tio_bcache_params_default();
    c->free_slot = -1;
    c->hot_age.head = c->hot_age.tail = c->cold_age.head = c->cold_age.tail = -1;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        tio_free(c);
        return -ENOMEM;
    }
    (void)pthread_once(&reg_once, reg_init);
    pthread_mutex_lock(&reg_mu);
    c->reg_next = reg_head;
    reg_head = c;
    pthread_mutex_unlock(&reg_mu);
    *out = c;
    return 0;
#endif
}

void tio_bcache_free(struct tio_bcache *c) {
    if (!c) {
        return;
    }
    pthread_mutex_lock(&reg_mu);
    for (struct tio_bcache **pp = &reg_head; *pp; pp = &(*pp)->reg_next) {
        if (*pp == c) {
            *pp = c->reg_next;
            break;
        }
    }
    pthread_mutex_unlock(&reg_mu);
#if defined(__linux__)
    for (int32_t i = 0; i < c->nb; i++) {
        if (c->b[i].state != B_UNUSED) {
            (void)munmap(c->b[i].addr, (size_t)c->b[i].cap);
        }
    }
#endif
    pthread_mutex_destroy(&c->mu);
    tio_free(c->b);
    tio_free(c->c);
    tio_free(c->tab);
    tio_free(c);
}

/* pop a kept block of class k, hot first; -1 if none */
static int32_t take_kept(struct tio_bcache *c, struct cls *k) {
    int32_t i = k->hot.head >= 0 ? k->hot.head : k->cold.head;
    if (i >= 0) {
        (*(c->b[i].state == B_HOT ? &c->s.hot_hits : &c->s.cold_hits))++;
        unkeep(c, i);
    }
    return i;
}

static int map_new(struct tio_bcache *c, uint64_t cap, int32_t k, int32_t *out) {
    /* room under max_mapped_bytes: unmap cold blocks (oldest first), then hot ones */
    while (c->p.max_mapped_bytes && c->s.mapped_bytes + cap > c->p.max_mapped_bytes) {
        int32_t v = c->cold_age.head >= 0 ? c->cold_age.head : c->hot_age.head;
        if (v < 0) {
            return -ENOMEM;
        }
        unmap_kept(c, v);
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
    char *a = map_block(c, cap);
    if (!a) {
        c->b[i].state = B_UNUSED;
        c->b[i].next_free = c->free_slot;
        c->free_slot = i;
        return -ENOMEM;
    }
    struct blk *b = &c->b[i];
    memset(b, 0, sizeof *b);
    b->addr = a;
    b->cap = cap;
    b->cls = k;
    b->cl.prev = b->cl.next = b->age.prev = b->age.next = -1;
    tab_put(c, i);
    c->s.mapped_bytes += cap;
    c->s.maps++;
    c->s.blocks++;
    *out = i;
    return 0;
}

int tio_bcache_alloc(struct tio_bcache *c, uint64_t bytes, void **out) {
    if (!c || !out) {
        return -EINVAL;
    }
    *out = NULL;
    uint64_t cap = tio_bcache_class_size(bytes);
    if (!cap || cap > SIZE_MAX / 2) {
        return -EINVAL;
    }
    pthread_mutex_lock(&c->mu);
    int rc = 0;
    int32_t k = class_index(c, cap, 1);
    if (k < 0) {
        rc = k;
        goto out;
    }
    int32_t i = take_kept(c, &c->c[k]);
    if (i < 0) {
        rc = map_new(c, cap, k, &i);
        if (rc < 0) {
            goto out;
        }
    }
    c->b[i].state = B_IN_USE;
    c->b[i].discarded = 0;
    c->s.in_use_bytes += cap;
    if (c->s.in_use_bytes > c->s.peak_in_use_bytes) {
        c->s.peak_in_use_bytes = c->s.in_use_bytes;
    }
    c->s.allocs++;
    *out = c->b[i].addr;
    enforce(c);
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* the index of the in-use block starting at p, or -1 (caller holds the lock) */
static int32_t find_in_use(const struct tio_bcache *c, const void *p) {
    int32_t i = p ? find(c, p) : -1;
    return i >= 0 && c->b[i].state == B_IN_USE ? i : -1;
}

int tio_bcache_release(struct tio_bcache *c, void *p) {
    if (!c) {
        return -ENOENT;
    }
    pthread_mutex_lock(&c->mu);
    int32_t i = find_in_use(c, p);
    if (i >= 0) {
        c->s.in_use_bytes -= c->b[i].cap;
        /* a block whose pages were discarded since it was handed out has nothing resident
         * worth keeping hot: it goes cold at once (its pages are already gone) */
        keep(c, i, c->b[i].discarded);
        enforce(c);
    }
    pthread_mutex_unlock(&c->mu);
    return i >= 0 ? 0 : -ENOENT;
}

int tio_bcache_discard(struct tio_bcache *c, void *p) {
    if (!c) {
        return -ENOENT;
    }
    pthread_mutex_lock(&c->mu);
    int32_t i = find_in_use(c, p);
    int rc = i >= 0 ? drop_pages(c->b[i].addr, c->b[i].cap) : -ENOENT;
    if (rc == 0) {
        c->b[i].discarded = 1; /* cold on release */
        c->s.discarded_bytes += c->b[i].cap;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

uint64_t tio_bcache_block_size(struct tio_bcache *c, const void *p) {
    if (!c) {
        return 0;
    }
    pthread_mutex_lock(&c->mu);
    int32_t i = find_in_use(c, p);
    uint64_t n = i >= 0 ? c->b[i].cap : 0;
    pthread_mutex_unlock(&c->mu);
    return n;
}

void tio_bcache_set_bounds(struct tio_bcache *c, uint64_t cache_bytes, int32_t follow_peak) {
    if (!c) {
        return;
    }
    pthread_mutex_lock(&c->mu);
    c->p.cache_bytes = cache_bytes;
    c->p.follow_peak = follow_peak;
    c->s.peak_in_use_bytes = c->s.in_use_bytes;
    enforce(c);
    pthread_mutex_unlock(&c->mu);
}

uint64_t tio_bcache_trim(struct tio_bcache *c) {
    if (!c) {
        return 0;
    }
    pthread_mutex_lock(&c->mu);
    uint64_t before = c->s.unmapped_bytes;
    while (c->cold_age.head >= 0) {
        unmap_kept(c, c->cold_age.head);
    }
    while (c->hot_age.head >= 0) {
        unmap_kept(c, c->hot_age.head);
    }
    uint64_t n = c->s.unmapped_bytes - before;
    pthread_mutex_unlock(&c->mu);
    return n;
}

void tio_bcache_stats(struct tio_bcache *c, struct tio_bcache_stats *out) {
    if (!out) {
        return;
    }
    memset(out, 0, sizeof *out);
    if (!c) {
        return;
    }
    pthread_mutex_lock(&c->mu);
    *out = c->s;
    pthread_mutex_unlock(&c->mu);
}
