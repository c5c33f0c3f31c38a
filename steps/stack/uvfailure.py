"""What a failed `uv pip compile` says, as the cause a person acts on.

uv explains a failed resolution as a derivation ("Because vllm==0.33.0 depends on torch==2.14.0
and ..., we can conclude that ...") and a failed fetch as "Failed to fetch: URL" with its causes.
`read_failure` turns that text into one typed cause: the index cannot be reached (and which URL),
a package or version the index does not have, two requirements that disagree on a shared
dependency (both sides named), packages that publish only source distributions while builds are
disabled, a package with no wheel for the target Python, a build that failed, or, when none of
these fits, uv's own words. Patterns checked against uv 0.13.9's output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.utils import canonicalize_name

_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_SPEC = r"(?:[<>=!~]=?[^\s,]+)?"
_NOT_FOUND = re.compile(rf"\b({_NAME}) was not found in the (?:package registry|cache)")
_NO_VERSION = re.compile(rf"there is no version of ({_NAME})([<>=!~]=?[^\s,]+)")
# "X depends on Y{marker}==1" or "Y[extra]==1": uv writes markers in braces, extras in brackets
_EXTRA = r"(?:\{[^}]*\}|\[[^\]]*\])?"
_DEPENDS = re.compile(rf"\b({_NAME})({_SPEC}) depends? on ({_NAME}){_EXTRA}({_SPEC})")
_INCOMPATIBLE = re.compile(
    rf"we can conclude that (?:all versions of )?({_NAME}{_SPEC}) and (?:all versions of )?"
    rf"({_NAME}{_SPEC}) are incompatible"
)
_NEEDS_BUILD = re.compile(rf"Wheels are required for `({_NAME})` because building from source")
_NO_PYTHON_WHEEL = re.compile(
    rf"\b({_NAME})({_SPEC}) has no wheels with a matching Python (?:ABI|version|implementation) "
    r"tag \(e\.g\., `([^`]+)`\)"
)
# uv's hint after that error: "we only found wheels for `torch` (v1.13.1) with the following
# Python ABI tags: `cp37m`, `cp38`, ..." (uv 0.13)
_FOUND_TAGS = re.compile(
    r"we only found wheels for `[^`]+` \(v[^)]+\) with the following Python "
    r"(?:ABI|implementation|version) tags?: ((?:`[^`]+`(?:, )?)+)"
)
_CPYTHON_TAG = re.compile(r"`cp3(\d{1,2})[a-z]*`")
_BUILD_FAILED = re.compile(rf"Failed to (?:download and )?build `({_NAME})(?:==|\s@\s)?([^`]*)`")
_FETCH_FAILED = re.compile(r"Failed to (?:fetch|query|download)[^:]*:\s*`?([a-z+]+://[^\s`]+)`?")
# asked for a release above every one there: "Because only flash-attn<=2.8.3.post2 is available"
# "only NAME<=NEWEST is available", or "only NAME==IT" when the index has one release
_ONLY_UP_TO = re.compile(rf"only ({_NAME})(?:<=|==)([^\s,]+) is available")
OFFLINE_MARKERS = ("network was disabled", "not found in the cache")
OFFLINE_DETAIL = (
    "uv runs offline (UV_OFFLINE or --offline) and its cache lacks what the stack needs"
)


@dataclass(frozen=True)
class Unreachable:
    """The index (or a file on it) could not be fetched: `url` is the one that failed."""

    url: str | None
    detail: str


@dataclass(frozen=True)
class Missing:
    """The index has no `package` (or no release matching `spec`); `by`: the requirement that
    asked for it ("vllm==0.11.2"), None for one of the answers' own."""

    package: str
    spec: str | None
    by: str | None


@dataclass(frozen=True)
class Conflict:
    """Two requirements that need different versions of `shared`: `sides` with what each wants."""

    sides: tuple[str, str]
    shared: str
    wants: tuple[str, str]


@dataclass(frozen=True)
class NeedsBuild:
    """Builds were disabled and these packages have only source distributions."""

    packages: tuple[str, ...]


@dataclass(frozen=True)
class NoPythonWheel:
    package: str
    tag: str  # "cp315"
    # the Pythons its wheels there are for, from uv's hint ("3.7", ... "3.11"), oldest first
    has: tuple[str, ...] = ()


@dataclass(frozen=True)
class BuildFailed:
    package: str
    version: str
    detail: str


@dataclass(frozen=True)
class Unexplained:
    """No solution, for a reason none of the above reads."""

    detail: str


@dataclass(frozen=True)
class UvFailed:
    """uv stopped before resolving (its cache, its arguments, its Python)."""

    detail: str


Failure = (
    Unreachable
    | Missing
    | Conflict
    | NeedsBuild
    | NoPythonWheel
    | BuildFailed
    | Unexplained
    | UvFailed
)


def _cause(output: list[str]) -> str:
    """uv's error and its causes as one paragraph (warnings and hints left out)."""
    keep, started = [], False
    for line in output:
        text = line.strip()
        if text.startswith("error:"):
            started = True
        elif text.startswith(("hint:", "warning:")):
            started = False
            continue
        if started and text:
            keep.append(text.removeprefix("error:").removeprefix("cause:").strip())
    return " ".join(keep)


def read_failure(output: list[str], local: bool = False) -> Failure:
    """`local`: every index is a directory, which uv reads offline too (it then says "not found
    in the cache" of a package the directory lacks)."""
    text = " ".join(line.strip() for line in output)
    cause = _cause(output) or text[-600:]
    solving = "No solution found" in text
    offline = not local and any(marker in text for marker in OFFLINE_MARKERS)
    if not solving or offline:
        if m := _BUILD_FAILED.search(text):
            return BuildFailed(m.group(1), m.group(2), cause[-900:])
        if m := _FETCH_FAILED.search(text):
            return Unreachable(m.group(1), cause[-600:])
        if offline:  # uv's resolver prose then names whichever package its cache lacked first
            return Unreachable(None, OFFLINE_DETAIL)
        return UvFailed(cause[-600:])
    if needs := sorted({canonicalize_name(n) for n in _NEEDS_BUILD.findall(text)}):
        return NeedsBuild(tuple(needs))
    missing = _missing(cause)
    if missing is not None:
        return missing
    if m := _INCOMPATIBLE.search(cause):
        return _conflict(cause, m.group(1), m.group(2))
    if m := _NO_PYTHON_WHEEL.search(cause):
        found = _FOUND_TAGS.search(text)
        minors = sorted({int(t) for t in _CPYTHON_TAG.findall(found.group(1))} if found else ())
        return NoPythonWheel(m.group(1) + m.group(2), m.group(3), tuple(f"3.{n}" for n in minors))
    return Unexplained(cause[-1200:])


def _missing(cause: str) -> Missing | None:
    """The first package or version uv says the index lacks, and who needed it."""
    found: list[tuple[int, str, str | None]] = [
        (m.start(), m.group(1), None) for m in _NOT_FOUND.finditer(cause)
    ]
    found += [(m.start(), m.group(1), m.group(2)) for m in _NO_VERSION.finditer(cause)]
    if not found:
        return None
    at, name, spec = min(found)
    # who asked for it: the nearest "X depends on NAME" (uv puts it before or after)
    asking = [
        (abs(dep.start() - at), dep.group(1) + dep.group(2))
        for dep in _DEPENDS.finditer(cause)
        if canonicalize_name(dep.group(3)) == canonicalize_name(name)
    ]
    return Missing(name, spec, min(asking)[1] if asking else None)


def _conflict(cause: str, a: str, b: str) -> Conflict:
    """Both sides, and the dependency uv says each of them requires differently."""
    wants: dict[str, dict[str, str]] = {}
    for m in _DEPENDS.finditer(cause):
        wants.setdefault(canonicalize_name(m.group(1)), {})[canonicalize_name(m.group(3))] = (
            m.group(3) + m.group(4)
        )
    name_a = canonicalize_name(re.split(r"[<>=!~]", a, maxsplit=1)[0])
    name_b = canonicalize_name(re.split(r"[<>=!~]", b, maxsplit=1)[0])
    deps_a, deps_b = wants.get(name_a, {}), wants.get(name_b, {})
    # the first dependency both name, preferring one they pin differently (xgrammar==0.2.8
    # against ==0.2.7) over one both merely require (humming-kernels, in uv's own words)
    both = [d for d in deps_a if d in deps_b]
    differ = [d for d in both if deps_a[d] != deps_b[d]]
    shared = next(iter(differ or both), None)
    if shared is None:
        return Conflict((a, b), "", ("", ""))
    return Conflict((a, b), shared, (deps_a[shared], deps_b[shared]))


@dataclass(frozen=True)
class TorchPin:
    """A torch this build's index does not have: `spec`, required `by` a package
    ("vllm==0.11.2") or by the answers ("torch.version"). Another build's index may have it."""

    by: str
    spec: str


def torch_pin(failure: Failure) -> TorchPin | None:
    if isinstance(failure, Missing) and canonicalize_name(failure.package) == "torch":
        return TorchPin(failure.by or "torch.version", failure.spec or "")
    return None


def torch_dependents(output: list[str]) -> list[str]:
    """The packages uv's explanation says depend on torch, in the order it names them."""
    return [
        m.group(1)
        for m in _DEPENDS.finditer(_cause(output))
        if canonicalize_name(m.group(3)) == "torch"
    ]


# A whole specifier, every clause of it ("numpy>=1.22,<2.5")
_SPECS = r"(?:[<>=!~]=?[^\s,]+(?:,[<>=!~]=?[^\s,]+)*)?"
_DEPENDS_FULL = re.compile(
    rf"\b({_NAME})({_SPECS}) depends? on ({_NAME}){_EXTRA}({_SPECS})(?=[\s,.]|$)"
)


def dependencies(output: list[str]) -> list[tuple[str, str, str, str]]:
    """Each "X==1 depends on Y>=2,<3" of uv's explanation, in order: (X's canonical name, its
    specifier, Y's canonical name, Y's whole specifier)."""
    return [
        (
            canonicalize_name(m.group(1)),
            m.group(2),
            canonicalize_name(m.group(3)),
            m.group(4).rstrip("."),  # the sentence's full stop
        )
        for m in _DEPENDS_FULL.finditer(_cause(output))
    ]


def explanation(output: list[str], limit: int = 400) -> str:
    """uv's own explanation of a failed resolution, its last `limit` characters."""
    return _cause(output)[-limit:]


# a release above any real one: uv answers "only NAME<=NEWEST is available"
ABOVE_ALL = "999999"


def newest_available(output: list[str]) -> str | None:
    """The newest release uv names when asked for one above every release the index has
    (`NAME>=ABOVE_ALL`), wheel or source alike, builds allowed or not."""
    m = _ONLY_UP_TO.search(" ".join(line.strip() for line in output))
    return m.group(2) if m else None
