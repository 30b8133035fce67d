/* Shared fixtures of the trace format tests (test_trace_format*.c; header-only, each test is one
 * executable): a reference CRC32C, byte access, the small trace with every feature, field-by-field
 * equality. */
#ifndef TIO_TESTS_TRACE_FORMAT_UTIL_H
#define TIO_TESTS_TRACE_FORMAT_UTIL_H

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

/* CRC32C, bitwise (independent of the library's table/SSE4.2 version). */
static inline uint32_t ref_crc32c(const unsigned char *p, size_t n) {
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
static inline void fix_crc(unsigned char *p, size_t n) {
    uint32_t c = ref_crc32c(p, n - 4);
    memcpy(p + n - 4, &c, 4);
}

static inline uint64_t rd64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline void wr64(unsigned char *p, uint64_t v) {
    memcpy(p, &v, 8);
}
static inline void wr32(unsigned char *p, uint32_t v) {
    memcpy(p, &v, 4);
}

/* A small trace with every feature: all kinds, both tensor flags, all kernel flags, all modes,
 * an unnamed tensor and kernel, a kernel without uses, names needing JSON escapes, metadata. */
static inline struct tio_trace *make_small(void) {
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
static inline int traces_equal(const struct tio_trace *a, const struct tio_trace *b) {
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

static inline void save_small(int32_t fmt, unsigned char **data, size_t *len) {
    struct tio_trace *tr = make_small();
    void *d = NULL;
    *data = NULL;
    *len = 0;
    if (tr && tio_trace_save_mem(tr, fmt, &d, len) == 0) {
        *data = d;
    }
    tio_trace_free(tr);
}

#endif
