"""The wizard refuses, on the field, what `mlsetup plan` exits 2 with for the same machine and
answers (one validation, in steps/): tests/test_answers_fit.py's table, replayed."""

from __future__ import annotations

import pytest

from app.tui.app import WizardApp
from app.tui.controllers.step import controller_for
from app.tui.session import Session
from app.tui.widgets.fields import ChoiceField
from steps.formats.answers import answers_from_toml
from tests.test_answers_fit import (
    BAD,
    FLASH_ATTN,
    PREFIX,
    Bad,
    fit_index,
    index_answers,
    plan_refusal,
)
from tests.tui.helpers import dry_session, machine, shown, wait_until
from tests.tui.test_wizard_80x24 import goto


def base_session(bad: Bad, tmp_path) -> Session:
    path = tmp_path / "base.toml"
    path.write_text(answers_from_toml(f"version = 1\n{bad.base}", "base").to_toml())
    return dry_session(bad.machine, path)


@pytest.mark.parametrize("bad", BAD, ids=lambda b: f"{b.machine}:{b.key}={b.value}")
def test_the_wizard_refuses_the_answer_with_the_words_of_mlsetup_plan(bad: Bad, tmp_path):
    session = base_session(bad, tmp_path)
    before = session.value(bad.key)
    why = session.set_value(bad.key, bad.value)
    cli = plan_refusal(machine(bad.machine), bad.answers(), tmp_path)
    assert why is not None and PREFIX + " ".join(why.split()) == cli
    assert session.value(bad.key) == before  # the answers keep the value that works


def field(app: WizardApp, key: str) -> ChoiceField:
    return next(f for f in app.screen.query(ChoiceField) if f.spec.key == key)


async def refused_in_place(pilot, app: WizardApp, bad: Bad, raw: str, tmp_path) -> None:
    """`raw` typed into the field of `bad.key`: refused there with the CLI's message."""
    box = field(app, bad.key)
    box.enter(raw)
    await wait_until(pilot, lambda: box.has_class("-invalid"), what=f"{bad.key} refused")
    cli = plan_refusal(machine(bad.machine), bad.answers(), tmp_path)
    assert cli.removeprefix(PREFIX) in " ".join(shown(app).split())


def case(key: str, machine_name: str) -> Bad:
    return next(b for b in BAD if b.key == key and b.machine == machine_name)


async def test_the_driver_screen_refuses_a_branch_and_an_auto_reboot_on_their_fields(tmp_path):
    """On the fresh H100 box (Secure Boot on, no driver): an old branch with torch's CUDA
    pinned, then reboot.policy auto, each refused in place as `mlsetup plan` refuses them."""
    branch = case("driver.branch", "fresh-h100x8-ubuntu2204")
    app = WizardApp(base_session(branch, tmp_path))
    async with app.run_test(size=(120, 40)) as pilot:
        await goto(pilot, "driver")
        await refused_in_place(pilot, app, branch, "575", tmp_path)
        assert app.session.answers.driver.branch == "auto"

        reboot = case("reboot.policy", "fresh-h100x8-ubuntu2204")
        await refused_in_place(pilot, app, reboot, "auto", tmp_path)
        assert app.session.answers.reboot.policy == "ask"


async def test_the_extensions_screen_refuses_archs_and_memory_on_their_fields(tmp_path):
    """On the H200 (compute 9.0, 126 GiB): archs only an Ampere runs, and a limit above the
    RAM, each refused in place with the CLI's words."""
    archs = case("extensions[0].archs", "h200-ubuntu2404")
    app = WizardApp(base_session(archs, tmp_path))
    async with app.run_test(size=(120, 40)) as pilot:
        await goto(pilot, "extensions")
        await refused_in_place(pilot, app, archs, "8.6", tmp_path)
        assert app.session.answers.extensions[0].archs == "auto"
        field(app, archs.key).cancel_edit()

        limit = case("build.memory_limit", "h200-ubuntu2404")
        await refused_in_place(pilot, app, limit, "200GiB", tmp_path)
        assert app.session.answers.build.memory_limit == "auto"


def test_an_extension_release_the_index_lacks_is_said_on_the_extensions_screen(tmp_path):
    """The resolution (the wizard's worker, as `mlsetup plan`) refuses it with the CLI's
    words; the Extensions screen says so and the wizard cannot apply it."""
    index = fit_index(tmp_path)
    answers = index_answers(index, extensions=FLASH_ATTN.replace("2.8.3", "9.9.9"))
    path = tmp_path / "answers.toml"
    path.write_text(answers.to_toml())
    rtx = "rtx-pro-6000-ubuntu2404"
    env = {"UV_DEFAULT_INDEX": index.default_url}
    cli = plan_refusal(machine(rtx), answers, tmp_path, **env)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("UV_DEFAULT_INDEX", index.default_url)
        session = dry_session(rtx, path)
        session.resolve_stack()
    said = controller_for(session, "extensions").warnings()
    assert said and PREFIX + said[0] == cli
    assert session.why_not_apply() == said[0]


async def test_the_extensions_screen_refuses_a_release_the_index_lacks_on_its_field(
    tmp_path, monkeypatch
):
    """A version typed into the extension's field is checked against the index as `mlsetup
    plan` checks it (steps.stack.releases): 9.9.9 is refused there, naming the newest the index
    has, and the answers keep the release that works."""
    index = fit_index(tmp_path)
    monkeypatch.setenv("UV_DEFAULT_INDEX", index.default_url)
    path = tmp_path / "base.toml"
    path.write_text(index_answers(index, extensions=FLASH_ATTN).to_toml())
    rtx = "rtx-pro-6000-ubuntu2404"
    wrong = index_answers(index, extensions=FLASH_ATTN.replace("2.8.3", "9.9.9"))
    cli = plan_refusal(machine(rtx), wrong, tmp_path, UV_DEFAULT_INDEX=index.default_url)
    app = WizardApp(dry_session(rtx, path))
    async with app.run_test(size=(120, 40)) as pilot:
        await goto(pilot, "extensions")
        box = field(app, "extensions[0].version")
        box.enter("9.9.9")
        await wait_until(pilot, lambda: box.has_class("-invalid"), what="9.9.9 refused")
        assert "the newest release there is 2.8.3.post2" in cli
        assert cli.removeprefix(PREFIX) in " ".join(shown(app).split())
        assert app.session.answers.extensions[0].version == "2.8.3"
