"""The wizard's launch (issue 34): its first screen is drawn before the machine is probed and
the answers planned, and to draw it the wizard imports none of what that takes (the models,
the tables, the planners, the stack's resolution, the probe's libraries)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from dataclasses import dataclass, field

from textual.widgets import Button

from app.tui.app import WizardApp
from app.tui.launch import Launch
from app.tui.screens.machine import MachineScreen
from app.tui.session import Session
from steps.core.errors import InputError
from tests.common import REPO
from tests.tui.helpers import empty_root, machine, shown, wait_until

RTX = "rtx-pro-6000-ubuntu2404"
# what the first screen must not wait for: imported, they cost seconds of CPU on a loaded box
NOT_FOR_THE_FIRST_SCREEN = (
    "app.tui.session",
    "app.tui.running",
    "steps.planning.planner",
    "steps.apply.engine",
    "steps.known.knowledge",
    "steps.probing.probe",
    "steps.stack.resolve",
    "steps.formats.answers",
    "steps.formats.facts",
    "pydantic",
    "pynvml",
    "psutil",
    "distro",
)


def test_the_first_screen_imports_no_planner_probe_or_model():
    code = "import json, sys\nimport app.cli, app.tui.app\nprint(json.dumps(sorted(sys.modules)))\n"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert run.returncode == 0, run.stderr
    early = set(json.loads(run.stdout)) & set(NOT_FOR_THE_FIRST_SCREEN)
    assert not early, sorted(early)


@dataclass(frozen=True)
class HeldLaunch(Launch):
    """The launch whose loading (the probe, the answers, the plan) waits until the test lets
    it go: the first screen must be drawn meanwhile."""

    release: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)

    def load(self) -> Session:
        self.started.set()
        assert self.release.wait(60), "the test never let the probe finish"
        return super().load()


async def test_the_first_screen_is_drawn_while_the_probe_runs():
    launch = HeldLaunch(empty_root(), None, machine(RTX), dry_run=True)
    app = WizardApp(launch)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_until(pilot, launch.started.is_set, what="the probe's start")
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, MachineScreen) and not app.loaded
            text = shown(app)
            assert "1 Machine" in text and "probing" in text, text
            keys = screen.query_one("#keys").text  # drawn, with only the keys that work
            assert "help" in keys and "save" not in keys and "step" not in keys, keys
            continue_button = screen.query_one("#next", Button)
            assert continue_button.disabled
            # what would need the session does nothing yet: Continue, a jump, save
            await pilot.press("enter", "3", "ctrl+s")
            await pilot.pause()
            assert app.screen is screen and not app.loaded

            launch.release.set()
            await wait_until(pilot, lambda: "RTX PRO 6000" in shown(app), what="the facts")
            assert "probing" not in shown(app)
            assert app.focused is not None and app.focused.id == "next"
            await pilot.press("enter")
            await wait_until(pilot, lambda: getattr(app.screen, "STEP", "") == "driver")
    finally:
        launch.release.set()  # never leave the worker thread waiting


async def test_answers_refused_while_loading_end_the_wizard_with_their_reason(tmp_path):
    """As before the first screen was drawn early: exit 2 (run_wizard raises the refusal for
    the CLI to print), nothing opened."""
    answers = tmp_path / "answers.toml"
    answers.write_text('version = 1\n[venv]\npython = "2.7"\n')
    app = WizardApp(Launch(empty_root(), answers, machine(RTX), dry_run=True))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.refusal is not None, what="the refusal")
    assert isinstance(app.refusal, InputError)
    assert "venv.python" in str(app.refusal), app.refusal
    assert not app.loaded
