/* src/io/swapfile.h - one preallocated, nameless swap file per SSD directory. */
#ifndef TIO_IO_SWAPFILE_H
#define TIO_IO_SWAPFILE_H

#include <stdint.h>

#include "io/extent.h"

/* Allocation granularity in swap files (bytes): the O_DIRECT alignment. */
#define TIO_SWAP_UNIT 4096u

struct tio_swapfile {
    char *dir;              /* directory path (owned) */
    int fd;                 /* O_TMPFILE or unlinked file, mode 0600 */
    int direct;             /* opened with O_DIRECT */
    uint64_t size;          /* bytes allocated on disk (fallocate) */
    struct tio_extents ext; /* free space inside the file */
};

/* Create the swap file in `dir` (which must not be a symlink: -ELOOP). O_DIRECT when
 * want_direct and the filesystem allows it. 0 or < 0 with detail. */
int tio_swapfile_open(struct tio_swapfile *sf, const char *dir, int want_direct);
void tio_swapfile_close(struct tio_swapfile *sf);
/* Grow to new_size bytes (fallocate when preallocate, else sparse). -ENOSPC with "needed X,
 * available Y on DIR" when the filesystem has less free space than the growth. */
int tio_swapfile_grow(struct tio_swapfile *sf, uint64_t new_size, int preallocate);
/* Free bytes on the filesystem for unprivileged users (statvfs f_bavail). */
uint64_t tio_swapfile_fs_available(const struct tio_swapfile *sf);

#endif
