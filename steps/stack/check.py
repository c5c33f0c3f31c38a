"""A lock checked against the machine and the answers: whether it can be installed here as
they want it (`venv.lock` from another host, a saved lock, a new resolution's torch)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from steps.decide.choices import driver_is_kept, has_python, release_of, venv_owner
from steps.decide.cxxstd import torch_bounds
from steps.formats.answers import Answers
from steps.formats.facts import Facts
from steps.formats.lock import Lock, Pins, cuda_of_pins, parse_requirements, platform_for
from steps.known.knowledge import knowledge
from steps.stack.inputs import TORCH_FAMILY

# A CUDA library wheel names its major (nvidia-cublas-cu12), a CUDA build its local version
# (2.9.0+cu128): either says which CUDA major the package requiring it links.
_LIBRARY_MAJOR = re.compile(r"^nvidia-[a-z0-9-]+-cu(\d+)$")
_LOCAL_MAJOR = re.compile(r"^cu(\d+)\d$")

ProblemKind = Literal[
    "platform",
    "python",
    "build",
    "no-gpu",
    "kernels",
    "driver",
    "sources",
    "version",
    "cuda",
    "cxx",
    "cuda-major",
]


@dataclass(frozen=True)
class Problem:
    """One reason a lock does not fit: what it is about (`kind`: a resolution for a Python the
    machine lacks is still a lock, the torch it holds must run) and the sentence that says so."""

    kind: ProblemKind
    text: str

    def __str__(self) -> str:
        return self.text


def lock_problems(facts: Facts, answers: Answers, lock: Lock) -> list[Problem]:
    """Why `lock` cannot be installed on this machine as the answers want it (empty: it can)."""
    k = knowledge()
    out: list[Problem] = []
    arch = facts.os.arch if facts.os else None
    if lock.platform != platform_for(arch):
        out.append(
            Problem("platform", f"it is for {lock.platform}; this machine is {platform_for(arch)}")
        )
    wanted = answers.venv.python
    if wanted != "auto" and wanted != lock.python:
        out.append(Problem("python", f"it is for Python {lock.python}; venv.python is {wanted!r}"))
    elif wanted == "auto" and not has_python(facts, lock.python):
        # auto keeps a Python the system has when the lock's torch supports it
        release = release_of(lock.torch)
        system = [".".join(p.version.split(".")[:2]) for p in facts.pythons]
        if release is None or any(v in release.pythons for v in system):
            have = ", ".join(p.version for p in facts.pythons) or "none"
            out.append(
                Problem(
                    "python",
                    f"it is for Python {lock.python}; this machine has {have} (set venv.python "
                    f'= "{lock.python}" to let uv download it)',
                )
            )
    if lock.build not in k.torch.build_names:
        out.append(Problem("build", f"its torch build {lock.build!r} is not one mlsetup knows"))
        return out
    build = k.torch.build(lock.build)
    if build.cuda and not facts.gpus:
        runtime = cuda_of_pins(lock.packages)
        wheel = f" (its wheel requires {runtime.pin})" if runtime else ""
        out.append(
            Problem(
                "no-gpu",
                f"its torch {lock.torch} is the CUDA {build.cuda} build{wheel}; this machine has "
                "no NVIDIA GPU",
            )
        )
    bad = [cc for cc in facts.compute_capabilities if not build.runs_on(cc)]
    if bad:
        out.append(
            Problem(
                "kernels",
                f"its torch {lock.torch} ({lock.build}) has no kernels for compute "
                f"capability {', '.join(bad)}",
            )
        )
    drv = facts.driver
    if (
        build.cuda
        and drv
        and drv.loaded
        and driver_is_kept(facts, answers)
        and not k.cuda.driver_runs(drv.version, drv.cuda_max, build.cuda)
    ):
        kept = "it is the host's" if facts.driver_is_hosts() else "driver.action is skip"
        out.append(
            Problem(
                "driver",
                f"its torch needs CUDA {build.cuda}; driver {drv.version} runs up to "
                f"{drv.cuda_max} and {kept}",
            )
        )
    if lock.sources and venv_owner(facts, answers).run_as is None:
        out.append(
            Problem(
                "sources",
                f"{', '.join(lock.sources)} {'has' if len(lock.sources) == 1 else 'have'} no "
                "wheel, only source, and the venv is root's: mlsetup never runs a package's "
                "build as root (set venv.user to an ordinary account)",
            )
        )
    if build.cuda:
        out += other_cuda_major(lock, build.cuda.split(".")[0])
    spec = answers.torch.version
    if spec != "auto" and lock.torch.split("+")[0] not in SpecifierSet(spec):
        out.append(Problem("version", f"its torch is {lock.torch}; torch.version is {spec!r}"))
    if answers.torch.cuda not in ("auto", lock.build):
        out.append(
            Problem(
                "cuda", f"its torch is the {lock.build} build; torch.cuda is {answers.torch.cuda!r}"
            )
        )
    series = ".".join(lock.torch.split("+")[0].split(".")[:2])
    for bound in torch_bounds(answers):
        if bound.excludes(series):
            out.append(
                Problem(
                    "cxx",
                    f"its torch is {lock.torch}, and {bound.why}: a lock resolved for these "
                    f'extensions (torch < {bound.series}) would work, or torch.version = "<'
                    f'{bound.series}"',
                )
            )
    return out


def other_cuda_major(lock: Lock, major: str) -> list[Problem]:
    """The packages of the lock built for another CUDA major than torch's `major`, as their
    metadata says: a CUDA library of another major they require (nvidia-cublas-cu12 beside a
    CUDA 13 torch), or their own local version (+cu126). Such a wheel loads only at import."""
    pins = parse_requirements(lock.text, "the lock").pins
    out = []
    for name, version in pins.versions.items():
        if name in TORCH_FAMILY:
            continue  # torch's own build is the lock's build
        local = _LOCAL_MAJOR.match(version.partition("+")[2])
        library = _LIBRARY_MAJOR.match(name)
        if local and local.group(1) != major:
            what = f"{name} {version} is built for CUDA {local.group(1)}"
        elif (
            library
            and library.group(1) != major
            # nvidia-cutlass-dsl-libs-cu12 beside -cu13: shipped for both, one picked at run time
            and name.removesuffix(f"cu{library.group(1)}") + f"cu{major}" not in pins.versions
            and (who := _requirers(pins, name))
        ):
            what = f"{', '.join(who)} require{'s' if len(who) == 1 else ''} {name} {version}"
            what += f" (CUDA {library.group(1)})"
        else:
            continue
        out.append(
            Problem(
                "cuda-major",
                f"{what}, but torch {lock.torch} is the {lock.build} build (CUDA {major}): a "
                "wheel linked against another CUDA major fails when it is imported; what would: "
                f"a release of it built for CUDA {major}, or a torch.cuda build of that major",
            )
        )
    return out


def _requirers(pins: Pins, name: str) -> list[str]:
    """The packages (not CUDA libraries, not the torch family) that require `name`, directly or
    through CUDA libraries; "torch.packages" when the answers ask for it themselves."""
    found: list[str] = []
    seen, todo = {name}, [name]
    while todo:
        for via in pins.via.get(todo.pop(), []):
            if via.startswith("-") and not via.startswith("-r "):
                continue  # a constraint, not a requirement
            who = "torch.packages" if via.startswith("-r ") else canonicalize_name(via)
            if who in seen or who in TORCH_FAMILY:
                continue
            seen.add(who)
            if who.startswith(("nvidia-", "cuda-")):
                todo.append(who)
            else:
                found.append(who)
    return sorted(found)
