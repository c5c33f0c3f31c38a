"""The Venv screen shows where uv's resolution stands (issue 34): resolving, for how long; the
torch and build it locked and what held a newer torch back; uv's refusal under the field that
caused it. An answer the stack does not read (the RAM limit) starts no resolution, and Review
keeps the locked torch. Against the recorded copy of PyPI (tests/recorded_pypi.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from textual.widgets import Static

from app.tui.app import WizardApp
from tests.recorded_pypi import ProxyTrap, RecordedIndex
from tests.test_answers_fit import FLASH_ATTN
from tests.tui.helpers import dry_session, shown, stack_resolved, wait_until
from tests.tui.test_wizard_80x24 import RTX, box, field, goto, type_into


@pytest.fixture
def recorded_pypi(monkeypatch) -> Iterator[RecordedIndex]:
    """uv's only index is the recorded copy; any other request goes to a proxy that refuses."""
    with RecordedIndex() as pypi, ProxyTrap() as trap:
        for name, value in {"UV_OFFLINE": "0", "UV_DEFAULT_INDEX": pypi.url, **trap.env()}.items():
            monkeypatch.setenv(name, value)
        yield pypi
        assert trap.requests == [], "uv fetched from outside the index it was given"


def existing(app: WizardApp) -> str:
    return str(app.screen.query_one("#existing", Static).visual)


async def test_venv_shows_resolving_then_the_lock_and_the_ram_limit_keeps_it(recorded_pypi):
    app = WizardApp(dry_session(RTX))
    async with app.run_test(size=(80, 24)) as pilot:
        await stack_resolved(pilot)
        await goto(pilot, "venv")
        await type_into(pilot, box(app, "torch.packages"), "vllm")
        await pilot.press("enter")
        await pilot.pause()
        assert "for now: uv is resolving (" in existing(app), existing(app)
        await stack_resolved(pilot)
        await wait_until(pilot, lambda: "locked by uv" in existing(app), what="the lock")
        text = " ".join(existing(app).split())
        assert "torch: torch==2.14.0 (cu130 build), locked by uv, held back by vllm" in text, text

        app.screen.query_one("#next").focus()  # from the Index URL box a digit is typed
        await goto(pilot, "extensions")  # not a stack input: no new resolution
        field(app, "build.memory_limit").enter("32GiB")
        await pilot.pause()
        assert app.session.answers.build.memory_limit == "32GiB"
        assert app.session.resolving_since() is None and app.session.stack() is not None
        await goto(pilot, "review")
        assert "torch 2.14.0 (cu130) (decided by vllm)" in shown(app)
        assert "torch==2.15" not in shown(app)


async def test_venv_shows_uvs_refusal_under_the_packages(recorded_pypi):
    app = WizardApp(dry_session(RTX))
    async with app.run_test(size=(80, 24)) as pilot:
        await goto(pilot, "venv")
        await type_into(pilot, box(app, "torch.packages"), "vllm==0.9.2")
        await pilot.press("enter")
        await stack_resolved(pilot)
        await wait_until(pilot, lambda: "uv refused" in existing(app), what="the refusal")
        note = str(field(app, "torch.packages").query_one(".field-error", Static).visual)
        assert note.startswith("uv: ") and "no kernels for compute capability 12.0" in note
        # Review says it as `mlsetup plan` does (exit 2): no action count, no plan from tables
        app.screen.query_one("#next").focus()
        await goto(pilot, "review")
        heading = str(app.screen.query_one("#heading", Static).visual)
        assert "refused" in heading and "action" not in heading
        assert "mlsetup: input error (" in shown(app) and not app.screen.query("#plan")
        assert app.screen.query_one("#next").disabled


async def test_review_says_its_plan_is_the_tables_until_the_first_resolution_lands(
    recorded_pypi, tmp_path
):
    """While uv's first resolution waits on the index (flash-attn's page held), Review says
    that its plan is from mlsetup's tables, in sight at 80x24; once the lock lands, it says
    the plan uv's lock gives, and no longer that."""
    gate = recorded_pypi.hold("flash-attn")  # clear: the resolution waits until it is set
    path = tmp_path / "answers.toml"
    path.write_text("version = 1\n" + FLASH_ATTN)
    app = WizardApp(dry_session(RTX, path))
    async with app.run_test(size=(80, 24)) as pilot:
        await goto(pilot, "review")
        await wait_until(pilot, lambda: bool(recorded_pypi.waiting), what="uv asking the index")
        await wait_until(pilot, lambda: app.screen.query("#provisional"), what="the mark")
        mark = app.screen.query_one("#provisional", Static)
        assert str(mark.visual).startswith("Resolving the stack with uv")
        assert "from mlsetup's tables" in " ".join(shown(app).split())
        region = mark.region
        assert region.height > 0 and region.bottom <= 23, region  # in sight, above the key bar

        gate.set()
        await stack_resolved(pilot)
        await wait_until(pilot, lambda: not app.screen.query("#provisional"), what="redrawn")
        assert app.session.stack() is not None
        assert "Resolving the stack" not in shown(app) and "torch 2." in shown(app)
