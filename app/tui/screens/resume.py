"""Resume: after a reboot or a dropped session, what is done, what the reboot was for and
whether it worked (the machine is probed again), what is next; Enter continues."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Button, Static

from app.tui.controllers import ResumeController
from app.tui.screens.base import Body, WizardScreen
from app.tui.widgets.fields import Section
from steps.formats.state import State


class ResumeScreen(WizardScreen):
    STEP = "run"
    BINDINGS = [Binding("enter", "next", "Continue the setup")]  # noqa: RUF012

    def __init__(self, state: State) -> None:
        super().__init__()
        self.controller = ResumeController(self.wizard.session, state)

    def heading(self) -> str:
        return f"Resume: {self.controller.headline()}"

    def body(self) -> ComposeResult:
        c = self.controller
        g = self.wizard.glyphs
        done = c.done()
        pending = c.pending()
        with Body(id="body"):
            reboot = c.reboot_lines()
            if reboot:
                yield Section("The reboot", Static("\n".join(reboot), id="reboot", markup=False))
            failure = c.failure_lines()
            if failure:
                yield Section(
                    "Where it stopped",
                    Static("\n".join(failure), id="stopped", markup=False),
                    classes="warnings",
                )
            done_text = "\n".join(f"{g['done']} {a}" for a in done) or "nothing yet"
            yield Section(f"Done ({len(done)})", Static(done_text, id="done", markup=False))
            next_text = "\n".join(f"{g['pending']} {a}" for a in pending) or (
                "the remaining steps are checked again on the machine"
            )
            yield Section(
                f"Next ({len(pending)})", Static(next_text, id="next-actions", markup=False)
            )
            yield Static(
                "Enter continues with the saved answers (sudo mlsetup apply --resume).",
                id="hint",
                markup=False,
            )
        with Horizontal(id="buttons"):
            yield Button("Continue", id="next", variant="primary")

    def help_text(self) -> str:
        return self.controller.help()

    @on(Button.Pressed, "#next")
    def action_next(self) -> None:
        self.wizard.runs.start_resume()

    def can_go_back(self) -> bool:
        return False
