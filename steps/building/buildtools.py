"""The build's own tools: mlsetup's nvcc and ninja, and what root keeps for the next build.

Both ship in the installed package (assets/buildtools/) and run as the account that compiles,
named by the build environment:

- `PYTORCH_NVCC` = assets/buildtools/nvcc, which torch's cpp_extension writes into build.ninja
  as the compiler of every CUDA object: it keeps only the -gencode/-arch targets of the
  architectures in `MLSETUP_CUDA_ARCHS` (the GPUs present), so an extension whose setup.py
  hard-codes its own list (causal-conv1d, mamba-ssm) compiles for this machine alone. A recipe
  opts out with `arch_trim = false`.
- with a recipe's `compile_as_cxx` (opt-in), `CXX` = assets/buildtools/cxx and that nvcc replace
  setup.py's -std with the newer standard the recipe says its sources compile as
  (`MLSETUP_CXX_STD`).
- assets/buildtools/bin/, on PATH before the venv's bin directory, holds a `ninja` that orders
  build.ninja longest object first, balanced over the governor's job slots, and execs the venv's
  ninja (assets/buildtools/order_ninja.py). Its expected times come from the tree's own
  .ninja_log, the copy of an earlier build's log root keeps beside the tree for the same
  compiling account (`MLSETUP_OBJECT_LESSONS`), or the recipe's shipped profile
  (`MLSETUP_OBJECT_PROFILE`). A recipe opts out with `longest_first = false`.

The tools are code another account runs on root's behalf, so root checks before each compile
that no account but root can change them (`check_root_only`), as for anything it hands out.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from importlib import resources
from pathlib import Path

from packaging.version import Version

from steps.building.wheels import BUILD_ROOT, tree_name
from steps.core.rootfs import RootFS
from steps.core.safefs import UnsafeFile, open_dir, read_bounded, walk
from steps.core.sizes import MiB
from steps.formats.state import write_atomic
from steps.known.knowledge import knowledge
from steps.known.recipes import PROFILES, ExtensionRecipe, arch_number

TOOLS = Path(str(resources.files("assets"))) / "buildtools"
NVCC = TOOLS / "nvcc"
CXX = TOOLS / "cxx"  # the host compiler's -std, for a recipe's compile_as_cxx
NINJA_DIR = TOOLS / "bin"
NINJA_LOG_LIMIT = 16 * MiB  # flash-attn's has 73 lines of ~200 bytes


def cuda_archs(recipe: ExtensionRecipe, compute_capabilities: list[str]) -> str:
    """What mlsetup's nvcc keeps, e.g. "90" or "80 86": each GPU's own architecture and the one
    whose code it runs by the recipe's arch_map (an 8.6 GPU runs flash-attn's sm_80 build)."""
    numbers = set()
    for cc in compute_capabilities:  # "9.0a" is kept as sm_90a, which the wrapper counts as 90
        numbers.add(arch_number(cc))
        if cc in recipe.arch_map:
            numbers.add(arch_number(recipe.arch_map[cc]))
    return " ".join(sorted(numbers, key=int))


def kept_name(tree: str, builder: int, what: str) -> str:
    """The name, beside the build tree `tree`, of what root keeps of its builds by the account
    `builder` (uid): "ninja_log" (a copy of the last build's .ninja_log) or "governor.json"
    (the memory governor's lessons). Each account's builds steer only its own next build: what
    the compiling account wrote, or made its jobs show, never orders or sizes root's."""
    return f"{tree}.by-{builder}.{what}"


KEPT = ("ninja_log", "governor.json")


def forget_kept(build_fd: int, tree: str) -> list[str]:
    """Remove what root kept of the builds of `tree` by any account (and the unkeyed copies
    of earlier releases), in root's build directory `build_fd`: a tree set aside takes its
    history with it. Returns the names removed."""
    keyed = re.compile(re.escape(f"{tree}.by-") + r"[0-9]+\.(?:ninja_log|governor\.json)")
    unkeyed = {f"{tree}.{what}" for what in KEPT}
    removed = []
    for name in os.listdir(build_fd):
        if keyed.fullmatch(name) or name in unkeyed:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=build_fd)
                removed.append(name)
    return removed


def lessons_log(name: str, version: str, builder: int) -> str:
    """Root's copy of the last build's .ninja_log by `builder`, beside the tree (a target path)."""
    return f"{BUILD_ROOT}/{kept_name(tree_name(name, version), builder, 'ninja_log')}"


def tool_env(
    recipe: ExtensionRecipe, name: str, version: str, ccs: list[str], cuda: str | None
) -> dict[str, str]:
    """The variables that put mlsetup's nvcc and ninja into a build (PATH: see `ninja_path`);
    `cuda`: the toolkit's release (its nvcc's options)."""
    env: dict[str, str] = {}
    if recipe.arch_trim:
        env["PYTORCH_NVCC"] = str(NVCC)
        env["MLSETUP_CUDA_ARCHS"] = cuda_archs(recipe, ccs)
        if cuda and Version(cuda) >= Version(knowledge().cuda.split_compile_min):
            env["MLSETUP_NVCC_SPLIT"] = "1"  # the threads of targets dropped, to the one left
    if recipe.compile_as_cxx:  # opt-in: setup.py's -std replaced, in CUDA and host compiles
        env["PYTORCH_NVCC"] = str(NVCC)
        env["CXX"] = str(CXX)
        env["MLSETUP_CXX_STD"] = str(recipe.compile_as_cxx)
    if recipe.longest_first and recipe.object_profile:
        env["MLSETUP_OBJECT_PROFILE"] = str(TOOLS.parent / PROFILES / recipe.object_profile)
    return env


def ninja_path(recipe: ExtensionRecipe) -> str:
    """What goes on the build's PATH before the venv's bin directory: mlsetup's ninja, or
    nothing."""
    return f"{NINJA_DIR}:" if recipe.longest_first else ""


def tools_of(recipe: ExtensionRecipe) -> list[Path]:
    """The files of mlsetup's own that a build of this recipe runs."""
    return (
        ([NVCC] if recipe.arch_trim or recipe.compile_as_cxx else [])
        + ([CXX] if recipe.compile_as_cxx else [])
        + ([NINJA_DIR / "ninja", TOOLS / "order_ninja.py"] if recipe.longest_first else [])
    )


def check_root_only(path: Path) -> None:
    """UnsafeFile unless `path` and every directory above it belong to root and no other account
    can write them (a sticky directory, such as /tmp, may be writable: others cannot replace
    what root put in it)."""
    for current in [path, *path.parents]:
        st = os.lstat(current)
        if stat.S_ISLNK(st.st_mode):
            raise UnsafeFile(0, "is a symbolic link", str(current))
        sticky = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
        writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if st.st_uid != 0 or (writable and not (sticky and current != path)):
            raise UnsafeFile(
                0,
                f"can be changed by an account other than root (owner uid {st.st_uid}, "
                f"mode {stat.S_IMODE(st.st_mode):o}); install mlsetup where only root writes "
                "(install.sh), or set arch_trim = false and longest_first = false in the recipe",
                str(current),
            )


def keep_ninja_log(fs: RootFS, tree: str, builder: int) -> str:
    """Copy the .ninja_log of the build in BUILD_ROOT/`tree` (the compiling account's, uid
    `builder`) beside the tree, 0600 and that account's, for its next build's ninja; kept only when
    it knows no fewer objects than the copy there (a build killed early knows less). Returns
    what happened, for the decisions log."""
    try:
        text = _newest_log(fs, tree, builder)
    except OSError as exc:
        return f"no .ninja_log kept: {exc}"
    if text is None:
        return "no .ninja_log in the build tree"
    kept = fs.path(BUILD_ROOT) / kept_name(tree, builder, "ninja_log")
    try:
        old = read_bounded(kept, NINJA_LOG_LIMIT, owner=builder).decode("utf-8", "replace")
    except OSError:
        old = ""
    if _entries(text) < _entries(old):
        return f"kept the earlier {kept.name}: it knows more objects than this build's"
    # the builder's own (its next build's ninja reads it), private, in root's directory
    write_atomic(kept, text, mode=0o600, durable=False)
    os.chown(kept, builder, -1, follow_symlinks=False)
    return f"kept this build's .ninja_log ({_entries(text)} objects) as {kept}"


def _entries(log: str) -> int:
    return sum(1 for line in log.splitlines() if line and not line.startswith("#"))


def _newest_log(fs: RootFS, tree: str, builder: int) -> str | None:
    """The .ninja_log of setuptools' newest build/temp.* directory in the tree's source, read by
    descriptor without following a link the compiling account could have planted."""
    root_fd = open_dir(fs.path(BUILD_ROOT), owner=os.geteuid())
    try:
        build_fd = walk(root_fd, f"{tree}/src/build", owner=builder)
    except FileNotFoundError:
        return None
    finally:
        os.close(root_fd)
    try:
        newest: tuple[float, bytes] | None = None
        for name in sorted(os.listdir(build_fd)):
            if not name.startswith("temp."):
                continue
            try:
                temp_fd = open_dir(name, dir_fd=build_fd, owner=builder)
            except OSError:
                continue
            try:
                data = read_bounded(".ninja_log", NINJA_LOG_LIMIT, dir_fd=temp_fd, owner=builder)
                mtime = os.fstat(temp_fd).st_mtime
            except FileNotFoundError:
                continue
            finally:
                os.close(temp_fd)
            if newest is None or mtime > newest[0]:
                newest = (mtime, data)
    finally:
        os.close(build_fd)
    return newest[1].decode("utf-8", "replace") if newest else None
