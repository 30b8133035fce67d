/*
 * Eviction on demand: which resident tensors may go, in which order, and where to.
 *
 * The `lru` policy keeps a list, least recently used first. A plan's replay with demand eviction
 * (`--demand-evict`) evicts as the runtime does (docs/runtime.md, "The executor"): the furthest
 * next use first, then the larger, then the lower id, from a heap keyed by each tensor's next
 * use (a global kernel index, so that no re-keying is needed when an iteration begins), re-keyed
 * when a kernel uses the tensor. Both evict to the host tier where they may and it has room, else
 * to the SSDs; without SSDs and without host room the runtime keeps the victim and runs above
 * its budget, so eviction stops there and the kernel waits for memory or is an OOM.
 */
#include <stdio.h>
#include <stdlib.h>

#include <teraio/sim.h>

#include "common/common_impl.h"
#include "sim/sim_engine_impl.h"

/* ---- the heap: best victim on top --------------------------------------------------------- */

/* a is the better victim than b: the furthest next use, then the larger, then the lower id. */
static int better(const struct eng *e, uint32_t a, uint32_t b) {
    uint64_t da = e->ts[a].next_use, db = e->ts[b].next_use;
    if (da != db) {
        return da > db;
    }
    uint64_t ba = e->v->bytes[a], bb = e->v->bytes[b];
    if (ba != bb) {
        return ba > bb;
    }
    return a < b;
}

static void heap_set(struct eng *e, uint32_t i, uint32_t t) {
    e->vheap[i] = t;
    e->ts[t].hpos = i;
}

static void sift_up(struct eng *e, uint32_t i) {
    uint32_t t = e->vheap[i];
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (!better(e, t, e->vheap[p])) {
            break;
        }
        heap_set(e, i, e->vheap[p]);
        i = p;
    }
    heap_set(e, i, t);
}

static void sift_down(struct eng *e, uint32_t i) {
    uint32_t n = e->vheap_n, t = e->vheap[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= n) {
            break;
        }
        if (c + 1 < n && better(e, e->vheap[c + 1], e->vheap[c])) {
            c++;
        }
        if (!better(e, e->vheap[c], t)) {
            break;
        }
        heap_set(e, i, e->vheap[c]);
        i = c;
    }
    heap_set(e, i, t);
}

static void heap_remove(struct eng *e, uint32_t t) {
    uint32_t i = e->ts[t].hpos, last = e->vheap[--e->vheap_n];
    e->ts[t].hpos = NONE32;
    if (i == e->vheap_n) {
        return;
    }
    heap_set(e, i, last);
    sift_up(e, i);
    sift_down(e, e->ts[last].hpos);
}

/* ---- the next-use table ------------------------------------------------------------------- */

int sim_eng_victims_init(struct eng *e) {
    const struct sim_view *v = e->v;
    e->by_next_use = v->demand_evict && !v->lru;
    for (size_t t = 0; t < v->n_tensors; t++) {
        e->ts[t].hpos = NONE32;
        /* before its first use (a global on the GPU, a tensor that starts off it) */
        e->ts[t].next_use = v->first_use[t] != TIO_NEVER_USED ? v->first_use[t] : UINT64_MAX - 1;
    }
    if (!e->by_next_use) {
        return 0;
    }
    size_t N = v->n_kernels, nu = v->use_offset[N];
    e->vheap = tio_malloc((v->n_tensors ? v->n_tensors : 1) * sizeof *e->vheap);
    e->use_next = tio_malloc((nu ? nu : 1) * sizeof *e->use_next);
    uint64_t *seen = tio_malloc((v->n_tensors ? v->n_tensors : 1) * sizeof *seen);
    if (!e->vheap || !e->use_next || !seen) {
        tio_free(seen);
        return TIO_ENOMEM;
    }
    /* the next use of a use's tensor in this iteration; a global's after its last use is its
     * first in the next (N + first); an intermediate's last use has none */
    for (size_t t = 0; t < v->n_tensors; t++) {
        int global = (v->tflags[t] & SV_GLOBAL) && v->first_use[t] != TIO_NEVER_USED;
        seen[t] = global ? N + v->first_use[t] : UINT64_MAX;
    }
    for (size_t k = N; k-- > 0;) {
        uint64_t u0 = v->use_offset[k], u1 = v->use_offset[k + 1];
        for (uint64_t u = u0; u < u1; u++) {
            e->use_next[u] = seen[v->use_tensor[u]];
        }
        for (uint64_t u = u0; u < u1 && !v->skip_uses[k]; u++) {
            seen[v->use_tensor[u]] = k;
        }
    }
    tio_free(seen);
    return 0;
}

void sim_eng_victims_fini(struct eng *e) {
    tio_free(e->vheap);
    tio_free(e->use_next);
}

/* ---- membership ----------------------------------------------------------------------------- */

void sim_eng_victim_remove(struct eng *e, uint32_t t) {
    if (e->by_next_use) {
        if (e->ts[t].hpos != NONE32) {
            heap_remove(e, t);
        }
        return;
    }
    struct tstate *s = &e->ts[t];
    if (!s->in_lru) {
        return;
    }
    if (s->lprev != NONE32) {
        e->ts[s->lprev].lnext = s->lnext;
    } else {
        e->lru_head = s->lnext;
    }
    if (s->lnext != NONE32) {
        e->ts[s->lnext].lprev = s->lprev;
    } else {
        e->lru_tail = s->lprev;
    }
    s->in_lru = 0;
}

void sim_eng_victim_touch(struct eng *e, uint32_t t) {
    if (!e->v->lru && !e->v->demand_evict) {
        return;
    }
    struct tstate *s = &e->ts[t];
    if (e->by_next_use) {
        /* only what an eviction may take: on the GPU, not pinned, holding memory */
        int victim = s->state == ST_GPU && !(e->v->tflags[t] & SV_PINNED) && e->v->bytes[t] > 0;
        if (!victim) {
            sim_eng_victim_remove(e, t);
        } else if (s->hpos == NONE32) {
            heap_set(e, e->vheap_n++, t);
            sift_up(e, s->hpos);
        } else {
            sift_up(e, s->hpos);
            sift_down(e, s->hpos);
        }
        return;
    }
    sim_eng_victim_remove(e, t);
    s->lnext = NONE32;
    s->lprev = e->lru_tail;
    if (e->lru_tail != NONE32) {
        e->ts[e->lru_tail].lnext = t;
    } else {
        e->lru_head = t;
    }
    e->lru_tail = t;
    s->in_lru = 1;
}

void sim_eng_victim_used(struct eng *e, uint32_t t, uint64_t u) {
    if (e->by_next_use) {
        uint64_t k = e->g % e->N, nx = e->use_next[u];
        e->ts[t].next_use = nx == UINT64_MAX ? UINT64_MAX : e->g - k + nx;
    }
    sim_eng_victim_touch(e, t);
}

/* ---- eviction ---------------------------------------------------------------------------------
 */

/* Where the eviction of t goes: the host tier where the policy may use it (LRU; a plan only
 * without SSDs: the host budget is the plan's) and it has room, else the SSDs; -1 when neither
 * (no SSDs and no host room). */
static int evict_tier(const struct eng *e, uint32_t t) {
    const struct sim_view *v = e->v;
    uint64_t b = v->bytes[t];
    int host_ok = v->lru || e->hw->ssd_count == 0;
    if (host_ok && e->host_used + v->host_static_bytes + b <= v->host_limit_bytes) {
        return TIO_TIER_HOST;
    }
    return e->hw->ssd_count > 0 ? TIO_TIER_SSD : -1;
}

#if !defined(NDEBUG) || defined(TIO_SANITIZED)
/* Debug and sanitizer builds: the victim a scan of every tensor picks (what the heap must have on
 * top), NONE32 when the kernel being started uses every resident one. */
static uint32_t scan_best_victim(const struct eng *e) {
    uint64_t stamp = e->g + 1;
    uint32_t best = NONE32;
    for (uint32_t t = 0; t < e->v->n_tensors; t++) {
        const struct tstate *s = &e->ts[t];
        if (s->state != ST_GPU || s->stamp == stamp || (e->v->tflags[t] & SV_PINNED) ||
            e->v->bytes[t] == 0) {
            continue;
        }
        if (best == NONE32 || better(e, t, best)) {
            best = t;
        }
    }
    return best;
}
#endif

/* The next victim, or NONE32: the heap's top, unless the kernel being started uses it (then it
 * uses every resident tensor left: their next use is this kernel, the nearest there is); the
 * least recently used resident one for LRU. */
static uint32_t next_victim(struct eng *e, uint32_t *cursor) {
    uint64_t stamp = e->g + 1;
    if (e->by_next_use) {
        uint32_t t = e->vheap_n > 0 ? e->vheap[0] : NONE32;
        t = t != NONE32 && e->ts[t].stamp != stamp ? t : NONE32;
#if !defined(NDEBUG) || defined(TIO_SANITIZED)
        if (t != scan_best_victim(e)) {
            (void)fprintf(stderr, "sim: victim heap picked tensor %u, a scan %u\n", t,
                          scan_best_victim(e));
            abort();
        }
#endif
        return t;
    }
    uint32_t t = *cursor;
    while (t != NONE32 &&
           (e->ts[t].state != ST_GPU || e->ts[t].stamp == stamp || (e->v->tflags[t] & SV_PINNED))) {
        t = e->ts[t].lnext;
    }
    *cursor = t != NONE32 ? e->ts[t].lnext : NONE32;
    return t;
}

int sim_eng_evict(struct eng *e, uint64_t need) {
    uint32_t cursor = e->lru_head;
    while (e->gpu_used - e->offload_inflight + need > e->v->capacity) {
        uint32_t t = next_victim(e, &cursor);
        if (t == NONE32) {
            break;
        }
        int to = evict_tier(e, t);
        if (to < 0) { /* the runtime keeps it and runs above its budget */
            break;
        }
        uint64_t b = e->v->bytes[t];
        if (e->measuring) {
            e->sim->r.n_demand_evictions++;
            e->sim->r.demand_evicted_bytes += b;
        }
        int rc = sim_eng_offload(e, t, to, 1, 1, UINT64_MAX);
        if (rc < 0) {
            return rc;
        }
        if (e->ts[t].state == ST_GPU) { /* kept (not expected: the tier had room) */
            break;
        }
    }
    return 0;
}
