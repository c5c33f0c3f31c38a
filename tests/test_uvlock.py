"""uv.lock, the development environment, is the resolution of pyproject.toml as it is now: a
dependency changed without `uv lock` fails here, not on the next developer's `uv sync`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.common import REPO


def test_the_lock_matches_pyproject():
    uv = Path(sys.executable).parent / "uv"  # the uv that mlsetup itself depends on
    done = subprocess.run(
        # --offline: a lock that matches needs nothing from the index; one that does not is
        # refused all the same
        [str(uv), "lock", "--check", "--offline", "--project", str(REPO)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "UV_NO_PROGRESS": "1"},
    )
    assert done.returncode == 0, (
        f"uv.lock does not match pyproject.toml: run `uv lock` and commit uv.lock\n{done.stderr}"
    )
