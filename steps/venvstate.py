"""What is already in a venv, read from its files (nothing is executed)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

from steps.rootfs import RootFS


@dataclass(frozen=True)
class VenvState:
    path: str
    python_version: str | None  # "3.12.3" from pyvenv.cfg
    packages: dict[str, str] = field(default_factory=dict)  # canonical name -> version
    torch_cuda: str | None = None  # "13.0", from torch/version.py; None for CPU builds

    def version_of(self, name: str) -> str | None:
        return self.packages.get(canonicalize_name(name))


_CFG_VERSION = re.compile(r"^(?:version|version_info)\s*=\s*(\d+\.\d+(?:\.\d+)?)", re.M)
_TORCH_CUDA = re.compile(r"^cuda(?:: Optional\[str\])?\s*=\s*'([\d.]+)'", re.M)


def probe_venv(fs: RootFS, path: str) -> VenvState | None:
    """The venv at `path` (a path on the target machine), or None if there is none."""
    cfg = fs.read_text(f"{path}/pyvenv.cfg")
    if cfg is None:
        return None
    m = _CFG_VERSION.search(cfg)
    packages: dict[str, str] = {}
    torch_cuda = None
    for site in fs.glob(f"{path}/lib/python3*/site-packages"):
        for dist in Path(site).glob("*.dist-info"):
            name, _, version = dist.name[: -len(".dist-info")].partition("-")
            packages[canonicalize_name(name)] = version
        torch_version = Path(site) / "torch" / "version.py"
        if torch_version.exists():
            cm = _TORCH_CUDA.search(torch_version.read_text(errors="replace"))
            torch_cuda = cm.group(1) if cm else None
    return VenvState(
        path=path,
        python_version=m.group(1) if m else None,
        packages=packages,
        torch_cuda=torch_cuda,
    )
