"""SVG snapshots of every wizard screen at 80x24 and 120x40 (pytest-textual-snapshot).

Update after a deliberate change: pytest tests/tui/test_snapshots.py --snapshot-update, then
look at the SVGs under tests/tui/__snapshots__/ before committing them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.widgets import Input

from app.tui.app import WizardApp
from app.tui.session import Session
from app.tui.trail import jumps
from steps.core.rootfs import RootFS
from steps.formats import events as ev
from steps.formats.answers import load_answers
from steps.formats.facts import load_facts
from tests.fakemachine import FakeMachine
from tests.tui import scenes
from tests.tui.helpers import dry_session, machine, stack_resolved, wait_until

SIZES = {"80x24": (80, 24), "120x40": (120, 40)}
EXAMPLE = Path(__file__).resolve().parents[2] / "assets" / "answers.example.toml"


@pytest.fixture(autouse=True)
def _stable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The same pixels on every machine: colours on, fancy glyphs, fixed paths."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr("steps.planning.driver.ASSETS_DIR", Path("/opt/mlsetup/assets"))
    # the build's compiler wrapper and ninja shim are shown with their paths (a checkout in
    # CI lies elsewhere than here)
    tools = Path("/opt/mlsetup/assets/buildtools")
    monkeypatch.setattr("steps.building.buildtools.TOOLS", tools)
    monkeypatch.setattr("steps.building.buildtools.NVCC", tools / "nvcc")
    monkeypatch.setattr("steps.building.buildtools.NINJA_DIR", tools / "bin")
    monkeypatch.chdir(tmp_path)


def app_for(machine: str, answers: Path | None = None) -> WizardApp:
    app = WizardApp(dry_session(machine, answers), opening="wizard", plain=False)
    app.clock = lambda: scenes.T0 + 65
    return app


def press(*keys: str):
    async def run_before(pilot) -> None:
        for key in keys:  # one at a time: a key sent while a screen mounts may be lost
            await pilot.press(key)
            await pilot.pause()

    return run_before


def feed(events: list[ev.Event], lines: int = 0, action: str = "extensions.flash-attn.build"):
    async def run_before(pilot) -> None:
        app = pilot.app
        app.runs.show_run()
        await pilot.pause()
        for event in events[:9]:
            app.feed(event)
        for line in scenes.build_output(lines):
            app.feed(ev.Output(action=action, line=line))
        for event in events[9:]:
            app.feed(event)
        app.feed.flush()
        await pilot.pause(0.3)

    return run_before


REVIEW_KEY = str(len(jumps()))  # the last number key


def still(run_before):
    """The cursor does not blink in a snapshot: a blink mid-capture made summary-120x40 flaky."""

    async def steady(pilot) -> None:
        if run_before is not None:
            await run_before(pilot)
        await stack_resolved(pilot)  # the plan as uv's resolution left it, not before
        for screen in pilot.app.screen_stack:
            for box in screen.query(Input):
                box.cursor_blink = False
        await pilot.pause(0.5)  # a long screen (Review at 120x40) is still being painted

    return steady


def confirm_app(root: Path) -> WizardApp:
    """A real (not dry) session, so Apply asks first: the fresh H100 box's facts, an empty
    root at a fixed path (it is named on screen), Cancel never lets anything start."""
    session = Session(
        fs=RootFS(root),
        facts=load_facts(machine("fresh-h100x8-ubuntu2204")),
        answers=load_answers(EXAMPLE),
        dry_run=False,
        is_root=True,
    )
    app = WizardApp(session, opening="wizard", plain=False)
    app.clock = lambda: scenes.T0 + 65
    return app


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize(
    "screen",
    [
        "machine",
        "driver",
        "toolkit",
        "venv",
        "extensions",
        "review",
        "run-build",
        "run-failed",
        "reboot",
        "summary",
        "help",
        "resume",
        "confirm",
    ],
)
def test_screen(snap_compare, screen: str, size: str, tmp_path: Path) -> None:
    run_before = None
    if screen == "machine":
        app = app_for("fresh-h100x8-ubuntu2204")
    elif screen == "driver":
        app = app_for("fresh-h100x8-ubuntu2204")
        run_before = press("enter")
    elif screen in jumps()[1:]:
        app = app_for("rtx-pro-6000-ubuntu2404", EXAMPLE)
        # the number key that jumps there (five Enters in one press lost one at 120x40 under
        # load, and review-120x40 was recorded on Extensions); then wait for that screen
        jump = press(str(jumps().index(screen) + 1))

        async def run_before(pilot, step: str = screen) -> None:
            await jump(pilot)
            await wait_until(pilot, lambda: getattr(pilot.app.screen, "STEP", "") == step)
            await wait_until(pilot, lambda: pilot.app.screen.is_mounted)
    elif screen == "run-build":
        app = app_for("rtx-pro-6000-ubuntu2404", EXAMPLE)
        run_before = feed(scenes.build_running(), lines=60)
    elif screen == "run-failed":
        app = app_for("rtx-pro-6000-ubuntu2404", EXAMPLE)
        run_before = feed(scenes.build_failed(), lines=30)
    elif screen == "reboot":
        app = app_for("fresh-h100x8-ubuntu2204")
        app.session.dry_run = False  # the question only comes after a real driver install
        app.session.is_root = True  # as `sudo mlsetup` shows it, whoever runs the tests
        app.model.dry_run = False
        run_before = feed(scenes.reboot_paused(), action="driver.install")
    elif screen == "summary":
        app = app_for("rtx-pro-6000-ubuntu2404", EXAMPLE)

        async def run_before(pilot) -> None:
            # a Continue on each screen to Review, then the dry run's confirmation: End reads it
            # all, Tab, Enter
            await press(*["enter"] * len(jumps()))(pilot)
            await wait_until(pilot, lambda: type(pilot.app.screen).__name__ == "ConfirmScreen")
            await press("end", "tab", "enter")(pilot)
            await wait_until(pilot, lambda: pilot.app.model.finished is not None)
            await pilot.press("enter")
            await pilot.pause(0.3)

    elif screen == "help":
        app = app_for("rtx-pro-6000-ubuntu2404")
        run_before = press("question_mark")
    elif screen == "confirm":
        app = confirm_app(Path("/nonexistent/mlsetup-snapshot-root"))

        async def run_before(pilot) -> None:
            await pilot.press(REVIEW_KEY)
            await wait_until(pilot, lambda: type(pilot.app.screen).__name__ == "ReviewScreen")
            # Review behind the question shows the resolution's outcome, not whichever of
            # before and after it a loaded machine happened to draw
            await stack_resolved(pilot)
            await pilot.press("enter")
            await wait_until(pilot, lambda: type(pilot.app.screen).__name__ == "ConfirmScreen")

    else:
        app = resume_app(tmp_path)
    assert snap_compare(app, terminal_size=SIZES[size], run_before=still(run_before))


def test_review_at_60x20(snap_compare) -> None:
    """The narrowest screen an operator may have: the key bar on one line, the whole trail."""
    app = app_for("rtx-pro-6000-ubuntu2404", EXAMPLE)

    async def run_before(pilot) -> None:
        await press(REVIEW_KEY)(pilot)
        await wait_until(pilot, lambda: getattr(pilot.app.screen, "STEP", "") == "review")

    assert snap_compare(app, terminal_size=(60, 20), run_before=still(run_before))


def resume_app(tmp_path: Path) -> WizardApp:
    """A machine that rebooted after the driver install; the saved state says what was done."""
    root = tmp_path / "root"
    machine = FakeMachine(root)
    machine.gpu("0000:00:06.0", "0x2335")
    machine.driver_loaded("580.105.08")
    done = [
        "driver.apt-update",
        "driver.prerequisites",
        "nvidia-repo.keyring-download",
        "nvidia-repo.keyring-install",
        "nvidia-repo.update",
        "driver.blacklist-nouveau",
        "driver.initramfs",
        "driver.pin",
        "driver.install",
    ]
    pending = ["toolkit.install-13.0", "venv.create", "venv.torch", "venv.packages"]
    plan = {
        "schema": "mlsetup.plan/1",
        "warnings": [],
        "steps": [
            {
                "name": "driver",
                "status": "pending",
                "reason": "",
                "actions": [{"id": a} for a in done],
            },
            {
                "name": "toolkit",
                "status": "pending",
                "reason": "",
                "actions": [{"id": a} for a in pending],
            },
        ],
    }
    state = {
        "schema": "mlsetup.state/1",
        "run_id": "20250101-000000-1",
        "phase": "reboot",
        "answers_toml": "version = 1\n",
        "answers_path": None,
        "plan": plan,
        "actions": {
            a: {"step": "driver", "status": "done", "started": 1.0, "ended": 2.0, "log": "x"}
            for a in done
        },
        "reboot": {"action": "driver.install", "boot_id": "before", "driver_branch": 580},
    }
    path = root / "var/lib/mlsetup/state.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(state))
    session = Session.load(root=root)
    session.is_root = True  # as `sudo mlsetup` shows it, whoever runs the tests
    app = WizardApp(session, plain=False)
    assert app.opening == "resume"
    return app
