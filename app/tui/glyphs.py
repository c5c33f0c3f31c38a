"""Marks the wizard draws, with ASCII stand-ins for consoles that lack the glyphs (TERM=linux)."""

from __future__ import annotations

import os

from steps.core.settings import settings_from

PLAIN_TERMS = ("linux", "vt100", "vt102", "vt220", "dumb", "ansi")


def plain_terminal(environ: dict[str, str] | None = None) -> bool:
    """A console with few glyphs and 8 colours: the Linux VT, serial consoles."""
    env = os.environ if environ is None else environ
    if settings_from(env).ascii:
        return True
    return env.get("TERM", "") in PLAIN_TERMS


class Glyphs:
    def __init__(self, plain: bool) -> None:
        self.plain = plain
        fancy = {
            "pending": "·",
            "running": "▶",
            "done": "✓",
            "already-done": "✓",
            "satisfied": "✓",
            "dry-run": "○",
            "failed": "✗",
            "offline": "!",
            "reboot": "⟳",
            "sep": "\u203a",
            "arrow": "→",
            "bar": "█",
            "bar_empty": "░",
            "warn": "!",
            "dot": "\u00b7",
            "times": "\u00d7",
            "more": "\u2026",
            "rule": "\u2500\u2500",
        }
        ascii_ = {
            "pending": ".",
            "running": ">",
            "done": "+",
            "already-done": "+",
            "satisfied": "+",
            "dry-run": "o",
            "failed": "x",
            "offline": "!",
            "reboot": "R",
            "sep": ">",
            "arrow": "->",
            "bar": "#",
            "bar_empty": "-",
            "warn": "!",
            "dot": "-",
            "times": "x",
            "more": "...",
            "rule": "--",
        }
        self._map = ascii_ if plain else fancy

    def __getitem__(self, name: str) -> str:
        return self._map.get(name, "?")

    def status(self, status: str) -> str:
        return self[status]
