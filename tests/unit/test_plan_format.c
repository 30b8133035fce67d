/* Plan objects and files: validation of moves, sorting, binary/JSON round trips, corruption,
 * and the plan <-> trace hash check. */
#include <math.h>
#include <stdio.h>
#include <unistd.h>

#include <teraio/alloc.h>
#include <teraio/plan.h>
#include <teraio/trace.h>

#include "common/common_impl.h"
#include "tio_test.h"

static char tmpdir[256];

static struct tio_move
mv(uint32_t t, int32_t from, int32_t to, uint64_t trig, uint64_t dl, uint64_t bytes) {
    struct tio_move m = {
        .tensor = t, .from = from, .to = to, .trigger = trig, .deadline = dl, .bytes = bytes
    };
    return m;
}

static struct tio_plan *sample(void) {
    struct tio_plan *p = NULL;
    if (tio_plan_new(0xfedcba9876543210ull, 10, "teraio-mixed", &p) < 0) {
        return NULL;
    }
    struct tio_move ms[] = {
        mv(3, TIO_TIER_HOST, TIO_TIER_GPU, 7, 9, 4096),
        mv(3, TIO_TIER_GPU, TIO_TIER_HOST, 2, 4, 4096),
        mv(1, TIO_TIER_GPU, TIO_TIER_SSD, 2, 3, 1 << 20),
        mv(1, TIO_TIER_SSD, TIO_TIER_GPU, 8, 12, 1 << 20), /* wraps: deadline 12 >= 10 */
    };
    ms[3].flags = TIO_MOVE_URGENT;
    ms[2].flags = TIO_MOVE_CLEAN;
    for (size_t i = 0; i < 4; i++) {
        if (tio_plan_add_move(p, &ms[i]) < 0) {
            tio_plan_free(p);
            return NULL;
        }
    }
    struct tio_plan_summary s = { .feasible = 1,
                                  .planning_seconds = 0.25,
                                  .capacity_bytes = 1000,
                                  .planned_peak_bytes = 900,
                                  .host_peak_bytes = 4096,
                                  .ssd_peak_bytes = 1 << 20,
                                  .bytes_to_ssd = 1 << 20,
                                  .bytes_to_host = 4096 };
    tio_plan_set_summary(p, &s);
    if (tio_plan_finish(p) < 0) {
        tio_plan_free(p);
        return NULL;
    }
    return p;
}

TIO_TEST(moves_sorted_and_flags_normalized) {
    struct tio_plan *p = sample();
    REQUIRE(p != NULL);
    size_t n;
    const struct tio_move *m = tio_plan_moves(p, &n);
    CHECK_EQ_U(n, 4);
    /* (trigger, urgent first, tensor): (2,t1) (2,t3) (7,t3) (8,t1) */
    CHECK_EQ_U(m[0].trigger, 2);
    CHECK_EQ_U(m[0].tensor, 1);
    CHECK_EQ_U(m[1].tensor, 3);
    CHECK_EQ_U(m[2].trigger, 7);
    CHECK_EQ_U(m[3].trigger, 8);
    CHECK(m[3].flags & TIO_MOVE_WRAPS);
    CHECK(m[3].flags & TIO_MOVE_URGENT);
    CHECK(!(m[2].flags & TIO_MOVE_WRAPS));
    struct tio_plan_summary s;
    tio_plan_get_summary(p, &s);
    CHECK_EQ_U(s.n_moves, 4);
    CHECK_EQ_U(s.n_offloads, 2);
    CHECK_STR(tio_plan_policy(p), "teraio-mixed");
    CHECK_EQ_U(tio_plan_kernel_count(p), 10);
    tio_plan_free(p);
}

/* The order tio_plan_finish promises (plan.h): trigger, urgent first, tensor, from, to,
 * deadline, bytes, flags. */
static int order_cmp(const struct tio_move *x, const struct tio_move *y) {
    uint64_t a[8] = { x->trigger,      !(x->flags & TIO_MOVE_URGENT),
                      x->tensor,       (uint64_t)x->from,
                      (uint64_t)x->to, x->deadline,
                      x->bytes,        x->flags };
    uint64_t b[8] = { y->trigger,      !(y->flags & TIO_MOVE_URGENT),
                      y->tensor,       (uint64_t)y->from,
                      (uint64_t)y->to, y->deadline,
                      y->bytes,        y->flags };
    for (size_t i = 0; i < 8; i++) {
        if (a[i] != b[i]) {
            return a[i] < b[i] ? -1 : 1;
        }
    }
    return 0;
}

/* Many moves per trigger, ties on every key, one trigger with more moves than a small bucket
 * holds, added out of order, over n kernels: the plan holds them in the promised order
 * (checked against the test's own sort), each move intact. */
static void check_sorted_moves(uint64_t n) {
    enum { M = 260 };
    struct tio_move in[M], want[M];
    for (size_t i = 0; i < M; i++) {
        /* 60 moves at the last kernel; the others spread over the kernels, a few on each */
        uint64_t trig = i < 200 ? (i * 13) % 31 * (n / 31) + i % 3 : n - 1;
        int off = (i / 3) % 2 == 0;
        int32_t far = (i / 5) % 2 ? TIO_TIER_SSD : TIO_TIER_HOST;
        in[i] = mv((uint32_t)((i * 7) % 5), off ? TIO_TIER_GPU : far, off ? far : TIO_TIER_GPU,
                   trig, trig + (i * 11) % 41 * (n / 40), 4096 * (1 + (i / 2) % 3));
        in[i].flags = (i % 4 == 0 ? TIO_MOVE_URGENT : 0) | ((i / 7) % 2 ? TIO_MOVE_STALL : 0);
        if (in[i].deadline >= n) {
            in[i].flags |= TIO_MOVE_WRAPS; /* as finish normalizes it */
        }
    }
    for (size_t i = 0; i < M; i++) { /* the test's own insertion sort */
        struct tio_move x = in[i];
        size_t j = i;
        for (; j > 0 && order_cmp(&want[j - 1], &x) > 0; j--) {
            want[j] = want[j - 1];
        }
        want[j] = x;
    }
    struct tio_plan *p = NULL;
    CHECK_OK(tio_plan_new(7, n, "teraio-mixed", &p));
    REQUIRE(p != NULL);
    for (size_t i = M; i-- > 0;) {
        CHECK_OK(tio_plan_add_move(p, &in[i]));
    }
    CHECK_OK(tio_plan_finish(p));
    size_t got = 0;
    const struct tio_move *m = tio_plan_moves(p, &got);
    CHECK_EQ_U(got, M);
    size_t bad = 0;
    for (size_t i = 0; i < got && i < M; i++) {
        bad += order_cmp(&m[i], &want[i]) != 0;
    }
    CHECK_EQ_U(bad, 0);
    tio_plan_free(p);
}

/* 40 kernels: triggers of one radix digit (11 bits); 5000: two; 5M: three. */
TIO_TEST(moves_sorted_on_every_key) {
    check_sorted_moves(40);
    check_sorted_moves(5000);
    check_sorted_moves(5000000);
}

TIO_TEST(bad_moves_rejected) {
    struct tio_plan *p = NULL;
    CHECK_OK(tio_plan_new(1, 10, "x", &p));
    struct tio_move m = mv(0, TIO_TIER_GPU, TIO_TIER_SSD, 10, 11, 5);
    CHECK_RC(tio_plan_add_move(p, &m), TIO_EPLAN);
    CHECK_ERR_HAS("trigger 10");
    m = mv(0, TIO_TIER_GPU, TIO_TIER_SSD, 5, 4, 5);
    CHECK_RC(tio_plan_add_move(p, &m), TIO_EPLAN);
    CHECK_ERR_HAS("deadline 4");
    m = mv(0, TIO_TIER_GPU, TIO_TIER_SSD, 5, 16, 5);
    CHECK_RC(tio_plan_add_move(p, &m), TIO_EPLAN);
    m = mv(0, TIO_TIER_GPU, TIO_TIER_GPU, 5, 6, 5);
    CHECK_RC(tio_plan_add_move(p, &m), TIO_EPLAN);
    CHECK_ERR_HAS("neither");
    m = mv(0, TIO_TIER_HOST, TIO_TIER_SSD, 5, 6, 5);
    CHECK_RC(tio_plan_add_move(p, &m), TIO_EPLAN);
    m = mv(0, 7, TIO_TIER_GPU, 5, 6, 5);
    CHECK_RC(tio_plan_add_move(p, &m), TIO_EPLAN);
    CHECK_ERR_HAS("tier");
    m = mv(0, TIO_TIER_GPU, TIO_TIER_SSD, 5, 6, 0);
    CHECK_RC(tio_plan_add_move(p, &m), TIO_EPLAN);
    CHECK_ERR_HAS("bytes 0");
    m = mv(0, TIO_TIER_GPU, TIO_TIER_SSD, 5, 6, 5);
    m.flags = 1u << 9;
    CHECK_RC(tio_plan_add_move(p, &m), TIO_EPLAN);
    m = mv(0, TIO_TIER_SSD, TIO_TIER_GPU, 5, 6, 5);
    m.flags = TIO_MOVE_CLEAN;
    CHECK_RC(tio_plan_add_move(p, &m), TIO_EPLAN);
    m = mv(0, TIO_TIER_GPU, TIO_TIER_SSD, 5, 15, 5); /* trigger + N is allowed */
    CHECK_OK(tio_plan_add_move(p, &m));
    CHECK_OK(tio_plan_finish(p));
    CHECK_RC(tio_plan_add_move(p, &m), TIO_ESTATE);
    tio_plan_free(p);
    CHECK_RC(tio_plan_new(1, 0, "x", &p), TIO_EINVAL);
    CHECK_RC(tio_plan_new(1, 5, "", &p), TIO_EINVAL);
    CHECK_RC(tio_plan_new(1, 5, "bad name", &p), TIO_EINVAL);
}

static int same_plans(const struct tio_plan *a, const struct tio_plan *b) {
    size_t na, nb;
    const struct tio_move *ma = tio_plan_moves(a, &na), *mb = tio_plan_moves(b, &nb);
    if (na != nb || tio_plan_trace_hash(a) != tio_plan_trace_hash(b) ||
        tio_plan_kernel_count(a) != tio_plan_kernel_count(b) ||
        strcmp(tio_plan_policy(a), tio_plan_policy(b)) != 0 ||
        tio_plan_execution(a) != tio_plan_execution(b)) {
        return 0;
    }
    for (size_t i = 0; i < na; i++) {
        if (memcmp(&ma[i], &mb[i], sizeof ma[i]) != 0) {
            return 0;
        }
    }
    struct tio_plan_summary sa, sb;
    tio_plan_get_summary(a, &sa);
    tio_plan_get_summary(b, &sb);
    return sa.n_moves == sb.n_moves && sa.n_offloads == sb.n_offloads &&
           sa.feasible == sb.feasible && sa.planning_seconds == sb.planning_seconds &&
           sa.capacity_bytes == sb.capacity_bytes &&
           sa.planned_peak_bytes == sb.planned_peak_bytes &&
           sa.host_peak_bytes == sb.host_peak_bytes && sa.ssd_peak_bytes == sb.ssd_peak_bytes &&
           sa.bytes_to_ssd == sb.bytes_to_ssd && sa.bytes_to_host == sb.bytes_to_host;
}

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        return NULL;
    }
    unsigned char *b = malloc(1 << 20);
    *len = fread(b, 1, 1 << 20, f);
    (void)fclose(f);
    return b;
}

TIO_TEST(round_trips) {
    struct tio_plan *p = sample();
    REQUIRE(p != NULL);
    char bin[512], js[512];
    (void)snprintf(bin, sizeof bin, "%s/p.plan", tmpdir);
    (void)snprintf(js, sizeof js, "%s/p.json", tmpdir);
    CHECK_OK(tio_plan_save(p, bin, TIO_PLAN_FORMAT_AUTO));
    CHECK_OK(tio_plan_save(p, js, TIO_PLAN_FORMAT_AUTO));
    struct tio_plan *a = NULL, *b = NULL;
    CHECK_OK(tio_plan_load(bin, TIO_PLAN_FORMAT_AUTO, &a));
    CHECK_OK(tio_plan_load(js, TIO_PLAN_FORMAT_AUTO, &b));
    CHECK(a && same_plans(p, a));
    CHECK(b && same_plans(p, b));
    size_t len = 0;
    unsigned char *raw = slurp(bin, &len);
    CHECK(raw && memcmp(raw, "TIOPLAN", 8) == 0);
    CHECK_EQ_U(len, 208 + 4 * 40 + 4);
    /* every single-byte corruption of the binary file is rejected */
    int accepted = 0;
    for (size_t i = 0; raw && i < len; i++) {
        raw[i] ^= 0x5a;
        struct tio_plan *c = NULL;
        if (tio_plan_load_mem(raw, len, TIO_PLAN_FORMAT_BINARY, &c) == 0) {
            accepted++;
            tio_plan_free(c);
        }
        raw[i] ^= 0x5a;
    }
    CHECK_EQ_U(accepted, 0);
    /* truncations too */
    for (size_t cut = 0; raw && cut < len; cut += 7) {
        struct tio_plan *c = NULL;
        CHECK(tio_plan_load_mem(raw, cut, TIO_PLAN_FORMAT_AUTO, &c) < 0);
    }
    free(raw);
    tio_plan_free(a);
    tio_plan_free(b);
    tio_plan_free(p);
}

TIO_TEST(json_errors_name_the_field) {
    struct tio_plan *p = NULL;
#define BASE                                                                   \
    "{\"format\":\"teraio-plan\",\"version\":1,\"policy\":\"x\","              \
    "\"trace_hash\":\"00000000000000ff\",\"n_kernels\":10,"                    \
    "\"summary\":{\"n_moves\":1,\"n_offloads\":1,\"feasible\":true,"           \
    "\"planning_seconds\":0,\"capacity_bytes\":0,\"planned_peak_bytes\":0,"    \
    "\"shortfall_bytes\":0,\"shortfall_kernel\":0,\"host_peak_bytes\":0,"      \
    "\"ssd_peak_bytes\":0,\"bytes_to_ssd\":0,\"bytes_to_host\":0},"            \
    "\"moves\":[{\"tensor\":0,\"from\":\"gpu\",\"to\":\"ssd\",\"trigger\":%s," \
    "\"deadline\":4,\"bytes\":8,\"flags\":[%s]}]}"
    char text[2048];
    (void)snprintf(text, sizeof text, BASE, "1", "");
    CHECK_OK(tio_plan_load_mem(text, strlen(text), TIO_PLAN_FORMAT_AUTO, &p));
    CHECK(p && tio_plan_trace_hash(p) == 0xff);
    tio_plan_free(p);
    (void)snprintf(text, sizeof text, BASE, "11", "");
    CHECK_RC(tio_plan_load_mem(text, strlen(text), TIO_PLAN_FORMAT_JSON, &p), TIO_EPLAN);
    CHECK_ERR_HAS("trigger 11");
    (void)snprintf(text, sizeof text, BASE, "-1", "");
    CHECK_RC(tio_plan_load_mem(text, strlen(text), TIO_PLAN_FORMAT_JSON, &p), TIO_EFORMAT);
    CHECK_ERR_HAS("trigger");
    (void)snprintf(text, sizeof text, BASE, "1", "\"fast\"");
    CHECK_RC(tio_plan_load_mem(text, strlen(text), TIO_PLAN_FORMAT_JSON, &p), TIO_EFORMAT);
    CHECK_ERR_HAS("flag");
    (void)snprintf(text, sizeof text, BASE, "1", "\"wraps\""); /* deadline 4 < 10: inconsistent */
    CHECK_RC(tio_plan_load_mem(text, strlen(text), TIO_PLAN_FORMAT_JSON, &p), TIO_EPLAN);
#undef BASE
    CHECK_RC(tio_plan_load_mem("{}", 2, TIO_PLAN_FORMAT_JSON, &p), TIO_EFORMAT);
    CHECK_RC(tio_plan_load_mem("nope", 4, TIO_PLAN_FORMAT_JSON, &p), TIO_EFORMAT);
}

TIO_TEST(trace_hash_mismatch_rejected) {
    struct tio_trace *tr = NULL, *tr2 = NULL;
    uint32_t t, k;
    CHECK_OK(tio_trace_new(NULL, &tr));
    CHECK_OK(tio_trace_add_tensor(tr, 1 << 20, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, "w", &t));
    for (int i = 0; i < 4; i++) {
        CHECK_OK(tio_trace_add_kernel(tr, "k", 1000, 0, &k));
        if (i == 0) {
            CHECK_OK(tio_trace_add_use(tr, t, TIO_USE_READ));
        }
    }
    CHECK_OK(tio_trace_finish(tr));
    CHECK_OK(tio_trace_new(NULL, &tr2));
    CHECK_OK(tio_trace_add_tensor(tr2, 1 << 20, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, "w", &t));
    for (int i = 0; i < 4; i++) {
        CHECK_OK(tio_trace_add_kernel(tr2, "k", 2000, 0, &k)); /* other durations */
        if (i == 0) {
            CHECK_OK(tio_trace_add_use(tr2, t, TIO_USE_READ));
        }
    }
    CHECK_OK(tio_trace_finish(tr2));
    uint64_t h;
    CHECK_OK(tio_trace_hash(tr, &h));
    struct tio_plan *p = NULL;
    CHECK_OK(tio_plan_new(h, 4, "none", &p));
    CHECK_OK(tio_plan_finish(p));
    CHECK_OK(tio_plan_check_trace(p, tr));
    CHECK_RC(tio_plan_check_trace(p, tr2), TIO_EPLAN);
    CHECK_ERR_HAS("made for trace");
    tio_plan_free(p);
    tio_trace_free(tr);
    tio_trace_free(tr2);
}

/* Save p with summary s as a binary plan and load it back: the loader's status. */
static int reload_with_summary(struct tio_plan *p, const struct tio_plan_summary *s) {
    char bin[512];
    (void)snprintf(bin, sizeof bin, "%s/s.plan", tmpdir);
    tio_plan_set_summary(p, s);
    int rc = tio_plan_save(p, bin, TIO_PLAN_FORMAT_BINARY);
    if (rc < 0) {
        return rc;
    }
    struct tio_plan *q = NULL;
    rc = tio_plan_load(bin, TIO_PLAN_FORMAT_AUTO, &q);
    tio_plan_free(q);
    return rc;
}

/* A plan file's summary must be sane: a finite planning time, a capacity some machine could
 * have, no shortfall in a feasible plan, a shortfall kernel inside the plan. */
TIO_TEST(absurd_summaries_rejected) {
    struct tio_plan *p = sample();
    REQUIRE(p != NULL);
    struct tio_plan_summary good;
    tio_plan_get_summary(p, &good);
    CHECK_OK(reload_with_summary(p, &good));
    struct tio_plan_summary s = good;
    s.planning_seconds = (double)NAN;
    CHECK_RC(reload_with_summary(p, &s), TIO_EFORMAT);
    CHECK_ERR_HAS("planning_seconds");
    s.planning_seconds = -HUGE_VAL;
    CHECK_RC(reload_with_summary(p, &s), TIO_EFORMAT);
    CHECK_ERR_HAS("planning_seconds");
    s = good;
    s.capacity_bytes = UINT64_C(1) << 62;
    CHECK_RC(reload_with_summary(p, &s), TIO_EFORMAT);
    CHECK_ERR_HAS("capacity_bytes");
    s = good;
    s.shortfall_bytes = 5;
    CHECK_RC(reload_with_summary(p, &s), TIO_EFORMAT);
    CHECK_ERR_HAS("shortfall_bytes");
    s = good;
    s.feasible = 0;
    s.shortfall_bytes = 5;
    s.shortfall_kernel = 10; /* n_kernels is 10 */
    CHECK_RC(reload_with_summary(p, &s), TIO_EFORMAT);
    CHECK_ERR_HAS("shortfall_kernel");
    s.shortfall_kernel = 9;
    CHECK_OK(reload_with_summary(p, &s));
    tio_plan_free(p);
}

/* Unknown members anywhere in a JSON plan are errors naming the member (typos must not be
 * silently ignored). */
TIO_TEST(json_unknown_members_rejected) {
#define DOC                                                                     \
    "{\"format\":\"teraio-plan\",\"version\":1,\"policy\":\"x\",%s"             \
    "\"trace_hash\":\"00000000000000ff\",\"n_kernels\":10,"                     \
    "\"summary\":{%s\"n_moves\":1,\"n_offloads\":1,\"feasible\":true,"          \
    "\"planning_seconds\":0,\"capacity_bytes\":0,\"planned_peak_bytes\":0,"     \
    "\"shortfall_bytes\":0,\"shortfall_kernel\":0,\"host_peak_bytes\":0,"       \
    "\"ssd_peak_bytes\":0,\"bytes_to_ssd\":0,\"bytes_to_host\":0},"             \
    "\"moves\":[{%s\"tensor\":0,\"from\":\"gpu\",\"to\":\"ssd\",\"trigger\":1," \
    "\"deadline\":4,\"bytes\":8,\"flags\":[]}]}"
    char text[2048];
    struct tio_plan *p = NULL;
    (void)snprintf(text, sizeof text, DOC, "", "", "");
    CHECK_OK(tio_plan_load_mem(text, strlen(text), TIO_PLAN_FORMAT_JSON, &p));
    tio_plan_free(p);
    p = NULL;
    (void)snprintf(text, sizeof text, DOC, "\"capacity\":5,", "", "");
    CHECK_RC(tio_plan_load_mem(text, strlen(text), TIO_PLAN_FORMAT_JSON, &p), TIO_EFORMAT);
    CHECK_ERR_HAS("unknown member \"capacity\"");
    (void)snprintf(text, sizeof text, DOC, "", "\"feasable\":true,", "");
    CHECK_RC(tio_plan_load_mem(text, strlen(text), TIO_PLAN_FORMAT_JSON, &p), TIO_EFORMAT);
    CHECK_ERR_HAS("summary: unknown member \"feasable\"");
    (void)snprintf(text, sizeof text, DOC, "", "", "\"urgent\":true,");
    CHECK_RC(tio_plan_load_mem(text, strlen(text), TIO_PLAN_FORMAT_JSON, &p), TIO_EFORMAT);
    CHECK_ERR_HAS("move 0: unknown member \"urgent\"");
#undef DOC
}

/* A move's size must be its tensor's size in the trace (the hash covers the trace, not an
 * edited plan file). */
TIO_TEST(move_bytes_must_match_trace) {
    struct tio_trace *tr = NULL;
    uint32_t t, k;
    CHECK_OK(tio_trace_new(NULL, &tr));
    CHECK_OK(tio_trace_add_tensor(tr, 1 << 20, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, "w", &t));
    for (int i = 0; i < 4; i++) {
        CHECK_OK(tio_trace_add_kernel(tr, "k", 1000, 0, &k));
        if (i == 0 || i == 3) {
            CHECK_OK(tio_trace_add_use(tr, t, TIO_USE_READ));
        }
    }
    CHECK_OK(tio_trace_finish(tr));
    uint64_t h;
    CHECK_OK(tio_trace_hash(tr, &h));
    for (int wrong = 0; wrong < 2; wrong++) {
        struct tio_plan *p = NULL;
        CHECK_OK(tio_plan_new(h, 4, "teraio", &p));
        uint64_t b = wrong ? 4096 : 1 << 20;
        struct tio_move ms[] = { mv(0, TIO_TIER_GPU, TIO_TIER_HOST, 1, 2, b),
                                 mv(0, TIO_TIER_HOST, TIO_TIER_GPU, 2, 3, b) };
        CHECK_OK(tio_plan_add_move(p, &ms[0]));
        CHECK_OK(tio_plan_add_move(p, &ms[1]));
        CHECK_OK(tio_plan_finish(p));
        if (wrong) {
            CHECK_RC(tio_plan_check_trace(p, tr), TIO_EPLAN);
            CHECK_ERR_HAS("4096 bytes, but tensor 0 has 1048576");
        } else {
            CHECK_OK(tio_plan_check_trace(p, tr));
        }
        tio_plan_free(p);
    }
    tio_trace_free(tr);
}

/* A plan carries its execution (enum tio_plan_exec): set before finish, refused with moves
 * when it names a baseline, kept by both formats whatever the policy's name. */
TIO_TEST(execution_set_verified_and_saved) {
    for (int32_t e = 0; e < TIO_PLAN_EXEC_COUNT; e++) {
        CHECK(tio_plan_exec_name(e) != NULL);
        CHECK_EQ_I(tio_plan_exec_parse(tio_plan_exec_name(e)), e);
    }
    CHECK_STR(tio_plan_exec_name(TIO_PLAN_EXEC_LRU), "lru");
    CHECK_STR(tio_plan_exec_name(TIO_PLAN_EXEC_ZERO_INFINITY), "zero-infinity");
    CHECK(tio_plan_exec_name(TIO_PLAN_EXEC_COUNT) == NULL);
    CHECK(tio_plan_exec_name(-1) == NULL);
    CHECK_EQ_I(tio_plan_exec_parse("teraio"), -1);
    CHECK_EQ_I(tio_plan_exec_parse(NULL), -1);
    CHECK_EQ_I(tio_plan_execution(NULL), TIO_PLAN_EXEC_MOVES);

    struct tio_plan *p = NULL;
    CHECK_OK(tio_plan_new(7, 10, "my-swapping", &p));
    CHECK_EQ_I(tio_plan_execution(p), TIO_PLAN_EXEC_MOVES);
    CHECK_RC(tio_plan_set_execution(p, TIO_PLAN_EXEC_COUNT), TIO_EINVAL);
    CHECK_ERR_HAS("execution 6");
    CHECK_OK(tio_plan_set_execution(p, TIO_PLAN_EXEC_LRU));
    CHECK_OK(tio_plan_finish(p));
    CHECK_RC(tio_plan_set_execution(p, TIO_PLAN_EXEC_MOVES), TIO_ESTATE);
    char bin[512], js[512];
    (void)snprintf(bin, sizeof bin, "%s/x.plan", tmpdir);
    (void)snprintf(js, sizeof js, "%s/x.json", tmpdir);
    CHECK_OK(tio_plan_save(p, bin, TIO_PLAN_FORMAT_AUTO));
    CHECK_OK(tio_plan_save(p, js, TIO_PLAN_FORMAT_AUTO));
    struct tio_plan *a = NULL, *b = NULL;
    CHECK_OK(tio_plan_load(bin, TIO_PLAN_FORMAT_AUTO, &a));
    CHECK_OK(tio_plan_load(js, TIO_PLAN_FORMAT_AUTO, &b));
    CHECK_EQ_I(tio_plan_execution(a), TIO_PLAN_EXEC_LRU);
    CHECK_EQ_I(tio_plan_execution(b), TIO_PLAN_EXEC_LRU);
    CHECK(a && b && strcmp(tio_plan_policy(b), "my-swapping") == 0);
    size_t len = 0;
    unsigned char *raw = slurp(js, &len);
    CHECK(raw && strstr((const char *)raw, "\"execution\": \"lru\"") != NULL);
    free(raw);
    tio_plan_free(a);
    tio_plan_free(b);
    tio_plan_free(p);

    /* a baseline holds no moves */
    p = NULL;
    CHECK_OK(tio_plan_new(7, 10, "teraio", &p));
    CHECK_OK(tio_plan_set_execution(p, TIO_PLAN_EXEC_ZERO_OFFLOAD));
    struct tio_move m = mv(0, TIO_TIER_GPU, TIO_TIER_SSD, 1, 2, 8);
    CHECK_OK(tio_plan_add_move(p, &m));
    CHECK_RC(tio_plan_finish(p), TIO_EPLAN);
    CHECK_ERR_HAS("execution \"zero-offload\"");
    tio_plan_free(p);
}

/* The "execution" member of JSON plans: checked, required from version 2; a version 1 file
 * (written before it existed) is executed by its moves, or refused without any, naming the
 * member. */
TIO_TEST(json_execution_member) {
#define DOC                                                                 \
    "{\"format\":\"teraio-plan\",\"version\":%d,\"policy\":\"lru\",%s"      \
    "\"trace_hash\":\"00000000000000ff\",\"n_kernels\":10,"                 \
    "\"summary\":{\"n_moves\":%d,\"n_offloads\":%d,\"feasible\":true,"      \
    "\"planning_seconds\":0,\"capacity_bytes\":0,\"planned_peak_bytes\":0," \
    "\"shortfall_bytes\":0,\"shortfall_kernel\":0,\"host_peak_bytes\":0,"   \
    "\"ssd_peak_bytes\":0,\"bytes_to_ssd\":0,\"bytes_to_host\":0},\"moves\":[%s]}"
#define MOVE                                                                      \
    "{\"tensor\":0,\"from\":\"gpu\",\"to\":\"ssd\",\"trigger\":1,\"deadline\":4," \
    "\"bytes\":8,\"flags\":[]}"
    char text[2048];
    struct tio_plan *p = NULL;
    (void)snprintf(text, sizeof text, DOC, 2, "\"execution\":\"lru\",", 0, 0, "");
    CHECK_OK(tio_plan_load_mem(text, strlen(text), TIO_PLAN_FORMAT_JSON, &p));
    CHECK_EQ_I(tio_plan_execution(p), TIO_PLAN_EXEC_LRU);
    tio_plan_free(p);
    p = NULL;
    (void)snprintf(text, sizeof text, DOC, 2, "\"execution\":\"moves\",", 0, 0, "");
    CHECK_OK(tio_plan_load_mem(text, strlen(text), TIO_PLAN_FORMAT_JSON, &p));
    CHECK_EQ_I(tio_plan_execution(p), TIO_PLAN_EXEC_MOVES); /* named "lru", yet its moves */
    tio_plan_free(p);
    p = NULL;
    (void)snprintf(text, sizeof text, DOC, 2, "\"execution\":\"lru\",", 1, 1, MOVE);
    CHECK_RC(tio_plan_load_mem(text, strlen(text), TIO_PLAN_FORMAT_JSON, &p), TIO_EPLAN);
    CHECK_ERR_HAS("execution \"lru\"");
    (void)snprintf(text, sizeof text, DOC, 2, "\"execution\":\"swap\",", 0, 0, "");
    CHECK_RC(tio_plan_load_mem(text, strlen(text), TIO_PLAN_FORMAT_JSON, &p), TIO_EFORMAT);
    CHECK_ERR_HAS("\"execution\" must be one of");
    (void)snprintf(text, sizeof text, DOC, 2, "\"execution\":3,", 0, 0, "");
    CHECK_RC(tio_plan_load_mem(text, strlen(text), TIO_PLAN_FORMAT_JSON, &p), TIO_EFORMAT);
    CHECK_ERR_HAS("\"execution\" must be one of");
    (void)snprintf(text, sizeof text, DOC, 2, "", 1, 1, MOVE);
    CHECK_RC(tio_plan_load_mem(text, strlen(text), TIO_PLAN_FORMAT_JSON, &p), TIO_EFORMAT);
    CHECK_ERR_HAS("\"execution\" missing");
    (void)snprintf(text, sizeof text, DOC, 3, "\"execution\":\"moves\",", 0, 0, "");
    CHECK_RC(tio_plan_load_mem(text, strlen(text), TIO_PLAN_FORMAT_JSON, &p), TIO_EVERSION);
    CHECK_ERR_HAS("version 3 not supported (this build reads 1 to 2); written by a newer teraio");
    (void)snprintf(text, sizeof text, DOC, 0, "\"execution\":\"moves\",", 0, 0, "");
    CHECK_RC(tio_plan_load_mem(text, strlen(text), TIO_PLAN_FORMAT_JSON, &p), TIO_EVERSION);
    CHECK(strstr(tio_last_error(), "newer") == NULL); /* version 0 is no newer plan */
    /* version 1 */
    (void)snprintf(text, sizeof text, DOC, 1, "", 1, 1, MOVE);
    CHECK_OK(tio_plan_load_mem(text, strlen(text), TIO_PLAN_FORMAT_JSON, &p));
    CHECK_EQ_I(tio_plan_execution(p), TIO_PLAN_EXEC_MOVES);
    tio_plan_free(p);
    p = NULL;
    (void)snprintf(text, sizeof text, DOC, 1, "", 0, 0, "");
    CHECK_RC(tio_plan_load_mem(text, strlen(text), TIO_PLAN_FORMAT_JSON, &p), TIO_EFORMAT);
    CHECK_ERR_HAS("no \"execution\" (a version 1 plan file) and no moves");
    CHECK(p == NULL);
#undef MOVE
#undef DOC
}

/* Binary plans of version 1 (a 200-byte header without the execution) still load. */
TIO_TEST(binary_version1_loads) {
    for (int with_moves = 0; with_moves < 2; with_moves++) {
        struct tio_plan *p = NULL;
        if (with_moves) {
            p = sample();
        } else {
            CHECK_OK(tio_plan_new(9, 10, "none", &p));
            CHECK_OK(tio_plan_set_execution(p, TIO_PLAN_EXEC_NONE));
            CHECK_OK(tio_plan_finish(p));
        }
        CHECK(p != NULL);
        char bin[512];
        (void)snprintf(bin, sizeof bin, "%s/v.plan", tmpdir);
        CHECK_OK(tio_plan_save(p, bin, TIO_PLAN_FORMAT_BINARY));
        size_t len = 0;
        unsigned char *raw = slurp(bin, &len);
        REQUIRE_OR(raw && len >= 212, (free(raw), tio_plan_free(p)));
        /* the same plan as version 1 wrote it: header 200, no execution, CRC over the rest */
        raw[8] = 1;
        raw[12] = 200;
        memmove(raw + 200, raw + 208, len - 208);
        len -= 8;
        uint32_t crc = tio_crc32c(0, raw, len - 4);
        for (int i = 0; i < 4; i++) {
            raw[len - 4 + (size_t)i] = (unsigned char)(crc >> (8 * i));
        }
        FILE *f = fopen(bin, "wb");
        CHECK(f && fwrite(raw, 1, len, f) == len);
        CHECK(f && fclose(f) == 0);
        struct tio_plan *q = NULL, *r = NULL;
        if (with_moves) {
            CHECK_OK(tio_plan_load_mem(raw, len, TIO_PLAN_FORMAT_AUTO, &q));
            CHECK(q && same_plans(p, q));
            CHECK_EQ_I(tio_plan_execution(q), TIO_PLAN_EXEC_MOVES);
            CHECK_OK(tio_plan_load(bin, TIO_PLAN_FORMAT_AUTO, &r)); /* the file's size check */
            CHECK(r && same_plans(p, r));
        } else {
            CHECK_RC(tio_plan_load_mem(raw, len, TIO_PLAN_FORMAT_AUTO, &q), TIO_EFORMAT);
            CHECK_ERR_HAS("no \"execution\"");
            CHECK_RC(tio_plan_load(bin, TIO_PLAN_FORMAT_AUTO, &r), TIO_EFORMAT);
            CHECK_ERR_HAS("no \"execution\"");
        }
        tio_plan_free(q);
        tio_plan_free(r);
        free(raw);
        tio_plan_free(p);
    }
}

int main(void) {
    (void)snprintf(tmpdir, sizeof tmpdir, "/tmp/tio_test_planfmt_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        TIO_SKIP("mkdtemp failed");
    }
    RUN(moves_sorted_and_flags_normalized);
    RUN(moves_sorted_on_every_key);
    RUN(bad_moves_rejected);
    RUN(round_trips);
    RUN(json_errors_name_the_field);
    RUN(trace_hash_mismatch_rejected);
    RUN(absurd_summaries_rejected);
    RUN(json_unknown_members_rejected);
    RUN(move_bytes_must_match_trace);
    RUN(execution_set_verified_and_saved);
    RUN(json_execution_member);
    RUN(binary_version1_loads);
    char cmd[300];
    (void)snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) {
        printf("warning: could not remove %s\n", tmpdir);
    }
    return tio_test_done();
}
