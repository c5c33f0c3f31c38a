"""Built extension wheels, kept so that nothing is compiled twice.

A wheel is keyed by everything its binary depends on: the extension and its version, the
exact torch (its local tag names the CUDA build), the Python, and the archs compiled; and by
the account that built it, since a venv gets only a wheel that root built (in a tree of
root's) or that its own owner built: what another account compiled is that account's code.
The machine keeps its own in /var/cache/mlsetup/wheels/<key>/; a fleet can share a wheelhouse
directory (answers build.wheelhouse) laid out the same way.

The wheel just built sits in the compiling account's build tree, and a wheelhouse may belong to
the operator: root reads and writes both only through steps.core.safefs (docs/design.md, "Trust").
Beside each wheel it keeps goes `<wheel>.sha256` (as sha256sum writes it), and the run's report
names each with its hash: a wheel in the wheelhouse whose hash is not the one beside it (a
truncated copy, another build put in its place) is passed over, said why, and built again.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from steps.core.accounts import lookup_account
from steps.core.paths import CACHE_DIR
from steps.core.rootfs import RootFS
from steps.core.safefs import (
    copy_into,
    open_dir,
    open_regular,
    read_bounded,
    single_component,
    trusted_dir,
    walk,
)
from steps.core.sizes import GiB

WHEEL_CACHE = f"{CACHE_DIR}/wheels"
BUILD_ROOT = f"{CACHE_DIR}/build"
WHEEL_LIMIT = 4 * GiB  # flash-attn's wheels are a few hundred MB; nothing kept is larger


def wheel_key(
    package: str, version: str, torch_version: str, python: str, archs: str, builder: str
) -> str:
    """e.g. flash-attn-2.8.3_torch-2.11.0+cu130_py3.12_archs-90_by-alice: `builder` is the
    account that compiled it ("root" for root)."""
    return (
        f"{canonicalize_name(package)}-{version}_torch-{torch_version}_py{python}"
        f"_archs-{archs}_by-{single_component(builder)}"
    )


def build_dir(name: str, version: str) -> str:
    """The persistent build tree of one extension release (a path on the target machine)."""
    return f"{BUILD_ROOT}/{name}-{version}"


def tree_name(name: str, version: str) -> str:
    """The build tree's name in BUILD_ROOT; UnsafeFile unless it is one path component."""
    return single_component(f"{name}-{version}")


def find_wheels(
    fs: RootFS,
    wheelhouse: str,
    wanted: Mapping[str, tuple[str, str]],
    operator: str | None,
    passed_over: list[str] | None = None,
) -> dict[str, str]:
    """For each key wanted (key -> (package, version)), a directory holding its wheel: the
    machine's cache first, then the fleet's wheelhouse (used only while no account but root
    and `operator` can write it, and only a wheel whose sha256 is the one kept beside it).
    Paths are on the target machine. `passed_over`: each wheelhouse wheel not used, and why."""
    trusted = {os.geteuid(), _uid_of(fs, operator)}
    found = {}
    skipped = [] if passed_over is None else passed_over
    for key, (package, version) in wanted.items():
        if _has_wheel(fs.path(WHEEL_CACHE), {os.geteuid()}, key, package, version):
            found[key] = f"{WHEEL_CACHE}/{key}"
        elif wheelhouse and _has_wheel(
            Path(wheelhouse), trusted, key, package, version, hashed=skipped
        ):
            found[key] = f"{wheelhouse}/{key}"
    return found


def publish(
    fs: RootFS,
    tree: str,
    key: str,
    package: str,
    version: str,
    wheelhouse: str,
    operator: str | None,
) -> tuple[dict[Path, str], list[str]]:
    """Copy the wheel just built (in BUILD_ROOT/`tree`/wheels, written by `operator`, None:
    root) into the machine's cache and the wheelhouse, each with its `.sha256` beside it.
    Returns where it went (with its sha256), and what was refused and why."""
    builder = _uid_of(fs, operator)
    trusted = {os.geteuid(), builder}
    out: dict[Path, str] = {}
    refused: list[str] = []
    sources = _open_built(fs, tree, package, version, builder, refused)
    if not sources:
        return out, refused
    places = [(fs.path(WHEEL_CACHE), {os.geteuid()})]
    if wheelhouse:
        places.append((Path(wheelhouse), trusted))
    try:
        for base, owners in places:
            try:
                _copy_all(sources, base, owners, key, out)
            except OSError as exc:
                refused.append(
                    f"did not keep the wheel in {base}: {exc}; root writes only where no account "
                    f"but root and the operator can (e.g. chown root {base}; chmod go-w {base})"
                )
    finally:
        for fd in sources.values():
            os.close(fd)
    return out, refused


def _open_built(
    fs: RootFS, tree: str, package: str, version: str, builder: int, refused: list[str]
) -> dict[str, int]:
    """name -> read descriptor of each of the package's wheels in the build tree: regular files
    of the compiling account, reached without following any link it could have planted."""
    where = f"{BUILD_ROOT}/{tree}/wheels"
    sources: dict[str, int] = {}
    try:
        root_fd = open_dir(fs.path(BUILD_ROOT), owner=os.geteuid())
        try:
            wheels_fd = walk(root_fd, f"{tree}/wheels", owner=builder)
        finally:
            os.close(root_fd)
    except OSError as exc:
        refused.append(f"did not keep the wheel: {where}: {exc}")
        return sources
    try:
        for name in sorted(os.listdir(wheels_fd)):
            if not _is_wheel_of(name, package, version):
                continue
            try:
                sources[name] = open_regular(name, dir_fd=wheels_fd, owner=builder)
            except OSError as exc:
                refused.append(f"did not keep {where}/{name}: {exc.strerror}")
    finally:
        os.close(wheels_fd)
    return sources


def _copy_all(
    sources: Mapping[str, int], base: Path, owners: set[int], key: str, out: dict[Path, str]
) -> None:
    base_fd = trusted_dir(base, owners)
    try:
        key_fd = trusted_dir(key, owners, dir_fd=base_fd)
    finally:
        os.close(base_fd)
    try:
        for name, fd in sources.items():
            digest = sha256_of(fd)
            os.lseek(fd, 0, os.SEEK_SET)
            copy_into(fd, key_fd, name, limit=WHEEL_LIMIT)  # readers never see half a wheel
            with _text_fd(f"{digest}  {name}\n") as text_fd:
                copy_into(text_fd, key_fd, f"{name}{HASH_SUFFIX}", limit=HASH_LIMIT)
            out[base / key / name] = digest
    finally:
        os.close(key_fd)


HASH_SUFFIX = ".sha256"
HASH_LIMIT = 4096


def sha256_of(fd: int) -> str:
    """The sha256 of the open file `fd`, read from its start (bounded by WHEEL_LIMIT)."""
    digest = hashlib.sha256()
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        offset += len(chunk)
        if offset > WHEEL_LIMIT:
            raise OSError(0, f"is larger than {WHEEL_LIMIT} bytes")
        digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def _text_fd(text: str) -> Iterator[int]:
    fd = os.memfd_create("mlsetup-sha256")
    try:
        os.write(fd, text.encode())
        os.lseek(fd, 0, os.SEEK_SET)
        yield fd
    finally:
        os.close(fd)


def _has_wheel(
    base: Path,
    owners: set[int],
    key: str,
    package: str,
    version: str,
    hashed: list[str] | None = None,
) -> bool:
    """Whether `base`/`key` holds a wheel of `package` `version`. `hashed` (the wheelhouse):
    only one whose sha256 is the one beside it counts; each that is not is said there."""
    try:
        base_fd = trusted_dir(base, owners, mode=None)
        try:
            key_fd = trusted_dir(key, owners, dir_fd=base_fd, mode=None)
        finally:
            os.close(base_fd)
    except OSError:  # none there, or one that other accounts could have filled
        return False
    try:
        names = [n for n in os.listdir(key_fd) if _is_wheel_of(n, package, version)]
        if hashed is None:
            return any(_is_regular(key_fd, name) for name in names)
        return any(_as_hashed(key_fd, base / key, name, hashed) for name in names)
    finally:
        os.close(key_fd)


def _as_hashed(key_fd: int, where: Path, name: str, said: list[str]) -> bool:
    """Whether the wheel `name` is whole and the one built: its sha256 is the one its builder
    wrote beside it. If not, why, in `said`."""
    try:
        fd = open_regular(name, dir_fd=key_fd)
    except OSError as exc:
        said.append(f"{where}/{name}: {exc.strerror}: passed over, built from source")
        return False
    try:
        return _check_hash(fd, key_fd, where, name, said)
    finally:
        os.close(fd)


def _check_hash(fd: int, key_fd: int, where: Path, name: str, said: list[str]) -> bool:
    try:
        recorded = read_bounded(f"{name}{HASH_SUFFIX}", HASH_LIMIT, dir_fd=key_fd).decode()
    except (OSError, UnicodeDecodeError):
        said.append(
            f"{where}/{name}: no {name}{HASH_SUFFIX} beside it (its builder records the wheel's "
            "sha256 there): passed over, built from source"
        )
        return False
    expected = recorded.split()[0] if recorded.split() else ""
    try:
        actual = sha256_of(fd)
    except OSError as exc:
        said.append(f"{where}/{name}: {exc.strerror}: passed over, built from source")
        return False
    if actual == expected:
        return True
    said.append(
        f"{where}/{name}: sha256 {actual}, not the {expected or '(none)'} its builder recorded "
        "(a damaged or replaced wheel): passed over, built from source"
    )
    return False


def _is_regular(dir_fd: int, name: str) -> bool:
    """A regular file, not a link to one (what the link names is not the wheel it claims)."""
    try:
        os.close(open_regular(name, dir_fd=dir_fd))
    except OSError:
        return False
    return True


def _is_wheel_of(name: str, package: str, version: str) -> bool:
    if not name.endswith(".whl"):
        return False
    with contextlib.suppress(InvalidWheelFilename):
        wheel_name, wheel_version, _, _ = parse_wheel_filename(name)
        return wheel_name == canonicalize_name(package) and str(wheel_version) == version
    return False


def _uid_of(fs: RootFS, operator: str | None) -> int:
    """The operator's uid (the account that owns the venv and compiles); root's for None."""
    account = lookup_account(fs, operator) if operator else None
    return account.uid if account else os.geteuid()
