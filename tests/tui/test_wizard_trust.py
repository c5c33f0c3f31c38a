"""What an operator must be able to trust (issue 13): screens current after Back, jumps by key,
Apply asks first with Cancel focused, an error screen instead of a traceback, visible focus
and no dead tab stop, help per screen, ASCII on the Linux console, the whole final log line."""

from __future__ import annotations

import re

from textual.widget import Widget
from textual.widgets import Button, Input, Log, OptionList, Select

from app.tui.app import WizardApp
from app.tui.screens.modals import ConfirmScreen, ErrorScreen, HelpScreen
from app.tui.screens.run import RunScreen
from app.tui.session import Session
from app.tui.trail import jumps
from app.tui.widgets.fields import ChoiceField
from app.tui.widgets.logpane import LogPane
from tests.tui.helpers import (
    apply_confirmed,
    dry_session,
    shown,
    wait_until,
    walk_to_review,
)

RTX = "rtx-pro-6000-ubuntu2404"


def field(app: WizardApp, key: str) -> ChoiceField:
    return next(f for f in app.screen.query(ChoiceField) if f.spec.key == key)


async def test_back_shows_every_step_recomputed_from_the_answers():
    app = WizardApp(dry_session(RTX))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("enter", "enter")
        assert "Wanted: 13.0; torch is built with CUDA 13.0." in shown(app)
        await pilot.press("enter")  # Venv: torch's cu128 build
        field(app, "torch.cuda").enter("cu128")
        await pilot.pause()
        assert app.session.answers.torch.cuda == "cu128"
        await pilot.press("escape")  # Toolkit again: 12.8 now, and its commands
        await pilot.pause()
        assert app.screen.name == "toolkit"
        text = shown(app)
        assert "Wanted: 12.8; torch is built with CUDA 12.8." in text
        assert "cuda-toolkit-12-8" in text and "cuda-toolkit-13-0" not in text
        await pilot.press("escape")
        await pilot.pause()
        assert "to run torch's CUDA 12.8." in shown(app)


async def test_number_keys_jump_to_any_step_and_back_walks_them_in_order():
    app = WizardApp(dry_session(RTX))
    async with app.run_test(size=(80, 24)) as pilot:
        assert "1 Machine" in shown(app) and "6 Review" in shown(app)
        await pilot.press("5")
        await pilot.pause()
        assert app.screen.name == "extensions"
        await pilot.press("6")
        await pilot.pause()
        assert type(app.screen).__name__ == "ReviewScreen"
        await pilot.press("2")
        await pilot.pause()
        assert app.screen.name == "driver"
        await pilot.press("escape")
        await pilot.pause()
        assert type(app.screen).__name__ == "MachineScreen"
        # Esc is offered only where it goes somewhere
        assert not app.screen.check_action("back", ())
        await pilot.press("3")
        await pilot.pause()
        assert app.screen.name == "toolkit" and app.screen.check_action("back", ())


async def test_an_answer_the_planner_cannot_use_is_refused_in_place_and_the_choices_kept():
    app = WizardApp(dry_session(RTX))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("4")
        await pilot.pause()
        field(app, "venv.path").enter("/srv/env")
        packages = field(app, "torch.packages")
        packages.enter("foo==")
        await pilot.pause()
        assert packages.has_class("-invalid")
        assert 'torch.packages[0] = "foo==": allowed: a PEP 508 requirement' in shown(app)
        assert app.session.answers.torch.packages == []
        assert app.session.answers.venv.path == "/srv/env"
        assert not isinstance(app.screen, ErrorScreen)


async def test_an_exception_in_a_worker_lands_on_the_error_screen_with_the_log_and_next_command(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    app = WizardApp(dry_session(RTX))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2")
        await pilot.pause()
        field(app, "driver.branch").enter("590")
        await pilot.pause()

        def broken() -> None:
            raise RuntimeError("the probe fell over")

        app.run_worker(broken, thread=True)
        await wait_until(pilot, lambda: isinstance(app.screen, ErrorScreen), what="the error")
        text = shown(app)
        assert "RuntimeError: the probe fell over" in text
        [log] = tmp_path.glob("mlsetup/wizard-error-*.log")
        [saved] = tmp_path.glob("mlsetup/wizard-answers-*.toml")
        assert f"Traceback: {log}" in text and "the probe fell over" in log.read_text()
        assert "mlsetup --dry-run --facts " in text and f"--answers {saved}" in text
        assert 'branch = "590"' in saved.read_text()
        assert "Traceback (most recent call last)" not in text
        await pilot.press("enter")  # Back to the wizard, rebuilt from the kept answers
        await pilot.pause()
        assert app.screen.name == "driver" and field(app, "driver.branch").value == "590"
    assert app.return_code in (None, 0)


def real_session(tmp_path) -> Session:
    session = Session.load(root=tmp_path, dry_run=False)
    session.is_root = True  # as under sudo; Cancel never lets it start
    return session


async def test_apply_asks_first_and_cancel_is_the_default(tmp_path):
    app = WizardApp(real_session(tmp_path), opening="wizard")
    async with app.run_test(size=(80, 24)) as pilot:
        # a Continue on each screen to Review, and Apply: the question, no run
        await pilot.press(*["enter"] * len(jumps()))
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert app.focused is not None and app.focused.id == "cancel"
        text = shown(app)
        assert "Apply" in text and "actions" in text and "venv" in text.lower()
        await pilot.press("enter")  # the seventh Enter: Cancel
        await pilot.pause()
        assert type(app.screen).__name__ == "ReviewScreen"
        await pilot.press("enter", "escape")
        await pilot.pause()
        assert type(app.screen).__name__ == "ReviewScreen"
    assert not (tmp_path / "var/lib/mlsetup/answers.toml").exists()  # no engine was given them


def _looks(widget: Widget) -> list:
    """How the screen draws a widget's cells, colour left out (what NO_COLOR and a mono
    console keep): text and style of each segment, border included."""
    region = widget.region.grow((1, 1, 1, 1)).intersection(widget.screen.region)
    strips = widget.screen._compositor.render_strips()  # the composited screen, as shown
    out = []
    for y in range(region.y, region.bottom):
        for seg in strips[y].crop(region.x, region.right):
            out.append((seg.text, seg.style.without_color if seg.style else None))
    return out


async def test_every_tab_stop_is_a_control_and_its_focus_is_visible_without_colour(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app = WizardApp(dry_session(RTX))
    async with app.run_test(size=(120, 40)) as pilot:
        for key in ("2", "4", "5", "6"):
            await pilot.press(key)
            await pilot.pause()
            chain = app.screen.focus_chain
            assert chain, key
            for widget in chain:
                assert isinstance(widget, (Button, Input, Select, Log, OptionList)), widget
                assert widget.region.area > 0, f"{widget} is a tab stop nobody can see"
            for widget in chain:
                widget.focus()
                await pilot.pause()
                focused = _looks(widget)
                app.set_focus(None)
                await pilot.pause()
                assert _looks(widget) != focused, f"{widget}: focus not visible without colour"


async def test_each_screen_has_its_own_help_from_what_it_decides():
    app = WizardApp(dry_session(RTX))
    async with app.run_test(size=(80, 24)) as pilot:
        texts = {}
        for key in ("1", "2", "3", "4", "5", "6"):
            await pilot.press(key)
            await pilot.pause()
            await pilot.press("f1")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            texts[key] = shown(app)
            await pilot.press("question_mark")
            await pilot.pause()
            assert not isinstance(app.screen, HelpScreen)
        assert len(set(texts.values())) == 6
        assert "Wanted here: 13.0" in texts["3"]
        assert "branch 580 or newer" in texts["2"] or "branch 590" in texts["2"]
        assert "plan pane" not in "".join(texts.values())


NON_ASCII = re.compile(r"[^\x00-\x7f]")


async def test_term_linux_draws_only_ascii_on_every_screen(monkeypatch):
    monkeypatch.setenv("TERM", "linux")
    app = WizardApp(dry_session(RTX))
    assert app.glyphs.plain

    def screen_chars() -> set[str]:
        svg = app.export_screenshot()
        body = svg[svg.index("<g") :]  # the drawn cells, after the stylesheet
        return set(NON_ASCII.findall(body.replace("&#160;", " ")))

    async with app.run_test(size=(80, 24)) as pilot:
        for key in ("1", "2", "3", "4", "5", "6"):
            await pilot.press(key)
            await pilot.pause()
            assert screen_chars() == set(), (key, screen_chars())
        await pilot.press("5")
        await pilot.pause()
        await pilot.click("#f-build-max_jobs")  # a long screen: its scrollbar is drawn too
        app.screen.query_one("#add-name", Select).action_show_overlay()
        await pilot.pause()
        assert screen_chars() == set()
        await pilot.press("escape", "6")
        await pilot.pause()
        await pilot.press("enter")  # the dry run's confirmation, in ASCII too
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.pause()
        assert screen_chars() == set()
        await pilot.press("escape")
        await apply_confirmed(pilot)
        await wait_until(pilot, lambda: app.model.finished is not None, what="the dry run")
        await pilot.pause()
        assert screen_chars() == set()
        await pilot.press("enter")
        await pilot.pause(0.5)
        assert screen_chars() == set()


async def test_the_final_log_line_is_whole_at_80_columns():
    app = WizardApp(dry_session(RTX))
    async with app.run_test(size=(80, 24)) as pilot:
        await walk_to_review(pilot)
        await apply_confirmed(pilot)
        await wait_until(pilot, lambda: app.model.finished is not None, what="the dry run")
        await pilot.pause(0.3)
        assert isinstance(app.screen, RunScreen)
        view = app.screen.query_one(LogPane).view
        width = view.scrollable_content_region.width
        rows = list(view.lines)
        assert all(len(r) <= width for r in rows), max(rows, key=len)
        tail = " ".join(r.strip() for r in rows[-4:])
        assert "use the venv with: source /home/ml/ml-env/bin/activate" in tail
        assert view.max_scroll_x == 0  # nothing to scroll sideways to


async def test_refusals_are_shown_where_decided_and_in_the_summary_and_nothing_leaks_none():
    app = WizardApp(dry_session("gpu-less-debian12"))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4")
        await pilot.pause()
        cuda = field(app, "torch.cuda")
        cuda.enter("cu128")  # a CUDA torch on a box without a GPU: refused, and why
        await pilot.pause()
        assert cuda.has_class("-invalid") and app.session.answers.torch.cuda == "auto"
        assert "no NVIDIA GPU on this machine" in shown(app)
        cuda.enter("auto")
        await pilot.pause()
        await pilot.press("3")
        await pilot.pause()
        field(app, "toolkit.versions").enter("")
        await pilot.pause()
        # an empty list is refused where it is typed, saying what is allowed
        assert 'toolkit.versions = []: allowed: "auto" or a list of CUDA releases' in shown(app)
        assert "Wanted: none; torch is the CPU build." in shown(app)
        assert "CUDA None" not in shown(app)
        await pilot.press("escape")  # the refused edit is cancelled; the focus may move on
        await pilot.pause()
        await pilot.press("tab", "5")
        await pilot.pause()
        await pilot.press("a", *"2.8.3", "enter")
        await pilot.pause()
        text = shown(app)
        assert "flash-attn 2.8.3 skipped: torch is the CPU build" in text  # on its own screen
        await pilot.press("6")
        await pilot.pause()
        await apply_confirmed(pilot)
        await wait_until(pilot, lambda: app.model.finished is not None, what="the dry run")
        await pilot.press("enter")
        await pilot.pause()
        text = shown(app)
        assert "nothing was changed on this machine" in text
        assert "flash-attn 2.8.3 skipped: torch is the CPU build" in text  # and in the Summary
        assert "None" not in text


async def test_secure_boot_summary_says_mok_enrolment_waits_at_the_reboot():
    from app.tui.controllers import SummaryController
    from steps.formats import events as ev

    app = WizardApp(dry_session("fresh-h100x8-ubuntu2204"))
    model = app.model
    model.dry_run = False
    model.handle(ev.Finished(code=10, result="reboot", summary="paused for a reboot"))
    todo = "\n".join(SummaryController(app.session, model).todo())
    assert "sudo mokutil --import /var/lib/shim-signed/mok/MOK.der and" in todo  # Ubuntu key
    assert "Enroll MOK" in todo and "{" not in todo
    assert "sudo mlsetup" in todo and "Resume screen" in todo
