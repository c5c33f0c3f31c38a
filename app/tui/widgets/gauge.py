"""The memory gauge shown while an extension builds: RAM and swap, a sparkline of the last
minutes, jobs running / allowed / frozen, build progress with ETA, and each throttle decision.

It is fed by the governor's MemorySample / Throttle / BuildProgress events (`update_from`).
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Sparkline, Static

from app.tui.glyphs import Glyphs
from app.tui.runmodel import MemoryView
from steps.units import GiB, duration

WARN_AT, HIGH_AT = 75.0, 90.0


def pressure(percent: float) -> str:
    return "high" if percent >= HIGH_AT else "warn" if percent >= WARN_AT else "ok"


class RamBar(Widget):
    """RAM used / total as a bar coloured by pressure, then swap."""

    DEFAULT_CSS = "RamBar { height: 1; }"

    def __init__(self, glyphs: Glyphs, **kwargs) -> None:
        super().__init__(**kwargs)
        self.glyphs = glyphs
        self.memory: MemoryView | None = None

    def render(self) -> Content:
        sample = self.memory.sample if self.memory else None
        if sample is None or not sample.total_bytes:
            return Content("RAM  waiting for the first sample…")
        pct = 100.0 * sample.used_bytes / sample.total_bytes
        level = pressure(pct)
        colour = {"ok": "$success", "warn": "$warning", "high": "$error"}[level]
        tail = (
            f" {pct:3.0f}% {sample.used_bytes / GiB:.1f}/{sample.total_bytes / GiB:.1f} GiB"
            f"  swap {sample.swap_used_bytes / GiB:.1f} GiB"
        )
        width = max(10, self.size.width - 5 - len(tail))
        full = round(width * min(pct, 100.0) / 100)
        bar = Content.styled(self.glyphs["bar"] * full, f"{colour} bold")
        rest = Content.styled(self.glyphs["bar_empty"] * (width - full), "$foreground 30%")
        return Content.assemble("RAM  ", bar, rest, tail)


class MemoryGauge(Vertical):
    class Pressure(Message):
        """RAM pressure moved between ok, warn and high."""

        def __init__(self, level: str, percent: float) -> None:
            super().__init__()
            self.level = level
            self.percent = percent

    def __init__(self, glyphs: Glyphs, **kwargs) -> None:
        super().__init__(**kwargs)
        self.glyphs = glyphs
        self.level = "ok"

    def compose(self) -> ComposeResult:
        yield RamBar(self.glyphs, id="gauge-ram")
        yield Sparkline([], id="gauge-spark")
        yield Static("", id="gauge-jobs", markup=False)
        yield Static("", id="gauge-throttle", markup=False)

    def update_from(self, memory: MemoryView) -> None:
        bar = self.query_one(RamBar)
        bar.memory = memory
        bar.refresh()
        spark = self.query_one(Sparkline)
        spark.data = list(memory.history) or [0.0]
        sample = memory.sample
        parts = []
        if sample is not None:
            parts.append(
                f"jobs {sample.jobs_running} running / {sample.jobs_allowed} allowed / "
                f"{sample.jobs_frozen} frozen"
            )
            pct = 100.0 * sample.used_bytes / sample.total_bytes if sample.total_bytes else 0.0
            level = pressure(pct)
            if level != self.level:
                self.level = level
                self.set_class(level == "high", "-high")
                self.set_class(level == "warn", "-warn")
                self.post_message(MemoryGauge.Pressure(level, pct))
        if (progress := memory.progress) is not None:
            eta = memory.eta_seconds()
            parts.append(
                f"build {progress.done}/{progress.total}"
                + (f" · ETA {duration(eta, tenths=False)}" if eta is not None else "")
            )
        self.query_one("#gauge-jobs", Static).update("   ".join(parts))
        throttles = list(memory.throttles)[-2:]
        self.query_one("#gauge-throttle", Static).update(
            "\n".join(throttles) if throttles else "no throttling so far"
        )
