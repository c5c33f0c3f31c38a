"""Wizard step 3: a uv-created venv, owned by the invoking user, with PyTorch and packages."""

from __future__ import annotations

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from steps.answers import Answers
from steps.choices import Choices
from steps.facts import Facts
from steps.knowledge import knowledge
from steps.plan import Action, Step, pending, satisfied
from steps.venvstate import VenvState


def torch_ok(venv: VenvState | None, choices: Choices) -> bool:
    """The venv's torch satisfies the requirement and is the chosen build."""
    installed = venv.version_of("torch") if venv else None
    if venv is None or installed is None:
        return False
    try:
        version = Version(installed)
    except InvalidVersion:
        return False
    if version.public not in Requirement(choices.torch_requirement).specifier:
        return False
    return (version.local or "") == choices.torch_build or (
        # Linux wheels from PyPI carry no local tag and are built with the default CUDA.
        not version.local and choices.torch_build != "cpu" and venv.torch_cuda == choices.cuda
    )


def missing_packages(venv: VenvState | None, answers: Answers) -> list[str]:
    out = []
    for spec in answers.torch.packages:
        req = Requirement(spec)
        have = venv.version_of(req.name) if venv else None
        if have is None or (req.specifier and have not in req.specifier):
            out.append(spec)
    return out


def plan(facts: Facts, answers: Answers, choices: Choices, venv: VenvState | None) -> Step:
    path, user = choices.venv_path, choices.owner.run_as
    todo_torch = not torch_ok(venv, choices)
    todo_packages = missing_packages(venv, answers)
    if venv and not todo_torch and not todo_packages:
        return satisfied(
            "venv", f"{path} has torch {venv.version_of('torch')} and every requested package"
        )

    actions = []
    if venv is None:
        actions.append(
            Action(
                id="venv.create",
                title=f"Create a Python {answers.venv.python} venv at {path}",
                argv=["uv", "venv", "--python", answers.venv.python, path],
                user=user,
            )
        )
    if todo_torch:
        index = (
            knowledge().torch.index_for(choices.torch_build)
            if answers.torch.index_url == "auto"
            else answers.torch.index_url.replace("{build}", choices.torch_build)
        )
        actions.append(
            Action(
                id="venv.torch",
                title=f"Install {choices.torch_requirement} ({choices.torch_build})",
                argv=[
                    "uv",
                    "pip",
                    "install",
                    "--python",
                    choices.venv_python,
                    choices.torch_requirement,
                    "--index-url",
                    index,
                ],
                user=user,
            )
        )
    if todo_packages:
        actions.append(
            Action(
                id="venv.packages",
                title=f"Install {', '.join(todo_packages)}",
                argv=["uv", "pip", "install", "--python", choices.venv_python, *todo_packages],
                user=user,
            )
        )

    if venv is None:
        reason = f"no venv at {path}: create it as {choices.owner.name}"
    else:
        have = venv.version_of("torch")
        reason = (
            f"{path} exists (torch {have or 'missing'}); "
            f"needs {choices.torch_requirement} {choices.torch_build}"
        )
        if todo_packages:
            reason += f" and {', '.join(todo_packages)}"
    return pending("venv", reason, actions)
