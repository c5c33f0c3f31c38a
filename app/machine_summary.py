"""The machine summary both front ends show: rows of (label, value) computed from Facts.

`mlsetup probe` prints them as a detailed record (one row per GPU with its bus id, the
Pythons found); the wizard's Machine screen lays out the compact form (identical GPUs
counted on one row). Each fact is worded here and nowhere else.
"""

from __future__ import annotations

from collections import Counter

from steps.core.sizes import gib
from steps.formats.facts import Facts, Gpu

Rows = list[tuple[str, str]]


def machine_rows(facts: Facts, detailed: bool = False, times: str = "\u00d7") -> Rows:
    """`detailed`: the probe's record; else the wizard's screen, where `times` stands
    between a count of identical GPUs and their name."""
    f = facts
    unknown = "unknown" if detailed else "?"
    system = f"{f.os.pretty or f.os.id or 'unknown OS'} ({f.os.arch or unknown})"
    kernel = f.kernel.release or "unknown"
    rows: Rows = (
        [("Machine", f"{system}, kernel {kernel}")]
        if detailed
        else [("System", system), ("Kernel", kernel)]
    )
    if (where := _where(f)) is not None:
        rows.append(("Runs on", where))
    rows += _gpu_rows(f, detailed, times)
    d = f.driver
    if d:
        state = "loaded" if d.loaded else "installed, not loaded"
        modules = f"{d.modules or unknown} modules" if not f.driver_is_hosts() else "the host's"
        driver = f"{d.version} ({modules}, {state}), CUDA up to {d.cuda_max or 'unknown'}"
        rows.append(("Driver", driver))
    else:
        rows.append(("Driver", "none loaded"))
    rows.append(
        ("Toolkits", ", ".join(f"CUDA {t.version} ({t.path})" for t in f.toolkits) or "none")
    )
    if detailed:
        rows.append(
            ("Python", ", ".join(f"{p.version} ({p.path})" for p in f.pythons) or "none found")
        )
    m = f.memory
    swap = "no swap" if not m.swap_total_bytes else f"{gib(m.swap_total_bytes)} swap"
    cores, free = ("logical CPUs", "available") if detailed else ("cores", "free")
    rows.append(
        (
            "CPU, RAM",
            f"{f.cpu.logical or '?'} {cores}, {gib(m.total_bytes)} RAM "
            f"({gib(m.available_bytes)} {free}), {swap}",
        )
    )
    rows.append(("Disk free", ", ".join(f"{p} {gib(v)}" for p, v in f.disk_free_bytes.items())))
    rows.append(("Secure Boot", f.secure_boot))
    if f.user:
        rows.append(("User", f"{f.user.name} ({f.user.home})"))
    return rows


def _where(f: Facts) -> str | None:
    """Bare metal, a VM, a container or WSL, and a Tegra board; None when the facts do not say
    (a recording older than these facts)."""
    env = f.environment
    parts = []
    if env is not None:
        if env.kind == "wsl":
            parts.append("WSL 2 (the driver is the Windows host's)")
        elif env.kind == "container":
            parts.append(f"a {env.name or 'Linux'} container (the driver is the host's)")
        elif env.kind == "vm":
            parts.append(f"a virtual machine{f' ({env.name})' if env.name else ''}")
        else:
            parts.append("bare metal")
    if f.tegra:
        parts.append(f"a Tegra board{f' (L4T {f.l4t_release})' if f.l4t_release else ''}")
    return ", ".join(parts) or None


def _gpu_rows(f: Facts, detailed: bool, times: str) -> Rows:
    if not f.gpus:
        return [("GPUs", "none found")]
    if detailed:  # each device: which one is where, and where its facts came from
        return [
            (f"GPU {g.index}", f"{_gpu(g, 'unknown')} at {g.pci_bus_id} [{g.source}]")
            for g in f.gpus
        ]
    counts = Counter(_gpu(g, "?") for g in f.gpus)
    return [
        ("GPUs" if i == 0 else "", f"{n} {times} {gpu}")
        for i, (gpu, n) in enumerate(counts.items())
    ]


def _gpu(g: Gpu, unknown: str) -> str:
    size = f", {gib(g.memory_bytes)}" if g.memory_bytes else ""
    name = g.name or f"unknown NVIDIA GPU {g.pci_device_id}"
    return f"{name} (compute {g.compute_capability or unknown}{size})"


def rows_text(rows: Rows, width: int) -> str:
    """The rows as a table: each label padded to `width` columns."""
    return "\n".join(f"{label:<{width}}{value}" for label, value in rows)
