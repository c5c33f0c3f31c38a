"""mlsetup's own installation, checked by the rules it applies to everything else root runs.

Root runs mlsetup's code and its build tools (assets/buildtools/nvcc, the ninja that orders
jobs) as root and for every build. An installation that another account can change — a release
tarball extracted as root keeps git archive's 0775 and 0664, a checkout of a user's run with
sudo — is one that account's code running as root. `mlsetup plan` names it (install.sh gives
the installation root-only modes).
"""

from __future__ import annotations

import os
import stat
from importlib import resources
from pathlib import Path

# the packages of the wheel: everything of mlsetup's that root runs or reads as trusted
PACKAGES = ("app", "steps", "assets")
SHOWN = 3  # paths named in the warning; the rest are counted


def _why(path: Path, st: os.stat_result) -> str | None:
    if st.st_uid != 0:
        return f"owner uid {st.st_uid}"
    writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    sticky = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
    if writable and not sticky:
        return f"mode {stat.S_IMODE(st.st_mode):o}"
    return None


def untrusted_paths() -> list[str]:
    """Each path of the installation (and each directory above it) that an account other than
    root could change, as 'PATH (why)'. Empty when not root: a user's own checkout is theirs."""
    if os.geteuid() != 0:
        return []
    found: dict[str, str] = {}
    for package in PACKAGES:
        top = Path(str(resources.files(package)))
        for directory in top.parents:
            why = _why(directory, os.lstat(directory))
            if why is not None:
                found.setdefault(str(directory), why)
        for current, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for path in [Path(current), *(Path(current, name) for name in files)]:
                why = _why(path, os.lstat(path))
                if why is not None:
                    found.setdefault(str(path), why)
    return [f"{path} ({why})" for path, why in found.items()]


def warning() -> str | None:
    """One line for the operator, or None when the installation is root's alone."""
    paths = untrusted_paths()
    if not paths:
        return None
    more = f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else ""
    return (
        "this mlsetup installation can be changed by accounts other than root, whose code root "
        f"would run: {', '.join(paths[:SHOWN])}{more}; reinstall it with install.sh (root-only "
        "modes) or run 'chmod -R go-w' and 'chown -R root:' on it"
    )
