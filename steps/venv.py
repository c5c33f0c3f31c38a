"""Wizard step 3: a uv-created venv, owned by the invoking user, with PyTorch and packages."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit, urlunsplit

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


# uv takes a named index's credentials from UV_INDEX_<NAME>_USERNAME/_PASSWORD (uv docs,
# "Environment variables"; checked with uv 0.13.9), so they never need to be on a command line,
# which every account can read in /proc/PID/cmdline.
INDEX_NAME = "torch"
INDEX_CREDENTIALS = ("UV_INDEX_TORCH_USERNAME", "UV_INDEX_TORCH_PASSWORD")


def split_credentials(url: str) -> tuple[str, dict[str, str]]:
    """`url` without its user:password, and the environment that gives them to uv."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, {}
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    public = urlunsplit(parts._replace(netloc=netloc))
    user, password = INDEX_CREDENTIALS
    return public, {user: unquote(parts.username or ""), password: unquote(parts.password or "")}


def index_url(answers: Answers, build: str) -> str:
    """The torch index the answers name for this build, credentials included."""
    if answers.torch.index_url == "auto":
        return knowledge().torch.index_for(build)
    return answers.torch.index_url.replace("{build}", build)


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
        # Credentials in the URL go to uv through its environment, added when the action
        # runs (steps.engine): the plan, its argv and everything shown of it carry none.
        index, secret = split_credentials(index_url(answers, choices.torch_build))
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
                    *(
                        ["--default-index", f"{INDEX_NAME}={index}"]
                        if secret
                        else ["--index-url", index]
                    ),
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
