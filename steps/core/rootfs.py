"""Paths on the target machine, resolved under a root prefix.

The probe and the engine see the machine only through this, so tests point
them at a temporary directory laid out like a server.
"""

from __future__ import annotations

import glob as _glob
import os
from dataclasses import dataclass
from pathlib import Path

OWN_DIRS = ("/var/lib/mlsetup", "/var/log/mlsetup", "/var/cache/mlsetup")


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

    def localize(self, value: str) -> str:
        """`value` as a local path if it is under one of mlsetup's own directories (which always
        live under the root), else unchanged: commands see where mlsetup really keeps things."""
        for prefix in OWN_DIRS:
            if value == prefix or value.startswith(prefix + "/"):
                return str(self.path(value))
        return value

    @property
    def is_host(self) -> bool:
        return self.root == Path("/")
