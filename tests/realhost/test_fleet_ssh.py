"""The Ansible role over real SSH against two booted containers (real sshd, sudo, systemd).

The role installs mlsetup on both with install.sh from the controller's source tarball (its
dependencies from PyPI, inside the containers); mlsetup's root on each is a fake server
(tests/harness.py) with the apt and NVIDIA stand-ins, seen at the same path from the
controller. The plays run in order: install, --check (plans, nothing changed), apply (gpu1
builds tinyext and publishes its wheel, gpu2's apt fails with mlsetup's diagnosis; each host
pauses for the driver's reboot, which the role does with ansible.builtin.reboot), apply after
gpu2's apt was fixed (gpu2 installs gpu1's wheel, compiles nothing), and apply again
(changed=0 on both).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.common import REPO
from tests.harness import FakeServer
from tests.realhost.container import Container
from tests.realhost.hosts import TIMINGS, Playbook, container_server, ssh_host
from tests.test_ansible import APT_BROKEN, ansible_playbook, boots, recap, shown

# under xdist (tests/run.sh) on one worker: one image and one set of containers
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("realhost")]
HOSTS = ("gpu1", "gpu2")


class SshFleet:
    def __init__(self, base: Path, containers: dict[str, Container], uv: Path) -> None:
        self.base = base
        self.controller = base / "controller"
        self.controller.mkdir(parents=True)
        self.containers = containers
        self.servers: dict[str, FakeServer] = {}
        for host in HOSTS:
            server = container_server(base / host, uv)
            wheelhouse = server.base / "wheelhouse"  # each host's own: the role syncs them
            text = server.answers.read_text()
            server.answers.write_text(text + f'[build]\nwheelhouse = "{wheelhouse}"\n')
            self.servers[host] = server
        self.servers["gpu2"].script(
            {"apt-get cuda-toolkit-13-0": {"exit": 100, "output": APT_BROKEN}}
        )
        self.playbook = Playbook(
            base,
            {host: ssh_host(containers[host], self.servers[host]) for host in HOSTS},
            {
                "ansible_python_interpreter": "/usr/bin/python3",
                "mlsetup_dist_dir": str(self.base / "dist"),
                "mlsetup_reboot_tasks": str(REPO / "tests/realhost/reboot_container.yml"),
                "mlsetup_reboot_timeout": 300,
                "mlsetup_wheelhouse_sync": str(self.controller / "wheelhouse"),
                "mlsetup_reports_dir": str(self.controller / "reports"),
                "mlsetup_plans_dir": str(self.controller / "plans"),
                "mlsetup_facts_dir": str(self.controller / "facts"),
            },
        )
        self.walls: dict[str, float] = {}
        self.after_check: dict[str, dict[str, object]] = {}
        self.after: dict[str, dict[str, dict]] = {}

    def untouched(self, host: str, calls_before: int) -> dict[str, object]:
        """What check mode must leave as it was on a host (seen right after that play; the
        commands are those run since `calls_before`, the install play's included before it)."""
        server = self.servers[host]
        return {
            "commands run": server.calls()[calls_before:],
            "mlsetup state": (server.root / "var/lib/mlsetup").exists(),
            "answers copied": (server.root / "etc/mlsetup").exists(),
            "venv": server.venv.exists(),
            "reports": (self.controller / "reports").exists(),
            "boots": self.containers[host].boots,
        }

    def play(self, name: str, *args: str) -> subprocess.CompletedProcess:
        t0 = time.monotonic()
        run = self.playbook.run(*args)
        self.walls[name] = time.monotonic() - t0
        TIMINGS[f"play {name}"] = self.walls[name]
        # what this play left, for the test that looks at it after the later plays ran
        self.after[name] = {host: self._left(host) for host in HOSTS}
        return run

    def _left(self, host: str) -> dict:
        path = self.controller / "reports" / f"{host}.json"
        return {
            "report": json.loads(path.read_text()) if path.exists() else None,
            "boots": self.containers[host].boots,  # the container's: real reboots
            "fake boots": boots(self.servers[host]),  # the fake machine's: the driver loaded
        }

    def report(self, play: str, host: str) -> dict:
        report = self.after[play][host]["report"]
        assert report is not None, f"no report of {host} after the {play} play"
        return report


@pytest.fixture(scope="module")
def fleet(boot, realhost_base: Path, uv_binary: Path):
    ansible_playbook()
    containers = {host: boot(host) for host in HOSTS}
    return SshFleet(realhost_base / "shared" / "fleet", containers, uv_binary)


@pytest.fixture(scope="module")
def plays(fleet: SshFleet) -> dict[str, subprocess.CompletedProcess]:
    """The plays, once each, in order; a test looks at the ones it is about."""
    runs: dict[str, subprocess.CompletedProcess] = {}
    runs["install"] = fleet.play("install", "--tags", "mlsetup_install")
    if runs["install"].returncode != 0:
        return runs
    installed = {host: len(fleet.servers[host].calls()) for host in HOSTS}  # install.sh's own
    runs["check"] = fleet.play("check", "--check")
    fleet.after_check = {host: fleet.untouched(host, installed[host]) for host in HOSTS}
    runs["apply"] = fleet.play("apply")
    fleet.servers["gpu2"].script({})  # the operator fixed apt on gpu2
    runs["fixed"] = fleet.play("fixed")
    runs["again"] = fleet.play("again")
    return runs


def test_install_over_ssh(fleet: SshFleet, plays):
    run = plays["install"]
    assert run.returncode == 0, shown(run)
    for host in HOSTS:
        assert recap(run)[host]["changed"] > 0 and recap(run)[host]["failed"] == 0
        version = fleet.containers[host].ssh("cd / && /usr/local/bin/mlsetup --version")
        assert version.stdout.startswith("mlsetup 0.1.0")
        assert (
            fleet.containers[host]
            .ssh("cat /opt/mlsetup/.mlsetup-source")
            .stdout.startswith("0.1.0 sha256:")
        )


def test_check_mode_plans_and_changes_nothing(fleet: SshFleet, plays):
    run = plays["check"]
    assert run.returncode == 0, shown(run)
    for host in HOSTS:
        assert recap(run)[host]["failed"] == 0 and recap(run)[host]["changed"] >= 1
        plan = json.loads((fleet.controller / "plans" / f"{host}.json").read_text())
        # every step to do but the fabric step: no NVSwitch on these hosts
        statuses = {s["name"]: s["status"] for s in plan["steps"]}
        assert statuses.pop("fabric") == "satisfied"
        assert set(statuses.values()) == {"pending"}, statuses
        facts = json.loads((fleet.controller / "facts" / f"{host}.json").read_text())
        assert facts["schema"] == "mlsetup.facts/1" and facts["driver"] is None
        assert fleet.after_check[host] == {
            "commands run": [],
            "mlsetup state": False,
            "answers copied": False,
            "venv": False,
            "reports": False,
            "boots": 1,
        }, host


def test_apply_reboots_each_host_and_fails_only_the_broken_one(fleet: SshFleet, plays):
    run = plays["apply"]
    assert run.returncode == 2, shown(run)  # a host failed
    counts = recap(run)
    assert counts["gpu1"]["failed"] == 0 and counts["gpu1"]["changed"] > 0, shown(run)
    report = fleet.report("apply", "gpu1")
    assert report["outcome"] == "done" and report["changed"] is True
    assert [run["result"] for run in report["runs"]] == ["reboot", "done"]  # the whole play
    assert "extensions.tinyext.build" in report["ran"]
    for host in HOSTS:  # paused for the driver: the role rebooted the container, then resumed
        assert fleet.after["apply"][host]["fake boots"] == 1, host
        assert fleet.after["apply"][host]["boots"] == 2, host
    assert counts["gpu2"]["failed"] == 1, shown(run)
    assert fleet.report("apply", "gpu2")["outcome"] == "failed"
    failure = fleet.report("apply", "gpu2")["runs"][-1]["failure"]
    assert failure["action"] == "toolkit.install-13.0" and failure["diagnosis"] == "apt-broken"
    assert "mlsetup failed on gpu2 in step toolkit, action toolkit.install-13.0 (exit 100)" in (
        run.stdout
    )
    for line in (failure["what"], failure["why"], failure["next"], APT_BROKEN):
        assert line in run.stdout, line


def test_the_fixed_host_installs_the_fleets_wheel_and_compiles_nothing(fleet: SshFleet, plays):
    run = plays["fixed"]
    assert run.returncode == 0, shown(run)
    counts = recap(run)
    assert counts["gpu1"]["changed"] == 0, shown(run)
    assert counts["gpu2"]["changed"] > 0 and counts["gpu2"]["failed"] == 0
    report = fleet.report("fixed", "gpu2")
    assert report["outcome"] == "done" and report["ran"][0] == "toolkit.install-13.0"
    assert "extensions.tinyext.install-wheel" in report["ran"]
    assert "extensions.tinyext.build" not in report["ran"], report["ran"]
    wheels = list((fleet.controller / "wheelhouse").rglob("tinyext-0.1.0-*.whl"))
    assert len(wheels) == 1


def test_a_second_apply_changes_nothing_on_either_host(fleet: SshFleet, plays):
    run = plays["again"]
    assert run.returncode == 0, shown(run)
    for host in HOSTS:
        assert recap(run)[host]["changed"] == 0, (host, shown(run))
        report = fleet.report("again", host)
        assert report["outcome"] == "done", report
        assert report["changed"] is False and report["ran"] == [], report
        assert fleet.after["again"][host]["boots"] == 2
