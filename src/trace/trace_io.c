/*
 * Loading and saving traces: format detection, whole-file reads, and crash-safe writes (a
 * temporary file in the destination's directory, fsync, rename, fsync of the directory).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common_impl.h"
#include "common/outfile.h"
#include "trace/trace_format_impl.h"
#include "trace/trace_impl.h"

int tio_trace_utf8_valid(const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    while (p < end) {
        unsigned c = *p;
        if (c < 0x80) {
            p++;
            continue;
        }
        size_t n;
        unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) {
            n = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 2;
            if (c == 0xE0) {
                lo = 0xA0; /* no overlongs */
            } else if (c == 0xED) {
                hi = 0x9F; /* no surrogates */
            }
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3;
            if (c == 0xF0) {
                lo = 0x90;
            } else if (c == 0xF4) {
                hi = 0x8F; /* nothing above U+10FFFF */
            }
        } else {
            return 0;
        }
        if ((size_t)(end - p) <= n || p[1] < lo || p[1] > hi) {
            return 0;
        }
        for (size_t i = 2; i <= n; i++) {
            if ((p[i] & 0xC0) != 0x80) {
                return 0;
            }
        }
        p += n + 1;
    }
    return 1;
}

int tio_trace_meta_key_valid(const char *key, size_t len) {
    if (len < 1 || len > 64) {
        return 0;
    }
    for (size_t i = 0; i < len; i++) {
        char c = key[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == '-')) {
            return 0;
        }
    }
    return 1;
}

static int is_binary(const void *data, size_t len) {
    return len >= TIO_TRACE_MAGIC_LEN && memcmp(data, TIO_TRACE_MAGIC, TIO_TRACE_MAGIC_LEN) == 0;
}

/* The reader and writer of each stored format. */
static const struct codec {
    int (*read)(const void *data, size_t len, struct tio_trace **out);
    int (*write)(const struct tio_trace *tr, void **data, size_t *len);
} codecs[] = {
    [TIO_TRACE_FORMAT_BINARY] = { tio_trace_read_binary, tio_trace_write_binary },
    [TIO_TRACE_FORMAT_JSON] = { tio_trace_read_json, tio_trace_write_json },
};

/* The codec of `format`, `automatic` standing for TIO_TRACE_FORMAT_AUTO; NULL (the error set,
 * naming the format) for an unknown one. */
static const struct codec *codec_of(int32_t format, int32_t automatic) {
    if (format == TIO_TRACE_FORMAT_AUTO) {
        format = automatic;
    }
    if (format != TIO_TRACE_FORMAT_BINARY && format != TIO_TRACE_FORMAT_JSON) {
        (void)tio_set_error(TIO_EINVAL, "trace: unknown format %d", (int)format);
        return NULL;
    }
    return &codecs[format];
}

int tio_trace_load_mem(const void *data, size_t len, int32_t format, struct tio_trace **out) {
    if (!out || (!data && len)) {
        return tio_set_error(TIO_EINVAL, "trace: load_mem: NULL argument");
    }
    static const char empty[1] = { 0 };
    if (!data) {
        data = empty;
    }
    const struct codec *c =
        codec_of(format, is_binary(data, len) ? TIO_TRACE_FORMAT_BINARY : TIO_TRACE_FORMAT_JSON);
    return c ? c->read(data, len, out) : TIO_EINVAL;
}

/*
 * Read a trace file into a tio_malloc'd buffer. Only a regular file is opened (never a FIFO or
 * a device: tio_input_open), and its first bytes are checked before the rest is read: a binary
 * trace's header must describe exactly this file within the limits, and a JSON one must fit
 * TIO_TRACE_JSON_MAX and start like text, so a huge sparse or garbage file is refused unread.
 */
static int read_file(const char *path, void **data, size_t *len) {
    struct tio_input in;
    int rc = tio_input_open("trace", path, TIO_TRACE_FILE_MAX, &in);
    if (rc < 0) {
        return rc;
    }
    unsigned char head[TIO_TRACE_HEADER_BYTES];
    size_t nh = (size_t)TIO_MIN(in.size, (uint64_t)sizeof head);
    rc = tio_input_read(&in, 0, head, nh);
    if (rc == 0 && is_binary(head, nh) && nh == sizeof head) {
        rc = tio_trace_binary_precheck(head, in.size);
    } else if (rc == 0 && !is_binary(head, nh)) {
        if (in.size > TIO_TRACE_JSON_MAX) {
            rc = tio_set_error(TIO_EFORMAT,
                               "trace: '%s' is %llu bytes: not a binary trace (no " TIO_TRACE_MAGIC
                               " magic), and above the JSON limit of %llu bytes",
                               path, (unsigned long long)in.size,
                               (unsigned long long)TIO_TRACE_JSON_MAX);
        } else if (!tio_input_looks_textual(head, nh)) {
            rc = tio_set_error(TIO_EFORMAT,
                               "trace: '%s' is neither a binary trace (no " TIO_TRACE_MAGIC
                               " magic) nor JSON text",
                               path);
        }
    }
    if (rc == 0) {
        rc = tio_input_read_all(&in, data, len);
    }
    if (rc < 0 && !strstr(tio_last_error(), path)) {
        char ctx[300];
        (void)snprintf(ctx, sizeof ctx, "%s", tio_last_error());
        rc = tio_set_error(rc, "%s (in %s)", ctx, path);
    }
    tio_input_close(&in);
    return rc;
}

int tio_trace_load(const char *path, int32_t format, struct tio_trace **out) {
    if (!path || !out) {
        return tio_set_error(TIO_EINVAL, "trace: load: NULL argument");
    }
    void *data = NULL;
    size_t len = 0;
    int rc = read_file(path, &data, &len);
    if (rc < 0) {
        return rc;
    }
    rc = tio_trace_load_mem(data, len, format, out);
    tio_free(data);
    return rc;
}

int tio_trace_save_mem(const struct tio_trace *tr, int32_t format, void **data, size_t *len) {
    if (!tr || !data || !len) {
        return tio_set_error(TIO_EINVAL, "trace: save_mem: NULL argument");
    }
    if (!tr->finished) {
        return tio_set_error(TIO_ESTATE, "trace: save of an unfinished trace (call finish)");
    }
    const struct codec *c = codec_of(format, TIO_TRACE_FORMAT_BINARY);
    return c ? c->write(tr, data, len) : TIO_EINVAL;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

int tio_trace_save(const struct tio_trace *tr, const char *path, int32_t format) {
    if (!tr || !path || !*path) {
        return tio_set_error(TIO_EINVAL, "trace: save: NULL argument");
    }
    if (format == TIO_TRACE_FORMAT_AUTO) {
        format = ends_with(path, ".json") ? TIO_TRACE_FORMAT_JSON : TIO_TRACE_FORMAT_BINARY;
    }
    void *data = NULL;
    size_t len = 0;
    int rc = tio_trace_save_mem(tr, format, &data, &len);
    if (rc < 0) {
        return rc;
    }
    rc = tio_outfile_save(path, "trace", data, len);
    tio_free(data);
    return rc;
}
