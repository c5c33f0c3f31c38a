"""Paths and helpers the tests share (conftest.py keeps only fixtures)."""

from __future__ import annotations

import codecs
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MACHINES = REPO / "assets" / "machines"
FIXTURES = REPO / "tests" / "fixtures"


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


NOBODY = 65534


def copy_fixture(name: str, dest: Path, owner: int) -> Path:
    """tests/fixtures/<name> at `dest`, owned by `owner`, without group or other write
    whatever modes the checkout has (a tarball extracted as root keeps git archive's 0775 and
    0664, which mlsetup's trust rules rightly refuse in a source it builds)."""

    import shutil

    shutil.copytree(FIXTURES / name, dest)
    for path in [dest, *dest.rglob("*")]:
        os.chown(path, owner, owner, follow_symlinks=False)
        if not path.is_symlink():
            path.chmod(path.stat().st_mode & 0o7755)
    return dest


def skip_unless_others_reach(path: Path, why: str) -> None:
    """Skip a test whose other account (uid 1000, nobody) must run or read `path` of the
    checkout when a directory above it shuts other accounts out (a checkout in /root, 0700):
    an installed mlsetup lives in /opt/mlsetup, 0755, where they can."""

    import pytest

    for directory in [*reversed(path.parents), path]:
        if directory.is_dir() and not directory.stat().st_mode & 0o001:
            pytest.skip(
                f"{why}: {directory} (mode {directory.stat().st_mode & 0o777:o}) shuts "
                "other accounts out of the checkout; run the suite from a directory "
                "they can reach (e.g. /srv or a home with mode 0755)"
            )


def as_a_user(work: Callable[[], str]) -> str:
    """`work()` in a child process that is not root (root drops to nobody; a user already is
    one), and what it returned."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            if os.geteuid() == 0:
                # This interpreter may live under /root (pyenv), unreadable to nobody: load
                # the codecs the work uses before dropping privileges (an installed mlsetup,
                # /opt/mlsetup, has no such problem).
                for codec in ("ascii", "utf-8", "latin-1"):
                    codecs.lookup(codec)
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            os.write(write, work().encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        text = f.read()
    os.waitpid(pid, 0)
    return text
