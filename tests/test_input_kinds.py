"""Every exit 2 says which input it refused, as the first words of its message
("mlsetup: input error (KIND): "), so that a script (the Ansible role) blames the answers only
for what the answers got wrong: a --resume with nothing to resume is not an answers error."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.cli import main
from tests.common import MACHINES
from tests.fakemachine import FakeMachine

H200 = str(MACHINES / "h200-ubuntu2404.json")
PREFIX = re.compile(r"^mlsetup: input error \((?P<kind>[a-z]+)\): ", re.M)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    FakeMachine(tmp_path / "root", distro=("debian", "12"))
    (tmp_path / "good.toml").write_text('version = 1\n[torch]\ncuda = "cpu"\n')
    (tmp_path / "bad.toml").write_text('version = 1\n[torch]\ncuda = "cu999"\n')
    (tmp_path / "facts.json").write_text('{"schema": "mlsetup.facts/0"}')
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "broken.toml").write_text("[x\n")
    return {
        "@ROOT@": str(tmp_path / "root"),
        "@GOOD@": str(tmp_path / "good.toml"),
        "@BAD@": str(tmp_path / "bad.toml"),
        "@FACTS@": str(tmp_path / "facts.json"),
        "@RECIPES@": str(tmp_path / "recipes"),
        "@H200@": H200,
    }


CASES = [
    ("answers", ["plan", "--answers", "@BAD@", "--root", "@ROOT@"], {}),
    ("answers", ["apply", "--dry-run", "--answers", "@BAD@", "--root", "@ROOT@"], {}),
    ("facts", ["plan", "--facts", "@FACTS@", "--answers", "@GOOD@"], {}),
    ("usage", ["apply", "--root", "@ROOT@"], {}),
    ("usage", ["plan", "--no-such-option"], {}),
    ("usage", ["apply", "--ticket"], {}),  # the subcommand's own parser
    ("usage", ["probe", "--root", "/no/such/dir"], {}),
    ("state", ["apply", "--resume", "--root", "@ROOT@"], {}),
    ("settings", ["probe", "--root", "@ROOT@"], {"MLSETUP_NO_SUCH_SETTING": "1"}),
    (
        "recipes",
        ["plan", "--facts", "@H200@", "--answers", "@GOOD@"],
        {"MLSETUP_EXTENSIONS_DIR": "@RECIPES@"},
    ),
]


@pytest.mark.parametrize(("kind", "argv", "env"), CASES, ids=[f"{c[0]}-{c[1][0]}" for c in CASES])
def test_an_exit_2_names_the_kind_of_input_it_refused(
    kind: str,
    argv: list[str],
    env: dict[str, str],
    files: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, files.get(value, value))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main([files.get(a, a) for a in argv])
    err = capsys.readouterr().err
    assert exited.value.code == 2, err
    found = PREFIX.search(err)
    assert found is not None and found["kind"] == kind, err
    assert "Traceback" not in err
