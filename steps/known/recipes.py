"""Extension build recipes: assets/extensions.toml and the operator's own, validated once.

A recipe file comes from the package or from a directory the operator (or anyone who can write
there) controls, and its values become environment variables, argv elements and paths of root's
build actions. So every file is read with `read_bounded` (a regular file, no final symlink, 1 MiB
at most) and parsed into a strict model before anything uses it: a typo, a wrong type or a value
that could smuggle in a flag is an InputError (exit 2) that names the file and the key.

A recipe may carry `[[name.variant]]` tables: fields that hold only for some releases of the
extension (`versions`, a PEP 440 specifier) and/or some nvcc versions (`nvcc`). They are applied in
file order over the base recipe once the build's extension version and CUDA are known
(`ExtensionRecipe.for_build`); `arch_map` entries merge, every other field replaces.
"""

from __future__ import annotations

import dataclasses
import os
import re
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from steps.core import tomlcompat as tomllib
from steps.core.errors import InputError, describe_validation_error
from steps.core.inputfiles import check_toml_shape
from steps.core.safefs import (
    UnsafeFile,
    Untrusted,
    open_trusted_dir,
    open_trusted_file,
    read_bounded,
    read_fd,
)
from steps.core.sizes import MiB
from steps.known.tables import pep440_specifier

RECIPE_FILE_LIMIT = MiB
SMOKE_TEST_LIMIT = 64 * 1024

# Variables the build environment sets itself or that change what runs: a recipe may not name
# them. Its variables are given mlsetup's values (the force value, an arch list, a count), but even
# those load code or change the tools under these names (LD_AUDIT=TRUE loads ./TRUE,
# GCONV_PATH a directory of the build's, PYTHONINSPECT=TRUE holds the build at a prompt).
RESERVED_VARIABLES = frozenset(
    {
        "PATH",
        "CUDA_HOME",
        "MAX_JOBS",
        "MAKEFLAGS",
        "MFLAGS",
        "GNUMAKEFLAGS",
        "PYTORCH_NVCC",
        "CXX",
        "HOME",
        "USER",
        "LOGNAME",
        "TMPDIR",
        "BASH_ENV",
        "ENV",
        "IFS",
        "SHELL",
        "GCONV_PATH",  # glibc's iconv modules (code loaded into any process)
        "GLIBC_TUNABLES",
        "LOCPATH",
        "NLSPATH",
        "HOSTALIASES",
        "MALLOC_CHECK_",
        "NODE_OPTIONS",
        "PERL5OPT",
        "PERL5LIB",
        "RUBYOPT",
        "RUBYLIB",
    }
)
# ... and every variable of these families: the dynamic loader (LD_PRELOAD, LD_AUDIT,
# LD_LIBRARY_PATH), Python's own (PYTHONPATH, PYTHONINSPECT, PYTHONSTARTUP), the package tools'
# (uv, pip, setuptools, conda) and mlsetup's settings.
RESERVED_PREFIXES = ("LD_", "PYTHON", "UV_", "PIP_", "SETUPTOOLS_", "CONDA_", "MLSETUP_")

PackageName = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,98}[A-Za-z0-9])?$")
]
RecipeName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")]
Digits = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,3}$")]
# An arch may end in NVIDIA's suffixes: "a" (arch-specific: sm_90a's features run on 9.0 alone)
# and "f" (family-specific, CUDA 12.9 on: sm_100f runs on the 10.x family). Sources: NVIDIA, CUDA
# 12.9 features (https://docs.nvidia.com/cuda/archive/12.9.1/cuda-features-archive/index.html:
# "sm_103, sm_103f, sm_103a", "a new target architecture class: family-specific architectures");
# the NVIDIA blog "NVIDIA Blackwell and NVIDIA CUDA 12.9 Introduce Family-Specific Architecture
# Features"; torch's cpp_extension takes "9.0a" in TORCH_CUDA_ARCH_LIST (pytorch/pytorch#110587).
ARCH_SUFFIXES = ("a", "f")
# arch_map's keys: a GPU's compute capability, or one with a suffix: the value when the answers'
# extensions.archs ask for that GPU's arch- or family-specific code ("9.0a" = "9.0a")
ArchTarget = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,2}\.[0-9][af]?$")]
ArchValue = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,3}(\.[0-9])?[af]?$")]
Gib = Annotated[float, Strict(), Field(gt=0, le=1024)]  # strict: `true` is no size
Threads = Annotated[int, Field(ge=1, le=64, strict=True)]
Flag = Annotated[bool, Strict()]  # strict: "no" is no boolean
# A C++ standard as -std=c++NN names it (steps/decide/cxxstd.py)
CxxStandard = Annotated[int, Strict(), Field(ge=11, le=29)]
# What the force switch is set to: setup.py compares it as a string ("TRUE", "1")
SwitchValue = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9]{1,16}$")]
# One compile job's peak for a recipe that does not know it (no `peak_job_gib`): above the
# largest measured among the shipped recipes (flash-attn's 6.5 GiB, docs/benchmarks.md), so that
# the static MAX_JOBS and the governor's first admissions err towards fewer jobs; the governor
# replaces it with the peaks it measures (steps/building/lessons.py), kept for the next run of the
# build.
UNKNOWN_PEAK_JOB_GIB = 8.0
# A .ninja_log of one build of the extension, shipped in assets/buildtools/profiles/
PROFILES = "buildtools/profiles"


def _variable(value: str) -> str:
    reserved = value in RESERVED_VARIABLES or value.startswith(RESERVED_PREFIXES)
    if value and (not re.fullmatch(r"[A-Z_][A-Z0-9_]{0,63}", value) or reserved):
        raise ValueError(
            "allowed: an environment variable name (A-Z, 0-9, _) that the build does not set "
            f"itself and that loads no code (not {', '.join(sorted(RESERVED_VARIABLES))}, "
            f'nor one starting {", ".join(RESERVED_PREFIXES)}), or ""'
        )
    return value


def _requirement(value: str) -> str:
    """A pip requirement without a URL or option: it becomes one argv element of `uv pip`."""
    try:
        req = Requirement(value)
    except InvalidRequirement:
        raise ValueError('allowed: a requirement such as "ninja" or "packaging>=24"') from None
    if req.url or value.lstrip().startswith("-"):
        raise ValueError("allowed: a requirement from the package index (no URL, no option)")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Overridable(_Strict):
    """The fields a variant may set; the base recipe has them all."""

    arch_variable: str | None = None
    arch_map: dict[ArchTarget, ArchValue] | None = None
    threads_variable: str | None = None
    threads: Threads | None = None
    peak_job_gib: Gib | None = None
    build_requires: list[str] | None = None
    runtime_requires: list[str] | None = None
    prebuilt_cuda_majors: list[Digits] | None = None
    arch_trim: Flag | None = None
    longest_first: Flag | None = None
    object_profile: str | None = None
    cxx_standard: CxxStandard | None = None
    compile_as_cxx: CxxStandard | None = None

    @field_validator("object_profile")
    @classmethod
    def _profile(cls, v: str | None) -> str | None:
        if v and v not in shipped_profiles():
            raise ValueError(
                f"allowed: the name of a profile in assets/{PROFILES}/ "
                f'({", ".join(sorted(shipped_profiles())) or "none shipped"}), or ""'
            )
        return v

    @field_validator("arch_variable", "threads_variable")
    @classmethod
    def _variables(cls, v: str | None) -> str | None:
        return v if v is None else _variable(v)

    @field_validator("build_requires", "runtime_requires")
    @classmethod
    def _requires(cls, v: list[str] | None) -> list[str] | None:
        return v if v is None else [_requirement(r) for r in v]


class VariantModel(_Overridable):
    versions: str = Field("", description="PEP 440 specifier on the extension's version")
    nvcc: str = Field("", description="PEP 440 specifier on nvcc's CUDA version")

    @field_validator("versions", "nvcc")
    @classmethod
    def _specifiers(cls, v: str) -> str:
        return pep440_specifier(v) if v else v


class MeasuredBuildModel(_Strict):
    """One real build of the extension for one arch, which the Apply confirmation scales to the
    GPUs and cores here (more jobs than measured are not counted as faster)."""

    minutes: Annotated[float, Strict(), Field(gt=0, le=24 * 60)]
    jobs: Threads
    peak_gib: Gib
    source: Annotated[str, StringConstraints(min_length=1)]


class RecipeModel(_Overridable):
    package: PackageName
    import_name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")]
    arch_variable: str
    arch_map: dict[ArchTarget, ArchValue] = Field(min_length=1)
    threads_variable: str = Field(description='"" = the extension hard-codes its nvcc threads')
    threads: Threads
    force_build_variable: str = Field(
        description="the variable that makes setup.py compile instead of fetching a wheel"
    )
    force_build_value: SwitchValue = Field("TRUE", description="what that variable is set to")
    peak_job_gib: Gib | None = Field(
        None,
        description="one compile job's peak RAM; absent: unknown, the governor starts from "
        f"{UNKNOWN_PEAK_JOB_GIB:g} GiB and learns it from the build",
    )
    measured_build: MeasuredBuildModel | None = None
    build_requires: list[str]
    runtime_requires: list[str] = Field(
        default_factory=list, description="what the installed wheel requires, torch aside"
    )
    prebuilt_cuda_majors: list[Digits]
    arch_trim: Flag = Field(
        True, description="compile only for the GPUs present, whatever setup.py lists"
    )
    longest_first: Flag = Field(True, description="start the longest objects first")
    object_profile: str = Field("", description="a shipped .ninja_log giving object times")
    requirement: str = "{package}=={version}"
    smoke_test: Annotated[str, StringConstraints(max_length=SMOKE_TEST_LIMIT)] = ""
    checked: str = Field(
        "",
        description="the newest release whose setup.py this recipe was "
        "checked against (tools/refresh_knowledge.py reports newer ones)",
    )
    variant: list[VariantModel] = Field(default_factory=list)

    @field_validator("checked")
    @classmethod
    def _checked(cls, v: str) -> str:
        if v:
            try:
                Version(v)
            except InvalidVersion:
                raise ValueError('allowed: a release version such as "2.8.3", or ""') from None
        return v

    @field_validator("force_build_variable")
    @classmethod
    def _force(cls, v: str) -> str:
        if not v:  # the build would set env[""]: every recipe has a switch to name
            raise ValueError(
                "allowed: the environment variable that forces the build (such as "
                '"FLASH_ATTENTION_FORCE_BUILD" or "FORCE_CUDA"), not ""'
            )
        return _variable(v)

    @field_validator("requirement")
    @classmethod
    def _requirement_template(cls, v: str) -> str:
        if any(c in v for c in "\0\n\r") or v.startswith("-"):
            raise ValueError('allowed: "{package}=={version}" or an absolute path')
        if v.startswith("/"):
            if ".." in Path(v).parts:
                raise ValueError('allowed: an absolute path without ".."')
            return v
        try:
            _requirement(v.format(package="pkg", version="1.0"))
        except (KeyError, IndexError, ValueError):
            raise ValueError(
                "allowed: a requirement template using {package} and {version}, or an absolute "
                "path to a source directory or archive"
            ) from None
        return v

    @field_validator("smoke_test")
    @classmethod
    def _smoke(cls, v: str) -> str:
        if "\0" in v:
            raise ValueError("allowed: Python source without NUL bytes")
        return v


_FILE = TypeAdapter(dict[RecipeName, RecipeModel])


@dataclasses.dataclass(frozen=True)
class Variant:
    versions: str
    nvcc: str
    # ExtensionRecipe fields this variant overrides, as RecipeModel validated them (Any: a value's
    # type depends on its key, which the dataclass checks when `for_build` replaces them)
    fields: dict[str, Any]

    def applies(self, version: str, nvcc: str | None) -> bool:
        return _within(version, self.versions) and _within(nvcc, self.nvcc)


def _within(version: str | None, spec: str) -> bool:
    if not spec:
        return True
    try:
        return version is not None and Version(version) in SpecifierSet(spec, prereleases=True)
    except InvalidVersion:
        return False


@dataclasses.dataclass(frozen=True)
class MeasuredBuild:
    minutes: float  # compile to smoke test, for one arch
    jobs: int  # with at most this many jobs at once
    peak_gib: float  # RAM in use at the build's peak
    source: str


@dataclasses.dataclass(frozen=True)
class ExtensionRecipe:
    name: str
    package: str
    import_name: str
    arch_variable: str  # "" = the extension compiles a fixed list of its own
    arch_map: dict[str, str]
    threads_variable: str  # "" = it hard-codes nvcc's --threads; `threads` says how many
    threads: int
    force_build_variable: str
    # one compile job at its peak, with `threads` nvcc threads; None: nobody measured it (the
    # governor starts from UNKNOWN_PEAK_JOB_GIB and learns it from the build's own jobs)
    peak_job_gib: float | None
    build_requires: tuple[str, ...]
    # What the wheel requires at run time besides torch (its Requires-Dist): resolved into the
    # stack's lock with everything else, because the wheel itself is installed --no-deps.
    runtime_requires: tuple[str, ...]
    # CUDA majors the project publishes release wheels for (its build fetches them itself)
    prebuilt_cuda_majors: tuple[str, ...]
    # mlsetup's nvcc drops the -gencode targets of GPUs not present (steps/building/buildtools.py)
    arch_trim: bool = True
    # mlsetup's ninja orders build.ninja longest object first, from earlier builds or this
    # profile (a file name in assets/buildtools/profiles/, "" none)
    longest_first: bool = True
    object_profile: str = ""
    # what `pip install` is given: a name and version, or a local source directory or archive
    requirement: str = "{package}=={version}"
    # Python run in the venv after install: imports the extension and makes one tiny call
    smoke_test: str = ""
    checked: str = ""  # the newest release whose setup.py the recipe was checked against
    # the C++ standard its setup.py passes (-std=c++17: 17), None where not stated; torch
    # series whose headers need more are out of its reach (steps/decide/cxxstd.py)
    cxx_standard: int | None = None
    # opt-in, once a build proved the sources compile so: mlsetup's nvcc and c++ replace
    # setup.py's -std with this one (None: the build passes what setup.py says)
    compile_as_cxx: int | None = None
    force_build_value: str = "TRUE"  # flash-attn and the Mamba projects honour only "TRUE"
    measured_build: MeasuredBuild | None = None  # what the Apply confirmation's times scale
    variants: tuple[Variant, ...] = ()

    def for_build(self, version: str, nvcc: str | None) -> ExtensionRecipe:
        """The recipe as it holds for this release of the extension built with this nvcc."""
        out = dataclasses.replace(self, variants=())
        for variant in self.variants:
            if not variant.applies(version, nvcc):
                continue
            changes = dict(variant.fields)
            if "arch_map" in changes:
                changes["arch_map"] = {**out.arch_map, **changes["arch_map"]}
            out = dataclasses.replace(out, **changes)
        return out

    @property
    def job_peak_gib(self) -> float:
        """One compile job's peak as the plan and the governor's first guess count it: the
        recipe's figure, else the conservative UNKNOWN_PEAK_JOB_GIB."""
        return UNKNOWN_PEAK_JOB_GIB if self.peak_job_gib is None else self.peak_job_gib

    def requirement_for(self, version: str) -> str:
        return self.requirement.format(package=self.package, version=version)

    @property
    def min_compute_capability(self) -> str:
        return min(self.arch_map, key=arch_order)

    def unsupported(self, compute_capabilities: list[str]) -> list[str]:
        return [cc for cc in compute_capabilities if cc not in self.arch_map]

    def arch_value(self, compute_capabilities: list[str]) -> str | None:
        """The arch variable's value for these GPUs, or None if one of them is unsupported."""
        values = []
        for cc in compute_capabilities:
            value = self.arch_map.get(cc)
            if value is None:
                return None
            if value not in values:
                values.append(value)
        values.sort(key=arch_order)
        return ";".join(values)


def compute_capability_of(arch: str) -> str:
    """An arch target without its suffix: "9.0a" -> "9.0", "100f" -> "100"."""
    return arch[:-1] if arch.endswith(ARCH_SUFFIXES) else arch


def arch_number(arch: str) -> str:
    """The architecture's number as nvcc's sm_NN names it: "9.0a" and "90a" -> "90"."""
    return compute_capability_of(arch).replace(".", "")


def arch_order(arch: str) -> tuple[int, str]:
    """Sorts "8.0" < "9.0" < "9.0a" < "10.0f" and "80" < "90" < "90a" < "100" (an arch list
    in the build's variable, a recipe's lowest compute capability)."""
    number = compute_capability_of(arch)
    major, _, minor = number.partition(".")
    return (int(major) * 10 + int(minor) if minor else int(major), arch[len(number) :])


def shipped_profiles() -> set[str]:
    """The object-time profiles mlsetup ships (assets/buildtools/profiles/*.ninja_log)."""
    folder = resources.files("assets") / PROFILES
    return {p.name for p in folder.iterdir() if p.name.endswith(".ninja_log")}


def _recipe(name: str, model: RecipeModel) -> ExtensionRecipe:
    data = model.model_dump(exclude={"variant", "measured_build"})
    measured = model.measured_build
    data["measured_build"] = MeasuredBuild(**measured.model_dump()) if measured else None
    variants = tuple(
        Variant(
            v.versions,
            v.nvcc,
            _tuples(v.model_dump(exclude={"versions", "nvcc"}, exclude_none=True)),
        )
        for v in model.variant
    )
    return ExtensionRecipe(name=name, variants=variants, **_tuples(data))


def _tuples(fields: dict[str, Any]) -> dict[str, Any]:
    """A model dump as dataclass fields: lists as the tuples the frozen recipe holds."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}


def parse_recipes(data: bytes, origin: str) -> dict[str, ExtensionRecipe]:
    """The recipes in one file's bytes; any problem is an InputError naming `origin` and the key."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{origin}: not UTF-8 text (byte {exc.start})") from None
    check_toml_shape(text, origin)  # bounded before tomllib sees it (steps.core.inputfiles)
    try:
        tables = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{origin}: not valid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses once per nesting level: [[[[...
        raise InputError(f"{origin}: not a recipe file: values nested too deeply") from None
    try:
        models = _FILE.validate_python(tables)
    except ValidationError as exc:
        raise InputError(describe_validation_error(origin, exc)) from None
    return {name: _recipe(name, model) for name, model in models.items()}


def read_recipe_dir(directory: Path, explicit: bool) -> dict[str, ExtensionRecipe]:
    """The recipes of the *.toml files in an operator's recipe directory, in name order (a
    later file's recipe replaces an earlier one of the same name). Root runs what a recipe
    says (its smoke test, its build's variables), so the directory, those above it and each
    file must be root's alone (or, for mlsetup run by another account, that account's), as
    a wheelhouse must: else an InputError with the command that fixes it. A missing default
    directory has none; a directory the operator named explicitly must exist."""
    owners = {0, os.geteuid()}
    try:
        dir_fd = open_trusted_dir(directory, owners)
    except Untrusted as exc:
        raise InputError(_untrusted(directory, exc)) from None
    except FileNotFoundError:
        if explicit:
            raise InputError(f"{directory}: recipe directory does not exist") from None
        return {}
    except UnsafeFile as exc:
        raise InputError(f"{directory}: refused as a recipe directory: {exc.strerror}") from None
    except OSError as exc:
        raise InputError(f"{directory}: cannot open recipe directory: {exc.strerror}") from None
    recipes: dict[str, ExtensionRecipe] = {}
    try:
        for name in sorted(n for n in os.listdir(dir_fd) if n.endswith(".toml")):
            recipes.update(_read_trusted(directory / name, dir_fd, owners))
    finally:
        os.close(dir_fd)
    return recipes


def _read_trusted(path: Path, dir_fd: int, owners: set[int]) -> dict[str, ExtensionRecipe]:
    try:
        fd = open_trusted_file(path.name, dir_fd, owners, path)
        try:
            data = read_fd(fd, RECIPE_FILE_LIMIT, path)
        finally:
            os.close(fd)
    except Untrusted as exc:
        raise InputError(_untrusted(path, exc)) from None
    except UnsafeFile as exc:
        raise InputError(f"{path}: refused as a recipe file: {exc.strerror}") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read recipe file: {exc.strerror}") from None
    return parse_recipes(data, str(path))


def _untrusted(what: Path, exc: Untrusted) -> str:
    return (
        f"{what}: refused for recipes: {exc.filename} {exc.strerror}; root runs what a recipe "
        "says (its smoke test, its build's variables), so the recipe directory, those above "
        f"it and each file must be root's alone: {exc.fix}"
    )


def read_recipe_file(path: Path) -> dict[str, ExtensionRecipe]:
    try:
        data = read_bounded(path, RECIPE_FILE_LIMIT)
    except UnsafeFile as exc:
        raise InputError(f"{path}: refused as a recipe file: {exc.strerror}") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read recipe file: {exc.strerror}") from None
    return parse_recipes(data, str(path))
