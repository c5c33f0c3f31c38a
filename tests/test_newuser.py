"""A new user's first hour: what mlsetup runs as a normal user uses that user's HOME, a failed
run goes on with changed answers as its "next:" line says, the report names what failed, and a
dry run ends saying that nothing changed."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from steps.plan import Action
from steps.rootfs import RootFS
from steps.runner import Runner

NOBODY = 65534


def as_a_user(work: Callable[[], str]) -> str:
    """`work()` in a child process that is not root (root drops to nobody; a user already is
    one), and what it returned."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            os.write(write, work().encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        text = f.read()
    os.waitpid(pid, 0)
    return text


def test_a_command_of_no_account_runs_with_the_home_of_the_account_running_mlsetup():
    """`mlsetup plan` as a user resolves with uv, an action of no account: it gets that user's
    HOME (uv's cache and Pythons live under it), not root's /root, which the user cannot
    write; and root's own runs get root's."""
    base = Path(tempfile.mkdtemp(prefix="mlsetup-home-"))
    base.chmod(0o777)  # the child that is not root writes the action's log here

    def environment() -> str:
        runner = Runner(RootFS(base), lambda event: None, environ={"PATH": "/usr/bin:/bin"})
        action = Action(id="env", title="its environment", argv=["env"])
        result = runner.run(action, base / "logs" / f"env-{os.geteuid()}.log")
        return "\n".join(result.tail)

    try:
        as_user = dict(line.split("=", 1) for line in as_a_user(environment).splitlines())
        user = pwd.getpwuid(NOBODY if os.geteuid() == 0 else os.geteuid())
        assert as_user["HOME"] == user.pw_dir and as_user["USER"] == user.pw_name, as_user
        assert as_user["HOME"] != "/root" or user.pw_uid == 0
        if os.geteuid() == 0:
            as_root = dict(line.split("=", 1) for line in environment().splitlines())
            assert as_root["HOME"] == pwd.getpwuid(0).pw_dir and as_root["USER"] == "root"
    finally:
        shutil.rmtree(base)
