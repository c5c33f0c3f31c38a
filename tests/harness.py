"""A fake server for engine tests: a machine root, stand-in system commands first on PATH,
a real uv, a local torch index, and `mlsetup` run as a separate process, as root runs it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from steps.apply.engine import ApplyLock
from steps.formats.events import ActionStarted, Event, event_from_json
from steps.known.knowledge import knowledge
from steps.run.runner import passthrough_environment
from tests.common import FIXTURES, REPO, copy_fixture
from tests.fakemachine import FakeMachine
from tests.wheels import torch_index

STANDINS = (
    "apt-get",
    "dpkg",
    "curl",
    "install",
    "update-initramfs",
    "nvidia-smi",
    "modprobe",
    "mokutil",
    "systemctl",
    "reboot",
    "nvcc",
    "systemd-run",
    "journalctl",
)
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
USER_UID = 1000

# What the driver step of a fresh Ubuntu 24.04 box with an H200 and nouveau loaded runs, as the
# stand-ins record it (`FakeServer.commands()`).
DRIVER_STEP = [
    "apt-get update",
    "apt-get curl",
    "apt-get linux-headers-6.8.0-49-generic",
    "curl https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/"
    "cuda-keyring_1.1-1_all.deb",
    "dpkg /var/cache/mlsetup/cuda-keyring_1.1-1_all.deb",
    "apt-get update",
    "install /etc/modprobe.d/mlsetup-blacklist-nouveau.conf",
    "update-initramfs -u",
    "apt-get nvidia-driver-pinning-580",
    "apt-get nvidia-open",
]

PIP_CONF = "[global]\nindex-url = https://pypi.org/simple\n"
ANSWERS = """version = 1
[venv]
path = "{venv}"
python = "{python}"
[torch]
index_url = "{index}"
[[extensions]]
name = "{extension}"
version = "0.1.0"
[reboot]
policy = "{policy}"
"""


class Measured(NamedTuple):
    code: int
    wall_s: float
    rss_kib: int
    stdout: str
    stderr: str


class FakeServer:
    def __init__(self, base: Path, uv: Path) -> None:
        base.chmod(0o755)  # the venv's owner must reach its home and the tools under here
        self.base = base
        self.root = base / "root"
        self.machine = FakeMachine(self.root)
        self.machine.gpu("0000:00:06.0", "0x2335")  # an H200, no driver yet
        self.machine.load_module("nouveau")
        self.home = base / "home" / "mluser"
        self.machine.user("mluser", USER_UID, self.home)
        self.state = base / "standin-state"
        self.state.mkdir()
        self.bin = base / "bin"
        self._install_standins()
        self.tools = base / "tools"
        self.tools.mkdir()
        shutil.copy2(uv, self.tools / "uv")
        self.index = torch_index(base / "index")
        # The answers' torch index is a directory holding only torch: pip and the build
        # requirements come from this server's default index, PyPI in its pip.conf (mlsetup
        # adds no index of its own beside torch's). A test of its own indexes replaces it.
        self.pip_conf = self.root / "etc/pip.conf"
        self.pip_conf.write_text(PIP_CONF)
        self.recipes = base / "recipes"
        self._install_recipe()
        self.answers = base / "answers.toml"
        self.write_answers()

    def _install_standins(self) -> None:
        self.bin.mkdir()
        script = self.bin / "standin.py"
        script.write_text(f"#!{sys.executable}\n" + (REPO / "tests" / "standin.py").read_text())
        script.chmod(0o755)
        # the stand-in packages of the GPU daemons are assets/daemons.toml's rows
        daemons = [
            {
                "package": row.package,
                "driver_versioned": row.driver_versioned,
                "unit": row.unit,
                "executable": row.executable,
            }
            for row in knowledge().daemons.daemon.values()
        ]
        (self.bin / "standin.json").write_text(
            json.dumps({"root": str(self.root), "state": str(self.state), "daemons": daemons})
        )
        for name in STANDINS:
            (self.bin / name).symlink_to("standin.py")

    def _install_recipe(self) -> None:
        """Test extensions (tests/fixtures/<name>/ with <name>.toml), their sources owned by
        the venv's account, as an operator's own would be."""
        self.recipes.mkdir()
        for name in ("tinyext", "flakyext"):
            src = self.base / "src" / name
            copy_fixture(name, src, USER_UID)
            os.chown(src.parent, USER_UID, USER_UID)
            recipe = (FIXTURES / f"{name}.toml").read_text().replace("@SOURCE@", str(src))
            (self.recipes / f"{name}.toml").write_text(recipe)

    def stop_daemons(self) -> None:
        """Ends the stand-in daemons its systemctl started (each linked in the fake root's
        /proc to its real entry, the executable's name its argv[0]): they are not children of
        the test, and would outlive it."""
        names = {row.executable for row in knowledge().daemons.daemon.values()}
        for link in self.root.glob("proc/[0-9]*"):
            if not link.is_symlink():
                continue
            try:
                argv0 = (Path("/proc") / link.name / "cmdline").read_bytes().split(b"\0", 1)[0]
            except OSError:
                continue  # gone already
            if argv0.decode(errors="replace") in names:
                os.kill(int(link.name), signal.SIGKILL)

    def write_answers(
        self,
        policy: str = "ask",
        extra: str = "",
        extension: str = "tinyext",
        venv: str = "~/ml-env",
    ) -> None:
        python = "{}.{}".format(*sys.version_info[:2])
        self.answers.write_text(
            ANSWERS.format(
                python=python, index=self.index, policy=policy, extension=extension, venv=venv
            )
            + extra
        )

    def env(self, **extra: str) -> dict[str, str]:
        # this machine's proxy and certificate settings, as an operator's server would have
        return {
            **passthrough_environment(os.environ),
            "PATH": f"{self.bin}:{self.tools}:{SYSTEM_PATH}",
            "HOME": "/root",
            "SUDO_USER": "mluser",
            "MLSETUP_EXTENSIONS_DIR": str(self.recipes),
            "MLSETUP_DPKG_LOCK_TIMEOUT": "20",
            "PYTHONPATH": str(REPO),
            "UV_OFFLINE": "0",  # pip and the build requirements come from PyPI (PIP_CONF)
            **extra,
        }

    def mlsetup(self, *args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "app.cli", *args, "--root", str(self.root)],
            capture_output=True,
            text=True,
            env=self.env(**env),
            cwd=REPO,
            timeout=timeout,
        )

    def measured(self, *args: str, timeout: float = 60) -> Measured:
        """`mlsetup ARGS` with its wall time and the peak RSS of its own process."""
        out, err = self.base / "measured.out", self.base / "measured.err"
        with out.open("w") as stdout, err.open("w") as stderr:
            proc = subprocess.Popen(
                [sys.executable, "-m", "app.cli", *args, "--root", str(self.root)],
                stdout=stdout,
                stderr=stderr,
                env=self.env(),
                cwd=REPO,
            )
        start = time.monotonic()
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - start > timeout:
                proc.kill()
                os.wait4(proc.pid, 0)
                raise TimeoutError(f"mlsetup {' '.join(args)} still running after {timeout}s")
            time.sleep(0.01)
        return Measured(
            os.waitstatus_to_exitcode(status),
            time.monotonic() - start,
            usage.ru_maxrss,
            out.read_text(),
            err.read_text(),
        )

    def popen(self, *args: str, **env: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "app.cli", *args, "--root", str(self.root)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self.env(**env),
            cwd=REPO,
            start_new_session=True,
        )

    def script(self, behaviour: dict) -> None:
        """Scripted stand-in behaviour: {"apt-get cuda-toolkit-13-0": {"exit": 100, ...}}."""
        (self.state / "script.json").write_text(json.dumps(behaviour))

    def set_machine(self, **values: object) -> None:
        path = self.state / "machine.json"
        data = json.loads(path.read_text()) if path.exists() else {}
        data.update(values)
        path.write_text(json.dumps(data))

    def reboot(self) -> None:
        subprocess.run([str(self.bin / "reboot")], check=True, env=self.env())

    def calls(self, kind: str = "start") -> list[dict]:
        path = self.state / "calls.jsonl"
        if not path.exists():
            return []
        calls = [json.loads(line) for line in path.read_text().splitlines()]
        return [c for c in calls if c["kind"] == kind]

    def commands(self) -> list[str]:
        """Each stand-in call as `cmd last-arg` (a path as the target machine names it)."""
        return [
            f"{c['cmd']} {c['args'][-1].removeprefix(str(self.root)) if c['args'] else ''}".strip()
            for c in self.calls()
        ]

    def events(self) -> list[Event]:
        path = self.root / "var/log/mlsetup/current/events.jsonl"
        return [event_from_json(line) for line in path.read_text().splitlines()]

    def started(self, action: str) -> bool:
        """The engine has started `action` (its event stream says so)."""
        try:
            return any(isinstance(e, ActionStarted) and e.action == action for e in self.events())
        except (FileNotFoundError, ValueError):
            return False

    def apply_lock_free(self) -> bool:
        """No engine holds the apply lock (it releases it as it exits)."""
        return ApplyLock(self.root / "var/lib/mlsetup/apply.lock").holder() is None

    def report(self) -> dict:
        return json.loads((self.root / "var/lib/mlsetup/report.json").read_text())

    def state_file(self) -> dict:
        return json.loads((self.root / "var/lib/mlsetup/state.json").read_text())

    @property
    def venv(self) -> Path:
        return self.home / "ml-env"


EXTENSION_RECIPE = """[{name}]
package = "{package}"
import_name = "{import_name}"
arch_variable = ""
arch_map = {{ "8.0" = "80", "9.0" = "90", "12.0" = "120" }}
threads_variable = "NVCC_THREADS"
threads = 1
force_build_variable = "TEST_FORCE_BUILD"
peak_job_gib = 0.5
build_requires = ["setuptools"]
prebuilt_cuda_majors = []
requirement = "{requirement}"
smoke_test = "import {import_name}; print('{import_name} imported')"
"""


def install_extension(
    server: FakeServer,
    name: str,
    setup_py: str,
    package: str | None = None,
    archive: bool = False,
    owner: int = USER_UID,
) -> Path:
    """A test extension `name` whose setup.py is `setup_py` (its package: `package`, one
    module of the same name with dots as underscores), its recipe in the server's recipe
    directory, and the answers asking for it. Its source is a directory owned by `owner`, or
    with `archive` an sdist-like .tar.gz (unpacked into the build tree at apply). Returns the
    source directory or archive."""
    package = package or name
    module = package.replace(".", "_").replace("-", "_")
    src = server.base / "src" / f"{package}-0.1.0"
    (src / module).mkdir(parents=True)
    (src / module / "__init__.py").write_text("")
    (src / "setup.py").write_text(setup_py)
    requirement: Path = src
    if archive:  # in a directory of the archive's owner, as root's build requires
        archives = server.base / f"archives-of-{owner}"
        archives.mkdir(exist_ok=True)
        os.chown(archives, owner, owner)
        requirement = archives / f"{src.name}.tar.gz"
        with tarfile.open(requirement, "w:gz") as tar:
            tar.add(src, arcname=src.name)
        shutil.rmtree(src)
        os.chown(requirement, owner, owner)
    else:
        for path in [src.parent, src, *src.rglob("*")]:
            os.chown(path, owner, owner)
    (server.recipes / f"{module}.toml").write_text(
        EXTENSION_RECIPE.format(
            name=json.dumps(name), package=package, import_name=module, requirement=requirement
        )
    )
    server.write_answers(extension=name)
    return requirement


def wait_for(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)
