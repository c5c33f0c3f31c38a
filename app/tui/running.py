"""The wizard's engine run: starting it, following it, and the reboot that ends a driver run.

A real apply is started detached (`steps.apply.service.start_detached`) and followed through its
event log in a thread worker (`app.follower.RunFollower`), so quitting the wizard or losing
the SSH session never stops the work; a dry run runs the engine in a thread worker with the
feed as its sink. Either way each event reaches the app as an `EngineFeed` message; the app
hands it to `take_event` / `take_lines` / `take_lost`, which update the run's model and pass
it on to the Run screen as that screen's own messages.
"""

from __future__ import annotations

from textual.app import App
from textual.message import Message
from textual.worker import get_current_worker

from app.follower import RunFollower
from app.tui.controllers import ConfirmController
from app.tui.controllers.todo import reboot_lines
from app.tui.feed import EngineFeed
from app.tui.glyphs import Glyphs
from app.tui.runmodel import RunModel
from app.tui.screens.modals import ConfirmScreen, RebootScreen
from app.tui.screens.run import RunScreen
from app.tui.session import Session
from steps.apply.engine import ApplyRequest, Engine
from steps.apply.reboot import REBOOT
from steps.apply.service import start_detached
from steps.core.errors import MlsetupError
from steps.core.exitcodes import EXIT_REBOOT
from steps.core.paths import Paths
from steps.formats import events as ev
from steps.run.runner import Runner, RunnerError

FOLLOW_POLL = 0.05  # seconds between two looks at the event log when it has nothing new


class RunControl:
    def __init__(self, app: App[int], session: Session, glyphs: Glyphs) -> None:
        self.app = app
        self.session = session
        self.glyphs = glyphs
        self.model = RunModel(dry_run=session.dry_run)
        self.feed = EngineFeed(self._post)
        self.screen: RunScreen | None = None
        self.how: str | None = None  # dry-run | apply | resume | attach, once started
        self.reboot_asked = False

    def running(self) -> bool:
        """An engine run was started and has not ended."""
        return self.how is not None and not self.model.done

    def detached_running(self) -> bool:
        """A detached engine runs on: it goes on when the wizard quits."""
        return self.how in ("apply", "resume", "attach") and not self.model.done

    # -- starting -----------------------------------------------------------------------------

    def ask_to_apply(self) -> None:
        """Review's Apply: the run starts only after the operator read what will change and
        chose Apply (Cancel has the focus). A dry run asks the same, marked as one, so that
        trying the wizard shows the question a real apply asks."""
        c = ConfirmController(self.session)
        if not c.plan().actions:  # nothing will change
            self.start_run()
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.start_run()

        self.app.push_screen(
            ConfirmScreen(
                c.headline(),
                c.glance(),
                c.sections(),
                self.glyphs["dot"],
                dry_run=self.session.dry_run,
            ),
            answered,
        )

    def start_run(self) -> None:
        """Review to Run: the dry run in-process, or the real apply detached."""
        self.model = RunModel(dry_run=self.session.dry_run)
        self.show_run()
        if self.session.dry_run:
            self.how = "dry-run"
            self.app.run_worker(self._dry_run, thread=True, exclusive=True, group="engine")
            return
        path = self.session.write_apply_answers()
        self._detached("apply", ["--root", str(self.session.fs.root), "--answers", str(path)])

    def start_resume(self) -> None:
        self.model = RunModel()
        self.show_run()
        self._detached("resume", ["--root", str(self.session.fs.root), "--resume"])

    def attach(self) -> None:
        self.model = RunModel()
        self.show_run(attached=True)
        self.how = "attach"
        self._follow(None)

    def show_run(self, attached: bool = False) -> None:
        self.screen = RunScreen(attached=attached)
        self.app.push_screen(self.screen)

    def _detached(self, how: str, args: list[str]) -> None:
        self.how = how
        ticket = start_detached(self.session.fs, args)
        self._follow(ticket)

    def _dry_run(self) -> int | None:
        s = self.session
        request = ApplyRequest(
            answers=s.answers,
            answers_toml=s.answers.to_toml(),
            answers_path=None,
            dry_run=True,
            facts_file=s.facts_file,
            planned=s.stack(),  # the dry run walks the plan Review showed
        )
        try:
            return Engine(s.fs, request, self.feed).run()
        except MlsetupError as exc:
            self.feed.lost(str(exc))
            return None

    def _follow(self, ticket: str | None) -> None:
        def follow() -> None:
            worker = get_current_worker()
            follower = RunFollower(
                self.session.fs, ticket, cancelled=lambda: worker.is_cancelled, poll=FOLLOW_POLL
            )
            for event in follower.events():
                self.feed(event)
            if follower.finished is None and not worker.is_cancelled:
                self.feed.lost(follower.lost())

        self.app.run_worker(follow, thread=True, exclusive=True, group="engine")

    def _post(self, message: Message) -> None:
        """The feed's messages go to the Run screen, which updates the model and draws."""
        if self.screen is not None:
            self.screen.post_message(message)

    # -- the reboot a driver install ends with ---------------------------------------------------

    def finished(self, event: ev.Finished) -> None:
        """The Run screen took the run's last event (RunScreen.Ended): a driver install that
        paused for a reboot asks whether to reboot now (answers' reboot.policy = "ask")."""
        reboot = self.model.reboot
        if event.code != EXIT_REBOOT or reboot is None or self.model.dry_run:
            return
        if reboot.policy == "ask" and not self.reboot_asked:
            self.reboot_asked = True
            self.app.push_screen(
                RebootScreen(
                    f"The NVIDIA driver is installed ({reboot.action}); it loads after a reboot.",
                    reboot_lines(self.session)[1:],
                ),
                self._reboot_answer,
            )

    def _reboot_answer(self, yes: bool | None) -> None:
        if yes:
            self.app.run_worker(self._reboot_now, thread=True, exclusive=True, group="reboot")
            return
        self.app.notify(
            "Not rebooting. When you are ready: sudo reboot, then: sudo mlsetup", timeout=15
        )
        if self.screen is not None:
            self.screen.reboot_declined()

    def _reboot_now(self) -> None:
        """`reboot`, through the one runner every command goes through (logged like one)."""
        s = self.session
        log = Paths(s.fs).action_log(self.model.run_id or "wizard", "reboot")
        try:
            Runner(s.fs, lambda _e: None).run(REBOOT, log)
        except RunnerError as exc:
            self.app.call_from_thread(self.app.notify, f"reboot: {exc}", severity="error")
        self.app.call_from_thread(
            self.app.notify,
            "Rebooting. Log in again and run: sudo mlsetup (it opens on the Resume screen).",
            timeout=30,
        )
