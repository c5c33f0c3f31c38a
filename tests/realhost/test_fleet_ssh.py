"""The Ansible role over real SSH against two booted containers (real sshd, sudo, systemd).

The role installs mlsetup on both with install.sh from the controller's source tarball (its
dependencies from PyPI, inside the containers); mlsetup's root on each is a fake server
(tests/harness.py) with the apt and NVIDIA stand-ins, seen at the same path from the
controller. The plays run in order: install, --check (plans, nothing changed), apply (gpu1
builds tinyext and publishes its wheel, gpu2's apt fails with mlsetup's diagnosis; each host
pauses for the driver's reboot, which the role does with ansible.builtin.reboot), apply after
gpu2's apt was fixed (gpu2 installs gpu1's wheel, compiles nothing), and apply again
(changed=0 on both). Then, the fleet finished, gpu2 needs tinyext again (uninstalled, its copy
of the wheel gone): the controller's wheel replaced by a valid wheel with other code, in a play
held before its applies while a second play over the same reports directory is tried; gpu2
passes it over and builds from source, and gpu1, finished, keeps its own wheel. (A wheel cut
short is the same check of its recorded hash: tests/test_ansible.py plays it on local hosts.)
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.common import REPO
from tests.harness import FakeServer, wait_for
from tests.realhost.container import Container
from tests.realhost.hosts import TIMINGS, Playbook, container_server, ssh_host
from tests.test_ansible import APT_BROKEN, another_wheel, ansible_playbook, boots, recap, shown

# under xdist (tests/run.sh) on one worker: one set of containers. The fleet's plays are the
# suite's longest chain, so no other real-host module waits behind them on its worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("realhost-fleet")]
HOSTS = ("gpu1", "gpu2")


@dataclass
class Spoiled:
    """The controller's wheel spoiled before a play, and what the play left."""

    wheel: Path  # on the controller
    bad: bytes  # put in its place
    recorded: str  # the sha256 its builder wrote beside it
    gpu1_before: bytes  # the finished host's copy
    gpu1_after: bytes = b""
    controller_after: bytes = b""
    sidecar_after: str = ""  # the controller's <wheel>.sha256 after the play
    evil_on_gpu2: bool = False  # the other code in gpu2's venv


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
        self.hosts = {host: ssh_host(containers[host], self.servers[host]) for host in HOSTS}
        self.group_vars: dict[str, object] = {
            "ansible_python_interpreter": "/usr/bin/python3",
            "mlsetup_dist_dir": str(self.base / "dist"),
            "mlsetup_reboot_tasks": str(REPO / "tests/realhost/reboot_container.yml"),
            "mlsetup_reboot_timeout": 300,
            "mlsetup_wheelhouse_sync": str(self.controller / "wheelhouse"),
            "mlsetup_reports_dir": str(self.controller / "reports"),
            "mlsetup_plans_dir": str(self.controller / "plans"),
            "mlsetup_facts_dir": str(self.controller / "facts"),
        }
        self.playbook = Playbook(base, self.hosts, self.group_vars)
        self.walls: dict[str, float] = {}
        self.after_check: dict[str, dict[str, object]] = {}
        self.after: dict[str, dict[str, dict]] = {}
        self.spoiled: dict[str, Spoiled] = {}  # play -> the wheel spoiled before it
        self.second: subprocess.CompletedProcess | None = None  # the play refused meanwhile
        self.while_second: dict[str, object] = {}  # the reports directory as it left it
        self.held: tuple[str, int, int] = ("", 0, 0)  # the held play, its claim's pid, its pid

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
        self._ended(name, t0)
        return run

    def _ended(self, name: str, t0: float) -> None:
        self.walls[name] = time.monotonic() - t0
        TIMINGS[f"play {name}"] = self.walls[name]
        # what this play left, for the test that looks at it after the later plays ran
        self.after[name] = {host: self._left(host) for host in HOSTS}

    def held_play(self, name: str) -> subprocess.CompletedProcess:
        """Play `name` held before its applies: its building host is "elsewhere", a host not in
        the play, whose report the test writes. Meanwhile a second play over the same reports
        directory (self.second); then the first goes on to its end."""
        reports = self.controller / "reports"
        claim = reports / ".play"
        output = self.base / f"{name}.out"
        t0 = time.monotonic()
        first = self.playbook.start(output, "-e", "mlsetup_builder=elsewhere")

        def holding() -> bool:  # claimed, and the earlier play's reports forgotten
            assert first.poll() is None, output.read_text()[-12000:]
            fields = claim.read_text().split() if claim.exists() else []
            return fields[1:2] == [str(first.pid)] and not any(
                (reports / f"{host}.json").exists() for host in HOSTS
            )

        try:
            wait_for(holding, timeout=600)
            play, pid, _ = claim.read_text().split()
            self.held = (play, int(pid), first.pid)
            (self.base / "second").mkdir()
            self.second = Playbook(self.base / "second", self.hosts, self.group_vars).run()
            self.while_second = {
                "claim": claim.read_text().split()[:2],
                "reports": sorted(path.name for path in reports.glob("*.json")),
            }
            (reports / "elsewhere.json").write_text(json.dumps({"play": play}))
            first.wait(timeout=900)
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()
        self._ended(name, t0)
        return subprocess.CompletedProcess(first.args, first.returncode, output.read_text(), "")

    def spoil(self, play: str, how: Callable[[bytes, Path], bytes]) -> None:
        """The controller's wheel replaced by how(its bytes, its path) before `play`; gpu2
        needs tinyext again and has no copy of the wheel (in its wheelhouse or its cache), so
        the play brings it the controller's; gpu1 stays finished."""
        (wheel,) = (self.controller / "wheelhouse").glob("*/tinyext-0.1.0-*.whl")
        recorded = wheel.with_name(wheel.name + ".sha256").read_text().split()[0]
        bad = how(wheel.read_bytes(), wheel)
        wheel.write_bytes(bad)
        gpu2, copy = self.servers["gpu2"], self.host_wheel("gpu2", wheel)
        uv, python = gpu2.tools / "uv", gpu2.venv / "bin/python"
        self.containers["gpu2"].ssh(
            f"{shlex.quote(str(uv))} pip uninstall --python {shlex.quote(str(python))} tinyext"
        )
        for path in (copy, copy.with_name(copy.name + ".sha256")):
            path.unlink()
        shutil.rmtree(gpu2.root / "var/cache/mlsetup/wheels" / copy.parent.name, ignore_errors=True)
        gpu1 = self.host_wheel("gpu1", wheel).read_bytes()
        self.spoiled[play] = Spoiled(wheel, bad, recorded, gpu1)

    def seen_after(self, play: str) -> None:
        spoiled = self.spoiled[play]
        spoiled.gpu1_after = self.host_wheel("gpu1", spoiled.wheel).read_bytes()
        spoiled.controller_after = spoiled.wheel.read_bytes()
        sidecar = spoiled.wheel.with_name(spoiled.wheel.name + ".sha256")
        spoiled.sidecar_after = sidecar.read_text().split()[0]
        venv = self.servers["gpu2"].venv
        spoiled.evil_on_gpu2 = bool(list(venv.glob("lib/python3*/site-packages/tinyext/evil.py")))

    def host_wheel(self, host: str, wheel: Path) -> Path:
        """The host's copy of the controller's `wheel`."""
        relative = wheel.relative_to(self.controller / "wheelhouse")
        return self.servers[host].base / "wheelhouse" / relative

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


@pytest.fixture(scope="module")
def later_plays(fleet: SshFleet, plays) -> dict[str, subprocess.CompletedProcess]:
    """After the fleet has finished: the play with a spoiled wheel on the controller, held
    while a second play is tried (SshFleet.held_play)."""
    runs: dict[str, subprocess.CompletedProcess] = {}
    fleet.spoil("tampered", another_wheel)
    runs["tampered"] = fleet.held_play("tampered")
    fleet.seen_after("tampered")
    _print_what_the_operator_sees(fleet, runs)
    return runs


def _print_what_the_operator_sees(fleet: SshFleet, runs: dict) -> None:
    """For the issue's closing note: the refused play's message, each play's recap and what
    gpu2's report says."""
    if fleet.second is not None:
        out = " ".join(fleet.second.stdout.split())
        at = out.find("another play")
        print(f"\nsecond play (exit {fleet.second.returncode}): {out[at - 14 : at + 230]}")
    for play, run in runs.items():
        report = fleet.after[play]["gpu2"]["report"] or {}
        warnings = [w for r in report.get("runs", []) for w in r["warnings"]]
        print(f"{play} play: exit {run.returncode}, recap {recap(run)}")
        print(f"  gpu2 {report.get('outcome')}, ran {report.get('ran')}, warnings {warnings}")


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


def test_a_spoiled_wheel_is_passed_over_its_hash_reported_and_no_finished_host_touched(
    fleet: SshFleet, later_plays
):
    """A valid wheel with other code, its builder's .sha256 kept: gpu2, which needs tinyext,
    passes it over naming both hashes and builds from source; gpu1, finished, keeps its wheel
    and changes nothing; the controller gets gpu2's whole wheel."""
    play = "tampered"
    run, spoiled = later_plays[play], fleet.spoiled[play]
    assert run.returncode == 0, shown(run)
    counts = recap(run)
    assert counts["gpu1"]["changed"] == 0 and counts["gpu1"]["failed"] == 0, shown(run)
    assert fleet.report(play, "gpu1")["changed"] is False
    assert spoiled.gpu1_after == spoiled.gpu1_before
    assert counts["gpu2"]["changed"] > 0 and counts["gpu2"]["failed"] == 0, shown(run)
    report = fleet.report(play, "gpu2")
    said = (
        f"sha256 {hashlib.sha256(spoiled.bad).hexdigest()}, not the {spoiled.recorded} its "
        "builder recorded (a damaged or replaced wheel): passed over, built from source"
    )
    warnings = [w for r in report["runs"] for w in r["warnings"]]
    assert [w for w in warnings if said in w and spoiled.wheel.name in w], warnings
    assert report["outcome"] == "done" and "extensions.tinyext.build" in report["ran"], report
    assert not spoiled.evil_on_gpu2
    assert spoiled.controller_after != spoiled.bad
    assert hashlib.sha256(spoiled.controller_after).hexdigest() == spoiled.sidecar_after


def test_a_second_play_over_the_same_reports_is_refused_while_the_first_runs(
    fleet: SshFleet, later_plays
):
    """The tampered play, held before its applies, claimed the reports directory; a second
    play over it is refused, touching nothing; the first then ends with its own reports."""
    play, claimed_by, pid = fleet.held
    assert claimed_by == pid
    second = fleet.second
    assert second is not None and second.returncode == 2, second
    reports = fleet.controller / "reports"
    said = f"another play (ansible-playbook pid {pid}) is using the reports directory {reports}"
    assert said in " ".join(second.stdout.split()), shown(second)
    assert "Forget the host's report" not in second.stdout, shown(second)
    assert fleet.while_second == {"claim": [play, str(pid)], "reports": []}
    first = later_plays["tampered"]
    assert first.returncode == 0, shown(first)
    assert first.stdout.count("2 host(s): 2 done") == 1, shown(first)
    for host in HOSTS:
        assert fleet.report("tampered", host)["play"] == play, host
