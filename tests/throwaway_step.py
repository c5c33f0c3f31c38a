"""A step made only of what the registry asks for, as a new engineer would add one: its
planner, its wizard controller, one entry in steps.planning.registry (here added at run time, so no
module of mlsetup changes). A check-only step between Venv and Extensions, as a cuDNN/NCCL
check would be: its one action passes unless the venv holds a file named FAIL_MARKER.

`register()` adds it; a `sitecustomize` on PYTHONPATH calls it in an `mlsetup` process."""

from __future__ import annotations

from app.tui.controllers.answerfields import text
from app.tui.controllers.step import StepController
from app.tui.widgets.fields import FieldSpec
from steps.formats.plan import Action, Outcome, pending
from steps.planning import registry

NAME = "gpucheck"
FAIL_MARKER = "gpucheck-fails"


def plan(inputs: registry.PlanInputs) -> Outcome:
    marker = f"{inputs.choices.venv_path}/{FAIL_MARKER}"
    check = Action(
        id=f"{NAME}.libraries",
        title="Check the venv's cuDNN and NCCL",
        argv=["test", "!", "-e", marker],
        kind="check",
    )
    return pending(f"check cuDNN and NCCL in {inputs.choices.venv_path}", [check])


class GpuCheckController(StepController):
    def fields(self) -> list[FieldSpec]:
        return [text("venv.path", "Venv checked")]

    def existing(self) -> list[str]:
        return [f"cuDNN and NCCL are checked in {self.session.choices().venv_path}."]

    def help(self) -> str:
        return "Checks that torch's cuDNN and NCCL load; it changes nothing."


SPEC = registry.StepSpec(
    NAME,
    "cuDNN and NCCL check",
    plan,
    f"{__name__}:GpuCheckController",
    lambda _inputs: [],  # a check leaves nothing on the machine
    kind="checks",
)


def with_step(steps: tuple[registry.StepSpec, ...]) -> tuple[registry.StepSpec, ...]:
    """`steps` with this one between venv and extensions."""
    at = [s.name for s in steps].index("venv") + 1
    return (*steps[:at], SPEC, *steps[at:])


def register() -> None:
    registry.STEPS = with_step(registry.STEPS)
