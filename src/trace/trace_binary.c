/*
 * The binary trace format (.tio): a fixed header, five length-prefixed sections holding the
 * trace's columns exactly as they sit in memory (little-endian), and a trailing CRC32C. The
 * layout is specified byte by byte in docs/trace-format.md.
 *
 * The reader trusts nothing: the header's counts are checked against the limits and against
 * the input length (so a 100-byte file can never make us allocate gigabytes), the checksum
 * and every section's id, length and padding are checked, every string and metadata entry is
 * checked, and only then are the columns allocated (once, at their exact size), copied with
 * memcpy and handed to tio_trace_validate().
 */
#include <string.h>

#include "common/common_impl.h"
#include "trace/trace_format_impl.h"
#include "trace/trace_impl.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
/* The columns are copied verbatim; a big-endian port needs byte swaps in put/get and the
 * column copies. */
#error "trace_binary.c assumes a little-endian host"
#endif

enum section_id {
    SEC_KERNELS = 1,
    SEC_TENSORS = 2,
    SEC_USES = 3,
    SEC_STRINGS = 4,
    SEC_META = 5,
    SEC_COUNT = 5
};

static const char *const section_names[SEC_COUNT + 1] = {
    [0] = "none",        [SEC_KERNELS] = "kernels", [SEC_TENSORS] = "tensors",
    [SEC_USES] = "uses", [SEC_STRINGS] = "strings", [SEC_META] = "meta",
};

#define SECTION_HEADER_BYTES 16u /* u32 id, u32 reserved (0), u64 payload length */
#define CRC_BYTES            4u
#define META_KEY_MAX         64u

/* Per-element sizes of each section (bytes). */
#define KERNEL_BYTES 24u /* duration u64 + flags u32 + name u32 + use_offset u64 */
#define TENSOR_BYTES 20u /* bytes u64 + kind i32 + flags u32 + name u32 */
#define USE_BYTES    5u  /* tensor u32 + mode u8 */

/* Header field offsets. */
enum {
    H_MAGIC = 0,
    H_VERSION = 8,
    H_HEADER_BYTES = 12,
    H_N_KERNELS = 16,
    H_N_TENSORS = 24,
    H_N_USES = 32,
    H_N_STRINGS = 40,
    H_STRING_BYTES = 48,
    H_N_META = 56,
    H_META_BYTES = 64,
    H_FILE_BYTES = 72
};

static void put_u32(unsigned char *p, uint32_t v) {
    memcpy(p, &v, 4);
}
static void put_u64(unsigned char *p, uint64_t v) {
    memcpy(p, &v, 8);
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static uint64_t pad8(uint64_t n) {
    return (n + 7u) & ~(uint64_t)7u;
}

/* Payload lengths of the five sections, derived from the header counts (all overflow-free once
 * the counts are within the limits checked by the caller). */
struct layout {
    uint64_t n_kernels, n_tensors, n_uses, n_strings, string_bytes, n_meta, meta_bytes;
    uint64_t sec_len[SEC_COUNT + 1];
    uint64_t file_bytes;
};

static void layout_compute(struct layout *l) {
    l->sec_len[0] = 0;
    l->sec_len[SEC_KERNELS] = l->n_kernels * KERNEL_BYTES + 8u; /* + use_offset[n_kernels] */
    l->sec_len[SEC_TENSORS] = l->n_tensors * TENSOR_BYTES;
    l->sec_len[SEC_USES] = l->n_uses * USE_BYTES;
    l->sec_len[SEC_STRINGS] = l->string_bytes;
    l->sec_len[SEC_META] = l->meta_bytes;
    uint64_t total = TIO_TRACE_HEADER_BYTES + CRC_BYTES;
    for (int s = 1; s <= SEC_COUNT; s++) {
        total += SECTION_HEADER_BYTES + pad8(l->sec_len[s]);
    }
    l->file_bytes = total;
}

/* ---- Writer ------------------------------------------------------------------------------- */

static unsigned char *put_section_header(unsigned char *p, uint32_t id, uint64_t len) {
    put_u32(p, id);
    put_u32(p + 4, 0);
    put_u64(p + 8, len);
    return p + SECTION_HEADER_BYTES;
}

/* Zero the padding after a payload of `len` bytes that ends at p; returns the next position. */
static unsigned char *put_pad(unsigned char *p, uint64_t len) {
    size_t pad = (size_t)(pad8(len) - len);
    memset(p, 0, pad);
    return p + pad;
}

static unsigned char *put_bytes(unsigned char *p, const void *src, size_t n) {
    if (n) {
        memcpy(p, src, n);
    }
    return p + n;
}

/* One array of a fixed-size section as it is stored: the trace's column and its byte length. */
struct column {
    void *data;
    size_t bytes;
};

/*
 * The columns of section sec (SEC_KERNELS, SEC_TENSORS or SEC_USES) of tr, in file order, for its
 * n_kernels, n_tensors and n_uses: what the writer stores and the reader fills. Returns their
 * count.
 */
static size_t section_columns(const struct tio_trace *tr, int sec, struct column col[4]) {
    const size_t nk = tr->n_kernels, nt = tr->n_tensors, nu = tr->n_uses;
    switch (sec) {
    case SEC_KERNELS:
        col[0] = (struct column){ tr->kernel_duration_ns, nk * sizeof(uint64_t) };
        col[1] = (struct column){ tr->kernel_flags, nk * sizeof(uint32_t) };
        col[2] = (struct column){ tr->kernel_name, nk * sizeof(uint32_t) };
        col[3] = (struct column){ tr->kernel_use_offset, (nk + 1) * sizeof(uint64_t) };
        return 4;
    case SEC_TENSORS:
        col[0] = (struct column){ tr->tensor_bytes, nt * sizeof(uint64_t) };
        col[1] = (struct column){ tr->tensor_kind, nt * sizeof(int32_t) };
        col[2] = (struct column){ tr->tensor_flags, nt * sizeof(uint32_t) };
        col[3] = (struct column){ tr->tensor_name, nt * sizeof(uint32_t) };
        return 4;
    default:
        TIO_ASSERT(sec == SEC_USES);
        col[0] = (struct column){ tr->use_tensor, nu * sizeof(uint32_t) };
        col[1] = (struct column){ tr->use_mode, nu };
        return 2;
    }
}

int tio_trace_write_binary(const struct tio_trace *tr, void **data, size_t *len) {
    if (tr->n_meta > TIO_TRACE_MAX_META) {
        return tio_set_error(TIO_EINVAL, "trace: %zu metadata entries exceed the limit of %u",
                             tr->n_meta, TIO_TRACE_MAX_META);
    }
    struct layout l = {
        .n_kernels = tr->n_kernels,
        .n_tensors = tr->n_tensors,
        .n_uses = tr->n_uses,
        .n_strings = tr->n_strings,
        .string_bytes = tr->str_len,
        .n_meta = tr->n_meta,
        .meta_bytes = 0,
    };
    for (size_t i = 0; i < tr->n_meta; i++) {
        l.meta_bytes += 8u + strlen(tr->meta[i].key) + strlen(tr->meta[i].value);
    }
    layout_compute(&l);
    unsigned char *buf = tio_malloc((size_t)l.file_bytes);
    if (!buf) {
        return tio_set_error(TIO_ENOMEM, "trace: cannot allocate %llu bytes to serialize",
                             (unsigned long long)l.file_bytes);
    }
    memset(buf, 0, TIO_TRACE_HEADER_BYTES);
    /* The magic is 8 bytes without a terminator. */
    // NOLINTNEXTLINE(bugprone-not-null-terminated-result)
    memcpy(buf + H_MAGIC, TIO_TRACE_MAGIC, TIO_TRACE_MAGIC_LEN);
    put_u32(buf + H_VERSION, TIO_TRACE_BIN_VERSION);
    put_u32(buf + H_HEADER_BYTES, TIO_TRACE_HEADER_BYTES);
    put_u64(buf + H_N_KERNELS, l.n_kernels);
    put_u64(buf + H_N_TENSORS, l.n_tensors);
    put_u64(buf + H_N_USES, l.n_uses);
    put_u64(buf + H_N_STRINGS, l.n_strings);
    put_u64(buf + H_STRING_BYTES, l.string_bytes);
    put_u64(buf + H_N_META, l.n_meta);
    put_u64(buf + H_META_BYTES, l.meta_bytes);
    put_u64(buf + H_FILE_BYTES, l.file_bytes);
    unsigned char *p = buf + TIO_TRACE_HEADER_BYTES;

    for (int s = SEC_KERNELS; s <= SEC_USES; s++) {
        struct column col[4];
        const size_t nc = section_columns(tr, s, col);
        p = put_section_header(p, (uint32_t)s, l.sec_len[s]);
        for (size_t c = 0; c < nc; c++) {
            p = put_bytes(p, col[c].data, col[c].bytes);
        }
        p = put_pad(p, l.sec_len[s]);
    }

    p = put_section_header(p, SEC_STRINGS, l.sec_len[SEC_STRINGS]);
    p = put_bytes(p, tr->str_data, tr->str_len);
    p = put_pad(p, l.sec_len[SEC_STRINGS]);

    p = put_section_header(p, SEC_META, l.sec_len[SEC_META]);
    for (size_t i = 0; i < tr->n_meta; i++) {
        size_t kl = strlen(tr->meta[i].key), vl = strlen(tr->meta[i].value);
        put_u32(p, (uint32_t)kl);
        put_u32(p + 4, (uint32_t)vl);
        p = put_bytes(p + 8, tr->meta[i].key, kl);
        p = put_bytes(p, tr->meta[i].value, vl);
    }
    p = put_pad(p, l.sec_len[SEC_META]);

    size_t body = (size_t)(p - buf);
    TIO_ASSERT(body + CRC_BYTES == l.file_bytes);
    put_u32(p, tio_crc32c(0, buf, body));
    *data = buf;
    *len = (size_t)l.file_bytes;
    return 0;
}

/* ---- Reader ------------------------------------------------------------------------------- */

/* Check one header count against its limit and against what the input length can hold. */
static int check_count(const char *field, uint64_t v, uint64_t limit, uint64_t elem, size_t len) {
    if (v > limit) {
        return tio_set_error(TIO_EFORMAT, "trace: header: %s %llu exceeds the limit %llu", field,
                             (unsigned long long)v, (unsigned long long)limit);
    }
    /* v <= limit <= 2^32 and elem <= 24, so the product cannot overflow. */
    if (v * elem > len) {
        return tio_set_error(TIO_EFORMAT, "trace: header: %s %llu exceeds file size (%zu bytes)",
                             field, (unsigned long long)v, len);
    }
    return 0;
}

/* Walk the section headers; on success sec[s] points at section s's payload. */
static int check_sections(const unsigned char *buf,
                          size_t len,
                          const struct layout *l,
                          const unsigned char *sec[SEC_COUNT + 1]) {
    size_t off = TIO_TRACE_HEADER_BYTES;
    for (uint32_t s = 1; s <= SEC_COUNT; s++) {
        /* Sizes were checked: header + all sections + CRC == len, so these reads are in bounds. */
        TIO_ASSERT(off + SECTION_HEADER_BYTES <= len);
        uint32_t id = get_u32(buf + off), reserved = get_u32(buf + off + 4);
        uint64_t slen = get_u64(buf + off + 8);
        if (id != s) {
            return tio_set_error(TIO_EFORMAT,
                                 "trace: section %u at offset %zu: id %u, expected %u (%s)", s, off,
                                 id, s, section_names[s]);
        }
        if (reserved != 0) {
            return tio_set_error(TIO_EFORMAT, "trace: section %s: reserved field is %u, not 0",
                                 section_names[s], reserved);
        }
        if (slen != l->sec_len[s]) {
            return tio_set_error(
                TIO_EFORMAT, "trace: section %s: length %llu, the header counts imply %llu",
                section_names[s], (unsigned long long)slen, (unsigned long long)l->sec_len[s]);
        }
        off += SECTION_HEADER_BYTES;
        sec[s] = buf + off;
        size_t padded = (size_t)pad8(slen);
        for (size_t i = (size_t)slen; i < padded; i++) {
            if (buf[off + i] != 0) {
                return tio_set_error(TIO_EFORMAT, "trace: section %s: padding byte %zu is not 0",
                                     section_names[s], i - (size_t)slen);
            }
        }
        off += padded;
    }
    TIO_ASSERT(off + CRC_BYTES == len);
    return 0;
}

/* The strings section: exactly n_strings NUL-terminated UTF-8 strings. */
static int check_strings(const unsigned char *p, const struct layout *l) {
    size_t pos = 0, n = (size_t)l->string_bytes;
    for (uint64_t i = 0; i < l->n_strings; i++) {
        const unsigned char *nul = pos < n ? memchr(p + pos, '\0', n - pos) : NULL;
        if (!nul) {
            return tio_set_error(TIO_EFORMAT,
                                 "trace: strings: string %llu at byte %zu is not NUL-terminated",
                                 (unsigned long long)i, pos);
        }
        size_t slen = (size_t)(nul - (p + pos));
        if (slen > TIO_TRACE_MAX_STRING) {
            return tio_set_error(TIO_EFORMAT, "trace: strings: string %llu is %zu bytes (limit %d)",
                                 (unsigned long long)i, slen, TIO_TRACE_MAX_STRING);
        }
        if (!tio_trace_utf8_valid((const char *)p + pos, slen)) {
            return tio_set_error(TIO_EFORMAT, "trace: strings: string %llu is not valid UTF-8",
                                 (unsigned long long)i);
        }
        pos += slen + 1;
    }
    if (pos != n) {
        return tio_set_error(TIO_EFORMAT,
                             "trace: strings: %llu strings end at byte %zu, section has %zu",
                             (unsigned long long)l->n_strings, pos, n);
    }
    return 0;
}

/* The metadata section: n_meta entries {u32 key_len, u32 value_len, key, value}. */
static int check_meta(const unsigned char *p, const struct layout *l) {
    size_t pos = 0, n = (size_t)l->meta_bytes;
    for (uint64_t i = 0; i < l->n_meta; i++) {
        if (n - pos < 8) {
            return tio_set_error(TIO_EFORMAT, "trace: meta[%llu]: truncated entry header",
                                 (unsigned long long)i);
        }
        uint32_t kl = get_u32(p + pos), vl = get_u32(p + pos + 4);
        pos += 8;
        if (kl < 1 || kl > META_KEY_MAX) {
            return tio_set_error(TIO_EFORMAT, "trace: meta[%llu]: key length %u outside [1, %u]",
                                 (unsigned long long)i, kl, META_KEY_MAX);
        }
        if (vl > TIO_TRACE_MAX_STRING) {
            return tio_set_error(TIO_EFORMAT, "trace: meta[%llu]: value length %u exceeds %d",
                                 (unsigned long long)i, vl, TIO_TRACE_MAX_STRING);
        }
        if ((size_t)kl + vl > n - pos) {
            return tio_set_error(TIO_EFORMAT,
                                 "trace: meta[%llu]: key and value (%u + %u bytes) run past the "
                                 "section",
                                 (unsigned long long)i, kl, vl);
        }
        const char *key = (const char *)p + pos, *val = key + kl;
        if (!tio_trace_meta_key_valid(key, kl)) {
            return tio_set_error(TIO_EFORMAT, "trace: meta[%llu]: key '%.*s' is not [a-z0-9_.-]",
                                 (unsigned long long)i, (int)kl, key);
        }
        if (memchr(val, '\0', vl) || !tio_trace_utf8_valid(val, vl)) {
            return tio_set_error(TIO_EFORMAT,
                                 "trace: meta[%llu] ('%.*s'): value is not NUL-free UTF-8",
                                 (unsigned long long)i, (int)kl, key);
        }
        /* Duplicate keys would silently collapse on load: reject them. */
        size_t q = 0;
        for (uint64_t j = 0; j < i; j++) {
            uint32_t kj = get_u32(p + q), vj = get_u32(p + q + 4);
            if (kj == kl && memcmp(p + q + 8, key, kl) == 0) {
                return tio_set_error(TIO_EFORMAT, "trace: meta[%llu]: duplicate key '%.*s'",
                                     (unsigned long long)i, (int)kl, key);
            }
            q += 8u + kj + vj;
        }
        pos += (size_t)kl + vl;
    }
    if (pos != n) {
        return tio_set_error(TIO_EFORMAT,
                             "trace: meta: %llu entries end at byte %zu, section has %zu",
                             (unsigned long long)l->n_meta, pos, n);
    }
    return 0;
}

/* The header's fixed fields, for an input of `len` bytes whose first 80 are at buf. */
static int header_fixed(const unsigned char *buf, uint64_t len) {
    if (len < TIO_TRACE_MAGIC_LEN || memcmp(buf, TIO_TRACE_MAGIC, TIO_TRACE_MAGIC_LEN) != 0) {
        return tio_set_error(TIO_EFORMAT, "trace: not a binary teraio trace (bad magic)");
    }
    if (len < TIO_TRACE_HEADER_BYTES + CRC_BYTES) {
        return tio_set_error(TIO_EFORMAT, "trace: header: truncated (%llu bytes, need at least %u)",
                             (unsigned long long)len, TIO_TRACE_HEADER_BYTES + CRC_BYTES);
    }
    uint32_t version = get_u32(buf + H_VERSION);
    if (version != TIO_TRACE_BIN_VERSION) {
        return tio_set_error(TIO_EVERSION,
                             "trace: header: version %u not supported (this build reads %u)%s",
                             version, TIO_TRACE_BIN_VERSION,
                             version > TIO_TRACE_BIN_VERSION ? "; written by a newer teraio" : "");
    }
    uint32_t hb = get_u32(buf + H_HEADER_BYTES);
    if (hb != TIO_TRACE_HEADER_BYTES) {
        return tio_set_error(TIO_EFORMAT, "trace: header: header_bytes %u, expected %u", hb,
                             TIO_TRACE_HEADER_BYTES);
    }
    uint64_t fb = get_u64(buf + H_FILE_BYTES);
    if (fb != len) {
        return tio_set_error(
            TIO_EFORMAT, "trace: header: file_bytes %llu but the input has %llu bytes%s",
            (unsigned long long)fb, (unsigned long long)len, fb > len ? " (truncated)" : "");
    }
    return 0;
}

/* The header's counts: within the limits and consistent with the input length. */
static int header_counts(const unsigned char *buf, size_t len, struct layout *l) {
    l->n_kernels = get_u64(buf + H_N_KERNELS);
    l->n_tensors = get_u64(buf + H_N_TENSORS);
    l->n_uses = get_u64(buf + H_N_USES);
    l->n_strings = get_u64(buf + H_N_STRINGS);
    l->string_bytes = get_u64(buf + H_STRING_BYTES);
    l->n_meta = get_u64(buf + H_N_META);
    l->meta_bytes = get_u64(buf + H_META_BYTES);
    int rc;
    if ((rc = check_count("n_kernels", l->n_kernels, TIO_TRACE_MAX_KERNELS, KERNEL_BYTES, len)) ||
        (rc = check_count("n_tensors", l->n_tensors, TIO_TRACE_MAX_TENSORS, TENSOR_BYTES, len)) ||
        (rc = check_count("n_uses", l->n_uses, TIO_TRACE_MAX_USES, USE_BYTES, len)) ||
        (rc = check_count("n_strings", l->n_strings, UINT32_MAX - 1, 1, len)) ||
        (rc = check_count("string_bytes", l->string_bytes, UINT64_MAX, 1, len)) ||
        (rc = check_count("n_meta", l->n_meta, TIO_TRACE_MAX_META, 9, len)) ||
        (rc = check_count("meta_bytes", l->meta_bytes, UINT64_MAX, 1, len))) {
        return rc;
    }
    layout_compute(l); /* every term is now <= 24 * len: no overflow */
    if (l->file_bytes != len) {
        return tio_set_error(TIO_EFORMAT,
                             "trace: header: the counts imply %llu bytes but the input has %zu",
                             (unsigned long long)l->file_bytes, len);
    }
    return 0;
}

static int parse_header(const unsigned char *buf, size_t len, struct layout *l) {
    int rc = header_fixed(buf, len);
    if (rc < 0) {
        return rc;
    }
    uint32_t stored = get_u32(buf + len - CRC_BYTES);
    uint32_t computed = tio_crc32c(0, buf, len - CRC_BYTES);
    if (stored != computed) {
        return tio_set_error(TIO_EFORMAT,
                             "trace: checksum mismatch (stored 0x%08x, computed 0x%08x)", stored,
                             computed);
    }
    return header_counts(buf, len, l);
}

int tio_trace_binary_precheck(const void *header, uint64_t len) {
    int rc = header_fixed(header, len);
    if (rc < 0) {
        return rc;
    }
    if (len > SIZE_MAX) {
        return tio_set_error(TIO_ENOMEM, "trace: %llu bytes do not fit in memory",
                             (unsigned long long)len);
    }
    struct layout l = { 0 };
    return header_counts(header, (size_t)len, &l);
}

int tio_trace_read_binary(const void *data, size_t len, struct tio_trace **out) {
    const unsigned char *buf = data;
    struct layout l = { 0 };
    const unsigned char *sec[SEC_COUNT + 1] = { 0 };
    int rc = parse_header(buf, len, &l);
    if (rc == 0) {
        rc = check_sections(buf, len, &l, sec);
    }
    if (rc == 0) {
        rc = check_strings(sec[SEC_STRINGS], &l);
    }
    if (rc == 0) {
        rc = check_meta(sec[SEC_META], &l);
    }
    if (rc < 0) {
        return rc;
    }

    /* Everything the sizes depend on is checked: allocate once, at the exact sizes. */
    size_t nk = (size_t)l.n_kernels, nt = (size_t)l.n_tensors, nu = (size_t)l.n_uses;
    struct tio_trace_params params = tio_trace_params_default();
    params.kernels_hint = nk;
    params.tensors_hint = nt;
    params.uses_hint = nu;
    struct tio_trace *tr = NULL;
    rc = tio_trace_new(&params, &tr);
    if (rc < 0) {
        return rc;
    }
    for (int i = 1; i <= SEC_COUNT; i++) {
        TIO_ASSERT(sec[i] != NULL); /* check_sections set every one */
    }
    tr->n_kernels = nk;
    tr->n_tensors = nt;
    tr->n_uses = nu;
    for (int s = SEC_KERNELS; s <= SEC_USES; s++) {
        struct column col[4];
        const size_t nc = section_columns(tr, s, col);
        const unsigned char *p = sec[s];
        for (size_t c = 0; c < nc; c++) {
            if (col[c].bytes) {
                memcpy(col[c].data, p, col[c].bytes);
            }
            p += col[c].bytes;
        }
    }
    if (nt) {
        memset(tr->tensor_last_kernel, 0xff, nt * sizeof(uint32_t));
    }

    /* Strings are copied as one block; their offsets are recomputed (already checked). */
    size_t sb = (size_t)l.string_bytes, ns = (size_t)l.n_strings;
    tr->str_data = tio_malloc(sb);
    tr->str_off = tio_malloc(ns * sizeof(uint64_t));
    if (!tr->str_data || !tr->str_off) {
        tio_trace_free(tr);
        return tio_set_error(TIO_ENOMEM, "trace: out of memory loading %zu strings", ns);
    }
    tr->str_cap = sb ? sb : 1;
    tr->cap_strings = ns ? ns : 1;
    if (sb) {
        memcpy(tr->str_data, sec[SEC_STRINGS], sb);
    }
    size_t pos = 0;
    for (size_t i = 0; i < ns; i++) {
        tr->str_off[i] = pos;
        pos += strlen(tr->str_data + pos) + 1;
    }
    tr->str_len = sb;
    tr->n_strings = ns;

    const unsigned char *p = sec[SEC_META];
    char key[META_KEY_MAX + 1], value[TIO_TRACE_MAX_STRING + 1];
    for (size_t i = 0; i < (size_t)l.n_meta; i++) {
        uint32_t kl = get_u32(p), vl = get_u32(p + 4);
        memcpy(key, p + 8, kl);
        key[kl] = '\0';
        memcpy(value, p + 8 + kl, vl);
        value[vl] = '\0';
        p += 8u + kl + vl;
        rc = tio_trace_set_meta(tr, key, value);
        if (rc < 0) {
            tio_trace_free(tr);
            return rc;
        }
    }

    rc = tio_trace_finish(tr);
    if (rc < 0) {
        tio_trace_free(tr);
        return rc;
    }
    *out = tr;
    return 0;
}
