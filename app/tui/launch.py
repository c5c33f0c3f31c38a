"""What the command line says about the wizard's session before anything is read: enough to
draw the first screen. The machine's probe, the answers and their plan (`Session.load`: the
planners, the recipes, pynvml) are loaded in a worker once that screen is drawn, so this
module, like `app.tui.app`, imports none of them (tests/tui/test_launch.py checks)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from app.tui.machinelabel import machine_label

if TYPE_CHECKING:
    from app.tui.session import Session


@dataclass(frozen=True)
class Launch:
    root: Path = Path("/")
    answers_file: Path | None = None
    facts_file: Path | None = None
    dry_run: bool = False
    is_root: bool = field(default_factory=lambda: os.geteuid() == 0)

    @classmethod
    def of(cls, session: Session) -> Launch:
        """The launch a loaded session stands for (its dry run and account as they are now)."""
        return cls(
            session.fs.root,
            session.answers_file,
            session.facts_file,
            session.dry_run,
            session.is_root,
        )

    @property
    def machine_label(self) -> str:
        return machine_label(self.facts_file, self.root)

    def load(self) -> Session:
        """The session: the probe (or the recorded facts), the answers, their plan. Seconds
        on a loaded box, and an InputError for answers this machine refuses (exit 2)."""
        from app.tui.session import Session

        return Session.load(self.root, self.answers_file, self.facts_file, self.dry_run)
