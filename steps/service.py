"""Start the engine so that it outlives the SSH session that asked for it.

Under systemd (PID 1) the engine runs as a transient unit, which also keeps its
output in the journal; elsewhere (containers, some VMs) it is a detached
process in a session of its own. Either way, killing the viewer never kills the
work: the viewer only reads the event stream.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

from steps.paths import Paths
from steps.rootfs import RootFS

UNIT = "mlsetup-apply"


def engine_argv(args: list[str]) -> list[str]:
    """The command that runs the engine in the foreground with these `mlsetup apply` args."""
    return [sys.executable, "-m", "app.cli", "apply", *args, "--foreground"]


def start_detached(fs: RootFS, args: list[str]) -> str:
    """Start `mlsetup apply ARGS --foreground` detached; returns the ticket its run will carry."""
    ticket = uuid.uuid4().hex
    argv = [*engine_argv(args), "--ticket", ticket]
    paths = Paths(fs)
    paths.log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    systemd_run = shutil.which("systemd-run")
    if fs.is_host and systemd_run and Path("/run/systemd/system").is_dir():
        subprocess.run(
            [systemd_run, f"--unit={UNIT}-{ticket[:8]}", "--collect", "--quiet", *argv],
            check=True,
            stdin=subprocess.DEVNULL,
        )
        return ticket
    log = (paths.log_dir / "engine.log").open("ab")
    os.chmod(paths.log_dir / "engine.log", 0o600)
    subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
        cwd="/",
        close_fds=True,
    )
    log.close()
    return ticket
