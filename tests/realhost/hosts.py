"""Helpers for the real-host tests: mlsetup installed in a container, fake servers (the
harness's) laid out for an engine that runs in one, and what an operator's session hands it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.harness import SYSTEM_PATH, FakeServer
from tests.realhost.container import SSH_OPTIONS, Container

# The container's python3 (Debian 12); the engine runs there, so the answers ask for it.
CONTAINER_PYTHON = "/usr/bin/python3"
CONTAINER_PYTHON_VERSION = "3.11"
# Stand-ins the real hosts do not get: there the real systemd runs the units.
REAL_IN_CONTAINER = ("systemctl", "systemd-run", "journalctl")
# What the fixture adds to the suite, printed at its end (conftest.pytest_terminal_summary).
TIMINGS: dict[str, float] = {}


def install_mlsetup(container: Container, wheel: Path) -> None:
    """mlsetup from the wheel into /opt/mlsetup in the container, its dependencies from PyPI
    (pip's cache lives outside the checkout), linked where the resume unit runs it."""
    t0 = time.monotonic()
    container.ssh(
        f"python3 -m venv /opt/mlsetup && /opt/mlsetup/bin/pip install --quiet "
        f"--disable-pip-version-check {wheel} && ln -sfn /opt/mlsetup/bin/mlsetup "
        "/usr/local/bin/mlsetup && cd / && mlsetup --version",
        timeout=600,
    )
    TIMINGS["mlsetup install"] = TIMINGS.get("mlsetup install", 0.0) + time.monotonic() - t0


def clone_mlsetup(source: Container, target: Container) -> None:
    """The mlsetup install_mlsetup made in `source`, copied into `target` (the same image, so
    the same paths and Python): a fleet's worth of installs for the price of one."""
    t0 = time.monotonic()
    shutil.copytree(source.root / "opt/mlsetup", target.root / "opt/mlsetup", symlinks=True)
    (target.root / "usr/local/bin/mlsetup").symlink_to("/opt/mlsetup/bin/mlsetup")
    TIMINGS["mlsetup install"] = TIMINGS.get("mlsetup install", 0.0) + time.monotonic() - t0


def container_server(directory: Path, uv: Path) -> FakeServer:
    """A fake server (tests/harness.py) for an engine in a container: its stand-ins run on the
    container's python3, and systemctl / systemd-run are the container's own."""
    directory.mkdir(parents=True)
    server = FakeServer(directory, uv)
    script = server.bin / "standin.py"
    lines = script.read_text().splitlines(keepends=True)
    script.write_text(f"#!{CONTAINER_PYTHON}\n" + "".join(lines[1:]))
    for name in REAL_IN_CONTAINER:
        (server.bin / name).unlink()
    (server.root / "run/systemd/system").mkdir(parents=True)  # systemd is PID 1 there
    write_answers(server)
    return server


def write_answers(server: FakeServer, **kwargs: str) -> None:
    server.write_answers(**kwargs)
    text = server.answers.read_text()
    version = "{}.{}".format(*sys.version_info[:2])
    server.answers.write_text(
        text.replace(f'python = "{version}"', f'python = "{CONTAINER_PYTHON_VERSION}"')
    )


def container_env(server: FakeServer, **extra: str) -> dict[str, str]:
    """What an operator's sudo session hands mlsetup in the container."""
    return {
        "PATH": f"{server.bin}:{server.tools}:{SYSTEM_PATH}",
        "HOME": "/root",
        "SUDO_USER": "mluser",
        "MLSETUP_EXTENSIONS_DIR": str(server.recipes),
        "MLSETUP_DPKG_LOCK_TIMEOUT": "20",
        "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt",
        **extra,
    }


def ssh_host(container: Container, server: FakeServer) -> dict[str, object]:
    """A container's inventory entry: real SSH to it as root, mlsetup's root its fake server."""
    return {
        "ansible_host": "127.0.0.1",
        "ansible_port": container.port,
        "ansible_user": "root",
        "ansible_ssh_private_key_file": str(container.key),
        "ansible_ssh_common_args": " ".join(SSH_OPTIONS),
        "mlsetup_root": str(server.root),
        "mlsetup_answers": str(server.answers),
        "mlsetup_environment": container_env(server),
        "fake_bin": str(server.bin),
    }


class Playbook:
    """site.yml over `hosts` (inventory entries, all in gpu_servers with `group_vars`), run
    from `base` with an ansible.cfg and an ANSIBLE_HOME of its own."""

    def __init__(self, base: Path, hosts: dict[str, dict], group_vars: dict[str, object]) -> None:
        self.base = base
        self.inventory = base / "inventory.yml"
        inventory = {"gpu_servers": {"hosts": hosts, "vars": group_vars}}
        self.inventory.write_text(json.dumps({"all": {"children": inventory}}, indent=2))
        self.cfg = base / "ansible.cfg"
        self.cfg.write_text(
            f"[defaults]\nforks = {max(5, len(hosts))}\nretry_files_enabled = False\n"
            f"local_tmp = {base}/ansible-local\ninterpreter_python = /usr/bin/python3\n"
            f"log_path = {base}/ansible.log\n"  # each line with its time, for a slow play
            "[ssh_connection]\npipelining = True\n"
        )

    def run(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        from tests.test_ansible import run_playbook  # skips without ansible

        return run_playbook(self.base, self.cfg, self.inventory, *args, timeout=timeout)

    def start(self, output: Path, *args: str) -> subprocess.Popen:
        """The play started, not waited for; its output (stdout and stderr) goes to `output`
        (a pipe nobody reads meanwhile would stop it once full)."""
        from tests.test_ansible import playbook_command  # skips without ansible

        argv, env = playbook_command(self.base, self.cfg, self.inventory, *args)
        with output.open("w") as out:
            return subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, text=True, env=env, cwd=self.base
            )
