"""The wizard: `sudo mlsetup`. A thin view over the engine, which runs on its own.

A real apply is started detached (`steps.service.start_detached`) and followed through its
event stream in a thread worker, so quitting the wizard or losing the SSH session never stops
the work; a dry run runs the engine in a thread worker with the app as its sink. Either way
each engine event reaches the app as an `EngineFeed.Event` message, output lines as
`EngineFeed.Lines` batches.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from textual import on, work
from textual.app import App
from textual.binding import Binding
from textual.filter import LineFilter
from textual.message import Message
from textual.scrollbar import ScrollBar
from textual.worker import WorkerFailed, get_current_worker

from app.tui import errors
from app.tui.controllers import ConfirmController, SummaryController
from app.tui.controllers.todo import reboot_lines
from app.tui.feed import EngineFeed, engine_log_tail, follow_run
from app.tui.glyphs import Glyphs, plain_terminal
from app.tui.plain import AsciiFilter, AsciiScrollBarRender, to_ascii
from app.tui.runmodel import RunModel
from app.tui.screens.base import JUMPS, WizardScreen
from app.tui.screens.machine import MachineScreen
from app.tui.screens.modals import (
    ConfirmScreen,
    ErrorScreen,
    HelpScreen,
    RebootScreen,
    SaveScreen,
)
from app.tui.screens.resume import ResumeScreen
from app.tui.screens.review import ReviewScreen
from app.tui.screens.run import RunScreen
from app.tui.screens.step import StepScreen
from app.tui.screens.summary import SummaryScreen
from app.tui.session import Opening, Session
from steps import events as ev
from steps.engine import ApplyRequest, Engine
from steps.errors import MlsetupError
from steps.knowledge import ASSETS_DIR
from steps.paths import Paths
from steps.plan import Action
from steps.runner import Runner, RunnerError
from steps.service import start_detached
from steps.state import State

FLUSH_INTERVAL = 1 / 20  # seconds between two batches of output lines


class WizardApp(App[int]):
    TITLE = "mlsetup"
    CSS_PATH = str(ASSETS_DIR / "mlsetup.tcss")
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [  # noqa: RUF012
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("f1", "help", "Help", show=False),
        Binding("ctrl+s", "save_answers", "Save answers", show=False),
        Binding("ctrl+q", "quit", "Quit", priority=True),
    ]

    class AnswerChanged(Message):
        def __init__(self, key: str, raw: str) -> None:
            super().__init__()
            self.key = key
            self.raw = raw

    class AnswerRefused(Message):
        def __init__(self, key: str, raw: str, why: str) -> None:
            super().__init__()
            self.key = key
            self.raw = raw
            self.why = why

    class AnswersSaved(Message):
        def __init__(self, path: Path) -> None:
            super().__init__()
            self.path = path

    class EngineStarted(Message):
        """The engine was asked to run: a dry run in-process, or a detached apply/resume."""

        def __init__(self, how: str, args: list[str], ticket: str | None) -> None:
            super().__init__()
            self.how = how  # dry-run | apply | resume | attach
            self.args = args
            self.ticket = ticket

    class RebootAnswered(Message):
        def __init__(self, reboot: bool, exit_code: int | None = None) -> None:
            super().__init__()
            self.reboot = reboot
            self.exit_code = exit_code

    def __init__(
        self,
        session: Session,
        opening: Opening | None = None,
        state: State | None = None,
        plain: bool | None = None,
    ) -> None:
        super().__init__()
        self.session = session
        if opening is None:
            opening, state = session.opening()
        self.opening, self.state = opening, state
        self.glyphs = Glyphs(plain_terminal() if plain is None else plain)
        self.model = RunModel(dry_run=session.dry_run)
        self.feed = EngineFeed(self.post_message)
        self.run_screen = None
        self.engine_how: str | None = None
        self.reboot_asked = False
        self.clock = time.time  # what "running 2m10s" counts from (tests pin it)
        self.error: errors.WizardError | None = None  # the last one shown
        self._scrollbars = ScrollBar.renderer
        if self.glyphs.plain:
            self.ansi_color = True

    def mode_label(self) -> str:
        s = self.session
        if s.dry_run:
            return "DRY RUN"
        return "" if s.is_root else "not root: plan only"

    def on_mount(self) -> None:
        if self.glyphs.plain:
            self.add_class("-plain")
            ScrollBar.renderer = AsciiScrollBarRender
        self.set_interval(FLUSH_INTERVAL, self.feed.flush)
        if self.opening == "attach":
            self.attach()
        elif self.opening == "resume" and self.state is not None:
            self.push_screen(ResumeScreen(self.state))
        else:
            self.push_screen(MachineScreen())

    def on_unmount(self) -> None:
        ScrollBar.renderer = self._scrollbars

    def get_line_filters(self) -> list[LineFilter]:
        filters = list(super().get_line_filters())
        return [*filters, AsciiFilter()] if self.glyphs.plain else filters

    def get_key_display(self, binding: Binding) -> str:
        shown = super().get_key_display(binding)
        return to_ascii(shown.replace("\u23ce", "enter")) if self.glyphs.plain else shown

    # -- navigation: a stack of step screens, each recomputed when it is shown again ----------

    @staticmethod
    def make_screen(step: str) -> WizardScreen:
        if step == "machine":
            return MachineScreen()
        return ReviewScreen() if step == "review" else StepScreen(step)

    def next_from(self, where: str) -> None:
        self.push_screen(self.make_screen(JUMPS[JUMPS.index(where) + 1]))

    def can_jump(self) -> bool:
        """Not while the engine runs: its screen stays until the run ends."""
        return self.engine_how is None or self.model.done

    def jump(self, step: str) -> None:
        """Show `step`: back to it if it is on the stack (it recomputes), else forward through
        the steps in between, so Back walks them in order."""
        if not self.can_jump():
            self.notify("the run is going on: its screen stays until it ends", timeout=5)
            return
        on_stack = [getattr(s, "STEP", "") for s in self.screen_stack]
        if step in on_stack:
            while getattr(self.screen, "STEP", "") != step:
                self.pop_screen()
            return
        known = [JUMPS.index(n) for n in on_stack if n in JUMPS]
        start = max(known) + 1 if known else 0
        for name in JUMPS[start : JUMPS.index(step) + 1]:
            self.push_screen(self.make_screen(name))

    def rebuild(self, step: str) -> None:
        """Fresh screens from Machine to `step`, from the answers (after an error)."""
        while len(self.screen_stack) > 1:
            self.pop_screen()
        for name in JUMPS[: JUMPS.index(step) + 1]:
            self.push_screen(self.make_screen(name))

    def retry(self) -> None:
        """After a failed run: back to the failed step's screen to change an answer; Apply
        then runs again from there (what is done stays done)."""
        failed = self.model.failed
        if failed is not None and self.model.done:
            self.jump(failed.step if failed.step in JUMPS else "review")

    def show_summary(self) -> None:
        self.push_screen(SummaryScreen())

    def _show_run(self, attached: bool = False) -> None:
        self.run_screen = RunScreen(attached=attached)
        self.push_screen(self.run_screen)

    def action_help(self) -> None:
        screen = self.screen
        if isinstance(screen, (HelpScreen, ErrorScreen)):
            return
        text = screen.help_text() if isinstance(screen, WizardScreen) else ""
        title = screen.heading() if isinstance(screen, WizardScreen) else "mlsetup"
        self.push_screen(HelpScreen(title, text, log_keys=isinstance(screen, RunScreen)))

    # -- a failure in the wizard itself: the error screen, never a traceback -----------------

    def _handle_exception(self, error: Exception) -> None:
        if isinstance(self.screen, ErrorScreen) or not self.is_running:
            super()._handle_exception(error)  # the error screen itself failed: give up
            return
        cause = error.error if isinstance(error, WorkerFailed) else error
        where = getattr(self.screen, "STEP", "") or "review"
        try:
            self.error = errors.record(self.session, cause)
            self.push_screen(
                ErrorScreen(self.error.what, self.error.lines()),
                lambda answer: self._after_error(answer, where),
            )
        except Exception:  # nothing more can be shown: Textual's own report
            super()._handle_exception(error)

    def _after_error(self, answer: str | None, where: str) -> None:
        if answer == "quit":
            self.exit(1, message=f"mlsetup: {self.error.what if self.error else 'error'}")
            return
        running = self.engine_how is not None and not self.model.done
        if running and self.run_screen is not None:
            return  # the engine goes on: stay on its screen
        self.rebuild(where if where in JUMPS else "review")

    def action_save_answers(self) -> None:
        if isinstance(self.screen, SummaryScreen):
            self.screen.action_save()
            return

        def saved(raw: str | None) -> None:
            if raw is None:
                return
            path, text = SummaryController(self.session, self.model).save(raw)
            self.notify(text, severity="information" if path else "error", timeout=8)
            if path is not None:
                self.post_message(self.AnswersSaved(path))

        self.push_screen(SaveScreen(), saved)

    # -- starting the engine ------------------------------------------------------------------

    def ask_to_apply(self) -> None:
        """Review's Apply: a dry run starts at once; a real one only after the operator read
        what will change and chose Apply (Cancel has the focus)."""
        c = ConfirmController(self.session)
        if self.session.dry_run or not c.plan().actions:  # nothing will change
            self.start_run()
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.start_run()

        self.push_screen(ConfirmScreen(c.headline(), c.sections(), self.glyphs["dot"]), answered)

    def start_run(self) -> None:
        """Review to Run: the dry run in-process, or the real apply detached."""
        self.model = RunModel(dry_run=self.session.dry_run)
        self._show_run()
        if self.session.dry_run:
            self.engine_how = "dry-run"
            self.post_message(self.EngineStarted("dry-run", [], None))
            self.dry_run()
            return
        path = self.session.write_apply_answers()
        self._detached("apply", ["--root", str(self.session.fs.root), "--answers", str(path)])

    def start_resume(self) -> None:
        self.model = RunModel()
        self._show_run()
        self._detached("resume", ["--root", str(self.session.fs.root), "--resume"])

    def attach(self) -> None:
        self.model = RunModel()
        self._show_run(attached=True)
        self.engine_how = "attach"
        self.post_message(self.EngineStarted("attach", [], None))
        self.follow(None)

    def _detached(self, how: str, args: list[str]) -> None:
        self.engine_how = how
        ticket = start_detached(self.session.fs, args)
        self.post_message(self.EngineStarted(how, args, ticket))
        self.follow(ticket)

    @work(thread=True, exclusive=True, group="engine")
    def dry_run(self) -> int | None:
        s = self.session
        request = ApplyRequest(
            answers=s.answers,
            answers_toml=s.answers.to_toml(),
            answers_path=None,
            dry_run=True,
            facts_file=s.facts_file,
        )
        try:
            return Engine(s.fs, request, self.feed).run()
        except MlsetupError as exc:
            self.feed.lost(str(exc))
            return None

    @work(thread=True, exclusive=True, group="engine")
    def follow(self, ticket: str | None) -> None:
        worker = get_current_worker()
        finished = False
        for event in follow_run(self.session.fs, ticket, lambda: worker.is_cancelled):
            self.feed(event)
            finished = finished or isinstance(event, ev.Finished)
        if finished or worker.is_cancelled:
            return
        tail = engine_log_tail(self.session.fs)
        self.feed.lost(
            "no events from the engine (it did not start, or it was killed); "
            "continue with: sudo mlsetup apply --resume"
            + (f"\nits last output:\n{tail}" if tail else "")
        )

    # -- engine messages ----------------------------------------------------------------------

    @on(EngineFeed.Event)
    def _engine_event(self, message: EngineFeed.Event) -> None:
        self._guarded(self._take_event, message.event)

    def _take_event(self, event: ev.Event) -> None:
        self.model.handle(event)
        if self.run_screen is not None and self.run_screen.is_mounted:
            self.run_screen.on_engine(event)
        if isinstance(event, ev.Finished):
            self._finished(event)

    @on(EngineFeed.Lines)
    def _engine_lines(self, message: EngineFeed.Lines) -> None:
        self._guarded(self._take_lines, message)

    def _take_lines(self, message: EngineFeed.Lines) -> None:
        self.model.lines(message.action, message.lines)
        if self.run_screen is not None and self.run_screen.is_mounted:
            self.run_screen.on_lines(message)

    @on(EngineFeed.Lost)
    def _engine_lost(self, message: EngineFeed.Lost) -> None:
        self._guarded(self._take_lost, message.why)

    def _take_lost(self, why: str) -> None:
        self.model.lost = why
        if self.run_screen is not None and self.run_screen.is_mounted:
            self.run_screen.on_lost()

    def _guarded(self, call: Callable[..., None], *args: object) -> None:
        """Textual ends the app's own message loop after one of its handlers raises: an
        exception while taking engine events goes to the error screen instead."""
        try:
            call(*args)
        except Exception as exc:  # the error screen says what, and where the traceback is
            self._handle_exception(exc)

    def _finished(self, event: ev.Finished) -> None:
        reboot = self.model.reboot
        if event.code != 10 or reboot is None or self.model.dry_run:
            return
        if reboot.policy == "ask" and not self.reboot_asked:
            self.reboot_asked = True
            self.push_screen(
                RebootScreen(
                    f"The NVIDIA driver is installed ({reboot.action}); it loads after a reboot.",
                    reboot_lines(self.session)[1:],
                ),
                self._reboot_answer,
            )

    def _reboot_answer(self, yes: bool | None) -> None:
        if not yes:
            self.post_message(self.RebootAnswered(False))
            self.notify(
                "Not rebooting. When you are ready: sudo reboot, then: sudo mlsetup",
                timeout=15,
            )
            if self.run_screen is not None:
                dot = self.glyphs["dot"]
                self.run_screen.query_one("#status").update(
                    f"paused for a reboot {dot} next: sudo reboot, then: sudo mlsetup"
                )
            return
        self.reboot_now()

    @work(thread=True, exclusive=True, group="reboot")
    def reboot_now(self) -> None:
        """`reboot`, through the one runner every command goes through (logged like one)."""
        s = self.session
        log = Paths(s.fs).action_log(self.model.run_id or "wizard", "reboot")
        action = Action(id="reboot", title="Reboot to load the NVIDIA driver", argv=["reboot"])
        try:
            result = Runner(s.fs, lambda _e: None).run(action, log)
            code: int | None = result.exit_code
        except RunnerError as exc:
            self.call_from_thread(self.notify, f"reboot: {exc}", severity="error")
            code = None
        self.post_message(self.RebootAnswered(True, code))
        self.call_from_thread(
            self.notify,
            "Rebooting. Log in again and run: sudo mlsetup (it opens on the Resume screen).",
            timeout=30,
        )

    def action_quit(self) -> None:  # type: ignore[override]
        code = self.model.finished.code if self.model.finished else 0
        if self.engine_how in ("apply", "resume", "attach") and not self.model.done:
            self.exit(
                0,
                message="mlsetup: the setup keeps running in the background; "
                "follow it again with: sudo mlsetup",
            )
            return
        self.exit(code)


def run_wizard(session: Session) -> int:
    app = WizardApp(session)
    code = app.run()
    if app.return_code not in (None, 0) and code is None:
        return app.return_code or 1
    if code is None:
        code = 0
    sys.stdout.flush()
    return code
