"""Match a failed action's output against the known failure signatures in assets/diagnoses.toml."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cache

from steps.knowledge import load_asset

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
    out = []
    for s in load_asset("diagnoses.toml")["signature"]:
        forms = s["pattern"] if isinstance(s["pattern"], list) else [s["pattern"]]
        out.append(_Signature(s["id"], tuple(map(re.compile, forms)), s["why"], s["next"]))
    return tuple(out)


def _fill(template: str, match: re.Match[str], log: str) -> str:
    out = template.replace("{log}", log)
    for i, group in enumerate(match.groups(), 1):
        out = out.replace(f"{{{i}}}", group or "?")
    return out


def diagnose(lines: list[str], exit_code: int | None, log: str) -> Diagnosis | None:
    """The first signature (in the file's order) found in the output, or None."""
    text = "\n".join(lines)
    for sig in _signatures():
        match = sig.search(text)
        if match:
            return Diagnosis(sig.id, _fill(sig.why, match, log), _fill(sig.next, match, log))
    if exit_code in OOM_EXIT_CODES:
        sig = next(s for s in _signatures() if s.id == "out-of-memory")
        return Diagnosis(sig.id, sig.why, sig.next.replace("{log}", log))
    return None


def no_space(path: str, then: str | None = None) -> Diagnosis:
    """The "no-space" diagnosis for a write of mlsetup's own (state, logs, report) that found
    the disk holding `path` full, with where to look first. `then`: the command that goes on
    once there is room, in place of the signature's `--resume` (which needs a saved run)."""
    from steps.applyrun import RESUME_COMMAND  # here: applyrun imports this module

    sig = next(s for s in _signatures() if s.id == "no-space")
    where = path if os.path.isdir(path) else os.path.dirname(path) or path
    nxt = sig.next if then is None else sig.next.replace(RESUME_COMMAND, then)
    return Diagnosis(sig.id, sig.why, f"df -h {where}; {nxt}")
