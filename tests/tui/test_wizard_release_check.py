"""An extension release typed into its field is asked of the index in a worker, not on the UI
thread: while an index that answers slowly (the recorded PyPI copy holding flash-attn's page,
tests/recorded_pypi.py) has not answered, the field says so and keys work; the index's refusal
then lands on the field in `mlsetup plan`'s words and the version is set back; a check a newer
edit superseded (another version, Esc) lands nowhere."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from app.tui.app import WizardApp
from steps.formats.answers import load_answers
from tests.recorded_pypi import ProxyTrap, RecordedIndex
from tests.test_answers_fit import FLASH_ATTN, PREFIX, plan_refusal
from tests.tui.helpers import (
    Recorder,
    dry_session,
    machine,
    shown,
    stack_resolved,
    wait_until,
)
from tests.tui.test_wizard_80x24 import RTX, box, field, goto


@pytest.fixture
def pypi(monkeypatch) -> Iterator[RecordedIndex]:
    """uv's only index is the recorded copy; any other request goes to a proxy that refuses."""
    with RecordedIndex() as index, ProxyTrap() as trap:
        for name, value in {"UV_OFFLINE": "0", "UV_DEFAULT_INDEX": index.url, **trap.env()}.items():
            monkeypatch.setenv(name, value)
        yield index
        assert trap.requests == [], "uv fetched from outside the index it was given"


def flash_attn(tmp_path: Path, version: str = "2.8.3") -> Path:
    path = tmp_path / f"flash-attn-{version}.toml"
    path.write_text("version = 1\n" + FLASH_ATTN.replace("2.8.3", version))
    return path


def note(app: WizardApp, key: str) -> str:
    return " ".join(str(field(app, key).query_one(".field-error", Static).visual).split())


def checked(seen: Recorder, asked: str) -> bool:
    """The worker that asked the index about `asked` ("flash-attn 9.9.9") has returned."""
    return any(
        m.worker.name == f"check {asked}" and m.state == WorkerState.SUCCESS
        for m in seen.of(Worker.StateChanged)
    )


VERSION = "extensions[0].version"


async def test_a_slow_index_holds_only_the_field_and_its_refusal_lands_there(pypi, tmp_path):
    gate = pypi.hold("flash-attn")  # its page never cached: every answer can be held
    gate.set()  # open while `mlsetup plan` runs and the wizard's stack is resolved
    wrong = flash_attn(tmp_path, "9.9.9")
    cli = plan_refusal(machine(RTX), load_answers(wrong), tmp_path)
    app = WizardApp(dry_session(RTX, flash_attn(tmp_path)))
    async with app.run_test(size=(80, 24)) as pilot:
        await stack_resolved(pilot)
        gate.clear()  # from now on the index answers about flash-attn when the test says
        await goto(pilot, "extensions")
        field(app, VERSION).enter("9.9.9")
        await wait_until(pilot, lambda: bool(pypi.waiting), what="uv asking the index")
        assert note(app, VERSION) == f"checking flash-attn 9.9.9 on {pypi.url}\u2026"
        assert "checking flash-attn 9.9.9 on" in shown(app)  # in sight, not only set

        # meanwhile the wizard takes keys: a RAM limit typed and entered, Tab, Continue
        box(app, "build.memory_limit").focus()
        await pilot.press(*"32GiB", "enter", "tab")
        assert app.session.answers.build.memory_limit == "32GiB"
        app.screen.query_one("#next").focus()
        await pilot.press("enter")
        await wait_until(pilot, lambda: getattr(app.screen, "STEP", "") == "review", what="Review")
        assert app.screen.query_one("#next").disabled  # the dry run waits for the answer
        assert "checking flash-attn 9.9.9" in shown(app) and "Apply waits" in shown(app)
        assert pypi.waiting, "the index answered before the keys were taken"

        gate.set()  # the index's refusal comes while Review is in front
        await wait_until(pilot, lambda: app.session.release_check() is None, what="the answer")
        await pilot.pause()
        assert app.session.answers.extensions[0].version == "2.8.3"
        assert app.session.answers.build.memory_limit == "32GiB"  # the later edit is kept
        assert app.screen.query_one("#next").disabled  # until its field has said it
        assert cli.removeprefix(PREFIX) in " ".join(shown(app).split())

        await goto(pilot, "extensions")  # where it lands: on the field, what was typed kept
        version = field(app, VERSION)
        await wait_until(pilot, lambda: version.refused, what="the refusal on the field")
        assert PREFIX + " ".join(version.refusal.split()) == cli
        assert box(app, VERSION).value == "9.9.9" and app.focused is box(app, VERSION)
        assert app.session.why_not_apply() is None  # the answers hold what the index has


async def test_a_check_a_newer_edit_superseded_does_not_land(pypi, tmp_path):
    seen = Recorder()
    gate = pypi.hold("flash-attn")
    gate.set()
    app = WizardApp(dry_session(RTX, flash_attn(tmp_path)))
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        await stack_resolved(pilot)
        gate.clear()
        await goto(pilot, "extensions")
        version = field(app, VERSION)
        version.enter("9.9.9")  # the index lacks it: its refusal must not land ...
        await wait_until(pilot, lambda: bool(pypi.waiting), what="uv asking about 9.9.9")
        version.enter("2.8.3.post2")  # ... on this newer value, asked about next
        await wait_until(pilot, lambda: "2.8.3.post2" in note(app, VERSION), what="asking again")
        gate.set()
        await wait_until(
            pilot,
            lambda: checked(seen, "flash-attn 9.9.9") and checked(seen, "flash-attn 2.8.3.post2"),
            what="both answers",
        )
        await pilot.pause()
        assert not version.refused and note(app, VERSION) == ""
        assert app.session.answers.extensions[0].version == "2.8.3.post2"
        assert box(app, VERSION).value == "2.8.3.post2"

        # 9.9.9 again: the index's answer is known, refused at once
        version.enter("9.9.9")
        await wait_until(pilot, lambda: version.refused, what="9.9.9 refused again")
        assert app.session.answers.extensions[0].version == "2.8.3.post2"

        # Esc while the index is asked: the value before, and that answer lands nowhere
        gate.clear()
        version.enter("2.8.4")
        await wait_until(pilot, lambda: "2.8.4" in note(app, VERSION), what="asking about 2.8.4")
        box(app, VERSION).focus()
        await pilot.press("escape")
        await wait_until(pilot, lambda: note(app, VERSION) == "", what="Esc")
        assert app.session.answers.extensions[0].version == "2.8.3.post2"
        assert box(app, VERSION).value == "2.8.3.post2"
        gate.set()
        await wait_until(pilot, lambda: checked(seen, "flash-attn 2.8.4"), what="2.8.4's answer")
        await pilot.pause()
        assert not version.refused and app.session.answers.extensions[0].version == "2.8.3.post2"
        assert getattr(app.screen, "STEP", "") == "extensions"
