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
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from packaging.utils import canonicalize_name

from steps.answers import Answers
from steps.errors import InputError
from steps.knowledge import knowledge
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
_DEPENDS = re.compile(
    r"(?:all versions of |)([A-Za-z0-9][A-Za-z0-9._-]*?)(?:[=<>!~][^\s]*)? depends? on "
    r"torch([<>=!~][^\s,]*)"
)


@dataclass(frozen=True)
class Lock:
    text: str  # the requirements with hashes, as uv wrote them
    python: str  # "3.12"
    platform: str  # "x86_64-manylinux_2_35"
    build: str  # the torch build it holds: "cu128", "cpu" (PyPI's plain torch: its default CUDA)
    key: str  # the inputs it was resolved from
    decided_by: tuple[str, ...] = ()  # the requirements that brought torch in
    note: str = ""  # how the build was settled, when it was not the first choice
    packages: dict[str, str] = field(default_factory=dict)  # canonical name -> exact version

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
    return Lock(
        text=body,
        packages=pins,
        decided_by=tuple(meta.get("decided_by") or ()),
        note=str(meta.get("note") or ""),
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


def requirements(answers: Answers, build_requires: list[str]) -> list[str]:
    """What the lock must satisfy, in order: torch (as the answers pin it), the packages, then
    the extensions' build requirements (pip among them: the build runs `pip wheel`)."""
    spec = "" if answers.torch.version == "auto" else answers.torch.version
    out = [f"torch{spec}", *answers.torch.packages]
    names = {canonicalize_name(re.split(r"[\s<>=!~\[;@]", r, maxsplit=1)[0]) for r in out}
    for req in build_requires:
        name = canonicalize_name(re.split(r"[\s<>=!~\[;@]", req, maxsplit=1)[0])
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


def index_args(answers: Answers, build: str) -> list[str]:
    """uv's index options for this torch build: PyTorch's own index for the torch family
    (`--torch-backend`, everything else from the default index), or the answers' mirror, its
    credentials left out (`index_secrets` gives them to uv)."""
    if answers.torch.index_url == "auto":
        return ["--torch-backend", build]
    public, secret = split_credentials(answers.torch.index_url.replace("{build}", build))
    return ["--index", f"{INDEX_NAME}={public}" if secret else public]


def index_secrets(answers: Answers) -> dict[str, str]:
    """The environment that gives uv the mirror's credentials (empty: none in the URL)."""
    if answers.torch.index_url == "auto":
        return {}
    return split_credentials(answers.torch.index_url)[1]


def input_key(
    reqs: list[str], python: str, platform: str, builds: list[str], answers: Answers
) -> str:
    data = {
        "requirements": reqs,
        "python": python,
        "platform": platform,
        "builds": builds,
        "index_url": answers.torch.index_url,
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def compile_argv(
    infile: str, outfile: str, python: str, platform: str, build: str, answers: Answers
) -> list[str]:
    return [
        "uv",
        "pip",
        "compile",
        "--no-config",
        "--generate-hashes",
        "--no-header",
        "--no-python-downloads",
        "--python-version",
        python,
        "--python-platform",
        platform,
        *index_args(answers, build),
        "--output-file",
        outfile,
        infile,
    ]


def sync_argv(python_bin: str, answers: Answers, build: str) -> list[str]:
    return [
        "uv",
        "pip",
        "sync",
        "--python",
        python_bin,
        "--no-config",
        "--require-hashes",
        *index_args(answers, build),
        SHARED_LOCK,
    ]


def build_of(torch_version: str, pypi_cuda: str | None) -> str:
    """The build a locked torch is: its local tag ("2.9.0+cu128" -> cu128); PyPI's Linux wheels
    carry none and are built with the release's default CUDA (`pypi_cuda`)."""
    local = torch_version.partition("+")[2]
    if local:
        return local
    return f"cu{pypi_cuda.replace('.', '')}" if pypi_cuda else "cpu"


def decided_by(via: dict[str, list[str]], answers: Answers) -> tuple[str, ...]:
    """Who required torch's version: the packages uv names as depending on it, and the
    answers' own pin when there is one."""
    out = [v for v in via.get("torch", []) if not v.startswith("-r ")]
    if answers.torch.version != "auto":
        out.insert(0, f"torch.version {answers.torch.version}")
    return tuple(out) or ("torch.version auto (the newest torch of the build)",)


@dataclass(frozen=True)
class Unsatisfiable:
    """uv found no solution with any build tried: who pinned which torch."""

    package: str | None
    torch_spec: str | None
    uv_says: str


def read_failure(output: list[str]) -> Unsatisfiable:
    text = " ".join(line.strip() for line in output)
    m = None
    for m in _DEPENDS.finditer(text):
        if canonicalize_name(m.group(1)) not in ("torch", "you"):
            break
    relevant = [
        line.strip()
        for line in output
        if "because" in line.lower()
        or "no solution" in line.lower()
        or line.strip().startswith("error")
    ]
    return Unsatisfiable(
        m.group(1) if m else None, m.group(2) if m else None, " ".join(relevant)[-1200:]
    )


# uv's "no solution" that is really no index: offline, or a package the index does not have
_UNREACHABLE = ("network was disabled", "not found in the cache")


def no_solution(output: list[str]) -> bool:
    """uv found the index and no set of versions satisfies the requirements."""
    text = " ".join(output)
    return "No solution found" in text and not any(u in text for u in _UNREACHABLE)


def explain(
    failure: Unsatisfiable, builds: list[str], ccs: list[str], driver: str | None, answers: Answers
) -> str:
    """The exit-2 message: the package, the torch it requires, why no build tried has it, and
    what would work."""
    tried = ", ".join(builds)
    if failure.package is None:
        return (
            f"torch.packages {answers.torch.packages}: uv finds no torch for them with the "
            f"builds these GPUs and this driver run ({tried}). uv says: {failure.uv_says}"
        )
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        releases = [
            r
            for r in knowledge().torch.releases
            if r.matches(SpecifierSet(failure.torch_spec or ""))
        ]
    except InvalidSpecifier:
        releases = []
    shipped = "; ".join(f"torch {r.series} is built for {', '.join(r.builds)}" for r in releases)
    why = (
        f"{shipped}, and none of those runs here (GPUs: compute capability "
        f"{', '.join(ccs) or 'none'}; driver {driver or 'none'}; builds tried: {tried})"
        if shipped
        else f"no build tried ({tried}) has such a torch on the index"
    )
    cuda_hint = (
        f' or torch.cuda = "{releases[0].builds[-1]}" if the GPUs and driver run it'
        if releases
        else ""
    )
    return (
        f"torch.packages: {failure.package} requires torch{failure.torch_spec}, which cannot "
        f"be installed here: {why}. What would: a release of {failure.package} that allows "
        f"a torch built for {builds[0] if builds else 'these GPUs'}{cuda_hint}."
    )
