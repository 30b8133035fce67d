/* The block cache: a request served from hot kept blocks of other size classes
 * (bc_take_resized, bcache_impl.h). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <teraio/alloc.h>

#include "../common/common_impl.h"
#include "bcache_impl.h"

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

/* Slot t (on no list, in no table) takes [from, cap) of block src (a copy: t may be src's own
 * slot) with src's cuts inside that range, kept hot in its class (an unaligned one unless it
 * starts on a 2 MiB boundary); if no class can be made, the range is unmapped and t freed. */
static void keep_tail(struct tio_bcache *c, int32_t t, const struct blk *src, uint64_t from) {
    char *a = src->addr + from;
    uint64_t len = src->cap - from;
    int32_t tk = bc_class_index(c, len, !bc_aligned_2m(a), 1);
    if (tk < 0) {
#if defined(__linux__)
        (void)munmap(a, (size_t)len);
#endif
        c->s.mapped_bytes -= len;
        c->s.unmapped_bytes += len;
        bc_free_slot(c, t);
        return;
    }
    struct blk *b = &c->b[t];
    b->addr = a;
    b->cap = len;
    b->cls = tk;
    b->ncut = src->ncut;
    memcpy(b->cut, src->cut, sizeof b->cut);
    cuts_window(b, from, src->cap);
    bc_tab_put(c, t);
    c->s.blocks++;
    bc_keep(c, t, 0);
}

/* Hot kept block i gave its first `len` bytes away (moved): the rest, if any, stays hot in the
 * same slot (keep_tail); nothing left: the slot is freed. */
static void shrink_front(struct tio_bcache *c, int32_t i, uint64_t len) {
    bc_unkeep(c, i);
    struct blk src = c->b[i];
    bc_tab_del(c, src.addr);
    c->s.blocks--;
    if (len < src.cap) {
        keep_tail(c, i, &src, len);
    } else {
        bc_free_slot(c, i);
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
int32_t bc_take_resized(struct tio_bcache *c, int32_t k) {
    const uint64_t cap = c->c[k].cap;
    int32_t h = best_hot(c, k, cap);
    if (h < 0) {
        return -1;
    }
    if (c->b[h].cap >= cap && bc_aligned_2m(c->b[h].addr)) { /* split in place */
        int32_t t = c->b[h].cap > cap ? bc_reserve_slot(c) : -1;
        if (c->b[h].cap > cap && t < 0) {
            return -1;
        }
        bc_unkeep(c, h);
        struct blk src = c->b[h];
        bc_tab_del(c, src.addr);
        struct blk *b = &c->b[h];
        b->cap = cap;
        b->cls = k;
        cuts_window(b, 0, cap);
        bc_tab_put(c, h);
        if (t >= 0) { /* the tail: the old block past cap, with its cuts */
            keep_tail(c, t, &src, cap);
        }
        c->s.resized_hits++;
        return h;
    }
    int32_t d = bc_reserve_slot(c);
    char *dst = d >= 0 ? bc_map_block(c, cap) : NULL; /* the aligned destination */
    if (!dst) {
        if (d >= 0) {
            bc_free_slot(c, d);
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
        bc_free_slot(c, d);
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
    bc_tab_put(c, d);
    c->s.blocks++;
    c->s.mapped_bytes += cap;
    c->s.grown_bytes += cap - off;
    c->s.faulting_bytes += cap - off;
    c->s.resized_hits++;
    bc_advise_huge(c, dst, cap); /* moved pieces keep their old mapping's advice, maybe none */
    return d;
}
