"""The commands mlsetup tells a person to run next, in one leaf module (it imports nothing of
mlsetup's): a diagnosis, the engine, the report and the app all name the same commands, and
naming them here keeps `steps.apply.diagnose` (which a viewer loads) off the engine's imports."""

from __future__ import annotations

import shlex

RESUME_COMMAND = "sudo mlsetup apply --resume"


def answers_command(answers: str | None) -> str:
    """The command that goes on after the answers file `answers` was edited: `apply --answers`
    re-plans from it (the same answers as the unfinished run's: that run resumes). `--resume`
    would go on with the answers the run saved when it started."""
    return f"sudo mlsetup apply --answers {shlex.quote(answers) if answers else 'FILE'}"


def answers_file(answers: str | None) -> str:
    """The run's answers file as a next step names it."""
    return shlex.quote(answers) if answers else "the answers file"
