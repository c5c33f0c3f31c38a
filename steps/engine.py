"""The engine: turn a Plan into a configured server, step by step.

Before each step it probes the machine again and asks the step whether it is
already satisfied, so a second run on a finished machine runs nothing. Each
action's outcome is recorded in the state file before and after it runs, so a
run killed at any moment (kill -9 included) resumes at the first unfinished
action; a reboot the driver needs is a pause, checked when the run resumes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import psutil

from steps.answers import Answers
from steps.apt import dpkg_interrupted, uses_dpkg, wait_for_dpkg
from steps.choices import BuildTarget, Choices, choose
from steps.diagnose import Diagnosis, diagnose, no_space
from steps.errors import AlreadyRunningError, InputError, NeedsRootError
from steps.events import (
    ActionFinished,
    ActionStarted,
    Event,
    EventLog,
    EventSink,
    Failed,
    Finished,
    Notice,
    PlanMade,
    RebootNeeded,
    RunStarted,
    StepSatisfied,
    StepStarted,
    Waiting,
)
from steps.extensions import target_key
from steps.facts import Facts, load_facts
from steps.governor import GiB, Governor, end_orphaned_build, end_process_tree
from steps.knowledge import ASSETS_DIR
from steps.lock import SHARED_DIR, SHARED_LOCK, SMOKE_SCRIPT, STATE_LOCK, Lock, index_secrets
from steps.paths import CACHE_DIR, RUNTIME_DIR, Paths
from steps.plan import STEP_ORDER, Action, Plan, Step
from steps.planner import make_plan, observe_and_plan
from steps.probe import probe
from steps.rootfs import RootFS
from steps.runner import Result, Runner, RunnerError, carried_environment, lookup_account
from steps.safefs import make_dir, trusted_dir
from steps.service import RESUME_UNIT, resume_unit, systemd_booted
from steps.state import (
    ActionRecord,
    RebootRecord,
    State,
    load_state,
    new_run_id,
    remove_temporaries,
    save_state,
    write_atomic,
)
from steps.venv import StackUnavailable, settle_lock
from steps.venv import unlocked_ok as venv_unlocked_ok
from steps.venvstate import probe_venv
from steps.wheels import BUILD_ROOT, publish, tree_name

EXIT_OK, EXIT_FAILED, EXIT_INPUT, EXIT_REBOOT = 0, 1, 2, 10
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
SMOKE_MARK = "MLSETUP_SMOKE "  # the line assets/smoke_stack.py ends with: its result as JSON
OOM_RETRIES = 2
RESUME_COMMAND = "sudo mlsetup apply --resume"
REPORT_SCHEMA = "mlsetup.report/1"
DPKG_LOCK_TIMEOUT = 600.0
INTERRUPTED_WAIT = 600.0


@dataclass
class ApplyRequest:
    answers: Answers
    answers_toml: str
    answers_path: str | None
    dry_run: bool = False
    ticket: str | None = None  # lets the viewer that started the engine find this run
    facts_file: Path | None = None  # a recorded machine (dry runs only)
    dpkg_lock_timeout: float = DPKG_LOCK_TIMEOUT
    lock_fd: int | None = None  # the apply lock its starter took for it (steps.service)
    # How long a command of an interrupted run (other than a build) is waited for.
    interrupted_wait: float = INTERRUPTED_WAIT


class _Stop(Exception):
    """Ends the run with an exit code once the outcome has been reported."""

    def __init__(self, code: int) -> None:
        self.code = code


@dataclass
class _Outcome:
    """What this invocation did, for the report."""

    changed: bool = False
    ran: list[str] = field(default_factory=list)
    failure: dict | None = None
    smoke: dict | None = None  # the stack smoke test's result, when it ran


class ApplyLock:
    """One apply at a time: an exclusive flock held for the engine's whole life."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def holder(self) -> int | None:
        """The pid of the running apply, or None."""
        if not self.path.exists():
            return None
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = self.path.read_text().strip()
            return int(text) if text.isdigit() else 0
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    @property
    def fd(self) -> int | None:
        return self._fd

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise AlreadyRunningError(already_running_message(self.holder())) from None
        self._fd = fd
        self._mark()

    def adopt(self, fd: int) -> None:
        """Hold the lock the starter took and handed over (steps.service.take_lock): the same
        open file, so it is held already and the flock only confirms it."""
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._fd = fd
        self._mark()

    def _mark(self) -> None:
        """Write the holder's pid into the lock file, for the "already running" message."""
        assert self._fd is not None
        with contextlib.suppress(OSError):  # a full disk: the lock holds all the same
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, str(os.getpid()).encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def already_running_message(pid: int | None) -> str:
    return (
        f"another mlsetup apply is running (pid {pid or 'unknown'}); "
        "follow it with: sudo mlsetup attach"
    )


class Engine:
    choices: Choices  # the decisions for the step being run, made when it starts

    def __init__(
        self, fs: RootFS, request: ApplyRequest, sink: EventSink, runner: Runner | None = None
    ) -> None:
        self.fs = fs
        self.req = request
        self.paths = Paths(fs)
        self._sinks: list[EventSink] = [sink]
        self.runner = runner or Runner(fs, self.emit)
        self.outcome = _Outcome()
        self.state: State | None = None
        self.plan: Plan | None = None
        self._step = "start"  # the step under way, for a failure outside any action
        self._event_log: EventLog | None = None
        self._events: Path | None = None
        self.lock: Lock | None = None  # the stack every step follows, settled before any runs

    # -- plumbing -----------------------------------------------------------------------------

    def emit(self, event: Event) -> None:
        for sink in self._sinks:
            try:
                sink(event)
            except OSError as exc:  # the event stream's disk is full: say which file
                if sink is not self._event_log or exc.filename is not None:
                    raise
                raise _naming(exc, self._events) from exc

    @property
    def _stopped_jobs(self) -> Path:
        """Where the governor keeps the compile jobs it has stopped (steps.governor)."""
        return self.paths.state_dir / "governed-build.json"

    def _save(self) -> None:
        if self.state is not None and not self.req.dry_run:
            save_state(self.paths.state, self.state)

    def _facts(self) -> Facts:
        if self.req.facts_file is not None:
            return load_facts(self.req.facts_file)
        return probe(self.fs).facts

    def _plan(self) -> tuple[Facts, Plan]:
        if self.req.facts_file is not None:
            facts = self._facts()
            plan = make_plan(facts, self.req.answers, lock=self.lock)
        else:
            facts, plan = observe_and_plan(self.fs, self.req.answers, self.lock)
        if self.plan is None:
            self.emit(PlanMade(plan=json.loads(plan.to_json())))
            if self.state is not None:
                self.state.plan = json.loads(plan.to_json())
        self.plan = plan
        return facts, plan

    # -- the run ------------------------------------------------------------------------------

    def run(self) -> int:
        lock = ApplyLock(self.paths.lock)
        if not self.req.dry_run:
            if os.geteuid() != 0:
                raise NeedsRootError(
                    "applying changes the system: run it as root, e.g. "
                    f"sudo mlsetup apply --answers {self.req.answers_path or 'FILE'}"
                )
            if self.req.lock_fd is not None:
                lock.adopt(self.req.lock_fd)
            else:
                lock.acquire()
        try:
            self._start()
            self._settle_stack()
            self._run_steps()
            venv = self.choices.venv_path
            return self._finish(
                EXIT_OK,
                "done",
                f"every step is satisfied; use the venv with: source {venv}/bin/activate",
            )
        except _Stop as stop:
            return stop.code
        except OSError as exc:
            if exc.errno not in NO_SPACE:
                raise
            return self._no_space(exc)
        finally:
            lock.release()

    def _start(self) -> None:
        resumed = False
        continued: list[int] = []
        ended: list[int] = []
        if not self.req.dry_run:
            # This engine holds the lock: temporary files here are those of dead engines.
            remove_temporaries(self.paths.state_dir)
            continued, ended = end_orphaned_build(self._stopped_jobs)
            old = load_state(self.paths.state)  # an unusable one: set aside, exit 2
            if old and old.phase != "done" and old.answers_toml == self.req.answers_toml:
                self.state, resumed = old, True
            else:
                self.state = State(
                    run_id=new_run_id(),
                    phase="running",
                    answers_toml=self.req.answers_toml,
                    answers_path=self.req.answers_path,
                )
            # What this start was given: `--resume` restored the saved environment into it
            # (app/apply.py), while a new `apply` with the same answers brings the operator's
            # current one (a corrected proxy, say), which the run then keeps.
            self.state.environment = carried_environment(os.environ)
            self._open_event_log(self.state.run_id)
        run_id = self.state.run_id if self.state else "dry-run"
        self.emit(
            RunStarted(
                run_id=run_id,
                pid=os.getpid(),
                dry_run=self.req.dry_run,
                resumed=resumed,
                ticket=self.req.ticket,
            )
        )
        if not self.req.dry_run and (continued or ended):
            self.emit(
                Notice(
                    text="the interrupted run's governed build was left behind: continued "
                    f"{len(continued)} compile job(s) its governor had stopped and ended "
                    f"{len(ended)} process(es) of it; the build starts again, keeping the "
                    "objects already compiled"
                )
            )
        if self.state is not None:
            if self.state.phase == "reboot":
                self._after_reboot()
            self.state.phase = "running"
            self._save()

    def _open_event_log(self, run_id: str) -> None:
        run_dir = self.paths.run_dir(run_id)
        run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.paths.log_dir.chmod(0o700)
        self._events = run_dir / "events.jsonl"
        self._event_log = EventLog(self._events)
        self._sinks.append(self._event_log)
        current = self.paths.current_run
        tmp = self.paths.log_dir / ".current.tmp"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(run_id)
        os.replace(tmp, current)  # viewers follow the symlink to the newest run

    def _run_steps(self) -> None:
        for name in STEP_ORDER:
            self._step = name
            facts, plan = self._plan()
            # this step's decisions, made once
            self.choices = choose(facts, self.req.answers, self.lock)
            step = plan.step(name)
            if step.status == "satisfied":
                self.emit(StepSatisfied(step=name, reason=step.reason))
                continue
            if not step.actions:
                self._fail(step.name, None, None, None, what=step.reason, diagnosis=None)
            self.emit(
                StepStarted(step=name, reason=step.reason, actions=[a.id for a in step.actions])
            )
            if name == "extensions" and not self.req.dry_run:
                self._prepare_build_trees()
            for action in step.actions:
                if self.state is not None and self.state.done(action.id):
                    self.emit(
                        ActionFinished(
                            step=name,
                            action=action.id,
                            status="already-done",
                            exit_code=0,
                            elapsed=0.0,
                        )
                    )
                    continue
                self._run_action(name, action)
                if action.reboot_after:
                    self._reboot(action, facts)
            if not self.req.dry_run:
                self._verify(step)

    def _verify(self, step: Step) -> None:
        """After its actions, the step must be satisfied on a fresh probe."""
        _, plan = self._plan()
        after = plan.step(step.name)
        if after.status != "satisfied":
            self._fail(
                step.name,
                None,
                None,
                None,
                what=f"{step.name} is still not satisfied after its actions: {after.reason}",
                diagnosis=None,
            )

    def _run_action(self, step: str, action: Action) -> None:
        log = self.paths.action_log(self.state.run_id if self.state else "dry-run", action.id)
        self.emit(
            ActionStarted(
                step=step,
                action=action.id,
                title=action.title,
                command=action.command_line(),
                log=str(log),
            )
        )
        if self.req.dry_run:
            self.emit(
                ActionFinished(
                    step=step, action=action.id, status="dry-run", exit_code=None, elapsed=0.0
                )
            )
            return
        assert self.state is not None
        self._wait_for_interrupted(action)
        if uses_dpkg(action):
            self._dpkg_ready(step, action, log)
        record = ActionRecord(step=step, status="running", started=time.time(), log=str(log))
        self.state.actions[action.id] = record
        self._save()

        def started(pid: int) -> None:
            record.pid = pid
            self._save()

        try:
            if action.id.endswith(".build"):
                result = self._compile(action, log, started)
            else:
                result = self.runner.run(
                    action, log, on_start=started, extra_env=self._secrets(action)
                )
        except OSError as exc:
            if exc.errno in NO_SPACE:  # its log could not be written: the disk is full
                if exc.filename is not None:
                    raise
                raise _naming(exc, log) from exc
            record.status, record.ended = "failed", time.time()
            self._fail(step, action, None, log, what=f"{action.id}: {exc}", diagnosis=None)
        except RunnerError as exc:
            record.status, record.ended = "failed", time.time()
            self._fail(step, action, None, log, what=str(exc), diagnosis=None)
        record.status = "done" if result.exit_code == 0 else "failed"
        record.ended, record.exit_code, record.pid = time.time(), result.exit_code, None
        self._save()
        self.emit(
            ActionFinished(
                step=step,
                action=action.id,
                status=record.status,
                exit_code=result.exit_code,
                elapsed=result.elapsed,
            )
        )
        if result.exit_code != 0:
            self._fail(
                step,
                action,
                result.exit_code,
                log,
                what=f"{action.id} failed (exit {result.exit_code})",
                diagnosis=diagnose(result.tail, result.exit_code, str(log)),
                tail=result.tail,
            )
        self.outcome.changed = True
        self.outcome.ran.append(action.id)
        if action.id.endswith(".build"):
            self._publish(action)
        if action.id == "venv.smoke":
            self._smoke_result(result)

    # -- the stack ----------------------------------------------------------------------------

    def _settle_stack(self) -> None:
        """Resolve (or reuse, or take from venv.lock) the one lock before any step changes
        anything; a package that forces an impossible torch ends the run here with exit 2."""
        facts = self._facts()
        resolving = not self.req.dry_run and self.state is not None
        try:
            self.lock = settle_lock(
                self.fs, facts, self.req.answers,
                (lambda action: self._command("venv", action)) if resolving else None,
                self.paths.state_dir / "resolve" if resolving else None)
        except InputError as exc:
            self._fail("venv", None, None, None, what=str(exc), diagnosis=Diagnosis(
                "stack-unsatisfiable", "No torch satisfies the answers' packages on this machine.",
                "Change torch.packages or torch.cuda as the message says, then run the apply "
                "again."), code=EXIT_INPUT)
        except StackUnavailable as exc:
            if self._venv_kept_unlocked(facts):
                self.emit(Notice(text=f"{exc}; the venv already holds a torch and packages "
                                      "that satisfy the answers: kept as it is, unlocked"))
                return
            self._fail("venv", None, None, None, what=str(exc), diagnosis=Diagnosis(
                "index-unreachable", "uv could not reach the package index to resolve the stack.",
                "Check the network, proxy and index settings (UV_DEFAULT_INDEX, "
                f"torch.index_url), then: {RESUME_COMMAND}"))
        if self.lock is None:
            self.emit(Notice(text="dry run: the stack is resolved at apply; planning from "
                                  "mlsetup's knowledge"))
            return
        self.emit(Notice(text=f"stack lock: torch {self.lock.torch} ({self.lock.build}) for "
                              f"Python {self.lock.python}, decided by "
                              f"{', '.join(self.lock.decided_by)}; "
                              f"{len(self.lock.packages)} packages pinned with hashes"))
        if not self.req.dry_run:
            self._keep_lock(self.lock)

    def _venv_kept_unlocked(self, facts: Facts) -> bool:
        """An offline machine whose venv already satisfies the answers (an image with torch)."""
        choices = choose(facts, self.req.answers)
        venv = probe_venv(self.fs, choices.venv_path)
        return venv_unlocked_ok(venv, self.req.answers, choices)

    def _keep_lock(self, lock: Lock) -> None:
        """Root's copy in /var/lib/mlsetup; the copy the venv's owner syncs from and the smoke
        test beside it in a directory only root writes."""
        text = lock.file_text()
        if self.fs.read_text(STATE_LOCK) != text:
            write_atomic(self.fs.path(STATE_LOCK), text)
        shared = self.fs.path(SHARED_DIR)
        for directory in (shared.parent, shared):
            directory.mkdir(parents=True, exist_ok=True)
            directory.chmod(0o755)
        write_atomic(self.fs.path(SHARED_LOCK), text, mode=0o644)
        write_atomic(self.fs.path(SMOKE_SCRIPT), (ASSETS_DIR / "smoke_stack.py").read_text(),
                     mode=0o644)

    def _smoke_result(self, result: Result) -> None:
        line = next((x for x in reversed(result.tail) if x.startswith(SMOKE_MARK)), None)
        try:
            self.outcome.smoke = json.loads(line[len(SMOKE_MARK):]) if line else None
        except ValueError:
            self.outcome.smoke = None
        if self.outcome.smoke:
            self.emit(Notice(text=f"stack smoke test: {self.outcome.smoke.get('summary')}"))

    # -- extensions ---------------------------------------------------------------------------

    def _target(self, action: Action) -> BuildTarget:
        name = action.id.split(".")[1]
        return next(t for t in self.choices.build_targets if t.answer.name == name)

    def _build_tree(self, target: BuildTarget) -> Path:
        return self.fs.path(BUILD_ROOT) / tree_name(target.answer.name, target.answer.version)

    def _prepare_build_trees(self) -> None:
        """/var/cache/mlsetup/build/<name>-<version>/, owned by the account that compiles.

        Made through descriptors (steps.safefs): each tree is one name created in root's own
        build directory and handed over by its descriptor, so no name, and nothing the
        account planted, can make root create or chown a directory elsewhere."""
        choices = self.choices
        owner = lookup_account(self.fs, choices.owner.run_as) if choices.owner.run_as else None
        try:
            os.close(self._traversable(CACHE_DIR))
            build_fd = self._traversable(BUILD_ROOT)
            try:
                for target in choices.build_targets:
                    name = tree_name(target.answer.name, target.answer.version)
                    os.close(make_dir(build_fd, name, 0o700, uid=owner.uid if owner else -1,
                                      gid=owner.gid if owner else -1))
            finally:
                os.close(build_fd)
        except OSError as exc:
            self._fail("extensions", None, None, None, diagnosis=None,
                       what=f"refused to prepare the build tree: {exc}")

    def _traversable(self, directory: str) -> int:
        """One of root's own directories, made or checked as only root's and opened; anyone may
        pass through it (each build tree below is private to its owner)."""
        fd = trusted_dir(self.fs.path(directory), {os.geteuid()})
        os.fchmod(fd, 0o755)
        return fd

    def _compile(self, action: Action, log: Path, started: Callable[[int], None]) -> Result:
        """Run a build under the memory governor; if a job still dies of memory, retry with
        half the jobs it reached (the build tree keeps every object already compiled, and the
        file beside it what the governor learned of this build's jobs)."""
        target = self._target(action)
        tree = self._build_tree(target)
        build = self.req.answers.build
        ceiling = build.max_jobs if isinstance(build.max_jobs, int) else None
        owner = lookup_account(self.fs, action.user) if action.user else None
        for attempt in range(1, OOM_RETRIES + 2):
            governor = Governor(
                self.emit,
                ceiling=ceiling,
                budget_bytes=build.limit_bytes(),
                reserve_bytes=build.reserve_bytes(psutil.virtual_memory().total),
                peak_job_bytes=int(target.recipe.peak_job_gib * GiB),
                # beside the tree, in root's directory: the tree belongs to the account that
                # compiles, and root must not read what that account may have swapped in
                lessons_file=tree.with_name(f"{tree.name}.governor.json"),
                jobserver_dir=self.fs.path(RUNTIME_DIR),
                action=action.id,
                stopped_file=self._stopped_jobs,
            )
            if owner:  # the compile runs as the venv's owner: its ninja must open the FIFO
                governor.share_with(owner.uid, owner.gid)

            def govern(pid: int, governor: Governor = governor) -> None:
                started(pid)
                governor.attach(pid)

            with governor:
                result = self.runner.run(
                    action,
                    log,
                    extra_env=governor.env(),
                    on_line=governor.feed_line,
                    on_start=govern,
                )
            summary = governor.summary()
            diagnosis = diagnose(result.tail, result.exit_code, str(log))
            if (
                result.exit_code == 0
                or diagnosis is None
                or diagnosis.id != "out-of-memory"
                or attempt > OOM_RETRIES
            ):
                return result
            ceiling = max(1, summary.peak_jobs // 2)
            self.emit(
                Notice(
                    text=f"{action.id}: a compile job ran out of memory with "
                    f"{summary.peak_jobs} jobs; retrying with at most {ceiling} "
                    "(objects already compiled are kept)"
                )
            )
        raise AssertionError("unreachable")

    def _publish(self, action: Action) -> None:
        """Keep the wheel just built in the machine's cache and the fleet's wheelhouse."""
        target = self._target(action)
        key = target_key(target, probe_venv(self.fs, self.choices.venv_path))
        if key is None:
            return
        copies, refused = publish(
            self.fs,
            tree_name(target.answer.name, target.answer.version),
            key,
            target.recipe.package,
            target.answer.version,
            self.req.answers.build.wheelhouse,
            self.choices.owner.run_as,
        )
        for why in refused:
            self.emit(Notice(text=why))
        if copies:
            self.emit(
                Notice(
                    text=f"kept the {target.answer.name} wheel for reuse: "
                    + ", ".join(str(c.parent) for c in copies)
                )
            )

    def _secrets(self, action: Action) -> dict[str, str]:
        """What an action needs that the plan must not show: the torch index's credentials
        (steps.lock.index_secrets), given to uv in its environment, never in its argv."""
        return index_secrets(self.req.answers) if action.argv[:1] == ["uv"] else {}

    def _wait_for_interrupted(self, action: Action) -> None:
        """A previous engine died while this action ran and its process is still there. A
        build is ended (its output went to the dead engine; the objects compiled stay); any
        other command (apt, dpkg, uv) is waited for, for at most `interrupted_wait` seconds,
        then the run stops and says what to do: ending dpkg midway could break the system."""
        assert self.state is not None
        record = self.state.actions.get(action.id)
        if record is None or record.status != "running" or not record.pid:
            return
        pid = record.pid
        if not _alive(pid, action.argv[0]):
            return
        if action.id.endswith(".build"):
            self.emit(
                Waiting(
                    reason=f"{action.id} from the interrupted run is still running (pid {pid})"
                    " and nothing reads its output any more: ending it (SIGTERM, SIGKILL after "
                    "5s), then building again with the objects it already compiled"
                )
            )
            with contextlib.suppress(psutil.Error):
                end_process_tree(psutil.Process(pid))
            return
        limit = self.req.interrupted_wait
        self.emit(
            Waiting(
                reason=f"{action.id} from the interrupted run is still running (pid {pid}); "
                f"waiting up to {limit:.0f}s for it to end before running it again"
            )
        )
        deadline = time.monotonic() + limit
        while _alive(pid, action.argv[0]):
            if time.monotonic() > deadline:
                self._fail(
                    record.step,
                    action,
                    None,
                    Path(record.log),
                    what=f"{action.id} of the interrupted run (pid {pid}) was still running "
                    f"after {limit:.0f}s",
                    diagnosis=Diagnosis(
                        "interrupted-still-running",
                        "The run was interrupted while this command ran, and the command went "
                        "on without it; running it again beside it could break what it does.",
                        f"Wait for it to end (ps -o pid,etime,args -p {pid}), or end it "
                        f"yourself (sudo kill {pid}); then: {RESUME_COMMAND}",
                    ),
                )
            time.sleep(0.5)

    def _dpkg_ready(self, step: str, action: Action, log: Path) -> None:
        if dpkg_interrupted(self.fs):
            self._fail(
                step,
                action,
                None,
                log,
                what="dpkg was interrupted earlier",
                diagnosis=diagnose(
                    ["dpkg was interrupted, you must manually run 'dpkg --configure -a'"],
                    None,
                    str(log),
                ),
            )
        if not wait_for_dpkg(
            self.fs, self.req.dpkg_lock_timeout, lambda text: self.emit(Waiting(reason=text))
        ):
            self._fail(
                step,
                action,
                None,
                log,
                what=f"the dpkg lock was still held after {self.req.dpkg_lock_timeout:.0f}s",
                diagnosis=diagnose(
                    ["Could not get lock /var/lib/dpkg/lock-frontend"], None, str(log)
                ),
            )

    # -- reboot -------------------------------------------------------------------------------

    def _reboot(self, action: Action, facts: Facts) -> None:
        policy = self.req.answers.reboot.policy
        if self.req.dry_run:
            self.emit(
                RebootNeeded(
                    action=action.id, policy=policy, next="dry run: the machine would reboot here"
                )
            )
            return
        assert self.state is not None
        self.state.phase = "reboot"
        self.state.reboot = RebootRecord(
            action=action.id,
            boot_id=facts.boot_id,
            driver_branch=choose(facts, self.req.answers, self.lock).driver_branch,
        )
        if policy == "auto" and systemd_booted(self.fs):
            self._install_resume_unit()
            self.state.reboot.unit_installed = True
            self._save()
            self.emit(
                RebootNeeded(
                    action=action.id,
                    policy=policy,
                    next="rebooting now; mlsetup resumes by itself after boot "
                    "(follow it with: sudo mlsetup attach)",
                )
            )
            code = self._finish(EXIT_REBOOT, "reboot", "rebooting to load the NVIDIA driver")
            self._command(
                "reboot",
                Action(id="reboot", title="Reboot to load the NVIDIA driver", argv=["reboot"]),
            )
            raise _Stop(code)
        self._save()
        why = (
            ""
            if policy != "auto"
            else ("systemd is not running here, so nothing resumes by itself: ")
        )
        self.emit(
            RebootNeeded(
                action=action.id,
                policy=policy,
                next=f"{why}reboot (sudo reboot), then run: {RESUME_COMMAND}",
            )
        )
        raise _Stop(
            self._finish(
                EXIT_REBOOT, "reboot", "paused: reboot to load the NVIDIA driver, then resume"
            )
        )

    def _install_resume_unit(self) -> None:
        write_atomic(self.fs.path(f"/etc/systemd/system/{RESUME_UNIT}"), resume_unit(), mode=0o644)
        self._command(
            "reboot",
            Action(
                id="resume-unit.enable",
                title="Resume mlsetup after the reboot",
                argv=["systemctl", "enable", RESUME_UNIT],
            ),
        )

    def _remove_resume_unit(self) -> None:
        assert self.state is not None and self.state.reboot is not None
        self._command(
            "reboot",
            Action(
                id="resume-unit.disable",
                title="Remove the one-shot resume unit",
                argv=["systemctl", "disable", RESUME_UNIT],
            ),
        )
        self.fs.path(f"/etc/systemd/system/{RESUME_UNIT}").unlink(missing_ok=True)
        self.state.reboot.unit_installed = False

    def _command(self, step: str, action: Action) -> Result | None:
        """An engine housekeeping command (not part of the plan), logged and reported like any
        action; None if it could not be started."""
        assert self.state is not None
        log = self.paths.action_log(self.state.run_id, action.id)
        self.emit(
            ActionStarted(
                step=step,
                action=action.id,
                title=action.title,
                command=action.command_line(),
                log=str(log),
            )
        )
        try:
            result = self.runner.run(action, log, extra_env=self._secrets(action))
        except RunnerError as exc:
            self.emit(Notice(text=f"{action.title}: {exc}"))
            return None
        self.emit(
            ActionFinished(
                step=step,
                action=action.id,
                status="done" if result.exit_code == 0 else "failed",
                exit_code=result.exit_code,
                elapsed=result.elapsed,
            )
        )
        return result

    def _after_reboot(self) -> None:
        """Resuming after a reboot: did the machine really reboot, and is the driver loaded?"""
        assert self.state is not None and self.state.reboot is not None
        record = self.state.reboot
        facts = self._facts()
        if record.boot_id and facts.boot_id == record.boot_id:
            self.emit(
                RebootNeeded(
                    action=record.action,
                    policy=self.req.answers.reboot.policy,
                    next=f"the machine has not rebooted yet: sudo reboot, then {RESUME_COMMAND}",
                )
            )
            raise _Stop(self._finish(EXIT_REBOOT, "reboot", "still waiting for the reboot"))
        if record.driver_branch and not _driver_ok(facts, record.driver_branch):
            facts = self._driver_not_loaded(facts, record.driver_branch)
        self.emit(
            Notice(
                text=f"rebooted; NVIDIA driver {facts.driver.version} is loaded"
                if facts.driver
                else "rebooted"
            )
        )

    def _driver_not_loaded(self, facts: Facts, branch: int) -> Facts:
        """Load the module by hand: the machine as it is then if that worked; otherwise fail
        with why it did not load (Secure Boot, say)."""
        assert self.state is not None
        action = Action(
            id="driver.load", title="Load the NVIDIA kernel module", argv=["modprobe", "nvidia"]
        )
        result = self._command("driver", action)
        again = self._facts()
        if result is not None and result.exit_code == 0 and _driver_ok(again, branch):
            return again
        found = (
            f"driver {facts.driver.version} is loaded"
            if facts.driver and facts.driver.loaded
            else "no NVIDIA driver is loaded"
        )
        log = self.paths.action_log(self.state.run_id, action.id)
        tail, code = (result.tail, result.exit_code) if result else ([], None)
        self._fail(
            "driver",
            action,
            code,
            log,
            what=f"after the reboot {found}; expected branch {branch}",
            diagnosis=diagnose(tail, code, str(log))
            or Diagnosis(
                "driver-not-loaded",
                "The kernel did not load the NVIDIA module after the reboot.",
                "Look at `sudo dmesg | grep -i -E 'nvidia|nouveau'` and "
                "`dkms status`; then: " + RESUME_COMMAND,
            ),
            tail=tail,
        )

    # -- the end ------------------------------------------------------------------------------

    def _fail(
        self,
        step: str,
        action: Action | None,
        exit_code: int | None,
        log: Path | None,
        what: str,
        diagnosis: Diagnosis | None,
        tail: list[str] | None = None,
        code: int = EXIT_FAILED,
    ) -> NoReturn:
        why = diagnosis.why if diagnosis else "mlsetup does not recognise this failure."
        nxt = (
            diagnosis.next
            if diagnosis
            else (
                f"Read the log{f' ({log})' if log else ''}, fix the cause, then: {RESUME_COMMAND}"
            )
        )
        self.emit(
            Failed(
                step=step,
                action=action.id if action else None,
                exit_code=exit_code,
                log=str(log) if log else None,
                what=what,
                why=why,
                next=nxt,
            )
        )
        self.outcome.failure = {
            "step": step,
            "action": action.id if action else None,
            "exit_code": exit_code,
            "log": str(log) if log else None,
            "what": what,
            "why": why,
            "next": nxt,
            "diagnosis": diagnosis.id if diagnosis else None,
            "last_output": (tail or [])[-20:],
        }
        if self.state is not None:
            self.state.phase = "failed"
        raise _Stop(self._finish(code, "failed", what))

    def _no_space(self, exc: OSError) -> int:
        """A state, log or report write found its disk full. The state file is still the last
        complete one (every write is atomic), so the resume goes on from there; this says so
        through whatever can still be written (the console of a foreground engine)."""
        where = str(exc.filename or self.paths.state)
        diagnosis = no_space(where)
        what = f"no space left on the device to write {where}"
        why, nxt = diagnosis.why, diagnosis.next
        self.outcome.failure = {
            "step": self._step, "action": None, "exit_code": None, "log": None, "what": what,
            "why": why, "next": nxt, "diagnosis": diagnosis.id, "last_output": [],
        }
        for event in (
            Failed(step=self._step, action=None, exit_code=None, log=None, what=what, why=why,
                   next=nxt),
            Finished(code=EXIT_FAILED, result="failed", summary=what),
        ):
            for sink in self._sinks:
                with contextlib.suppress(OSError):
                    sink(event)
        if self.state is not None:
            with contextlib.suppress(OSError):  # if there is room again, or only logs are full
                self.state.phase = "failed"
                self._save()
                self._write_report(EXIT_FAILED, "failed")
        return EXIT_FAILED

    def _finish(self, code: int, result: str, summary: str) -> int:
        if self.state is not None:
            if result == "done":
                self.state.phase = "done"
                self.state.environment = {}  # nothing resumes a finished run: drop proxy secrets
            if (
                result in ("done", "failed")
                and self.state.reboot
                and self.state.reboot.unit_installed
            ):
                self._remove_resume_unit()
            self._save()
            self._write_report(code, result)
        self.emit(Finished(code=code, result=result, summary=summary))
        return code

    def _write_report(self, code: int, result: str) -> None:
        assert self.state is not None
        steps = []
        for step in self.plan.steps if self.plan else []:
            steps.append(
                {
                    "name": step.name,
                    "status": step.status,
                    "reason": step.reason,
                    "actions": [
                        {
                            "id": a.id,
                            **(
                                self.state.actions[a.id].model_dump(exclude={"pid", "step"})
                                if a.id in self.state.actions
                                else {"status": "pending"}
                            ),
                        }
                        for a in step.actions
                    ],
                }
            )
        report = {
            "schema": REPORT_SCHEMA,
            "run_id": self.state.run_id,
            "result": result,
            "code": code,
            "changed": self.outcome.changed,
            "ran": self.outcome.ran,
            "failure": self.outcome.failure,
            "steps": steps,
            # the one stack: what was resolved (and the file itself, to hand another host)
            "lock": {**self.lock.summary(), "file": STATE_LOCK, "text": self.lock.file_text()}
            if self.lock else None,
            "smoke": {"stack": self.outcome.smoke},
            "log_dir": str(self.paths.log_dir / self.state.run_id),
            "time": time.time(),
        }
        write_atomic(self.paths.report, json.dumps(report, indent=2) + "\n")


def _naming(exc: OSError, path: Path | None) -> OSError:
    """`exc` naming the file it happened to (a failed write() names none)."""
    return OSError(exc.errno, exc.strerror, str(path) if path else None)


def _driver_ok(facts: Facts, branch: int) -> bool:
    return bool(facts.driver and facts.driver.loaded and facts.driver.branch >= branch)


def _alive(pid: int, program: str) -> bool:
    """pid is running and is still `program` (not a reused pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        status = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if ") Z " in status:  # a zombie has ended
        return False
    name = os.path.basename(program).encode()
    return any(os.path.basename(part) == name for part in cmdline[:2])
