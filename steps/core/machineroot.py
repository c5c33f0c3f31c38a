"""The machine's / as the CLI was told it (--root): where the operator's recipes and index
settings are read from. A leaf of its own, so that the CLI sets it before it knows which
command needs the tables (the wizard draws its first screen without them)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

_root = Path("/")
_forget: list[Callable[[], None]] = []  # what was read under the previous root


def machine_root() -> Path:
    return _root


def use_root(root: Path) -> None:
    """Read what is the machine's under `root` from now on."""
    global _root
    if root != _root:
        _root = root
        for forget in _forget:
            forget()


def forget_on_new_root(forget: Callable[[], None]) -> None:
    """`forget` is called when the root changes: a cache of what was read under the old one."""
    _forget.append(forget)
