"""Machine: what the probe found, and every warning in plain words. The wizard's first screen:
drawn "probing" before the session is loaded (app.tui.app), then filled in."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Button, Static

from app.tui.screens.base import Body, WizardScreen
from app.tui.widgets.fields import LabelledRows, MarkedLines, Section

if TYPE_CHECKING:
    from app.tui.controllers.machine import MachineController

PROBING = "probing the machine, reading the answers and planning{more}"


class MachineScreen(WizardScreen):
    STEP = "machine"
    RECOMPUTE = True  # the warnings follow the answers (the plan's own)
    BINDINGS = [Binding("enter", "next", "Continue", priority=False)]  # noqa: RUF012

    def __init__(self) -> None:
        super().__init__()
        self._controller: MachineController | None = None

    @property
    def controller(self) -> MachineController:
        if self._controller is None:  # the session is loaded by the time it is asked
            from app.tui.controllers.machine import MachineController

            self._controller = MachineController(self.wizard.session)
        return self._controller

    def heading(self) -> str:
        return f"What the probe found on {self.wizard.launch.machine_label}"

    def help_text(self) -> str:
        if not self.wizard.loaded:
            return PROBING.format(more="; this screen fills in when that is done.").capitalize()
        return self.controller.help()

    def body(self) -> ComposeResult:
        if not self.wizard.loaded:
            yield from self._probing()
            return
        g = self.wizard.glyphs
        rows = self.controller.rows(times=g["times"])
        warnings = self.controller.warnings()
        with Body(id="body"):
            yield Section("Machine", LabelledRows(rows, id="facts"))
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

    def _probing(self) -> ComposeResult:
        """Before the session is loaded: what is going on, and no Continue to press yet."""
        text = PROBING.format(more=self.wizard.glyphs["more"])
        with Body(id="body"):
            yield Section("Machine", Static(text, id="facts", markup=False))
        with Horizontal(id="buttons"):
            yield Button("Continue", id="next", variant="primary", disabled=True)

    async def loaded(self) -> None:
        """The session is loaded: the facts and warnings in place of "probing"."""
        await self._recompute(keep_focus=False)

    @on(Button.Pressed, "#next")
    def action_next(self) -> None:
        if self.wizard.loaded:
            self.wizard.nav.next_from("machine")
