from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from uv import find_uv_bin

from tests.fakemachine import FakeMachine
from tests.harness import FakeServer


@pytest.fixture
def machine(tmp_path: Path) -> FakeMachine:
    return FakeMachine(tmp_path / "root")


@pytest.fixture(scope="session")
def uv_binary() -> Path:
    return Path(find_uv_bin())


@pytest.fixture
def server(uv_binary: Path):
    """A fake server under a world-traversable temporary directory (the venv's owner,
    uid 1000, must reach its home; pytest's own tmp_path is root-only)."""

    if os.geteuid() != 0:
        pytest.skip("the engine tests run commands as another account: they need root")
    base = Path(tempfile.mkdtemp(prefix="mlsetup-server-", dir="/tmp"))
    try:
        yield FakeServer(base, uv_binary)
    finally:
        shutil.rmtree(base, ignore_errors=True)
