/*
 * src/common/outfile.h - the one routine every output file of teraio is written through
 * (traces, plans, CSV and JSON exports). Private to the library.
 *
 *     struct tio_outfile *o;
 *     int rc = tio_outfile_open("out/memory.csv", "analysis", &o);
 *     if (rc < 0) return rc;
 *     fprintf(tio_outfile_stream(o), "t_s,bytes\n");
 *     rc = tio_outfile_commit(o);           // frees o whatever happens
 *
 * What it guarantees about the path the user named:
 * - a symbolic link there is written through: its target (at the end of the chain, up to 40
 *   links) is what gets replaced, the link stays; except a link that the kernel's
 *   protected-symlink rule would not follow (in a sticky world-writable directory such as /tmp,
 *   owned by neither the caller nor the directory's owner), which is refused with -EACCES;
 * - anything there that is not a regular file (directory, device node, FIFO, socket) is refused
 *   with -EISDIR or TIO_EINVAL and a detail naming the kind, and is left untouched;
 * - an existing file keeps its owner, group and mode bits (the new content is written to a
 *   temporary file that gets them before it is renamed over the old one). When the owner cannot
 *   be kept (not root, file of another user) or the file has several hard links, the file is
 *   rewritten in place instead, which keeps its inode (and so owner, mode and links) but is not
 *   atomic;
 * - the temporary name (TARGET.tmp.<pid>.<n>.<random>, same directory) is created with O_EXCL,
 *   so nothing planted there (a symlink, a file) is ever followed or overwritten;
 * - the file is fsync'ed before the rename and the directory after it; on failure the target is
 *   untouched (atomic path) and the temporary file removed.
 * `who` prefixes the error details ("trace", "plan", "sim", "analysis"); it must outlive the
 * handle. Not thread-safe per handle; distinct handles are independent.
 */
#ifndef TIO_COMMON_OUTFILE_H
#define TIO_COMMON_OUTFILE_H

#include <stddef.h>
#include <stdio.h>

struct tio_outfile;

/* Prepare writing `path`: 0 and *out, or < 0 with detail (*out = NULL). */
int tio_outfile_open(const char *path, const char *who, struct tio_outfile **out);

/* The stream to write the content to (owned by the handle). */
FILE *tio_outfile_stream(struct tio_outfile *o);

/* Flush, fsync and put the content in place. Frees o. 0 or < 0 with detail (stream errors such
 * as ENOSPC included); on failure the named file is unchanged unless it was rewritten in place. */
int tio_outfile_commit(struct tio_outfile *o);

/* Discard what was written, leave the named file untouched, free o. NULL is accepted. */
void tio_outfile_abort(struct tio_outfile *o);

/* One call for a buffer: open, write len bytes of data, commit. */
int tio_outfile_save(const char *path, const char *who, const void *data, size_t len);

#endif
