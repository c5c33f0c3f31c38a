"""Machine: what the probe found, and every warning in plain words."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Button, Static

from app.machine_summary import rows_text
from app.tui.controllers import MachineController
from app.tui.screens.base import Body, WizardScreen
from app.tui.widgets.fields import MarkedLines, Section


class MachineScreen(WizardScreen):
    STEP = "machine"
    RECOMPUTE = True  # the warnings follow the answers (the plan's own)
    BINDINGS = [Binding("enter", "next", "Continue", priority=False)]  # noqa: RUF012

    def __init__(self) -> None:
        super().__init__()
        self.controller = MachineController(self.wizard.session)

    def heading(self) -> str:
        return f"What the probe found on {self.wizard.session.machine_label}"

    def help_text(self) -> str:
        return self.controller.help()

    def body(self) -> ComposeResult:
        g = self.wizard.glyphs
        rows = self.controller.rows(times=g["times"])
        table = rows_text(rows, width=max(len(k) for k, _ in rows) + 2)
        warnings = self.controller.warnings()
        with Body(id="body"):
            yield Section("Machine", Static(table, id="facts", markup=False))
            if warnings:
                yield Section(
                    f"Warnings ({len(warnings)})",
                    MarkedLines(g["warn"], warnings, id="warnings"),
                    classes="warnings",
                )
            else:
                yield Section("Warnings", Static("none", id="warnings"), classes="ok")
        with Horizontal(id="buttons"):
            yield Button("Continue", id="next", variant="primary")

    @on(Button.Pressed, "#next")
    def action_next(self) -> None:
        self.wizard.nav.next_from("machine")
