from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from uv import find_uv_bin

from tests.fakemachine import FakeMachine
from tests.harness import USER_UID, FakeServer
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
    server = None
    try:
        server = FakeServer(base, uv_binary)
        yield server
    finally:
        if server is not None:
            server.stop_daemons()  # started by its systemctl, not children of the test
        shutil.rmtree(base, ignore_errors=True)


# The real-host fixture's timings (tests/realhost), printed once at the end; here and not in
# tests/realhost/conftest.py because under xdist the controller loads only this conftest.
def pytest_sessionfinish(session: pytest.Session) -> None:
    # an xdist worker: hand the fixture's timings to the controller, which prints the summary
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        if TIMINGS:
            workeroutput["realhost_timings"] = dict(TIMINGS)
        return
    remove_what_the_run_left_in_tmp()


# What the venv owner's processes (uid 1000, which run without the fixtures' TMPDIR) leave in
# /tmp: uv's build locks (mode 0666), pip's build trackers, mlsetup's resolve sandboxes of a
# process a test killed. The controller removes those that were not there when the session
# started, once every worker has finished (a worker's own finish would pull them from under the
# others), and only those idle for a minute (another run beside this one may be using its own).
LEFT_IN_TMP = ("uv-setuptools-*.lock", "pip-build-tracker-*", "mlsetup-resolve-*")


def _left_in_tmp() -> set[Path]:
    tmp = Path(tempfile.gettempdir())
    return {path for pattern in LEFT_IN_TMP for path in tmp.glob(pattern)}


THERE_AT_START = _left_in_tmp()


def remove_what_the_run_left_in_tmp() -> None:
    for path in _left_in_tmp() - THERE_AT_START:
        with contextlib.suppress(OSError):
            st = path.lstat()
            if st.st_uid != USER_UID or time.time() - st.st_mtime < 60:
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink()


@pytest.hookimpl(optionalhook=True)  # an xdist hook
def pytest_testnodedown(node, error) -> None:  # type: ignore[no-untyped-def]
    TIMINGS.update(getattr(node, "workeroutput", {}).get("realhost_timings", {}))


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    if TIMINGS:
        parts = ", ".join(f"{k} {v:.1f}s" for k, v in TIMINGS.items())
        terminalreporter.write_line(f"real-host fixture: {parts} (image cache: {CACHE})")
