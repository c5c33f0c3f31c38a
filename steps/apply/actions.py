"""Running one action and recording it: the state file before and after, its events, its log.

Before a command runs, what could make it unsafe is settled: the same command of an
interrupted run still going (a build is ended, anything else waited for), and dpkg
(interrupted earlier, or its lock held by another apt)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from steps.apply.applyrun import NO_SPACE, ApplyRun, Fault, naming
from steps.apply.diagnose import Diagnosis, diagnose, held_up
from steps.building.orphans import end_process_tree
from steps.core.nextcommands import RESUME_COMMAND
from steps.formats.events import ActionFinished, ActionStarted, Notice, Waiting
from steps.formats.plan import Action
from steps.formats.state import ActionRecord
from steps.planning import registry
from steps.planning.apt import dpkg_interrupted, uses_dpkg, wait_for_dpkg
from steps.run.index import index_secrets
from steps.run.runner import Result, RunnerError

log = logging.getLogger("mlsetup.actions")

# How an action's command is run: (action, its log, called with the pid once started).
Execute = Callable[[Action, Path, Callable[[int], None]], Result]


class ActionRunner:
    """Runs the plan's actions (and the engine's own housekeeping commands) for one apply."""

    def __init__(self, run: ApplyRun) -> None:
        self.run = run

    def run_action(
        self, step: str, action: Action, execute: Execute | None = None
    ) -> Result | None:
        """Run `action` (through `execute`; default: the runner) and record it; a failure ends
        the run (ApplyRun.fail). None in a dry run, where nothing runs."""
        log_path = self.run.action_log(action.id)
        self._announce(step, action, log_path)
        if self.run.req.dry_run:
            self.run.emit(
                ActionFinished(
                    step=step,
                    action=action.id,
                    status="dry-run",
                    exit_code=None,
                    elapsed=0.0,
                    action_kind=action.kind,
                )
            )
            return None
        self._wait_for_interrupted(action)
        if uses_dpkg(action):
            self._dpkg_ready(step, action, log_path)
        record = ActionRecord(step=step, status="running", started=time.time(), log=str(log_path))
        assert self.run.state is not None
        self.run.state.actions[action.id] = record
        self.run.save()
        result = self._execute(step, action, log_path, record, execute or self._plain)
        self._record_end(step, action, record, result)
        if result.exit_code != 0:
            tail = result.tail + self._unit_journal(step, action)
            self.run.fail(
                Fault(
                    step,
                    f"{action.id} failed (exit {result.exit_code})",
                    action=action,
                    exit_code=result.exit_code,
                    log=log_path,
                    diagnosis=self._diagnosis(action, result, tail, log_path),
                    tail=tail,
                )
            )
        self.run.outcome.changed |= registry.changes_machine(step)  # a check changes nothing
        self.run.outcome.ran.append(action.id)
        return result

    def _diagnosis(
        self, action: Action, result: Result, tail: list[str], log_path: Path
    ) -> Diagnosis | None:
        """`tail`: the output's last lines and, for a daemon's start, its unit's journal."""
        if result.ended:  # mlsetup ended it (another account held it up), not its own failure
            return held_up(action.id, action.user or "root", result.ended)
        return diagnose(tail, result.exit_code, str(log_path), self.run.req.answers_path)

    def command(self, step: str, action: Action) -> Result | None:
        """An engine housekeeping command (not part of the plan), logged and reported like any
        action; None if it could not be started."""
        log_path = self.run.action_log(action.id)
        self._announce(step, action, log_path)
        try:
            result = self.run.runner.run(action, log_path, extra_env=self.secrets(action))
        except RunnerError as exc:
            log.info("%s could not be started: %s", action.id, exc)
            self.run.emit(Notice(text=f"{action.title}: {exc}"))
            return None
        self._finished(step, action, "done" if result.exit_code == 0 else "failed", result)
        return result

    def _unit_journal(self, step: str, action: Action) -> list[str]:
        """A daemon that fails to start says why in its journal, not to systemctl ("Job for
        X.service failed"): its last lines of this boot join the output the diagnosis reads
        (Fabric Manager's version mismatch is one). Nothing for any other action."""
        if action.kind != "service" or action.argv[:2] != ["systemctl", "restart"]:
            return []
        unit = action.argv[-1]
        journal = Action(
            id=f"{action.id}.journal",
            kind="check",
            title=f"Read why {unit} did not start (its journal)",
            argv=["journalctl", "--no-pager", "-o", "cat", "-b", "-n", "20", "-u", unit],
        )
        result = self.command(step, journal)
        return result.tail if result is not None else []

    def secrets(self, action: Action) -> dict[str, str]:
        """What an action needs that the plan must not show: the torch index's credentials
        (steps.run.index.index_secrets), given to uv in its environment, never in its argv."""
        return index_secrets(self.run.req.answers) if action.argv[:1] == ["uv"] else {}

    # -- one action's life --------------------------------------------------------------------

    def _announce(self, step: str, action: Action, log_path: Path) -> None:
        log.info("%s: started: %s (log %s)", action.id, action.command_line(), log_path)
        self.run.emit(
            ActionStarted(
                step=step,
                action=action.id,
                title=action.title,
                command=action.command_line(),
                log=str(log_path),
                action_kind=action.kind,
            )
        )

    def _finished(self, step: str, action: Action, status: str, result: Result) -> None:
        log.info("%s: %s, exit %s after %.1fs", action.id, status, result.exit_code, result.elapsed)
        self.run.emit(
            ActionFinished(
                step=step,
                action=action.id,
                status=status,
                exit_code=result.exit_code,
                elapsed=result.elapsed,
                action_kind=action.kind,
            )
        )

    def _plain(self, action: Action, log_path: Path, started: Callable[[int], None]) -> Result:
        return self.run.runner.run(
            action, log_path, on_start=started, extra_env=self.secrets(action)
        )

    def _execute(
        self, step: str, action: Action, log_path: Path, record: ActionRecord, execute: Execute
    ) -> Result:
        def started(pid: int) -> None:
            record.pid = pid
            with contextlib.suppress(psutil.Error):  # gone already: the pid alone is kept
                p = psutil.Process(pid)
                record.pid_started, record.pid_uid = p.create_time(), p.uids().real
            self.run.save()

        try:
            return execute(action, log_path, started)
        except OSError as exc:
            if exc.errno in NO_SPACE:  # its log could not be written: the disk is full
                if exc.filename is not None:
                    raise
                raise naming(exc, log_path) from exc
            record.status, record.ended = "failed", time.time()
            self.run.fail(Fault(step, f"{action.id}: {exc}", action=action, log=log_path))
        except RunnerError as exc:
            record.status, record.ended = "failed", time.time()
            self.run.fail(Fault(step, str(exc), action=action, log=log_path))

    def _record_end(self, step: str, action: Action, record: ActionRecord, result: Result) -> None:
        record.status = "done" if result.exit_code == 0 else "failed"
        record.ended, record.exit_code, record.pid = time.time(), result.exit_code, None
        record.pid_started = record.pid_uid = None
        self.run.save()
        self._finished(step, action, record.status, result)

    # -- what must be settled before a command runs --------------------------------------------

    def _wait_for_interrupted(self, action: Action) -> None:
        """A previous engine died while this action ran and its process is still there. A
        build is ended (its output went to the dead engine; the objects compiled stay); any
        other command (apt, dpkg, uv) is waited for, for at most `interrupted_wait` seconds,
        then the run stops and says what to do: ending dpkg midway could break the system."""
        assert self.run.state is not None
        record = self.run.state.actions.get(action.id)
        if record is None or record.status != "running" or not record.pid:
            return
        process = _same_process(record)
        if process is None:
            log.info(
                "%s: the interrupted run's pid %s is gone (or another process has it now): "
                "running it again",
                action.id,
                record.pid,
            )
            return
        if action.kind == "build":
            self._end_interrupted_build(action, process)
        else:
            self._wait_interrupted(action, record)

    def _end_interrupted_build(self, action: Action, process: psutil.Process) -> None:
        pid = process.pid
        log.info("%s: the interrupted run's build (pid %s) still runs: ending it", action.id, pid)
        self.run.emit(
            Waiting(
                reason=f"{action.id} from the interrupted run is still running (pid {pid})"
                " and nothing reads its output any more: ending it (SIGTERM, SIGKILL after "
                "5s), then building again with the objects it already compiled"
            )
        )
        end_process_tree(process)

    def _wait_interrupted(self, action: Action, record: ActionRecord) -> None:
        pid, limit = record.pid, self.run.req.interrupted_wait
        assert pid is not None
        log.info(
            "%s: the interrupted run's pid %s still runs: waiting up to %.0fs",
            action.id,
            pid,
            limit,
        )
        self.run.emit(
            Waiting(
                reason=f"{action.id} from the interrupted run is still running (pid {pid}); "
                f"waiting up to {limit:.0f}s for it to end before running it again"
            )
        )
        deadline = time.monotonic() + limit
        while _same_process(record) is not None:
            if time.monotonic() > deadline:
                self.run.fail(
                    Fault(
                        record.step,
                        f"{action.id} of the interrupted run (pid {pid}) was still running "
                        f"after {limit:.0f}s",
                        action=action,
                        log=Path(record.log),
                        diagnosis=Diagnosis(
                            "interrupted-still-running",
                            "The run was interrupted while this command ran, and the command went "
                            "on without it; running it again beside it could break what it does.",
                            f"Wait for it to end (ps -o pid,etime,args -p {pid}), or end it "
                            f"yourself (sudo kill {pid}); then: {RESUME_COMMAND}",
                        ),
                    )
                )
            time.sleep(0.5)

    def _dpkg_ready(self, step: str, action: Action, log_path: Path) -> None:
        if dpkg_interrupted(self.run.fs):
            self.run.fail(
                Fault(
                    step,
                    "dpkg was interrupted earlier",
                    action=action,
                    log=log_path,
                    diagnosis=diagnose(
                        ["dpkg was interrupted, you must manually run 'dpkg --configure -a'"],
                        None,
                        str(log_path),
                    ),
                )
            )
        timeout = self.run.req.dpkg_lock_timeout
        holder = wait_for_dpkg(
            self.run.fs, timeout, lambda text: self.run.emit(Waiting(reason=text))
        )
        if holder is not None:
            self.run.fail(
                Fault(
                    step,
                    f"the dpkg lock was still held after {timeout:.0f}s, by {holder}",
                    action=action,
                    log=log_path,
                    diagnosis=diagnose(
                        ["Could not get lock /var/lib/dpkg/lock-frontend"], None, str(log_path)
                    ),
                )
            )


def _same_process(record: ActionRecord) -> psutil.Process | None:
    """The live process `record` names, if it is still that one: the same pid, started at the
    same time, of the same account. None once it has ended, or when its pid now belongs to
    another process (or the record, from an older mlsetup, cannot tell them apart)."""
    if record.pid is None or record.pid_started is None:
        return None
    try:
        p = psutil.Process(record.pid)
        if abs(p.create_time() - record.pid_started) > 0.01:
            return None  # the pid was given to another process since
        if record.pid_uid is not None and p.uids().real != record.pid_uid:
            return None
        return None if p.status() == psutil.STATUS_ZOMBIE else p
    except psutil.Error:
        return None
