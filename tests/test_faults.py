"""Faults against the fake server: kill -9 with compile jobs parked, two applies at once, every
kind of unusable state.json, a full disk, and index credentials that must stay secret."""

from __future__ import annotations

import base64
import contextlib
import functools
import http.server
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import psutil
import pytest

from steps.core.errors import InputError
from steps.formats.answers import answers_from_toml
from steps.formats.events import ActionFinished, BuildProgress, Notice, Output, RunStarted
from steps.formats.state import load_state
from tests.common import FIXTURES, REPO, copy_fixture
from tests.harness import USER_UID, FakeServer, install_extension, wait_for

STATE = "var/lib/mlsetup/state.json"


def _engine_pid(server: FakeServer) -> int:
    return [e for e in server.events() if isinstance(e, RunStarted)][-1].pid


def _no_traceback(run: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in run.stdout + run.stderr, run.stdout + run.stderr


# -- kill -9 while the governor holds compile jobs parked ---------------------------------------


def _install_manyext(server: FakeServer) -> Path:
    """tests/fixtures/manyext (ten C++ sources, one ninja job each), owned by the venv's
    account, under a memory limit where the governor lets one job run and parks the next."""
    src = server.base / "src" / "manyext"
    copy_fixture("manyext", src, USER_UID)
    recipe = (FIXTURES / "manyext.toml").read_text().replace("@SOURCE@", str(src))
    (server.recipes / "manyext.toml").write_text(recipe)
    server.write_answers(extension="manyext", extra='[build]\nmemory_limit = "1GiB"\n')
    return src / "build-objects"


def _build_processes(objects: Path) -> list[psutil.Process]:
    """The compile jobs' processes (their working directory is the ninja build directory)."""
    found = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.cwd() == str(objects):
                found.append(p)
    return found


def _stopped(objects: Path) -> list[psutil.Process]:
    out = []
    for p in _build_processes(objects):
        with contextlib.suppress(psutil.Error):
            if p.status() == psutil.STATUS_STOPPED:
                out.append(p)
    return out


def _watchdogs(record: Path) -> list[psutil.Process]:
    """The watchdogs of this server's build (by their record's path: tests on other xdist
    workers have watchdogs of their own)."""
    out = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            cmdline = p.cmdline()
            if "steps.building.orphans" in cmdline and str(record) in cmdline:
                out.append(p)
    return out


def _parked_and_recorded(objects: Path, record: Path) -> bool:
    """A compile job is parked, and every parked one is in the governor's record (it writes
    the record just after it parks a job)."""
    groups = set()
    for p in _stopped(objects):
        with contextlib.suppress(OSError):
            groups.add(os.getpgid(p.pid))
    try:
        recorded = {int(pid) for pid in json.loads(record.read_text())["stopped"]}
    except (OSError, ValueError, KeyError):
        return False
    return bool(groups) and groups <= recorded


def _stop_engine_with_a_job_parked(engine: int, objects: Path, compiled: int, record: Path) -> None:
    """SIGSTOP the engine at a moment when at least `compiled` objects are built and one of
    its compile jobs is parked and recorded; let it go on and try again while that is not so."""
    deadline = time.monotonic() + 120
    while True:
        if len(list(objects.glob("k*.o"))) >= compiled and _stopped(objects):
            os.kill(engine, signal.SIGSTOP)
            if _parked_and_recorded(objects, record):
                return
            os.kill(engine, signal.SIGCONT)
        assert time.monotonic() < deadline, "timed out waiting for a parked job"
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("kill", "compiled"), [("engine", 0), ("engine", 3), ("engine-and-watchdog", 3)]
)
def test_kill_9_with_jobs_parked_then_resume_completes(
    server: FakeServer, kill: str, compiled: int
):
    """kill -9 of the engine while its governor holds compile jobs of a real ninja build
    parked (SIGSTOP). With the watchdog alive it continues and ends them at once; with the
    watchdog killed too, the next `--resume` does. Either way `--resume` completes, with every
    object, and no process stays stopped."""
    if shutil.which("c++") is None:
        pytest.skip("no C++ compiler (c++) on this machine: manyext's jobs compile C++")
    server.machine.driver_loaded("580.105.08")
    objects = _install_manyext(server)
    viewer = server.popen("apply", "--answers", str(server.answers))
    wait_for(lambda: server.started("extensions.manyext.build"), timeout=240)
    engine = _engine_pid(server)
    # the kill point: `compiled` objects built and a job parked, held so by stopping the engine
    # (its governor would otherwise let the job go between this check and the kill)
    record = server.root / "var/lib/mlsetup/governed-build.json"
    _stop_engine_with_a_job_parked(engine, objects, compiled, record)
    parked = {os.getpgid(p.pid) for p in _stopped(objects)}
    kept = len(list(objects.glob("k*.o")))
    progress = [e for e in server.events() if isinstance(e, BuildProgress)]
    watchdogs = _watchdogs(record)
    assert watchdogs, "the governor runs a watchdog"
    if kill == "engine-and-watchdog":
        for w in watchdogs:
            os.kill(w.pid, signal.SIGKILL)
    t_kill = time.monotonic()
    os.kill(engine, signal.SIGKILL)
    viewer.wait(timeout=30)
    wait_for(server.apply_lock_free)
    if kill == "engine":
        # the watchdog: nothing stays stopped, the orphaned build is ended within seconds
        wait_for(lambda: not _build_processes(objects), timeout=30)
        print(
            f"kill -9 engine, {len(parked)} job(s) parked, {kept}/10 objects built "
            f"([{len(progress)}/10] seen): the watchdog continued and ended the build "
            f"{time.monotonic() - t_kill:.1f}s after the kill"
        )
    else:
        time.sleep(2)
        assert _stopped(objects), "without the watchdog the parked job stays stopped"

    t0 = time.monotonic()
    events_before = len(server.events())
    resume = server.mlsetup("apply", "--resume", timeout=300)
    assert resume.returncode == 0, resume.stdout + resume.stderr
    assert not _stopped(objects) and not _build_processes(objects)
    if kill == "engine-and-watchdog":  # the resume found them stopped and dealt with them
        assert re.search(r"continued [1-9]\d* compile job", resume.stdout), resume.stdout
    out = subprocess.run(
        [str(server.venv / "bin/python"), "-c", "import manyext; print(len(manyext.OBJECTS))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "10"
    rebuilt = [e.total for e in server.events()[events_before:] if isinstance(e, BuildProgress)]
    assert rebuilt and max(rebuilt) <= 10 - kept  # the objects built before the kill were kept
    print(
        f"kill -9 {kill} with {len(parked)} job(s) parked and {kept} objects built: "
        f"--resume done in {time.monotonic() - t0:.1f}s, compiled {max(rebuilt)} more, "
        "10/10 objects, no process stopped"
    )


def test_interrupted_command_is_waited_for_within_a_bound_then_explained(server: FakeServer):
    """A non-build command of a killed engine that goes on running: the resume says what it
    waits on and for how long, then stops with what to do, instead of waiting forever."""
    server.machine.driver_loaded("580.105.08")
    server.script({"apt-get cuda-toolkit-13-0": {"sleep": 30}})
    viewer = server.popen("apply", "--answers", str(server.answers))
    wait_for(lambda: server.started("toolkit.install-13.0"), timeout=120)
    # killed once the state names its process (the engine saves it right after the start)
    wait_for(lambda: server.state_file()["actions"].get("toolkit.install-13.0", {}).get("pid"))
    os.kill(_engine_pid(server), signal.SIGKILL)
    viewer.wait(timeout=30)
    wait_for(server.apply_lock_free)
    t0 = time.monotonic()
    run = server.mlsetup("apply", "--resume", MLSETUP_INTERRUPTED_WAIT="2")
    assert run.returncode == 1, run.stdout + run.stderr
    assert time.monotonic() - t0 < 30
    assert "waiting up to 2s for it to end" in run.stdout
    assert "was still running after 2s" in run.stdout and "sudo kill" in run.stdout
    _no_traceback(run)


def test_temporary_state_files_of_dead_engines_are_removed(server: FakeServer):
    server.machine.driver_loaded("580.105.08")
    state_dir = server.root / "var/lib/mlsetup"
    state_dir.mkdir(parents=True)
    left = [
        state_dir / ".state.json.k1l2ed",
        state_dir / ".report.json.abc123",
        state_dir / ".governed-build.json.x9y8z7",
    ]
    for tmp in left:
        tmp.write_text("{")
    run = server.mlsetup("apply", "--answers", str(server.answers))
    assert run.returncode == 0, run.stdout + run.stderr
    assert not any(tmp.exists() for tmp in left)


# -- two applies at once ------------------------------------------------------------------------

# Imports everything first, then waits on the barrier FIFO, so that both start at once.
_RACER = """
import os, sys
from app.cli import main
import app.apply, steps.apply.engine, steps.apply.service
os.read(os.open(sys.argv[1], os.O_RDONLY), 1)
main(sys.argv[2:])
"""


def test_two_applies_released_by_one_barrier_exactly_one_exits_4(server: FakeServer):
    server.machine.driver_loaded("580.105.08")
    figures = []
    for trial in range(10):
        barrier = server.base / f"barrier-{trial}"
        os.mkfifo(barrier)
        outputs = [server.base / f"race-{trial}-{i}.txt" for i in range(2)]
        racers = []
        for out in outputs:
            with out.open("w") as f:
                racers.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-c",
                            _RACER,
                            str(barrier),
                            "apply",
                            "--answers",
                            str(server.answers),
                            "--root",
                            str(server.root),
                        ],
                        stdout=f,
                        stderr=subprocess.STDOUT,
                        env=server.env(),
                        cwd=REPO,
                        start_new_session=True,
                    )
                )
        fd = os.open(barrier, os.O_WRONLY)  # returns once a racer has opened it to read
        time.sleep(1.0)  # both imported and waiting: one write of two bytes releases both
        os.write(fd, b"go")
        released = time.monotonic()
        os.close(fd)
        ended: dict[int, float] = {}
        while len(ended) < 2:
            for i, r in enumerate(racers):
                if i not in ended and r.poll() is not None:
                    ended[i] = time.monotonic() - released
            assert time.monotonic() - released < 300
            time.sleep(0.01)
        codes = [r.returncode for r in racers]
        texts = [out.read_text() for out in outputs]
        assert sorted(codes) == [0, 4], (codes, texts)
        loser = codes.index(4)
        assert "another mlsetup apply is running" in texts[loser], texts[loser]
        figures.append((ended[loser], ended[1 - loser]))
        assert ended[loser] < 5, figures
        wait_for(server.apply_lock_free)
    print(
        "race trials: exactly one exit 4 in 10/10; loser's exit after the barrier: "
        + ", ".join(f"{lose:.2f}s" for lose, _ in figures)
        + "; winner's run: "
        + ", ".join(f"{win:.1f}s" for _, win in figures)
    )


# -- unusable state.json ------------------------------------------------------------------------


def _valid_state(run_id: str = "20261201-080000-1") -> dict:
    return {
        "schema": "mlsetup.state/1",
        "run_id": run_id,
        "phase": "failed",
        "answers_toml": "",
        "answers_path": None,
    }


def _nested(depth: int) -> str:
    return '{"plan": ' * depth + "1" + "}" * depth


def _plant(path: Path, variant: str, elsewhere: Path) -> None:
    if variant == "binary":
        path.write_bytes(b"\x00\xff\xfe\x89PNG\r\n\x1a\n" * 100)
    elif variant == "directory":
        path.mkdir()
    elif variant == "fifo":
        os.mkfifo(path, 0o600)
    elif variant == "symlink":  # even to a valid state: root follows no link
        elsewhere.write_text(json.dumps(_valid_state()))
        path.symlink_to(elsewhere)
    elif variant == "nested-deep":  # the parser's own recursion limit
        path.write_text(_nested(100_000))
    elif variant == "nested":  # parses, but no state is nested this deep
        path.write_text(json.dumps({**_valid_state(), "plan": json.loads(_nested(60))}))
    elif variant == "schema":
        path.write_text(json.dumps({**_valid_state(), "phase": "exploded"}))
    elif variant == "huge":
        path.write_text(json.dumps(_valid_state()) + " " * (2 << 20))
    elif variant == "run-id":
        path.write_text(json.dumps(_valid_state("../../../../tmp/mlsetup-escape")))
    elif variant == "torn":
        path.write_text('{"schema": "mlsetup.state/1", "run_id": ')
    elif variant == "not-an-object":
        path.write_text("[1, 2, 3]")
    else:
        raise AssertionError(variant)


VARIANTS = [
    "binary",
    "directory",
    "fifo",
    "symlink",
    "nested-deep",
    "nested",
    "schema",
    "huge",
    "run-id",
    "torn",
    "not-an-object",
]


def test_every_unusable_state_is_set_aside_with_exit_2_and_the_next_apply_works(
    server: FakeServer,
):
    server.machine.driver_loaded("580.105.08")
    first = server.mlsetup("apply", "--answers", str(server.answers))
    assert first.returncode == 0, first.stdout + first.stderr
    path = server.root / STATE
    handled = []
    for variant in VARIANTS:
        path.unlink()
        _plant(path, variant, server.base / f"elsewhere-{variant}.json")
        # `--resume` reads the state in the starter, a new apply in the engine's start: both
        # (the first only for one variant, to keep the suite short)
        hows = [["--answers", str(server.answers)]] + (
            [["--resume"]] if variant == "binary" else []
        )
        for how in hows:
            run = server.mlsetup("apply", *how, timeout=120)
            assert run.returncode == 2, (variant, how, run.stdout, run.stderr)
            _no_traceback(run)
            assert f"state file {path} is unusable" in run.stderr, (variant, run.stderr)
            assert "moved it to" in run.stderr and "next apply starts fresh" in run.stderr
            assert not os.path.lexists(path), variant  # set aside, not left in the way
            kept = run.stderr.split("moved it to ", 1)[1].split(";")[0]
            assert os.path.lexists(kept) and kept.startswith(str(path) + ".corrupt-")
            if len(hows) > 1 and how[0] == "--answers":
                os.rename(kept, path)  # the same file again, for the --resume
        after = server.mlsetup("apply", "--answers", str(server.answers), timeout=120)
        assert after.returncode == 0, (variant, after.stdout, after.stderr)
        assert server.state_file()["phase"] == "done"
        handled.append(variant)
    assert not Path("/tmp/mlsetup-escape").exists()
    assert not (server.root.parent / "tmp").exists()
    print(f"bad state variants handled: {len(handled)}/{len(VARIANTS)} ({', '.join(handled)})")


# -- a full disk --------------------------------------------------------------------------------


@contextlib.contextmanager
def _full_tmpfs(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(directory)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        filler = directory / "filler"
        with contextlib.suppress(OSError), filler.open("wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        yield
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)


@pytest.mark.parametrize("full", ["var/lib/mlsetup", "var/log/mlsetup"])
@pytest.mark.parametrize("how", ["detached", "foreground"])
def test_a_full_state_or_log_disk_ends_in_the_no_space_diagnosis(
    server: FakeServer, full: str, how: str
):
    server.machine.driver_loaded("580.105.08")
    directory = server.root / full
    with _full_tmpfs(directory):
        extra = ["--foreground"] if how == "foreground" else []
        run = server.mlsetup("apply", "--answers", str(server.answers), *extra, timeout=120)
        text = run.stdout + run.stderr
        assert run.returncode == 1, text
        _no_traceback(run)
        assert "no space left on the device to write" in text and str(directory) in text, text
        assert "The disk filled up" in text and f"df -h {directory}" in text, text
        load_state(server.root / STATE)  # none, or the last complete one: never a torn one
    # Space freed (the tmpfs is gone): the command it advised goes on. With the state's disk
    # full no run was saved: a new apply with the same answers, not --resume (which would find
    # nothing to resume); with only the logs' full, the state may hold the run to resume.
    advised = re.search(r"then: sudo mlsetup (apply [^\n]*)", text)
    assert advised is not None, text
    fresh = f"apply --answers {server.answers}"
    assert advised[1] in ((fresh,) if full == "var/lib/mlsetup" else (fresh, "apply --resume"))
    after = server.mlsetup(*shlex.split(advised[1]), *extra, timeout=300)
    assert after.returncode == 0, after.stdout[-3000:] + after.stderr[-3000:]
    assert server.report()["result"] == "done"
    print(
        f"full {full} ({how}): exit 1, no-space diagnosis naming {directory}, state valid; "
        f"space freed, the advised `mlsetup {advised[1]}` exit 0"
    )


# -- index credentials ----------------------------------------------------------------------------

TOKEN = "s3cr3t-T0KEN-4f9a"


class _AuthIndex(http.server.SimpleHTTPRequestHandler):
    expected = "Basic " + base64.b64encode(f"alice:{TOKEN}".encode()).decode()
    seen: ClassVar[list[bool]] = []

    def do_GET(self) -> None:
        ok = self.headers.get("Authorization") == self.expected
        self.seen.append(ok)
        if not ok:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="torch"')
            self.end_headers()
            return
        super().do_GET()

    def log_message(self, *args: object) -> None:
        pass


def test_index_credentials_never_reach_a_command_line_or_any_output(server: FakeServer):
    server.machine.driver_loaded("580.105.08")
    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_AuthIndex, directory=str(server.index))
    )
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        # uv, wrapped to record the argv and the environment's names of every call
        real = server.tools / "uv.real"
        (server.tools / "uv").rename(real)
        calls = server.base / "uv-calls.txt"
        wrapper = server.tools / "uv"
        wrapper.write_text(
            "#!/bin/sh\n"
            f"{{ printf 'argv:'; printf ' %s' \"$@\"; echo; "
            f"echo \"env: $(env | cut -d= -f1 | tr '\\n' ' ')\"; }} >> {calls}\n"
            f'exec {real} "$@"\n'
        )
        wrapper.chmod(0o755)
        calls.touch()
        calls.chmod(0o666)  # uv runs as the venv's account
        url = f"http://alice:{TOKEN}@127.0.0.1:{httpd.server_address[1]}/"
        text = server.answers.read_text().replace(
            f'index_url = "{server.index}"', f'index_url = "{url}"'
        )
        server.answers.write_text(text)

        plan = server.mlsetup("plan", "--answers", str(server.answers), "--json")
        assert plan.returncode == 0, plan.stderr
        run = server.mlsetup("apply", "--answers", str(server.answers))
        assert run.returncode == 0, (run.stdout + run.stderr)[-2000:] + (
            server.root / "var/log/mlsetup/engine.log"
        ).read_text()[-3000:]
        assert any(_AuthIndex.seen), "uv reached the index with the credentials"

        lines = calls.read_text().splitlines()
        uv_calls = [(a, e) for a, e in zip(lines[::2], lines[1::2], strict=True)]
        torch_call = [(a, e) for a, e in uv_calls if "--index torch=" in a]
        assert torch_call and "UV_INDEX_TORCH_PASSWORD" in torch_call[0][1].split(), uv_calls
        shown = [plan.stdout, plan.stderr, run.stdout, run.stderr, calls.read_text()]
        for path in [
            *(server.root / "var/log/mlsetup").rglob("*"),
            server.root / "var/lib/mlsetup/report.json",
        ]:
            if path.is_file() and not path.is_symlink():
                shown.append(path.read_text(errors="replace"))
        leaks = [s[:200] for s in shown if TOKEN in s]
        assert not leaks, leaks
        print(
            f"credentials: {len(uv_calls)} uv calls, token in none of their argv, nor in "
            f"plan, console, events, logs or report ({len(shown)} texts checked)"
        )
    finally:
        httpd.shutdown()


# -- a build backend that leaves a daemon holding the build's output --------------------------

DAEMONISING_SETUP = """
import os, sys, time
from setuptools import setup

if "bdist_wheel" in sys.argv:  # the wheel's build, not the metadata step before it
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:  # the daemon: its stdout is still the build's
            with open(os.path.expanduser("~/daemon.pid"), "w") as f:
                f.write(str(os.getpid()))
            print("daemon: holding the build's output", flush=True)
            time.sleep(120)
        os._exit(0)
setup(name="daemonext", version="0.1.0", packages=["daemonext"])
print(f"SETUP-DONE {time.time()}", flush=True)
"""


def test_a_build_backend_that_double_forks_a_daemon_does_not_hold_the_build(
    server: FakeServer,
):
    """The daemon keeps the build's stdout open (pip reads its backend's output to the end):
    the build step still ends within 10 s of its backend, and the daemon is ended with it."""
    server.machine.driver_loaded("580.105.08")
    install_extension(server, "daemonext", DAEMONISING_SETUP)
    run = server.mlsetup("apply", "--answers", str(server.answers), timeout=200)
    assert run.returncode == 0, run.stdout + run.stderr
    events = server.events()
    build = "extensions.daemonext.build"
    done = [
        float(e.line.split()[1])
        for e in events
        if isinstance(e, Output) and e.action == build and e.line.strip().startswith("SETUP-DONE")
    ]
    ended = [e.t for e in events if isinstance(e, ActionFinished) and e.action == build]
    assert done and ended, [e for e in events if getattr(e, "action", None) == build][-5:]
    held = ended[0] - done[-1]
    daemon = int((server.home / "daemon.pid").read_text())
    assert held < 10, f"the build step ended {held:.1f}s after its backend"
    assert not psutil.pid_exists(daemon) or psutil.Process(daemon).uids().real != USER_UID
    assert any(re.search(rf"pids [0-9, ]*\b{daemon}\b", t) for t in _notices(server))
    print(f"daemonising backend: the build step ended {held:.1f}s after its backend; daemon ended")


def _notices(server: FakeServer) -> list[str]:
    return [e.text for e in server.events() if isinstance(e, Notice)]


# -- an answers file whose dotted key has 100,000 parts -----------------------------------------


def test_a_dotted_key_of_100000_parts_is_refused_within_a_second(server: FakeServer):
    text = "version = 1\n" + "a" + ".a" * 99_999 + " = 1\n"
    started = time.process_time()  # CPU time: what a quadratic parse costs, whatever the load
    with pytest.raises(InputError) as refused:
        answers_from_toml(text, "answers.toml")
    parse_s = time.process_time() - started
    assert "line 2: a key of more than 16 dotted parts" in str(refused.value)
    assert parse_s < 1.0, parse_s
    server.answers.write_text(text)
    code, wall_s, rss_kib, out, err = server.measured("apply", "--answers", str(server.answers))
    assert code == 2, out + err
    assert "line 2: a key of more than 16 dotted parts" in err and "Traceback" not in out + err
    assert server.calls() == [] and not (server.root / STATE).exists()  # nothing ran
    assert rss_kib < 200 * 1024, rss_kib
    print(
        f"100,000-part dotted key ({len(text) // 1024} KiB): refused in {parse_s * 1000:.1f} ms; "
        f"mlsetup apply: exit 2 after {wall_s:.2f}s wall (interpreter start included), "
        f"peak RSS {rss_kib // 1024} MiB"
    )


# -- an extension whose name has a dot ----------------------------------------------------------

SLOW_FIRST_SETUP = """
import os, sys, time
from setuptools import setup

marker = os.path.expanduser("~/dotted-build-started")
if "bdist_wheel" in sys.argv and not os.path.exists(marker):
    open(marker, "w").close()
    print("first build: waiting to be killed", flush=True)
    time.sleep(120)
setup(name="tiny.ext", version="0.1.0", packages=["tiny_ext"])
"""


def test_an_extension_named_with_a_dot_goes_through_apply_kill_and_resume(server: FakeServer):
    """`tiny.ext` (a valid recipe name): planned, built, killed with -9 mid-build, resumed to
    the end; nothing reads a meaning into the dot."""
    server.machine.driver_loaded("580.105.08")
    install_extension(server, "tiny.ext", SLOW_FIRST_SETUP)
    plan = server.mlsetup("plan", "--answers", str(server.answers), "--json")
    assert plan.returncode == 0, plan.stderr
    [step] = [s for s in json.loads(plan.stdout)["steps"] if s["name"] == "extensions"]
    assert step["reason"].startswith("build tiny.ext against"), step["reason"]
    # every action but the stack check after the extensions is for the extension
    assert {a["target"] for a in step["actions"] if a["kind"] != "stack-check"} == {"tiny.ext"}
    viewer = server.popen("apply", "--answers", str(server.answers))
    wait_for(lambda: (server.home / "dotted-build-started").exists(), timeout=240)
    engine = _engine_pid(server)
    os.kill(engine, signal.SIGKILL)
    viewer.wait(timeout=30)
    wait_for(server.apply_lock_free)
    assert server.state_file()["actions"]["extensions.tiny.ext.build"]["status"] == "running"
    resume = server.mlsetup("apply", "--resume", timeout=300)
    assert resume.returncode == 0, resume.stdout + resume.stderr
    _no_traceback(resume)
    assert server.state_file()["phase"] == "done"
    smoke = server.root / "var/log/mlsetup/current/extensions.tiny.ext.smoke.log"
    assert "tiny_ext imported" in smoke.read_text()
    print("tiny.ext: plan, apply, kill -9 mid-build, --resume: done, smoke test passed")


# -- a decisions log that is a link --------------------------------------------------------------


def test_a_decisions_log_that_is_a_link_never_stops_the_run(server: FakeServer):
    """A resume reopens its run's decisions.log: a link planted there (to a root-only file) is
    set aside, never followed, and the run goes on."""
    server.machine.driver_loaded("580.105.08")
    server.script({"apt-get cuda-toolkit-13-0": {"exit": 100}})
    first = server.mlsetup("apply", "--answers", str(server.answers))
    assert first.returncode == 1, first.stdout + first.stderr
    run_dir = (server.root / "var/log/mlsetup/current").resolve()
    victim = server.base / "victim.txt"
    victim.write_text("root's own\n")
    victim.chmod(0o600)
    (run_dir / "decisions.log").unlink()
    (run_dir / "decisions.log").symlink_to(victim)
    server.script({})
    resume = server.mlsetup("apply", "--resume")
    assert resume.returncode == 0, resume.stdout + resume.stderr
    _no_traceback(resume)
    assert victim.read_text() == "root's own\n"
    log = run_dir / "decisions.log"
    assert not log.is_symlink() and "resuming run" in log.read_text()
    assert [p.name for p in run_dir.glob("decisions.log.refused-*")], list(run_dir.iterdir())
    assert any("decisions.log was not a log file of root's own" in t for t in _notices(server))


# -- a build whose log fills the disk -----------------------------------------------------------

SPINNING_SETUP = """
import os, sys, time
from setuptools import setup

if "bdist_wheel" in sys.argv:
    with open(os.path.expanduser("~/spinner.pid"), "w") as f:
        f.write(str(os.getpid()))
    deadline = time.time() + 120
    while time.time() < deadline:  # a build that talks a lot
        print("compiling " + "x" * 1000, flush=True)
        time.sleep(0.001)
setup(name="spinext", version="0.1.0", packages=["spinext"])
"""


def test_a_build_whose_log_fills_the_disk_is_not_left_running(server: FakeServer):
    """/var/log fills up while a build writes its log: the run ends with the no-space
    diagnosis, and the build (whose output nothing can keep) ends with it, not minutes later."""
    server.machine.driver_loaded("580.105.08")
    install_extension(server, "spinext", SPINNING_SETUP)
    directory = server.root / "var/log/mlsetup"
    directory.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(directory)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        run = server.mlsetup("apply", "--answers", str(server.answers), "--foreground")
        ended = time.monotonic()
        assert run.returncode == 1, run.stdout + run.stderr
        assert "no space left on the device to write" in run.stdout + run.stderr
        backend = int((server.home / "spinner.pid").read_text())
        while psutil.pid_exists(backend) and time.monotonic() - ended < 30:
            time.sleep(0.1)
        assert not psutil.pid_exists(backend), "the build went on after the run ended"
        print(f"full /var/log mid-build: the build ended {time.monotonic() - ended:.1f}s after")
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)
