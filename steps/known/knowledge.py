"""Facts from the outside world, loaded from `assets/*.toml`.

The tables (driver minimums, compute capabilities, torch builds, package names,
extension recipes) are data with their sources beside them; this module only
gives them types. Nothing here decides anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from functools import cache

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from steps.core.assetdir import ASSETS_DIR
from steps.core.errors import input_kind
from steps.core.machineroot import forget_on_new_root, machine_root
from steps.core.settings import settings
from steps.core.sizes import MiB
from steps.known.recipes import ExtensionRecipe, read_recipe_dir, read_recipe_file
from steps.known.tables import (
    CudaTable,
    DaemonsTable,
    DriverTable,
    FabricTable,
    GpusTable,
    NvidiaRepoTable,
    PythonsTable,
    TorchTable,
    load_table,
)

__all__ = ["ExtensionRecipe", "Knowledge", "knowledge"]


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
    split_compile_min: str  # the first nvcc whose --split-compile mlsetup's nvcc passes on

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
        return bool(driver_cuda_max and Version(driver_cuda_max) >= Version(cuda))


@dataclass(frozen=True)
class GpuModel:
    name: str
    compute_capability: str


@dataclass(frozen=True)
class DriverKnowledge:
    open_modules_min_compute_capability: str
    open_modules_required_from_compute_capability: str
    open_modules_required_devices: tuple[str, ...]  # PCI ids: Grace Hopper
    last_branch_before_turing: int
    open_modules_only_from_branch: int  # from this branch NVIDIA ships no proprietary modules
    recommended_branch: int
    branch_end_of_life: dict[str, str]  # "535" -> "2026-06"
    mok_key_path: dict[str, str]  # os id -> DKMS's signing certificate

    def ended(self, branch: int, today: date) -> str | None:
        """The month `branch` reached its end of life ("2026-06"), None while it is supported
        (or NVIDIA lists no end for it)."""
        end = self.branch_end_of_life.get(str(branch))
        return end if end is not None and today.strftime("%Y-%m") > end else None

    def mok_key_for(self, os_id: str | None) -> str:
        return self.mok_key_path.get(os_id or "", self.mok_key_path["ubuntu"])

    def requires_open_modules(self, compute_capability: str | None, pci_id: str | None) -> bool:
        return (pci_id or "").lower() in self.open_modules_required_devices or bool(
            compute_capability
            and Version(compute_capability)
            >= Version(self.open_modules_required_from_compute_capability)
        )

    def last_branch_for(self, compute_capability: str | None) -> int | None:
        """The newest driver branch that supports this GPU (None: no limit known)."""
        if compute_capability and Version(compute_capability) < Version(
            self.open_modules_min_compute_capability
        ):
            return self.last_branch_before_turing
        return None


@dataclass(frozen=True)
class WslRepository:
    """NVIDIA's repository for WSL 2 (toolkits, never a driver): its directory, the distros
    (os-release ID) and machines (uname -m) it serves."""

    repo: str
    distros: tuple[str, ...]
    arch: tuple[str, ...]


@dataclass(frozen=True)
class NvidiaRepo:
    base_url: str
    keyring_package: str
    toolkit_package: str
    toolkit_path: str
    repo: dict[str, str]
    arch: dict[str, str]
    repo_arches: dict[str, list[str]]  # repositories published for only some architectures
    wsl: WslRepository
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
        if repo is None or arch is None or arch not in self.repo_arches.get(repo, [arch]):
            return None
        return self.base_url.format(repo=repo, arch=arch)

    def wsl_url_for(self, os_id: str | None, machine: str | None) -> str | None:
        """NVIDIA's repository inside WSL 2 (no driver in it); None where it has none."""
        if os_id not in self.wsl.distros or machine not in self.wsl.arch:
            return None
        return self.base_url.format(repo=self.wsl.repo, arch=self.arch[machine])

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

    aarch64_min_compute_capability: str | None = None

    def runs_on(self, compute_capability: str, machine: str | None = None) -> bool:
        """Whether this build has kernels for the GPU; aarch64 wheels cover fewer GPUs."""
        if self.min_compute_capability is None or self.max_compute_capability is None:
            return True
        floor = self.min_compute_capability
        if machine == "aarch64" and self.aarch64_min_compute_capability:
            floor = max(floor, self.aarch64_min_compute_capability, key=Version)
        cc = Version(compute_capability)
        return Version(floor) <= cc <= Version(self.max_compute_capability)


@dataclass(frozen=True)
class TorchRelease:
    series: str  # "2.11"
    builds: tuple[str, ...]  # CUDA builds on download.pytorch.org
    pythons: tuple[str, ...]  # CPython versions with Linux wheels on PyPI, "3.12"
    pypi_cuda: str  # the CUDA of PyPI's own Linux wheel (no index URL): "13.0"
    requires_python: str  # the wheels' Requires-Python, ">=3.10"
    cxx_standard: int = 17  # what its ATen.h requires (steps/decide/cxxstd.py): 20 from 2.14

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
class Knowledge:
    cuda: CudaKnowledge
    gpus: dict[str, GpuModel]
    driver: DriverKnowledge
    repo: NvidiaRepo
    torch: TorchKnowledge
    extensions: dict[str, ExtensionRecipe]
    pythons: tuple[str, ...]  # CPython versions, the most widely covered by wheels first
    fabric: FabricTable  # NVSwitch boards: Fabric Manager, NVLSM, IMEX (assets/fabric.toml)
    daemons: DaemonsTable  # the GPU daemons: packages, units, executables (assets/daemons.toml)


EXTRA_RECIPES_DIR = "/etc/mlsetup/extensions.d"


@input_kind("recipes")
def _recipes() -> dict[str, ExtensionRecipe]:
    """assets/extensions.toml, then the operator's own recipes (one TOML file each, same form;
    a later file's recipe replaces an earlier one of the same name)."""
    recipes = read_recipe_file(ASSETS_DIR / "extensions.toml")
    explicit = settings().extensions_dir  # MLSETUP_EXTENSIONS_DIR, validated there
    directory = explicit or machine_root() / EXTRA_RECIPES_DIR.lstrip("/")
    recipes.update(read_recipe_dir(directory, explicit=explicit is not None))
    return recipes


@cache
def knowledge() -> Knowledge:
    """All of assets/, typed and validated (steps.known.tables). Loaded once per process (and
    again under a new --root: steps.core.machineroot)."""
    cuda = load_table("cuda.toml", CudaTable)
    torch = load_table("torch.toml", TorchTable)
    driver = load_table("driver.toml", DriverTable)
    repo = load_table("nvidia_repo.toml", NvidiaRepoTable)
    return Knowledge(
        cuda=CudaKnowledge(
            releases=tuple(CudaRelease(**r.model_dump()) for r in cuda.release),
            major_min_driver=cuda.major_min_driver,
            min_cuda_for_compute_capability=cuda.min_cuda_for_compute_capability,
            install_bytes=cuda.install_mib * MiB,
            split_compile_min=cuda.split_compile_min,
        ),
        gpus={k: GpuModel(*v) for k, v in load_table("gpus.toml", GpusTable).device.items()},
        driver=DriverKnowledge(
            **{
                **driver.model_dump(),
                "open_modules_required_devices": tuple(driver.open_modules_required_devices),
            }
        ),
        repo=NvidiaRepo(
            **{
                **repo.model_dump(),
                "wsl": WslRepository(repo.wsl.repo, tuple(repo.wsl.distros), tuple(repo.wsl.arch)),
                "driver_package": repo.driver_package.model_dump(),
            }
        ),
        torch=TorchKnowledge(
            index_url=torch.index_url,
            cuda_venv_bytes=torch.cuda_venv_mib * MiB,
            releases=tuple(
                TorchRelease(
                    series=r.series,
                    builds=tuple(r.builds),
                    pythons=tuple(r.pythons),
                    pypi_cuda=r.pypi_cuda,
                    requires_python=r.requires_python,
                    cxx_standard=r.cxx_standard,
                )
                for r in torch.release
            ),
            builds={
                name: TorchBuild(
                    name=name,
                    aarch64_min_compute_capability=torch.aarch64_min_compute_capability,
                    **b.model_dump(),
                )
                for name, b in torch.build.items()
            },
        ),
        extensions=_recipes(),
        pythons=tuple(p.version for p in load_table("pythons.toml", PythonsTable).python),
        fabric=load_table("fabric.toml", FabricTable),
        daemons=load_table("daemons.toml", DaemonsTable),
    )


forget_on_new_root(knowledge.cache_clear)  # the operator's recipes are read under the root
