"""Start the engine so that it outlives the SSH session that asked for it.

Under systemd (PID 1) the engine runs as a transient unit, which also keeps its
output in the journal; elsewhere (containers, some VMs) it is a detached
process in a session of its own. Either way, killing the viewer never kills the
work: the viewer only reads the event stream.

A unit starts with systemd's bare environment, so the environment the run needs
(steps.run.runner.carried_environment: the invoking user, PATH, proxies, mlsetup's
settings) is handed over in a root-only file the engine takes at its start.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

from steps.core.errors import InputError, NeedsRootError
from steps.core.nextcommands import RESUME_COMMAND
from steps.core.paths import Paths
from steps.core.rootfs import RootFS
from steps.core.safefs import open_append, read_bounded
from steps.core.sizes import MiB
from steps.formats.state import write_atomic
from steps.run.runner import carried_environment

UNIT = "mlsetup-apply"
RESUME_UNIT = "mlsetup-resume.service"
# An engine takes its handover within seconds of its start; one older than this belongs to an
# engine that never started (it died first), and holds nothing anyone will read again.
STALE_HANDOVER_S = 600
# How long a starter that holds the apply lock waits for its engine to take it over.
LOCK_HANDOVER_S = 60.0


def systemd_booted(fs: RootFS) -> bool:
    """systemd is PID 1 (sd_booted(3): /run/systemd/system exists)."""
    return fs.path("/run/systemd/system").is_dir()


def mlsetup_command() -> list[str]:
    """This installation of mlsetup as an absolute command, for the detached engine and the
    resume unit: the console script installed beside this interpreter (install.sh's
    /opt/mlsetup/bin/mlsetup, whatever MLSETUP_BINDIR links to it; a pipx, `uv tool` or venv
    install). Where there is none (`pip install --user`, a system pip), this interpreter with the
    module, -P so that no `app/` package in the working directory (a container's /app) stands in
    for ours. Python 3.10 has no -P; its -I leaves the working directory out too, but the user
    site as well, so there a `pip install --user` of mlsetup cannot start its own engine: install
    it with install.sh, pipx or into a venv."""
    script = Path(sys.executable).parent / "mlsetup"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    safe_path = "-P" if sys.version_info >= (3, 11) else "-I"
    return [sys.executable, safe_path, "-m", "app.cli"]


def engine_argv(args: list[str]) -> list[str]:
    """The command that runs the engine in the foreground with these `mlsetup apply` args."""
    return [*mlsetup_command(), "apply", *args, "--foreground"]


def resume_unit() -> str:
    """The one-shot resume unit (assets/systemd), its ExecStart naming this installation."""
    template = (resources.files("assets") / "systemd" / RESUME_UNIT).read_text()
    command = " ".join(_unit_word(word) for word in mlsetup_command())
    return template.replace("@MLSETUP@", command)


def _unit_word(word: str) -> str:
    """One word of an ExecStart= line, quoted as systemd.service(5) reads it ("%" is a specifier
    there, "%%" a percent sign; "$$" a dollar sign)."""
    word = word.replace("%", "%%").replace("$", "$$")
    if word and all((c.isascii() and c.isalnum()) or c in "/._-+:@%$" for c in word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def start_detached(fs: RootFS, args: list[str], lock_fd: int | None = None) -> str:
    """Start `mlsetup apply ARGS --foreground` detached; returns the ticket its run will carry.

    `lock_fd`: the apply lock, already taken by the caller. It is handed to the engine (the
    same open file, so the lock never lapses in between) before this returns; a unit started
    by systemd inherits no descriptor, so it goes over a root-only socket (`take_lock`)."""
    if lock_fd is None:
        return _launch(fs, args, uuid.uuid4().hex)
    ticket = uuid.uuid4().hex
    listener = _lock_listener(fs, ticket)
    try:
        _launch(fs, args, ticket)
        _hand_lock(listener, lock_fd)
    finally:
        listener.close()
        _lock_socket(fs, ticket).unlink(missing_ok=True)
    return ticket


def _launch(fs: RootFS, args: list[str], ticket: str) -> str:
    argv = [*engine_argv(args), "--ticket", ticket]
    paths = Paths(fs)
    paths.log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    for stale in paths.handovers():
        with contextlib.suppress(FileNotFoundError):  # an engine may take it meanwhile
            if time.time() - stale.lstat().st_mtime > STALE_HANDOVER_S:
                _remove(stale)
    write_atomic(paths.handover(ticket), json.dumps(carried_environment(os.environ)))
    fd, _ = open_append(paths.log_dir / "engine.log")  # anything else there: set aside
    with os.fdopen(fd, "ab") as log:
        systemd_run = shutil.which("systemd-run")
        if systemd_run and systemd_booted(fs):
            unit = [systemd_run, f"--unit={UNIT}-{ticket[:8]}", "--collect", "--quiet", *argv]
            started = subprocess.run(unit, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            if started.returncode == 0:
                return ticket
            # systemd refused (no D-Bus in a chroot, a policy): the work still has to run, and
            # a session of its own keeps it alive just as well; why is in engine.log.
        subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            cwd="/",
            close_fds=True,
        )
    return ticket


def _lock_socket(fs: RootFS, ticket: str) -> Path:
    # In root's own directory (0700): no other account can connect and take the lock.
    return Paths(fs).state_dir / f"lock-{ticket[:16]}.sock"


@contextlib.contextmanager
def _socket_address(path: Path) -> Iterator[str]:
    """`path` as a Unix socket address. sun_path holds 107 bytes; under a deep --root (a test
    root, a container's) the path can be longer, so it is then reached through a descriptor of
    its directory (/proc/self/fd/N/NAME, which bind and connect resolve like any path)."""
    if len(os.fsencode(path)) < 100:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def _lock_listener(fs: RootFS, ticket: str) -> socket.socket:
    path = _lock_socket(fs, ticket)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with _socket_address(path) as address:
            listener.bind(address)
        os.chmod(path, 0o600)
        listener.listen(1)
    except BaseException:
        listener.close()
        raise
    return listener


def _hand_lock(listener: socket.socket, lock_fd: int) -> None:
    """Give the lock to the first engine that asks (an engine that lost its start's handover
    never asks), and wait until it says it holds it. Past LOCK_HANDOVER_S the caller lets go
    of it: an engine that starts later takes the lock itself, or finds it taken and stops."""
    listener.settimeout(LOCK_HANDOVER_S)
    with contextlib.suppress(OSError):  # a timeout included: the viewer then explains
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(LOCK_HANDOVER_S)
            socket.send_fds(conn, [b"lock"], [lock_fd])
            conn.recv(16)  # its acknowledgement, or end-of-file if it died taking it


def take_lock(fs: RootFS, ticket: str) -> int | None:
    """In the detached engine: the apply lock its starter holds for it (a descriptor of the
    same open file), None if the starter handed none (the engine then takes it itself)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        try:
            with _socket_address(_lock_socket(fs, ticket)) as address:
                conn.connect(address)
            _, fds, _, _ = socket.recv_fds(conn, 16, 1)
        except OSError:
            return None
        if not fds:
            return None
        os.set_inheritable(fds[0], False)  # no command the engine runs may hold the lock
        with contextlib.suppress(OSError):
            conn.sendall(b"ok")
        return fds[0]


def take_handover(fs: RootFS, ticket: str) -> bool:
    """In the detached engine: restore the environment its starter handed over. False when
    another engine of the same start took it first: should systemd-run report a failure for a
    unit it did start, the fallback process starts too, and only one of them may run."""
    path = Paths(fs).handover(ticket)
    claimed = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        os.rename(path, claimed)  # atomic: exactly one taker
    except FileNotFoundError:
        return False
    except PermissionError as exc:
        raise NeedsRootError("the engine runs as root: start it with sudo mlsetup apply") from exc
    try:
        environment = _handover_environment(claimed, path)
    finally:
        _remove(claimed)
    os.environ.update(carried_environment(environment))  # the filter its starter applied
    return True


def _remove(path: Path) -> None:
    """A handover file, or whatever took its name (a directory, a FIFO, a link: removed as
    the name, never followed)."""
    try:
        path.unlink()
    except IsADirectoryError:
        shutil.rmtree(path, ignore_errors=True)


MAX_HANDOVER_BYTES = 1 * MiB  # an environment is kilobytes; the kernel caps it near 2 MiB


def _handover_environment(claimed: Path, shown: Path) -> dict[str, str]:
    """The environment in a claimed handover file: a regular file (never a FIFO or a link to
    /dev/zero), bounded, a JSON object of strings; InputError (state) naming it otherwise."""

    def refused(why: str) -> InputError:
        return InputError(
            f"{shown}: {why}; allowed: the JSON object of strings mlsetup apply writes there. "
            f"Start the setup again: {RESUME_COMMAND}",
            kind="state",
        )

    try:
        data = read_bounded(claimed, MAX_HANDOVER_BYTES)
    except OSError as exc:
        raise refused(exc.strerror or str(exc)) from None
    try:
        environment = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise refused(f"not JSON ({str(exc)[:80]})") from None
    if not isinstance(environment, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in environment.items()
    ):
        raise refused("not a JSON object of strings")
    return environment
