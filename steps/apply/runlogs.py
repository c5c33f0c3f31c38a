"""Where one apply's record goes: the event sinks (the front end's, then the run's
events.jsonl), the run's decisions.log, the `current` link viewers follow, and where the
process's time went. The engine owns one; what it says goes through `emit`."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from pathlib import Path

import psutil

from steps.apply.applyrun import naming
from steps.apply.decisionlog import DecisionLog
from steps.core.paths import Paths
from steps.formats.events import Event, EventLog, EventSink


class RunLogs:
    def __init__(self, sink: EventSink) -> None:
        self._sinks: list[EventSink] = [sink]
        self._event_log: EventLog | None = None
        self._events: Path | None = None
        self._decisions: DecisionLog | None = None
        self.notes: list[str] = []  # what opening this run's logs set aside, to say so
        self._marks: dict[str, float] = {}  # monotonic times of the run's phases, for the log

    def emit(self, event: Event) -> None:
        for sink in self._sinks:
            try:
                sink(event)
            except OSError as exc:  # the event stream's disk is full: say which file
                if sink is not self._event_log or exc.filename is not None:
                    raise
                raise naming(exc, self._events) from exc

    def emit_what_can(self, events: Iterable[Event]) -> None:
        """`events` to every sink that can still take them (a disk is full or read-only)."""
        for event in events:
            for sink in self._sinks:
                with contextlib.suppress(OSError):
                    sink(event)

    def open(self, paths: Paths, run_id: str) -> None:
        """The run's log folder, its events.jsonl and decisions.log, and `current` pointing
        at it."""
        run_dir = paths.run_dir(run_id)
        run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        paths.log_dir.chmod(0o700)
        self._events = run_dir / "events.jsonl"
        self._event_log = EventLog(self._events)
        self._sinks.append(self._event_log)
        self._decisions = DecisionLog(run_dir / "decisions.log")
        if self._event_log.set_aside is not None:
            self.notes.append(
                f"{self._events} was not a log file of root's own: moved it to "
                f"{self._event_log.set_aside}, unread and unfollowed"
            )
        if self._decisions.note:
            self.notes.append(self._decisions.note)
        tmp = paths.log_dir / ".current.tmp"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(run_id)
        os.replace(tmp, paths.current_run)  # viewers follow the symlink to the newest run

    def close(self) -> None:
        if self._decisions is not None:
            self._decisions.close()

    def mark(self, phase: str) -> None:
        """The run reached `phase` ("started", "settled", "steps") now."""
        self._marks[phase] = time.monotonic()

    def spent(self) -> str:
        """Where this process's time went, phase by phase (a second apply's is the first place
        to look when it is slow: issue 24)."""
        now = time.monotonic()
        since_exec = time.time() - psutil.Process().create_time()
        marks = self._marks
        started = marks.get("started", now)
        parts = [
            f"{since_exec - (now - started):.2f} s to start the run (interpreter, imports, "
            "input check, handover, apply lock, state)"
        ]
        previous = started
        for mark, what in (("settled", "to settle the stack"), ("steps", "for the steps")):
            if mark in marks:
                parts.append(f"{marks[mark] - previous:.2f} s {what}")
                previous = marks[mark]
        parts.append(f"{now - previous:.2f} s to finish (state, report)")
        return f"{since_exec:.2f} s in this process: " + ", ".join(parts)
