"""Machine: what the probe found, and every warning in plain words."""

from __future__ import annotations

from app.machine_summary import machine_rows
from app.tui.controllers.buildtime import slow_builds
from app.tui.session import Session
from steps.decide.planwarnings import machine_warnings


class MachineController:
    def __init__(self, session: Session) -> None:
        self.session = session

    def rows(self, times: str = "\u00d7") -> list[tuple[str, str]]:
        return machine_rows(self.session.facts, times=times)

    def warnings(self) -> list[str]:
        seen: list[str] = []
        for w in [
            *(w.text for w in machine_warnings(self.session.facts)),
            *self.session.notes,
            *self.session.plan().warnings,
            *slow_builds(self.session),
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
