"""The wizard as an operator meets it at 80x24 (issue 23): the refusals an answers file gets,
the focus where the next keys go, digits and Esc in an input, the dry run's confirmation and
endings, every key in one line, nothing decisive below the fold, files saved under sudo."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from textual import events
from textual.widgets import Button, Input

from app.tui.app import WizardApp
from app.tui.screens.modals import ConfirmScreen, SaveScreen
from app.tui.screens.run import RunScreen
from app.tui.screens.summary import SummaryScreen
from app.tui.session import Session
from app.tui.trail import jump_keys, jumps
from app.tui.widgets.fields import ChoiceField, Trail
from app.tui.widgets.keybar import KeyBar
from steps.core.rootfs import RootFS
from steps.formats.answers import load_answers
from steps.formats.facts import load_facts
from tests.tui.helpers import Recorder, apply_confirmed, dry_session, machine, shown, wait_until

RTX = "rtx-pro-6000-ubuntu2404"
FRESH = "fresh-h100x8-ubuntu2204"
EXAMPLE = Path(__file__).resolve().parents[2] / "assets" / "answers.example.toml"
V100 = {"name": "Tesla V100-SXM2-32GB", "pci_device_id": "0x1db5", "compute_capability": "7.0"}


def v100_facts(tmp_path: Path) -> Path:
    """The fresh H100 box with V100s: no driver, nouveau, Secure Boot on."""
    data = json.loads(machine(FRESH).read_text())
    for gpu in data["gpus"]:
        gpu.update(V100)
    path = tmp_path / "v100.json"
    path.write_text(json.dumps(data))
    return path


def field(app: WizardApp, key: str) -> ChoiceField:
    return next(f for f in app.screen.query(ChoiceField) if f.spec.key == key)


def box(app: WizardApp, key: str) -> Input:
    widget = field(app, key).control_widget
    assert isinstance(widget, Input)
    return widget


async def goto(pilot, step: str) -> None:
    """The screen `step`, by the number key that jumps there (its place on the trail)."""
    await pilot.press(str(jumps().index(step) + 1))
    await wait_until(pilot, lambda: getattr(pilot.app.screen, "STEP", "") == step, what=step)
    await pilot.pause()


async def type_into(pilot, widget: Input, text: str) -> None:
    """Into the box, what it holds deleted (End, ctrl+u), then the text, as a person types."""
    widget.focus()
    await pilot.pause()
    await pilot.press("end", "ctrl+u", *text)


def keys_line(app: WizardApp) -> str:
    return app.screen.query_one(KeyBar).text


# -- item 1: what the answers file refuses, the field refuses -----------------------------


async def test_v100_refuses_a_torch_without_a_build_for_it_in_place(tmp_path):
    app = WizardApp(Session.load(facts=v100_facts(tmp_path), dry_run=True))
    async with app.run_test(size=(80, 24)) as pilot:
        await goto(pilot, "venv")
        assert "torch==2.14.* (cu126 build)" in shown(app)  # auto: the newest with Volta kernels
        version = box(app, "torch.version")
        await type_into(pilot, version, "==2.15.0")
        await pilot.press("enter")
        await pilot.pause()
        torch = field(app, "torch.version")
        assert torch.refused and app.focused is version  # the next keys fix it
        text = shown(app)
        assert 'torch.version = "==2.15.0": no CUDA build of that torch runs on 8 GPUs' in text
        assert "the newest torch with one is 2.14 (cu126)" in text and '"==2.14.*"' in text
        assert "(cpu build)" not in text and app.session.answers.torch.version == "auto"
        await pilot.click("#next")  # Continue waits for the field
        await pilot.pause()
        assert app.screen.name == "venv" and app.focused is version
        # only the CPU build asked for is the CPU build
        await pilot.press("escape")
        field(app, "torch.cuda").enter("cpu")
        await pilot.pause()
        await type_into(pilot, version, "==2.15.0")
        await pilot.press("enter")
        await pilot.pause()
        assert not torch.refused and app.session.answers.torch.version == "==2.15.0"
        assert "(cpu build)" in shown(app)

        await goto(pilot, "driver")  # open modules before Turing: refused, with why
        modules = field(app, "driver.modules")
        modules.enter("open")
        await pilot.pause()
        assert modules.refused and app.session.answers.driver.modules == "auto"
        assert 'driver.modules = "open"' in shown(app) and "older than Turing" in shown(app)
        assert "cuda-drivers" in shown(app) and "nvidia-open" not in shown(app)


# -- item 2: focus, digits and Esc in an input ---------------------------------------------


async def test_the_focus_stays_on_a_refused_field_and_moves_on_once_it_is_accepted():
    app = WizardApp(dry_session(RTX))
    async with app.run_test(size=(80, 24)) as pilot:
        await goto(pilot, "extensions")
        jobs, reserve = box(app, "build.max_jobs"), box(app, "build.memory_reserve")
        await type_into(pilot, jobs, "-3")
        await pilot.press("enter")
        await pilot.pause()
        assert field(app, "build.max_jobs").refused and app.focused is jobs
        assert "build.max_jobs" in shown(app)
        await pilot.press("tab")  # away with the same refused value: back to it
        await pilot.pause()
        assert app.focused is jobs and jobs.value == "-3"
        await pilot.press("backspace", "backspace", "4", "enter")
        await pilot.pause()
        assert app.session.answers.build.max_jobs == 4
        assert not field(app, "build.max_jobs").refused and app.focused is reserve

        # after an accepted Enter the focus has moved on: from a list, a digit jumps
        app.screen.query_one("#next").focus()
        await goto(pilot, "venv")
        version = box(app, "torch.version")
        await type_into(pilot, version, "==2.8.0")
        await pilot.press("enter")
        await pilot.pause()
        assert app.focused is not version and app.session.answers.torch.version == "==2.8.0"
        await pilot.press("3")
        await wait_until(pilot, lambda: getattr(app.screen, "STEP", "") == "toolkit")
        assert app.session.answers.torch.version == "==2.8.0"  # not "==2.8.03"


async def test_digits_in_an_input_are_typed_and_esc_cancels_the_edit():
    app = WizardApp(dry_session(RTX))
    async with app.run_test(size=(80, 24)) as pilot:
        await goto(pilot, "venv")
        assert f"{jump_keys()} step" in keys_line(app) and "? help" in keys_line(app)
        version = box(app, "torch.version")
        version.focus()
        await pilot.pause()
        await pilot.press("5")  # Tab's focus selects "auto": the digit replaces it
        await pilot.pause()
        assert app.screen.name == "venv" and version.value == "5"  # typed, not a jump
        # the key bar says what the keys do here: alt+digit jumps, F1 for help, Esc cancels
        line = keys_line(app)
        assert f" {jump_keys()} step" not in line and f"M-{jump_keys()} step" in line
        assert "? help" not in line
        assert "F1 help" in line and "Esc cancel edit" in line
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen.name == "venv" and version.value == "auto" and app.focused is version
        assert app.session.answers.torch.version == "auto"
        assert "Esc back" in keys_line(app)
        # a refused value: Esc takes it back too, and the refusal with it
        await pilot.press(*"==", "enter")
        await pilot.pause()
        assert field(app, "torch.version").refused
        await pilot.press("escape")
        await pilot.pause()
        assert not field(app, "torch.version").refused and version.value == "auto"
        await pilot.press("escape")  # nothing to cancel: Esc is Back
        await pilot.pause()
        assert app.screen.name == "toolkit"


# -- item 3: 80x24 ------------------------------------------------------------------------


def _on_screen(app: WizardApp, widget) -> bool:
    return widget.region.height > 0 and app.screen.region.contains_region(widget.region)


async def test_fresh_h100_driver_screen_shows_each_warning_once_and_its_choices():
    app = WizardApp(dry_session(FRESH))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("enter")
        await pilot.pause()
        # what is there and what is warned, each once (the commands' reason aside)
        text = "\n".join(
            str(w.visual) for w in app.screen.query("#existing, #step-warnings .line")
        ).lower()
        for said in ("no NVIDIA driver is loaded", "nouveau", "Secure Boot", "kernel headers"):
            assert text.count(said.lower()) == 1, (said, text)
        for section in app.screen.query("Section"):
            if section.border_title.strip() in ("Choices", "Commands this step runs"):
                top = section.region.y
                assert top < 24 - 3, f"{section.border_title} starts below the fold"
        assert _on_screen(app, field(app, "reboot.policy"))


async def test_summary_opens_at_its_result_with_save_in_view(tmp_path):
    app = WizardApp(dry_session(RTX, EXAMPLE))
    async with app.run_test(size=(80, 24)) as pilot:
        await goto(pilot, "review")
        await apply_confirmed(pilot)
        await wait_until(pilot, lambda: app.model.finished is not None, what="the dry run")
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, SummaryScreen))
        await pilot.pause(0.3)
        body = app.screen.query_one("#body")
        assert body.scroll_y == 0 and _on_screen(app, app.screen.query_one("#result"))
        save = app.screen.query_one("#save", Button)
        assert app.focused is save and _on_screen(app, save)


async def test_review_at_60x20_keeps_its_keys_on_one_line_and_the_whole_trail():
    app = WizardApp(dry_session(RTX))
    async with app.run_test(size=(60, 20)) as pilot:
        await goto(pilot, "review")
        bar = app.screen.query_one(KeyBar)
        assert bar.region.height == 1 and bar.text.endswith("? help")
        trail = str(app.screen.query_one(Trail).visual)
        assert "6 Review" in trail and "Summary" in trail
        assert _on_screen(app, app.screen.query_one("#next"))


async def test_every_key_of_each_screen_is_in_its_key_bar_at_80_columns():
    app = WizardApp(dry_session(RTX, EXAMPLE))
    async with app.run_test(size=(80, 24)) as pilot:
        for step in jumps():
            await goto(pilot, step)
            bar = app.screen.query_one(KeyBar)
            assert bar.fitted(80) == bar.hints, (step, bar.hints)  # none left off
            words = dict(bar.hints)
            assert {"Tab", "^s", "?", "^q", "Enter"} <= words.keys(), (step, words)
            if step != "machine":
                assert words["Esc"] == "back"
            if step == "extensions":
                assert "a" in words
        await apply_confirmed(pilot)
        assert isinstance(app.screen, RunScreen)
        await wait_until(pilot, lambda: app.model.finished is not None, what="the dry run")
        await pilot.pause()
        bar = app.screen.query_one(KeyBar)
        words = dict(bar.hints)
        assert bar.fitted(80) == bar.hints and {"Enter", "/", "f", "[ ]", "?"} <= words.keys()
        await pilot.press("slash", *"venv", "enter")
        await pilot.pause()
        assert not app.screen.query_one("#log-search").display  # the box closed
        assert "n/N" in dict(app.screen.query_one(KeyBar).hints)


# -- item 4: the dry run's confirmation and endings ---------------------------------------


async def test_a_dry_run_asks_first_marked_as_one_and_its_run_says_nothing_ran():
    app = WizardApp(dry_session(FRESH, EXAMPLE))
    async with app.run_test(size=(80, 24)) as pilot:
        await goto(pilot, "review")
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="Apply?")
        await pilot.pause()
        screen = app.screen
        text = shown(app)
        n = len(app.session.plan().actions)  # every step's
        assert text.startswith(f"DRY RUN: walk {n} actions") and "Nothing runs" in text
        assert "Needs a reboot (Secure Boot" in text and "min of compiling" in text
        start = screen.query_one("#apply", Button)
        assert str(start.label) == "Start the dry run" and app.focused.id == "cancel"
        # the builds and the reboot are below the fold at 80x24: the start waits for them
        assert start.disabled and "PgDn reads on" in text
        await pilot.press("tab")  # nothing to Tab to yet
        await pilot.pause()
        assert app.focused.id == "cancel"
        await pilot.press("pagedown", "pagedown", "pagedown")
        await pilot.pause()
        assert not start.disabled
        await pilot.press("enter")  # Cancel still has the focus: back to Review
        await pilot.pause()
        assert type(app.screen).__name__ == "ReviewScreen"

        await apply_confirmed(pilot)
        await wait_until(pilot, lambda: app.model.finished is not None, what="the dry run")
        await pilot.pause()
        text = shown(app)
        assert "The dry run has ended: nothing ran, nothing was changed" in text
        assert f"a real apply runs {n} actions" in text
        steps = str(app.screen.query_one("#steps-line").visual)
        assert "✓" not in steps.replace("✓ extensions", "")  # walked steps are not "done"
        assert set(app.model.steps.values()) <= {"dry-run", "satisfied"}


# -- item 6: NO_COLOR ----------------------------------------------------------------------


async def test_no_color_marks_a_refused_field_with_a_mark_not_only_dimmer(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app = WizardApp(dry_session(RTX))
    async with app.run_test(size=(80, 24)) as pilot:
        await goto(pilot, "extensions")
        jobs = field(app, "build.max_jobs")
        jobs.enter("-3")
        await pilot.pause()
        label = jobs.query_one(".field-label")
        rows = app.screen._compositor.render_strips()
        row = "".join(seg.text for seg in rows[label.region.y])
        assert row.lstrip().startswith("! Max jobs"), row
        jobs.enter("4")
        await pilot.pause()
        row = "".join(seg.text for seg in app.screen._compositor.render_strips()[label.region.y])
        assert "!" not in row


# -- item 5, 9: what the screens say -------------------------------------------------------


async def test_extensions_say_what_was_left_out_and_a_slow_build(tmp_path):
    flash = tmp_path / "flash.toml"
    flash.write_text('version = 1\n[[extensions]]\nname = "flash-attn"\nversion = "2.8.3"\n')
    app = WizardApp(Session.load(facts=v100_facts(tmp_path), answers=flash, dry_run=True))
    async with app.run_test(size=(80, 24)) as pilot:
        await goto(pilot, "extensions")
        heading = str(app.screen.query_one("#heading").visual)
        assert "flash-attn 2.8.3 left out" in heading and "already satisfied" not in heading

    data = json.loads(machine(RTX).read_text())
    data["memory"] = {"total_bytes": 8 << 30, "available_bytes": 7 << 30, "swap_total_bytes": 0}
    data["cpu"] = {"logical": 4}
    small = tmp_path / "small.json"
    small.write_text(json.dumps(data))
    app = WizardApp(Session.load(facts=small, answers=flash, dry_run=True))
    async with app.run_test(size=(80, 24)) as pilot:
        slow = "flash-attn 2.8.3 compiles here with at most 1 job at once"
        await wait_until(pilot, lambda: slow in shown(app), what="the first screen's warning")
        await goto(pilot, "extensions")
        # the recipe's measured build, 15.9 min for one arch with 16 jobs, with 1 job here
        assert "about 4 h 14 min" in shown(app) and "up to 1 jobs" not in shown(app)
        assert box(app, "build.memory_reserve").value == "10%"
        field(app, "build.memory_reserve").enter("auto")  # as the other fields take auto
        await pilot.pause()
        assert not field(app, "build.memory_reserve").refused


async def test_each_step_screen_focuses_continue_from_its_first_frame():
    """Not the first field, then Continue a moment later (keys typed then went to Install)."""
    seen = Recorder()
    app = WizardApp(dry_session(RTX))
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        for _ in range(4):
            await pilot.press("enter")
            await pilot.pause()
        ids = [m.widget.id for m in seen.of(events.DescendantFocus)]
        assert len(ids) >= 4 and set(ids) == {"next"}, ids


async def test_add_extension_starts_with_the_release_its_recipe_knows():
    app = WizardApp(dry_session(RTX))
    async with app.run_test(size=(80, 24)) as pilot:
        await goto(pilot, "extensions")
        assert app.screen.query_one("#add-version", Input).value == "2.8.3.post2"
        await pilot.press("a", "enter")
        await pilot.pause()
        assert [e.version for e in app.session.answers.extensions] == ["2.8.3.post2"]


# -- issue 22: Save answers under sudo -----------------------------------------------------

NOBODY = 65534


@pytest.fixture
def shared_tmp():
    """A directory other accounts can reach (pytest's own base directory is root-only)."""
    path = Path(tempfile.mkdtemp(prefix="mlsetup-save-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


@pytest.mark.skipif(os.geteuid() != 0, reason="saving as the invoking account needs root")
async def test_save_answers_under_sudo_belongs_to_the_invoking_account(shared_tmp, monkeypatch):
    tmp_path = shared_tmp
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    os.chown(checkout, NOBODY, NOBODY)
    monkeypatch.setenv("SUDO_UID", str(NOBODY))
    monkeypatch.setenv("SUDO_GID", str(NOBODY))
    monkeypatch.setenv("SUDO_USER", "nobody")
    monkeypatch.chdir(checkout)
    session = Session(
        fs=RootFS(tmp_path / "root"),
        facts=load_facts(machine(RTX)),
        answers=load_answers(EXAMPLE),
        dry_run=True,
    )
    app = WizardApp(session, opening="wizard")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, SaveScreen))
        await pilot.press("enter")  # ./mlsetup-answers.toml, in the checkout
        await wait_until(pilot, lambda: not isinstance(app.screen, SaveScreen))
        saved = checkout / "mlsetup-answers.toml"
        info = saved.stat()
        assert (info.st_uid, info.st_gid) == (NOBODY, NOBODY)  # not a root-owned file
        assert stat.S_IMODE(info.st_mode) == 0o600
        assert saved.read_text() == session.answers.to_toml()

        # where nobody may not write: said in the dialog, which stays open for another path
        closed = tmp_path / "root-only"
        closed.mkdir(mode=0o700)
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, SaveScreen))
        path_box = app.screen.query_one("#save-path", Input)
        path_box.value = str(closed / "answers.toml")
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, SaveScreen)
        assert f"cannot write {closed / 'answers.toml'}" in shown(app)
        assert not (closed / "answers.toml").exists()
        # a link where the file would be is not followed
        (checkout / "link.toml").symlink_to(tmp_path / "elsewhere.toml")
        path_box.value = str(checkout / "link.toml")
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, SaveScreen) and not (tmp_path / "elsewhere.toml").exists()
        await pilot.press("escape")


@pytest.mark.skipif(os.geteuid() != 0, reason="root's own save is the case under test")
def test_root_saving_its_answers_in_a_shared_directory_follows_no_link_and_spares_others_files(
    shared_tmp, monkeypatch
):
    """Root logged in as root (no sudo): a link or another account's file planted where the
    answers would go is not written through or truncated; a fresh path is saved 0600."""
    for name in ("SUDO_UID", "SUDO_GID", "SUDO_USER"):
        monkeypatch.delenv(name, raising=False)
    sticky = shared_tmp / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    session = Session(
        fs=RootFS(shared_tmp / "root"),
        facts=load_facts(machine(RTX)),
        answers=load_answers(EXAMPLE),
        dry_run=True,
    )
    victim = shared_tmp / "root-file"
    victim.write_text("root's own\n")
    (sticky / "link.toml").symlink_to(victim)
    with pytest.raises(OSError):
        session.save_answers(sticky / "link.toml")
    assert victim.read_text() == "root's own\n"

    theirs = sticky / "theirs.toml"
    theirs.write_text("nobody's notes\n")
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(OSError, match="not a file of this account's"):
        session.save_answers(theirs)
    assert theirs.read_text() == "nobody's notes\n"

    # a hard link to root's file (made by another account where fs.protected_hardlinks=0):
    # renaming over it would leave the file, writing through it would truncate the file
    os.link(victim, sticky / "hardlink.toml")
    with pytest.raises(OSError, match="has 2 hard links"):
        session.save_answers(sticky / "hardlink.toml")
    assert victim.read_text() == "root's own\n"
    # an account's link in place of a directory, to a root-only one: not followed
    closed = shared_tmp / "root-only"
    closed.mkdir(mode=0o700)
    (sticky / "dir").symlink_to(closed)
    os.lchown(sticky / "dir", NOBODY, NOBODY)
    with pytest.raises(OSError, match="symbolic link of uid"):
        session.save_answers(sticky / "dir" / "answers.toml")
    assert list(closed.iterdir()) == []

    fresh = sticky / "answers.toml"
    session.save_answers(fresh)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600
    assert fresh.read_text() == session.answers.to_toml()
    session.save_answers(fresh)  # again: replaces root's own file
    assert fresh.read_text() == session.answers.to_toml()
