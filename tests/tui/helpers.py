"""Helpers for the wizard's Pilot tests."""

from __future__ import annotations

import asyncio
import atexit
import functools
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from textual.message import Message
from textual.pilot import Pilot
from textual.widgets import Input, Log, Static

from app.tui.app import WizardApp
from app.tui.screens.run import RunScreen
from app.tui.session import Session
from app.tui.trail import jumps
from tests.common import MACHINES


def machine(name: str) -> Path:
    return MACHINES / f"{name}.json"


@functools.cache
def empty_root() -> Path:
    """A machine root with nothing in it, for sessions of a recorded machine: what the wizard
    reads of the machine's own runs (/var/lib/mlsetup, /var/log/mlsetup: a real run's, and
    root-only) is then this empty tree's, whoever runs the tests and whatever ran here. One
    per test process, removed when that process (a pytest session, an xdist worker) ends."""
    root = Path(tempfile.mkdtemp(prefix="mlsetup-empty-root-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def dry_session(facts: str, answers: Path | None = None, **kw) -> Session:
    kw.setdefault("root", empty_root())
    return Session.load(facts=machine(facts), answers=answers, dry_run=True, **kw)


def shown(app: WizardApp) -> str:
    """The text of every visible Static (labels, sections, plan lines) and Input on screen."""
    parts = []
    for widget in app.screen.query("Static, Input, Log"):
        if not widget.display or not all(a.display for a in widget.ancestors_with_self[:-2]):
            continue
        if isinstance(widget, Input):
            parts.append(widget.value)
        elif isinstance(widget, Log):
            parts.extend(widget.lines)
        elif isinstance(widget, Static):
            parts.append(str(widget.visual))
    return "\n".join(parts)


class Recorder:
    """The messages posted while the app ran (App.run_test(message_hook=...)), each once: the
    hook sees a message again at each node it bubbles to."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._seen: set[int] = set()  # ids of recorded messages (kept alive by the list)

    def __call__(self, message: Message) -> None:
        if id(message) not in self._seen:
            self._seen.add(id(message))
            self.messages.append(message)

    def of(self, kind: type) -> list:
        return [m for m in self.messages if isinstance(m, kind)]


async def show_run(pilot: Pilot) -> None:
    """The Run screen, pushed from inside the app as Apply pushes it: a screen pushed from the
    test's own task would run its message pumps outside `run_test(message_hook=...)`."""
    app = pilot.app
    assert isinstance(app, WizardApp)
    app.call_later(app.runs.show_run)
    await wait_until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.is_mounted)


async def wait_until(
    pilot: Pilot, predicate: Callable[[], bool], timeout: float = 30.0, what: str = ""
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        await asyncio.sleep(0.05)
        await pilot.pause()


async def stack_resolved(pilot: Pilot) -> None:
    """The wizard's resolution of the answers' stack (a worker running uv, after the one
    asking the index about an extension release an edit named) has returned and the screen in
    front shows its plan."""
    app = pilot.app
    await wait_until(
        pilot,
        lambda: all(w.is_finished for w in app.workers if w.group in ("releases", "stack")),
        what="the stack's resolution",
    )
    await pilot.pause()


async def walk_to_review(pilot: Pilot) -> None:
    """Machine, each step (app.tui.trail), Review, pressing Enter each time."""
    app = pilot.app
    for expected in ["MachineScreen"] + ["StepScreen"] * (len(jumps()) - 2):
        assert type(app.screen).__name__ == expected, type(app.screen).__name__
        await pilot.press("enter")
        await pilot.pause()
    assert type(app.screen).__name__ == "ReviewScreen"


async def apply_confirmed(pilot: Pilot) -> str:
    """Review's Apply (or Start the dry run), then the confirmation: Cancel has the focus;
    End reads to the end of the list (Apply waits until then), Tab and Enter apply. Returns
    the confirmation's text."""
    await pilot.press("enter")
    app = pilot.app
    await wait_until(pilot, lambda: type(app.screen).__name__ == "ConfirmScreen", what="Apply?")
    await pilot.pause()
    assert app.focused is not None and app.focused.id == "cancel"
    text = shown(app)
    await pilot.press("end")
    await wait_until(pilot, lambda: getattr(app.screen, "seen_all", False), what="Apply let go")
    await pilot.press("tab", "enter")
    await pilot.pause()
    return text
