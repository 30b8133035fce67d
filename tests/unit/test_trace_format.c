/* Trace file formats: binary and JSON round trips, and rejection of malformed input. */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <teraio/alloc.h>
#include <teraio/trace.h>

#include "tio_test.h"

/* ---- helpers ---- */

/* CRC32C, bitwise (independent of the library's table/SSE4.2 version). */
static uint32_t ref_crc32c(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) {
            c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        }
    }
    return ~c;
}

/* Recompute the trailing checksum after a deliberate edit, so that the edit itself is what the
 * reader has to catch. */
static void fix_crc(unsigned char *p, size_t n) {
    uint32_t c = ref_crc32c(p, n - 4);
    memcpy(p + n - 4, &c, 4);
}

static uint64_t rd64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static void wr64(unsigned char *p, uint64_t v) {
    memcpy(p, &v, 8);
}
static void wr32(unsigned char *p, uint32_t v) {
    memcpy(p, &v, 4);
}

/* A small trace with every feature: all kinds, both tensor flags, all kernel flags, all modes,
 * an unnamed tensor and kernel, a kernel without uses, names needing JSON escapes, metadata. */
static struct tio_trace *make_small(void) {
    struct tio_trace *tr = NULL;
    if (tio_trace_new(NULL, &tr) < 0) {
        return NULL;
    }
    uint32_t id;
    int rc = 0;
    rc |= tio_trace_add_tensor(tr, 4096, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, "w1", &id);
    rc |= tio_trace_add_tensor(tr, 1, TIO_TENSOR_GRAD, TIO_TENSOR_GLOBAL, "w1.grad", &id);
    rc |= tio_trace_add_tensor(tr, 1ull << 50, TIO_TENSOR_OPTIM_STATE,
                               TIO_TENSOR_GLOBAL | TIO_TENSOR_PINNED, "adam \"m\"\\\n", &id);
    rc |= tio_trace_add_tensor(tr, 12345, TIO_TENSOR_ACTIVATION, 0, NULL, &id);
    rc |= tio_trace_add_tensor(tr, 77, TIO_TENSOR_TEMP, TIO_TENSOR_PINNED, "t\xc3\xa9mp", &id);
    rc |= tio_trace_add_tensor(tr, 8, TIO_TENSOR_INPUT, 0, "x", &id);
    rc |= tio_trace_add_tensor(tr, 9, TIO_TENSOR_OTHER, 0, "w1", &id); /* shared name */
    rc |= tio_trace_add_kernel(tr, "aten::mm", 120000, 0, &id);
    rc |= tio_trace_add_use(tr, 0, TIO_USE_READ);
    rc |= tio_trace_add_use(tr, 5, TIO_USE_READ);
    rc |= tio_trace_add_use(tr, 3, TIO_USE_WRITE);
    rc |= tio_trace_add_kernel(tr, NULL, 0, TIO_KERNEL_COMM, &id);
    rc |=
        tio_trace_add_kernel(tr, "aten::mm_backward", UINT64_C(1) << 44, TIO_KERNEL_BACKWARD, &id);
    rc |= tio_trace_add_use(tr, 3, TIO_USE_READ);
    rc |= tio_trace_add_use(tr, 1, TIO_USE_READ_WRITE);
    rc |= tio_trace_add_use(tr, 4, TIO_USE_WRITE);
    rc |= tio_trace_add_kernel(tr, "adam\x01step", 5,
                               TIO_KERNEL_OPTIM | TIO_KERNEL_COMM | TIO_KERNEL_BACKWARD, &id);
    rc |= tio_trace_add_use(tr, 0, TIO_USE_READ_WRITE);
    rc |= tio_trace_add_use(tr, 1, TIO_USE_READ);
    rc |= tio_trace_add_use(tr, 2, TIO_USE_READ_WRITE);
    rc |= tio_trace_add_use(tr, 6, TIO_USE_READ);
    rc |= tio_trace_set_meta(tr, "model", "mlp-2");
    rc |= tio_trace_set_meta(tr, "gpu", "H100 \"NVL\"");
    rc |= tio_trace_set_meta(tr, "empty", "");
    rc |= tio_trace_finish(tr);
    if (rc != 0) {
        tio_trace_free(tr);
        return NULL;
    }
    return tr;
}

/* Field-by-field equality (names compared as strings: string indices are an encoding detail). */
static int traces_equal(const struct tio_trace *a, const struct tio_trace *b) {
    struct tio_trace_view va, vb;
    tio_trace_get_view(a, &va);
    tio_trace_get_view(b, &vb);
    int ok = 1;
#define EQ(c)                                                        \
    do {                                                             \
        if (!(c)) {                                                  \
            printf("  traces differ: %s (line %d)\n", #c, __LINE__); \
            ok = 0;                                                  \
        }                                                            \
    } while (0)
    EQ(va.n_kernels == vb.n_kernels);
    EQ(va.n_tensors == vb.n_tensors);
    EQ(va.n_uses == vb.n_uses);
    if (!ok) {
        return 0;
    }
    for (size_t k = 0; k < va.n_kernels && ok; k++) {
        EQ(va.kernel_duration_ns[k] == vb.kernel_duration_ns[k]);
        EQ(va.kernel_flags[k] == vb.kernel_flags[k]);
        const char *na = tio_trace_kernel_name(a, (uint32_t)k),
                   *nb = tio_trace_kernel_name(b, (uint32_t)k);
        EQ((!na && !nb) || (na && nb && strcmp(na, nb) == 0));
    }
    for (size_t k = 0; k <= va.n_kernels && ok; k++) {
        EQ(va.kernel_use_offset[k] == vb.kernel_use_offset[k]);
    }
    for (size_t t = 0; t < va.n_tensors && ok; t++) {
        EQ(va.tensor_bytes[t] == vb.tensor_bytes[t]);
        EQ(va.tensor_kind[t] == vb.tensor_kind[t]);
        EQ(va.tensor_flags[t] == vb.tensor_flags[t]);
        const char *na = tio_trace_tensor_name(a, (uint32_t)t),
                   *nb = tio_trace_tensor_name(b, (uint32_t)t);
        EQ((!na && !nb) || (na && nb && strcmp(na, nb) == 0));
    }
    for (size_t u = 0; u < va.n_uses && ok; u++) {
        EQ(va.use_tensor[u] == vb.use_tensor[u]);
        EQ(va.use_mode[u] == vb.use_mode[u]);
    }
    EQ(tio_trace_meta_count(a) == tio_trace_meta_count(b));
    for (size_t i = 0; i < tio_trace_meta_count(a) && ok; i++) {
        const char *ka, *xa, *kb, *xb;
        EQ(tio_trace_meta_at(a, i, &ka, &xa) == 0 && tio_trace_meta_at(b, i, &kb, &xb) == 0);
        EQ(ok && strcmp(ka, kb) == 0 && strcmp(xa, xb) == 0);
    }
    uint64_t ha, hb;
    EQ(tio_trace_hash(a, &ha) == 0 && tio_trace_hash(b, &hb) == 0 && ha == hb);
#undef EQ
    return ok;
}

static void save_small(int32_t fmt, unsigned char **data, size_t *len) {
    struct tio_trace *tr = make_small();
    void *d = NULL;
    *data = NULL;
    *len = 0;
    if (tr && tio_trace_save_mem(tr, fmt, &d, len) == 0) {
        *data = d;
    }
    tio_trace_free(tr);
}

/* ---- round trips ---- */

TIO_TEST(binary_round_trip) {
    struct tio_trace *a = make_small(), *b = NULL, *c = NULL;
    CHECK(a != NULL);
    if (!a) {
        return;
    }
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
    CHECK(d != NULL);
    if (!d) {
        return;
    }
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
    CHECK(a != NULL);
    if (!a) {
        return;
    }
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

/* ---- malformed binary input ---- */

TIO_TEST(binary_truncated_at_every_length) {
    unsigned char *d;
    size_t n;
    save_small(TIO_TRACE_FORMAT_BINARY, &d, &n);
    CHECK(d != NULL);
    for (size_t len = 0; d && len < n; len++) {
        struct tio_trace *t = NULL;
        int rc = tio_trace_load_mem(d, len, TIO_TRACE_FORMAT_BINARY, &t);
        if (rc != TIO_EFORMAT || t != NULL) {
            TIO_T_FAIL("truncated to %zu of %zu bytes: rc %d (%s)", len, n, rc, tio_last_error());
            tio_trace_free(t);
            break;
        }
        if (len >= 84 && !strstr(tio_last_error(), "file_bytes")) {
            TIO_T_FAIL("truncated to %zu: detail '%s'", len, tio_last_error());
            break;
        }
        /* AUTO: short prefixes without the magic go to the JSON reader, which rejects them. */
        rc = tio_trace_load_mem(d, len, TIO_TRACE_FORMAT_AUTO, &t);
        if (rc != TIO_EFORMAT) {
            TIO_T_FAIL("AUTO, truncated to %zu: rc %d", len, rc);
            break;
        }
    }
    tio_free(d);
}

TIO_TEST(binary_every_byte_corruption_caught) {
    unsigned char *d;
    size_t n;
    save_small(TIO_TRACE_FORMAT_BINARY, &d, &n);
    CHECK(d != NULL);
    int64_t live = tio_alloc_live_count();
    for (size_t i = 0; d && i < n; i++) {
        for (int bit = 0; bit <= 8; bit++) {
            unsigned char mask = (unsigned char)(bit == 8 ? 0xFFu : 1u << bit);
            d[i] ^= mask;
            struct tio_trace *t = NULL;
            int rc = tio_trace_load_mem(d, n, TIO_TRACE_FORMAT_AUTO, &t);
            d[i] ^= mask;
            if ((rc != TIO_EFORMAT && rc != TIO_EVERSION) || t) {
                TIO_T_FAIL("byte %zu bit %d flipped: rc %d", i, bit, rc);
                tio_trace_free(t);
                i = n;
                break;
            }
        }
    }
    CHECK_EQ_I(tio_alloc_live_count(), live);
    /* A flipped payload byte is reported as a checksum mismatch with both values. */
    if (d) {
        d[200] ^= 0x10;
        struct tio_trace *t = NULL;
        CHECK_RC(tio_trace_load_mem(d, n, TIO_TRACE_FORMAT_BINARY, &t), TIO_EFORMAT);
        CHECK_ERR_HAS("checksum mismatch (stored 0x");
        CHECK_ERR_HAS("computed 0x");
    }
    tio_free(d);
}

/* Apply `edit` to a fresh copy of the small binary trace, fix the CRC, and expect rejection. */
static void expect_binary_error(void (*edit)(unsigned char *, size_t *),
                                int code,
                                const char *needle,
                                int line) {
    unsigned char *d;
    size_t n;
    save_small(TIO_TRACE_FORMAT_BINARY, &d, &n);
    if (!d) {
        TIO_T_FAIL("line %d: cannot build the trace", line);
        return;
    }
    unsigned char *big = realloc(d, n + 64); /* room for edits that grow the file */
    if (!big) {
        tio_free(d);
        return;
    }
    edit(big, &n);
    fix_crc(big, n);
    struct tio_trace *t = NULL;
    int rc = tio_trace_load_mem(big, n, TIO_TRACE_FORMAT_BINARY, &t);
    if (rc != code || t) {
        TIO_T_FAIL("line %d: rc %d (%s), want %d; detail: %s", line, rc, tio_strerror(rc), code,
                   tio_last_error());
    } else if (!strstr(tio_last_error(), needle)) {
        TIO_T_FAIL("line %d: detail '%s' lacks '%s'", line, tio_last_error(), needle);
    }
    tio_trace_free(t);
    free(big);
}

/* Offsets in the small trace (see binary_layout_by_hand). */
#define OFF_KERNELS  (80 + 16)
#define OFF_K_FLAGS  (OFF_KERNELS + 4 * 8)
#define OFF_K_NAME   (OFF_K_FLAGS + 4 * 4)
#define OFF_K_OFFSET (OFF_K_NAME + 4 * 4)
#define OFF_TENSORS  (OFF_KERNELS + 104 + 16)
#define OFF_T_KIND   (OFF_TENSORS + 7 * 8)
#define OFF_T_FLAGS  (OFF_T_KIND + 7 * 4)
#define OFF_T_NAME   (OFF_T_FLAGS + 7 * 4)
#define OFF_USES     (OFF_TENSORS + 144 + 16)
#define OFF_U_MODE   (OFF_USES + 10 * 4)

static void e_magic(unsigned char *d, size_t *n) {
    (void)n;
    d[0] = 'X';
}
static void e_version(unsigned char *d, size_t *n) {
    (void)n;
    wr32(d + 8, 2);
}
static void e_header_bytes(unsigned char *d, size_t *n) {
    (void)n;
    wr32(d + 12, 88);
}
static void e_huge_uses(unsigned char *d, size_t *n) {
    (void)n;
    wr64(d + 32, UINT64_C(4294967297));
}
static void e_uses_over_file(unsigned char *d, size_t *n) {
    (void)n;
    wr64(d + 32, 1000000); /* within the limit, but 5 MB cannot fit in ~600 bytes */
}
static void e_huge_kernels(unsigned char *d, size_t *n) {
    (void)n;
    wr64(d + 16, UINT64_C(1) << 40);
}
static void e_count_mismatch(unsigned char *d, size_t *n) {
    (void)n;
    wr64(d + 24, 6); /* 6 tensors: section length no longer matches */
}
static void e_tensor_out_of_range(unsigned char *d, size_t *n) {
    (void)n;
    wr32(d + OFF_USES + 4 * 2, 99);
}
static void e_csr_not_monotonic(unsigned char *d, size_t *n) {
    (void)n;
    wr64(d + OFF_K_OFFSET + 8 * 2, 1); /* offsets 0,3,1,6,10 */
}
static void e_csr_end(unsigned char *d, size_t *n) {
    (void)n;
    wr64(d + OFF_K_OFFSET + 8 * 4, 9);
}
static void e_csr_start(unsigned char *d, size_t *n) {
    (void)n;
    wr64(d + OFF_K_OFFSET, 1);
}
static void e_bad_kind(unsigned char *d, size_t *n) {
    (void)n;
    wr32(d + OFF_T_KIND + 4 * 3, 7);
}
static void e_bad_mode(unsigned char *d, size_t *n) {
    (void)n;
    d[OFF_U_MODE + 1] = 4;
}
static void e_zero_mode(unsigned char *d, size_t *n) {
    (void)n;
    d[OFF_U_MODE] = 0;
}
static void e_bad_tensor_flags(unsigned char *d, size_t *n) {
    (void)n;
    wr32(d + OFF_T_FLAGS, 4);
}
static void e_bad_kernel_flags(unsigned char *d, size_t *n) {
    (void)n;
    wr32(d + OFF_K_FLAGS, 8);
}
static void e_bytes_zero(unsigned char *d, size_t *n) {
    (void)n;
    wr64(d + OFF_TENSORS + 8, 0);
}
static void e_bytes_too_big(unsigned char *d, size_t *n) {
    (void)n;
    wr64(d + OFF_TENSORS + 8, (UINT64_C(1) << 50) + 1);
}
static void e_duration_too_big(unsigned char *d, size_t *n) {
    (void)n;
    wr64(d + OFF_KERNELS, (UINT64_C(1) << 44) + 1);
}
static void e_name_out_of_range(unsigned char *d, size_t *n) {
    (void)n;
    wr32(d + OFF_T_NAME + 4, 8); /* 8 strings: index 8 is one past */
}
static void e_kernel_name_out_of_range(unsigned char *d, size_t *n) {
    (void)n;
    wr32(d + OFF_K_NAME, 1000);
}
static void e_duplicate_use(unsigned char *d, size_t *n) {
    (void)n;
    wr32(d + OFF_USES + 4 * 1, 0); /* kernel 0 uses tensor 0 twice */
}
static void e_section_id(unsigned char *d, size_t *n) {
    (void)n;
    wr32(d + OFF_TENSORS - 16, 3);
}
static void e_section_reserved(unsigned char *d, size_t *n) {
    (void)n;
    wr32(d + OFF_USES - 12, 1);
}
static void e_section_len(unsigned char *d, size_t *n) {
    (void)n;
    wr64(d + OFF_USES - 8, 51);
}
static void e_padding(unsigned char *d, size_t *n) {
    (void)n;
    d[OFF_USES + 50] = 1;
}
static void e_file_bytes(unsigned char *d, size_t *n) {
    wr64(d + 72, *n + 8); /* claims more than present */
}
static void e_string_unterminated(unsigned char *d, size_t *n) {
    (void)n;
    /* strings section starts after the uses section (16 + 56) plus its own header */
    d[OFF_USES + 56 + 16 + 2] = 'z'; /* "w1\0" -> "w1z" */
}
static void e_string_not_utf8(unsigned char *d, size_t *n) {
    (void)n;
    d[OFF_USES + 56 + 16 + 0] = 0xff;
}
static void e_meta_key(unsigned char *d, size_t *n) {
    (void)n;
    d[OFF_USES + 56 + 16 + 72 + 16 + 8] = 'M'; /* "model" -> "Model" */
}
static void e_meta_dup(unsigned char *d, size_t *n) {
    (void)n;
    /* meta[1] key "gpu" -> "mod"? lengths differ; instead make meta[2] key "empty" -> "model" */
    memcpy(d + OFF_USES + 56 + 16 + 72 + 16 + 18 + 21 + 8, "model", 5);
}
static void e_meta_klen(unsigned char *d, size_t *n) {
    (void)n;
    wr32(d + OFF_USES + 56 + 16 + 72 + 16, 0);
}

#define EXPECT_BIN(edit, code, needle) expect_binary_error(edit, code, needle, __LINE__)

TIO_TEST(binary_bad_header) {
    EXPECT_BIN(e_magic, TIO_EFORMAT, "bad magic");
    EXPECT_BIN(e_version, TIO_EVERSION, "version 2 not supported");
    EXPECT_BIN(e_header_bytes, TIO_EFORMAT, "header_bytes 88");
    EXPECT_BIN(e_file_bytes, TIO_EFORMAT, "file_bytes");
    EXPECT_BIN(e_huge_uses, TIO_EFORMAT, "n_uses 4294967297 exceeds");
    EXPECT_BIN(e_uses_over_file, TIO_EFORMAT, "n_uses 1000000 exceeds file size");
    EXPECT_BIN(e_huge_kernels, TIO_EFORMAT, "n_kernels 1099511627776 exceeds the limit");
    EXPECT_BIN(e_count_mismatch, TIO_EFORMAT, "the counts imply");
}

TIO_TEST(binary_bad_sections) {
    EXPECT_BIN(e_section_id, TIO_EFORMAT, "expected 2 (tensors)");
    EXPECT_BIN(e_section_reserved, TIO_EFORMAT, "section uses: reserved");
    EXPECT_BIN(e_section_len, TIO_EFORMAT, "section uses: length 51");
    EXPECT_BIN(e_padding, TIO_EFORMAT, "section uses: padding");
    EXPECT_BIN(e_string_unterminated, TIO_EFORMAT, "strings: ");
    EXPECT_BIN(e_string_not_utf8, TIO_EFORMAT, "string 0 is not valid UTF-8");
    EXPECT_BIN(e_meta_key, TIO_EFORMAT, "meta[0]: key 'Model'");
    EXPECT_BIN(e_meta_dup, TIO_EFORMAT, "meta[2]: duplicate key 'model'");
    EXPECT_BIN(e_meta_klen, TIO_EFORMAT, "meta[0]: key length 0");
}

TIO_TEST(binary_bad_content) {
    EXPECT_BIN(e_tensor_out_of_range, TIO_EFORMAT, "tensor 99 out of range");
    EXPECT_BIN(e_csr_not_monotonic, TIO_EFORMAT, "not monotonic");
    EXPECT_BIN(e_csr_end, TIO_EFORMAT, "last use offset 9");
    EXPECT_BIN(e_csr_start, TIO_EFORMAT, "kernel 0: use offset 1");
    EXPECT_BIN(e_bad_kind, TIO_EFORMAT, "tensor 3: unknown kind 7");
    EXPECT_BIN(e_bad_mode, TIO_EFORMAT, "unknown mode 4");
    EXPECT_BIN(e_zero_mode, TIO_EFORMAT, "unknown mode 0");
    EXPECT_BIN(e_bad_tensor_flags, TIO_EFORMAT, "tensor 0: unknown flags 0x4");
    EXPECT_BIN(e_bad_kernel_flags, TIO_EFORMAT, "kernel 0: unknown flags 0x8");
    EXPECT_BIN(e_bytes_zero, TIO_EFORMAT, "tensor 1: bytes 0");
    EXPECT_BIN(e_bytes_too_big, TIO_EFORMAT, "tensor 1: bytes 1125899906842625");
    EXPECT_BIN(e_duration_too_big, TIO_EFORMAT, "kernel 0: duration");
    EXPECT_BIN(e_name_out_of_range, TIO_EFORMAT, "tensor 1: name index 8 out of range");
    EXPECT_BIN(e_kernel_name_out_of_range, TIO_EFORMAT, "kernel 0: name index 1000");
    EXPECT_BIN(e_duplicate_use, TIO_EFORMAT, "tensor 0 used twice");
}

TIO_TEST(binary_huge_counts_fail_fast_without_allocating) {
    /* A bare header (with valid CRC) that claims 2^28 kernels and 2^32 uses. */
    unsigned char h[84] = { 0 };
    memcpy(h, "TIOTRACE", 8);
    wr32(h + 8, 1);
    wr32(h + 12, 80);
    wr64(h + 16, UINT64_C(1) << 28);
    wr64(h + 32, UINT64_C(1) << 32);
    wr64(h + 72, sizeof h);
    fix_crc(h, sizeof h);
    int64_t live = tio_alloc_live_count();
    tio_alloc_fail_after(0); /* any allocation at all would fail and change the error */
    struct tio_trace *t = NULL;
    CHECK_RC(tio_trace_load_mem(h, sizeof h, TIO_TRACE_FORMAT_BINARY, &t), TIO_EFORMAT);
    tio_alloc_fail_after(-1);
    CHECK_ERR_HAS("n_kernels 268435456 exceeds file size (84 bytes)");
    CHECK_EQ_I(tio_alloc_live_count(), live);
}

TIO_TEST(allocation_failures_clean_up) {
    unsigned char *d, *j;
    size_t n, m;
    save_small(TIO_TRACE_FORMAT_BINARY, &d, &n);
    save_small(TIO_TRACE_FORMAT_JSON, &j, &m);
    CHECK(d && j);
    int64_t live = tio_alloc_live_count();
    for (int64_t i = 0; d && j && i < 200; i++) {
        struct tio_trace *t = NULL;
        tio_alloc_fail_after(i);
        int rb = tio_trace_load_mem(d, n, TIO_TRACE_FORMAT_AUTO, &t);
        tio_alloc_fail_after(-1);
        CHECK(rb == 0 || rb == TIO_ENOMEM);
        tio_trace_free(rb == 0 ? t : NULL);
        t = NULL;
        tio_alloc_fail_after(i);
        int rj = tio_trace_load_mem(j, m, TIO_TRACE_FORMAT_AUTO, &t);
        tio_alloc_fail_after(-1);
        CHECK(rj == 0 || rj == TIO_ENOMEM);
        tio_trace_free(rj == 0 ? t : NULL);
        CHECK_EQ_I(tio_alloc_live_count(), live);
    }
    tio_free(d);
    tio_free(j);
}

/* ---- malformed JSON ---- */

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
                TIO_EVERSION, "version 2");
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
    CHECK(text != NULL);
    if (!text) {
        return;
    }
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
    const char *dir = getenv("TIO_TEST_DATA");
    if (!dir) {
        return;
    }
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
    RUN(binary_round_trip);
    RUN(binary_layout_by_hand);
    RUN(json_round_trip);
    RUN(empty_trace_round_trips);
    RUN(save_and_load_files);
    RUN(binary_truncated_at_every_length);
    RUN(binary_every_byte_corruption_caught);
    RUN(binary_bad_header);
    RUN(binary_bad_sections);
    RUN(binary_bad_content);
    RUN(binary_huge_counts_fail_fast_without_allocating);
    RUN(allocation_failures_clean_up);
    RUN(json_minimal_accepted);
    RUN(json_rejects_bad_documents);
    RUN(json_rejects_bad_tensors);
    RUN(json_rejects_bad_kernels);
    RUN(json_size_overflow);
    RUN(json_fixture_loads);
    RUN(json_memory_bounded);
    return tio_test_done();
}
