/* Swap files: one per SSD directory, 0600, never reachable by name, grown with fallocate. */
#include "io/swapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <teraio/units.h>

#include "common/common_impl.h"

/* Refuse a directory that others can write to without the sticky bit: whoever can write there
 * can rename or replace its entries, ours included. */
static int check_dir_mode(int fd, const char *dir, const char *part) {
    struct stat st;
    if (fstat(fd, &st) < 0) {
        return tio_set_error(-errno, "engine: cannot stat %s", part);
    }
    if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)) {
        return tio_set_error(-EPERM,
                             "engine: directory %s (in %s) is world-writable without the sticky "
                             "bit (mode %04o), so any user could replace its entries; use a "
                             "directory only you can write (chmod o-w) or set the sticky bit "
                             "(chmod +t)",
                             part, dir, (unsigned)(st.st_mode & 07777));
    }
    return 0;
}

/* Open `dir` one component at a time with O_NOFOLLOW, so that a symbolic link anywhere in the
 * path (also the last component written with a trailing slash, which O_NOFOLLOW alone would
 * follow) is refused with -ELOOP, and check every directory's mode on the way. */
static int open_dir(const char *dir) {
    size_t len = strlen(dir);
    if (len == 0) {
        return tio_set_error(TIO_EINVAL, "engine: empty directory name");
    }
    char *path = tio_strdup(dir);
    if (!path) {
        return TIO_ENOMEM;
    }
    int dfd = open(path[0] == '/' ? "/" : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = dfd < 0 ? tio_set_error(-errno, "engine: cannot open directory %s", dir) : 0;
    for (char *p = path; rc == 0 && *p;) {
        while (*p == '/') {
            p++;
        }
        if (!*p) {
            break;
        }
        char *end = strchr(p, '/');
        if (end) {
            *end = '\0';
        }
        int next = openat(dfd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0) {
            int err = errno;
            struct stat st;
            /* the path up to and including this component, for the message */
            if (fstatat(dfd, p, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
                rc = tio_set_error(-ELOOP,
                                   "engine: directory %s: %s is a symbolic link; pass the real "
                                   "path (realpath %s): swap directories may not contain "
                                   "symbolic links",
                                   dir, path, dir);
            } else {
                rc = tio_set_error(-err, "engine: cannot open directory %s: %s: %s", dir, path,
                                   tio_strerror(-err));
            }
        } else {
            close(dfd);
            dfd = next;
            if (strcmp(p, ".") != 0 && strcmp(p, "..") != 0) {
                rc = check_dir_mode(dfd, dir, path);
            }
        }
        if (end) {
            *end = '/';
        }
        p = end ? end : p + strlen(p);
    }
    tio_free(path);
    if (rc < 0) {
        if (dfd >= 0) {
            close(dfd);
        }
        return rc;
    }
    return dfd;
}

int tio_swapfile_open(struct tio_swapfile *sf, const char *dir, int want_direct) {
    memset(sf, 0, sizeof(*sf));
    sf->fd = -1;
    int dfd = open_dir(dir);
    if (dfd < 0) {
        return dfd;
    }
    int flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW;
    int fd = -1;
    for (int attempt = want_direct ? 0 : 1; attempt < 2 && fd < 0; attempt++) {
        int f = flags | (attempt == 0 ? O_DIRECT : 0);
        /* O_TMPFILE: an inode that never had a name, freed when the last fd closes */
        fd = openat(dfd, ".", f | O_TMPFILE, 0600);
        if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == ENOENT)) {
            /* no O_TMPFILE here: create a random name exclusively and unlink it at once */
            char name[64];
            for (int tries = 0; tries < 16 && fd < 0; tries++) {
                (void)snprintf(name, sizeof name, ".teraio-swap-%d-%llx", (int)getpid(),
                               (unsigned long long)((uint64_t)(tio_now_s() * 1e9)) +
                                   (unsigned long long)tries);
                fd = openat(dfd, name, f | O_CREAT | O_EXCL, 0600);
            }
            if (fd >= 0 && unlinkat(dfd, name, 0) < 0) {
                int err = errno;
                close(fd);
                close(dfd);
                return tio_set_error(-err, "engine: cannot unlink swap file in %s", dir);
            }
        }
        if (fd >= 0) {
            sf->direct = attempt == 0;
        } else if (errno != EINVAL) {
            break; /* EINVAL: O_DIRECT not supported (tmpfs); retry without */
        }
    }
    if (fd < 0) {
        int err = errno;
        close(dfd);
        return tio_set_error(-err, "engine: cannot create a swap file in %s", dir);
    }
    close(dfd);
    if (fchmod(fd, 0600) < 0) { /* O_TMPFILE honours the mode, but umask can only narrow */
        int err = errno;
        close(fd);
        return tio_set_error(-err, "engine: fchmod swap file in %s", dir);
    }
    sf->fd = fd;
    sf->dir = tio_strdup(dir);
    if (!sf->dir) {
        close(fd);
        sf->fd = -1;
        return TIO_ENOMEM;
    }
    tio_extents_init(&sf->ext, TIO_SWAP_UNIT);
    if (!sf->direct) {
        TIO_LOG_INFO("engine: %s does not support O_DIRECT; using the page cache", dir);
    }
    return 0;
}

void tio_swapfile_close(struct tio_swapfile *sf) {
    if (sf->fd >= 0) {
        close(sf->fd); /* the last reference: the kernel frees the blocks */
    }
    tio_extents_fini(&sf->ext);
    tio_free(sf->dir);
    sf->fd = -1;
    sf->dir = NULL;
}

uint64_t tio_swapfile_fs_available(const struct tio_swapfile *sf) {
    struct statvfs vfs;
    if (fstatvfs(sf->fd, &vfs) < 0) {
        return 0;
    }
    return (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
}

int tio_swapfile_grow(struct tio_swapfile *sf, uint64_t new_size, int preallocate) {
    new_size = tio_extents_round(&sf->ext, new_size);
    if (new_size <= sf->size) {
        return 0;
    }
    uint64_t delta = new_size - sf->size;
    if (preallocate) {
        uint64_t avail = tio_swapfile_fs_available(sf);
        if (avail < delta) {
            char a[32], b[32];
            return tio_set_error(-ENOSPC, "needed %s (%llu bytes), available %s (%llu bytes) on %s",
                                 tio_format_bytes(delta, a, sizeof a), (unsigned long long)delta,
                                 tio_format_bytes(avail, b, sizeof b), (unsigned long long)avail,
                                 sf->dir);
        }
        int rc = fallocate(sf->fd, 0, (off_t)sf->size, (off_t)delta);
        if (rc < 0 && (errno == EOPNOTSUPP || errno == ENOSYS)) {
            rc = ftruncate(sf->fd, (off_t)new_size);
        }
        if (rc < 0) {
            int err = errno;
            char a[32], b[32];
            uint64_t av = tio_swapfile_fs_available(sf);
            return tio_set_error(-err, "needed %s (%llu bytes), available %s (%llu bytes) on %s",
                                 tio_format_bytes(delta, a, sizeof a), (unsigned long long)delta,
                                 tio_format_bytes(av, b, sizeof b), (unsigned long long)av,
                                 sf->dir);
        }
    } else if (ftruncate(sf->fd, (off_t)new_size) < 0) {
        return tio_set_error(-errno, "engine: ftruncate swap file in %s", sf->dir);
    }
    int rc = tio_extents_add(&sf->ext, sf->size, delta);
    if (rc < 0) {
        return rc;
    }
    sf->size = new_size;
    return 0;
}
