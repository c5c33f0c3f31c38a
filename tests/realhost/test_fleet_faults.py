"""The Ansible role under faults, over real SSH against four booted containers at once.

Each host's mlsetup root is a fake server (tests/harness.py), as in test_fleet_ssh.py; the
faults are real: a container that powers off at its reboot and stays down, one whose every
process is stopped (SIGSTOP) for longer than its SSH keepalive, one that loses mlsetup's
state while it reboots, a full tmpfs on /var/lib/mlsetup. The plays run in order, on one set
of containers:

- check, before anything is installed: each host says mlsetup is not there and how to install it;
  then mlsetup is installed in one container and copied to the others (test_fleet_ssh.py
  tests the role's install);
- faults: fault-ok sets up (apply, reboot, resume); fault-lost stays down at its reboot;
  fault-frozen is frozen in the middle of its apply; fault-state's resume has no state;
- next, on fault-lost (up again) and fault-state (its /var/lib/mlsetup full): fault-lost
  finishes; fault-state fails with the no-space diagnosis, and once the space is freed the
  command it advised succeeds;
- unwritable, on the two finished hosts: fault-ok is given the fleet's stack lock into a full
  /var/lib/mlsetup (the role's copy fails, mlsetup never runs); fault-lost's /var/lib is
  read-only (its mlsetup says so). Each report names the path and what to run.
The answers have no extension: the builds are test_fleet_ssh.py's, the faults are this one's.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.common import REPO
from tests.harness import FakeServer, wait_for
from tests.realhost.container import Container
from tests.realhost.hosts import (
    TIMINGS,
    Playbook,
    clone_mlsetup,
    container_env,
    container_server,
    install_mlsetup,
    ssh_host,
)
from tests.test_ansible import ansible_playbook, recap, shown

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("realhost-faults")]
OK, LOST, FROZEN, STATE = "fault-ok", "fault-lost", "fault-frozen", "fault-state"
HOSTS = (OK, LOST, FROZEN, STATE)
LOST_TIMEOUT = 45  # fault-lost's mlsetup_reboot_timeout: the wait the others must not share
KEEPALIVE, KEEPALIVE_COUNT = 2, 3  # fault-frozen's bound: no answer for 6 s
FREEZE = 40  # seconds fault-frozen stays stopped: far longer than its bound
NO_SPACE_ADVICE = re.compile(r"then: sudo mlsetup (apply (?:--resume|--answers \S+?))(?=;|\s|$)")


class FaultFleet:
    def __init__(self, base: Path, containers: dict[str, Container], uv: Path) -> None:
        self.base = base
        self.controller = base / "controller"
        self.controller.mkdir(parents=True)
        self.containers = containers
        self.servers: dict[str, FakeServer] = {h: container_server(base / h, uv) for h in HOSTS}
        for server in self.servers.values():
            text = server.answers.read_text()
            extension = text[text.index("[[extensions]]") : text.index("[reboot]")]
            server.answers.write_text(text.replace(extension, ""))
        # fault-frozen is frozen while its driver installs (the stand-in takes its time)
        self.servers[FROZEN].script({"apt-get nvidia-open": {"sleep": 15}})
        hosts = {h: ssh_host(containers[h], self.servers[h]) for h in HOSTS}
        hosts[LOST]["mlsetup_reboot_timeout"] = LOST_TIMEOUT
        hosts[FROZEN].update(
            mlsetup_ssh_keepalive=KEEPALIVE,
            mlsetup_ssh_keepalive_count=KEEPALIVE_COUNT,
            mlsetup_task_timeout=20,
        )
        hosts[STATE]["fake_lose_state"] = True
        self.hosts = hosts
        self.group_vars: dict[str, object] = {
            "ansible_python_interpreter": "/usr/bin/python3",
            "mlsetup_install": False,  # installed by the fixture
            # each host resolves its own stack: a fleet lock copied into a full
            # /var/lib/mlsetup would fail the role's copy before mlsetup runs
            "mlsetup_lock_file": "",
            "mlsetup_reboot_tasks": str(REPO / "tests/realhost/reboot_container.yml"),
            "mlsetup_reboot_timeout": 300,
            "mlsetup_poll": 2,
            "mlsetup_reports_dir": str(self.controller / "reports"),
            "mlsetup_plans_dir": str(self.controller / "plans"),
            "mlsetup_facts_dir": str(self.controller / "facts"),
        }
        self.playbook = Playbook(base, hosts, self.group_vars)
        self.runs: dict[str, subprocess.CompletedProcess] = {}
        self.walls: dict[str, float] = {}
        self.reports: dict[str, dict[str, dict | None]] = {}  # play -> host -> its report
        self.frozen: tuple[float, float] = (0.0, 0.0)  # when fault-frozen was stopped, thawed
        self.advised: subprocess.CompletedProcess | None = None
        self.calls_after: dict[str, dict[str, int]] = {}  # play -> host -> stand-in calls by then
        self.started: dict[str, float] = {}  # play -> its unix start time

    def play(
        self, name: str, *args: str, playbook: Playbook | None = None
    ) -> subprocess.CompletedProcess:
        t0 = time.monotonic()
        self.started[name] = time.time()
        self.runs[name] = (playbook or self.playbook).run(*args)
        self.walls[name] = time.monotonic() - t0
        self.calls_after[name] = {h: len(s.calls()) for h, s in self.servers.items()}
        TIMINGS[f"faults play {name}"] = self.walls[name]
        self.reports[name] = {h: self._report(h) for h in HOSTS}
        return self.runs[name]

    def _report(self, host: str) -> dict | None:
        path = self.controller / "reports" / f"{host}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def report(self, play: str, host: str) -> dict:
        report = self.reports[play][host]
        assert report is not None, f"no report of {host} on the controller after the {play} play"
        return report

    def freeze_during_its_driver_install(self) -> threading.Thread:
        """fault-frozen: every process stopped once its driver install has begun, for FREEZE s."""
        server, container = self.servers[FROZEN], self.containers[FROZEN]

        def freeze() -> None:
            wait_for(lambda: "apt-get nvidia-open" in server.commands(), timeout=600)
            stopped_at = time.time()
            pids = container.freeze()
            try:
                time.sleep(FREEZE)
            finally:
                container.thaw(pids)
            self.frozen = (stopped_at, time.time())

        thread = threading.Thread(target=freeze, daemon=True)
        thread.start()
        return thread

    def ssh(self, host: str, command: str, **env: str) -> subprocess.CompletedProcess:
        server = self.servers[host]
        return self.containers[host].ssh(
            command, check=False, timeout=600, env=container_env(server, **env)
        )


@pytest.fixture(scope="module")
def fleet(boot, realhost_base: Path, uv_binary: Path, mlsetup_wheel: Path) -> FaultFleet:
    ansible_playbook()
    containers = {host: boot(host) for host in HOSTS}
    return FaultFleet(realhost_base / "shared" / "faults", containers, uv_binary)


@pytest.fixture(scope="module")
def plays(fleet: FaultFleet, mlsetup_wheel: Path) -> FaultFleet:
    """The plays, once each, in order; each test looks at the ones it is about."""
    fleet.play("check", "--check")
    install_mlsetup(fleet.containers[OK], mlsetup_wheel)
    for host in (LOST, FROZEN, STATE):
        clone_mlsetup(fleet.containers[OK], fleet.containers[host])
    fleet.containers[LOST].stay_down_at_reboot = True
    freezer = fleet.freeze_during_its_driver_install()
    fleet.play("faults")
    freezer.join(timeout=FREEZE + 60)

    fleet.containers[LOST].come_back()
    full = fleet.servers[STATE].root / "var/lib/mlsetup"
    mounted = fleet.ssh(STATE, f"mount -t tmpfs -o size=64k,mode=0700 tmpfs {full}")
    assert mounted.returncode == 0, mounted.stderr
    try:
        fleet.ssh(STATE, f"dd if=/dev/zero of={full}/filler bs=4k 2>/dev/null; true")
        fleet.play("next", "--limit", f"{LOST},{STATE}")
    finally:
        fleet.ssh(STATE, f"umount {full}")
    # space freed: the command mlsetup advised (fault-state's is the play's only one; on a real
    # host / is mlsetup's root)
    advice = NO_SPACE_ADVICE.search(" ".join(fleet.runs["next"].stdout.split()))
    if advice is not None:
        root = fleet.servers[STATE].root
        fleet.advised = fleet.ssh(STATE, f"mlsetup {advice[1]} --root {shlex.quote(str(root))}")
    _unwritable_play(fleet)
    _print_faults(fleet)
    return fleet


def _unwritable_play(fleet: FaultFleet) -> None:
    """fault-ok: the fleet's stack lock (fault-lost stands for the building host) copied into
    a full /var/lib/mlsetup; fault-lost: /var/lib read-only (remounted as after a disk error)."""
    lock = fleet.controller / "stack.lock"
    lock.write_text("# the building host's lock\ntinyext==0.1.0\n")
    hosts = {h: dict(v) for h, v in fleet.hosts.items()}
    hosts[OK].update(mlsetup_lock_file=str(lock), mlsetup_builder=LOST)
    base = fleet.base / "unwritable"
    base.mkdir()
    full = fleet.servers[OK].root / "var/lib/mlsetup"
    var_lib = fleet.servers[LOST].root / "var/lib"
    mounted = fleet.ssh(OK, f"mount -t tmpfs -o size=64k,mode=0700 tmpfs {full}")
    assert mounted.returncode == 0, mounted.stderr
    try:
        fleet.ssh(OK, f"dd if=/dev/zero of={full}/filler bs=4k 2>/dev/null; true")
        ro = fleet.ssh(
            LOST, f"mount --bind {var_lib} {var_lib} && mount -o remount,bind,ro {var_lib}"
        )
        assert ro.returncode == 0, ro.stderr
        try:
            playbook = Playbook(base, hosts, fleet.group_vars)
            fleet.play("unwritable", "--limit", f"{OK},{LOST}", playbook=playbook)
        finally:
            fleet.ssh(LOST, f"umount {var_lib}")
    finally:
        fleet.ssh(OK, f"umount {full}")


# Each play's faults, for the table the module prints (its outcome, each host's wall time).
FAULTS = {
    "faults": {
        OK: "none",
        LOST: "down after its reboot",
        FROZEN: f"SIGSTOP {FREEZE} s mid-apply",
        STATE: "state lost at its reboot",
    },
    "next": {LOST: "up again", STATE: "/var/lib/mlsetup full"},
    "unwritable": {OK: "lock copied, state dir full", LOST: "/var/lib read-only"},
}


def _print_faults(fleet: FaultFleet) -> None:
    print(f"\n{'play':10} {'host':13} {'fault':28} {'ended after':>11}  outcome")
    for play, faults in FAULTS.items():
        for host, fault in faults.items():
            report = fleet.reports[play][host] or {}
            ended = report.get("time", 0) - fleet.started[play]
            print(f"{play:10} {host:13} {fault:28} {ended:10.1f}s  {report.get('outcome')}")
    print(", ".join(f"play {name} {wall:.1f} s" for name, wall in fleet.walls.items()))


def test_check_on_a_host_without_mlsetup_says_how_to_install_it(plays: FaultFleet):
    run = plays.runs["check"]
    assert run.returncode == 2, shown(run)
    for host in HOSTS:
        assert recap(run)[host]["failed"] == 1, shown(run)
        hint = (
            f"mlsetup is not installed on {host} (no /usr/local/bin/mlsetup): install only "
            "mlsetup with --tags mlsetup_install"
        )
        assert hint in " ".join(run.stdout.split()), shown(run)
        assert plays.calls_after["check"][host] == 0, host  # the preview ran nothing
    assert "mlsetup probe failed" not in run.stdout


def test_a_host_lost_in_its_reboot_keeps_its_report_and_holds_no_other(plays: FaultFleet):
    run = plays.runs["faults"]
    assert recap(run)[OK]["failed"] == 0, shown(run)
    lost = plays.report("faults", LOST)
    assert lost["outcome"] == "waiting for reboot", lost
    assert [r["result"] for r in lost["runs"]] == ["reboot"]  # the pre-reboot report, kept
    assert "did not come back from its reboot" in lost["message"], lost
    assert "run the play again: it resumes mlsetup" in lost["next"], lost
    assert recap(run)[LOST]["failed"] == 1 and recap(run)[LOST]["unreachable"] == 0
    # fault-lost waited its whole reboot timeout; fault-ok, rebooted at the same time, went
    # through its own reboot and resume meanwhile (under the linear strategy it would resume
    # only once fault-lost's wait had ended, and end after it)
    reboot_started = next(c["t"] for c in plays.servers[LOST].calls() if c["cmd"] == "reboot")
    assert lost["time"] - reboot_started >= LOST_TIMEOUT, lost["time"] - reboot_started
    ok = plays.report("faults", OK)
    assert ok["outcome"] == "done" and len(ok["runs"]) == 2, ok
    assert ok["time"] < lost["time"], (ok["time"], lost["time"])


def test_a_frozen_host_is_failed_at_its_bound_while_the_others_finish(plays: FaultFleet):
    run = plays.runs["faults"]
    frozen = plays.report("faults", FROZEN)
    assert frozen["outcome"] == "unreachable", frozen
    assert f"lost contact with {FROZEN}" in frozen["message"], frozen
    assert "its apply may still be running there" in frozen["message"], frozen
    assert recap(run)[FROZEN]["failed"] == 1, shown(run)
    stopped, thawed = plays.frozen
    assert stopped < frozen["time"] < thawed, (stopped, frozen["time"], thawed)  # at its bound
    assert plays.report("faults", OK)["outcome"] == "done"


def test_a_resume_with_nothing_to_resume_is_not_blamed_on_the_answers(plays: FaultFleet):
    state = plays.report("faults", STATE)
    assert state["outcome"] == "refused input" and state["code"] == 2, state
    assert "refused its input: state" in state["message"], state
    assert "there is no unfinished run to resume" in state["message"], state
    assert "copied from" not in state["message"] and "answers.toml on the controller" not in (
        state["message"] + state["next"]
    ), state
    assert "starts a new apply with the answers" in state["next"], state


def test_each_report_carries_the_plays_runs_and_the_summary_lists_hosts_by_outcome(
    plays: FaultFleet,
):
    ok = plays.report("faults", OK)
    before, after = ok["runs"]
    assert (before["result"], after["result"]) == ("reboot", "done")
    assert ok["ran"] == before["ran"] + after["ran"] and "driver.install" in ok["ran"]
    assert "venv.smoke" in after["ran"]
    out = plays.runs["faults"].stdout
    assert out.count("4 host(s): ") == 1, shown(plays.runs["faults"])
    summary = out[out.index("4 host(s): ") :]
    for line in (
        f"done: {OK}",
        f"waiting for reboot: {LOST}",
        f"unreachable: {FROZEN}",
        f"refused input: {STATE}",
    ):
        assert line in summary, summary[:3000]


def test_the_next_play_resumes_the_host_lost_in_its_reboot(plays: FaultFleet):
    run = plays.runs["next"]
    lost = plays.report("next", LOST)
    assert lost["outcome"] == "done", shown(run)
    # the run it had paused at its reboot, resumed
    assert lost["runs"][0]["run_id"] == plays.report("faults", LOST)["runs"][0]["run_id"]
    # from where it paused: the steps after the driver's, the driver's not again
    assert "toolkit.install-13.0" in lost["ran"], lost["ran"]
    assert not [a for a in lost["ran"] if a.startswith(("driver.", "nvidia-repo."))], lost["ran"]


def test_no_space_for_the_state_then_the_advised_command_succeeds(plays: FaultFleet):
    advised = plays.advised  # run once the space was freed
    assert advised is not None, shown(plays.runs["next"])
    assert advised.returncode == 0, (advised.args[-1], advised.stdout[-2000:], advised.stderr)
    assert plays.servers[STATE].report()["result"] == "done"
    state = plays.report("next", STATE)
    assert state["outcome"] == "failed", state
    assert "no space left on the device" in state["message"], state
    answers = plays.servers[STATE].root / "etc/mlsetup/answers.toml"
    assert f"then: sudo mlsetup apply --answers {answers}" in state["next"], state


def test_no_space_for_the_fleet_lock_names_the_path_and_mlsetup_never_runs(plays: FaultFleet):
    run = plays.runs["unwritable"]
    ok = plays.report("unwritable", OK)
    full = plays.servers[OK].root / "var/lib/mlsetup"
    assert ok["outcome"] == "failed" and ok["runs"] == [], ok
    assert f"no space left on the device at {full} on {OK}" in ok["message"], ok
    assert 'the play failed at "Copy the lock", before mlsetup ran' in ok["message"], ok
    assert ok["next"] == f"on {OK}: free space in {full} (df -h {full}), then run the play again"
    assert plays.calls_after["unwritable"][OK] == plays.calls_after["next"][OK], shown(run)


def test_a_read_only_var_lib_is_the_hosts_diagnosis_naming_the_path(plays: FaultFleet):
    run = plays.runs["unwritable"]
    lost = plays.report("unwritable", LOST)
    var_lib = plays.servers[LOST].root / "var/lib"
    assert lost["outcome"] == "failed", lost
    assert "read-only" in lost["message"] and str(var_lib) in lost["message"], lost
    assert f"findmnt -T {var_lib}" in lost["next"], lost
    assert "Traceback" not in run.stdout, shown(run)
