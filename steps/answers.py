"""Answers: what the operator wants (`version = 1` TOML).

The pydantic models here are the single definition of the answers file: the
wizard edits them, `apply --answers` loads them, and `mlsetup answers --schema`
prints the JSON Schema generated from them, so the paths cannot drift.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from steps.errors import InputError, describe_validation_error
from steps.knowledge import knowledge

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_CUDA_VERSION = re.compile(r"^\d+\.\d+$")
_MEMORY = re.compile(r"^(?:(\d+(?:\.\d+)?)%|(\d+(?:\.\d+)?)\s*(GiB|MiB))$")


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
        if v != "auto" and not (v.isdigit() and lowest <= int(v) <= 9999):
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
        "", description="a lock file from an earlier run (/var/lib/mlsetup/stack.lock): install "
        'exactly that stack; "" = resolve one'
    )

    @field_validator("python")
    @classmethod
    def _python(cls, v: str) -> str:
        if v != "auto" and not re.fullmatch(r"3\.\d{1,2}", v):
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
        if not (v.startswith("/") or v == "~" or v.startswith("~/")):
            raise ValueError('allowed: an absolute path or one starting with "~/"')
        return v


class TorchAnswers(_Section):
    version: str = Field("auto", description='"auto" or a PEP 440 specifier such as "==2.8.0"')
    cuda: str = Field("auto", description="auto | cpu | cu126 | cu128 | cu129 | cu130")
    packages: list[str] = Field(default_factory=list, description="more packages for the venv")
    index_url: str = Field(
        "auto",
        description="auto = https://download.pytorch.org/whl/{build}; or a mirror (URL or local "
        'directory) where "{build}" becomes cu128, cpu, ...',
    )

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        if v != "auto":
            try:
                SpecifierSet(v)
            except InvalidSpecifier:
                raise ValueError(
                    'allowed: "auto" or a PEP 440 specifier such as "==2.8.0"'
                ) from None
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


class ExtensionAnswers(_Section):
    name: str = Field(description="a recipe in assets/extensions.toml, e.g. flash-attn")
    version: str = Field(description="the release to install, e.g. 2.8.3")
    archs: Literal["auto"] | list[str] = Field(
        "auto", description='"auto" = the GPUs present; or compute capabilities such as ["9.0"]'
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
        if v not in known:
            raise ValueError(f"allowed: {', '.join(known)}")
        return v

    @field_validator("archs")
    @classmethod
    def _archs(cls, v: str | list[str]) -> str | list[str]:
        if isinstance(v, list):
            known = list(knowledge().cuda.min_cuda_for_compute_capability)
            if not v:
                raise ValueError('allowed: "auto" or a non-empty list of compute capabilities')
            for cc in v:
                if cc not in known:
                    raise ValueError(f"{cc!r} is not a compute capability; allowed: {known}")
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

    @field_validator("max_jobs", mode="before")
    @classmethod
    def _max_jobs(cls, v: object) -> object:
        if v == "auto" or (type(v) is int and 1 <= v <= 1024):
            return v
        raise ValueError('allowed: "auto" or a whole number of jobs from 1 to 1024')

    @field_validator("memory_reserve")
    @classmethod
    def _reserve(cls, v: str) -> str:
        m = _MEMORY.match(v.strip())
        if not m or (m.group(1) is not None and not 0 <= float(m.group(1)) < 100):
            raise ValueError(
                'allowed: a percentage below 100 such as "10%", or a size such as "8GiB"'
            )
        return v

    @field_validator("memory_limit")
    @classmethod
    def _limit(cls, v: str) -> str:
        m = _MEMORY.match(v.strip())
        if v != "auto" and (not m or m.group(1) is not None):
            raise ValueError('allowed: "auto" or a size such as "32GiB"')
        return v

    @field_validator("wheelhouse")
    @classmethod
    def _wheelhouse(cls, v: str) -> str:
        if v and not v.startswith("/"):
            raise ValueError('allowed: "" (none) or an absolute directory path')
        return v

    def limit_bytes(self) -> int | None:
        """The explicit memory limit in bytes, or None for "auto"."""
        if self.memory_limit == "auto":
            return None
        m = _MEMORY.match(self.memory_limit.strip())
        assert m
        return int(float(m.group(2)) * (2**30 if m.group(3) == "GiB" else 2**20))

    def reserve_bytes(self, total_bytes: int) -> int:
        m = _MEMORY.match(self.memory_reserve.strip())
        assert m
        if m.group(1) is not None:
            return int(total_bytes * float(m.group(1)) / 100)
        unit = 2**30 if m.group(3) == "GiB" else 2**20
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

    @field_validator("extensions")
    @classmethod
    def _unique_extensions(cls, v: list[ExtensionAnswers]) -> list[ExtensionAnswers]:
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


def answers_from_toml(text: str, origin: str) -> Answers:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{origin}: not valid TOML: {exc}") from exc
    try:
        return Answers.model_validate(data)
    except ValidationError as exc:
        raise InputError(describe_validation_error(origin, exc)) from exc


def load_answers(path: Path | None) -> Answers:
    """The answers in `path`, or every default when no file is given."""
    if path is None:
        return Answers()
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"{path}: cannot read answers file: {exc.strerror}") from exc
    return answers_from_toml(text, str(path))
