"""The one stack, settled before any step changes anything, and its smoke test's verdict.

The lock is resolved (or reused, or taken from `venv.lock`) once; root keeps its copy and
shares one, with the smoke test, for the venv's owner. An offline machine whose venv
already satisfies the answers keeps it unlocked."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from steps.apply.actions import ActionRunner, Execute
from steps.apply.applyrun import ApplyRun, Fault
from steps.apply.diagnose import Diagnosis, failed_url, held_up
from steps.core.assetdir import ASSETS_DIR
from steps.core.errors import InputError, Refused
from steps.core.exitcodes import EXIT_FAILED, EXIT_INPUT
from steps.core.nextcommands import RESUME_COMMAND, answers_command, answers_file
from steps.decide.choices import choose
from steps.formats.events import Notice
from steps.formats.facts import Facts
from steps.formats.lock import (
    ACTIVATE_SCRIPT,
    SHARED_DIR,
    SHARED_LOCK,
    SMOKE_SCRIPT,
    STATE_LOCK,
    Lock,
    LockRefused,
    make_shared_dir,
)
from steps.formats.plan import Action
from steps.formats.state import write_atomic
from steps.planning.venv import unlocked_ok as venv_unlocked_ok
from steps.run.runner import Result
from steps.stack import activate
from steps.stack.obtain import settle_lock
from steps.stack.refusal import StackUnavailable
from steps.stack.venvstate import probe_venv

log = logging.getLogger("mlsetup.stack")

SMOKE_MARK = "MLSETUP_SMOKE "  # the line assets/smoke_stack.py ends with: its result as JSON


class StackSettler:
    def __init__(self, run: ApplyRun, actions: ActionRunner) -> None:
        self.run = run
        self.actions = actions
        # the last resolution run and its result: a failure names its log and output
        self._resolved: tuple[Action, Result | None] | None = None

    def settle(self) -> None:
        """Resolve (or reuse, or take from venv.lock) the one lock before any step changes
        anything; a package that forces an impossible torch ends the run here with exit 2."""
        facts = self.run.facts()
        try:
            self.run.lock = self._settle_lock(facts)
        except Refused as exc:  # a lock or the index settings root will not use
            self.run.fail(
                Fault(
                    "venv",
                    str(exc),
                    diagnosis=Diagnosis(
                        "lock-refused" if isinstance(exc, LockRefused) else "settings-refused",
                        exc.why,
                        f"{exc.fix}, then: {answers_command(self.run.req.answers_path)}",
                    ),
                    code=EXIT_INPUT,
                )
            )
        except InputError as exc:
            self.run.fail(
                Fault(
                    "venv",
                    str(exc),
                    diagnosis=Diagnosis(
                        "stack-unsatisfiable",
                        "The answers' packages do not resolve into one stack that runs here.",
                        "Change torch.packages, torch.cuda or torch.index_url in "
                        f"{answers_file(self.run.req.answers_path)} as the message says, "
                        f"then: {answers_command(self.run.req.answers_path)}",
                    ),
                    code=EXIT_INPUT,
                )
            )
        except StackUnavailable as exc:
            self._unavailable(exc, facts)
            return
        lock = self.run.lock
        if lock is None:
            log.info("stack lock: none in a dry run; planning from knowledge")
            self.run.emit(
                Notice(
                    # said plainly: the dry run's torch can differ from what plan and apply lock
                    text="dry run: nothing is resolved, so the torch shown is a guess from "
                    "mlsetup's tables; uv resolves the stack at apply (mlsetup plan shows "
                    "what it locks now)"
                )
            )
            return
        log.info(
            "stack lock: torch %s (%s), Python %s, decided by %s; %d packages",
            lock.torch,
            lock.build,
            lock.python,
            ", ".join(lock.decided_by),
            len(lock.packages),
        )
        decided = f", decided by {', '.join(lock.decided_by)}" if lock.decided_by else ""
        self.run.emit(
            Notice(
                text=f"stack lock: torch {lock.torch} ({lock.build}) for Python {lock.python}"
                f"{decided}; {len(lock.packages)} packages pinned with hashes, from {lock.index}"
                f"{lock.held_back_text}"
            )
        )
        if not self.run.req.dry_run:
            self._keep_lock(lock)

    def _settle_lock(self, facts: Facts) -> Lock | None:
        planned = self.run.req.planned
        if self.run.req.dry_run and planned is not None:
            return planned.lock  # the dry run walks the plan its front end showed
        resolving = not self.run.req.dry_run and self.run.state is not None

        def resolve(action: Action) -> Result | None:
            result = self.actions.command("venv", action)
            self._resolved = (action, result)
            return result

        return settle_lock(
            self.run.fs,
            facts,
            self.run.req.answers,
            resolve if resolving else None,
        )

    def _unavailable(self, exc: StackUnavailable, facts: Facts) -> None:
        """No index to resolve from: keep a venv that already satisfies the answers (an image
        with torch), or fail."""
        choices = choose(facts, self.run.req.answers)
        venv = probe_venv(self.run.fs, choices.venv_path)
        if venv_unlocked_ok(venv, self.run.req.answers, choices):
            log.info(
                "stack lock: unavailable (%s); the venv satisfies the answers: kept unlocked", exc
            )
            self.run.emit(
                Notice(
                    text=f"{exc}; the venv already holds a torch and packages "
                    "that satisfy the answers: kept as it is, unlocked",
                    excuses=exc.action,
                )
            )
            if not self.run.req.dry_run:
                self._share_smoke_test()
            return
        action, result = self._resolved or (None, None)
        if action is None or action.id != exc.action:
            action, result = None, None
        tail = result.tail if result else []
        url = failed_url(tail)
        answers = self.run.req.answers_path
        diagnosis = Diagnosis(
            "index-unreachable",
            f"uv could not reach the package index{f' ({url})' if url else ''} to "
            "resolve the stack.",
            f"Check the network and proxy, then: {RESUME_COMMAND}; or set "
            f"torch.index_url in {answers_file(answers)} to an index this server "
            "reaches (a mirror of the PyTorch index; PyPI, https://pypi.org/simple, for "
            f"CUDA builds: its Linux torch is one), then: {answers_command(answers)}",
        )
        code = EXIT_INPUT  # the index configured cannot serve this run: nothing ran
        if result is not None and result.ended and action is not None:
            code = EXIT_FAILED  # not the input's doing: another account held the run up
            who = action.user or "root"
            diagnosis = held_up("The resolution", who, result.ended)
        self.run.fail(
            Fault(
                "venv",
                str(exc),
                action=action,
                exit_code=result.exit_code if result else None,
                log=self.run.action_log(action.id) if action else None,
                diagnosis=diagnosis,
                tail=tail,
                code=code,
            )
        )

    def _keep_lock(self, lock: Lock) -> None:
        """Root's copy in /var/lib/mlsetup; the copy the venv's owner syncs from and the smoke
        test beside it in a directory only root writes."""
        fs = self.run.fs
        text = lock.file_text()
        if fs.read_text(STATE_LOCK) != text:
            write_atomic(fs.path(STATE_LOCK), text)
        self._share_smoke_test()
        write_atomic(fs.path(SHARED_LOCK), text, mode=0o644)

    def _share_smoke_test(self) -> None:
        """The stack's smoke test where the venv's owner runs it (after the sync, and as the
        check after the extensions), and the writer of the venv's activate blocks
        (steps.stack.activate), in a directory only root writes; a venv kept unlocked gets its check
        after the extensions too."""
        fs = self.run.fs
        make_shared_dir(fs.path(SHARED_DIR))
        write_atomic(fs.path(SMOKE_SCRIPT), (ASSETS_DIR / "smoke_stack.py").read_text(), mode=0o644)
        write_atomic(fs.path(ACTIVATE_SCRIPT), activate.WRITE, mode=0o644)

    def recorder(self, action: Action) -> Execute | None:
        """For the stack's smoke test (after the sync) and its check after the extensions: run
        it and keep its verdict for the report, passed or failed. None for any other action."""
        # the stack's own smoke test has no target (an extension's names the extension)
        stack_smoke = action.kind == "smoke" and action.target is None
        which = "stack" if stack_smoke else {"stack-check": "after_extensions"}.get(action.kind)
        if which is None:
            return None

        def execute(action: Action, log_path: Path, started: Callable[[int], None]) -> Result:
            result = self.run.runner.run(action, log_path, on_start=started)
            self._smoke_result(which, result)
            return result

        return execute

    def _smoke_result(self, which: str, result: Result) -> None:
        """A smoke test's verdict, from its last line, for the report."""
        line = next((x for x in reversed(result.tail) if x.startswith(SMOKE_MARK)), None)
        try:
            smoke = json.loads(line[len(SMOKE_MARK) :]) if line else None
        except ValueError:
            smoke = None
        smoke = smoke if isinstance(smoke, dict) else None  # the report holds an object
        self.run.outcome.smoke[which] = smoke
        summary = smoke.get("summary") if smoke else "no result line"
        log.info("%s: %s", which, summary)
        if smoke:
            label = "stack smoke test" if which == "stack" else "stack check"
            self.run.emit(Notice(text=f"{label}: {summary}"))
