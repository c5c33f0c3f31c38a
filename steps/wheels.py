"""Built extension wheels, kept so that nothing is compiled twice.

A wheel is keyed by everything its binary depends on: the extension and its version, the
exact torch (its local tag names the CUDA build), the Python, and the archs compiled. The
machine keeps its own in /var/cache/mlsetup/wheels/<key>/; a fleet can share a wheelhouse
directory (answers build.wheelhouse) laid out the same way.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

from steps.paths import CACHE_DIR
from steps.rootfs import RootFS

WHEEL_CACHE = f"{CACHE_DIR}/wheels"
BUILD_ROOT = f"{CACHE_DIR}/build"


def wheel_key(package: str, version: str, torch_version: str, python: str, archs: str) -> str:
    """e.g. flash-attn-2.8.3_torch-2.11.0+cu130_py3.12_archs-90"""
    return f"{canonicalize_name(package)}-{version}_torch-{torch_version}_py{python}_archs-{archs}"


def build_dir(name: str, version: str) -> str:
    """The persistent build tree of one extension release (a path on the target machine)."""
    return f"{BUILD_ROOT}/{name}-{version}"


def _has_wheel(directory: Path, package: str, version: str) -> bool:
    for path in directory.glob("*.whl") if directory.is_dir() else []:
        name, wheel_version, _, _ = parse_wheel_filename(path.name)
        if name == canonicalize_name(package) and str(wheel_version) == version:
            return True
    return False


def find_wheels(
    fs: RootFS, wheelhouse: str, wanted: Mapping[str, tuple[str, str]]
) -> dict[str, str]:
    """For each key wanted (key -> (package, version)), a directory holding its wheel: the
    machine's cache first, then the fleet's wheelhouse. Paths are on the target machine."""
    found = {}
    for key, (package, version) in wanted.items():
        cache = f"{WHEEL_CACHE}/{key}"
        if _has_wheel(fs.path(cache), package, version):
            found[key] = cache
        elif wheelhouse and _has_wheel(Path(wheelhouse) / key, package, version):
            found[key] = f"{wheelhouse}/{key}"
    return found


def publish(fs: RootFS, built: Path, key: str, package: str, version: str,
            wheelhouse: str) -> list[Path]:
    """Copy the wheel just built (in `built`, a local directory) into the machine's cache and
    the wheelhouse; returns where it went."""
    wheels = [p for p in built.glob("*.whl")
              if parse_wheel_filename(p.name)[0] == canonicalize_name(package)
              and str(parse_wheel_filename(p.name)[1]) == version]
    out = []
    for target in [fs.path(f"{WHEEL_CACHE}/{key}")] + ([Path(wheelhouse) / key] if wheelhouse
                                                        else []):
        target.mkdir(parents=True, exist_ok=True)
        for wheel in wheels:
            tmp = target / f".{wheel.name}.tmp"
            shutil.copyfile(wheel, tmp)
            tmp.chmod(0o644)
            tmp.replace(target / wheel.name)  # readers never see half a wheel
            out.append(target / wheel.name)
    return out
