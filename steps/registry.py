"""The steps, in order: one entry each, the one place a step is named and described.

The plan's and the report's step names (the planner stamps each planner's outcome with its
entry's name) and their order, the engine's loop, the console's label width, the dry run's and
the wizard's "would leave" lines, the confirmation's sections, the wizard's trail, its jump keys
and key hints all come from `STEPS`. Adding a step is its module (a planner function and what
it leaves), one entry here and, if it asks something, its wizard controller.

A step either changes the machine ("changes": after its actions a fresh plan must find it
satisfied) or only checks it ("checks": its actions are the check, they pass or fail; they
change nothing, so the engine neither plans again after them nor reports the run as changed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from steps import driver, extensions, fabric, toolkit
from steps import venv as venv_step
from steps.answers import Answers
from steps.choices import Choices
from steps.facts import Facts
from steps.plan import Outcome, name_the_steps
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
    title: str  # the wizard's heading for its screen, the confirmation's for its section
    plan: Callable[[PlanInputs], Outcome]  # satisfied, or the actions that satisfy it
    # its wizard screen's controller, "module:Class" under app/ (steps/ never imports app/);
    # None: a step that asks nothing has no screen (nor a place on the trail)
    controller: str | None
    # what a real apply leaves on the machine when the step is pending (the dry run's last
    # line, the wizard's Summary after a dry run)
    leaves: Callable[[PlanInputs], list[str]]
    # the section of the answers file it is planned from (the wizard's retry after its failure
    # goes to that section's screen), None when it has none
    answers: str | None = None
    # its action kinds that change the system outside its packages (the confirmation's
    # "System files"); packages are said from the apt actions themselves
    system_changes: frozenset[str] = frozenset()
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
        lambda i: driver.leaves(i.choices),
        answers="driver",
        system_changes=frozenset({"repo-setup", "config-file", "initramfs"}),
    ),
    StepSpec(
        "fabric",
        "NVSwitch fabric and GPU daemons",
        lambda i: fabric.plan(i.facts, i.answers, i.choices),
        None,
        lambda i: fabric.leaves(i.facts, i.answers, i.choices),
        answers="driver",  # driver.action skip skips it; its branch is the driver's
        system_changes=frozenset({"repo-setup", "config-file", "load-driver", "service"}),
    ),
    StepSpec(
        "toolkit",
        "CUDA toolkit(s)",
        lambda i: toolkit.plan(i.facts, i.answers, i.choices),
        "app.tui.controllers.toolkit:ToolkitController",
        lambda i: toolkit.leaves(i.facts, i.choices),
        answers="toolkit",
        system_changes=frozenset({"repo-setup"}),
    ),
    StepSpec(
        "venv",
        "Python venv with PyTorch",
        lambda i: venv_step.plan(i.facts, i.answers, i.choices, i.venv),
        "app.tui.controllers.venv:VenvController",
        lambda i: venv_step.leaves(i.choices),
        answers="venv",
    ),
    StepSpec(
        "extensions",
        "CUDA extensions",
        lambda i: extensions.plan(i.facts, i.answers, i.choices, i.venv, i.wheels),
        "app.tui.controllers.extensions:ExtensionsController",
        lambda i: extensions.leaves(i.choices),
        answers="extensions",
        builds_extensions=True,
    ),
)
# the engine's own actions between the steps (the reboot's unit, the driver it loads) change
# the system outside packages too
ENGINE_SYSTEM_CHANGES = frozenset({"resume-unit", "load-driver"})


def step_names() -> tuple[str, ...]:
    return tuple(s.name for s in STEPS)


def screen_steps() -> tuple[str, ...]:
    """The steps with a wizard screen, in order (the trail's, the number keys')."""
    return tuple(s.name for s in STEPS if s.controller)


def spec(name: str) -> StepSpec:
    for s in STEPS:
        if s.name == name:
            return s
    raise KeyError(f"no step named {name!r}; the steps are {', '.join(step_names())}")


def changes_machine(step: str) -> bool:
    """Whether an action of `step` changes the machine (the engine's own work between steps,
    the stack's settling say, counts as a change)."""
    return all(s.changes_machine for s in STEPS if s.name == step)


def system_changes() -> frozenset[str]:
    """The action kinds that change the system outside packages, of every step and the engine."""
    return ENGINE_SYSTEM_CHANGES.union(*(s.system_changes for s in STEPS))


def label_width() -> int:
    """The console's column for step names: the longest, and a space."""
    return max(len(s.name) for s in STEPS) + 1


def names_text() -> str:
    """The steps as a sentence lists them: "driver, fabric, toolkit, venv, extensions"."""
    return ", ".join(step_names())


def would_leave(inputs: PlanInputs, pending: set[str]) -> list[str]:
    """What a real apply would leave on the machine: each pending step's lines, in order."""
    return [line for s in STEPS if s.name in pending for line in s.leaves(inputs)]


name_the_steps(step_names)
