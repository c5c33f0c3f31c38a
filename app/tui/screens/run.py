"""Run: each action as it runs, its live output, the memory gauge during a build, and a
failure's diagnosis and next command above the log (all of it drawn by `RunView`); the
engine's events taken into the run model, the status line and the keys."""

from __future__ import annotations

from collections.abc import Callable

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import Input, Static

from app.tui.controllers.run import status_line
from app.tui.feed import EngineFeed
from app.tui.runmodel import RunModel
from app.tui.screens.base import WizardScreen
from app.tui.widgets.keybar import KeyHint
from app.tui.widgets.logpane import LogPane
from app.tui.widgets.runview import RunView
from steps.formats import events as ev


class RunScreen(WizardScreen):
    STEP = "run"
    BINDINGS = [  # noqa: RUF012
        Binding("escape", "back", "Back", show=False),
        Binding("enter", "next", "Summary"),
        Binding("r", "retry", "Change an answer and retry"),
        Binding("slash", "search", "Search"),
        Binding("f", "full_screen", "Full log"),
        Binding("left_square_bracket", "show(-1)", "Prev action"),
        Binding("right_square_bracket", "show(1)", "Next action"),
    ]

    def __init__(self, attached: bool = False) -> None:
        super().__init__()
        self.attached = attached

    @property
    def model(self) -> RunModel:
        return self.wizard.model

    def heading(self) -> str:
        if self.attached:
            return "Attached to the running setup (it goes on if you quit)"
        if self.model.dry_run:
            if self.model.done:
                return "The dry run has ended: nothing ran, nothing was changed"
            return "Dry run: walking the plan, executing nothing"
        return "Running the plan" if not self.model.done else "The run has ended"

    def key_hints(self) -> list[KeyHint]:
        """The Run screen's keys as they work now: Enter and r once the run has ended, the
        log pane's own (search, full screen, actions), then save, help, quit."""
        m = self.model
        out: list[KeyHint] = []
        searching = isinstance(self.focused, Input)
        if searching:
            out += [("Enter", "find"), ("Esc", "close")]
        else:
            if m.done:
                out.append(("Enter", "summary"))
            if self.check_action("retry", ()):
                out.append(("r", "retry"))
            if self.has_class("-full"):
                out.append(("Esc", "back"))
            out += [("/", "find")]
            pane = self.query_one(LogPane)
            if pane.view.highlighter.term:
                out.append(("n/N", "match"))
            out += [("f", "full"), ("[ ]", "action"), ("PgUp", "page")]
            if not pane.view.at_tail:
                out.append(("End", "follow"))
        return out + self.app_hints(searching)

    def body(self) -> ComposeResult:
        yield RunView(self.model, self.wizard.glyphs, lambda: self.wizard.clock(), id="run-body")
        yield Static("", id="status", markup=False)

    def help_text(self) -> str:
        return (
            "Each action of the plan as it runs: the list on the left (from 110 columns), its "
            "output in the log pane, its log file in the pane's title. While an extension "
            "compiles, the gauge shows RAM in use, the jobs the governor lets run, and each "
            "time it held jobs back to keep RAM under the limit.\n\n"
            "A failure shows what failed, why, the next command and the log above the output; "
            "r then goes back to the failed step to change an answer and apply again.\n"
            "Quitting does not stop the run: sudo mlsetup follows it again."
        )

    def on_mount(self) -> None:
        self._status()
        self.query_one("#log-view").focus()
        self.set_interval(1.0, self._tick)

    @property
    def view(self) -> RunView:
        return self.query_one(RunView)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "next":
            return True if self.model.done else None
        if action == "retry":
            return self.model.done and self.model.failed is not None
        if action == "back":
            return self.has_class("-full")
        return super().check_action(action, parameters)

    # -- the engine's events: the feed posts them here, in order ----------------------------

    class Ended(Message):
        """The run finished (bubbles to the app: a driver run may end asking to reboot)."""

        def __init__(self, event: ev.Finished) -> None:
            super().__init__()
            self.event = event

    @on(EngineFeed.Event)
    def _engine_event(self, message: EngineFeed.Event) -> None:
        self._guarded(self._take_event, message.event)

    @on(EngineFeed.Lines)
    def _engine_lines(self, message: EngineFeed.Lines) -> None:
        self._guarded(self._take_lines, message)

    @on(EngineFeed.Lost)
    def _engine_lost(self, message: EngineFeed.Lost) -> None:
        self._guarded(self._take_lost, message.why)

    def _guarded(self, take: Callable[..., None], *args: object) -> None:
        """Textual stops a screen's message loop after one of its handlers raises: an
        exception while taking engine events goes to the error screen, and the run is still
        followed behind it."""
        try:
            take(*args)
        except Exception as exc:  # the error screen says what, and where the traceback is
            self.app._handle_exception(exc)

    def _take_event(self, event: ev.Event) -> None:
        """The model takes the event first; the view then draws what changed."""
        self.model.handle(event)
        self.view.draw(event)
        self._status()
        if isinstance(event, ev.Finished):
            self.refresh_bindings()
            self.query_one("#heading", Static).update(self._heading_text())
            self.refresh_keys()
            self.post_message(self.Ended(event))

    def _take_lines(self, message: EngineFeed.Lines) -> None:
        self.model.lines(message.action, message.lines)
        self.view.append(message)

    def _take_lost(self, why: str) -> None:
        self.model.lost = why
        self.view.lost()
        self._status()
        self.refresh_bindings()

    def reboot_declined(self) -> None:
        """The run paused for a reboot and the operator chose not to reboot now."""
        dot = self.wizard.glyphs["dot"]
        self.query_one("#status", Static).update(
            f"paused for a reboot {dot} next: sudo reboot, then: sudo mlsetup"
        )

    def _status(self) -> None:
        text = status_line(self.model, self.wizard.glyphs, self.wizard.clock())
        self.query_one("#status", Static).update(text)

    def _tick(self) -> None:
        if not self.model.done:
            self._status()
            self.view.tick()
        self.refresh_keys()

    # -- keys ---------------------------------------------------------------------------------

    def action_show(self, step: int) -> None:
        self.view.step(step)

    def action_search(self) -> None:
        self.query_one(LogPane).action_search()

    def action_full_screen(self) -> None:
        self.query_one(LogPane).action_full_screen()

    @on(LogPane.FullScreen)
    def _full(self) -> None:
        self.toggle_class("-full")
        self.refresh_bindings()
        self.refresh_keys()

    @on(LogPane.Searched)
    def _searched(self) -> None:
        self.refresh_keys()

    def action_next(self) -> None:
        if self.model.done:
            self.wizard.nav.show_summary()

    def action_back(self) -> None:
        if self.has_class("-full"):
            self.remove_class("-full")
            self.refresh_bindings()
            self.refresh_keys()

    def action_retry(self) -> None:
        self.wizard.nav.retry()
