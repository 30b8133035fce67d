/* Private: the trace's storage, shared by the builder (trace.c) and the format readers/writers. */
#ifndef TIO_TRACE_IMPL_H
#define TIO_TRACE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <teraio/trace.h>

struct tio_trace_meta {
    char *key;   /* tio_malloc'd */
    char *value; /* tio_malloc'd */
};

struct tio_trace {
    int finished;
    /* kernels: [n_kernels]; use_offset: [n_kernels + 1] */
    size_t n_kernels, cap_kernels;
    uint64_t *kernel_duration_ns;
    uint32_t *kernel_flags;
    uint32_t *kernel_name;
    uint64_t *kernel_use_offset; /* capacity cap_kernels + 1 */
    /* tensors */
    size_t n_tensors, cap_tensors;
    uint64_t *tensor_bytes;
    int32_t *tensor_kind;
    uint32_t *tensor_flags;
    uint32_t *tensor_name;
    uint32_t
        *tensor_last_kernel; /* builder only: last kernel that used it (dedup), or UINT32_MAX */
    /* uses */
    size_t n_uses, cap_uses;
    uint32_t *use_tensor;
    uint8_t *use_mode;
    /* interned strings: NUL-terminated, concatenated in str_data, offsets in str_off */
    size_t n_strings, cap_strings;
    uint64_t *str_off;
    char *str_data;
    size_t str_len, str_cap;
    uint32_t *str_table; /* open addressing: string id + 1, 0 = empty; size str_table_cap */
    size_t str_table_cap;
    /* metadata */
    size_t n_meta, cap_meta;
    struct tio_trace_meta *meta;
};

/* Intern `s` (len bytes, not necessarily NUL-terminated); its id in *id. */
int tio_trace_intern_n(struct tio_trace *tr, const char *s, size_t len, uint32_t *id);

/* Bulk sizing for readers: make room for exactly these counts (columns become writable up to
 * them; the reader then sets n_* itself). Returns 0 or TIO_ENOMEM. */
int tio_trace_reserve(struct tio_trace *tr, size_t kernels, size_t tensors, size_t uses);

#endif
