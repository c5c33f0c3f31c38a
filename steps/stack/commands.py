"""The uv command lines of the stack: `uv pip compile` for the lock, `uv pip sync` of it."""

from __future__ import annotations

from steps.formats.lock import SHARED_LOCK


def compile_argv(
    infile: str,
    outfile: str,
    python: str,
    platform: str,
    index: list[str],
    builds: bool,
    constraints: str | None = None,
    offline: bool = False,
    no_deps: bool = False,
) -> list[str]:
    """`uv pip compile` for the lock. `builds` False: `--no-build`, nothing of a package runs
    (every resolution root runs); True only as an ordinary account, for an sdist whose
    metadata comes only from its build backend. `offline`: from uv's cache alone (what the
    resolution just before it fetched). `no_deps`: the packages alone (their newest releases)."""
    return [
        "uv",
        "pip",
        "compile",
        "--no-config",
        "--generate-hashes",
        "--no-header",
        "--no-python-downloads",
        *([] if builds else ["--no-build"]),
        *(["--offline"] if offline else []),
        *(["--no-deps"] if no_deps else []),
        "--python-version",
        python,
        "--python-platform",
        platform,
        *index,
        *(["--constraint", constraints] if constraints else []),
        "--output-file",
        outfile,
        infile,
    ]


def sync_argv(python_bin: str, index: list[str], builds: bool) -> list[str]:
    """`uv pip sync` of the lock as the venv's owner; `builds` False (root's venv): a pin with
    no wheel is an error, never a build run as root."""
    return [
        "uv",
        "pip",
        "sync",
        "--python",
        python_bin,
        "--no-config",
        "--require-hashes",
        *([] if builds else ["--no-build"]),
        *index,
        SHARED_LOCK,
    ]
