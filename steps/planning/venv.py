"""The venv step: a uv-created venv, owned by the invoking user, holding exactly the locked stack.

Before any step runs, the run has its lock (steps.stack.obtain). `plan` asks whether the venv
already holds that lock and, if not, creates the venv and installs the lock in one
`uv pip sync`, followed by the stack's smoke test.
"""

from __future__ import annotations

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from steps.decide.choices import Choices
from steps.formats.answers import Answers
from steps.formats.facts import Facts
from steps.formats.lock import ACTIVATE_SCRIPT, SMOKE_SCRIPT, Lock
from steps.formats.plan import Action, Outcome, pending, satisfied
from steps.known.knowledge import knowledge
from steps.run.index import configured, index_args
from steps.stack.commands import sync_argv
from steps.stack.inputs import requested_names
from steps.stack.venvstate import VenvState


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


def cuda_home(facts: Facts, choices: Choices) -> str | None:
    """The toolkit the venv's activate names as CUDA_HOME: the one of torch's CUDA (installed
    by the toolkit step when missing), else one of the same major the answers install; None
    for the CPU build."""
    cuda = choices.cuda
    if cuda is None:
        return None
    if (have := facts.toolkit(cuda)) is not None:
        return have.path
    major = cuda.split(".")[0]
    same = [t for t in choices.toolkits if t == cuda] or [
        t for t in choices.toolkits if t.split(".")[0] == major
    ]
    return knowledge().repo.toolkit_path_for(same[0] if same else cuda)


def _activate(choices: Choices, home: str) -> Action:
    return Action(
        id="venv.activate",
        kind="activate",
        title=f"Set CUDA_HOME={home} (torch's CUDA {choices.cuda}) and its bin on PATH in the "
        "venv's activate scripts",
        argv=[choices.venv_python, ACTIVATE_SCRIPT, choices.venv_path, home],
        user=choices.owner.run_as,
    )


def _activated(home: str | None) -> str:
    return f"; activate sets CUDA_HOME={home}" if home else ""


SMOKE_ACTION = "venv.smoke"


def smoke_action(facts: Facts, choices: Choices, torch: str, packages: list[str]) -> Action:
    """torch on every GPU, then (when no extension build follows, whose stack check imports
    them) each requested package's modules."""
    gpus = 0 if choices.cuda is None else len(facts.gpus)
    imports = [] if choices.build_targets or not packages else ["--packages", *packages]
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
            *imports,
        ],
        user=choices.owner.run_as,
    )


def plan(facts: Facts, answers: Answers, choices: Choices, venv: VenvState | None) -> Outcome:
    path, lock = choices.venv_path, choices.lock
    home = cuda_home(facts, choices)
    activate = [_activate(choices, home)] if home else []
    if lock is None and unlocked_ok(venv, answers, choices):
        have = venv.version_of("torch") if venv else None
        return satisfied(
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
            *activate,
            smoke_action(facts, choices, "", requested_names(answers)),
        ]
        return pending(
            f"the resolution happens at apply (uv, {choices.torch_build} "
            f"build first); planned from knowledge: {choices.torch_requirement} "
            f"and {', '.join(answers.torch.packages) or 'no other packages'}",
            actions,
        )
    have = venv.python_version if venv else None
    if have and ".".join(have.split(".")[:2]) != lock.python:
        return pending(
            f"{path} has Python {have}, but the lock is for Python "
            f"{lock.python}: move that venv away or set venv.path to a new one",
            [],
        )
    missing = lock_missing(venv, lock)
    if venv is not None and not missing:
        if venv.cuda_home == home or not home:
            return satisfied(f"{path} holds the locked stack: {stack_text(lock)}{_activated(home)}")
        return pending(
            f"{path} holds the locked stack, but its activate does not set CUDA_HOME={home} "
            f"(torch's CUDA {choices.cuda})",
            activate,
        )
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
        *activate,
        smoke_action(facts, choices, lock.torch, requested_names(answers)),
    ]
    why = f"no venv at {path}" if venv is None else f"{path} lacks {', '.join(missing[:6])}"
    note = f" ({lock.note})" if lock.note else ""
    return pending(
        f"{why}: install the lock, {stack_text(lock)}{note}{_built_here(lock, choices)}"
        f"{lock.held_back_text}",
        actions,
    )


def leaves(choices: Choices) -> list[str]:
    return [
        f"a Python {choices.python} venv at {choices.venv_path} ({choices.owner.name}'s) with "
        f"{choices.torch_requirement} ({choices.torch_build} build)"
    ]
