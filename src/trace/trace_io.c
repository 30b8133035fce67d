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

static int write_all(int fd, const unsigned char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w < 0) {
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* fsync the directory holding `path`, so the rename itself is durable. Best effort. */
static void sync_parent(const char *path) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) {
        (void)snprintf(dir, sizeof dir, ".");
    } else if (slash == path) {
        (void)snprintf(dir, sizeof dir, "/");
    } else {
        (void)snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
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
    /* A unique temporary name next to the destination (same file system, so rename is atomic).
     * O_EXCL with mode 0666 lets the umask apply, unlike mkstemp's 0600. */
    static _Atomic unsigned counter;
    char tmp[4096 + 64];
    int fd = -1;
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        int n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", path, (long)getpid(), counter++);
        if (n < 0 || (size_t)n >= sizeof tmp) {
            tio_free(data);
            return tio_set_error(-ENAMETOOLONG, "trace: path too long: '%s'", path);
        }
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) {
            int e = errno;
            tio_free(data);
            return tio_set_error(-e, "trace: cannot create '%s'", tmp);
        }
    }
    if (fd < 0) {
        tio_free(data);
        return tio_set_error(-EEXIST, "trace: cannot find a free temporary name for '%s'", path);
    }
    rc = write_all(fd, data, len);
    tio_free(data);
    if (rc == 0 && fsync(fd) < 0) {
        rc = -errno;
    }
    if (close(fd) < 0 && rc == 0) {
        rc = -errno;
    }
    if (rc < 0) {
        (void)unlink(tmp);
        return tio_set_error(rc, "trace: writing '%s'", tmp);
    }
    if (rename(tmp, path) < 0) {
        int e = errno;
        (void)unlink(tmp);
        return tio_set_error(-e, "trace: cannot rename '%s' to '%s'", tmp, path);
    }
    sync_parent(path);
    return 0;
}
