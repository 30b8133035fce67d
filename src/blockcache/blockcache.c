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

static int aligned_2m(const void *p) {
    return ((uintptr_t)p & (HUGE_BYTES - 1)) == 0;
}

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
    p.resize_kept = 1;
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

static void advise_huge(const struct tio_bcache *c, char *a, uint64_t cap) {
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
    advise_huge(c, a, cap);
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
    if (c->c[c->b[i].cls].unaligned) { /* a cold tail would have to move anyway: unmap it */
        c->s.evicted_bytes += c->b[i].cap;
        unmap_kept(c, i);
        return;
    }
    unkeep(c, i);
    (void)drop_pages(c->b[i].addr, c->b[i].cap);
    keep(c, i, 1);
    c->s.evicted_bytes += c->b[i].cap;
}

/* enforce both bounds: hot bytes (cache_bytes + follow_peak room), cold bytes */
/* hot kept bytes allowed now: cache_bytes, plus with follow_peak the room under the peak */
static uint64_t hot_room(const struct tio_bcache *c) {
    uint64_t room = c->p.cache_bytes;
    if (c->p.follow_peak) {
        room += c->s.peak_in_use_bytes - c->s.in_use_bytes;
    }
    return room;
}

static void enforce(struct tio_bcache *c) {
    uint64_t room = hot_room(c);
    while (c->s.hot_bytes > room && c->hot_age.head >= 0) {
        make_cold(c, c->hot_age.head);
    }
    uint64_t cold_max =
        c->s.peak_in_use_bytes > c->p.cold_bytes_min ? c->s.peak_in_use_bytes : c->p.cold_bytes_min;
    while (c->s.cold_bytes > cold_max && c->cold_age.head >= 0) {
        unmap_kept(c, c->cold_age.head);
    }
}

static int32_t class_index(struct tio_bcache *c, uint64_t cap, int32_t unaligned, int create) {
    for (int32_t k = 0; k < c->nc; k++) {
        if (c->c[k].cap == cap && c->c[k].unaligned == unaligned) {
            return k;
        }
    }
    if (!create) {
        return -1;
    }
    if (tio_grow((void **)&c->c, &c->capc, (size_t)c->nc + 1, sizeof *c->c) < 0) {
        return -ENOMEM;
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
        return -ENOMEM;
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

static int map_new(struct tio_bcache *c, uint64_t cap, int32_t k, int32_t *out);

/* The child has no prefault thread, and starts none: it inherited the parent's peak, and a
 * DataLoader worker prefaulting up to its parent's peak would multiply the memory. A block the
 * parent was faulting in is kept cold (its pages, if any, are zeros). */
static void fork_child(void) {
    for (struct tio_bcache *c = reg_head; c; c = c->reg_next) {
        c->thr_started = 0;
        c->stop = 0;
        c->p.prefault = 0;
        (void)pthread_cond_init(&c->cv, NULL);
        for (int32_t i = 0; i < c->nb; i++) {
            if (c->b[i].state == B_PREFAULT) {
                c->s.prefaulting_bytes -= c->b[i].cap;
                keep(c, i, 1);
            }
        }
    }
    fork_release();
}

static void reg_init(void) {
    (void)pthread_atfork(fork_prepare, fork_release, fork_child);
}

/* ---- prefault --------------------------------------------------------------------------
 * While hot bytes (and those being faulted in) are below the bound, the thread maps a block of
 * the room (2 MiB to PREFAULT_MAX), faults its pages in outside the lock, 2 MiB at a time, and
 * keeps it hot. An allocation then finds resident memory (by class or resized) instead of
 * faulting in its own: the kernel's zeroing moves to the thread's core. If live use takes the
 * room while a block is being faulted in, the block's pages go back at once (it is kept cold):
 * the resident memory goes over the bound by at most 2 MiB, for that moment. */

static void populate(char *a, uint64_t n) {
#if defined(__linux__)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
    if (madvise(a, (size_t)n, MADV_POPULATE_WRITE) == 0) {
        return;
    }
    for (uint64_t off = 0; off < n; off += 4096) { /* older kernels: touch every page */
        ((volatile char *)a)[off] = 0;
    }
#else
    (void)a;
    (void)n;
#endif
}

static void *prefault_main(void *arg) {
    struct tio_bcache *c = arg;
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        uint64_t room = hot_room(c), have = c->s.hot_bytes + c->s.prefaulting_bytes;
        uint64_t want = room > have ? room - have : 0;
        want = want > PREFAULT_MAX ? PREFAULT_MAX : want & ~(HUGE_BYTES - 1);
        int32_t k = want ? class_index(c, want, 0, 1) : -1, i = -1;
        if (!c->p.prefault || k < 0 ||
            (c->p.max_mapped_bytes && c->s.mapped_bytes + want > c->p.max_mapped_bytes) ||
            map_new(c, want, k, &i) < 0) {
            pthread_cond_wait(&c->cv, &c->mu);
            continue;
        }
        c->b[i].state = B_PREFAULT;
        c->s.prefaulting_bytes += want;
        char *a = c->b[i].addr;
        uint64_t done = 0;
        int over = 0;
        while (done < want && !over) { /* 2 MiB at a time, the room checked after each */
            pthread_mutex_unlock(&c->mu);
            populate(a + done, HUGE_BYTES);
            pthread_mutex_lock(&c->mu);
            done += HUGE_BYTES;
            /* live use took the room meanwhile: what is resident would go over the bound */
            over = c->stop || !c->p.prefault || c->s.hot_bytes + done > hot_room(c);
        }
        c->s.prefaulting_bytes -= want;
        if (over) { /* its pages go back at once: kept cold */
            (void)drop_pages(a, want);
            keep(c, i, 1);
            enforce(c);
            continue;
        }
        c->s.prefaulted_bytes += want;
        keep(c, i, 0);
        enforce(c);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* wake the prefault thread, starting it the first time (caller holds the lock) */
static void prefault_kick(struct tio_bcache *c) {
    if (!c->p.prefault || c->stop) {
        return;
    }
    if (!c->thr_started) {
        if (pthread_create(&c->thr, NULL, prefault_main, c) != 0) {
            return; /* no thread: the cache works without prefaulting */
        }
#if defined(__linux__) && defined(__GLIBC__)
        (void)pthread_setname_np(c->thr, "tio-prefault");
#endif
        c->thr_started = 1;
    }
    pthread_cond_signal(&c->cv);
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
    if (pthread_cond_init(&c->cv, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
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
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    int started = c->thr_started;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (started) {
        (void)pthread_join(c->thr, NULL);
    }
#if defined(__linux__)
    for (int32_t i = 0; i < c->nb; i++) {
        if (c->b[i].state != B_UNUSED) {
            (void)munmap(c->b[i].addr, (size_t)c->b[i].cap);
        }
    }
#endif
    pthread_cond_destroy(&c->cv);
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

/* ---- resizing: class k's request served from hot kept blocks of other classes ------------
 * A block may span several kernel mappings (VMAs): one made by moving pieces of other blocks
 * into it does. mremap(2) moves only a range within one VMA, so each block records where a VMA
 * may begin inside it (cut[]); its pieces move one by one. The list may hold more cuts than
 * there are VMAs (the kernel can merge), never fewer: every operation that makes a boundary
 * inside a block records it. */

static uint32_t cut_units(uint64_t off) {
    return (uint32_t)(off / CUT_UNIT);
}

/* Keep only block i's cuts in (lo, hi), shifted by -lo. */
static void cuts_window(struct blk *b, uint64_t lo, uint64_t hi) {
    int32_t n = 0;
    for (int32_t j = 0; j < b->ncut; j++) {
        uint64_t off = (uint64_t)b->cut[j] * CUT_UNIT;
        if (off > lo && off < hi) {
            b->cut[n++] = cut_units(off - lo);
        }
    }
    b->ncut = n;
}

/* Cuts of block b inside [0, len) (the pieces of that range, less one). */
static int32_t cuts_below(const struct blk *b, uint64_t len) {
    int32_t n = 0;
    while (n < b->ncut && (uint64_t)b->cut[n] * CUT_UNIT < len) {
        n++;
    }
    return n;
}

/* Move [0, len) of block b to dst, piece by piece; the bytes moved (a prefix: len unless an
 * mremap failed). */
static uint64_t move_prefix(const struct blk *b, uint64_t len, char *dst) {
    uint64_t off = 0;
    for (int32_t j = 0; off < len; j++) {
        uint64_t end = j < b->ncut ? (uint64_t)b->cut[j] * CUT_UNIT : len;
        end = end < len ? end : len;
#if defined(__linux__) && defined(MREMAP_FIXED)
        if (mremap(b->addr + off, (size_t)(end - off), (size_t)(end - off),
                   MREMAP_MAYMOVE | MREMAP_FIXED, dst + off) == MAP_FAILED) {
            break;
        }
#else
        (void)dst;
        break;
#endif
        off = end;
    }
    return off;
}

/* The hot block that best serves `need` bytes among the other classes than k: the smallest that
 * holds them, else the largest. -1 if none. */
static int32_t best_hot(const struct tio_bcache *c, int32_t k, uint64_t need) {
    int32_t ge = -1, lt = -1;
    uint64_t ge_cap = UINT64_MAX, lt_cap = 0;
    for (int32_t j = 0; j < c->nc; j++) {
        uint64_t y = c->c[j].cap;
        if (j == k || c->c[j].hot.head < 0) {
            continue;
        }
        if (y >= need && y < ge_cap) {
            ge_cap = y;
            ge = c->c[j].hot.head;
        } else if (y < need && y > lt_cap) {
            lt_cap = y;
            lt = c->c[j].hot.head;
        }
    }
    return ge >= 0 ? ge : lt;
}

static void free_slot(struct tio_bcache *c, int32_t i) {
    c->b[i].state = B_UNUSED;
    c->b[i].addr = NULL;
    c->b[i].next_free = c->free_slot;
    c->free_slot = i;
}

/* A slot for a new block (state B_UNUSED until set), the address table grown for it; -1. */
static int32_t reserve_slot(struct tio_bcache *c) {
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

/* Slot t (on no list, in no table) takes [from, cap) of block src (a copy: t may be src's own
 * slot) with src's cuts inside that range, kept hot in its class (an unaligned one unless it
 * starts on a 2 MiB boundary); if no class can be made, the range is unmapped and t freed. */
static void keep_tail(struct tio_bcache *c, int32_t t, const struct blk *src, uint64_t from) {
    char *a = src->addr + from;
    uint64_t len = src->cap - from;
    int32_t tk = class_index(c, len, !aligned_2m(a), 1);
    if (tk < 0) {
#if defined(__linux__)
        (void)munmap(a, (size_t)len);
#endif
        c->s.mapped_bytes -= len;
        c->s.unmapped_bytes += len;
        free_slot(c, t);
        return;
    }
    struct blk *b = &c->b[t];
    b->addr = a;
    b->cap = len;
    b->cls = tk;
    b->ncut = src->ncut;
    memcpy(b->cut, src->cut, sizeof b->cut);
    cuts_window(b, from, src->cap);
    tab_put(c, t);
    c->s.blocks++;
    keep(c, t, 0);
}

/* Hot kept block i gave its first `len` bytes away (moved): the rest, if any, stays hot in the
 * same slot (keep_tail); nothing left: the slot is freed. */
static void shrink_front(struct tio_bcache *c, int32_t i, uint64_t len) {
    unkeep(c, i);
    struct blk src = c->b[i];
    tab_del(c, src.addr);
    c->s.blocks--;
    if (len < src.cap) {
        keep_tail(c, i, &src, len);
    } else {
        free_slot(c, i);
    }
}

/* Class k's request served from hot kept blocks of other classes; -1 if there are none or the
 * first system call failed (nothing changed then).
 *   - The smallest hot block that holds the request, if it is 2 MiB-aligned, is split in place:
 *     no system call; its tail stays hot.
 *   - Otherwise a new aligned mapping of the request's size is filled from hot blocks (the
 *     smallest that holds what is missing, else the largest, and so on), their pages moved
 *     with mremap: what is resident stays resident. Only what no hot block covered faults in
 *     (grown_bytes). A block that gave only its head keeps its tail hot. */
static int32_t take_resized(struct tio_bcache *c, int32_t k) {
    const uint64_t cap = c->c[k].cap;
    int32_t h = best_hot(c, k, cap);
    if (h < 0) {
        return -1;
    }
    if (c->b[h].cap >= cap && aligned_2m(c->b[h].addr)) { /* split in place */
        int32_t t = c->b[h].cap > cap ? reserve_slot(c) : -1;
        if (c->b[h].cap > cap && t < 0) {
            return -1;
        }
        unkeep(c, h);
        struct blk src = c->b[h];
        tab_del(c, src.addr);
        struct blk *b = &c->b[h];
        b->cap = cap;
        b->cls = k;
        cuts_window(b, 0, cap);
        tab_put(c, h);
        if (t >= 0) { /* the tail: the old block past cap, with its cuts */
            keep_tail(c, t, &src, cap);
        }
        c->s.resized_hits++;
        return h;
    }
    int32_t d = reserve_slot(c);
    char *dst = d >= 0 ? map_block(c, cap) : NULL; /* the aligned destination */
    if (!dst) {
        if (d >= 0) {
            free_slot(c, d);
        }
        return -1;
    }
    uint32_t cut[MAX_CUTS];
    int32_t ncut = 0;
    uint64_t off = 0;
    while (off < cap && (h = best_hot(c, k, cap - off)) >= 0) {
        struct blk *b = &c->b[h];
        uint64_t take = b->cap < cap - off ? b->cap : cap - off;
        int32_t inner = cuts_below(b, take);
        if (ncut + (off > 0) + inner + (off + take < cap) > MAX_CUTS) {
            break; /* too many pieces: the rest faults in */
        }
        uint64_t moved = move_prefix(b, take, dst + off);
        if (!moved) {
            break;
        }
        if (off > 0) {
            cut[ncut++] = cut_units(off);
        }
        for (int32_t j = 0; j < inner && (uint64_t)b->cut[j] * CUT_UNIT < moved; j++) {
            cut[ncut++] = cut_units(off + (uint64_t)b->cut[j] * CUT_UNIT);
        }
        c->s.mapped_bytes -= moved;
        off += moved;
        shrink_front(c, h, moved); /* what is left of block h stays hot */
        if (moved < take) {
            break;
        }
    }
    if (off == 0) {
#if defined(__linux__)
        (void)munmap(dst, (size_t)cap);
#endif
        free_slot(c, d);
        return -1;
    }
    if (off < cap) {
        cut[ncut++] = cut_units(off); /* the fresh rest of the destination */
    }
    struct blk *nb = &c->b[d];
    nb->addr = dst;
    nb->cap = cap;
    nb->cls = k;
    nb->ncut = ncut;
    memcpy(nb->cut, cut, (size_t)ncut * sizeof cut[0]);
    tab_put(c, d);
    c->s.blocks++;
    c->s.mapped_bytes += cap;
    c->s.grown_bytes += cap - off;
    c->s.faulting_bytes += cap - off;
    c->s.resized_hits++;
    advise_huge(c, dst, cap); /* moved pieces keep their old mapping's advice, maybe none */
    return d;
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
    char *slack = NULL; /* resident pages past what was asked for, handed back below */
    uint64_t slack_len = 0;
    pthread_mutex_lock(&c->mu);
    int rc = 0;
    int32_t k = class_index(c, cap, 0, 1);
    if (k < 0) {
        rc = k;
        goto out;
    }
    /* a hot block of the class; else a hot one of another class, resized (only the growth
     * faults in); else a cold one of the class or a new mapping (every page faults in) */
    int32_t i = c->c[k].hot.head >= 0 ? take_kept(c, &c->c[k]) : -1;
    if (i < 0 && c->p.resize_kept) {
        i = take_resized(c, k);
    }
    if (i >= 0) {
        uint64_t used = (bytes + SLACK_MIN - 1) / SLACK_MIN * SLACK_MIN;
        if (used < cap) {
            slack = c->b[i].addr + used;
            slack_len = cap - used;
        }
    } else {
        i = take_kept(c, &c->c[k]);
        if (i < 0) {
            rc = map_new(c, cap, k, &i);
            if (rc < 0) {
                goto out;
            }
            c->s.maps++;
        }
        c->s.faulting_bytes += cap;
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
    /* A resident block larger than the request (its class's rounding, a split or a prefaulted
     * block) would keep pages nobody touches: the peak rule counts capacity, so the process
     * would sit above what its tensors use. The block is the caller's now: no lock needed. */
    if (slack_len) {
        (void)drop_pages(slack, slack_len);
    }
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
        prefault_kick(c);
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

void tio_bcache_set_prefault(struct tio_bcache *c, int32_t on) {
    if (!c) {
        return;
    }
    pthread_mutex_lock(&c->mu);
    c->p.prefault = on != 0;
    prefault_kick(c);
    pthread_mutex_unlock(&c->mu);
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
    prefault_kick(c);
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
