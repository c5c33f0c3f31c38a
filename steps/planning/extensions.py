"""The extensions step: CUDA extensions (flash-attn and friends) built against the venv's torch.

An extension is installed from a wheel already built for exactly this torch, Python and set of
GPUs (the machine's cache or the fleet's wheelhouse) when there is one. Otherwise its source is
unpacked into a persistent build tree, compiled into a wheel there (`pip wheel`, without build
isolation so the build sees the venv's torch), published to the cache, and installed; a build
that is retried, or resumed after a kill, finds its compiled objects where it left them.

After the venv step's sync, torch is frozen: every install here (the build requirements, each
wheel) names exactly what it installs (--no-deps), at the lock's versions and hashes (the lock
as a constraint), and a wheel's own requirements and hash are checked by root before it goes in
(steps.apply.frozen). The last action checks the stack again: torch, the lock, every import.
"""

from __future__ import annotations

from collections.abc import Mapping

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from steps.building.buildtools import ninja_path, tool_env
from steps.building.sourcetree import SOURCE
from steps.building.wheels import build_dir, wheel_key
from steps.decide.choices import BuildTarget, Choices
from steps.formats.answers import Answers
from steps.formats.facts import Facts
from steps.formats.lock import SHARED_DIR, SHARED_LOCK, SMOKE_SCRIPT, Lock
from steps.formats.plan import Action, Outcome, pending, satisfied
from steps.run.index import configured, index_args
from steps.stack.inputs import requested_names
from steps.stack.venvstate import VenvState

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
        # nvcc from the toolkit that matches torch's CUDA, mlsetup's ninja (longest objects
        # first), then the venv's ninja.
        "PATH": f"{target.cuda_home}/bin:{ninja_path(recipe)}{choices.venv_path}/bin:{SYSTEM_PATH}",
        "MAX_JOBS": str(target.max_jobs),
        # mlsetup's nvcc (only the GPUs present) and what its ninja orders by
        **tool_env(
            recipe,
            target.answer.name,
            target.answer.version,
            target.compute_capabilities,
            choices.cuda,
        ),
    }
    if recipe.threads_variable:  # "": the extension hard-codes nvcc's --threads
        env[recipe.threads_variable] = str(recipe.threads)
    if recipe.arch_variable:
        env[recipe.arch_variable] = target.arch_value
    # "auto": the project's build fetches its own release wheel when one matches this torch;
    # none is published for this CUDA major, or the answers say build: compile, never guess.
    cuda_major = (choices.cuda or "").split(".")[0]
    if target.answer.source == "build" or cuda_major not in recipe.prebuilt_cuda_majors:
        env[recipe.force_build_variable] = recipe.force_build_value
    return env


def target_key(target: BuildTarget, venv: VenvState | None, builder: str) -> str | None:
    """The wheel cache key of the wheel `builder` (an account's name, "root") compiled for
    this target, once the venv's torch is known."""
    torch = venv.version_of("torch") if venv else None
    if venv is None or torch is None or venv.python_version is None:
        return None
    python = ".".join(venv.python_version.split(".")[:2])
    # "native": the archs the extension's own setup.py lists (no arch variable, not trimmed)
    trimmed = (
        target.recipe.arch_value(target.compute_capabilities) if target.recipe.arch_trim else None
    )
    archs = target.arch_value or trimmed or "native"
    return wheel_key(target.recipe.package, target.answer.version, torch, python, archs, builder)


def usable_keys(
    target: BuildTarget, choices: Choices, venv: VenvState | None
) -> list[tuple[str, str]]:
    """(builder, key) of each wheel this venv may get, in order: the one its owner built, then
    the one root built (docs/design.md, "Trust": never another account's)."""
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
    target: BuildTarget,
    answers: Answers,
    choices: Choices,
    venv: VenvState | None,
    wheels: Mapping[str, str],
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
            kind="install-wheel",
            target=name,
            title=f"Install {name} {answer.version} from the wheel {builder} built earlier "
            f"({wheels[key]}), exactly as checked against the lock",
            argv=_install_argv(py, wheels[key], recipe.package, answer.version, choices.lock),
            user=user,
        )
        return [install, *smoke]
    if answer.source == "wheel":
        return []  # no wheel built earlier, and the answers forbid compiling: see plan()
    return [*_compile_actions(target, answers, choices), *smoke]


# Every install after the sync names all it installs: what a named package requires must be in
# the venv already, from the lock (steps.apply.frozen refuses a wheel whose requirements it is not).
UV_INSTALL = ["uv", "pip", "install", "--no-config", "--no-deps"]


# The sdists the extensions step downloads, with the hashes their index publishes: what uv
# resolves for them (metadata only) before the step, kept beside the lock (steps.apply.frozen).
SOURCES = f"{SHARED_DIR}/sources.txt"


def wheel_pin(package: str, version: str) -> str:
    """The constraint file, beside the lock, in which root pins the hash of the wheel it read
    (steps.apply.frozen) before that wheel is installed."""
    return f"{SHARED_DIR}/{canonicalize_name(package)}-{version}.wheel.txt"


def installs_wheel(action: Action) -> bool:
    """An extension's wheel going into the venv: built here, or built earlier."""
    return action.kind in ("install", "install-wheel")


def _install_argv(py: str, wheels: str, package: str, version: str, lock: Lock | None) -> list[str]:
    return [
        *UV_INSTALL,
        "--python",
        py,
        "--no-index",
        "--require-hashes",
        *(["--constraint", SHARED_LOCK] if lock else []),
        "--constraint",
        wheel_pin(package, version),
        "--find-links",
        wheels,
        f"{package}=={version}",
    ]


def build_requirements(target: BuildTarget) -> list[str]:
    """The canonical names of what the build needs in the venv (pip runs it)."""
    return [canonicalize_name(Requirement(r).name) for r in ("pip", *target.recipe.build_requires)]


def _prerequisites_argv(
    target: BuildTarget, answers: Answers, choices: Choices, py: str
) -> list[str]:
    """The build requirements from the lock: its versions, its hashes (all were resolved with
    the stack). Without a lock (planned from knowledge, or a venv kept unlocked) by name."""
    lock = choices.lock
    names = build_requirements(target)
    if lock is None:
        return [
            *UV_INSTALL,
            "--python",
            py,
            *index_args(answers, choices.torch_build, configured()),
            *names,
        ]
    pins = [f"{n}=={lock.packages[n]}" if n in lock.packages else n for n in names]
    return [
        *UV_INSTALL,
        "--python",
        py,
        *index_args(answers, lock.build, configured()),
        "--require-hashes",
        "--constraint",
        SHARED_LOCK,
        *pins,
    ]


def _compile_actions(target: BuildTarget, answers: Answers, choices: Choices) -> list[Action]:
    recipe, answer = target.recipe, target.answer
    name, version = answer.name, answer.version
    py, user = choices.venv_python, choices.owner.run_as
    tree = build_dir(name, version)
    prerequisites = Action(
        id=f"extensions.{name}.prerequisites",
        kind="prerequisites",
        target=name,
        title=f"Install {name}'s build requirements from the lock",
        argv=_prerequisites_argv(target, answers, choices, py),
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
        title=f"Install the {name} wheel just built, exactly as checked against the lock",
        argv=_install_argv(py, f"{tree}/wheels", recipe.package, version, choices.lock),
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
                title=f"Download {name} {version}'s source, by the hash its index publishes",
                # the sdist's metadata step imports torch: no build isolation here either
                argv=[
                    py,
                    "-m",
                    *PIP_DOWNLOAD,
                    "--require-hashes",
                    "--constraint",
                    SOURCES,
                    "--dest",
                    archive,
                    requirement,
                ],
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


STACK_CHECK = "extensions.stack-check"


def stack_check(choices: Choices, venv: VenvState | None, packages: list[str]) -> Action:
    """After the last extension: torch is still the locked one (version and build), every
    package still at the lock's version, every extension imports, then every one of `packages`
    (the requested ones) does (assets/smoke_stack.py; the GPUs were tried after the sync and by
    each extension's own smoke test)."""
    lock = choices.lock
    torch = lock.torch if lock else (venv.version_of("torch") if venv else None) or ""
    imports = [t.recipe.import_name for t in choices.build_targets]
    return Action(
        id=STACK_CHECK,
        kind="stack-check",
        title=f"Check the stack after the extensions: torch {torch or '(as installed)'} "
        f"({choices.torch_build}){', every locked version' if lock else ''}, "
        f"import {', '.join([*imports, *packages])}",
        argv=[
            choices.venv_python,
            SMOKE_SCRIPT,
            "--recheck",
            *(["--torch", torch] if torch else []),
            "--cuda",
            choices.cuda or "none",
            *(["--lock", SHARED_LOCK] if lock else []),
            "--imports",
            *imports,
            *(["--packages", *packages] if packages else []),
        ],
        user=choices.owner.run_as,
    )


def plan(
    facts: Facts,
    answers: Answers,
    choices: Choices,
    venv: VenvState | None,
    wheels: Mapping[str, str],
) -> Outcome:
    if not answers.extensions:
        return satisfied("no extensions requested")
    actions: list[Action] = []
    done: list[str] = []
    for target in choices.build_targets:
        if venv and venv.version_of(target.recipe.package) == target.answer.version:
            done.append(f"{target.recipe.package} {target.answer.version}")
            continue
        todo = _actions(target, answers, choices, venv, wheels)
        if not todo:
            return pending(
                f"{target.answer.name} {target.answer.version} has "
                'source = "wheel" but no wheel was built earlier for this torch, '
                "Python and GPUs (machine cache or build.wheelhouse); set source = "
                '"auto" to build it',
                [],
            )
        actions += todo
    if not actions:
        if done:
            return satisfied(f"already installed: {', '.join(done)}")
        return satisfied("nothing to build: see the warnings")
    built = [a.target for a in actions if a.kind == "build" and a.target]
    reused = [a.target for a in actions if a.kind == "install-wheel" and a.target]
    actions.append(stack_check(choices, venv, requested_names(answers)))
    parts = (
        [f"build {', '.join(built)} against the venv's torch (CUDA {choices.cuda})"]
        if built
        else []
    ) + ([f"install {', '.join(reused)} from wheels built earlier"] if reused else [])
    return pending("; ".join(parts), actions)


def leaves(choices: Choices) -> list[str]:
    return [
        f"{t.answer.name} {t.answer.version} built for compute {', '.join(t.compute_capabilities)}"
        for t in choices.build_targets
    ]
