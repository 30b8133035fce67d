"""Writing output files the way the C library's save routine does (src/common/outfile.c), for
what Python writes (the report's pages, plots and summaries, rank reports).

A symbolic link at the named path is written through (its target is replaced, the link stays),
except where the kernel's protected-symlink rule would refuse to follow it: a link in a sticky
world-writable directory that belongs neither to the caller nor to the directory's owner. The
links are followed here, by hand, so the rule is applied here whatever fs.protected_symlinks
says. Content goes to a temporary file created with O_EXCL next to the target and is renamed
over it, so nothing planted at the temporary name is followed and a failed write leaves the
target as it was.
"""
from __future__ import annotations

import errno
import os
import stat
import tempfile

MAX_LINKS = 40  # Linux's own limit on symlinks followed in one lookup

# errors that say the path the user named is wrong (exit 2); any other OSError is a failure while
# writing (exit 3: disk full, I/O error)
PATH_ERRNOS = {errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.EACCES,
               errno.EPERM, errno.ELOOP, errno.ENAMETOOLONG, errno.EROFS, errno.EINVAL}


class OutputError(OSError):
    """An output path refused or not writable; `code` is the CLI exit code (2 or 3)."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.message = message
        self.code = code

    def __str__(self) -> str:
        return self.message


def _check_link(link: str, lst: os.stat_result, named: str) -> None:
    parent = os.path.dirname(link) or "."
    dst = os.stat(parent)
    shared = (dst.st_mode & stat.S_ISVTX) and (dst.st_mode & stat.S_IWOTH)
    if shared and lst.st_uid not in (os.geteuid(), dst.st_uid):
        raise OutputError(f"{named}: the symbolic link {link} is in a sticky world-writable "
                          f"directory and belongs to uid {lst.st_uid}, neither you nor the "
                          "directory's owner: not followed (the kernel's protected-symlink rule)")


def follow(path) -> str:
    """The path that writing `path` writes: the symlinks at its end followed, each only where
    the protected-symlink rule allows (OutputError, code 2, otherwise)."""
    named = cur = os.fspath(path)
    for _ in range(MAX_LINKS + 1):
        try:
            lst = os.lstat(cur)
        except FileNotFoundError:
            return cur
        except OSError as e:
            raise OutputError(f"{named}: cannot write: {e.strerror}",
                              2 if e.errno in PATH_ERRNOS else 3) from None
        if not stat.S_ISLNK(lst.st_mode):
            return cur
        _check_link(cur, lst, named)
        cur = os.path.join(os.path.dirname(cur), os.readlink(cur))
    raise OutputError(f"{named}: cannot write: more than {MAX_LINKS} symbolic links")


def make_dir(path) -> str:
    """Create the output folder `path` (and its parents) if needed, following a symlink there
    under the same rule; returns the folder written into. OutputError if it is not a folder."""
    target = follow(path)
    try:
        os.makedirs(target, exist_ok=True)
    except FileExistsError:
        raise OutputError(f"{os.fspath(path)}: exists and is not a folder") from None
    except OSError as e:
        raise OutputError(f"{os.fspath(path)}: cannot create the folder: {e.strerror}",
                          2 if e.errno in PATH_ERRNOS else 3) from None
    return target


def write_bytes(path, data: bytes) -> str:
    """Write `data` as the file `path` (see the module's comment); returns the path written.
    Raises OutputError with the CLI's exit code."""
    named = os.fspath(path)
    target = follow(named)
    umask = os.umask(0o22)
    os.umask(umask)
    mode = 0o666 & ~umask  # a new file: what open() would give it
    try:
        st = os.stat(target)
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(f"{named}: exists and is not a regular file")
        mode = st.st_mode & 0o7777  # an existing file keeps its mode
    except FileNotFoundError:
        pass
    except OSError as e:
        if isinstance(e, OutputError):
            raise
        raise OutputError(f"{named}: cannot write: {e.strerror}",
                          2 if e.errno in PATH_ERRNOS else 3) from None
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(target) + ".tmp.",
                                   dir=os.path.dirname(target) or ".")
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        tmp = None
    except OSError as e:
        raise OutputError(f"{named}: cannot write: {e.strerror}",
                          2 if e.errno in PATH_ERRNOS else 3) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return target


def write_text(path, text: str) -> str:
    """write_bytes of `text` in UTF-8."""
    return write_bytes(path, text.encode("utf-8"))
