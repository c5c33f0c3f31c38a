"""The steps, in order: one entry each, the one place a step is named and described.

The plan's and the report's step names (the planner stamps each planner's outcome with its
entry's name) and their order, the engine's loop, the console's label width, the dry run's and
the wizard's "would leave" lines, the confirmation's sections, the wizard's trail, its jump keys
and key hints all come from `STEPS`. Adding a step is its module (a planner function and what
it leaves), one entry here, its case in tests/fixtures/plans/ and, if it asks something, its
wizard controller.

A step either changes the machine ("changes": after its actions a fresh plan must find it
satisfied) or only checks it ("checks": its actions are the check, they pass or fail; they
change nothing, so the engine neither plans again after them nor reports the run as changed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from steps.formats.stepnames import name_the_steps

if TYPE_CHECKING:
    from steps.decide.choices import Choices
    from steps.formats.answers import Answers
    from steps.formats.facts import Facts
    from steps.formats.plan import Outcome
    from steps.stack.venvstate import VenvState

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


# Each step's module is imported when it first plans, not with the registry: the wizard's trail
# reads the names here, and its first screen is drawn before anything is planned.


def _driver_plan(i: PlanInputs) -> Outcome:
    from steps.planning import driver

    return driver.plan(i.facts, i.answers, i.choices)


def _driver_leaves(i: PlanInputs) -> list[str]:
    from steps.planning import driver

    return driver.leaves(i.choices)


def _fabric_plan(i: PlanInputs) -> Outcome:
    from steps.planning import fabric

    return fabric.plan(i.facts, i.answers, i.choices)


def _fabric_leaves(i: PlanInputs) -> list[str]:
    from steps.planning import fabric

    return fabric.leaves(i.facts, i.answers, i.choices)


def _toolkit_plan(i: PlanInputs) -> Outcome:
    from steps.planning import toolkit

    return toolkit.plan(i.facts, i.answers, i.choices)


def _toolkit_leaves(i: PlanInputs) -> list[str]:
    from steps.planning import toolkit

    return toolkit.leaves(i.facts, i.choices)


def _venv_plan(i: PlanInputs) -> Outcome:
    from steps.planning import venv

    return venv.plan(i.facts, i.answers, i.choices, i.venv)


def _venv_leaves(i: PlanInputs) -> list[str]:
    from steps.planning import venv

    return venv.leaves(i.choices)


def _extensions_plan(i: PlanInputs) -> Outcome:
    from steps.planning import extensions

    return extensions.plan(i.facts, i.answers, i.choices, i.venv, i.wheels)


def _extensions_leaves(i: PlanInputs) -> list[str]:
    from steps.planning import extensions

    return extensions.leaves(i.choices)


STEPS: tuple[StepSpec, ...] = (
    StepSpec(
        "driver",
        "NVIDIA driver",
        _driver_plan,
        "app.tui.controllers.driver:DriverController",
        _driver_leaves,
        answers="driver",
        system_changes=frozenset({"repo-setup", "config-file", "initramfs"}),
    ),
    StepSpec(
        "fabric",
        "NVSwitch fabric and GPU daemons",
        _fabric_plan,
        None,
        _fabric_leaves,
        answers="driver",  # driver.action skip skips it; its branch is the driver's
        system_changes=frozenset({"repo-setup", "config-file", "load-driver", "service"}),
    ),
    StepSpec(
        "toolkit",
        "CUDA toolkit(s)",
        _toolkit_plan,
        "app.tui.controllers.toolkit:ToolkitController",
        _toolkit_leaves,
        answers="toolkit",
        system_changes=frozenset({"repo-setup"}),
    ),
    StepSpec(
        "venv",
        "Python venv with PyTorch",
        _venv_plan,
        "app.tui.controllers.venv:VenvController",
        _venv_leaves,
        answers="venv",
    ),
    StepSpec(
        "extensions",
        "CUDA extensions",
        _extensions_plan,
        "app.tui.controllers.extensions:ExtensionsController",
        _extensions_leaves,
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


def would_leave(inputs: PlanInputs, pending: set[str]) -> list[str]:
    """What a real apply would leave on the machine: each pending step's lines, in order."""
    return [line for s in STEPS if s.name in pending for line in s.leaves(inputs)]


name_the_steps(step_names)
