/* The block cache (teraio/blockcache.h): large host blocks kept by size class, hot or cold.
 *
 * The public calls; the data structures are in bcache_impl.h. */
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

/* ---- public ---------------------------------------------------------------------------- */

int tio_bcache_new(const struct tio_bcache_params *params, struct tio_bcache **out) {
    if (!out) {
        return tio_set_error(TIO_EINVAL, "tio_bcache_new: out is NULL");
    }
    *out = NULL;
#if !defined(__linux__)
    (void)params;
    return TIO_EUNAVAIL;
#else
    struct tio_bcache *c = tio_calloc(1, sizeof *c);
    if (!c) {
        return tio_set_error(TIO_ENOMEM, "tio_bcache_new: out of memory");
    }
    c->p = params ? *params : tio_bcache_params_default();
    c->free_slot = -1;
    c->hot_age.head = c->hot_age.tail = c->cold_age.head = c->cold_age.tail = -1;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        tio_free(c);
        return tio_set_error(TIO_ENOMEM, "tio_bcache_new: pthread_mutex_init failed");
    }
    if (pthread_cond_init(&c->cv, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        tio_free(c);
        return tio_set_error(TIO_ENOMEM, "tio_bcache_new: pthread_cond_init failed");
    }
    bc_register(c);
    *out = c;
    return 0;
#endif
}

void tio_bcache_free(struct tio_bcache *c) {
    if (!c) {
        return;
    }
    bc_unregister(c);
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
        bc_unkeep(c, i);
    }
    return i;
}

int tio_bcache_alloc(struct tio_bcache *c, uint64_t bytes, void **out) {
    if (!c || !out) {
        return tio_set_error(TIO_EINVAL, "tio_bcache_alloc: %s is NULL", c ? "out" : "the cache");
    }
    *out = NULL;
    uint64_t cap = tio_bcache_class_size(bytes);
    if (!cap || cap > SIZE_MAX / 2) {
        return tio_set_error(TIO_EINVAL,
                             "tio_bcache_alloc: bytes %llu: a block is 1 byte to 2^62 bytes",
                             (unsigned long long)bytes);
    }
    char *slack = NULL; /* resident pages past what was asked for, handed back below */
    uint64_t slack_len = 0;
    pthread_mutex_lock(&c->mu);
    int rc = 0;
    int32_t k = bc_class_index(c, cap, 0, 1);
    if (k < 0) {
        rc = k;
        goto out;
    }
    /* a hot block of the class; else a hot one of another class, resized (only the growth
     * faults in); else a cold one of the class or a new mapping (every page faults in) */
    int32_t i = c->c[k].hot.head >= 0 ? take_kept(c, &c->c[k]) : -1;
    if (i < 0 && c->p.resize_kept) {
        i = bc_take_resized(c, k);
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
            rc = bc_map_new(c, cap, k, &i);
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
    bc_enforce(c);
out:
    pthread_mutex_unlock(&c->mu);
    /* A resident block larger than the request (its class's rounding, a split or a prefaulted
     * block) would keep pages nobody touches: the peak rule counts capacity, so the process
     * would sit above what its tensors use. The block is the caller's now: no lock needed. */
    if (slack_len) {
        (void)bc_drop_pages(slack, slack_len);
    }
    return rc;
}

/* the index of the in-use block starting at p, or -1 (caller holds the lock) */
static int32_t find_in_use(const struct tio_bcache *c, const void *p) {
    int32_t i = p ? bc_find(c, p) : -1;
    return i >= 0 && c->b[i].state == B_IN_USE ? i : -1;
}

int tio_bcache_release(struct tio_bcache *c, void *p) {
    if (!c) {
        return TIO_ENOTFOUND;
    }
    pthread_mutex_lock(&c->mu);
    int32_t i = find_in_use(c, p);
    if (i >= 0) {
        c->s.in_use_bytes -= c->b[i].cap;
        /* a block whose pages were discarded since it was handed out has nothing resident
         * worth keeping hot: it goes cold at once (its pages are already gone) */
        bc_keep(c, i, c->b[i].discarded);
        bc_enforce(c);
        bc_prefault_kick(c);
    }
    pthread_mutex_unlock(&c->mu);
    return i >= 0 ? 0 : TIO_ENOTFOUND;
}

int tio_bcache_discard(struct tio_bcache *c, void *p) {
    if (!c) {
        return TIO_ENOTFOUND;
    }
    pthread_mutex_lock(&c->mu);
    int32_t i = find_in_use(c, p);
    int rc = i >= 0 ? bc_drop_pages(c->b[i].addr, c->b[i].cap) : TIO_ENOTFOUND;
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
    bc_prefault_kick(c);
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
    bc_enforce(c);
    bc_prefault_kick(c);
    pthread_mutex_unlock(&c->mu);
}

uint64_t tio_bcache_trim(struct tio_bcache *c) {
    if (!c) {
        return 0;
    }
    pthread_mutex_lock(&c->mu);
    uint64_t before = c->s.unmapped_bytes;
    while (c->cold_age.head >= 0) {
        bc_unmap_kept(c, c->cold_age.head);
    }
    while (c->hot_age.head >= 0) {
        bc_unmap_kept(c, c->hot_age.head);
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
