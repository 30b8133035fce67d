/* The binary trace format: rejection of malformed input (truncation, corruption, every field
 * edited), allocation bounds and failures. */
#include "trace_format_util.h"

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
    EXPECT_BIN(e_version, TIO_EVERSION,
               "version 2 not supported (this build reads 1); written by a newer teraio");
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

int main(void) {
    RUN(binary_truncated_at_every_length);
    RUN(binary_every_byte_corruption_caught);
    RUN(binary_bad_header);
    RUN(binary_bad_sections);
    RUN(binary_bad_content);
    RUN(binary_huge_counts_fail_fast_without_allocating);
    RUN(allocation_failures_clean_up);
    return tio_test_done();
}
