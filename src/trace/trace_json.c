/*
 * The JSON trace format: human-readable interchange and test fixtures (docs/trace-format.md).
 *
 *   {"format": "teraio-trace", "version": 1, "meta": {"model": "mlp"},
 *    "tensors": [{"id": 0, "bytes": 4096, "kind": "weight", "global": true, "name": "w"}],
 *    "kernels": [{"name": "aten::mm", "duration_ns": 120000, "flags": ["backward"],
 *                 "uses": [[0, "r"], [1, "w"]]}]}
 *
 * The reader parses with jansson (duplicate keys rejected, input size capped), then checks the
 * type and range of every member, rejects unknown members (typos must not be silently
 * ignored), and names the offending member by its JSON path in the error. The writer is a
 * plain buffer printer: one tensor or kernel per line, deterministic output.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "common/common_impl.h"
#include "trace/trace_format_impl.h"
#include "trace/trace_impl.h"

static const char *const kernel_flag_names[] = { "comm", "optim", "backward" };
_Static_assert(TIO_ARRAY_LEN(kernel_flag_names) == 3 && TIO_KERNEL_FLAGS_ALL == 7,
               "one name per kernel flag");
static const char *const mode_names[4] = {
    [TIO_USE_READ] = "r", [TIO_USE_WRITE] = "w", [TIO_USE_READ_WRITE] = "rw"
};

/* ---- Writer ------------------------------------------------------------------------------- */

struct buf {
    char *p;
    size_t len, cap;
    int oom;
};

static void buf_reserve(struct buf *b, size_t more) {
    if (b->oom || b->len + more <= b->cap) {
        return;
    }
    if (tio_grow((void **)&b->p, &b->cap, b->len + more, 1) < 0) {
        b->oom = 1;
    }
}

static void buf_put(struct buf *b, const char *s, size_t n) {
    buf_reserve(b, n);
    if (!b->oom) {
        memcpy(b->p + b->len, s, n);
        b->len += n;
    }
}

static void buf_puts(struct buf *b, const char *s) {
    buf_put(b, s, strlen(s));
}

static void buf_u64(struct buf *b, uint64_t v) {
    char tmp[24];
    size_t i = sizeof tmp;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    buf_put(b, tmp + i, sizeof tmp - i);
}

/* A JSON string literal. Names are valid UTF-8 (the builder and readers enforce it), so only
 * quotes, backslashes and control characters need escapes. */
static void buf_str(struct buf *b, const char *s) {
    static const char hex[] = "0123456789abcdef";
    buf_reserve(b, 2 + strlen(s) * 6);
    if (b->oom) {
        return;
    }
    char *o = b->p + b->len;
    *o++ = '"';
    for (const unsigned char *q = (const unsigned char *)s; *q; q++) {
        unsigned char c = *q;
        if (c == '"' || c == '\\') {
            *o++ = '\\';
            *o++ = (char)c;
        } else if (c == '\n') {
            *o++ = '\\';
            *o++ = 'n';
        } else if (c == '\t') {
            *o++ = '\\';
            *o++ = 't';
        } else if (c < 0x20) {
            o[0] = '\\';
            o[1] = 'u';
            o[2] = '0';
            o[3] = '0';
            o[4] = hex[c >> 4];
            o[5] = hex[c & 15];
            o += 6;
        } else {
            *o++ = (char)c;
        }
    }
    *o++ = '"';
    b->len = (size_t)(o - b->p);
}

int tio_trace_write_json(const struct tio_trace *tr, void **data, size_t *len) {
    struct buf b = { 0 };
    /* Rough size: ~24 bytes per use, ~80 per kernel and tensor, plus names. */
    buf_reserve(&b, 256 + tr->n_uses * 12 + (tr->n_kernels + tr->n_tensors) * 80 + tr->str_len);
    buf_puts(&b, "{\n  \"format\": \"" TIO_TRACE_JSON_FORMAT "\",\n  \"version\": ");
    buf_u64(&b, TIO_TRACE_JSON_VERSION);
    buf_puts(&b, ",\n  \"meta\": {");
    for (size_t i = 0; i < tr->n_meta; i++) {
        buf_puts(&b, i ? ",\n    " : "\n    ");
        buf_str(&b, tr->meta[i].key);
        buf_puts(&b, ": ");
        buf_str(&b, tr->meta[i].value);
    }
    buf_puts(&b, tr->n_meta ? "\n  },\n  \"tensors\": [" : "},\n  \"tensors\": [");
    for (size_t t = 0; t < tr->n_tensors; t++) {
        buf_puts(&b, t ? ",\n    {\"id\": " : "\n    {\"id\": ");
        buf_u64(&b, t);
        buf_puts(&b, ", \"bytes\": ");
        buf_u64(&b, tr->tensor_bytes[t]);
        buf_puts(&b, ", \"kind\": \"");
        buf_puts(&b, tio_tensor_kind_name(tr->tensor_kind[t]));
        buf_puts(&b, "\"");
        if (tr->tensor_flags[t] & TIO_TENSOR_GLOBAL) {
            buf_puts(&b, ", \"global\": true");
        }
        if (tr->tensor_flags[t] & TIO_TENSOR_PINNED) {
            buf_puts(&b, ", \"pinned\": true");
        }
        const char *name = tio_trace_string(tr, tr->tensor_name[t]);
        if (name) {
            buf_puts(&b, ", \"name\": ");
            buf_str(&b, name);
        }
        buf_puts(&b, "}");
    }
    buf_puts(&b, tr->n_tensors ? "\n  ],\n  \"kernels\": [" : "],\n  \"kernels\": [");
    for (size_t k = 0; k < tr->n_kernels; k++) {
        buf_puts(&b, k ? ",\n    {" : "\n    {");
        const char *name = tio_trace_string(tr, tr->kernel_name[k]);
        if (name) {
            buf_puts(&b, "\"name\": ");
            buf_str(&b, name);
            buf_puts(&b, ", ");
        }
        buf_puts(&b, "\"duration_ns\": ");
        buf_u64(&b, tr->kernel_duration_ns[k]);
        if (tr->kernel_flags[k]) {
            buf_puts(&b, ", \"flags\": [");
            int first = 1;
            for (unsigned f = 0; f < TIO_ARRAY_LEN(kernel_flag_names); f++) {
                if (tr->kernel_flags[k] & (1u << f)) {
                    buf_puts(&b, first ? "\"" : ", \"");
                    buf_puts(&b, kernel_flag_names[f]);
                    buf_puts(&b, "\"");
                    first = 0;
                }
            }
            buf_puts(&b, "]");
        }
        buf_puts(&b, ", \"uses\": [");
        for (uint64_t u = tr->kernel_use_offset[k]; u < tr->kernel_use_offset[k + 1]; u++) {
            buf_puts(&b, u > tr->kernel_use_offset[k] ? ", [" : "[");
            buf_u64(&b, tr->use_tensor[u]);
            buf_puts(&b, ", \"");
            buf_puts(&b, mode_names[tr->use_mode[u]]);
            buf_puts(&b, "\"]");
        }
        buf_puts(&b, "]}");
    }
    buf_puts(&b, tr->n_kernels ? "\n  ]\n}\n" : "]\n}\n");
    if (b.oom) {
        tio_free(b.p);
        return tio_set_error(TIO_ENOMEM, "trace: out of memory writing JSON");
    }
    *data = b.p;
    *len = b.len;
    return 0;
}

/* ---- Reader ------------------------------------------------------------------------------- */

/* Unknown members are errors: `allowed` is a NULL-terminated list. */
static int check_members(json_t *obj, const char *const *allowed, const char *where, size_t idx) {
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        int ok = 0;
        for (const char *const *a = allowed; *a && !ok; a++) {
            ok = strcmp(key, *a) == 0;
        }
        if (!ok) {
            if (idx == SIZE_MAX) {
                return tio_set_error(TIO_EFORMAT, "trace: %s: unknown member '%s'", where, key);
            }
            return tio_set_error(TIO_EFORMAT, "trace: %s[%zu]: unknown member '%s'", where, idx,
                                 key);
        }
    }
    return 0;
}

/* An integer member in [lo, hi]. `required` 0 leaves *out untouched when absent. */
static int get_uint(json_t *obj,
                    const char *key,
                    int required,
                    uint64_t hi,
                    const char *where,
                    size_t idx,
                    uint64_t *out) {
    json_t *v = json_object_get(obj, key);
    if (!v) {
        return required ? tio_set_error(TIO_EFORMAT, "trace: %s[%zu].%s: missing", where, idx, key)
                        : 0;
    }
    if (!json_is_integer(v)) {
        return tio_set_error(TIO_EFORMAT, "trace: %s[%zu].%s: must be an integer", where, idx, key);
    }
    json_int_t n = json_integer_value(v);
    if (n < 0 || (uint64_t)n > hi) {
        return tio_set_error(TIO_EFORMAT, "trace: %s[%zu].%s: %lld outside [0, %llu]", where, idx,
                             key, (long long)n, (unsigned long long)hi);
    }
    *out = (uint64_t)n;
    return 0;
}

/* An optional boolean member (absent = false). */
static int get_bool(json_t *obj, const char *key, const char *where, size_t idx, int *out) {
    json_t *v = json_object_get(obj, key);
    *out = 0;
    if (!v) {
        return 0;
    }
    if (!json_is_boolean(v)) {
        return tio_set_error(TIO_EFORMAT, "trace: %s[%zu].%s: must be true or false", where, idx,
                             key);
    }
    *out = json_is_true(v);
    return 0;
}

/* An optional name (string or null): interned, or TIO_NO_NAME. */
static int
get_name(struct tio_trace *tr, json_t *obj, const char *where, size_t idx, uint32_t *id) {
    json_t *v = json_object_get(obj, "name");
    *id = TIO_NO_NAME;
    if (!v || json_is_null(v)) {
        return 0;
    }
    if (!json_is_string(v)) {
        return tio_set_error(TIO_EFORMAT, "trace: %s[%zu].name: must be a string or null", where,
                             idx);
    }
    size_t n = json_string_length(v);
    if (n > TIO_TRACE_MAX_STRING) {
        return tio_set_error(TIO_EFORMAT, "trace: %s[%zu].name: %zu bytes exceed the limit %d",
                             where, idx, n, TIO_TRACE_MAX_STRING);
    }
    int rc = tio_trace_intern_n(tr, json_string_value(v), n, id);
    if (rc == TIO_EINVAL) {
        return tio_set_error(TIO_EFORMAT, "trace: %s[%zu].name: %s", where, idx, tio_last_error());
    }
    return rc;
}

static int read_meta(struct tio_trace *tr, json_t *meta) {
    if (!meta) {
        return 0;
    }
    if (!json_is_object(meta)) {
        return tio_set_error(TIO_EFORMAT, "trace: meta: must be an object of strings");
    }
    if (json_object_size(meta) > TIO_TRACE_MAX_META) {
        return tio_set_error(TIO_EFORMAT, "trace: meta: %zu entries exceed the limit of %u",
                             json_object_size(meta), TIO_TRACE_MAX_META);
    }
    const char *key;
    json_t *v;
    json_object_foreach(meta, key, v) {
        if (!json_is_string(v)) {
            return tio_set_error(TIO_EFORMAT, "trace: meta.%s: must be a string", key);
        }
        if (!tio_trace_meta_key_valid(key, strlen(key))) {
            return tio_set_error(TIO_EFORMAT, "trace: meta: key '%s' is not [a-z0-9_.-]{1,64}",
                                 key);
        }
        if (json_string_length(v) > TIO_TRACE_MAX_STRING) {
            return tio_set_error(TIO_EFORMAT, "trace: meta.%s: value longer than %d bytes", key,
                                 TIO_TRACE_MAX_STRING);
        }
        int rc = tio_trace_set_meta(tr, key, json_string_value(v));
        if (rc < 0) {
            return rc == TIO_EINVAL
                       ? tio_set_error(TIO_EFORMAT, "trace: meta.%s: %s", key, tio_last_error())
                       : rc;
        }
    }
    return 0;
}

static int read_tensors(struct tio_trace *tr, json_t *arr) {
    static const char *const allowed[] = {
        "id", "bytes", "kind", "global", "pinned", "name", NULL
    };
    size_t n = json_array_size(arr);
    for (size_t t = 0; t < n; t++) {
        json_t *o = json_array_get(arr, t);
        if (!json_is_object(o)) {
            return tio_set_error(TIO_EFORMAT, "trace: tensors[%zu]: must be an object", t);
        }
        int rc = check_members(o, allowed, "tensors", t);
        uint64_t id = t, bytes = 0;
        int global = 0, pinned = 0;
        if (rc == 0) {
            rc = get_uint(o, "id", 0, UINT64_MAX >> 1, "tensors", t, &id);
        }
        if (rc == 0 && id != t) {
            rc = tio_set_error(TIO_EFORMAT,
                               "trace: tensors[%zu].id: %llu, expected %zu (ids are "
                               "array positions)",
                               t, (unsigned long long)id, t);
        }
        if (rc == 0) {
            rc = get_uint(o, "bytes", 1, TIO_TRACE_MAX_BYTES, "tensors", t, &bytes);
        }
        if (rc == 0 && bytes == 0) {
            rc = tio_set_error(TIO_EFORMAT, "trace: tensors[%zu].bytes: must be at least 1", t);
        }
        json_t *kind = json_object_get(o, "kind");
        int k = 0;
        if (rc == 0 && !json_is_string(kind)) {
            rc = tio_set_error(TIO_EFORMAT, "trace: tensors[%zu].kind: %s", t,
                               kind ? "must be a string" : "missing");
        }
        if (rc == 0 && (k = tio_tensor_kind_parse(json_string_value(kind))) < 0) {
            rc = tio_set_error(TIO_EFORMAT,
                               "trace: tensors[%zu].kind: unknown kind '%s' (weight, grad, "
                               "optim_state, activation, temp, input, other)",
                               t, json_string_value(kind));
        }
        if (rc == 0) {
            rc = get_bool(o, "global", "tensors", t, &global);
        }
        if (rc == 0) {
            rc = get_bool(o, "pinned", "tensors", t, &pinned);
        }
        uint32_t name = TIO_NO_NAME;
        if (rc == 0) {
            rc = get_name(tr, o, "tensors", t, &name);
        }
        if (rc < 0) {
            return rc;
        }
        tr->tensor_bytes[t] = bytes;
        tr->tensor_kind[t] = k;
        tr->tensor_flags[t] = (global ? (uint32_t)TIO_TENSOR_GLOBAL : 0u) |
                              (pinned ? (uint32_t)TIO_TENSOR_PINNED : 0u);
        tr->tensor_name[t] = name;
        tr->tensor_last_kernel[t] = UINT32_MAX;
        tr->n_tensors = t + 1;
    }
    return 0;
}

static int read_kernel_flags(json_t *o, size_t k, uint32_t *flags) {
    json_t *v = json_object_get(o, "flags");
    *flags = 0;
    if (!v) {
        return 0;
    }
    if (!json_is_array(v)) {
        return tio_set_error(TIO_EFORMAT, "trace: kernels[%zu].flags: must be an array of strings",
                             k);
    }
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *s = json_array_get(v, i);
        unsigned f = 0;
        while (json_is_string(s) && f < TIO_ARRAY_LEN(kernel_flag_names) &&
               strcmp(json_string_value(s), kernel_flag_names[f]) != 0) {
            f++;
        }
        if (!json_is_string(s) || f == TIO_ARRAY_LEN(kernel_flag_names)) {
            return tio_set_error(TIO_EFORMAT,
                                 "trace: kernels[%zu].flags[%zu]: unknown flag (comm, optim, "
                                 "backward)",
                                 k, i);
        }
        if (*flags & (1u << f)) {
            return tio_set_error(TIO_EFORMAT, "trace: kernels[%zu].flags[%zu]: '%s' repeated", k, i,
                                 kernel_flag_names[f]);
        }
        *flags |= 1u << f;
    }
    return 0;
}

static int read_uses(struct tio_trace *tr, json_t *uses, size_t k, uint32_t *stamp) {
    for (size_t i = 0; i < json_array_size(uses); i++) {
        json_t *pair = json_array_get(uses, i);
        if (!json_is_array(pair) || json_array_size(pair) != 2) {
            return tio_set_error(
                TIO_EFORMAT, "trace: kernels[%zu].uses[%zu]: must be a [tensor, mode] pair", k, i);
        }
        json_t *jt = json_array_get(pair, 0), *jm = json_array_get(pair, 1);
        if (!json_is_integer(jt)) {
            return tio_set_error(TIO_EFORMAT,
                                 "trace: kernels[%zu].uses[%zu]: tensor must be an integer", k, i);
        }
        json_int_t t = json_integer_value(jt);
        if (t < 0 || (uint64_t)t >= tr->n_tensors) {
            return tio_set_error(TIO_EFORMAT,
                                 "trace: kernels[%zu].uses[%zu]: tensor %lld out of range "
                                 "(%zu tensors)",
                                 k, i, (long long)t, tr->n_tensors);
        }
        const char *ms = json_is_string(jm) ? json_string_value(jm) : "";
        uint8_t mode = strcmp(ms, "r") == 0    ? TIO_USE_READ
                       : strcmp(ms, "w") == 0  ? TIO_USE_WRITE
                       : strcmp(ms, "rw") == 0 ? TIO_USE_READ_WRITE
                                               : 0;
        if (!mode) {
            return tio_set_error(TIO_EFORMAT,
                                 "trace: kernels[%zu].uses[%zu]: mode must be \"r\", \"w\" or "
                                 "\"rw\"",
                                 k, i);
        }
        if (stamp[t] == (uint32_t)k + 1) {
            return tio_set_error(TIO_EFORMAT,
                                 "trace: kernels[%zu].uses[%zu]: tensor %lld used twice by one "
                                 "kernel (give it once with mode \"rw\")",
                                 k, i, (long long)t);
        }
        stamp[t] = (uint32_t)k + 1;
        tr->use_tensor[tr->n_uses] = (uint32_t)t;
        tr->use_mode[tr->n_uses] = mode;
        tr->n_uses++;
    }
    return 0;
}

static int read_kernels(struct tio_trace *tr, json_t *arr) {
    static const char *const allowed[] = { "name", "duration_ns", "flags", "uses", NULL };
    size_t n = json_array_size(arr);
    uint32_t *stamp = tio_calloc(tr->n_tensors ? tr->n_tensors : 1, sizeof *stamp);
    if (!stamp) {
        return tio_set_error(TIO_ENOMEM, "trace: out of memory");
    }
    int rc = 0;
    tr->kernel_use_offset[0] = 0;
    for (size_t k = 0; k < n && rc == 0; k++) {
        json_t *o = json_array_get(arr, k);
        if (!json_is_object(o)) {
            rc = tio_set_error(TIO_EFORMAT, "trace: kernels[%zu]: must be an object", k);
            break;
        }
        uint64_t dur = 0;
        uint32_t flags = 0, name = TIO_NO_NAME;
        json_t *uses = json_object_get(o, "uses");
        rc = check_members(o, allowed, "kernels", k);
        if (rc == 0) {
            rc = get_uint(o, "duration_ns", 1, TIO_TRACE_MAX_DURATION, "kernels", k, &dur);
        }
        if (rc == 0) {
            rc = read_kernel_flags(o, k, &flags);
        }
        if (rc == 0) {
            rc = get_name(tr, o, "kernels", k, &name);
        }
        if (rc == 0 && !json_is_array(uses)) {
            rc = tio_set_error(TIO_EFORMAT, "trace: kernels[%zu].uses: %s", k,
                               uses ? "must be an array of [tensor, mode] pairs" : "missing");
        }
        if (rc == 0) {
            rc = read_uses(tr, uses, k, stamp);
        }
        if (rc == 0) {
            tr->kernel_duration_ns[k] = dur;
            tr->kernel_flags[k] = flags;
            tr->kernel_name[k] = name;
            tr->kernel_use_offset[k + 1] = tr->n_uses;
            tr->n_kernels = k + 1;
        }
    }
    tio_free(stamp);
    return rc;
}

/* Top-level checks and sizing: reserve the columns at their exact sizes before filling them. */
static int read_root(json_t *root, struct tio_trace **out) {
    static const char *const allowed[] = {
        "format", "version", "meta", "tensors", "kernels", NULL
    };
    if (!json_is_object(root)) {
        return tio_set_error(TIO_EFORMAT, "trace: JSON: the document must be an object");
    }
    int rc = check_members(root, allowed, "top level", SIZE_MAX);
    if (rc < 0) {
        return rc;
    }
    json_t *fmt = json_object_get(root, "format");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), TIO_TRACE_JSON_FORMAT) != 0) {
        return tio_set_error(TIO_EFORMAT,
                             "trace: format: %s, expected \"" TIO_TRACE_JSON_FORMAT "\"",
                             fmt ? "wrong value" : "missing");
    }
    json_t *ver = json_object_get(root, "version");
    if (!json_is_integer(ver)) {
        return tio_set_error(TIO_EFORMAT, "trace: version: %s",
                             ver ? "must be an integer" : "missing");
    }
    if (json_integer_value(ver) != TIO_TRACE_JSON_VERSION) {
        return tio_set_error(TIO_EVERSION,
                             "trace: version %lld not supported (this build reads %d)",
                             (long long)json_integer_value(ver), TIO_TRACE_JSON_VERSION);
    }
    json_t *tensors = json_object_get(root, "tensors"), *kernels = json_object_get(root, "kernels");
    if (!json_is_array(tensors)) {
        return tio_set_error(TIO_EFORMAT, "trace: tensors: %s",
                             tensors ? "must be an array" : "missing");
    }
    if (!json_is_array(kernels)) {
        return tio_set_error(TIO_EFORMAT, "trace: kernels: %s",
                             kernels ? "must be an array" : "missing");
    }
    size_t nt = json_array_size(tensors), nk = json_array_size(kernels), nu = 0;
    if (nt > TIO_TRACE_MAX_TENSORS || nk > TIO_TRACE_MAX_KERNELS) {
        return tio_set_error(TIO_EFORMAT, "trace: %zu tensors / %zu kernels exceed the limits", nt,
                             nk);
    }
    for (size_t k = 0; k < nk; k++) {
        nu += json_array_size(json_object_get(json_array_get(kernels, k), "uses"));
    }
    if (nu > TIO_TRACE_MAX_USES) {
        return tio_set_error(TIO_EFORMAT, "trace: %zu uses exceed the limit", nu);
    }
    /* Every counted element is a parsed JSON value, so these sizes are bounded by the input. */
    struct tio_trace_params params = { .kernels_hint = nk, .tensors_hint = nt, .uses_hint = nu };
    struct tio_trace *tr = NULL;
    rc = tio_trace_new(&params, &tr);
    if (rc < 0) {
        return rc;
    }
    rc = read_meta(tr, json_object_get(root, "meta"));
    if (rc == 0) {
        rc = read_tensors(tr, tensors);
    }
    if (rc == 0) {
        rc = read_kernels(tr, kernels);
    }
    if (rc == 0) {
        rc = tio_trace_finish(tr);
    }
    if (rc < 0) {
        tio_trace_free(tr);
        return rc;
    }
    *out = tr;
    return 0;
}

int tio_trace_read_json(const void *data, size_t len, struct tio_trace **out) {
    if ((uint64_t)len > TIO_TRACE_JSON_MAX) {
        return tio_set_error(TIO_EFORMAT,
                             "trace: JSON input of %zu bytes exceeds the limit of %llu", len,
                             (unsigned long long)TIO_TRACE_JSON_MAX);
    }
    json_error_t err;
    json_t *root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        return tio_set_error(TIO_EFORMAT, "trace: JSON: line %d, column %d: %s", err.line,
                             err.column, err.text);
    }
    int rc = read_root(root, out);
    json_decref(root);
    return rc;
}
