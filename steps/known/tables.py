"""The shape of each table in assets/: a strict model per file, checked when it is loaded.

The tables are mlsetup's own data, but a person edits them every month (a new torch series, a
new GPU, a new failure signature), so a typo or a wrong type is refused at load with the file
and the key (an InputError, exit 2, nothing runs) rather than surfacing later as a KeyError in
the middle of a plan. The extension recipes have their own, stricter models in steps.known.recipes
(an operator's recipe directory is input from outside); these cover the rest.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Annotated, TypeVar

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from steps.core import tomlcompat as tomllib
from steps.core.errors import InputError, describe_validation_error

Version2 = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,2}\.[0-9]{1,2}$")]  # "12.8"
# "580.65.06", or a branch alone ("615") where NVIDIA gives no minor
DriverVersion = Annotated[str, StringConstraints(pattern=r"^[0-9]{3}(\.[0-9]{1,3}){0,2}$")]
CudaMajor = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,2}$")]
ComputeCapability = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,2}\.[0-9]$")]
PciId = Annotated[str, StringConstraints(pattern=r"^0x[0-9a-f]{4}$")]
Branch = Annotated[int, Strict(), Field(ge=300, le=9999)]
Mib = Annotated[int, Strict(), Field(gt=0)]
Text = Annotated[str, StringConstraints(min_length=1)]
SignatureId = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]{0,63}$")]


def pep440_specifier(value: str) -> str:
    """`value` if it is a PEP 440 version specifier (what a field validator returns)."""
    try:
        SpecifierSet(value)
    except InvalidSpecifier:
        raise ValueError('allowed: a PEP 440 specifier such as ">=3.10" or "<13"') from None
    return value


class Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CudaReleaseRow(Table):
    version: Version2
    min_driver: DriverVersion
    min_compute_capability: ComputeCapability


class CudaTable(Table):
    install_mib: Mib
    split_compile_min: Version2
    major_min_driver: dict[CudaMajor, DriverVersion]
    min_cuda_for_compute_capability: dict[ComputeCapability, Version2]
    release: list[CudaReleaseRow] = Field(min_length=1)


class GpusTable(Table):
    # PCI device id -> [marketing name, compute capability]
    device: dict[PciId, tuple[Text, ComputeCapability]] = Field(min_length=1)


class DriverTable(Table):
    open_modules_min_compute_capability: ComputeCapability
    open_modules_required_from_compute_capability: ComputeCapability
    open_modules_required_devices: list[PciId]
    last_branch_before_turing: Branch
    open_modules_only_from_branch: Branch
    recommended_branch: Branch
    # branch -> the year and month NVIDIA ends its support
    branch_end_of_life: dict[
        Annotated[str, StringConstraints(pattern=r"^[0-9]{3,4}$")],
        Annotated[str, StringConstraints(pattern=r"^20[0-9]{2}-(0[1-9]|1[0-2])$")],
    ]
    mok_key_path: dict[str, Annotated[str, StringConstraints(pattern=r"^/")]]

    @field_validator("mok_key_path")
    @classmethod
    def _ubuntu(cls, v: dict[str, str]) -> dict[str, str]:
        if "ubuntu" not in v:  # the fallback for every other distribution (mok_key_for)
            raise ValueError('allowed: a table with at least an "ubuntu" key')
        return v


class DriverPackages(Table):
    min_branch: Branch
    pin: Annotated[str, StringConstraints(pattern=r"\{branch\}")]
    open: Text
    proprietary: Text


class WslRepo(Table):
    """NVIDIA's repository for WSL 2: its directory, and the distros and machines it serves."""

    repo: Text
    distros: list[Text] = Field(min_length=1)
    arch: list[Text] = Field(min_length=1)


class NvidiaRepoTable(Table):
    base_url: Annotated[str, StringConstraints(pattern=r"^https://.*\{repo\}.*\{arch\}")]
    keyring_package: Annotated[str, StringConstraints(pattern=r"\.deb$")]
    toolkit_package: Annotated[str, StringConstraints(pattern=r"\{major\}.*\{minor\}")]
    toolkit_path: Annotated[str, StringConstraints(pattern=r"^/.*\{version\}")]
    repo: dict[str, Text]
    arch: dict[str, Text]
    repo_arches: dict[str, list[Text]] = Field(default_factory=dict)
    wsl: WslRepo
    driver_package: DriverPackages


class FabricTable(Table):
    """assets/fabric.toml: the boards that need Fabric Manager, NVLSM or IMEX (the daemons
    themselves are DaemonsTable's). Served as it is (knowledge().fabric)."""

    nvswitch_class: PciId
    nvswitch_board_devices: list[PciId] = Field(min_length=1)
    nvswitch_board_gpus: Annotated[int, Strict(), Field(ge=2)]
    nvlsm_devices: list[PciId]
    nvlsm_modules: list[Annotated[str, StringConstraints(pattern=r"^[a-z0-9_]{1,64}$")]]
    nvl_tray_devices: list[PciId]


# A Debian package's name (Debian Policy 5.6.7): a daemon's key in Facts is its own package's
# name or one like it, so a facts file may name a daemon this table does not (yet) have
PackageName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9+.-]{1,63}$")]
DaemonName = PackageName
UnitName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9:_.@-]{0,63}$")]


class DaemonRow(Table):
    """One GPU daemon: its package, whether that is the driver's own version, its unit, how it
    shows in /proc, its name for people, and where these facts come from."""

    package: PackageName
    driver_versioned: StrictBool
    unit: UnitName | None = None
    executable: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._+-]{1,64}$")]
    label: Text
    source: Text


class DaemonsTable(Table):
    """assets/daemons.toml: the GPU daemons the probe looks for and the fabric step installs,
    one row each. Served as it is (knowledge().daemons)."""

    unsuffixed_from_branch: Branch
    daemon: dict[DaemonName, DaemonRow] = Field(min_length=1)

    def package(self, name: str, branch: int) -> str:
        """`name`'s package as driver branch `branch` names it (nvidia-fabricmanager-570)."""
        row = self.daemon[name]
        if not row.driver_versioned or branch >= self.unsuffixed_from_branch:
            return row.package
        return f"{row.package}-{branch}"


class TorchReleaseRow(Table):
    series: Version2
    builds: list[Annotated[str, StringConstraints(pattern=r"^cu[0-9]{3}$")]] = Field(min_length=1)
    pythons: list[Version2] = Field(min_length=1)
    requires_python: Text
    pypi_cuda: Version2
    cxx_standard: Annotated[int, Field(ge=11, le=29, strict=True)]

    @field_validator("requires_python")
    @classmethod
    def _specifier(cls, v: str) -> str:
        return pep440_specifier(v)


class TorchBuildRow(Table):
    cuda: Version2
    min_compute_capability: ComputeCapability
    max_compute_capability: ComputeCapability


class TorchTable(Table):
    index_url: Annotated[str, StringConstraints(pattern=r"^https://.*\{build\}")]
    cuda_venv_mib: Mib
    aarch64_min_compute_capability: ComputeCapability
    release: list[TorchReleaseRow] = Field(min_length=1)
    build: dict[Annotated[str, StringConstraints(pattern=r"^cu[0-9]{3}$")], TorchBuildRow]

    @model_validator(mode="after")
    def _builds_known(self) -> TorchTable:
        for i, release in enumerate(self.release):
            for build in release.builds:
                if build not in self.build:
                    raise ValueError(
                        f"release[{i}].builds: {build!r} has no [build.{build}] table "
                        f"(allowed: {', '.join(self.build)})"
                    )
        return self


class PythonRow(Table):
    version: Version2
    projects: Annotated[int, Strict(), Field(ge=0)]


class PythonsTable(Table):
    python: list[PythonRow] = Field(min_length=1)


# What steps.apply.diagnose names itself: a killed compile's exit status, mlsetup's own full disk
NAMED_SIGNATURES = ("out-of-memory", "no-space")
# what steps.apply.diagnose.fill puts in a signature's text
FILLED = ("log", "answers", "apply_answers", "resume")


class SignatureRow(Table):
    """One failure signature: its regular expression(s), what it means, the next command, and
    the real output lines it was written from (tests/test_diagnose.py matches each)."""

    id: SignatureId
    pattern: Text | list[Text] = Field(min_length=1)
    why: Text
    next: Text
    examples: list[Text] = Field(
        min_length=1, description="lines the real tool prints, each with its source beside it"
    )

    @field_validator("pattern")
    @classmethod
    def _regular_expressions(cls, v: str | list[str]) -> str | list[str]:
        for form in [v] if isinstance(v, str) else v:
            try:
                re.compile(form)
            except re.error as exc:
                raise ValueError(f"allowed: a Python regular expression ({exc})") from None
        return v

    @field_validator("why", "next")
    @classmethod
    def _placeholders(cls, text: str, info: ValidationInfo) -> str:
        pattern = info.data.get("pattern")  # absent: it was refused itself
        forms = [pattern] if isinstance(pattern, str) else pattern or []
        groups = min((re.compile(form).groups for form in forms), default=0)
        for name in re.findall(r"\{([^{}]*)\}", text):
            if name not in FILLED and not (name.isdigit() and 1 <= int(name) <= groups):
                raise ValueError(
                    f"{{{name}}} is filled by nothing (allowed: "
                    f"{', '.join('{' + f + '}' for f in FILLED)}"
                    + (f", or {{1}}..{{{groups}}}, the pattern's groups)" if groups else ")")
                )
        return text

    @property
    def patterns(self) -> list[str]:
        return [self.pattern] if isinstance(self.pattern, str) else self.pattern


class DiagnosesTable(Table):
    signature: list[SignatureRow] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_ids(self) -> DiagnosesTable:
        seen: set[str] = set()
        for i, row in enumerate(self.signature):
            if row.id in seen:
                raise ValueError(f"signature[{i}].id: {row.id!r} is used twice (allowed: unique)")
            seen.add(row.id)
        if missing := [i for i in NAMED_SIGNATURES if i not in seen]:
            raise ValueError(f"no signature {', '.join(missing)} (steps/apply/diagnose.py uses it)")
        return self


T = TypeVar("T", bound=Table)


def load_table(name: str, model: type[T]) -> T:
    """assets/NAME parsed into `model`; a problem is an InputError naming the file and the key."""
    origin = f"assets/{name}"
    with resources.files("assets").joinpath(name).open("rb") as f:
        try:
            data = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"{origin}: not valid TOML: {exc}") from None
    return parse_table(data, model, origin)


def parse_table(data: dict, model: type[T], origin: str) -> T:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InputError(describe_validation_error(origin, exc)) from None
