"""A warning of the planner and the step it is about; those that follow from the machine
alone, in plain words."""

from __future__ import annotations

from dataclasses import dataclass

from steps.core.sizes import gib
from steps.formats.facts import Facts


@dataclass(frozen=True)
class StepWarning:
    """`step`: the step whose decision it concerns (its wizard screen shows it); None for one
    about the machine as a whole (the Machine and Review screens show every warning)."""

    step: str | None
    text: str


def machine_warnings(facts: Facts) -> list[StepWarning]:
    out = []
    if not facts.gpus:
        out.append(
            StepWarning(
                "venv",
                "no NVIDIA GPU found: torch will be the CPU build and no driver is installed.",
            )
        )
    unknown = [g.pci_device_id or "?" for g in facts.gpus if g.compute_capability is None]
    if unknown:
        out.append(
            StepWarning(
                None,
                f"GPU(s) with PCI device id {', '.join(unknown)} are not in mlsetup's table: "
                "their compute capability is unknown until the driver is loaded.",
            )
        )
    if mixed := mixed_gpus(facts):
        out.append(StepWarning(None, mixed))
    if facts.driver_is_hosts():
        return out + _hosts_driver_warnings(facts)
    if facts.gpus and facts.driver is None:
        out.append(StepWarning("driver", "no NVIDIA driver is loaded."))
    if facts.nouveau_loaded:
        out.append(
            StepWarning(
                "driver",
                "the nouveau driver is loaded: it is blacklisted before the NVIDIA driver is "
                "installed, and a reboot is needed.",
            )
        )
    # with a driver loaded its modules are built: the headers matter only to a driver install,
    # whose plan installs them (a warning beside a satisfied driver step said otherwise)
    loaded = facts.driver is not None and facts.driver.loaded
    if facts.gpus and not loaded and facts.kernel.headers_installed is False:
        out.append(
            StepWarning(
                "driver",
                f"kernel headers for {facts.kernel.release} are missing: the driver's modules "
                "cannot be built without them (the driver step installs them).",
            )
        )
    if facts.secure_boot == "enabled":
        out.append(
            StepWarning(
                "driver",
                "Secure Boot is enabled: a newly built driver module loads only after its "
                "signing key is enrolled (MOK), which needs the console at the next boot.",
            )
        )
    return out


def _hosts_driver_warnings(facts: Facts) -> list[StepWarning]:
    """In a container or WSL the driver, its modules, nouveau and Secure Boot are the host's:
    the warnings about installing a driver here do not apply."""
    if facts.gpus and facts.driver is None:
        return [
            StepWarning(
                "driver",
                f"no NVIDIA driver answers in {facts.environment_label()}: the driver is the "
                "host's, and mlsetup never installs one here.",
            )
        ]
    return []


def mixed_gpus(facts: Facts) -> str:
    """Different GPU models in one machine, in plain words ("" when they are alike): torch and
    the extensions are built for every compute capability there (a longer compile, and the
    newest build that runs on the oldest), and a job spread over all of them runs within the
    memory of the smallest."""
    kinds: dict[tuple[str, str, int], int] = {}
    for g in facts.gpus:
        kind = (g.name or g.pci_device_id or "?", g.compute_capability or "?", g.memory_bytes or 0)
        kinds[kind] = kinds.get(kind, 0) + 1
    if len(kinds) < 2:
        return ""
    listed = " and ".join(
        f"{n}x {name} (compute {cc}, {gib(mem, 0) if mem else 'memory unknown'})"
        for (name, cc, mem), n in kinds.items()
    )
    ccs = facts.compute_capabilities
    mems = [mem for _, _, mem in kinds if mem]
    out = f"mixed GPUs: {listed}."
    if len(ccs) > 1:
        out += (
            f" torch and the extensions are built for all of them (compute {', '.join(ccs)}): "
            f"the build must run on the oldest, {ccs[0]}, and compiles once per capability."
        )
    if len(set(mems)) > 1:
        out += f" A job across all GPUs fits the smallest memory, {gib(min(mems), 0)} each."
    return out
