"""Where a run's lock comes from: the one the answers name (`venv.lock`, checked against this
machine), the one saved for these same inputs, or a new one uv resolves (torch with the chosen
build, the packages, the extensions' build requirements, for the target's Python and platform);
and the lock `mlsetup plan` and `mlsetup lock` resolve ahead of an apply (metadata only)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from steps.core.errors import InputError
from steps.core.rootfs import RootFS
from steps.decide.choices import choose
from steps.formats.answers import Answers
from steps.formats.events import EventSink
from steps.formats.facts import Facts
from steps.formats.lock import (
    STATE_LOCK,
    Lock,
    LockRefused,
    PlannedStack,
    load_lock,
    read_lock_file,
)
from steps.formats.plan import Action
from steps.run.index import index_label, index_secrets
from steps.run.runner import Result, Runner, RunnerError
from steps.stack.check import lock_problems
from steps.stack.inputs import stack_inputs
from steps.stack.refusal import StackUnavailable
from steps.stack.releases import asked_of_index
from steps.stack.resolve import Resolution, RunCommand, resolver_for


def settle_lock(
    fs: RootFS, facts: Facts, answers: Answers, run: RunCommand | None, on_machine: bool = True
) -> Lock | None:
    """The run's lock: `venv.lock` (checked against this machine), the saved one when these
    inputs made it, else a new resolution (`run` None: None, plan from knowledge). InputError
    when no torch satisfies the packages here. `on_machine`: `facts` are this machine's (its
    venv owner resolves when a build is needed), not a recorded one's."""
    if answers.venv.lock:
        given = answers.venv.lock
        fix = f"write it again with: sudo mlsetup lock --answers ANSWERS -o {given}"
        lock = read_lock_file(fs.path(given), f"venv.lock {given!r}", fix)
        if problems := lock_problems(facts, answers, lock):
            raise InputError(
                f"venv.lock {answers.venv.lock!r} does not fit this machine: "
                + "; ".join(p.text for p in problems)
            )
        return lock
    owner = choose(facts, answers).owner.run_as
    resolver = resolver_for(fs, owner, on_machine)
    inputs = stack_inputs(facts, answers, fs.root, resolver.builds)
    saved = fs.read_text(STATE_LOCK)
    if saved:
        try:
            # a fleet's lock is copied here: one that holds more than pins is refused
            lock = load_lock(saved, STATE_LOCK, f"sudo rm {STATE_LOCK}")
        except LockRefused as exc:
            exc.kind = "state"  # root's saved state, not the answers
            raise
        except InputError:
            pass  # damaged: resolve again and replace it
        else:
            # the same inputs, resolved by the account that would resolve them now: a lock
            # the venv's owner made is never reused for root's venv, or another's
            if lock.key == inputs.key and lock.resolved_by == resolver.who:
                return lock
    if run is None:
        return None
    return Resolution(facts, answers, inputs, run, resolver).lock()


def check_extension_releases(
    fs: RootFS, facts: Facts, answers: Answers, on_machine: bool = True
) -> None:
    """The extension releases the answers ask for are on the index, as `mlsetup plan` checks
    them (InputError naming what the index has); nothing is said when the index cannot be
    reached or a lock is given (the resolution, or the lock's own check, says that)."""
    if not releases_to_ask(answers):
        return
    resolver = resolver_for(fs, choose(facts, answers).owner.run_as, on_machine)
    inputs = stack_inputs(facts, answers, fs.root, resolver.builds)
    with tempfile.TemporaryDirectory(prefix="mlsetup-plan-") as tmp:
        run = _plan_runner(fs, answers, Path(tmp))
        try:
            Resolution(facts, answers, inputs, run, resolver).check_releases()
        except StackUnavailable:
            return


def releases_to_ask(answers: Answers) -> list[tuple[int, str, str]]:
    """(position, package, version) of each extension release `check_extension_releases` asks
    the index about (none when a lock is given: the lock's own check says it)."""
    return [] if answers.venv.lock else asked_of_index(answers)


def release_index(fs: RootFS, facts: Facts, answers: Answers) -> str:
    """The index `check_extension_releases` asks, as its refusals name it (no credentials)."""
    inputs = stack_inputs(facts, answers, fs.root)
    return index_label(answers, inputs.builds[0], inputs.configured)


def _plan_runner(fs: RootFS, answers: Answers, logs: Path) -> RunCommand:
    drop: EventSink = lambda event: None  # noqa: E731

    def run(action: Action) -> Result | None:
        try:
            return Runner(fs, drop).run(
                action, logs / f"{action.id}.log", extra_env=index_secrets(answers)
            )
        except RunnerError:
            return None

    return run


def lock_for_plan(
    fs: RootFS, facts: Facts, answers: Answers, on_machine: bool = True
) -> PlannedStack:
    """`mlsetup plan`: the lock a resolution gives now (metadata only, nothing written under
    the root), or none and why when the index cannot be reached."""
    with tempfile.TemporaryDirectory(prefix="mlsetup-plan-") as tmp:
        try:
            run = _plan_runner(fs, answers, Path(tmp))
            return PlannedStack(settle_lock(fs, facts, answers, run, on_machine))
        except StackUnavailable as exc:
            return PlannedStack(
                None, f"{exc}; the resolution happens at apply, planned from knowledge"
            )


def lock_ahead(fs: RootFS, facts: Facts, answers: Answers, on_machine: bool) -> Lock:
    """`mlsetup lock`: the hashed lock for `facts` (a recorded machine or this one), resolved
    now; an index that cannot be reached is invalid input here (exit 2)."""
    with tempfile.TemporaryDirectory(prefix="mlsetup-lock-") as tmp:
        try:
            lock = settle_lock(fs, facts, answers, _plan_runner(fs, answers, Path(tmp)), on_machine)
        except StackUnavailable as exc:
            raise InputError(f"{exc}; no lock written") from None
    assert lock is not None  # a runner was given
    return lock
