"""The steps, in order: one entry each, the one place a step is named.

The plan's and the report's step names and their order, the engine's loop, the wizard's trail,
its jump keys and key hints all come from `STEPS`. Adding a step is its module (a planner
function), its wizard controller and one entry here.

A step either changes the machine ("changes": after its actions a fresh plan must find it
satisfied) or only checks it ("checks": its actions are the check, they pass or fail; they
change nothing, so the engine neither plans again after them nor reports the run as changed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from steps import driver, extensions, toolkit
from steps import venv as venv_step
from steps.answers import Answers
from steps.choices import Choices
from steps.facts import Facts
from steps.plan import Step
from steps.venvstate import VenvState

StepKind = Literal["changes", "checks"]


@dataclass(frozen=True)
class PlanInputs:
    """What a step's planner may read: the machine, the answers, the decisions made once for
    all steps, what the venv holds (None for a machine that is not this one) and the wheels
    built earlier (cache key -> directory)."""

    facts: Facts
    answers: Answers
    choices: Choices
    venv: VenvState | None = None
    wheels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StepSpec:
    name: str  # the plan's and the report's name for it
    title: str  # the wizard's heading for its screen
    plan: Callable[[PlanInputs], Step]  # satisfied, or the actions that satisfy it
    # its wizard screen's controller, "module:Class" under app/ (steps/ never imports app/)
    controller: str
    kind: StepKind = "changes"
    # whether it compiles the answers' extensions: the engine prepares their build trees and
    # checks what they need and install against the lock before it runs the step's actions
    builds_extensions: bool = False

    @property
    def changes_machine(self) -> bool:
        return self.kind == "changes"


STEPS: tuple[StepSpec, ...] = (
    StepSpec(
        "driver",
        "NVIDIA driver",
        lambda i: driver.plan(i.facts, i.answers, i.choices),
        "app.tui.controllers.driver:DriverController",
    ),
    StepSpec(
        "toolkit",
        "CUDA toolkit(s)",
        lambda i: toolkit.plan(i.facts, i.answers, i.choices),
        "app.tui.controllers.toolkit:ToolkitController",
    ),
    StepSpec(
        "venv",
        "Python venv with PyTorch",
        lambda i: venv_step.plan(i.facts, i.answers, i.choices, i.venv),
        "app.tui.controllers.venv:VenvController",
    ),
    StepSpec(
        "extensions",
        "CUDA extensions",
        lambda i: extensions.plan(i.facts, i.answers, i.choices, i.venv, i.wheels),
        "app.tui.controllers.extensions:ExtensionsController",
        builds_extensions=True,
    ),
)


def step_names() -> tuple[str, ...]:
    return tuple(s.name for s in STEPS)


def spec(name: str) -> StepSpec:
    for s in STEPS:
        if s.name == name:
            return s
    raise KeyError(f"no step named {name!r}; the steps are {', '.join(step_names())}")


def changes_machine(step: str) -> bool:
    """Whether an action of `step` changes the machine (the engine's own work between steps,
    the stack's settling say, counts as a change)."""
    return all(s.changes_machine for s in STEPS if s.name == step)
