"""The engine's event stream: what happened, as it happens, for every front end.

The engine appends one JSON object a line to `/var/log/mlsetup/events.jsonl`
(see `steps.core.paths`); the wizard, `mlsetup attach` and the plain console all
read the same stream, so a viewer can start, die and start again without the
engine noticing. Each event is a frozen dataclass; `kind` names it on the wire.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, TextIO

from steps.core.safefs import open_append


@dataclass(frozen=True)
class Event:
    kind: ClassVar[str] = ""
    t: float = field(default_factory=time.time, kw_only=True)

    def to_json(self) -> str:
        return json.dumps({"kind": self.kind, **asdict(self)}, separators=(",", ":"))


_KINDS: dict[str, type[Event]] = {}


def _event(cls: type[Event]) -> type[Event]:
    _KINDS[cls.kind] = cls
    return cls


@_event
@dataclass(frozen=True)
class RunStarted(Event):
    kind: ClassVar[str] = "run-start"
    run_id: str
    pid: int
    dry_run: bool
    resumed: bool
    ticket: str | None  # set by the viewer that started this engine, to find its run


@_event
@dataclass(frozen=True)
class Notice(Event):
    """Something the operator should read that is not a failure. `excuses`: the id of an
    action that failed just before and that this notice says is no failure of the run (a stack
    resolution that found no index, after which the venv was kept as it is)."""

    kind: ClassVar[str] = "notice"
    text: str
    excuses: str | None = None


@_event
@dataclass(frozen=True)
class PlanMade(Event):
    kind: ClassVar[str] = "plan"
    plan: dict[str, Any]  # mlsetup.plan/1


@_event
@dataclass(frozen=True)
class StepSatisfied(Event):
    kind: ClassVar[str] = "step-satisfied"
    step: str
    reason: str


@_event
@dataclass(frozen=True)
class StepStarted(Event):
    kind: ClassVar[str] = "step-start"
    step: str
    reason: str
    actions: list[str]


@_event
@dataclass(frozen=True)
class ActionStarted(Event):
    kind: ClassVar[str] = "action-start"
    step: str
    action: str
    title: str
    command: str  # as a person would type it
    log: str
    action_kind: str = ""  # steps.formats.plan.ActionKind ("" in streams written before it existed)


@_event
@dataclass(frozen=True)
class Output(Event):
    kind: ClassVar[str] = "output"
    action: str
    line: str


@_event
@dataclass(frozen=True)
class ActionFinished(Event):
    kind: ClassVar[str] = "action-end"
    step: str
    action: str
    status: str  # done | failed | already-done | dry-run
    exit_code: int | None
    elapsed: float
    action_kind: str = ""  # steps.formats.plan.ActionKind ("" in streams written before it existed)


@_event
@dataclass(frozen=True)
class Waiting(Event):
    kind: ClassVar[str] = "waiting"
    reason: str


@_event
@dataclass(frozen=True)
class MemorySample(Event):
    kind: ClassVar[str] = "memory"
    used_bytes: int
    total_bytes: int
    available_bytes: int
    swap_used_bytes: int
    psi_some_avg10: float | None
    jobs_running: int
    jobs_allowed: int
    jobs_frozen: int
    # the build's own RSS and the most the governor lets it hold (build.memory_limit, or all
    # but the reserve): the one budget the wizard's gauge draws; None in older event logs
    build_bytes: int | None = None
    budget_bytes: int | None = None


@_event
@dataclass(frozen=True)
class Throttle(Event):
    kind: ClassVar[str] = "throttle"
    jobs_from: int
    jobs_to: int
    reason: str


@_event
@dataclass(frozen=True)
class BuildProgress(Event):
    kind: ClassVar[str] = "progress"
    action: str
    done: int
    total: int


@_event
@dataclass(frozen=True)
class RebootNeeded(Event):
    kind: ClassVar[str] = "reboot-needed"
    action: str
    policy: str
    next: str  # what the operator does now


@_event
@dataclass(frozen=True)
class Failed(Event):
    kind: ClassVar[str] = "failed"
    step: str
    action: str | None
    exit_code: int | None
    log: str | None
    what: str  # what happened
    why: str  # the diagnosis, in plain words
    next: str  # the command to run next


@_event
@dataclass(frozen=True)
class Finished(Event):
    kind: ClassVar[str] = "end"
    code: int  # the contract's exit code
    result: str  # done | failed | reboot
    summary: str


def event_from_json(line: str) -> Event:
    data = json.loads(line)
    cls = _KINDS[data.pop("kind")]
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


EventSink = Callable[[Event], None]


class EventLog:
    """Appends events to the stream file; each line is flushed as it is written."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # root appends here: never through a link planted in its place (that is set aside), and
        # 0600 from the start
        fd, self.set_aside = open_append(path)
        self._file = os.fdopen(fd, "a", encoding="utf-8")

    def __call__(self, event: Event) -> None:
        self._file.write(event.to_json() + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def kind_of(line: str) -> str | None:
    """The kind of the event on a line of a stream, read without parsing it (`to_json` writes
    the kind first)."""
    if not line.startswith('{"kind":"'):
        return None
    return line[9 : line.find('"', 9)]


def follow(
    path: Path,
    stop: Callable[[], bool] = lambda: False,
    poll: float = 0.1,
    skip: Callable[[str], bool] = lambda line: False,
) -> Iterator[Event]:
    """Every event in the stream at `path` from its start, then new ones as they are written.

    `path` may be a symlink to the current run's stream: when it is re-pointed (a new run
    started), the new stream is followed from its start. Ends when `stop()` is true while
    there is nothing new to read; the caller decides which event ends its interest. A line
    `skip` is true of is passed over unparsed (a viewer of a new start has no use for the
    thousands of events of the run before it).
    """
    current: Path | None = None
    f = None
    buffer = ""
    try:
        while True:
            chunk = f.readline() if f is not None else ""
            if chunk:
                buffer += chunk
                if buffer.endswith("\n"):  # else: a line still being written
                    if not skip(buffer):
                        yield event_from_json(buffer)
                    buffer = ""
                continue
            # At the end of what is written (not at every line: a stream can hold a whole
            # build's output): has a new run re-pointed the link?
            target = path.resolve() if path.exists() else None
            if target is not None and target != current:
                if f is not None:
                    yield from _drain(f, buffer, skip)
                    f.close()
                f, current, buffer = target.open(encoding="utf-8"), target, ""
            elif stop():
                # the writer may have appended its last events (a Finished) between the
                # read that found nothing and the check that found it gone: read them first
                if f is not None:
                    yield from _drain(f, buffer, skip)
                return
            else:
                time.sleep(poll)
    finally:
        if f is not None:
            f.close()


def _drain(f: TextIO, buffer: str, skip: Callable[[str], bool]) -> Iterator[Event]:
    """The whole lines left in `f`; a last line cut short (its writer died mid-write) is
    not an event."""
    for line in (buffer + f.read()).splitlines(keepends=True):
        if line.endswith("\n") and line.strip() and not skip(line):
            yield event_from_json(line)
