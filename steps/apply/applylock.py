"""One apply at a time: the flock on /var/lib/mlsetup/apply.lock, held for an engine's life."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from steps.core.errors import AlreadyRunningError


class ApplyLock:
    """One apply at a time: an exclusive flock held for the engine's whole life."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def holder(self) -> int | None:
        """The pid of the running apply, or None."""
        if not self.path.exists():
            return None
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = self.path.read_text().strip()
            return int(text) if text.isdigit() else 0
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    @property
    def fd(self) -> int | None:
        return self._fd

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise AlreadyRunningError(already_running_message(self.holder())) from None
        self._fd = fd
        self._mark()

    def adopt(self, fd: int) -> None:
        """Hold the lock the starter took and handed over (steps.apply.service.take_lock): the same
        open file, so it is held already and the flock only confirms it."""
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._fd = fd
        self._mark()

    def _mark(self) -> None:
        """Write the holder's pid into the lock file, for the "already running" message."""
        assert self._fd is not None
        with contextlib.suppress(OSError):  # a full disk: the lock holds all the same
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, str(os.getpid()).encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def already_running_message(pid: int | None) -> str:
    return (
        f"another mlsetup apply is running (pid {pid or 'unknown'}); "
        "follow it with: sudo mlsetup attach"
    )
