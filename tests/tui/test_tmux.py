"""The tmux walkthrough (tests/tmux_walkthrough.py): a whole dry run driven by key presses
at 80x24, in colour and under NO_COLOR, read back with capture-pane, ending on the Summary
with the answers saved; and issue 34's losses of input, each walked the same way
(tests/tmux_defects.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from tests.common import REPO


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@pytest.mark.parametrize("colour", ["colour", "no-color"])
def test_tmux_walkthrough_of_a_whole_dry_run(tmp_path, colour):
    """At 80x24, in colour and under NO_COLOR=1 (where a refused field must carry its mark)."""
    extra = ["--no-color"] if colour == "no-color" else []
    walk = [sys.executable, str(REPO / "tests" / "tmux_walkthrough.py"), "--keep", str(tmp_path)]
    run = subprocess.run(
        [*walk, "--size", "80x24", *extra],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr
    assert "walkthrough OK" in run.stdout
    saved = (tmp_path / "mlsetup-answers.toml").read_text()
    assert 'name = "flash-attn"' in saved and 'version = "2.8.3"' in saved


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@pytest.mark.parametrize("walk", ["help-esc", "remove", "digit"])
def test_tmux_walk_of_a_lost_input(tmp_path, walk):
    """Issue 34's losses of input in a real terminal at 80x24 (tests/tmux_defects.py): the
    packages typed and wiped by F1 Esc (and a path typed right after ctrl+s, lost), the
    extension a reflex Enter removed, the 6 that replaced the Index URL."""
    run = subprocess.run(
        [sys.executable, str(REPO / "tests" / "tmux_defects.py"), walk, "--keep", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr
    assert f"walk {walk} OK" in run.stdout


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_tmux_walk_of_vllm_transformers_accelerate_and_flash_attn(tmp_path):
    """The seed's stack typed in at 80x24 against the recorded PyPI copy (tests/tmux_stack.py):
    uv's lock shown on Venv, flash-attn added, the dry run walked to the Summary."""
    run = subprocess.run(
        [sys.executable, str(REPO / "tests" / "tmux_stack.py"), "--keep", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr
    screens = " ".join(run.stdout.split())
    assert "torch==2.13.0 (cu130 build), locked by uv, held back by vllm" in screens
    # the count Review showed is the count the dry run walked
    [review] = re.findall(r"The plan: (\d+) action\(s\) to run", screens)[-1:]
    assert f"Dry run complete: {review} actions would run" in screens
