from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakemachine import FakeMachine

REPO = Path(__file__).resolve().parent.parent
MACHINES = REPO / "assets" / "machines"
FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture
def machine(tmp_path: Path) -> FakeMachine:
    return FakeMachine(tmp_path / "root")


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """mlsetup as a user runs it: a separate process, its exit code and its output."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=REPO,
        timeout=120,
    )


@pytest.fixture(scope="session")
def uv_binary() -> Path:
    from uv import find_uv_bin

    return Path(find_uv_bin())


@pytest.fixture
def server(uv_binary: Path):
    """A fake server under a world-traversable temporary directory (the venv's owner,
    uid 1000, must reach its home; pytest's own tmp_path is root-only)."""
    import shutil
    import tempfile

    from tests.harness import FakeServer

    if os.geteuid() != 0:
        pytest.skip("the engine tests run commands as another account: they need root")
    base = Path(tempfile.mkdtemp(prefix="mlsetup-server-", dir="/tmp"))
    try:
        yield FakeServer(base, uv_binary)
    finally:
        shutil.rmtree(base, ignore_errors=True)
