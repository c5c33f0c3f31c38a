"""Wizard step 3: a uv-created venv, owned by the invoking user, holding exactly the locked stack.

Two parts. Before any step runs, `settle_lock` gives the run its lock: the one the answers name
(`venv.lock`), the one saved for these same inputs, or a new one that uv resolves (torch with the
chosen build, the packages, the extensions' build requirements, for the target's Python and
platform). Then `plan` asks whether the venv already holds that lock and, if not, creates the
venv and installs the lock in one `uv pip sync`, followed by the stack's smoke test.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from steps.answers import Answers
from steps.choices import Choices, builds_to_try, choose, lock_problems, locked_build
from steps.errors import InputError, MlsetupError
from steps.events import EventSink
from steps.facts import Facts
from steps.lock import (
    SMOKE_SCRIPT,
    STATE_LOCK,
    Lock,
    compile_argv,
    decided_by,
    explain,
    index_secrets,
    input_key,
    load_lock,
    no_solution,
    parse_pins,
    platform_for,
    read_failure,
    read_lock_file,
    requirements,
    sync_argv,
)
from steps.plan import Action, Step, pending, satisfied
from steps.rootfs import RootFS
from steps.runner import Result, Runner, RunnerError
from steps.venvstate import VenvState

RunCommand = Callable[[Action], Result | None]


class StackUnavailable(MlsetupError):
    """uv could not resolve for a reason other than the requirements (no index, no network).
    `action`: the id of the resolution that failed, when one ran."""

    def __init__(self, message: str, action: str | None = None) -> None:
        super().__init__(message)
        self.action = action


# -- the lock ---------------------------------------------------------------------------------


def stack_inputs(facts: Facts, answers: Answers) -> tuple[list[str], str, str, list[str], str]:
    """(requirements, Python, platform, builds to try, key) of the resolution these answers
    ask for on this machine."""
    base = choose(facts, answers)
    build_requires = [r for t in base.build_targets for r in ("pip", *t.recipe.build_requires)]
    reqs = requirements(answers, build_requires)
    platform = platform_for(facts.os.arch if facts.os else None)
    builds = builds_to_try(facts, answers)
    return (
        reqs,
        base.python,
        platform,
        builds,
        input_key(reqs, base.python, platform, builds, answers),
    )


def settle_lock(
    fs: RootFS, facts: Facts, answers: Answers, run: RunCommand | None, workdir: Path | None
) -> Lock | None:
    """The run's lock: `venv.lock` (checked against this machine), the saved one when these
    inputs made it, else a new resolution (`run` None or no `workdir`: None, plan from
    knowledge). InputError when no torch satisfies the packages here."""
    if answers.venv.lock:
        lock = read_lock_file(fs.path(answers.venv.lock), f"venv.lock {answers.venv.lock!r}")
        if problems := lock_problems(facts, answers, lock):
            raise InputError(
                f"venv.lock {answers.venv.lock!r} does not fit this machine: " + "; ".join(problems)
            )
        return lock
    reqs, python, platform, builds, key = stack_inputs(facts, answers)
    saved = fs.read_text(STATE_LOCK)
    if saved:
        try:
            lock = load_lock(saved, STATE_LOCK)
        except InputError:
            pass  # damaged: resolve again and replace it
        else:
            if lock.key == key:
                return lock
    if run is None or workdir is None:
        return None
    return resolve(facts, answers, run, workdir, (reqs, python, platform, builds, key))


def resolve(
    facts: Facts,
    answers: Answers,
    run: RunCommand,
    workdir: Path,
    inputs: tuple[list[str], str, str, list[str], str],
) -> Lock:
    """uv pip compile with each build in turn (best first) until one satisfies everything."""
    reqs, python, platform, builds, key = inputs
    if answers.torch.index_url != "auto" and "{build}" not in answers.torch.index_url:
        builds = builds[:1]  # one index for every build: one resolution says it all
    workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
    infile = workdir / "requirements.in"
    infile.write_text("\n".join(reqs) + "\n")
    failures = []
    for build in builds:
        out = workdir / f"lock-{build}.txt"
        out.unlink(missing_ok=True)
        action = Action(
            id=f"venv.resolve-{build}",
            kind="resolve",
            target=build,
            title=f"Resolve torch, the packages and the build requirements ({build})",
            argv=compile_argv(str(infile), str(out), python, platform, build, answers),
        )
        result = run(action)
        if result is None:
            raise StackUnavailable("uv could not be started to resolve the stack")
        if result.exit_code == 0 and out.is_file():
            # uv names the input file by its path, which differs between hosts: the lock must not
            text = out.read_text().replace(str(infile), "requirements.in")
            return _lock_from(text, facts, answers, python, platform, key, builds)
        if not no_solution(result.tail):
            raise StackUnavailable(
                f"uv could not resolve the stack with the {build} build (exit "
                f"{result.exit_code}): {' '.join(result.tail[-4:])}",
                action=action.id,
            )
        failures.append(read_failure(result.tail))
    failure = next((f for f in failures if f.package), failures[0])
    driver = facts.driver.version if facts.driver else None
    raise InputError(explain(failure, builds, facts.compute_capabilities, driver, answers))


def _lock_from(
    text: str,
    facts: Facts,
    answers: Answers,
    python: str,
    platform: str,
    key: str,
    builds: list[str],
) -> Lock:
    pins, via = parse_pins(text)
    if "torch" not in pins:
        raise StackUnavailable("uv's lock has no torch in it")
    build = locked_build(pins["torch"])
    decided = decided_by(via, answers)
    note = ""
    if build != builds[0]:
        note = (
            f"the {builds[0]} build has no torch that {', '.join(decided)} allow; "
            f"{build} has torch {pins['torch']}"
        )
    lock = Lock(
        text=text,
        python=python,
        platform=platform,
        build=build,
        key=key,
        decided_by=decided,
        note=note,
        packages=pins,
    )
    # e.g. PyPI's plain torch, whose CUDA these GPUs or this driver cannot run
    problems = [p for p in lock_problems(facts, answers, lock) if "Python" not in p]
    if problems:
        raise InputError(
            f"torch.packages {answers.torch.packages}: the stack uv resolved "
            f"cannot run here: {'; '.join(problems)}"
        )
    return lock


def lock_for_plan(fs: RootFS, facts: Facts, answers: Answers) -> tuple[Lock | None, str | None]:
    """`mlsetup plan` on this machine: the lock a resolution gives now (nothing is written
    under the root), or None and why when the index cannot be reached."""
    with tempfile.TemporaryDirectory(prefix="mlsetup-plan-") as tmp:
        logs = Path(tmp)
        drop: EventSink = lambda event: None  # noqa: E731

        def run(action: Action) -> Result | None:
            try:
                return Runner(fs, drop).run(
                    action, logs / f"{action.id}.log", extra_env=index_secrets(answers)
                )
            except RunnerError:
                return None

        try:
            return settle_lock(fs, facts, answers, run, logs / "resolve"), None
        except StackUnavailable as exc:
            return None, f"{exc}; the resolution happens at apply, planned from knowledge"


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
    return Action(
        id="venv.create",
        kind="create",
        title=f"Create a Python {python} venv at {choices.venv_path} (uv downloads "
        f"CPython {python}: the system has none the torch release supports)",
        argv=["uv", "venv", "--python", python, choices.venv_path],
        user=choices.owner.run_as,
    )


def smoke_action(facts: Facts, choices: Choices, torch: str) -> Action:
    gpus = 0 if choices.cuda is None else len(facts.gpus)
    return Action(
        id="venv.smoke",
        kind="smoke",
        title=f"Smoke-test torch {torch or '(as resolved)'} "
        f"({'CPU, gloo' if not gpus else f'{gpus} GPU'})",
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
                argv=sync_argv(choices.venv_python, answers, choices.torch_build),
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
            title=f"Install the locked stack in one step: {stack_text(lock)}",
            argv=sync_argv(choices.venv_python, answers, lock.build),
            user=choices.owner.run_as,
        ),
        smoke_action(facts, choices, lock.torch),
    ]
    why = f"no venv at {path}" if venv is None else f"{path} lacks {', '.join(missing[:6])}"
    note = f" ({lock.note})" if lock.note else ""
    return pending("venv", f"{why}: install the lock, {stack_text(lock)}{note}", actions)
