"""Run: each action as it runs, its live output, the memory gauge during a build, and a
failure's diagnosis and next command above the log."""

from __future__ import annotations

import functools
from collections.abc import Callable

from rich.markup import escape
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from app.tui.controllers.run import status_line, steps_line
from app.tui.feed import EngineFeed
from app.tui.runmodel import OVERVIEW, ActionView, RunModel
from app.tui.screens.base import WizardScreen
from app.tui.widgets.gauge import MemoryGauge
from app.tui.widgets.keybar import KeyHint
from app.tui.widgets.logpane import LogPane
from steps import events as ev


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
        self.showing: str | None = None  # the action in the pane
        self.pinned = False  # the operator chose an action: do not follow the running one
        self._overview_shown = 0  # overview lines already in the pane

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
        with Horizontal(id="run-body"):
            with Vertical(id="side"):
                yield OptionList(id="actions")
            with Vertical(id="main"):
                yield Static("", id="steps-line")
                yield Static("", id="failure")
                yield LogPane(id="log")
                yield MemoryGauge(self.wizard.glyphs, id="gauge")
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
        self.query_one("#actions").border_title = "Actions"
        self.query_one("#failure").display = False
        self.redraw()
        self.query_one("#log-view").focus()
        self.set_interval(1.0, self._tick)

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
        """The model takes the event first; the screen then draws what changed."""
        self.model.handle(event)
        self._draw(event)
        self._steps_line()
        self._status()
        if isinstance(event, ev.Finished):
            self.post_message(self.Ended(event))

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
        self._note(f"{self.wizard.glyphs['reboot']} reboot needed: {event.next}")

    @_draw.register
    def _memory(self, event: ev.MemorySample | ev.Throttle | ev.BuildProgress) -> None:
        self._follow_overview()
        gauge = self.query_one(MemoryGauge)
        gauge.add_class("-active")
        gauge.update_from(self.model.memory, self.wizard.clock())

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
        self.refresh_bindings()
        self.query_one("#heading", Static).update(self._heading_text())
        self.refresh_keys()

    def _follow_overview(self) -> None:
        if self.showing == OVERVIEW:
            self._more_overview()

    def _note(self, text: str) -> None:
        self.query_one(LogPane).append([f"{self.wizard.glyphs['rule']} {text}"])

    def _take_lines(self, message: EngineFeed.Lines) -> None:
        self.model.lines(message.action, message.lines)
        if message.action == self.showing:
            self.query_one(LogPane).append(message.lines, message.dropped)

    def _take_lost(self, why: str) -> None:
        self.model.lost = why
        if not self.pinned:
            self._show(self.model.overview)
            self.query_one(LogPane).append([f"!! {self.model.lost}"])
        self._status()
        self.refresh_bindings()

    def reboot_declined(self) -> None:
        """The run paused for a reboot and the operator chose not to reboot now."""
        dot = self.wizard.glyphs["dot"]
        self.query_one("#status", Static).update(
            f"paused for a reboot {dot} next: sudo reboot, then: sudo mlsetup"
        )

    # -- drawing ------------------------------------------------------------------------------

    def redraw(self) -> None:
        self._actions()
        m = self.model
        view = m.actions.get(m.current or "") if not m.done else None
        self._show(view or m.overview)
        if m.memory.active:
            gauge = self.query_one(MemoryGauge)
            gauge.add_class("-active")
            gauge.update_from(m.memory, self.wizard.clock())
        self._failure()
        self._steps_line()
        self._status()

    def _title(self, view: ActionView) -> str:
        mark = self.wizard.glyphs.status(view.status)
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
        text = f"{self.wizard.glyphs.status(view.status)} {view.title or view.id}{note}"
        more = self.wizard.glyphs["more"]
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
        self.query_one("#steps-line", Static).update(steps_line(self.model, self.wizard.glyphs))

    def _failure(self) -> None:
        f = self.model.failed
        box = self.query_one("#failure", Static)
        if f is None:
            box.display = False
            return
        g = self.wizard.glyphs
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

    def _status(self) -> None:
        text = status_line(self.model, self.wizard.glyphs, self.wizard.clock())
        self.query_one("#status", Static).update(text)

    def _tick(self) -> None:
        if not self.model.done:
            self._status()
            if self.model.memory.active:  # the ETA moves while no object finishes
                self.query_one(MemoryGauge).update_from(self.model.memory, self.wizard.clock())
        self.refresh_keys()

    # -- keys ---------------------------------------------------------------------------------

    @on(OptionList.OptionSelected, "#actions")
    def _picked(self, event: OptionList.OptionSelected) -> None:
        view = self.model.view(event.option.id or "")
        if view is not None:
            self.pinned = view.id != self.model.current
            self._show(view)

    def action_show(self, step: int) -> None:
        ids = self._ids()
        at = ids.index(self.showing) if self.showing in ids else 0
        target = ids[max(0, min(len(ids) - 1, at + step))]
        view = self.model.view(target)
        if view is not None:
            self.pinned = target != self.model.current
            self._show(view)

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
