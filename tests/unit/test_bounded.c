/* The memory table and victim policy of the steps without a plan (src/include/teraio/bounded.h).
 * Every expected order below is worked out by hand in the comments, not by the code under test;
 * each ordering rule has a case that a wrong rule would fail. */
#include <teraio/bounded.h>
#include <teraio/teraio.h>

#include "tio_test.h"

static struct tio_bounded *table(uint64_t min_bytes, uint64_t grace) {
    struct tio_bounded_params p = tio_bounded_params_default();
    p.min_bytes = min_bytes;
    p.grace = grace;
    struct tio_bounded *tb = NULL;
    if (tio_bounded_new(&p, &tb) < 0) {
        return NULL;
    }
    return tb;
}

static void op(struct tio_bounded *tb, const uint64_t *keys, size_t n, uint32_t how) {
    tio_bounded_begin_op(tb);
    for (size_t i = 0; i < n; i++) {
        CHECK(tio_bounded_use(tb, keys[i], 100, how) > 0);
    }
}

static void check_pick(struct tio_bounded *tb,
                       uint64_t budget,
                       int in_optim,
                       int more,
                       const uint64_t *want,
                       size_t nwant) {
    uint64_t got[16] = { 0 };
    int n = tio_bounded_pick(tb, budget, in_optim, more, got, 16);
    CHECK_EQ_I(n, (int)nwant);
    for (size_t i = 0; i < nwant && i < (size_t)(n > 0 ? n : 0); i++) {
        CHECK_EQ_U(got[i], want[i]);
    }
}

/*
 * Outside the optimizer. Entries of 100 bytes, used by operators (clock):
 *   1: A(1) B(2)   2: C(3) F(6)   3: D(4) E(5), E an optimizer state   4: A (the current operator)
 * last use: A 4, B 1, C 2, F 2, D 3, E 3. Candidates: all but A (used now).
 * Order: optimizer states first (E), then least recently used: B(1), C(2) and F(2) (tie: C was
 * tracked first), D(3). Resident 600; to 250 after each victim: E 500, B 400, C 300, F 200:
 * four victims, E B C F.
 */
TIO_TEST(outside_optimizer) {
    struct tio_bounded *tb = table(10, 32);
    REQUIRE(tb != NULL);
    op(tb, (const uint64_t[]){ 1, 2 }, 2, 0);
    op(tb, (const uint64_t[]){ 3, 6 }, 2, 0);
    op(tb, (const uint64_t[]){ 4, 5 }, 2, 0);
    CHECK_OK(tio_bounded_set_global(tb, 5, 1));
    op(tb, (const uint64_t[]){ 1 }, 1, 0);
    struct tio_bounded_stats st;
    tio_bounded_get_stats(tb, &st);
    CHECK_EQ_U(st.resident, 600);
    CHECK_EQ_U(st.clock, 4);
    check_pick(tb, 0, 0, 0, (const uint64_t[]){ 5, 2, 3, 6, 4 }, 5);
    check_pick(tb, 250, 0, 0, (const uint64_t[]){ 5, 2, 3, 6 }, 4);
    /* within the budget: none */
    check_pick(tb, 600, 0, 0, NULL, 0);
    /* a round goes on where an offload freed less than expected (E and B stay resident): the
     * next victims leave out the ones picked in the round (E B C F): D, then nothing */
    check_pick(tb, 250, 0, 0, (const uint64_t[]){ 5, 2, 3, 6 }, 4);
    CHECK_OK(tio_bounded_offloaded(tb, 3, 77));
    CHECK_OK(tio_bounded_offloaded(tb, 6, 78));
    check_pick(tb, 250, 0, 1, (const uint64_t[]){ 4 }, 1);
    check_pick(tb, 250, 0, 1, NULL, 0);
    /* a new round: resident 400 (C F offloaded), E B D candidates: E B */
    check_pick(tb, 250, 0, 0, (const uint64_t[]){ 5, 2 }, 2);
    tio_bounded_free(tb);
}

/*
 * Inside the optimizer, grace 2. Operators (clock), O = an optimizer operator:
 *   1: P(1) Q(2)   2: O G1(3)   3: O G2(4)   4: R(5), and O S(6)   5: O G3(7)   6: O K(8) now
 * At clock 6 "done with" = used by the optimizer and 6 - last > 2, i.e. last <= 3: G1(2), G2(3),
 * most recent first: G2 G1. Then the ones it did not use, least recently used first: P(1) Q(1)
 * (tie: P tracked first), R(4). Last, the ones it used in its last 2 operators, most recent
 * first: G3(5), S(4) (6 - 4 = 2: not done).
 */
TIO_TEST(inside_optimizer) {
    struct tio_bounded *tb = table(10, 2);
    REQUIRE(tb != NULL);
    op(tb, (const uint64_t[]){ 1, 2 }, 2, 0);
    op(tb, (const uint64_t[]){ 3 }, 1, TIO_BOUNDED_USE_OPTIM);
    op(tb, (const uint64_t[]){ 4 }, 1, TIO_BOUNDED_USE_OPTIM);
    op(tb, (const uint64_t[]){ 5 }, 1, 0);
    CHECK(tio_bounded_use(tb, 6, 100, TIO_BOUNDED_USE_OPTIM) > 0);
    op(tb, (const uint64_t[]){ 7 }, 1, TIO_BOUNDED_USE_OPTIM);
    op(tb, (const uint64_t[]){ 8 }, 1, TIO_BOUNDED_USE_OPTIM);
    check_pick(tb, 0, 1, 0, (const uint64_t[]){ 4, 3, 1, 2, 5, 7, 6 }, 7);
    /* the same table outside the optimizer: least recently used, ties by tracking order:
     * P(1) Q(1) G1(2) G2(3) R(4) S(4) G3(5) */
    check_pick(tb, 0, 0, 0, (const uint64_t[]){ 1, 2, 3, 4, 5, 6, 7 }, 7);
    /* a new step: nothing is "used by the optimizer" any more: inside it, LRU as well */
    tio_bounded_begin_step(tb);
    check_pick(tb, 0, 1, 0, (const uint64_t[]){ 1, 2, 3, 4, 5, 6, 7 }, 7);
    tio_bounded_free(tb);
}

/* Tracking, reads, op statistics and the transitions' accounting. */
TIO_TEST(accounting) {
    struct tio_bounded *tb = table(10, 32);
    REQUIRE(tb != NULL);
    struct tio_bounded_stats st;
    struct tio_bounded_entry e;
    tio_bounded_begin_op(tb);                    /* clock 1 */
    CHECK_EQ_I(tio_bounded_use(tb, 1, 5, 0), 0); /* below min_bytes: untracked */
    CHECK_RC(tio_bounded_get(tb, 1, &e), TIO_ENOTFOUND);
    CHECK_EQ_I(tio_bounded_use(tb, 1, 100, 0), TIO_BOUNDED_TRACKED | TIO_BOUNDED_CREATED);
    CHECK_EQ_I(tio_bounded_use(tb, 1, 999, 0), TIO_BOUNDED_TRACKED); /* size kept: 100 */
    CHECK_EQ_I(tio_bounded_use(tb, 2, 40, 0), TIO_BOUNDED_TRACKED | TIO_BOUNDED_CREATED);
    CHECK_OK(tio_bounded_set_global(tb, 2, 0));
    CHECK_RC(tio_bounded_use(tb, 0, 40, 0), TIO_EINVAL);
    tio_bounded_get_stats(tb, &st);
    CHECK_EQ_U(st.live, 140);
    CHECK_EQ_U(st.resident, 140);
    CHECK_EQ_U(st.peak_live, 140);
    CHECK_EQ_U(st.op_input_max, 100);
    /* offload 1 (eid 7) and 2 (eid 8): resident 0 */
    CHECK_OK(tio_bounded_offloaded(tb, 1, 7));
    CHECK_OK(tio_bounded_offloaded(tb, 2, 8));
    CHECK_RC(tio_bounded_offloaded(tb, 2, 8), TIO_ESTATE);
    CHECK_OK(tio_bounded_get(tb, 1, &e));
    CHECK_EQ_U(e.eid, 7);
    CHECK_EQ_U(e.flags, TIO_BOUNDED_STORED | TIO_BOUNDED_CLEAN);
    tio_bounded_get_stats(tb, &st);
    CHECK_EQ_U(st.resident, 0);
    CHECK_EQ_U(st.live, 140);

    /* clock 2: inputs 2 (global, 40) and 1 (100) twice: both read back, once each, in first-use
     * order; the largest input that is not a global is 1's 100 bytes. */
    tio_bounded_begin_op(tb);
    CHECK_EQ_I(tio_bounded_use(tb, 2, 0, 0), TIO_BOUNDED_TRACKED);
    CHECK_EQ_I(tio_bounded_use(tb, 1, 0, TIO_BOUNDED_USE_WRITE), TIO_BOUNDED_TRACKED);
    CHECK_EQ_I(tio_bounded_use(tb, 1, 0, 0), TIO_BOUNDED_TRACKED);
    const uint64_t *reads = NULL;
    CHECK_EQ_U(tio_bounded_op_reads(tb, &reads), 2);
    CHECK_EQ_U(reads[0], 2);
    CHECK_EQ_U(reads[1], 1);
    tio_bounded_get_stats(tb, &st);
    CHECK_EQ_U(st.op_read_bytes, 140);
    CHECK_EQ_U(st.op_input_max, 100);
    CHECK_OK(tio_bounded_loaded(tb, 1));
    CHECK_OK(tio_bounded_loaded(tb, 2));
    CHECK_RC(tio_bounded_loaded(tb, 2), TIO_ESTATE);
    CHECK_OK(tio_bounded_get(tb, 1, &e)); /* written: its copy is stale, still stored */
    CHECK_EQ_U(e.flags, TIO_BOUNDED_RESIDENT | TIO_BOUNDED_STORED);
    CHECK_OK(tio_bounded_get(tb, 2, &e)); /* read only: clean */
    CHECK_EQ_U(e.flags,
               TIO_BOUNDED_RESIDENT | TIO_BOUNDED_STORED | TIO_BOUNDED_CLEAN | TIO_BOUNDED_GLOBAL);
    /* outputs: 3 new (60), 1 known: made 60; the output 1 is written */
    CHECK_EQ_I(tio_bounded_use(tb, 3, 60, TIO_BOUNDED_USE_OUTPUT),
               TIO_BOUNDED_TRACKED | TIO_BOUNDED_CREATED);
    CHECK_EQ_I(tio_bounded_use(tb, 2, 40, TIO_BOUNDED_USE_OUTPUT), TIO_BOUNDED_TRACKED);
    tio_bounded_get_stats(tb, &st);
    CHECK_EQ_U(st.op_made, 60);
    CHECK_EQ_U(st.resident, 200);
    CHECK_EQ_U(st.live, 200);
    CHECK_EQ_U(st.peak_resident, 0);
    tio_bounded_mark_peak(tb);
    tio_bounded_get_stats(tb, &st);
    CHECK_EQ_U(st.peak_resident, 200);
    CHECK_OK(tio_bounded_get(tb, 2, &e));
    CHECK_EQ_U(e.flags, TIO_BOUNDED_RESIDENT | TIO_BOUNDED_STORED | TIO_BOUNDED_GLOBAL);

    /* clock 3: a fixed entry offloaded is read back only by a collective */
    tio_bounded_begin_op(tb);
    CHECK_OK(tio_bounded_offloaded(tb, 3, 9));
    CHECK_RC(tio_bounded_resize(tb, 3, 60), TIO_ESTATE); /* not resident: refused */
    CHECK_OK(tio_bounded_loaded(tb, 3));
    CHECK_OK(tio_bounded_resize(tb, 3, 0)); /* resized to nothing: fixed, 60 bytes less */
    tio_bounded_get_stats(tb, &st);
    CHECK_EQ_U(st.live, 140);
    CHECK_EQ_U(st.resident, 140);
    CHECK_OK(tio_bounded_get(tb, 3, &e));
    CHECK(e.flags & TIO_BOUNDED_FIXED);
    CHECK_OK(tio_bounded_resize(tb, 3, 30)); /* and back: not fixed */
    CHECK_OK(tio_bounded_get(tb, 3, &e));
    CHECK(!(e.flags & TIO_BOUNDED_FIXED));
    CHECK_OK(tio_bounded_pin(tb, 3)); /* not releasable: fixed, its copy forgotten */
    CHECK_OK(tio_bounded_get(tb, 3, &e));
    CHECK_EQ_U(e.flags, TIO_BOUNDED_RESIDENT | TIO_BOUNDED_FIXED);
    /* fixed: never a victim. Candidates 1 (last 2) and 2 (last 2): tracking order 1, 2 */
    check_pick(tb, 0, 0, 0, (const uint64_t[]){ 1, 2 }, 2);
    int stored = -1;
    uint64_t eid = 0;
    CHECK_OK(tio_bounded_remove(tb, 1, &stored, &eid));
    CHECK_EQ_I(stored, 1);
    CHECK_EQ_U(eid, 7);
    CHECK_RC(tio_bounded_remove(tb, 1, &stored, &eid), TIO_ENOTFOUND);
    CHECK_EQ_I(stored, 0);
    tio_bounded_get_stats(tb, &st);
    CHECK_EQ_U(st.live, 70);
    CHECK_EQ_U(st.resident, 70);
    /* adopt: a copy handed over, not resident, last = clock 3 */
    CHECK_RC(tio_bounded_adopt(tb, 2, 10, 5, 0, 0), TIO_ESTATE);
    CHECK_OK(tio_bounded_adopt(tb, 1, 500, 42, 0, 1));
    CHECK_OK(tio_bounded_get(tb, 1, &e));
    CHECK_EQ_U(e.eid, 42);
    CHECK_EQ_U(e.last, 3);
    CHECK_EQ_U(e.flags, TIO_BOUNDED_STORED | TIO_BOUNDED_CLEAN | TIO_BOUNDED_GLOBAL);
    tio_bounded_get_stats(tb, &st);
    CHECK_EQ_U(st.live, 570);
    CHECK_EQ_U(st.resident, 70);
    CHECK_EQ_U(st.peak_live, 570);
    /* clock 4: the global 1 (500, offloaded) and 3 (30, fixed, resident): 1 is read back; the
     * largest input that is not a global is 3's 30 bytes */
    tio_bounded_begin_op(tb);
    CHECK_EQ_I(tio_bounded_use(tb, 1, 0, 0), TIO_BOUNDED_TRACKED);
    CHECK_EQ_I(tio_bounded_use(tb, 3, 0, 0), TIO_BOUNDED_TRACKED);
    tio_bounded_get_stats(tb, &st);
    CHECK_EQ_U(st.op_input_max, 30);
    CHECK_EQ_U(st.op_read_bytes, 500);
    CHECK_EQ_U(tio_bounded_op_reads(tb, &reads), 1);
    CHECK_EQ_U(reads[0], 1);
    uint64_t keys[4] = { 0 };
    CHECK_EQ_I(tio_bounded_keys(tb, keys, 4), 3); /* tracking order: 2, 3, then 1 (adopted) */
    CHECK_EQ_U(keys[0], 2);
    CHECK_EQ_U(keys[1], 3);
    CHECK_EQ_U(keys[2], 1);
    tio_bounded_clear(tb);
    tio_bounded_get_stats(tb, &st);
    CHECK_EQ_U(tio_bounded_count(tb), 0);
    CHECK_EQ_U(st.live, 0);
    CHECK_EQ_U(st.resident, 0);
    CHECK_EQ_U(st.peak_live, 570);
    CHECK_EQ_U(st.peak_resident, 200);
    tio_bounded_free(tb);
    tio_bounded_free(NULL);
}

/* The index under many insertions and removals (backward-shift deletion): every key stays
 * reachable, removed ones are gone, the byte counts add up. */
TIO_TEST(many_keys) {
    struct tio_bounded *tb = table(1, 32);
    REQUIRE(tb != NULL);
    enum { N = 5000 };
    tio_bounded_begin_op(tb);
    for (uint64_t k = 1; k <= N; k++) {
        CHECK_EQ_I(tio_bounded_track(tb, k * 4096, k), TIO_BOUNDED_TRACKED | TIO_BOUNDED_CREATED);
    }
    int stored;
    uint64_t eid;
    for (uint64_t k = 1; k <= N; k += 2) {
        CHECK_OK(tio_bounded_remove(tb, k * 4096, &stored, &eid));
    }
    uint64_t want = 0, bad = 0;
    struct tio_bounded_entry e;
    for (uint64_t k = 1; k <= N; k++) {
        int rc = tio_bounded_get(tb, k * 4096, &e);
        if (k % 2 == 0) {
            want += k;
            bad += rc != 0 || e.bytes != k;
        } else {
            bad += rc != TIO_ENOTFOUND;
        }
    }
    CHECK_EQ_U(bad, 0);
    CHECK_EQ_U(tio_bounded_count(tb), N / 2);
    struct tio_bounded_stats st;
    tio_bounded_get_stats(tb, &st);
    CHECK_EQ_U(st.live, want);
    CHECK_EQ_U(st.resident, want);
    tio_bounded_free(tb);
}

int main(void) {
    RUN(outside_optimizer);
    RUN(inside_optimizer);
    RUN(accounting);
    RUN(many_keys);
    return tio_test_done();
}
