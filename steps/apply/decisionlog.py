"""The engine's own account of its decisions: `<run's log directory>/decisions.log`.

The engine's modules log through Python `logging` under `mlsetup.*` (mlsetup.engine,
mlsetup.actions, mlsetup.reboot, mlsetup.builds, mlsetup.stack): what was planned, which
steps were satisfied and why, each action's start and end, resume and lock decisions. Only
a real apply writes the file, root-only like every other log; nothing of it reaches the
console (the events are the operator's view)."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from steps.core.safefs import open_append

ROOT_LOGGER = "mlsetup"
FORMAT = "%(asctime)s.%(msecs)03d %(name)s %(levelname)s %(message)s"

_root = logging.getLogger(ROOT_LOGGER)
_root.addHandler(logging.NullHandler())  # no handler of the process's own: never the console
_root.propagate = False


class _QuietHandler(logging.StreamHandler):
    def handleError(self, record: logging.LogRecord) -> None:
        """A full disk: the run goes on, and says nothing of it on the console (the events
        and the state file say what happened)."""


class DecisionLog:
    """Attaches a root-only file handler to the `mlsetup` loggers for one run's life.

    It never stops a run: anything but root's own file at `path` (a link, a FIFO) is set aside
    and a new one made (steps.core.safefs.open_append); a log that cannot be opened at all is done
    without. `note` says what happened then, for the operator."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.note: str | None = None
        self._handler: _QuietHandler | None = None
        try:
            fd, aside = open_append(path)
        except OSError as exc:
            self.note = f"no decisions log this run: {path}: {exc.strerror or exc}"
            return
        if aside is not None:
            self.note = (
                f"{path} was not a log file of root's own (a link, a FIFO, another account's "
                f"file): moved it to {aside}, unread and unfollowed; the log starts afresh"
            )
        self._handler = _QuietHandler(os.fdopen(fd, "a", encoding="utf-8"))
        self._handler.setFormatter(logging.Formatter(FORMAT, datefmt="%Y-%m-%d %H:%M:%S"))
        _root.addHandler(self._handler)
        _root.setLevel(logging.DEBUG)

    def close(self) -> None:
        if self._handler is None:
            return
        _root.removeHandler(self._handler)
        self._handler.close()
        with contextlib.suppress(OSError):  # a full disk: the unwritten rest is lost, not the run
            self._handler.stream.close()
