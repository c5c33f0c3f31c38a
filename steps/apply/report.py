"""`/var/lib/mlsetup/report.json` (`mlsetup.report/1`): what one apply did, for scripts and Ansible.

Written by the engine at the end of every run (done, failed, paused for a reboot) through
`Report`, so the keys the Ansible role reads (result, code, changed, ran, failure, steps,
lock, smoke, log_dir) have one definition; docs/formats.md documents each of them.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from steps.core.nextcommands import answers_command
from steps.decide.choices import Choices
from steps.formats.answers import Answers
from steps.formats.events import Failed
from steps.formats.facts import Facts
from steps.formats.lock import STATE_LOCK, Lock
from steps.formats.plan import Plan, Step, StepName
from steps.formats.state import State, write_atomic
from steps.planning import registry

REPORT_SCHEMA: Final = "mlsetup.report/1"
RunResult = Literal["done", "failed", "reboot"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Failure(_Strict):
    """Why the run stopped: the same what / why / next the console and the TUI showed."""

    step: str = Field(
        description="the step that failed (a step name; start when nothing had begun)"
    )
    action: str | None = Field(
        description="the action that failed, or null (a check between actions)"
    )
    exit_code: int | None = Field(description="its exit code, null if it did not run or end")
    log: str | None = Field(description="the action's log file")
    what: str = Field(description="what happened")
    why: str = Field(description="why, as the diagnosis knows it")
    next: str = Field(description="the command or fix to do next")
    diagnosis: str | None = Field(
        description="id of the recognised failure (assets/diagnoses.toml), null if none"
    )
    last_output: list[str] = Field(description="the action's last output lines (at most 20)")
    url: str | None = Field(
        default=None,
        description="the URL it could not fetch (an index, a download), null when none is named",
    )

    def event(self) -> Failed:
        """The Failed event that tells the front ends what this records."""
        return Failed(
            step=self.step,
            action=self.action,
            exit_code=self.exit_code,
            log=self.log,
            what=self.what,
            why=self.why,
            next=self.next,
        )


class ActionReport(_Strict):
    """One action of the plan, as the state file recorded it (a pending one: id and status)."""

    id: str = Field(description="the plan's action id, e.g. toolkit.install-13.0")
    status: Literal["pending", "running", "done", "failed"] = Field(
        description="pending: not run yet in this run (then only id and status are present)"
    )
    started: float | None = Field(default=None, description="unix time it started")
    ended: float | None = Field(default=None, description="unix time it ended")
    exit_code: int | None = Field(default=None, description="its exit code, null while running")
    log: str | None = Field(default=None, description="its log file")

    @model_serializer(mode="wrap")
    def _pending_is_bare(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {"id": self.id, "status": "pending"} if self.status == "pending" else data


class StepReport(_Strict):
    name: StepName
    status: Literal["pending", "satisfied"] = Field(
        description="as the latest plan of this invocation found it"
    )
    reason: str = Field(description="why it is satisfied, or what its actions will do")
    actions: list[ActionReport] = Field(description="its actions, in order")


class LockReport(_Strict):
    """The one stack every step followed (steps.formats.lock), and the file itself."""

    torch: str = Field(description="the locked torch version, e.g. 2.11.0+cu130")
    build: str = Field(description="the PyTorch build: cpu, cu128, ...")
    python: str = Field(description="the venv's Python (major.minor)")
    platform: str = Field(description="the platform resolved for, e.g. x86_64-manylinux_2_35")
    decided_by: list[str] = Field(
        description="the packages that decided the torch version (an extension whose build's "
        "C++ standard keeps torch below a series, by its recipe's name)"
    )
    note: str = Field(
        description="how the build was settled, when it was not the first choice, and why an "
        "extension bounds torch (flash-attn 2.8.3 builds with C++17; torch >= 2.14 needs C++20)"
    )
    packages: dict[str, str] = Field(description="every pinned package: name -> version")
    index: str = Field("", description="the package index it was resolved from")
    sources: list[str] = Field(
        default_factory=list,
        description='pins with no wheel ("name version"), built by the venv\'s owner at the sync',
    )
    python_reason: str = Field("", description='why this Python, when "auto" chose one')
    held_back: list[str] = Field(
        default_factory=list,
        description="requested packages locked in an older series than their newest, each with "
        "the requirement uv names as holding it back",
    )
    file: str = Field(description="where root keeps the lock file")
    text: str = Field(description="the lock file, to hand to another host (venv.lock)")


class Smoke(_Strict):
    stack: dict[str, Any] | None = Field(
        description="the stack smoke test's result (assets/smoke_stack.py: ok, torch, cuda, "
        "gpus, backend, ranks, summary), null when it did not run in this invocation"
    )
    after_extensions: dict[str, Any] | None = Field(
        default=None,
        description="the stack check after the last extension (assets/smoke_stack.py "
        "--recheck: ok, torch, cuda, imports, summary): torch still the locked version and "
        "build, every locked package at its version, each extension importing; null when "
        "it did not run in this invocation",
    )


class Report(_Strict):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: Literal["mlsetup.report/1"] = Field(
        alias="schema", default=REPORT_SCHEMA, description="this format"
    )
    run_id: str = Field(description="the run (its log directory's name); a resumed run keeps it")
    result: RunResult = Field(description="how this invocation ended")
    code: int = Field(
        description="the exit code: 0 done, 1 failed, 2 invalid input, 10 paused for a reboot"
    )
    changed: bool = Field(
        description="this invocation ran an action that changes the machine (a check does not)"
    )
    ran: list[str] = Field(description="the actions this invocation ran, in order")
    failure: Failure | None = Field(description="why the run stopped; null unless it failed")
    steps: list[StepReport] = Field(description="the plan's steps, in order")
    lock: LockReport | None = Field(
        description="null before a stack was settled, or when an offline venv was kept unlocked"
    )
    smoke: Smoke = Field(description="the smoke tests' results")
    wheels: dict[str, str] = Field(
        default_factory=dict,
        description="each wheel this invocation built and kept (its path: the machine's cache, "
        "the wheelhouse) with its sha256, also written beside it as `<wheel>.sha256`; a "
        "wheelhouse wheel is installed only when its sha256 is the one beside it",
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="the warnings of the plan this run started with and those a later plan "
        "of it added, as the console showed them: a wheelhouse wheel passed over (its sha256 "
        "and the one its builder recorded), a setting that will not take effect, ...",
    )
    log_dir: str = Field(
        description="this run's logs: events.jsonl, one log per action, decisions.log"
    )
    time: float = Field(description="unix time the report was written")

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), indent=2) + "\n"


@dataclass
class Outcome:
    """What this invocation did, for the report."""

    changed: bool = False
    ran: list[str] = field(default_factory=list)
    failure: Failure | None = None
    # the smoke tests' results, when they ran: "stack" (after the sync), "after_extensions"
    smoke: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    wheels: dict[str, str] = field(default_factory=dict)  # each wheel kept -> its sha256


def make_report(
    state: State,
    plan: Plan | None,
    lock: Lock | None,
    outcome: Outcome,
    log_dir: Path,
    code: int,
    result: RunResult,
) -> Report:
    return Report(
        run_id=state.run_id,
        result=result,
        code=code,
        changed=outcome.changed,
        ran=list(outcome.ran),
        failure=outcome.failure,
        steps=[_step(step, state) for step in plan.steps] if plan else [],
        lock=LockReport(**lock.summary(), file=STATE_LOCK, text=lock.file_text()) if lock else None,
        smoke=Smoke(
            stack=outcome.smoke.get("stack"),
            after_extensions=outcome.smoke.get("after_extensions"),
        ),
        wheels=dict(outcome.wheels),
        warnings=[str(w) for w in (state.plan or {}).get("warnings", [])],
        log_dir=str(log_dir),
        time=time.time(),
    )


# What the report takes of an action's state record (not its pid, start time or uid)
_RECORDED = set(ActionReport.model_fields) - {"id"}


def _step(step: Step, state: State) -> StepReport:
    actions = [
        ActionReport(id=a.id, **state.actions[a.id].model_dump(include=_RECORDED))
        if a.id in state.actions
        else ActionReport(id=a.id, status="pending")
        for a in step.actions
    ]
    return StepReport(name=step.name, status=step.status, reason=step.reason, actions=actions)


def write_report(path: Path, report: Report) -> None:
    write_atomic(path, report.to_json())


def dry_run_summary(
    plan: Plan | None,
    facts: Facts | None,
    answers: Answers,
    choices: Choices,
    answers_path: str | None,
) -> str:
    """How a dry run ends: that nothing changed, and what the real apply would leave (each
    pending step's lines, steps.planning.registry; a venv the dry run did not make cannot be used
    yet)."""
    pending = {step.name for step in plan.steps if step.status == "pending"} if plan else set()
    leaves = (
        registry.would_leave(registry.PlanInputs(facts, answers, choices), pending)
        if facts is not None
        else []
    )
    return (
        "dry run: nothing was changed (no command ran); "
        f"{answers_command(answers_path)} would leave {'; '.join(leaves) or 'nothing new'}; then "
        f"use the venv with: source {choices.venv_path}/bin/activate"
    )
