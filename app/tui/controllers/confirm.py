"""Apply? What the plan will change on this machine, said before anything runs: packages,
toolkits, the venv, builds with their expected time and RAM, and the reboot."""

from __future__ import annotations

from app.tui.controllers.buildtime import minutes as build_minutes
from app.tui.controllers.step import controller_for
from app.tui.controllers.todo import reboot_lines, reboots
from app.tui.session import Session
from steps.formats.plan import Action, Plan
from steps.planning import registry


def apt_packages(action: Action) -> list[str]:
    """The packages an `apt-get install` action names (options and their values left out)."""
    argv = action.argv
    if not argv or argv[0] != "apt-get" or "install" not in argv:
        return []
    out, skip = [], False
    for word in argv[argv.index("install") + 1 :]:
        if skip:
            skip = False
        elif word == "-o":
            skip = True
        elif not word.startswith("-"):
            out.append(word)
    return out


class ConfirmController:
    def __init__(self, session: Session) -> None:
        self.session = session

    def plan(self) -> Plan:
        return self.session.plan()

    def sections(self) -> list[tuple[str, list[str]]]:
        """(title, lines) for each kind of change, in the order they happen: the packages, what
        changes the system outside them (each step's kinds, steps.planning.registry), each pending
        step's own section (its controller's), the reboot."""
        s = self.session
        plan = self.plan()
        pending = {st.name: st for st in plan.steps if st.status == "pending"}
        out: list[tuple[str, list[str]]] = []
        packages = [p for a in plan.actions for p in apt_packages(a)]
        if packages:
            out.append(("System packages (apt)", [", ".join(dict.fromkeys(packages))]))
        system = registry.system_changes()
        other = [a.title for a in plan.actions if a.kind in system]
        if other:
            out.append(("System files", other))
        for spec in registry.STEPS:
            if spec.name in pending and spec.controller:
                section = controller_for(s, spec.name).confirm_section(pending[spec.name])
                if section is not None:
                    out.append(section)
        if reboots(plan):
            out.append(("Reboot", reboot_lines(s)))
        else:
            out.append(("Reboot", ["No reboot is needed."]))
        return out

    def headline(self) -> str:
        n = len(self.plan().actions)
        actions = "1 action" if n == 1 else f"{n} actions"
        if self.session.dry_run:
            return f"DRY RUN: walk {actions} for {self.session.machine_label}? Nothing runs."
        return f"Apply {actions} to {self.session.machine_label}?"

    def glance(self) -> str:
        """What weighs most, above the list: the reboot (and the console it may need) and
        the compile time."""
        s = self.session
        parts = []
        if reboots(self.plan()):
            console = (
                " (Secure Boot: the module key is enrolled at the console)"
                if s.facts.secure_boot == "enabled"
                else ""
            )
            parts.append(f"a reboot{console}")
        times = [build_minutes(t, s.facts.cpu.logical) for t in s.choices().build_targets]
        known = [m for m in times if m is not None]
        if known:
            parts.append(f"about {sum(known):.0f} min of compiling")
        return f"Needs {'; '.join(parts)}." if parts else ""
