"""What every wizard screen has: the trail at the top (a number key jumps to a step), a
heading, key hints at the bottom, help written for that screen, and a body recomputed from
the answers each time the screen is shown again (the planner is the one source of truth)."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Static

from app.tui.controllers import SummaryController
from app.tui.screens.modals import SaveScreen
from app.tui.widgets.fields import Trail
from app.tui.wizard import Wizard

JUMPS = ("machine", "driver", "toolkit", "venv", "extensions", "review")


class Body(VerticalScroll, can_focus=False):
    """A screen's scrolling body: PgUp/PgDn scroll it; it is no tab stop of its own."""


class WizardScreen(Screen):
    TRAIL = ""
    STEP = ""  # the trail's name for this screen: machine … review, run, summary
    RECOMPUTE = False  # rebuild the body from the answers each time it is shown again
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]  # noqa: RUF012
    BINDINGS = [  # noqa: RUF012
        Binding("escape", "back", "Back"),
        Binding("pageup", "page(-1)", "Scroll up", show=False),
        Binding("pagedown", "page(1)", "Scroll down", show=False),
        *(Binding(str(n), f"jump('{s}')", s, show=False) for n, s in enumerate(JUMPS, 1)),
    ]
    KEYS_HINT = "Tab moves - 1-6 jump to a step"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._shown = False

    class AnswersSaved(Message):
        """The answers were written to `path` (ctrl+s, or the Summary screen's Save)."""

        def __init__(self, path: Path) -> None:
            super().__init__()
            self.path = path

    @property
    def wizard(self) -> Wizard:
        return cast("Wizard", self.app)

    def heading(self) -> str:
        return self.TRAIL

    def help_text(self) -> str:
        return ""

    def compose(self) -> ComposeResult:
        yield Trail(self.STEP, self.wizard.glyphs, id="trail")
        yield Static(self._heading_text(), id="heading", markup=False)
        yield from self.body()
        yield Footer()

    def _heading_text(self) -> str:
        mode = self.wizard.mode_label()
        return self.heading() + (f"  {self.wizard.glyphs['dot']}  {mode}" if mode else "")

    def body(self) -> ComposeResult:
        yield from ()

    def keys_hint(self) -> Static:
        hint = self.KEYS_HINT.replace(" - ", f" {self.wizard.glyphs['dot']} ")
        return Static(hint, classes="keys", markup=False)

    def on_mount(self) -> None:
        self.focus_default()

    def focus_default(self) -> None:
        for button in self.query("#next"):
            if not button.disabled:
                button.focus()
                return

    def on_screen_resume(self) -> None:
        if self._shown and self.RECOMPUTE:
            # after the pops of a jump settle: a screen passed through on the way is left alone
            self.call_after_refresh(self._recompute)
        self._shown = True

    async def _recompute(self) -> None:
        if self.app.screen is self and self.is_attached:
            await self.recompose()
            self.focus_default()

    def action_page(self, direction: int) -> None:
        for body in self.query("#body"):
            if direction > 0:
                body.scroll_page_down()
            else:
                body.scroll_page_up()

    def can_go_back(self) -> bool:
        return len(self.app.screen_stack) > 2

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "back":
            return self.can_go_back()
        if action == "jump":
            return self.wizard.nav.can_jump()
        return True

    def action_back(self) -> None:
        if self.can_go_back():
            self.app.pop_screen()

    def action_jump(self, step: str) -> None:
        self.wizard.nav.jump(step)

    def action_save_answers(self) -> None:
        """ctrl+s: the answers to a file the operator names."""

        def saved(raw: str | None) -> None:
            if raw is None:
                return
            path, text = SummaryController(self.wizard.session, self.wizard.model).save(raw)
            self.notify(text, severity="information" if path else "error", timeout=8)
            if path is not None:
                self.post_message(self.AnswersSaved(path))

        self.app.push_screen(SaveScreen(), saved)
