"""Facts: what the probe found on a machine (`mlsetup.facts/1`).

`None` means the probe could not tell. The keys of the first release are always present; a key
added since is optional (absent in a file recorded before it, read as `None`: unknown), so every
recorded machine still loads. Facts are read from a live machine by `steps.probing.probe` or loaded
from a recorded JSON file, so a plan can be made for a machine that is not this one. The schema
stays mlsetup.facts/1 as keys are added; none is removed or given another meaning.
"""

from __future__ import annotations

import json
import posixpath
import re
from pathlib import Path
from typing import Annotated, Final, Literal

from packaging.version import Version
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
)

from steps.core.errors import InputError, input_kind, show_value, validate_strict
from steps.core.inputfiles import parse_json, read_input
from steps.known.tables import DaemonName

FACTS_SCHEMA: Final = "mlsetup.facts/1"
SecureBoot = Literal["enabled", "disabled", "unknown"]
KernelModules = Literal["open", "proprietary"]  # the NVIDIA kernel modules


# A recorded facts file is input like an answers file: every value that can become a path, an
# argv element or a number the planner computes with is bounded here. The probe builds the
# same models, so the bounds are ones every real machine meets. Patterns use [0-9], never \d.
_PRINTABLE = r"^[^\x00-\x1f\x7f]*$"
Text = Annotated[str, StringConstraints(max_length=256, pattern=_PRINTABLE)]
Bytes = Annotated[int, Field(ge=0, le=2**60)]  # an exabyte: more than any machine has
MajorMinor = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,3}\.[0-9]{1,3}$")]
# os-release ID / VERSION_ID / VERSION_CODENAME characters (os-release(5))
OsToken = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._~-]{1,64}$")]
# `uname -r`: Debian package-name characters, as linux-headers-RELEASE must be
KernelRelease = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+~-]{0,127}$")]
PciBusId = Annotated[
    str, StringConstraints(pattern=r"^[0-9A-Fa-f]{1,8}(:[0-9A-Fa-f]{1,8}){1,2}\.[0-7]$")
]
AccountName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}\$?$")]


def _absolute_path(v: str) -> str:
    if (
        len(v) > 4096
        or not v.startswith("/")
        or re.search(r"[\x00-\x1f\x7f]", v)
        or posixpath.normpath(v) != v
    ):
        raise ValueError("allowed: a normalized absolute path (no . or .. or //)")
    return v


AbsolutePath = Annotated[str, AfterValidator(_absolute_path)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OsInfo(_Strict):
    id: OsToken | None
    version_id: OsToken | None
    codename: OsToken | None
    arch: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_]{1,32}$")] | None
    pretty: Text | None


class KernelInfo(_Strict):
    release: KernelRelease | None
    headers_installed: bool | None


class CpuInfo(_Strict):
    logical: int | None = Field(ge=1, le=65536)


class MemoryInfo(_Strict):
    total_bytes: Bytes | None
    available_bytes: Bytes | None
    swap_total_bytes: Bytes | None


class Gpu(_Strict):
    index: int = Field(ge=0, le=1023)
    name: Text | None
    pci_device_id: str | None = Field(pattern=r"^0x[0-9a-f]{4}$")
    pci_bus_id: PciBusId | None
    compute_capability: MajorMinor | None
    memory_bytes: Bytes | None
    source: Literal["nvml", "pci"]


class DriverInfo(_Strict):
    version: str = Field(pattern=r"^[0-9]{1,4}\.[0-9]{1,4}(\.[0-9]{1,4})?$")
    cuda_max: MajorMinor | None
    modules: KernelModules | None
    loaded: bool

    @property
    def branch(self) -> int:
        return int(self.version.split(".")[0])


class Toolkit(_Strict):
    version: MajorMinor
    path: AbsolutePath


class PythonInfo(_Strict):
    version: str = Field(pattern=r"^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,4}$")
    path: AbsolutePath


class UserInfo(_Strict):
    name: AccountName
    home: AbsolutePath
    uid: int = Field(ge=0, le=2**32 - 2)


# -- where the machine runs: the environment, and whether the driver is someone else's --------

# Containers and WSL share a kernel they do not own: its NVIDIA driver is the host's.
DRIVER_IS_HOSTS = ("container", "wsl")


class Environment(_Strict):
    """Where this system runs (systemd-detect-virt's classes): on the hardware, in a virtual
    machine, in a container (Docker, Podman, LXC, nspawn) or in WSL (Windows' kernel side)."""

    kind: Literal["bare-metal", "vm", "container", "wsl"]
    # systemd-detect-virt's identifier (docker, podman, lxc, systemd-nspawn, wsl, kvm, ...);
    # None when the files it reads said only the kind
    name: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$")] | None = None


L4tRelease = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,3}(\.[0-9]{1,3}){1,2}$")]


# -- the NVSwitch fabric: the switches, and the GPU daemons ---------------------------------


class NvSwitch(_Strict):
    """An NVSwitch: an NVIDIA PCI function of class 0x0680 (assets/fabric.toml)."""

    pci_bus_id: PciBusId
    pci_device_id: str | None = Field(pattern=r"^0x[0-9a-f]{4}$")


class Daemon(_Strict):
    """A GPU system daemon's package and process."""

    installed: bool  # its package (dpkg: install ok installed)
    # the package's version, less epoch and Debian revision ("580.95.05" of "580.95.05-1")
    version: str | None = Field(pattern=r"^[0-9]{1,4}\.[0-9]{1,4}(\.[0-9]{1,4})?$")
    active: bool | None  # its daemon runs; None: the process table could not be read


class Facts(_Strict):
    schema_: Literal["mlsetup.facts/1"] = Field(alias="schema", default=FACTS_SCHEMA)
    os: OsInfo
    kernel: KernelInfo
    secure_boot: SecureBoot
    cpu: CpuInfo
    memory: MemoryInfo
    disk_free_bytes: Annotated[dict[AbsolutePath, Bytes | None], Field(max_length=16)]
    gpus: Annotated[list[Gpu], Field(max_length=256)]
    driver: DriverInfo | None
    nouveau_loaded: bool | None
    toolkits: Annotated[list[Toolkit], Field(max_length=64)]
    pythons: Annotated[list[PythonInfo], Field(max_length=64)]
    user: UserInfo | None
    boot_id: Annotated[str, StringConstraints(pattern=r"^[0-9A-Za-z-]{1,64}$")] | None
    # Added after the first release: optional, None (or absent) = unknown (docs/formats.md)
    environment: Environment | None = None
    # an NVIDIA Tegra system on a chip (Jetson): the board's BSP (L4T) brings the driver and CUDA
    tegra: bool | None = None
    # its L4T release from /etc/nv_tegra_release, e.g. 36.4.3; None: no Tegra, or not said
    l4t_release: L4tRelease | None = None
    nvswitches: Annotated[list[NvSwitch], Field(max_length=64)] | None = None
    # keyed by assets/daemons.toml's names; a file another mlsetup recorded may name a daemon
    # this one's table lacks: it loads, and nothing reads it
    daemons: Annotated[dict[DaemonName, Daemon], Field(max_length=64)] | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), indent=2) + "\n"

    @property
    def compute_capabilities(self) -> list[str]:
        """Distinct known compute capabilities of the GPUs present, lowest first."""
        found = {g.compute_capability for g in self.gpus if g.compute_capability}
        return sorted(found, key=Version)

    def daemon(self, name: str) -> Daemon | None:
        """What the probe saw of a daemon; None when unknown (no package database, or facts
        recorded before the daemon was in the table)."""
        return None if self.daemons is None else self.daemons.get(name)

    def toolkit(self, version: str) -> Toolkit | None:
        return next((t for t in self.toolkits if t.version == version), None)

    def driver_is_hosts(self) -> bool:
        """The NVIDIA driver belongs to the host (a container, WSL): mlsetup never installs one,
        loads a module, enables a driver service or reboots. False when unknown (an older
        recording): the plan is the server's."""
        return self.environment is not None and self.environment.kind in DRIVER_IS_HOSTS

    def environment_label(self) -> str:
        """Where the driver is the host's, for people: "WSL", "this docker container"."""
        env = self.environment
        if env is None or env.kind not in DRIVER_IS_HOSTS:
            return "this machine"
        if env.kind == "wsl":
            return "WSL"
        return f"this {env.name} container" if env.name else "this container"


@input_kind("facts")
def facts_from_json(text: str, origin: str) -> Facts:
    """Parse recorded Facts; any problem is an InputError naming the key (or the line)."""
    data = parse_json(text, origin)
    if not isinstance(data, dict):
        raise InputError(f"{origin}: expected a JSON object with schema {FACTS_SCHEMA!r}")
    if data.get("schema") != FACTS_SCHEMA:
        raise InputError(
            f"{origin}: schema = {show_value(data.get('schema'))}; allowed: {FACTS_SCHEMA!r}"
        )
    return validate_strict(Facts, data, origin)


@input_kind("facts")
def load_facts(path: Path) -> Facts:
    """A recorded machine (`mlsetup probe --json`), read bounded (steps.core.inputfiles)."""
    return facts_from_json(read_input(path, "facts file"), str(path))
