#!/usr/bin/env python3
"""How long the wizard takes from launch to its first screen, as an operator sees it.

    .venv/bin/python tests/bench/bench_launch.py [--facts FILE] [--runs N] [--size 80x24]

Starts `mlsetup --dry-run --facts FILE` (the recorded RTX PRO 6000 box by default) in a tmux
pane, reads the pane (capture-pane) every 20 ms until the Machine screen's key bar is drawn
(the first screen, "probing" until the session is loaded in a worker) and then until its
facts and warnings are filled in, quits with ctrl+q, and prints each run's seconds and the
medians. A benchmark, not a test: the figures follow the machine's load (issue 34 asks for the
first screen under 2 s on a quiet 2-core box).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RTX = REPO / "assets" / "machines" / "rtx-pro-6000-ubuntu2404.json"
SESSION = f"mlsetup-bench-launch-{os.getpid()}"


def pane() -> str:
    out = subprocess.run(["tmux", "capture-pane", "-p", "-t", SESSION], capture_output=True)
    return out.stdout.decode(errors="replace")


def launch_once(facts: Path, size: str) -> tuple[float, float]:
    """Seconds from launch to the first screen, and to its facts and warnings."""
    width, height = size.split("x")
    cmd = (
        f"cd {shlex.quote(str(REPO))} && TERM=xterm-256color UV_OFFLINE=1 "
        f"{shlex.quote(sys.executable)} -m app.cli --dry-run --facts {shlex.quote(str(facts))}"
        "; sleep 5"
    )
    start = time.monotonic()
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", SESSION, "-x", width, "-y", height, cmd], check=True
    )
    first = None
    try:
        while True:
            text = pane()
            now = time.monotonic() - start
            if first is None and "1 Machine" in text and "help" in text.rstrip().split("\n")[-1]:
                first = now
            if first is not None and "Warnings" in text:  # the probe's and the plan's, drawn
                return first, now
            if now > 120:
                raise SystemExit(f"no filled-in first screen after 120 s:\n{text}")
            time.sleep(0.02)
    finally:
        subprocess.run(["tmux", "send-keys", "-t", SESSION, "C-q"], check=False)
        time.sleep(0.5)
        subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--facts", type=Path, default=RTX)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--size", default="80x24")
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        print("tmux is not installed", file=sys.stderr)
        return 1
    firsts, filled = [], []
    for n in range(1, args.runs + 1):
        first, full = launch_once(args.facts, args.size)
        firsts.append(first)
        filled.append(full)
        print(
            f"run {n}: first screen {first:.2f} s, filled in {full:.2f} s after launch", flush=True
        )
    print(
        f"first screen: median {statistics.median(firsts):.2f} s, best {min(firsts):.2f} s; "
        f"filled in: median {statistics.median(filled):.2f} s, best {min(filled):.2f} s "
        f"({args.runs} runs; load average {os.getloadavg()[0]:.2f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
