"""Root waiting on a process another account controls, and never without end: one the account
keeps stopped (SIGSTOP, or held under a debugger) is ended after STOPPED_LIMIT_S, and none runs
past its limit (MLSETUP_ACCOUNT_TIMEOUT, steps.core.settings, or a lower one). The runner watches
every command it runs as another account (`AccountWatch`); `call_as` runs a function of
root's in a child that has become an account, bounded the same way."""

from __future__ import annotations

import contextlib
import errno
import os
import select
import time
import warnings
from collections.abc import Callable

import psutil

from steps.core.sizes import duration

STOPPED_LIMIT_S = 10.0
POLL_S = 0.1  # how often `call_as` looks at its child while it has not finished
_STOPPED = (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
_REASON_BYTES = 500  # what a child says of its failure, at most


class AccountWatch:
    """A process of another account's, looked at while root waits on it: `overdue` says why
    it must be ended (past `limit` seconds; it, or with `tree` any process under it, kept
    stopped for STOPPED_LIMIT_S), else None. A build's tree is not looked at: its governor
    stops compile jobs itself (steps.building.throttle) for as long as memory is short."""

    def __init__(self, pid: int, limit: float, tree: bool, set_by: str | None = None) -> None:
        self.pid = pid
        self.limit = limit
        self.tree = tree
        self.set_by = set_by  # the setting `limit` is from, for the message: ACCOUNT_TIMEOUT
        self.start = time.monotonic()
        self.stopped_since: dict[int, float] = {}

    def overdue(self) -> str | None:
        now = time.monotonic()
        if now - self.start >= self.limit:
            by = f" ({self.set_by})" if self.set_by else ""
            return f"ran past its limit of {duration(self.limit)}{by}{self._waiting_on()}"
        stopped = self._stopped()
        self.stopped_since = {pid: self.stopped_since.get(pid, now) for pid in stopped}
        held = [pid for pid, since in self.stopped_since.items() if now - since >= STOPPED_LIMIT_S]
        if not held:
            return None
        how = f"kept stopped (SIGSTOP or a debugger) for {STOPPED_LIMIT_S:.0f} s"
        if self.pid in held:
            return f"was {how}"
        return f"waited on its process {held[0]} ({stopped[held[0]]}), {how}"

    def end(self) -> None:
        """SIGKILL it and what it started (stopped or not): not waited for here, as whoever
        started it still reaps it and reads its exit status."""
        with contextlib.suppress(psutil.Error):
            top = psutil.Process(self.pid)
            for proc in [*top.children(recursive=True), top]:
                with contextlib.suppress(psutil.Error):
                    proc.kill()

    def _waiting_on(self) -> str:
        """The process under it started last (what it waits on, as a rule), for the message."""
        if not self.tree:
            return ""
        try:
            under = psutil.Process(self.pid).children(recursive=True)
            last = max(under, key=lambda p: p.create_time()) if under else None
            return f", waiting on its process {last.pid} ({last.name()})" if last else ""
        except psutil.Error:
            return ""

    def _stopped(self) -> dict[int, str]:
        """The stopped processes looked at, and their names."""
        try:
            top = psutil.Process(self.pid)
            procs = [top, *(top.children(recursive=True) if self.tree else [])]
        except psutil.Error:
            return {}
        out: dict[int, str] = {}
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                if proc.status() in _STOPPED:
                    out[proc.pid] = proc.name()
        return out


def call_as(uid: int, gid: int, work: Callable[[], None], limit: float) -> None:
    """Run `work` in a child that has become the account (uid, gid, no other group): its own
    permissions decide. The child only makes system calls before it exits (no exec: the
    interpreter may live where the account cannot reach). The account may signal that child:
    one kept stopped, or still running after `limit` seconds, is ended. OSError with the
    child's reason when `work` failed, or with why it was ended."""
    read, write = os.pipe()
    with warnings.catch_warnings():  # 3.12+ warns about fork in a threaded process
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            work()
            code = 0
        except OSError as exc:
            os.write(write, (exc.strerror or str(exc)).encode()[:_REASON_BYTES])
        finally:
            os._exit(code)
    os.close(write)
    said, ended = b"", None
    watch = AccountWatch(pid, limit, tree=True)
    try:
        while True:  # until the child closes its end by exiting, or is ended
            if select.select([read], [], [], POLL_S)[0]:
                chunk = os.read(read, _REASON_BYTES)
                if not chunk:
                    break
                said = (said + chunk)[:_REASON_BYTES]
            elif (ended := watch.overdue()) is not None:
                watch.end()
                break
    finally:
        os.close(read)
    _, status = os.waitpid(pid, 0)
    if ended is not None:
        raise OSError(errno.ETIMEDOUT, f"mlsetup's process as uid {uid} {ended}: ended it")
    if os.waitstatus_to_exitcode(status) != 0:
        raise OSError(errno.EACCES, said.decode(errors="replace") or "it failed")
