"""The wizard: `sudo mlsetup`. A thin view over the engine, which runs on its own.

The app holds what every screen shares (the session, the glyphs) and what is app-wide: the
help and save-answers keys, the error screen instead of a traceback, quitting. Moving between
screens is `navigation.Navigator`'s; starting and following the engine, and the reboot a
driver run ends with, is `running.RunControl`'s.

Launched from the command line, the first screen (Machine, "probing") is drawn before the
session is loaded: the probe, the answers and their plan come in a worker (`_load`), and this
module imports only what that screen needs; the other screens, the engine and the planners
are imported where they are first used.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from textual.app import App
from textual.binding import Binding
from textual.filter import LineFilter
from textual.scrollbar import ScrollBar
from textual.worker import WorkerFailed

from app.tui import errors
from app.tui.glyphs import Glyphs, plain_terminal
from app.tui.launch import Launch
from app.tui.navigation import Navigator
from app.tui.plain import AsciiFilter, AsciiScrollBarRender, to_ascii
from app.tui.screens.base import WizardScreen
from app.tui.screens.machine import MachineScreen
from app.tui.screens.modals import ErrorScreen, HelpScreen
from app.tui.trail import jumps
from steps.core.assetdir import ASSETS_DIR
from steps.core.errors import MlsetupError

if TYPE_CHECKING:
    from app.tui.feed import EngineFeed
    from app.tui.runmodel import RunModel
    from app.tui.running import RunControl
    from app.tui.screens.run import RunScreen
    from app.tui.session import Opening, Session
    from steps.formats.state import State

FLUSH_INTERVAL = 1 / 20  # seconds between two batches of output lines


class WizardApp(App[int]):
    TITLE = "mlsetup"
    CSS_PATH = str(ASSETS_DIR / "mlsetup.tcss")
    ENABLE_COMMAND_PALETTE = False
    session: Session  # once `loaded`
    BINDINGS = [  # noqa: RUF012
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("f1", "help", "Help", show=False),
        # priority: handled in turn with the keys typed after it (not once it has bubbled up
        # from the focused field, when those keys have gone to that field already)
        Binding("ctrl+s", "save_answers", "Save answers", show=False, priority=True),
        Binding("ctrl+q", "quit", "Quit", priority=True),
    ]

    def __init__(
        self,
        session: Session | Launch,
        opening: Opening | None = None,
        state: State | None = None,
        plain: bool | None = None,
    ) -> None:
        """`session`: a loaded Session, or the command line's Launch (the session is then
        loaded in a worker once the first screen is drawn, and the opening decided there)."""
        super().__init__()
        self.launch = session if isinstance(session, Launch) else Launch.of(session)
        self.glyphs = Glyphs(plain_terminal() if plain is None else plain)
        self._runs: RunControl | None = None
        self.nav = Navigator(self, lambda: self.runs.model, self._engine_running)
        self.clock: Callable[[], float] = time.time  # what "running 2m10s" counts from
        self.error: errors.WizardError | None = None  # the last one shown
        self.refusal: MlsetupError | None = None  # why the session could not load (exit 2)
        self.save_path = ""  # the file the answers were saved to last: Save offers it again
        self._scrollbars = ScrollBar.renderer
        if self.glyphs.plain:
            self.ansi_color = True
        self.opening, self.state = opening, state
        if not isinstance(session, Launch):
            self._take(session)

    def _take(self, session: Session) -> None:
        from app.tui.running import RunControl

        self.session = session
        if self.opening is None:
            self.opening, self.state = session.opening()
        self._runs = RunControl(self, session, self.glyphs)

    @property
    def loaded(self) -> bool:
        """The session is loaded (the machine probed, the answers read and planned)."""
        return self._runs is not None

    @property
    def runs(self) -> RunControl:
        assert self._runs is not None, "no run control before the session is loaded"
        return self._runs

    def _engine_running(self) -> bool:
        return self._runs is not None and self._runs.running()

    @property
    def model(self) -> RunModel:
        """The current (or last) run's, as the Run screen drew it."""
        return self.runs.model

    @property
    def feed(self) -> EngineFeed:
        return self.runs.feed

    def mode_label(self) -> str:
        s = self.session if self.loaded else self.launch
        if s.dry_run:
            return "DRY RUN"
        return "" if s.is_root else "not root: plan only"

    def on_mount(self) -> None:
        if self.glyphs.plain:
            self.add_class("-plain")
            ScrollBar.renderer = AsciiScrollBarRender
        if self.loaded:
            self._open()
            return
        self.push_screen(MachineScreen())  # "probing": the worker fills it in
        self.call_after_refresh(self._start_loading)  # once that screen is on the terminal

    def _start_loading(self) -> None:
        self.run_worker(self._load, thread=True, exclusive=True, group="load")

    def _load(self) -> None:
        """In a worker: the probe, the answers, their plan and the opening. Answers this
        machine refuses end the wizard with exit 2 (run_wizard), as before it opened; any
        other failure reaches the error screen (`_handle_exception`)."""
        try:
            session = self.launch.load()
        except MlsetupError as exc:
            self.call_from_thread(self._refused, exc)
            return
        opening, state = session.opening()
        self.call_from_thread(self._loaded, session, opening, state)

    def _refused(self, exc: MlsetupError) -> None:
        self.refusal = exc
        self.exit(None)

    def _loaded(self, session: Session, opening: Opening, state: State | None) -> None:
        self.opening, self.state = opening, state
        self._take(session)
        probing = next((s for s in self.screen_stack if isinstance(s, MachineScreen)), None)
        if self._opens_on_machine():
            if probing is not None:  # behind a dialog, it fills in when shown again
                self.call_later(probing.loaded)
        else:  # the run or Resume opens instead of the probing Machine screen
            while len(self.screen_stack) > 1:
                self.pop_screen()
        self._open()

    def _opens_on_machine(self) -> bool:
        return self.opening == "wizard" or (self.opening == "resume" and self.state is None)

    def _open(self) -> None:
        """The session is loaded: follow the engine's output, and show the opening screen."""
        self.set_interval(FLUSH_INTERVAL, self.feed.flush)
        if self.opening == "wizard":
            self.session.on_change = self.resolve_stack
            self.resolve_stack()
        if self.opening == "attach":
            self.runs.attach()
        elif self.opening == "resume" and self.state is not None:
            from app.tui.screens.resume import ResumeScreen

            self.push_screen(ResumeScreen(self.state))
        elif not any(isinstance(s, MachineScreen) for s in self.screen_stack):
            self.push_screen(MachineScreen())

    def resolve_stack(self) -> None:
        """Resolve the stack for the answers as they are now, in a worker thread (uv takes
        seconds to a minute); the screen in front shows the plan again when it is done. An
        extension release an edit named is asked of the index first, in a worker too (an
        index that hangs holds nothing but that field)."""
        s = self.session
        if s.needs_release_check():
            key = s.stack_key()
            s.checks.started.add(key)
            asked = s.checks.asking[key].asked
            work = functools.partial(self._check_releases, key)
            self.run_worker(work, name=f"check {asked}", thread=True, group="releases")
        elif s.needs_resolution():
            s.resolving[s.stack_key()] = time.time()
            self.run_worker(self._resolve, thread=True, group="stack")

    def _resolve(self) -> None:
        self.session.resolve_stack()
        self.call_from_thread(self._stack_resolved)

    def _check_releases(self, key: str) -> None:
        self.session.check_releases(key)
        self.call_from_thread(self._releases_checked, key)

    def _releases_checked(self, key: str) -> None:
        """The index answered: a refusal lands on the field whose edit it was (unless a newer
        edit superseded it); then the stack is resolved for the answers as they are now."""
        check = self.session.releases_checked(key)
        if check is not None and check.refusal:
            self.session.checks.unseen = check  # until its field's screen shows it
            if getattr(self.screen, "STEP", "") != "extensions":
                self.notify(
                    f"The index has no {check.asked}: set back; Extensions says why",
                    severity="error",
                    timeout=8,
                )
            if isinstance(self.screen, WizardScreen):
                self.screen.call_later(self.screen.release_refused)
        self.resolve_stack()
        self._stack_resolved()

    def _stack_resolved(self) -> None:
        if isinstance(self.screen, WizardScreen):
            self.screen.call_later(self.screen.stack_resolved)

    def on_unmount(self) -> None:
        ScrollBar.renderer = self._scrollbars

    def get_line_filters(self) -> list[LineFilter]:
        filters = list(super().get_line_filters())
        return [*filters, AsciiFilter()] if self.glyphs.plain else filters

    def get_key_display(self, binding: Binding) -> str:
        shown = super().get_key_display(binding)
        return to_ascii(shown.replace("\u23ce", "enter")) if self.glyphs.plain else shown

    def action_help(self) -> None:
        screen = self.screen
        if isinstance(screen, (HelpScreen, ErrorScreen)):
            return
        text = screen.help_text() if isinstance(screen, WizardScreen) else ""
        title = screen.heading() if isinstance(screen, WizardScreen) else "mlsetup"
        log_keys = getattr(screen, "STEP", "") == "run"  # the Run screen's log pane
        self.push_screen(HelpScreen(title, text, log_keys=log_keys))

    # -- a failure in the wizard itself: the error screen, never a traceback -----------------

    def _handle_exception(self, error: Exception) -> None:
        if isinstance(self.screen, ErrorScreen) or not self.is_running:
            super()._handle_exception(error)  # the error screen itself failed: give up
            return
        cause = error.error if isinstance(error, WorkerFailed) else error
        where = getattr(self.screen, "STEP", "") or "review"
        try:
            launch = Launch.of(self.session) if self.loaded else self.launch
            answers = self.session.answers.to_toml() if self.loaded else None
            self.error = errors.record(launch, answers, cause)
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
        if self._engine_running() and self.runs.screen is not None:
            return  # the engine goes on: stay on its screen
        if not self.loaded:  # the session could not be loaded: nothing to go back to
            self.exit(1, message=f"mlsetup: {self.error.what if self.error else 'error'}")
            return
        self.nav.rebuild(where if where in jumps() else "review")

    async def action_save_answers(self) -> None:
        if isinstance(self.screen, WizardScreen):  # not over a dialog
            await self.screen.action_save_answers()

    def on_run_screen_ended(self, message: RunScreen.Ended) -> None:
        self.runs.finished(message.event)

    def action_quit(self) -> None:  # type: ignore[override]
        if not self.loaded:
            self.exit(0)
            return
        code = self.model.finished.code if self.model.finished else 0
        if self.runs.detached_running():
            self.exit(
                0,
                message="mlsetup: the setup keeps running in the background; "
                "follow it again with: sudo mlsetup",
            )
            return
        self.exit(code)


def run_wizard(start: Session | Launch) -> int:
    app = WizardApp(start)
    code = app.run()
    if app.refusal is not None:  # answers (or facts) refused while loading: exit 2, its words
        raise app.refusal
    if app.return_code not in (None, 0) and code is None:
        return app.return_code or 1
    if code is None:
        code = 0
    sys.stdout.flush()
    return code
