"""The extension releases the answers ask for, checked against the index before the stack is
resolved (`mlsetup plan` and the wizard's field alike): a release the index lacks is refused
naming the newest it has, and an index that answers but has no release of the extension at all
(a partial mirror) is refused naming that index and one that has it. Metadata only, without
dependencies or builds: a release that has only source counts."""

from __future__ import annotations

from collections.abc import Callable

from steps.core.errors import InputError
from steps.formats.answers import Answers
from steps.known.knowledge import knowledge
from steps.run.runner import Result
from steps.stack.refusal import Refusals
from steps.stack.uvfailure import (
    ABOVE_ALL,
    Missing,
    Unreachable,
    newest_available,
    read_failure,
)

# One `uv pip compile --no-deps --no-build` of one requirement: (action id, title, requirement)
Ask = Callable[[str, str, str], Result]


def asked_of_index(answers: Answers) -> list[tuple[int, str, str]]:
    """(position, package, version) of each extension release the index is asked about: those
    fetched from it (the recipe's requirement is a name and version, not a local source)."""
    recipes = knowledge().extensions
    return [
        (at, recipes[ext.name].package, ext.version)
        for at, ext in enumerate(answers.extensions)
        if recipes[ext.name].requirement == "{package}=={version}"
    ]


def check_extension_releases(
    answers: Answers, ask: Ask, local: bool, refuse: Refusals, build: str, python: str
) -> None:
    """Each extension fetched from the index has the release asked for there; else InputError
    naming what the index has."""
    recipes = knowledge().extensions
    for at, package, version in asked_of_index(answers):
        recipe = recipes[answers.extensions[at].name]
        action = f"venv.resolve-check-{package}"
        title = f"Check that the index has {package} {version}"
        result = ask(action, title, f"{package}=={version}")
        if result.exit_code == 0:
            continue
        failure = read_failure(result.tail, local)
        if isinstance(failure, Unreachable):
            raise refuse.of(failure, build, python, action)
        if not isinstance(failure, Missing):
            continue  # it is there (only as source, or not for this Python: the build says)
        newest = newest_available(ask(action, title, f"{package}>={ABOVE_ALL}").tail)
        if newest is None:  # the index answers, and has no release of it: a partial mirror
            raise InputError(refuse.no_release_at_all(at, version, recipe, build))
        raise InputError(refuse.no_release(at, version, recipe, newest, build))
