"""mlsetup as a user gets it: the wheel and sdist built from this checkout, the wheel installed
into a fresh venv outside the checkout, every command run from a directory that is not the
checkout (and holds a foreign `app/` and `steps/`, as a container's /app would). An editable
install hides a file left out of the wheel; this does not.

The fresh venv has the wheel alone (`--no-deps`); its dependencies come from the test venv's
site-packages through a .pth line, so the job needs no index and no download on a clean clone.
A .pth line puts the directory on sys.path after the venv's own site-packages and runs none of
the .pth files in it, so the checkout's editable install stays out: only the wheel's files can
be imported as app, steps and assets.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.common import MACHINES, REPO

# under xdist (tests/run.sh) on one worker: one wheel, built once from this checkout
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("installed")]

NOBODY = 65534
VERSION_LINE = "mlsetup 0.1.0"
FOREIGN = "a foreign package from the working directory was imported"


@dataclass(frozen=True)
class Built:
    wheel: Path
    sdist: Path


@dataclass(frozen=True)
class Installed:
    venv: Path
    cwd: Path  # not the checkout; holds foreign app/ and steps/ packages
    shared: bool  # every account can run this install (the non-root test needs that)

    @property
    def mlsetup(self) -> str:
        return str(self.venv / "bin" / "mlsetup")

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    def env(self) -> dict[str, str]:
        return {
            "PATH": f"{self.venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.cwd),
            "LANG": "C.UTF-8",
            "UV_OFFLINE": "1",  # plan --facts resolves when an index answers: none here
        }

    def run(self, *argv: str, **kw) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            cwd=self.cwd,
            env=self.env(),
            timeout=120,
            **kw,
        )
        assert "Traceback" not in done.stderr, done.stderr
        assert FOREIGN not in done.stdout + done.stderr
        return done


def _tracked(*tops: str) -> set[str]:
    if not (REPO / ".git").exists() or shutil.which("git") is None:
        pytest.skip("needs the git checkout to know which files the packages are made of")
    listed = subprocess.run(
        ["git", "ls-files", "--", *tops], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    return {name for name in listed if (REPO / name).is_file()}  # not those deleted, uncommitted


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """`python -m build`: the sdist, then the wheel from the unpacked sdist, as a user's pip or
    a distribution builds it (so the wheel can only hold what the sdist carries)."""
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [wheel] = out.glob("mlsetup-*.whl")
    [sdist] = out.glob("mlsetup-*.tar.gz")
    return Built(wheel, sdist)


def _reachable_by_all(path: Path) -> bool:
    """Every directory above `path` can be searched, and `path` run, by any account."""
    path = path.resolve()
    return all(p.stat().st_mode & stat.S_IXOTH for p in [path, *path.parents])


def _interpreter() -> tuple[str, bool]:
    """The test venv's base interpreter, or where other accounts cannot reach it (pyenv under a
    0700 /root) the system's python3.X of the same version: the same ABI, so the test venv's
    compiled dependencies load in either. Returns (interpreter, every account can run it)."""
    base = Path(getattr(sys, "_base_executable", sys.executable))
    if _reachable_by_all(base):
        return str(base), True
    system = Path("/usr/bin/python{}.{}".format(*sys.version_info[:2]))
    if system.exists() and _reachable_by_all(system):
        return str(system), True
    return str(base), False


def make_venv(dest: Path, wheel: Path, script: bool = True) -> bool:
    """A fresh venv at `dest` with the wheel installed (its dependencies from the test venv).
    Returns whether every account can run it."""
    python, shared = _interpreter()
    subprocess.run([python, "-m", "venv", "--without-pip", str(dest)], check=True, timeout=120)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(dest / "bin/python"),
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-index",
            "--no-compile",
            str(wheel),
        ],
        check=True,
        timeout=300,
    )
    site = subprocess.run(
        [str(dest / "bin/python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    deps = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (Path(site) / "zz_test_dependencies.pth").write_text("".join(f"{d}\n" for d in sorted(deps)))
    if not script:
        (dest / "bin/mlsetup").unlink()
    reachable = all(os.stat(d).st_mode & stat.S_IROTH and _reachable_by_all(Path(d)) for d in deps)
    return shared and reachable


def _foreign_cwd(where: Path) -> Path:
    """A working directory whose app/ and steps/ packages would be imported by `python -m app.cli`
    or `python -c ...` run in it."""
    cwd = where / "work"
    for package in ("app", "steps", "assets"):
        (cwd / package).mkdir(parents=True)
        (cwd / package / "__init__.py").write_text(f"print({FOREIGN!r})\nraise SystemExit(99)\n")
    (cwd / "app" / "cli.py").write_text(f"print({FOREIGN!r})\nraise SystemExit(99)\n")
    return cwd


@pytest.fixture(scope="module")
def installed(built: Built) -> Iterator[Installed]:
    # not under pytest's 0700 base directory: the non-root test runs this install as nobody
    base = Path(tempfile.mkdtemp(prefix="mlsetup-installed-"))
    base.chmod(0o755)
    try:
        shared = make_venv(base / "venv", built.wheel)
        yield Installed(base / "venv", _foreign_cwd(base), shared)
    finally:
        shutil.rmtree(base)


def test_the_wheel_holds_every_module_and_asset_and_nothing_else(built: Built):
    with zipfile.ZipFile(built.wheel) as whl:
        names = {n for n in whl.namelist() if not n.startswith("mlsetup-0.1.0.dist-info/")}
        meta = whl.read("mlsetup-0.1.0.dist-info/METADATA").decode()
        licence = set(whl.namelist()) & {"mlsetup-0.1.0.dist-info/licenses/LICENSE"}
    missing = _tracked("app", "steps", "assets") - names
    assert not missing, f"left out of the wheel: {sorted(missing)}"
    assert {n.split("/")[0] for n in names} == {"app", "steps", "assets"}  # no tests/, no junk
    assert "License-Expression: MIT" in meta and licence


def test_the_sdist_carries_every_tracked_file_the_tests_included(built: Built):
    with tarfile.open(built.sdist) as sdist:
        names = {m.name.split("/", 1)[1] for m in sdist.getmembers() if m.isfile()}
    missing = _tracked(".") - {".gitignore", "assets/ansible/.gitignore"} - names
    assert not missing, f"left out of the sdist: {sorted(missing)}"
    assert {"LICENSE", "tests/run.sh", "tests/test_installed.py", "install.sh"} <= names


def test_the_installed_commands_run_from_another_directory(installed: Installed):
    usage = installed.run(installed.mlsetup, "--help")
    assert usage.returncode == 0 and usage.stdout.startswith("usage: mlsetup")
    for command in ("probe", "plan", "apply", "attach", "answers"):
        assert command in usage.stdout
    version = installed.run(installed.mlsetup, "--version")
    assert version.stdout.strip() == VERSION_LINE
    facts = installed.run(installed.mlsetup, "probe", "--json")
    assert facts.returncode == 0 and '"schema": "mlsetup.facts/1"' in facts.stdout


@pytest.mark.parametrize("machine", sorted(p.name for p in MACHINES.glob("*.json")))
def test_plan_and_a_dry_apply_on_every_recorded_machine(installed: Installed, machine: str):
    # the recorded machine as the wheel ships it, not the checkout's copy
    shipped = installed.venv.glob(f"lib/python*/site-packages/assets/machines/{machine}")
    [facts] = list(shipped)
    plan = installed.run(installed.mlsetup, "plan", "--facts", str(facts))
    assert plan.returncode == 0, plan.stderr
    as_json = installed.run(installed.mlsetup, "plan", "--facts", str(facts), "--json")
    assert '"schema": "mlsetup.plan/1"' in as_json.stdout
    answers = installed.cwd / "answers.toml"
    answers.write_text('version = 1\n[venv]\npath = "/tmp/mlsetup-installed-test-env"\n')
    dry = installed.run(
        installed.mlsetup, "--dry-run", "apply", "--facts", str(facts), "--answers", str(answers)
    )
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "dry run" in dry.stdout


def test_plan_names_an_installation_other_accounts_could_change(installed: Installed):
    """Root runs the installation's code and build tools: `plan` checks it by the trust rules
    it applies to everything else (a tarball extracted as root keeps group write)."""
    if os.geteuid() != 0:
        pytest.skip("the installation's trust is root's question")
    [facts] = installed.venv.glob("lib/python*/site-packages/assets/machines/h200-ubuntu2404.json")
    clean = installed.run(installed.mlsetup, "plan", "--facts", str(facts))
    assert clean.returncode == 0 and "installation can be changed" not in clean.stderr
    [nvcc] = installed.venv.glob("lib/python*/site-packages/assets/buildtools/nvcc")
    mode = nvcc.stat().st_mode
    nvcc.chmod(mode | 0o020)
    try:
        warned = installed.run(installed.mlsetup, "plan", "--facts", str(facts))
    finally:
        nvcc.chmod(mode)
    assert warned.returncode == 0
    assert "installation can be changed by accounts other than root" in warned.stderr
    assert f"{nvcc} (mode {(mode | 0o020) & 0o777:o})" in warned.stderr


def test_the_schema_into_head_ends_quietly(installed: Installed):
    piped = installed.run(
        "/bin/sh",
        "-c",
        f"{installed.mlsetup} answers --schema | head -1; "
        f"{installed.mlsetup} plan --facts {MACHINES / 'h200-ubuntu2404.json'} | head -1",
    )
    assert piped.stdout.splitlines()[0] == "{" and piped.stderr == ""
    assert installed.run(installed.mlsetup, "answers").returncode == 0


PILOT = """
import asyncio, sys
from importlib.resources import files
from pathlib import Path

from app.tui.app import WizardApp
from app.tui.screens.summary import SummaryScreen
from app.tui.session import Session


async def main() -> None:
    facts = Path(str(files("assets") / "machines" / "h200-ubuntu2404.json"))
    app = WizardApp(Session.load(facts=facts, dry_run=True))
    async with app.run_test(size=(100, 30)) as pilot:
        for _ in range(6):  # Machine, Driver, Toolkit, Venv, Extensions, Review (asks first)
            await pilot.press("enter")
            await pilot.pause()
        for _ in range(200):  # the confirmation, marked as a dry run: Cancel has the focus
            if type(app.screen).__name__ == "ConfirmScreen":
                break
            await asyncio.sleep(0.05)
        await pilot.press("end")  # Start waits until the whole list has been on screen
        for _ in range(200):
            if getattr(app.screen, "seen_all", False):
                break
            await asyncio.sleep(0.05)
        await pilot.press("tab", "enter")
        await pilot.pause()
        for _ in range(600):
            if app.model.finished is not None:
                break
            await asyncio.sleep(0.05)
        await pilot.pause()
        assert app.model.finished is not None and app.model.finished.code == 0
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, SummaryScreen), type(app.screen).__name__
        print("summary:", type(app.screen).__name__, app.css_path)


asyncio.run(main())
"""


def test_the_wizard_headless_dry_run_to_the_summary(installed: Installed, tmp_path: Path):
    script = tmp_path / "pilot.py"  # its own directory is sys.path[0], not the foreign cwd
    script.write_text(PILOT)
    done = installed.run(installed.python, str(script))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "summary: SummaryScreen" in done.stdout
    assert str(installed.venv) in done.stdout  # the stylesheet is the installed one


ENGINE = """
import json
from steps.apply.service import engine_argv, mlsetup_command, resume_unit
print(json.dumps({"engine": engine_argv(["--answers", "F"]), "command": mlsetup_command(),
                  "unit": resume_unit()}))
"""


def _engine_and_unit(installed: Installed, tmp_path: Path) -> dict:
    import json

    script = tmp_path / "engine.py"
    script.write_text(ENGINE)
    done = installed.run(installed.python, str(script))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_engine_and_the_resume_unit_start_the_installed_mlsetup(
    installed: Installed, tmp_path: Path
):
    seen = _engine_and_unit(installed, tmp_path)
    assert seen["engine"] == [installed.mlsetup, "apply", "--answers", "F", "--foreground"]
    assert f"\nExecStart={installed.mlsetup} apply --resume --foreground\n" in seen["unit"]
    assert "@MLSETUP@" not in seen["unit"]
    # the command the detached engine runs, run in the foreign working directory
    assert installed.run(*seen["command"], "--version").stdout.strip() == VERSION_LINE


def test_without_a_console_script_the_module_runs_safe_from_a_foreign_app(
    built: Built, tmp_path: Path
):
    """`pip install --user`: no script beside the interpreter, so `python -P -m app.cli` (-I on
    3.10), which a foreign app/ in the working directory cannot shadow."""
    bare = Installed(tmp_path / "venv", _foreign_cwd(tmp_path), False)
    make_venv(bare.venv, built.wheel, script=False)
    seen = _engine_and_unit(bare, tmp_path)
    assert seen["command"][0] == bare.python and seen["command"][2:] == ["-m", "app.cli"]
    assert (
        f"\nExecStart={bare.python} {seen['command'][1]} -m app.cli apply --resume" in seen["unit"]
    )
    assert bare.run(*seen["command"], "--version").stdout.strip() == VERSION_LINE


def test_a_dry_run_before_apply_as_another_account_is_a_dry_run(installed: Installed):
    """`mlsetup --dry-run apply --answers F` by an account that is not root: a dry run, exit 0
    (the option used to be dropped before the command: a real apply, refused with exit 3)."""
    if os.geteuid() != 0:
        pytest.skip("runs the command as nobody: needs root to switch to it")
    if not installed.shared:
        pytest.skip("no interpreter and test venv every account can reach on this machine")
    answers = installed.cwd / "nobody-answers.toml"
    answers.write_text(
        'version = 1\n[venv]\npath = "/tmp/mlsetup-nobody-env"\n[torch]\ncuda = "cpu"\n'
    )
    answers.chmod(0o644)
    for path in (installed.cwd, installed.cwd.parent):
        path.chmod(0o755)
    done = installed.run(
        installed.mlsetup,
        "--dry-run",
        "apply",
        "--answers",
        str(answers),
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(dry run: not executed)" in done.stdout and "dry run" in done.stdout
