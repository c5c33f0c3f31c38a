"""Where the driver is not mlsetup's (issue 32): WSL 2 and containers use the host's driver, a
Jetson's comes with its BSP. The probe against fake roots laid out as each looks from inside,
then `mlsetup plan` on them: no driver action, nothing about kernel modules, and no reboot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.tui.controllers.driver import DriverController
from app.tui.session import Session
from steps.core.rootfs import RootFS
from steps.core.settings import NVML_SNAPSHOT
from steps.formats.answers import answers_from_toml
from steps.formats.facts import Facts, facts_from_json, load_facts
from steps.probing.probe import probe
from steps.stack.inputs import builds_to_try
from tests.common import FIXTURES, MACHINES, run_cli
from tests.fakemachine import FakeMachine

H200_NVML = FIXTURES / "h200-nvml.json"  # NVML as read on the real H200 server
# What only a machine's own driver install does: kernel modules, the initramfs, a reboot
KERNEL_KINDS = {"initramfs", "reboot", "resume-unit", "load-driver", "config-file"}
DRIVER_PACKAGES = ("nvidia-open", "cuda-drivers", "nvidia-driver-pinning", "linux-headers-")


def step(plan: dict, name: str) -> dict:
    """A step of a plan's JSON by its name (its index is the registry's order)."""
    return next(s for s in plan["steps"] if s["name"] == name)


def probe_facts(machine: FakeMachine, **env: str) -> Facts:
    return probe(RootFS(machine.root), env=env).facts


def plan_json(machine: FakeMachine, *extra: str, nvml: Path | None = H200_NVML) -> dict:
    env = {NVML_SNAPSHOT: str(nvml)} if nvml else {}
    out = run_cli("plan", "--root", str(machine.root), "--json", *extra, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def assert_no_driver_work(plan: dict) -> None:
    """Nothing of a driver install: no driver action, no kernel-side action, no reboot."""
    actions = [a for s in plan["steps"] for a in s["actions"]]
    assert plan["steps"][0]["name"] == "driver" and plan["steps"][0]["actions"] == []
    assert not [a["id"] for a in actions if a["kind"] in KERNEL_KINDS or a["reboot_after"]]
    assert not [w for a in actions for w in a["argv"] if w.startswith(DRIVER_PACKAGES)]


# -- the probe ----------------------------------------------------------------------------------


def test_wsl_the_driver_answers_nvml_without_proc_driver_nvidia(machine):
    machine.wsl()
    facts = probe_facts(machine, **{NVML_SNAPSHOT: str(H200_NVML)})
    assert facts.environment is not None
    assert (facts.environment.kind, facts.environment.name) == ("wsl", "wsl")
    assert not (machine.root / "proc/driver/nvidia").exists()
    assert facts.driver is not None
    # the Windows driver, through /usr/lib/wsl/lib: it is the one there is, and it runs
    assert (facts.driver.version, facts.driver.loaded, facts.driver.modules) == (
        "580.159.04",
        True,
        None,
    )
    assert [g.name for g in facts.gpus] == ["NVIDIA H200"]
    assert facts.driver_is_hosts() and facts.tegra is False


def test_wsl_is_known_by_its_libraries_alone(machine):
    machine.write("usr/lib/wsl/lib/libcuda.so.1", "")
    assert probe_facts(machine).environment.kind == "wsl"


@pytest.mark.parametrize(
    ("setup", "name"),
    [
        (lambda m: m.docker(), "docker"),
        (lambda m: m.podman(), "podman"),
        (lambda m: m.write("proc/1/environ", "container=lxc\0TERM=linux\0"), "lxc"),
        (lambda m: m.write("run/systemd/container", "systemd-nspawn\n"), "systemd-nspawn"),
    ],
    ids=["docker", "podman", "lxc", "nspawn"],
)
def test_containers_by_the_files_systemd_detect_virt_reads(machine, setup, name):
    setup(machine)
    facts = probe_facts(machine)
    assert facts.environment is not None
    assert (facts.environment.kind, facts.environment.name) == ("container", name)
    assert facts.driver_is_hosts()


def test_vm_or_bare_metal_from_the_cpus_hypervisor_flag(machine):
    assert probe_facts(machine).environment is None  # no flags line: only systemd could tell
    flags = "processor\t: 0\nflags\t\t: fpu vme de pse tsc msr pae{}\n\n"
    machine.write("proc/cpuinfo", flags.format(" hypervisor"))
    assert probe_facts(machine).environment.kind == "vm"
    machine.write("proc/cpuinfo", flags.format(""))
    facts = probe_facts(machine)
    assert facts.environment.kind == "bare-metal" and not facts.driver_is_hosts()


def test_tegra_from_the_bsp_release_file(machine):
    machine.jetson()
    facts = probe_facts(machine)
    assert (facts.tegra, facts.l4t_release) == (True, "36.4.3")


def test_tegra_from_the_gpus_name_alone(machine, tmp_path):
    orin = {"index": 0, "name": "Orin (nvgpu)", "cc": [8, 7], "mem_total": 0, "pci": "0:0:0.0"}
    snapshot = machine.nvml_snapshot(tmp_path / "orin.json", [orin], "540.4.0", 12060)
    facts = probe_facts(machine, **{NVML_SNAPSHOT: str(snapshot)})
    assert (facts.tegra, facts.l4t_release) == (True, None)


# -- the plans ----------------------------------------------------------------------------------


def test_wsl_plans_no_driver_and_the_toolkit_from_wsl_ubuntu(machine):
    machine.wsl()
    plan = plan_json(machine)
    driver = plan["steps"][0]
    assert driver["status"] == "satisfied"
    assert driver["reason"] == "the host provides driver 580.159.04 (WSL): it runs CUDA 13.0"
    assert_no_driver_work(plan)
    keyring = next(
        a for s in plan["steps"] for a in s["actions"] if a["id"] == "nvidia-repo.keyring-download"
    )
    assert keyring["argv"][-1] == (
        "https://developer.download.nvidia.com/compute/cuda/repos/wsl-ubuntu/x86_64/"
        "cuda-keyring_1.1-1_all.deb"
    )
    installs = [a["argv"][-1] for a in step(plan, "toolkit")["actions"] if a["kind"] == "packages"]
    assert installs[-1] == "cuda-toolkit-13-0"  # the toolkit, never a driver


def test_docker_with_the_hosts_driver_plans_no_driver(machine):
    machine.docker()
    machine.gpu("0000:00:06.0", "0x2335")
    machine.driver_loaded("580.159.04")  # the host's /proc/driver/nvidia shows through
    machine.load_module("nouveau")  # the host's modules: not the container's to blacklist
    plan = plan_json(machine)
    assert plan["steps"][0]["status"] == "satisfied"
    assert (
        "the host provides driver 580.159.04 (this docker container)"
        in (plan["steps"][0]["reason"])
    )
    assert_no_driver_work(plan)
    assert not [w for w in plan["warnings"] if "nouveau" in w or "headers" in w]


def test_podman_without_the_gpus_passed_in_says_so_and_installs_nothing(machine):
    machine.podman()
    machine.gpu("0000:00:06.0", "0x2335")  # seen on PCI through /sys, but no driver answers
    plan = plan_json(machine, nvml=None)
    driver = plan["steps"][0]
    assert driver["status"] == "pending"
    assert "no NVIDIA driver answers in this podman container" in driver["reason"]
    assert "--device nvidia.com/gpu=all" in driver["reason"]
    assert_no_driver_work(plan)


def test_an_old_hosts_driver_is_updated_on_the_host_not_here(machine, tmp_path):
    machine.docker()
    gpu = {"index": 0, "name": "NVIDIA H200", "cc": [9, 0], "mem_total": 1, "pci": "0:0:6.0"}
    old = machine.nvml_snapshot(tmp_path / "old.json", [gpu], "535.216.01", 12020)
    plan = plan_json(
        machine, "--answers", str(_answers(tmp_path, 'torch.cuda = "cu130"')), nvml=old
    )
    driver = plan["steps"][0]
    assert driver["status"] == "pending" and "update the driver on the host" in driver["reason"]
    assert_no_driver_work(plan)


def test_an_old_hosts_driver_gets_the_newest_torch_it_runs(machine, tmp_path):
    """A rented container whose host runs driver 535 (CUDA 12.2): torch 2.15 has no build it
    runs, so the torch is the newest release that has one, and the driver step is satisfied."""
    machine.docker()
    gpu = {"index": 0, "name": "NVIDIA H200", "cc": [9, 0], "mem_total": 1, "pci": "0:0:6.0"}
    old = machine.nvml_snapshot(tmp_path / "old.json", [gpu], "535.216.01", 12020)
    plan = plan_json(machine, nvml=old)
    assert plan["steps"][0]["reason"] == (
        "the host provides driver 535.216.01 (this docker container): it runs CUDA 12.6"
    )
    assert "torch==2.14.*" in step(plan, "venv")["reason"]
    sync = next(a for a in step(plan, "venv")["actions"] if a["id"] == "venv.sync")
    assert sync["argv"][sync["argv"].index("--torch-backend") + 1] == "cu126"
    facts = probe_facts(machine, **{NVML_SNAPSHOT: str(old)})
    tried = builds_to_try(facts, answers_from_toml("version = 1\n", "answers"))
    assert tried[0] == "cu126" and not {"cu130", "cu132"} & set(tried)  # none the host runs


def test_installing_a_driver_in_wsl_is_refused(machine, tmp_path):
    machine.wsl()
    answers = _answers(tmp_path, 'driver.action = "install"')
    out = run_cli(
        "plan", "--root", str(machine.root), "--answers", str(answers),
        env={NVML_SNAPSHOT: str(H200_NVML)},
    )  # fmt: skip
    assert out.returncode == 2
    assert 'input error (answers): answers: driver.action = "install"' in out.stderr
    assert 'allowed: "auto" or "skip"' in out.stderr


def test_a_jetson_is_refused_before_anything_and_probed_as_one(machine):
    machine.jetson()
    out = run_cli("plan", "--root", str(machine.root))
    assert out.returncode == 2, out.stdout
    assert "input error (facts): facts: tegra = true" in out.stderr
    assert "L4T 36.4.3" in out.stderr and "the JetPack BSP provides the driver" in out.stderr
    probed = run_cli("probe", "--root", str(machine.root))
    assert probed.returncode == 0 and "a Tegra board (L4T 36.4.3)" in probed.stdout


@pytest.mark.parametrize("where", ["wsl", "docker"])
def test_the_engine_walks_the_plan_with_no_reboot_and_no_resume_unit(machine, tmp_path, where):
    """A dry run through the real engine: the same root a bare server would reboot in (the
    driver install pauses there) runs straight through in WSL or a container."""
    answers = tmp_path / "answers.toml"
    answers.write_text("version = 1\n")
    machine.gpu("0000:00:06.0", "0x2335")  # WSL shows no PCI GPU, but a bare box would
    args = ("apply", "--dry-run", "--answers", str(answers), "--root", str(machine.root))
    bare = run_cli(*args)
    assert bare.returncode == 0 and "would reboot here" in bare.stdout, bare.stderr
    getattr(machine, where)()
    if where == "docker":
        machine.driver_loaded("580.159.04")
    out = run_cli(*args, env={NVML_SNAPSHOT: str(H200_NVML)})
    assert out.returncode == 0, out.stderr
    assert "the host provides driver 580.159.04" in out.stdout
    assert "reboot" not in out.stdout.lower()
    assert not (machine.root / "etc/systemd/system").exists()


def test_the_wizards_driver_screen_says_the_driver_is_the_hosts(machine, tmp_path):
    machine.wsl()
    facts = tmp_path / "wsl.json"
    facts.write_text(probe_facts(machine, **{NVML_SNAPSHOT: str(H200_NVML)}).to_json())
    session = Session.load(facts=facts)
    said = DriverController(session, "driver").existing()
    assert said[-1] == (
        "The driver is the host's (WSL): mlsetup never installs one here, nor touches kernel "
        "modules or reboots."
    )
    assert not [line for line in said if line.startswith("Wanted: branch")]


# -- recorded facts ------------------------------------------------------------------------------


@pytest.mark.parametrize("recorded", sorted(MACHINES.glob("*.json")), ids=lambda p: p.stem)
def test_facts_recorded_before_these_keys_still_load_as_unknown(recorded):
    facts = load_facts(recorded)
    assert "environment" not in json.loads(recorded.read_text())
    assert (facts.environment, facts.tegra, facts.l4t_release) == (None, None, None)
    assert not facts.driver_is_hosts()  # unknown: planned as the server it was recorded on


def test_the_new_keys_round_trip_and_a_wrong_one_names_itself(machine):
    machine.wsl()
    facts = probe_facts(machine, **{NVML_SNAPSHOT: str(H200_NVML)})
    assert facts_from_json(facts.to_json(), "wsl.json") == facts
    data = json.loads(facts.to_json())
    data["environment"]["kind"] = "chroot"
    with pytest.raises(Exception, match=r"environment\.kind") as refused:
        facts_from_json(json.dumps(data), "wsl.json")
    assert "'bare-metal', 'vm', 'container' or 'wsl'" in str(refused.value)


def _answers(tmp_path: Path, line: str) -> Path:
    section, _, rest = line.partition(".")
    path = tmp_path / "answers.toml"
    path.write_text(f"version = 1\n[{section}]\n{rest}\n")
    return path
