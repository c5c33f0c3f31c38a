"""An extension's source as unpacked into its build tree, and root's record of it.

A build tree belongs to the account that compiles in it and outlives the apply, so that a
retried or resumed build keeps its compiled objects (steps.apply.builds). What the unpack put there
is recorded by root, beside the tree in its own directory: each file's SHA-256, each link's
target, each directory. Before the tree is used again, the unpacked files are checked against
that record: a tree whose unpacked files changed (or that has no record) is not reused. Files
the build added (its objects, generated sources) are not in the record and not looked at.

Root reads the tree, which another account owns, only through descriptors (steps.core.safefs):
no link is followed, no FIFO opened, and what it reads is bounded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from steps.core.safefs import UnsafeFile, open_dir, open_regular, read_bounded, walk
from steps.core.sizes import GiB, MiB
from steps.formats.state import write_atomic

SOURCE = "src"  # the unpacked source's directory in a build tree
MANIFEST_SCHEMA = "mlsetup.source-manifest/1"
# flash-attn 2.8.3's source is about 3,000 files and 60 MB unpacked; past these, not a source
MAX_ENTRIES = 200_000
MAX_BYTES = 8 * GiB
MAX_DEPTH = 64
MANIFEST_LIMIT = 256 * MiB


class TooLarge(Exception):
    """The tree is past what a source tree holds: it is not checked, nor reused."""


def manifest_path(build_root: Path, tree: str) -> Path:
    return build_root / f"{tree}.manifest.json"


def record(build_fd: int, tree: str, manifest: Path) -> None:
    """Write the record of what was just unpacked into `tree` (a directory in `build_fd`)."""
    try:
        entries = _entries(build_fd, tree, None)
    except (OSError, TooLarge):
        manifest.unlink(missing_ok=True)  # nothing to trust: the next start unpacks afresh
        return
    write_atomic(manifest, json.dumps({"schema": MANIFEST_SCHEMA, "entries": entries}))


def changed(build_fd: int, tree: str, manifest: Path) -> str | None:
    """Why the source unpacked in `tree` cannot be reused, or None when it can (its unpacked
    files are as recorded, or nothing was unpacked there yet)."""
    try:
        os.close(walk(build_fd, f"{tree}/{SOURCE}"))
    except FileNotFoundError:
        return None  # nothing unpacked: the unpack will make it and record it
    except OSError as exc:
        return f"holds {SOURCE} that root will not read ({exc})"
    try:
        data = json.loads(read_bounded(manifest, MANIFEST_LIMIT, owner=os.geteuid()))
        recorded = dict(data["entries"]) if data.get("schema") == MANIFEST_SCHEMA else None
    except FileNotFoundError:
        recorded = None
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        recorded = None
    if recorded is None:
        return (
            "has no record of what was unpacked there (an older mlsetup, or a kill just after it)"
        )
    try:
        now = _entries(build_fd, tree, set(recorded))
    except (OSError, TooLarge) as exc:
        return f"could not be checked ({exc})"
    differ = sorted(rel for rel, what in recorded.items() if now.get(rel) != what)
    if differ:
        shown = ", ".join(differ[:3]) + (f" and {len(differ) - 3} more" if len(differ) > 3 else "")
        return f"has unpacked files that changed since the unpack ({shown})"
    return None


def _entries(build_fd: int, tree: str, only: set[str] | None) -> dict[str, str]:
    """rel path -> "dir", "file:<sha256>", "link:<target>" or "other" for what is under
    `tree`/src; with `only`, just those paths (nothing else is opened or read)."""
    out: dict[str, str] = {}
    budget = [MAX_BYTES]
    src = walk(build_fd, f"{tree}/{SOURCE}")
    try:
        _scan(src, "", out, only, budget, 0)
    finally:
        os.close(src)
    return out


def _scan(
    dir_fd: int,
    prefix: str,
    out: dict[str, str],
    only: set[str] | None,
    budget: list[int],
    depth: int,
) -> None:
    if depth > MAX_DEPTH:
        raise TooLarge(f"nested deeper than {MAX_DEPTH} directories")
    with os.scandir(dir_fd) as entries:
        listed = list(entries)
    for entry in listed:
        rel = prefix + entry.name
        if only is not None and rel not in only:
            continue
        if len(out) >= MAX_ENTRIES:
            raise TooLarge(f"more than {MAX_ENTRIES} entries")
        if entry.is_symlink():
            out[rel] = "link:" + os.readlink(entry.name, dir_fd=dir_fd)
        elif entry.is_dir(follow_symlinks=False):
            out[rel] = "dir"
            sub = open_dir(entry.name, dir_fd=dir_fd)
            try:
                _scan(sub, rel + "/", out, only, budget, depth + 1)
            finally:
                os.close(sub)
        elif entry.is_file(follow_symlinks=False):
            out[rel] = "file:" + _sha256(entry.name, dir_fd, budget)
        else:
            out[rel] = "other"


def _sha256(name: str, dir_fd: int, budget: list[int]) -> str:
    digest = hashlib.sha256()
    try:
        fd = open_regular(name, dir_fd=dir_fd)
    except UnsafeFile:
        return "replaced"  # swapped for a link or a FIFO since it was listed: it changed
    with contextlib.closing(os.fdopen(fd, "rb")) as f:
        while chunk := f.read(MiB):
            budget[0] -= len(chunk)
            if budget[0] < 0:
                raise TooLarge(f"more than {MAX_BYTES // GiB} GiB")
            digest.update(chunk)
    return digest.hexdigest()
