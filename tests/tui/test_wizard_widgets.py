"""The run screen's parts fed by hand: the event feed's order and bounds, the memory gauge,
the log pane (search, full screen, switching actions), NO_COLOR and TERM=linux."""

from __future__ import annotations

import threading

import pytest
from textual.widgets import OptionList

from app.tui.app import WizardApp
from app.tui.feed import EngineFeed
from app.tui.screens.run import RunScreen
from app.tui.widgets.gauge import BudgetChart, MemoryGauge, RamBar, pressure
from app.tui.widgets.logpane import LogPane
from steps.formats import events as ev
from tests.tui import scenes
from tests.tui.helpers import Recorder, dry_session, show_run, shown, wait_until


def test_feed_keeps_the_engine_order_and_bounds_what_it_holds():
    posted: list = []
    feed = EngineFeed(posted.append, pending=10)

    def engine() -> None:
        feed(ev.ActionStarted(step="s", action="a", title="A", command="a", log=""))
        for i in range(3):
            feed(ev.Output(action="a", line=f"a{i}"))
        feed(ev.ActionFinished(step="s", action="a", status="done", exit_code=0, elapsed=0))
        feed(ev.ActionStarted(step="s", action="b", title="B", command="b", log=""))
        for i in range(25):
            feed(ev.Output(action="b", line=f"b{i}"))

    thread = threading.Thread(target=engine)
    thread.start()
    thread.join()
    assert not any(isinstance(m, EngineFeed.Lines) and m.action == "b" for m in posted)
    feed.flush()  # the app's timer
    shape = [
        (type(m).__name__, getattr(m, "action", None) or type(m.event).__name__) for m in posted
    ]
    assert shape == [
        ("Event", "ActionStarted"),
        ("Lines", "a"),
        ("Event", "ActionFinished"),
        ("Event", "ActionStarted"),
        ("Lines", "b"),
    ]
    assert posted[1].lines == ["a0", "a1", "a2"]
    last = posted[-1]
    assert last.lines == [f"b{i}" for i in range(15, 25)] and last.dropped == 15
    feed.flush()
    assert len(posted) == 5  # nothing new: nothing posted


async def _running_build(app: WizardApp, pilot, events: list[ev.Event], lines: int = 40) -> None:
    await show_run(pilot)
    for event in events[:9]:
        app.feed(event)
    for line in scenes.build_output(lines):
        app.feed(ev.Output(action="extensions.flash-attn.build", line=line))
    for event in events[9:]:
        app.feed(event)
    await wait_until(pilot, lambda: app.model.memory.progress is not None)
    await pilot.pause(0.2)


async def test_memory_gauge_and_log_pane_during_a_build():
    app = WizardApp(dry_session("rtx-pro-6000-ubuntu2404"), opening="wizard")
    app.clock = lambda: scenes.T0 + 65
    seen = Recorder()
    async with app.run_test(size=(120, 40), message_hook=seen) as pilot:
        await _running_build(app, pilot, scenes.build_running())
        screen = app.screen
        assert isinstance(screen, RunScreen)
        gauge = screen.query_one(MemoryGauge)
        assert gauge.display
        text = shown(app)
        # one count of jobs (the governor's limit named as such, not a second count) and
        # one budget: the bar, its figures and the chart all measure the build's 64 GiB
        assert "jobs 8 running, 1 frozen (limit 8)" in text
        assert text.count("jobs") == 2  # that line, and the decision's "limit 12 → 8 jobs"
        assert "limit 12 → 8 jobs: available below the guard band" in text
        bar = str(gauge.query_one(RamBar).render())
        assert bar.startswith("build ") and bar.endswith(
            " 72% 46.1/64.0 GiB · machine 72% · swap 0.0 GiB"
        )
        chart = gauge.query_one(BudgetChart)
        assert chart.history[-1] == pytest.approx(72.0, abs=0.5)  # % of the budget, as the bar
        assert "running 1m05s · Compile flash-attn 2.8.3" in text
        # the samples went through warn and high, and the gauge is back at ok, as drawn
        levels = ["ok"]
        for level in map(pressure, chart.history):
            if level != levels[-1]:
                levels.append(level)
        assert levels == ["ok", "warn", "high", "ok"]
        assert gauge.level == "ok" and not gauge.has_class("-high") and not gauge.has_class("-warn")
        # the ETA moves with the clock while no object finishes (30/73 at 64 s and at 95 s)
        assert "build 30/73 · ETA 1m38s" in text  # 24 objects in 55 s, 43 left
        app.clock = lambda: scenes.T0 + 95
        screen._tick()
        await pilot.pause()
        assert "build 30/73 · ETA 2m32s" in shown(app)  # 24 objects in 85 s, 43 left

        pane = screen.query_one(LogPane)
        assert screen.view.showing == "extensions.flash-attn.build"
        assert len(pane.lines) == 40 and pane.lines[-1].startswith("[39/73]")
        await pilot.press("slash", *"hdim70", "enter")
        assert [m.matches for m in seen.of(LogPane.Searched)] == [1]
        assert "search 'hdim70': 1 match(es)" in shown(app)

        await pilot.press("f")
        assert screen.has_class("-full") and not gauge.display
        await pilot.press("escape")
        assert not screen.has_class("-full")

        await pilot.press("left_square_bracket")  # the action before: its own lines
        assert screen.view.showing == "extensions.flash-attn.prerequisites"
        assert pane.lines == []
        await pilot.press("left_square_bracket")
        assert screen.view.showing == "run"  # the whole run, as the console prints it
        assert any("Compile flash-attn 2.8.3" in line for line in pane.lines)


async def test_output_for_another_action_does_not_disturb_the_pane():
    app = WizardApp(dry_session("h200-ubuntu2404"), opening="wizard")
    async with app.run_test(size=(80, 24)) as pilot:
        await _running_build(app, pilot, scenes.build_running(), lines=5)
        screen = app.screen
        await pilot.press("left_square_bracket")
        app.feed(ev.Output(action="extensions.flash-attn.build", line="more"))
        app.feed.flush()
        await pilot.pause()
        assert screen.query_one(LogPane).lines == []  # pinned to the chosen action
        assert list(app.model.actions["extensions.flash-attn.build"].lines)[-1] == "more"


async def test_no_color_and_the_linux_console(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app = WizardApp(dry_session("h200-ubuntu2404"))
    async with app.run_test(size=(80, 24)):
        assert app.no_color
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("TERM", "linux")
    app = WizardApp(dry_session("h200-ubuntu2404"))
    async with app.run_test(size=(80, 24)) as pilot:
        assert app.glyphs.plain and app.has_class("-plain")
        assert "\u203a" not in shown(app) and "1 Machine  2 Driver  3 Toolkit" in shown(app)
        await pilot.press("enter")
        assert "+ already satisfied" in shown(app)


async def test_an_offline_stack_resolution_that_kept_the_venv_is_a_note_not_a_failure():
    """steps/apply/engine.py: no index reachable, the venv already satisfies the answers: the
    resolve action failed, the engine says so in a Notice and goes on, unlocked."""
    app = WizardApp(dry_session("h200-ubuntu2404"), opening="wizard")
    async with app.run_test(size=(120, 40)) as pilot:
        app.runs.show_run()
        await pilot.pause()
        for event in scenes.build_running()[:3]:
            app.feed(event)
        resolve = "venv.resolve-cu130"
        app.feed(
            ev.ActionStarted(step="venv", action=resolve, title="Resolve", command="uv", log="")
        )
        app.feed(
            ev.ActionFinished(step="venv", action=resolve, status="failed", exit_code=2, elapsed=1)
        )
        app.feed(
            ev.Notice(
                text="no index reachable; the venv already holds a torch and packages "
                "that satisfy the answers: kept as it is, unlocked",
                excuses=resolve,
            )
        )
        app.feed.flush()
        await wait_until(
            pilot, lambda: getattr(app.model.actions.get(resolve), "status", "") == "offline"
        )
        await pilot.pause()
        options = app.screen.query_one("#actions", OptionList)
        labels = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
        # titles, not ids, each on one row of the list with its mark
        assert "! Resolve (offline: venv unlocked)" in labels
        assert "· Compile flash-attn 2.8.3" in labels
        assert not any("extensions." in label or resolve in label for label in labels)
        width = options.scrollable_content_region.width
        assert all(len(label) <= width for label in labels), (width, labels)
        assert app.model.actions[resolve].status == "offline"
        assert app.model.steps["venv"] != "failed"
