"""Answers: what the operator wants (`version = 1` TOML).

The pydantic models here are the single definition of the answers file: the
wizard edits them, `apply --answers` loads them, and `mlsetup answers --schema`
prints the JSON Schema generated from them, so the paths cannot drift.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

from steps.core.errors import input_kind, validate_strict
from steps.core.inputfiles import parse_toml, read_input
from steps.core.sizes import GiB, MiB
from steps.known.knowledge import knowledge
from steps.known.recipes import ARCH_SUFFIXES, compute_capability_of

# Every value below that becomes an argv element or a path is checked here, once (docs/design.md,
# "Trust"). Patterns use [0-9], never \d: fullwidth digits are digits to Python, not to uv.
_MEMORY = re.compile(
    r"(?:([0-9]{1,3}(?:\.[0-9]{1,3})?)%|([0-9]{1,7}(?:\.[0-9]{1,3})?)\s*(GiB|MiB))"
)
# PEP 503 project names (https://peps.python.org/pep-0503/#normalized-names)
_PROJECT_NAME = re.compile(r"[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9]")
# Account names as NSS hands them out: POSIX names, plus the dots and @ of LDAP/SSSD users.
ACCOUNT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}\$?")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_TEXT = 500  # characters in any one answer that is not a path
MAX_PATH = 4096

# Where a venv or a wheelhouse may never be, nor be inside: the system's own trees and
# mlsetup's (root writes into a wheelhouse; uv may clear a venv directory).
SYSTEM_TREES = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/run",
    "/sbin",
    "/snap",
    "/sys",
    "/usr",
    "/lost+found",
    "/var/lib/mlsetup",
    "/var/log/mlsetup",
    "/var/cache/mlsetup",
)
# Directories that hold other directories: a venv may be inside them, never one of them.
SHARED_PARENTS = (
    "/",
    "/home",
    "/root",
    "/opt",
    "/srv",
    "/mnt",
    "/media",
    "/tmp",
    "/var",
    "/var/lib",
    "/var/log",
    "/var/cache",
    "/var/tmp",
    "/var/opt",
    "/usr/local",
)
# /usr/local is for the site's own software (a venv at /usr/local/ml-env is fine), but not its
# FHS hierarchy or the CUDA toolkits (https://refspecs.linuxfoundation.org/FHS_3.0/fhs/ch04s09.html)
_USR_LOCAL_SYSTEM = re.compile(
    r"/usr/local/(bin|etc|games|include|lib|lib64|libexec|man|sbin|share|src|cuda[^/]*)(/.*)?"
)


def _plain(v: str, limit: int = MAX_TEXT) -> str:
    """A one-line ASCII-printable value of bounded length (argv elements, names)."""
    if len(v) > limit or _CONTROL.search(v) or not v.isascii():
        raise ValueError(f"allowed: at most {limit} printable ASCII characters on one line")
    return v


def unsafe_directory(path: str) -> str | None:
    """Why `path` (absolute, normalized) cannot be a venv or a wheelhouse; None if it can."""
    site_own = path.startswith("/usr/local/") and not _USR_LOCAL_SYSTEM.fullmatch(path)
    for tree in SYSTEM_TREES:
        if (path == tree or path.startswith(tree + "/")) and not site_own:
            return f"{tree} is the system's own"
    if path in SHARED_PARENTS:
        return f"{path} holds other directories; name a directory of its own inside it"
    return None


def _absolute_directory(v: str, what: str) -> str:
    """A normalized absolute path that is not a system directory."""
    if len(v) > MAX_PATH or _CONTROL.search(v) or not v.startswith("/"):
        raise ValueError(f"allowed: an absolute path (at most {MAX_PATH} characters)")
    path = v[:-1] if v.endswith("/") and v != "/" else v
    if posixpath.normpath(path) != path or ".." in path.split("/"):
        raise ValueError("allowed: a normalized absolute path, without . or .. or //")
    reason = unsafe_directory(path)
    if reason:
        raise ValueError(f"not {what}: {reason}")
    return v


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class DriverAnswers(_Section):
    action: Literal["auto", "install", "skip"] = Field(
        "auto", description="auto: install only if the loaded driver cannot run the chosen CUDA"
    )
    branch: str = Field("auto", description='"auto", or a driver branch such as "580"')
    modules: Literal["auto", "open", "proprietary"] = "auto"

    @field_validator("branch")
    @classmethod
    def _branch(cls, v: str) -> str:
        lowest = knowledge().repo.min_driver_branch
        if v != "auto" and not (re.fullmatch("[0-9]{1,4}", v) and lowest <= int(v) <= 9999):
            raise ValueError(
                f'allowed: "auto" or a driver branch from {lowest} on, such as "580" '
                "(NVIDIA's repo pins branches from there)"
            )
        return v


class ToolkitAnswers(_Section):
    versions: Literal["auto"] | list[str] = Field(
        "auto",
        description='"auto" = the CUDA torch is built with; or a list such as ["12.8", "13.0"]',
    )

    @field_validator("versions")
    @classmethod
    def _versions(cls, v: str | list[str]) -> str | list[str]:
        if isinstance(v, list):
            known = [r.version for r in knowledge().cuda.releases]
            if not v or len(v) > len(known):
                raise ValueError(f'allowed: "auto" or a list of CUDA releases from {known}')
            for item in v:
                if item not in known:
                    raise ValueError(
                        f"{item!r} is not a CUDA release mlsetup knows; allowed: {known}"
                    )
        return v


class VenvAnswers(_Section):
    path: str = Field("~/ml-env", description='"~" is the invoking (sudo) user\'s home')
    python: str = Field(
        "auto",
        description="auto = the system Python if the torch release supports it, else the newest "
        'it supports (uv downloads it); or a major.minor such as "3.12"',
    )
    user: str = Field("auto", description="auto = $SUDO_USER, else the account running mlsetup")
    lock: str = Field(
        "",
        description="a lock file from an earlier run (/var/lib/mlsetup/stack.lock): install "
        'exactly that stack; "" = resolve one',
    )

    @field_validator("python")
    @classmethod
    def _python(cls, v: str) -> str:
        if v != "auto" and not re.fullmatch(r"3\.[0-9]{1,2}", v):
            raise ValueError('allowed: "auto" or a Python 3 major.minor version such as "3.12"')
        return v

    @field_validator("lock")
    @classmethod
    def _lock(cls, v: str) -> str:
        if v and (not v.startswith("/") or "\0" in v or len(v) > 4096):
            raise ValueError('allowed: "" (resolve) or the absolute path of a lock file')
        return v

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        if v.startswith("~/") and len(v) > 2:  # checked again once "~" is known (choices)
            _absolute_directory("/home/someone" + v[1:], "a venv directory")
            return v
        if not v.startswith("/"):
            raise ValueError(
                'allowed: an absolute path or one starting with "~/" such as "~/ml-env"'
            )
        _absolute_directory(v, "a venv directory")
        return v

    @field_validator("user")
    @classmethod
    def _user(cls, v: str) -> str:
        # That the account exists is checked where the machine is known (choices.check_owner).
        if v != "auto" and not ACCOUNT_NAME.fullmatch(v):
            raise ValueError('allowed: "auto" or an account name such as "alice"')
        return v


def _requirement(item: str) -> str:
    allowed = (
        'allowed: a PEP 508 requirement such as "transformers>=4.40" (a name, extras, '
        "a version specifier, a marker; no URL, no option)"
    )
    try:
        _plain(item, 200)
        req = Requirement(item)
    except (ValueError, InvalidRequirement):
        raise ValueError(allowed) from None
    # A URL or path would install code from outside the one resolved lock; "===" compares
    # arbitrary strings.
    if req.url or item != item.strip() or any(s.operator == "===" for s in req.specifier):
        raise ValueError(allowed)
    return item


class TorchAnswers(_Section):
    version: str = Field("auto", description='"auto" or a PEP 440 specifier such as "==2.8.0"')
    cuda: str = Field("auto", description="auto | cpu | cu126 | cu128 | cu129 | cu130")
    packages: list[Annotated[str, AfterValidator(_requirement)]] = Field(
        default_factory=list, description="more packages for the venv (PEP 508 requirements)"
    )
    index_url: str = Field(
        "auto",
        description="auto = PyPI, with https://download.pytorch.org/whl/{build} for the torch "
        "packages (or the default index configured for uv or pip alone); or a mirror (URL or "
        'local directory, "{build}" becomes cu128, cpu, ...) that replaces PyPI, never beside it',
    )

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        allowed = 'allowed: "auto" or a PEP 440 specifier such as "==2.8.0"'
        if v != "auto":
            try:
                _plain(v, 200)
                spec = SpecifierSet(v)
            except (ValueError, InvalidSpecifier):
                raise ValueError(allowed) from None
            if v != v.strip() or not str(spec) or any(s.operator == "===" for s in spec):
                raise ValueError(allowed + ' (not "===")')
        return v

    @field_validator("packages")
    @classmethod
    def _packages(cls, v: list[str]) -> list[str]:
        if len(v) > 200:
            raise ValueError("allowed: at most 200 packages")
        return v

    @field_validator("index_url")
    @classmethod
    def _index_url(cls, v: str) -> str:
        if v != "auto":
            _index(v)
        return v

    @field_validator("cuda")
    @classmethod
    def _cuda(cls, v: str, info: ValidationInfo) -> str:
        allowed = ("auto", *knowledge().torch.build_names)
        if v not in allowed:
            raise ValueError(f"allowed: {', '.join(allowed)}")
        version = info.data.get("version", "auto")
        if version == "auto" or v in ("auto", "cpu"):
            return v
        # A pinned torch and a CUDA build must exist together on download.pytorch.org.
        releases = [r for r in knowledge().torch.releases if r.matches(SpecifierSet(version))]
        if releases and not any(v in r.builds for r in releases):
            shipped = "; ".join(f"torch {r.series}: {', '.join(r.builds)}" for r in releases)
            raise ValueError(f"torch {version} is not built for {v}; allowed: {shipped}")
        return v


def _index(v: str) -> None:
    allowed = (
        'allowed: "auto", an http(s):// or file:// URL, or an absolute directory, '
        'where "{build}" becomes cu128, cpu, ...'
    )
    try:
        _plain(v, 2048)
    except ValueError:
        raise ValueError(allowed) from None
    if v.startswith("/"):
        if ".." in v.split("/"):
            raise ValueError(allowed + " (without ..)")
        return
    try:
        url = urlsplit(v)
    except ValueError:
        raise ValueError(allowed) from None
    if " " in v or not (
        (url.scheme in ("http", "https") and url.hostname) or (url.scheme == "file" and url.path)
    ):
        raise ValueError(allowed)


class ExtensionAnswers(_Section):
    name: str = Field(description="a recipe in assets/extensions.toml, e.g. flash-attn")
    version: str = Field(description="the release to install, e.g. 2.8.3")
    archs: Literal["auto"] | list[str] = Field(
        "auto",
        description='"auto" = the GPUs present; or compute capabilities such as ["9.0"], one '
        'with NVIDIA\'s suffix for arch-specific ("9.0a") or family-specific ("10.0f") code '
        "where the recipe's arch_map has it",
    )
    source: Literal["auto", "wheel", "build"] = Field(
        "auto",
        description="auto: a wheel built earlier (cache, wheelhouse), else the project's own "
        "release wheel if one matches, else compile | wheel: only a wheel built earlier | build",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        known = sorted(knowledge().extensions)
        if not _PROJECT_NAME.fullmatch(v) or v not in known:
            raise ValueError(f"allowed: {', '.join(known)}")
        return v

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        # It becomes `pkg==VERSION`, a release URL and a build-tree name: a canonical public
        # PEP 440 version only (never "2.8.3/../../etc", "v2.8.3" or "2.8.3+local").
        try:
            canonical = str(Version(v)) if len(v) <= 64 and v.isascii() else None
        except InvalidVersion:
            canonical = None
        if canonical != v or "+" in v:
            raise ValueError('allowed: a release version (PEP 440) written as "2.8.3"')
        return v

    @field_validator("archs")
    @classmethod
    def _archs(cls, v: str | list[str]) -> str | list[str]:
        if isinstance(v, list):
            known = list(knowledge().cuda.min_cuda_for_compute_capability)
            if not v or len(v) > len(known):
                raise ValueError('allowed: "auto" or a non-empty list of compute capabilities')
            for cc in v:
                if compute_capability_of(cc) not in known or cc.count(".") != 1:
                    raise ValueError(
                        f"{cc!r} is not a compute capability; allowed: {known}, or one of them "
                        f'ending in {" or ".join(ARCH_SUFFIXES)} ("9.0a")'
                    )
        return v


class BuildAnswers(_Section):
    max_jobs: Literal["auto"] | int = Field(
        "auto", description="auto = live memory governor; or an integer ceiling"
    )
    memory_reserve: str = Field(
        "10%", description='RAM never given to compile jobs: "10%" or "8GiB"'
    )
    memory_limit: str = Field(
        "auto", description='most RAM a build may use: "auto" = all but the reserve; or "32GiB"'
    )
    wheelhouse: str = Field(
        "",
        description="a directory shared by a fleet: built wheels are published there and "
        "installed from there instead of building again (empty = none)",
    )
    for_other_machines: bool = Field(
        False,
        description="the builds are meant for other machines too: extensions' archs may name "
        "compute capabilities no GPU here has (false: each build must run on every GPU here)",
    )

    @field_validator("max_jobs", mode="before")
    @classmethod
    def _max_jobs(cls, v: object) -> object:
        if v == "auto" or (type(v) is int and 1 <= v <= 1024):
            return v
        raise ValueError('allowed: "auto" or a whole number of jobs from 1 to 1024')

    @field_validator("memory_reserve")
    @classmethod
    def _reserve(cls, v: str) -> str:
        m = _MEMORY.fullmatch(v.strip())
        if not m or (m.group(1) is not None and not 0 <= float(m.group(1)) < 100):
            raise ValueError(
                'allowed: a percentage below 100 such as "10%", or a size such as "8GiB" '
                "(up to 7 digits, GiB or MiB)"
            )
        return v

    @field_validator("memory_limit")
    @classmethod
    def _limit(cls, v: str) -> str:
        m = _MEMORY.fullmatch(v.strip())
        if v != "auto" and (not m or m.group(1) is not None or float(m.group(2)) == 0):
            raise ValueError('allowed: "auto" or a size above 0 such as "32GiB" (GiB or MiB)')
        return v

    @field_validator("wheelhouse")
    @classmethod
    def _wheelhouse(cls, v: str) -> str:
        if v:
            try:
                return _absolute_directory(v, "a wheelhouse")
            except ValueError as exc:
                raise ValueError(f'allowed: "" (none) or an absolute directory; {exc}') from None
        return v

    def limit_bytes(self) -> int | None:
        """The explicit memory limit in bytes, or None for "auto"."""
        if self.memory_limit == "auto":
            return None
        m = _MEMORY.fullmatch(self.memory_limit.strip())
        assert m
        return int(float(m.group(2)) * (GiB if m.group(3) == "GiB" else MiB))

    def reserve_bytes(self, total_bytes: int) -> int:
        m = _MEMORY.fullmatch(self.memory_reserve.strip())
        assert m
        if m.group(1) is not None:
            return int(total_bytes * float(m.group(1)) / 100)
        unit = GiB if m.group(3) == "GiB" else MiB
        return int(float(m.group(2)) * unit)


class RebootAnswers(_Section):
    policy: Literal["ask", "auto", "never"] = "ask"


class Answers(_Section):
    version: Literal[1] = 1
    driver: DriverAnswers = Field(default_factory=DriverAnswers)
    toolkit: ToolkitAnswers = Field(default_factory=ToolkitAnswers)
    venv: VenvAnswers = Field(default_factory=VenvAnswers)
    torch: TorchAnswers = Field(default_factory=TorchAnswers)
    extensions: list[ExtensionAnswers] = Field(default_factory=list)
    build: BuildAnswers = Field(default_factory=BuildAnswers)
    reboot: RebootAnswers = Field(default_factory=RebootAnswers)

    @field_validator("version", mode="before")
    @classmethod
    def _format_version(cls, v: object) -> object:
        if type(v) is not int or v != 1:  # `true` equals 1 to Python
            raise ValueError("allowed: 1 (this answers format)")
        return v

    @field_validator("extensions")
    @classmethod
    def _unique_extensions(cls, v: list[ExtensionAnswers]) -> list[ExtensionAnswers]:
        if len(v) > 32:
            raise ValueError("allowed: at most 32 extensions")
        names = [e.name for e in v]
        for n in names:
            if names.count(n) > 1:
                raise ValueError(f"{n!r} is listed twice; allowed: each extension once")
        return v

    def to_toml(self) -> str:
        """The answers as a file `apply --answers` takes back unchanged."""
        data = self.model_dump(mode="json")
        lines = [f"version = {data.pop('version')}"]
        extensions = data.pop("extensions")
        for section, values in data.items():
            lines += ["", f"[{section}]"] + [f"{k} = {_toml_value(v)}" for k, v in values.items()]
        for ext in extensions:
            lines += ["", "[[extensions]]"] + [f"{k} = {_toml_value(v)}" for k, v in ext.items()]
        return "\n".join(lines) + "\n"


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


@input_kind("answers")
def answers_from_toml(text: str, origin: str) -> Answers:
    """Answers from TOML text; any problem is an InputError naming the key (or the line)."""
    return validate_strict(Answers, parse_toml(text, origin), origin)


@input_kind("answers")
def read_answers(path: Path) -> str:
    """The text of an answers file (bounded, regular, UTF-8: steps.core.inputfiles)."""
    return read_input(path, "answers file")


def load_answers(path: Path | None) -> Answers:
    """The answers in `path`, or every default when no file is given."""
    if path is None:
        return Answers()
    return answers_from_toml(read_answers(path), str(path))
