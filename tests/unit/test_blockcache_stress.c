/* Block cache under load: stats consistency under a random workload (against a model), threads,
 * fork while another thread allocates, and the prefault thread. */
#include "blockcache_util.h"

/* Random alloc/release/discard sequence: every counter checked against a model after every step. */
struct live_block {
    void *p;
    uint64_t size, cls, id;
    int discarded;
};

static void random_sequence(int resize) {
    const uint64_t cache_bytes = 16 * MiB, cold_min = 64 * MiB, in_use_cap = 160 * MiB;
    struct tio_bcache_params p = params(cache_bytes, 1, 0, cold_min);
    p.resize_kept = resize;
    struct tio_bcache *c = mk(&p);
    REQUIRE(c != NULL);
    enum { MAXLIVE = 48, OPS = 2000 };
    struct live_block live[MAXLIVE];
    int nlive = 0;
    uint64_t rs = 0x9E3779B97F4A7C15ull, next_id = 1;
    uint64_t in_use = 0, peak = 0, allocs = 0, discarded = 0, mapped_total = 0;
    uint64_t n_hot = 0, n_cold = 0, n_maps = 0, n_res = 0;
    int failures = 0;
    struct tio_bcache_stats prev = st(c);

    for (int op = 0; op < OPS && failures < 10; op++) {
        uint64_t r = rng_next(&rs) % 100;
        int did = 0;
        if (r < 50 && nlive < MAXLIVE) {
            uint64_t bits = rng_next(&rs) % 26;
            uint64_t size = (1ull << bits) + rng_next(&rs) % (1ull << bits);
            if (size > 40 * MiB) {
                size = 40 * MiB;
            }
            if (rng_next(&rs) % 8 == 0) {
                size = ref_class(size); /* exactly a class */
            }
            uint64_t cls = ref_class(size);
            if (in_use + cls <= in_use_cap) {
                void *q = NULL;
                int rc = tio_bcache_alloc(c, size, &q);
                if (rc != 0 || !q) {
                    TIO_T_FAIL("op %d: alloc(%" PRIu64 ") = %d", op, size, rc);
                    failures++;
                    break;
                }
                struct tio_bcache_stats s = st(c);
                uint64_t dh = s.hot_hits - prev.hot_hits, dc = s.cold_hits - prev.cold_hits,
                         dm = s.maps - prev.maps, dr = s.resized_hits - prev.resized_hits,
                         grown = s.grown_bytes - prev.grown_bytes;
                if (dh + dc + dm + dr != 1 || (grown && !dr)) {
                    TIO_T_FAIL("op %d: hot %" PRIu64 " cold %" PRIu64 " maps %" PRIu64
                               " resized %" PRIu64 " hits for one alloc, grown %" PRIu64,
                               op, dh, dc, dm, dr, grown);
                    failures++;
                }
                n_res += dr;
                mapped_total += grown;
                n_hot += dh;
                n_cold += dc;
                n_maps += dm;
                if (dm) {
                    mapped_total += cls;
                }
                if (!aligned_2m(q) || tio_bcache_block_size(c, q) != cls) {
                    TIO_T_FAIL("op %d: block %p of %" PRIu64 ": size %" PRIu64 ", want %" PRIu64,
                               op, q, size, tio_bcache_block_size(c, q), cls);
                    failures++;
                }
                for (int i = 0; i < nlive; i++) {
                    uintptr_t a0 = (uintptr_t)q, b0 = (uintptr_t)live[i].p;
                    if (!(a0 + cls <= b0 || b0 + live[i].cls <= a0)) {
                        TIO_T_FAIL("op %d: new block %p overlaps live block %p", op, q, live[i].p);
                        failures++;
                    }
                }
                /* A fresh or cold block reads as zeros. */
                if ((dm || dc) && visit(q, size, 0, ZERO) != 0) {
                    TIO_T_FAIL("op %d: %s block of %" PRIu64 " not zero", op, dm ? "fresh" : "cold",
                               size);
                    failures++;
                }
                /* What a resized block grew by is new: zeros. */
                if (grown && size > cls - grown &&
                    count_nonzero((char *)q + (cls - grown), size - (cls - grown)) != 0) {
                    TIO_T_FAIL("op %d: the %" PRIu64 " B a block grew by are not zero", op, grown);
                    failures++;
                }
                struct live_block lb = { q, size, cls, next_id++, 0 };
                visit(q, size, lb.id, FILL);
                live[nlive++] = lb;
                in_use += cls;
                peak = in_use > peak ? in_use : peak;
                allocs++;
                did = 1;
            }
        }
        if (!did && nlive > 0 && r < 88) {
            int i = (int)(rng_next(&rs) % (uint64_t)nlive);
            struct live_block *lb = &live[i];
            uint64_t bad = visit(lb->p, lb->size, lb->id, lb->discarded ? ZERO : VERIFY);
            if (bad) {
                TIO_T_FAIL("op %d: block %" PRIu64 " (%" PRIu64 " B) corrupted at %" PRIu64
                           " offsets before release",
                           op, lb->id, lb->size, bad);
                failures++;
            }
            int rc = tio_bcache_release(c, lb->p);
            if (rc != 0) {
                TIO_T_FAIL("op %d: release = %d", op, rc);
                failures++;
            }
            in_use -= lb->cls;
            live[i] = live[--nlive];
            did = 1;
        }
        if (!did && nlive > 0) {
            int i = (int)(rng_next(&rs) % (uint64_t)nlive);
            struct live_block *lb = &live[i];
            if (!lb->discarded) {
                int rc = tio_bcache_discard(c, lb->p);
                if (rc != 0) {
                    TIO_T_FAIL("op %d: discard = %d", op, rc);
                    failures++;
                }
                lb->discarded = 1;
                discarded += lb->cls;
                if (visit(lb->p, lb->size, 0, ZERO) != 0) {
                    TIO_T_FAIL("op %d: discarded block %" PRIu64 " not zero", op, lb->id);
                    failures++;
                }
            }
        }
        struct tio_bcache_stats s = st(c);
        int ok = s.mapped_bytes == s.in_use_bytes + s.hot_bytes + s.cold_bytes &&
                 s.in_use_bytes == in_use && s.peak_in_use_bytes == peak && s.allocs == allocs &&
                 s.hot_hits == n_hot && s.cold_hits == n_cold && s.maps == n_maps &&
                 s.resized_hits == n_res && s.discarded_bytes == discarded &&
                 s.mapped_bytes == mapped_total - s.unmapped_bytes &&
                 s.hot_bytes <= cache_bytes + (peak - in_use) &&
                 s.cold_bytes <= (peak > cold_min ? peak : cold_min) &&
                 s.mapped_bytes <= 512 * MiB && s.blocks >= (uint64_t)nlive &&
                 s.evicted_bytes >= prev.evicted_bytes && s.unmapped_bytes >= prev.unmapped_bytes;
        if (!ok) {
            TIO_T_FAIL("op %d: stats: in_use %" PRIu64 " (want %" PRIu64 ") peak %" PRIu64
                       " (want %" PRIu64 ") hot %" PRIu64 " cold %" PRIu64 " mapped %" PRIu64
                       " (maps total %" PRIu64 " - unmapped %" PRIu64 ") allocs %" PRIu64
                       " (want %" PRIu64 ") discarded %" PRIu64 " (want %" PRIu64
                       ") blocks %" PRIu64 " live %d",
                       op, s.in_use_bytes, in_use, s.peak_in_use_bytes, peak, s.hot_bytes,
                       s.cold_bytes, s.mapped_bytes, mapped_total, s.unmapped_bytes, s.allocs,
                       allocs, s.discarded_bytes, discarded, s.blocks, nlive);
            failures++;
        }
        prev = s;
    }
    /* Hot reuse did not corrupt live blocks. */
    for (int i = 0; i < nlive; i++) {
        struct live_block *lb = &live[i];
        CHECK_EQ_U(visit(lb->p, lb->size, lb->id, lb->discarded ? ZERO : VERIFY), 0);
        CHECK_EQ_U(tio_bcache_block_size(c, lb->p), lb->cls);
    }
    for (int i = 0; i < nlive; i++) {
        CHECK_OK(tio_bcache_release(c, live[i].p));
    }
    struct tio_bcache_stats s = st(c);
    CHECK_EQ_U(s.in_use_bytes, 0);
    CHECK_CONSISTENT(s);
    CHECK(n_hot > 0); /* the workload exercised every path */
    CHECK(resize ? n_res > 0 && s.grown_bytes > 0 : n_cold > 0);
    CHECK(s.evicted_bytes > 0);
    CHECK(s.unmapped_bytes > 0);
    uint64_t kept = s.hot_bytes + s.cold_bytes;
    CHECK_EQ_U(tio_bcache_trim(c), kept);
    struct tio_bcache_stats s2 = st(c);
    CHECK_EQ_U(s2.mapped_bytes, 0);
    CHECK_EQ_U(s2.blocks, 0);
    CHECK_EQ_U(s2.unmapped_bytes, s.unmapped_bytes + kept);
    CHECK_EQ_I(failures, 0);
    tio_bcache_free(c);
}

TIO_TEST(random_sequence_stats_consistency) {
    random_sequence(0);
}

TIO_TEST(random_sequence_with_resizing) {
    random_sequence(1);
}

/* Threads: alloc/write/verify/release cycles on one cache. */
struct worker {
    struct tio_bcache *c;
    uint64_t seed, id, errors, cycles, discarded;
    char first[160];
};

static void worker_fail(struct worker *w, const char *what, uint64_t v) {
    if (!w->errors++) {
        (void)snprintf(w->first, sizeof w->first, "thread %" PRIu64 ": %s (%" PRIu64 ")", w->id,
                       what, v);
    }
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    uint64_t s = w->seed;
    for (uint64_t i = 0; i < w->cycles; i++) {
        uint64_t size = 1 * MiB + rng_next(&s) % (7 * MiB + 1);
        void *p = NULL;
        int rc = tio_bcache_alloc(w->c, size, &p);
        if (rc != 0 || !p) {
            worker_fail(w, "alloc failed", (uint64_t)(int64_t)rc);
            continue;
        }
        if (!aligned_2m(p)) {
            worker_fail(w, "unaligned block", (uint64_t)(uintptr_t)p);
        }
        if (tio_bcache_block_size(w->c, p) != ref_class(size)) {
            worker_fail(w, "block_size", tio_bcache_block_size(w->c, p));
        }
        uint64_t id = (w->id << 32) | i;
        visit(p, size, id, FILL);
        uint64_t bad = visit(p, size, id, VERIFY);
        if (bad) {
            worker_fail(w, "pattern mismatches", bad);
        }
        if (i % 16 == 5) {
            rc = tio_bcache_discard(w->c, p);
            if (rc != 0) {
                worker_fail(w, "discard failed", (uint64_t)(int64_t)rc);
            }
            w->discarded += ref_class(size);
            bad = visit(p, size, 0, ZERO);
            if (bad) {
                worker_fail(w, "discarded block not zero", bad);
            }
        }
        rc = tio_bcache_release(w->c, p);
        if (rc != 0) {
            worker_fail(w, "release failed", (uint64_t)(int64_t)rc);
        }
    }
    return NULL;
}

/* fork while another thread allocates and releases without pause: every child must be able to
 * allocate from its copy of the cache (a lock inherited locked would hang it; killed after 10 s
 * and counted as a failure). */
struct hammer {
    struct tio_bcache *c;
    atomic_int stop;
    atomic_long ops;
};

static void *hammer_run(void *arg) {
    struct hammer *h = arg;
    while (!atomic_load(&h->stop)) {
        void *p = NULL;
        if (tio_bcache_alloc(h->c, 3 * MiB, &p) == 0) {
            memset(p, 0x5a, 4096);
            (void)tio_bcache_release(h->c, p);
            atomic_fetch_add(&h->ops, 1);
        }
    }
    return NULL;
}

TIO_TEST(fork_while_another_thread_allocates) {
    struct tio_bcache_params p = params(16 * MiB, 1, 0, 256 * MiB);
    struct tio_bcache *c = mk(&p);
    REQUIRE(c != NULL);
    struct hammer h;
    h.c = c;
    atomic_init(&h.stop, 0);
    atomic_init(&h.ops, 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, hammer_run, &h) == 0);
    int hung = 0, bad = 0;
    for (int k = 0; k < 20; k++) {
        pid_t pid = fork();
        if (pid == 0) {
            void *q = NULL;
            int ok = tio_bcache_alloc(c, 5 * MiB, &q) == 0;
            if (ok) {
                memset(q, 0x11, 5 * MiB);
                ok = tio_bcache_release(c, q) == 0;
            }
            _exit(ok ? 0 : 3);
        }
        CHECK(pid > 0);
        if (pid < 0) {
            break;
        }
        int status = 0;
        pid_t w = 0;
        for (int waited = 0; waited < 1000 && (w = waitpid(pid, &status, WNOHANG)) == 0; waited++) {
            struct timespec ts = { 0, 10 * 1000 * 1000 };
            nanosleep(&ts, NULL);
        }
        if (w == 0) {
            hung++;
            kill(pid, SIGKILL);
            (void)waitpid(pid, &status, 0);
        } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            bad++;
        }
    }
    atomic_store(&h.stop, 1);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK_EQ_I(hung, 0);
    CHECK_EQ_I(bad, 0);
    CHECK(atomic_load(&h.ops) > 0);
    CHECK_CONSISTENT(st(c));
    tio_bcache_free(c);
}

static void run_threads(int resize, int prefault) {
    /* cache_bytes 48 MiB keeps most reuse hot (cold reuse faults pages in: slow); evictions,
     * cold hits and discards still happen. */
    struct tio_bcache_params p = params(48 * MiB, 1, 0, 256 * MiB);
    p.resize_kept = resize;
    p.prefault = prefault;
    struct tio_bcache *c = mk(&p);
    REQUIRE(c != NULL);
    enum { T = 4 };
    const uint64_t cycles = 2000;
    struct worker w[T];
    pthread_t th[T];
    int started[T];
    for (int i = 0; i < T; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].c = c;
        w[i].seed = 0xC0FFEE + (uint64_t)i * 7919;
        w[i].id = (uint64_t)i;
        w[i].cycles = cycles;
        started[i] = pthread_create(&th[i], NULL, worker_main, &w[i]) == 0;
        CHECK(started[i]);
    }
    uint64_t discarded = 0, ran = 0;
    for (int i = 0; i < T; i++) {
        if (started[i]) {
            (void)pthread_join(th[i], NULL);
            ran++;
        }
        if (w[i].errors) {
            TIO_T_FAIL("%" PRIu64 " errors; first: %s", w[i].errors, w[i].first);
        }
        discarded += w[i].discarded;
    }
    if (prefault) { /* off, and wait for a block being faulted in: then the counters stand */
        tio_bcache_set_prefault(c, 0);
        wait_prefault_idle(c);
    }
    struct tio_bcache_stats s = st(c);
    CHECK_EQ_U(s.in_use_bytes, 0);
    CHECK_EQ_U(s.prefaulting_bytes, 0);
    CHECK_EQ_U(s.mapped_bytes, s.hot_bytes + s.cold_bytes);
    CHECK_EQ_U(s.allocs, ran * cycles);
    CHECK_EQ_U(s.hot_hits + s.cold_hits + s.maps + s.resized_hits, s.allocs);
    CHECK_EQ_U(s.discarded_bytes, discarded);
    CHECK(s.hot_hits > 0);
    CHECK(resize ? s.resized_hits > 0 : s.cold_hits > 0);
    CHECK(!prefault || s.prefaulted_bytes > 0);
    CHECK(s.hot_bytes <= 48 * MiB + s.peak_in_use_bytes);
    CHECK(s.peak_in_use_bytes <= T * 8 * MiB);
    CHECK(s.peak_in_use_bytes >= 1 * MiB);
    uint64_t kept = s.hot_bytes + s.cold_bytes;
    CHECK_EQ_U(tio_bcache_trim(c), kept);
    CHECK_EQ_U(st(c).mapped_bytes, 0);
    tio_bcache_free(c);
}

TIO_TEST(threads) {
    run_threads(0, 0);
}

TIO_TEST(threads_with_resizing_and_prefault) {
    run_threads(1, 1);
}

/* prefault: room under the hot bound (a discarded block released) is filled by the thread with
 * resident memory, which the next request then uses without a fault; never beyond the bound; a
 * forked child does not prefault. */
TIO_TEST(prefault_fills_the_room) {
    struct tio_bcache_params p = params(0, 1, 0, 256 * MiB);
    p.resize_kept = 1;
    p.prefault = 1;
    struct tio_bcache *c = mk(&p);
    REQUIRE(c != NULL);
    void *a = NULL, *b = NULL;
    CHECK_OK(tio_bcache_alloc(c, 40 * MiB, &a));
    REQUIRE_OR(a != NULL, tio_bcache_free(c));
    memset(a, 0x33, 40 * MiB);
    CHECK_OK(tio_bcache_discard(c, a));
    CHECK_OK(tio_bcache_release(c, a)); /* cold: 40 MiB of room under the 40 MiB peak */
    struct tio_bcache_stats s = wait_prefaulted(c, 40 * MiB);
    CHECK_EQ_U(s.prefaulted_bytes, 40 * MiB);
    CHECK_EQ_U(s.hot_bytes, 40 * MiB);
    CHECK_EQ_U(s.cold_bytes, 40 * MiB);
    CHECK_EQ_U(s.mapped_bytes, 80 * MiB);
    CHECK_EQ_U(s.faulting_bytes, 40 * MiB);
    CHECK_CONSISTENT(s);
    /* 30 MiB: split off the prefaulted block, already resident */
    CHECK_OK(tio_bcache_alloc(c, 30 * MiB, &b));
    struct tio_bcache_stats s2 = st(c);
    CHECK(b != NULL && b != a);
    CHECK_EQ_U(s2.resized_hits, 1);
    CHECK_EQ_U(s2.faulting_bytes, 40 * MiB);
    CHECK_EQ_U(s2.cold_hits, 0);
    if (b) {
        CHECK_EQ_I(resident_pages(b, 30 * MiB), pages_of(30 * MiB));
        CHECK_OK(tio_bcache_release(c, b));
    }
    s2 = wait_prefaulted(c, 40 * MiB); /* no room left: nothing more is faulted in */
    CHECK_EQ_U(s2.prefaulted_bytes, 40 * MiB);
    CHECK(s2.hot_bytes <= s2.peak_in_use_bytes - s2.in_use_bytes);
    /* a forked child never prefaults, whatever room it has */
    pid_t pid = fork();
    if (pid == 0) {
        void *q = NULL;
        int ok = tio_bcache_alloc(c, 60 * MiB, &q) == 0 && tio_bcache_discard(c, q) == 0 &&
                 tio_bcache_release(c, q) == 0;
        struct timespec ts = { 0, 300 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        struct tio_bcache_stats cs;
        tio_bcache_stats(c, &cs);
        _exit(ok && cs.prefaulted_bytes == 40 * MiB && cs.prefaulting_bytes == 0 ? 0 : 3);
    }
    CHECK(pid > 0);
    if (pid > 0) {
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    /* off: a new room stays empty */
    tio_bcache_set_prefault(c, 0);
    wait_prefault_idle(c);
    struct tio_bcache_stats s3 = st(c);
    void *d = NULL;
    CHECK_OK(tio_bcache_alloc(c, 64 * MiB, &d));
    CHECK(d != NULL);
    if (d) {
        CHECK_OK(tio_bcache_discard(c, d));
        CHECK_OK(tio_bcache_release(c, d));
    }
    struct timespec ts = { 0, 200 * 1000 * 1000 };
    nanosleep(&ts, NULL);
    CHECK_EQ_U(st(c).prefaulted_bytes, s3.prefaulted_bytes);
    tio_bcache_free(c); /* joins the thread */
}

int main(void) {
    RUN(random_sequence_stats_consistency);
    RUN(random_sequence_with_resizing);
    RUN(threads);
    RUN(threads_with_resizing_and_prefault);
    RUN(prefault_fills_the_room);
    RUN(fork_while_another_thread_allocates);
    return tio_test_done();
}
