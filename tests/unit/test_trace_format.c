/* Trace file formats: binary and JSON round trips, the binary layout by hand, files. Malformed
 * input: test_trace_format_binary.c and test_trace_format_json.c. */
#include "trace_format_util.h"

TIO_TEST(binary_round_trip) {
    struct tio_trace *a = make_small(), *b = NULL, *c = NULL;
    REQUIRE(a != NULL);
    void *d1 = NULL, *d2 = NULL;
    size_t n1 = 0, n2 = 0;
    CHECK_OK(tio_trace_save_mem(a, TIO_TRACE_FORMAT_BINARY, &d1, &n1));
    CHECK_OK(tio_trace_load_mem(d1, n1, TIO_TRACE_FORMAT_BINARY, &b));
    CHECK(b && tio_trace_is_finished(b));
    CHECK(b && traces_equal(a, b));
    /* Binary -> binary is byte-identical (string table order is kept). */
    CHECK_OK(tio_trace_save_mem(b, TIO_TRACE_FORMAT_AUTO, &d2, &n2));
    CHECK_EQ_U(n1, n2);
    CHECK(n1 == n2 && memcmp(d1, d2, n1) == 0);
    CHECK_OK(tio_trace_load_mem(d1, n1, TIO_TRACE_FORMAT_AUTO, &c));
    CHECK(c && traces_equal(a, c));
    CHECK_STR(tio_trace_get_meta(b, "gpu"), "H100 \"NVL\"");
    CHECK_STR(tio_trace_tensor_name(b, 2), "adam \"m\"\\\n");
    CHECK(tio_trace_tensor_name(b, 3) == NULL);
    CHECK(tio_trace_kernel_name(b, 1) == NULL);
    tio_free(d1);
    tio_free(d2);
    tio_trace_free(a);
    tio_trace_free(b);
    tio_trace_free(c);
}

TIO_TEST(binary_layout_by_hand) {
    /* The header fields at the offsets docs/trace-format.md gives, checked by hand. */
    unsigned char *d;
    size_t n;
    save_small(TIO_TRACE_FORMAT_BINARY, &d, &n);
    REQUIRE(d != NULL);
    CHECK(memcmp(d, "TIOTRACE", 8) == 0);
    uint32_t v32;
    memcpy(&v32, d + 8, 4);
    CHECK_EQ_U(v32, 1);
    memcpy(&v32, d + 12, 4);
    CHECK_EQ_U(v32, 80);
    CHECK_EQ_U(rd64(d + 16), 4);  /* kernels */
    CHECK_EQ_U(rd64(d + 24), 7);  /* tensors */
    CHECK_EQ_U(rd64(d + 32), 10); /* uses */
    /* strings (with NULs): w1, w1.grad, adam.. (11), témp, x, aten::mm, aten::mm_backward,
     * adam\1step */
    CHECK_EQ_U(rd64(d + 40), 8);
    CHECK_EQ_U(rd64(d + 48), 3 + 8 + 11 + 6 + 2 + 9 + 18 + 10);
    CHECK_EQ_U(rd64(d + 56), 3);
    CHECK_EQ_U(rd64(d + 64), (8 + 5 + 5) + (8 + 3 + 10) + (8 + 5 + 0));
    CHECK_EQ_U(rd64(d + 72), n);
    /* sections: kernels 4*24+8=104, tensors 7*20=140 (+4 pad), uses 50 (+6), strings 67 (+5),
     * meta 52 (+4); each with a 16-byte header. */
    CHECK_EQ_U(n, 80 + (16 + 104) + (16 + 144) + (16 + 56) + (16 + 72) + (16 + 56) + 4);
    uint32_t crc;
    memcpy(&crc, d + n - 4, 4);
    CHECK_EQ_U(crc, ref_crc32c(d, n - 4));
    /* First kernel section column: duration of kernel 0. */
    CHECK_EQ_U(rd64(d + 96), 120000);
    tio_free(d);
}

TIO_TEST(json_round_trip) {
    struct tio_trace *a = make_small(), *b = NULL, *c = NULL;
    REQUIRE(a != NULL);
    void *j1 = NULL, *j2 = NULL, *bin = NULL;
    size_t n1 = 0, n2 = 0, nb = 0;
    CHECK_OK(tio_trace_save_mem(a, TIO_TRACE_FORMAT_JSON, &j1, &n1));
    CHECK_OK(tio_trace_load_mem(j1, n1, TIO_TRACE_FORMAT_JSON, &b));
    CHECK(b && traces_equal(a, b));
    /* JSON -> binary -> JSON gives the same text. */
    if (b) {
        CHECK_OK(tio_trace_save_mem(b, TIO_TRACE_FORMAT_BINARY, &bin, &nb));
        CHECK_OK(tio_trace_load_mem(bin, nb, TIO_TRACE_FORMAT_AUTO, &c));
        CHECK(c && traces_equal(a, c));
        if (c) {
            CHECK_OK(tio_trace_save_mem(c, TIO_TRACE_FORMAT_JSON, &j2, &n2));
            CHECK(n1 == n2 && memcmp(j1, j2, n1) == 0);
        }
    }
    tio_free(j1);
    tio_free(j2);
    tio_free(bin);
    tio_trace_free(a);
    tio_trace_free(b);
    tio_trace_free(c);
}

TIO_TEST(empty_trace_round_trips) {
    struct tio_trace *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(tio_trace_new(NULL, &a));
    CHECK_OK(tio_trace_finish(a));
    void *d = NULL, *j = NULL;
    size_t n = 0, m = 0;
    CHECK_OK(tio_trace_save_mem(a, TIO_TRACE_FORMAT_BINARY, &d, &n));
    CHECK_EQ_U(n, 80 + 5 * 16 + 8 + 4);
    /* Byte for byte as in docs/trace-format.md ("the empty trace"). */
    unsigned char want[172] = { 0 };
    memcpy(want, "TIOTRACE", 8);
    wr32(want + 8, 1);
    wr32(want + 12, 80);
    wr64(want + 72, 172);
    for (uint32_t s = 1; s <= 5; s++) {
        wr32(want + 80 + 16 * (s - 1) + (s > 1 ? 8 : 0), s);
    }
    wr64(want + 88, 8); /* kernels section length: use_offset[0] */
    fix_crc(want, sizeof want);
    CHECK(d && n == sizeof want && memcmp(d, want, n) == 0);
    CHECK(memcmp(want + 168, "\xef\xc2\x08\xa8", 4) == 0);
    CHECK_OK(tio_trace_load_mem(d, n, TIO_TRACE_FORMAT_AUTO, &b));
    CHECK_OK(tio_trace_save_mem(a, TIO_TRACE_FORMAT_JSON, &j, &m));
    CHECK_OK(tio_trace_load_mem(j, m, TIO_TRACE_FORMAT_AUTO, &c));
    CHECK(b && c && traces_equal(a, b) && traces_equal(a, c));
    tio_free(d);
    tio_free(j);
    tio_trace_free(a);
    tio_trace_free(b);
    tio_trace_free(c);
}

TIO_TEST(save_and_load_files) {
    char dir[] = "/tmp/tio_trace_fmt_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char pbin[256], pjson[256];
    snprintf(pbin, sizeof pbin, "%s/t.tio", dir);
    snprintf(pjson, sizeof pjson, "%s/t.json", dir);
    struct tio_trace *a = make_small(), *b = NULL, *c = NULL, *u = NULL;
    CHECK_OK(tio_trace_save(a, pbin, TIO_TRACE_FORMAT_AUTO));
    CHECK_OK(tio_trace_save(a, pjson, TIO_TRACE_FORMAT_AUTO));
    /* Overwriting an existing file works (rename over it). */
    CHECK_OK(tio_trace_save(a, pbin, TIO_TRACE_FORMAT_AUTO));
    CHECK_OK(tio_trace_load(pbin, TIO_TRACE_FORMAT_AUTO, &b));
    CHECK_OK(tio_trace_load(pjson, TIO_TRACE_FORMAT_AUTO, &c));
    CHECK(b && c && traces_equal(a, b) && traces_equal(a, c));
    /* The extension picks the format. */
    FILE *f = fopen(pjson, "rb");
    char head[2] = { 0 };
    CHECK(f && fread(head, 1, 1, f) == 1 && head[0] == '{');
    if (f) {
        fclose(f);
    }
    /* No temporary files left behind. */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "test $(ls -A %s | wc -l) -eq 2", dir);
    CHECK_EQ_I(system(cmd), 0);
    /* Errors: missing file, directory, unfinished trace, unwritable directory. */
    char missing[300];
    snprintf(missing, sizeof missing, "%s/nope.tio", dir);
    CHECK_RC(tio_trace_load(missing, TIO_TRACE_FORMAT_AUTO, &u), -ENOENT);
    CHECK_ERR_HAS("nope.tio");
    CHECK_RC(tio_trace_load(dir, TIO_TRACE_FORMAT_AUTO, &u), -EISDIR);
    struct tio_trace *unf = NULL;
    CHECK_OK(tio_trace_new(NULL, &unf));
    CHECK_RC(tio_trace_save(unf, pbin, TIO_TRACE_FORMAT_AUTO), TIO_ESTATE);
    tio_trace_free(unf);
    snprintf(missing, sizeof missing, "%s/no/such/dir/t.tio", dir);
    CHECK(tio_trace_save(a, missing, TIO_TRACE_FORMAT_AUTO) == -ENOENT);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK_EQ_I(system(cmd), 0);
    tio_trace_free(a);
    tio_trace_free(b);
    tio_trace_free(c);
}

int main(void) {
    RUN(binary_round_trip);
    RUN(binary_layout_by_hand);
    RUN(json_round_trip);
    RUN(empty_trace_round_trips);
    RUN(save_and_load_files);
    return tio_test_done();
}
