"""Removing the shared-memory files of crashed engines.

An engine's region file is named for its engine id, which is fresh at
every start, so a file left by a crashed engine (``kill -9``) is never
replaced by a later one.  `reclaim_stale_regions` removes such files: a
region file (``<prefix>*``, its layout header written) that no process
holds is left over, since every process of a live region holds a shared
``flock`` on each backing file for as long as it maps it (the rule the
region's own set-up uses to replace a stale file).

The directory is treated as hostile: entries are opened relative to it
with ``O_NOFOLLOW | O_NONBLOCK`` (a symlink is never followed, a FIFO never
blocks), and only regular files of this user that carry a region header
are considered; a name is removed only while it still names the file that
was found unheld and is held exclusively by this call.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat

__all__ = ["reclaim_stale_regions", "DEFAULT_DIRECTORY", "PREFIX"]

#: Where regions live unless ``kvtier_region_directory`` says otherwise.
DEFAULT_DIRECTORY = "/dev/shm"
#: The first part of every region name the vLLM layer gives.
PREFIX = "vllm_kvtier_"
#: The first bytes of a region's first backing file (its header's magic).
_MAGIC = b"KVTIERRG"
_SEGMENT = re.compile(r"\.seg[1-9][0-9]*\Z")


def _open_unheld(name: str, dir_fd: int) -> int | None:
    """A descriptor on `name`, locked exclusively, if it is a regular file
    of this user that no process holds; else None."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None  # gone, a symlink (ELOOP), unreadable: not ours to judge
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise LookupError
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except (OSError, LookupError):
        os.close(fd)
        return None


def _still_named(fd: int, name: str, dir_fd: int) -> bool:
    """Whether `name` still names the file open on `fd`."""
    try:
        named = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    st = os.fstat(fd)
    return st.st_nlink > 0 and (named.st_dev, named.st_ino) == (st.st_dev, st.st_ino)


def _reclaim_one(name: str, segments: list[str], dir_fd: int) -> bool:
    fds: list[int] = []
    try:
        first = _open_unheld(name, dir_fd)
        if first is None:
            return False
        fds.append(first)
        if os.pread(first, len(_MAGIC), 0) != _MAGIC:
            return False  # no header: not (yet) a region this layer can prove
        for segment in segments:
            fd = _open_unheld(segment, dir_fd)
            if fd is None:
                return False  # held (a live region) or not ours: leave it all
            fds.append(fd)
        if not all(_still_named(fd, n, dir_fd) for fd, n in zip(fds, [name, *segments])):
            return False
        # Later segments first, the first file (the one set-up watches) last.
        for segment in reversed(segments):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(segment, dir_fd=dir_fd)
        os.unlink(name, dir_fd=dir_fd)
        return True
    except OSError:
        return False
    finally:
        for fd in fds:
            os.close(fd)


def reclaim_stale_regions(directory: str | None = None, prefix: str = PREFIX) -> list[str]:
    """Removes the region files under `directory` (default ``/dev/shm``)
    whose names start with `prefix` and that no process holds, with their
    segment files; the names removed (first files only).  Files of live
    regions, of other users, without a region header, and anything that is
    not a regular file are left alone."""
    if not prefix or "/" in prefix:
        raise ValueError(f"prefix: expected a non-empty file name prefix, got {prefix!r}")
    directory = directory or DEFAULT_DIRECTORY
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
            return []
        raise
    removed: list[str] = []
    try:
        names = [n for n in os.listdir(dir_fd) if n.startswith(prefix)]
        firsts = sorted(n for n in names if not _SEGMENT.search(n))
        for name in firsts:
            segments = sorted(
                (n for n in names if n.startswith(name + ".seg") and _SEGMENT.fullmatch(n[len(name) :])),
                key=lambda n: int(n[len(name) + 4 :]),
            )
            if _reclaim_one(name, segments, dir_fd):
                removed.append(name)
    finally:
        os.close(dir_fd)
    return removed
