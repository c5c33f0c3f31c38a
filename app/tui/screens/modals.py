"""Dialogs over any screen: Help (written for that screen), Apply? (what will change, Cancel
focused), the error screen (a worker's exception), Reboot now?, and Save answers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from app.tui.trail import jump_keys
from app.tui.widgets.fields import MarkedLines

KEYS = """\
Keys (the bar at the foot shows those that work where the focus is)
  Enter       press the focused button (Continue, on each step); in a
              text box take the value: refused, the focus stays there
  Tab, S-Tab  move between fields and buttons (the focused one reversed)
  {jump_keys:<11} jump to a step (in a text box digits are typed: alt+digit)
  Esc         back one screen; in an edited text box, cancel the edit
  PgUp, PgDn  scroll the screen
  ctrl+s      save the answers (sudo mlsetup apply --answers FILE)
  ? or F1     this help (F1 in a text box, where ? is typed)
  ctrl+q      quit: a running setup goes on (sudo mlsetup follows it)"""

LOG_KEYS = """\
In the log pane
  Up Down PgUp PgDn  scroll        End  follow the output again
  /  search          n N  next / previous match
  f  full-screen log [ ]  previous / next action"""


SCROLL_KEYS = [
    Binding("pagedown", "scroll('page_down')", "Read on", show=False),
    Binding("pageup", "scroll('page_up')", show=False),
    Binding("down", "scroll('down')", show=False),
    Binding("up", "scroll('up')", show=False),
    Binding("end", "scroll('end')", show=False),
    Binding("home", "scroll('home')", show=False),
]


class HelpScreen(ModalScreen[None]):
    """Help for the screen under it; longer than 80x24 allows, it scrolls (PgDn, Down, End)."""

    BINDINGS = [  # noqa: RUF012
        Binding("escape", "dismiss", "Close"),
        Binding("question_mark", "dismiss", "Close", show=False),
        Binding("f1", "dismiss", "Close", show=False),
        *SCROLL_KEYS,
    ]

    def __init__(self, title: str, text: str, log_keys: bool = False) -> None:
        super().__init__()
        self.title_text = title
        self.text = text
        self.log_keys = log_keys

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="help"):
            yield Static(f"Help: {self.title_text}", classes="dialog-title", markup=False)
            with VerticalScroll(id="help-body", can_focus=False):
                keys = KEYS.format(jump_keys=jump_keys()) + (
                    "\n\n" + LOG_KEYS if self.log_keys else ""
                )
                yield Static(f"{self.text}\n\n{keys}", id="help-text", markup=False)
            yield Static("PgDn, Down, End read on \N{MIDDLE DOT} Esc closes", classes="dialog-hint")

    def action_scroll(self, how: str) -> None:
        getattr(self.query_one("#help-body", VerticalScroll), f"scroll_{how}")(animate=False)

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)


class ConfirmScreen(ModalScreen[bool]):
    """Apply? Lists what will change on this machine; Cancel has the focus, so Enter alone
    never starts an install, and Apply waits until the whole list has been on screen (at
    80x24 the builds and the reboot are below the fold): PgDn reads on. A dry run asks the
    same, marked as one."""

    BINDINGS = [  # noqa: RUF012
        Binding("escape", "answer(False)", "Cancel"),
        *SCROLL_KEYS,
    ]

    def __init__(
        self,
        headline: str,
        glance: str,
        sections: list[tuple[str, list[str]]],
        bullet: str,
        dry_run: bool = False,
    ) -> None:
        super().__init__()
        self.headline = headline
        self.glance = glance
        self.sections = sections
        self.bullet = bullet
        self.dry_run = dry_run
        self.seen_all = False

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="confirm"):
            yield Static(self.headline, classes="dialog-title", markup=False)
            if self.glance:
                yield Static(self.glance, id="confirm-glance", markup=False)
            with VerticalScroll(id="confirm-body", can_focus=False):
                for title, lines in self.sections:
                    yield Static(title, classes="confirm-head", markup=False)
                    yield MarkedLines(self.bullet, lines)
            yield Static("", id="confirm-hint", classes="dialog-hint", markup=False)
            with Horizontal(id="buttons"):
                yield Button("Cancel", id="cancel")
                label = "Start the dry run" if self.dry_run else "Apply"
                yield Button(label, id="apply", disabled=True)

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()
        body = self.query_one("#confirm-body", VerticalScroll)
        self.watch(body, "scroll_y", lambda _y: self._check(), init=False)
        self.call_after_refresh(self._check)

    def on_resize(self) -> None:
        self.call_after_refresh(self._check)

    def _check(self) -> None:
        """Apply is let go once the list's end has been on screen; it stays so."""
        body = self.query_one("#confirm-body", VerticalScroll)
        if body.max_scroll_y == 0 or body.scroll_y >= body.max_scroll_y:
            self.seen_all = True
        self.query_one("#apply", Button).disabled = not self.seen_all
        ready = (
            "Tab, then Enter, starts the dry run: nothing is changed. Esc cancels."
            if self.dry_run
            else "Tab to Apply, then Enter, starts it; it goes on if you quit. Esc cancels."
        )
        waiting = (
            f"PgDn reads on: {self.query_one('#apply', Button).label} waits until you have "
            "seen all of it. Esc cancels."
        )
        self.query_one("#confirm-hint", Static).update(ready if self.seen_all else waiting)

    def action_scroll(self, how: str) -> None:
        body = self.query_one("#confirm-body", VerticalScroll)
        getattr(body, f"scroll_{how}")(animate=False)

    @on(Button.Pressed, "#apply")
    def _apply(self) -> None:
        if self.seen_all:
            self.dismiss(True)

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.dismiss(False)

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes and self.seen_all)


class ErrorScreen(ModalScreen[str]):
    """Something in the wizard failed: what, where the traceback is, what to run next. The
    answers are kept; Back returns to the wizard (rebuilt from them), Quit leaves."""

    BINDINGS = [  # noqa: RUF012
        Binding("escape", "answer('back')", "Back to the wizard"),
        Binding("ctrl+q", "answer('quit')", "Quit", priority=True),
    ]

    def __init__(self, what: str, lines: list[str]) -> None:
        super().__init__()
        self.what = what
        self.lines = lines

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="error"):
            yield Static("The wizard hit an error", classes="dialog-title")
            yield Static(self.what, id="error-what", markup=False)
            yield Static("\n".join(self.lines), id="error-lines", markup=False)
            with Horizontal(id="buttons"):
                yield Button("Back to the wizard", id="back", variant="primary")
                yield Button("Quit", id="quit")

    def on_mount(self) -> None:
        for button in self.query("#back"):
            button.focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id or "back")

    def action_answer(self, what: str) -> None:
        self.dismiss(what)


class RebootScreen(ModalScreen[bool]):
    """Reboot now? (the driver was installed; policy ask)."""

    BINDINGS = [  # noqa: RUF012
        Binding("y", "answer(True)", "Reboot now"),
        Binding("n", "answer(False)", "Not now"),
        Binding("escape", "answer(False)", "Not now", show=False),
    ]

    def __init__(self, why: str, todo: list[str]) -> None:
        super().__init__()
        self.why = why
        self.todo = todo

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static("Reboot now?", classes="dialog-title")
            yield Static(self.why, id="reboot-why", markup=False)
            yield Static("\n".join(self.todo), id="reboot-todo", markup=False)
            with Horizontal(id="buttons"):
                yield Button("Reboot now (y)", id="yes")
                yield Button("Not now (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    @on(Button.Pressed, "#yes")
    def _yes(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#no")
    def _no(self) -> None:
        self.dismiss(False)

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class QuestionScreen(ModalScreen[bool]):
    """A yes/no question before something that cannot be taken back (remove an extension,
    overwrite a file): the safe answer has the focus, so a reflex Enter changes nothing."""

    BINDINGS = [Binding("escape", "answer(False)", "Cancel")]  # noqa: RUF012

    def __init__(self, question: str, yes: str, no: str = "Cancel") -> None:
        super().__init__()
        self.question = question
        self.yes = yes
        self.no = no

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(self.question, classes="dialog-title", markup=False)
            with Horizontal(id="buttons"):
                yield Button(self.no, id="no")
                yield Button(self.yes, id="yes")
            yield Static(
                f"Enter: {self.no.lower()} \N{MIDDLE DOT} Tab, Enter: {self.yes.lower()}",
                classes="dialog-hint",
                markup=False,
            )

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class SaveScreen(ModalScreen[str | None]):
    """Save answers: the file to write (the one saved to last, else the default). `save`
    writes it and says what happened; a failure is shown here, in the dialog, which stays
    open for another path (not a toast over the key bar); a file already there is replaced
    only when the operator says so; on success the dialog closes with what to say."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]  # noqa: RUF012
    # focused as soon as it is composed (not from on_mount, through the app's queue): ctrl+s
    # waits for the mount, so the keys typed meanwhile go to the field
    AUTO_FOCUS = "#save-path"

    def __init__(self, save: Callable[[str], tuple[Path | None, str]], path: str = "") -> None:
        from app.tui.session import default_save_path  # not needed by the first screen

        super().__init__()
        self.save = save
        self.path = path or default_save_path()

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static("Save answers", classes="dialog-title")
            yield Static(
                "The answers file replays this setup: sudo mlsetup apply --answers FILE. "
                "Under sudo it is written as, and belongs to, the account that ran sudo.",
                markup=False,
            )
            with Horizontal(classes="field-row"):
                yield Label("File", classes="field-label")
                yield Input(self.path, id="save-path", compact=True)
            yield Static("", id="save-error", markup=False)
            with Horizontal(id="buttons"):
                yield Button("Save", id="save", variant="primary")
                yield Button("Cancel", id="cancel")
            yield Static(
                "Enter saves \N{MIDDLE DOT} Esc cancels", classes="dialog-hint", markup=False
            )

    @on(Button.Pressed, "#save")
    @on(Input.Submitted, "#save-path")
    def _save(self) -> None:
        raw = self.query_one("#save-path", Input).value
        target = Path(raw.strip()).expanduser() if raw.strip() else None
        # a file of the operator's: asked first (a link or another account's file is refused
        # by `save` itself, without a question)
        if target is not None and target.is_file() and not target.is_symlink():

            def answered(yes: bool | None) -> None:
                if yes:
                    self._write(raw)

            self.app.push_screen(
                QuestionScreen(f"{target} is there already: replace it?", "Replace"), answered
            )
            return
        self._write(raw)

    def _write(self, raw: str) -> None:
        path, text = self.save(raw)
        if path is None:
            self.query_one("#save-error", Static).update(f"! {text}")
            self.query_one("#save-path", Input).focus()
            return
        self.path = raw
        self.dismiss(text)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
