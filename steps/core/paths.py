"""Where mlsetup keeps things on the target machine (FHS), all under the root prefix."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from steps.core.rootfs import OWN_DIRS, RootFS

STATE_DIR, LOG_DIR, CACHE_DIR = OWN_DIRS
RUNTIME_DIR = "/run/mlsetup"  # root's: the jobserver FIFOs of running builds


@dataclass(frozen=True)
class Paths:
    fs: RootFS

    @property
    def state_dir(self) -> Path:
        return self.fs.path(STATE_DIR)

    @property
    def state(self) -> Path:
        return self.fs.path(f"{STATE_DIR}/state.json")

    @property
    def report(self) -> Path:
        return self.fs.path(f"{STATE_DIR}/report.json")

    def handover(self, ticket: str) -> Path:
        """The environment a detached engine is started with (root-only; it takes and removes
        it): not on its command line or in a unit's properties, which every user can read."""
        return self.fs.path(f"{STATE_DIR}/environment-{ticket}.json")

    def handovers(self) -> list[Path]:
        return sorted(self.state_dir.glob("environment-*.json"))

    @property
    def lock(self) -> Path:
        return self.fs.path(f"{STATE_DIR}/apply.lock")

    @property
    def log_dir(self) -> Path:
        return self.fs.path(LOG_DIR)

    def run_dir(self, run_id: str) -> Path:
        """One run's logs: its event stream and one log file per action."""
        return self.fs.path(f"{LOG_DIR}/{run_id}")

    @property
    def current_run(self) -> Path:
        """A symlink to the newest run's directory (the engine re-points it at each new run)."""
        return self.fs.path(f"{LOG_DIR}/current")

    @property
    def current_events(self) -> Path:
        """The event stream of the current (or last) run, JSON lines; viewers follow this."""
        return self.current_run / "events.jsonl"

    def action_log(self, run_id: str, action_id: str) -> Path:
        return self.run_dir(run_id) / f"{action_id}.log"
