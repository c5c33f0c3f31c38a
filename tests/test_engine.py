"""The engine against a fake server: real processes, stand-in system commands, real uv."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from app.cli import run
from steps.apply.engine import ApplyLock
from steps.core.rootfs import RootFS
from steps.formats.events import (
    ActionFinished,
    ActionStarted,
    Failed,
    Finished,
    Notice,
    RebootNeeded,
    RunStarted,
)
from steps.planning import registry
from steps.stack.venvstate import probe_venv
from tests.common import FIXTURES, MACHINES, skip_unless_others_reach
from tests.harness import (
    DRIVER_STEP,
    SYSTEM_PATH,
    USER_UID,
    FakeServer,
    install_extension,
    mode,
    wait_for,
)
from tests.wheels import STANDIN_TORCH, torch_index


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
    after_reboot = server.commands()[len(DRIVER_STEP) + 1 :]  # +1: the reboot itself
    assert "apt-get cuda-toolkit-13-0" in after_reboot
    # the repo was set up before (a step between the driver and the toolkit may add its own)
    repo = [c for c in after_reboot if c.split()[0] in ("curl", "dpkg") or c == "apt-get update"]
    assert not repo, after_reboot

    # the venv is real, made by uv as the invoking user, with the index's torch
    assert (server.venv / "bin" / "python").exists()
    assert server.venv.stat().st_uid == USER_UID
    assert all(p.stat().st_uid == USER_UID for p in server.venv.rglob("*") if not p.is_symlink())
    out = subprocess.run(
        [
            str(server.venv / "bin/python"),
            "-c",
            "import tinyext, torch; print(tinyext.BUILD); print(torch.__version__)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    build = eval(out.stdout.splitlines()[0])
    assert build["torch"] == f"{STANDIN_TORCH}+cu130"  # the build imported the venv's torch
    assert build["CUDA_HOME"] == "/usr/local/cuda-13.0"
    path = build["PATH"].split(":")  # uv puts the venv's bin first; then the plan's PATH
    assert path.index("/usr/local/cuda-13.0/bin") < path.index("/usr/bin")
    assert build["NVCC_THREADS"] == "1"
    # compiled under the memory governor: no -j from torch, tokens from its jobserver FIFO,
    # which the build's account can use
    assert build["MAX_JOBS"] == "governed" and "--jobserver-auth=fifo:" in build["MAKEFLAGS"]
    assert build["jobserver_usable"] is True
    assert f"tinyext built against torch {STANDIN_TORCH}+cu130" in second.stdout or any(
        "tinyext built against torch" in line.read_text()
        for line in (server.root / "var/log/mlsetup").rglob("extensions.tinyext.smoke.log")
    )
    # the wheel is kept for the next venv or host
    cached = list((server.root / "var/cache/mlsetup/wheels").glob("tinyext-0.1.0_*/*.whl"))
    assert len(cached) == 1

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
    for step in registry.step_names():
        assert f"{step:<{registry.label_width()}} ✓" in third.stdout
    assert server.report()["changed"] is False and server.report()["ran"] == []


def test_failing_action_stops_with_diagnosis_and_resumes_there(server: FakeServer):
    server.machine.driver_loaded("580.105.08")
    server.script(
        {
            "apt-get cuda-toolkit-13-0": {
                "exit": 100,
                "output": "E: Unable to correct problems, you have held broken packages.",
            }
        }
    )
    run = server.mlsetup("apply", "--answers", str(server.answers))
    assert run.returncode == 1, run.stdout + run.stderr
    report = server.report()
    failure = report["failure"]
    assert failure["action"] == "toolkit.install-13.0" and failure["exit_code"] == 100
    assert failure["diagnosis"] == "apt-broken"
    assert failure["log"].endswith("/toolkit.install-13.0.log")
    assert (
        "held broken packages" in (server.root / failure["log"].lstrip("/")).read_text()
        if not failure["log"].startswith(str(server.root))
        else True
    )
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
    # an action two steps share (NVIDIA's repository) is "already-done" the second time
    ended = [
        e.action for e in events if isinstance(e, ActionFinished) and e.status != "already-done"
    ]
    assert started == ended
    assert not any(isinstance(e, (Failed, RebootNeeded)) for e in events)
    # the stack is resolved first (its uv runs are actions too), then the plan, then the steps
    kinds = [json.loads(e.to_json())["kind"] for e in events]
    first_step = next(
        i
        for i, e in enumerate(events)
        if isinstance(e, ActionStarted) and not e.action.startswith("venv.resolve")
    )
    assert kinds[0] == "run-start" and kinds.index("plan") < first_step


def _engine_pid(server: FakeServer) -> int:
    return [e for e in server.events() if isinstance(e, RunStarted)][-1].pid


def _finish(server: FakeServer) -> subprocess.CompletedProcess:
    """Resume until done, rebooting when the engine asks for it."""
    for _ in range(4):
        run = server.mlsetup("apply", "--resume")
        if run.returncode != 10:
            return run
        server.reboot()
    raise AssertionError("never finished")


def test_kill_9_in_each_step_resumes_without_repeating_finished_actions(server: FakeServer):
    """kill -9 of the engine while a step's action runs; the re-run finishes the job and no
    action that had finished before a kill runs again."""
    server.script(
        {
            "apt-get linux-headers-6.8.0-49-generic": {"sleep": 1.5},
            "apt-get cuda-toolkit-13-0": {"sleep": 1.5},
        }
    )
    kill_in = [
        "driver.prerequisites",
        "toolkit.install-13.0",
        "venv.sync",
        "extensions.tinyext.build",
    ]
    for action in kill_in:
        viewer = (
            server.popen("apply", "--answers", str(server.answers))
            if action == kill_in[0]
            else server.popen("apply", "--resume")
        )
        # wait_for calls them before the loop moves on: the loop variables are this round's
        wait_for(lambda: server.started(action) or viewer.poll() is not None)  # noqa: B023
        if viewer.poll() == 10:  # paused for the reboot before reaching this step
            server.reboot()
            viewer = server.popen("apply", "--resume")
            wait_for(lambda: server.started(action))  # noqa: B023
        os.kill(_engine_pid(server), signal.SIGKILL)
        viewer.wait(timeout=30)
        wait_for(server.apply_lock_free)  # holder() is None for a lock file not yet made
    final = _finish(server)
    assert final.returncode == 0, final.stdout + final.stderr

    events = server.events()
    starts: dict[str, int] = {}
    finished_at: dict[str, int] = {}
    for i, e in enumerate(events):
        if isinstance(e, ActionStarted):
            assert e.action not in finished_at, f"{e.action} ran again after it had finished"
            starts[e.action] = starts.get(e.action, 0) + 1
        elif isinstance(e, ActionFinished) and e.status == "done":
            finished_at.setdefault(e.action, i)
    for action in kill_in:  # each interrupted one ran at most once more (or its orphaned
        assert starts[action] <= 2, action  # process finished it and the re-probe saw that)

    venv = probe_venv(RootFS(server.root), str(server.venv))
    assert venv is not None
    assert venv.version_of("torch") == f"{STANDIN_TORCH}+cu130"
    assert venv.version_of("tinyext") == "0.1.0"
    assert (server.venv / "bin/python").exists()


def _hold_dpkg_lock(server: FakeServer) -> int:
    """Hold the dpkg frontend lock as unattended-upgrades does after boot; returns the fd."""
    lock = server.root / "var/lib/dpkg/lock-frontend"
    lock.parent.mkdir(parents=True)
    lock.touch()
    fd = os.open(lock, os.O_RDWR)
    fcntl.lockf(fd, fcntl.LOCK_EX)
    return fd


def test_dpkg_lock_held_briefly_waits_then_proceeds(server: FakeServer):
    server.machine.driver_loaded("580.105.08")
    fd = _hold_dpkg_lock(server)

    def release() -> None:  # 2 s after the stack is resolved, as the first apt action waits
        wait_for(lambda: any(e.kind == "plan" for e in _events_or_none(server)))
        time.sleep(2.0)
        os.close(fd)

    releaser = threading.Thread(target=release)
    releaser.start()
    run = server.mlsetup("apply", "--answers", str(server.answers))
    releaser.join()
    assert run.returncode == 0, run.stdout
    assert "the dpkg lock is held by" in run.stdout and "waiting up to 20s" in run.stdout


def _events_or_none(server: FakeServer) -> list:
    try:
        return server.events()
    except (FileNotFoundError, ValueError):
        return []


def test_dpkg_lock_held_past_the_timeout_fails_clearly(server: FakeServer):
    server.machine.driver_loaded("580.105.08")
    fd = _hold_dpkg_lock(server)
    try:
        run = server.mlsetup(
            "apply", "--answers", str(server.answers), MLSETUP_DPKG_LOCK_TIMEOUT="1"
        )
    finally:
        os.close(fd)
    assert run.returncode == 1
    # the holder named: this test's own process holds it
    name = Path(f"/proc/{os.getpid()}/comm").read_text().strip()
    held = f"the dpkg lock was still held after 1s, by {name} (pid {os.getpid()}: "
    # its command line as /proc has it (under xdist a worker's is python -c ..., not pytest)
    argv0 = Path(f"/proc/{os.getpid()}/cmdline").read_bytes().split(b"\0")[0].decode()
    assert held in run.stdout and argv0 in run.stdout.split(held)[1].splitlines()[0]
    assert server.report()["failure"]["diagnosis"] == "dpkg-lock"
    assert [c for c in server.calls() if c["cmd"] in ("apt-get", "dpkg")] == []


def test_interrupted_dpkg_is_reported_with_the_fix(server: FakeServer):
    updates = server.root / "var/lib/dpkg/updates"
    updates.mkdir(parents=True)
    (updates / "0001").write_text("")
    run = server.mlsetup("apply", "--answers", str(server.answers))
    assert run.returncode == 1
    assert "sudo dpkg --configure -a" in run.stdout


def test_viewer_killed_engine_finishes_and_attach_replays(server: FakeServer):
    server.machine.driver_loaded("580.105.08")
    server.script({"apt-get cuda-toolkit-13-0": {"sleep": 2}})
    viewer = server.popen("apply", "--answers", str(server.answers))
    wait_for(lambda: server.started("toolkit.install-13.0"))
    engine = _engine_pid(server)
    os.killpg(viewer.pid, signal.SIGHUP)  # the SSH session drops
    out, _ = viewer.communicate(timeout=30)
    assert "keeps running in the background" in out
    assert os.path.exists(f"/proc/{engine}")  # the work goes on
    wait_for(server.apply_lock_free, timeout=120)
    assert server.report()["result"] == "done"

    attach = server.mlsetup("attach")
    assert attach.returncode == 0, attach.stdout + attach.stderr
    assert "mlsetup starting" in attach.stdout  # replayed from the start
    assert "toolkit.install-13.0 in" in attach.stdout
    assert "done: every step is satisfied" in attach.stdout


def test_attach_follows_a_running_apply_live(server: FakeServer):
    server.machine.driver_loaded("580.105.08")
    server.script({"apt-get cuda-toolkit-13-0": {"sleep": 2}})
    engine = server.popen("apply", "--answers", str(server.answers), "--foreground")
    wait_for(lambda: server.started("toolkit.install-13.0"))
    attach = server.mlsetup("attach")
    assert attach.returncode == 0
    assert "extensions.tinyext.build in" in attach.stdout  # it saw the rest as it happened
    assert engine.wait(timeout=60) == 0


def test_second_apply_while_one_runs_exits_4(server: FakeServer):
    lock = ApplyLock(server.root / "var/lib/mlsetup/apply.lock")
    lock.acquire()
    try:
        run = server.mlsetup("apply", "--answers", str(server.answers))
    finally:
        lock.release()

    assert run.returncode == 4
    assert f"pid {os.getpid()}" in run.stderr and "mlsetup attach" in run.stderr


def test_corrupt_state_is_kept_aside_and_reported(server: FakeServer):
    server.machine.driver_loaded("580.105.08")
    state = server.root / "var/lib/mlsetup/state.json"
    state.parent.mkdir(parents=True)
    state.write_text('{"schema": "mlsetup.state/1", "run_id": ')  # a torn write
    run = server.mlsetup("apply", "--answers", str(server.answers))
    assert run.returncode == 2, run.stdout + run.stderr  # nothing ran: the operator is told
    kept = list(state.parent.glob("state.json.corrupt-*"))
    assert len(kept) == 1 and kept[0].read_text().endswith('"run_id": ')
    assert f"moved it to {kept[0]}" in run.stderr and "next apply starts fresh" in run.stderr
    assert server.mlsetup("apply", "--answers", str(server.answers)).returncode == 0


def test_under_systemd_a_transient_unit_then_a_resume_unit_keep_the_operators_run(
    server: FakeServer,
):
    (server.root / "run/systemd/system").mkdir(parents=True)
    server.write_answers(policy="auto")
    # harmless stand-ins for an operator's proxy and index settings (a real proxy would be
    # used by uv here): carried the same way
    first = server.mlsetup(
        "apply",
        "--answers",
        str(server.answers),
        no_proxy="mirror.internal.example",
        UV_HTTP_TIMEOUT="61",
    )
    assert first.returncode == 10, first.stdout
    # the engine ran as a transient unit, which starts with systemd's bare environment: what the
    # run needs was handed over in a root-only file, never on a command line or in the unit
    [unit_start] = [c for c in server.calls() if c["cmd"] == "systemd-run"]
    assert unit_start["args"][0].startswith("--unit=mlsetup-apply-")
    assert not any("mluser" in a or "mirror" in a or "61" in a for a in unit_start["args"][:-1])
    assert not list((server.root / "var/lib/mlsetup").glob("environment-*"))  # taken
    kept = server.state_file()["environment"]
    assert kept["SUDO_USER"] == "mluser" and kept["no_proxy"] == "mirror.internal.example"
    assert kept["UV_HTTP_TIMEOUT"] == "61" and kept["PATH"].startswith(str(server.bin))
    assert mode(server.root / "var/lib/mlsetup/state.json") == 0o600
    # the engine reports the pause, then reboots: the viewer may be back before the reboot ran
    wait_for(server.apply_lock_free)
    unit = server.root / "etc/systemd/system/mlsetup-resume.service"
    # the installed mlsetup that wrote it (here the test venv's console script), wherever it is
    installed = Path(sys.executable).parent / "mlsetup"
    assert f"ExecStart={installed} apply --resume --foreground" in unit.read_text()
    assert server.commands()[-2:] == ["systemctl mlsetup-resume.service", "reboot"]
    # the machine rebooted (the stand-in did it); systemd starts the enabled unit, with no
    # SUDO_USER, no proxy, no PATH to the stand-ins: the run's own environment comes back
    wants = server.root / "etc/systemd/system/multi-user.target.wants/mlsetup-resume.service"
    assert wants.exists()
    boot = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "apply",
            "--resume",
            "--foreground",
            "--root",
            str(server.root),
        ],
        capture_output=True,
        text=True,
        env={"PATH": SYSTEM_PATH},
        cwd="/",
        timeout=300,
    )
    assert boot.returncode == 0, boot.stdout + boot.stderr
    assert not unit.exists() and not wants.exists()  # removed itself when done
    # the venv is the operator's, in their home, not root's
    assert (server.venv / "bin/python").exists() and server.venv.stat().st_uid == USER_UID


def test_when_systemd_refuses_the_unit_the_engine_runs_detached_anyway(server: FakeServer):
    (server.root / "run/systemd/system").mkdir(parents=True)
    server.script({"systemd-run": {"exit": 1, "output": "Failed to connect to bus"}})
    # what an engine that died before its start left, an hour ago: cleared, being of no use
    stale = server.root / "var/lib/mlsetup/environment-0123456789abcdef.json"
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    first = server.mlsetup("apply", "--answers", str(server.answers))
    assert not stale.exists()
    assert first.returncode == 10, first.stdout + first.stderr
    assert server.commands()[0].startswith("systemd-run")
    assert server.commands()[1:] == DRIVER_STEP
    log = server.root / "var/log/mlsetup/engine.log"
    assert "Failed to connect to bus" in log.read_text() and mode(log) == 0o600


def test_a_new_apply_of_the_same_answers_brings_its_own_environment(server: FakeServer):
    first = server.mlsetup("apply", "--answers", str(server.answers), UV_HTTP_TIMEOUT="61")
    assert first.returncode == 10
    assert server.state_file()["environment"]["UV_HTTP_TIMEOUT"] == "61"
    # the operator fixes a setting and starts again with the same answers: the paused run is
    # picked up (still waiting for its reboot) and keeps the new value for the resume unit
    early = server.mlsetup("apply", "--answers", str(server.answers), UV_HTTP_TIMEOUT="99")
    assert early.returncode == 10 and "has not rebooted yet" in early.stdout
    assert server.state_file()["environment"]["UV_HTTP_TIMEOUT"] == "99"
    server.reboot()
    again = server.mlsetup("apply", "--resume")
    assert again.returncode == 0, again.stdout
    assert "rebooted; NVIDIA driver 580.105.08 is loaded" in again.stdout
    # finished: nothing will resume it, so none of the operator's settings are kept
    assert server.state_file()["phase"] == "done" and server.state_file()["environment"] == {}


def test_of_two_engines_of_one_start_only_the_one_that_took_the_handover_runs(server: FakeServer):
    # systemd-run can fail after it started the unit; the fallback process then starts too
    ticket = "ab" * 16
    handover = server.root / f"var/lib/mlsetup/environment-{ticket}.json"
    handover.parent.mkdir(parents=True)
    handover.write_text(json.dumps({"SUDO_USER": "mluser"}))
    args = ("apply", "--answers", str(server.answers), "--foreground", "--ticket", ticket)
    first = server.mlsetup(*args)
    assert first.returncode == 10 and not handover.exists()
    calls = len(server.calls())
    second = server.mlsetup(*args)
    assert second.returncode == 0 and "already running elsewhere" in second.stderr
    assert len(server.calls()) == calls  # it ran nothing


def test_secure_boot_refused_module_after_reboot(server: FakeServer):
    server.machine.secure_boot(True)
    server.set_machine(mok_not_enrolled=True)
    first = server.mlsetup("apply", "--answers", str(server.answers))
    assert first.returncode == 10
    assert "mokutil --import" in first.stdout  # said before the reboot, in the plan
    server.reboot()
    run = server.mlsetup("apply", "--resume")
    assert run.returncode == 1
    assert "no NVIDIA driver is loaded; expected branch 580" in run.stdout
    assert server.report()["failure"]["diagnosis"] == "secure-boot-rejected"
    assert "Key was rejected by service" in run.stdout
    assert "mokutil --import /var/lib/shim-signed/mok/MOK.der" in run.stdout


def test_dry_run_executes_nothing_and_writes_nothing(server: FakeServer):
    run = server.mlsetup("apply", "--answers", str(server.answers), "--dry-run")
    assert run.returncode == 0, run.stdout + run.stderr
    assert server.calls() == []
    assert not (server.root / "var/lib/mlsetup").exists()
    assert "dry run: the machine would reboot here" in run.stdout
    assert run.stdout.count("(dry run: not executed)") >= 10


def test_apply_without_root_exits_3():
    """As an account that is not root: root drops to nobody for it; a user already is one."""
    skip_unless_others_reach(MACHINES, "nobody reads the answers example and the assets")
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            try:
                run(["apply", "--answers", str(MACHINES.parent / "answers.example.toml")])
            except Exception as exc:
                code = getattr(exc, "exit_code", 98)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 3


def test_bad_answers_exit_2_before_anything_runs(server: FakeServer):
    server.answers.write_text('version = 1\n[reboot]\npolicy = "whenever"\n')
    run = server.mlsetup("apply", "--answers", str(server.answers))
    assert run.returncode == 2
    assert "reboot.policy" in run.stderr and "'ask', 'auto' or 'never'" in run.stderr
    assert server.calls() == [] and not (server.root / "var/lib/mlsetup").exists()


def test_a_second_venv_gets_the_extension_from_the_wheel_cache(server: FakeServer):
    server.machine.driver_loaded("580.105.08")
    assert server.mlsetup("apply", "--answers", str(server.answers)).returncode == 0
    server.write_answers(venv="~/second-env")
    run = server.mlsetup("apply", "--answers", str(server.answers))
    assert run.returncode == 0, run.stdout
    ran = server.report()["ran"]
    assert "extensions.tinyext.install-wheel" in ran and "extensions.tinyext.build" not in ran
    assert (server.home / "second-env/bin/python").exists()


def test_wheelhouse_publishes_for_the_next_host(server: FakeServer, tmp_path_factory):
    wheelhouse = server.base / "wheelhouse"
    wheelhouse.mkdir()
    os.chmod(wheelhouse, 0o755)
    server.machine.driver_loaded("580.105.08")
    server.write_answers(extra=f'[build]\nwheelhouse = "{wheelhouse}"\n')
    assert server.mlsetup("apply", "--answers", str(server.answers)).returncode == 0
    key = f"tinyext-0.1.0_torch-{STANDIN_TORCH}+cu130_py*_archs-native_by-mluser"
    published = list(wheelhouse.glob(f"{key}/*.whl"))
    assert len(published) == 1
    # a machine without that wheel in its own cache installs it from the wheelhouse

    shutil.rmtree(server.root / "var/cache/mlsetup/wheels")
    server.write_answers(venv="~/other-env", extra=f'[build]\nwheelhouse = "{wheelhouse}"\n')
    run = server.mlsetup("apply", "--answers", str(server.answers))
    assert run.returncode == 0, run.stdout
    assert "extensions.tinyext.install-wheel" in server.report()["ran"]
    assert str(wheelhouse) in run.stdout

    # the wheelhouse's wheel cut short (its builder's .sha256 kept), the cache and the venv
    # without it: passed over naming both hashes, built from source, the whole wheel published
    [wheel] = published
    recorded = wheel.with_name(wheel.name + ".sha256").read_text().split()[0]
    cut = wheel.read_bytes()[: wheel.stat().st_size // 2]
    wheel.write_bytes(cut)
    shutil.rmtree(server.root / "var/cache/mlsetup/wheels", ignore_errors=True)
    server.write_answers(venv="~/third-env", extra=f'[build]\nwheelhouse = "{wheelhouse}"\n')
    run = server.mlsetup("apply", "--answers", str(server.answers))
    assert run.returncode == 0, run.stdout
    said = (
        f"sha256 {hashlib.sha256(cut).hexdigest()}, not the {recorded} its builder recorded "
        "(a damaged or replaced wheel): passed over, built from source"
    )
    # said once the venv it is for exists (a later plan of the run), and kept in the report
    notices = [e.text for e in server.events() if isinstance(e, Notice)]
    assert [w for w in notices if said in w and wheel.name in w], notices
    assert [w for w in server.report()["warnings"] if said in w], server.report()["warnings"]
    assert "extensions.tinyext.build" in server.report()["ran"]
    now = wheel.read_bytes()
    assert now != cut
    assert (
        hashlib.sha256(now).hexdigest()
        == (wheel.with_name(wheel.name + ".sha256").read_text().split()[0])
    )


def test_compile_killed_for_memory_is_retried_keeping_its_objects(server: FakeServer):
    server.machine.driver_loaded("580.105.08")
    server.write_answers(extension="flakyext")
    run = server.mlsetup("apply", "--answers", str(server.answers))
    assert run.returncode == 0, run.stdout
    retry = [e.text for e in server.events() if isinstance(e, Notice) and "retrying" in e.text]
    assert len(retry) == 1 and "ran out of memory" in retry[0]
    out = subprocess.run(
        [str(server.venv / "bin/python"), "-c", "import flakyext; print(flakyext.KEPT)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "True"  # the retry found the object compiled before the crash


def test_the_engine_logs_its_decisions_root_only_in_the_runs_log_directory(server: FakeServer):
    first = server.mlsetup("apply", "--answers", str(server.answers))
    assert first.returncode == 10, first.stdout + first.stderr
    server.reboot()
    resumed = server.mlsetup("apply", "--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    again = server.mlsetup("apply", "--answers", str(server.answers))
    assert again.returncode == 0, again.stdout + again.stderr

    report = server.report()
    run_dirs = sorted(
        p for p in (server.root / "var/log/mlsetup").iterdir() if p.is_dir() and not p.is_symlink()
    )
    assert len(run_dirs) == 2 and str(run_dirs[-1]).endswith(report["log_dir"])
    first_run, second_run = (d / "decisions.log" for d in run_dirs)
    for log in (first_run, second_run):
        assert mode(log) == 0o600, log  # like every log: not readable by other accounts
    text = first_run.read_text()
    # the paused run and its resume write the same run's log, in order
    expected = [
        "mlsetup.engine INFO apply lock adopted from the starter",
        "mlsetup.engine INFO new run: no earlier run",
        "mlsetup.stack INFO stack lock: torch",
        "mlsetup.engine INFO plan: driver pending",
        "mlsetup.actions INFO driver.install: started: env DEBIAN_FRONTEND=noninteractive apt-get",
        "mlsetup.actions INFO driver.install: done, exit 0 after",
        "mlsetup.reboot INFO driver.install needs a reboot; policy",
        "mlsetup.engine INFO finished: reboot, exit 10",
        "mlsetup.engine INFO resuming run",
        "mlsetup.reboot INFO resume: rebooted",
        "mlsetup.engine INFO driver: satisfied: driver 580",
        "mlsetup.actions INFO toolkit.install-13.0: started:",
        "mlsetup.actions INFO toolkit.install-13.0: done, exit 0 after",
        "mlsetup.engine INFO toolkit: after its actions: satisfied",
        "mlsetup.builds INFO extensions.tinyext.build: attempt 1",
        "mlsetup.engine INFO finished: done, exit 0",
    ]
    at = 0
    for line in expected:
        found = text.find(line, at)
        assert found >= 0, f"{line!r} not after offset {at} in:\n{text}"
        at = found
    second = second_run.read_text()
    assert "new run: run " in second and " is done" in second
    for step in registry.step_names():
        assert f"mlsetup.engine INFO {step}: satisfied: " in second
    assert "started:" not in second  # nothing ran, and the log says why for each step
    # and where its time went (issue 24: a second apply under 1.5 s)
    assert " s in this process: " in second and " s for the steps" in second
    assert "decisions.log" not in first.stdout + resumed.stdout + again.stdout


# An extension whose setup.py passes -std=c++17, as flash-attn 2.8.3's does (its lines 201 and
# 220); it leaves a mark beside itself when its build runs at all.
CXX17_SETUP = """\
from pathlib import Path
from setuptools import setup

Path(__file__).with_name("setup-ran").write_text("the build ran")
CXX_FLAGS = ["-O3", "-std=c++17"]
setup(name="cxxext", version="0.1.0", packages=["cxxext"])
"""


def test_a_cxx17_build_against_torch_headers_that_need_cxx20_is_refused_before_ninja(
    server: FakeServer,
):
    """The venv's torch carries the real first lines of torch 2.15.0's ATen.h (read from the
    wheel on PyPI: tests/fixtures/pypi/cxx/torch-2.15.0.json), whose #error needs C++20: the
    build is refused before it starts, its log says why, and the diagnosis is the one for the
    compiler's own #error line."""
    recorded = json.loads((FIXTURES / "pypi/cxx/torch-2.15.0.json").read_text())["lines"]
    aten = "\n".join(recorded[str(n)] for n in sorted(map(int, recorded))) + "\n#endif\n"
    server.index = torch_index(
        server.base / "index-cxx20", files={"torch/include/ATen/ATen.h": aten}
    )
    source = install_extension(server, "cxxext", CXX17_SETUP)
    server.machine.driver_loaded("580.105.08")
    run = server.mlsetup("apply", "--answers", str(server.answers))
    assert run.returncode == 1, run.stdout + run.stderr
    failure = server.report()["failure"]
    assert failure["action"] == "extensions.cxxext.build"
    assert failure["diagnosis"] == "torch-needs-newer-cxx"
    assert 'torch.version = "<2.14"' in failure["next"]
    [log] = (server.root / "var/log/mlsetup").rglob("extensions.cxxext.build.log")
    assert log.read_text().splitlines() == [
        f"torch {STANDIN_TORCH}+cu130's torch/include/ATen/ATen.h: #error C++20 or later "
        "compatible compiler is required to use ATen.",
        f"mlsetup: cxxext 0.1.0 builds with C++17 (-std in {source}/setup.py), but torch "
        f"{STANDIN_TORCH}+cu130 in {server.venv} requires C++20 (torch/include/ATen/ATen.h): "
        "every file including torch would stop at that #error, so the compile was not "
        "started (ninja never ran)",
    ]
    assert not (source / "setup-ran").exists()  # setup.py, let alone ninja, never ran
