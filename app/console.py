"""Plain-text renderings of Facts and Plans for a terminal or a log."""

from __future__ import annotations

import functools
import sys
from collections import deque
from typing import TextIO

from app.machine_summary import machine_rows, rows_text
from steps.core.printable import printable
from steps.core.sizes import clock, duration
from steps.decide.planwarnings import machine_warnings
from steps.formats.events import (
    ActionFinished,
    ActionStarted,
    BuildProgress,
    Event,
    Failed,
    Finished,
    Notice,
    Output,
    PlanMade,
    RebootNeeded,
    RunStarted,
    StepSatisfied,
    StepStarted,
    Throttle,
    Waiting,
)
from steps.formats.facts import Facts
from steps.formats.plan import Plan
from steps.planning.registry import label_width


def facts_text(facts: Facts, notes: list[str] | None = None, warnings: bool = True) -> str:
    lines = [rows_text(machine_rows(facts, detailed=True), width=12)]
    shown = ([w.text for w in machine_warnings(facts)] if warnings else []) + (notes or [])
    if shown:
        lines.append("")
        lines += [f"warning: {w}" for w in shown]
    return printable("\n".join(lines) + "\n")


def plan_text(plan: Plan) -> str:
    lines = []
    if plan.warnings:
        lines += [f"warning: {w}" for w in plan.warnings] + [""]
    for n, step in enumerate(plan.steps, 1):
        mark = "✓" if step.status == "satisfied" else "→"
        lines.append(f"{n}. {step.name:<{label_width()}}{mark} {step.status}: {step.reason}")
        for action in step.actions:
            reboot = "  (reboot after)" if action.reboot_after else ""
            lines.append(f"     [{action.id}] {action.title}{reboot}")
            lines.append(f"       $ {action.command_line()}")
    pending = sum(len(s.actions) for s in plan.steps)
    lines.append("")
    lines.append(
        f"{pending} action(s) to run." if pending else "Nothing to do: every step is satisfied."
    )
    return printable("\n".join(lines) + "\n")


class ConsolePrinter:
    """Events as plain progress lines, fit for a terminal, a log file or cloud-init; what they
    carry from outside (output, diagnoses, lock notes) written `printable`."""

    HEARTBEAT = 30.0  # seconds of quiet before a long action says it is still running
    TAIL = 15  # output lines shown above a failure

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.t0: float | None = None
        self.step = ""
        self.last_print = 0.0
        self.started: dict[str, float] = {}
        self.tail: deque[str] = deque(maxlen=self.TAIL)
        self.dry_run = False

    def _print(self, t: float, text: str, step: str | None = None) -> None:
        if self.t0 is None:
            self.t0 = t
        label = self.step if step is None else step
        self._write(f"[{clock(t - self.t0)}] {label:<{label_width()}} {text}\n")
        self.out.flush()
        self.last_print = t

    def _write(self, text: str) -> None:
        self.out.write(printable(text))

    # One handler per event type (an event type without one prints nothing).
    @functools.singledispatchmethod
    def __call__(self, event: Event) -> None:
        pass

    @__call__.register
    def _run_started(self, event: RunStarted) -> None:
        self.t0 = event.t
        self.dry_run = event.dry_run
        what = (
            "dry run (nothing is executed)"
            if event.dry_run
            else ("resuming" if event.resumed else "starting")
        )
        self._print(event.t, f"mlsetup {what}: run {event.run_id}, engine pid {event.pid}", "")

    @__call__.register
    def _plan_made(self, event: PlanMade) -> None:
        t = event.t
        pending = [s for s in event.plan["steps"] if s["status"] == "pending"]
        n = sum(len(s["actions"]) for s in pending)
        self._print(t, f"plan: {len(pending)} step(s) to do, {n} action(s)", "")
        for step in pending:
            titles = "; ".join(a["title"] for a in step["actions"]) or step["reason"]
            self._print(t, f"  {step['name']}: {titles}", "")
        for w in event.plan["warnings"]:
            self._print(t, f"warning: {w}", "")

    @__call__.register
    def _step_satisfied(self, event: StepSatisfied) -> None:
        self.step = event.step
        self._print(event.t, f"✓ {event.reason}")

    @__call__.register
    def _step_started(self, event: StepStarted) -> None:
        self.step = event.step
        self._print(event.t, f"▶ {event.reason} ({len(event.actions)} action(s))")

    @__call__.register
    def _action_started(self, event: ActionStarted) -> None:
        self.started[event.action] = event.t
        self.tail.clear()
        self._print(event.t, f"  · {event.title}")
        self._print(event.t, f"    $ {event.command}")

    @__call__.register
    def _output(self, event: Output) -> None:
        t = event.t
        self.tail.append(event.line)
        if t - self.last_print >= self.HEARTBEAT:
            ran = t - self.started.get(event.action, t)
            self._print(
                t, f"    … {event.action} running {duration(ran)}: {event.line.strip()[:90]}"
            )

    @__call__.register
    def _build_progress(self, event: BuildProgress) -> None:
        if event.t - self.last_print >= self.HEARTBEAT:
            self._print(event.t, f"    … compiled {event.done}/{event.total}")

    @__call__.register
    def _action_finished(self, event: ActionFinished) -> None:
        mark = {"done": "✓", "failed": "✗", "already-done": "✓", "dry-run": "·"}[event.status]
        extra = {
            "already-done": " (done in an earlier run)",
            "dry-run": " (dry run: not executed)",
        }.get(event.status, "")
        took = f" in {duration(event.elapsed)}" if event.status in ("done", "failed") else ""
        code = f" exit {event.exit_code}" if event.status == "failed" else ""
        self._print(event.t, f"  {mark} {event.action}{code}{took}{extra}")
        if event.action_kind == "smoke" and event.status == "done" and self.tail:
            self._print(event.t, f"    → {self.tail[-1]}")  # what the smoke test showed

    @__call__.register
    def _waiting(self, event: Waiting) -> None:
        self._print(event.t, f"  … {event.reason}")

    @__call__.register
    def _notice(self, event: Notice) -> None:
        if event.excuses:  # the ✗ printed above it is no failure of the run
            self._print(event.t, f"  ! {event.excuses}: not a failure of the run")
        self._print(event.t, f"note: {event.text}")

    @__call__.register
    def _throttle(self, event: Throttle) -> None:
        self._print(
            event.t, f"    memory: jobs {event.jobs_from} → {event.jobs_to} ({event.reason})"
        )

    @__call__.register
    def _reboot_needed(self, event: RebootNeeded) -> None:
        self._print(event.t, f"⟳ reboot needed after {event.action}: {event.next}")

    @__call__.register
    def _failed(self, event: Failed) -> None:
        self._print(event.t, f"✗ {event.what}", event.step)
        pad = " " * 8
        if self.tail:
            self._write(f"{pad}last output:\n")
            for line in self.tail:
                self._write(f"{pad}  | {line}\n")
        self._write(f"{pad}why:  {event.why}\n{pad}next: {event.next}\n")
        if event.log:
            self._write(f"{pad}log:  {event.log}\n")

    @__call__.register
    def _finished(self, event: Finished) -> None:
        # a dry run's summary says itself that nothing was done: no "done:" before it
        result = "" if self.dry_run and event.result == "done" else f"{event.result}: "
        self._print(event.t, f"{result}{event.summary} (exit {event.code})", "")
