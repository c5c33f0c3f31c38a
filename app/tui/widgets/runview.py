"""The Run screen's body, drawn from the run model one engine event at a time (the screen hands
each over once the model took it): the actions, listed on the left from 110 columns; the steps
line; a failure's diagnosis and next command; the log pane, following the running action or
the one the operator picked; the memory gauge while an extension compiles."""

from __future__ import annotations

import functools
from collections.abc import Callable

from rich.markup import escape
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from app.tui.controllers.run import steps_line
from app.tui.feed import EngineFeed
from app.tui.glyphs import Glyphs
from app.tui.runmodel import OVERVIEW, ActionView, RunModel
from app.tui.widgets.gauge import MemoryGauge
from app.tui.widgets.logpane import LogPane
from steps.formats import events as ev


class RunView(Horizontal):
    def __init__(
        self, model: RunModel, glyphs: Glyphs, clock: Callable[[], float], **kwargs
    ) -> None:
        super().__init__(**kwargs)
        self.model = model
        self.glyphs = glyphs
        self.clock = clock  # what the gauge's ETA counts from
        self.showing: str | None = None  # the action in the pane
        self.pinned = False  # the operator chose an action: do not follow the running one
        self._overview_shown = 0  # overview lines already in the pane

    def compose(self) -> ComposeResult:
        with Vertical(id="side"):
            yield OptionList(id="actions")
        with Vertical(id="main"):
            yield Static("", id="steps-line")
            yield Static("", id="failure")
            yield LogPane(id="log")
            yield MemoryGauge(self.glyphs, id="gauge")

    def on_mount(self) -> None:
        self.query_one("#actions").border_title = "Actions"
        self.query_one("#failure").display = False
        self.redraw()

    def redraw(self) -> None:
        """All of it from the model (a run attached to, a screen shown again)."""
        self._actions()
        m = self.model
        view = m.actions.get(m.current or "") if not m.done else None
        self._show(view or m.overview)
        if m.memory.active:
            self._gauge()
        self._failure()
        self._steps_line()

    # -- the engine's events, each drawn once the model has taken it ---------------------------

    def draw(self, event: ev.Event) -> None:
        self._draw(event)
        self._steps_line()

    # One handler per event type, as the model's and the console's; without one, the overview
    # in the pane takes the lines the event printed.
    @functools.singledispatchmethod
    def _draw(self, event: ev.Event) -> None:
        self._follow_overview()

    @_draw.register
    def _plan_made(self, event: ev.PlanMade) -> None:
        self._actions()
        self._follow_overview()

    @_draw.register
    def _action_started(self, event: ev.ActionStarted) -> None:
        self._actions()
        if self.pinned:
            self._follow_overview()
        else:
            self._show(self.model.actions[event.action])

    @_draw.register
    def _action_finished(self, event: ev.ActionFinished) -> None:
        self._actions()
        self._follow_overview()
        if event.action == self.showing:
            view = self.model.actions[event.action]
            self.query_one(LogPane).set_title(self._title(view), view.log)

    @_draw.register
    def _notice(self, event: ev.Notice) -> None:
        self._actions()
        self._follow_overview()
        self._note(event.text)

    @_draw.register
    def _waiting(self, event: ev.Waiting) -> None:
        self._follow_overview()
        self._note(event.reason)

    @_draw.register
    def _reboot_needed(self, event: ev.RebootNeeded) -> None:
        self._follow_overview()
        self._note(f"{self.glyphs['reboot']} reboot needed: {event.next}")

    @_draw.register
    def _memory(self, event: ev.MemorySample | ev.Throttle | ev.BuildProgress) -> None:
        self._follow_overview()
        self._gauge()

    @_draw.register
    def _failed(self, event: ev.Failed) -> None:
        self._follow_overview()
        self._failure()

    @_draw.register
    def _finished(self, event: ev.Finished) -> None:
        if self.pinned or self.model.failed is not None:
            self._follow_overview()
        else:
            self._show(self.model.overview)

    def append(self, message: EngineFeed.Lines) -> None:
        """An action's output lines, in the pane when it shows that action."""
        if message.action == self.showing:
            self.query_one(LogPane).append(message.lines, message.dropped)

    def lost(self) -> None:
        """The run can no longer be followed (the model says why): said in the overview."""
        if not self.pinned:
            self._show(self.model.overview)
            self.query_one(LogPane).append([f"!! {self.model.lost}"])

    def tick(self) -> None:
        """The clock moved: the gauge's ETA moves while no object finishes."""
        if self.model.memory.active:
            self._gauge()

    # -- the operator's choice of action ---------------------------------------------------------

    @on(OptionList.OptionSelected, "#actions")
    def _picked(self, event: OptionList.OptionSelected) -> None:
        view = self.model.view(event.option.id or "")
        if view is not None:
            self.pinned = view.id != self.model.current
            self._show(view)

    def step(self, by: int) -> None:
        """The action `by` places before (-1) or after (1) the one shown: [ and ]."""
        ids = self._ids()
        at = ids.index(self.showing) if self.showing in ids else 0
        target = ids[max(0, min(len(ids) - 1, at + by))]
        view = self.model.view(target)
        if view is not None:
            self.pinned = target != self.model.current
            self._show(view)

    # -- drawing ------------------------------------------------------------------------------

    def _follow_overview(self) -> None:
        if self.showing == OVERVIEW:
            self._more_overview()

    def _note(self, text: str) -> None:
        self.query_one(LogPane).append([f"{self.glyphs['rule']} {text}"])

    def _gauge(self) -> None:
        gauge = self.query_one(MemoryGauge)
        gauge.add_class("-active")
        gauge.update_from(self.model.memory, self.clock())

    def _title(self, view: ActionView) -> str:
        mark = self.glyphs.status(view.status)
        if view.id == OVERVIEW:
            return f"{view.title}: every step and action, as they happen"
        return f"{mark} {view.title or view.id}\n$ {view.command}" if view.command else view.id

    def _show(self, view: ActionView) -> None:
        self.showing = view.id
        log = "" if self.model.dry_run else view.log
        self.query_one(LogPane).show(view.id, self._title(view), list(view.lines), log)
        if view.id == OVERVIEW:
            self._overview_shown = view.total_lines
        options = self.query_one("#actions", OptionList)
        ids = self._ids()
        if view.id in ids:
            options.highlighted = ids.index(view.id)

    def _label(self, view: ActionView, width: int) -> str:
        """The mark and the action's title on one row of the list (a wrapped title left its
        mark alone on a row): cut to the width, the whole title is the pane's."""
        note = " (offline: venv unlocked)" if view.status == "offline" else ""
        text = f"{self.glyphs.status(view.status)} {view.title or view.id}{note}"
        more = self.glyphs["more"]
        return text if len(text) <= width else text[: max(1, width - len(more))] + more

    def _ids(self) -> list[str]:
        return [OVERVIEW, *self.model.actions]

    def _more_overview(self) -> None:
        view = self.model.overview
        new = view.total_lines - self._overview_shown
        if new > 0:
            self.query_one(LogPane).append(list(view.lines)[-new:])
            self._overview_shown = view.total_lines

    def _actions(self) -> None:
        options = self.query_one("#actions", OptionList)
        highlighted = options.highlighted
        width = options.scrollable_content_region.width or 36
        options.clear_options()
        options.add_options(
            [Option(f"= {self.model.overview.title}", id=OVERVIEW)]
            + [Option(self._label(a, width), id=a.id) for a in self.model.actions.values()]
        )
        if highlighted is not None and highlighted < options.option_count:
            options.highlighted = highlighted

    def _steps_line(self) -> None:
        self.query_one("#steps-line", Static).update(steps_line(self.model, self.glyphs))

    def _failure(self) -> None:
        f = self.model.failed
        box = self.query_one("#failure", Static)
        if f is None:
            box.display = False
            return
        g = self.glyphs
        lines = [
            f"[b]{g['failed']} {escape(f.what)}[/]",
            f"[b]why[/]  {escape(f.why)}",
            f"[b]next[/] {escape(f.next)}",
        ]
        if f.log:
            lines.append(f"[b]log[/]  {escape(f.log)}")
        box.update("\n".join(lines))
        box.display = True
        if f.action and f.action in self.model.actions and not self.pinned:
            self._show(self.model.actions[f.action])
