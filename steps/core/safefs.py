"""File primitives for root working among files that other accounts can write.

mlsetup runs as root, but the venv belongs to the sudo user, the build tree to the compiling
account, and a wheelhouse may be shared (docs/design.md, "Trust"). From root's side those accounts
are untrusted, so every operation here works on descriptors:

- nothing follows a symlink: each component below a directory root holds open is opened with
  `O_NOFOLLOW` relative to its parent's descriptor (`dir_fd=`), never by re-resolving a path
  the other account could swap between a check and a use;
- every open is checked with `fstat` on the descriptor it returns (a regular file, a real
  directory, the expected owner); a FIFO never blocks the open, and reads are bounded;
- root writes only into directories no other account can write (`trusted_dir`), through temp
  files it creates `O_CREAT|O_EXCL|O_NOFOLLOW` and renames within that same directory.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable, Collection
from pathlib import Path

from steps.core.sizes import MiB

# O_NONBLOCK keeps open() of a FIFO from waiting for a writer; it is cleared once fstat has
# shown a regular file, where it means nothing anyway.
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted at a log's name fails the open (no reader) or is seen by fstat,
# instead of blocking the engine.
_APPEND_FLAGS = (
    os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
) | os.O_NOCTTY


class UnsafeFile(OSError):
    """A file root refuses to use: a link, not a regular file, too large, or owned by another."""

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


class Untrusted(UnsafeFile):
    """A file or directory another account could change, so root must not run what it holds.
    `fix`: the command that makes it root's alone."""

    def __init__(self, why: str, path: str | Path, fix: str) -> None:
        super().__init__(0, why, str(path))
        self.fix = fix


def single_component(name: str) -> str:
    """`name` if it names one entry of a directory (no "/", not "." or "..", no NUL)."""
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise UnsafeFile(0, "is not a single file name", name)
    return name


def open_regular(path: str | Path, *, dir_fd: int | None = None, owner: int | None = None) -> int:
    """A read-only descriptor for the regular file at `path`, never through a final symlink.

    `owner`: the uid the file must belong to (None: any). The caller closes the descriptor.
    """
    fd = _open(path, _OPEN_FLAGS, dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(0, f"is not a regular file ({_kind(st.st_mode)})", str(path))
        _check_owner(st, owner, path)
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
        return read_fd(fd, limit, path)
    finally:
        os.close(fd)


def read_fd(fd: int, limit: int, path: str | Path) -> bytes:
    """The rest of the open file `fd`, refused (UnsafeFile, naming `path`) past `limit` bytes
    without reading more than `limit + 1` of them."""
    chunks: list[bytes] = []
    left = limit + 1
    while left > 0:
        chunk = os.read(fd, min(left, MiB))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    data = b"".join(chunks)
    if len(data) > limit:
        raise UnsafeFile(0, f"is larger than {limit} bytes", str(path))
    return data


def open_dir(path: str | Path, *, dir_fd: int | None = None, owner: int | None = None) -> int:
    """A descriptor for the directory at `path`; its last component must not be a symlink.

    `owner`: the uid it must belong to (None: any). The caller closes the descriptor."""
    fd = _open(path, _DIR_FLAGS, dir_fd)
    try:
        _check_owner(os.fstat(fd), owner, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def walk(dir_fd: int, relative: str, *, owner: int | None = None) -> int:
    """The directory `relative` ("a/b/c") below `dir_fd`, opened one component at a time, none
    of them a symlink, each belonging to `owner` if given. The caller closes the descriptor."""
    fd = os.dup(dir_fd)
    try:
        for part in relative.split("/"):
            parent, fd = fd, -1
            try:
                fd = open_dir(single_component(part), dir_fd=parent, owner=owner)
            finally:
                os.close(parent)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise
    return fd


def trusted_dir(
    path: str | Path,
    owners: Collection[int],
    *,
    dir_fd: int | None = None,
    mode: int | None = 0o755,
) -> int:
    """A descriptor for a directory root may write in: created with `mode` if missing (None:
    not created), it must belong to one of `owners` and be writable by no other account (no
    group or other write bit). With `dir_fd`, `path` is one component below it; else a path
    whose parents are created too."""
    if dir_fd is not None:
        path = single_component(str(path))
    if mode is not None and dir_fd is None:
        Path(path).mkdir(parents=True, exist_ok=True, mode=mode)
    elif mode is not None:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, mode, dir_fd=dir_fd)
    fd = open_dir(path, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if st.st_uid not in owners:
            raise UnsafeFile(0, f"belongs to uid {st.st_uid}, not root or the operator", str(path))
        if st.st_mode & 0o022:
            raise UnsafeFile(
                0, f"is writable by other accounts (mode {stat.S_IMODE(st.st_mode):04o})", str(path)
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_trusted_dir(path: str | Path, owners: Collection[int]) -> int:
    """A descriptor for the directory `path` whose files root may act on (recipes it runs): it
    and every directory above it belong to one of `owners` and no other account can write to
    them; above it, a sticky directory such as /tmp is fine (no one else may rename what is in
    it). Untrusted, naming the directory at fault and the fix, otherwise."""
    real = Path(os.path.realpath(path))
    for above in reversed(real.parents):
        _check_trusted(os.stat(above), owners, above, sticky_ok=True)
    return _trusted_or_closed(open_dir(real), owners, real)


def open_trusted_file(name: str, dir_fd: int, owners: Collection[int], shown: Path) -> int:
    """A read descriptor for the regular file `name` in the trusted directory `dir_fd`: never
    through a link, belonging to one of `owners`, writable by no other account (`shown`: its
    path, for the refusal)."""
    return _trusted_or_closed(open_regular(single_component(name), dir_fd=dir_fd), owners, shown)


def _trusted_or_closed(fd: int, owners: Collection[int], shown: Path) -> int:
    """`fd` when what it opened passes the trust check (no sticky exception: it is what root
    acts on), else closed and refused."""
    try:
        _check_trusted(os.fstat(fd), owners, shown, sticky_ok=False)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_trusted_tree(path: Path, owners: Collection[int], limit: int = 200_000) -> None:
    """Everything below the directory `path` belongs to one of `owners` and, links aside, is
    writable by no other account (Untrusted naming the first that is not). Nothing is
    followed; past `limit` entries the tree is refused as well."""
    seen = 0
    for top, dirs, files, top_fd in os.fwalk(path, follow_symlinks=False):
        for name in dirs + files:
            seen += 1
            if seen > limit:
                raise Untrusted(f"holds more than {limit} entries", path, f"ls {path}")
            st = os.lstat(name, dir_fd=top_fd)
            _check_trusted(st, owners, Path(top) / name, sticky_ok=False, fix_all=path)


def _check_trusted(
    st: os.stat_result,
    owners: Collection[int],
    path: Path,
    sticky_ok: bool,
    fix_all: Path | None = None,
) -> None:
    """`sticky_ok`: group or other may write where the sticky bit is set. `fix_all`: the fix is
    for the whole tree there (chown -R, chmod -R). A link's own mode (always 0777) is no one's
    write access: only whose it is counts."""
    recursive, fix_at = ("-R ", fix_all) if fix_all is not None else ("", path)
    if st.st_uid not in owners:
        raise Untrusted(
            f"belongs to uid {st.st_uid}, not root", path, f"sudo chown {recursive}root {fix_at}"
        )
    writable = st.st_mode & 0o022 and not stat.S_ISLNK(st.st_mode)
    if writable and not (sticky_ok and st.st_mode & stat.S_ISVTX):
        mode = stat.S_IMODE(st.st_mode)
        raise Untrusted(
            f"is writable by other accounts (mode {mode:04o})",
            path,
            f"sudo chmod {recursive}go-w {fix_at}",
        )


def make_dir(parent_fd: int, name: str, mode: int, *, uid: int = -1, gid: int = -1) -> int:
    """The directory `name` below `parent_fd` (a directory root owns), created if missing, then
    given `mode` and, through its own descriptor, the owner `uid`:`gid` (-1: unchanged). An
    existing symlink or non-directory there is refused, never followed."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(single_component(name), mode, dir_fd=parent_fd)
    fd = open_dir(name, dir_fd=parent_fd)
    try:
        os.fchmod(fd, mode)
        os.fchown(fd, uid, gid)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_append(path: Path, mode: int = 0o600) -> tuple[int, Path | None]:
    """A descriptor appending to root's own regular file at `path` (a log), created with
    `mode`. Whatever else holds that name (a symlink, a FIFO, a directory, a file of another
    account's or with other hard links) is never followed or written: it is renamed aside,
    and a new file is made in its place. Returns the descriptor and where the refused entry
    went (None: there was none). The directory must be root's own."""
    aside: Path | None = None
    try:
        fd = os.open(path, _APPEND_FLAGS, mode)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EWOULDBLOCK):
            raise
        fd = -1
    if fd >= 0:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_uid == os.geteuid():
            os.set_blocking(fd, True)
            os.fchmod(fd, mode)  # an older file of the same name, made under another umask
            return fd, None
        os.close(fd)
    aside = path.with_name(f"{path.name}.refused-{secrets.token_hex(4)}")
    os.rename(path, aside)  # the name itself, never what a link names
    fd = os.open(path, _CREATE_FLAGS | os.O_APPEND, mode)
    os.fchmod(fd, mode)
    return fd, aside


def copy_into(src_fd: int, dir_fd: int, name: str, *, limit: int, mode: int = 0o644) -> None:
    """Copy the open file `src_fd` (from its current offset) to `name` in the directory
    `dir_fd`: through a fresh temp file created O_EXCL|O_NOFOLLOW there, renamed within that
    same directory, so a reader sees the old file or the whole new one and nothing planted at
    either name is followed. Refused (nothing left behind) past `limit` bytes."""
    single_component(name)

    def copy(out: int) -> None:
        copied = 0
        while sent := os.sendfile(out, src_fd, None, min(64 * MiB, limit + 1 - copied)):
            copied += sent
            if copied > limit:
                raise UnsafeFile(0, f"is larger than {limit} bytes", name)

    _write_beside(dir_fd, name, mode, copy)


def _write_beside(dir_fd: int, name: str, mode: int, fill: Callable[[int], None]) -> None:
    """`name` in `dir_fd` made anew: `fill` writes a temp file created O_EXCL|O_NOFOLLOW beside
    it, which is given `mode`, synced and renamed over the name; removed if anything fails."""
    tmp = f".{name}.{secrets.token_hex(8)}.tmp"
    out = os.open(tmp, _CREATE_FLAGS, 0o600, dir_fd=dir_fd)
    try:
        fill(out)
        os.fchmod(out, mode)
        os.fsync(out)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    finally:
        os.close(out)


MAX_LINKS_FOLLOWED = 40  # as the kernel's own limit on a path's symlinks (ELOOP)


def open_dir_path(path: Path, *, create: bool = False) -> int:
    """A descriptor for the directory at the absolute `path`, walked from / one component at
    a time: a symlink on the way is followed only when it is root's or this account's own (a
    system link such as /var/run); another account's link is refused (UnsafeFile), never
    followed into a directory it points at. `create`: missing directories are made (0755)."""
    trusted = {0, os.geteuid()}
    parts = list(Path(os.path.abspath(path)).parts[1:])
    fd = os.open("/", _DIR_FLAGS)
    followed = 0
    try:
        while parts:
            name = parts.pop(0)
            if name in ("", "."):
                continue
            try:
                if create and name != "..":
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o755, dir_fd=fd)
                below = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                st = os.lstat(name, dir_fd=fd)
                if not stat.S_ISLNK(st.st_mode):
                    raise UnsafeFile(exc.errno, "is not a directory", name) from None
                if st.st_uid not in trusted or followed >= MAX_LINKS_FOLLOWED:
                    raise UnsafeFile(
                        exc.errno, f"is a symbolic link of uid {st.st_uid}: not followed", name
                    ) from None
                followed += 1
                target = os.readlink(name, dir_fd=fd)
                parts[:0] = list(Path(target).parts)
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", _DIR_FLAGS)
                    parts.pop(0)  # the "/" itself
                continue
            os.close(fd)
            fd = below
    except BaseException:
        os.close(fd)
        raise
    return fd


def replace_file(path: Path, data: bytes, mode: int, *, create_parents: bool = False) -> None:
    """Put `data` at `path` as a new file of this account's with `mode`, so that nothing
    planted there is written through: its directory is opened without following another
    account's links (`open_dir_path`), the data goes to a temp file created O_EXCL beside
    it, which is renamed over the name. What is at the name already must be this account's
    own regular file with no other hard link (one with another name elsewhere would be
    truncated, or its other name keep the old data): else UnsafeFile, nothing written."""
    path = Path(os.path.abspath(path))
    name = single_component(path.name)
    dir_fd = open_dir_path(path.parent, create=create_parents)
    try:
        try:
            st = os.lstat(name, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISREG(st.st_mode):
                what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else _kind(st.st_mode)
                raise UnsafeFile(0, f"is {what}: not replaced", str(path))
            if st.st_uid != os.geteuid():
                why = f"is not a file of this account's (uid {st.st_uid}): not replaced"
                raise UnsafeFile(0, why, str(path))
            if st.st_nlink != 1:
                raise UnsafeFile(
                    0,
                    f"has {st.st_nlink} hard links (other names elsewhere): not replaced",
                    str(path),
                )

        def write(out: int) -> None:
            view = memoryview(data)
            while view:
                view = view[os.write(out, view) :]

        _write_beside(dir_fd, name, mode, write)
    finally:
        os.close(dir_fd)


def _open(path: str | Path, flags: int, dir_fd: int | None) -> int:
    try:
        return os.open(path, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last component is a symlink
            raise UnsafeFile(exc.errno, "is a symbolic link", str(path)) from None
        if exc.errno == errno.ENOTDIR and flags & os.O_DIRECTORY:
            # only for the message: the refusal does not depend on what lstat says
            try:
                link = stat.S_ISLNK(os.lstat(path, dir_fd=dir_fd).st_mode)
            except OSError:
                link = False
            why = "is a symbolic link" if link else "is not a directory"
            raise UnsafeFile(exc.errno, why, str(path)) from None
        raise


def _check_owner(st: os.stat_result, owner: int | None, path: str | Path) -> None:
    if owner is not None and st.st_uid != owner:
        raise UnsafeFile(0, f"belongs to uid {st.st_uid}, not {owner}", str(path))


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"
