from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from uv import find_uv_bin

from tests.fakemachine import FakeMachine
from tests.harness import FakeServer
from tests.realhost.container import CACHE
from tests.realhost.hosts import TIMINGS

# No test reaches a package index over the network unless it says so: `mlsetup plan --facts`
# resolves whenever an index answers (real PyPI, from here), so a test that wants a resolution
# gives uv a local index (a directory works offline) or UV_OFFLINE=0 with tests/recorded_pypi.py.
os.environ.setdefault("UV_OFFLINE", "1")


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


# The real-host fixture's timings (tests/realhost), printed once at the end; here and not in
# tests/realhost/conftest.py because under xdist the controller loads only this conftest.
def pytest_sessionfinish(session: pytest.Session) -> None:
    # an xdist worker: hand the fixture's timings to the controller, which prints the summary
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None and TIMINGS:
        workeroutput["realhost_timings"] = dict(TIMINGS)


@pytest.hookimpl(optionalhook=True)  # an xdist hook
def pytest_testnodedown(node, error) -> None:  # type: ignore[no-untyped-def]
    TIMINGS.update(getattr(node, "workeroutput", {}).get("realhost_timings", {}))


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    if TIMINGS:
        parts = ", ".join(f"{k} {v:.1f}s" for k, v in TIMINGS.items())
        terminalreporter.write_line(f"real-host fixture: {parts} (image cache: {CACHE})")
