"""Paths on the target machine, resolved under a root prefix.

The probe and the engine see the machine only through this, so tests point
them at a temporary directory laid out like a server.
"""

from __future__ import annotations

import glob as _glob
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RootFS:
    root: Path = Path("/")

    def path(self, target: str) -> Path:
        """The local path of `target`, an absolute path on the target machine."""
        return self.root / target.lstrip("/")

    def target(self, local: str | Path) -> str:
        """The inverse of `path`: where a local path lives on the target machine."""
        rel = os.path.relpath(local, self.root)
        return "/" + ("" if rel == "." else rel)

    def read_text(self, target: str) -> str | None:
        try:
            return self.path(target).read_text(errors="replace")
        except OSError:
            return None

    def exists(self, target: str) -> bool:
        return self.path(target).exists()

    def glob(self, pattern: str) -> list[str]:
        """Local paths matching a target-machine pattern, sorted."""
        return sorted(_glob.glob(str(self.path(pattern))))

    @property
    def is_host(self) -> bool:
        return self.root == Path("/")
