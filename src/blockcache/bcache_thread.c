/* The block cache: fork handlers and the prefault thread (bcache_impl.h). */
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
                bc_keep(c, i, 1);
            }
        }
    }
    fork_release();
}

static void reg_init(void) {
    (void)pthread_atfork(fork_prepare, fork_release, fork_child);
}

void bc_register(struct tio_bcache *c) {
    (void)pthread_once(&reg_once, reg_init);
    pthread_mutex_lock(&reg_mu);
    c->reg_next = reg_head;
    reg_head = c;
    pthread_mutex_unlock(&reg_mu);
}

void bc_unregister(struct tio_bcache *c) {
    pthread_mutex_lock(&reg_mu);
    for (struct tio_bcache **pp = &reg_head; *pp; pp = &(*pp)->reg_next) {
        if (*pp == c) {
            *pp = c->reg_next;
            break;
        }
    }
    pthread_mutex_unlock(&reg_mu);
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
        uint64_t room = bc_hot_room(c), have = c->s.hot_bytes + c->s.prefaulting_bytes;
        uint64_t want = room > have ? room - have : 0;
        want = want > PREFAULT_MAX ? PREFAULT_MAX : want & ~(HUGE_BYTES - 1);
        int32_t k = want ? bc_class_index(c, want, 0, 1) : -1, i = -1;
        if (!c->p.prefault || k < 0 ||
            (c->p.max_mapped_bytes && c->s.mapped_bytes + want > c->p.max_mapped_bytes) ||
            bc_map_new(c, want, k, &i) < 0) {
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
            over = c->stop || !c->p.prefault || c->s.hot_bytes + done > bc_hot_room(c);
        }
        c->s.prefaulting_bytes -= want;
        if (over) { /* its pages go back at once: kept cold */
            (void)bc_drop_pages(a, want);
            bc_keep(c, i, 1);
            bc_enforce(c);
            continue;
        }
        c->s.prefaulted_bytes += want;
        bc_keep(c, i, 0);
        bc_enforce(c);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* wake the prefault thread, starting it the first time (caller holds the lock) */
void bc_prefault_kick(struct tio_bcache *c) {
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
