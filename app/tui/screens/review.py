"""Review: the whole plan, in order, before anything runs; then Apply (after a confirmation
that lists what will change) or the dry run."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Button, Static

from app.tui.controllers import ReviewController
from app.tui.screens.base import Body, WizardScreen
from app.tui.trail import jump_keys
from app.tui.widgets.fields import MarkedLines, Section
from app.tui.widgets.plan import PlanView


class ReviewScreen(WizardScreen):
    STEP = "review"
    RECOMPUTE = True
    AUTO_FOCUS = "#next, #save"  # Save answers when this session cannot apply
    BINDINGS = [  # noqa: RUF012
        Binding("enter", "next", "Run it"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.controller = ReviewController(self.wizard.session)

    def heading(self) -> str:
        if self.controller.refused():
            return "The plan: refused, as mlsetup plan refuses it (exit 2)"
        plan = self.controller.plan()
        n = len(plan.actions)
        return f"The plan: {n} action(s) to run" if n else "The plan: nothing to do"

    def help_text(self) -> str:
        return self.controller.help()

    def body(self) -> ComposeResult:
        g = self.wizard.glyphs
        refused = self.controller.refused()
        with Body(id="body"):
            if refused:  # no plan from the tables: nothing mlsetup would run
                yield Section("Refused", MarkedLines(g["warn"], [refused]), classes="warnings")
                yield Static(
                    f"Nothing runs with these answers: go back to the step it names "
                    f"({jump_keys()}) and change the answer.",
                    id="why-not",
                    markup=False,
                )
            else:
                yield from self._plan()
        why = self.controller.why_not()
        with Horizontal(id="buttons"):
            dry = self.wizard.session.dry_run
            yield Button(
                "Start the dry run" if dry else "Apply",
                id="next",
                name="dry run" if dry else "apply",
                variant="primary",
                disabled=why is not None,
            )
            yield Button("Save answers", id="save")
            yield Button("Back", id="back")

    def _plan(self) -> ComposeResult:
        g = self.wizard.glyphs
        if provisional := self.controller.provisional():
            yield Static(provisional, id="provisional", markup=False)
        warnings = self.controller.warnings()
        if warnings:
            yield Section("Refused or warned", MarkedLines(g["warn"], warnings), classes="warnings")
        yield Section("Plan", PlanView(self.controller.plan().steps, g, id="plan"))
        why = self.controller.why_not()
        if why:
            yield Static(f"{g['warn']} {why}", id="why-not", markup=False)

    async def _recompute(self, keep_focus: bool = True) -> None:
        # Apply held back (the index being asked, uv resolving into a refusal) and now let go:
        # the focus goes to it, as when Review is first shown
        held = [b.disabled for b in self.query("#next").results(Button)]
        await super()._recompute(keep_focus and not any(held))

    def focus_default(self) -> None:
        for button in self.query("#next, #save").results(Button):
            if not button.disabled:
                button.focus()
                return

    @on(Button.Pressed, "#next")
    def action_next(self) -> None:
        why = self.controller.why_not()
        if why:
            self.notify(why, severity="error", timeout=8)
            return
        self.wizard.runs.ask_to_apply()

    @on(Button.Pressed, "#save")
    async def _save(self) -> None:
        await self.action_save_answers()

    @on(Button.Pressed, "#back")
    def _back(self) -> None:
        self.action_back()
