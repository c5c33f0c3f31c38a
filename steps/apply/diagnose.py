"""Match a failed action's output against the known failure signatures in assets/diagnoses.toml."""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass
from functools import cache

from steps.core.nextcommands import RESUME_COMMAND, answers_command, answers_file
from steps.known.tables import DiagnosesTable, load_table

OOM_EXIT_CODES = (137, -9)


@dataclass(frozen=True)
class Diagnosis:
    id: str
    why: str
    next: str


@dataclass(frozen=True)
class _Signature:
    id: str
    patterns: tuple[re.Pattern[str], ...]  # forms of one message, each with the same groups
    why: str
    next: str

    def search(self, text: str) -> re.Match[str] | None:
        return next((m for p in self.patterns if (m := p.search(text))), None)


@cache
def _signatures() -> tuple[_Signature, ...]:
    return tuple(
        _Signature(s.id, tuple(map(re.compile, s.patterns)), s.why, s.next)
        for s in load_table("diagnoses.toml", DiagnosesTable).signature
    )


def fill(
    template: str,
    log: str,
    answers: str | None,
    groups: tuple[str | None, ...] = (),
    resume: str = RESUME_COMMAND,
) -> str:
    """A signature's text for one failure: {log} its log file, {answers} the run's answers
    file, {apply_answers} the command that re-plans from it, {resume} the command that goes on
    once the cause is fixed, {1}, {2} the pattern's groups."""
    out = (
        template.replace("{log}", log)
        .replace("{answers}", answers_file(answers))
        .replace("{apply_answers}", answers_command(answers))
        .replace("{resume}", resume)
    )
    for i, group in enumerate(groups, 1):
        out = out.replace(f"{{{i}}}", group or "?")
    return out


def diagnose(
    lines: list[str], exit_code: int | None, log: str, answers: str | None = None
) -> Diagnosis | None:
    """The first signature (in the file's order) found in the output, or None. `answers`: the
    run's answers file, which the next step may say to edit."""
    text = "\n".join(lines)
    for sig in _signatures():
        match = sig.search(text)
        if match:
            groups = match.groups()
            return Diagnosis(
                sig.id, fill(sig.why, log, answers, groups), fill(sig.next, log, answers, groups)
            )
    if exit_code in OOM_EXIT_CODES:
        sig = next(s for s in _signatures() if s.id == "out-of-memory")
        return Diagnosis(sig.id, sig.why, fill(sig.next, log, answers))
    return None


# Where a download's output names what it could not fetch: uv ("Failed to fetch: URL", "error
# sending request for url (URL)"), apt ("E: Failed to fetch URL  404"), pip ("Could not fetch URL
# URL"). curl names only the host: its URL is the one in its argv.
FAILED_URL = re.compile(
    r"(?:Failed to (?:fetch|download)|error sending request for url|Could not fetch URL)"
    r"[:\s(`'\"]*((?:https?|file)://[^\s`'\")]+)"
)
DOWNLOADERS = ("curl", "wget")


def failed_url(lines: list[str], argv: list[str] | None = None) -> str | None:
    """The URL a failed action could not fetch: the last one its output names, else the one
    URL a download command (curl) was given (it names the host, not the URL), else None."""
    for line in reversed(lines):
        if match := FAILED_URL.search(line):
            return match.group(1).rstrip(".,:;")
    if not argv or os.path.basename(argv[0]) not in DOWNLOADERS:
        return None
    urls = [a for a in argv if a.startswith(("https://", "http://"))]
    return urls[0] if len(urls) == 1 else None


def held_up(what: str, who: str, ended: str) -> Diagnosis:
    """The "held-up" diagnosis: `what`, run as `who`, was ended by mlsetup (steps.run.runner)
    because it `ended` ("was kept stopped (SIGSTOP or a debugger) for 10 s", "ran past its limit
    ...")."""
    return Diagnosis(
        "held-up",
        f"{what}, run as {who}, {ended}; root does not wait without end on a process another "
        "account controls.",
        f"See what runs as {who}: ps -u {who} -o pid,stat,args; then: {RESUME_COMMAND}",
    )


def read_only(path: str, then: str) -> Diagnosis:
    """The "read-only" diagnosis for a write of mlsetup's own that found the file system holding
    `path` mounted read-only (EROFS: remounted after an error, or an image's). `then`: the
    command that goes on once it is writable."""
    where = path if os.path.isdir(path) else os.path.dirname(path) or path
    return Diagnosis(
        "read-only",
        f"The file system holding {where} is read-only (mounted ro, or remounted after a disk "
        "error): mlsetup keeps its state, logs and caches there.",
        f"findmnt -T {where}; make it writable (sudo mount -o remount,rw on that mount point, "
        f"after the disk is checked), then: {then}",
    )


def unwritable(path: str, error: int, then: str | None = None) -> Diagnosis:
    """What a write of mlsetup's own that failed with `error` (ENOSPC, EDQUOT, EROFS) says."""
    if error == errno.EROFS:
        return read_only(path, then or RESUME_COMMAND)
    return no_space(path, then)


def no_space(path: str, then: str | None = None) -> Diagnosis:
    """The "no-space" diagnosis for a write of mlsetup's own (state, logs, report) that found
    the disk holding `path` full, with where to look first. `then`: the command that goes on
    once there is room, in place of the signature's `--resume` (which needs a saved run)."""
    sig = next(s for s in _signatures() if s.id == "no-space")
    where = path if os.path.isdir(path) else os.path.dirname(path) or path
    nxt = fill(sig.next, where, None, resume=then or RESUME_COMMAND)
    return Diagnosis(sig.id, sig.why, f"df -h {where}; {nxt}")
