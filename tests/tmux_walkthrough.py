#!/usr/bin/env python3
"""Drive `mlsetup --dry-run --facts <RTX PRO 6000 box>` in tmux at 80x24 as a person would:
send keys, read the screen (capture-pane), walk every screen to the Summary (a value refused
in place and Esc taking it back, the key bar, the dry run's own confirmation), save the
answers, quit; then check `mlsetup plan --answers <saved>` plans the same actions. With
--no-color the wizard runs under NO_COLOR=1: the refused field must be marked, not only dim.

    python tests/tmux_walkthrough.py [--keep DIR] [--facts FILE] [--size 80x24] [--no-color]

Prints every screen it saw; exits 0 when the walk worked, 1 with the last screen if not.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SESSION = f"mlsetup-walk-{os.getpid()}"


class Walk:
    """`mlsetup --dry-run --facts FACTS [ARGS]` in a tmux session of `size`, run in `workdir`
    with `env` added to the environment."""

    def __init__(
        self,
        workdir: Path,
        facts: Path,
        size: str,
        no_color: bool,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.screens: list[str] = []
        self.width, self.height = (int(n) for n in size.split("x"))
        width, height = size.split("x")
        colour = "NO_COLOR=1 " if no_color else ""
        extra = "".join(f"{k}={shlex.quote(v)} " for k, v in (env or {}).items())
        more = "".join(f" {shlex.quote(a)}" for a in args)
        cmd = (
            f"cd {shlex.quote(str(workdir))} && TERM=xterm-256color {colour}{extra}"
            f"PYTHONPATH={shlex.quote(str(REPO))} {shlex.quote(sys.executable)} -m app.cli "
            f"--dry-run --facts {shlex.quote(str(facts))}{more}; echo WIZARD-EXIT=$?; sleep 30"
        )
        subprocess.run(
            ["tmux", "new-session", "-d", "-s", SESSION, "-x", width, "-y", height, cmd],
            check=True,
        )

    def screen(self) -> str:
        out = subprocess.run(
            ["tmux", "capture-pane", "-p", "-t", SESSION], capture_output=True, text=True
        )
        return out.stdout

    def check_fits(self, text: str) -> None:
        """The key bar is the last row, whole (its help entry is never left off), and no row
        is wider than the terminal. The bar follows the focus: a loaded machine may still be
        drawing it, so it is read again for a few seconds."""
        deadline = time.monotonic() + 5
        while not re.search(r"(\?|F1) help", text.rstrip("\n").split("\n")[-1]):
            if time.monotonic() > deadline:
                break
            time.sleep(0.3)
            text = self.screen()
        rows = text.rstrip("\n").split("\n")
        if len(rows) > self.height or any(len(r) > self.width for r in rows):
            print(f"the screen is not {self.width}x{self.height}:\n{text}")
            raise SystemExit(1)
        if not re.search(r"(\?|F1) help", rows[-1]):
            print(f"no help in the key bar (the last row): {rows[-1]!r}")
            raise SystemExit(1)

    def keys(self, *keys: str, literal: bool = False) -> None:
        args = ["tmux", "send-keys", "-t", SESSION, *(["-l"] if literal else []), *keys]
        subprocess.run(args, check=True)
        time.sleep(0.15)

    def wait(self, pattern: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if re.search(pattern, text):
                time.sleep(0.6)  # let the screen settle (focus too), then keep what a person sees
                text = self.screen()
                self.screens.append(text)
                print(f"----- {pattern} -----\n{text}", flush=True)
                return text
            if time.monotonic() > deadline:
                print(f"----- timed out waiting for {pattern!r}; the screen: -----\n{text}")
                raise SystemExit(1)
            time.sleep(0.2)

    def pick_build(self, build: str) -> None:
        """On the Venv screen, Continue focused: Shift+Tab up to "torch build", open the
        dropdown, type the build's name (type-to-search), Enter. One key at a time: a loaded
        machine may still be drawing the previous key (or recomputing the screen)."""
        time.sleep(1.5)
        for key in ("BTab", "BTab", "BTab", "Enter"):
            self.keys(key)
            time.sleep(0.4)
        self.keys(build, literal=True)
        time.sleep(0.6)
        self.keys("Enter")

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)


def walk(workdir: Path, facts: Path, size: str, no_color: bool = False) -> None:
    w = Walk(workdir, facts, size, no_color)
    try:
        w.wait(r"What the probe found on rtx-pro-6000")
        w.check_fits(w.wait(r"2 \u00d7 NVIDIA RTX PRO 6000"))
        w.keys("Enter")
        w.check_fits(w.wait(r"NVIDIA driver: ✓ already satisfied"))
        # Shift+Tab from Continue up to Branch; a branch too old is refused in place, marked
        # with "!" (under NO_COLOR too), the focus stays there; Esc takes the edit back
        time.sleep(1.0)
        for key in ("BTab", "BTab", "BTab"):
            w.keys(key)
            time.sleep(0.3)
        w.keys("12", literal=True)
        w.keys("Enter")
        refused = w.wait(r'driver\.branch = "12": allowed')
        if not re.search(r"! Branch\s+12", refused) or "Esc cancel edit" not in refused:
            print("the refused field is not marked, or Esc is not offered to cancel it")
            raise SystemExit(1)
        w.keys("Escape")
        w.wait(r"Branch\s+auto")
        w.keys("Tab")  # the focus on the next field, a list: a digit jumps again
        time.sleep(0.4)
        w.keys("3")
        w.wait(r"CUDA toolkit\(s\): to do")
        w.wait(r"Installed: CUDA 13.1")
        w.keys("Enter")
        w.wait(r"Python venv with PyTorch")
        w.keys("Enter")
        w.wait(r"CUDA extensions")
        # add flash-attn 2.8.3: `a` focuses the version box (flash-attn is the first name)
        w.keys("a")
        time.sleep(1.0)  # digits typed before the version box has the focus would jump
        w.keys("2.8.3", literal=True)
        w.keys("Enter")
        w.wait(r"flash-attn 2.8.3: compute 12.0")
        # jump back by number to Venv, choose cu128, Back: Toolkit recomputed (CUDA 12.8)
        w.keys("4")
        w.wait(r"torch: torch==\S+ \(cu130 build\)")
        w.pick_build("cu128")
        w.wait(r"cu128 build")
        w.keys("Escape")
        w.wait(r"Wanted: 12\.8; torch is built with CUDA 12\.8")
        # forward by number to Venv again, back to auto; 2 to Driver; 6 to Review
        w.keys("4")
        w.wait(r"torch: torch==\S+ \(cu128 build\)")
        w.pick_build("auto")
        w.wait(r"cu130 build")
        w.keys("2")  # the dropdown (closed) has the focus: number keys jump
        w.wait(r"to run torch's CUDA 13\.0")
        w.keys("6")
        review = w.wait(r"The plan: \d+ action\(s\) to run")
        w.check_fits(review)
        shown = int(re.search(r"The plan: (\d+) action", review).group(1))
        w.keys("F1")
        w.wait(r"Help: The plan")
        w.keys("Escape")
        w.wait(r"The plan:")
        # the dry run asks what a real apply asks, marked as a dry run; Cancel has the focus,
        # End reads to the end, then Tab and Enter start it
        w.keys("Enter")
        w.wait(rf"DRY RUN: walk {shown} actions")
        w.keys("End")
        w.wait(r"Tab, then Enter, starts the dry run")
        w.keys("Tab")
        time.sleep(0.3)
        w.keys("Enter")
        run = w.wait(r"The dry run has ended: nothing ran")
        w.check_fits(run)
        if f"a real apply runs {shown} actions" not in run.replace("\n", " "):
            print("the Run screen does not say what a real apply runs")
            raise SystemExit(1)
        w.keys("Enter")
        summary = w.wait(rf"Dry run complete: {shown} actions would run")
        w.check_fits(summary)
        if "Use the venv" in summary:
            print("the dry run's Summary offers a venv that does not exist")
            raise SystemExit(1)
        w.keys("C-s")
        w.wait(r"Save answers")
        w.keys("Enter")
        w.wait(r"Saved to")
        w.keys("C-q")
        w.wait(r"WIZARD-EXIT=0")
    finally:
        w.close()

    saved = workdir / "mlsetup-answers.toml"
    plan = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "plan",
            "--json",
            "--answers",
            str(saved),
            "--facts",
            str(facts),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    actions = [a["id"] for s in json.loads(plan.stdout)["steps"] for a in s["actions"]]
    print(f"----- mlsetup plan --answers {saved}: {len(actions)} action(s) -----")
    print("\n".join(actions))
    if len(actions) != shown:
        print(f"the wizard showed {shown} action(s); the replayed plan has {len(actions)}")
        raise SystemExit(1)
    flash = [a for a in actions if a.startswith("extensions.flash-attn.")]
    if not flash:
        print("the saved answers lost flash-attn")
        raise SystemExit(1)
    print("walkthrough OK: every screen, the summary, and the saved answers replay")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--facts", type=Path, default=REPO / "assets/machines/rtx-pro-6000-ubuntu2404.json"
    )
    p.add_argument("--size", default="80x24")
    p.add_argument("--keep", type=Path, help="work in DIR (kept) instead of a temporary one")
    p.add_argument("--no-color", action="store_true", help="run the wizard under NO_COLOR=1")
    args = p.parse_args()
    if shutil.which("tmux") is None:
        print("tmux is not installed")
        return 2
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        walk(args.keep, args.facts.resolve(), args.size, args.no_color)
    else:
        with tempfile.TemporaryDirectory(prefix="mlsetup-walk-") as tmp:
            walk(Path(tmp), args.facts.resolve(), args.size, args.no_color)
    return 0


if __name__ == "__main__":
    sys.exit(main())
