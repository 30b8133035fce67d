/*
 * Input files of the loaders (trace, plan, hardware description): the kind and the size are
 * checked before a byte is read, so that a FIFO, a device, a directory or an oversized (or
 * sparse) file is refused with a clear error instead of blocking or filling memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common_impl.h"

const char *tio_file_kind_name(mode_t m) {
    if (S_ISDIR(m)) {
        return "a directory";
    }
    if (S_ISFIFO(m)) {
        return "a FIFO (named pipe)";
    }
    if (S_ISCHR(m)) {
        return "a character device";
    }
    if (S_ISBLK(m)) {
        return "a block device";
    }
    if (S_ISSOCK(m)) {
        return "a socket";
    }
    return "not a regular file";
}

/* Refuse anything but a regular file of at most max_bytes; `st` is its status. */
static int check_kind(const char *what, const char *path, const struct stat *st, uint64_t max) {
    if (S_ISDIR(st->st_mode)) {
        return tio_set_error(-EISDIR, "%s: '%s' is a directory, not a file", what, path);
    }
    if (!S_ISREG(st->st_mode)) {
        return tio_set_error(TIO_EINVAL, "%s: '%s' is %s; only regular files are read", what, path,
                             tio_file_kind_name(st->st_mode));
    }
    if (st->st_size < 0 || (uint64_t)st->st_size > max) {
        /* the limits lie above the largest valid file of each kind */
        return tio_set_error(TIO_EFORMAT,
                             "%s: '%s' is %lld bytes, above the limit of %llu bytes for a %s file",
                             what, path, (long long)st->st_size, (unsigned long long)max, what);
    }
    return 0;
}

int tio_input_open(const char *what, const char *path, uint64_t max_bytes, struct tio_input *in) {
    memset(in, 0, sizeof *in);
    in->fd = -1;
    in->what = what;
    in->path = path;
    /* stat first: opening a FIFO or a device can block or act on the device */
    struct stat st;
    if (stat(path, &st) < 0) {
        int e = errno;
        return tio_set_error(-e, "%s: cannot open '%s'", what, path);
    }
    int rc = check_kind(what, path, &st, max_bytes);
    if (rc < 0) {
        return rc;
    }
    /* O_NONBLOCK: should the path be swapped for a FIFO after the stat, open does not wait
     * for a writer; fstat below then refuses it. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return tio_set_error(-e, "%s: cannot open '%s'", what, path);
    }
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return tio_set_error(-e, "%s: cannot stat '%s'", what, path);
    }
    if ((rc = check_kind(what, path, &st, max_bytes)) < 0) {
        close(fd);
        return rc;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) {
        (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    }
    in->fd = fd;
    in->size = (uint64_t)st.st_size;
    return 0;
}

int tio_input_read(struct tio_input *in, uint64_t off, void *buf, size_t len) {
    unsigned char *p = buf;
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(in->fd, p + got, len - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            int e = errno;
            return tio_set_error(-e, "%s: reading '%s'", in->what, in->path);
        }
        if (n == 0) {
            uint64_t at = off + (uint64_t)got;
            return tio_set_error(TIO_EFORMAT,
                                 "%s: '%s' shrank while being read (%llu of %llu bytes)", in->what,
                                 in->path, (unsigned long long)at, (unsigned long long)in->size);
        }
        got += (size_t)n;
    }
    return 0;
}

int tio_input_read_all(struct tio_input *in, void **data, size_t *len) {
    size_t size = (size_t)in->size;
    unsigned char *buf = tio_malloc(size + 1);
    if (!buf) {
        return tio_set_error(TIO_ENOMEM, "%s: cannot allocate %zu bytes for '%s'", in->what,
                             size + 1, in->path);
    }
    /* in pieces, so that a signal or a slow file system never makes one huge request */
    const size_t piece = (size_t)1 << 24;
    for (size_t off = 0; off < size; off += piece) {
        int rc = tio_input_read(in, off, buf + off, TIO_MIN(piece, size - off));
        if (rc < 0) {
            tio_free(buf);
            return rc;
        }
    }
    buf[size] = '\0';
    *data = buf;
    *len = size;
    return 0;
}

void tio_input_close(struct tio_input *in) {
    if (in->fd >= 0) {
        close(in->fd);
    }
    in->fd = -1;
}

int tio_input_looks_textual(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            continue;
        }
        return c > 0x20 && c < 0x7f;
    }
    return 1;
}
