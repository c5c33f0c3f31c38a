"""The import contracts ([tool.importlinter] in pyproject.toml) hold, and would catch an import
that goes back up a layer: the deferred one that tied steps.apply.diagnose to the engine (issue
35)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.common import REPO

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    # PYTHONPATH first: the packages under `root`, not the editable install's (the worktree's)
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=root, env=env, capture_output=True, text=True
    )


def test_the_import_contracts_hold():
    run = lint_imports(REPO)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout and "steps (the engine) never imports app" in run.stdout


@pytest.mark.parametrize(
    ("module", "imported", "name"),
    [
        # the circle that tied a diagnosis to the engine, within the apply package (issue 35)
        ("steps.apply.diagnose", "steps.apply.applyrun", "continue_command"),
        # the one that tied the lowest data model to the registry, across packages
        ("steps.formats.plan", "steps.planning.registry", "step_names"),
    ],
)
def test_a_deferred_import_back_up_a_layer_is_caught(tmp_path, module, imported, name):
    for tree in ("steps", "app"):
        shutil.copytree(REPO / tree, tmp_path / tree, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    source = tmp_path.joinpath(*module.split(".")).with_suffix(".py")
    source.write_text(
        source.read_text()
        + "\n\ndef _deferred() -> str:\n"
        + f"    from {imported} import {name}\n\n"
        + f"    return str({name})\n"
    )
    run = lint_imports(tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"{module} -> {imported}" in run.stdout, run.stdout


def test_a_viewers_diagnosis_loads_no_engine():
    """no_space() is what a viewer of a run shows on a full disk: it needs the signatures and
    the next command, not the engine (it loaded 33 steps modules through applyrun)."""
    code = (
        "import json, sys\nfrom steps.apply.diagnose import no_space, unwritable\n"
        "no_space('/tmp', None); unwritable('/tmp', 30)\n"
        "print(json.dumps(sorted(m for m, module in sys.modules.items()\n"
        "    if m.startswith('steps.') and not hasattr(module, '__path__'))))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert run.returncode == 0, run.stderr
    loaded = json.loads(run.stdout)
    assert "steps.apply.applyrun" not in loaded and "steps.apply.engine" not in loaded, loaded
    assert len(loaded) <= 8, loaded
