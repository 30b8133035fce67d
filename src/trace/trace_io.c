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

int tio_trace_load_mem(const void *data, size_t len, int32_t format, struct tio_trace **out) {
    if (!out || (!data && len)) {
        return tio_set_error(TIO_EINVAL, "trace: load_mem: NULL argument");
    }
    static const char empty[1] = { 0 };
    if (!data) {
        data = empty;
    }
    switch (format) {
    case TIO_TRACE_FORMAT_AUTO:
        return is_binary(data, len) ? tio_trace_read_binary(data, len, out)
                                    : tio_trace_read_json(data, len, out);
    case TIO_TRACE_FORMAT_BINARY:
        return tio_trace_read_binary(data, len, out);
    case TIO_TRACE_FORMAT_JSON:
        return tio_trace_read_json(data, len, out);
    default:
        return tio_set_error(TIO_EINVAL, "trace: unknown format %d", (int)format);
    }
}

/* Read a whole regular file into a tio_malloc'd buffer. */
static int read_file(const char *path, void **data, size_t *len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return tio_set_error(-e, "trace: cannot open '%s'", path);
    }
    int rc = 0;
    unsigned char *buf = NULL;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        tio_set_error(rc, "trace: cannot stat '%s'", path);
        goto out;
    }
    if (S_ISDIR(st.st_mode)) {
        rc = tio_set_error(-EISDIR, "trace: '%s' is a directory", path);
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = tio_set_error(TIO_EINVAL, "trace: '%s' is not a regular file", path);
        goto out;
    }
    /* The largest valid binary trace (2^28 kernels, 2^28 tensors, 2^32 uses) is ~33 GB. */
    if ((uint64_t)st.st_size > TIO_TRACE_FILE_MAX) {
        rc = tio_set_error(TIO_ENOMEM, "trace: '%s' is %lld bytes, larger than 64 GiB", path,
                           (long long)st.st_size);
        goto out;
    }
    size_t size = (size_t)st.st_size;
    buf = tio_malloc(size ? size : 1);
    if (!buf) {
        rc = tio_set_error(TIO_ENOMEM, "trace: cannot allocate %zu bytes for '%s'", size, path);
        goto out;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(fd, buf + got, size - got);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            rc = -errno;
            tio_set_error(rc, "trace: reading '%s'", path);
            goto out;
        }
        if (n == 0) {
            break; /* the file shrank; parse what we have (the reader will complain) */
        }
        got += (size_t)n;
    }
    *data = buf;
    *len = got;
    buf = NULL;
out:
    tio_free(buf);
    close(fd);
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
    switch (format) {
    case TIO_TRACE_FORMAT_AUTO:
    case TIO_TRACE_FORMAT_BINARY:
        return tio_trace_write_binary(tr, data, len);
    case TIO_TRACE_FORMAT_JSON:
        return tio_trace_write_json(tr, data, len);
    default:
        return tio_set_error(TIO_EINVAL, "trace: unknown format %d", (int)format);
    }
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
