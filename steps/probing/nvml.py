"""NVML, read through a small adapter: real pynvml, or a recorded snapshot in tests.

A snapshot is the JSON the project records on real servers
(`shared/fixtures/h200-ubuntu2404/nvml.json`): driver, cuda_driver, gpus[].
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class NvmlGpu:
    index: int
    name: str
    pci_bus_id: str  # "00000000:00:06.0" as NVML writes it
    pci_device_id: str | None  # "0x2335"
    compute_capability: str
    memory_bytes: int


@dataclass(frozen=True)
class NvmlReading:
    driver_version: str
    cuda_driver: int  # 13000 = CUDA 13.0
    gpus: tuple[NvmlGpu, ...]

    @property
    def cuda_max(self) -> str:
        return f"{self.cuda_driver // 1000}.{self.cuda_driver % 1000 // 10}"


class NvmlUnavailable(Exception):
    """NVML could not be read; the reason says why (no library, no driver, an NVML error)."""


def read_nvml() -> NvmlReading:
    try:
        import pynvml
    except ImportError as exc:  # nvidia-ml-py is a dependency, but be plain about it
        raise NvmlUnavailable(f"pynvml is not importable: {exc}") from exc
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML did not start: {exc}") from exc
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
            pci = pynvml.nvmlDeviceGetPciInfo(h)
            bus_id = pci.busId.decode() if isinstance(pci.busId, bytes) else pci.busId
            name = pynvml.nvmlDeviceGetName(h)
            gpus.append(
                NvmlGpu(
                    index=i,
                    name=name.decode() if isinstance(name, bytes) else name,
                    pci_bus_id=bus_id,
                    # pciDeviceId packs device id (high 16 bits) and vendor id (low 16 bits)
                    pci_device_id=f"0x{pci.pciDeviceId >> 16:04x}",
                    compute_capability=f"{major}.{minor}",
                    memory_bytes=pynvml.nvmlDeviceGetMemoryInfo(h).total,
                )
            )
        version = pynvml.nvmlSystemGetDriverVersion()
        return NvmlReading(
            driver_version=version.decode() if isinstance(version, bytes) else version,
            cuda_driver=pynvml.nvmlSystemGetCudaDriverVersion(),
            gpus=tuple(gpus),
        )
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML failed: {exc}") from exc
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def load_snapshot(path: Path) -> NvmlReading:
    """A recorded NVML reading; a snapshot with `"error"` stands for NVML failing."""
    data = json.loads(path.read_text())
    if "error" in data:
        raise NvmlUnavailable(data["error"])
    return NvmlReading(
        driver_version=data["driver"],
        cuda_driver=int(data["cuda_driver"]),
        gpus=tuple(
            NvmlGpu(
                index=g["index"],
                name=g["name"],
                pci_bus_id=g["pci"],
                pci_device_id=g.get("pci_device_id"),
                compute_capability=f"{g['cc'][0]}.{g['cc'][1]}",
                memory_bytes=g["mem_total"],
            )
            for g in data["gpus"]
        ),
    )
