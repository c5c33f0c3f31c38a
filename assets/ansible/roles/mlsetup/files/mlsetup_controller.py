"""Controller-side helpers for the mlsetup Ansible role; run with the controller's Python
(ansible-core 2.18+ needs 3.11+ there, so tomllib is present). Prints one JSON object.

  mlsetup_controller.py pack SOURCE OUTDIR
      A reproducible source tarball of the mlsetup checkout at SOURCE (what install.sh
      installs from): the same files give the same bytes, so its sha256 says whether a host
      already runs exactly this source. -> {"tarball", "id", "version", "top"}
  mlsetup_controller.py answers FILE SOURCE
      The answers file checked by mlsetup's own validation (steps.formats.answers of the checkout at
      SOURCE, which needs pydantic and packaging in this Python), so a bad file stops the play
      here, before anything is copied to a host; and what the role needs to know from it.
      -> {"wheelhouse", "reboot_policy"}
  mlsetup_controller.py summary REPORTS PLAY HOST...
      How the fleet ended, once every HOST has its report of this play (PLAY) in REPORTS: the
      hosts by outcome, and what to do next for each that did not finish. "show" is true for
      the first host that asks then (each asks as it ends; a file in REPORTS remembers the
      play it was shown for). -> {"show", "lines"}
  mlsetup_controller.py claim REPORTS PLAY
      The reports directory for this play (PLAY) alone while its ansible-playbook runs: a
      second play over the same directory is refused (its hosts would overwrite and
      contradict this play's reports and summary). REPORTS/.play names the play and its
      ansible-playbook (pid and start time); a claim is granted to that play, to that same
      process, or once that process has ended. -> {"claimed"}

Errors go to stderr with exit code 2.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile
import tempfile
from pathlib import Path

import tomllib

# What install.sh needs from a checkout: itself, the package metadata and the packages.
TOP_FILES = ("install.sh", "pyproject.toml", "README.md", "LICENSE")
PACKAGES = ("app", "steps", "assets")
# Not for the hosts, and where an operator's reports, plans and wheels may lie (they would
# change the tarball, and so reinstall mlsetup, on every play).
SKIP = ("assets/ansible",)
MTIME = 1577836800  # 2020-01-01: fixed, and after 1980 so a wheel built from it can zip it


def fail(message: str) -> None:
    print(f"mlsetup role: {message}", file=sys.stderr)
    sys.exit(2)


def _files(source: Path) -> list[Path]:
    files = [source / name for name in TOP_FILES if (source / name).is_file()]
    for package in PACKAGES:
        for path in sorted((source / package).rglob("*")):
            rel = path.relative_to(source)
            if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
                continue
            if rel.as_posix().startswith(tuple(f"{skip}/" for skip in SKIP)):
                continue
            if path.is_file() and path.suffix not in (".pyc", ".pyo"):
                files.append(path)
    return sorted(files)


def pack(source: Path, outdir: Path) -> dict:
    source = source.resolve()
    for needed in ("install.sh", "pyproject.toml", "steps", "app"):
        if not (source / needed).exists():
            fail(
                f"{source} is not an mlsetup checkout (no {needed}); set mlsetup_source to the "
                "directory holding install.sh"
            )
    version = tomllib.loads((source / "pyproject.toml").read_text())["project"]["version"]
    top = f"mlsetup-{version}"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in _files(source):
            info = tarfile.TarInfo(f"{top}/{path.relative_to(source).as_posix()}")
            data = path.read_bytes()
            info.size = len(data)
            info.mtime = MTIME
            info.mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    packed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=packed, mtime=0) as gz:
        gz.write(raw.getvalue())
    blob = packed.getvalue()
    digest = hashlib.sha256(blob).hexdigest()
    outdir.mkdir(parents=True, exist_ok=True)
    tarball = outdir / f"{top}-{digest[:12]}.tar.gz"
    if not tarball.exists():  # each host packs (the free strategy): a temporary file of its own
        fd, tmp = tempfile.mkstemp(dir=outdir, prefix=f".{tarball.name}.")
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.chmod(tmp, 0o644)
        os.replace(tmp, tarball)
    return {
        "tarball": str(tarball),
        "id": f"{version} sha256:{digest}",
        "version": version,
        "top": top,
    }


def answers(path: Path, source: Path) -> dict:
    sys.path.insert(0, str(source.resolve()))
    try:  # from the checkout the hosts get, so both sides validate the same way
        from steps.core.errors import InputError
        from steps.formats.answers import load_answers
    except ImportError as exc:
        fail(
            f"cannot check {path} with mlsetup's own validation ({exc}): the controller's "
            f"Python ({sys.executable}) needs mlsetup's dependencies (pip install pydantic "
            "packaging), or set mlsetup_controller_python to the python of an mlsetup install"
        )
    try:
        checked = load_answers(path)
    except InputError as exc:
        fail(f"{exc}\nnothing was copied to the hosts")
    return {"wheelhouse": checked.build.wheelhouse, "reboot_policy": checked.reboot.policy}


# The outcomes of a host's report (tasks/report.yml), in the order the summary lists them.
OUTCOMES = (
    "done",
    "failed",
    "waiting for reboot",
    "unreachable",
    "refused input",
    "needs root",
    "busy",
    "did not finish",
)


def summary(reports: Path, play: str, hosts: list[str]) -> dict:
    ended: dict[str, list[dict]] = {}
    for host in hosts:
        try:
            report = json.loads((reports / f"{host}.json").read_text())
        except (OSError, ValueError):
            return {"show": False, "lines": []}  # not ended yet
        if not isinstance(report, dict) or report.get("play") != play:
            return {"show": False, "lines": []}  # an earlier play's: not ended yet
        ended.setdefault(str(report.get("outcome")), []).append(report)
    with (reports / ".summary").open("a+") as mark:
        fcntl.flock(mark, fcntl.LOCK_EX)  # two hosts that end at once: one shows it
        mark.seek(0)
        if mark.read().strip() == play:
            return {"show": False, "lines": []}
        mark.seek(0)
        mark.truncate()
        mark.write(f"{play}\n")
    order = [o for o in OUTCOMES if o in ended] + sorted(set(ended) - set(OUTCOMES))
    lines = [f"{len(hosts)} host(s): " + ", ".join(f"{len(ended[o])} {o}" for o in order)]
    for outcome in order:
        lines.append(f"{outcome}: " + ", ".join(r["host"] for r in ended[outcome]))
        if outcome != "done":
            lines += [f"  {r['host']}: next: {r.get('next') or '-'}" for r in ended[outcome]]
    lines.append(f"reports: {reports}/<host>.json")
    return {"show": True, "lines": lines}


CLAIM = ".play"


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command's name (state, ppid, ... start time at
    index 19), or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    return stat.rsplit(")", 1)[1].split()


def _playbook() -> tuple[int, str]:
    """The ansible-playbook this helper runs under, as (pid, start time): its furthest
    ancestor by that name (the nearer ones are the workers it forks for each task, gone when
    the task ends); the parent where there is none."""
    found = pid = os.getppid()
    while pid > 1:
        fields = _stat_fields(pid)
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            break
        if fields is None:
            break
        if any(Path(a.decode(errors="replace")).name == "ansible-playbook" for a in argv[:3]):
            found = pid
        pid = int(fields[1])
    fields = _stat_fields(found)
    return found, fields[19] if fields else ""


def _running(pid: int, started: str) -> bool:
    """Whether that process still runs: the same pid and start time (not a reused pid), and
    not a zombie (ended, not yet reaped)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z" and fields[19] == started


def claim(reports: Path, play: str) -> dict:
    """Each host of a play claims as it starts; under a lock of the file, so that hosts that
    start at once read and write it one after another (no moment where it is half written)."""
    reports.mkdir(parents=True, exist_ok=True)
    fd = os.open(reports / CLAIM, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held only while reading and writing it
        held_play, pid, started = (
            os.pread(fd, 4096, 0).decode(errors="replace").split() + [""] * 3
        )[:3]
        playbook, playbook_started = _playbook()
        if held_play == play:
            return {"claimed": True}
        if (
            pid.isdigit()
            and (int(pid), started) != (playbook, playbook_started)
            and _running(int(pid), started)
        ):
            fail(
                f"another play (ansible-playbook pid {pid}) is using the reports directory "
                f"{reports}: its hosts' reports would be overwritten. Wait for it to end, or "
                "give this play another mlsetup_reports_dir"
            )
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{play} {playbook} {playbook_started}\n".encode(), 0)
        return {"claimed": True}
    finally:
        os.close(fd)


def main(argv: list[str]) -> None:
    if len(argv) == 3 and argv[0] == "pack":
        result = pack(Path(argv[1]), Path(argv[2]))
    elif len(argv) == 3 and argv[0] == "answers":
        result = answers(Path(argv[1]), Path(argv[2]))
    elif len(argv) >= 3 and argv[0] == "summary":
        result = summary(Path(argv[1]), argv[2], argv[3:])
    elif len(argv) == 3 and argv[0] == "claim":
        result = claim(Path(argv[1]), argv[2])
    else:
        fail(
            "usage: mlsetup_controller.py pack SOURCE OUTDIR | answers FILE SOURCE | "
            "summary REPORTS PLAY HOST... | claim REPORTS PLAY"
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
