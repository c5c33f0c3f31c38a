"""The README's test command for a newcomer on a fresh Debian 12 (a booted container: no
python3-venv, no git, no pip), from a release tarball made with `git archive` (its 0775 and
0664 modes), in either order with `./install.sh && mlsetup plan`: as a sudo account in its home
running the tests first, and as root in /root (0700) installing first.

Inside the container the suite's selection is small (the test extras' install and the static
checks are most of a run's minutes); what is proved is the path a newcomer walks: run.sh from a
box without python3-venv, a half-made .venv made anew, the tarball's modes, a checkout other
accounts cannot reach, and the two commands in both orders. Each command is printed at the end
with its exit code and seconds (the real-host line of the summary).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from tests.realhost.container import Container
from tests.realhost.hosts import TIMINGS
from tests.realhost.test_newuser import source_repository

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("realhost-newcomer")]
USER = "ada"
# run.sh's own tests, the tarball-mode ones, and a test that runs the engine as root against the
# fake server with a fixture it builds (it failed on the tarball's 0775 sources)
SELECTION = (
    "tests/test_answers.py tests/test_installed.py::"
    "test_plan_names_an_installation_other_accounts_could_change "
    "tests/test_engine.py::test_apply_without_root_exits_3 "
    "tests/test_engine.py::test_bad_answers_exit_2_before_anything_runs"
)


def run(host: Container, command: str, user: str | None = None, timeout: float = 1200):
    t0 = time.monotonic()
    wrapped = (
        f"su - {user} -c {shlex.quote(command)}" if user else f"bash -lc {shlex.quote(command)}"
    )
    done = host.ssh(wrapped, timeout=timeout, check=False)
    who = user or "root"
    TIMINGS[f"{who}# {command} (exit {done.returncode})"] = time.monotonic() - t0
    # where a run.sh's minutes went: each static check's and pytest's own figures
    for name, seconds in re.findall(r"^checks\.sh: (\S+) \w+ \(([0-9.]+) s\)$", done.stdout, re.M):
        TIMINGS[f"{who}: checks.sh {name}"] = float(seconds)
    for seconds in re.findall(r"^=* ?\d+ passed.* in ([0-9.]+)s", done.stdout, re.M):
        TIMINGS[f"{who}: pytest"] = float(seconds)
    return done


def out(done: subprocess.CompletedProcess) -> str:
    return f"exit {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"


@pytest.fixture(scope="module")
def tarball(realhost_base: Path) -> Path:
    """The checkout as a release tarball: `git archive` of one commit of it (0775 and 0664)."""
    bare = source_repository(realhost_base / "shared" / "newcomer-src")
    archive = realhost_base / "shared" / "mlsetup.tar.gz"
    subprocess.run(
        [
            "git",
            "-C",
            str(bare),
            "archive",
            "--format=tar.gz",
            "--prefix=mlsetup/",
            "-o",
            str(archive),
            "HEAD",
        ],
        check=True,
    )
    archive.chmod(0o644)
    return archive


@pytest.fixture(scope="module")
def host(boot) -> Container:
    container = boot("newcomer")
    # the image carries python3-venv for the other real-host tests: a fresh server has not
    container.ssh(
        "DEBIAN_FRONTEND=noninteractive apt-get remove -y -q python3-venv 'python3.*-venv' "
        ">/dev/null && echo '127.0.1.1 newcomer' >> /etc/hosts && "
        f"useradd -m -s /bin/bash {USER} && "
        f"echo '{USER} ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/{USER}",
        timeout=300,
    )
    fresh = container.ssh("python3 -c 'import ensurepip' || echo NOVENV", check=False)
    assert "NOVENV" in fresh.stdout, "the image already has python3-venv: not a fresh box"
    return container


def test_a_user_runs_the_tests_first_from_a_tarball_in_their_home(host: Container, tarball):
    run(host, f"tar -C ~ -xzf {tarball}", USER)
    first = run(host, f"cd ~/mlsetup && ./tests/run.sh {SELECTION}", USER)
    # a normal user cannot install python3-venv: the one command that does, nothing half-made
    # that a retry keeps
    assert first.returncode == 1, out(first)
    assert "sudo apt-get install python3-venv" in first.stderr, out(first)
    # the half-made venv an earlier run.sh (or a person's python3 -m venv) left behind
    run(host, "cd ~/mlsetup && python3 -m venv .venv; test -x .venv/bin/python", USER)
    run(host, "sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv", USER)
    tests = run(host, f"cd ~/mlsetup && ./tests/run.sh {SELECTION}", USER)
    assert tests.returncode == 0, out(tests)
    assert "rebuilding .venv (it has no working pip)" in tests.stderr, out(tests)
    assert " passed" in tests.stdout and " failed" not in tests.stdout, out(tests)
    installed = run(host, "cd ~/mlsetup && ./install.sh && mlsetup plan", USER)
    assert installed.returncode == 0, out(installed)
    assert "installation can be changed" not in installed.stderr, out(installed)


def test_root_installs_first_from_a_tarball_in_root(host: Container, tarball):
    run(host, f"mkdir -p /root/src && tar -C /root/src -xzf {tarball}")
    modes = run(host, "stat -c %a /root/src/mlsetup/assets/buildtools/nvcc")
    assert modes.stdout.strip() == "775", out(modes)  # what git archive carries
    installed = run(host, "cd /root/src/mlsetup && ./install.sh && mlsetup plan")
    assert installed.returncode == 0, out(installed)
    # install.sh's copy is root's alone whatever the tarball carried
    assert "installation can be changed" not in installed.stderr, out(installed)
    tests = run(host, f"cd /root/src/mlsetup && ./tests/run.sh {SELECTION}")
    assert tests.returncode == 0, out(tests)
    assert "removing group and other write" in tests.stderr, out(tests)
    assert " passed" in tests.stdout and " failed" not in tests.stdout, out(tests)
