/*
 * The JSON trace format: human-readable interchange and test fixtures (docs/trace-format.md).
 *
 *   {"format": "teraio-trace", "version": 1, "meta": {"model": "mlp"},
 *    "tensors": [{"id": 0, "bytes": 4096, "kind": "weight", "global": true, "name": "w"}],
 *    "kernels": [{"name": "aten::mm", "duration_ns": 120000, "flags": ["backward"],
 *                 "uses": [[0, "r"], [1, "w"]]}]}
 *
 * The reader parses one piece at a time with jansson (see "struct jdoc": memory stays a small
 * multiple of the input; duplicate keys rejected, input size capped), then checks the type and
 * range of every member, rejects unknown members (typos must not be silently
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
    char tmp[20];
    buf_put(b, tmp, tio_u64_to_dec(tmp, v));
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

/* Tensor t from its JSON object o. */
static int read_tensor(struct tio_trace *tr, json_t *o, size_t t) {
    static const char *const allowed[] = {
        "id", "bytes", "kind", "global", "pinned", "name", NULL
    };
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
    tr->tensor_flags[t] =
        (global ? (uint32_t)TIO_TENSOR_GLOBAL : 0u) | (pinned ? (uint32_t)TIO_TENSOR_PINNED : 0u);
    tr->tensor_name[t] = name;
    tr->tensor_last_kernel[t] = UINT32_MAX;
    tr->n_tensors = t + 1;
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

/* Kernel k from its JSON object o; stamp[t] == k + 1 marks tensors k already uses. */
static int read_kernel(struct tio_trace *tr, json_t *o, size_t k, uint32_t *stamp) {
    static const char *const allowed[] = { "name", "duration_ns", "flags", "uses", NULL };
    if (!json_is_object(o)) {
        return tio_set_error(TIO_EFORMAT, "trace: kernels[%zu]: must be an object", k);
    }
    uint64_t dur = 0;
    uint32_t flags = 0, name = TIO_NO_NAME;
    json_t *uses = json_object_get(o, "uses");
    int rc = check_members(o, allowed, "kernels", k);
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
    if (rc == 0 && tr->n_uses + json_array_size(uses) > TIO_TRACE_MAX_USES) {
        rc = tio_set_error(TIO_EFORMAT, "trace: kernels[%zu].uses: more than %llu uses in all", k,
                           (unsigned long long)TIO_TRACE_MAX_USES);
    }
    if (rc == 0) { /* the uses are not counted ahead: the columns grow (amortised doubling) */
        rc = tio_trace_reserve(tr, 0, 0, tr->n_uses + json_array_size(uses));
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
    return rc;
}

/*
 * The document is read one piece at a time so that memory stays a small multiple of the input
 * (a whole-document tree took 12-24x the file): a scanner walks the top-level object and the
 * "tensors" and "kernels" arrays, checking their punctuation, and hands each member value and
 * each array element to jansson on its own. Every byte still goes through jansson's parser
 * except the structural characters the scanner consumes.
 */
struct jdoc {
    const char *p;
    size_t n;
};

static int is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static size_t skip_ws(const struct jdoc *d, size_t i) {
    while (i < d->n && is_ws(d->p[i])) {
        i++;
    }
    return i;
}

/* A syntax error at byte `at`, reported by line and column like jansson's. */
static int syntax_error(const struct jdoc *d, size_t at, const char *what) {
    int line = 1, col = 0;
    for (size_t i = 0; i < at && i < d->n; i++) {
        if (d->p[i] == '\n') {
            line++;
            col = 0;
        } else {
            col++;
        }
    }
    return tio_set_error(TIO_EFORMAT, "trace: JSON: line %d, column %d: %s", line, col, what);
}

/* One past the end of the value starting at i (not whitespace), or 0 if it does not end:
 * strings to their closing quote, objects and arrays to their matching bracket (jansson
 * checks what lies between), scalars to the next delimiter. */
static size_t value_end(const struct jdoc *d, size_t i) {
    const char *p = d->p;
    if (i >= d->n) {
        return 0;
    }
    if (p[i] == '{' || p[i] == '[' || p[i] == '"') {
        size_t depth = 0;
        for (; i < d->n; i++) {
            char c = p[i];
            if (c == '"') {
                for (i++; i < d->n && p[i] != '"'; i++) {
                    i += p[i] == '\\';
                }
                if (i >= d->n) {
                    return 0;
                }
                if (depth == 0) {
                    return i + 1;
                }
            } else if (c == '{' || c == '[') {
                depth++;
            } else if (c == '}' || c == ']') {
                if (--depth == 0) {
                    return i + 1;
                }
            }
        }
        return 0;
    }
    size_t s = i;
    while (i < d->n && !is_ws(p[i]) && p[i] != ',' && p[i] != ']' && p[i] != '}') {
        i++;
    }
    return i > s ? i : 0;
}

/* jansson on the piece [a, b); errors are placed in the whole document. */
static int parse_piece(const struct jdoc *d, size_t a, size_t b, json_t **out) {
    json_error_t err;
    *out = json_loadb(d->p + a, b - a, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
    if (!*out) {
        return syntax_error(d, a + (size_t)(err.position > 0 ? err.position - 1 : 0), err.text);
    }
    return 0;
}

/* Walk the array value at [a, b): count its elements, or (fn set) parse and hand each to fn. */
typedef int (*elem_fn)(struct tio_trace *tr, json_t *o, size_t i, void *ctx);
static int each_element(
    const struct jdoc *d, size_t a, elem_fn fn, struct tio_trace *tr, void *ctx, size_t *count) {
    size_t i = skip_ws(d, a + 1), k = 0;
    int rc = 0;
    if (i < d->n && d->p[i] == ']') {
        *count = 0;
        return 0;
    }
    for (;;) {
        size_t e = value_end(d, i);
        if (e == 0) {
            return syntax_error(d, i, "a value expected");
        }
        if (fn) {
            json_t *o = NULL;
            if ((rc = parse_piece(d, i, e, &o)) < 0) {
                return rc;
            }
            rc = fn(tr, o, k, ctx);
            json_decref(o);
            if (rc < 0) {
                return rc;
            }
        }
        k++;
        i = skip_ws(d, e);
        if (i < d->n && d->p[i] == ',') {
            i = skip_ws(d, i + 1);
            continue;
        }
        if (i < d->n && d->p[i] == ']') {
            break;
        }
        return syntax_error(d, i, "',' or ']' expected");
    }
    *count = k;
    return 0;
}

static int tensor_fn(struct tio_trace *tr, json_t *o, size_t t, void *ctx) {
    (void)ctx;
    return read_tensor(tr, o, t);
}

static int kernel_fn(struct tio_trace *tr, json_t *o, size_t k, void *ctx) {
    return read_kernel(tr, o, k, ctx);
}

enum { M_FORMAT, M_VERSION, M_META, M_TENSORS, M_KERNELS, M_COUNT };
static const char *const member_names[M_COUNT] = { "format", "version", "meta", "tensors",
                                                   "kernels" };

/* Scan the top-level object: where each member's value starts and ends (0, 0 if absent). */
static int scan_root(const struct jdoc *d, size_t at[M_COUNT][2]) {
    memset(at, 0, sizeof(size_t) * 2 * M_COUNT);
    size_t i = skip_ws(d, 0);
    if (i >= d->n) {
        return syntax_error(d, i, "'{' expected near end of file");
    }
    if (d->p[i] != '{') {
        return tio_set_error(TIO_EFORMAT, "trace: JSON: the document must be an object");
    }
    i = skip_ws(d, i + 1);
    if (i < d->n && d->p[i] == '}') {
        i++;
    } else {
        for (;;) {
            if (i >= d->n || d->p[i] != '"') {
                return syntax_error(d, i, "string or '}' expected");
            }
            size_t ke = value_end(d, i);
            json_t *key = NULL;
            if (ke == 0) {
                return syntax_error(d, i, "unterminated string");
            }
            int rc = parse_piece(d, i, ke, &key);
            if (rc < 0) {
                return rc;
            }
            int m = 0;
            while (m < M_COUNT && strcmp(json_string_value(key), member_names[m]) != 0) {
                m++;
            }
            if (m == M_COUNT) {
                char shown[68];
                size_t j = 0;
                for (const char *c = json_string_value(key); *c && j < 64; c++) {
                    char ch = *c;
                    if ((unsigned char)ch < 0x20) {
                        ch = '?'; /* the key is printed to a terminal */
                    }
                    shown[j++] = ch;
                }
                shown[j] = '\0';
                json_decref(key);
                return tio_set_error(TIO_EFORMAT, "trace: top level: unknown member '%s'", shown);
            }
            json_decref(key);
            if (at[m][1] != 0) {
                return syntax_error(d, i, "duplicate object key");
            }
            i = skip_ws(d, ke);
            if (i >= d->n || d->p[i] != ':') {
                return syntax_error(d, i, "':' expected");
            }
            i = skip_ws(d, i + 1);
            size_t ve = value_end(d, i);
            if (ve == 0) {
                return syntax_error(d, i, "a value expected");
            }
            at[m][0] = i;
            at[m][1] = ve;
            i = skip_ws(d, ve);
            if (i < d->n && d->p[i] == ',') {
                i = skip_ws(d, i + 1);
                continue;
            }
            if (i < d->n && d->p[i] == '}') {
                i++;
                break;
            }
            return syntax_error(d, i, "',' or '}' expected");
        }
    }
    i = skip_ws(d, i);
    if (i != d->n) {
        return syntax_error(d, i, "end of file expected");
    }
    return 0;
}

/* Top-level checks and sizing, then the members in dependency order (tensors first). */
static int read_root(const struct jdoc *d, struct tio_trace **out) {
    size_t at[M_COUNT][2];
    int rc = scan_root(d, at);
    if (rc < 0) {
        return rc;
    }
    json_t *fmt = NULL, *ver = NULL, *meta = NULL;
    if (at[M_FORMAT][1] && (rc = parse_piece(d, at[M_FORMAT][0], at[M_FORMAT][1], &fmt)) < 0) {
        return rc;
    }
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), TIO_TRACE_JSON_FORMAT) != 0) {
        rc = tio_set_error(TIO_EFORMAT, "trace: format: %s, expected \"" TIO_TRACE_JSON_FORMAT "\"",
                           fmt ? "wrong value" : "missing");
    }
    json_decref(fmt);
    if (rc < 0) {
        return rc;
    }
    if (at[M_VERSION][1] && (rc = parse_piece(d, at[M_VERSION][0], at[M_VERSION][1], &ver)) < 0) {
        return rc;
    }
    if (!json_is_integer(ver)) {
        rc = tio_set_error(TIO_EFORMAT, "trace: version: %s",
                           ver ? "must be an integer" : "missing");
    } else if (json_integer_value(ver) != TIO_TRACE_JSON_VERSION) {
        long long v = json_integer_value(ver);
        rc =
            tio_set_error(TIO_EVERSION, "trace: version %lld not supported (this build reads %d)%s",
                          v, TIO_TRACE_JSON_VERSION,
                          v > TIO_TRACE_JSON_VERSION ? "; written by a newer teraio" : "");
    }
    json_decref(ver);
    if (rc < 0) {
        return rc;
    }
    static const char *const arrays[2] = { "tensors", "kernels" };
    size_t count[2] = { 0, 0 };
    for (int a = 0; a < 2; a++) {
        size_t *v = at[a == 0 ? M_TENSORS : M_KERNELS];
        if (!v[1] || d->p[v[0]] != '[') {
            return tio_set_error(TIO_EFORMAT, "trace: %s: %s", arrays[a],
                                 v[1] ? "must be an array" : "missing");
        }
        if ((rc = each_element(d, v[0], NULL, NULL, NULL, &count[a])) < 0) {
            return rc;
        }
    }
    size_t nt = count[0], nk = count[1];
    if (nt > TIO_TRACE_MAX_TENSORS || nk > TIO_TRACE_MAX_KERNELS) {
        return tio_set_error(TIO_EFORMAT, "trace: %zu tensors / %zu kernels exceed the limits", nt,
                             nk);
    }
    /* Every counted element is a value of the input, so these sizes are bounded by it. */
    struct tio_trace_params params = tio_trace_params_default();
    params.kernels_hint = nk;
    params.tensors_hint = nt;
    struct tio_trace *tr = NULL;
    rc = tio_trace_new(&params, &tr);
    if (rc < 0) {
        return rc;
    }
    uint32_t *stamp = NULL;
    if (at[M_META][1]) {
        rc = parse_piece(d, at[M_META][0], at[M_META][1], &meta);
    }
    if (rc == 0) {
        rc = read_meta(tr, meta);
    }
    json_decref(meta);
    size_t n = 0;
    if (rc == 0) {
        rc = each_element(d, at[M_TENSORS][0], tensor_fn, tr, NULL, &n);
    }
    if (rc == 0) {
        stamp = tio_calloc(tr->n_tensors ? tr->n_tensors : 1, sizeof *stamp);
        rc = stamp ? 0 : tio_set_error(TIO_ENOMEM, "trace: out of memory");
    }
    if (rc == 0) {
        tr->kernel_use_offset[0] = 0;
        rc = each_element(d, at[M_KERNELS][0], kernel_fn, tr, stamp, &n);
    }
    tio_free(stamp);
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
    struct jdoc d = { data, len };
    return read_root(&d, out);
}
