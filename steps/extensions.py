"""Wizard step 4: CUDA extensions (flash-attn and friends) built against the venv's torch.

An extension is installed from a wheel already built for exactly this torch, Python and set of
GPUs (the machine's cache or the fleet's wheelhouse) when there is one. Otherwise its source is
unpacked into a persistent build tree, compiled into a wheel there (`pip wheel`, without build
isolation so the build sees the venv's torch), published to the cache, and installed; a build
that is retried, or resumed after a kill, finds its compiled objects where it left them.
"""

from __future__ import annotations

from collections.abc import Mapping

from steps.answers import Answers
from steps.choices import BuildTarget, Choices
from steps.facts import Facts
from steps.plan import Action, Step, pending, satisfied
from steps.sourcetree import SOURCE
from steps.venvstate import VenvState
from steps.wheels import build_dir, wheel_key

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ARCHIVES = (".tar.gz", ".tgz", ".zip", ".tar.bz2")

# Unpack the one source archive in argv[1] (a file, or a directory holding it) into argv[2],
# unless a source tree is already there: a resumed or retried build keeps its compiled objects.
UNPACK = """\
import pathlib, shutil, sys, tempfile
src, dst = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
if not any((dst / n).exists() for n in ("setup.py", "pyproject.toml")):
    archive = src if src.is_file() else next(p for p in sorted(src.iterdir()) if p.is_file())
    tmp = pathlib.Path(tempfile.mkdtemp(dir=dst.parent))
    shutil.unpack_archive(str(archive), str(tmp))
    (top,) = tmp.iterdir()
    shutil.rmtree(dst, ignore_errors=True)
    top.rename(dst)
    tmp.rmdir()
print("source tree:", dst)
"""


def build_env(target: BuildTarget, choices: Choices) -> dict[str, str]:
    """Everything the compile needs. At run time the engine's memory governor replaces MAX_JOBS
    (here: the static ceiling) with its jobserver."""
    recipe = target.recipe
    env = {
        "CUDA_HOME": target.cuda_home,
        # nvcc from the toolkit that matches torch's CUDA, then the venv's ninja.
        "PATH": f"{target.cuda_home}/bin:{choices.venv_path}/bin:{SYSTEM_PATH}",
        "MAX_JOBS": str(target.max_jobs),
    }
    if recipe.threads_variable:  # "": the extension hard-codes nvcc's --threads
        env[recipe.threads_variable] = str(recipe.threads)
    if recipe.arch_variable:
        env[recipe.arch_variable] = target.arch_value
    # "auto": the project's build fetches its own release wheel when one matches this torch;
    # none is published for this CUDA major, or the answers say build: compile, never guess.
    cuda_major = (choices.cuda or "").split(".")[0]
    if target.answer.source == "build" or cuda_major not in recipe.prebuilt_cuda_majors:
        env[recipe.force_build_variable] = "TRUE"  # the projects honour only the exact "TRUE"
    return env


def target_key(target: BuildTarget, venv: VenvState | None, builder: str) -> str | None:
    """The wheel cache key of the wheel `builder` (an account's name, "root") compiled for
    this target, once the venv's torch is known."""
    torch = venv.version_of("torch") if venv else None
    if venv is None or torch is None or venv.python_version is None:
        return None
    python = ".".join(venv.python_version.split(".")[:2])
    return wheel_key(
        target.recipe.package,
        target.answer.version,
        torch,
        python,
        target.arch_value or "native",
        builder,
    )


def usable_keys(
    target: BuildTarget, choices: Choices, venv: VenvState | None
) -> list[tuple[str, str]]:
    """(builder, key) of each wheel this venv may get, in order: the one its owner built, then
    the one root built (DESIGN.md, "Trust": never another account's)."""
    builders = dict.fromkeys([choices.owner.name, "root"])
    return [(b, k) for b in builders if (k := target_key(target, venv, b)) is not None]


def wanted_wheels(choices: Choices, venv: VenvState | None) -> dict[str, tuple[str, str]]:
    """key -> (package, version) for each wheel the venv could get that may already exist."""
    return {
        key: (target.recipe.package, target.answer.version)
        for target in choices.build_targets
        for _, key in usable_keys(target, choices, venv)
    }


# Neither isolates the build: the build (and the sdist's metadata step) imports the venv's torch.
PIP_WHEEL = ["pip", "wheel", "-v", "--no-build-isolation", "--no-deps"]
PIP_DOWNLOAD = ["pip", "download", "--no-deps", "--no-binary", ":all:", "--no-build-isolation"]


def _actions(
    target: BuildTarget, choices: Choices, venv: VenvState | None, wheels: Mapping[str, str]
) -> list[Action]:
    """A wheel built earlier for exactly this target, installed; else (where the answers let
    it) the source fetched, unpacked and compiled; either way followed by the smoke test."""
    recipe, answer = target.recipe, target.answer
    name, py, user = answer.name, choices.venv_python, choices.owner.run_as
    smoke = (
        [
            Action(
                id=f"extensions.{name}.smoke",
                kind="smoke",
                target=name,
                title=f"Try {name} in the venv",
                argv=[py, "-c", recipe.smoke_test],
                user=user,
            )
        ]
        if recipe.smoke_test
        else []
    )
    builder, key = next(
        ((b, k) for b, k in usable_keys(target, choices, venv) if k in wheels), ("", "")
    )
    if key:
        install = Action(
            id=f"extensions.{name}.install-wheel",
            kind="install",
            target=name,
            title=f"Install {name} {answer.version} from the wheel {builder} built earlier "
            f"({wheels[key]})",
            argv=_install_argv(py, wheels[key], f"{recipe.package}=={answer.version}"),
            user=user,
        )
        return [install, *smoke]
    if answer.source == "wheel":
        return []  # no wheel built earlier, and the answers forbid compiling: see plan()
    return [*_compile_actions(target, choices), *smoke]


def _install_argv(py: str, wheels: str, pinned: str) -> list[str]:
    return ["uv", "pip", "install", "--python", py, "--find-links", wheels, pinned]


def _compile_actions(target: BuildTarget, choices: Choices) -> list[Action]:
    recipe, answer = target.recipe, target.answer
    name, version = answer.name, answer.version
    py, user = choices.venv_python, choices.owner.run_as
    tree = build_dir(name, version)
    prerequisites = Action(
        id=f"extensions.{name}.prerequisites",
        kind="prerequisites",
        target=name,
        title=f"Install {name}'s build requirements",
        argv=["uv", "pip", "install", "--python", py, "pip", *recipe.build_requires],
        user=user,
    )
    fetch, source = _source_actions(target, py, user, tree)
    build = Action(
        id=f"extensions.{name}.build",
        kind="build",
        target=name,
        title=f"Compile {name} {version} for compute capability "
        f"{', '.join(target.compute_capabilities)}",
        # -v: the compiler's output (and ninja's [k/n] progress) reaches the log live
        argv=[py, "-m", *PIP_WHEEL, "--wheel-dir", f"{tree}/wheels", source],
        env=build_env(target, choices),
        user=user,
    )
    install = Action(
        id=f"extensions.{name}.install",
        kind="install",
        target=name,
        title=f"Install the {name} wheel just built",
        argv=_install_argv(py, f"{tree}/wheels", f"{recipe.package}=={version}"),
        user=user,
    )
    return [prerequisites, *fetch, build, install]


def _source_actions(
    target: BuildTarget, py: str, user: str | None, tree: str
) -> tuple[list[Action], str]:
    """The actions that put the source where the build reads it, and that place: an operator's
    source directory is built where it is; an archive is unpacked into the build tree, after
    downloading it when the requirement names a release."""
    name, version = target.answer.name, target.answer.version
    requirement = target.recipe.requirement_for(version)
    if requirement.startswith("/") and not requirement.endswith(ARCHIVES):
        return [], requirement
    source, archive, actions = f"{tree}/{SOURCE}", requirement, []
    if not requirement.startswith("/"):
        archive = f"{tree}/dist"
        actions.append(
            Action(
                id=f"extensions.{name}.source",
                kind="source",
                target=name,
                title=f"Download {name} {version}'s source",
                # the sdist's metadata step imports torch: no build isolation here either
                argv=[py, "-m", *PIP_DOWNLOAD, "--dest", archive, requirement],
                user=user,
            )
        )
    unpack = Action(
        id=f"extensions.{name}.unpack",
        kind="unpack",
        target=name,
        title=f"Unpack {name}'s source into {source}",
        argv=[py, "-c", UNPACK, archive, source],
        user=user,
    )
    return [*actions, unpack], source


def plan(
    facts: Facts,
    answers: Answers,
    choices: Choices,
    venv: VenvState | None,
    wheels: Mapping[str, str],
) -> Step:
    if not answers.extensions:
        return satisfied("extensions", "no extensions requested")
    actions: list[Action] = []
    done: list[str] = []
    for target in choices.build_targets:
        if venv and venv.version_of(target.recipe.package) == target.answer.version:
            done.append(f"{target.recipe.package} {target.answer.version}")
            continue
        todo = _actions(target, choices, venv, wheels)
        if not todo:
            return pending(
                "extensions",
                f"{target.answer.name} {target.answer.version} has "
                'source = "wheel" but no wheel was built earlier for this torch, '
                "Python and GPUs (machine cache or build.wheelhouse); set source = "
                '"auto" to build it',
                [],
            )
        actions += todo
    if not actions:
        if done:
            return satisfied("extensions", f"already installed: {', '.join(done)}")
        return satisfied("extensions", "nothing to build: see the warnings")
    built = [a.target for a in actions if a.kind == "build" and a.target]
    reused = [
        a.target for a in actions if a.kind == "install" and a.target and a.target not in built
    ]
    parts = (
        [f"build {', '.join(built)} against the venv's torch (CUDA {choices.cuda})"]
        if built
        else []
    ) + ([f"install {', '.join(reused)} from wheels built earlier"] if reused else [])
    return pending("extensions", "; ".join(parts), actions)
