"""Tiny real wheels for tests: a stand-in `torch` with the local version tag of a CUDA build.

The engine's venv step installs torch with uv from the index the answers name; tests point
that index at a directory holding one of these, so no test downloads gigabytes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from steps.known.knowledge import knowledge
from tests.pkgindex import build_wheel


def _auto_torch() -> str:
    """The torch release `torch.version = "auto"` plans for a venv of this Python (the harness's
    answers use it): the stand-in carries that version, so resolution is what a server gets."""
    python = "{}.{}".format(*sys.version_info[:2])
    return next(f"{r.series}.0" for r in knowledge().torch.releases if python in r.pythons)


STANDIN_TORCH = _auto_torch()  # e.g. "2.15.0"


def torch_index(
    root: Path,
    version: str = STANDIN_TORCH,
    build: str = "cu130",
    cuda: str | None = "13.0",
    files: dict[str, str] | None = None,
) -> Path:
    """A local package index (uv --index-url DIR) with a stand-in torch of that build (and
    `files`, such as its torch/include/ATen/ATen.h)."""
    wheel = build_wheel(
        root / "torch",
        "torch",
        f"{version}+{build}",
        {
            # FAKE: the stack smoke test (assets/smoke_stack.py) says it is a stand-in
            "torch/__init__.py": f"__version__ = '{version}+{build}'\nFAKE = True\n",
            "torch/version.py": f"__version__ = '{version}+{build}'\ncuda = {cuda!r}\n",
            **(files or {}),
        },
    )
    href = wheel.name.replace("+", "%2B")
    (root / "torch" / "index.html").write_text(f'<a href="{href}">{wheel.name}</a>\n')
    (root / "index.html").write_text('<a href="torch/">torch</a>\n')
    return root
