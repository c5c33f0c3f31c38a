"""What one resolution of the stack is asked: the requirements in the order uv should follow,
the Python (or the candidates "auto" picks from), the platform, the torch builds to try best
first, and the key of all that (a saved lock of the same key is reused)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version

from steps.decide.choices import (
    PythonChoice,
    branch_installed,
    choose,
    choose_python,
    choose_torch,
    driver_is_kept,
    torch_cuda,
)
from steps.decide.cxxstd import TorchBound, torch_bounds
from steps.formats.answers import Answers
from steps.formats.facts import Facts
from steps.formats.lock import platform_for
from steps.known.knowledge import knowledge
from steps.run.index import configured, index_args, per_build_index


@dataclass(frozen=True)
class StackInputs:
    """What one resolution is asked: requirements in order, constraints (a range of torch for an
    explicit torch.cuda on a one-index mirror), the Python (or candidates to choose from), the
    platform, the builds to try best first, the configured index, and the key of all that."""

    requirements: list[str]
    constraints: list[str]
    python: PythonChoice
    platform: str
    builds: list[str]
    configured: str | None
    key: str
    # what the extensions' builds allow of torch (their C++ against its headers'): each one's
    # "torch<2.14" is a constraint of every resolution but the probe for who decided torch
    bounds: tuple[TorchBound, ...] = ()

    @property
    def bound_constraints(self) -> list[str]:
        return [b.spec for b in self.bounds]


def requirement_name(req: str) -> str:
    return canonicalize_name(re.split(r"[\s<>=!~\[;@]", req, maxsplit=1)[0])


def requested_names(answers: Answers) -> list[str]:
    """The packages the answers ask for besides torch, by canonical name, in their order: the
    stack check imports each one's modules."""
    names = (requirement_name(r) for r in answers.torch.packages)
    return [n for n in dict.fromkeys(names) if n != "torch"]


# The torch family: each release is made for one torch, so it follows torch, never decides it.
TORCH_FAMILY = ("torch", "torchvision", "torchaudio", "triton", "pytorch-triton")


def follows_torch(req: str) -> bool:
    """A requirement of the torch family that pins no exact release: it takes the release made
    for the torch the rest decides (an exact pin is the answers' own decision)."""
    name = requirement_name(req)
    return name in TORCH_FAMILY and name != "torch" and "==" not in req


def requirements(answers: Answers, build_requires: list[str]) -> list[str]:
    """What the lock must satisfy, in an order that is the same for any order of the answers'
    list (uv's backtracking follows the order: it decides the packages first to last and walks a
    later one back when an earlier one leaves it no room). So: the packages sorted by name; then
    torch, as the answers or the packages pin it (a bare torch decided first keeps the newest
    torch and walks the packages back); then the torch family's unpinned members, which follow it
    (an unpinned torchvision decided before vllm pinned torch to torchvision's newest, and the
    only vllm that accepted that torch was one from 2023); then the extensions' build
    requirements (pip among them: the build runs `pip wheel`). What order alone cannot settle
    (two packages whose newest releases disagree) steps.stack.heldback does."""
    spec = "" if answers.torch.version == "auto" else answers.torch.version
    asked = sorted(dict.fromkeys(answers.torch.packages), key=lambda r: (requirement_name(r), r))
    out = [r for r in asked if requirement_name(r) != "torch" and not follows_torch(r)]
    out += [r for r in asked if requirement_name(r) == "torch"]
    names = {requirement_name(r) for r in asked}
    if "torch" not in names or spec:
        out.append(f"torch{spec}")
        names.add("torch")
    out += [r for r in asked if follows_torch(r)]
    for req in build_requires:
        name = requirement_name(req)
        if name not in names:
            names.add(name)
            out.append(req)
    return out


def input_key(
    reqs: list[str], python: str, platform: str, builds: list[str], index: list[str]
) -> str:
    data = {
        "requirements": reqs,
        "python": python,
        "platform": platform,
        "builds": builds,
        "index": index,
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def torch_range(answers: Answers, per_build: bool, branch_cuda: str | None = None) -> list[str]:
    """On an index that serves one build per release (PyPI, a mirror of it), as a constraint:
    for an explicit torch.cuda the releases whose PyPI wheel is that build (assets/torch.toml
    pypi_cuda; the resolved wheel still has to be it); for torch auto with a driver.branch to
    install (`branch_cuda`: the newest CUDA it runs) the releases whose wheel it runs."""
    if per_build or answers.torch.version != "auto" or answers.torch.cuda == "cpu":
        return []
    k = knowledge()
    if answers.torch.cuda == "auto":
        if branch_cuda is None:
            return []
        runs = [
            r.series
            for r in k.torch.releases
            if r.pypi_cuda and k.cuda.driver_runs_natively(branch_cuda, r.pypi_cuda)
        ]
        newer = [
            r.series for r in k.torch.releases if runs and Version(r.series) > Version(runs[0])
        ]
        return [f"torch<{newer[-1]}"] if newer else []
    cuda = k.torch.build(answers.torch.cuda).cuda
    series = [r.series for r in k.torch.releases if r.pypi_cuda == cuda]  # newest first
    if not series:
        return []
    newer = [r.series for r in k.torch.releases if Version(r.series) > Version(series[0])]
    upper = f",<{newer[-1]}" if newer else ""
    return [f"torch>={series[-1]}{upper}"]


def python_choice(facts: Facts, answers: Answers) -> PythonChoice:
    """The venv's Python for the torch release the knowledge picks (choose_python)."""
    return choose_python(facts, answers, choose_torch(facts, answers, []).release)


def builds_to_try(facts: Facts, answers: Answers) -> list[str]:
    """The torch builds a resolution may use, best first: the one the knowledge prefers, then
    every other these GPUs and this driver (or the driver to be installed) run, newest CUDA
    first. An explicit torch.cuda is the only one."""
    preferred = choose_torch(facts, answers, []).build
    if answers.torch.cuda != "auto" or preferred == "cpu":
        return [preferred]
    k = knowledge()
    ccs = facts.compute_capabilities
    drv = facts.driver
    keep_driver = drv is not None and drv.loaded and driver_is_kept(facts, answers)
    # an explicit driver.branch to install: no build it cannot run (choices refuses those)
    branch_cuda = (
        k.cuda.newest_supported_by_branch(int(answers.driver.branch))
        if answers.driver.branch != "auto" and not driver_is_kept(facts, answers)
        else None
    )
    others = []
    for name in sorted(k.torch.builds, key=lambda b: Version(torch_cuda(b)), reverse=True):
        if name == preferred or not all(k.torch.build(name).runs_on(cc) for cc in ccs):
            continue
        if branch_cuda and not k.cuda.driver_runs_natively(branch_cuda, torch_cuda(name)):
            continue
        if (
            keep_driver
            and drv
            and not k.cuda.driver_runs(drv.version, drv.cuda_max, torch_cuda(name))
        ):
            continue
        others.append(name)
    return [preferred, *others]


def stack_inputs(
    facts: Facts, answers: Answers, root: Path | None = None, builds_allowed: bool = True
) -> StackInputs:
    """What the resolution these answers ask for on this machine is given. `builds_allowed`:
    whether an sdist may be built to learn its metadata (a lock made without is another lock)."""
    base = choose(facts, answers)
    # what the extensions' builds need, and their wheels at run time (installed --no-deps)
    build_requires = [
        r
        for t in base.build_targets
        for r in ("pip", *t.recipe.build_requires, *t.recipe.runtime_requires)
    ]
    reqs = requirements(answers, build_requires)
    platform = platform_for(facts.os.arch if facts.os else None)
    index = configured(root)
    per_build = per_build_index(answers, index)
    builds = builds_to_try(facts, answers)
    builds = builds if per_build else builds[:1]
    branch = answers.driver.branch
    constraints = torch_range(
        answers,
        per_build,
        knowledge().cuda.newest_supported_by_branch(int(branch))
        if branch_installed(facts, answers, base.driver_ok)
        else None,
    )
    bounds = tuple(torch_bounds(answers))
    python = python_choice(facts, answers)
    python_key = "auto:" + ",".join(python.candidates) if python.candidates else python.version
    index_used = index_args(answers, builds[0], index) + ([] if builds_allowed else ["--no-build"])
    every = [*reqs, *constraints, *(b.spec for b in bounds)]
    key = input_key(every, python_key, platform, builds, index_used)
    return StackInputs(reqs, constraints, python, platform, builds, index, key, bounds)
