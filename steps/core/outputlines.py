"""A command's output cut into lines, each line kept only up to a bound.

A build (or anything another account controls) may write one line of any length without a
newline. Each line goes into the event stream, the tail of the diagnosis and every viewer, so
only its first LINE_KEEP bytes are kept; the rest is counted as it passes and never held.
Each byte is looked at once: the time is linear in the output, the memory bounded by the
bound, whatever the length of a line.
"""

from __future__ import annotations

LINE_KEEP = 64 * 1024


class LineCutter:
    """Fed chunks as they are read, hands back the finished lines (without their newline),
    each cut to `keep` bytes and, when cut, ending "... [N bytes cut]"."""

    def __init__(self, keep: int = LINE_KEEP) -> None:
        self.keep = keep
        self._kept = bytearray()
        self._cut = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        lines: list[bytes] = []
        start = 0
        while True:
            newline = chunk.find(b"\n", start)
            end = len(chunk) if newline < 0 else newline
            self._hold(chunk, start, end)
            if newline < 0:
                return lines
            lines.append(self._take())
            start = newline + 1

    def rest(self) -> bytes | None:
        """What is left after the last newline, once the output has ended (None: nothing)."""
        if not self._kept and not self._cut:
            return None
        return self._take()

    def _hold(self, chunk: bytes, start: int, end: int) -> None:
        kept = min(max(0, self.keep - len(self._kept)), end - start)
        if kept:
            self._kept += chunk[start : start + kept]
        self._cut += end - start - kept

    def _take(self) -> bytes:
        line = bytes(self._kept)
        if self._cut:
            line += f" ... [{self._cut} bytes cut]".encode()
        self._kept.clear()
        self._cut = 0
        return line
