"""The shipped shell completion and manual page are what tools/gen_docs.py makes of the parser
today (they cannot drift from the command line), bash completes with them as an operator's
shell would, and man renders the page without a warning."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.cli import _parser
from tests.common import REPO

sys.path.insert(0, str(REPO / "tools"))
import gen_docs


def test_shipped_files_are_what_the_parser_generates():
    stale = [
        str(path.relative_to(REPO))
        for path, text in gen_docs.outputs().items()
        if not path.exists() or path.read_text() != text
    ]
    assert not stale, f"out of date: {stale}; run python tools/gen_docs.py and commit them"


def _visible(parser: argparse.ArgumentParser) -> set[str]:
    return {
        flag
        for action in parser._actions
        if action.option_strings and action.help != argparse.SUPPRESS
        for flag in action.option_strings
    }


def test_every_command_and_visible_option_is_in_each_file_and_no_hidden_one():
    top = _parser()
    [sub] = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    words = set(sub.choices) | _visible(top)
    for parser in sub.choices.values():
        words |= _visible(parser)
    man = gen_docs.MAN.read_text().replace("\\-", "-")
    for path, text in [(gen_docs.BASH, None), (gen_docs.ZSH, None), (gen_docs.MAN, man)]:
        text = text or path.read_text()
        missing = {w for w in words if w not in text}
        assert not missing, f"{path.name} lacks {sorted(missing)}"
    assert "--ticket" not in man  # hidden from --help, so from the page too


def _complete(*words: str, cwd: Path = REPO) -> list[str]:
    """What bash offers for `mlsetup WORDS...<TAB>`: the completion function run on the words
    as bash's completion machinery hands them over (COMP_WORDS, COMP_CWORD), in `cwd`."""
    script = (
        f"source {gen_docs.BASH}\n"
        'COMP_WORDS=(mlsetup "$@"); COMP_CWORD=$#\n'
        '[[ $(complete -p mlsetup) == "complete -F _mlsetup mlsetup" ]] || exit 9\n'
        '_mlsetup; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", script, "bash", *words],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0 and not done.stderr, done
    return [line for line in done.stdout.splitlines() if line]


def test_bash_accepts_the_completion():
    done = subprocess.run(["bash", "-n", str(gen_docs.BASH)], capture_output=True, text=True)
    assert done.returncode == 0 and not done.stderr, done.stderr


@pytest.mark.parametrize(
    ("words", "offered"),
    [
        (["ap"], ["apply"]),
        ([""], ["probe", "plan", "lock", "apply", "attach", "answers"]),
        (["p"], ["probe", "plan"]),
        (["--dry-run", "ap"], ["apply"]),  # a global option before the command
        (["--answers", "a.toml", "ap"], ["apply"]),  # an option's value is not the command
        (["--answers=a.toml", "ap"], ["apply"]),
        (["apply", "--re"], ["--resume"]),
        (["--dry-run", "apply", "--fo"], ["--foreground"]),
        (["probe", "--js"], ["--json"]),
        (["probe", "--ans"], []),  # probe takes no answers
        (["apply", "--ti"], []),  # hidden from --help, not offered
        (["--v"], ["--version"]),
        (["nosuch", "--"], []),
    ],
)
def test_bash_completes(words: list[str], offered: list[str]):
    # bash splits --answers=a.toml at '=' (COMP_WORDBREAKS): hand it over as bash would
    split = [w for word in words for w in (word.partition("=") if "=" in word else [word])]
    assert _complete(*split) == offered


def test_bash_completes_files_and_directories_for_the_options_that_take_them(tmp_path: Path):
    (tmp_path / "answers.toml").write_text("version = 1\n")
    (tmp_path / "answers.d").mkdir()
    assert sorted(_complete("apply", "--answers", "ans", cwd=tmp_path)) == [
        "answers.d",
        "answers.toml",
    ]
    assert _complete("apply", "--answers", "=", "", cwd=tmp_path) != []
    assert _complete("--root", "ans", cwd=tmp_path) == ["answers.d"]


def _tab_in_a_terminal(shell: list[str], setup: str, typed: str, expected: str) -> str:
    """Type `typed` and Tab in `shell` running in tmux, as an operator would at a prompt; the
    screen once it shows `expected` (or after 30 s on a busy machine)."""
    # a socket of its own per call: the previous test's server may still be exiting under load
    # (its kill-server returns first), and a new session on its socket then fails
    server = ["tmux", "-L", f"mlsetup-completion-{os.getpid()}-{time.monotonic_ns()}"]
    env = ["env", "-i", "HOME=/tmp", "TERM=xterm", "PATH=/usr/bin:/bin", "LANG=C.UTF-8"]
    subprocess.run(
        [*server, "new-session", "-d", "-x", "120", "-y", "20", *env, *shell], check=True
    )

    def screen() -> str:
        return subprocess.run(
            [*server, "capture-pane", "-p"], capture_output=True, text=True, check=True
        ).stdout

    def wait_for(text: str) -> str:
        deadline = time.monotonic() + 30
        while text not in (shown := screen()) and time.monotonic() < deadline:
            time.sleep(0.2)
        return shown

    try:
        subprocess.run([*server, "send-keys", f"{setup}; PS1='READY> '", "Enter"], check=True)
        wait_for("READY> ")
        subprocess.run([*server, "send-keys", typed, "Tab"], check=True)
        return wait_for(expected)
    finally:
        subprocess.run([*server, "kill-server"], capture_output=True)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_tab_in_bash_completes_the_command():
    shown = _tab_in_a_terminal(
        ["bash", "--norc", "--noprofile", "-i"],
        f"source {gen_docs.BASH}",
        "mlsetup ap",
        "READY> mlsetup apply",
    )
    assert "READY> mlsetup apply" in shown, shown


@pytest.mark.skipif(shutil.which("tmux") is None or shutil.which("zsh") is None, reason="needs zsh")
def test_tab_in_zsh_completes_the_command():
    shown = _tab_in_a_terminal(
        ["zsh", "-f"],
        f"fpath=({gen_docs.ZSH.parent} $fpath); autoload -U compinit; compinit -u -D",
        "mlsetup ap",
        "READY> mlsetup apply",
    )
    assert "READY> mlsetup apply" in shown, shown


@pytest.mark.skipif(shutil.which("zsh") is None, reason="needs zsh")
def test_zsh_accepts_the_completion():
    done = subprocess.run(["zsh", "-n", str(gen_docs.ZSH)], capture_output=True, text=True)
    assert done.returncode == 0 and not done.stderr, done.stderr


@pytest.mark.skipif(shutil.which("groff") is None, reason="needs groff")
def test_the_manual_page_renders_without_a_warning():
    done = subprocess.run(
        ["groff", "-man", "-Tutf8", "-ww", str(gen_docs.MAN)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and not done.stderr, done.stderr
    page = re.sub(".\b", "", done.stdout)  # grotty's overstrike bold and underline
    for heading in ("NAME", "SYNOPSIS", "OPTIONS", "COMMANDS", "EXIT STATUS", "ENVIRONMENT"):
        assert heading in page
    assert "mlsetup apply" in page and "Paused for a reboot" in page


@pytest.mark.skipif(shutil.which("man") is None, reason="needs man")
def test_man_shows_the_page():
    done = subprocess.run(
        ["man", "-l", str(gen_docs.MAN)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "MANPAGER": "cat", "MANWIDTH": "80", "LANG": "C.UTF-8"},
    )
    assert done.returncode == 0 and not done.stderr, done.stderr
    assert "mlsetup - take an Ubuntu/Debian GPU server" in done.stdout


def test_the_generator_check_mode_passes_on_the_checkout():
    done = subprocess.run(
        [sys.executable, str(REPO / "tools" / "gen_docs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout == "", done
