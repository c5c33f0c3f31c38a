"""Run one action as a real process: argv, env, account; stream its output as it comes.

Every command mlsetup runs goes through `Runner.run`, so the log file, the
event stream and the environment are the same for all of them, and tests can
put stand-in executables first on the runner's PATH.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from steps.accounts import Account, lookup_account
from steps.events import EventSink, Output
from steps.plan import Action
from steps.rootfs import RootFS
from steps.uvconfig import uv_environment

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Passed from mlsetup's own environment to every command: proxies and package-index settings
# an operator has set for this server.
PASSTHROUGH = (
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "all_proxy",  # uv and curl honour it too
    "ALL_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
)
PASSTHROUGH_PREFIXES = ("UV_", "PIP_")
# What a run keeps of the environment it was started in, for its whole life: a detached start
# (a systemd unit begins with a bare environment) and the resume unit after a reboot must still
# see the invoking user, the operator's PATH, proxies and index settings, and mlsetup's settings.
CARRIED = (*PASSTHROUGH, "SUDO_USER", "PATH")
CARRIED_PREFIXES = (*PASSTHROUGH_PREFIXES, "MLSETUP_")
TAIL_LINES = 200


def _pick(
    environ: Mapping[str, str], names: tuple[str, ...], prefixes: tuple[str, ...]
) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k in names or k.startswith(prefixes)}


def passthrough_environment(environ: Mapping[str, str]) -> dict[str, str]:
    return _pick(environ, PASSTHROUGH, PASSTHROUGH_PREFIXES)


def carried_environment(environ: Mapping[str, str]) -> dict[str, str]:
    return _pick(environ, CARRIED, CARRIED_PREFIXES)


def own_account() -> tuple[str, str]:
    """The name and home of the account this process runs as, for a command with no account
    of its own: root's under sudo, and a user's own for what mlsetup runs as that user (`plan`
    resolving with uv, the wizard without root), whose caches are under their HOME: root's
    /root is not theirs to write."""
    try:
        entry = pwd.getpwuid(os.geteuid())
    except KeyError:  # a uid with no passwd entry (a container's): the HOME it was given
        return str(os.geteuid()), os.environ.get("HOME", "/")
    return entry.pw_name, entry.pw_dir


@dataclass
class Result:
    exit_code: int
    elapsed: float
    tail: list[str]  # the last lines of output, for the diagnosis and the report


class RunnerError(Exception):
    """The action could not be started at all (no such program, no such account)."""


class Runner:
    def __init__(
        self,
        fs: RootFS,
        sink: EventSink,
        base_path: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.fs = fs
        self.sink = sink
        environ = os.environ if environ is None else environ
        self.base_path = base_path or environ.get("PATH", SYSTEM_PATH)
        self.passthrough = passthrough_environment(environ)

    def resolve(self, program: str) -> str:
        """argv[0] as an absolute path: found on the engine's PATH, then beside mlsetup (uv)."""
        if "/" in program:
            return program
        search = f"{self.base_path}:{Path(sys.executable).parent}"
        found = shutil.which(program, path=search)
        if found is None:
            raise RunnerError(f"{program}: command not found (searched {search})")
        return found

    def environment(self, action: Action, account: Account | None) -> dict[str, str]:
        env = {"PATH": self.base_path, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", **self.passthrough}
        name, home = (account.name, account.home) if account is not None else own_account()
        env.update(HOME=home, USER=name, LOGNAME=name)
        env.update(action.env)
        if Path(action.argv[0]).name == "uv":  # system certificates, pip's index for uv
            env = {**uv_environment(env, self.fs.root), **env}
        return env

    def run(
        self,
        action: Action,
        log_path: Path,
        on_line: Callable[[str], None] | None = None,
        on_start: Callable[[int], None] | None = None,
        extra_env: Mapping[str, str] | None = None,
    ) -> Result:
        account = None
        if action.user is not None:
            account = lookup_account(self.fs, action.user)
            if account is None:
                raise RunnerError(f"account {action.user!r} does not exist on this machine")
        argv = [self.resolve(action.argv[0]), *(self.fs.localize(a) for a in action.argv[1:])]
        env = {
            k: self.fs.localize(v)
            for k, v in {**self.environment(action, account), **(extra_env or {})}.items()
        }
        log_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tail: deque[str] = deque(maxlen=TAIL_LINES)
        start = time.monotonic()
        with log_path.open("ab") as log:
            os.chmod(log_path, 0o600)
            log.write(f"$ {' '.join(action.argv)}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=account.home if account and os.path.isdir(account.home) else "/",
                user=account.uid if account else None,
                group=account.gid if account else None,
                extra_groups=[] if account else None,
            )
            if on_start:
                on_start(proc.pid)
            assert proc.stdout is not None
            for raw in proc.stdout:
                log.write(raw)
                log.flush()
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                tail.append(line)
                self.sink(Output(action=action.id, line=line))
                if on_line:
                    on_line(line)
            code = proc.wait()
            # a process killed by a signal reads as 128 + signal, as a shell shows it
            exit_code = 128 - code if code < 0 else code
            log.write(f"[exit {exit_code} after {time.monotonic() - start:.1f}s]\n".encode())
        return Result(exit_code, time.monotonic() - start, list(tail))
