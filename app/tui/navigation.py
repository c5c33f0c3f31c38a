"""Moving between the wizard's screens: a stack of step screens in trail order (Machine …
Review), each recomputed from the answers when it is shown again."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from textual.app import App

from app.tui.trail import answers_screen, jumps

if TYPE_CHECKING:
    from app.tui.runmodel import RunModel
    from app.tui.screens.base import WizardScreen


class Navigator:
    def __init__(
        self, app: App[int], model: Callable[[], RunModel], running: Callable[[], bool]
    ) -> None:
        """`model`: the current run's; `running`: whether an engine run is going on (its
        screen then stays until it ends)."""
        self.app = app
        self.model = model
        self.running = running

    @staticmethod
    def make_screen(step: str) -> WizardScreen:
        # imported when first shown: the wizard's first screen is drawn without them
        if step == "machine":
            from app.tui.screens.machine import MachineScreen

            return MachineScreen()
        if step == "review":
            from app.tui.screens.review import ReviewScreen

            return ReviewScreen()
        from app.tui.screens.step import StepScreen

        return StepScreen(step)

    def next_from(self, where: str) -> None:
        order = jumps()
        self.app.push_screen(self.make_screen(order[order.index(where) + 1]))

    def can_jump(self) -> bool:
        return not self.running()

    def jump(self, step: str) -> None:
        """Show `step`: back to it if it is on the stack (it recomputes), else forward through
        the steps in between, so Back walks them in order."""
        if not self.can_jump():
            self.app.notify("the run is going on: its screen stays until it ends", timeout=5)
            return
        on_stack = [getattr(s, "STEP", "") for s in self.app.screen_stack]
        if step in on_stack:
            while getattr(self.app.screen, "STEP", "") != step:
                self.app.pop_screen()
            return
        order = jumps()
        known = [order.index(n) for n in on_stack if n in order]
        start = max(known) + 1 if known else 0
        for name in order[start : order.index(step) + 1]:
            self.app.push_screen(self.make_screen(name))

    def rebuild(self, step: str) -> None:
        """Fresh screens from Machine to `step`, from the answers (after an error)."""
        while len(self.app.screen_stack) > 1:
            self.app.pop_screen()
        order = jumps()
        for name in order[: order.index(step) + 1]:
            self.app.push_screen(self.make_screen(name))

    def retry(self) -> None:
        """After a failed run: back to the failed step's screen to change an answer; Apply
        then runs again from there (what is done stays done)."""
        model = self.model()
        failed = model.failed
        if failed is not None and model.done:
            self.jump(answers_screen(failed.step))

    def show_summary(self) -> None:
        from app.tui.screens.summary import SummaryScreen

        self.app.push_screen(SummaryScreen())
