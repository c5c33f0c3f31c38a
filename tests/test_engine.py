"""The engine against a fake server: real processes, stand-in system commands, real uv."""

from __future__ import annotations

import json
import subprocess

from steps.events import ActionFinished, ActionStarted, Failed, Finished, RebootNeeded
from tests.harness import USER_UID, FakeServer, mode

DRIVER_STEP = ["apt-get update", "apt-get linux-headers-6.8.0-49-generic",
               "curl https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/"
               "cuda-keyring_1.1-1_all.deb",
               "dpkg /var/cache/mlsetup/cuda-keyring_1.1-1_all.deb", "apt-get update",
               "install /etc/modprobe.d/mlsetup-blacklist-nouveau.conf", "update-initramfs -u",
               "apt-get nvidia-driver-pinning-580", "apt-get nvidia-open"]


def test_fresh_box_driver_reboot_resume_toolkit_venv_extension_then_nothing(server: FakeServer):
    first = server.mlsetup("apply", "--answers", str(server.answers))
    assert first.returncode == 10, first.stdout + first.stderr
    assert server.commands() == DRIVER_STEP
    assert "reboot needed after driver.install" in first.stdout
    assert "sudo mlsetup apply --resume" in first.stdout
    assert server.state_file()["phase"] == "reboot"

    # resuming before the reboot happened: still paused
    early = server.mlsetup("apply", "--resume")
    assert early.returncode == 10 and "has not rebooted yet" in early.stdout

    server.reboot()
    second = server.mlsetup("apply", "--resume")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "rebooted; NVIDIA driver 580.105.08 is loaded" in second.stdout
    after_reboot = server.commands()[len(DRIVER_STEP) + 1:]  # +1: the reboot itself
    assert after_reboot == ["apt-get cuda-toolkit-13-0"]  # the repo was set up before

    # the venv is real, made by uv as the invoking user, with the index's torch
    assert (server.venv / "bin" / "python").exists()
    assert server.venv.stat().st_uid == USER_UID
    assert all(p.stat().st_uid == USER_UID for p in server.venv.rglob("*") if not p.is_symlink())
    out = subprocess.run([str(server.venv / "bin/python"), "-c",
                          "import tinyext, torch; print(tinyext.BUILD); print(torch.__version__)"],
                         capture_output=True, text=True, check=True)
    build = eval(out.stdout.splitlines()[0])  # noqa: S307 - our own fixture's repr
    assert build["torch"] == "2.14.0+cu130"  # the build imported the venv's torch
    assert build["CUDA_HOME"] == "/usr/local/cuda-13.0"
    path = build["PATH"].split(":")  # uv puts the venv's bin first; then the plan's PATH
    assert path.index("/usr/local/cuda-13.0/bin") < path.index("/usr/bin")
    assert build["MAX_JOBS"].isdigit() and build["NVCC_THREADS"] == "1"

    report = server.report()
    assert report["result"] == "done" and report["changed"] is True
    assert "venv.create" in report["ran"] and "extensions.tinyext.build" in report["ran"]
    state_dir = server.root / "var/lib/mlsetup"
    assert mode(state_dir / "state.json") == 0o600 and mode(state_dir) == 0o700
    assert mode(server.root / "var/log/mlsetup") == 0o700
    for log in (server.root / "var/log/mlsetup").rglob("*.log"):
        assert mode(log) == 0o600, log

    # a second run on the finished machine runs nothing and says why for each step
    calls_before = len(server.calls())
    third = server.mlsetup("apply", "--answers", str(server.answers))
    assert third.returncode == 0, third.stdout
    assert len(server.calls()) == calls_before
    for step in ("driver", "toolkit", "venv", "extensions"):
        assert f"{step:<11} ✓" in third.stdout
    assert server.report()["changed"] is False and server.report()["ran"] == []


def test_failing_action_stops_with_diagnosis_and_resumes_there(server: FakeServer):
    server.machine.driver_loaded("580.105.08")
    server.script({"apt-get cuda-toolkit-13-0": {
        "exit": 100, "output": "E: Unable to correct problems, you have held broken packages."}})
    run = server.mlsetup("apply", "--answers", str(server.answers))
    assert run.returncode == 1, run.stdout + run.stderr
    report = server.report()
    failure = report["failure"]
    assert failure["action"] == "toolkit.install-13.0" and failure["exit_code"] == 100
    assert failure["diagnosis"] == "apt-broken"
    assert failure["log"].endswith("/toolkit.install-13.0.log")
    assert "held broken packages" in (server.root / failure["log"].lstrip("/")).read_text() \
        if not failure["log"].startswith(str(server.root)) else True
    assert "why:" in run.stdout and "next:" in run.stdout and "log:" in run.stdout
    assert not server.venv.exists()  # nothing after the failed action ran
    state = server.state_file()
    assert state["phase"] == "failed"
    assert state["actions"]["toolkit.install-13.0"]["status"] == "failed"
    assert state["actions"]["nvidia-repo.update"]["status"] == "done"

    server.script({})
    before = len(server.calls())
    again = server.mlsetup("apply", "--resume")
    assert again.returncode == 0, again.stdout
    rerun = server.commands()[before:]
    assert rerun == ["apt-get cuda-toolkit-13-0"]  # the done actions were not repeated
    assert "done in an earlier run" in again.stdout


def test_events_tell_the_whole_story(server: FakeServer):
    server.machine.driver_loaded("580.105.08")
    run = server.mlsetup("apply", "--answers", str(server.answers))
    assert run.returncode == 0, run.stdout + run.stderr
    events = server.events()
    assert isinstance(events[-1], Finished) and events[-1].code == 0
    started = [e.action for e in events if isinstance(e, ActionStarted)]
    ended = [e.action for e in events if isinstance(e, ActionFinished)]
    assert started == ended
    assert not any(isinstance(e, (Failed, RebootNeeded)) for e in events)
    assert json.loads(events[1].to_json())["kind"] == "plan"
