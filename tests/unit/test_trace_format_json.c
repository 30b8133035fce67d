/* The JSON trace format: rejection of malformed documents, tensors and kernels, size overflow,
 * bounded memory, the fixture file. */
#include "trace_format_util.h"

static void expect_json(const char *text, int code, const char *needle, int line) {
    struct tio_trace *t = NULL;
    int rc = tio_trace_load_mem(text, strlen(text), TIO_TRACE_FORMAT_AUTO, &t);
    if (rc != code || (code == 0) != (t != NULL)) {
        TIO_T_FAIL("line %d: rc %d (%s), want %d; detail: %s", line, rc, tio_strerror(rc), code,
                   tio_last_error());
    } else if (needle && !strstr(tio_last_error(), needle)) {
        TIO_T_FAIL("line %d: detail '%s' lacks '%s'", line, tio_last_error(), needle);
    }
    tio_trace_free(t);
}
#define EXPECT_JSON(text, code, needle) expect_json(text, code, needle, __LINE__)

#define HEAD "{\"format\":\"teraio-trace\",\"version\":1,"
#define T2                                                                                  \
    "\"tensors\":[{\"bytes\":8,\"kind\":\"weight\",\"global\":true},{\"bytes\":4,\"kind\":" \
    "\"activation\"}],"

TIO_TEST(json_minimal_accepted) {
    EXPECT_JSON(HEAD "\"tensors\":[],\"kernels\":[]}", 0, NULL);
    EXPECT_JSON(HEAD T2 "\"kernels\":[{\"duration_ns\":5,\"uses\":[[0,\"r\"],[1,\"w\"]]}]}", 0,
                NULL);
    struct tio_trace *t = NULL;
    const char *s = HEAD "\"meta\":{\"a\":\"b\"}," T2
                         "\"kernels\":[{\"name\":null,\"duration_ns\":5,\"flags\":[\"optim\","
                         "\"comm\"],\"uses\":[[1,\"rw\"]]}]}";
    CHECK_OK(tio_trace_load_mem(s, strlen(s), TIO_TRACE_FORMAT_JSON, &t));
    CHECK(t != NULL);
    if (t) {
        struct tio_trace_view v;
        tio_trace_get_view(t, &v);
        CHECK_EQ_U(v.kernel_flags[0], TIO_KERNEL_OPTIM | TIO_KERNEL_COMM);
        CHECK_EQ_U(v.use_mode[0], TIO_USE_READ_WRITE);
        CHECK_EQ_U(v.tensor_flags[0], TIO_TENSOR_GLOBAL);
        CHECK_EQ_U(v.tensor_flags[1], 0);
        CHECK_STR(tio_trace_get_meta(t, "a"), "b");
    }
    tio_trace_free(t);
}

TIO_TEST(json_rejects_bad_documents) {
    EXPECT_JSON("", TIO_EFORMAT, "JSON: line");
    EXPECT_JSON("{", TIO_EFORMAT, "JSON: line 1");
    EXPECT_JSON("[]", TIO_EFORMAT, "must be an object");
    EXPECT_JSON("{\"format\":\"x\",\"version\":1,\"tensors\":[],\"kernels\":[]}", TIO_EFORMAT,
                "format");
    EXPECT_JSON("{\"version\":1,\"tensors\":[],\"kernels\":[]}", TIO_EFORMAT, "format: missing");
    EXPECT_JSON("{\"format\":\"teraio-trace\",\"version\":2,\"tensors\":[],\"kernels\":[]}",
                TIO_EVERSION, "version 2 not supported (this build reads 1); written by a newer");
    EXPECT_JSON("{\"format\":\"teraio-trace\",\"version\":\"1\",\"tensors\":[],\"kernels\":[]}",
                TIO_EFORMAT, "version: must be an integer");
    EXPECT_JSON(HEAD "\"kernels\":[]}", TIO_EFORMAT, "tensors: missing");
    EXPECT_JSON(HEAD "\"tensors\":{},\"kernels\":[]}", TIO_EFORMAT, "tensors: must be an array");
    EXPECT_JSON(HEAD "\"tensors\":[]}", TIO_EFORMAT, "kernels: missing");
    EXPECT_JSON(HEAD "\"tensors\":[],\"kernels\":[],\"extra\":1}", TIO_EFORMAT,
                "unknown member 'extra'");
    EXPECT_JSON(HEAD "\"tensors\":[],\"tensors\":[],\"kernels\":[]}", TIO_EFORMAT, "duplicate");
    EXPECT_JSON(HEAD "\"meta\":[],\"tensors\":[],\"kernels\":[]}", TIO_EFORMAT, "meta");
    EXPECT_JSON(HEAD "\"meta\":{\"a\":1},\"tensors\":[],\"kernels\":[]}", TIO_EFORMAT,
                "meta.a: must be a string");
    EXPECT_JSON(HEAD "\"meta\":{\"Bad Key\":\"x\"},\"tensors\":[],\"kernels\":[]}", TIO_EFORMAT,
                "key 'Bad Key'");
}

TIO_TEST(json_rejects_bad_tensors) {
    EXPECT_JSON(HEAD "\"tensors\":[1],\"kernels\":[]}", TIO_EFORMAT,
                "tensors[0]: must be an object");
    EXPECT_JSON(HEAD "\"tensors\":[{\"kind\":\"weight\"}],\"kernels\":[]}", TIO_EFORMAT,
                "tensors[0].bytes: missing");
    EXPECT_JSON(HEAD "\"tensors\":[{\"bytes\":-5,\"kind\":\"weight\"}],\"kernels\":[]}",
                TIO_EFORMAT, "tensors[0].bytes: -5 outside");
    EXPECT_JSON(HEAD "\"tensors\":[{\"bytes\":0,\"kind\":\"weight\"}],\"kernels\":[]}", TIO_EFORMAT,
                "tensors[0].bytes: must be at least 1");
    EXPECT_JSON(HEAD "\"tensors\":[{\"bytes\":1125899906842625,\"kind\":\"weight\"}],"
                     "\"kernels\":[]}",
                TIO_EFORMAT, "tensors[0].bytes: 1125899906842625 outside");
    EXPECT_JSON(HEAD "\"tensors\":[{\"bytes\":1.5,\"kind\":\"weight\"}],\"kernels\":[]}",
                TIO_EFORMAT, "tensors[0].bytes: must be an integer");
    EXPECT_JSON(HEAD "\"tensors\":[{\"bytes\":\"8\",\"kind\":\"weight\"}],\"kernels\":[]}",
                TIO_EFORMAT, "tensors[0].bytes: must be an integer");
    EXPECT_JSON(HEAD "\"tensors\":[{\"bytes\":8,\"kind\":\"weights\"}],\"kernels\":[]}",
                TIO_EFORMAT, "tensors[0].kind: unknown kind 'weights'");
    EXPECT_JSON(HEAD "\"tensors\":[{\"bytes\":8}],\"kernels\":[]}", TIO_EFORMAT,
                "tensors[0].kind: missing");
    EXPECT_JSON(HEAD "\"tensors\":[{\"bytes\":8,\"kind\":3}],\"kernels\":[]}", TIO_EFORMAT,
                "tensors[0].kind: must be a string");
    EXPECT_JSON(HEAD T2 "\"tensors\":[],\"kernels\":[]}", TIO_EFORMAT, "duplicate");
    EXPECT_JSON(HEAD "\"tensors\":[{\"bytes\":8,\"kind\":\"weight\",\"global\":1}],"
                     "\"kernels\":[]}",
                TIO_EFORMAT, "tensors[0].global: must be true or false");
    EXPECT_JSON(HEAD "\"tensors\":[{\"bytes\":8,\"kind\":\"weight\",\"name\":7}],"
                     "\"kernels\":[]}",
                TIO_EFORMAT, "tensors[0].name: must be a string or null");
    EXPECT_JSON(HEAD "\"tensors\":[{\"bytes\":8,\"kind\":\"weight\",\"id\":1}],\"kernels\":[]}",
                TIO_EFORMAT, "tensors[0].id: 1, expected 0");
    EXPECT_JSON(HEAD "\"tensors\":[{\"bytes\":8,\"kind\":\"weight\",\"size\":1}],"
                     "\"kernels\":[]}",
                TIO_EFORMAT, "tensors[0]: unknown member 'size'");
    EXPECT_JSON(HEAD "\"tensors\":[{\"bytes\":8,\"kind\":\"weight\",\"name\":\"a\\u0000b\"}],"
                     "\"kernels\":[]}",
                TIO_EFORMAT, "JSON");
}

TIO_TEST(json_rejects_bad_kernels) {
    EXPECT_JSON(HEAD T2 "\"kernels\":[{\"uses\":[]}]}", TIO_EFORMAT,
                "kernels[0].duration_ns: missing");
    EXPECT_JSON(HEAD T2 "\"kernels\":[{\"duration_ns\":-1,\"uses\":[]}]}", TIO_EFORMAT,
                "kernels[0].duration_ns: -1 outside");
    EXPECT_JSON(HEAD T2 "\"kernels\":[{\"duration_ns\":17592186044417,\"uses\":[]}]}", TIO_EFORMAT,
                "kernels[0].duration_ns: 17592186044417 outside");
    EXPECT_JSON(HEAD T2 "\"kernels\":[{\"duration_ns\":1}]}", TIO_EFORMAT,
                "kernels[0].uses: missing");
    EXPECT_JSON(HEAD T2 "\"kernels\":[{\"duration_ns\":1,\"uses\":{}}]}", TIO_EFORMAT,
                "kernels[0].uses: must be an array");
    EXPECT_JSON(HEAD T2 "\"kernels\":[{\"duration_ns\":1,\"uses\":[]},{\"duration_ns\":1,"
                        "\"uses\":[[0,\"r\"],[99,\"w\"]]}]}",
                TIO_EFORMAT, "kernels[1].uses[1]: tensor 99 out of range");
    EXPECT_JSON(HEAD T2 "\"kernels\":[{\"duration_ns\":1,\"uses\":[[-1,\"r\"]]}]}", TIO_EFORMAT,
                "kernels[0].uses[0]: tensor -1 out of range");
    EXPECT_JSON(HEAD T2 "\"kernels\":[{\"duration_ns\":1,\"uses\":[[0,\"x\"]]}]}", TIO_EFORMAT,
                "kernels[0].uses[0]: mode must be");
    EXPECT_JSON(HEAD T2 "\"kernels\":[{\"duration_ns\":1,\"uses\":[[0,1]]}]}", TIO_EFORMAT,
                "kernels[0].uses[0]: mode must be");
    EXPECT_JSON(HEAD T2 "\"kernels\":[{\"duration_ns\":1,\"uses\":[[0]]}]}", TIO_EFORMAT,
                "kernels[0].uses[0]: must be a [tensor, mode] pair");
    EXPECT_JSON(HEAD T2 "\"kernels\":[{\"duration_ns\":1,\"uses\":[[\"0\",\"r\"]]}]}", TIO_EFORMAT,
                "kernels[0].uses[0]: tensor must be an integer");
    EXPECT_JSON(HEAD T2 "\"kernels\":[{\"duration_ns\":1,\"uses\":[[1,\"r\"],[1,\"w\"]]}]}",
                TIO_EFORMAT, "kernels[0].uses[1]: tensor 1 used twice");
    EXPECT_JSON(HEAD T2 "\"kernels\":[{\"duration_ns\":1,\"flags\":[\"fast\"],\"uses\":[]}]}",
                TIO_EFORMAT, "kernels[0].flags[0]: unknown flag");
    EXPECT_JSON(HEAD T2 "\"kernels\":[{\"duration_ns\":1,\"flags\":\"comm\",\"uses\":[]}]}",
                TIO_EFORMAT, "kernels[0].flags: must be an array");
    EXPECT_JSON(HEAD T2 "\"kernels\":[{\"duration_ns\":1,\"flags\":[\"comm\",\"comm\"],"
                        "\"uses\":[]}]}",
                TIO_EFORMAT, "kernels[0].flags[1]: 'comm' repeated");
    EXPECT_JSON(HEAD T2 "\"kernels\":[{\"duration_ns\":1,\"uses\":[],\"time\":3}]}", TIO_EFORMAT,
                "kernels[0]: unknown member 'time'");
    EXPECT_JSON(HEAD T2 "\"kernels\":[7]}", TIO_EFORMAT, "kernels[0]: must be an object");
}

TIO_TEST(json_size_overflow) {
    /* 2^14 + 1 tensors of 2^50 bytes: each within the limit, the 2^14th (index 16383) makes the
     * sum 2^64, one past UINT64_MAX. */
    size_t n = 16385, cap = 128 + n * 64;
    char *text = malloc(cap);
    REQUIRE(text != NULL);
    size_t len = (size_t)snprintf(text, cap, "%s\"tensors\":[", HEAD);
    for (size_t i = 0; i < n; i++) {
        len += (size_t)snprintf(text + len, cap - len,
                                "%s{\"bytes\":1125899906842624,\"kind\":\"temp\"}", i ? "," : "");
    }
    snprintf(text + len, cap - len, "],\"kernels\":[]}");
    expect_json(text, TIO_EFORMAT, "tensor 16383: total bytes overflow", __LINE__);
    free(text);
}

/* Peak resident memory of this process so far (VmHWM), bytes; 0 if unknown. */
static uint64_t peak_rss(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    uint64_t kb = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "VmHWM: %" SCNu64 " kB", &kb) == 1) {
            break;
        }
    }
    if (f) {
        fclose(f);
    }
    return kb * 1024;
}

struct json_mem {
    const void *text;
    size_t len;
};

/* Child: load the JSON text and report whether the peak grew by less than 4x its size. */
static int json_load_measured(void *arg) {
    const struct json_mem *m = arg;
    uint64_t before = peak_rss(); /* a forked child starts at the parent's resident size */
    struct tio_trace *tr = NULL;
    int rc = tio_trace_load_mem(m->text, m->len, TIO_TRACE_FORMAT_JSON, &tr);
    uint64_t grew = peak_rss() - before;
    tio_trace_free(tr);
    printf("  JSON of %zu bytes: peak grew by %" PRIu64 " bytes (%.1fx)\n", m->len, grew,
           (double)grew / (double)m->len);
#if defined(__SANITIZE_ADDRESS__)
    return rc == 0 ? 0 : 1; /* redzones and the free quarantine inflate the peak */
#else
    return rc == 0 && before > 0 && grew < 4 * (uint64_t)m->len ? 0 : 1;
#endif
}

/*
 * Loading a JSON trace takes a small multiple of its size (it took 12-24x when the whole
 * document was parsed into one tree): here ~10 MB of JSON must grow the peak by under 4x.
 */
TIO_TEST(json_memory_bounded) {
    struct tio_trace *tr = NULL;
    CHECK_OK(tio_trace_new(NULL, &tr));
    enum { NT = 20000, NK = 80000 };
    for (uint32_t t = 0; t < NT; t++) {
        CHECK_OK(tio_trace_add_tensor(tr, 4096 + t, TIO_TENSOR_ACTIVATION, 0, NULL, NULL));
    }
    for (uint32_t k = 0; k < NK; k++) {
        CHECK_OK(tio_trace_add_kernel(tr, "aten::mm", 1000 + k, 0, NULL));
        for (uint32_t u = 0; u < 4; u++) {
            CHECK_OK(tio_trace_add_use(tr, (k / 3 + u * 5003) % NT, TIO_USE_READ));
        }
    }
    CHECK_OK(tio_trace_finish(tr));
    void *text = NULL;
    size_t len = 0;
    CHECK_OK(tio_trace_save_mem(tr, TIO_TRACE_FORMAT_JSON, &text, &len));
    tio_trace_free(tr);
    struct json_mem m = { text, len };
    CHECK(len > 8000000);
    CHECK_EQ_I(tio_test_bounded(json_load_measured, &m, 4096, 60), 0);
    tio_free(text);
}

TIO_TEST(json_fixture_loads) {
    const char *dir = getenv("TIO_TEST_DATA"); /* set by ctest */
    REQUIRE(dir != NULL);
    char pj[512], pb[512];
    snprintf(pj, sizeof pj, "%s/example.json", dir);
    snprintf(pb, sizeof pb, "%s/example.tio", dir);
    struct tio_trace *a = NULL, *b = NULL;
    CHECK_OK(tio_trace_load(pj, TIO_TRACE_FORMAT_AUTO, &a));
    CHECK_OK(tio_trace_load(pb, TIO_TRACE_FORMAT_AUTO, &b));
    CHECK(a && b && traces_equal(a, b));
    if (a) {
        /* Hand-counted from the fixture (docs/trace-format.md shows it). */
        CHECK_EQ_U(tio_trace_kernel_count(a), 12);
        CHECK_STR(tio_trace_get_meta(a, "model"), "mlp-2layer");
        CHECK_EQ_U(tio_trace_tensor_count(a), 17);
        CHECK_EQ_U(tio_trace_use_count(a), 37);
        CHECK_EQ_U(tio_trace_total_duration_ns(a), 239700);
        CHECK_STR(tio_trace_kernel_name(a, 9), "nccl:all_reduce");
        struct tio_trace_view v;
        tio_trace_get_view(a, &v);
        CHECK_EQ_U(v.kernel_flags[9], TIO_KERNEL_COMM | TIO_KERNEL_BACKWARD);
        CHECK_EQ_U(v.tensor_flags[0], TIO_TENSOR_GLOBAL);
        CHECK_EQ_U(v.tensor_kind[12], TIO_TENSOR_GRAD);
    }
    tio_trace_free(a);
    tio_trace_free(b);
}

int main(void) {
    RUN(json_minimal_accepted);
    RUN(json_rejects_bad_documents);
    RUN(json_rejects_bad_tensors);
    RUN(json_rejects_bad_kernels);
    RUN(json_size_overflow);
    RUN(json_fixture_loads);
    RUN(json_memory_bounded);
    return tio_test_done();
}
