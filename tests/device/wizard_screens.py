#!/usr/bin/env python3
"""Attach the wizard, headless, to an apply already running on this machine (a real compile:
cudaext or flash-attn) and save SVG screenshots of its Run screen while the memory gauge moves.

Run on the GPU server, as root, after starting the apply detached, e.g.:

    tests/device/h200.sh governed 900 &        # or: mlsetup apply --answers A.toml (detached)
    python3 tests/device/wizard_screens.py --out "$OUT" --seconds 480 --every 20

It waits (--wait) for the apply's lock, opens the wizard as `sudo mlsetup` would (the opening
is "attach"), and every --every seconds saves run-<size>-<seconds>.svg for each --sizes, beside it
run-<size>-<seconds>.json (where the Log pane's view is: offset, end, rows, whether the last line
is on screen) and a line in wizard-screens.txt (RAM %, jobs, build progress): the gauge moving.
It stops after --seconds or when the run ends (one last shot); quitting the wizard never stops
the apply.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seconds", type=float, default=480)
    p.add_argument("--every", type=float, default=20)
    p.add_argument("--wait", type=float, default=300, help="seconds to wait for the apply")
    p.add_argument("--sizes", default="120x40,80x24")
    p.add_argument("--root", type=Path, default=Path("/"))
    p.add_argument(
        "--from-checkout",
        action="store_true",
        help="import mlsetup from this checkout, not the installed wheel",
    )
    return p.parse_args(argv)


async def shoot(args: argparse.Namespace) -> int:
    from app.tui.app import WizardApp
    from app.tui.session import Session

    session = Session.load(root=args.root)
    deadline = time.monotonic() + args.wait
    while session.apply_running() is None:
        if time.monotonic() > deadline:
            print("no apply is running (its lock is free): start one first", file=sys.stderr)
            return 1
        await asyncio.sleep(2)
    sizes = [tuple(int(n) for n in s.split("x")) for s in args.sizes.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    notes = (args.out / "wizard-screens.txt").open("a")
    app = WizardApp(session, opening="attach")
    started = time.monotonic()
    async with app.run_test(size=sizes[0]) as pilot:
        while True:
            await pilot.pause(0.5)
            t = int(time.monotonic() - started)
            for width, height in sizes:
                await pilot.resize_terminal(width, height)
                await pilot.pause(0.5)
                name = f"run-{width}x{height}-{t:04d}s"
                app.save_screenshot(f"{name}.svg", str(args.out))
                (args.out / f"{name}.json").write_text(json.dumps(log_state(app), indent=1))
            notes.write(line(app, t) + "\n")
            notes.flush()
            if app.model.done or time.monotonic() - started > args.seconds:
                break
            await asyncio.sleep(args.every)
    print(f"screenshots in {args.out}; the apply goes on: sudo mlsetup follows it")
    return 0


def log_state(app) -> dict:
    """Where the Run screen's Log pane is: following the tail, its last line on screen."""
    from app.tui.widgets.logpane import LogPane

    try:
        pane = app.screen.query_one(LogPane)
    except Exception as exc:  # another screen is on top: say which
        return {"screen": type(app.screen).__name__, "error": str(exc)}
    view = pane.view
    height = view.scrollable_content_region.height
    y = view.scroll_offset.y
    return {
        "screen": type(app.screen).__name__,
        "action": pane.action_id,
        "offset_y": y,
        "max_scroll_y": view.max_scroll_y,
        "tail_y": view.tail_y,
        "at_tail": view.at_tail,
        "auto_scroll": view.auto_scroll,
        "view_height": height,
        "wrap_width": view.wrap_width,
        "rows": view.line_count,
        "source_lines": len(view.source),
        "last_line_visible": y + height >= view.line_count,
        "last_line": view.source[-1][-200:] if view.source else "",
        "bottom_row": view.lines[min(y + height, view.line_count) - 1][-200:]
        if view.line_count
        else "",
    }


def line(app, t: int) -> str:
    m = app.model.memory
    parts = [f"t={t}s", f"current={app.model.current}"]
    if m.sample is not None and m.sample.total_bytes:
        s = m.sample
        parts.append(f"ram={100 * s.used_bytes / s.total_bytes:.0f}%")
        parts.append(f"jobs={s.jobs_running}/{s.jobs_allowed} frozen={s.jobs_frozen}")
    if m.progress is not None:
        parts.append(f"build={m.progress.done}/{m.progress.total}")
    parts.append(f"throttles={len(m.throttles)}")
    log = log_state(app)
    if "offset_y" in log:
        parts.append(f"log={log['offset_y']}/{log['max_scroll_y']} last={log['last_line_visible']}")
    if app.model.finished is not None:
        parts.append(f"finished={app.model.finished.result}")
    return " ".join(parts)


if __name__ == "__main__":
    options = parse()
    if options.from_checkout:
        sys.path.insert(0, str(REPO))
    raise SystemExit(asyncio.run(shoot(options)))
