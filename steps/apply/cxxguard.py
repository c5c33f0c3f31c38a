"""The build's C++ guard: a compile that would stop at torch's `#error C++NN` is refused before
ninja starts, with the two lines that say why in its log (the diagnosis reads them).

steps/decide/cxxstd.py reads the standards (ATen.h's, a setup.py's); this module decides, for one
build action of an apply, whether the standard the build passes is below the one the venv's torch
requires."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from steps.apply.applyrun import ApplyRun
from steps.core.safefs import open_append, open_dir, read_bounded
from steps.core.sizes import MiB
from steps.decide.choices import BuildTarget
from steps.decide.cxxstd import HEADER, setup_passes
from steps.formats.plan import Action
from steps.run.runner import Result
from steps.stack.venvstate import probe_venv

log = logging.getLogger("mlsetup.builds")

SETUP_PY_LIMIT = 4 * MiB  # flash-attn 2.8.3.post2's setup.py is 25 KB


def cxx_refusal(run: ApplyRun, action: Action, target: BuildTarget) -> list[str]:
    """Why this build cannot compile against the venv's torch, before ninja starts: the
    standard torch's ATen.h requires (its #error line) against the one the build passes
    (the recipe's compile_as_cxx, else the source's setup.py, else the recipe). [] when it
    can or when either is unknown (the compile then says)."""
    venv = probe_venv(run.fs, run.choices.venv_path)
    needs = venv.torch_cxx if venv else None
    if needs is None:
        return []
    recipe = target.recipe
    source = action.argv[-1]  # what `pip wheel` builds: the unpacked tree, or the recipe's
    # own source directory, which is where the recipe says (as the build's source check reads it)
    mine = recipe.requirement_for(target.answer.version) == source
    local = Path(source) if mine else run.fs.path(source)
    passes, where = recipe.compile_as_cxx, "the recipe's compile_as_cxx"
    if passes is None:
        passes, where = _setup_standard(local), f"-std in {source}/setup.py"
    if passes is None:
        passes, where = recipe.cxx_standard, "the recipe's cxx_standard"
    if passes is None or passes >= needs:
        return []
    name, version = target.answer.name, target.answer.version
    torch = venv.version_of("torch") if venv else None
    return [
        f"torch {torch}'s {HEADER}: #error C++{needs} or later compatible compiler is "
        "required to use ATen.",
        f"mlsetup: {name} {version} builds with C++{passes} ({where}), but torch {torch} "
        f"in {run.choices.venv_path} requires C++{needs} ({HEADER}): every file "
        "including torch would stop at that #error, so the compile was not started "
        "(ninja never ran)",
    ]


def _setup_standard(source: Path) -> int | None:
    """The C++ standard the source's setup.py passes (read as root: bounded, no link
    followed), None when it passes none or cannot be read."""
    try:
        fd = open_dir(source)
        try:
            text = read_bounded("setup.py", SETUP_PY_LIMIT, dir_fd=fd)
        finally:
            os.close(fd)
    except OSError:
        return None
    return setup_passes(text.decode("utf-8", "replace"))


def refuse(action: Action, log_path: Path, lines: list[str]) -> Result:
    """The build's failure without running it: its log says why, the diagnosis reads it."""
    log_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, _ = open_append(log_path)
    with os.fdopen(fd, "a") as out:
        out.write("\n".join(lines) + "\n")
    log.info("%s: refused before the compile: %s", action.id, lines[-1])
    return Result(exit_code=1, elapsed=0.0, tail=lines)
