"""The memory gauge shown while an extension builds: one budget (the RAM the governor lets the
build hold: build.memory_limit, or all but the reserve) drawn by the bar and the strip chart
alike, one count of jobs (those running, the frozen among them, the governor's limit), build
progress with an ETA that moves, and the governor's last decisions.

It is fed by the governor's MemorySample / Throttle / BuildProgress events (`update_from`).
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widget import Widget
from textual.widgets import Static

from app.tui.glyphs import Glyphs
from app.tui.runmodel import MemoryView, budget_percent
from steps.core.sizes import GiB, duration

WARN_AT, HIGH_AT = 75.0, 90.0
COLOURS = {"ok": "$success", "warn": "$warning", "high": "$error"}
BLOCKS = " \u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588"  # eighths of a cell


def pressure(percent: float) -> str:
    return "high" if percent >= HIGH_AT else "warn" if percent >= WARN_AT else "ok"


def ram_text(memory: MemoryView) -> str:
    """'36.2/48.0 GiB · machine 61% · swap 0.0 GiB': the build's RSS of its budget first."""
    s = memory.sample
    if s is None:
        return ""
    machine = f"{100 * s.used_bytes / s.total_bytes:.0f}%" if s.total_bytes else "?"
    swap = f"swap {s.swap_used_bytes / GiB:.1f} GiB"
    if s.budget_bytes and s.build_bytes is not None:
        return (
            f"{s.build_bytes / GiB:.1f}/{s.budget_bytes / GiB:.1f} GiB"
            f" \u00b7 machine {machine} \u00b7 {swap}"
        )
    return f"{s.used_bytes / GiB:.1f}/{s.total_bytes / GiB:.1f} GiB \u00b7 {swap}"


def bar_label(memory: MemoryView | None) -> str:
    """What the bar measures: the build's budget, or (an older engine) the machine's RAM."""
    s = memory.sample if memory else None
    return "build" if s is not None and s.budget_bytes else "RAM  "


def jobs_text(memory: MemoryView, now: float | None = None) -> str:
    """'jobs 11 running, 5 frozen (limit 11) · build 30/73 · ETA 12m40s'."""
    parts = []
    if (s := memory.sample) is not None:
        frozen = f", {s.jobs_frozen} frozen" if s.jobs_frozen else ""
        parts.append(f"jobs {s.jobs_running} running{frozen} (limit {s.jobs_allowed})")
    if (progress := memory.progress) is not None:
        eta = memory.eta_seconds(now)
        parts.append(
            f"build {progress.done}/{progress.total}"
            + (f" \u00b7 ETA {duration(eta, tenths=False)}" if eta is not None else "")
        )
    return " \u00b7 ".join(parts)


class RamBar(Widget):
    """The budget in use as a bar coloured by pressure, then the figures."""

    DEFAULT_CSS = "RamBar { height: 1; }"

    def __init__(self, glyphs: Glyphs, **kwargs) -> None:
        super().__init__(**kwargs)
        self.glyphs = glyphs
        self.memory: MemoryView | None = None

    def render(self) -> Content:
        sample = self.memory.sample if self.memory else None
        pct = budget_percent(sample) if sample is not None else None
        if self.memory is None or pct is None:
            return Content(f"RAM  waiting for the first sample{self.glyphs['more']}")
        tail = f" {pct:3.0f}% {ram_text(self.memory)}"
        width = max(10, self.size.width - 6 - len(tail))
        full = round(width * min(pct, 100.0) / 100)
        bar = Content.styled(self.glyphs["bar"] * full, f"{COLOURS[pressure(pct)]} bold")
        rest = Content.styled(self.glyphs["bar_empty"] * (width - full), "$foreground 30%")
        return Content.assemble(f"{bar_label(self.memory)} ", bar, rest, tail)


class BudgetChart(Widget):
    """The last minutes of the same budget, one cell a sample, on a fixed 0-100% scale and
    in the bar's colours (a chart scaled to its own peak is red whatever the level)."""

    DEFAULT_CSS = "BudgetChart { height: 1; }"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.history: list[float] = []

    def render(self) -> Content:
        width = max(1, self.size.width - 6)
        cells = [
            Content.styled(BLOCKS[max(1, min(8, round(p / 100 * 8)))], COLOURS[pressure(p)])
            for p in self.history[-width:]
        ]
        return Content.assemble("      ", *cells)


class MemoryGauge(Vertical):
    def __init__(self, glyphs: Glyphs, **kwargs) -> None:
        super().__init__(**kwargs)
        self.glyphs = glyphs
        self.level = "ok"

    def compose(self) -> ComposeResult:
        yield RamBar(self.glyphs, id="gauge-ram")
        yield BudgetChart(id="gauge-spark")
        yield Static("", id="gauge-jobs", markup=False)
        yield Static("", id="gauge-throttle", markup=False)

    def update_from(self, memory: MemoryView, now: float | None = None) -> None:
        bar = self.query_one(RamBar)
        bar.memory = memory
        bar.refresh()
        chart = self.query_one(BudgetChart)
        chart.history = list(memory.history)
        chart.refresh()
        sample = memory.sample
        if sample is not None and (pct := budget_percent(sample)) is not None:
            level = pressure(pct)
            if level != self.level:
                self.level = level
                self.set_class(level == "high", "-high")
                self.set_class(level == "warn", "-warn")
        self.query_one("#gauge-jobs", Static).update(jobs_text(memory, now))
        throttles = list(memory.throttles)[-2:]
        self.query_one("#gauge-throttle", Static).update(
            "\n".join(throttles) if throttles else "the governor has not changed the limit"
        )
