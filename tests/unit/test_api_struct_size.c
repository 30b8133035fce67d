/*
 * Versioned structs (docs/style.md, "Versioned structs"): the structs a caller fills or
 * receives start with struct_size. A struct not filled by its defaults function (struct_size
 * 0), one smaller than the first versioned release, or one from a newer header that sets a
 * field this library does not know is refused with TIO_EVERSION; a newer header's struct
 * whose extra fields are unset is accepted, and results are written only as far as the
 * caller's size goes.
 */
#include <stddef.h>
#include <string.h>

#include <teraio/teraio.h>

#include "sim_util.h"
#include "tio_test.h"

/* What a caller built against a newer header passes: the struct with fields appended. */
struct newer_engine_params {
    struct tio_engine_params p;
    uint64_t added[2];
};

static int make_engine(const struct tio_engine_params *p) {
    struct tio_engine *e = NULL;
    int rc = tio_engine_new(p, &e);
    tio_engine_free(e);
    return rc;
}

static struct tio_engine_params host_only(void) {
    struct tio_engine_params p = tio_engine_params_default();
    p.host_tier_bytes = 1 << 20;
    p.backend = "posix";
    return p;
}

TIO_TEST(engine_params_defaults_fill_the_callers_size) {
    struct newer_engine_params n;
    memset(&n, 0xAB, sizeof n);
    CHECK_OK(tio_engine_params_defaults(&n.p, sizeof n));
    CHECK_EQ_U(n.p.struct_size, sizeof n);
    CHECK_EQ_U(n.p.chunk_bytes, TIO_ENGINE_DEFAULT_CHUNK);
    CHECK_EQ_U(n.p.queue_depth, TIO_ENGINE_DEFAULT_DEPTH);
    CHECK_EQ_U(n.p.max_requests, TIO_ENGINE_DEFAULT_MAX_REQUESTS);
    CHECK_EQ_U(n.added[0], 0); /* fields this library does not know: unset */
    CHECK_EQ_U(n.added[1], 0);
    struct tio_engine_params p;
    CHECK_OK(tio_engine_params_defaults(&p, sizeof p));
    CHECK_EQ_U(p.struct_size, sizeof p);
    CHECK_EQ_U(tio_engine_params_default().struct_size, sizeof p);
    memset(&p, 0xAB, sizeof p);
    CHECK_RC(tio_engine_params_defaults(&p, offsetof(struct tio_engine_params, threads)),
             TIO_EVERSION);
    CHECK_EQ_U(p.struct_size, 0xABABABABu); /* refused: untouched */
    CHECK_RC(tio_engine_params_defaults(NULL, sizeof p), TIO_EINVAL);
}

TIO_TEST(engine_new_checks_struct_size) {
    struct tio_engine_params p = host_only();
    CHECK_OK(make_engine(&p));
    p.struct_size = 0; /* as from `= {0}` or memset without the defaults function */
    CHECK_RC(make_engine(&p), TIO_EVERSION);
    CHECK_ERR_HAS("struct_size 0");
    p.struct_size = (uint32_t)offsetof(struct tio_engine_params, threads); /* older than v1 */
    CHECK_RC(make_engine(&p), TIO_EVERSION);

    struct newer_engine_params n;
    memset(&n, 0, sizeof n);
    n.p = host_only();
    n.p.struct_size = sizeof n;
    CHECK_OK(make_engine(&n.p)); /* newer header, its new fields unset */
    n.added[1] = 1;
    CHECK_RC(make_engine(&n.p), TIO_EVERSION); /* a field this library would ignore */
    CHECK_ERR_HAS("newer libteraio");
}

TIO_TEST(hw_and_model_check_struct_size) {
    struct tio_hw hw;
    memset(&hw, 0, sizeof hw);
    CHECK_OK(tio_hw_defaults(&hw, sizeof hw));
    CHECK_EQ_U(hw.struct_size, sizeof hw);
    CHECK_EQ_U(hw.gpus, 2); /* the paper's server: 2 x H100 NVL */
    CHECK_OK(tio_hw_validate(&hw));
    struct tio_hw loaded;
    memset(&loaded, 0, sizeof loaded);
    CHECK_OK(tio_hw_load("cpu-ci", &loaded));
    CHECK_EQ_U(loaded.struct_size, sizeof loaded);
    CHECK_OK(tio_hw_validate(&loaded));
    hw.struct_size = 0;
    CHECK_RC(tio_hw_validate(&hw), TIO_EVERSION);

    struct tio_model_params mp;
    CHECK_OK(tio_model_params_defaults(&mp, sizeof mp));
    CHECK_EQ_U(mp.struct_size, sizeof mp);
    CHECK_OK(tio_model_validate(&mp));
    CHECK_OK(tio_model_preset("llama3-8b", &mp));
    CHECK_EQ_U(mp.struct_size, sizeof mp);
    mp.struct_size = 0;
    CHECK_RC(tio_model_validate(&mp), TIO_EVERSION);
    struct tio_trace *tr = NULL;
    CHECK_RC(tio_model_generate(&mp, &tr, NULL), TIO_EVERSION);
    CHECK(tr == NULL);
}

TIO_TEST(engine_requests_check_struct_size) {
    struct tio_engine_params p = host_only();
    struct tio_engine *e = NULL;
    CHECK_OK(tio_engine_new(&p, &e));
    REQUIRE(e != NULL);
    static unsigned char src[4096], dst[4096];
    for (size_t i = 0; i < sizeof src; i++) {
        src[i] = (unsigned char)(i * 7 + 1);
    }
    struct tio_engine_write_request w = { .struct_size = 0,
                                          .tensor_id = 5,
                                          .src = src,
                                          .bytes = sizeof src,
                                          .mem = TIO_MEM_HOST,
                                          .tier = TIO_TIER_HOST,
                                          .tag = 1 };
    CHECK_RC(tio_engine_write(e, &w), TIO_EVERSION);
    CHECK_RC(tio_engine_write(e, NULL), TIO_EINVAL);
    w.struct_size = sizeof w;
    CHECK_OK(tio_engine_write(e, &w));
    struct tio_completion c = { 0, 0 };
    CHECK_EQ_I(tio_engine_wait(e, &c, 1, 1, 10 * INT64_C(1000000000)), 1);
    CHECK_EQ_I(c.res, (int64_t)sizeof src);
    struct tio_engine_read_request r = { .struct_size = (uint32_t)offsetof(
                                             struct tio_engine_read_request, done),
                                         .tensor_id = 5,
                                         .dst = dst,
                                         .bytes = sizeof dst,
                                         .mem = TIO_MEM_HOST,
                                         .tag = 2 };
    CHECK_RC(tio_engine_read(e, &r), TIO_EVERSION); /* older than the first request struct */
    r.struct_size = sizeof r;
    CHECK_OK(tio_engine_read(e, &r));
    CHECK_EQ_I(tio_engine_wait(e, &c, 1, 1, 10 * INT64_C(1000000000)), 1);
    CHECK_EQ_U(c.tag, 2);
    CHECK(memcmp(src, dst, sizeof src) == 0);
    tio_engine_free(e);
}

/* A result struct as a newer header declares it. */
struct newer_sim_result {
    struct tio_sim_result r;
    double added[3];
};

TIO_TEST(sim_checks_params_and_fills_results_by_size) {
    const struct tspec ts[] = { { 1000, W, G } };
    const struct kspec ks[] = { { 2, 0, { 0, -1 } }, { 3, 0, { 0, -1 } } };
    struct tio_trace *tr = mk(ts, 1, ks, 2, NULL);
    REQUIRE(tr != NULL);
    struct tio_hw hw = sim_test_hw(1, 1 << 20);
    struct tio_sim_params sp;
    CHECK_OK(tio_sim_params_defaults(&sp, sizeof sp));
    CHECK_EQ_U(sp.warmup_iterations, 1); /* documented default */
    sp.policy = "ideal";
    struct tio_sim *sim = NULL;
    CHECK_OK(tio_sim_run(tr, &hw, NULL, 0, &sp, &sim));
    REQUIRE(sim != NULL);

    struct newer_sim_result big;
    memset(&big, 0xAB, sizeof big);
    CHECK_OK(tio_sim_get_result(sim, &big.r, sizeof big));
    CHECK_EQ_U(big.r.struct_size, sizeof big);
    CHECK_NEAR(big.r.ideal_s, 5e-3, 1e-12);
    CHECK(big.added[0] == 0 && big.added[2] == 0);
    struct tio_sim_result r;
    CHECK_OK(tio_sim_get_result(sim, &r, sizeof r));
    CHECK_EQ_U(r.struct_size, sizeof r);
    CHECK_NEAR(r.ideal_s, 5e-3, 1e-12);
    CHECK_RC(tio_sim_get_result(sim, &r, offsetof(struct tio_sim_result, pipeline_wait_s)),
             TIO_EVERSION);
    tio_sim_free(sim);

    sim = NULL;
    sp.struct_size = 0;
    CHECK_RC(tio_sim_run(tr, &hw, NULL, 0, &sp, &sim), TIO_EVERSION);
    CHECK(sim == NULL);
    sp.struct_size = sizeof sp;
    hw.struct_size = 0;
    CHECK_RC(tio_sim_run(tr, &hw, NULL, 0, &sp, &sim), TIO_EVERSION);
    CHECK(sim == NULL);
    tio_trace_free(tr);
}

/* Params structs as a newer header declares them: the struct with fields appended. */
struct newer_trace_params {
    struct tio_trace_params p;
    uint64_t added[2];
};
struct newer_analysis_params {
    struct tio_analysis_params p;
    uint64_t added[2];
};
struct newer_plan_params {
    struct tio_plan_params p;
    uint64_t added[2];
};
struct newer_runtime_params {
    struct tio_runtime_params p;
    uint64_t added[2];
};

TIO_TEST(trace_params_check_struct_size) {
    struct newer_trace_params n;
    memset(&n, 0xAB, sizeof n);
    CHECK_OK(tio_trace_params_defaults(&n.p, sizeof n));
    CHECK_EQ_U(n.p.struct_size, sizeof n);
    CHECK_EQ_U(n.p.kernels_hint, 0); /* documented default: all hints 0 */
    CHECK_EQ_U(n.p.uses_hint, 0);
    CHECK(n.added[0] == 0 && n.added[1] == 0);
    struct tio_trace_params p;
    memset(&p, 0xAB, sizeof p);
    CHECK_RC(tio_trace_params_defaults(&p, offsetof(struct tio_trace_params, uses_hint)),
             TIO_EVERSION);
    CHECK_EQ_U(p.struct_size, 0xABABABABu); /* refused: untouched */
    CHECK_RC(tio_trace_params_defaults(NULL, sizeof p), TIO_EINVAL);
    CHECK_OK(tio_trace_params_defaults(&p, sizeof p));
    CHECK_EQ_U(p.struct_size, sizeof p);
    CHECK_EQ_U(tio_trace_params_default().struct_size, sizeof p);

    struct tio_trace *tr = NULL;
    p.kernels_hint = 10;
    CHECK_OK(tio_trace_new(&p, &tr));
    REQUIRE(tr != NULL);
    tio_trace_free(tr);
    tr = NULL;
    CHECK_OK(tio_trace_new(NULL, &tr)); /* NULL: the defaults */
    REQUIRE(tr != NULL);
    tio_trace_free(tr);
    tr = NULL;
    p.struct_size = 0;
    CHECK_RC(tio_trace_new(&p, &tr), TIO_EVERSION);
    CHECK_ERR_HAS("struct_size 0");
    CHECK(tr == NULL);
    p.struct_size = (uint32_t)offsetof(struct tio_trace_params, uses_hint);
    CHECK_RC(tio_trace_new(&p, &tr), TIO_EVERSION);

    memset(&n, 0, sizeof n);
    CHECK_OK(tio_trace_params_defaults(&n.p, sizeof n));
    n.p.kernels_hint = (size_t)TIO_TRACE_MAX_KERNELS + 1; /* read from a newer caller's struct */
    CHECK_RC(tio_trace_new(&n.p, &tr), TIO_EINVAL);
    n.p.kernels_hint = 10;
    CHECK_OK(tio_trace_new(&n.p, &tr)); /* its new fields unset */
    REQUIRE(tr != NULL);
    tio_trace_free(tr);
    tr = NULL;
    n.added[1] = 1;
    CHECK_RC(tio_trace_new(&n.p, &tr), TIO_EVERSION);
    CHECK_ERR_HAS("newer libteraio");
    CHECK(tr == NULL);
}

TIO_TEST(analysis_params_check_struct_size) {
    struct newer_analysis_params n;
    memset(&n, 0xAB, sizeof n);
    CHECK_OK(tio_analysis_params_defaults(&n.p, sizeof n));
    CHECK_EQ_U(n.p.struct_size, sizeof n);
    CHECK_EQ_U(n.p.capacity_bytes, 0);
    CHECK_EQ_U(n.p.long_idle_ns, 10000000); /* documented default: 10 ms */
    CHECK(n.added[0] == 0 && n.added[1] == 0);
    struct tio_analysis_params p;
    memset(&p, 0xAB, sizeof p);
    CHECK_RC(tio_analysis_params_defaults(&p, offsetof(struct tio_analysis_params, long_idle_ns)),
             TIO_EVERSION);
    CHECK_EQ_U(p.struct_size, 0xABABABABu);
    CHECK_RC(tio_analysis_params_defaults(NULL, sizeof p), TIO_EINVAL);
    CHECK_OK(tio_analysis_params_defaults(&p, sizeof p));
    CHECK_EQ_U(p.struct_size, sizeof p);
    CHECK_EQ_U(tio_analysis_params_default().struct_size, sizeof p);

    const struct tspec ts[] = { { 1000, W, G } };
    const struct kspec ks[] = { { 2, 0, { 0, -1 } }, { 3, 0, { 0, -1 } } };
    struct tio_trace *tr = mk(ts, 1, ks, 2, NULL);
    REQUIRE(tr != NULL);
    struct tio_analysis *a = NULL;
    struct tio_analysis_summary s;
    CHECK_OK(tio_analysis_new(tr, NULL, &a)); /* NULL: the defaults, capacity unknown */
    REQUIRE(a != NULL);
    tio_analysis_get_summary(a, &s);
    CHECK(s.active_capacity_fraction_max == 0);
    tio_analysis_free(a);
    a = NULL;
    p.struct_size = 0;
    CHECK_RC(tio_analysis_new(tr, &p, &a), TIO_EVERSION);
    CHECK_ERR_HAS("struct_size 0");
    CHECK(a == NULL);
    p.struct_size = (uint32_t)offsetof(struct tio_analysis_params, long_idle_ns);
    CHECK_RC(tio_analysis_new(tr, &p, &a), TIO_EVERSION);

    memset(&n, 0, sizeof n);
    CHECK_OK(tio_analysis_params_defaults(&n.p, sizeof n));
    n.p.capacity_bytes = 4000; /* the tensor's 1000 bytes are a quarter of it */
    CHECK_OK(tio_analysis_new(tr, &n.p, &a));
    REQUIRE(a != NULL);
    tio_analysis_get_summary(a, &s);
    CHECK_NEAR(s.active_capacity_fraction_max, 0.25, 1e-12);
    tio_analysis_free(a);
    a = NULL;
    n.added[0] = 1;
    CHECK_RC(tio_analysis_new(tr, &n.p, &a), TIO_EVERSION);
    CHECK_ERR_HAS("newer libteraio");
    CHECK(a == NULL);
    tio_trace_free(tr);
}

TIO_TEST(plan_params_check_struct_size) {
    struct newer_plan_params n;
    memset(&n, 0xAB, sizeof n);
    CHECK_OK(tio_plan_params_defaults(&n.p, sizeof n));
    CHECK_EQ_U(n.p.struct_size, sizeof n);
    CHECK(strcmp(n.p.policy, "teraio") == 0); /* documented defaults */
    CHECK_EQ_U(n.p.min_tensor_bytes, 1u << 20);
    CHECK(n.p.memory_slack == TIO_PLAN_DEFAULT_SLACK);
    CHECK(n.added[0] == 0 && n.added[1] == 0);
    struct tio_plan_params p;
    memset(&p, 0xAB, sizeof p);
    CHECK_RC(tio_plan_params_defaults(&p, offsetof(struct tio_plan_params, memory_slack)),
             TIO_EVERSION);
    CHECK_EQ_U(p.struct_size, 0xABABABABu);
    CHECK_RC(tio_plan_params_defaults(NULL, sizeof p), TIO_EINVAL);
    CHECK_OK(tio_plan_params_defaults(&p, sizeof p));
    CHECK_EQ_U(p.struct_size, sizeof p);
    CHECK_EQ_U(tio_plan_params_default().struct_size, sizeof p);

    const struct tspec ts[] = { { 1000, W, G } };
    const struct kspec ks[] = { { 2, 0, { 0, -1 } }, { 3, 0, { 0, -1 } } };
    struct tio_trace *tr = mk(ts, 1, ks, 2, NULL);
    REQUIRE(tr != NULL);
    struct tio_hw hw = sim_test_hw(1, 1 << 20);
    struct tio_plan *plan = NULL;
    CHECK_OK(tio_plan_make(tr, &hw, NULL, &plan)); /* NULL: the defaults */
    REQUIRE(plan != NULL);
    CHECK(strcmp(tio_plan_policy(plan), "teraio") == 0);
    CHECK_OK(tio_plan_verify(plan, tr, &hw, NULL, NULL));
    CHECK_OK(tio_plan_verify(plan, tr, &hw, &p, NULL));
    p.struct_size = 0;
    CHECK_RC(tio_plan_verify(plan, tr, &hw, &p, NULL), TIO_EVERSION);
    CHECK_ERR_HAS("struct_size 0");
    tio_plan_free(plan);
    plan = NULL;
    CHECK_RC(tio_plan_make(tr, &hw, &p, &plan), TIO_EVERSION);
    CHECK_ERR_HAS("struct_size 0");
    CHECK(plan == NULL);
    p.struct_size = (uint32_t)offsetof(struct tio_plan_params, memory_slack);
    CHECK_RC(tio_plan_make(tr, &hw, &p, &plan), TIO_EVERSION);

    memset(&n, 0, sizeof n);
    CHECK_OK(tio_plan_params_defaults(&n.p, sizeof n));
    n.p.policy = "ideal"; /* read from a newer caller's struct */
    CHECK_OK(tio_plan_make(tr, &hw, &n.p, &plan));
    REQUIRE(plan != NULL);
    CHECK_EQ_I(tio_plan_execution(plan), TIO_PLAN_EXEC_IDEAL);
    tio_plan_free(plan);
    plan = NULL;
    n.added[1] = 1;
    CHECK_RC(tio_plan_make(tr, &hw, &n.p, &plan), TIO_EVERSION);
    CHECK_ERR_HAS("newer libteraio");
    CHECK(plan == NULL);
    tio_trace_free(tr);
}

TIO_TEST(runtime_params_check_struct_size) {
    struct newer_runtime_params n;
    memset(&n, 0xAB, sizeof n);
    CHECK_OK(tio_runtime_params_defaults(&n.p, sizeof n));
    CHECK_EQ_U(n.p.struct_size, sizeof n);
    CHECK_EQ_I(n.p.mem, TIO_MEM_HOST); /* documented defaults */
    CHECK(n.p.trace == NULL && n.p.engine == NULL && n.p.budget_bytes == 0);
    CHECK(n.added[0] == 0 && n.added[1] == 0);
    struct tio_runtime_params p;
    memset(&p, 0xAB, sizeof p);
    CHECK_RC(tio_runtime_params_defaults(&p, offsetof(struct tio_runtime_params, stream_ordered)),
             TIO_EVERSION);
    CHECK_EQ_U(p.struct_size, 0xABABABABu);
    CHECK_RC(tio_runtime_params_defaults(NULL, sizeof p), TIO_EINVAL);
    CHECK_OK(tio_runtime_params_defaults(&p, sizeof p));
    CHECK_EQ_U(p.struct_size, sizeof p);
    CHECK_EQ_U(tio_runtime_params_default().struct_size, sizeof p);

    const struct tspec ts[] = { { 1000, W, G } };
    const struct kspec ks[] = { { 2, 0, { 0, -1 } }, { 3, 0, { 0, -1 } } };
    struct tio_trace *tr = mk(ts, 1, ks, 2, NULL);
    REQUIRE(tr != NULL);
    struct tio_hw hw = sim_test_hw(1, 1 << 20);
    struct tio_plan *plan = NULL;
    CHECK_OK(tio_plan_make(tr, &hw, NULL, &plan));
    REQUIRE(plan != NULL);
    struct tio_engine_params ep = host_only();
    struct tio_engine *e = NULL;
    CHECK_OK(tio_engine_new(&ep, &e));
    REQUIRE(e != NULL);

    struct tio_runtime *rt = NULL;
    p.trace = tr;
    p.plan = plan;
    p.engine = e;
    CHECK_OK(tio_runtime_new(&p, &rt));
    REQUIRE(rt != NULL);
    tio_runtime_free(rt);
    rt = NULL;
    CHECK_RC(tio_runtime_new(NULL, &rt), TIO_EINVAL); /* NULL stays an error */
    p.struct_size = 0;
    CHECK_RC(tio_runtime_new(&p, &rt), TIO_EVERSION);
    CHECK_ERR_HAS("struct_size 0");
    CHECK(rt == NULL);
    p.struct_size = (uint32_t)offsetof(struct tio_runtime_params, stream_ordered);
    CHECK_RC(tio_runtime_new(&p, &rt), TIO_EVERSION);

    memset(&n, 0, sizeof n);
    CHECK_OK(tio_runtime_params_defaults(&n.p, sizeof n));
    n.p.trace = tr;
    n.p.plan = plan;
    CHECK_RC(tio_runtime_new(&n.p, &rt), TIO_EINVAL); /* read from a newer caller's struct */
    CHECK_ERR_HAS("engine");
    n.p.engine = e;
    CHECK_OK(tio_runtime_new(&n.p, &rt)); /* its new fields unset */
    REQUIRE(rt != NULL);
    tio_runtime_free(rt);
    rt = NULL;
    n.added[1] = 1;
    CHECK_RC(tio_runtime_new(&n.p, &rt), TIO_EVERSION);
    CHECK_ERR_HAS("newer libteraio");
    CHECK(rt == NULL);
    tio_engine_free(e);
    tio_plan_free(plan);
    tio_trace_free(tr);
}

int main(void) {
    RUN(engine_params_defaults_fill_the_callers_size);
    RUN(engine_new_checks_struct_size);
    RUN(engine_requests_check_struct_size);
    RUN(hw_and_model_check_struct_size);
    RUN(sim_checks_params_and_fills_results_by_size);
    RUN(trace_params_check_struct_size);
    RUN(analysis_params_check_struct_size);
    RUN(plan_params_check_struct_size);
    RUN(runtime_params_check_struct_size);
    return tio_test_done();
}
