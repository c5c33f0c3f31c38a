"""The log pane follows the tail while output arrives (lines longer than the pane wrap, more
lines than its height), stays put once the operator scrolls up, follows again on End; a Run
screen attached to a running build ends at the tail of what it replays."""

from __future__ import annotations

from textual.geometry import Size

from app.tui.app import WizardApp
from app.tui.screens.run import RunScreen
from app.tui.widgets.logpane import LogPane
from steps.formats import events as ev
from tests.tui import scenes
from tests.tui.helpers import dry_session, wait_until

BUILD = "extensions.flash-attn.build"


def _lines(start: int, n: int) -> list[str]:
    long = " /var/cache/mlsetup/build/flash-attn-2.8.3/src/build/temp.linux-x86_64-cpython-312"
    return [f"line {i}" + (long * 2 if i % 3 == 0 else "") for i in range(start, start + n)]


def _at_tail(pane: LogPane) -> bool:
    view = pane.view
    return view.max_scroll_y > 0 and view.scroll_offset.y == view.max_scroll_y


async def _feed(app: WizardApp, pilot, lines: list[str], batch: int = 7) -> None:
    for i in range(0, len(lines), batch):
        for line in lines[i : i + batch]:
            app.feed(ev.Output(action=BUILD, line=line))
        app.feed.flush()
        await pilot.pause()


async def _run_screen(app: WizardApp, pilot) -> LogPane:
    app.runs.show_run()
    await pilot.pause()
    for event in scenes.build_started():
        app.feed(event)
    app.feed.flush()
    await wait_until(pilot, lambda: isinstance(app.screen, RunScreen))
    await pilot.pause()
    return app.screen.query_one(LogPane)


async def test_the_pane_follows_the_tail_until_the_operator_scrolls_up():
    app = WizardApp(dry_session("h200-ubuntu2404"), opening="wizard")
    async with app.run_test(size=(120, 40)) as pilot:
        pane = await _run_screen(app, pilot)
        assert app.screen.view.showing == BUILD
        await _feed(app, pilot, _lines(0, 150))
        view = pane.view
        assert view.virtual_size.height > view.scrollable_content_region.height
        assert _at_tail(pane), (view.scroll_offset.y, view.max_scroll_y)
        assert view.lines[-1].startswith("line 149")

        # the gauge appears and the pane gets shorter: still at the tail
        for event in scenes.build_running()[len(scenes.build_started()) :]:
            app.feed(event)
        await _feed(app, pilot, _lines(150, 20))
        assert _at_tail(pane), (view.scroll_offset.y, view.max_scroll_y)

        view.focus()
        await pilot.press("pageup")
        await pilot.pause()
        held = view.scroll_offset.y
        assert held < view.max_scroll_y
        await _feed(app, pilot, _lines(170, 40))
        assert view.scroll_offset.y == held  # the operator reads; new lines do not pull him down

        await pilot.press("end")
        await pilot.pause()
        assert _at_tail(pane)
        await _feed(app, pilot, _lines(210, 30))
        assert _at_tail(pane) and view.lines[-1].startswith("line 239")


async def test_attach_replays_the_stream_and_ends_at_the_tail():
    app = WizardApp(dry_session("h200-ubuntu2404"), opening="attach")
    async with app.run_test(size=(80, 24)) as pilot:
        for event in scenes.build_started():
            app.feed(event)
        for line in _lines(0, 300):
            app.feed(ev.Output(action=BUILD, line=line))
        for event in scenes.build_running()[len(scenes.build_started()) :]:
            app.feed(event)
        app.feed.flush()
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen))
        await pilot.pause(0.3)
        pane = app.screen.query_one(LogPane)
        assert pane.lines and pane.lines[-1].startswith("line 299")
        assert _at_tail(pane), (pane.view.scroll_offset.y, pane.view.max_scroll_y)
        await _feed(app, pilot, _lines(300, 30))
        assert _at_tail(pane), (pane.view.scroll_offset.y, pane.view.max_scroll_y)


async def test_a_taller_pane_made_shorter_before_its_resize_is_handled_keeps_following():
    """The H200 Run screen stuck at the first lines of a flash-attn build: the terminal grew
    (tests/device/wizard_screens.py alternates 80x24 and 120x40), the layout clamped the
    view's offset to the new, smaller end, and the pane got a row shorter again (the gauge's
    throttle line re-wrapping) in a second layout before the view handled its Resize, as a
    busy machine has it. The offset was then above the end and below where following had
    left it in the shorter pane, and no later line was followed. The two layouts are run
    back to back here (a terminal made taller, then a row shorter)."""
    app = WizardApp(dry_session("h200-ubuntu2404"), opening="attach")
    async with app.run_test(size=(120, 30)) as pilot:
        for event in scenes.build_running():
            app.feed(event)
        app.feed.flush()
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen))
        pane = app.screen.query_one(LogPane)
        await _feed(app, pilot, _lines(0, 150))
        view = pane.view
        assert _at_tail(pane), (view.scroll_offset.y, view.max_scroll_y)
        short = view.size.height

        screen = app.screen
        screen._refresh_layout(Size(120, 40))  # the view's Resize is queued, not handled yet
        assert view.size.height > short and view.scroll_offset.y == view.max_scroll_y
        screen._refresh_layout(Size(120, 39))
        assert view.scroll_offset.y == view.max_scroll_y - 1
        await pilot.resize_terminal(120, 39)  # the terminal is that size; the Resizes handled
        await pilot.pause()

        await _feed(app, pilot, _lines(150, 30))
        assert _at_tail(pane), (view.scroll_offset.y, view.max_scroll_y, view.tail_y)
        assert view.lines[-1].startswith("line 179")
