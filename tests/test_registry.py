"""A throwaway step built from the registry alone (tests/throwaway_step.py: its planner, its
controller, one registry entry, added at run time): the planner puts it in the plan, the
engine runs it as a check-only step, the wizard shows its screen behind a number key. No module
of mlsetup names it."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.tui.app import WizardApp
from app.tui.widgets.keybar import KeyBar
from steps.apply.report import Report
from steps.decide.choices import choose
from steps.formats.answers import Answers
from steps.formats.facts import Facts
from steps.formats.plan import Plan
from steps.planning import registry
from steps.planning.planner import make_plan
from tests import throwaway_step
from tests.common import MACHINES, REPO
from tests.harness import FakeServer
from tests.tui.helpers import dry_session, shown

NAME = throwaway_step.NAME
_NAMES = list(registry.step_names())
ORDER = [*_NAMES[: _NAMES.index("venv") + 1], NAME, *_NAMES[_NAMES.index("venv") + 1 :]]


@pytest.fixture
def with_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "STEPS", throwaway_step.with_step(registry.STEPS))


def test_a_step_module_names_no_step_the_planner_names_each_after_its_entry():
    """A planner returns an unnamed outcome (a driver planner cannot pass as the toolkit's)."""
    facts = Facts.model_validate_json((MACHINES / "rtx-pro-6000-ubuntu2404.json").read_text())
    inputs = registry.PlanInputs(facts, Answers(), choose(facts, Answers(), None))
    for spec in registry.STEPS:
        assert "name" not in spec.plan(inputs).model_dump()
    assert [s.name for s in make_plan(facts, Answers()).steps] == list(registry.step_names())


def test_the_planner_puts_it_between_venv_and_extensions(with_step: None):
    facts = Facts.model_validate_json((MACHINES / "rtx-pro-6000-ubuntu2404.json").read_text())
    plan = make_plan(facts, Answers())
    assert [s.name for s in plan.steps] == ORDER
    check = plan.step(NAME)
    assert check.status == "pending" and [a.kind for a in check.actions] == ["check"]
    assert Plan.model_validate_json(plan.to_json()) == plan  # the plan file takes it back
    # the formats' schemas name it among the steps
    plan_schema = Plan.model_json_schema()["$defs"]["Step"]["properties"]["name"]
    report_schema = Report.model_json_schema()["$defs"]["StepReport"]["properties"]["name"]
    assert plan_schema["enum"] == report_schema["enum"] == ORDER


def test_the_engine_runs_it_as_a_check(server: FakeServer, tmp_path: Path):
    """It runs in its place; the engine does not plan again to verify it (its planner always
    has it pending: a step that changes the machine would fail 'still not satisfied'); on a
    finished machine it is all that runs, and the run changed nothing; a failed check stops
    the run at it."""
    site = tmp_path / "site"  # the registry entry, made in the mlsetup process at its start
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "from tests.throwaway_step import register\nregister()\n"
    )
    env = {"PYTHONPATH": f"{site}:{REPO}"}
    server.machine.driver_loaded("580.105.08")

    def apply():
        return server.mlsetup("apply", "--foreground", "--answers", str(server.answers), **env)

    first = apply()
    assert first.returncode == 0, first.stdout + first.stderr
    report = server.report()
    assert [s["name"] for s in report["steps"]] == ORDER
    ran = report["ran"]
    check = f"{NAME}.libraries"
    assert ran.index("venv.sync") < ran.index(check) < ran.index("extensions.tinyext.build")

    again = apply()
    assert again.returncode == 0, again.stdout + again.stderr
    assert server.report()["ran"] == [check] and server.report()["changed"] is False

    (server.venv / throwaway_step.FAIL_MARKER).touch()
    failed = apply()
    assert failed.returncode == 1, failed.stdout + failed.stderr
    failure = server.report()["failure"]
    assert (failure["step"], failure["action"], failure["exit_code"]) == (NAME, check, 1)


async def test_the_wizard_shows_its_screen_behind_a_number_key(with_step: None):
    app = WizardApp(dry_session("rtx-pro-6000-ubuntu2404"))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("5")  # 1 Machine, 2-4 Driver, Toolkit, Venv, then this one
        await pilot.pause()
        assert app.screen.name == NAME
        text = shown(app)
        assert "cuDNN and NCCL check: to do" in text
        assert "cuDNN and NCCL are checked in /home/ml/ml-env." in text
        assert "Check the venv's cuDNN and NCCL" in text  # the commands this step runs
        assert "4 Venv  5 Gpucheck  6 Extensions  7 Review" in str(
            app.screen.query_one("#trail").visual
        )
        assert "1-7 step" in app.screen.query_one(KeyBar).text
        await pilot.press("enter")  # Continue: on to the step after it
        await pilot.pause()
        assert app.screen.name == "extensions"
