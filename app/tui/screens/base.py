"""What every wizard screen has: the trail at the top (a number key jumps to a step), a
heading, the key bar at the bottom (the focused screen's keys, for the focused widget), help
written for that screen, and a body recomputed from the answers each time the screen is shown
again (the planner is the one source of truth)."""

from __future__ import annotations

from typing import cast

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Button, Input, Select, Static

from app.tui.protocols import Wizard
from app.tui.screens.modals import SaveScreen
from app.tui.trail import jump_keys, jumps
from app.tui.widgets.fields import ChoiceField, FieldInput, Trail
from app.tui.widgets.keybar import KeyBar, KeyHint

# the number keys jump to the screens of the trail (app.tui.trail), 1 to as many as it has
NUMBER_KEYS = 9


class Body(VerticalScroll, can_focus=False):
    """A screen's scrolling body: PgUp/PgDn scroll it; it is no tab stop of its own."""

    def watch_show_vertical_scrollbar(self, _shown: bool) -> None:
        # the key bar offers PgDn while the body scrolls, and what it holds can grow long after
        # the screen was mounted (the stack's resolution returns and the plan is redrawn)
        screen = self.screen
        if isinstance(screen, WizardScreen):
            screen.call_after_refresh(screen.refresh_keys)


class WizardScreen(Screen):
    TRAIL = ""
    STEP = ""  # the trail's name for this screen: machine … review, run, summary
    RECOMPUTE = False  # rebuild the body from the answers each time it is shown again
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]  # noqa: RUF012
    BINDINGS = [  # noqa: RUF012
        Binding("escape", "back", "Back"),
        Binding("pageup", "page(-1)", "Scroll up", show=False),
        Binding("pagedown", "page(1)", "Scroll down", show=False),
        *(
            Binding(f"{n},alt+{n}", f"jump_to({n})", f"screen {n}", show=False)
            for n in range(1, NUMBER_KEYS + 1)
        ),
    ]
    AUTO_FOCUS = "#next"  # Continue, from the first frame (not the first field, then Continue)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._shown = False
        self._built_for: tuple[str, bool, str | None, bool] | None = None  # see `_inputs`

    @property
    def wizard(self) -> Wizard:
        return cast("Wizard", self.app)

    def heading(self) -> str:
        return self.TRAIL

    def help_text(self) -> str:
        return ""

    def _inputs(self) -> tuple[str, bool, str | None, bool]:
        """What the body is computed from: the answers, whether their stack is known (or
        refused, and why), and whether the index is asked about a release or refused one."""
        if not self.wizard.loaded:
            return ("", False, None, False)
        s = self.wizard.session
        asking = s.release_check() is not None or s.checks.unseen is not None
        return (s.answers.model_dump_json(), s.stack() is not None, s.stack_refused(), asking)

    def compose(self) -> ComposeResult:
        self._built_for = self._inputs()
        yield Trail(self.STEP, self.wizard.glyphs, id="trail")
        yield Static(self._heading_text(), id="heading", markup=False)
        yield from self.body()
        yield KeyBar(self.key_hints, id="keys")

    def _heading_text(self) -> str:
        mode = self.wizard.mode_label()
        return self.heading() + (f"  {self.wizard.glyphs['dot']}  {mode}" if mode else "")

    def body(self) -> ComposeResult:
        yield from ()

    # -- the key bar --------------------------------------------------------------------------

    def key_hints(self) -> list[KeyHint]:
        """Every key of this screen as it works now, most used first: Enter for the focused
        control, Esc, moving, then this screen's own keys, then save, help and quit."""
        focused = self.focused
        if isinstance(focused, Widget) and isinstance(focused.parent, Select):
            return [("Enter", "pick"), ("Esc", "close"), *self.app_hints(typing=False)]
        typing = isinstance(focused, Input)
        out: list[KeyHint] = []
        if isinstance(focused, Button):  # its name where the label is long for the bar
            out.append(("Enter", str(focused.name or focused.label).lower()))
        elif typing:
            out.append(("Enter", "accept"))
        elif isinstance(focused, Select):
            out.append(("Enter", "choose"))
        row = focused.parent if typing and focused is not None else None
        field = row.parent if row is not None else None  # a field's Input sits in its row
        if isinstance(field, ChoiceField) and field.editing:
            out.append(("Esc", "cancel edit"))
        elif self.can_go_back():
            out.append(("Esc", "back"))
        out.append(("Tab", "next"))
        if (
            self.wizard.loaded and self.wizard.nav.can_jump()
        ):  # in a text box a digit is typed: alt+digit jumps
            out.append((f"M-{jump_keys()}" if typing else jump_keys(), "step"))
        if any(body.max_scroll_y > 0 for body in self.query("#body")):
            out.append(("PgDn", "page"))
        return out + self.screen_hints(typing) + self.app_hints(typing)

    def screen_hints(self, typing: bool) -> list[KeyHint]:
        """This screen's own keys (the Extensions' `a`, the Summary's `r`)."""
        return []

    def app_hints(self, typing: bool) -> list[KeyHint]:
        save: list[KeyHint] = [("^s", "save")] if self.wizard.loaded else []  # no answers yet
        return [*save, ("F1" if typing else "?", "help"), ("^q", "quit")]

    def refresh_keys(self) -> None:
        for bar in self.query(KeyBar):
            bar.show()

    def on_descendant_focus(self, _event: events.DescendantFocus) -> None:
        self.call_after_refresh(self.refresh_keys)

    def on_descendant_blur(self, _event: events.DescendantBlur) -> None:
        self.call_after_refresh(self.refresh_keys)

    def on_field_input_jump(self, event: FieldInput.Jump) -> None:
        if self.check_action("jump_to", (event.step,)):
            self.action_jump_to(event.step)

    def on_input_changed(self, _event: Input.Changed) -> None:
        self.refresh_keys()

    def on_resize(self, _event: events.Resize) -> None:
        self.call_after_refresh(self.refresh_keys)

    def on_mount(self) -> None:
        self.focus_default()
        self.bindings_updated_signal.subscribe(self, lambda _screen: self.refresh_keys())

    def focus_default(self) -> None:
        for button in self.query("#next"):
            if not button.disabled:
                button.focus()
                return

    def on_screen_resume(self) -> None:
        # only when the answers changed meanwhile (not after help, save or a question closes:
        # nothing to redraw, and what is typed stays as it is); after the pops of a jump
        # settle: a screen passed through on the way is left alone
        if self._shown and self.RECOMPUTE and self._built_for != self._inputs():
            self.call_after_refresh(self._recompute)
        self._shown = True

    async def stack_resolved(self) -> None:
        """The stack of the answers was resolved: show what follows from it."""
        if self.RECOMPUTE:
            await self._recompute()

    async def release_refused(self) -> None:
        """The index lacks the extension release an edit named (the answers are set back):
        the screen with that field says so there (session.checks.unseen)."""

    async def _recompute(self, keep_focus: bool = True) -> None:
        """The body again from the answers; what is typed in a field and not yet entered (or
        refused) is kept, and the focus stays where it was (`keep_focus`; else on Continue)."""
        if self.app.screen is self and self.is_attached:
            typed = {f.spec.key: f.unaccepted() for f in self.query(ChoiceField)}
            focused = self.focused.id if self.focused is not None else None
            await self.recompose()
            for field in self.query(ChoiceField):
                if kept := typed.get(field.spec.key):
                    field.keep(*kept)
            again = self.query(f"#{focused}") if focused and keep_focus else None
            if again and again.first().focusable:
                again.first().focus()
            else:
                self.focus_default()
            self.call_after_refresh(self.refresh_keys)

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
        if action == "jump_to":
            return (
                self.wizard.loaded
                and self.wizard.nav.can_jump()
                and int(str(parameters[0])) <= len(jumps())
            )
        return True

    def action_back(self) -> None:
        if self.can_go_back():
            self.app.pop_screen()

    def accept_typed(self) -> bool:
        """Enter what is typed in this screen's fields and not yet entered; False while one
        is refused (it says so, in place). Screens without fields have nothing to enter."""
        return True

    def action_jump_to(self, key: int) -> None:
        if self.accept_typed():
            self.wizard.nav.jump(jumps()[key - 1])

    async def action_save_answers(self) -> None:
        """ctrl+s: the answers to a file the operator names (a failure stays in the dialog),
        what is typed in a field entered first: what is saved is what is shown. The dialog is
        waited for until its field has the focus: the keys typed meanwhile go there."""
        if not self.wizard.loaded or not self.accept_typed():
            return  # nothing to save before the answers are read
        from app.tui.controllers import SummaryController

        controller = SummaryController(self.wizard.session, self.wizard.model)
        dialog = SaveScreen(controller.save, self.wizard.save_path)

        def saved(text: str | None) -> None:
            if text is not None:
                self.wizard.save_path = dialog.path  # the next save offers the same file
                self.notify(text, timeout=8)

        await self.app.push_screen(dialog, saved)
