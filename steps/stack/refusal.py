"""The refusals of a resolution: each cause uv reports (steps.stack.uvfailure) as the message a
person acts on, naming the index it used and what would work."""

from __future__ import annotations

from dataclasses import dataclass, field

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from steps.core.errors import InputError, MlsetupError, show_value
from steps.decide.choices import release_of, venv_owner
from steps.formats.answers import Answers
from steps.formats.facts import Facts
from steps.formats.lock import Lock, cuda_of_pins
from steps.known.knowledge import ExtensionRecipe, knowledge
from steps.run.index import index_label, per_build_index
from steps.stack.check import Problem
from steps.stack.heldback import SourceOnly
from steps.stack.inputs import StackInputs
from steps.stack.uvfailure import (
    BuildFailed,
    Conflict,
    Failure,
    Missing,
    NeedsBuild,
    NoPythonWheel,
    Unreachable,
    UvFailed,
)


def _tail(detail: str, limit: int = 300) -> str:
    """The end of uv's words, cut at a word boundary (a cut mid-word read 't failed after')."""
    if len(detail) <= limit:
        return detail
    cut = detail[-limit:]
    return "…" + cut[cut.find(" ") + 1 :] if " " in cut else "…" + cut


class StackUnavailable(MlsetupError):
    """uv could not resolve for a reason other than the requirements (no index, no network).
    `action`: the id of the resolution that failed, when one ran."""

    def __init__(self, message: str, action: str | None = None) -> None:
        super().__init__(message)
        self.action = action


@dataclass
class Attempts:
    """The builds tried before one resolved (or none did)."""

    notes: list[str] = field(default_factory=list)  # what was tried, for the lock's note
    pinned_by: list[str] = field(default_factory=list)  # who required a torch a build lacked
    torch_spec: str = ""


class Refusals:
    """The messages for one resolution's failures: `who` ran uv."""

    def __init__(self, facts: Facts, answers: Answers, inputs: StackInputs, who: str) -> None:
        self.facts = facts
        self.answers = answers
        self.inputs = inputs
        self.who = who

    def _label(self, build: str) -> str:
        return index_label(self.answers, build, self.inputs.configured)

    def of(self, failure: Failure, build: str, python: str, action: str) -> MlsetupError:
        """The error for a failed resolution: StackUnavailable when the index cannot be
        reached, else InputError naming the cause."""
        label = self._label(build)
        packages = f"torch.packages {self.answers.torch.packages}"
        if isinstance(failure, Unreachable):
            return StackUnavailable(
                f"the package index cannot be reached: {failure.url or label} failed "
                f"({_tail(failure.detail)}); check torch.index_url, UV_DEFAULT_INDEX or pip's "
                "index-url, the network and the proxy",
                action=action,
            )
        if isinstance(failure, UvFailed):
            return StackUnavailable(f"uv could not resolve the stack: {failure.detail}", action)
        if isinstance(failure, Missing):
            what = failure.package + (failure.spec or "")
            by = f", which {failure.by} requires" if failure.by else ""
            return InputError(
                f"{packages}: no {what} on {label}{by}: check the name and the version "
                "on that index"
            )
        if isinstance(failure, Conflict) and failure.shared:
            (a, b), (want_a, want_b) = failure.sides, failure.wants
            return InputError(
                f"{packages}: {a} and {b} cannot be installed together: {a} requires {want_a} "
                f"and {b} requires {want_b}. What would: releases of the two that agree on "
                f"{failure.shared}, or one of them left out."
            )
        if isinstance(failure, NeedsBuild):
            names = ", ".join(failure.packages)
            return InputError(
                f"{packages}: {names} {'has' if len(failure.packages) == 1 else 'have'} no wheel "
                f"on {label} for Python {python}, only source, whose metadata comes from running "
                f"its build; mlsetup never runs a package's build as root, and this resolution "
                f"ran as {self.who}; what would: {self._builds_elsewhere()}"
            )
        if isinstance(failure, NoPythonWheel):
            allowed = (
                f'venv.python = "{failure.has[-1]}" (the newest its wheels there are for: '
                f"{', '.join(failure.has)}; uv downloads it where the machine lacks it)"
                if failure.has
                else "a Python it has wheels for"
            )
            return InputError(
                f"venv.python = {self.answers.venv.python!r}: {failure.package} has no wheel "
                f"for Python {python} ({failure.tag}) on {label}; allowed: {allowed}, or a "
                f"release of it with wheels for Python {python}"
            )
        if isinstance(failure, BuildFailed):
            return InputError(
                f"{packages}: {failure.package} {failure.version} has only source on {label}, "
                f"and building it to read its metadata failed (as {self.who}): "
                f"{failure.detail[-600:]}"
            )
        return InputError(
            f"{packages}: uv finds no versions that satisfy them together on {label} (Python "
            f"{python}, {self.inputs.platform}): {getattr(failure, 'detail', '')}"
        )

    def _builds_elsewhere(self) -> str:
        """Who could build what this resolution, run as root, could not."""
        owner = venv_owner(self.facts, self.answers).run_as
        if owner is not None:
            # the venv's account is an ordinary one already: what ran as root is this
            # resolution, for a recorded machine (its accounts are not this machine's)
            return (
                f"run it as an ordinary account of this machine (without sudo, or with sudo "
                f"from one: SUDO_USER builds it), as {owner} does on the machine itself"
            )
        return (
            "set venv.user to an ordinary account (the build then runs as that account), or "
            "run `mlsetup lock` as one"
        )

    def source_only(self, found: list[SourceOnly], build: str, python: str) -> str:
        """Requested packages the resolution would lock far below their newest release, which
        has no wheel, as root builds nothing: each, and what would work (a resolution that may
        build, or the old release pinned, taken knowingly)."""
        label = self._label(build)
        each = "; ".join(
            f"{s.package} would lock to {s.locked}, far below {s.newest}, its newest release, "
            f"which has no wheel on {label} for Python {python}, only source"
            for s in found
        )
        pins = ", ".join(f'"{s.package}=={s.locked}"' for s in found)
        return (
            f"torch.packages {self.answers.torch.packages}: {each}. Their metadata comes from "
            f"running their build; mlsetup never runs a package's build as root, and this "
            f"resolution ran as {self.who}. What would: {self._builds_elsewhere()}; or "
            f"{pins} in torch.packages, to take the old release knowingly"
        )

    def no_release(
        self, at: int, version: str, recipe: ExtensionRecipe, newest: str, build: str
    ) -> str:
        """The index lacks the extension release asked for: the newest it has, and the one
        the recipe was checked against."""
        checked = f" (its recipe was checked against {recipe.checked})" if recipe.checked else ""
        return (
            f"extensions[{at}].version = {show_value(version)}: no {recipe.package} {version} "
            f"on {self._label(build)}; the newest release there is {newest}{checked}; allowed: "
            f'a release that index has, such as "{newest}"'
        )

    def no_release_at_all(self, at: int, version: str, recipe: ExtensionRecipe, build: str) -> str:
        """The index answers but has no release of the extension (a partial mirror): that
        index, and one that has it (PyPI, where its recipe's release was read)."""
        has = f" has {recipe.package} {recipe.checked}, the release its recipe was checked "
        has = has + "against" if recipe.checked else ""
        return (
            f"extensions[{at}].version = {show_value(version)}: {self._label(build)} answers but "
            f"has no {recipe.package} at all (a partial mirror?); allowed: an index that has it, "
            f'such as PyPI ("https://pypi.org/simple"{has}), as torch.index_url or the default '
            "index (UV_DEFAULT_INDEX, pip's index-url), or this extension left out"
        )

    def no_build_has_it(self, attempts: Attempts, builds: list[str]) -> str:
        """Every build's index lacked the torch a package requires: the package, the builds that
        torch exists in, and what would work."""
        ccs = self.facts.compute_capabilities
        driver = self.facts.driver.version if self.facts.driver else None
        tried = ", ".join(builds)
        package = attempts.pinned_by[0] if attempts.pinned_by else "torch.version"
        spec = attempts.torch_spec
        try:
            releases = [r for r in knowledge().torch.releases if r.matches(SpecifierSet(spec))]
        except InvalidSpecifier:
            releases = []
        shipped = "; ".join(
            f"torch {r.series} is built for {', '.join(r.builds)}" for r in releases
        )
        why = (
            f"{shipped}, and none of those runs here (GPUs: compute capability "
            f"{', '.join(ccs) or 'none'}; driver {driver or 'none'}; builds tried: {tried})"
            if shipped
            else f"no build tried ({tried}) has such a torch on its index"
        )
        hint = (
            f' or torch.cuda = "{releases[0].builds[-1]}" if the GPUs and driver run it'
            if releases
            else ""
        )
        return (
            f"torch.packages: {package} requires torch{spec}, which cannot be installed here: "
            f"{why}. What would: a release of {package} that allows a torch built for "
            f"{builds[0]}{hint}."
        )

    def unrunnable(self, lock: Lock, problems: list[Problem]) -> str:
        """The resolved torch cannot run on this machine: what it is (from its wheel) and what
        to change."""
        label = lock.index
        cuda = cuda_of_pins(lock.packages)
        wheel = f" (its wheel requires {cuda.pin})" if cuda else ""
        what = f"torch {lock.torch} from {label} is the {lock.build} build{wheel}"
        cpu_hint = (
            'set torch.index_url to an index of CPU builds, e.g. "https://download.pytorch.org/'
            'whl/cpu" or a mirror of it'
        )
        if not self.facts.gpus and lock.build != "cpu":
            return (
                f"this machine has no NVIDIA GPU, but {what}: that index serves only CUDA builds "
                f"of torch here; {cpu_hint}"
            )
        if self.answers.torch.cuda == "cpu" and lock.build != "cpu":
            return f'torch.cuda = "cpu", but {what}: {cpu_hint}'
        kinds = {p.kind for p in problems}
        if kinds == {"cuda"}:
            # the torch asked for exists, as another build: the key to change is torch.cuda
            asked = self.answers.torch.cuda
            release = release_of(lock.torch)
            index = (
                f', or torch.index_url = "auto" (PyTorch\'s index, '
                f"{knowledge().torch.index_for(asked)}, has torch {release.series} as {asked})"
                if release is not None and asked in release.builds
                else ""
            )
            return (
                f"torch.cuda = {show_value(asked)}: {what}, the one build that index has of "
                f'it; allowed: torch.cuda = {show_value(lock.build)} or "auto"{index}'
            )
        version = self.answers.torch.version
        asked = (
            f"torch.version = {version!r}"
            if version != "auto"
            else f"torch.packages {self.answers.torch.packages}"
        )
        if all(p.kind == "cuda-major" for p in problems):  # the packages, not torch
            return f"{asked}: " + "; ".join(p.text for p in problems)
        text = f"{asked}: {what}, which cannot run here: " + "; ".join(p.text for p in problems)
        if "kernels" in kinds and (would := self._runnable_torch()):
            text += f". What would: {would}"
        return text

    def _runnable_torch(self) -> str:
        """The newest torch mlsetup knows with kernels for every GPU here and where it comes
        from: PyTorch's index has each build, an index of one build per release (PyPI, a
        mirror of it) only its own."""
        ccs = self.facts.compute_capabilities
        arch = self.facts.os.arch if self.facts.os else None
        k = knowledge()
        for release in k.torch.releases:
            runs = [
                b for b in release.builds if all(k.torch.build(b).runs_on(cc, arch) for cc in ccs)
            ]
            if runs:
                build = max(runs, key=lambda b: Version(k.torch.build(b).cuda or "0"))
                where = (
                    ""
                    if per_build_index(self.answers, self.inputs.configured)
                    else ' and torch.index_url = "auto" (PyTorch\'s index: '
                    f"{k.torch.index_for(build)}; this index has one build per release)"
                )
                return (
                    f'torch.version = "=={release.series}.*" with torch.cuda = '
                    f'"{build}"{where}, the newest torch with kernels for compute capability '
                    f"{', '.join(dict.fromkeys(ccs))}, and packages that allow it"
                )
        return ""
