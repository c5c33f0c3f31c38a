"""Apply? What the plan will change on this machine, said before anything runs: packages,
toolkits, the venv, builds with their expected time and RAM, and the reboot."""

from __future__ import annotations

from app.tui.controllers.buildtime import build_time, jobs_text
from app.tui.controllers.buildtime import minutes as build_minutes
from app.tui.controllers.todo import reboot_lines, reboots
from app.tui.session import Session
from steps.choices import BuildTarget, build_ram
from steps.plan import Action, Plan
from steps.units import gib

# what changes the system outside its packages: NVIDIA's repository keyring, files in /etc,
# the initramfs, the module loaded, the unit that resumes the run (the reboot has a section
# of its own)
SYSTEM_FILES = frozenset({"repo-setup", "config-file", "initramfs", "load-driver", "resume-unit"})


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
        """(title, lines) for each kind of change, in the order they happen."""
        s = self.session
        plan, c, f = self.plan(), s.choices(), s.facts
        pending = {st.name: st for st in plan.steps if st.status == "pending"}
        out: list[tuple[str, list[str]]] = []
        packages = [p for a in plan.actions for p in apt_packages(a)]
        if packages:
            out.append(("System packages (apt)", [", ".join(dict.fromkeys(packages))]))
        other = [a.title for a in plan.actions if a.kind in SYSTEM_FILES]
        if other:
            out.append(("System files", other))
        if "toolkit" in pending:
            missing = [t for t in c.toolkits if f.toolkit(t) is None]
            out.append(
                (
                    "CUDA toolkits",
                    [f"CUDA {t} to /usr/local/cuda-{t} (beside any others)" for t in missing]
                    or [pending["toolkit"].reason],
                )
            )
        if "venv" in pending:
            lines = [f"{a.title}" for a in pending["venv"].actions]
            out.append((f"The venv {c.venv_path} (as {c.owner.name})", lines))
        if "extensions" in pending:
            lines = []
            usable = self._build_ram()
            for t in c.build_targets:
                lines.append(
                    f"{t.answer.name} {t.answer.version} for compute "
                    f"{', '.join(t.compute_capabilities)}: {build_time(t, f.cpu.logical)}; "
                    f"RAM up to {usable}, {self._jobs(t)}"
                )
            out.append(("Builds", lines or [pending["extensions"].reason]))
        if reboots(plan):
            out.append(("Reboot", reboot_lines(s)))
        else:
            out.append(("Reboot", ["No reboot is needed."]))
        return out

    def _build_ram(self) -> str:
        usable = build_ram(self.session.facts, self.session.answers)
        if usable is None:
            return "what the governor allows"
        reserve = self.session.answers.build.memory_reserve
        return f"{gib(usable, digits=0)} (the governor keeps {reserve} free)"

    def _jobs(self, target: BuildTarget) -> str:
        """How many jobs run at once, as the governor will let them: those whose peaks the RAM
        holds, within build.max_jobs (4 jobs of 6.5 GiB are not "up to 4" in 5 GiB)."""
        fit = target.jobs_at_once
        peak = f"one job peaks at about {target.recipe.peak_job_gib:g} GiB"
        if fit < target.max_jobs:
            return (
                f"{jobs_text(fit)} at once ({peak}; build.max_jobs {target.max_jobs} is the "
                "ceiling)"
            )
        return f"up to {jobs_text(target.max_jobs)} at once ({peak})"

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
