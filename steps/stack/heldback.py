"""Requested packages that lock far below their newest release: which requirement holds each
back, read from uv, and the release refused or replaced when it is older than the torch it would
run with.

uv decides the packages in order and walks a later one back when an earlier one's newest release
leaves no room for its own: transformers 5.24.0 decided before vllm left vllm 0.33.0 (which
requires transformers<5.21 and torch==2.14.0) out, and the only vllm that accepted what was left
was 0.1.2, from 2023, which names no upper bound on torch and so "accepts" torch 2.15. For each
requested package whose locked release is of an older series than its newest, the scan asks uv:

- whether its newest runs with the locked torch (`P==newest` with torch held): when it pins a
  torch older than the locked one, the locked release is older than the releases made for that
  torch (it accepts it only by naming no upper bound): the stale case;
- stale: whether the rest of the stack allows its newest (`P==newest`, the rest free): the lock
  becomes that resolution (the others walk back instead, each named), else the lock is refused
  naming the conflict uv reports;
- not stale: which requirement holds it back (`P==newest` with the other requested packages held
  at their locked versions): the lock says so.

The packages are scanned by name, so, with the requirements in their canonical order
(steps.stack.inputs.requirements), the lock does not depend on the order of the answers' list.

A resolution that builds nothing (root's: `--no-build`) sees only the releases that have a wheel,
and uv quietly takes an old one that has: on PyPI (2026-12-03) deepspeed's releases after
0.3.1.dev5 have only an sdist, and with transformers and accelerate it took 0.3.1.dev3 where
0.19.8 is the newest. The scan cannot see that (its own questions are asked without builds too),
so `source_only_above` asks the index for the newest release, wheel or source, and whether that
one has a wheel."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from steps.core.errors import InputError
from steps.formats.lock import parse_requirements
from steps.stack.uvfailure import (
    ABOVE_ALL,
    NeedsBuild,
    dependencies,
    explanation,
    newest_available,
    read_failure,
)


@dataclass(frozen=True)
class Probe:
    """One question to uv about the stack: `requirements` (constraints beside the stack's own),
    into a lock text or uv's explanation of why none exists. `no_deps`: the packages alone."""

    action: str
    title: str
    requirements: list[str]
    constraints: tuple[str, ...] = ()
    no_deps: bool = False


@dataclass(frozen=True)
class Answer:
    text: str | None  # the lock uv wrote; None: it found none
    output: list[str]  # uv's last lines (its explanation)


Ask = Callable[[Probe], Answer]


@dataclass(frozen=True)
class HeldBack:
    """`package` locks `locked` where its newest release is `newest`; `holders`: the requirements
    uv names against the newest ("vllm==0.33.0 requires transformers>=5.16.1,<5.21.0")."""

    package: str
    locked: str
    newest: str
    holders: tuple[str, ...] = ()
    resolves: bool = False  # the newest resolves too with the others as locked

    def text(self) -> str:
        head = f"{self.package} {self.locked} (newest {self.newest})"
        if not self.resolves:
            return f"{head}: held back by {'; '.join(self.holders)}"
        return (
            f"{head}: {self.package} {self.newest} resolves too with the other packages as "
            f"locked; pin {self.package}=={self.newest} to have it"
        )


def far_below(locked: str, newest: str) -> bool:
    """`locked` is of an older release series (major.minor) than `newest`."""
    try:
        a, b = Version(locked).release, Version(newest).release
    except InvalidVersion:
        return False
    return (*a, 0, 0)[:2] < (*b, 0, 0)[:2]


def below(spec: str, torch: str) -> bool:
    """`spec` (what a package requires of torch) sets an upper bound below `torch`."""
    try:
        specifiers, version = SpecifierSet(spec), Version(Version(torch).public)
    except (InvalidSpecifier, InvalidVersion):
        return False
    for s in specifiers:
        try:
            bound = Version(s.version.removesuffix(".*"))
        except InvalidVersion:
            continue
        if s.operator in ("==", "===") and s.version.endswith(".*"):
            above = version.release[: len(bound.release)] > bound.release
        elif s.operator in ("==", "===", "<="):
            above = version > bound
        else:
            above = s.operator == "<" and version >= bound
        if above:
            return True
    return False


def holders_of(package: str, output: list[str]) -> tuple[str, ...]:
    """From uv's explanation of why `package`'s newest (`package==X` asked) cannot be had: what
    requires `package` otherwise ("vllm==0.33.0 depends on transformers<5.21"), the other side
    of each dependency it has on the same thing, and the input's own requirement on one of its
    dependencies ("you require torch==2.15.0": the answers' torch.version)."""
    deps = dependencies(output)
    name = canonicalize_name(package)
    mine = {dep for who, _, dep, _ in deps if who == name}
    found = [
        f"{who}{version} requires {dep}{spec}"
        for who, version, dep, spec in deps
        if who != name and (dep == name or dep in mine)
    ]
    text = " ".join(line.strip() for line in output)
    for who, version, dep, spec in deps:
        if who != name:
            continue
        # uv also says "we can conclude that you require DEP<its spec>": the stack's own is
        # the other one
        said = (w.rstrip(".,") for w in text.split("you require ")[1:])
        held = [r.split()[0].rstrip(".,") for r in said if re.match(rf"{dep}(?![\w.-])", r)]
        held = [h for h in held if h != f"{dep}{spec}"]
        if held:
            found.append(f"{who}{version} requires {dep}{spec}, the stack holds {held[0]}")
    return tuple(dict.fromkeys(found))


def newest_torch(package: str, output: list[str]) -> str:
    """What `package` requires of torch, as uv's explanation says ("" when it does not)."""
    name = canonicalize_name(package)
    deps = dependencies(output)
    return next((spec for who, _, dep, spec in deps if who == name and dep == "torch"), "")


@dataclass
class Scan:
    """The scan of one resolved lock; `ask` runs uv as the resolution does."""

    ask: Ask
    requirements: list[str]  # the stack's, in their order
    requested: list[str]  # the answers' packages that may be walked back: canonical names
    what: str  # the answers' packages, as the refusals name them
    pinned: list[str] = field(default_factory=list)  # "name==newest" of the stale ones, in order

    def settle(self, text: str) -> tuple[str, tuple[str, ...]]:
        """The lock to keep (`text`, or a resolution with each stale package at its newest)
        and the sentences for the packages that stay far below their newest."""
        names = sorted(self.requested)
        listed = self._newest(names)
        newest: dict[str, str] = {}  # the newest release each installs alone, when needed
        for _ in names:  # each round pins one more package: at most one round per package
            pins = _versions(text)
            low = []
            for n in names:
                if n in pins and n in listed and far_below(pins[n], listed[n]):
                    newest[n] = newest.get(n) or self._alone(n) or listed[n]
                    if far_below(pins[n], newest[n]):
                        low.append(n)
            for name in low:
                spec = self._stale(name, newest[name], pins["torch"])
                if spec:
                    text = self._instead(name, pins, spec, newest[name])
                    break
            else:
                return text, tuple(self._held(n, pins, newest[n]).text() for n in low)
        return text, ()

    def _newest(self, names: list[str]) -> dict[str, str]:
        """The newest release of each (the packages alone, for this Python and platform)."""
        if not names:
            return {}
        answer = self.ask(
            Probe(
                "venv.resolve-check-newest",
                "Find the newest release of each requested package",
                names,
                no_deps=True,
            )
        )
        return _versions(answer.text) if answer.text else {}

    def _alone(self, name: str) -> str | None:
        """The newest release of `name` that installs on its own (a newest release may require
        what the index lacks: vllm 0.34.0, a flashinfer-python release not published)."""
        answer = self.ask(
            Probe(
                f"venv.resolve-check-alone-{name}", f"Find the newest {name} that installs", [name]
            )
        )
        return _versions(answer.text).get(name) if answer.text else None

    def _stale(self, name: str, newest: str, torch: str) -> str:
        """What its newest release requires of torch, when that is older than the locked torch
        ("" when it is not, or uv does not say)."""
        answer = self.ask(
            Probe(
                f"venv.resolve-check-torch-of-{name}",
                f"Ask uv which torch {name} {newest} requires",
                [f"{name}=={newest}"],
                (f"torch=={torch}",),
            )
        )
        spec = newest_torch(name, answer.output) if answer.text is None else ""
        return spec if below(spec, torch) else ""

    def _instead(self, name: str, pins: dict[str, str], spec: str, newest: str) -> str:
        """The stack with `name` at its newest (and those pinned before: `self.pinned`), the rest
        walked back; refused naming the conflict when uv finds none."""
        self.pinned.append(f"{name}=={newest}")
        answer = self.ask(
            Probe(
                f"venv.resolve-check-with-newest-{name}",
                f"Resolve the stack with {name} {newest}, its newest",
                self.requirements,
                tuple(self.pinned),
            )
        )
        if answer.text is not None:
            return answer.text
        holders = holders_of(name, answer.output) or (f"uv: {explanation(answer.output)}",)
        torch, locked = pins["torch"], pins[name]
        raise InputError(
            f"{self.what}: {name} would lock to {locked}, older than the {name} releases made "
            f"for torch {torch}: {name} {newest}, its newest, requires torch{spec}, and {name} "
            f"{locked} accepts torch {torch} only by naming no upper bound. {name} {newest} "
            f"cannot be had with the rest: {'; '.join(holders)}. What would: {name}=={newest} "
            f"with that requirement changed to allow torch{spec}, or {name} left out"
        )

    def _held(self, name: str, pins: dict[str, str], newest: str) -> HeldBack:
        """Which requirement keeps `name` from its newest, the other requested packages held."""
        others = tuple(f"{n}=={pins[n]}" for n in sorted(self.requested) if n != name and n in pins)
        answer = self.ask(
            Probe(
                f"venv.resolve-check-held-{name}",
                f"Ask uv what keeps {name} {newest} out",
                self.requirements,
                (f"{name}=={newest}", *others),
            )
        )
        if answer.text is not None:
            return HeldBack(name, pins[name], newest, resolves=True)
        holders = holders_of(name, answer.output) or (f"uv: {explanation(answer.output)}",)
        return HeldBack(name, pins[name], newest, holders)


@dataclass(frozen=True)
class SourceOnly:
    """`package` locks `locked`, far below `newest`, its newest release, which has only source
    (and the resolution builds nothing)."""

    package: str
    locked: str
    newest: str


def source_only_above(ask: Ask, text: str, requested: list[str]) -> list[SourceOnly]:
    """The `requested` packages (canonical names) that the lock `text` holds far below a newest
    release that has only source: for each, the newest release on the index (`P>=ABOVE_ALL`:
    uv names it, source or not), then, when the locked one is far below it, that release alone,
    which uv refuses for want of a wheel. (Not "any release above the locked one": with the
    whole stack uv took deepspeed 0.3.1.dev3, and 0.3.1.dev5 has a wheel too.) For a resolution
    without builds only: with builds, uv reads an sdist's metadata from its build."""
    pins = _versions(text)
    found = []
    for name in sorted(n for n in requested if n in pins):
        top = ask(
            Probe(
                f"venv.resolve-check-newest-source-{name}",
                f"Find the newest {name} release, wheel or source",
                [f"{name}>={ABOVE_ALL}"],
                no_deps=True,
            )
        )
        newest = newest_available(top.output) if top.text is None else None
        if newest is None or not far_below(pins[name], newest):
            continue
        alone = ask(
            Probe(
                f"venv.resolve-check-wheel-of-{name}",
                f"Ask uv whether {name} {newest} has a wheel",
                [f"{name}=={newest}"],
                no_deps=True,
            )
        )
        failure = read_failure(alone.output) if alone.text is None else None
        if isinstance(failure, NeedsBuild) and name in failure.packages:
            found.append(SourceOnly(name, pins[name], newest))
    return found


def _versions(text: str) -> dict[str, str]:
    """The pins of a lock uv wrote for a question (read as strictly as any lock root takes)."""
    return parse_requirements(text, "uv's answer to a question about the stack").pins.versions
