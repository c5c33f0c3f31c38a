"""Driver: the loaded driver, the branch and modules torch's CUDA needs, and the reboot."""

from __future__ import annotations

from app.tui.controllers.answerfields import select, text
from app.tui.controllers.step import StepController
from app.tui.widgets.fields import FieldSpec


class DriverController(StepController):
    def fields(self) -> list[FieldSpec]:
        return [
            select("driver.action", "Install"),
            text("driver.branch", "Branch"),
            select("driver.modules", "Kernel modules"),
            select("reboot.policy", "Reboot"),
        ]

    def existing(self) -> list[str]:
        f, c = self.session.facts, self.session.choices()
        out = []
        if not f.gpus:
            out.append("No NVIDIA GPU: no driver is needed.")
        elif f.driver:
            out.append(
                f"Driver {f.driver.version} ({f.driver.modules or '?'} modules) is "
                f"{'loaded' if f.driver.loaded else 'installed but not loaded'}; it runs CUDA "
                f"up to {f.driver.cuda_max or 'unknown'}."
            )
        else:
            out.append("No NVIDIA driver is loaded.")
        if f.gpus and f.driver_is_hosts():
            out.append(
                f"The driver is the host's ({f.environment_label()}): mlsetup never installs "
                "one here, nor touches kernel modules or reboots."
            )
        elif f.gpus:
            runs = f"torch's CUDA {c.cuda}" if c.cuda else "torch (the CPU build)"
            out.append(
                f"Wanted: branch {c.driver_branch} or newer, {c.driver_modules} modules, "
                f"to run {runs}."
            )
        return out  # nouveau, Secure Boot and missing headers: the warnings below say each

    def help(self) -> str:
        c = self.session.choices()
        runs = f"CUDA {c.cuda}" if c.cuda else "no CUDA (torch is the CPU build)"
        return (
            f"The driver must run the CUDA torch is built with: here {runs}, so branch "
            f"{c.driver_branch} or newer with {c.driver_modules} kernel modules (open "
            "modules need Turing, compute 7.5+; Blackwell needs them).\n\n"
            "Install: auto installs only when the loaded driver cannot run that CUDA; "
            "install always; skip never (torch may then not see the GPUs).\n"
            "Reboot: a new driver loads after a reboot. ask = you are asked; auto = the "
            "machine reboots by itself and the setup resumes; never = you reboot later."
        )
