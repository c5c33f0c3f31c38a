"""What a build leaves running: a daemon its build backend double-forked, its process group and
session. A build step ends with its main process (docs/design.md, "Trust"): what it leaves is
ended then, and sooner whatever holds the build's own output open (pip reads its backend's
output to the end, so a daemon keeping that pipe would hold the step for as long as it lives).

While a build runs this process is a child subreaper (prctl PR_SET_CHILD_SUBREAPER): an orphan
of the build becomes our child instead of init's, so none escapes by forking twice and
calling setsid. Every process under us that was not there before the build started is the
build's; each is known by its pid and start time, never by its pid alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from pathlib import Path
from types import TracebackType

import psutil

from steps.building.orphans import end_process_tree

PR_SET_CHILD_SUBREAPER = 36  # prctl(2)


def identity(p: psutil.Process) -> tuple[int, float]:
    """A process as itself: its pid and its start time (a pid alone may be reused)."""
    try:
        return p.pid, p.create_time()
    except psutil.Error:
        return p.pid, 0.0


class Leftovers:
    """The processes a build command started that outlive their parents. Use as a context
    around the command's whole life: this process is their subreaper meanwhile."""

    def __init__(self) -> None:
        # ours before the build (a governor's watchdog, a wizard's own): never the build's
        self._before = {identity(p) for p in psutil.Process().children(recursive=True)}

    def __enter__(self) -> Leftovers:
        _subreaper(True)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _subreaper(False)

    def remaining(self) -> list[psutil.Process]:
        """Every process under us that the build started (the main process included, if it
        still runs)."""
        return [
            p for p in psutil.Process().children(recursive=True) if identity(p) not in self._before
        ]

    def holding_output(self, main: int) -> list[psutil.Process]:
        """The build's orphans (now our own children) that hold open for writing a pipe that the
        main process's tree reads: its output cannot end while they live."""
        orphans = [
            p
            for p in psutil.Process().children()
            if p.pid != main and identity(p) not in self._before
        ]
        if not orphans:
            return []
        try:
            tree = [psutil.Process(main), *psutil.Process(main).children(recursive=True)]
        except psutil.Error:
            return []
        read = set().union(*(_pipes(p.pid, os.O_RDONLY) for p in tree))
        return [p for p in orphans if _pipes(p.pid, os.O_WRONLY) & read]

    def end(self, procs: list[psutil.Process]) -> list[int]:
        """End `procs` and everything under them (SIGTERM, then SIGKILL); the pids ended."""
        ended = end_process_tree(None, procs)
        self._before.update(identity(p) for p in procs)  # gone: nothing to end twice
        return ended


def _pipes(pid: int, access: int) -> set[str]:
    """The pipes ("pipe:[inode]") process `pid` has open for `access` (os.O_RDONLY or
    os.O_WRONLY), read from /proc (root may look at every process's descriptors)."""
    out: set[str] = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if not target.startswith("pipe:"):
                    continue
                info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
                flags = next(ln for ln in info.splitlines() if ln.startswith("flags:"))
                if int(flags.split()[1], 8) & os.O_ACCMODE == access:
                    out.add(target)
    return out


def _subreaper(on: bool) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)
