"""Facts: what the probe found on a machine (`mlsetup.facts/1`).

Every key is always present; `None` means the probe could not tell. Facts are
read from a live machine by `steps.probe` or loaded from a recorded JSON file,
so a plan can be made for a machine that is not this one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from packaging.version import Version
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from steps.errors import InputError, describe_validation_error

FACTS_SCHEMA = "mlsetup.facts/1"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OsInfo(_Strict):
    id: str | None
    version_id: str | None
    codename: str | None
    arch: str | None
    pretty: str | None


class KernelInfo(_Strict):
    release: str | None
    headers_installed: bool | None


class CpuInfo(_Strict):
    logical: int | None = Field(ge=1)


class MemoryInfo(_Strict):
    total_bytes: int | None = Field(ge=0)
    available_bytes: int | None = Field(ge=0)
    swap_total_bytes: int | None = Field(ge=0)


class Gpu(_Strict):
    index: int = Field(ge=0)
    name: str | None
    pci_device_id: str | None = Field(pattern=r"^0x[0-9a-f]{4}$")
    pci_bus_id: str | None
    compute_capability: str | None = Field(pattern=r"^\d+\.\d+$")
    memory_bytes: int | None = Field(ge=0)
    source: Literal["nvml", "pci"]


class DriverInfo(_Strict):
    version: str = Field(pattern=r"^\d+\.\d+(\.\d+)?$")
    cuda_max: str | None = Field(pattern=r"^\d+\.\d+$")
    modules: Literal["open", "proprietary"] | None
    loaded: bool

    @property
    def branch(self) -> int:
        return int(self.version.split(".")[0])


class Toolkit(_Strict):
    version: str = Field(pattern=r"^\d+\.\d+$")
    path: str


class PythonInfo(_Strict):
    version: str
    path: str


class UserInfo(_Strict):
    name: str
    home: str
    uid: int = Field(ge=0)


class Facts(_Strict):
    schema_: Literal["mlsetup.facts/1"] = Field(alias="schema", default=FACTS_SCHEMA)
    os: OsInfo
    kernel: KernelInfo
    secure_boot: Literal["enabled", "disabled", "unknown"]
    cpu: CpuInfo
    memory: MemoryInfo
    disk_free_bytes: dict[str, int | None]
    gpus: list[Gpu]
    driver: DriverInfo | None
    nouveau_loaded: bool | None
    toolkits: list[Toolkit]
    pythons: list[PythonInfo]
    user: UserInfo | None
    boot_id: str | None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), indent=2) + "\n"

    @property
    def compute_capabilities(self) -> list[str]:
        """Distinct known compute capabilities of the GPUs present, lowest first."""
        found = {g.compute_capability for g in self.gpus if g.compute_capability}
        return sorted(found, key=Version)

    def toolkit(self, version: str) -> Toolkit | None:
        return next((t for t in self.toolkits if t.version == version), None)


def facts_from_json(text: str, origin: str) -> Facts:
    """Parse recorded Facts; any problem is an InputError naming the key."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{origin}: not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}"
        ) from exc
    if not isinstance(data, dict):
        raise InputError(f"{origin}: expected a JSON object with schema {FACTS_SCHEMA!r}")
    if data.get("schema") != FACTS_SCHEMA:
        raise InputError(
            f"{origin}: key 'schema' is {data.get('schema')!r}; allowed: {FACTS_SCHEMA!r}"
        )
    try:
        return Facts.model_validate(data)
    except ValidationError as exc:
        raise InputError(describe_validation_error(origin, exc)) from exc


def load_facts(path: Path) -> Facts:
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"{path}: cannot read facts file: {exc.strerror}") from exc
    return facts_from_json(text, str(path))
