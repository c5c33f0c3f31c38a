"""The engine: turn a Plan into a configured server, step by step.

Before each step it probes the machine again (unless nothing ran since the last
probe) and asks the step whether it is already satisfied, so a second run on a
finished machine runs nothing. Each
action's outcome is recorded in the state file before and after it runs, so a
run killed at any moment (kill -9 included) resumes at the first unfinished
action; a reboot the driver needs is a pause, checked when the run resumes.

The work is handed to collaborators that share one `ApplyRun`: running and recording an
action (steps.apply.actions), the reboot and the resume (steps.apply.reboot), the extension builds
(steps.apply.builds), the stack lock (steps.apply.settle), the report (steps.apply.report) and the
apply lock (steps.apply.applylock). The run's events, its decisions.log and its timings go through
steps.apply.runlogs.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os

from steps.apply.actions import ActionRunner
from steps.apply.applylock import ApplyLock
from steps.apply.applyrun import (
    NO_SPACE,
    UNWRITABLE,
    ApplyRequest,
    ApplyRun,
    Fault,
    Stopped,
    continue_command,
)
from steps.apply.builds import ExtensionBuilds
from steps.apply.diagnose import unwritable
from steps.apply.frozen import FrozenStack
from steps.apply.reboot import RebootResume
from steps.apply.report import Failure, RunResult, dry_run_summary, make_report, write_report
from steps.apply.runlogs import RunLogs
from steps.apply.settle import StackSettler
from steps.building.orphans import end_orphaned_build
from steps.core.errors import NeedsRootError
from steps.core.exitcodes import EXIT_FAILED, EXIT_OK
from steps.core.nextcommands import answers_command
from steps.core.rootfs import RootFS
from steps.decide.choices import choose
from steps.formats.events import (
    ActionFinished,
    EventSink,
    Finished,
    Notice,
    PlanMade,
    RunStarted,
    StepSatisfied,
    StepStarted,
)
from steps.formats.facts import Facts
from steps.formats.lock import PlannedStack
from steps.formats.plan import Action, Plan, Step
from steps.formats.state import State, load_state, remove_temporaries, resume_or_new
from steps.planning import registry
from steps.planning.extensions import installs_wheel
from steps.planning.planner import make_plan, observe_and_plan
from steps.run.runner import Runner, carried_environment

# What app/ and the tests take from here: the engine and its request, the lock, and the
# constants the front ends share with it.
__all__ = ["NO_SPACE", "UNWRITABLE", "ApplyLock", "ApplyRequest", "Engine"]

log = logging.getLogger("mlsetup.engine")


class Engine:
    def __init__(
        self, fs: RootFS, request: ApplyRequest, sink: EventSink, runner: Runner | None = None
    ) -> None:
        self.logs = RunLogs(sink)
        self.emit = self.logs.emit
        self.apply_run = ApplyRun(fs, request, self.emit, runner)
        self.actions = ActionRunner(self.apply_run)
        self.reboots = RebootResume(self.apply_run, self.actions, self._finish)
        self.builds = ExtensionBuilds(self.apply_run)
        self.stack = StackSettler(self.apply_run, self.actions)
        self.frozen = FrozenStack(self.apply_run, self.actions)
        self.plan: Plan | None = None
        self.facts: Facts | None = None  # the facts self.plan was made from
        self._lock_taken = "none (dry run)"  # how the apply lock was held, for decisions.log

    @property
    def req(self) -> ApplyRequest:
        return self.apply_run.req

    def _plan(self) -> tuple[Facts, Plan]:
        if self.req.facts_file is not None:
            facts = self.apply_run.facts()
            stack = self._stack()
            plan = make_plan(facts, self.req.answers, lock=stack.lock, notes=stack.notes)
        else:
            facts, plan = observe_and_plan(self.apply_run.fs, self.req.answers, self._stack())
        if self.plan is None:
            _log_plan(plan)
            self.emit(PlanMade(plan=json.loads(plan.to_json())))
            if self.apply_run.state is not None:
                self.apply_run.state.plan = json.loads(plan.to_json())
        else:
            _warn_anew(self.plan.warnings, plan, self.emit, self.apply_run.state)
        self.plan, self.facts = plan, facts
        return facts, plan

    def _stack(self) -> PlannedStack:
        """The stack the plan follows: the run's lock, or the one a dry run was planned with
        (which says why it has none)."""
        planned = self.req.planned
        if self.req.dry_run and planned is not None:
            return planned
        return PlannedStack(self.apply_run.lock)

    # -- the run ------------------------------------------------------------------------------

    def run(self) -> int:
        lock = ApplyLock(self.apply_run.paths.lock)
        try:
            if not self.req.dry_run:
                self._take(lock)  # a read-only or full /var/lib fails here: diagnosed below
            return self._run()
        except OSError as exc:
            if exc.errno not in UNWRITABLE:
                raise
            return self._unwritable(exc)
        finally:
            lock.release()
            self.logs.close()

    def _take(self, lock: ApplyLock) -> None:
        if os.geteuid() != 0:
            raise NeedsRootError(
                "applying changes the system: run it as root, e.g. "
                f"{answers_command(self.req.answers_path)}"
            )
        if self.req.lock_fd is not None:
            lock.adopt(self.req.lock_fd)
            how = f"adopted from the starter (fd {self.req.lock_fd})"
        else:
            lock.acquire()
            how = "acquired"
        self._lock_taken = f"{how}: {lock.path}, pid {os.getpid()}"

    def _run(self) -> int:
        try:
            self._start()
            self.logs.mark("started")
            self.stack.settle()
            self.logs.mark("settled")
            self._run_steps()
            self.logs.mark("steps")
        except Stopped as stop:
            if stop.summary is None:
                return stop.code
            return self._finish(stop.code, "failed", stop.summary)
        choices = self.apply_run.choices
        if self.req.dry_run:
            summary = dry_run_summary(
                self.plan, self.facts, self.req.answers, choices, self.req.answers_path
            )
            return self._finish(EXIT_OK, "done", summary)
        return self._finish(
            EXIT_OK,
            "done",
            f"every step is satisfied; use the venv with: source {choices.venv_path}/bin/activate",
        )

    def _start(self) -> None:
        continued: list[int] = []
        ended: list[int] = []
        resumed = False
        if not self.req.dry_run:
            # This engine holds the lock: temporary files here are those of dead engines.
            remove_temporaries(self.apply_run.paths.state_dir)
            continued, ended = end_orphaned_build(self.apply_run.stopped_jobs)
            resumed, why = self._resume_or_new()
            self.logs.open(self.apply_run.paths, self.apply_run.run_id)
            log.info("apply lock %s", self._lock_taken)
            log.info("%s", why)
        self.emit(
            RunStarted(
                run_id=self.apply_run.run_id,
                pid=os.getpid(),
                dry_run=self.req.dry_run,
                resumed=resumed,
                ticket=self.req.ticket,
            )
        )
        for note in self.logs.notes:
            self.emit(Notice(text=note))
        if not self.req.dry_run and (continued or ended):
            log.info("orphaned governed build: continued %s, ended %s", continued, ended)
            self.emit(
                Notice(
                    text="the interrupted run's governed build was left behind: continued "
                    f"{len(continued)} compile job(s) its governor had stopped and ended "
                    f"{len(ended)} process(es) of it; the build starts again, keeping the "
                    "objects already compiled"
                )
            )
        state = self.apply_run.state
        if state is not None:
            if state.phase == "reboot":
                self.reboots.after_reboot()
            state.phase = "running"
            self.apply_run.save()

    def _resume_or_new(self) -> tuple[bool, str]:
        """The unfinished run with the same answers goes on; anything else starts a new one.
        True if resumed, and why, for decisions.log."""
        old = load_state(self.apply_run.paths.state)  # an unusable one: set aside, exit 2
        state, resumed, why = resume_or_new(old, self.req.answers_toml, self.req.answers_path)
        self.apply_run.state = state
        # What this start was given: `--resume` restored the saved environment into it
        # (app/apply.py), while a new `apply` with the same answers brings the operator's
        # current one (a corrected proxy, say), which the run then keeps.
        self.apply_run.state.environment = carried_environment(os.environ)
        return resumed, why

    def _run_steps(self) -> None:
        probed = False  # the machine as the last probe saw it: nothing has run since
        for n, spec in enumerate(registry.STEPS):
            name = spec.name
            self.apply_run.step = name
            if not probed:
                facts, plan = self._plan()
                # this step's decisions, made once
                self.apply_run.choices = choose(facts, self.req.answers, self.apply_run.lock)
            if n == 0 and not self.req.dry_run:
                self.frozen.before_run()  # exit 2 before anything for a wheel needing another torch
            step = plan.step(name)
            if step.status == "satisfied":
                log.info("%s: satisfied: %s", name, step.reason)
                self.emit(StepSatisfied(step=name, reason=step.reason))
                probed = True  # a satisfied step changes nothing: the next one plans on it
                continue
            # a check changes nothing: the next step plans on the same probe
            probed = not spec.changes_machine
            if not step.actions:
                self.apply_run.fail(Fault(step.name, step.reason))
            log.info("%s: pending (%s): %s", name, step.reason, [a.id for a in step.actions])
            self.emit(
                StepStarted(step=name, reason=step.reason, actions=[a.id for a in step.actions])
            )
            if spec.builds_extensions and not self.req.dry_run:
                self.builds.prepare_build_trees()
                self.frozen.before_step(step)  # exit 2 before a wheel that needs another torch
            for action in step.actions:
                self._run_one(name, action, facts)
            if spec.changes_machine and not self.req.dry_run:
                self._verify(step)  # a check's actions are its verdict: each passed

    def _run_one(self, step: str, action: Action, facts: Facts) -> None:
        state = self.apply_run.state
        if state is not None and state.done(action.id):
            log.info("%s: already done in this run: skipped", action.id)
            self.emit(
                ActionFinished(
                    step=step,
                    action=action.id,
                    status="already-done",
                    exit_code=0,
                    elapsed=0.0,
                    action_kind=action.kind,
                )
            )
            return
        build = action.kind == "build"
        if installs_wheel(action) and not self.req.dry_run:
            self.frozen.before_install(action)  # it fits the lock; its hash is pinned
        execute = self.builds.compile if build else self.stack.recorder(action)
        result = self.actions.run_action(step, action, execute)
        if result is not None and build:
            self.builds.publish(action)
        if result is not None and action.kind == "unpack":
            self.builds.record_unpack(action)
        if action.reboot_after:
            self.reboots.reboot(action, facts)

    def _verify(self, step: Step) -> None:
        """After its actions, the step must be satisfied on a fresh probe."""
        _, plan = self._plan()
        after = plan.step(step.name)
        log.info("%s: after its actions: %s (%s)", step.name, after.status, after.reason)
        if after.status != "satisfied":
            self.apply_run.fail(
                Fault(
                    step.name,
                    f"{step.name} is still not satisfied after its actions: {after.reason}",
                )
            )

    # -- the end ------------------------------------------------------------------------------

    def _unwritable(self, exc: OSError) -> int:
        """A state, log or report write found its disk full or read-only. The state file is
        still the last complete one (every write is atomic), so the run goes on from there
        (continue_command says how); this says so through whatever can still be written (the
        console of a foreground engine)."""
        run = self.apply_run
        where = str(exc.filename or run.paths.state)
        then = continue_command(run.paths, self.req.answers_toml, self.req.answers_path)
        assert exc.errno is not None
        diagnosis = unwritable(where, exc.errno, then)
        what = (
            f"the file system is read-only where mlsetup writes {where}"
            if exc.errno == errno.EROFS
            else f"no space left on the device to write {where}"
        )
        run.outcome.failure = Failure(
            step=run.step,
            action=None,
            exit_code=None,
            log=None,
            what=what,
            why=diagnosis.why,
            next=diagnosis.next,
            diagnosis=diagnosis.id,
            last_output=[],
        )
        self.logs.emit_what_can(
            (
                run.outcome.failure.event(),
                Finished(code=EXIT_FAILED, result="failed", summary=what),
            )
        )
        if run.state is not None:
            with contextlib.suppress(OSError):  # if there is room again, or only logs are full
                run.state.phase = "failed"
                run.save()
                self._write_report(EXIT_FAILED, "failed")
        return EXIT_FAILED

    def _finish(self, code: int, result: RunResult, summary: str) -> int:
        state = self.apply_run.state
        if state is not None:
            if result == "done":
                state.phase = "done"
                state.environment = {}  # nothing resumes a finished run: drop proxy secrets
            if result in ("done", "failed"):
                self.reboots.remove_resume_unit()
            self.apply_run.save()
            self._write_report(code, result)
        log.info("time: %s", self.logs.spent())
        log.info("finished: %s, exit %d: %s", result, code, summary)
        self.emit(Finished(code=code, result=result, summary=summary))
        return code

    def _write_report(self, code: int, result: RunResult) -> None:
        run = self.apply_run
        assert run.state is not None
        report = make_report(
            run.state,
            self.plan,
            run.lock,
            run.outcome,
            run.paths.log_dir / run.state.run_id,
            code,
            result,
        )
        write_report(run.paths.report, report)


def _warn_anew(said: list[str], plan: Plan, emit: EventSink, state: State | None) -> None:
    """A warning a later plan of the run adds to the one before it, `said` (a wheelhouse wheel
    passed over once the venv it is for exists), is said as a notice and kept with the run's
    warnings, the report's."""
    for warning in plan.warnings:
        if warning in said:
            continue
        log.info("plan warning: %s", warning)
        emit(Notice(text=warning))
        if state is not None and state.plan is not None:
            kept = state.plan.setdefault("warnings", [])
            if warning not in kept:
                kept.append(warning)


def _log_plan(plan: Plan) -> None:
    for step in plan.steps:
        log.info(
            "plan: %s %s (%s)%s",
            step.name,
            step.status,
            step.reason,
            f": {[a.id for a in step.actions]}" if step.actions else "",
        )
    for warning in plan.warnings:
        log.info("plan warning: %s", warning)
