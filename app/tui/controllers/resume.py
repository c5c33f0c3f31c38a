"""Resume: after a reboot or a dropped session, what is done, what the reboot was for and
whether it worked (the machine probed again), what is next."""

from __future__ import annotations

from app.tui.session import Session
from steps.formats.state import State


class ResumeController:
    def __init__(self, session: Session, state: State) -> None:
        self.session = session
        self.state = state

    def done(self) -> list[str]:
        return [a for a, r in self.state.actions.items() if r.status == "done"]

    def pending(self) -> list[str]:
        plan = self.state.plan or {"steps": []}
        done = set(self.done())
        return [a["id"] for s in plan["steps"] for a in s["actions"] if a["id"] not in done]

    def headline(self) -> str:
        return {
            "reboot": "The setup paused for a reboot.",
            "failed": "The last run stopped at a failure.",
            "running": "The last run was interrupted (the session or the engine was stopped).",
        }.get(self.state.phase, f"The last run is {self.state.phase}.")

    def reboot_lines(self) -> list[str]:
        record = self.state.reboot
        if record is None:
            return []
        facts = self.session.reprobe()
        branch = f" {record.driver_branch}" if record.driver_branch is not None else ""
        out = [f"The reboot was for {record.action}: load NVIDIA driver{branch}."]
        rebooted = record.boot_id is None or facts.boot_id != record.boot_id
        out.append(
            "The machine has rebooted."
            if rebooted
            else "The machine has NOT rebooted yet: reboot first (sudo reboot)."
        )
        d = facts.driver
        if d and d.loaded:
            ok = record.driver_branch is None or d.branch >= record.driver_branch
            out.append(
                f"Driver {d.version} is loaded ({d.modules or '?'} modules), CUDA up to "
                f"{d.cuda_max or '?'}: " + ("it worked." if ok else "an older branch than wanted.")
            )
        elif rebooted:
            out.append(
                "No NVIDIA driver is loaded: continuing loads it by hand to find out why "
                "(Secure Boot, say)."
            )
        return out

    def failure_lines(self) -> list[str]:
        report = self.session.report() or {}
        failure = report.get("failure") if report.get("run_id") == self.state.run_id else None
        if not failure:
            return []
        return [
            f"Failed: {failure['what']}",
            f"Why: {failure['why']}",
            f"Next: {failure['next']}",
        ] + ([f"Log: {failure['log']}"] if failure.get("log") else [])

    def help(self) -> str:
        return (
            f"{self.headline()} The saved state lists what is done; Enter continues with the "
            "saved answers (sudo mlsetup apply --resume): done actions are not run again, the "
            "remaining steps are checked again on the machine first.\n\n"
            "After a driver reboot this screen probes the machine again and says whether the "
            "driver loaded. Quitting (ctrl+q) changes nothing."
        )
