"""Machine: what the probe found, and every warning in plain words."""

from __future__ import annotations

from collections import Counter

from app.tui.controllers.answerfields import gib
from app.tui.session import Session
from steps.facts import Facts
from steps.warnings import machine_warnings


class MachineController:
    def __init__(self, session: Session) -> None:
        self.session = session

    def rows(self, times: str = "\u00d7") -> list[tuple[str, str]]:
        f: Facts = self.session.facts
        rows = [
            ("System", f"{f.os.pretty or f.os.id or 'unknown OS'} ({f.os.arch or '?'})"),
            ("Kernel", f"{f.kernel.release or 'unknown'}"),
        ]
        if f.gpus:
            counts = Counter(
                (
                    g.name or f"unknown NVIDIA GPU {g.pci_device_id}",
                    g.compute_capability,
                    g.memory_bytes,
                )
                for g in f.gpus
            )
            for (name, cc, mem), n in counts.items():
                size = f", {gib(mem)}" if mem else ""
                label = "GPUs" if len(rows) == 2 else ""
                rows.append((label, f"{n} {times} {name} (compute {cc or '?'}{size})"))
        else:
            rows.append(("GPUs", "none found"))
        d = f.driver
        if d:
            state = "loaded" if d.loaded else "installed, not loaded"
            rows.append(
                (
                    "Driver",
                    f"{d.version} ({d.modules or '?'} modules, {state}), "
                    f"CUDA up to {d.cuda_max or 'unknown'}",
                )
            )
        else:
            rows.append(("Driver", "none loaded"))
        rows.append(
            ("Toolkits", ", ".join(f"CUDA {t.version} ({t.path})" for t in f.toolkits) or "none")
        )
        m = f.memory
        swap = "no swap" if not m.swap_total_bytes else f"{gib(m.swap_total_bytes)} swap"
        rows.append(
            (
                "CPU, RAM",
                f"{f.cpu.logical or '?'} cores, {gib(m.total_bytes)} RAM "
                f"({gib(m.available_bytes)} free), {swap}",
            )
        )
        rows.append(("Disk free", ", ".join(f"{p} {gib(v)}" for p, v in f.disk_free_bytes.items())))
        rows.append(("Secure Boot", f.secure_boot))
        if f.user:
            rows.append(("User", f"{f.user.name} ({f.user.home})"))
        return rows

    def warnings(self) -> list[str]:
        seen: list[str] = []
        for w in [
            *machine_warnings(self.session.facts),
            *self.session.notes,
            *self.session.plan().warnings,
        ]:
            if w not in seen:
                seen.append(w)
        return seen

    def help(self) -> str:
        n = len(self.warnings())
        return (
            f"This screen shows what the probe found on {self.session.machine_label}: the OS, "
            "the GPUs and their compute capability (which torch build and which extension "
            "kernels can run), the loaded driver and the newest CUDA it runs, the toolkits "
            "already installed, cores and free RAM (how many compile jobs fit), free disk, "
            "Secure Boot (a new driver module then needs its key enrolled at the next boot).\n\n"
            + (
                f"{n} warning(s): each says what mlsetup will do about it."
                if n
                else "No warnings: nothing found that needs a decision from you."
            )
            + "\n\nNothing is changed until you confirm Apply on the Review screen."
        )
