"""Run one action as a real process: argv, env, account; stream its output as it comes.

Every command mlsetup runs goes through `Runner.run`, so the log file, the
event stream and the environment are the same for all of them, and tests can
put stand-in executables first on the runner's PATH.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import select
import shutil
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import psutil

from steps.building.leftovers import Leftovers
from steps.core.accounts import Account, lookup_account
from steps.core.outputlines import LineCutter
from steps.core.rootfs import RootFS
from steps.core.safefs import Untrusted, open_append, open_trusted_dir
from steps.core.settings import ACCOUNT_TIMEOUT, settings_from
from steps.formats.events import EventSink, Notice, Output
from steps.formats.plan import Action
from steps.run.asaccount import AccountWatch
from steps.run.index import is_proxy, withhold_credentials
from steps.run.uvconfig import uv_environment

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
# Once the main process has ended: how long what it wrote last is still read from the pipe
# (anything it left behind may hold the pipe open for ever).
DRAIN_S = 1.0
POLL_S = 0.1  # how often the main process is looked at while its output is quiet
LEFTOVERS_EVERY_S = 1.0  # how often a build is looked at for what holds its output
READ_CHUNK = 64 * 1024
# A resolution run as another account may take this long at most, below the bound on all of its
# commands (steps.run.asaccount): PyTorch's index and a full resolution take minutes.
RESOLVE_LIMIT_S = 3600.0


def _pick(
    environ: Mapping[str, str], names: tuple[str, ...], prefixes: tuple[str, ...]
) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k in names or k.startswith(prefixes)}


def passthrough_environment(environ: Mapping[str, str]) -> dict[str, str]:
    return _pick(environ, PASSTHROUGH, PASSTHROUGH_PREFIXES)


def carried_environment(environ: Mapping[str, str]) -> dict[str, str]:
    return _pick(environ, CARRIED, CARRIED_PREFIXES)


def trusted_path(path: str) -> tuple[str, list[str]]:
    """`path` with only the directories root may look commands up in: absolute, and, with
    every directory above them, no account's but root's (or this process's own account) and
    writable by no other (steps.core.safefs.open_trusted_dir). Each kept entry is its real path,
    so a link another account re-points later changes nothing. Returns the PATH and, for each
    entry dropped, what was wrong with it; an entry that does not exist is dropped unsaid."""
    owners = {0, os.geteuid()}
    kept: list[str] = []
    dropped: list[str] = []
    for entry in path.split(":"):
        if not entry.startswith("/"):
            dropped.append(f"{entry!r}: not an absolute path (the current directory)")
            continue
        try:
            os.close(open_trusted_dir(entry, owners))
        except (FileNotFoundError, NotADirectoryError):
            continue
        except Untrusted as exc:
            dropped.append(f"{entry}: {exc.filename} {exc.strerror}")
            continue
        except OSError as exc:
            dropped.append(f"{entry}: {exc.strerror or exc}")
            continue
        real = os.path.realpath(entry)
        if real not in kept:
            kept.append(real)
    return ":".join(kept), dropped


def caches_of(home: str) -> dict[str, str]:
    """uv's and pip's caches for a command root starts: those of the account it runs as, under
    its home, whatever cache the environment named. Root must not write through the invoking
    user's links, and another account cannot use root's cache (a root-only directory: its uv
    stopped at "Could not acquire lock") and is not handed root's paths."""
    return {"UV_CACHE_DIR": f"{home}/.cache/uv", "PIP_CACHE_DIR": f"{home}/.cache/pip"}


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
    ended: str | None = None  # why mlsetup ended it ("ran past its limit of 1h00m (...)")


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
        self.base_path, dropped = trusted_path(base_path or environ.get("PATH", SYSTEM_PATH))
        self.passthrough = passthrough_environment(environ)
        self.account_limit = settings_from(environ).account_timeout
        self._withheld_said: set[tuple[str, tuple[str, ...]]] = set()
        # said with the first command run, once the engine's event stream is open
        self._path_notice = (
            Notice(
                text="PATH: left out where commands are looked up, as another account could "
                f"put a program there that root would run: {'; '.join(dropped)}"
            )
            if dropped
            else None
        )

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
        if account is not None or os.geteuid() == 0:
            env.update(caches_of(home))
        env.update(action.env)
        if Path(action.argv[0]).name == "uv":  # system certificates, pip's index for uv
            env = {**uv_environment(env, self.fs.root), **env}
        if account is not None and account.uid != os.geteuid():
            env = self._without_roots_credentials(env, action, account)
        return env

    def _without_roots_credentials(
        self, env: dict[str, str], action: Action, account: Account
    ) -> dict[str, str]:
        """The index and proxy credentials of root's environment and its root-only settings are
        root's: never given to another account, which can read its own processes' environment.
        Said once for each account and the variables it went without."""
        env, withheld = withhold_credentials(env)
        said = (account.name, tuple(withheld))
        if not withheld or said in self._withheld_said:
            return env
        self._withheld_said.add(said)
        who = account.name
        proxies = [name for name in withheld if is_proxy(name)]
        kinds = [kind for kind, has in (("index", proxies != withheld), ("proxy", proxies)) if has]
        advice = []
        if proxies != withheld:
            advice.append(
                f"Where the index needs them, give {who} its own (its ~/.netrc), or put them "
                "in torch.index_url of the answers for that account to use."
            )
        if proxies:
            advice.append(
                "Where the proxy needs them, let this server through it without a password, "
                'or give the venv to root (venv.user = "root").'
            )
        self.sink(
            Notice(
                text=f"{action.id} runs as {who} without root's {' and '.join(kinds)} "
                f"credentials ({', '.join(withheld)}: left out, or the user:password taken out "
                f"of their URLs): {who} can read what its processes are given. " + " ".join(advice)
            )
        )
        return env

    def run(
        self,
        action: Action,
        log_path: Path,
        on_line: Callable[[str], None] | None = None,
        on_start: Callable[[int], None] | None = None,
        extra_env: Mapping[str, str] | None = None,
        end_leftovers: bool = False,
    ) -> Result:
        """Run `action`, its output to `log_path` and the event stream, until its main process
        ends (the output read then stops). `end_leftovers` (a build): what the command left
        running (a daemon a build backend double-forked, its process group, its session) is
        ended then: this process is their subreaper meanwhile, so none escapes to init."""
        if self._path_notice is not None:
            self.sink(self._path_notice)
            self._path_notice = None
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
        fd, aside = open_append(log_path)
        if aside is not None:
            self.sink(
                Notice(
                    text=f"{log_path} was not a log file of root's own (a link, a FIFO, a "
                    f"directory, another account's file): moved it to {aside}, unread and "
                    "unfollowed; the log starts afresh"
                )
            )
        leftovers = Leftovers() if end_leftovers else None
        with os.fdopen(fd, "ab") as log, leftovers or contextlib.nullcontext():
            log.write(f"$ {' '.join(action.argv)}\n".encode())
            log.flush()
            try:
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
            except OSError as exc:  # e.g. the account may not execute argv[0] (a root-only dir)
                who = account.name if account else "this account"
                raise RunnerError(
                    f"{argv[0]} cannot be started as {who}: {exc.strerror or exc}"
                ) from None
            if on_start:
                on_start(proc.pid)
            watch = self._watch(action, proc.pid) if account is not None else None
            ended: list[str] = []

            def line(raw: bytes) -> None:
                text = raw.decode("utf-8", "replace").rstrip("\r\n")
                tail.append(text)
                self.sink(Output(action=action.id, line=text))
                if on_line:
                    on_line(text)

            def look(main_ended: bool) -> None:
                # another account's process holds root up: not for ever
                if not main_ended and watch is not None and not ended and (why := watch.overdue()):
                    ended.append(why)
                    watch.end()
                if leftovers is None:
                    return
                if main_ended:
                    self._end(action, leftovers, leftovers.remaining(), "its main process ended")
                else:
                    held = leftovers.holding_output(proc.pid)
                    self._end(action, leftovers, held, "they held its output open")

            try:
                _stream(proc, log, line, look)
            except BaseException:
                # its log or the event stream could not be written (a full disk): a build
                # whose output no one can keep is not left running on its own
                if leftovers is not None:
                    leftovers.end(leftovers.remaining())
                raise
            finally:
                assert proc.stdout is not None
                proc.stdout.close()
            code = proc.wait()
            look(True)  # what it left that had let go of the output
            # a process killed by a signal reads as 128 + signal, as a shell shows it
            exit_code = 128 - code if code < 0 else code
            if ended:
                said = f"mlsetup: {Path(argv[0]).name}, run as {action.user}, {ended[0]}: ended it"
                tail.append(said)
                log.write(f"{said}\n".encode())
            log.write(f"[exit {exit_code} after {time.monotonic() - start:.1f}s]\n".encode())
        return Result(exit_code, time.monotonic() - start, list(tail), ended[0] if ended else None)

    def _watch(self, action: Action, pid: int) -> AccountWatch:
        tree = action.kind != "build"
        if action.kind == "resolve" and self.account_limit > RESOLVE_LIMIT_S:
            return AccountWatch(pid, RESOLVE_LIMIT_S, tree)
        return AccountWatch(pid, self.account_limit, tree, set_by=ACCOUNT_TIMEOUT)

    def _end(
        self, action: Action, leftovers: Leftovers, procs: list[psutil.Process], why: str
    ) -> None:
        if not procs:
            return
        ended = leftovers.end(procs)
        self.sink(
            Notice(
                text=f"{action.id} left {len(ended)} process(es) running "
                f"(pids {', '.join(map(str, ended[:10]))}): ended them (SIGTERM, then SIGKILL): "
                f"{why}, and a step ends with its main process"
            )
        )


def _stream(
    proc: subprocess.Popen[bytes],
    log: BinaryIO,
    line: Callable[[bytes], None],
    look: Callable[[bool], None],
) -> None:
    """Copy the command's output to `log` and hand on each line (cut to LINE_KEEP bytes), until
    end-of-file or, once its main process has ended, until it has been quiet for POLL_S or
    DRAIN_S have passed: whatever it left holding the pipe does not hold the step.
    `look(main_ended)` is called every LEFTOVERS_EVERY_S while it runs and once when its main
    process has ended."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    lines = LineCutter()
    drain_until: float | None = None
    looked = time.monotonic()
    while True:
        now = time.monotonic()
        wait = POLL_S if drain_until is None else max(0.0, min(POLL_S, drain_until - now))
        ready, _, _ = select.select([fd], [], [], wait)
        if ready:
            chunk = os.read(fd, READ_CHUNK)
            if not chunk:
                break
            log.write(chunk)
            log.flush()
            for raw in lines.feed(chunk):
                line(raw)
        elif drain_until is not None:
            break
        if drain_until is None and proc.poll() is not None:
            look(True)
            drain_until = time.monotonic() + DRAIN_S
        elif drain_until is not None and time.monotonic() >= drain_until:
            break
        elif drain_until is None and time.monotonic() - looked >= LEFTOVERS_EVERY_S:
            look(False)
            looked = time.monotonic()
    rest = lines.rest()
    if rest is not None:
        line(rest)
