"""Summary: the smoke test, where the logs are, the line to activate the venv, and Save
answers (the file `mlsetup apply --answers` takes, to replay on other servers)."""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Input, Label, Static

from app.tui.controllers import SummaryController
from app.tui.screens.base import WizardScreen
from app.tui.session import default_save_path
from app.tui.widgets.fields import Section


class SummaryScreen(WizardScreen):
    TRAIL = "Summary"
    BINDINGS = [  # noqa: RUF012
        Binding("ctrl+s", "save", "Save answers"),
        Binding("ctrl+q", "app.quit", "Quit"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.controller = SummaryController(self.wizard.session, self.wizard.model)

    def heading(self) -> str:
        return "Summary"

    def body(self) -> ComposeResult:
        c = self.controller
        with VerticalScroll(id="body"):
            yield Section("Result", Static(c.result(), id="result", markup=False))
            nxt = c.next_step()
            if nxt:
                yield Section(
                    "Next", Static(nxt, id="next-command", markup=False), classes="warnings"
                )
            yield Section("Smoke test", Static("running…", id="smoke", markup=False))
            where = [f"Use the venv:  {c.activate()}"]
            logs = c.logs()
            if logs:
                where.append(f"Logs:          {logs}")
            yield Section("Where things are", Static("\n".join(where), id="where", markup=False))
            with Section("Save answers", id="save-box"):
                with Horizontal(classes="field-row"):
                    yield Label("File", classes="field-label")
                    yield Input(default_save_path(), id="save-path", compact=True)
                    yield Button("Save", id="save", classes="small")
                yield Static("", id="saved", markup=False)

    def on_mount(self) -> None:
        self.query_one("#save-path", Input).focus()
        self.smoke()

    @work(thread=True, exclusive=True, group="smoke")
    def smoke(self) -> None:
        lines = self.controller.smoke()
        self.app.call_from_thread(self._smoked, lines)

    def _smoked(self, lines: list[str]) -> None:
        self.query_one("#smoke", Static).update("\n".join(lines))

    @on(Button.Pressed, "#save")
    @on(Input.Submitted, "#save-path")
    def action_save(self) -> None:
        raw = self.query_one("#save-path", Input).value
        path, text = self.controller.save(raw)
        self.query_one("#saved", Static).update(text)
        if path is not None:
            self.wizard.post_message(self.wizard.AnswersSaved(path))

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()
