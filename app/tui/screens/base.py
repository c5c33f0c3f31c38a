"""What every wizard screen has: the trail at the top, a heading, key hints at the bottom."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Static

from app.tui.widgets.fields import Trail

if TYPE_CHECKING:
    from app.tui.app import WizardApp


class WizardScreen(Screen):
    TRAIL = ""
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]  # noqa: RUF012
    BINDINGS = [  # noqa: RUF012
        Binding("escape", "back", "Back"),
        Binding("pageup", "page(-1)", "Scroll up", show=False),
        Binding("pagedown", "page(1)", "Scroll down", show=False),
    ]
    KEYS_HINT = "Tab moves · PgDn scrolls"

    @property
    def wizard(self) -> WizardApp:
        return cast("WizardApp", self.app)

    def heading(self) -> str:
        return self.TRAIL

    def compose(self) -> ComposeResult:
        yield Trail(self.TRAIL, self.wizard.glyphs, id="trail")
        yield Static(self._heading_text(), id="heading", markup=False)
        yield from self.body()
        yield Footer()

    def _heading_text(self) -> str:
        mode = self.wizard.mode_label()
        return self.heading() + (f"  ·  {mode}" if mode else "")

    def body(self) -> ComposeResult:
        yield from ()

    def keys_hint(self) -> Static:
        return Static(self.KEYS_HINT, classes="keys", markup=False)

    def action_page(self, direction: int) -> None:
        for body in self.query("#body"):
            if direction > 0:
                body.scroll_page_down()
            else:
                body.scroll_page_up()

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()
