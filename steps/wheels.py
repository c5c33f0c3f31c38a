"""Built extension wheels, kept so that nothing is compiled twice.

A wheel is keyed by everything its binary depends on: the extension and its version, the
exact torch (its local tag names the CUDA build), the Python, and the archs compiled; and by
the account that built it, since a venv gets only a wheel that root built (in a tree of
root's) or that its own owner built: what another account compiled is that account's code.
The machine keeps its own in /var/cache/mlsetup/wheels/<key>/; a fleet can share a wheelhouse
directory (answers build.wheelhouse) laid out the same way.

The wheel just built sits in the compiling account's build tree, and a wheelhouse may belong to
the operator: root reads and writes both only through steps.safefs (docs/design.md, "Trust").
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from steps.accounts import lookup_account
from steps.paths import CACHE_DIR
from steps.rootfs import RootFS
from steps.safefs import (
    copy_into,
    open_dir,
    open_regular,
    single_component,
    trusted_dir,
    walk,
)
from steps.units import GiB

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
    fs: RootFS, wheelhouse: str, wanted: Mapping[str, tuple[str, str]], operator: str | None
) -> dict[str, str]:
    """For each key wanted (key -> (package, version)), a directory holding its wheel: the
    machine's cache first, then the fleet's wheelhouse (used only while no account but root
    and `operator` can write it). Paths are on the target machine."""
    trusted = {os.geteuid(), _uid_of(fs, operator)}
    found = {}
    for key, (package, version) in wanted.items():
        if _has_wheel(fs.path(WHEEL_CACHE), {os.geteuid()}, key, package, version):
            found[key] = f"{WHEEL_CACHE}/{key}"
        elif wheelhouse and _has_wheel(Path(wheelhouse), trusted, key, package, version):
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
) -> tuple[list[Path], list[str]]:
    """Copy the wheel just built (in BUILD_ROOT/`tree`/wheels, written by `operator`, None:
    root) into the machine's cache and the wheelhouse. Returns where it went, and what was
    refused and why."""
    builder = _uid_of(fs, operator)
    trusted = {os.geteuid(), builder}
    out: list[Path] = []
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
    sources: Mapping[str, int], base: Path, owners: set[int], key: str, out: list[Path]
) -> None:
    base_fd = trusted_dir(base, owners)
    try:
        key_fd = trusted_dir(key, owners, dir_fd=base_fd)
    finally:
        os.close(base_fd)
    try:
        for name, fd in sources.items():
            os.lseek(fd, 0, os.SEEK_SET)
            copy_into(fd, key_fd, name, limit=WHEEL_LIMIT)  # readers never see half a wheel
            out.append(base / key / name)
    finally:
        os.close(key_fd)


def _has_wheel(base: Path, owners: set[int], key: str, package: str, version: str) -> bool:
    try:
        base_fd = trusted_dir(base, owners, mode=None)
        try:
            key_fd = trusted_dir(key, owners, dir_fd=base_fd, mode=None)
        finally:
            os.close(base_fd)
    except OSError:  # none there, or one that other accounts could have filled
        return False
    try:
        return any(
            _is_wheel_of(name, package, version) and _is_regular(key_fd, name)
            for name in os.listdir(key_fd)
        )
    finally:
        os.close(key_fd)


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
