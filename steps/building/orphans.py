"""A governed build whose engine died: the jobs its governor had stopped must not stay stopped,
and the build, whose output went to that engine, must not run on beside the next one.

The governor keeps a root-only record of the job groups it has stopped and of the build's root
process, watched by a process of its own (`Watchdog`, run as `python -m steps.building.orphans
RECORD`) that continues them and ends the build should the engine die without stopping its governor;
`end_orphaned_build` does the same at the next start, in case the watchdog died too.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from steps.building.processtree import signal_group
from steps.core.safefs import read_bounded
from steps.core.sizes import MiB
from steps.formats.state import write_atomic

END_GRACE_S = 5.0  # SIGTERM, then this long to end, then SIGKILL
# An engine killed with SIGKILL is a zombie within milliseconds of closing its files; one that
# closed the watchdog's pipe and is still running after this long was not killed (it exec'd,
# or a debugger holds it) and its governor is trusted to be at work.
WATCHDOG_ENGINE_EXIT_WAIT_S = 10.0
RECORD_LIMIT = MiB


class Watchdog:
    """The record at `path` of what a governor has stopped, and the process watching over it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._recorded: dict[int, float] | None = None
        self._recorded_root: int | None = None
        self._engine_started = psutil.Process().create_time()
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the watchdog process: it acts on the record once this process has ended."""
        self._process = subprocess.Popen(
            [sys.executable, "-m", "steps.building.orphans", str(self.path)],
            stdin=subprocess.PIPE,  # its end-of-file is this process's end, kill -9 included
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a signal to this process group must not reach it
            cwd="/",
        )

    def record(self, root: int | None, stopped: dict[int, float]) -> None:
        """Keep the groups stopped now (pid -> start time) and the build's root process, when
        that changed."""
        if stopped == self._recorded and root == self._recorded_root:
            return
        root_started = 0.0
        if root is not None:
            with contextlib.suppress(psutil.Error):
                root_started = psutil.Process(root).create_time()
        record = {
            "engine": os.getpid(),
            "engine_started": self._engine_started,
            "root": root,
            "root_started": root_started,
            "stopped": {str(pid): t for pid, t in stopped.items()},
        }
        # Not fsynced: from the sampling thread; a record lost to a power cut has nothing to
        # continue anyway (the jobs went with the machine).
        with contextlib.suppress(OSError):
            write_atomic(self.path, json.dumps(record) + "\n", durable=False)
            self._recorded, self._recorded_root = stopped, root

    def stop(self) -> None:
        """The governor let go of its build: remove the record, then end the watchdog."""
        self.path.unlink(missing_ok=True)  # before the watchdog's end-of-file
        if self._process is not None:
            assert self._process.stdin is not None
            self._process.stdin.close()
            self._process.wait()


def end_orphaned_build(
    stopped_file: Path, engine_exit_wait: float = 0.0
) -> tuple[list[int], list[int]]:
    """Continue every job group a dead engine's governor had stopped (SIGCONT), then end its
    build: the build's output went to that engine, so nothing could use what it goes on to do,
    and a new build in the same tree must not run beside it (the objects already compiled
    stay). Returns (groups continued, processes ended); the record is removed.

    `engine_exit_wait`: how long to wait for the recorded engine to be gone before deciding
    that it lives on. The watchdog needs it: a killed process closes its files (the watchdog's
    end-of-file) a moment before it becomes a zombie, and in that moment it still looks alive."""
    try:
        record = _Record.read(stopped_file)
    except FileNotFoundError:
        return [], []
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        stopped_file.unlink(missing_ok=True)  # damaged: nothing in it can be trusted
        return [], []
    alive = record.engine and record.engine != os.getpid()
    if alive and not _gone(record.engine, record.engine_started, engine_exit_wait):
        return [], []  # that engine lives on: its governor is still at work
    groups = [p for pid, t in record.stopped.items() if (p := _process(pid, t)) is not None]
    for p in groups:
        signal_group(p.pid, signal.SIGCONT)
    tree = _process(record.root, record.root_started) if record.root is not None else None
    ended = end_process_tree(tree, groups)
    stopped_file.unlink(missing_ok=True)
    return [p.pid for p in groups], ended


class _Record:
    """The stopped file as `Watchdog.record` writes it; any other shape raises."""

    def __init__(self, data: Any) -> None:
        self.stopped = {int(pid): float(t) for pid, t in dict(data["stopped"]).items()}
        self.root = int(data["root"]) if data.get("root") else None
        self.root_started = float(data.get("root_started") or 0.0)
        self.engine = int(data.get("engine") or 0)
        self.engine_started = float(data.get("engine_started") or 0.0)

    @classmethod
    def read(cls, path: Path) -> _Record:
        return cls(json.loads(read_bounded(path, RECORD_LIMIT)))


def _gone(pid: int, started: float, wait: float) -> bool:
    """Whether process `pid` (started at `started`) is gone, or goes within `wait` seconds."""
    deadline = time.monotonic() + wait
    while _process(pid, started) is not None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def end_process_tree(
    root: psutil.Process | None,
    groups: list[psutil.Process] | None = None,
    grace: float = END_GRACE_S,
) -> list[int]:
    """End `root`, everything under it and under each of `groups`: continued first (a stopped
    process cannot act on SIGTERM), then SIGTERM (ninja removes the outputs of the jobs it
    interrupts), then SIGKILL for what still runs after `grace` seconds. The pids ended."""
    procs: dict[int, psutil.Process] = {}
    for top in [root, *(groups or [])]:
        if top is None:
            continue
        with contextlib.suppress(psutil.Error):
            for p in [top, *top.children(recursive=True)]:
                procs[p.pid] = p
    for p in procs.values():
        with contextlib.suppress(psutil.Error):
            p.resume()
    for p in procs.values():
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(list(procs.values()), timeout=grace)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=grace)
    return sorted(procs)


def _process(pid: int, started: float) -> psutil.Process | None:
    """The live process `pid`, if it is still the one that started at `started` (0: any)."""
    try:
        p = psutil.Process(pid)
        if started and abs(p.create_time() - started) > 0.01:
            return None  # the pid was reused
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        return p
    except psutil.Error:
        return None


def watch(stopped_file: Path) -> None:
    """The watchdog: wait for the governing engine to end (end-of-file on stdin); if it ended
    without stopping its governor (the record is still there), continue and end what it left."""
    while sys.stdin.buffer.read(4096):
        pass
    end_orphaned_build(stopped_file, engine_exit_wait=WATCHDOG_ENGINE_EXIT_WAIT_S)


if __name__ == "__main__":
    watch(Path(sys.argv[1]))
