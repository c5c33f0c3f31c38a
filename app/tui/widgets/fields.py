"""Small widgets the screens are made of: one answer field, the screen trail, a section."""

from __future__ import annotations

from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Input, Label, Select, Static

from app.tui.glyphs import Glyphs


@dataclass(frozen=True)
class FieldSpec:
    """One answer the operator may change: its key path in the answers file and how to edit it.

    `kind`: "select" (one of `options`), "text", "list" (comma separated, or "auto"),
    "strlist" (comma separated), "jobs" ("auto" or a whole number).
    """

    key: str
    label: str
    kind: str = "text"
    options: tuple[str, ...] = ()
    hint: str = ""


class ChoiceField(Vertical):
    """One answer: a label, a Select or an Input, and the reason a value was refused."""

    class Changed(Message):
        """The operator entered a value; the screen validates it and accepts or refuses it."""

        def __init__(self, field: ChoiceField, key: str, raw: str) -> None:
            super().__init__()
            self.field = field
            self.key = key
            self.raw = raw

        @property
        def control(self) -> ChoiceField:
            return self.field

    def __init__(self, spec: FieldSpec, value: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.value = value

    def compose(self) -> ComposeResult:
        spec = self.spec
        with Horizontal(classes="field-row"):
            yield Label(spec.label, classes="field-label")
            if spec.kind == "select":
                yield Select(
                    [(o, o) for o in spec.options],
                    value=self.value if self.value in spec.options else Select.NULL,
                    allow_blank=False,
                    compact=True,
                    id=_dom_id(spec.key),
                )
            else:
                yield Input(self.value, compact=True, id=_dom_id(spec.key), placeholder=spec.hint)
        yield Static("", classes="field-error", markup=False)

    @on(Select.Changed)
    def _selected(self, event: Select.Changed) -> None:
        event.stop()
        if event.value is not Select.NULL and str(event.value) != self.value:
            self.post_message(ChoiceField.Changed(self, self.spec.key, str(event.value)))

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._entered(event.value)
        if not self.has_class("-invalid"):
            self.screen.focus_next()

    @on(Input.Blurred)
    def _blurred(self, event: Input.Blurred) -> None:
        self._entered(event.value)

    def _entered(self, raw: str) -> None:
        if raw != self.value or self.has_class("-invalid"):
            self.post_message(ChoiceField.Changed(self, self.spec.key, raw))

    def refuse(self, why: str) -> None:
        self.add_class("-invalid")
        self.query_one(".field-error", Static).update(why)

    def accept(self, value: str) -> None:
        self.value = value
        self.remove_class("-invalid")
        self.query_one(".field-error", Static).update("")

    def enter(self, raw: str) -> None:
        """Type a value as the operator would (tests and scripted walkthroughs)."""
        widget = self.query_one(f"#{_dom_id(self.spec.key)}")
        if isinstance(widget, Select):
            widget.value = raw
        else:
            assert isinstance(widget, Input)
            widget.value = raw
            self._entered(raw)


def _dom_id(key: str) -> str:
    return "f-" + key.replace(".", "-").replace("[", "-").replace("]", "")


TRAIL = ("machine", "driver", "toolkit", "venv", "extensions", "review", "run", "summary")
JUMP_KEYS = 6  # the first six are reached with the number keys 1-6


class Trail(Static):
    """Where the operator is: 1 Machine  2 Driver ... 6 Review  Run  Summary, the current one
    in reverse video; the number before a step is the key that jumps to it."""

    def __init__(self, current: str, glyphs: Glyphs, note: str = "", **kwargs) -> None:
        super().__init__("", **kwargs)
        self.current = current
        self.glyphs = glyphs
        self.note = note

    def on_mount(self) -> None:
        words = []
        for n, name in enumerate(TRAIL, 1):
            label = (f"{n} " if n <= JUMP_KEYS else "") + name.capitalize()
            if name == self.current:
                words.append(f"[reverse bold]{label}[/]")
            else:
                words.append(f"[$text-muted]{label}[/]")
        note = f"  [$warning bold]{self.note}[/]" if self.note else ""
        self.update("  ".join(words) + note)


class Section(Vertical):
    """A titled box of content."""

    def __init__(self, title: str, *children, **kwargs) -> None:
        super().__init__(*children, **kwargs)
        self.border_title = title
