"""What root is handed or waits on (issue 33): a lock is data, never uv input; the venv owner's
lock.txt and a saved lock are taken as data and only for the account that resolved them; the
system's uv.toml and pip.conf are root's or refused; a damaged environment handover file, a uv
its owner keeps stopped and a read-only /var/lib end with a message, not a traceback or a hang.
Each attack runs against the fake server (real engine as root, real accounts, real uv)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.common import REPO
from tests.harness import USER_UID, FakeServer, wait_for
from tests.test_stack import PYTHON, env, setup, write_answers
from tests.test_uvconfig import UNUSABLE

OTHER_UID = 1001
HASH = "0" * 64
STATE_LOCK = "var/lib/mlsetup/stack.lock"
HEADER = {
    "schema": "mlsetup.lock/1",
    "python": PYTHON,
    "platform": "x86_64-manylinux_2_35",
    "build": "cpu",
    "key": "k",
}


def _no_traceback(run: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in run.stdout + run.stderr, run.stdout + run.stderr


def _lock_text(*extra: str) -> str:
    """A lock as mlsetup writes it (one hashed torch pin), with `extra` lines after it."""
    return (
        f"# mlsetup-lock: {json.dumps(HEADER)}\n"
        f"torch==2.11.0+cpu \\\n    --hash=sha256:{HASH}\n    # via -r requirements.in\n"
        + "".join(f"{line}\n" for line in extra)
    )


def _uv_wrapper(server: FakeServer) -> Path:
    """The server's uv behind a script that logs who runs it and, as the venv's owner, does
    what that account may do to its own uv: append `tamper` to the lock.txt it wrote, keep
    its resolving uv stopped (`stop`), or hold its sync up: stopped (`sync-stops`), waiting on a
    stopped process (`sync-child-stops`) or on one that sleeps an hour (`sync-sleeps`), that
    process's pid in `pid`. Returns the directory of those switches and the log."""
    switches = server.base / "uv-switches"
    switches.mkdir()
    switches.chmod(0o755)
    calls = switches / "calls.log"
    for writable in (calls, switches / "pid"):  # the owner's uv writes them
        writable.touch(mode=0o666)
        writable.chmod(0o666)
    real = server.tools / "uv.real"
    (server.tools / "uv").rename(real)
    wrapper = server.tools / "uv"
    wrapper.write_text(
        f"""#!/bin/sh
echo "$(id -u) $*" >> {calls}
if [ "$(id -u)" != 0 ] && [ "$1 $2" = "pip compile" ] && [ -e {switches}/stop ]; then
    kill -STOP $$
fi
if [ "$(id -u)" != 0 ] && [ "$1 $2" = "pip sync" ]; then
    if [ -e {switches}/sync-stops ]; then echo $$ > {switches}/pid; kill -STOP $$; fi
    if [ -e {switches}/sync-child-stops ]; then
        sh -c 'echo $$ > {switches}/pid; kill -STOP $$'
    fi
    if [ -e {switches}/sync-sleeps ]; then sleep 3600 & echo $! > {switches}/pid; wait; fi
fi
{real} "$@"; rc=$?
if [ "$(id -u)" != 0 ] && [ $rc = 0 ] && [ -e {switches}/tamper ]; then
    out=""; prev=""
    for a in "$@"; do [ "$prev" = "--output-file" ] && out="$a"; prev="$a"; done
    case "$out" in */lock.txt) cat {switches}/tamper >> "$out";; esac
fi
exit $rc
"""
    )
    wrapper.chmod(0o755)
    return switches


def _compiles_by(switches: Path) -> list[int]:
    """The uids that ran `uv pip compile` so far."""
    lines = (switches / "calls.log").read_text().splitlines()
    return [int(line.split()[0]) for line in lines if " pip compile " in f" {line} "]


# -- hole 1: a lock is data ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["find-links", "requirement-fifo"])
def test_a_handed_lock_with_an_option_line_is_refused_naming_it(server: FakeServer, kind: str):
    """venv.lock with `--find-links DIR` and an extra hashed pin (installed and run as root
    before), or with `-r FIFO` (uv hung on it): exit 2 naming the line, nothing runs."""
    lock = server.root / "srv/stack.lock"
    lock.parent.mkdir(parents=True)
    if kind == "find-links":
        evil = server.base / "evil"
        evil.mkdir()
        line = f"--find-links {evil}"
        lock.write_text(_lock_text(line, f"evilpkg==1.0 \\\n    --hash=sha256:{HASH}"))
    else:
        fifo = server.base / "fifo"
        os.mkfifo(fifo)
        line = f"-r {fifo}"
        lock.write_text(_lock_text(line))
    server.write_answers(policy="never", extra="")
    text = server.answers.read_text().replace("[torch]", 'lock = "/srv/stack.lock"\n[torch]', 1)
    server.answers.write_text(text)
    for command in ("plan", "apply"):
        run = server.mlsetup(command, "--answers", str(server.answers), timeout=120)
        _no_traceback(run)
        assert run.returncode == 2, run.stdout + run.stderr
        said = run.stdout + run.stderr
        assert f"venv.lock '/srv/stack.lock': line 5 {line!r}: an option" in said, said
    assert not server.venv.exists()
    assert not any(c.startswith("apt-get") for c in server.commands())


# -- hole 2: the owner's lock.txt, and whose a saved lock is ------------------------------------


def test_the_owners_rewritten_lock_txt_is_refused_not_kept(server: FakeServer):
    index = setup(server, gpu=None)
    write_answers(server, index, ["helper"])
    switches = _uv_wrapper(server)
    (switches / "tamper").write_text(f"--find-links {server.base}\n")
    run = server.mlsetup("apply", "--answers", str(server.answers), **env(index))
    _no_traceback(run)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "the lock uv wrote as mluser: line" in run.stdout, run.stdout
    assert f"'--find-links {server.base}': an option" in run.stdout
    assert server.report()["failure"]["diagnosis"] == "lock-refused"
    assert not (server.root / STATE_LOCK).exists() and not server.venv.exists()
    assert USER_UID in _compiles_by(switches)  # the owner did resolve


def test_a_saved_lock_is_reused_only_for_the_account_that_resolved_it(server: FakeServer):
    """A fleet's lock lands in /var/lib/mlsetup/stack.lock: the account that resolved it reuses
    it; another account's run resolves its own. `lock -o` writes through no link."""
    index = setup(server, gpu=None)
    write_answers(server, index, ["helper"])
    server.machine.user("other", OTHER_UID, server.base / "home" / "other")
    switches = _uv_wrapper(server)
    handed = server.base / "fleet.lock"
    run = server.mlsetup("lock", "--answers", str(server.answers), "-o", str(handed), **env(index))
    assert run.returncode == 0, run.stdout + run.stderr
    saved = server.root / STATE_LOCK
    saved.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(handed, saved)

    before = len(_compiles_by(switches))
    run = server.mlsetup("plan", "--answers", str(server.answers), **env(index))
    assert run.returncode == 0, run.stdout + run.stderr
    assert len(_compiles_by(switches)) == before  # mluser's own lock: reused
    run = server.mlsetup("plan", "--answers", str(server.answers), SUDO_USER="other", **env(index))
    assert run.returncode == 0, run.stdout + run.stderr
    assert OTHER_UID in _compiles_by(switches)[before:]  # not mluser's lock: resolved again

    # -o through a link of another account's, to a root-only directory: not followed
    closed = server.base / "root-only"
    closed.mkdir(mode=0o700)
    link = server.base / "their-dir"
    link.symlink_to(closed)
    os.lchown(link, USER_UID, USER_UID)
    run = server.mlsetup(
        "lock", "--answers", str(server.answers), "-o", str(link / "stack.lock"), **env(index)
    )
    _no_traceback(run)
    assert run.returncode == 2 and "symbolic link of uid 1000" in run.stderr, run.stderr
    assert list(closed.iterdir()) == []

    # a fleet's lock with an option line in it (hole 1 through the saved lock): refused
    saved.write_text(handed.read_text() + f"--find-links {server.base}\n")
    run = server.mlsetup("plan", "--answers", str(server.answers), **env(index))
    _no_traceback(run)
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.startswith(
        "mlsetup: input error (state): /var/lib/mlsetup/stack.lock: line "
    ), run.stderr


# -- hole 3: the system's index settings --------------------------------------------------------


def test_a_pip_conf_of_an_ordinary_account_is_exit_2_before_anything_runs(server: FakeServer):
    os.chown(server.pip_conf, USER_UID, USER_UID)
    for command in ("plan", "apply"):
        run = server.mlsetup(command, "--answers", str(server.answers), timeout=120)
        _no_traceback(run)
        assert run.returncode == 2, run.stdout + run.stderr
        said = run.stdout + run.stderr
        assert f"{server.pip_conf}: belongs to uid 1000, not root" in said, said
    plan = server.mlsetup("plan", "--answers", str(server.answers))
    assert "input error (settings)" in plan.stderr
    assert not server.venv.exists()


@pytest.mark.parametrize("form", list(UNUSABLE))
def test_a_system_uv_toml_root_cannot_use_is_exit_2_naming_it(server: FakeServer, form: str):
    """Each form of /etc/uv/uv.toml that was dropped without a word (the lock then came from
    PyPI): `mlsetup plan` refuses it, naming it."""
    make, why = UNUSABLE[form]
    path = server.root / "etc/uv/uv.toml"
    path.parent.mkdir(parents=True)
    make(path)
    run = server.mlsetup("plan", "--answers", str(server.answers), timeout=120)
    _no_traceback(run)
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.startswith(f"mlsetup: input error (settings): {path}: {why}"), run.stderr


# -- a uv its owner keeps stopped ---------------------------------------------------------------


def test_a_uv_its_owner_keeps_stopped_is_ended_and_the_apply_lock_released(server: FakeServer):
    index = setup(server, gpu=None)
    write_answers(server, index, ["helper"])
    switches = _uv_wrapper(server)
    (switches / "stop").touch()
    run = server.mlsetup("plan", "--answers", str(server.answers), timeout=240, **env(index))
    _no_traceback(run)
    said = run.stdout + run.stderr
    assert "uv pip compile, run as mluser, was kept stopped" in said, said
    run = server.mlsetup("apply", "--answers", str(server.answers), timeout=240, **env(index))
    _no_traceback(run)
    assert run.returncode == 1 and "was kept stopped" in run.stdout, run.stdout
    assert server.report()["failure"]["diagnosis"] == "held-up"
    assert server.apply_lock_free()
    assert not server.venv.exists()


HOLD_UPS = {
    "sync-stops": ({}, "was kept stopped (SIGSTOP or a debugger) for 10 s"),
    "sync-child-stops": ({}, "waited on its process {pid} (sh), kept stopped"),
    # the bound from the settings, small: the sync sleeps far past it
    "sync-sleeps": (
        {"MLSETUP_ACCOUNT_TIMEOUT": "20"},
        "ran past its limit of 20.0s (MLSETUP_ACCOUNT_TIMEOUT), waiting on its process {pid} "
        "(sleep)",
    ),
}


@pytest.mark.parametrize("hold_up", list(HOLD_UPS))
def test_a_sync_its_owner_holds_up_is_ended_naming_what_it_waited_on(
    server: FakeServer, hold_up: str
):
    """The venv owner's `uv pip sync` kept stopped, waiting on a process of its own kept stopped
    (a build backend), or running past MLSETUP_ACCOUNT_TIMEOUT: apply ends it and fails with
    the held-up diagnosis naming why (not a hang holding the apply lock, not out of memory),
    and what it started is ended with it."""
    index = setup(server, gpu=None)
    write_answers(server, index, ["helper"])
    switches = _uv_wrapper(server)
    handed = server.base / "fleet.lock"
    run = server.mlsetup("lock", "--answers", str(server.answers), "-o", str(handed), **env(index))
    assert run.returncode == 0, run.stdout + run.stderr
    saved = server.root / STATE_LOCK  # mluser's own lock: apply syncs it, resolving nothing
    saved.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(handed, saved)
    (switches / hold_up).touch()
    settings, why = HOLD_UPS[hold_up]
    run = server.mlsetup(
        "apply", "--answers", str(server.answers), timeout=240, **env(index), **settings
    )
    _no_traceback(run)
    assert run.returncode == 1, run.stdout + run.stderr
    pid = int((switches / "pid").read_text())
    why = why.format(pid=pid)
    failure = server.report()["failure"]
    assert failure["action"] == "venv.sync" and failure["diagnosis"] == "held-up", failure
    assert f"venv.sync, run as mluser, {why}" in run.stdout, run.stdout
    assert f"mlsetup: uv, run as mluser, {why}" in Path(failure["log"]).read_text()
    assert server.apply_lock_free()
    wait_for(lambda: _ended(pid))  # killed, not left stopped or sleeping


def _ended(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# -- the environment handover file --------------------------------------------------------------


def _damage(path: Path, shape: str) -> None:
    if shape == "not JSON":
        path.write_text("{")
    elif shape == "a list":
        path.write_text('["PATH"]')
    elif shape == "not strings":
        path.write_text('{"PATH": 1}')
    elif shape == "not UTF-8":
        path.write_bytes(b'{"PATH": "\xff"}')
    elif shape == "a directory":
        path.mkdir()
    elif shape == "a FIFO":
        os.mkfifo(path)
    elif shape == "a link to /dev/zero":
        path.symlink_to("/dev/zero")


@pytest.mark.parametrize(
    "shape",
    [
        "not JSON",
        "a list",
        "not strings",
        "not UTF-8",
        "a directory",
        "a FIFO",
        "a link to /dev/zero",
    ],
)
def test_a_damaged_handover_file_is_exit_2_not_a_traceback_or_a_hang(
    server: FakeServer, shape: str
):
    state = server.root / "var/lib/mlsetup"
    state.mkdir(parents=True, mode=0o700)
    _damage(state / "environment-t1.json", shape)
    run = server.mlsetup("apply", "--ticket", "t1", timeout=120)
    _no_traceback(run)
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.startswith(
        f"mlsetup: input error (state): {state / 'environment-t1.json'}: "
    ), run.stderr
    assert not list(state.glob("*environment-t1.json*"))  # taken: not read again


# -- a read-only /var/lib -----------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
@pytest.mark.parametrize("fault", ["read-only", "full"])
def test_an_unwritable_state_directory_is_a_diagnosis_not_a_traceback(
    server: FakeServer, fault: str
):
    """/var/lib remounted read-only (a bind mount made read-only in a private mount
    namespace), or full (a tmpfs with no inode left): apply says which file system and what
    to run, for the apply lock taken before the engine's own error handling (--foreground)
    and for the starter's alike."""
    var_lib = server.root / "var/lib"
    var_lib.mkdir(parents=True, exist_ok=True)
    mount = (
        f"mount --bind {var_lib} {var_lib} && mount -o remount,bind,ro {var_lib}"
        if fault == "read-only"
        else f"mount -t tmpfs -o size=16k,nr_inodes=1 tmpfs {var_lib}"
    )
    for how in (["--foreground"], []):
        cli = [sys.executable, "-m", "app.cli", "apply", "--answers", str(server.answers), *how]
        run = subprocess.run(
            [
                "unshare",
                "-m",
                "sh",
                "-c",
                f'{mount} && exec "$@"',
                "sh",
                *cli,
                "--root",
                str(server.root),
            ],
            capture_output=True,
            text=True,
            env=server.env(),
            cwd=REPO,
            timeout=120,
        )
        _no_traceback(run)
        said = run.stdout + run.stderr
        assert run.returncode == 1, said
        if fault == "read-only":
            assert "read-only" in said and f"findmnt -T {var_lib};" in said, said
        else:
            assert "no space left" in said and f"df -h {var_lib};" in said, said
