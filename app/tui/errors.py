"""A wizard error recorded for the operator: the traceback in a log file (root-only, never
followed through a symlink), the answers kept beside it, and the next command to run."""

from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from app.tui.launch import Launch
from steps.core.paths import Paths
from steps.core.rootfs import RootFS


@dataclass(frozen=True)
class WizardError:
    what: str
    log: Path | None
    answers: Path | None
    next: str

    def lines(self) -> list[str]:
        out = []
        out.append(f"Traceback: {self.log}" if self.log else "The traceback could not be written.")
        if self.answers:
            out.append(f"Your answers are kept, and saved to {self.answers}.")
        else:
            out.append("Your answers are kept in the wizard.")
        out.append(f"Next: Back to the wizard, or quit and run: {self.next}")
        return out


def _error_dir(launch: Launch) -> Path:
    """Root writes beside the engine's logs; anyone else in their own cache directory."""
    logs = Paths(RootFS(launch.root)).log_dir
    if os.access(logs, os.W_OK):
        return logs
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mlsetup"
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    return base


def _write(path: Path, text: str) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def record(launch: Launch, answers_toml: str | None, error: BaseException) -> WizardError:
    """`answers_toml`: the answers as the wizard has them (None: not loaded yet, the launch's
    answers file is the one to run again with)."""
    what = f"{type(error).__name__}: {error}".strip()
    stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
    log = answers = None
    try:
        where = _error_dir(launch)
        log = where / f"wizard-error-{stamp}.log"
        _write(log, "".join(traceback.format_exception(error)))
        if answers_toml is not None:
            saved = where / f"wizard-answers-{stamp}.toml"
            _write(saved, answers_toml)
            answers = saved
    except OSError:
        pass
    flags = []
    if launch.dry_run:
        flags.append("--dry-run")
    if launch.facts_file is not None:
        flags += ["--facts", str(launch.facts_file)]
    if answers is not None or launch.answers_file is not None:
        flags += ["--answers", str(answers or launch.answers_file)]
    command = " ".join(["mlsetup" if launch.dry_run else "sudo mlsetup", *flags])
    return WizardError(what=what, log=log, answers=answers, next=command)
