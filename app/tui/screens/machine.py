"""Machine: what the probe found, and every warning in plain words."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Static

from app.tui.controllers import MachineController
from app.tui.screens.base import WizardScreen
from app.tui.widgets.fields import Section


class MachineScreen(WizardScreen):
    TRAIL = "Machine"
    BINDINGS = [Binding("enter", "next", "Continue", priority=False)]  # noqa: RUF012

    def __init__(self) -> None:
        super().__init__()
        self.controller = MachineController(self.wizard.session)

    def heading(self) -> str:
        return f"What the probe found on {self.wizard.session.machine_label}"

    def body(self) -> ComposeResult:
        rows = self.controller.rows()
        width = max(len(k) for k, _ in rows) + 2
        table = "\n".join(f"{k:<{width}}{v}" for k, v in rows)
        warnings = self.controller.warnings()
        warn = self.wizard.glyphs["warn"]
        with VerticalScroll(id="body"):
            yield Section("Machine", Static(table, id="facts", markup=False))
            if warnings:
                text = "\n".join(f"{warn} {w}" for w in warnings)
                yield Section(
                    f"Warnings ({len(warnings)})",
                    Static(text, id="warnings", markup=False),
                    classes="warnings",
                )
            else:
                yield Section("Warnings", Static("none", id="warnings"), classes="ok")
        with Horizontal(id="buttons"):
            yield Button("Continue", id="next", variant="primary")
            yield self.keys_hint()

    def on_mount(self) -> None:
        self.query_one("#next", Button).focus()

    @on(Button.Pressed, "#next")
    def action_next(self) -> None:
        self.wizard.next_from("machine")
