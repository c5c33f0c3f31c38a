#!/usr/bin/env python3
"""Issue 34's losses of input, walked as a person meets them: keys sent into a real tmux session
running `mlsetup --dry-run --facts <RTX PRO 6000 box>` at 80x24, the screen read back with
capture-pane (tests/tmux_walkthrough.py's Walk).

    python tests/tmux_defects.py WALK [--keep DIR] [--size 80x24]

WALK is one of:
  help-esc  Venv's More packages typed, not entered; F1 Esc, then ctrl+s Esc: the text is still
            there and the focus in it; ctrl+s and a path typed at once save what is shown.
  remove    Extensions, flash-attn chosen: RAM limit 32GiB Enter lands on Continue, not on
            Remove; Remove asks, and a reflex Enter keeps flash-attn.
  digit     Venv: Enter accepts More packages and moves into Index URL; a reflex 6 is typed at
            the end, in sight (not over the value, not a jump); alt+6 jumps to Review.

Prints every screen it saw; exits 0 when the walk went as it should, 1 with the screen if not.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from steps.core.tomlcompat import loads
from tests.tmux_walkthrough import REPO, Walk

FACTS = REPO / "assets/machines/rtx-pro-6000-ubuntu2404.json"
FLASH = 'version = 1\n[[extensions]]\nname = "flash-attn"\nversion = "2.8.3"\n'
PACKAGES = "vllm, transformers, accelerate"


def fail(why: str, screen: str) -> None:
    print(f"{why}; the screen:\n{screen}")
    raise SystemExit(1)


def key_bar(screen: str) -> str:
    return screen.rstrip("\n").split("\n")[-1]


def settled(w: Walk, pattern: str, gone: str = "", timeout: float = 10.0) -> str:
    """The screen once `pattern` is on it (and `gone` is not): the key bar follows the focus
    a moment later, a dialog closes a moment after Esc."""
    deadline = time.monotonic() + timeout
    while True:
        screen = w.screen()
        if re.search(pattern, screen) and not (gone and re.search(gone, screen)):
            return screen
        if time.monotonic() > deadline:
            fail(f"never on screen: {pattern!r}", screen)
        time.sleep(0.3)


def back_tab(w: Walk, times: int) -> None:
    """Shift+Tab from Continue, one key at a time (a loaded machine draws each in turn)."""
    time.sleep(1.0)
    for _ in range(times):
        w.keys("BTab")
        time.sleep(0.4)


def help_esc(w: Walk, workdir: Path) -> None:
    w.wait(r"2 \u00d7 NVIDIA RTX PRO 6000")
    w.keys("4")
    w.wait(r"(?m)^ Python venv with PyTorch")
    back_tab(w, 2)  # Index URL, More packages
    w.keys(PACKAGES, literal=True)
    typed = rf"More packages\s+{PACKAGES}"
    w.wait(typed)
    for key, dialog in (("F1", r"Help: Python venv"), ("C-s", r"Save answers")):
        w.keys(key)
        w.wait(dialog)
        w.keys("Escape")
        screen = settled(w, r"Enter accept", gone=dialog)  # back in the text box
        if not re.search(typed, screen):
            fail(f"after {key} and Esc the typed packages are gone", screen)
        w.wait(typed)
    # ctrl+s, the file's name and Enter in one burst, as a fast typist (or a paste) sends them
    target = workdir / "typed-at-once.toml"
    w.keys("C-s", str(target), "Enter")  # not a key's name: tmux sends the path as typed
    w.wait(r"Saved to")
    saved = loads(target.read_text()) if target.exists() else {}
    if saved.get("torch", {}).get("packages") != [p.strip() for p in PACKAGES.split(",")]:
        fail(f"{target} holds {saved}", w.screen())


def remove(w: Walk, workdir: Path) -> None:
    w.wait(r"2 \u00d7 NVIDIA RTX PRO 6000")
    w.keys("5")
    w.wait(r"Remove flash-attn")
    back_tab(w, 5)  # Add, its version, its name, Remove flash-attn, RAM limit
    w.keys("32GiB", literal=True)
    w.wait(r"RAM limit\s+32GiB")
    w.keys("Enter")
    screen = settled(w, r"Enter continue")
    if "remove" in key_bar(screen).lower():
        fail("Enter after the RAM limit landed on Remove", screen)
    # back to Remove (Shift+Tab past Add's row), Enter: asked, Cancel focused
    back_tab(w, 4)
    settled(w, r"Enter remove flash-attn")
    w.keys("Enter")
    w.wait(r"Remove flash-attn 2\.8\.3 from the extensions to build\?")
    w.keys("Enter")  # a reflex Enter
    screen = settled(w, r"(?m)^ CUDA extensions", gone=r"from the extensions to build\?")
    if "flash-attn 2.8.3: compute 12.0" not in screen.replace("\n", " "):
        fail("a reflex Enter on the question removed flash-attn", screen)
    w.keys("6")
    review = w.wait(r"The plan: \d+ action\(s\) to run")
    if "flash-attn" not in review:
        fail("Review has no flash-attn", review)


def digit(w: Walk, workdir: Path) -> None:
    w.wait(r"2 \u00d7 NVIDIA RTX PRO 6000")
    w.keys("4")
    w.wait(r"(?m)^ Python venv with PyTorch")
    back_tab(w, 2)
    w.keys("vllm", literal=True)
    w.wait(r"More packages\s+vllm")
    w.keys("Enter")  # accepted: the focus moves into Index URL
    settled(w, r"Enter accept")
    time.sleep(0.6)
    w.keys("6")  # meant as "jump to Review"
    screen = settled(w, r"Index URL\s+auto6")
    if not re.search(r"(?m)^ Python venv with PyTorch", screen):
        fail("6 in the Index URL box jumped", screen)
    if "M-1-6 step" not in key_bar(screen):
        fail("the key bar does not say alt+digit jumps from a text box", screen)
    w.keys("BSpace")
    w.wait(r"Index URL\s+auto\s")
    w.keys("M-6")  # alt+6: Esc 6, as a terminal sends it
    w.wait(r"The plan: \d+ action\(s\) to run")


WALKS: dict[str, Callable[[Walk, Path], None]] = {
    "help-esc": help_esc,
    "remove": remove,
    "digit": digit,
}


def walk(name: str, workdir: Path, size: str = "80x24") -> None:
    args: tuple[str, ...] = ()
    if name == "remove":
        answers = workdir / "flash.toml"
        answers.write_text(FLASH)
        args = ("--answers", str(answers))
    w = Walk(workdir, FACTS, size, no_color=False, args=args)
    try:
        WALKS[name](w, workdir)
        w.keys("C-q")
        w.wait(r"WIZARD-EXIT=0")
    finally:
        w.close()
    print(f"walk {name} OK")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("walk", choices=sorted(WALKS))
    p.add_argument("--size", default="80x24")
    p.add_argument("--keep", type=Path, help="work in DIR (kept) instead of a temporary one")
    args = p.parse_args()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        walk(args.walk, args.keep.resolve(), args.size)
    else:
        with tempfile.TemporaryDirectory(prefix="mlsetup-walk-") as tmp:
            walk(args.walk, Path(tmp), args.size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
