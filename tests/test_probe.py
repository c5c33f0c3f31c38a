"""The probe against fake machine roots, against the recorded H200, and against this machine."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from steps.core.rootfs import RootFS
from steps.core.settings import NVML_SNAPSHOT as NVML_SNAPSHOT_ENV
from steps.formats.facts import Facts, facts_from_json
from steps.probing.probe import probe
from tests.common import FIXTURES, as_a_user, run_cli
from tests.fakemachine import FakeMachine

H200_NVML = FIXTURES / "h200-nvml.json"  # NVML as read on the real H200 server


def probe_facts(machine: FakeMachine, **env: str) -> Facts:
    return probe(RootFS(machine.root), env=env).facts


def test_no_driver_gpus_come_from_pci_with_the_device_table(machine):
    machine.gpu("0000:41:00.0", "0x2bb1")  # RTX PRO 6000 Blackwell Workstation
    machine.gpu("0000:01:00.0", "0x2335")  # H200
    machine.gpu("0000:81:00.0", "0x9999")  # a GPU newer than the table
    machine.pci_device("0000:41:00.1", "0x10de", "0x22e8", "0x040300")  # its HDMI audio
    machine.pci_device("0000:00:02.0", "0x8086", "0x0c00", "0x030000")  # Intel graphics
    facts = probe_facts(machine)
    assert facts.driver is None
    assert [(g.pci_bus_id, g.name, g.compute_capability, g.source) for g in facts.gpus] == [
        ("0000:01:00.0", "NVIDIA H200", "9.0", "pci"),
        ("0000:41:00.0", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0", "pci"),
        ("0000:81:00.0", None, None, "pci"),
    ]
    assert [g.index for g in facts.gpus] == [0, 1, 2]
    assert facts.os.id == "ubuntu" and facts.os.version_id == "24.04"
    assert facts.os.codename == "noble" and facts.os.pretty == "Ubuntu 24.04.3 LTS"
    assert facts.secure_boot == "disabled"  # no EFI: booted by BIOS
    assert facts.cpu.logical == 16
    assert facts.memory.total_bytes == 64 * 2**30


def test_no_gpu_at_all(machine):
    machine.pci_device("0000:00:02.0", "0x1af4", "0x1000", "0x020000")
    result = probe(RootFS(machine.root), env={})
    assert result.facts.gpus == [] and result.facts.driver is None
    assert result.notes == []


def test_secure_boot_from_efivars(machine):
    machine.secure_boot(True)
    assert probe_facts(machine).secure_boot == "enabled"
    machine.secure_boot(False)
    assert probe_facts(machine).secure_boot == "disabled"


def _stand_in(bindir: Path, name: str, script: str) -> None:
    bindir.mkdir(parents=True, exist_ok=True)
    path = bindir / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def test_secure_boot_from_mokutil_when_efivars_are_unreadable(machine, tmp_path, monkeypatch):
    (machine.root / "sys/firmware/efi/efivars").mkdir(parents=True)
    _stand_in(tmp_path / "bin", "mokutil", 'echo "SecureBoot enabled"\n')
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    assert probe_facts(machine).secure_boot == "enabled"
    _stand_in(tmp_path / "bin", "mokutil", 'echo "EFI variables are not supported" >&2; exit 1\n')
    assert probe_facts(machine).secure_boot == "disabled"
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert probe_facts(machine).secure_boot == "unknown"


def test_nouveau_and_kernel_headers(machine):
    facts = probe_facts(machine)
    assert facts.nouveau_loaded is False
    assert facts.kernel.release == "6.8.0-49-generic"
    assert facts.kernel.headers_installed is False
    machine.load_module("nouveau")
    machine.kernel_headers()
    facts = probe_facts(machine)
    assert facts.nouveau_loaded is True and facts.kernel.headers_installed is True


def test_driver_with_nvml_snapshot_matches_the_real_h200(machine, tmp_path):
    machine.gpu("0000:00:06.0", "0x2335")
    machine.driver_loaded("580.159.04", open_modules=True)
    facts = probe_facts(machine, **{NVML_SNAPSHOT_ENV: str(H200_NVML)})
    assert facts.driver is not None
    assert (
        facts.driver.version,
        facts.driver.cuda_max,
        facts.driver.modules,
        facts.driver.loaded,
    ) == ("580.159.04", "13.0", "open", True)
    (gpu,) = facts.gpus
    assert (gpu.name, gpu.compute_capability, gpu.pci_bus_id, gpu.pci_device_id, gpu.source) == (
        "NVIDIA H200",
        "9.0",
        "0000:00:06.0",
        "0x2335",
        "nvml",
    )
    assert gpu.memory_bytes == 150754820096


def test_nvml_present_but_failing_falls_back_to_pci_and_the_driver_table(machine, tmp_path):
    machine.gpu("0000:00:06.0", "0x2335")
    machine.driver_loaded("535.216.01", open_modules=False)
    snapshot = tmp_path / "nvml.json"
    snapshot.write_text(
        json.dumps({"error": "NVML did not start: Driver/library version mismatch"})
    )
    result = probe(RootFS(machine.root), env={NVML_SNAPSHOT_ENV: str(snapshot)})
    facts = result.facts
    assert facts.driver is not None
    assert (facts.driver.version, facts.driver.modules) == ("535.216.01", "proprietary")
    assert facts.driver.cuda_max == "12.2"  # from the minimum-driver table
    assert facts.gpus[0].source == "pci" and facts.gpus[0].compute_capability == "9.0"
    assert any("version mismatch" in n for n in result.notes)


def test_toolkits_side_by_side(machine):
    machine.toolkit("12.8", "12.8.93")
    machine.toolkit("13.1", "13.1.80")
    (machine.root / "usr/local/cuda-13").symlink_to("cuda-13.1")
    (machine.root / "usr/local/cuda").symlink_to("cuda-13.1")
    # a toolkit without version.json: nvcc says which it is
    _stand_in(
        machine.root / "usr/local/cuda-11.8/bin",
        "nvcc",
        'echo "Cuda compilation tools, release 11.8, V11.8.89"\n',
    )
    facts = probe_facts(machine)
    assert [(t.version, t.path) for t in facts.toolkits] == [
        ("11.8", "/usr/local/cuda-11.8"),
        ("12.8", "/usr/local/cuda-12.8"),
        ("13.1", "/usr/local/cuda-13.1"),
    ]


def test_invoking_user_and_pythons(machine):
    (machine.root / "usr/bin").mkdir(parents=True)
    (machine.root / "usr/bin/python3.11").symlink_to(shutil.which("python3.11") or sys.executable)
    (machine.root / "usr/bin/python3").symlink_to("python3.11")
    facts = probe_facts(machine, SUDO_USER="alice")
    assert facts.user is not None
    assert (facts.user.name, facts.user.home, facts.user.uid) == ("alice", "/home/alice", 1000)
    (py,) = facts.pythons
    assert py.path == "/usr/bin/python3.11" and py.version.startswith("3.11.")
    if os.getuid() == 0:
        assert probe_facts(machine).user.name == "root"


def test_this_machine_gives_valid_facts_through_the_cli():
    out = run_cli("probe", "--json")
    assert out.returncode == 0, out.stderr
    facts = facts_from_json(out.stdout, "probe")
    assert json.loads(out.stdout).keys() == json.loads(facts.to_json()).keys()
    assert facts.cpu.logical and facts.cpu.logical >= 1
    assert facts.memory.total_bytes and facts.memory.total_bytes > 2**30
    assert facts.os.id and facts.kernel.release and facts.boot_id


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to drop to another account")
def test_this_machine_as_a_non_root_user():
    """Drop to nobody, probe: nothing needs root (efivars and NVML may be unreadable)."""
    text = as_a_user(lambda: probe(RootFS(), env={}).facts.to_json())
    facts = facts_from_json(text, "child")
    assert facts.user is None or facts.user.uid == 65534
    assert facts.memory.total_bytes


def test_probe_text_summary_through_the_cli(machine):
    machine.gpu("0000:00:06.0", "0x2335")
    machine.load_module("nouveau")
    out = run_cli("probe", "--root", str(machine.root))
    assert out.returncode == 0, out.stderr
    assert "NVIDIA H200 (compute 9.0)" in out.stdout
    assert "Driver      none loaded" in out.stdout
    assert "warning: the nouveau driver is loaded" in out.stdout
    assert "warning: kernel headers for 6.8.0-49-generic are missing" in out.stdout
