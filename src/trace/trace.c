/* The trace data model: builder, validation, accessors and content hash (teraio/trace.h). */
#include <stdio.h>
#include <string.h>

#include "common/common_impl.h"
#include "trace/trace_format_impl.h"
#include "trace/trace_impl.h"

static const char *const kind_names[TIO_TENSOR_KIND_COUNT] = {
    [TIO_TENSOR_WEIGHT] = "weight",
    [TIO_TENSOR_GRAD] = "grad",
    [TIO_TENSOR_OPTIM_STATE] = "optim_state",
    [TIO_TENSOR_ACTIVATION] = "activation",
    [TIO_TENSOR_TEMP] = "temp",
    [TIO_TENSOR_INPUT] = "input",
    [TIO_TENSOR_OTHER] = "other",
};
_Static_assert(sizeof kind_names / sizeof kind_names[0] == TIO_TENSOR_KIND_COUNT, "kind names");

const char *tio_tensor_kind_name(int32_t kind) {
    return tio_enum_name(kind_names, TIO_TENSOR_KIND_COUNT, kind, "unknown");
}

int tio_tensor_kind_parse(const char *name) {
    int32_t kind = tio_enum_parse(kind_names, TIO_TENSOR_KIND_COUNT, name);
    if (kind >= 0) {
        return kind;
    }
    return tio_set_error(TIO_EINVAL,
                         "unknown tensor kind '%s' (weight, grad, optim_state, "
                         "activation, temp, input, other)",
                         name ? name : "(null)");
}

/* The defaults tio_trace_params_defaults hands out (the header's tio_trace_params_default goes
 * through it). */
static struct tio_trace_params builtin_defaults(void) {
    struct tio_trace_params p = { .struct_size = sizeof p };
    return p;
}

/* The first versioned struct tio_trace_params ends with `uses_hint` (fixed: fields only grow). */
#define TRACE_PARAMS_MIN TIO_SIZE_THROUGH(struct tio_trace_params, uses_hint)

int tio_trace_params_defaults(struct tio_trace_params *out, size_t size) {
    struct tio_trace_params d = builtin_defaults();
    return tio_struct_out("tio_trace_params", out, size, &d, sizeof d, TRACE_PARAMS_MIN);
}

/* Resize *p to n elements of elem bytes; 0 or -1. */
static int resize(void *pp, size_t n, size_t elem) {
    void **p = pp;
    size_t bytes;
    if (__builtin_mul_overflow(n ? n : 1, elem, &bytes)) {
        return -1;
    }
    void *q = tio_realloc(*p, bytes);
    if (!q) {
        return -1;
    }
    *p = q;
    return 0;
}

/* Next capacity: at least `need`, at least double the old one. */
static size_t next_cap(size_t cap, size_t need) {
    size_t n = cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2;
    return n < need ? need : n;
}

int tio_trace_reserve(struct tio_trace *tr, size_t kernels, size_t tensors, size_t uses) {
    if (kernels > tr->cap_kernels) {
        size_t n = next_cap(tr->cap_kernels, kernels);
        if (resize(&tr->kernel_duration_ns, n, sizeof(uint64_t)) ||
            resize(&tr->kernel_flags, n, sizeof(uint32_t)) ||
            resize(&tr->kernel_name, n, sizeof(uint32_t)) ||
            resize(&tr->kernel_use_offset, n + 1, sizeof(uint64_t))) {
            return tio_set_error(TIO_ENOMEM, "trace: cannot reserve %zu kernels", kernels);
        }
        tr->cap_kernels = n;
    }
    if (tensors > tr->cap_tensors) {
        size_t n = next_cap(tr->cap_tensors, tensors);
        if (resize(&tr->tensor_bytes, n, sizeof(uint64_t)) ||
            resize(&tr->tensor_kind, n, sizeof(int32_t)) ||
            resize(&tr->tensor_flags, n, sizeof(uint32_t)) ||
            resize(&tr->tensor_name, n, sizeof(uint32_t)) ||
            resize(&tr->tensor_last_kernel, n, sizeof(uint32_t))) {
            return tio_set_error(TIO_ENOMEM, "trace: cannot reserve %zu tensors", tensors);
        }
        tr->cap_tensors = n;
    }
    if (uses > tr->cap_uses) {
        size_t n = next_cap(tr->cap_uses, uses);
        if (resize(&tr->use_tensor, n, sizeof(uint32_t)) ||
            resize(&tr->use_mode, n, sizeof(uint8_t))) {
            return tio_set_error(TIO_ENOMEM, "trace: cannot reserve %zu uses", uses);
        }
        tr->cap_uses = n;
    }
    return 0;
}

int tio_trace_new(const struct tio_trace_params *params, struct tio_trace **out) {
    struct tio_trace_params p = tio_trace_params_default();
    if (params) {
        int rc = tio_struct_in("trace: params", &p, sizeof p, TRACE_PARAMS_MIN, params);
        if (rc < 0) {
            return rc;
        }
    }
    struct tio_trace *tr = tio_calloc(1, sizeof *tr);
    if (!tr) {
        return tio_set_error(TIO_ENOMEM, "trace: out of memory");
    }
    size_t k = p.kernels_hint ? p.kernels_hint : 64;
    size_t t = p.tensors_hint ? p.tensors_hint : 64;
    size_t u = p.uses_hint ? p.uses_hint : 256;
    if (k > TIO_TRACE_MAX_KERNELS || t > TIO_TRACE_MAX_TENSORS || u > TIO_TRACE_MAX_USES) {
        tio_free(tr);
        return tio_set_error(TIO_EINVAL, "trace: size hints exceed the trace limits");
    }
    int rc = tio_trace_reserve(tr, k, t, u);
    if (rc < 0) {
        tio_trace_free(tr);
        return rc;
    }
    tr->kernel_use_offset[0] = 0;
    *out = tr;
    return 0;
}

void tio_trace_free(struct tio_trace *tr) {
    if (!tr) {
        return;
    }
    tio_free(tr->kernel_duration_ns);
    tio_free(tr->kernel_flags);
    tio_free(tr->kernel_name);
    tio_free(tr->kernel_use_offset);
    tio_free(tr->tensor_bytes);
    tio_free(tr->tensor_kind);
    tio_free(tr->tensor_flags);
    tio_free(tr->tensor_name);
    tio_free(tr->tensor_last_kernel);
    tio_free(tr->use_tensor);
    tio_free(tr->use_mode);
    tio_free(tr->str_off);
    tio_free(tr->str_data);
    tio_free(tr->str_table);
    for (size_t i = 0; i < tr->n_meta; i++) {
        tio_free(tr->meta[i].key);
        tio_free(tr->meta[i].value);
    }
    tio_free(tr->meta);
    tio_free(tr);
}

static uint64_t str_hash(const char *s, size_t len) {
    return tio_hash64(TIO_HASH64_SEED ^ len, s, len);
}

static int str_table_rehash(struct tio_trace *tr, size_t ncap) {
    uint32_t *t = tio_calloc(ncap, sizeof *t);
    if (!t) {
        return TIO_ENOMEM;
    }
    for (size_t id = 0; id < tr->n_strings; id++) {
        const char *s = tr->str_data + tr->str_off[id];
        size_t len = strlen(s);
        size_t h = (size_t)str_hash(s, len) & (ncap - 1);
        while (t[h]) {
            h = (h + 1) & (ncap - 1);
        }
        t[h] = (uint32_t)id + 1;
    }
    tio_free(tr->str_table);
    tr->str_table = t;
    tr->str_table_cap = ncap;
    return 0;
}

int tio_trace_intern_n(struct tio_trace *tr, const char *s, size_t len, uint32_t *id) {
    if (len > TIO_TRACE_MAX_STRING) {
        return tio_set_error(TIO_EINVAL, "trace: name of %zu bytes exceeds the limit of %d", len,
                             TIO_TRACE_MAX_STRING);
    }
    if (memchr(s, '\0', len)) {
        return tio_set_error(TIO_EINVAL, "trace: name contains a NUL byte");
    }
    if (!tio_trace_utf8_valid(s, len)) {
        return tio_set_error(TIO_EINVAL, "trace: name is not valid UTF-8");
    }
    if ((tr->n_strings + 1) * 2 > tr->str_table_cap) {
        if (str_table_rehash(tr, tr->str_table_cap ? tr->str_table_cap * 2 : 64) < 0) {
            return tio_set_error(TIO_ENOMEM, "trace: out of memory interning names");
        }
    }
    size_t mask = tr->str_table_cap - 1;
    size_t h = (size_t)str_hash(s, len) & mask;
    while (tr->str_table[h]) {
        uint32_t cand = tr->str_table[h] - 1;
        const char *c = tr->str_data + tr->str_off[cand];
        if (strncmp(c, s, len) == 0 && c[len] == '\0') {
            *id = cand;
            return 0;
        }
        h = (h + 1) & mask;
    }
    if (tr->n_strings >= UINT32_MAX - 1) {
        return tio_set_error(TIO_ENOMEM, "trace: too many distinct names");
    }
    if (tio_grow((void **)&tr->str_data, &tr->str_cap, tr->str_len + len + 1, 1) < 0 ||
        tio_grow((void **)&tr->str_off, &tr->cap_strings, tr->n_strings + 1, sizeof(uint64_t)) <
            0) {
        return tio_set_error(TIO_ENOMEM, "trace: out of memory interning names");
    }
    memcpy(tr->str_data + tr->str_len, s, len);
    tr->str_data[tr->str_len + len] = '\0';
    tr->str_off[tr->n_strings] = tr->str_len;
    tr->str_len += len + 1;
    tr->str_table[h] = (uint32_t)tr->n_strings + 1;
    *id = (uint32_t)tr->n_strings++;
    return 0;
}

static int intern_opt(struct tio_trace *tr, const char *name, uint32_t *id) {
    if (!name) {
        *id = TIO_NO_NAME;
        return 0;
    }
    return tio_trace_intern_n(tr, name, strlen(name), id);
}

/*
 * What adding a kernel (is_kernel) or a tensor shares after its own checks: its flags among the
 * known ones, room for one more, its name interned into *nid and one more row reserved.
 */
static int
add_row(struct tio_trace *tr, int is_kernel, uint32_t flags, const char *name, uint32_t *nid) {
    const char *what = is_kernel ? "kernel" : "tensor";
    const size_t n = is_kernel ? tr->n_kernels : tr->n_tensors;
    const uint32_t known = is_kernel ? TIO_KERNEL_FLAGS_ALL : TIO_TENSOR_FLAGS_ALL;
    static const uint32_t max_rows[2] = { TIO_TRACE_MAX_TENSORS, TIO_TRACE_MAX_KERNELS };
    const uint32_t max = max_rows[is_kernel != 0];
    if (flags & ~known) {
        return tio_set_error(TIO_EINVAL, "trace: %s %zu: unknown flags 0x%x", what, n, flags);
    }
    if (n >= max) {
        return tio_set_error(TIO_ENOMEM, "trace: more than %u %ss", (unsigned)max, what);
    }
    int rc = intern_opt(tr, name, nid);
    if (rc < 0) {
        return rc;
    }
    return is_kernel ? tio_trace_reserve(tr, n + 1, 0, 0) : tio_trace_reserve(tr, 0, n + 1, 0);
}

int tio_trace_add_tensor(struct tio_trace *tr,
                         uint64_t bytes,
                         int32_t kind,
                         uint32_t flags,
                         const char *name,
                         uint32_t *id) {
    if (tr->finished) {
        return tio_set_error(TIO_ESTATE, "trace: add_tensor after finish");
    }
    if (bytes == 0 || bytes > TIO_TRACE_MAX_BYTES) {
        return tio_set_error(TIO_EINVAL, "trace: tensor %zu: bytes %llu outside [1, 2^50]",
                             tr->n_tensors, (unsigned long long)bytes);
    }
    if (kind < 0 || kind >= TIO_TENSOR_KIND_COUNT) {
        return tio_set_error(TIO_EINVAL, "trace: tensor %zu: unknown kind %d", tr->n_tensors,
                             (int)kind);
    }
    uint32_t nid = TIO_NO_NAME;
    int rc = add_row(tr, 0, flags, name, &nid);
    if (rc < 0) {
        return rc;
    }
    size_t t = tr->n_tensors++;
    tr->tensor_bytes[t] = bytes;
    tr->tensor_kind[t] = kind;
    tr->tensor_flags[t] = flags;
    tr->tensor_name[t] = nid;
    tr->tensor_last_kernel[t] = UINT32_MAX;
    if (id) {
        *id = (uint32_t)t;
    }
    return 0;
}

int tio_trace_add_kernel(
    struct tio_trace *tr, const char *name, uint64_t duration_ns, uint32_t flags, uint32_t *id) {
    if (tr->finished) {
        return tio_set_error(TIO_ESTATE, "trace: add_kernel after finish");
    }
    if (duration_ns > TIO_TRACE_MAX_DURATION) {
        return tio_set_error(TIO_EINVAL, "trace: kernel %zu: duration %llu ns exceeds the limit",
                             tr->n_kernels, (unsigned long long)duration_ns);
    }
    uint32_t nid = TIO_NO_NAME;
    int rc = add_row(tr, 1, flags, name, &nid);
    if (rc < 0) {
        return rc;
    }
    size_t k = tr->n_kernels++;
    tr->kernel_duration_ns[k] = duration_ns;
    tr->kernel_flags[k] = flags;
    tr->kernel_name[k] = nid;
    tr->kernel_use_offset[k + 1] = tr->n_uses;
    if (id) {
        *id = (uint32_t)k;
    }
    return 0;
}

int tio_trace_add_use(struct tio_trace *tr, uint32_t tensor, int32_t mode) {
    if (tr->finished) {
        return tio_set_error(TIO_ESTATE, "trace: add_use after finish");
    }
    if (tr->n_kernels == 0) {
        return tio_set_error(TIO_EINVAL, "trace: add_use before any kernel");
    }
    if (tensor >= tr->n_tensors) {
        return tio_set_error(TIO_EINVAL, "trace: kernel %zu: tensor %u out of range (%zu tensors)",
                             tr->n_kernels - 1, tensor, tr->n_tensors);
    }
    if (mode < TIO_USE_READ || mode > TIO_USE_READ_WRITE) {
        return tio_set_error(TIO_EINVAL, "trace: kernel %zu: unknown use mode %d",
                             tr->n_kernels - 1, (int)mode);
    }
    uint32_t k = (uint32_t)(tr->n_kernels - 1);
    if (tr->tensor_last_kernel[tensor] == k) {
        for (uint64_t u = tr->kernel_use_offset[k]; u < tr->n_uses; u++) {
            if (tr->use_tensor[u] == tensor) {
                tr->use_mode[u] = (uint8_t)(tr->use_mode[u] | mode);
                return 0;
            }
        }
    }
    if (tr->n_uses >= TIO_TRACE_MAX_USES) {
        return tio_set_error(TIO_ENOMEM, "trace: more than 2^32 uses");
    }
    int rc = tio_trace_reserve(tr, 0, 0, tr->n_uses + 1);
    if (rc < 0) {
        return rc;
    }
    tr->use_tensor[tr->n_uses] = tensor;
    tr->use_mode[tr->n_uses] = (uint8_t)mode;
    tr->n_uses++;
    tr->kernel_use_offset[k + 1] = tr->n_uses;
    tr->tensor_last_kernel[tensor] = k;
    return 0;
}

int tio_trace_set_kernel_duration(struct tio_trace *tr, uint32_t kernel, uint64_t duration_ns) {
    if (tr->finished) {
        return tio_set_error(TIO_ESTATE, "trace: set_kernel_duration after finish");
    }
    if (kernel >= tr->n_kernels) {
        return tio_set_error(TIO_EINVAL, "trace: kernel %u out of range (%zu kernels)", kernel,
                             tr->n_kernels);
    }
    if (duration_ns > TIO_TRACE_MAX_DURATION) {
        return tio_set_error(TIO_EINVAL, "trace: kernel %u: duration %llu ns exceeds the limit",
                             kernel, (unsigned long long)duration_ns);
    }
    tr->kernel_duration_ns[kernel] = duration_ns;
    return 0;
}

static int valid_meta_key(const char *key) {
    size_t n = 0;
    for (const char *p = key; *p; p++, n++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == '-')) {
            return 0;
        }
    }
    return n >= 1 && n <= 64;
}

int tio_trace_set_meta(struct tio_trace *tr, const char *key, const char *value) {
    if (!key || !value || !valid_meta_key(key)) {
        return tio_set_error(TIO_EINVAL, "trace: metadata key '%s' is not [a-z0-9_.-]{1,64}",
                             key ? key : "(null)");
    }
    if (strlen(value) > TIO_TRACE_MAX_STRING) {
        return tio_set_error(TIO_EINVAL, "trace: metadata value for '%s' is too long", key);
    }
    if (!tio_trace_utf8_valid(value, strlen(value))) {
        return tio_set_error(TIO_EINVAL, "trace: metadata value for '%s' is not valid UTF-8", key);
    }
    char *v = tio_strdup(value);
    if (!v) {
        return tio_set_error(TIO_ENOMEM, "trace: out of memory");
    }
    for (size_t i = 0; i < tr->n_meta; i++) {
        if (strcmp(tr->meta[i].key, key) == 0) {
            tio_free(tr->meta[i].value);
            tr->meta[i].value = v;
            return 0;
        }
    }
    if (tr->n_meta >= TIO_TRACE_MAX_META) {
        tio_free(v);
        return tio_set_error(TIO_EINVAL, "trace: more than %u metadata entries",
                             TIO_TRACE_MAX_META);
    }
    char *k = tio_strdup(key);
    if (!k || tio_grow((void **)&tr->meta, &tr->cap_meta, tr->n_meta + 1, sizeof *tr->meta) < 0) {
        tio_free(k);
        tio_free(v);
        return tio_set_error(TIO_ENOMEM, "trace: out of memory");
    }
    tr->meta[tr->n_meta].key = k;
    tr->meta[tr->n_meta].value = v;
    tr->n_meta++;
    return 0;
}

const char *tio_trace_get_meta(const struct tio_trace *tr, const char *key) {
    for (size_t i = 0; key && i < tr->n_meta; i++) {
        if (strcmp(tr->meta[i].key, key) == 0) {
            return tr->meta[i].value;
        }
    }
    return NULL;
}

size_t tio_trace_meta_count(const struct tio_trace *tr) {
    return tr->n_meta;
}

int tio_trace_meta_at(const struct tio_trace *tr, size_t i, const char **key, const char **value) {
    if (i >= tr->n_meta) {
        return tio_set_error(TIO_EINVAL, "trace: metadata index %zu out of range", i);
    }
    *key = tr->meta[i].key;
    *value = tr->meta[i].value;
    return 0;
}

int tio_trace_validate(const struct tio_trace *tr) {
    if (tr->n_kernels > TIO_TRACE_MAX_KERNELS || tr->n_tensors > TIO_TRACE_MAX_TENSORS ||
        tr->n_uses > TIO_TRACE_MAX_USES) {
        return tio_set_error(TIO_EFORMAT,
                             "trace: counts exceed limits (kernels %zu, tensors %zu, "
                             "uses %zu)",
                             tr->n_kernels, tr->n_tensors, tr->n_uses);
    }
    uint64_t total_bytes = 0, total_ns = 0;
    for (size_t t = 0; t < tr->n_tensors; t++) {
        if (tr->tensor_bytes[t] == 0 || tr->tensor_bytes[t] > TIO_TRACE_MAX_BYTES) {
            return tio_set_error(TIO_EFORMAT, "trace: tensor %zu: bytes %llu outside [1, 2^50]", t,
                                 (unsigned long long)tr->tensor_bytes[t]);
        }
        if (tio_add_u64(total_bytes, tr->tensor_bytes[t], &total_bytes) < 0) {
            return tio_set_error(TIO_EFORMAT, "trace: tensor %zu: total bytes overflow", t);
        }
        if (tr->tensor_kind[t] < 0 || tr->tensor_kind[t] >= TIO_TENSOR_KIND_COUNT) {
            return tio_set_error(TIO_EFORMAT, "trace: tensor %zu: unknown kind %d", t,
                                 (int)tr->tensor_kind[t]);
        }
        if (tr->tensor_flags[t] & ~(uint32_t)TIO_TENSOR_FLAGS_ALL) {
            return tio_set_error(TIO_EFORMAT, "trace: tensor %zu: unknown flags 0x%x", t,
                                 tr->tensor_flags[t]);
        }
        if (tr->tensor_name[t] != TIO_NO_NAME && tr->tensor_name[t] >= tr->n_strings) {
            return tio_set_error(TIO_EFORMAT, "trace: tensor %zu: name index %u out of range", t,
                                 tr->tensor_name[t]);
        }
    }
    if (tr->kernel_use_offset[0] != 0) {
        return tio_set_error(TIO_EFORMAT, "trace: kernel 0: use offset %llu, expected 0",
                             (unsigned long long)tr->kernel_use_offset[0]);
    }
    for (size_t k = 0; k < tr->n_kernels; k++) {
        if (tr->kernel_duration_ns[k] > TIO_TRACE_MAX_DURATION) {
            return tio_set_error(TIO_EFORMAT,
                                 "trace: kernel %zu: duration %llu ns exceeds the "
                                 "limit",
                                 k, (unsigned long long)tr->kernel_duration_ns[k]);
        }
        if (tio_add_u64(total_ns, tr->kernel_duration_ns[k], &total_ns) < 0) {
            return tio_set_error(TIO_EFORMAT, "trace: kernel %zu: total duration overflow", k);
        }
        if (tr->kernel_flags[k] & ~(uint32_t)TIO_KERNEL_FLAGS_ALL) {
            return tio_set_error(TIO_EFORMAT, "trace: kernel %zu: unknown flags 0x%x", k,
                                 tr->kernel_flags[k]);
        }
        if (tr->kernel_name[k] != TIO_NO_NAME && tr->kernel_name[k] >= tr->n_strings) {
            return tio_set_error(TIO_EFORMAT, "trace: kernel %zu: name index %u out of range", k,
                                 tr->kernel_name[k]);
        }
        uint64_t b = tr->kernel_use_offset[k], e = tr->kernel_use_offset[k + 1];
        if (e < b || e > tr->n_uses) {
            return tio_set_error(TIO_EFORMAT,
                                 "trace: kernel %zu: use offsets [%llu, %llu) not "
                                 "monotonic or beyond %zu uses",
                                 k, (unsigned long long)b, (unsigned long long)e, tr->n_uses);
        }
    }
    if (tr->kernel_use_offset[tr->n_kernels] != tr->n_uses) {
        return tio_set_error(TIO_EFORMAT, "trace: last use offset %llu != n_uses %zu",
                             (unsigned long long)tr->kernel_use_offset[tr->n_kernels], tr->n_uses);
    }
    /* Per-kernel duplicate check with a stamp array (kernel index + 1, 0 = never). */
    uint32_t *stamp = tio_calloc(tr->n_tensors ? tr->n_tensors : 1, sizeof *stamp);
    if (!stamp) {
        return tio_set_error(TIO_ENOMEM, "trace: out of memory validating");
    }
    int rc = 0;
    for (size_t k = 0; k < tr->n_kernels && rc == 0; k++) {
        for (uint64_t u = tr->kernel_use_offset[k]; u < tr->kernel_use_offset[k + 1]; u++) {
            uint32_t t = tr->use_tensor[u];
            if (t >= tr->n_tensors) {
                rc = tio_set_error(TIO_EFORMAT,
                                   "trace: use %llu (kernel %zu): tensor %u out of "
                                   "range (n_tensors %zu)",
                                   (unsigned long long)u, k, t, tr->n_tensors);
                break;
            }
            if (tr->use_mode[u] < TIO_USE_READ || tr->use_mode[u] > TIO_USE_READ_WRITE) {
                rc = tio_set_error(TIO_EFORMAT, "trace: use %llu (kernel %zu): unknown mode %u",
                                   (unsigned long long)u, k, (unsigned)tr->use_mode[u]);
                break;
            }
            if (stamp[t] == (uint32_t)k + 1) {
                rc = tio_set_error(TIO_EFORMAT,
                                   "trace: use %llu (kernel %zu): tensor %u used "
                                   "twice in one kernel",
                                   (unsigned long long)u, k, t);
                break;
            }
            stamp[t] = (uint32_t)k + 1;
        }
    }
    tio_free(stamp);
    return rc;
}

int tio_trace_finish(struct tio_trace *tr) {
    if (tr->finished) {
        return 0;
    }
    int rc = tio_trace_validate(tr);
    if (rc < 0) {
        return rc;
    }
    tr->finished = 1;
    return 0;
}

int tio_trace_is_finished(const struct tio_trace *tr) {
    return tr->finished;
}

void tio_trace_get_view(const struct tio_trace *tr, struct tio_trace_view *v) {
    v->n_kernels = tr->n_kernels;
    v->n_tensors = tr->n_tensors;
    v->n_uses = tr->n_uses;
    v->n_strings = tr->n_strings;
    v->kernel_duration_ns = tr->kernel_duration_ns;
    v->kernel_flags = tr->kernel_flags;
    v->kernel_name = tr->kernel_name;
    v->kernel_use_offset = tr->kernel_use_offset;
    v->tensor_bytes = tr->tensor_bytes;
    v->tensor_kind = tr->tensor_kind;
    v->tensor_flags = tr->tensor_flags;
    v->tensor_name = tr->tensor_name;
    v->use_tensor = tr->use_tensor;
    v->use_mode = tr->use_mode;
}

const char *tio_trace_string(const struct tio_trace *tr, uint32_t id) {
    if (id == TIO_NO_NAME || id >= tr->n_strings) {
        return NULL;
    }
    return tr->str_data + tr->str_off[id];
}

size_t tio_trace_kernel_count(const struct tio_trace *tr) {
    return tr->n_kernels;
}

size_t tio_trace_tensor_count(const struct tio_trace *tr) {
    return tr->n_tensors;
}

size_t tio_trace_use_count(const struct tio_trace *tr) {
    return tr->n_uses;
}

const char *tio_trace_kernel_name(const struct tio_trace *tr, uint32_t kernel) {
    return kernel < tr->n_kernels ? tio_trace_string(tr, tr->kernel_name[kernel]) : NULL;
}

const char *tio_trace_tensor_name(const struct tio_trace *tr, uint32_t tensor) {
    return tensor < tr->n_tensors ? tio_trace_string(tr, tr->tensor_name[tensor]) : NULL;
}

uint64_t tio_trace_total_duration_ns(const struct tio_trace *tr) {
    uint64_t s = 0;
    for (size_t k = 0; k < tr->n_kernels; k++) {
        s += tr->kernel_duration_ns[k];
    }
    return s;
}

int tio_trace_hash(const struct tio_trace *tr, uint64_t *out) {
    if (!tr->finished) {
        return tio_set_error(TIO_ESTATE, "trace: hash of an unfinished trace");
    }
    uint64_t h = TIO_HASH64_SEED;
    uint64_t counts[3] = { tr->n_kernels, tr->n_tensors, tr->n_uses };
    h = tio_hash64(h, counts, sizeof counts);
    h = tio_hash64(h, tr->kernel_duration_ns, tr->n_kernels * sizeof(uint64_t));
    h = tio_hash64(h, tr->kernel_flags, tr->n_kernels * sizeof(uint32_t));
    h = tio_hash64(h, tr->kernel_use_offset, (tr->n_kernels + 1) * sizeof(uint64_t));
    h = tio_hash64(h, tr->tensor_bytes, tr->n_tensors * sizeof(uint64_t));
    h = tio_hash64(h, tr->tensor_kind, tr->n_tensors * sizeof(int32_t));
    h = tio_hash64(h, tr->tensor_flags, tr->n_tensors * sizeof(uint32_t));
    h = tio_hash64(h, tr->use_tensor, tr->n_uses * sizeof(uint32_t));
    h = tio_hash64(h, tr->use_mode, tr->n_uses);
    *out = h;
    return 0;
}
