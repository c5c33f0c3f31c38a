"""The command line's contract: every global option means the same before or after the command,
bad usage is exit 2 with nothing run, and a closed stdout ends quietly."""

from __future__ import annotations

import ast
import glob
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from uv import find_uv_bin

from app.cli import GLOBAL_DEFAULTS, TAKES, main
from tests.common import MACHINES, REPO, run_cli
from tests.fakemachine import FakeMachine

H200 = str(MACHINES / "h200-ubuntu2404.json")
# uv's words when it cannot reach the index (a machine without the registries)
UNREACHABLE = re.compile(r"Failed to fetch|error sending request|dns error|network", re.IGNORECASE)
CPU_ANSWERS = 'version = 1\n[torch]\ncuda = "cpu"\n'


@dataclass
class Outcome:
    code: int
    out: str
    err: str


def mlsetup(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Outcome:
    """`mlsetup ARGV` in this process, through the same main() the console script calls."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(argv)
    captured = capsys.readouterr()
    return Outcome(int(exited.value.code or 0), captured.out, captured.err)


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, str]:
    """@ROOT@ a fake machine (Debian 12, no GPU), @ANSWERS@ a CPU-torch answers file."""
    FakeMachine(tmp_path / "root", distro=("debian", "12"))
    answers = tmp_path / "answers.toml"
    answers.write_text(CPU_ANSWERS)
    return {
        "@ROOT@": str(tmp_path / "root"),
        "@ANSWERS@": str(answers),
        "@H200@": H200,
        "@OUT@": str(tmp_path / "stack.lock"),
    }


def _probe_os(o: Outcome) -> object:
    return o.code, json.loads(o.out)["os"]  # memory and disk figures move between two probes


def _plan(o: Outcome) -> object:
    plan = json.loads(o.out)
    return o.code, [
        (s["name"], s["status"], [a["argv"] for a in s["actions"]]) for s in plan["steps"]
    ]


def _dry_run(o: Outcome) -> object:
    assert o.code == 0, o.err
    assert "dry run" in o.out and "(dry run: not executed)" in o.out  # shown, never executed
    # nothing resolved: the torch it shows is said to be a guess (plan and apply lock another)
    assert "nothing is resolved, so the torch shown is a guess" in o.out, o.out
    return o.code, [line.split("]", 1)[1] for line in o.out.splitlines() if "]" in line]


def _refused(o: Outcome) -> object:
    assert o.code == 2 and "usage:" in o.err, o
    return o.code


def _code(o: Outcome) -> object:
    return o.code


@dataclass(frozen=True)
class Case:
    option: list[str]  # the global option, with its value
    command: str
    rest: list[str]  # the command's own arguments
    observe: Callable[[Outcome], object]  # what must be the same in both positions
    without: bool = True  # the result differs when the option is left out (it has an effect)


CASES = [
    Case(["--root", "@ROOT@"], "probe", ["--json"], _probe_os),
    Case(["--root", "@ROOT@"], "plan", ["--answers", "@ANSWERS@", "--json"], _plan),
    Case(["--root", "@ROOT@"], "apply", ["--dry-run", "--answers", "@ANSWERS@"], _dry_run),
    Case(["--root", "@ROOT@"], "answers", ["--schema"], _code, without=False),
    Case(["--root", "@ROOT@"], "attach", [], _code, without=False),
    Case(["--dry-run"], "apply", ["--facts", "@H200@", "--answers", "@ANSWERS@"], _dry_run),
    Case(["--dry-run"], "plan", ["--facts", "@H200@", "--json"], _plan, without=False),
    Case(["--dry-run"], "probe", ["--json", "--root", "@ROOT@"], _probe_os, without=False),
    Case(["--facts", "@H200@"], "plan", ["--json", "--root", "@ROOT@"], _plan),
    Case(["--facts", "@H200@"], "apply", ["--dry-run", "--answers", "@ANSWERS@"], _dry_run),
    Case(["--answers", "@ANSWERS@"], "plan", ["--facts", "@H200@", "--json"], _plan),
    Case(["--answers", "@ANSWERS@"], "apply", ["--dry-run", "--facts", "@H200@"], _dry_run),
    # offline (the tests reach no index): the same refusal either way, naming the index
    Case(["--facts", "@H200@"], "lock", ["--answers", "@ANSWERS@", "-o", "@OUT@"], _code, False),
    Case(["--answers", "@ANSWERS@"], "lock", ["--facts", "@H200@", "-o", "@OUT@"], _code, False),
    # a command with no use for the option refuses it, wherever it stands
    Case(["--facts", "@H200@"], "probe", ["--json"], _refused),
    Case(["--answers", "@ANSWERS@"], "probe", [], _refused),
    Case(["--facts", "@H200@"], "attach", [], _refused),
    Case(["--answers", "@ANSWERS@"], "answers", ["--schema"], _refused),
]


def _fill(argv: list[str], inputs: dict[str, str]) -> list[str]:
    return [inputs.get(a, a) for a in argv]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.option[0]}-{c.command}")
def test_a_global_option_means_the_same_before_and_after_the_command(
    case: Case,
    inputs: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setenv("SUDO_USER", "alice")  # the fake machine's account, for the venv step
    option, rest = _fill(case.option, inputs), _fill(case.rest, inputs)
    root = [] if "--root" in case.option + case.rest else ["--root", inputs["@ROOT@"]]
    before = mlsetup([*option, case.command, *rest, *root], capsys)
    after = mlsetup([case.command, *option, *rest, *root], capsys)
    assert case.observe(before) == case.observe(after), (before, after)
    if case.without:  # and the option was not simply dropped in both
        left_out = mlsetup([case.command, *rest, *root], capsys)
        assert left_out.code != before.code or left_out.out != before.out, left_out


def test_the_table_covers_every_global_option_with_every_command_in_both_positions():
    options = {c.option[0] for c in CASES}
    assert options == {"--" + name.replace("_", "-") for name in GLOBAL_DEFAULTS}
    for name in GLOBAL_DEFAULTS:
        flag = "--" + name.replace("_", "-")
        covered = {c.command for c in CASES if c.option[0] == flag}
        wanted = {cmd for cmd in TAKES if cmd is not None}
        if name in ("answers", "facts"):  # taken or refused: both are a stated behaviour
            assert covered >= {cmd for cmd in wanted if name in TAKES[cmd]}
            assert covered - {cmd for cmd in wanted if name in TAKES[cmd]}, flag
        else:
            assert covered >= {"probe", "plan", "apply"}, flag


def test_answers_alone_prints_its_help(capsys: pytest.CaptureFixture[str]):
    o = mlsetup(["answers"], capsys)
    assert o.code == 0 and o.out.startswith("usage: mlsetup answers")
    assert "--schema" in o.out and "answers.example.toml" in o.out


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["answers", "--schema"],
        ["answers"],
        ["probe"],
        ["probe", "--json"],
        ["plan", "--facts", H200],
        ["plan", "--facts", H200, "--json"],
        [
            "apply",
            "--dry-run",
            "--facts",
            H200,
            "--answers",
            str(REPO / "assets/answers.example.toml"),
        ],
    ],
    ids=" ".join,
)
def test_a_closed_stdout_ends_quietly(argv: list[str], tmp_path: Path):
    """`mlsetup … | head -1` where head has gone: no BrokenPipeError traceback on stderr."""
    closed_stdout_run(sys.executable, argv, tmp_path)


def closed_stdout_run(python: str, argv: list[str], tmp_path: Path) -> None:
    """`(sleep 1; mlsetup ARGV) | true` with `python`: the reader is gone before the first write.
    Its stdout is block-buffered, as in a user's shell (no PYTHONUNBUFFERED, which would write
    each line at once and hide what is left in the buffer for the interpreter's exit)."""
    read, write = os.pipe()
    os.close(read)
    FakeMachine(tmp_path / "root")
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    done = subprocess.run(
        [
            python,
            "-m",
            "app.cli",
            *argv,
            *(["--root", str(tmp_path / "root")] if argv != ["--help"] else []),
        ],
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        timeout=120,
        env={**environ, "SUDO_USER": "alice"},
    )
    os.close(write)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.returncode in (0, 141), (done.returncode, done.stderr)


def find_python(version: str) -> str | None:
    """An interpreter of `version` that runs: on PATH, built by pyenv (whose shims answer only
    for its selected version), or one uv finds among the system's."""
    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(glob.glob(str(Path.home() / f".pyenv/versions/{version}.*/bin/python3")))
    uv_found = subprocess.run(
        [find_uv_bin(), "python", "find", "--python-preference", "only-system", version],
        capture_output=True,
        text=True,
        env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"},
    )
    candidates.append(uv_found.stdout.strip() if uv_found.returncode == 0 else None)
    for candidate in filter(None, candidates):
        done = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
        )
        if done.returncode == 0 and done.stdout.strip() == version:
            return candidate
    return None


@pytest.mark.slow
@pytest.mark.parametrize("version", ["3.10", "3.11", "3.12", "3.13"])
def test_a_closed_stdout_ends_quietly_on_every_supported_python(
    version: str, tmp_path: Path, uv_binary: Path
):
    """The same on each Python the project supports (requires-python >= 3.10; the interpreter
    decides when a buffered stdout is flushed): a venv of that Python with mlsetup's
    dependencies, the checkout on its path. An interpreter this machine lacks is skipped
    (nothing downloads one)."""
    python = find_python(version)
    if python is None:
        pytest.skip(f"no Python {version} on this machine (PATH, pyenv, uv python find)")
    uv = str(uv_binary)
    # no Python is fetched; the index is reached with the system's certificates, as mlsetup's
    # own uv is (steps/run/uvconfig.py: behind a TLS-inspecting proxy, uv's bundled roots fail)
    # mlsetup's dependencies come from the index (the suite's UV_OFFLINE=1 would make them
    # come from whatever uv's cache happens to hold: a fresh machine's holds nothing)
    no_download = {
        "UV_SYSTEM_CERTS": "true",
        **os.environ,
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_OFFLINE": "0",
    }
    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", "-q", "--python", python, str(venv)], check=True, env=no_download)
    install = subprocess.run(
        [uv, "pip", "install", "-q", "--python", str(venv / "bin/python"), "-r", "pyproject.toml"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=no_download,
        timeout=300,
    )
    if install.returncode != 0 and UNREACHABLE.search(install.stderr):
        pytest.skip(f"the package index is unreachable: {install.stderr.strip()[-300:]}")
    assert install.returncode == 0, install.stderr
    for argv in (["--help"], ["plan", "--facts", H200]):
        closed_stdout_run(str(venv / "bin/python"), argv, tmp_path)


def test_the_exit_codes_are_defined_in_one_module():
    """steps/core/exitcodes.py alone names them; the engine, the errors and every front end import
    them from there (they were defined in three modules, one copy unused)."""
    defined: dict[str, list[str]] = {}
    for path in sorted([*(REPO / "steps").rglob("*.py"), *(REPO / "app").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                names = target.elts if isinstance(target, ast.Tuple) else [target]
                for name in names:
                    if isinstance(name, ast.Name) and name.id.startswith("EXIT_"):
                        defined.setdefault(name.id, []).append(path.relative_to(REPO).as_posix())
    assert defined and all(where == ["steps/core/exitcodes.py"] for where in defined.values()), (
        defined
    )


def test_the_readmes_unattended_quick_start_plans(tmp_path: Path):
    """The answers file the README gives a newcomer is valid and plans the stack it promises."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("# server.toml\n", 1)[1].split("```", 1)[0]
    answers = tmp_path / "server.toml"
    answers.write_text(block)
    fresh = MACHINES / "fresh-h100x8-ubuntu2204.json"
    # the recorded box has Secure Boot on: an automatic reboot is refused there, as it says
    refused = run_cli("plan", "--facts", str(fresh), "--answers", str(answers))
    assert refused.returncode == 2 and 'reboot.policy = "auto": Secure Boot is on' in (
        refused.stderr
    )
    assert 'so use `"ask"` there' in readme
    facts = json.loads(fresh.read_text())
    facts["secure_boot"] = "disabled"
    (tmp_path / "fresh.json").write_text(json.dumps(facts))
    done = run_cli("plan", "--facts", str(tmp_path / "fresh.json"), "--answers", str(answers))
    assert done.returncode == 0, done.stderr
    assert "flash-attn" in done.stdout and "reboot" in done.stdout.lower()


def test_answers_help_keeps_the_example_path_whole(tmp_path: Path):
    """The path is copied from the help: argparse's wrapping cut it at site-packages' hyphen."""
    done = run_cli("answers", "--help", env={"COLUMNS": "30"})  # narrower than the path
    example = str(REPO / "assets" / "answers.example.toml")
    assert done.returncode == 0
    assert any(line.strip() == example for line in done.stdout.splitlines())
