"""What is already in a venv, read from its files (nothing is executed)."""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field

from packaging.utils import canonicalize_name

from steps.core.rootfs import RootFS
from steps.core.safefs import read_bounded, walk
from steps.core.sizes import KiB
from steps.decide.cxxstd import HEADER, header_requires
from steps.stack.activate import cuda_home_of

READ_LIMIT = 256 * KiB  # pyvenv.cfg and torch/version.py are well under 4 KiB


@dataclass(frozen=True)
class VenvState:
    path: str
    python_version: str | None  # "3.12.3" from pyvenv.cfg
    packages: dict[str, str] = field(default_factory=dict)  # canonical name -> version
    torch_cuda: str | None = None  # "13.0", from torch/version.py; None for CPU builds
    # the C++ standard its torch's headers require (torch/include/ATen/ATen.h's #error line),
    # None when unknown (no torch, or headers without the line)
    torch_cxx: int | None = None
    cuda_home: str | None = (
        None  # what mlsetup's block in bin/activate exports (steps.stack.activate)
    )

    def version_of(self, name: str) -> str | None:
        return self.packages.get(canonicalize_name(name))


_CFG_VERSION = re.compile(r"^(?:version|version_info)\s*=\s*(\d+\.\d+(?:\.\d+)?)", re.M)
_TORCH_CUDA = re.compile(r"^cuda(?:: Optional\[str\])?\s*=\s*'([\d.]+)'", re.M)


def probe_venv(fs: RootFS, path: str) -> VenvState | None:
    """The venv at `path` (a path on the target machine), or None if there is none.

    The venv belongs to its owner, who may have left anything in it: below the path the
    operator named (which may itself be a link, to a venv on a data disk, say) it is walked
    through descriptors (steps.core.safefs), no link followed, and each file read is bounded, so a
    FIFO, /dev/zero or a huge file gives an unknown value, never a hang."""
    try:
        venv_fd = os.open(fs.path(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        cfg = _read(venv_fd, "pyvenv.cfg")
        if cfg is None and not _exists(venv_fd, "pyvenv.cfg"):
            return None
        m = _CFG_VERSION.search(cfg or "")
        packages: dict[str, str] = {}
        torch_cuda = None
        torch_cxx = None
        for site_fd in _site_packages(venv_fd):
            try:
                for entry in sorted(os.listdir(site_fd)):
                    if entry.endswith(".dist-info"):
                        name, _, version = entry[: -len(".dist-info")].partition("-")
                        packages[canonicalize_name(name)] = version
                torch_version = _read(site_fd, "torch/version.py")
                if torch_version is not None:
                    cm = _TORCH_CUDA.search(torch_version)
                    torch_cuda = cm.group(1) if cm else None
                    torch_cxx = header_requires(_read(site_fd, HEADER) or "")
            finally:
                os.close(site_fd)
        cuda_home = cuda_home_of(_read(venv_fd, "bin/activate"))
    finally:
        os.close(venv_fd)
    return VenvState(
        path=path,
        python_version=m.group(1) if m else None,
        packages=packages,
        torch_cuda=torch_cuda,
        torch_cxx=torch_cxx,
        cuda_home=cuda_home,
    )


def _site_packages(venv_fd: int) -> list[int]:
    """Descriptors of lib/python3*/site-packages, in name order (the caller closes them)."""
    try:
        lib_fd = walk(venv_fd, "lib")
    except OSError:
        return []
    try:
        out = []
        for name in sorted(n for n in os.listdir(lib_fd) if n.startswith("python3")):
            with contextlib.suppress(OSError):
                out.append(walk(lib_fd, f"{name}/site-packages"))
        return out
    finally:
        os.close(lib_fd)


def _read(dir_fd: int, relative: str) -> str | None:
    """The text of `relative` below `dir_fd`, None if missing or unsafe (see probe_venv)."""
    parent, _, name = relative.rpartition("/")
    try:
        fd = walk(dir_fd, parent) if parent else os.dup(dir_fd)
        try:
            return read_bounded(name, READ_LIMIT, dir_fd=fd).decode(errors="replace")
        finally:
            os.close(fd)
    except OSError:
        return None


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.lstat(name, dir_fd=dir_fd)
    except OSError:
        return False
    return True
