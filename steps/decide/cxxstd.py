"""C++ standards: the one a torch's headers require and the one an extension's build passes,
read from the real files, and the bound on torch that follows when the build's is lower.

torch 2.14 raised what `torch/include/ATen/ATen.h` accepts from C++17 to C++20 (its
`#error C++20 or later compatible compiler is required to use ATen.`), while flash-attn,
causal-conv1d and mamba-ssm pass `-std=c++17` in their setup.py: built against torch >= 2.14
they stop at the first file. Here: reading both lines, the bound the answers' extensions put
on torch (the planner's candidate releases in steps.decide.choices, a constraint of every resolution
in steps.stack) and the refusal of a torch pinned past it; the engine checks the venv's torch
against the build's source before ninja starts (steps.apply.builds), and tools/refresh_knowledge.py
reads the same lines from PyPI to find the next move.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from steps.core.errors import InputError, show_value
from steps.formats.answers import Answers
from steps.known.knowledge import knowledge
from steps.known.recipes import ExtensionRecipe

HEADER = "torch/include/ATen/ATen.h"
# ATen.h's first lines: `#if !defined(_MSC_VER) && __cplusplus < 201703L` then this line
# (torch 2.4-2.13 with C++17, 2.14 and 2.15 with C++20; tests/fixtures/pypi/cxx/ has them as read).
_HEADER_ERROR = re.compile(
    r"^\s*#\s*error\s+C\+\+(\d+) or later compatible compiler is required to use ATen", re.M
)
# A standard passed to a compiler in setup.py: "-std=c++17", "-std=gnu++20", MSVC's "/std:c++17"
_SETUP_STD = re.compile(r"""["'][-/]std[=:](?:c|gnu)\+\+(\d+)["']""")


def header_requires(text: str) -> int | None:
    """The C++ standard ATen.h stops without (17, 20), None when the text has no such line."""
    m = _HEADER_ERROR.search(text)
    return int(m.group(1)) if m else None


def setup_passes(text: str) -> int | None:
    """The lowest C++ standard a setup.py passes to a compiler (a build compiles every file it
    names with that flag), None when it passes none (the compiler's default)."""
    found = [int(m.group(1)) for m in _SETUP_STD.finditer(text)]
    return min(found) if found else None


def build_standard(recipe: ExtensionRecipe) -> int | None:
    """What a build of this recipe compiles as: the standard it opts into (mlsetup's nvcc then
    rewrites setup.py's -std), else the one its setup.py passes, None when not stated."""
    return recipe.compile_as_cxx or recipe.cxx_standard


@dataclass(frozen=True)
class TorchBound:
    """An extension's build keeps torch below `series`, the first whose headers need more."""

    extension: str  # the recipe's name: flash-attn
    version: str  # the extension's release asked for: 2.8.3
    passes: int  # the standard its build passes: 17
    series: str  # the first torch series whose ATen.h needs more: "2.14"
    needs: int  # what that series needs: 20

    @property
    def spec(self) -> str:
        return f"torch<{self.series}"

    @property
    def why(self) -> str:
        return (
            f"{self.extension} {self.version} builds with C++{self.passes}; torch >= "
            f"{self.series} needs C++{self.needs}"
        )

    def excludes(self, series: str) -> bool:
        return Version(series) >= Version(self.series)


def torch_bound(
    name: str, version: str, standard: int | None, series_needs: dict[str, int]
) -> TorchBound | None:
    """The bound an extension built as `standard` puts on torch, given each torch series' own
    requirement (`series_needs`: "2.14" -> 20); None when every series accepts it."""
    if standard is None:
        return None
    above = sorted((s for s, n in series_needs.items() if n > standard), key=Version)
    if not above:
        return None
    return TorchBound(name, version, standard, above[0], series_needs[above[0]])


def excluded_by(spec: str, series: list[str], bounds: list[TorchBound]) -> bool:
    """Whether a torch specifier (torch.version) admits only series these bounds exclude."""
    try:
        wanted = SpecifierSet(spec)
    except InvalidSpecifier:
        return False
    matching = [s for s in series if any(f"{s}.{p}" in wanted for p in range(20))]
    return bool(matching) and all(any(b.excludes(s) for b in bounds) for s in matching)


def torch_bounds(answers: Answers) -> list[TorchBound]:
    """What the answers' extensions' builds allow of torch: each keeps it below the first
    series whose headers need a newer C++ than the build passes (steps/decide/cxxstd.py)."""
    k = knowledge()
    needs = {r.series: r.cxx_standard for r in k.torch.releases}
    out = []
    for answer in answers.extensions:
        recipe = k.extensions[answer.name].for_build(answer.version, None)
        bound = torch_bound(answer.name, answer.version, build_standard(recipe), needs)
        if bound is not None:
            out.append(bound)
    return out


def _torch_pins(answers: Answers) -> list[tuple[str, str]]:
    """Where the answers pin torch: (the key as a message names it, the specifier)."""
    pins = []
    if answers.torch.version != "auto":
        pins.append((f"torch.version = {show_value(answers.torch.version)}", answers.torch.version))
    for req in answers.torch.packages:
        with contextlib.suppress(InvalidRequirement):
            parsed = Requirement(req)
            if canonicalize_name(parsed.name) == "torch" and str(parsed.specifier):
                pins.append((f"torch.packages {show_value(req)}", str(parsed.specifier)))
    return pins


def check_torch_bounds(answers: Answers) -> None:
    """A torch pinned where an extension's build cannot reach: exit 2 naming both and what
    would work (an older torch, or a release of the extension whose build is newer C++)."""
    bounds = torch_bounds(answers)
    series = [r.series for r in knowledge().torch.releases]
    for key, spec in _torch_pins(answers):
        if not bounds or not excluded_by(spec, series, bounds):
            continue
        bound = min(bounds, key=lambda b: Version(b.series))
        below = [s for s in series if not any(b.excludes(s) for b in bounds)]
        older = f" (torch {below[0]}, the newest whose headers accept it)" if below else ""
        raise InputError(
            f"{key}: {'; '.join(b.why for b in bounds)} (torch's ATen.h stops with \"#error "
            f'C++{bound.needs} or later compatible compiler is required to use ATen."), so '
            f"{bound.extension} cannot be built against that torch. What would work: "
            f'torch.version = "<{bound.series}"{older}, or {_newer_cxx_release(bound)}'
        )


def _newer_cxx_release(bound: TorchBound) -> str:
    """The releases of the bound's extension whose build is new enough, as its recipe knows
    them (variants that set cxx_standard or compile_as_cxx), or how a recipe would say so."""
    recipe = knowledge().extensions[bound.extension]
    specs = [
        v.versions
        for v in recipe.variants
        if v.versions
        and max(v.fields.get("cxx_standard") or 0, v.fields.get("compile_as_cxx") or 0)
        >= bound.needs
    ]
    if specs:
        return f"{bound.extension} {' or '.join(specs)} (its build is C++{bound.needs})"
    return (
        f"a release of {bound.extension} whose build is C++{bound.needs} (none that mlsetup "
        f"knows: a recipe says compile_as_cxx = {bound.needs} once a build proved its sources "
        "compile so)"
    )
