/* Shared body of the trace fuzzers: load, and on success save + reload and compare. */
#ifndef FUZZ_TRACE_COMMON_H
#define FUZZ_TRACE_COMMON_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <teraio/alloc.h>
#include <teraio/trace.h>

static int fuzz_names_equal(const char *a, const char *b) {
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Abort (a finding) unless a and b hold the same trace. */
static void fuzz_check_equal(const struct tio_trace *a, const struct tio_trace *b) {
    struct tio_trace_view x, y;
    tio_trace_get_view(a, &x);
    tio_trace_get_view(b, &y);
    if (x.n_kernels != y.n_kernels || x.n_tensors != y.n_tensors || x.n_uses != y.n_uses) {
        abort();
    }
    for (size_t k = 0; k < x.n_kernels; k++) {
        if (x.kernel_duration_ns[k] != y.kernel_duration_ns[k] ||
            x.kernel_flags[k] != y.kernel_flags[k] ||
            !fuzz_names_equal(tio_trace_kernel_name(a, (uint32_t)k),
                              tio_trace_kernel_name(b, (uint32_t)k))) {
            abort();
        }
    }
    if (memcmp(x.kernel_use_offset, y.kernel_use_offset, (x.n_kernels + 1) * 8) != 0) {
        abort();
    }
    for (size_t t = 0; t < x.n_tensors; t++) {
        if (x.tensor_bytes[t] != y.tensor_bytes[t] || x.tensor_kind[t] != y.tensor_kind[t] ||
            x.tensor_flags[t] != y.tensor_flags[t] ||
            !fuzz_names_equal(tio_trace_tensor_name(a, (uint32_t)t),
                              tio_trace_tensor_name(b, (uint32_t)t))) {
            abort();
        }
    }
    if ((x.n_uses && (memcmp(x.use_tensor, y.use_tensor, x.n_uses * 4) != 0 ||
                      memcmp(x.use_mode, y.use_mode, x.n_uses) != 0)) ||
        tio_trace_meta_count(a) != tio_trace_meta_count(b)) {
        abort();
    }
    for (size_t i = 0; i < tio_trace_meta_count(a); i++) {
        const char *ka, *va, *kb, *vb;
        if (tio_trace_meta_at(a, i, &ka, &va) != 0 || tio_trace_meta_at(b, i, &kb, &vb) != 0 ||
            strcmp(ka, kb) != 0 || strcmp(va, vb) != 0) {
            abort();
        }
    }
    uint64_t ha, hb;
    if (tio_trace_hash(a, &ha) != 0 || tio_trace_hash(b, &hb) != 0 || ha != hb) {
        abort();
    }
}

/* Round trip through `fmt` and compare. */
static void fuzz_round_trip(const struct tio_trace *tr, int32_t fmt) {
    void *d = NULL;
    size_t n = 0;
    if (tio_trace_save_mem(tr, fmt, &d, &n) != 0) {
        abort(); /* every loaded trace must be writable in both formats */
    }
    struct tio_trace *back = NULL;
    if (tio_trace_load_mem(d, n, fmt, &back) != 0) {
        abort();
    }
    fuzz_check_equal(tr, back);
    tio_trace_free(back);
    tio_free(d);
}

static int fuzz_trace_one(const uint8_t *data, size_t size, int32_t fmt) {
    struct tio_trace *tr = NULL;
    int rc = tio_trace_load_mem(data, size, fmt, &tr);
    if (rc == 0) {
        if (!tio_trace_is_finished(tr)) {
            abort();
        }
        fuzz_round_trip(tr, TIO_TRACE_FORMAT_BINARY);
        fuzz_round_trip(tr, TIO_TRACE_FORMAT_JSON);
        tio_trace_free(tr);
    } else if (tr != NULL || (rc != TIO_EFORMAT && rc != TIO_EVERSION && rc != TIO_ENOMEM)) {
        abort();
    }
    return 0;
}

#endif
