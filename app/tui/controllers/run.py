"""Run: the one-line texts the Run screen shows under its heading and at its foot, from the
run's model."""

from __future__ import annotations

from app.tui.glyphs import Glyphs
from app.tui.runmodel import RunModel
from steps.core.sizes import duration
from steps.planning.registry import step_names

STEP_STYLES = {
    "done": "$success",
    "satisfied": "$success",
    "failed": "$error",
    "running": "$accent",
    "dry-run": "$text-muted",  # walked by the dry run, nothing done: its actions' own mark
}


def steps_line(model: RunModel, g: Glyphs) -> str:
    """Every step with its mark, coloured by how it stands (Textual markup)."""
    parts = []
    for name in step_names():
        status = model.steps.get(name, "pending")
        style = STEP_STYLES.get(status, "$text-muted")
        parts.append(f"[{style}]{g.status(status)} {name}[/]")
    return "  ".join(parts)


def status_line(model: RunModel, g: Glyphs, now: float) -> str:
    """What the run is doing now, or how it ended and what Enter does then."""
    m = model
    dot = g["dot"]
    if m.lost:
        text = f"The engine stopped: {m.lost}"
    elif m.finished is not None:
        f = m.finished
        # what Enter does then is the key bar's to say, on the row below
        text = f"finished: {f.result} (exit {f.code})"
        if m.dry_run:
            n = sum(1 for a in m.actions.values() if a.status == "dry-run")
            would = "1 action" if n == 1 else f"{n} actions"
            text = (
                f"dry run finished (exit {f.code}): nothing was changed; a real apply runs {would}"
            )
    elif m.current:
        view = m.actions.get(m.current)
        ran = duration(m.elapsed(now), tenths=False)
        text = f"running {ran} {dot} {view.title if view else m.current}"
    else:
        text = f"starting{g['more']}"
    if m.dry_run and m.finished is None:
        text = f"dry run: nothing is executed {dot} " + text
    return text
