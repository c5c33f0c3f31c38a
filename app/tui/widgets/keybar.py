"""The key bar at the foot of every wizard screen: the keys of the focused screen, as they
work for the focused widget right now (Enter presses the focused button; in a text box digits
and `?` are typed, F1 is help and Esc cancels the edit), on one line, as lazygit and posting
show them. Each screen says which keys it has (`WizardScreen.key_hints`); the bar only draws.
"""

from __future__ import annotations

from textual.content import Content
from textual.widget import Widget

KeyHint = tuple[str, str]  # ("Enter", "continue")


class KeyBar(Widget):
    DEFAULT_CSS = "KeyBar { dock: bottom; height: 1; }"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.hints: list[KeyHint] = []

    def show(self, hints: list[KeyHint]) -> None:
        if hints != self.hints:
            self.hints = hints
            self.refresh()

    def fitted(self, width: int) -> list[KeyHint]:
        """The hints that fit `width`, in order. Where not all do, the last ones are left off,
        but never help: its screen lists every key."""
        if _length(self.hints) <= width:
            return list(self.hints)
        help_ = [h for h in self.hints if h[1] == "help"][-1:]
        out: list[KeyHint] = []
        for hint in self.hints:
            if hint in help_:
                continue
            if _length([*out, hint, *help_]) > width:
                break
            out.append(hint)
        return out + help_

    @property
    def text(self) -> str:
        return " ".join(f"{k} {label}" for k, label in self.fitted(self.size.width or 80))

    def render(self) -> Content:
        parts = [
            Content.assemble(Content.styled(key, "bold reverse"), " ", label)
            for key, label in self.fitted(self.size.width)
        ]
        return Content(" ").join(parts)


def _length(hints: list[KeyHint]) -> int:
    return sum(len(k) + 1 + len(label) for k, label in hints) + max(0, len(hints) - 1)
