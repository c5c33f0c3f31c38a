"""The Plan (`mlsetup.plan/1`): what will run, in order, and why.

`make_plan` is pure: Facts + Answers (+ what is in the venv) in, Plan out. It
asks each step module, in the fixed order driver, toolkit, venv, extensions,
whether the step is satisfied and, if not, which actions would satisfy it.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from steps.answers import Answers
from steps.choices import Choices, choose
from steps.facts import Facts
from steps.rootfs import RootFS
from steps.venvstate import VenvState

PLAN_SCHEMA = "mlsetup.plan/1"
STEP_ORDER = ("driver", "toolkit", "venv", "extensions")


class Action(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    title: str
    argv: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    user: str | None = None
    reboot_after: bool = False

    def command_line(self) -> str:
        """The action as a shell line a person could paste (`sudo -u` for a user's action)."""
        prefix = [f"{k}={v}" for k, v in self.env.items()]
        words = (
            (["sudo", "-u", self.user] if self.user else [])
            + (["env", *prefix] if prefix else [])
            + self.argv
        )
        return shlex.join(words)


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["driver", "toolkit", "venv", "extensions"]
    status: Literal["pending", "satisfied"]
    reason: str
    actions: list[Action] = Field(default_factory=list)


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    schema_: Literal["mlsetup.plan/1"] = Field(alias="schema", default=PLAN_SCHEMA)
    warnings: list[str] = Field(default_factory=list)
    steps: list[Step]

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), indent=2) + "\n"

    def step(self, name: str) -> Step:
        return next(s for s in self.steps if s.name == name)

    @property
    def actions(self) -> list[Action]:
        return [a for s in self.steps for a in s.actions]


def satisfied(name: str, reason: str) -> Step:
    return Step(name=name, status="satisfied", reason=reason)


def pending(name: str, reason: str, actions: list[Action]) -> Step:
    return Step(name=name, status="pending", reason=reason, actions=actions)


def make_plan(facts: Facts, answers: Answers, venv: VenvState | None = None,
              wheels: Mapping[str, str] | None = None) -> Plan:
    """`venv`: what the venv already holds; `wheels`: cache key -> directory of a wheel built
    earlier (steps.wheels.find_wheels). Both None for a machine that is not this one."""
    from steps import driver, extensions, toolkit
    from steps import venv as venv_step

    choices: Choices = choose(facts, answers)
    steps = [
        driver.plan(facts, answers, choices),
        toolkit.plan(facts, answers, choices),
        venv_step.plan(facts, answers, choices, venv),
        extensions.plan(facts, answers, choices, venv, wheels or {}),
    ]
    steps = _share_repo_setup(steps)
    return Plan(warnings=list(choices.warnings), steps=steps)


def _share_repo_setup(steps: list[Step]) -> list[Step]:
    """NVIDIA's repo is set up once, by the first pending step that needs it."""
    seen: set[str] = set()
    out = []
    for step in steps:
        kept = [a for a in step.actions if not (a.id.startswith("nvidia-repo.") and a.id in seen)]
        seen.update(a.id for a in kept)
        out.append(step.model_copy(update={"actions": kept}))
    return out


def observe_and_plan(fs: RootFS, answers: Answers) -> tuple[Facts, Plan]:
    """Probe this machine (its venv and the wheels built earlier too) and plan for it."""
    from steps.extensions import wanted_wheels
    from steps.probe import probe
    from steps.venvstate import probe_venv
    from steps.wheels import find_wheels

    facts = probe(fs).facts
    choices = choose(facts, answers)
    venv = probe_venv(fs, choices.venv_path)
    wheels = find_wheels(fs, answers.build.wheelhouse, wanted_wheels(choices, venv))
    return facts, make_plan(facts, answers, venv, wheels)
