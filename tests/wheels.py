"""Tiny real wheels for tests: a stand-in `torch` with the local version tag of a CUDA build.

The engine's venv step installs torch with uv from the index the answers name; tests point
that index at a directory holding one of these, so no test downloads gigabytes.
"""

from __future__ import annotations

import base64
import hashlib
import sys
import zipfile
from pathlib import Path

from steps.knowledge import knowledge


def _auto_torch() -> str:
    """The torch release `torch.version = "auto"` plans for a venv of this Python (the harness's
    answers use it): the stand-in carries that version, so resolution is what a server gets."""
    python = "{}.{}".format(*sys.version_info[:2])
    return next(f"{r.series}.0" for r in knowledge().torch.releases if python in r.pythons)


STANDIN_TORCH = _auto_torch()  # e.g. "2.15.0"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(directory: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A pure-Python wheel `name-version-py3-none-any.whl` holding `files`."""
    dist = f"{name}-{version}"
    info = f"{name}-{version}.dist-info"
    contents = {
        **{path: text.encode() for path, text in files.items()},
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: mlsetup-tests\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = [_record_line(path, data) for path, data in contents.items()]
    record.append(f"{info}/RECORD,,")
    contents[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for member, data in contents.items():
            zf.writestr(member, data)
    return path


def torch_index(
    root: Path, version: str = STANDIN_TORCH, build: str = "cu130", cuda: str | None = "13.0"
) -> Path:
    """A local package index (uv --index-url DIR) with a stand-in torch of that build."""
    wheel = build_wheel(
        root / "torch",
        "torch",
        f"{version}+{build}",
        {
            # FAKE: the stack smoke test (assets/smoke_stack.py) says it is a stand-in
            "torch/__init__.py": f"__version__ = '{version}+{build}'\nFAKE = True\n",
            "torch/version.py": f"__version__ = '{version}+{build}'\ncuda = {cuda!r}\n",
        },
    )
    href = wheel.name.replace("+", "%2B")
    (root / "torch" / "index.html").write_text(f'<a href="{href}">{wheel.name}</a>\n')
    (root / "index.html").write_text('<a href="torch/">torch</a>\n')
    return root
