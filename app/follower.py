"""Following a detached run through its event log: the one loop `mlsetup apply`/`attach`
and the wizard both read a run with.

The engine runs on its own (steps.apply.service.start_detached) and appends its events to the
run's event log; a follower tails that log from the run's start to its Finished event. It
ends early when the engine is gone (it holds the apply lock until it ends), when the engine
never announced its run within START_TIMEOUT, or when the front end cancels; `lost()` then
says which, in words a person can act on.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from steps.apply.diagnose import unwritable
from steps.apply.engine import ApplyLock
from steps.core.nextcommands import RESUME_COMMAND
from steps.core.paths import Paths
from steps.core.rootfs import RootFS
from steps.formats import events as ev

START_TIMEOUT = 60.0  # seconds for a detached engine to announce its run
LOG_TAIL = 20  # lines of the engine's own output shown when it did not start


class RunFollower:
    def __init__(
        self,
        fs: RootFS,
        ticket: str | None,
        *,
        lock_handed: bool = False,
        cancelled: Callable[[], bool] = lambda: False,
        poll: float = 0.1,
        then: Callable[[], str] = lambda: RESUME_COMMAND,
    ) -> None:
        """`ticket`: the start to follow (None: the current run, replayed from its start).
        `lock_handed`: the starter handed the engine the apply lock, so a lock nobody holds
        before the run's start means the engine is already gone (else it takes the lock
        itself when it starts, and only the timeout tells a start that never came).
        `then`: the command that goes on from what is on disk once the run is lost."""
        self.paths = Paths(fs)
        self.ticket = ticket
        self.lock_handed = lock_handed
        self.cancelled = cancelled
        self.poll = poll
        self.then = then
        self.started = ticket is None  # the run's RunStarted was seen (replay: from the start)
        self.finished: ev.Finished | None = None

    def events(self) -> Iterator[ev.Event]:
        """The run's events, from its RunStarted to its Finished (or until it is lost)."""
        lock = ApplyLock(self.paths.lock)
        since = time.monotonic()

        def stop() -> bool:
            if self.cancelled():
                return True
            if self.started:
                return lock.holder() is None
            if self.lock_handed and lock.holder() is None:
                return True
            return time.monotonic() - since > START_TIMEOUT

        def skip(line: str) -> bool:  # until our run starts, only a run's start matters
            return not self.started and ev.kind_of(line) != ev.RunStarted.kind

        for event in ev.follow(self.paths.current_events, stop=stop, poll=self.poll, skip=skip):
            if isinstance(event, ev.RunStarted) and self.ticket is not None:
                # another start after ours (ours died without a Finished and a new apply took
                # over the stream) is not this viewer's run: stop showing it
                self.started = event.ticket == self.ticket
            if not self.started:
                continue
            yield event
            if isinstance(event, ev.Finished):
                self.finished = event
                return

    def lost(self) -> str:
        """Why the events ended without a Finished event: what happened and what to do."""
        full = self._full_disk()
        if full is not None:  # the engine could not write what it would have said
            return unwritable_text(str(full), errno.ENOSPC, self.then())
        if not self.started:
            tail = self.engine_log_tail()
            return "the engine did not start; its output:\n" + "\n".join(
                f"  | {line}" for line in tail
            )
        return f"the engine stopped without finishing (killed?); continue with: {self.then()}"

    def engine_log_tail(self, lines: int = LOG_TAIL) -> list[str]:
        """The last lines the detached engine wrote outside its event log."""
        try:
            return (
                (self.paths.log_dir / "engine.log")
                .read_text(errors="replace")
                .splitlines()[-lines:]
            )
        except OSError:
            return []

    def _full_disk(self) -> Path | None:
        """mlsetup's state or log directory, if its disk has no space left."""
        for directory in (self.paths.state_dir, self.paths.log_dir):
            try:
                st = os.statvfs(directory)
            except OSError:
                continue
            if st.f_bavail * st.f_frsize < 64 * 1024:
                return directory
        return None


def unwritable_text(path: str, error: int, then: str | None = None) -> str:
    """What a write of mlsetup's own that failed with `error` (ENOSPC, EDQUOT, EROFS) says."""
    diagnosis = unwritable(path, error, then)
    what = (
        f"the file system is read-only where mlsetup writes {path}"
        if error == errno.EROFS
        else f"no space left on the device to write {path}"
    )
    return f"{what}: {diagnosis.why}\n  next: {diagnosis.next}"
