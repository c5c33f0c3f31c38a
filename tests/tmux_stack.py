#!/usr/bin/env python3
"""The seed's stack walked in tmux as a person sets it up: vllm, transformers and accelerate
typed into Venv's More packages, uv's lock awaited on the Venv screen, flash-attn added on
Extensions (its bound on torch resolved again), Review, and where the plan runs, the dry run's
confirmation, the Run screen and the Summary, at 80x24 on the
recorded RTX PRO 6000 box, uv's only index the recorded PyPI copy (tests/recorded_pypi.py; any
other request goes to a proxy that refuses it). Every screen is printed as capture-pane read
it: the closing note of issue 34 quotes them.

    python tests/tmux_stack.py [--keep DIR] [--size 80x24]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.recorded_pypi import ProxyTrap, RecordedIndex
from tests.tmux_defects import FACTS, PACKAGES, back_tab, fail, settled
from tests.tmux_walkthrough import Walk


def walk(workdir: Path, size: str) -> None:
    with RecordedIndex() as pypi, ProxyTrap() as trap:
        env = {"UV_OFFLINE": "0", "UV_DEFAULT_INDEX": pypi.url, **trap.env()}
        w = Walk(workdir, FACTS, size, no_color=False, env=env)
        try:
            w.wait(r"2 \u00d7 NVIDIA RTX PRO 6000")
            w.keys("Enter")
            w.wait(r"NVIDIA driver: ✓ already satisfied")
            w.keys("Enter")
            w.wait(r"(?m)^ CUDA toolkit")
            w.keys("Enter")
            w.wait(r"(?m)^ Python venv with PyTorch")
            back_tab(w, 2)  # Index URL, More packages
            w.keys(PACKAGES, literal=True)
            w.wait(rf"More packages\s+{PACKAGES}")
            w.keys("Enter")  # accepted: uv resolves them with torch, the focus on Index URL
            w.wait(r"uv is resolving \(\d+ s so far\)")
            w.wait(r"locked by uv|uv refused", timeout=240)
            w.keys("Tab")  # Continue
            settled(w, r"Enter continue")
            w.keys("Enter")
            w.wait(r"(?m)^ CUDA extensions")
            w.keys("a")  # the version box of the first extension mlsetup knows: flash-attn
            time.sleep(1.0)
            w.keys("2.8.3", literal=True)
            w.keys("Enter")  # flash-attn bounds torch: uv resolves the stack again
            w.wait(r"flash-attn 2\.8\.3: compute 12\.0")
            w.keys("4")  # Venv again: uv resolving the stack with flash-attn, then its lock
            w.wait(r"uv is resolving|locked by uv|uv refused")
            venv = w.wait(r"locked by uv|uv refused", timeout=240)
            if "uv refused" in venv:  # flash-attn's bound makes a lock: say uv's words
                fail("uv refused the stack with flash-attn", venv)
            w.keys("6")
            review = w.wait(r"The plan: (\d+ action\(s\) to run|refused)")
            if "refused" not in review.split("\n")[1]:  # the heading: a plan to walk
                w.keys("Enter")
                w.wait(r"DRY RUN: walk \d+ actions")
                w.keys("End")
                w.wait(r"Tab, then Enter, starts the dry run")
                w.keys("Tab")
                time.sleep(0.3)
                w.keys("Enter")
                w.wait(r"The dry run has ended: nothing ran", timeout=120)
                w.keys("Enter")
                w.wait(r"Dry run complete: \d+ actions would run")
            w.keys("C-q")
            w.wait(r"WIZARD-EXIT=0")
        finally:
            w.close()
        if trap.requests:
            fail(f"uv fetched from outside the recorded index: {trap.requests}", "")
    print("stack walk OK")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="80x24")
    p.add_argument("--keep", type=Path, help="work in DIR (kept) instead of a temporary one")
    args = p.parse_args()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        walk(args.keep.resolve(), args.size)
    else:
        with tempfile.TemporaryDirectory(prefix="mlsetup-walk-") as tmp:
            walk(Path(tmp), args.size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
