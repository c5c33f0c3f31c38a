"""The engine's unit paths on a real systemd: a booted Debian 12 container, mlsetup installed
there from its wheel, the fake machine's stand-ins for apt and the NVIDIA tools (its root is a
fake server, tests/harness.py), but the container's own systemd-run, systemctl and reboot.

Everything is driven over SSH, as an operator does: a dropped connection is the viewer
killed. The fake server's directory is the same path on both sides, so the test reads the
engine's events, report and the stand-ins' calls directly.
"""

from __future__ import annotations

import json
import re
import shlex
import threading
import time
from pathlib import Path

import pytest

from steps.formats.events import RunStarted
from tests.common import REPO
from tests.harness import FakeServer, wait_for
from tests.realhost.container import Container
from tests.realhost.hosts import container_env, container_server, install_mlsetup, write_answers
from tests.realhost.proxy import ConnectProxy

# under xdist (tests/run.sh) on one worker: one image and one set of containers
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("realhost")]
UNIT_RE = re.compile(r"mlsetup-apply-[0-9a-f]{8}\.service")
RESUME_UNIT = "/etc/systemd/system/mlsetup-resume.service"


@pytest.fixture(scope="module")
def host(boot, mlsetup_wheel: Path) -> Container:
    container = boot("engine")
    install_mlsetup(container, mlsetup_wheel)
    return container


@pytest.fixture
def proxy():
    server = ConnectProxy()
    yield server
    server.close()


@pytest.fixture
def fake(realhost_base: Path, uv_binary: Path, request: pytest.FixtureRequest) -> FakeServer:
    return container_server(realhost_base / "shared" / request.node.name, uv_binary)


def mlsetup(fake: FakeServer, *args: str) -> str:
    return shlex.join(["mlsetup", *args, "--root", str(fake.root)])


def pid_where(fake: FakeServer, cmd: str) -> int:
    """The container pid of the running stand-in `cmd` (its own record of itself)."""
    wait_for(lambda: any(c["cmd"] == cmd for c in fake.calls()), timeout=120)
    return next(c["pid"] for c in fake.calls() if c["cmd"] == cmd)


def apply_unit(host: Container, pid: int) -> str:
    """The systemd unit a process of the container runs in (from its cgroup)."""
    cgroup = host.ssh(f"cat /proc/{pid}/cgroup").stdout
    found = UNIT_RE.findall(cgroup)
    assert found, cgroup
    return found[0]


def unit_state(host: Container, unit: str) -> str:
    return host.ssh(f"systemctl show -P ActiveState {unit}", check=False).stdout.strip()


def test_detached_apply_is_a_transient_unit_that_outlives_its_viewer(
    host: Container, fake: FakeServer, proxy: ConnectProxy
):
    fake.script({"apt-get update": {"sleep": 600}})  # the run's first command: sits there
    handed = {"https_proxy": proxy.url, "NO_PROXY": "localhost", "UV_NO_PROGRESS": "1"}
    env = container_env(fake, **handed)
    viewer = host.ssh_popen(mlsetup(fake, "apply", "--answers", str(fake.answers)), env=env)

    standin = pid_where(fake, "apt-get")
    unit = apply_unit(host, standin)
    started = next(e for e in fake.events() if isinstance(e, RunStarted))
    assert unit == f"mlsetup-apply-{started.ticket[:8]}.service"
    assert unit_state(host, unit) == "active"
    # the unit began with systemd's bare environment; the engine took over the operator's
    # (the handover file) and handed it to the command it runs
    unit_env = host.ssh(f"systemctl show -P Environment {unit}").stdout
    assert "https_proxy" not in unit_env and "SUDO_USER" not in unit_env
    environ = host.ssh(f"tr '\\0' '\\n' < /proc/{standin}/environ").stdout.splitlines()
    for key, value in handed.items():
        assert f"{key}={value}" in environ, environ
    # the operator's PATH, less what root does not trust (steps/run/runner.py drops entries another
    # account could change), in its order, the stand-ins first
    [path] = [line.split("=", 1)[1] for line in environ if line.startswith("PATH=")]
    handed_path = env["PATH"].split(":")
    kept = path.split(":")
    assert kept[0] == handed_path[0] and kept == [d for d in handed_path if d in kept], path
    assert not list((fake.root / "var/lib/mlsetup").glob("handover*"))  # taken, and gone

    # the SSH connection drops: the viewer dies, the unit goes on
    viewer.kill()
    viewer.wait()
    time.sleep(1)
    assert unit_state(host, unit) == "active"
    assert host.ssh(f"kill -0 {standin}", check=False).returncode == 0

    # attach replays the run and follows it; the engine is killed under it
    attach = host.ssh_popen(mlsetup(fake, "attach"), env={"PYTHONUNBUFFERED": "1"})
    assert attach.stdout is not None
    watchdog = threading.Timer(120, attach.kill)  # a hung attach fails the test, not the suite
    watchdog.start()
    lines = []
    for line in attach.stdout:
        lines.append(line)
        if "$ " in line and "apt-get update" in line:
            break
    watchdog.cancel()
    assert any("mlsetup starting: run" in line for line in lines), lines
    host.ssh(f"systemctl kill -s KILL {unit}")
    rest, _ = attach.communicate(timeout=60)
    assert attach.returncode == 1, rest
    assert "the engine stopped without finishing (killed?)" in rest
    assert "sudo mlsetup apply --resume" in rest
    wait_for(lambda: unit_state(host, unit) in ("inactive", "failed", ""), timeout=30)

    # resumed (a new unit), the run goes on from where it was killed to the driver's reboot
    fake.script({})
    resumed = host.ssh(mlsetup(fake, "apply", "--resume"), check=False, env=env)
    assert resumed.returncode == 10, resumed.stdout + resumed.stderr
    assert "paused: reboot to load the NVIDIA driver" in resumed.stdout + resumed.stderr
    assert fake.report()["result"] == "reboot"
    fake.reboot()  # the fake machine's boot: a new boot id, the driver loaded
    done = host.ssh(mlsetup(fake, "apply", "--resume"), check=False, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    report = fake.report()
    assert report["result"] == "done", report
    # SUDO_USER came through two units: the venv belongs to that account
    assert fake.venv.stat().st_uid == 1000
    assert fake.state_file()["environment"] == {}  # a finished run keeps no proxy secrets
    # and the proxy came through both units to uv, which fetched the build requirements by it
    assert "pypi.org:443" in proxy.seen, proxy.seen


def test_resume_unit_is_installed_runs_at_boot_and_is_removed(
    host: Container, fake: FakeServer, proxy: ConnectProxy
):
    """reboot.policy = "auto": the engine installs and enables mlsetup-resume.service with the
    real systemctl and reboots (the fake machine's reboot); then the container really reboots,
    and systemd starts the unit at boot, which finishes the run and removes itself."""
    # The fake root's /etc/systemd/system is the container's (a bind mount from fstab, so it
    # is there at boot too), and a drop-in points the product's unit at the fake root.
    systemd_dir = fake.root / "etc/systemd/system"
    systemd_dir.mkdir(parents=True)
    dropin = f"{RESUME_UNIT}.d/fake-root.conf"
    host.ssh(
        f"echo '/etc/systemd/system {systemd_dir} none bind 0 0' >> /etc/fstab && "
        f"systemctl daemon-reload && mount {systemd_dir} && mkdir -p {RESUME_UNIT}.d && "
        f"printf '%s\\n' '[Unit]' 'ConditionPathExists=' "
        f"'ConditionPathExists={fake.root}/var/lib/mlsetup/state.json' '[Service]' 'ExecStart=' "
        f"'ExecStart=/usr/local/bin/mlsetup apply --resume --foreground --root {fake.root}' "
        f"> {dropin}"
    )
    try:
        write_answers(fake, policy="auto")
        env = container_env(fake, https_proxy=proxy.url)
        first = host.ssh(
            mlsetup(fake, "apply", "--answers", str(fake.answers)), check=False, env=env
        )
        assert first.returncode == 10, first.stdout + first.stderr
        assert "mlsetup resumes by itself after boot" in first.stdout
        unit = host.ssh(f"cat {RESUME_UNIT}").stdout
        # the shipped unit, its ExecStart naming this installation (hosts.py: /opt/mlsetup)
        template = (REPO / "assets/systemd/mlsetup-resume.service").read_text()
        assert unit == template.replace("@MLSETUP@", "/opt/mlsetup/bin/mlsetup")
        assert host.ssh("systemctl is-enabled mlsetup-resume.service").stdout.strip() == "enabled"
        assert fake.state_file()["reboot"]["unit_installed"] is True

        host.reboot()
        wait_for(lambda: fake.report()["result"] != "reboot", timeout=300)
        report = fake.report()
        assert report["result"] == "done", report
        journal = host.ssh("journalctl -b -o cat -u mlsetup-resume.service").stdout
        assert "mlsetup resuming: run" in journal, journal
        wait_for(lambda: unit_state(host, "mlsetup-resume.service") == "inactive", timeout=60)
        result = host.ssh("systemctl show -P Result mlsetup-resume.service").stdout.strip()
        assert result == "success"
        assert host.ssh(f"test -e {RESUME_UNIT}", check=False).returncode == 1
        enabled = host.ssh("systemctl is-enabled mlsetup-resume.service", check=False)
        assert enabled.stdout.strip() in ("not-found", "disabled", ""), enabled.stdout
        assert (
            host.ssh(
                "test -e /etc/systemd/system/multi-user.target.wants/mlsetup-resume.service",
                check=False,
            ).returncode
            == 1
        )
        # the environment of the first start, carried over the reboot in the state
        assert fake.venv.stat().st_uid == 1000
        assert json.loads((fake.state / "machine.json").read_text())["boots"] == 1
        assert "pypi.org:443" in proxy.seen, proxy.seen  # at boot, through the saved proxy
    finally:
        host.ssh(
            f"umount {systemd_dir}; sed -i '\\#{systemd_dir}#d' /etc/fstab; "
            f"rm -rf {RESUME_UNIT}.d; systemctl daemon-reload",
            check=False,
        )
