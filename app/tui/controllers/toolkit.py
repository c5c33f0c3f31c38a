"""Toolkit: the CUDA toolkits installed, and those the extensions' builds need."""

from __future__ import annotations

from app.tui.controllers.answerfields import text
from app.tui.controllers.step import StepController
from app.tui.widgets.fields import FieldSpec
from steps.formats.plan import Step


class ToolkitController(StepController):
    def fields(self) -> list[FieldSpec]:
        return [text("toolkit.versions", "CUDA versions", "list")]

    def existing(self) -> list[str]:
        f, c = self.session.facts, self.session.choices()
        have = ", ".join(f"CUDA {t.version} at {t.path}" for t in f.toolkits) or "none"
        built = f"torch is built with CUDA {c.cuda}" if c.cuda else "torch is the CPU build"
        want = ", ".join(c.toolkits) or "none"  # an empty list is refused at the answers
        return [f"Installed: {have}.", f"Wanted: {want}; {built}."]

    def help(self) -> str:
        want = ", ".join(self.session.choices().toolkits) or "none"
        return (
            f"Extensions compile with nvcc, and torch refuses a toolkit whose CUDA major "
            f"differs from its own. Wanted here: {want}. auto = exactly the CUDA torch is "
            "built with; a list installs each beside the others (/usr/local/cuda-X.Y): "
            "nothing already installed is removed."
        )

    def confirm_section(self, step: Step) -> tuple[str, list[str]] | None:
        f, c = self.session.facts, self.session.choices()
        missing = [t for t in c.toolkits if f.toolkit(t) is None]
        lines = [f"CUDA {t} to /usr/local/cuda-{t} (beside any others)" for t in missing]
        return ("CUDA toolkits", lines or [step.reason])
