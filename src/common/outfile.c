/* Output files: write through a symlink, refuse non-regular files, keep owner and mode, never
 * follow anything at the temporary name (contract in outfile.h). */
#include "common/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common_impl.h"

/* Linux's own limit on symlinks followed in one lookup. */
#define OUTFILE_MAX_LINKS 40

struct tio_outfile {
    FILE *f;
    const char *who;
    char *target; /* the path written: the named path with final symlinks resolved */
    char *tmp;    /* temporary name next to target, NULL when rewriting in place */
    int in_place; /* writing into the existing inode (owner not keepable, or hard links) */
};

/* The kernel's protected-symlink rule (fs.protected_symlinks), applied whatever the sysctl says
 * since the links here are followed by hand: a link `link` (lstat in *lst) in a sticky
 * world-writable directory is followed only by its owner or when it belongs to the directory's
 * owner. 0, or -EACCES with detail. */
static int
check_protected_link(const char *link, const struct stat *lst, const char *who, const char *path) {
    const char *slash = strrchr(link, '/');
    char dir[PATH_MAX];
    size_t len = !slash ? 0 : slash == link ? 1 : (size_t)(slash - link);
    if (len >= sizeof dir) {
        return tio_set_error(-ENAMETOOLONG, "%s: cannot write '%s': path too long", who, path);
    }
    memcpy(dir, len ? link : ".", len ? len : 1);
    dir[len ? len : 1] = '\0';
    struct stat dst;
    if (stat(dir, &dst) < 0) {
        int e = errno;
        return tio_set_error(-e, "%s: cannot write '%s': %s: %s", who, path, dir, tio_strerror(-e));
    }
    int shared = (dst.st_mode & S_ISVTX) && (dst.st_mode & S_IWOTH);
    if (shared && lst->st_uid != geteuid() && lst->st_uid != dst.st_uid) {
        return tio_set_error(-EACCES,
                             "%s: cannot write '%s': the symbolic link '%s' is in a sticky "
                             "world-writable directory and belongs to uid %u, neither you nor "
                             "the directory's owner: not followed (the kernel's protected-"
                             "symlink rule)",
                             who, path, link, (unsigned)lst->st_uid);
    }
    return 0;
}

/* Follow the symlinks at the end of `path` (a relative link is taken from the link's directory),
 * each only where the protected-symlink rule allows it (check_protected_link).
 * *out is the final path (tio_malloc'ed); *st its lstat and *exists whether it exists. */
static int
resolve_target(const char *path, const char *who, char **out, struct stat *st, int *exists) {
    char *cur = tio_strdup(path);
    if (!cur) {
        return TIO_ENOMEM;
    }
    for (int hops = 0;; hops++) {
        if (lstat(cur, st) < 0) {
            int e = errno;
            if (e == ENOENT) {
                *exists = 0;
                *out = cur;
                return 0;
            }
            tio_free(cur);
            return tio_set_error(-e, "%s: cannot write '%s': %s", who, path, tio_strerror(-e));
        }
        if (!S_ISLNK(st->st_mode)) {
            *exists = 1;
            *out = cur;
            return 0;
        }
        if (hops == OUTFILE_MAX_LINKS) {
            tio_free(cur);
            return tio_set_error(-ELOOP, "%s: cannot write '%s': more than %d symbolic links", who,
                                 path, OUTFILE_MAX_LINKS);
        }
        int prc = check_protected_link(cur, st, who, path);
        if (prc < 0) {
            tio_free(cur);
            return prc;
        }
        char link[PATH_MAX];
        ssize_t n = readlink(cur, link, sizeof link - 1);
        if (n < 0) {
            int e = errno;
            tio_free(cur);
            return tio_set_error(-e, "%s: cannot read symbolic link '%s'", who, path);
        }
        link[n] = '\0';
        const char *slash = strrchr(cur, '/');
        size_t dirlen = link[0] == '/' || !slash ? 0 : (size_t)(slash - cur) + 1;
        char *next = tio_malloc(dirlen + (size_t)n + 1);
        if (!next) {
            tio_free(cur);
            return TIO_ENOMEM;
        }
        memcpy(next, cur, dirlen);
        memcpy(next + dirlen, link, (size_t)n + 1);
        tio_free(cur);
        cur = next;
    }
}

static uint32_t random_u32(void) {
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        r = (uint32_t)(tio_now_s() * 1e9);
    }
    return r;
}

/* Rewrite the existing regular file in place (no O_CREAT, O_NOFOLLOW, same inode as checked). */
static int open_in_place(struct tio_outfile *o, const struct stat *old, int *fd) {
    *fd = open(o->target, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (*fd < 0) {
        int e = errno;
        return tio_set_error(-e, "%s: cannot write '%s': %s", o->who, o->target, tio_strerror(-e));
    }
    struct stat st;
    if (fstat(*fd, &st) < 0 || st.st_ino != old->st_ino || st.st_dev != old->st_dev ||
        !S_ISREG(st.st_mode)) {
        close(*fd);
        *fd = -1;
        return tio_set_error(-EAGAIN, "%s: '%s' changed while opening it; try again", o->who,
                             o->target);
    }
    int flags = fcntl(*fd, F_GETFL);
    if (flags >= 0) {
        (void)fcntl(*fd, F_SETFL, flags & ~O_NONBLOCK);
    }
    o->in_place = 1;
    return 0;
}

/* Create the temporary file next to the target with O_EXCL (never follows a planted link). */
static int open_tmp(struct tio_outfile *o, int *fd) {
    static _Atomic unsigned counter;
    size_t cap = strlen(o->target) + 64;
    o->tmp = tio_malloc(cap);
    if (!o->tmp) {
        return TIO_ENOMEM;
    }
    for (int attempt = 0; attempt < 100; attempt++) {
        (void)snprintf(o->tmp, cap, "%s.tmp.%ld.%u.%08x", o->target, (long)getpid(),
                       atomic_fetch_add(&counter, 1u), random_u32());
        /* 0666: the umask applies to new files, as for any file a program creates */
        *fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (*fd >= 0) {
            return 0;
        }
        if (errno != EEXIST) {
            int e = errno;
            int rc = tio_set_error(-e, "%s: cannot create a file next to '%s': %s", o->who,
                                   o->target, tio_strerror(-e));
            tio_free(o->tmp);
            o->tmp = NULL;
            return rc;
        }
    }
    tio_free(o->tmp);
    o->tmp = NULL;
    return tio_set_error(-EEXIST, "%s: no free temporary name next to '%s'", o->who, o->target);
}

/* Free `o`; with `discard`, first close its stream if open and remove its temporary file, so
 * that nothing of an unfinished write is left and the target is untouched. */
static void outfile_release(struct tio_outfile *o, int discard) {
    if (discard && o->f) {
        (void)fclose(o->f);
    }
    if (discard && o->tmp) {
        (void)unlink(o->tmp);
    }
    tio_free(o->tmp);
    tio_free(o->target);
    tio_free(o);
}

int tio_outfile_open(const char *path, const char *who, struct tio_outfile **out) {
    if (!out) {
        return tio_set_error(TIO_EINVAL, "outfile: NULL argument");
    }
    *out = NULL;
    who = who ? who : "output";
    if (!path || !*path) {
        return tio_set_error(TIO_EINVAL, "%s: empty output path", who);
    }
    struct tio_outfile *o = tio_calloc(1, sizeof *o);
    if (!o) {
        return TIO_ENOMEM;
    }
    o->who = who;
    struct stat st;
    int exists = 0, fd = -1;
    int rc = resolve_target(path, who, &o->target, &st, &exists);
    if (rc < 0) {
        goto fail;
    }
    if (exists && S_ISDIR(st.st_mode)) {
        rc = tio_set_error(-EISDIR, "%s: cannot write '%s': it is a directory (name a file)", who,
                           path);
        goto fail;
    }
    if (exists && !S_ISREG(st.st_mode)) {
        rc = tio_set_error(TIO_EINVAL,
                           "%s: cannot write '%s': it is %s, not a regular file; teraio writes "
                           "only regular files (name a file)",
                           who, path, tio_file_kind_name(st.st_mode));
        goto fail;
    }
    if (exists && st.st_nlink > 1) {
        rc = open_in_place(o, &st, &fd); /* a rename would split the hard links */
    } else {
        rc = open_tmp(o, &fd);
        if (rc == -EACCES && exists) {
            rc = open_in_place(o, &st, &fd); /* a writable file in a read-only directory */
        }
    }
    if (rc < 0) {
        goto fail;
    }
    if (exists && o->tmp) {
        /* Give the new inode the old one's owner, then its mode (chown may clear set-id bits). */
        int owned = st.st_uid == geteuid() && st.st_gid == getegid();
        if (!owned && fchown(fd, st.st_uid, st.st_gid) < 0) {
            close(fd);
            (void)unlink(o->tmp);
            tio_free(o->tmp);
            o->tmp = NULL;
            rc = open_in_place(o, &st, &fd); /* not ours to chown: keep the inode instead */
            if (rc < 0) {
                goto fail;
            }
        } else if (fchmod(fd, st.st_mode & 07777) < 0) {
            int e = errno;
            close(fd);
            rc = tio_set_error(-e, "%s: cannot set the mode of '%s'", who, o->tmp);
            goto fail;
        }
    }
    o->f = fdopen(fd, "wb");
    if (!o->f) {
        int e = errno;
        close(fd);
        rc = tio_set_error(-e, "%s: cannot write '%s'", who, path);
        goto fail;
    }
    *out = o;
    return 0;
fail:
    outfile_release(o, 1);
    return rc;
}

FILE *tio_outfile_stream(struct tio_outfile *o) {
    return o ? o->f : NULL;
}

/* fsync the directory holding `path`, so the rename itself is durable. Best effort. */
static void sync_parent(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = NULL;
    if (slash) {
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        dir = tio_malloc(n + 1);
        if (!dir) {
            return;
        }
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int fd = open(dir ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    tio_free(dir);
}

/* 1 if something other than a regular file (or nothing) now sits at the target: checked again
 * right before the rename, which would replace it. */
static int target_changed(const struct tio_outfile *o) {
    struct stat st;
    return lstat(o->target, &st) == 0 && !S_ISREG(st.st_mode);
}

int tio_outfile_commit(struct tio_outfile *o) {
    if (!o) {
        return tio_set_error(TIO_EINVAL, "outfile: NULL handle");
    }
    int e = 0;
    if (fflush(o->f) != 0 || ferror(o->f)) {
        e = errno ? errno : EIO;
    }
    int fd = fileno(o->f);
    if (!e && o->in_place) {
        off_t end = lseek(fd, 0, SEEK_CUR);
        if (end < 0 || ftruncate(fd, end) < 0) {
            e = errno;
        }
    }
    if (!e && fsync(fd) < 0 && errno != EINVAL) { /* EINVAL: a file system without fsync */
        e = errno;
    }
    if (fclose(o->f) != 0 && !e) {
        e = errno ? errno : EIO;
    }
    o->f = NULL;
    int rc = 0;
    if (e) {
        rc = tio_set_error(-e, "%s: writing '%s' failed: %s", o->who, o->target, tio_strerror(-e));
    } else if (o->tmp && target_changed(o)) {
        rc = tio_set_error(TIO_EINVAL,
                           "%s: cannot write '%s': it became something other than a regular "
                           "file while it was written; left alone",
                           o->who, o->target);
    } else if (o->tmp && rename(o->tmp, o->target) < 0) {
        e = errno;
        rc = tio_set_error(-e, "%s: cannot replace '%s': %s", o->who, o->target, tio_strerror(-e));
    }
    if (rc == 0 && o->tmp) {
        sync_parent(o->target);
    }
    outfile_release(o, rc < 0);
    return rc;
}

void tio_outfile_abort(struct tio_outfile *o) {
    if (o) {
        outfile_release(o, 1);
    }
}

int tio_outfile_save(const char *path, const char *who, const void *data, size_t len) {
    struct tio_outfile *o = NULL;
    int rc = tio_outfile_open(path, who, &o);
    if (rc < 0 || !o) {
        return rc < 0 ? rc : TIO_ENOMEM;
    }
    if (len && fwrite(data, 1, len, o->f) != len) {
        int e = errno ? errno : EIO;
        tio_outfile_abort(o);
        return tio_set_error(-e, "%s: writing '%s' failed: %s", who ? who : "output", path,
                             tio_strerror(-e));
    }
    return tio_outfile_commit(o);
}
