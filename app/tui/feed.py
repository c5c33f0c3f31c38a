"""Engine events into the wizard, from whichever thread reads them.

The engine (a dry run in a thread, or the detached apply whose event log a thread follows,
app.follower) calls `EngineFeed` as its sink. Every event except `Output` is posted at once
as an `EngineFeed.Event` message, in order, to the Run screen (app.tui.running). Output
lines are only appended to a bounded buffer; the app drains it on a timer (`flush`), so a
compiler printing thousands of lines a second costs one message per tick, and when the
screen cannot keep up the oldest lines are dropped from the pane (never from the log file
on disk).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from textual.message import Message

from steps.core.printable import printable, printable_event
from steps.formats import events as ev

PENDING_LINES = 2000  # lines held between two flushes: what the pane shows, no more


class EngineFeed:
    class Event(Message, bubble=False):
        """One engine event (anything but output lines)."""

        def __init__(self, event: ev.Event) -> None:
            super().__init__()
            self.event = event

    class Lines(Message, bubble=False):
        """Output lines of one action, in order; `dropped` lines were skipped to keep up."""

        def __init__(self, action: str, lines: list[str], dropped: int = 0) -> None:
            super().__init__()
            self.action = action
            self.lines = lines
            self.dropped = dropped

    class Lost(Message, bubble=False):
        """The stream ended without a Finished event: the engine died, or never started."""

        def __init__(self, why: str) -> None:
            super().__init__()
            self.why = why

    def __init__(self, post: Callable[[Message], object], pending: int = PENDING_LINES) -> None:
        self._post = post
        self._lock = threading.Lock()
        self._action = ""
        self._lines: deque[str] = deque(maxlen=pending)
        self._count = 0  # lines appended since the last flush (dropped = count - kept)

    def __call__(self, event: ev.Event) -> None:
        with self._lock:
            if isinstance(event, ev.Output):
                if event.action != self._action:
                    self._flush_locked()
                    self._action = event.action
                self._lines.append(printable(event.line))
                self._count += 1
                return
            self._flush_locked()
            self._post(EngineFeed.Event(printable_event(event)))

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def lost(self, why: str) -> None:
        with self._lock:
            self._flush_locked()
            self._post(EngineFeed.Lost(printable(why)))

    def _flush_locked(self) -> None:
        if self._lines:
            lines = list(self._lines)
            self._post(EngineFeed.Lines(self._action, lines, self._count - len(lines)))
            self._lines.clear()
        self._count = 0
