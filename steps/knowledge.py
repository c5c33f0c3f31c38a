"""Facts from the outside world, loaded from `assets/*.toml`.

The tables (driver minimums, compute capabilities, torch builds, package names,
extension recipes) are data with their sources beside them; this module only
gives them types. Nothing here decides anything.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Ubuntu 22.04's Python 3.10
    import tomli as tomllib

ASSETS_DIR = Path(__file__).resolve().parent.parent / "assets"


def load_asset(name: str) -> dict:
    with (ASSETS_DIR / name).open("rb") as f:
        return tomllib.load(f)


@dataclass(frozen=True)
class CudaRelease:
    version: str
    min_driver: str
    min_compute_capability: str


@dataclass(frozen=True)
class CudaKnowledge:
    releases: tuple[CudaRelease, ...]
    major_min_driver: dict[str, str]
    min_cuda_for_compute_capability: dict[str, str]
    install_bytes: int

    def release(self, version: str) -> CudaRelease | None:
        return next((r for r in self.releases if r.version == version), None)

    def newest_supported_by_driver(self, driver_version: str) -> str | None:
        """Highest CUDA release whose minimum driver is at or below `driver_version`."""
        ok = [r.version for r in self.releases if Version(driver_version) >= Version(r.min_driver)]
        return max(ok, key=Version) if ok else None

    def newest_supported_by_branch(self, branch: int) -> str | None:
        """Highest CUDA release that some driver of `branch` supports."""
        ok = [r.version for r in self.releases if int(r.min_driver.split(".")[0]) <= branch]
        return max(ok, key=Version) if ok else None

    def driver_runs(self, driver_version: str, driver_cuda_max: str | None, cuda: str) -> bool:
        """Whether a driver can run code built with CUDA `cuda`.

        Natively when `cuda` <= the driver's highest CUDA; otherwise through minor-version
        compatibility: a driver at or above the floor of `cuda`'s major runs every release of
        that major (without PTX JIT of newer code).
        """
        if self.driver_runs_natively(driver_cuda_max, cuda):
            return True
        major = cuda.split(".")[0]
        floor = self.major_min_driver.get(major)
        return bool(
            driver_cuda_max
            and driver_cuda_max.split(".")[0] == major
            and floor
            and Version(driver_version) >= Version(floor)
        )

    @staticmethod
    def driver_runs_natively(driver_cuda_max: str | None, cuda: str) -> bool:
        return bool(driver_cuda_max) and Version(driver_cuda_max) >= Version(cuda)

    def min_cuda_for(self, compute_capability: str) -> str | None:
        return self.min_cuda_for_compute_capability.get(compute_capability)


@dataclass(frozen=True)
class GpuModel:
    name: str
    compute_capability: str


@dataclass(frozen=True)
class DriverKnowledge:
    open_modules_min_compute_capability: str
    open_modules_required_from_compute_capability: str
    open_modules_default_from_branch: int
    recommended_branch: int
    mok_key_path: str


@dataclass(frozen=True)
class NvidiaRepo:
    base_url: str
    keyring_package: str
    toolkit_package: str
    toolkit_path: str
    repo: dict[str, str]
    arch: dict[str, str]
    driver_package: dict[str, str | int]

    def driver_packages(self, branch: int, modules: str) -> tuple[str, str]:
        """The branch's pinning package and the metapackage to install after it."""
        return (
            str(self.driver_package["pin"]).format(branch=branch),
            str(self.driver_package[modules]),
        )

    @property
    def min_driver_branch(self) -> int:
        return int(self.driver_package["min_branch"])

    def url_for(self, os_id: str | None, version_id: str | None, machine: str | None) -> str | None:
        repo = self.repo.get(f"{os_id}-{version_id}")
        arch = self.arch.get(machine or "")
        if repo is None or arch is None:
            return None
        return self.base_url.format(repo=repo, arch=arch)

    def toolkit_package_for(self, version: str) -> str:
        major, minor = version.split(".")
        return self.toolkit_package.format(major=major, minor=minor)

    def toolkit_path_for(self, version: str) -> str:
        return self.toolkit_path.format(version=version)


@dataclass(frozen=True)
class TorchBuild:
    name: str
    cuda: str | None
    min_compute_capability: str | None
    max_compute_capability: str | None

    def runs_on(self, compute_capability: str) -> bool:
        if self.min_compute_capability is None or self.max_compute_capability is None:
            return True
        cc = Version(compute_capability)
        return Version(self.min_compute_capability) <= cc <= Version(self.max_compute_capability)


@dataclass(frozen=True)
class TorchRelease:
    series: str  # "2.11"
    builds: tuple[str, ...]
    pythons: tuple[str, ...]
    pypi_cuda: str = ""  # the CUDA of PyPI's plain Linux wheel ("13.0"); "" = unknown

    @property
    def requirement(self) -> str:
        return f"torch=={self.series}.*"

    def matches(self, spec: SpecifierSet) -> bool:
        """Whether any patch release of this series can satisfy `spec`."""
        return any(f"{self.series}.{patch}" in spec for patch in range(20))


CPU_BUILD = TorchBuild("cpu", None, None, None)


@dataclass(frozen=True)
class TorchKnowledge:
    index_url: str
    cuda_venv_bytes: int
    releases: tuple[TorchRelease, ...]  # newest first
    builds: dict[str, TorchBuild]

    def index_for(self, build: str) -> str:
        return self.index_url.format(build=build)

    def build(self, name: str) -> TorchBuild:
        return CPU_BUILD if name == "cpu" else self.builds[name]

    @property
    def build_names(self) -> tuple[str, ...]:
        return ("cpu", *self.builds)


@dataclass(frozen=True)
class ExtensionRecipe:
    name: str
    package: str
    import_name: str
    arch_variable: str
    arch_map: dict[str, str]
    threads_variable: str
    threads: int
    force_build_variable: str
    peak_job_gib: float
    build_requires: tuple[str, ...]
    # CUDA majors the project publishes release wheels for (its build fetches them itself)
    prebuilt_cuda_majors: tuple[str, ...]
    # what `pip install` is given: a name and version, or a local source directory or archive
    requirement: str = "{package}=={version}"
    # Python run in the venv after install: imports the extension and makes one tiny call
    smoke_test: str = ""

    def requirement_for(self, version: str) -> str:
        return self.requirement.format(package=self.package, version=version)

    @property
    def min_compute_capability(self) -> str:
        return min(self.arch_map, key=Version)

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
        values.sort(key=lambda v: Version(v) if "." in v else int(v))
        return ";".join(values)


@dataclass(frozen=True)
class Knowledge:
    cuda: CudaKnowledge
    gpus: dict[str, GpuModel]
    driver: DriverKnowledge
    repo: NvidiaRepo
    torch: TorchKnowledge
    extensions: dict[str, ExtensionRecipe]


EXTRA_RECIPES_ENV = "MLSETUP_EXTENSIONS_DIR"
EXTRA_RECIPES_DIR = "/etc/mlsetup/extensions.d"


def _recipes() -> dict[str, ExtensionRecipe]:
    """assets/extensions.toml, then the operator's own recipes (one TOML file each, same form)."""
    tables = dict(load_asset("extensions.toml"))
    extra = Path(os.environ.get(EXTRA_RECIPES_ENV, EXTRA_RECIPES_DIR))
    for path in sorted(extra.glob("*.toml")) if extra.is_dir() else []:
        with path.open("rb") as f:
            tables.update(tomllib.load(f))
    return {
        name: ExtensionRecipe(
            name=name, **{k: tuple(v) if isinstance(v, list) else v for k, v in recipe.items()}
        )
        for name, recipe in tables.items()
    }


@cache
def knowledge() -> Knowledge:
    """All of assets/, typed. Loaded once per process."""
    cuda = load_asset("cuda.toml")
    torch = load_asset("torch.toml")
    return Knowledge(
        cuda=CudaKnowledge(
            releases=tuple(CudaRelease(**r) for r in cuda["release"]),
            major_min_driver=cuda["major_min_driver"],
            min_cuda_for_compute_capability=cuda["min_cuda_for_compute_capability"],
            install_bytes=cuda["install_mib"] * 2**20,
        ),
        gpus={k: GpuModel(*v) for k, v in load_asset("gpus.toml")["device"].items()},
        driver=DriverKnowledge(**load_asset("driver.toml")),
        repo=NvidiaRepo(**load_asset("nvidia_repo.toml")),
        torch=TorchKnowledge(
            index_url=torch["index_url"],
            cuda_venv_bytes=torch["cuda_venv_mib"] * 2**20,
            releases=tuple(
                TorchRelease(r["series"], tuple(r["builds"]), tuple(r["pythons"]),
                             r.get("pypi_cuda", ""))
                for r in torch["release"]
            ),
            builds={name: TorchBuild(name=name, **b) for name, b in torch["build"].items()},
        ),
        extensions=_recipes(),
    )
