"""What the operator typed is never lost and a reflex key never destroys (issue 34): text
typed and not yet entered survives help, save and any dialog, and is entered by Continue,
ctrl+s and a jump; Enter never lands on Remove, which asks; a digit in a text box is text,
alt+digit jumps from there."""

from __future__ import annotations

import json

import pytest
from textual import events
from textual.geometry import Region
from textual.screen import Screen
from textual.widgets import Input

from app.tui.app import WizardApp
from app.tui.screens.modals import HelpScreen, SaveScreen
from app.tui.session import Session
from app.tui.widgets.keybar import KeyBar
from app.tui.widgets.plan import CommandText
from tests.tui.helpers import dry_session, empty_root, machine, shown, wait_until
from tests.tui.test_wizard_80x24 import FRESH, RTX, box, field, goto, keys_line, type_into

FLASH = 'version = 1\n[[extensions]]\nname = "flash-attn"\nversion = "2.8.3"\n'


async def test_help_and_save_closed_with_esc_keep_the_typed_text_and_the_focus():
    app = WizardApp(dry_session(RTX))
    async with app.run_test(size=(80, 24)) as pilot:
        await goto(pilot, "venv")
        packages = box(app, "torch.packages")
        await type_into(pilot, packages, "vllm, transformers, accelerate")
        for key, dialog in (("f1", HelpScreen), ("ctrl+s", SaveScreen)):
            await pilot.press(key)
            await wait_until(pilot, lambda d=dialog: isinstance(app.screen, d), what=key)
            await pilot.press("escape")
            await wait_until(pilot, lambda: getattr(app.screen, "STEP", "") == "venv")
            await pilot.pause(0.2)
            packages = box(app, "torch.packages")
            assert packages.value == "vllm, transformers, accelerate", key
            assert app.focused is packages, (key, app.focused)
        # Continue enters it: what goes on is what is shown
        await pilot.press("tab")
        app.screen.query_one("#next").focus()
        await pilot.press("enter")
        await wait_until(pilot, lambda: getattr(app.screen, "STEP", "") == "extensions")
        assert app.session.answers.torch.packages == ["vllm", "transformers", "accelerate"]


async def test_ctrl_s_saves_what_is_typed_and_a_refused_field_stops_save_and_jump(tmp_path):
    app = WizardApp(dry_session(RTX))
    async with app.run_test(size=(80, 24)) as pilot:
        await goto(pilot, "venv")
        await type_into(pilot, box(app, "torch.packages"), "vllm, accelerate")
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, SaveScreen), what="Save")
        target = tmp_path / "answers.toml"
        app.screen.query_one("#save-path").value = str(target)
        await pilot.press("enter")
        await wait_until(pilot, lambda: target.exists(), what="the saved file")
        assert 'packages = ["vllm", "accelerate"]' in target.read_text()

        await wait_until(pilot, lambda: getattr(app.screen, "STEP", "") == "venv")
        version = box(app, "torch.version")
        await type_into(pilot, version, "==")
        await pilot.press("ctrl+s")  # refused in place, naming the key: no dialog
        await pilot.pause()
        assert getattr(app.screen, "STEP", "") == "venv" and field(app, "torch.version").refused
        assert app.focused is version
        await pilot.press("§")  # alt+6 as a terminal sends it (Esc 6): a jump waits too
        await pilot.pause()
        assert getattr(app.screen, "STEP", "") == "venv" and app.focused is version


async def test_enter_after_the_last_field_goes_to_continue_and_remove_asks(tmp_path):
    answers = tmp_path / "flash.toml"
    answers.write_text(FLASH)
    app = WizardApp(dry_session(RTX, answers))
    async with app.run_test(size=(80, 24)) as pilot:
        await goto(pilot, "extensions")
        await type_into(pilot, box(app, "build.memory_limit"), "32GiB")
        await pilot.press("enter")
        await pilot.pause()
        assert app.session.answers.build.memory_limit == "32GiB"
        assert app.focused is not None and app.focused.id == "next", app.focused
        assert "remove" not in keys_line(app).lower()
        # Remove asks, the safe answer focused: a reflex Enter keeps the extension
        app.screen.query_one("#remove-0").focus()
        await pilot.press("enter")
        await wait_until(
            pilot, lambda: type(app.screen).__name__ == "QuestionScreen", what="Remove?"
        )
        await pilot.press("enter")
        await wait_until(pilot, lambda: getattr(app.screen, "STEP", "") == "extensions")
        assert [e.name for e in app.session.answers.extensions] == ["flash-attn"]
        app.screen.query_one("#remove-0").focus()
        await pilot.press("enter")
        await wait_until(
            pilot, lambda: type(app.screen).__name__ == "QuestionScreen", what="Remove?"
        )
        await pilot.press("tab", "enter")
        await wait_until(pilot, lambda: not app.session.answers.extensions, what="removed")


async def test_a_digit_after_an_accepted_enter_is_typed_in_sight_and_alt_digit_jumps():
    app = WizardApp(dry_session(RTX))
    async with app.run_test(size=(80, 24)) as pilot:
        await goto(pilot, "venv")
        await type_into(pilot, box(app, "torch.packages"), "vllm")
        await pilot.press("enter")
        await pilot.pause()
        index = box(app, "torch.index_url")
        assert app.focused is index
        before = index.value
        await pilot.press("6")  # a reflex jump: typed at the end, in sight, not over it
        await pilot.pause()
        assert index.value == before + "6" and getattr(app.screen, "STEP", "") == "venv"
        assert "M-1-6 step" in keys_line(app)
        await pilot.press("backspace", "§")  # alt+6 from a terminal (Esc 6)
        await wait_until(pilot, lambda: getattr(app.screen, "STEP", "") == "review", what="jump")
        assert app.session.answers.torch.packages == ["vllm"]


# -- what the screens show whole ------------------------------------------------------------


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_the_commands_with_a_script_show_every_line_of_it(tmp_path, size):
    """The unpack script and flash-attn's smoke test (python -c with lines of its own) were
    cut after their first line on Extensions and Review."""
    answers = tmp_path / "flash.toml"
    answers.write_text(FLASH)
    app = WizardApp(dry_session(RTX, answers))
    async with app.run_test(size=size) as pilot:
        for step in ("extensions", "review"):
            await goto(pilot, step)
            scripts = [c for c in app.screen.query(CommandText) if "\n" in c.command]
            assert len(scripts) >= 2, step  # the unpack script and the smoke test
            for command in scripts:
                lines = command.render().plain.split("\n")
                assert command.size.height == len(lines), (step, command.command[:60])
                assert all(len(line) <= command.size.width for line in lines)
                assert " ".join("\n".join(lines).split()) == " ".join(command.command.split())
            assert "ref = torch" in "\n".join(c.render().plain for c in scripts)


async def test_help_scrolls_at_80x24():
    app = WizardApp(dry_session(RTX))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")  # Machine's help, the longest
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        await pilot.pause()
        body = app.screen.query_one("#help-body")
        assert body.max_scroll_y > 0  # its last lines are below the dialog
        await pilot.press("pagedown")
        await pilot.pause()
        assert body.scroll_y > 0
        await pilot.press("end")
        await pilot.pause()
        assert body.scroll_y == body.max_scroll_y
        assert "ctrl+q" in str(app.screen.query_one("#help-text").visual)


async def test_save_asks_before_replacing_a_file_and_offers_the_same_path_again(tmp_path):
    target = tmp_path / "answers.toml"
    target.write_text("# the operator's own notes\n")
    app = WizardApp(dry_session(RTX))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, SaveScreen), what="Save")
        app.screen.query_one("#save-path", Input).value = str(target)
        await pilot.press("enter")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "QuestionScreen")
        await pilot.press("enter")  # the focused answer keeps the file
        await wait_until(pilot, lambda: isinstance(app.screen, SaveScreen))
        assert target.read_text() == "# the operator's own notes\n"
        await pilot.press("enter")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "QuestionScreen")
        await pilot.press("tab", "enter")
        await wait_until(pilot, lambda: not isinstance(app.screen, SaveScreen), what="saved")
        assert target.read_text() == app.session.answers.to_toml()
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, SaveScreen), what="Save")
        assert app.screen.query_one("#save-path", Input).value == str(target)


async def test_mixed_gpu_generations_warn_on_machine_and_review(tmp_path):
    """4x A100 and 4x RTX 4090 said "Warnings none"."""
    data = json.loads(machine(FRESH).read_text())
    a100 = {"name": "NVIDIA A100-SXM4-80GB", "pci_device_id": "0x20b2", "memory_bytes": 80 << 30}
    rtx4090 = {
        "name": "NVIDIA GeForce RTX 4090",
        "pci_device_id": "0x2684",
        "memory_bytes": 24 << 30,
    }
    for gpu in data["gpus"]:
        gpu.update(
            a100 | {"compute_capability": "8.0"}
            if gpu["index"] < 4
            else rtx4090 | {"compute_capability": "8.9"}
        )
    facts = tmp_path / "mixed.json"
    facts.write_text(json.dumps(data))
    app = WizardApp(Session.load(facts=facts, dry_run=True, root=empty_root()))
    async with app.run_test(size=(80, 24)) as pilot:
        for step in ("machine", "review"):
            await goto(pilot, step)
            text = " ".join(shown(app).split())
            assert (
                "mixed GPUs: 4x NVIDIA A100-SXM4-80GB (compute 8.0, 80 GiB) and "
                "4x NVIDIA GeForce RTX 4090 (compute 8.9, 24 GiB)" in text
            ), step
            assert "built for all of them (compute 8.0, 8.9)" in text
            assert "the smallest memory, 24 GiB each" in text


def typed_at_once(app: WizardApp, *keys: str) -> None:
    """Keys as a terminal hands them over when typed fast (or pasted by tmux): all of them in
    the app's queue before it handles the first, none waiting for the screen the first opens."""
    for key in keys:
        app.post_message(events.Key(key, key if len(key) == 1 else None))


async def test_keys_typed_right_after_ctrl_s_go_into_the_save_dialogs_field(tmp_path):
    """The file went to `puless-ctrl-s.toml`: the first keys typed after ctrl+s went to the
    field under the dialog (or nowhere) while the dialog was opening."""
    target = tmp_path / "typed.toml"
    app = WizardApp(dry_session(RTX))
    async with app.run_test(size=(80, 24)) as pilot:
        await goto(pilot, "venv")
        packages = box(app, "torch.packages")
        await type_into(pilot, packages, "vllm")
        typed_at_once(app, "ctrl+s", *str(target), "enter")
        await wait_until(pilot, target.exists, what="the file typed into Save")
        await wait_until(pilot, lambda: getattr(app.screen, "STEP", "") == "venv")
        assert box(app, "torch.packages").value == "vllm"
        assert 'packages = ["vllm"]' in target.read_text()


async def test_the_key_bar_offers_pgdn_in_the_first_frame_of_a_long_screen():
    """`PgDn page` was missing from the first view of a long screen and came only with a
    redraw: the bar was filled in before the screen's first layout, when nothing scrolled."""
    app = WizardApp(dry_session(RTX))
    first: dict[str, tuple[bool, str]] = {}  # each screen's first frame: scrolls?, the bar

    def drawn(screen: Screen) -> None:
        step = getattr(screen, "STEP", "")
        if not screen.is_current or step in first or not screen.query("#body"):
            return
        bar = screen.query_one(KeyBar)
        row = bar.render_lines(Region(0, 0, bar.size.width, 1))[0]
        first[step] = (screen.query_one("#body").max_scroll_y > 0, row.text)

    def pushed(screen: Screen) -> None:
        screen.screen_layout_refresh_signal.subscribe(app, drawn, immediate=True)

    async with app.run_test(size=(80, 24)) as pilot:
        app.screen_change_signal.subscribe(app, pushed, immediate=True)
        for step in ("venv", "review"):  # longer than 80x24 on this machine
            await goto(pilot, step)
            await wait_until(pilot, lambda s=step: s in first, what=f"{step}'s first frame")
            scrolls, bar = first[step]
            assert scrolls, step
            assert "PgDn page" in bar, (step, bar)


def screen_rows(app: WizardApp) -> list[str]:
    """The composited screen, row by row, as the terminal shows it."""
    return ["".join(seg.text for seg in strip) for strip in app.screen._compositor.render_strips()]


async def test_at_80x24_the_gpus_wrap_under_their_own_start_and_a_long_hint_shows_whole():
    """The GPU line went on under the label column; the Index URL's hint, shown in its empty
    box, was cut at the box's end."""
    app = WizardApp(dry_session(RTX))
    async with app.run_test(size=(80, 24)) as pilot:
        await goto(pilot, "machine")
        rows = screen_rows(app)
        at = next(i for i, row in enumerate(rows) if row.lstrip().startswith("GPUs"))
        column = rows[at].index("2 \u00d7 NVIDIA RTX PRO 6000")
        wrapped = rows[at + 1]
        assert wrapped[:column].strip() == "" and wrapped[column:].startswith("12.0"), wrapped
        assert rows[at + 2].lstrip().startswith("Driver")

        await goto(pilot, "venv")
        await type_into(pilot, box(app, "torch.index_url"), "")
        await pilot.pause()
        hint = field(app, "torch.index_url").spec.hint
        assert len(hint) > 60  # longer than the box at 80 columns
        assert hint in " ".join(" ".join(screen_rows(app)).split())
        await pilot.press(*"https://mirror.example/simple")
        await pilot.pause()
        assert hint not in " ".join(" ".join(screen_rows(app)).split())
