"""Wizard step 3: a uv-created venv, owned by the invoking user, holding exactly the locked stack.

Two parts. Before any step runs, `settle_lock` gives the run its lock: the one the answers name
(`venv.lock`), the one saved for these same inputs, or a new one that uv resolves (torch with the
chosen build, the packages, the extensions' build requirements, for the target's Python and
platform). Then `plan` asks whether the venv already holds that lock and, if not, creates the
venv and installs the lock in one `uv pip sync`, followed by the stack's smoke test.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from steps.answers import Answers
from steps.choices import Choices, builds_to_try, choose, lock_problems, python_choice
from steps.errors import InputError
from steps.events import EventSink
from steps.facts import Facts
from steps.knowledge import knowledge
from steps.lock import (
    SMOKE_SCRIPT,
    STATE_LOCK,
    Lock,
    configured,
    index_args,
    index_secrets,
    input_key,
    load_lock,
    per_build_index,
    platform_for,
    read_lock_file,
    requirements,
    sync_argv,
)
from steps.plan import Action, Step, pending, satisfied
from steps.resolve import (
    Resolution,
    RunCommand,
    StackInputs,
    StackUnavailable,
    resolver_for,
)
from steps.rootfs import RootFS
from steps.runner import Result, Runner, RunnerError
from steps.venvstate import VenvState

__all__ = ["StackUnavailable", "lock_ahead", "lock_for_plan", "plan", "settle_lock"]


# -- the lock ---------------------------------------------------------------------------------


def torch_range(answers: Answers, per_build: bool) -> list[str]:
    """An explicit torch.cuda on an index that serves one build per release (PyPI, a mirror of
    it): the releases whose PyPI wheel is that build (assets/torch.toml pypi_cuda), as a
    constraint; the resolved wheel still has to be it."""
    if per_build or answers.torch.cuda in ("auto", "cpu") or answers.torch.version != "auto":
        return []
    k = knowledge()
    cuda = k.torch.build(answers.torch.cuda).cuda
    series = [r.series for r in k.torch.releases if r.pypi_cuda == cuda]  # newest first
    if not series:
        return []
    newer = [r.series for r in k.torch.releases if Version(r.series) > Version(series[0])]
    upper = f",<{newer[-1]}" if newer else ""
    return [f"torch>={series[-1]}{upper}"]


def stack_inputs(
    facts: Facts, answers: Answers, root: Path | None = None, builds_allowed: bool = True
) -> StackInputs:
    """What the resolution these answers ask for on this machine is given. `builds_allowed`:
    whether an sdist may be built to learn its metadata (a lock made without is another lock)."""
    base = choose(facts, answers)
    # what the extensions' builds need, and their wheels at run time (installed --no-deps)
    build_requires = [
        r
        for t in base.build_targets
        for r in ("pip", *t.recipe.build_requires, *t.recipe.runtime_requires)
    ]
    reqs = requirements(answers, build_requires)
    platform = platform_for(facts.os.arch if facts.os else None)
    index = configured(root)
    per_build = per_build_index(answers, index)
    builds = builds_to_try(facts, answers)
    builds = builds if per_build else builds[:1]
    constraints = torch_range(answers, per_build)
    python = python_choice(facts, answers)
    python_key = "auto:" + ",".join(python.candidates) if python.candidates else python.version
    index_used = index_args(answers, builds[0], index) + ([] if builds_allowed else ["--no-build"])
    key = input_key([*reqs, *constraints], python_key, platform, builds, index_used)
    return StackInputs(reqs, constraints, python, platform, builds, index, key)


def settle_lock(
    fs: RootFS, facts: Facts, answers: Answers, run: RunCommand | None, on_machine: bool = True
) -> Lock | None:
    """The run's lock: `venv.lock` (checked against this machine), the saved one when these
    inputs made it, else a new resolution (`run` None: None, plan from knowledge). InputError
    when no torch satisfies the packages here. `on_machine`: `facts` are this machine's (its
    venv owner resolves when a build is needed), not a recorded one's."""
    if answers.venv.lock:
        lock = read_lock_file(fs.path(answers.venv.lock), f"venv.lock {answers.venv.lock!r}")
        if problems := lock_problems(facts, answers, lock):
            raise InputError(
                f"venv.lock {answers.venv.lock!r} does not fit this machine: " + "; ".join(problems)
            )
        return lock
    owner = choose(facts, answers).owner.run_as
    resolver = resolver_for(fs, owner, on_machine)
    inputs = stack_inputs(facts, answers, fs.root, resolver.builds)
    saved = fs.read_text(STATE_LOCK)
    if saved:
        try:
            lock = load_lock(saved, STATE_LOCK)
        except InputError:
            pass  # damaged: resolve again and replace it
        else:
            if lock.key == inputs.key:
                return lock
    if run is None:
        return None
    return Resolution(facts, answers, inputs, run, resolver).lock()


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
) -> tuple[Lock | None, str | None]:
    """`mlsetup plan`: the lock a resolution gives now (metadata only, nothing written under
    the root), or None and why when the index cannot be reached."""
    with tempfile.TemporaryDirectory(prefix="mlsetup-plan-") as tmp:
        try:
            run = _plan_runner(fs, answers, Path(tmp))
            return settle_lock(fs, facts, answers, run, on_machine), None
        except StackUnavailable as exc:
            return None, f"{exc}; the resolution happens at apply, planned from knowledge"


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


# -- the step ---------------------------------------------------------------------------------


def _same(installed: str | None, locked: str) -> bool:
    try:
        return installed is not None and Version(installed) == Version(locked)
    except InvalidVersion:
        return installed == locked


def unlocked_ok(venv: VenvState | None, answers: Answers, choices: Choices) -> bool:
    """Without a lock (the index out of reach): the venv's torch meets the requirement and is
    the chosen build, and every requested package is there."""
    installed = venv.version_of("torch") if venv else None
    if venv is None or installed is None:
        return False
    try:
        version = Version(installed)
        if version.public not in Requirement(choices.torch_requirement).specifier:
            return False
    except InvalidVersion:
        return False
    build_ok = (version.local or "") == choices.torch_build or (
        # Linux wheels from PyPI carry no local tag and are built with the default CUDA.
        not version.local and choices.torch_build != "cpu" and venv.torch_cuda == choices.cuda
    )
    for spec in answers.torch.packages:
        req = Requirement(spec)
        have = venv.version_of(req.name)
        if have is None or (req.specifier and have not in req.specifier):
            return False
    return build_ok


def lock_missing(venv: VenvState | None, lock: Lock) -> list[str]:
    """The lock's pins the venv does not hold at exactly that version."""
    return [
        f"{name}=={version}"
        for name, version in lock.packages.items()
        if not venv or not _same(venv.version_of(name), version)
    ]


def stack_text(lock: Lock) -> str:
    others = [f"{n} {v}" for n, v in lock.packages.items() if canonicalize_name(n) != "torch"]
    shown = ", ".join(others[:12]) + (f" and {len(others) - 12} more" if len(others) > 12 else "")
    decided = f" (decided by {', '.join(lock.decided_by)})" if lock.decided_by else ""
    build = "" if "+" in lock.torch else f" ({lock.build})"  # PyPI's plain wheel: say which
    return f"torch {lock.torch}{build}{decided}" + (f"; {shown}" if shown else "")


def _sync(choices: Choices, answers: Answers, build: str) -> list[str]:
    """From the index the lock was resolved against; builds (of the pins that have only
    source) only as the venv's owner, never in root's venv."""
    return sync_argv(
        choices.venv_python,
        index_args(answers, build, configured()),
        builds=choices.owner.run_as is not None,
    )


def _built_here(lock: Lock, choices: Choices) -> str:
    """The pins that have only source: the venv's owner builds them during the sync."""
    if not lock.sources:
        return ""
    return f"; source only, built as {choices.owner.name} at apply: {', '.join(lock.sources)}"


def _create(choices: Choices) -> Action:
    python = choices.python
    if choices.python_system:
        return Action(
            id="venv.create",
            kind="create",
            title=f"Create a Python {python} venv at {choices.venv_path} (the system's Python)",
            argv=[
                "uv",
                "venv",
                "--python",
                python,
                "--python-preference",
                "only-system",
                choices.venv_path,
            ],
            user=choices.owner.run_as,
        )
    why = choices.python_reason or "the system has none the torch release supports"
    return Action(
        id="venv.create",
        kind="create",
        title=f"Create a Python {python} venv at {choices.venv_path} (uv downloads "
        f"CPython {python}: {why})",
        argv=["uv", "venv", "--python", python, choices.venv_path],
        user=choices.owner.run_as,
    )


SMOKE_ACTION = "venv.smoke"


def smoke_action(facts: Facts, choices: Choices, torch: str) -> Action:
    gpus = 0 if choices.cuda is None else len(facts.gpus)
    return Action(
        id=SMOKE_ACTION,
        kind="smoke",
        title=f"Smoke-test torch {torch or '(as resolved)'} "
        f"({'CPU, gloo' if not gpus else f'{gpus} GPU' + ('s' if gpus > 1 else '')})",
        # without a lock yet (a plan from knowledge) no version to hold torch to: any
        argv=[
            choices.venv_python,
            SMOKE_SCRIPT,
            *(["--torch", torch] if torch else []),
            "--gpus",
            str(gpus),
        ],
        user=choices.owner.run_as,
    )


def plan(facts: Facts, answers: Answers, choices: Choices, venv: VenvState | None) -> Step:
    path, lock = choices.venv_path, choices.lock
    if lock is None and unlocked_ok(venv, answers, choices):
        have = venv.version_of("torch") if venv else None
        return satisfied(
            "venv",
            f"{path} has torch {have} and every requested package (not "
            "locked: no index to resolve against)",
        )
    if lock is None:  # plan --facts, an offline plan, a dry run: no lock yet
        actions = ([_create(choices)] if venv is None else []) + [
            Action(
                id="venv.sync",
                kind="sync",
                title="Install the stack uv resolves at apply, in one step",
                argv=_sync(choices, answers, choices.torch_build),
                user=choices.owner.run_as,
            ),
            smoke_action(facts, choices, ""),
        ]
        return pending(
            "venv",
            f"the resolution happens at apply (uv, {choices.torch_build} "
            f"build first); planned from knowledge: {choices.torch_requirement} "
            f"and {', '.join(answers.torch.packages) or 'no other packages'}",
            actions,
        )
    have = venv.python_version if venv else None
    if have and ".".join(have.split(".")[:2]) != lock.python:
        return pending(
            "venv",
            f"{path} has Python {have}, but the lock is for Python "
            f"{lock.python}: move that venv away or set venv.path to a new one",
            [],
        )
    missing = lock_missing(venv, lock)
    if venv is not None and not missing:
        return satisfied("venv", f"{path} holds the locked stack: {stack_text(lock)}")
    actions = [] if venv is not None else [_create(choices)]
    actions += [
        Action(
            id="venv.sync",
            kind="sync",
            title=f"Install the locked stack in one step: {stack_text(lock)}"
            + _built_here(lock, choices),
            argv=_sync(choices, answers, lock.build),
            user=choices.owner.run_as,
        ),
        smoke_action(facts, choices, lock.torch),
    ]
    why = f"no venv at {path}" if venv is None else f"{path} lacks {', '.join(missing[:6])}"
    note = f" ({lock.note})" if lock.note else ""
    return pending(
        "venv",
        f"{why}: install the lock, {stack_text(lock)}{note}{_built_here(lock, choices)}",
        actions,
    )
