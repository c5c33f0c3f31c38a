"""Plan steps as a person reads them: the reason, then each action's title and exact command
(a wrapped command stays indented under its title)."""

from __future__ import annotations

from rich.markup import escape
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from app.tui.glyphs import Glyphs
from steps.plan import Step


class PlanView(Vertical):
    DEFAULT_CSS = """
    PlanView { height: auto; }
    PlanView .step { height: auto; }
    PlanView .title { height: auto; padding-left: 2; text-style: bold; }
    PlanView .cmd { height: auto; padding-left: 4; color: $text-muted; }
    PlanView.-single .title { padding-left: 0; }
    PlanView.-single .cmd { padding-left: 2; }
    """

    def __init__(self, steps: list[Step], glyphs: Glyphs, numbered: bool = True, **kw) -> None:
        super().__init__(**kw)
        self.steps = steps
        self.glyphs = glyphs
        self.numbered = numbered
        self.set_class(not numbered, "-single")

    def compose(self) -> ComposeResult:
        yield from self._widgets()

    def _widgets(self) -> ComposeResult:
        g = self.glyphs
        for n, step in enumerate(self.steps, 1):
            head = f"{n}. [b]{step.name}[/] " if self.numbered else ""
            if step.status == "satisfied":
                yield Static(
                    f"{head}[$success]{g['satisfied']}[/] {escape(step.reason)}", classes="step"
                )
                continue
            yield Static(f"{head}[$warning]{g['arrow']}[/] {escape(step.reason)}", classes="step")
            for action in step.actions:
                reboot = "  [$warning](reboot after)[/]" if action.reboot_after else ""
                yield Static(f"{escape(action.title)}{reboot}", classes="title")
                yield Static(f"$ {action.command_line()}", classes="cmd", markup=False)

    async def show(self, steps: list[Step]) -> None:
        self.steps = steps
        await self.remove_children()
        await self.mount_all(list(self._widgets()))
