"""The fabric step: NVSwitch boards get Fabric Manager at the driver's version (NVLSM on
Blackwell HGX), NVL trays IMEX, servers nvidia-persistenced; a PCIe box nothing.

The planner is pure, so each case is data (tests/fixtures/fabric/CASE.json: facts changed from
the recorded HGX H100 box, answers, the step expected). The probe reads the facts the cases
start from off fake roots."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import psutil
import pytest

from app.tui.controllers.confirm import apt_packages
from steps.core.errors import InputError
from steps.core.rootfs import RootFS
from steps.formats.answers import answers_from_toml
from steps.formats.facts import Facts, facts_from_json, load_facts
from steps.known.knowledge import knowledge
from steps.planning import fabric, registry
from steps.planning.planner import make_plan
from steps.probing.probe import probe
from tests.common import FIXTURES, MACHINES
from tests.fakemachine import FakeMachine
from tests.harness import FakeServer, wait_for

CASES = sorted((FIXTURES / "fabric").glob("*.json"))
HGX_H100 = MACHINES / "fresh-h100x8-ubuntu2204.json"


def case_facts(change: dict[str, Any]) -> Facts:
    """The recorded HGX H100 box with the case's changes: GPUs (model and count), NVSwitches
    (a count; "absent": a file recorded before the key), daemons, the driver, the environment."""
    data = json.loads(HGX_H100.read_text())
    if gpus := change.get("gpus"):
        data["gpus"] = [
            {
                "index": i,
                "name": gpus["name"],
                "pci_device_id": gpus["device"],
                "pci_bus_id": f"0000:{0x18 + i:02x}:00.0",
                "compute_capability": gpus["compute_capability"],
                "memory_bytes": None,
                "source": "pci",
            }
            for i in range(gpus["count"])
        ]
    if "nvswitches" in change:
        n = change["nvswitches"]
        if n == "absent":
            del data["nvswitches"]
        else:
            data["nvswitches"] = [
                {"pci_bus_id": f"0000:0{i + 5}:00.0", "pci_device_id": "0x22a3"} for i in range(n)
            ]
    if change.get("daemons") == "absent":
        del data["daemons"]
    elif "daemons" in change:
        data["daemons"] = change["daemons"]
    for key in ("driver", "environment"):
        if key in change:
            data[key] = change[key]
    return facts_from_json(json.dumps(data), "case")


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_each_case_plans_its_fabric_step(case: Path):
    spec = json.loads(case.read_text())
    facts = case_facts(spec["facts"])
    plan = make_plan(facts, answers_from_toml("version = 1\n" + spec["answers"], "case"))
    step, want = plan.step("fabric"), spec["expect"]
    assert step.status == want["status"], step.reason
    for words in want["reason"]:
        assert words in step.reason
    assert [a.id for a in step.actions] == want["actions"]
    assert [p for a in step.actions for p in apt_packages(a)] == want["packages"]


def test_the_fabric_step_sits_between_driver_and_toolkit_and_has_no_screen():
    names = registry.step_names()
    assert names.index("driver") < names.index("fabric") < names.index("toolkit")
    assert "fabric" not in registry.screen_steps()  # it asks nothing


def test_fabric_manager_follows_the_drivers_pin_and_starts_before_the_smoke_test():
    """On the recorded HGX H100 box: the driver's own pin package, installed again first, then
    Fabric Manager unsuffixed (branch 580 on), enabled and started before the venv's smoke."""
    plan = make_plan(load_facts(HGX_H100), answers_from_toml("version = 1\n", "a"))
    ids = [a.id for a in plan.actions]
    pin = next(a for a in plan.actions if a.id == "driver.pin")
    fabric_pin = next(a for a in plan.actions if a.id == "fabric.pin")
    assert apt_packages(pin) == apt_packages(fabric_pin) == ["nvidia-driver-pinning-580"]
    assert ids.index("driver.install") < ids.index("fabric.install")
    assert ids.index("fabric.start-nvidia-fabricmanager") < ids.index("venv.smoke")


def test_each_daemon_the_fabric_step_decides_on_is_one_row_of_the_daemon_table(
    machine: FakeMachine,
):
    """assets/daemons.toml is the one description of a daemon: the probe reports each row, and
    those the step starts have a unit there."""
    rows = knowledge().daemons.daemon
    assert {fabric.FABRIC_MANAGER, fabric.NVLSM, fabric.IMEX, fabric.PERSISTENCED} <= set(rows)
    assert all(rows[n].unit for n in (fabric.FABRIC_MANAGER, fabric.IMEX, fabric.PERSISTENCED))
    machine.dpkg_installed("base-files", "12.4+deb12u8")
    daemons = probe(RootFS(machine.root), env={}).facts.daemons
    assert daemons is not None and list(daemons) == list(rows)


def test_older_recorded_facts_still_load_and_say_nvswitches_unknown():
    facts = load_facts(MACHINES / "h200-ubuntu2404.json")  # recorded before the keys
    assert facts.nvswitches is None and facts.daemons is None
    assert "nvswitches" not in json.loads((MACHINES / "h200-ubuntu2404.json").read_text())


def test_facts_naming_a_daemon_this_mlsetup_does_not_know_still_load():
    """Facts are a format: a file another mlsetup recorded may name a daemon this one's
    assets/daemons.toml lacks. It loads, and plans as if the daemon were not there; a name no
    package could have is refused, naming the key."""
    data = json.loads(HGX_H100.read_text())
    before = make_plan(
        facts_from_json(json.dumps(data), "a"), answers_from_toml("version = 1\n", "a")
    )
    data["daemons"]["datacenter-gpu-manager"] = {
        "installed": True,
        "version": "4.2.3",
        "active": True,
    }
    facts = facts_from_json(json.dumps(data), "newer")
    assert (dcgm := facts.daemon("datacenter-gpu-manager")) and dcgm.active
    after = make_plan(facts, answers_from_toml("version = 1\n", "a"))
    assert after.step("fabric") == before.step("fabric")
    data["daemons"]["../etc/passwd"] = data["daemons"].pop("datacenter-gpu-manager")
    with pytest.raises(InputError) as exc:
        facts_from_json(json.dumps(data), "bad")
    assert "daemons" in str(exc.value) and "../etc/passwd" in str(exc.value), exc.value


def hgx(machine: FakeMachine, device: str, gpus: int, switches: int) -> None:
    for i in range(gpus):
        machine.gpu(f"0000:{0x18 + i:02x}:00.0", device)
    for i in range(switches):
        machine.nvswitch(f"0000:0{5 + i}:00.0")


def test_the_probe_reads_nvswitches_off_the_pci_bus(machine: FakeMachine):
    hgx(machine, "0x2330", 8, 4)  # HGX H100: 8 SXM5 GPUs, 4 NVSwitches
    machine.pci_device("0000:00:02.0", "0x8086", "0x0c00", "0x068000")  # not NVIDIA's
    facts = probe(RootFS(machine.root), env={}).facts
    assert [s.pci_bus_id for s in facts.nvswitches or []] == [
        "0000:05:00.0",
        "0000:06:00.0",
        "0000:07:00.0",
        "0000:08:00.0",
    ]
    assert facts.nvswitches and facts.nvswitches[0].pci_device_id == "0x22a3"
    assert len(facts.gpus) == 8
    assert fabric.board(facts) == "nvswitch" and not fabric.needs_nvlsm(facts)


def test_the_probe_on_a_blackwell_hgx_plans_nvlsm(machine: FakeMachine):
    hgx(machine, "0x2901", 8, 2)  # HGX B200
    facts = probe(RootFS(machine.root), env={}).facts
    assert fabric.needs_nvlsm(facts)
    step = make_plan(facts, answers_from_toml("version = 1\n", "a")).step("fabric")
    assert "nvlsm" in [p for a in step.actions for p in apt_packages(a)]
    assert ["modprobe", "-a", "ib_umad"] in [a.argv for a in step.actions]


def test_the_probe_on_two_pcie_h100s_finds_no_nvswitch(machine: FakeMachine):
    hgx(machine, "0x2331", 2, 0)
    facts = probe(RootFS(machine.root), env={}).facts
    assert facts.nvswitches == []
    step = make_plan(facts, answers_from_toml("version = 1\n", "a")).step("fabric")
    assert (step.status, step.reason) == ("satisfied", "no NVSwitch: no Fabric Manager needed")


def test_the_probe_reads_the_daemons_package_and_process(machine: FakeMachine):
    hgx(machine, "0x2330", 8, 4)
    machine.driver_loaded("580.95.05")
    machine.dpkg_installed("nvidia-fabricmanager-580", "580.95.05-1")
    machine.dpkg_installed("nvidia-persistenced", "1:580.95.05-0ubuntu1")
    machine.process(2001, "/usr/bin/nv-fabricmanager", "-c", "/usr/share/nvidia/nvswitch/x.cfg")
    machine.process(2002, "/usr/bin/nvidia-persistenced", "--verbose")
    facts = probe(RootFS(machine.root), env={}).facts
    fm, persistenced = facts.daemon("nvidia-fabricmanager"), facts.daemon("nvidia-persistenced")
    assert fm and (fm.installed, fm.version, fm.active) == (True, "580.95.05", True)
    assert persistenced and (persistenced.version, persistenced.active) == ("580.95.05", True)
    imex = facts.daemon("nvidia-imex")
    assert imex and (imex.installed, imex.active) == (False, False)
    step = make_plan(facts, answers_from_toml("version = 1\n", "a")).step("fabric")
    assert step.status == "satisfied", step.reason


def test_without_a_package_database_the_daemons_are_unknown(machine: FakeMachine):
    assert probe(RootFS(machine.root), env={}).facts.daemons is None


def hgx_server(server: FakeServer) -> None:
    """The harness's H200 on a board with 4 NVSwitches, driver 580 loaded (what the stand-in
    repository's branch 580 packages are), a dpkg database: the fabric step is pending."""
    server.machine.driver_loaded("580.105.08")
    hgx(server.machine, "0x2335", 0, 4)
    server.machine.dpkg_installed("base-files", "12.4+deb12u8")


def daemon_pids(server: FakeServer) -> dict[str, int]:
    """The stand-in daemons the fake root's /proc shows: executable -> pid."""
    pids = {}
    for link in server.root.glob("proc/[0-9]*"):
        if link.is_symlink() and (cmdline := Path("/proc", link.name, "cmdline")).exists():
            argv0 = cmdline.read_bytes().split(b"\0", 1)[0].decode()
            if argv0:
                pids[argv0] = int(link.name)
    return pids


def test_the_fake_servers_systemctl_runs_the_daemons_a_fresh_plan_sees(server: FakeServer):
    """The fabric step applied on the fake server: its systemctl starts the installed packages'
    stand-in daemons, so the engine's fresh probe after the step finds them running (the run
    stops at the toolkit, scripted to fail); `systemctl stop` ends one and a plan says so; none
    outlives the server."""
    hgx_server(server)
    server.script({"apt-get cuda-toolkit-13-0": {"exit": 100, "output": "E: scripted"}})
    run = server.mlsetup("apply", "--answers", str(server.answers))
    assert run.returncode == 1, run.stdout + run.stderr
    assert server.report()["failure"]["step"] == "toolkit", server.report()["failure"]
    assert "fabric.start-nvidia-fabricmanager" in server.report()["ran"]
    running = daemon_pids(server)
    assert {"nv-fabricmanager", "nvidia-persistenced"} <= set(running), running
    plan = server.mlsetup("plan", "--answers", str(server.answers))
    assert "NVIDIA Fabric Manager runs at the driver's 580.105.08" in plan.stdout, plan.stdout
    assert "nvidia-persistenced runs" in plan.stdout

    stop = subprocess.run(
        [server.bin / "systemctl", "stop", "nvidia-fabricmanager"], env=server.env(), check=False
    )
    assert stop.returncode == 0
    wait_for(lambda: "nv-fabricmanager" not in daemon_pids(server))
    plan = server.mlsetup("plan", "--answers", str(server.answers))
    assert "NVIDIA Fabric Manager is not running" in plan.stdout, plan.stdout

    persistenced = running["nvidia-persistenced"]
    server.stop_daemons()
    wait_for(lambda: not _alive(persistenced))


def _alive(pid: int) -> bool:
    """Running, not a zombie its new parent has yet to reap."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_fabric_managers_refusal_in_its_journal_is_diagnosed(server: FakeServer):
    """NVIDIA's repository still has an older Fabric Manager than the loaded driver: the
    stand-in installs it at that version, and its daemon aborts at start saying so only in its
    journal (systemctl says "Job ... failed"): a failed start reads the unit's journal, so the
    failure names the mismatch and what mends it."""
    hgx_server(server)
    server.set_machine(repository={"nvidia-fabricmanager": "580.95.05"})
    refused = (
        "fabric manager NVIDIA GPU driver interface version 580.95.05 don't match with driver "
        "version 580.105.08. Please update with matching NVIDIA driver package."
    )
    run = server.mlsetup("apply", "--answers", str(server.answers))
    assert run.returncode == 1, run.stdout + run.stderr
    failure = server.report()["failure"]
    assert failure["action"] == "fabric.start-nvidia-fabricmanager"
    assert failure["diagnosis"] == "fabric-manager-version", failure
    assert refused in failure["last_output"]
    assert "Fabric Manager 580.95.05 refuses to run with the loaded driver 580.105.08" in run.stdout
    assert "systemctl restart nvidia-fabricmanager" in failure["next"]
    assert "nv-fabricmanager" not in daemon_pids(server)


def test_a_stand_in_daemon_ends_with_its_fake_machine(server: FakeServer):
    """A server whose test never stopped its daemons (a fleet's, a benchmark's) leaves none
    running once its directory is removed."""
    env = server.env()
    for argv in (
        ["apt-get", "install", "-y", "--no-remove", "nvidia-persistenced"],
        ["systemctl", "start", "nvidia-persistenced"],
    ):
        done = subprocess.run(
            [server.bin / argv[0], *argv[1:]], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr
    pid = daemon_pids(server)["nvidia-persistenced"]
    shutil.rmtree(server.root)
    wait_for(lambda: not _alive(pid))
