/* The trace builder: argument checks, use merging, validation, hash, metadata. */
#include <string.h>

#include <teraio/teraio.h>

#include "tio_test.h"

static struct tio_trace *small_trace(void) {
    struct tio_trace *tr = NULL;
    uint32_t w, x, y, k;
    if (tio_trace_new(NULL, &tr) < 0 ||
        tio_trace_add_tensor(tr, 64u << 20, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, "w", &w) < 0 ||
        tio_trace_add_tensor(tr, 8u << 20, TIO_TENSOR_INPUT, 0, "x", &x) < 0 ||
        tio_trace_add_tensor(tr, 8u << 20, TIO_TENSOR_ACTIVATION, 0, NULL, &y) < 0 ||
        tio_trace_add_kernel(tr, "aten::mm", 120000, 0, &k) < 0 ||
        tio_trace_add_use(tr, w, TIO_USE_READ) < 0 || tio_trace_add_use(tr, x, TIO_USE_READ) < 0 ||
        tio_trace_add_use(tr, y, TIO_USE_WRITE) < 0 ||
        tio_trace_add_kernel(tr, "aten::relu", 5000, 0, &k) < 0 ||
        tio_trace_add_use(tr, y, TIO_USE_READ) < 0 || tio_trace_add_use(tr, y, TIO_USE_WRITE) < 0) {
        tio_trace_free(tr);
        return NULL;
    }
    return tr;
}

TIO_TEST(build_and_view) {
    struct tio_trace *tr = small_trace();
    REQUIRE(tr != NULL);
    CHECK_OK(tio_trace_finish(tr));
    struct tio_trace_view v;
    tio_trace_get_view(tr, &v);
    CHECK_EQ_U(v.n_kernels, 2);
    CHECK_EQ_U(v.n_tensors, 3);
    CHECK_EQ_U(v.n_uses, 4); /* y's read and write in kernel 1 merged */
    CHECK_EQ_U(v.kernel_use_offset[0], 0);
    CHECK_EQ_U(v.kernel_use_offset[1], 3);
    CHECK_EQ_U(v.kernel_use_offset[2], 4);
    CHECK_EQ_U(v.use_mode[3], TIO_USE_READ_WRITE);
    CHECK_STR(tio_trace_kernel_name(tr, 1), "aten::relu");
    CHECK_STR(tio_trace_tensor_name(tr, 0), "w");
    CHECK(tio_trace_tensor_name(tr, 2) == NULL);
    CHECK_EQ_U(tio_trace_total_duration_ns(tr), 125000);
    tio_trace_free(tr);
}

TIO_TEST(names_are_interned) {
    struct tio_trace *tr;
    CHECK_OK(tio_trace_new(NULL, &tr));
    for (int i = 0; i < 1000; i++) {
        char name[32];
        snprintf(name, sizeof name, "op%d", i % 10);
        CHECK_OK(tio_trace_add_kernel(tr, name, 1, 0, NULL));
    }
    struct tio_trace_view v;
    tio_trace_get_view(tr, &v);
    CHECK_EQ_U(v.n_strings, 10);
    CHECK_STR(tio_trace_kernel_name(tr, 997), "op7");
    tio_trace_free(tr);
}

TIO_TEST(builder_rejects_bad_arguments) {
    struct tio_trace *tr;
    CHECK_OK(tio_trace_new(NULL, &tr));
    CHECK_RC(tio_trace_add_use(tr, 0, TIO_USE_READ), TIO_EINVAL); /* no kernel yet */
    CHECK_RC(tio_trace_add_tensor(tr, 0, TIO_TENSOR_WEIGHT, 0, NULL, NULL), TIO_EINVAL);
    CHECK_ERR_HAS("bytes");
    CHECK_RC(tio_trace_add_tensor(tr, 10, 99, 0, NULL, NULL), TIO_EINVAL);
    CHECK_ERR_HAS("kind");
    CHECK_RC(tio_trace_add_tensor(tr, 10, 0, 0x80, NULL, NULL), TIO_EINVAL);
    CHECK_ERR_HAS("trace: tensor 0: unknown flags 0x80");
    CHECK_OK(tio_trace_add_tensor(tr, 10, 0, 0, NULL, NULL));
    CHECK_RC(tio_trace_add_kernel(tr, "k", 1, 0x10, NULL), TIO_EINVAL);
    CHECK_ERR_HAS("trace: kernel 0: unknown flags 0x10");
    CHECK_OK(tio_trace_add_kernel(tr, "k", 1, 0, NULL));
    CHECK_RC(tio_trace_add_use(tr, 5, TIO_USE_READ), TIO_EINVAL);
    CHECK_ERR_HAS("out of range");
    CHECK_RC(tio_trace_add_use(tr, 0, 7), TIO_EINVAL);
    CHECK_RC(tio_trace_add_kernel(tr, "k", TIO_TRACE_MAX_DURATION + 1, 0, NULL), TIO_EINVAL);
    CHECK_OK(tio_trace_finish(tr));
    CHECK_RC(tio_trace_add_kernel(tr, "k", 1, 0, NULL), TIO_ESTATE);
    tio_trace_free(tr);
}

TIO_TEST(hash_depends_on_content) {
    struct tio_trace *a = small_trace(), *b = small_trace();
    REQUIRE(a && b);
    CHECK_OK(tio_trace_set_kernel_duration(b, 1, 5001));
    CHECK_OK(tio_trace_finish(a));
    CHECK_OK(tio_trace_finish(b));
    uint64_t ha, hb, ha2;
    CHECK_OK(tio_trace_hash(a, &ha));
    CHECK_OK(tio_trace_hash(a, &ha2));
    CHECK_OK(tio_trace_hash(b, &hb));
    CHECK_EQ_U(ha, ha2);
    CHECK(ha != hb);
    tio_trace_free(a);
    tio_trace_free(b);
}

TIO_TEST(metadata) {
    struct tio_trace *tr;
    CHECK_OK(tio_trace_new(NULL, &tr));
    CHECK_OK(tio_trace_set_meta(tr, "model", "llama3-8b"));
    CHECK_OK(tio_trace_set_meta(tr, "model", "llama3-70b"));
    CHECK_RC(tio_trace_set_meta(tr, "Bad Key", "x"), TIO_EINVAL);
    CHECK_STR(tio_trace_get_meta(tr, "model"), "llama3-70b");
    CHECK_EQ_U(tio_trace_meta_count(tr), 1);
    CHECK(tio_trace_get_meta(tr, "gpu") == NULL);
    tio_trace_free(tr);
}

TIO_TEST(allocation_failures_are_clean) {
    /* Every allocation of building a trace may fail; nothing leaks and nothing crashes. */
    int64_t base = tio_alloc_live_count();
    for (int n = 0; n < 40; n++) {
        tio_alloc_fail_after(n);
        struct tio_trace *tr = small_trace();
        tio_alloc_fail_after(-1);
        tio_trace_free(tr);
        CHECK_EQ_I(tio_alloc_live_count(), base);
    }
}

TIO_TEST(unknown_format_is_refused) {
    /* Loading and saving name a format outside the enum; AUTO picks by content / binary. */
    struct tio_trace *tr = small_trace(), *back = NULL;
    REQUIRE(tr != NULL);
    CHECK_OK(tio_trace_finish(tr));
    void *d = NULL;
    size_t n = 0;
    CHECK_RC(tio_trace_save_mem(tr, 7, &d, &n), TIO_EINVAL);
    CHECK_ERR_HAS("unknown format 7");
    CHECK(d == NULL);
    CHECK_RC(tio_trace_save_mem(tr, -1, &d, &n), TIO_EINVAL);
    CHECK_ERR_HAS("unknown format -1");
    CHECK_OK(tio_trace_save_mem(tr, TIO_TRACE_FORMAT_AUTO, &d, &n));
    CHECK(d && n >= 8 && memcmp(d, "TIOTRACE", 8) == 0);
    CHECK_RC(tio_trace_load_mem(d, n, 3, &back), TIO_EINVAL);
    CHECK_ERR_HAS("unknown format 3");
    CHECK(back == NULL);
    CHECK_OK(tio_trace_load_mem(d, n, TIO_TRACE_FORMAT_AUTO, &back));
    CHECK(back && tio_trace_kernel_count(back) == tio_trace_kernel_count(tr));
    tio_free(d);
    tio_trace_free(back);
    tio_trace_free(tr);
}

int main(void) {
    RUN(build_and_view);
    RUN(names_are_interned);
    RUN(builder_rejects_bad_arguments);
    RUN(hash_depends_on_content);
    RUN(metadata);
    RUN(allocation_failures_are_clean);
    RUN(unknown_format_is_refused);
    return tio_test_done();
}
