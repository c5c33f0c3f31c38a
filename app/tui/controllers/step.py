"""What every step screen's controller has (Driver, Toolkit, Venv, Extensions, and any step the
registry adds): its title, the plan's step, the answers it takes, the warnings about it. Each
step's own controller (named in steps.planning.registry) says what is already there, which fields it
shows and its help. Everything is read again from the planner each time it is asked, so a
screen shown after Back is current."""

from __future__ import annotations

import importlib

from app.tui.session import Session, parse_value, show_value
from app.tui.widgets.fields import FieldSpec
from steps.formats.plan import Step
from steps.planning import registry


class StepController:
    SHOWS_RESOLUTION = False  # its screen says how long uv's resolution has taken so far

    def __init__(self, session: Session, step: str) -> None:
        self.session = session
        self.name = step

    @property
    def title(self) -> str:
        return registry.spec(self.name).title

    def step(self) -> Step:
        return self.session.plan().step(self.name)

    def fields(self) -> list[FieldSpec]:
        return []

    def existing(self) -> list[str]:
        """What is already on the machine for this step, and what is wanted, in plain words."""
        return []

    def help(self) -> str:
        return ""

    def confirm_section(self, step: Step) -> tuple[str, list[str]] | None:
        """The confirmation's section for this step when it is pending: (title, lines), or None
        when the packages and system files it changes say it all."""
        return None

    def left_out(self) -> list[str]:
        """What was asked for that the plan leaves out (each one's why is a warning)."""
        return []

    def field_note(self, spec: FieldSpec) -> str:
        """What to say under a field whose value is taken but leads somewhere refused."""
        return ""

    def back_to(self, spec: FieldSpec) -> str | None:
        """The value before an edit the answers hold only until the index answers about it
        (Esc enters it again); None: no such edit."""
        return None

    def value(self, spec: FieldSpec) -> str:
        return show_value(self.session.value(spec.key))

    def set(self, spec: FieldSpec, raw: str) -> str | None:
        """Apply what was typed; the reason it is refused, or None."""
        return self.session.set_value(spec.key, parse_value(raw, spec.kind))

    def warnings(self) -> list[str]:
        """What the planner refused or warns about that this step decides, less what the
        step's own lines above it already say (the Driver screen said "no NVIDIA driver is
        loaded" twice)."""
        said = " ".join(self.existing()).lower()
        return [
            w.text
            for w in self.session.choices().warnings
            if w.step == self.name and w.text.rstrip(".").lower() not in said
        ]


def controller_for(session: Session, step: str) -> StepController:
    """The controller the registry names for `step`'s screen."""
    named = registry.spec(step).controller
    if named is None:
        raise KeyError(
            f"step {step} has no wizard screen (steps.planning.registry names no controller)"
        )
    module, _, name = named.partition(":")
    cls = getattr(importlib.import_module(module), name)
    if not (isinstance(cls, type) and issubclass(cls, StepController)):
        raise TypeError(f"{module}:{name}, the controller of step {step}, is no StepController")
    return cls(session, step)
