"""The Linux console (TERM=linux): ASCII only. A line filter gives every character that
reaches the screen a one-cell ASCII stand-in (so widths, and the layout, do not change), and
scrollbars are drawn as reverse-video spaces instead of eighth blocks."""

from __future__ import annotations

import unicodedata

from rich.segment import Segment
from textual.color import Color
from textual.filter import LineFilter
from textual.scrollbar import ScrollBarRender

ONE_CELL = {
    "\u2026": ".",
    "\u00b7": "-",
    "\u00d7": "x",
    "\u2192": ">",
    "\u2190": "<",
    "\u2191": "^",
    "\u2193": "v",
    "\u25bc": "v",
    "\u25b2": "^",
    "\u25b6": ">",
    "\u2713": "+",
    "\u2717": "x",
    "\u27f3": "R",
    "\u25cb": "o",
    "\u203a": ">",
    "\u2018": "'",
    "\u2019": "'",
    "\u201c": '"',
    "\u201d": '"',
    "\u2013": "-",
    "\u2014": "-",
    "\u00a0": " ",
    "\u23ce": "<",
}
BLOCKS = " \u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588"  # the sparkline's eighths
BLOCK_ASCII = " _.-:=+*#"


def ascii_char(ch: str) -> str:
    if ch < "\x80":
        return ch
    if ch in ONE_CELL:
        return ONE_CELL[ch]
    if ch in BLOCKS:
        return BLOCK_ASCII[BLOCKS.index(ch)]
    name = unicodedata.name(ch, "")
    if name.startswith("BOX DRAWINGS"):
        return "|" if "VERTICAL" in name and "HORIZONTAL" not in name else "-"
    if "BLOCK" in name or "SHADE" in name:
        return "#"
    if unicodedata.east_asian_width(ch) in ("W", "F"):
        return "??"
    decomposed = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode()
    return decomposed[:1] or "?"


def to_ascii(text: str) -> str:
    return text if text.isascii() else "".join(ascii_char(c) for c in text)


class AsciiFilter(LineFilter):
    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        return [
            seg if seg.text.isascii() else Segment(to_ascii(seg.text), seg.style, seg.control)
            for seg in segments
        ]


class AsciiScrollBarRender(ScrollBarRender):
    VERTICAL_BARS = [" "]  # noqa: RUF012
    HORIZONTAL_BARS = [" "]  # noqa: RUF012
