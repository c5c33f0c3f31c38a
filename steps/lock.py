"""One stack: torch, the answers' packages and the extensions' build requirements, resolved
together by uv into one exact lock (versions and hashes) before anything is installed.

The lock is a requirements file as `uv pip compile --generate-hashes` writes it, under a header
line of mlsetup's own (`# mlsetup-lock: {...}`) saying for which Python, platform and torch build
it was resolved, and from which inputs (`key`), so the same answers on the same machine reuse it
without resolving again, and another host can be handed exactly that file (`venv.lock`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from packaging.utils import canonicalize_name

from steps.answers import Answers
from steps.errors import InputError
from steps.knowledge import knowledge, machine_root
from steps.safefs import read_bounded
from steps.units import MiB
from steps.uvconfig import configured_index

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


def parse_pins(text: str) -> tuple[dict[str, str], dict[str, list[str]]]:
    """name -> version and name -> what required it (uv's `# via` annotations)."""
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
    return pins, via


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
    pins, _ = parse_pins(body)
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
    return f"{arch or 'x86_64'}-{MANYLINUX}"


def requirement_name(req: str) -> str:
    return canonicalize_name(re.split(r"[\s<>=!~\[;@]", req, maxsplit=1)[0])


def requirements(answers: Answers, build_requires: list[str]) -> list[str]:
    """What the lock must satisfy, in order: the packages, then torch (as the answers pin it),
    then the extensions' build requirements (pip among them: the build runs `pip wheel`). uv's
    backtracking follows the order: with a bare torch first it keeps the newest torch and walks
    the packages back instead (forty everyday packages locked to a 2023 vllm that way)."""
    spec = "" if answers.torch.version == "auto" else answers.torch.version
    out = [*answers.torch.packages]
    names = {requirement_name(r) for r in out}
    if "torch" not in names or spec:
        out.append(f"torch{spec}")
        names.add("torch")
    for req in build_requires:
        name = requirement_name(req)
        if name not in names:
            names.add(name)
            out.append(req)
    return out


# uv takes a named index's credentials from UV_INDEX_<NAME>_USERNAME/_PASSWORD (uv docs,
# "Environment variables"; checked with uv 0.13.9), so they never need to be on a command line,
# which every account can read in /proc/PID/cmdline.
INDEX_NAME = "torch"
INDEX_CREDENTIALS = ("UV_INDEX_TORCH_USERNAME", "UV_INDEX_TORCH_PASSWORD")


def split_credentials(url: str) -> tuple[str, dict[str, str]]:
    """`url` without its user:password, and the environment that gives them to uv."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, {}
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    public = urlunsplit(parts._replace(netloc=netloc))
    user, password = INDEX_CREDENTIALS
    return public, {user: unquote(parts.username or ""), password: unquote(parts.password or "")}


def configured(root: Path | None = None) -> str | None:
    """The default index the operator configured (steps.uvconfig), as uv will see it."""
    return configured_index(os.environ, root or machine_root())


def index_args(answers: Answers, build: str, configured: str | None) -> list[str]:
    """uv's index options for this torch build. The index the operator configured is the only
    one, never PyPI beside it: torch.index_url replaces uv's default index (PyPI) unless a
    default is configured for uv or pip (`configured`: UV_DEFAULT_INDEX, pip's index-url, which
    uv reads from its environment); then it is searched first, for every package. With neither,
    PyPI with PyTorch's own index for the torch family (`--torch-backend`). The mirror's
    credentials are left out (`index_secrets` gives them to uv)."""
    url = answers.torch.index_url
    if url == "auto":
        return [] if configured else ["--torch-backend", build]
    public, secret = split_credentials(url.replace("{build}", build))
    named = f"{INDEX_NAME}={public}" if secret else public
    return ["--index" if configured else "--default-index", named]


def per_build_index(answers: Answers, configured: str | None) -> bool:
    """Whether each torch build has an index of its own (PyTorch's, or a mirror of it with
    "{build}"): a build is then chosen by resolving against its index. Else one index serves
    one torch per release, and its wheel says which build it is."""
    url = answers.torch.index_url
    return "{build}" in url if url != "auto" else configured is None


PYPI = "https://pypi.org/simple"


def local_index(answers: Answers, configured: str | None) -> bool:
    """Whether every index is a directory on this machine (a test's, an offline mirror's)."""

    def local(url: str) -> bool:
        return url.startswith(("/", "file://"))

    url = answers.torch.index_url
    if url == "auto":
        return configured is not None and local(configured)
    return local(url) and (configured is None or local(configured))


def index_label(answers: Answers, build: str, configured: str | None) -> str:
    """The index a resolution used, as a message names it (no credentials)."""
    url = answers.torch.index_url
    default = split_credentials(configured)[0] if configured else PYPI
    if url == "auto":
        if configured:
            return default
        return f"{PYPI} (torch from {knowledge().torch.index_for(build)})"
    public = split_credentials(url.replace("{build}", build))[0]
    return f"{public} (then {default})" if configured and default != public else public


def index_secrets(answers: Answers) -> dict[str, str]:
    """The environment that gives uv the mirror's credentials (empty: none in the URL)."""
    if answers.torch.index_url == "auto":
        return {}
    return split_credentials(answers.torch.index_url)[1]


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


def compile_argv(
    infile: str,
    outfile: str,
    python: str,
    platform: str,
    index: list[str],
    builds: bool,
    constraints: str | None = None,
    offline: bool = False,
) -> list[str]:
    """`uv pip compile` for the lock. `builds` False: `--no-build`, nothing of a package runs
    (every resolution root runs); True only as an ordinary account, for an sdist whose
    metadata comes only from its build backend. `offline`: from uv's cache alone (what the
    resolution just before it fetched)."""
    return [
        "uv",
        "pip",
        "compile",
        "--no-config",
        "--generate-hashes",
        "--no-header",
        "--no-python-downloads",
        *([] if builds else ["--no-build"]),
        *(["--offline"] if offline else []),
        "--python-version",
        python,
        "--python-platform",
        platform,
        *index,
        *(["--constraint", constraints] if constraints else []),
        "--output-file",
        outfile,
        infile,
    ]


def sync_argv(python_bin: str, index: list[str], builds: bool) -> list[str]:
    """`uv pip sync` of the lock as the venv's owner; `builds` False (root's venv): a pin with
    no wheel is an error, never a build run as root."""
    return [
        "uv",
        "pip",
        "sync",
        "--python",
        python_bin,
        "--no-config",
        "--require-hashes",
        *([] if builds else ["--no-build"]),
        *index,
        SHARED_LOCK,
    ]


# The CUDA runtime a PyPI torch wheel requires names its build: nvidia-cuda-runtime-cu12==12.8.90
# (torch 2.9.0), cuda-toolkit==13.0.3.0 and nvidia-cuda-runtime==13.0.96 (torch 2.14.0): the
# wheels' metadata on PyPI, 2026-12-01 (tests/fixtures/pypi-record.zip).
CUDA_RUNTIMES = (
    "cuda-toolkit",
    "nvidia-cuda-runtime",
    "nvidia-cuda-runtime-cu12",
    "nvidia-cuda-runtime-cu11",
)


def cuda_of_pins(pins: dict[str, str]) -> tuple[str, str] | None:
    """(CUDA major.minor, the pin that says so) of the locked torch's runtime; None: none."""
    for name in CUDA_RUNTIMES:
        if version := pins.get(name):
            major, _, rest = version.partition(".")
            minor = rest.partition(".")[0]
            if major.isdigit() and minor.isdigit():
                return f"{major}.{minor}", f"{name}=={version}"
    return None


def build_of_pins(pins: dict[str, str]) -> str:
    """The build the locked torch is, from the distribution itself: its local version
    ("2.9.0+cu128" -> cu128), else the CUDA runtime its wheel requires (PyPI's Linux wheels
    carry no local tag), else the CPU build."""
    local = pins.get("torch", "").partition("+")[2]
    if local:
        return local
    cuda = cuda_of_pins(pins)
    return f"cu{cuda[0].replace('.', '')}" if cuda else "cpu"
