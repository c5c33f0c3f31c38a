"""The GNU make jobserver the memory governor hands ninja: a FIFO of tokens, one byte per job
beyond ninja's implicit one. ninja >= 1.13 run without `-j` under
`MAKEFLAGS=--jobserver-auth=fifo:PATH` starts a job only while it holds a token from that FIFO,
so the tokens written are a hard ceiling on how many jobs ninja starts."""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path

from steps.core.safefs import open_dir, trusted_dir

# torch.utils.cpp_extension turns a digits-only MAX_JOBS into `ninja -j N`, and flash-attn 2.8.3
# computes (and exports) its own digits-only MAX_JOBS only when the variable is unset. A set,
# non-digit value therefore leaves ninja without -j, which is what makes it obey the jobserver.
MAX_JOBS_UNDER_GOVERNOR = "governed"


class Jobserver:
    """The FIFO ninja takes tokens from; one byte is one job beyond ninja's implicit one.

    It lives in a directory of its own inside `runtime`, a directory only root can write (the
    engine's is /run/mlsetup; None: a private one made here), so no other account can rename or
    replace anything root later unlinks; only the FIFO itself is handed to the compiling
    account. That directory's descriptor holds an flock while the governor lives: the next
    governor to start removes the directories of those that died (kill -9), not of live ones."""

    def __init__(self, runtime: Path | None) -> None:
        self._private = runtime is None
        runtime = runtime or Path(tempfile.mkdtemp(prefix="mlsetup-governor-"))
        self._runtime_fd = trusted_dir(runtime, {os.geteuid()}, mode=0o711)
        os.fchmod(self._runtime_fd, 0o711)  # others pass through to their FIFO, list nothing
        self.name = f"jobserver-{secrets.token_hex(8)}"
        with _flocked(self._runtime_fd):  # no sweep between our mkdir and our lock
            _remove_dead_jobservers(self._runtime_fd)
            os.mkdir(self.name, 0o711, dir_fd=self._runtime_fd)
            self._dir_fd = open_dir(self.name, dir_fd=self._runtime_fd)
            fcntl.flock(self._dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.path = runtime / self.name / "fifo"
        os.mkfifo("fifo", 0o600, dir_fd=self._dir_fd)
        # Opened read-write by the governor itself: ninja's open never blocks waiting for a
        # peer, our writes never block, and ninja never sees end-of-file between jobs.
        self._fd = os.open(
            "fifo", os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self._dir_fd
        )
        self.issued = 0  # tokens in circulation: in the FIFO or held by ninja

    def env(self) -> dict[str, str]:
        """Variables the build command needs so that its ninja obeys this jobserver."""
        return {
            "MAKEFLAGS": f"--jobserver-auth=fifo:{self.path}",
            "MAX_JOBS": MAX_JOBS_UNDER_GOVERNOR,
        }

    def share_with(self, uid: int, gid: int) -> None:
        os.fchown(self._fd, uid, gid)  # the FIFO alone: its directory stays root's

    def set_jobs(self, jobs: int) -> None:
        want = max(jobs - 1, 0)
        if want > self.issued:
            self.issued += os.write(self._fd, b"+" * (want - self.issued))
        elif want < self.issued:
            # A token can only be taken back while it sits in the FIFO (ninja returns each one
            # when its job ends, and takes it again at once if it has work), so reclaiming is
            # opportunistic: whatever is there now, the rest on a later call.
            with contextlib.suppress(BlockingIOError):
                self.issued -= len(os.read(self._fd, self.issued - want))

    def close(self) -> None:
        os.close(self._fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink("fifo", dir_fd=self._dir_fd)
        os.close(self._dir_fd)
        with contextlib.suppress(OSError):
            os.rmdir(self.name, dir_fd=self._runtime_fd)
        if self._private:
            with contextlib.suppress(OSError):
                os.rmdir(self.path.parent.parent)
        os.close(self._runtime_fd)


@contextlib.contextmanager
def _flocked(fd: int) -> Iterator[None]:
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _remove_dead_jobservers(runtime_fd: int) -> None:
    """Remove the jobserver directories in `runtime_fd` whose governor is gone (no flock)."""
    for name in os.listdir(runtime_fd):
        if not name.startswith("jobserver-"):
            continue
        try:
            fd = open_dir(name, dir_fd=runtime_fd)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            for entry in os.listdir(fd):
                os.unlink(entry, dir_fd=fd)  # never follows: only root could have put it there
            os.rmdir(name, dir_fd=runtime_fd)
        except OSError:  # locked: its governor is alive (or another start just removed it)
            pass
        finally:
            os.close(fd)
