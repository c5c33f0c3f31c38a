"""How long an extension's compile is expected to take here, from the one measured build, and
the warning when only a few jobs fit (a small box compiles for hours, and should say so)."""

from __future__ import annotations

from app.tui.session import Session
from steps.choices import BuildTarget
from steps.units import gib

# Measured (DESIGN.md, "Measured on the H200 server"): flash-attn 2.8.3 for one arch (sm_90)
# with the governor on 16 cores took 20 min 30 s. Compile time grows with the archs and falls
# with the cores; a recipe not measured says so. (Belongs beside the recipe in
# assets/extensions.toml once that file carries build times.)
MEASURED_BUILD = {"flash-attn": (20.5, 16)}  # minutes for one arch, on that many cores
SLOW = 2.0  # a build this many times the measured one is warned about


def _jobs(target: BuildTarget, cores: int | None, measured_jobs: int) -> int:
    # more jobs than were measured are not counted as faster: the longest objects set the pace
    return max(1, min(target.max_jobs, cores or 1, measured_jobs))


def minutes(target: BuildTarget, cores: int | None) -> float | None:
    measured = MEASURED_BUILD.get(target.recipe.name)
    if measured is None:
        return None
    per_arch, on = measured
    return per_arch * len(target.compute_capabilities) * on / _jobs(target, cores, on)


def _span(mins: float) -> str:
    return f"{mins:.0f} min" if mins < 90 else f"{mins // 60:.0f} h {mins % 60:02.0f} min"


def build_time(target: BuildTarget, cores: int | None) -> str:
    estimate = minutes(target, cores)
    if estimate is None:
        return "time not measured for this extension"
    per_arch, on = MEASURED_BUILD[target.recipe.name]
    return f"about {_span(estimate)} ({per_arch:g} min measured for one arch, {on} jobs)"


def jobs_text(n: int) -> str:
    return f"{n} job" if n == 1 else f"{n} jobs"


def slow_builds(session: Session) -> list[str]:
    """A warning for each build that this machine's cores or RAM make several times slower
    than the measured one."""
    f = session.facts
    out = []
    for t in session.choices().build_targets:
        estimate = minutes(t, f.cpu.logical)
        measured = MEASURED_BUILD.get(t.recipe.name)
        if estimate is None or measured is None:
            continue
        if estimate < SLOW * measured[0] * len(t.compute_capabilities):
            continue
        free = gib(f.memory.available_bytes) if f.memory.available_bytes else "unknown"
        out.append(
            f"{t.answer.name} {t.answer.version} compiles here with at most "
            f"{jobs_text(_jobs(t, f.cpu.logical, measured[1]))} at once ({f.cpu.logical or '?'} "
            f"cores, {free} RAM free): about {_span(estimate)} (measured: {measured[0]:g} min "
            f"for one arch with {measured[1]} jobs)."
        )
    return out
