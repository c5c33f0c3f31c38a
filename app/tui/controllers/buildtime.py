"""How long an extension's compile is expected to take here, from the one measured build, and
the warning when only a few jobs fit (a small box compiles for hours, and should say so)."""

from __future__ import annotations

from app.tui.session import Session
from steps.core.sizes import gib
from steps.decide.choices import BuildTarget

# A recipe's measured_build (assets/extensions.toml) is one real build for one arch: compile time
# grows with the archs and falls with the cores; a recipe without one says so.
SLOW = 2.0  # a build this many times the measured one is warned about


def _jobs(target: BuildTarget, cores: int | None, measured_jobs: int) -> int:
    # more jobs than were measured are not counted as faster: the longest objects set the pace;
    # no more than the RAM holds at their peak run at once (the governor holds the rest)
    return max(1, min(target.jobs_at_once, cores or 1, measured_jobs))


def minutes(target: BuildTarget, cores: int | None) -> float | None:
    measured = target.recipe.measured_build
    if measured is None:
        return None
    on = measured.jobs
    return measured.minutes * len(target.compute_capabilities) * on / _jobs(target, cores, on)


def _span(mins: float) -> str:
    return f"{mins:.0f} min" if mins < 90 else f"{mins // 60:.0f} h {mins % 60:02.0f} min"


def build_time(target: BuildTarget, cores: int | None) -> str:
    estimate, measured = minutes(target, cores), target.recipe.measured_build
    if estimate is None or measured is None:
        return "time not measured for this extension"
    return (
        f"about {_span(estimate)} ({measured.minutes:g} min measured for one arch, "
        f"{jobs_text(measured.jobs)}, {measured.peak_gib:g} GiB at the peak)"
    )


def jobs_text(n: int) -> str:
    return f"{n} job" if n == 1 else f"{n} jobs"


def slow_builds(session: Session) -> list[str]:
    """A warning for each build that this machine's cores or RAM make several times slower
    than the measured one."""
    f = session.facts
    out = []
    for t in session.choices().build_targets:
        estimate, measured = minutes(t, f.cpu.logical), t.recipe.measured_build
        if estimate is None or measured is None:
            continue
        if estimate < SLOW * measured.minutes * len(t.compute_capabilities):
            continue
        free = gib(f.memory.available_bytes) if f.memory.available_bytes else "unknown"
        out.append(
            f"{t.answer.name} {t.answer.version} compiles here with at most "
            f"{jobs_text(_jobs(t, f.cpu.logical, measured.jobs))} at once ({f.cpu.logical or '?'} "
            f"cores, {free} RAM free): about {_span(estimate)} (measured: {measured.minutes:g} "
            f"min for one arch with {jobs_text(measured.jobs)})."
        )
    return out
