/*
 * The executor's live sets (executor_impl.h): which tensors wait for their read, hold a completed
 * offload, have an offload in flight, have bytes landing, are in memory beside a host-tier copy,
 * and which a demand offload could take, by next use. tio_rt_touch() keeps them current as a tensor
 * changes, so that no per-kernel path scans the tensor table: a kernel costs work in proportion to
 * what happens at it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <teraio/alloc_internal.h>

#include "../analysis/liveness.h"
#include "../common/common_impl.h"
#include "executor_impl.h"

#define NONE UINT32_MAX

int tio_rt_sets_alloc(struct tio_runtime *rt) {
    size_t nt = rt->v.n_tensors ? rt->v.n_tensors : 1;
    rt->member = tio_calloc(nt, 1);
    rt->set_item = tio_malloc(TIO_RT_NSETS * nt * sizeof *rt->set_item);
    rt->set_pos = tio_malloc(TIO_RT_NSETS * nt * sizeof *rt->set_pos);
    rt->heap = tio_malloc(nt * sizeof *rt->heap);
    rt->hpos = tio_malloc(nt * sizeof *rt->hpos);
    rt->stash = tio_malloc(nt * sizeof *rt->stash);
    rt->scratch = tio_malloc(nt * sizeof *rt->scratch);
    if (!rt->member || !rt->set_item || !rt->set_pos || !rt->heap || !rt->hpos || !rt->stash ||
        !rt->scratch) {
        return TIO_ENOMEM;
    }
    memset(rt->set_pos, 0xff, TIO_RT_NSETS * nt * sizeof *rt->set_pos);
    memset(rt->hpos, 0xff, nt * sizeof *rt->hpos);
    return 0;
}

void tio_rt_sets_free(struct tio_runtime *rt) {
    tio_free(rt->member);
    tio_free(rt->set_item);
    tio_free(rt->set_pos);
    tio_free(rt->heap);
    tio_free(rt->hpos);
    tio_free(rt->stash);
    tio_free(rt->scratch);
}

/* ---- unordered sets: insert and remove in O(1) ---------------------------------------- */

static uint32_t *items(struct tio_runtime *rt, int s) {
    return rt->set_item + (size_t)s * rt->v.n_tensors;
}

static uint32_t *positions(struct tio_runtime *rt, int s) {
    return rt->set_pos + (size_t)s * rt->v.n_tensors;
}

static void set_put(struct tio_runtime *rt, int s, uint32_t t, int in) {
    uint32_t *item = items(rt, s), *pos = positions(rt, s);
    if (in) {
        pos[t] = rt->set_n[s];
        item[rt->set_n[s]++] = t;
        return;
    }
    uint32_t i = pos[t], last = item[--rt->set_n[s]];
    item[i] = last;
    pos[last] = i;
    pos[t] = NONE;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

size_t tio_rt_set_sorted(struct tio_runtime *rt, int s, const uint32_t **out) {
    size_t n = rt->set_n[s];
    memcpy(rt->scratch, items(rt, s), n * sizeof *rt->scratch);
    if (n > 1) {
        qsort(rt->scratch, n, sizeof *rt->scratch, cmp_u32);
    }
    *out = rt->scratch;
    return n;
}

/* ---- the demand-offload victims: a heap, best victim on top ----------------------------- */

uint64_t tio_rt_next_use_distance(const struct tio_runtime *rt, uint32_t t) {
    if (rt->cursor[t] != TIO_NEVER_USED) {
        return rt->cursor[t];
    }
    if (rt->tflags[t] & TF_GLOBAL) { /* next iteration */
        return rt->first_real[t] == TIO_NEVER_USED ? UINT64_MAX - 1
                                                   : rt->v.n_kernels + rt->first_real[t];
    }
    return UINT64_MAX; /* only its free marker is left: never read again in this iteration */
}

/* a is the better victim than b: the furthest next use, then the larger, then the lower id (the
 * order in which a scan of the table in id order keeps the first of equals). */
static int better(const struct tio_runtime *rt, uint32_t a, uint32_t b) {
    uint64_t da = tio_rt_next_use_distance(rt, a), db = tio_rt_next_use_distance(rt, b);
    if (da != db) {
        return da > db;
    }
    uint64_t ba = rt->v.tensor_bytes[a], bb = rt->v.tensor_bytes[b];
    if (ba != bb) {
        return ba > bb;
    }
    return a < b;
}

static void heap_set(struct tio_runtime *rt, uint32_t i, uint32_t t) {
    rt->heap[i] = t;
    rt->hpos[t] = i;
}

static void sift_up(struct tio_runtime *rt, uint32_t i) {
    uint32_t t = rt->heap[i];
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (!better(rt, t, rt->heap[p])) {
            break;
        }
        heap_set(rt, i, rt->heap[p]);
        i = p;
    }
    heap_set(rt, i, t);
}

static void sift_down(struct tio_runtime *rt, uint32_t i) {
    uint32_t n = rt->heap_n, t = rt->heap[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= n) {
            break;
        }
        if (c + 1 < n && better(rt, rt->heap[c + 1], rt->heap[c])) {
            c++;
        }
        if (!better(rt, rt->heap[c], t)) {
            break;
        }
        heap_set(rt, i, rt->heap[c]);
        i = c;
    }
    heap_set(rt, i, t);
}

static void heap_insert(struct tio_runtime *rt, uint32_t t) {
    heap_set(rt, rt->heap_n++, t);
    sift_up(rt, rt->heap_n - 1);
}

static void heap_remove(struct tio_runtime *rt, uint32_t t) {
    uint32_t i = rt->hpos[t], last = rt->heap[--rt->heap_n];
    rt->hpos[t] = NONE;
    if (i == rt->heap_n) {
        return;
    }
    heap_set(rt, i, last);
    sift_up(rt, i);
    sift_down(rt, rt->hpos[last]);
}

void tio_rt_cursor_moved(struct tio_runtime *rt, uint32_t t) {
    uint32_t i = rt->hpos[t];
    if (i != NONE) {
        sift_up(rt, i);
        sift_down(rt, rt->hpos[t]);
    }
}

void tio_rt_victims_rekey(struct tio_runtime *rt) {
    for (uint32_t i = rt->heap_n / 2; i-- > 0;) {
        sift_down(rt, i);
    }
}

#if !defined(NDEBUG) || defined(TIO_SANITIZED)
/* Debug and sanitizer builds: the victim a scan of the whole table in id order picks, from the
 * tensors' states (not their membership), keeping the first of equals. */
static uint32_t scan_best_victim(const struct tio_runtime *rt, uint64_t k) {
    uint32_t best = NONE;
    uint64_t best_d = 0;
    for (uint32_t t = 0; t < rt->v.n_tensors; t++) {
        uint8_t s = rt->state[t];
        uint32_t f = rt->tflags[t];
        int fresh = s == ST_MATERIALIZE && !rt->ptr[t] && !(f & TF_URGENT);
        if (((s != ST_RESIDENT || !rt->ptr[t]) && !fresh) || (f & TF_PINNED) ||
            rt->v.tensor_bytes[t] == 0 || rt->cursor[t] == k) {
            continue;
        }
        uint64_t d = tio_rt_next_use_distance(rt, t);
        if (best == NONE || d > best_d ||
            (d == best_d && rt->v.tensor_bytes[t] > rt->v.tensor_bytes[best])) {
            best = t;
            best_d = d;
        }
    }
    return best;
}
#endif

uint32_t tio_rt_best_victim(struct tio_runtime *rt, uint64_t k) {
    uint32_t best = NONE;
    while (rt->heap_n > 0) {
        uint32_t t = rt->heap[0];
        if (rt->cursor[t] != k) {
            best = t;
            break;
        }
        /* kernel k uses it: not a victim now; set aside (still a member) until unstash */
        heap_remove(rt, t);
        rt->stash[rt->stash_n++] = t;
    }
#if !defined(NDEBUG) || defined(TIO_SANITIZED)
    if (best != scan_best_victim(rt, k)) {
        (void)fprintf(stderr, "runtime: victim heap picked tensor %u, a scan %u\n", best,
                      scan_best_victim(rt, k));
        abort();
    }
#endif
    return best;
}

void tio_rt_victims_unstash(struct tio_runtime *rt) {
    for (uint32_t i = 0; i < rt->stash_n; i++) {
        uint32_t t = rt->stash[i];
        if ((rt->member[t] & IN_VICTIM) && rt->hpos[t] == NONE) {
            heap_insert(rt, t);
        }
    }
    rt->stash_n = 0;
}

/* ---- membership ---------------------------------------------------------------------------- */

static uint8_t membership(const struct tio_runtime *rt, uint32_t t) {
    uint8_t s = rt->state[t];
    uint32_t f = rt->tflags[t];
    uint8_t m = 0;
    if (s == ST_MATERIALIZE) {
        m |= IN_MAT;
    }
    if (s == ST_WRITING) {
        m |= (f & TF_DONE) ? IN_REL : (f & TF_KEEP) ? 0 : IN_WRITING;
    }
    if (f & (TF_LANDING | TF_WLAND)) {
        m |= IN_LAND;
    }
    if (s == ST_RESIDENT && (f & TF_HAS_COPY) && (f & TF_HOSTCOPY)) {
        m |= IN_KEPT;
    }
    if (rt->budget && !(f & TF_PINNED) && rt->v.tensor_bytes[t] > 0 &&
        ((s == ST_RESIDENT && rt->ptr[t]) ||
         (s == ST_MATERIALIZE && !rt->ptr[t] && !(f & TF_URGENT)))) {
        m |= IN_VICTIM;
    }
    return m;
}

void tio_rt_touch(struct tio_runtime *rt, uint32_t t) {
    uint8_t old = rt->member[t], now = membership(rt, t), diff = old ^ now;
    if (!diff) {
        return;
    }
    rt->member[t] = now;
    if (diff & IN_MAT) {
        set_put(rt, TIO_RT_SET_MAT, t, now & IN_MAT);
    }
    if (diff & IN_REL) {
        set_put(rt, TIO_RT_SET_REL, t, now & IN_REL);
        if (now & IN_REL) {
            rt->pending_bytes += rt->v.tensor_bytes[t];
        } else {
            rt->pending_bytes -= rt->v.tensor_bytes[t];
        }
    }
    if (diff & IN_WRITING) {
        if (now & IN_WRITING) {
            rt->n_writing++;
        } else {
            rt->n_writing--;
        }
    }
    if (diff & IN_LAND) {
        set_put(rt, TIO_RT_SET_LAND, t, now & IN_LAND);
    }
    if (diff & IN_KEPT) {
        set_put(rt, TIO_RT_SET_KEPT, t, now & IN_KEPT);
        if (now & IN_KEPT) {
            rt->kept_bytes += rt->v.tensor_bytes[t];
        } else {
            rt->kept_bytes -= rt->v.tensor_bytes[t];
        }
    }
    if (diff & IN_VICTIM) {
        if ((now & IN_VICTIM) && rt->hpos[t] == NONE) {
            heap_insert(rt, t);
        } else if (!(now & IN_VICTIM) && rt->hpos[t] != NONE) {
            heap_remove(rt, t);
        }
    }
}

#if !defined(NDEBUG) || defined(TIO_SANITIZED)
static void broken(const char *what, uint32_t t) {
    (void)fprintf(stderr, "runtime: live sets inconsistent: %s (tensor %u)\n", what, t);
    abort();
}

/* Debug and sanitizer builds: the live sets against a scan of the whole table. */
void tio_rt_verify(struct tio_runtime *rt) {
    uint64_t pending = 0, kept = 0;
    size_t writing = 0, count[TIO_RT_NSETS] = { 0 }, victims = 0;
    static const uint8_t bit[TIO_RT_NSETS] = { IN_MAT, IN_REL, IN_LAND, IN_KEPT };
    for (uint32_t t = 0; t < rt->v.n_tensors; t++) {
        uint8_t m = membership(rt, t);
        if (m != rt->member[t]) {
            broken("membership not updated", t);
        }
        for (int s = 0; s < TIO_RT_NSETS; s++) {
            uint32_t p = positions(rt, s)[t];
            if ((m & bit[s]) ? (p >= rt->set_n[s] || items(rt, s)[p] != t) : p != NONE) {
                broken("set position", t);
            }
            count[s] += (m & bit[s]) != 0;
        }
        pending += (m & IN_REL) ? rt->v.tensor_bytes[t] : 0;
        kept += (m & IN_KEPT) ? rt->v.tensor_bytes[t] : 0;
        writing += (m & IN_WRITING) != 0;
        uint32_t h = rt->hpos[t];
        if ((m & IN_VICTIM) ? (h >= rt->heap_n || rt->heap[h] != t) : h != NONE) {
            broken("heap position", t);
        }
        if (h != NONE && h > 0 && better(rt, t, rt->heap[(h - 1) / 2])) {
            broken("heap order", t);
        }
        victims += (m & IN_VICTIM) != 0;
    }
    for (int s = 0; s < TIO_RT_NSETS; s++) {
        if (count[s] != rt->set_n[s]) {
            broken("set size", (uint32_t)s);
        }
    }
    if (pending != rt->pending_bytes || kept != rt->kept_bytes || writing != rt->n_writing ||
        victims != rt->heap_n || rt->stash_n != 0) {
        broken("counters", 0);
    }
}
#endif
