"""Help, "Reboot now?", and Save answers (from any screen)."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from app.tui.session import default_save_path

HELP = """\
mlsetup takes this server to a working ML stack: NVIDIA driver, CUDA toolkit(s), a Python
venv with PyTorch, CUDA extensions built from source. Nothing runs until you choose Apply
(or the dry run) on the Review screen; every command is shown first.

Screens
  Machine     what the probe found, and every warning
  Driver … Extensions
              what is already there, your choices, the exact commands
  Review      the whole plan; Apply starts it in the background
  Run         live output of each action, the memory gauge during a build
  Summary     smoke test, logs, how to use the venv, Save answers

Keys (also shown at the bottom of each screen)
  Enter       continue / press the focused button
  Tab, S-Tab  move between fields and buttons (the mouse works too)
  Esc         back (closes this help)
  ctrl+s      save the answers to a file (replay: sudo mlsetup apply --answers FILE)
  ?  F1       this help
  ctrl+q      quit: a running setup goes on in the background
              (follow it again with: sudo mlsetup)

In the log pane
  ↑ ↓ PgUp PgDn   scroll           End   follow the output again
  /               search           n N   next / previous match
  f               full-screen log  [ ]   previous / next action

Fields are checked as you leave them: a refused value says which key, what you typed and
what is allowed, and the plan on the right changes as soon as a value is accepted.
Without a colour terminal set NO_COLOR=1; on the Linux console (TERM=linux) the wizard
draws with plain ASCII.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [  # noqa: RUF012
        Binding("escape", "dismiss", "Close"),
        Binding("question_mark", "dismiss", "Close", show=False),
        Binding("f1", "dismiss", "Close", show=False),
    ]

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="help"):
            yield Static("Help", classes="dialog-title")
            with VerticalScroll():
                yield Static(HELP, id="help-text", markup=False)
            yield Static("Esc closes", classes="dialog-hint")

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)


class RebootScreen(ModalScreen[bool]):
    """Reboot now? (the driver was installed; policy ask)."""

    BINDINGS = [  # noqa: RUF012
        Binding("y", "answer(True)", "Reboot now"),
        Binding("n", "answer(False)", "Not now"),
        Binding("escape", "answer(False)", "Not now", show=False),
    ]

    def __init__(self, why: str) -> None:
        super().__init__()
        self.why = why

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static("Reboot now?", classes="dialog-title")
            yield Static(self.why, id="reboot-why", markup=False)
            yield Static(
                "After the reboot, log in again and run: sudo mlsetup\n"
                "It opens on the Resume screen and carries on from here.",
                markup=False,
            )
            with Horizontal(id="buttons"):
                yield Button("Reboot now (y)", id="yes", variant="warning")
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


class SaveScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]  # noqa: RUF012

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static("Save answers", classes="dialog-title")
            yield Static(
                "The answers file replays this setup: sudo mlsetup apply --answers FILE",
                markup=False,
            )
            with Horizontal(classes="field-row"):
                yield Label("File", classes="field-label")
                yield Input(default_save_path(), id="save-path", compact=True)
            with Horizontal(id="buttons"):
                yield Button("Save", id="save", variant="primary")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#save-path", Input).focus()

    @on(Button.Pressed, "#save")
    @on(Input.Submitted, "#save-path")
    def _save(self) -> None:
        self.dismiss(self.query_one("#save-path", Input).value)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
