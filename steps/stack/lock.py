"""The lock's model and file format.

The lock is a requirements file as `uv pip compile --generate-hashes` writes it, under a header
line of mlsetup's own (`# mlsetup-lock: {...}`) saying for which Python, platform and torch build
it was resolved, and from which inputs (`key`), so the same answers on the same machine reuse it
without resolving again, and another host can be handed exactly that file (`venv.lock`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

from steps.errors import InputError
from steps.safefs import read_bounded
from steps.units import MiB

LOCK_SCHEMA = "mlsetup.lock/1"
HEADER = "# mlsetup-lock: "
# Where the lock lives: root's copy (the one trusted) and the copy the venv's owner reads for
# `uv pip sync`, beside the stack smoke test, in a directory only root writes.
STATE_LOCK = "/var/lib/mlsetup/stack.lock"
SHARED_DIR = "/var/cache/mlsetup/stack"
SHARED_LOCK = f"{SHARED_DIR}/requirements.txt"
SMOKE_SCRIPT = f"{SHARED_DIR}/smoke_stack.py"
# The glibc floor of the distributions mlsetup supports (Ubuntu 22.04 ships glibc 2.35, 24.04
# 2.39, Debian 12 2.36: https://packages.ubuntu.com/jammy/libc6,
# https://packages.debian.org/bookworm/libc6): a wheel resolved for it installs on all of them.
MANYLINUX = "manylinux_2_35"
MAX_LOCK_BYTES = 4 * MiB

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+?)(?:\s*\\)?$")
_VIA = re.compile(r"^\s+#\s+(?:via\s+)?(-r \S+|[A-Za-z0-9][A-Za-z0-9._-]*)\s*$")


@dataclass(frozen=True)
class Lock:
    text: str  # the requirements with hashes, as uv wrote them
    python: str  # "3.12"
    platform: str  # "x86_64-manylinux_2_35"
    build: str  # the torch build it holds: "cu128", "cpu" (PyPI's plain torch: its default CUDA)
    key: str  # the inputs it was resolved from
    decided_by: tuple[str, ...] = ()  # the packages whose requirement kept a newer torch out
    note: str = ""  # how the build was settled, when it was not the first choice
    packages: dict[str, str] = field(default_factory=dict)  # canonical name -> exact version
    index: str = ""  # where it was resolved from, as the messages name it
    sources: tuple[str, ...] = ()  # "name version" of the pins that have no wheel: built at sync
    python_reason: str = ""  # why this Python, when mlsetup chose it ("auto")

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
            "decided_by": list(self.decided_by),
            "note": self.note,
            "index": self.index,
            "sources": list(self.sources),
            "python_reason": self.python_reason,
        }
        return HEADER + json.dumps(meta, sort_keys=True) + "\n"

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


def parse_pins(text: str) -> Pins:
    pins: dict[str, str] = {}
    via: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if m := _PIN.match(line):
            current = canonicalize_name(m.group(1))
            pins[current] = m.group(2)
            via[current] = []
        elif current and (v := _VIA.match(line)) and v.group(1) != "via":
            via[current].append(v.group(1))
    return Pins(pins, via)


def load_lock(text: str, origin: str) -> Lock:
    """A lock file mlsetup wrote (here or on another host); InputError naming `origin` if not."""
    first, _, body = text.partition("\n")
    if not first.startswith(HEADER):
        raise InputError(f"{origin}: not an mlsetup lock (its first line must be {HEADER}{{...}})")
    try:
        meta = json.loads(first[len(HEADER) :])
        if meta.get("schema") != LOCK_SCHEMA:
            raise ValueError(f"schema {meta.get('schema')!r}, allowed: {LOCK_SCHEMA}")
        fields = {k: meta[k] for k in ("python", "platform", "build", "key")}
        if not all(isinstance(v, str) for v in fields.values()):
            raise ValueError("python, platform, build and key must be strings")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(f"{origin}: the mlsetup-lock header is malformed: {exc}") from None
    pins = parse_pins(body).versions
    if "torch" not in pins or "--hash=" not in body:
        raise InputError(
            f"{origin}: the lock pins no torch or carries no hashes; allowed: a "
            "lock written by mlsetup (/var/lib/mlsetup/stack.lock of a host)"
        )
    fields["build"] = build_of_pins(pins)  # what the pinned torch is, whatever the header says
    return Lock(
        text=body,
        packages=pins,
        decided_by=tuple(str(d) for d in meta.get("decided_by") or ()),
        note=str(meta.get("note") or ""),
        index=str(meta.get("index") or ""),
        sources=tuple(str(d) for d in meta.get("sources") or ()),
        python_reason=str(meta.get("python_reason") or ""),
        **fields,
    )


def read_lock_file(path: Path, origin: str) -> Lock:
    """A lock from a file that may sit in another account's tree: no final symlink, regular
    files only, bounded."""
    try:
        data = read_bounded(path, MAX_LOCK_BYTES)
    except OSError as exc:
        raise InputError(f"{origin}: cannot read the lock: {exc.strerror or exc}") from None
    return load_lock(data.decode("utf-8", "replace"), origin)


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
