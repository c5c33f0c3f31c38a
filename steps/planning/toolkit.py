"""The CUDA toolkit step: toolkits installed beside any that exist, never replacing one."""

from __future__ import annotations

from steps.decide.choices import Choices
from steps.formats.answers import Answers
from steps.formats.facts import Facts
from steps.formats.plan import Outcome, pending, satisfied
from steps.known.knowledge import knowledge
from steps.planning.apt import apt_install, no_repo_reason, nvidia_repo_actions


def missing(facts: Facts, choices: Choices) -> list[str]:
    return [v for v in choices.toolkits if facts.toolkit(v) is None]


def plan(facts: Facts, answers: Answers, choices: Choices) -> Outcome:
    if not choices.toolkits:
        return satisfied("no CUDA toolkit needed: torch is the CPU build")
    todo = missing(facts, choices)
    present = [f"CUDA {t.version} at {t.path}" for t in facts.toolkits]
    if not todo:
        return satisfied("already installed: " + ", ".join(present))
    repo = nvidia_repo_actions(facts)
    if repo is None:
        return pending(no_repo_reason(facts), [])
    k = knowledge().repo
    beside = f" beside {', '.join(present)}" if present else ""
    paths = ", ".join(k.toolkit_path_for(v) for v in todo)
    reason = f"CUDA {', '.join(todo)} is missing: install to {paths}{beside}"
    actions = repo + [
        apt_install(
            f"toolkit.install-{v}",
            f"Install CUDA toolkit {v} to {k.toolkit_path_for(v)}",
            [k.toolkit_package_for(v)],
            target=v,
        )
        for v in todo
    ]
    return pending(reason, actions)


def leaves(facts: Facts, choices: Choices) -> list[str]:
    k = knowledge().repo
    return [f"CUDA {v} at {k.toolkit_path_for(v)}" for v in missing(facts, choices)]
