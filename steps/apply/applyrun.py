"""What one apply shares between the engine and the collaborators it hands work to.

`ApplyRun` holds the request, the state being recorded, the settled stack lock, the step's
choices and the outcome for the report; `fail` is the one way any of them ends the run with
a failure (the engine catches `Stopped` and writes the report)."""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from steps.apply.diagnose import Diagnosis, failed_url
from steps.apply.report import Failure, Outcome, RunResult
from steps.core.exitcodes import EXIT_FAILED
from steps.core.nextcommands import RESUME_COMMAND, answers_command, answers_file
from steps.core.paths import Paths
from steps.core.rootfs import RootFS
from steps.decide.choices import Choices
from steps.formats.answers import Answers
from steps.formats.events import EventSink
from steps.formats.facts import Facts, load_facts
from steps.formats.lock import Lock, PlannedStack
from steps.formats.plan import Action
from steps.formats.state import State, peek_state, save_state
from steps.probing.probe import probe
from steps.run.runner import Runner

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
# a write of mlsetup's own that can fail for want of the disk itself, not of the run's doing
UNWRITABLE = (*NO_SPACE, errno.EROFS)


def naming(exc: OSError, path: Path | None) -> OSError:
    """`exc` naming the file it happened to (a failed write() names none)."""
    return OSError(exc.errno, exc.strerror, str(path) if path else None)


def continue_command(paths: Paths, answers_toml: str, answers_path: str | None) -> str:
    """The command that goes on from what is on disk now, after a run that could not save
    (a full disk) or was lost: `--resume` when the state there is this run's and unfinished
    (every write is atomic: a failed one leaves the last complete state); otherwise (none was
    written yet, or it is a finished run's or another run's) a new apply with these answers,
    which starts from what is already done."""
    saved = peek_state(paths.state)
    if saved is not None and saved.phase != "done" and saved.answers_toml == answers_toml:
        return RESUME_COMMAND
    return answers_command(answers_path)


DPKG_LOCK_TIMEOUT = 600.0
INTERRUPTED_WAIT = 600.0

log = logging.getLogger("mlsetup.engine")


@dataclass
class ApplyRequest:
    answers: Answers
    answers_toml: str
    answers_path: str | None
    dry_run: bool = False
    ticket: str | None = None  # lets the viewer that started the engine find this run
    facts_file: Path | None = None  # a recorded machine (dry runs only)
    dpkg_lock_timeout: float = DPKG_LOCK_TIMEOUT
    lock_fd: int | None = None  # the apply lock its starter took for it (steps.apply.service)
    # A dry run's stack as the front end planned with it (the wizard's Review): the dry run
    # walks that plan; None: from knowledge, as a dry run resolves nothing itself
    planned: PlannedStack | None = None
    # How long a command of an interrupted run (other than a build) is waited for.
    interrupted_wait: float = INTERRUPTED_WAIT


@dataclass(frozen=True)
class Fault:
    """What went wrong, as the code that saw it knows it: the step, what it says happened,
    and whatever it has of the action, its exit status, log, output and diagnosis.
    `ApplyRun.fail` turns it into the report's failure; `code` is the run's exit code (2 where
    the input, not the machine, is at fault and nothing ran)."""

    step: str
    what: str
    action: Action | None = None
    exit_code: int | None = None
    log: Path | None = None
    diagnosis: Diagnosis | None = None
    tail: Sequence[str] = ()
    code: int = EXIT_FAILED


class Stopped(Exception):
    """Ends the run: with `code` already reported, or (a failure) to be reported as `summary`."""

    def __init__(self, code: int, summary: str | None = None) -> None:
        self.code = code
        self.summary = summary  # set: the run failed and the engine still has to finish it


class ApplyRun:
    """One apply's shared state; the engine owns it, its collaborators read and record in it."""

    choices: Choices  # the decisions for the step being run, made when it starts

    def __init__(
        self, fs: RootFS, request: ApplyRequest, emit: EventSink, runner: Runner | None
    ) -> None:
        self.fs = fs
        self.req = request
        self.paths = Paths(fs)
        self.emit = emit
        self.runner = runner or Runner(fs, emit)
        self.state: State | None = None
        self.lock: Lock | None = None  # the stack every step follows, settled before any runs
        self.outcome = Outcome()
        self.step = "start"  # the step under way, for a failure outside any action

    @property
    def run_id(self) -> str:
        return self.state.run_id if self.state else "dry-run"

    def action_log(self, action_id: str) -> Path:
        return self.paths.action_log(self.run_id, action_id)

    @property
    def stopped_jobs(self) -> Path:
        """Where the governor keeps the compile jobs it has stopped (steps.building.governor)."""
        return self.paths.state_dir / "governed-build.json"

    def save(self) -> None:
        if self.state is not None and not self.req.dry_run:
            save_state(self.paths.state, self.state)

    def facts(self) -> Facts:
        if self.req.facts_file is not None:
            return load_facts(self.req.facts_file)
        return probe(self.fs).facts

    def fail(self, fault: Fault) -> NoReturn:
        diagnosis, log_path, tail = fault.diagnosis, fault.log, list(fault.tail)
        self.outcome.failure = Failure(
            step=fault.step,
            action=fault.action.id if fault.action else None,
            exit_code=fault.exit_code,
            log=str(log_path) if log_path else None,
            what=fault.what,
            why=diagnosis.why if diagnosis else "mlsetup does not recognise this failure.",
            next=diagnosis.next if diagnosis else self._next(log_path),
            diagnosis=diagnosis.id if diagnosis else None,
            last_output=tail[-20:],
            url=failed_url(tail, fault.action.argv if fault.action else None),
        )
        self.emit(self.outcome.failure.event())
        log.info(
            "failed in %s (action %s, exit %s): %s; diagnosis %s",
            fault.step,
            self.outcome.failure.action,
            fault.exit_code,
            fault.what,
            self.outcome.failure.diagnosis,
        )
        if self.state is not None:
            self.state.phase = "failed"
        raise Stopped(fault.code, fault.what)

    def _next(self, log_path: Path | None) -> str:
        """The next step of a failure no signature knows. `apply --answers FILE` goes on from
        the answers as they are now (the same ones: the run resumes); `--resume` goes on with
        those the run started with."""
        answers = self.req.answers_path
        if log_path is None:  # the plan found no way: what it said names the answer or the fact
            return (
                f"Change what it names (in {answers_file(answers)}, or on this machine), "
                f"then: {answers_command(answers)}"
            )
        return (
            f"Read the log ({log_path}), fix the cause, then: {RESUME_COMMAND}; or, if the fix "
            f"is in the answers, edit {answers_file(answers)}, then: {answers_command(answers)}"
        )


Finish = Callable[[int, RunResult, str], int]  # the engine's end of a run: code, result, summary
