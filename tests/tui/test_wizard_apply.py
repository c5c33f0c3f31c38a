"""The wizard driving the real engine on a fake server (tests/harness.py): the apply is started
detached and followed through its event stream, as on a real machine."""

from __future__ import annotations

import pytest

from app.tui.app import WizardApp
from app.tui.screens.modals import RebootScreen
from app.tui.screens.resume import ResumeScreen
from app.tui.screens.run import RunScreen
from app.tui.screens.summary import SummaryScreen
from app.tui.session import Session
from steps.formats import events as ev
from steps.known.knowledge import knowledge
from tests.harness import DRIVER_STEP, FakeServer, mode, wait_for
from tests.tui.helpers import Recorder, apply_confirmed, shown, wait_until, walk_to_review
from tests.wheels import STANDIN_TORCH


@pytest.fixture
def fake(server: FakeServer, monkeypatch: pytest.MonkeyPatch):
    """The server's environment in this process, so the detached engine inherits it."""
    for key, value in server.env().items():
        monkeypatch.setenv(key, value)
    knowledge.cache_clear()  # the harness's extension recipe (tinyext)
    yield server
    knowledge.cache_clear()


def session(server: FakeServer) -> Session:
    return Session.load(root=server.root, answers=server.answers)


async def finished(pilot, app: WizardApp, timeout: float = 120) -> ev.Finished:
    await wait_until(pilot, lambda: app.model.done, timeout=timeout, what="the run to end")
    await pilot.pause()
    assert app.model.lost is None, app.model.lost
    return app.model.finished


async def test_fresh_box_driver_then_reboot_then_resume_to_the_summary(fake: FakeServer):
    seen = Recorder()
    app = WizardApp(session(fake))
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        text = shown(app)
        assert "NVIDIA H200" in text and "nouveau driver is loaded" in text
        await walk_to_review(pilot)
        assert "(reboot after)" in shown(app)
        confirm = await apply_confirmed(pilot)
        assert "nvidia-open" in confirm and "linux-headers-" in confirm  # the apt packages
        assert "CUDA 13.0 to /usr/local/cuda-13.0" in confirm
        assert "Reboot (reboot.policy ask)" in confirm
        # the stand-in driver step is quick: the reboot question may already sit over the Run screen
        assert any(isinstance(screen, RunScreen) for screen in app.screen_stack)
        end = await finished(pilot, app)
        assert end.code == 10 and app.model.reboot is not None
        assert isinstance(app.screen, RebootScreen)
        assert "Reboot now?" in shown(app) and "sudo mlsetup" in shown(app)
        await pilot.press("y")
        await wait_until(pilot, lambda: "reboot" in fake.commands(), what="the reboot")

    # the engine was asked to apply these answers, written root-only for it
    answers = fake.root / "var/lib/mlsetup/answers.toml"
    assert mode(answers) == 0o600 and answers.read_text() == app.session.answers.to_toml()
    assert fake.state_file()["answers_path"] == str(answers)
    [started] = [m.event for m in seen.of(app.feed.Event) if isinstance(m.event, ev.RunStarted)]
    assert not started.resumed and not started.dry_run  # a new apply
    # it ran the driver step, paused, and the wizard rebooted through the runner
    assert fake.commands() == [*DRIVER_STEP, "reboot"]
    kinds = [type(m.event) for m in seen.of(app.feed.Event)]
    assert ev.RebootNeeded in kinds and kinds[-1] is ev.Finished

    # the engine reports its end just before it exits: let it go before opening the wizard again,
    # which would otherwise (rightly) attach to the apply still holding the lock
    wait_for(fake.apply_lock_free)

    # after the reboot: `sudo mlsetup` opens on the Resume screen
    seen = Recorder()
    app = WizardApp(session(fake))
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        assert isinstance(app.screen, ResumeScreen)
        text = shown(app)
        assert "The setup paused for a reboot." in text
        assert "The reboot was for driver.install: load NVIDIA driver 580." in text
        assert "The machine has rebooted." in text
        assert "Driver 580.105.08 is loaded (open modules)" in text and "it worked." in text
        assert "driver.prerequisites" in text  # done
        assert "toolkit.install-13.0" in text  # next
        await pilot.press("enter")
        assert isinstance(app.screen, RunScreen)
        end = await finished(pilot, app)
        assert end.code == 0, app.model.failed
        await pilot.press("enter")
        assert isinstance(app.screen, SummaryScreen)
        await wait_until(pilot, lambda: "running…" not in shown(app), what="the smoke test")
        text = shown(app)
        assert "every step is satisfied" in text
        assert f"torch {STANDIN_TORCH}+cu130 sees" in text
        assert f"source {fake.venv}/bin/activate" in text
        assert (
            f"Logs:          /var/log/mlsetup/{app.model.run_id}" in text
            or str(fake.root / "var/log/mlsetup") in text
        )

    [resumed] = [m.event for m in seen.of(app.feed.Event) if isinstance(m.event, ev.RunStarted)]
    assert resumed.resumed and resumed.run_id == started.run_id
    after = fake.commands()[len(DRIVER_STEP) + 1 :]  # the steps after the driver's
    assert "apt-get cuda-toolkit-13-0" in after, after
    assert "apt-get nvidia-open" not in after and "update-initramfs -u" not in after, after
    assert fake.report()["result"] == "done"
    assert (fake.venv / "bin" / "python").exists()


async def test_already_finished_box_runs_nothing(fake: FakeServer):
    fake.machine.driver_loaded("580.105.08")
    first = fake.mlsetup("apply", "--answers", str(fake.answers))
    assert first.returncode == 0, first.stdout + first.stderr
    calls = len(fake.calls())

    seen = Recorder()
    app = WizardApp(session(fake))
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        assert type(app.screen).__name__ == "MachineScreen"  # a finished run: no Resume
        for _ in range(4):
            await pilot.press("enter")
            assert "already satisfied" in shown(app), shown(app)
        await pilot.press("enter")
        assert "The plan: nothing to do" in shown(app)
        await pilot.press("enter")
        end = await finished(pilot, app)
        assert end.code == 0
        assert set(app.model.steps.values()) == {"satisfied"}
        await pilot.press("enter")
        assert "every step is satisfied" in shown(app)
    assert len(fake.calls()) == calls
    assert fake.report()["changed"] is False


async def test_failing_build_shows_the_diagnosis_and_next_command_above_the_log(fake: FakeServer):
    fake.machine.driver_loaded("580.105.08")
    setup = fake.base / "src" / "tinyext" / "setup.py"
    setup.write_text(
        "import sys\n"
        "for i in range(300):\n"
        "    print(f'[{i}/300] nvcc -c csrc/kernel_{i}.cu')\n"
        "print('c++: fatal error: Killed signal terminated program cc1plus')\n"
        "sys.exit(1)\n"
    )
    app = WizardApp(session(fake))
    async with app.run_test(size=(120, 40)) as pilot:
        await walk_to_review(pilot)
        await apply_confirmed(pilot)
        end = await finished(pilot, app)
        assert end.code == 1
        failed = app.model.failed
        assert failed is not None and failed.step == "extensions"
        screen = app.screen
        assert isinstance(screen, RunScreen)
        failure = str(screen.query_one("#failure").visual)
        assert failed.what in failure and "why" in failure and failed.next in failure
        assert "memory" in failed.why.lower() or "killed" in failed.why.lower()
        # the pane shows the failed action's own output, the full log is on disk
        assert screen.view.showing == failed.action
        pane = screen.query_one("LogPane")
        assert any("Killed signal terminated program" in line for line in pane.lines)
        assert pane.search("Killed") >= 1
        await pilot.press("enter")
        text = shown(app)
        assert failed.next in text  # the Summary repeats the next command


async def test_plain_sudo_mlsetup_attaches_to_a_running_apply(fake: FakeServer):
    fake.machine.driver_loaded("580.105.08")
    fake.script({"apt-get cuda-toolkit-13-0": {"sleep": 2}})
    engine = fake.popen("apply", "--answers", str(fake.answers), "--foreground")
    try:
        wait_for(lambda: fake.started("toolkit.install-13.0"))
        app = WizardApp(session(fake))
        assert app.opening == "attach"
        async with app.run_test(size=(80, 24)) as pilot:
            assert isinstance(app.screen, RunScreen) and app.screen.attached
            assert "Attached to the running setup" in shown(app)
            end = await finished(pilot, app)
            assert end.code == 0
            assert app.model.actions["toolkit.install-13.0"].status == "done"
    finally:
        assert engine.wait(timeout=120) == 0


async def test_after_a_failed_build_change_an_answer_and_retry_from_the_failed_step(
    fake: FakeServer,
):
    fake.machine.driver_loaded("580.105.08")
    setup = fake.base / "src" / "tinyext" / "setup.py"
    working = setup.read_text()
    setup.write_text("import sys\nprint('nvcc fatal: out of memory')\nsys.exit(1)\n")
    app = WizardApp(session(fake))
    async with app.run_test(size=(80, 24)) as pilot:
        await walk_to_review(pilot)
        await apply_confirmed(pilot)
        end = await finished(pilot, app)
        assert end.code == 1 and app.model.failed.step == "extensions"
        first_run = app.model.run_id
        await pilot.press("r")  # back to the failed step, inside the wizard
        await pilot.pause()
        assert app.screen.name == "extensions", app.error and app.error.log.read_text()
        jobs = next(f for f in app.screen.query("ChoiceField") if f.spec.key == "build.max_jobs")
        jobs.enter("2")
        await pilot.pause()
        assert app.session.answers.build.max_jobs == 2
        assert "MAX_JOBS=2" in shown(app)
        setup.write_text(working)  # what the operator fixed meanwhile
        await pilot.press("6")
        await pilot.pause()
        await apply_confirmed(pilot)
        end = await finished(pilot, app)
        assert end.code == 0, app.model.failed
        assert app.model.run_id != first_run
        done = {a.id: a.status for a in app.model.actions.values()}
        assert all(s in ("done", "already-done") for s in done.values()), done


async def test_the_device_screenshot_script_attaches_to_a_running_apply(fake: FakeServer, tmp_path):
    """tests/device/wizard_screens.py, as the lead runs it on the GPU server, here against the
    fake server's apply (a slow toolkit install stands in for the compile)."""
    import importlib.util

    from tests.common import REPO

    spec = importlib.util.spec_from_file_location(
        "wizard_screens", REPO / "tests" / "device" / "wizard_screens.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    fake.machine.driver_loaded("580.105.08")
    fake.script({"apt-get cuda-toolkit-13-0": {"sleep": 3}})
    engine = fake.popen("apply", "--answers", str(fake.answers), "--foreground")
    try:
        wait_for(lambda: fake.started("toolkit.install-13.0"))
        out = tmp_path / "out"
        args = script.parse(
            [
                "--out",
                str(out),
                "--seconds",
                "60",
                "--every",
                "1",
                "--root",
                str(fake.root),
                "--sizes",
                "80x24",
            ]
        )
        assert await script.shoot(args) == 0
    finally:
        assert engine.wait(timeout=120) == 0
    shots = sorted(out.glob("run-80x24-*.svg"))
    assert len(shots) >= 2 and "Attached to the running setup" in shots[0].read_text().replace(
        "&#160;", " "
    )
    assert "finished=done" in (out / "wizard-screens.txt").read_text()
