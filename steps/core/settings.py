"""mlsetup's own environment settings (`MLSETUP_*`), parsed once into one validated model.

They are input like the answers: a bad value is exit 2 naming the variable, the value and
what is allowed, and a misspelt name is refused rather than silently ignored. Every reader
takes them from here: recipes (steps.known.knowledge), the NVML snapshot (steps.probing.probe), the
dpkg lock wait (app.apply), the bound on another account's commands (steps.run.runner), the ASCII
wizard (app.tui.glyphs).
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from steps.core.errors import InputError, input_kind, show_value

PREFIX = "MLSETUP_"
EXTENSIONS_DIR = "MLSETUP_EXTENSIONS_DIR"
NVML_SNAPSHOT = "MLSETUP_NVML_SNAPSHOT"
DPKG_LOCK_TIMEOUT = "MLSETUP_DPKG_LOCK_TIMEOUT"
INTERRUPTED_WAIT = "MLSETUP_INTERRUPTED_WAIT"
ACCOUNT_TIMEOUT = "MLSETUP_ACCOUNT_TIMEOUT"
ASCII = "MLSETUP_ASCII"
# install.sh's (where it puts the venv and the command); accepted here, not used
INSTALL_ONLY = ("MLSETUP_PREFIX", "MLSETUP_BINDIR")
KNOWN = (
    EXTENSIONS_DIR,
    NVML_SNAPSHOT,
    DPKG_LOCK_TIMEOUT,
    INTERRUPTED_WAIT,
    ACCOUNT_TIMEOUT,
    ASCII,
    *INSTALL_ONLY,
)
DEFAULT_WAIT = 600.0  # seconds, for apt's lock and for an interrupted run's command
DAY = 86400.0
# how long a command run as another account (the venv's owner) may take: generous, as an
# extension's compile on a small server takes hours; root does not wait on it for ever
DEFAULT_ACCOUNT_TIMEOUT = DAY
_TRUE, _FALSE = ("1", "yes", "true", "on"), ("0", "no", "false", "off")


@dataclass(frozen=True)
class Settings:
    extensions_dir: Path | None = None  # None: /etc/mlsetup/extensions.d
    nvml_snapshot: Path | None = None  # tests: a recorded NVML reading instead of the GPUs
    dpkg_lock_timeout: float = DEFAULT_WAIT  # seconds to wait for apt's lock
    interrupted_wait: float = DEFAULT_WAIT  # seconds to wait for an interrupted run's command
    account_timeout: float = DEFAULT_ACCOUNT_TIMEOUT  # seconds for a command of another account
    ascii: bool = False  # the wizard draws ASCII only


@input_kind("settings")
def settings_from(environ: Mapping[str, str]) -> Settings:
    """The settings in `environ`; an InputError naming the first bad variable."""
    given = {k: v for k, v in environ.items() if k.startswith(PREFIX) and v != ""}
    for name in given:
        if name not in KNOWN:
            raise InputError(f"environment: {name}: unknown setting; allowed: {', '.join(KNOWN)}")
    for name in INSTALL_ONLY:
        if name in given:
            _absolute(name, given[name])
    return Settings(
        extensions_dir=_directory(EXTENSIONS_DIR, given.get(EXTENSIONS_DIR)),
        nvml_snapshot=_regular_file(NVML_SNAPSHOT, given.get(NVML_SNAPSHOT)),
        dpkg_lock_timeout=_seconds(DPKG_LOCK_TIMEOUT, given.get(DPKG_LOCK_TIMEOUT)),
        interrupted_wait=_seconds(INTERRUPTED_WAIT, given.get(INTERRUPTED_WAIT)),
        account_timeout=_seconds(
            ACCOUNT_TIMEOUT, given.get(ACCOUNT_TIMEOUT), DEFAULT_ACCOUNT_TIMEOUT, 1, 7 * DAY
        ),
        ascii=_flag(ASCII, given.get(ASCII)),
    )


def settings() -> Settings:
    """The settings of this process's environment (read again each time: a resumed run
    restores the environment it started in)."""
    return settings_from(os.environ)


def _bad(name: str, value: str, allowed: str) -> InputError:
    return InputError(f"environment: {name}={show_value(value)}: allowed: {allowed}")


def _absolute(name: str, value: str) -> Path:
    if len(value) > 4096 or not value.startswith("/") or any(ord(c) < 32 for c in value):
        raise _bad(name, value, "an absolute path")
    return Path(value)


def _directory(name: str, value: str | None) -> Path | None:
    return _existing(name, value, stat.S_ISDIR, "an existing directory")


def _regular_file(name: str, value: str | None) -> Path | None:
    return _existing(name, value, stat.S_ISREG, "a regular file")


def _existing(
    name: str, value: str | None, is_kind: Callable[[int], bool], allowed: str
) -> Path | None:
    if value is None:
        return None
    path = _absolute(name, value)
    try:
        st = os.stat(path)
    except OSError as exc:
        raise _bad(name, value, f"{allowed} ({exc.strerror})") from None
    if not is_kind(st.st_mode):
        raise _bad(name, value, f"{allowed} (this is not one)")
    return path


def _seconds(
    name: str, value: str | None, default: float = DEFAULT_WAIT, least: float = 0, most: float = DAY
) -> float:
    if value is None:
        return default
    allowed = f"a number of seconds from {least:.0f} to {most:.0f}, such as {default:.0f}"
    try:
        seconds = float(value) if len(value) <= 20 and value.isascii() else math.nan
    except ValueError:
        raise _bad(name, value, allowed) from None
    if not least <= seconds <= most:  # also false for NaN
        raise _bad(name, value, allowed)
    return seconds


def _flag(name: str, value: str | None) -> bool:
    if value is None:
        return False
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise _bad(name, value, f"one of {', '.join(_TRUE + _FALSE)} (or unset)")
