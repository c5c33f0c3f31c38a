"""The key bar at the foot of every wizard screen: the keys of the focused screen, as they
work for the focused widget right now (Enter presses the focused button; in a text box digits
and `?` are typed, F1 is help and Esc cancels the edit), on one line, as lazygit and posting
show them. Each screen says which keys it has (`WizardScreen.key_hints`); the bar only draws.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.content import Content
from textual.widget import Widget

KeyHint = tuple[str, str]  # ("Enter", "continue")


class KeyBar(Widget):
    """The hints are asked of the screen when the bar is drawn, after the layout: a body
    longer than the screen offers PgDn from the first frame (filled in at mount, before any
    layout, the bar lacked it until something drew it again)."""

    DEFAULT_CSS = "KeyBar { dock: bottom; height: 1; }"

    def __init__(self, hints: Callable[[], list[KeyHint]], **kwargs) -> None:
        super().__init__(**kwargs)
        self._hints = hints
        self._drawn: list[KeyHint] = []

    @property
    def hints(self) -> list[KeyHint]:
        """The keys as they work now."""
        return self._hints()

    def show(self) -> None:
        """Drawn again where the keys changed since it was drawn (the focus moved, the body
        grew)."""
        if self.hints != self._drawn:
            self.refresh()

    def fitted(self, width: int) -> list[KeyHint]:
        return _fitted(self.hints, width)

    @property
    def text(self) -> str:
        return " ".join(f"{k} {label}" for k, label in self.fitted(self.size.width or 80))

    def render(self) -> Content:
        self._drawn = self.hints
        parts = [
            Content.assemble(Content.styled(key, "bold reverse"), " ", label)
            for key, label in _fitted(self._drawn, self.size.width)
        ]
        return Content(" ").join(parts)


def _fitted(hints: list[KeyHint], width: int) -> list[KeyHint]:
    """The hints that fit `width`, in order. Where not all do, the last ones are left off,
    but never help: its screen lists every key."""
    if _length(hints) <= width:
        return list(hints)
    help_ = [h for h in hints if h[1] == "help"][-1:]
    out: list[KeyHint] = []
    for hint in hints:
        if hint in help_:
            continue
        if _length([*out, hint, *help_]) > width:
            break
        out.append(hint)
    return out + help_


def _length(hints: list[KeyHint]) -> int:
    return sum(len(k) + 1 + len(label) for k, label in hints) + max(0, len(hints) - 1)
