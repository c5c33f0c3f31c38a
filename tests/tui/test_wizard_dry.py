"""The wizard against recorded machines (dry runs): every screen, the choices refused in place,
the answers saved and replayed by `mlsetup plan`, the GPU-less box, help, non-root."""

from __future__ import annotations

import json

from app.tui.app import WizardApp
from app.tui.feed import EngineFeed
from app.tui.screens.modals import HelpScreen
from app.tui.screens.run import RunScreen
from app.tui.screens.summary import SummaryScreen
from app.tui.session import Session
from app.tui.widgets.fields import ChoiceField
from steps.core.rootfs import RootFS
from steps.formats import events as ev
from steps.formats.answers import load_answers
from steps.formats.facts import load_facts
from steps.planning import registry
from tests.common import run_cli
from tests.pkgindex import standard_index
from tests.tui.helpers import (
    Recorder,
    apply_confirmed,
    dry_session,
    machine,
    shown,
    stack_resolved,
    wait_until,
    walk_to_review,
)


async def test_rtx_box_walks_every_screen_and_the_saved_answers_replay_to_the_same_plan(tmp_path):
    session = dry_session("rtx-pro-6000-ubuntu2404")
    app = WizardApp(session)
    seen = Recorder()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        text = shown(app)
        assert "2 \u00d7 NVIDIA RTX PRO 6000 Blackwell Workstation Edition" in text
        assert "compute 12.0, 95.6 GiB" in text
        assert "590.48.01 (open modules, loaded), CUDA up to 13.1" in text
        assert "128 cores, 125.8 GiB RAM" in text and "Secure Boot\ndisabled" in text

        await pilot.press("enter")  # Driver: satisfied, and says so
        text = shown(app)
        assert "already satisfied" in text
        assert "Driver 590.48.01 (open modules) is loaded" in text

        await pilot.press("enter")  # Toolkit: CUDA 13.0 beside 13.1, with the exact commands
        text = shown(app)
        assert "Installed: CUDA 13.1 at /usr/local/cuda-13.1." in text
        assert "apt-get install -y --no-remove" in text and "cuda-toolkit-13-0" in text

        await pilot.press("enter")  # Venv
        assert (
            "sudo -u ml uv venv --python 3.12 --python-preference only-system /home/ml/ml-env"
            in shown(app)
        )

        await pilot.press("enter")  # Extensions: add flash-attn 2.8.3
        await pilot.press("a", *"2.8.3", "enter")
        await pilot.pause()
        text = shown(app)
        assert "flash-attn 2.8.3: compute 12.0, CUDA_HOME /usr/local/cuda-13.0" in text
        assert "FLASH_ATTN_CUDA_ARCHS=120" in text

        await pilot.press("enter")  # Review, once uv has resolved the stack (in a worker)
        await stack_resolved(pilot)
        plan_shown = app.screen.controller.plan_json()
        # what Review shows is what runs: its count, the confirmation's and the Summary's
        actions = sum(len(step["actions"]) for step in plan_shown["steps"])
        assert actions >= 13  # the toolkit, the venv's, flash-attn's build, the stack check
        assert f"The plan: {actions} action(s) to run" in shown(app)
        # the dry run asks first, as a real apply does, marked as a dry run
        confirm = await apply_confirmed(pilot)
        assert (
            confirm.startswith(f"DRY RUN: walk {actions} actions for rtx-pro-6000")
            and "Nothing runs" in confirm
        )
        assert isinstance(app.screen, RunScreen)
        await wait_until(pilot, lambda: app.model.finished is not None, what="the dry run")
        await pilot.pause()
        assert app.model.finished.code == 0
        assert all(a.status == "dry-run" for a in app.model.actions.values())
        assert "dry run finished (exit 0): nothing was changed" in shown(app)

        await pilot.press("enter")
        assert isinstance(app.screen, SummaryScreen)
        await wait_until(pilot, lambda: "running…" not in shown(app), what="the smoke line")
        text = shown(app)
        assert f"Dry run complete: {actions} actions would run; none ran" in text
        assert "Use the venv" not in text  # none was made: what a real apply would leave instead
        assert app.screen.query("#would-leave")  # the section a real apply would leave
        assert "flash-attn 2.8.3 built for compute 12.0" in text
        assert "source /home/ml/ml-env/bin/activate" in text

        saved = tmp_path / "answers.toml"
        path_box = app.screen.query_one("#save-path")
        path_box.value = str(saved)
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert saved.exists() and f"Saved to {saved}" in shown(app)

    # what the engine was asked: a dry run whose plan is the one shown on the Review screen
    started = [m.event for m in seen.of(EngineFeed.Event) if isinstance(m.event, ev.RunStarted)]
    assert [m.dry_run for m in started] == [True]
    plans = [m.event.plan for m in seen.of(EngineFeed.Event) if isinstance(m.event, ev.PlanMade)]
    assert plans == [plan_shown]

    # the saved answers replay to the same plan with `mlsetup plan`
    replay = run_cli(
        "plan",
        "--json",
        "--answers",
        str(saved),
        "--facts",
        str(machine("rtx-pro-6000-ubuntu2404")),
    )
    assert replay.returncode == 0, replay.stderr
    assert json.loads(replay.stdout) == plan_shown


async def test_the_wizard_plans_the_stack_uv_resolves_exactly_as_mlsetup_plan(
    tmp_path, monkeypatch
):
    """The wizard resolves the answers' stack in a worker (real uv, a local index), and what it
    shows follows the lock: a package that pins torch 2.9.0 moves torch to the cu128 build and
    the toolkit to CUDA 12.8 (knowledge alone says 2.15 and 13.0); the plan is `mlsetup plan`'s."""
    index = standard_index(tmp_path / "pkgs")
    monkeypatch.setenv("UV_DEFAULT_INDEX", index.default_url)
    answers = tmp_path / "answers.toml"
    answers.write_text(
        f'version = 1\n[torch]\nindex_url = "{index.torch_url}"\npackages = ["vllmish"]\n'
    )
    app = WizardApp(dry_session("rtx-pro-6000-ubuntu2404", answers))
    async with app.run_test(size=(80, 24)) as pilot:
        await stack_resolved(pilot)
        await pilot.press("enter", "enter")  # Driver, then Toolkit
        await pilot.pause()
        assert "cuda-toolkit-12-8" in shown(app)
        plan = json.loads(app.session.plan().to_json())
    assert plan["lock"]["torch"] == "2.9.0+cu128"
    assert plan["lock"]["decided_by"] == ["vllmish"]
    replay = run_cli(
        "plan",
        "--json",
        "--answers",
        str(answers),
        "--facts",
        str(machine("rtx-pro-6000-ubuntu2404")),
    )
    assert replay.returncode == 0, replay.stderr
    assert json.loads(replay.stdout) == plan


async def test_invalid_choices_are_refused_in_place_with_the_reason():
    app = WizardApp(dry_session("fresh-h100x8-ubuntu2204"))
    seen = Recorder()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        await pilot.press("enter")  # Driver
        branch = next(f for f in app.screen.query(ChoiceField) if f.spec.key == "driver.branch")
        branch.enter("12")
        await pilot.pause()
        assert branch.has_class("-invalid")
        text = shown(app)
        assert 'driver.branch = "12": allowed: "auto" or a driver branch from 570 on' in text
        assert app.session.answers.driver.branch == "auto"  # the model kept the valid value
        await pilot.click("#next")  # Continue is refused while a field is invalid
        await pilot.pause()
        assert type(app.screen).__name__ == "StepScreen" and app.screen.name == "driver"

        branch.enter("590")
        await pilot.pause()
        assert not branch.has_class("-invalid")
        assert app.session.answers.driver.branch == "590"
        assert "nvidia-driver-pinning-590" in shown(app)  # the commands follow the choice

        await pilot.click("#next")  # Toolkit: an unknown CUDA release
        await pilot.pause()  # its fields mounted (under load the click returns before)
        assert app.screen.name == "toolkit"
        versions = app.screen.query_one(ChoiceField)
        versions.enter("11.9, 13.0")
        await pilot.pause()
        assert "'11.9' is not a CUDA release mlsetup knows; allowed:" in shown(app)
        versions.enter("12.8, 13.0")
        await pilot.pause()
        assert app.session.answers.toolkit.versions == ["12.8", "13.0"]
        assert "cuda-toolkit-12-8" in shown(app)


async def test_gpu_less_box_plans_a_cpu_venv_and_says_why():
    app = WizardApp(dry_session("gpu-less-debian12"))
    async with app.run_test(size=(80, 24)) as pilot:
        assert "GPUs" in shown(app) and "none found" in shown(app)
        assert "no NVIDIA GPU found: torch will be the CPU build" in shown(app)
        await pilot.press("enter")
        assert "No NVIDIA GPU: no driver is needed." in shown(app)
        await pilot.press("enter")
        assert "no CUDA toolkit needed" in shown(app)
        await pilot.press("enter")
        assert "(cpu build)" in shown(app) and "--torch-backend cpu" in shown(app)
        await pilot.press("enter", "enter")
        assert "3 action(s) to run" in shown(app)
        await apply_confirmed(pilot)
        await wait_until(pilot, lambda: app.model.finished is not None)
        satisfied = {name: "satisfied" for name in registry.step_names()}
        # the venv walked, not done: nothing ran
        assert app.model.steps == {**satisfied, "venv": "dry-run"}
        await pilot.press("enter")
        assert isinstance(app.screen, SummaryScreen)


async def test_help_screen_and_back_navigation():
    app = WizardApp(dry_session("fresh-h100x8-ubuntu2204"))
    async with app.run_test(size=(80, 24)) as pilot:
        text = shown(app)
        assert "8 \u00d7 NVIDIA H100 80GB HBM3" in text
        assert "Secure Boot is enabled" in text and "nouveau driver is loaded" in text
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert "ctrl+q" in shown(app) and "compute capability" in shown(app)
        assert "full-screen log" not in shown(app)  # the log keys are in the Run screen's help
        await pilot.press("escape")
        await pilot.press("enter")
        assert "No NVIDIA driver is loaded." in shown(app)
        assert "(reboot after)" in shown(app)
        await pilot.press("escape")
        assert type(app.screen).__name__ == "MachineScreen"


async def test_not_root_shows_the_plan_but_applying_says_it_needs_root(tmp_path):
    from app.tui.session import Session

    session = Session.load(root=tmp_path, facts=machine("h200-ubuntu2404"), dry_run=False)
    app = WizardApp(session)
    async with app.run_test(size=(80, 24)) as pilot:
        assert "--facts shows a recorded machine" in _review_text(await _to_review(pilot))

    session = Session.load(root=tmp_path, dry_run=False)
    session.is_root = False
    app = WizardApp(session, opening="wizard")
    async with app.run_test(size=(80, 24)) as pilot:
        text = _review_text(await _to_review(pilot))
        assert "needs root" in text and "sudo mlsetup" in text
        assert app.screen.query_one("#next").disabled
        await pilot.press("enter")  # the focus is on Save answers: the work is not lost
        assert type(app.screen).__name__ == "SaveScreen"
        await pilot.press("escape")
        assert type(app.screen).__name__ == "ReviewScreen"


async def _to_review(pilot):
    await walk_to_review(pilot)
    return pilot.app


def _review_text(app) -> str:
    return shown(app)


def test_the_wizard_refuses_a_venv_account_this_machine_lacks_as_mlsetup_plan_does(tmp_path):
    """The wizard of this machine (not a recorded one) checks venv.user against its accounts,
    as `mlsetup plan` does: a name it lacks is refused in place, the answers keep theirs."""
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/passwd").write_text("ml:x:1000:1000::/home/ml:/bin/bash\n")
    session = Session(
        fs=RootFS(tmp_path),
        facts=load_facts(machine("rtx-pro-6000-ubuntu2404")),
        answers=load_answers(None),
        dry_run=True,
    )
    why = session.set_value("venv.user", "nosuch")
    assert why is not None and 'venv.user = "nosuch": no such account' in why
    assert session.answers.venv.user == "auto"
    assert session.set_value("venv.user", "ml") is None


def test_a_stack_uv_refuses_is_the_plans_first_warning_and_why_the_wizard_cannot_run_it(
    tmp_path, monkeypatch
):
    """What `mlsetup plan` exits 2 with (a package the index lacks) the wizard says first, and
    it starts nothing until the answers change."""
    index = standard_index(tmp_path / "pkgs")
    monkeypatch.setenv("UV_DEFAULT_INDEX", index.default_url)
    answers = tmp_path / "answers.toml"
    answers.write_text(
        f'version = 1\n[torch]\nindex_url = "{index.torch_url}"\npackages = ["nosuchpkg"]\n'
    )
    session = dry_session("rtx-pro-6000-ubuntu2404", answers)
    session.resolve_stack()
    refusal = "torch.packages ['nosuchpkg']: no nosuchpkg on"
    assert session.plan().warnings[0].startswith(refusal)
    assert (session.why_not_apply() or "").startswith(refusal)
    assert session.set_value("torch.packages", ["helper"]) is None
    assert session.why_not_apply() is None
