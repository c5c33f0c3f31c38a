"""File primitives for root working among files that other accounts can write.

mlsetup runs as root, but the venv belongs to the sudo user, the build tree to the compiling
account, and an answers or recipe file may come from anywhere. From root's side those are
untrusted (DESIGN.md, "Trust"): nothing here follows a symlink in the last component, opens a
non-regular file, blocks on a FIFO, or reads without a bound. Every open is checked with
`fstat` on the descriptor it returns, so a path swapped after the check cannot be read instead.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

MiB = 1024 * 1024

# O_NONBLOCK keeps open() of a FIFO from waiting for a writer; it is cleared once fstat has
# shown a regular file, where it means nothing anyway.
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


class UnsafeFile(OSError):
    """A file root refuses to use: a link, not a regular file, too large, or owned by another."""


def open_regular(path: str | Path, *, dir_fd: int | None = None, owner: int | None = None) -> int:
    """A read-only descriptor for the regular file at `path`, never through a final symlink.

    `owner`: the uid the file must belong to (None: any). The caller closes the descriptor.
    """
    try:
        fd = os.open(path, _OPEN_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last component is a symlink
            raise UnsafeFile(exc.errno, "is a symbolic link", str(path)) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(0, f"is not a regular file ({_kind(st.st_mode)})", str(path))
        if owner is not None and st.st_uid != owner:
            raise UnsafeFile(0, f"belongs to uid {st.st_uid}, not {owner}", str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bounded(
    path: str | Path, limit: int, *, dir_fd: int | None = None, owner: int | None = None
) -> bytes:
    """The bytes of the regular file at `path`, refused (UnsafeFile) past `limit` bytes without
    reading more than `limit + 1` of them."""
    fd = open_regular(path, dir_fd=dir_fd, owner=owner)
    try:
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, MiB))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise UnsafeFile(0, f"is larger than {limit} bytes", str(path))
    return data


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return name
    return "not a regular file"
