"""The lock's model and file format.

The lock is a requirements file as `uv pip compile --generate-hashes` writes it, under a header
line of mlsetup's own (`# mlsetup-lock: {...}`) saying for which Python, platform and torch build
it was resolved, from which inputs (`key`) and by which account (`resolved_by`), so the same
answers on the same machine reuse it without resolving again, and another host can be handed
exactly that file (`venv.lock`).

A lock is data, never uv input as it stands: every lock root takes (a `venv.lock`, the saved
one, a fleet's, the `lock.txt` the venv's owner wrote) is parsed to pins and hashes only
(`name==version`, `--hash=sha256:...`, comments), and what uv is given is rendered again from
those pins. An option line (`--find-links`, `-r`, `--index-url`, `-e`...), a URL or a path is
refused, naming the line: uv would follow it as root.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from steps.core.errors import InputError, Refused
from steps.core.safefs import read_bounded
from steps.core.sizes import MiB

LOCK_SCHEMA = "mlsetup.lock/1"
HEADER = "# mlsetup-lock: "
# Where the lock lives: root's copy (the one trusted) and the copy the venv's owner reads for
# `uv pip sync`, beside the stack smoke test, in a directory only root writes.
STATE_LOCK = "/var/lib/mlsetup/stack.lock"
SHARED_DIR = "/var/cache/mlsetup/stack"
SHARED_LOCK = f"{SHARED_DIR}/requirements.txt"
SMOKE_SCRIPT = f"{SHARED_DIR}/smoke_stack.py"
ACTIVATE_SCRIPT = f"{SHARED_DIR}/activate_cuda.py"  # steps.stack.activate.WRITE
# The glibc floor of the distributions mlsetup supports (Ubuntu 22.04 ships glibc 2.35, 24.04
# 2.39, Debian 12 2.36: https://packages.ubuntu.com/jammy/libc6,
# https://packages.debian.org/bookworm/libc6): a wheel resolved for it installs on all of them.
MANYLINUX = "manylinux_2_35"
MAX_LOCK_BYTES = 4 * MiB

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_PIN = re.compile(rf"^({_NAME})==([A-Za-z0-9.+!_-]+)$")
_HASH = re.compile(r"^--hash=sha256:([0-9a-f]{64})$")
# uv's "# via" annotations: a package, or the input files of the resolution
_VIA = re.compile(rf"^\s+#\s+(?:via\s+)?(-[rc] [A-Za-z0-9._-]+|{_NAME})\s*$")
MAX_SHOWN_LINE = 120  # of a refused line, in the message


@dataclass(frozen=True)
class Lock:
    text: str  # the requirements with hashes, as uv wrote them
    python: str  # "3.12"
    platform: str  # "x86_64-manylinux_2_35"
    build: str  # the torch build it holds: "cu128", "cpu" (PyPI's plain torch: its default CUDA)
    key: str  # the inputs it was resolved from
    resolved_by: str = ""  # the account uv resolved it as: a saved lock is reused only for it
    decided_by: tuple[str, ...] = ()  # the packages whose requirement kept a newer torch out
    note: str = ""  # how the build was settled, when it was not the first choice
    packages: dict[str, str] = field(default_factory=dict)  # canonical name -> exact version
    index: str = ""  # where it was resolved from, as the messages name it
    sources: tuple[str, ...] = ()  # "name version" of the pins that have no wheel: built at sync
    python_reason: str = ""  # why this Python, when mlsetup chose it ("auto")
    # requested packages locked in an older series than their newest, and what holds each back
    held_back: tuple[str, ...] = ()

    @property
    def torch(self) -> str:
        return self.packages.get("torch", "")

    def header(self) -> str:
        meta = {
            "schema": LOCK_SCHEMA,
            "python": self.python,
            "platform": self.platform,
            "build": self.build,
            "key": self.key,
            "resolved_by": self.resolved_by,
            "decided_by": list(self.decided_by),
            "note": self.note,
            "index": self.index,
            "sources": list(self.sources),
            "python_reason": self.python_reason,
            "held_back": list(self.held_back),
        }
        return HEADER + json.dumps(meta, sort_keys=True) + "\n"

    @property
    def held_back_text(self) -> str:
        """The packages below their newest, as the plan, the notices and `mlsetup lock` say it."""
        return f"; below their newest: {'; '.join(self.held_back)}" if self.held_back else ""

    def file_text(self) -> str:
        return self.header() + self.text

    def summary(self) -> dict:
        """The lock as report.json and the plan's reason show it."""
        return {
            "torch": self.torch,
            "build": self.build,
            "python": self.python,
            "platform": self.platform,
            "decided_by": list(self.decided_by),
            "note": self.note,
            "index": self.index,
            "sources": list(self.sources),
            "python_reason": self.python_reason,
            "held_back": list(self.held_back),
            "packages": dict(sorted(self.packages.items())),
        }


@dataclass(frozen=True)
class PlannedStack:
    """The stack a plan follows: the lock a resolution gave (None: planned from knowledge)
    and, when there is none, why (the plan's first warning)."""

    lock: Lock | None
    note: str | None = None

    @property
    def notes(self) -> tuple[str, ...]:
        return (self.note,) if self.note else ()


@dataclass(frozen=True)
class Pins:
    """A lock's pins: canonical name -> exact version, and name -> what required it (uv's
    `# via` annotations)."""

    versions: dict[str, str]
    via: dict[str, list[str]]


class LockRefused(Refused):
    """A lock holding more than pins and hashes (exit 2): `fix`, the command that replaces it."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(
            message,
            "A lock holds only pins with their hashes: uv would follow any other line (an "
            "index, a file, a path) as root, so nothing was installed.",
            fix,
        )


@dataclass(frozen=True)
class _Pin:
    name: str
    version: str
    hashes: list[str]
    via: list[str]


@dataclass(frozen=True)
class Requirements:
    """A lock's body as root takes it: its pins, and the text rendered from them alone (what
    uv is given: nothing of the file it came from but pins, hashes and `# via` notes)."""

    pins: Pins
    text: str


def parse_requirements(
    text: str, origin: str, fix: str = "sudo mlsetup lock", first_line: int = 1
) -> Requirements:
    """The pins of a lock's body, every one with its sha256 hashes; LockRefused naming the
    first line that is anything else (an option, a URL, a path, a marker, a pin without a
    hash), so that nothing but those pins ever reaches uv. `fix`: what replaces the lock;
    `first_line`: the number of the text's first line in its file."""
    pins: list[_Pin] = []
    logical, first = "", 0
    for number, line in enumerate(text.splitlines(), start=first_line):
        stripped = line.strip()
        if not logical and (not stripped or stripped.startswith("#")):
            if pins and (v := _VIA.match(line)) and v.group(1) != "via":
                pins[-1].via.append(v.group(1))
            continue
        if not logical:
            first = number
        logical += " " + stripped.removesuffix("\\")
        if not stripped.endswith("\\"):
            shown = line if first == number else None
            pins.append(_requirement(logical, first, shown, origin, fix))
            logical = ""
    if logical:
        pins.append(_requirement(logical, first, None, origin, fix))
    seen: set[str] = set()
    for pin in pins:
        if pin.name in seen:
            raise LockRefused(f"{origin}: {pin.name} is pinned twice; allowed: one pin", fix)
        seen.add(pin.name)
    return Requirements(
        Pins({p.name: p.version for p in pins}, {p.name: list(p.via) for p in pins}),
        "".join(_render(p) for p in pins),
    )


def _requirement(logical: str, number: int, line: str | None, origin: str, fix: str) -> _Pin:
    """One requirement of a lock (its continuation lines joined): `name==version` then its
    `--hash=sha256:` options, nothing else."""
    first, *options = logical.split()

    def refused(why: str) -> LockRefused:
        shown = logical.strip() if line is None else line.strip()
        if len(shown) > MAX_SHOWN_LINE:
            shown = shown[: MAX_SHOWN_LINE - 1] + "…"
        return LockRefused(
            f"{origin}: line {number} {shown!r}: {why}; allowed: pins with their hashes "
            "(name==version --hash=sha256:...) and comments, as mlsetup writes a lock",
            fix,
        )

    if first.startswith("-"):
        raise refused("an option, which uv would follow as root")
    pin = _PIN.match(first)
    if pin is None:
        raise refused("not a name==version pin (a URL, a path, a marker or an extra)")
    hashes = []
    for option in options:
        if (h := _HASH.match(option)) is None:
            raise refused(f"{option[:40]!r} is not a --hash=sha256:<64 hex digits> option")
        hashes.append(h.group(1))
    if not hashes:
        raise refused("a pin without a hash")
    try:
        Version(pin.group(2))
    except InvalidVersion:
        raise refused(f"{pin.group(2)!r} is not a version") from None
    return _Pin(canonicalize_name(pin.group(1)), pin.group(2), hashes, [])


def _render(pin: _Pin) -> str:
    """A pin as uv writes one with `--generate-hashes`."""
    lines = [f"{pin.name}=={pin.version}"] + [f"    --hash=sha256:{h}" for h in pin.hashes]
    text = " \\\n".join(lines) + "\n"
    if len(pin.via) == 1:
        text += f"    # via {pin.via[0]}\n"
    elif pin.via:
        text += "    # via\n" + "".join(f"    #   {v}\n" for v in pin.via)
    return text


def load_lock(text: str, origin: str, fix: str = "sudo mlsetup lock") -> Lock:
    """A lock file mlsetup wrote (here or on another host); InputError naming `origin` if not
    (LockRefused, with `fix`, for a body that holds more than pins)."""
    first, _, body = text.partition("\n")
    if not first.startswith(HEADER):
        raise InputError(f"{origin}: not an mlsetup lock (its first line must be {HEADER}{{...}})")
    try:
        meta = json.loads(first[len(HEADER) :])
        if meta.get("schema") != LOCK_SCHEMA:
            raise ValueError(f"schema {meta.get('schema')!r}, allowed: {LOCK_SCHEMA}")
        fields = {k: meta[k] for k in ("python", "platform", "build", "key")}
        fields["resolved_by"] = meta.get("resolved_by", "")
        if not all(isinstance(v, str) for v in fields.values()):
            raise ValueError("python, platform, build, key and resolved_by must be strings")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(f"{origin}: the mlsetup-lock header is malformed: {exc}") from None
    requirements = parse_requirements(body, origin, fix, first_line=2)
    pins = requirements.pins.versions
    if "torch" not in pins:
        raise InputError(
            f"{origin}: the lock pins no torch; allowed: a "
            "lock written by mlsetup (/var/lib/mlsetup/stack.lock of a host)"
        )
    fields["build"] = build_of_pins(pins)  # what the pinned torch is, whatever the header says
    return Lock(
        text=requirements.text,
        packages=pins,
        decided_by=tuple(str(d) for d in meta.get("decided_by") or ()),
        note=str(meta.get("note") or ""),
        index=str(meta.get("index") or ""),
        sources=tuple(str(d) for d in meta.get("sources") or ()),
        python_reason=str(meta.get("python_reason") or ""),
        held_back=tuple(str(d) for d in meta.get("held_back") or ()),
        **fields,
    )


def read_lock_file(path: Path, origin: str, fix: str = "sudo mlsetup lock") -> Lock:
    """A lock from a file that may sit in another account's tree: no final symlink, regular
    files only, bounded."""
    try:
        data = read_bounded(path, MAX_LOCK_BYTES)
    except OSError as exc:
        raise InputError(f"{origin}: cannot read the lock: {exc.strerror or exc}") from None
    return load_lock(data.decode("utf-8", "replace"), origin, fix)


def platform_for(arch: str | None) -> str:
    """The platform a lock is resolved for: the machine's architecture, the glibc floor."""
    return f"{arch or 'x86_64'}-{MANYLINUX}"


# The CUDA runtime a PyPI torch wheel requires names its build: nvidia-cuda-runtime-cu12==12.8.90
# (torch 2.9.0), cuda-toolkit==13.0.3.0 and nvidia-cuda-runtime==13.0.96 (torch 2.14.0): the
# wheels' metadata on PyPI, 2026-12-01 (tests/fixtures/pypi-record.zip).
CUDA_RUNTIMES = (
    "cuda-toolkit",
    "nvidia-cuda-runtime",
    "nvidia-cuda-runtime-cu12",
    "nvidia-cuda-runtime-cu11",
)


@dataclass(frozen=True)
class Runtime:
    """The CUDA runtime the locked torch's wheel requires: `cuda` (major.minor) and the pin
    that says so ("nvidia-cuda-runtime-cu12==12.8.90")."""

    cuda: str
    pin: str


def cuda_of_pins(pins: dict[str, str]) -> Runtime | None:
    """The locked torch's CUDA runtime; None: it requires none (the CPU build)."""
    for name in CUDA_RUNTIMES:
        if version := pins.get(name):
            major, _, rest = version.partition(".")
            minor = rest.partition(".")[0]
            if major.isdigit() and minor.isdigit():
                return Runtime(f"{major}.{minor}", f"{name}=={version}")
    return None


def build_of_pins(pins: dict[str, str]) -> str:
    """The build the locked torch is, from the distribution itself: its local version
    ("2.9.0+cu128" -> cu128), else the CUDA runtime its wheel requires (PyPI's Linux wheels
    carry no local tag), else the CPU build."""
    local = pins.get("torch", "").partition("+")[2]
    if local:
        return local
    cuda = cuda_of_pins(pins)
    return f"cu{cuda.cuda.replace('.', '')}" if cuda else "cpu"


def make_shared_dir(shared: Path) -> None:
    """The directory beside the lock that only root writes and the venv's owner reads
    (`shared`: SHARED_DIR under the run's root), and the one above it."""
    for directory in (shared.parent, shared):
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o755)
