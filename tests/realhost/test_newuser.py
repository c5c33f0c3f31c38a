"""A new user's first hour on a real Debian 12 (a booted container, its own Python 3.11, no
pip, no curl), driven over SSH as that user would: a sudo account clones the project, runs the
README's `./install.sh && mlsetup plan`, and the checkout is then as it was; `pip install .` in
a venv and `uv tool install .` work after it; `mlsetup plan` gives the same plan with and
without sudo; a closed stdout is quiet on the system's Python; and a toolkit install on a box
without curl gets past the keyring's download. Each command the user ran is printed at the
end with its exit code and seconds (the real-host line of the summary: the new-user table).
"""

from __future__ import annotations

import functools
import http.server
import json
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.common import REPO
from tests.harness import FakeServer
from tests.pkgindex import PackageIndex, standard_index
from tests.realhost.container import Container
from tests.realhost.hosts import TIMINGS, container_env, container_server

# Its own worker under xdist: these containers share nothing with the other real-host tests.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("realhost-newuser")]
USER = "ops"
CHECKOUT = f"/home/{USER}/mlsetup"


def source_repository(directory: Path) -> Path:
    """A bare repository of this checkout as it is now (what `git ls-files` and the untracked
    files git does not ignore hold), one commit: what the new user clones."""
    work = directory / "work"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        if (REPO / name).is_file():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, work / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(work)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "the checkout under test"], check=True)
    bare = directory / "mlsetup.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    shutil.rmtree(work)
    return bare


class NewUser:
    """The sudo account `ops` in the container: each command runs in its login shell, as a
    person's SSH session would (no environment of this test's)."""

    def __init__(self, host: Container) -> None:
        self.host = host

    def run(
        self, command: str, timeout: float = 600, record: bool = True
    ) -> subprocess.CompletedProcess:
        t0 = time.monotonic()
        done = self.host.ssh(f"su - {USER} -c {shlex.quote(command)}", timeout=timeout, check=False)
        if record:  # the summary's real-host line: "ops$ COMMAND (exit N) S.Ss"
            TIMINGS[f"{USER}$ {command} (exit {done.returncode})"] = time.monotonic() - t0
        return done

    def ok(self, command: str, timeout: float = 600, record: bool = True) -> str:
        """Its stdout; a failure shows both streams."""
        done = self.run(command, timeout, record)
        assert done.returncode == 0, (
            f"{command}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
        return done.stdout


@pytest.fixture(scope="module")
def host(boot) -> Container:
    """A fresh container with git (from its apt archive) and a sudo account, as the issue's
    Debian 12 was: no pip, no curl."""
    t0 = time.monotonic()
    container = boot("newuser")
    container.ssh(
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends git "
        ">/dev/null && echo '127.0.1.1 newuser' >> /etc/hosts && "  # sudo resolves its name
        f"useradd -m -s /bin/bash {USER} && "
        f"echo '{USER} ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/{USER} && "
        f"su - {USER} -c 'git config --global --add safe.directory \"*\"'",
        timeout=300,
    )
    assert container.ssh("command -v curl pip pip3", check=False).stdout == ""  # a bare box
    TIMINGS["new-user box"] = time.monotonic() - t0
    return container


@pytest.fixture(scope="module")
def user(host: Container, realhost_base: Path) -> NewUser:
    """The account, with the project cloned and `./install.sh && mlsetup plan` run."""
    bare = source_repository(realhost_base / "shared" / "newuser-src")
    ops = NewUser(host)
    ops.ok(f"git clone -q {bare} {CHECKOUT}")
    ops.ok(f"cd {CHECKOUT} && ./install.sh && mlsetup plan", timeout=900)
    return ops


@pytest.fixture(scope="module")
def index(realhost_base: Path) -> Iterator[str]:
    """tests/pkgindex.py's index served over HTTP on 127.0.0.1 (the containers share the
    host's network): the URL its PyTorch builds are under, {build} for the build."""
    packages: PackageIndex = standard_index(realhost_base / "shared" / "newuser-index")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(packages.root))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_install_then_plan_leave_the_checkout_as_it_was_and_every_other_install_works(
    user: NewUser,
):
    status = user.ok(f"cd {CHECKOUT} && git status --porcelain --ignored")
    assert status == "", f"install.sh or mlsetup plan left in the checkout:\n{status}"
    # the README's second command works after the first, and so do the other ways to install.
    # pip builds from the checkout, where the root-owned build/ and mlsetup.egg-info/ of an
    # in-place build stopped it: --no-deps (the dependencies are uv tool's to fetch below;
    # fetching them again from PyPI took a minute here)
    user.ok(
        f"cd {CHECKOUT} && python3 -m venv ~/venv && ~/venv/bin/pip install --quiet "
        "--disable-pip-version-check --no-deps . && ~/venv/bin/pip show --quiet mlsetup",
        timeout=900,
    )
    user.ok(
        f"cd {CHECKOUT} && SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt "
        "/opt/mlsetup/bin/uv tool install --quiet . && ~/.local/bin/mlsetup --version",
        timeout=900,
    )


def test_a_closed_stdout_is_quiet_on_the_systems_python(user: NewUser):
    """Debian 12's own Python 3.11, which install.sh's venv runs on; a login shell has no
    PYTHONUNBUFFERED, so --help waits in stdout's buffer for the interpreter's exit."""
    done = user.run("/opt/mlsetup/bin/python --version && (sleep 1; mlsetup --help) | true")
    assert done.returncode == 0 and done.stdout.startswith("Python 3.11."), done.stdout
    assert done.stderr == "", done.stderr


def test_the_plan_is_the_same_as_the_user_and_under_sudo(user: NewUser, index: str):
    """The user's uv resolves with the user's HOME (its cache, its Pythons) and root's with
    root's: the same answers resolve to the same lock either way."""
    answers = (
        f'version = 1\n[torch]\nindex_url = "{index}/{{build}}"\npackages = []\n'
        '[reboot]\npolicy = "never"\n'
    )
    user.ok(f"printf '%s' {shlex.quote(answers)} > ~/answers.toml", record=False)
    env = f"UV_DEFAULT_INDEX={index}/pypi"
    as_user = json.loads(user.ok(f"{env} mlsetup plan --answers ~/answers.toml --json"))
    under_sudo = json.loads(user.ok(f"sudo {env} mlsetup plan --answers ~/answers.toml --json"))
    assert as_user["lock"] is not None, as_user["warnings"]  # resolved, not from knowledge
    assert as_user["lock"]["torch"] == "2.11.0+cpu"
    assert as_user == under_sudo


def test_a_toolkit_install_without_curl_gets_past_its_download(
    host: Container, user: NewUser, realhost_base: Path, uv_binary: Path
):
    """A box whose driver is fine: the toolkit step sets NVIDIA's repo up alone. The fake
    server's apt-get and dpkg (tests/harness.py), but no curl anywhere on PATH, as on this
    Debian 12: the step installs it first (the stand-in apt-get puts one on PATH, as apt
    does), then downloads the keyring. mlsetup is the one the new user's install.sh put in
    /opt/mlsetup."""
    fake: FakeServer = container_server(realhost_base / "shared" / "no-curl", uv_binary)
    (fake.bin / "curl").unlink()
    fake.machine.driver_loaded("580.105.08")
    fake.script({"apt-get cuda-toolkit-13-0": {"exit": 100, "output": "E: stop here"}})
    command = shlex.join(
        ["mlsetup", "apply", "--answers", str(fake.answers), "--root", str(fake.root)]
    )
    done = host.ssh(command, check=False, env=container_env(fake), timeout=600)
    assert "command not found" not in done.stdout + done.stderr, done.stdout[-3000:]
    report = fake.report()
    assert report["failure"]["action"] == "toolkit.install-13.0", report["failure"]
    assert "nvidia-repo.tools" in report["ran"] and "nvidia-repo.keyring-download" in report["ran"]
    assert ["apt-get", "curl"] in [[c["cmd"], c["args"][-1]] for c in fake.calls()]
