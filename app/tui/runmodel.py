"""What a run looks like so far, folded from engine events (no Textual here).

The Run screen renders this; the Summary and Resume screens read it. Each action keeps only
its last lines in memory (`KEEP_LINES`): the whole output is in the action's log file.
"""

from __future__ import annotations

import functools
import io
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from app.console import ConsolePrinter
from steps.formats import events as ev

KEEP_LINES = 2000
OVERVIEW = "run"  # the pseudo-action whose lines tell the whole run, as `mlsetup apply` prints
SPARK_SAMPLES = 180  # the sparkline's minutes at one sample a second
THROTTLE_LINES = 20


@dataclass
class ActionView:
    id: str
    step: str
    title: str
    kind: str = ""  # steps.formats.plan.ActionKind, from the plan or the action's events
    command: str = ""
    log: str = ""
    # pending | running | done | failed | already-done | dry-run | offline (a stack resolution
    # that found no index, after which the engine kept the venv as it is, unlocked)
    status: str = "pending"
    started: float | None = None
    elapsed: float | None = None
    exit_code: int | None = None
    lines: deque[str] = field(default_factory=lambda: deque(maxlen=KEEP_LINES))
    total_lines: int = 0


@dataclass
class MemoryView:
    sample: ev.MemorySample | None = None
    history: deque[float] = field(default_factory=lambda: deque(maxlen=SPARK_SAMPLES))
    throttles: deque[str] = field(default_factory=lambda: deque(maxlen=THROTTLE_LINES))
    progress: ev.BuildProgress | None = None
    first_progress: ev.BuildProgress | None = None

    @property
    def active(self) -> bool:
        return self.sample is not None or self.progress is not None

    def eta_seconds(self, now: float | None = None) -> float | None:
        """What is left at the rate the objects have been done since the first count, up to
        `now`: while no object finishes the rate falls and the ETA grows, instead of standing
        still until the next one (45m07s at 223 s and at 255 s)."""
        first, last = self.first_progress, self.progress
        if first is None or last is None or last.done <= first.done or last.t <= first.t:
            return None
        now = max(now or last.t, last.t)
        rate = (last.done - first.done) / (now - first.t)
        return (last.total - last.done) / rate


@dataclass
class RunModel:
    dry_run: bool = False
    run_id: str | None = None
    resumed: bool = False
    plan: dict[str, Any] | None = None
    steps: dict[str, str] = field(default_factory=dict)  # step -> pending|running|done|...
    actions: dict[str, ActionView] = field(default_factory=dict)
    current: str | None = None
    notices: list[str] = field(default_factory=list)
    failed: ev.Failed | None = None
    reboot: ev.RebootNeeded | None = None
    finished: ev.Finished | None = None
    lost: str | None = None
    memory: MemoryView = field(default_factory=MemoryView)
    t0: float | None = None
    overview: ActionView = field(
        default_factory=lambda: ActionView(OVERVIEW, "", "The whole run", status="running")
    )
    _printer: ConsolePrinter | None = None
    _out: io.StringIO = field(default_factory=io.StringIO)

    def _kept_unlocked(self, notice: ev.Notice) -> None:
        """The engine's note that it went on without a lock names the failed resolution it
        excuses (steps/apply/settle.py, StackUnavailable): that action is no failure then."""
        view = self.actions.get(notice.excuses or "")
        if view is not None and view.status == "failed" and self.failed is None:
            view.status = "offline"
            self.steps[view.step] = "running"

    def handle(self, event: ev.Event) -> None:
        if self.t0 is None:
            self.t0 = event.t
        if not isinstance(event, (ev.Output, ev.MemorySample, ev.BuildProgress)):
            self._print(event)
        self._take(event)

    # One handler per event type, as the console's (an event type without one changes nothing).
    @functools.singledispatchmethod
    def _take(self, event: ev.Event) -> None:
        pass

    @_take.register
    def _run_started(self, event: ev.RunStarted) -> None:
        self.run_id, self.dry_run, self.resumed = event.run_id, event.dry_run, event.resumed
        self.t0 = event.t

    @_take.register
    def _plan_made(self, event: ev.PlanMade) -> None:
        if self.plan is None:
            self._take_plan(event.plan)

    @_take.register
    def _step_satisfied(self, event: ev.StepSatisfied) -> None:
        self.steps[event.step] = "satisfied"

    @_take.register
    def _step_started(self, event: ev.StepStarted) -> None:
        self.steps[event.step] = "running"

    @_take.register
    def _action_started(self, event: ev.ActionStarted) -> None:
        view = self.actions.get(event.action)
        if view is None:
            view = self.actions[event.action] = ActionView(event.action, event.step, "")
        view.step, view.kind = event.step, event.action_kind or view.kind
        view.title, view.command, view.log = event.title, event.command, event.log
        view.status, view.started = "running", event.t
        self.current = event.action

    @_take.register
    def _action_finished(self, event: ev.ActionFinished) -> None:
        view = self.actions.get(event.action) or ActionView(event.action, event.step, "")
        view.kind = event.action_kind or view.kind
        self.actions[event.action] = view
        view.status, view.elapsed, view.exit_code = event.status, event.elapsed, event.exit_code
        if event.status == "failed":
            self.steps[event.step] = "failed"
        elif self._step_done(event.step):
            # a dry run's step is walked, not done: its mark is the actions' own (○)
            walked = any(
                a.status == "dry-run" for a in self.actions.values() if a.step == event.step
            )
            self.steps[event.step] = "dry-run" if walked else "done"

    @_take.register
    def _notice(self, event: ev.Notice) -> None:
        self.notices.append(event.text)
        self._kept_unlocked(event)

    @_take.register
    def _waiting(self, event: ev.Waiting) -> None:
        self.notices.append(event.reason)

    @_take.register
    def _failed(self, event: ev.Failed) -> None:
        self.failed = event
        self.steps[event.step] = "failed"

    @_take.register
    def _reboot_needed(self, event: ev.RebootNeeded) -> None:
        self.reboot = event
        self.notices.append(f"reboot needed after {event.action}: {event.next}")

    @_take.register
    def _finished(self, event: ev.Finished) -> None:
        self.finished = event

    @_take.register
    def _memory_sample(self, event: ev.MemorySample) -> None:
        self.memory.sample = event
        if (pct := budget_percent(event)) is not None:
            self.memory.history.append(pct)

    @_take.register
    def _throttle(self, event: ev.Throttle) -> None:
        self.memory.throttles.append(throttle_line(event))

    @_take.register
    def _build_progress(self, event: ev.BuildProgress) -> None:
        if self.memory.first_progress is None:
            self.memory.first_progress = event
        self.memory.progress = event

    def _print(self, event: ev.Event) -> None:
        """The overview: each event as the plain console renderer prints it."""
        if self._printer is None:
            self._printer = ConsolePrinter(self._out)
        self._printer(event)
        text = self._out.getvalue()
        if text:
            self._out.seek(0)
            self._out.truncate()
            lines = text.splitlines()
            self.overview.lines.extend(lines)
            self.overview.total_lines += len(lines)
        if isinstance(event, ev.Finished):
            self.overview.status = "done" if event.code == 0 else "failed"

    def view(self, action: str) -> ActionView | None:
        return self.overview if action == OVERVIEW else self.actions.get(action)

    def lines(self, action: str, lines: list[str]) -> ActionView:
        view = self.actions.get(action)
        if view is None:
            # output before its action-start (a stream joined midway): the step comes with it
            view = self.actions[action] = ActionView(action, "", action)
        view.lines.extend(lines)
        view.total_lines += len(lines)
        return view

    def _take_plan(self, plan: dict[str, Any]) -> None:
        self.plan = plan
        for step in plan["steps"]:
            self.steps[step["name"]] = "pending" if step["status"] == "pending" else "satisfied"
            for action in step["actions"]:
                self.actions.setdefault(
                    action["id"],
                    ActionView(action["id"], step["name"], action["title"], action.get("kind", "")),
                )

    def _step_done(self, step: str) -> bool:
        return all(
            a.status in ("done", "already-done", "dry-run", "offline")
            for a in self.actions.values()
            if a.step == step
        )

    @property
    def done(self) -> bool:
        return self.finished is not None or self.lost is not None

    def elapsed(self, now: float | None = None) -> float:
        return (now or time.time()) - (self.t0 or now or time.time())


def budget_percent(sample: ev.MemorySample) -> float | None:
    """RAM as a share of the one budget the gauge draws: the build's RSS of what the governor
    lets it hold; from an engine that did not say (an older event log), the machine's RAM."""
    if sample.budget_bytes and sample.build_bytes is not None:
        return 100.0 * sample.build_bytes / sample.budget_bytes
    if sample.total_bytes:
        return 100.0 * sample.used_bytes / sample.total_bytes
    return None


def throttle_line(event: ev.Throttle) -> str:
    """'limit 12 → 8 jobs: reason', one line per governor decision: the limit it set, not a
    second count of running jobs."""
    reason = f": {event.reason}" if event.reason else ""
    return f"limit {event.jobs_from} → {event.jobs_to} jobs{reason}"
