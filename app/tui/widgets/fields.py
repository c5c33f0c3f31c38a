"""Small widgets the screens are made of: one answer field, the screen trail, a section."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from textual import events, on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Input, Label, Select, Static

from app.tui.glyphs import Glyphs
from app.tui.trail import jumps, trail


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
    """One answer: a label, a Select or an Input, and the reason a value was refused.

    A refused field is marked in its label ("!"), not only by colour (NO_COLOR, a mono
    console). Enter in its Input hands the value to the screen, which moves the focus on only
    when the value is accepted; Esc cancels an edit (back to the value the answers hold)."""

    class Changed(Message):
        """The operator entered a value; the screen validates it and accepts or refuses it.
        `submitted`: with Enter (the focus moves on once it is accepted), else on leaving."""

        def __init__(self, field: ChoiceField, key: str, raw: str, submitted: bool) -> None:
            super().__init__()
            self.field = field
            self.key = key
            self.raw = raw
            self.submitted = submitted

        @property
        def control(self) -> ChoiceField:
            return self.field

    def __init__(self, spec: FieldSpec, value: str, note: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.value = value  # the value the answers hold
        self.first_note = note  # what `note` says, from the first frame
        self.set_class(bool(note), "-noted")
        self.refused_raw = ""  # what was typed and refused
        self.refusal = ""  # why
        # the value before an edit the answers hold for now (the index is being asked about
        # it): Esc enters it again; None: no such edit
        self.back_to: str | None = None

    def compose(self) -> ComposeResult:
        spec = self.spec
        with Horizontal(classes="field-row"):
            yield Label(f"  {spec.label}", classes="field-label", markup=False)
            if spec.kind == "select":
                yield Select(
                    [(o, o) for o in spec.options],
                    value=self.value if self.value in spec.options else Select.NULL,
                    allow_blank=False,
                    compact=True,
                    id=_dom_id(spec.key),
                )
            else:
                yield FieldInput(
                    self.value, compact=True, id=_dom_id(spec.key), placeholder=spec.hint
                )
        yield Static(self.first_note, classes="field-error", markup=False)
        if spec.kind != "select":
            yield Static(spec.hint, classes="field-hint", markup=False)

    @property
    def control_widget(self) -> Input | Select:
        widget = self.query_one(f"#{_dom_id(self.spec.key)}")
        assert isinstance(widget, (Input, Select))
        return widget

    @property
    def refused(self) -> bool:
        return self.has_class("-invalid")

    @property
    def editing(self) -> bool:
        """The Input holds something the answers do not (typed, or refused): Esc cancels it."""
        widget = self.control_widget
        typed = isinstance(widget, Input) and widget.value != self.value
        return self.refused or typed or self.back_to is not None

    @on(Select.Changed)
    def _selected(self, event: Select.Changed) -> None:
        event.stop()
        if event.value is Select.NULL:
            return
        if str(event.value) != self.value:
            self.post_message(ChoiceField.Changed(self, self.spec.key, str(event.value), False))
        elif self.refused:  # back to the value the answers hold: nothing is refused now
            self.accept(self.value)

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if event.value == self.value and not self.refused:
            self.screen.focus_next()  # nothing new: on to the next field
            return
        self.post_message(ChoiceField.Changed(self, self.spec.key, event.value, True))

    @on(Input.Blurred)
    def _blurred(self, event: Input.Blurred) -> None:
        if self.refused and event.value == self.refused_raw:
            self.call_after_refresh(self._refocus)  # the same refused value: back to fix it
        elif event.value != self.value or self.refused:
            self.post_message(ChoiceField.Changed(self, self.spec.key, event.value, False))

    @on(Input.Changed)
    def _typed(self) -> None:
        self._place_hint()

    def on_resize(self) -> None:
        self._place_hint()

    def _place_hint(self) -> None:
        """An empty box shows what to type (the hint) as its placeholder; a hint longer than
        the box (the Index URL's at 80 columns) shows whole under it instead of cut short."""
        widget = self.control_widget
        width = widget.content_region.width
        if not isinstance(widget, Input) or not width:  # not laid out yet
            return
        under = not widget.value and len(self.spec.hint) > width
        if under and not self.has_class("-hinted"):  # in sight below the box (at the fold)
            self.call_after_refresh(self.scroll_visible, animate=False)
        self.set_class(under, "-hinted")
        widget.placeholder = "" if under else self.spec.hint

    def focus_control(self) -> None:
        """The focus here after Enter accepted the field before: a text box shows its value
        whole, the cursor at its end and nothing selected, so a key typed on reflex (a digit
        meant as a jump) adds to it in sight instead of silently replacing it."""
        widget = self.control_widget
        if isinstance(widget, FieldInput):
            widget.keep_value = True
        widget.focus()

    def _refocus(self) -> None:
        if self.refused and self.is_attached and self.app.screen is self.screen:
            self.control_widget.focus()

    def on_key(self, event: events.Key) -> None:
        if event.key == "escape" and isinstance(self.control_widget, Input) and self.editing:
            event.stop()
            event.prevent_default()
            self.cancel_edit()

    def cancel_edit(self) -> None:
        """Back to the value the answers hold; a refusal goes with the refused value. An edit
        held while the index is asked about it: the value before it, entered again."""
        widget = self.control_widget
        if self.back_to is not None and isinstance(widget, Input) and widget.value == self.value:
            widget.value, self.back_to = self.back_to, None
            widget.cursor_position = len(widget.value)
            self.post_message(ChoiceField.Changed(self, self.spec.key, widget.value, False))
            return
        if isinstance(widget, Input):
            widget.value = self.value
            widget.cursor_position = len(self.value)
        self.accept(self.value)

    def unaccepted(self) -> tuple[str, str] | None:
        """What is typed here and not (yet) in the answers, and why it was refused if it was."""
        widget = self.control_widget
        if isinstance(widget, Input) and self.editing:
            return widget.value, self.refusal if self.refused else ""
        return None

    def keep(self, raw: str, why: str) -> None:
        """Show `raw` typed again (a redrawn screen), refused with `why` if it was."""
        widget = self.control_widget
        if isinstance(widget, Input):
            widget.value = raw
        if why:
            self.refuse(why, raw)

    def note(self, text: str) -> None:
        """Say `text` under the field (the value is taken: a note, not a refusal)."""
        if not self.refused:
            self.query_one(".field-error", Static).update(text)
            self.set_class(bool(text), "-noted")

    def refuse(self, why: str, raw: str = "") -> None:
        self.refused_raw = raw
        self.refusal = why
        self.add_class("-invalid")
        self.remove_class("-noted")
        self.query_one(".field-label", Label).update(f"! {self.spec.label}")
        self.query_one(".field-error", Static).update(why)

    def accept(self, value: str) -> None:
        self.value = value
        self.remove_class("-invalid", "-noted")
        self.query_one(".field-label", Label).update(f"  {self.spec.label}")
        self.query_one(".field-error", Static).update("")

    def enter(self, raw: str) -> None:
        """Type a value as the operator would, then leave the field (tests, scripted walks)."""
        widget = self.control_widget
        if isinstance(widget, Select):
            widget.value = raw
        else:
            widget.value = raw
            if raw != self.value or self.refused:
                self.post_message(ChoiceField.Changed(self, self.spec.key, raw, False))


# What Textual reads for alt+digit from a terminal that sends Esc and the digit (xterm, tmux):
# the characters macOS's Option key gives (textual/_ansi_sequences.py maps "\x1b5" to "∞"),
# not "alt+5". In a text box they are a jump, as the key bar says; no answer holds them.
ALT_DIGITS = {"¡": 1, "™": 2, "£": 3, "¢": 4, "∞": 5, "§": 6, "¶": 7, "•": 8, "ª": 9}
ALT_DIGIT_KEYS = {unicodedata.name(c).lower().replace(" ", "_"): n for c, n in ALT_DIGITS.items()}


class FieldInput(Input):
    """A field's text box: focused by Tab its value is selected (typing replaces it); focused
    by the move after an accepted Enter (`keep_value`), the cursor goes to its end instead.
    Digits are typed; alt+digit jumps to a step."""

    keep_value = False

    async def _on_key(self, event: events.Key) -> None:
        # runs before Input's own handler, which would type the character
        step = ALT_DIGITS.get(event.character or "") or ALT_DIGIT_KEYS.get(event.key)
        if step is not None and step <= len(jumps()):
            event.prevent_default()
            event.stop()
            self.post_message(self.Jump(step))

    class Jump(Message):
        """alt+digit in the box: the screen jumps to step `step` (1: Machine)."""

        def __init__(self, step: int) -> None:
            super().__init__()
            self.step = step

    def _on_focus(self, event: events.Focus) -> None:
        # runs before Input's own handler, which selects the value unless told not to
        if self.keep_value:
            self.keep_value = False
            self.select_on_focus = False
            self.cursor_position = len(self.value)
            self.call_next(setattr, self, "select_on_focus", True)


def _dom_id(key: str) -> str:
    return "f-" + key.replace(".", "-").replace("[", "-").replace("]", "")


class Trail(Static):
    """Where the operator is: 1 Machine  2 Driver ... 6 Review  Run  Summary, the current one
    in reverse video; the number before a step is the key that jumps to it."""

    def __init__(self, current: str, glyphs: Glyphs, note: str = "", **kwargs) -> None:
        super().__init__("", **kwargs)
        self.current = current
        self.glyphs = glyphs
        self.note = note

    def on_mount(self) -> None:
        self._draw()

    def on_resize(self) -> None:
        self._draw()

    def _draw(self) -> None:
        """Every step by name where the width allows; narrower (60 columns), the others by
        their number only, so the trail never stops half way."""
        width = self.content_region.width or 80
        for short in (False, True):
            words, plain = [], []
            keys = len(jumps())  # the first ones are reached with the number keys
            for n, name in enumerate(trail(), 1):
                key = f"{n}" if n <= keys else ""
                label = key if short and name != self.current and key else name.capitalize()
                if key and label != key:
                    label = f"{key} {label}"
                plain.append(label)
                style = "reverse bold" if name == self.current else "$text-muted"
                words.append(f"[{style}]{label}[/]")
            note = f"  {self.note}" if self.note else ""
            if len("  ".join(plain) + note) <= width:
                break
        self.update("  ".join(words) + (f"  [$warning bold]{self.note}[/]" if self.note else ""))


class Section(Vertical):
    """A titled part of a screen: its title on a rule above the content."""

    def __init__(self, title: str, *children, **kwargs) -> None:
        super().__init__(*children, **kwargs)
        self.border_title = f" {title} "


class LabelledRows(Vertical):
    """A table of label and value, each value wrapped under its own start (a long GPU name
    went on under the labels): the labels as wide as the longest and two more."""

    DEFAULT_CSS = """
    LabelledRows { height: auto; }
    LabelledRows > Horizontal { height: auto; }
    LabelledRows .value { width: 1fr; }
    """

    def __init__(self, rows: list[tuple[str, str]], **kwargs) -> None:
        super().__init__(**kwargs)
        self.rows = rows

    def compose(self) -> ComposeResult:
        width = max((len(label) for label, _ in self.rows), default=0) + 2
        for label, value in self.rows:
            with Horizontal():
                name = Static(label, classes="label", markup=False)
                name.styles.width = width
                yield name
                yield Static(value, classes="value", markup=False)


class MarkedLines(Vertical):
    """Lines each after a mark ("!"), a wrapped line indented under its own start, so each
    one reads as one item at any width."""

    DEFAULT_CSS = """
    MarkedLines { height: auto; }
    MarkedLines > Horizontal { height: auto; }
    MarkedLines .mark { width: 2; }
    MarkedLines .line { width: 1fr; }
    """

    def __init__(self, mark: str, lines: list[str], **kwargs) -> None:
        super().__init__(**kwargs)
        self.mark = mark
        self.lines = lines

    def compose(self) -> ComposeResult:
        for line in self.lines:
            with Horizontal():
                yield Static(self.mark, classes="mark", markup=False)
                yield Static(line, classes="line", markup=False)

    @property
    def text(self) -> str:
        return "\n".join(f"{self.mark} {line}" for line in self.lines)

    async def show(self, lines: list[str]) -> None:
        if lines != self.lines:
            self.lines = lines
            await self.recompose()
