"""Summary: the result, what the operator must still do, what was refused and why, the smoke
test, where the logs are, and Save answers (the file `mlsetup apply --answers` takes)."""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label, Static

from app.tui.controllers import SummaryController
from app.tui.screens.base import Body, WizardScreen
from app.tui.session import default_save_path
from app.tui.widgets.fields import MarkedLines, Section
from app.tui.widgets.keybar import KeyHint


class SummaryScreen(WizardScreen):
    STEP = "summary"
    AUTO_FOCUS = "#save"
    BINDINGS = [  # noqa: RUF012
        Binding("r", "retry", "Change an answer and retry"),
        Binding("ctrl+q", "app.quit", "Quit"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.controller = SummaryController(self.wizard.session, self.wizard.model)

    def heading(self) -> str:
        return "Summary"

    def help_text(self) -> str:
        return self.controller.help()

    def body(self) -> ComposeResult:
        c = self.controller
        g = self.wizard.glyphs
        with Body(id="body"):
            yield Section("Result", Static(c.result(), id="result", markup=False))
            todo = c.todo()
            if todo:
                yield Section(
                    "Still to do",
                    Static("\n".join(todo), id="next-command", markup=False),
                    classes="warnings",
                )
            refused = c.refused()
            if refused:
                yield Section(
                    "Refused or warned",
                    MarkedLines(g["warn"], refused, id="refused"),
                    classes="warnings",
                )
            leave = c.would_leave()
            if leave:  # a dry run: what a real apply leaves, not a venv to use that is not there
                yield Section(
                    "A real apply would leave",
                    MarkedLines(g["dot"], leave, id="would-leave"),
                )
            running = f"running{g['more']}"
            yield Section("Smoke test", Static(running, id="smoke", markup=False))
            where = []
            if (activate := c.activate()) is not None:
                where.append(f"Use the venv:  {activate}")
            if logs := c.logs():
                where.append(f"Logs:          {logs}")
            if where:
                yield Section(
                    "Where things are", Static("\n".join(where), id="where", markup=False)
                )
        # the save row stays below the body: focusing Save never scrolls the Result away
        with Vertical(id="save-box"):
            with Horizontal(classes="field-row"):
                yield Label("Save answers to", classes="field-label")
                yield Input(default_save_path(), id="save-path", compact=True)
                yield Button("Save", id="save", classes="small")
            yield Static("", id="saved", markup=False)

    def screen_hints(self, typing: bool) -> list[KeyHint]:
        return [("r", "retry")] if not typing and self.check_action("retry", ()) else []

    def focus_default(self) -> None:
        self.query_one("#save", Button).focus()

    def on_mount(self) -> None:
        super().on_mount()
        self.smoke()

    @work(thread=True, exclusive=True, group="smoke")
    def smoke(self) -> None:
        g = self.wizard.glyphs
        lines = self.controller.smoke(ok=g["done"], bad=g["failed"])
        self.app.call_from_thread(self._smoked, lines)

    def _smoked(self, lines: list[str]) -> None:
        self.query_one("#smoke", Static).update("\n".join(lines))

    @on(Button.Pressed, "#save")
    @on(Input.Submitted, "#save-path")
    def action_save(self) -> None:
        raw = self.query_one("#save-path", Input).value
        _, text = self.controller.save(raw)
        self.query_one("#saved", Static).update(text)

    async def action_save_answers(self) -> None:
        """ctrl+s saves to the file named in the Summary's own row (no dialog over it)."""
        self.action_save()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "retry":
            return self.wizard.model.failed is not None
        return super().check_action(action, parameters)

    def action_retry(self) -> None:
        self.wizard.nav.retry()
