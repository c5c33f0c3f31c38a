"""Where mlsetup keeps things on the target machine (FHS), all under the root prefix."""

from __future__ import annotations

from dataclasses import dataclass

from steps.rootfs import OWN_DIRS, RootFS

STATE_DIR, LOG_DIR, CACHE_DIR = OWN_DIRS


@dataclass(frozen=True)
class Paths:
    fs: RootFS

    @property
    def state_dir(self):
        return self.fs.path(STATE_DIR)

    @property
    def state(self):
        return self.fs.path(f"{STATE_DIR}/state.json")

    @property
    def report(self):
        return self.fs.path(f"{STATE_DIR}/report.json")

    @property
    def lock(self):
        return self.fs.path(f"{STATE_DIR}/apply.lock")

    @property
    def log_dir(self):
        return self.fs.path(LOG_DIR)

    @property
    def events(self):
        """The event stream of the current (or last) run, JSON lines."""
        return self.fs.path(f"{LOG_DIR}/events.jsonl")

    def action_log(self, run_id: str, action_id: str):
        return self.fs.path(f"{LOG_DIR}/{run_id}/{action_id}.log")

    @property
    def cache_dir(self):
        return self.fs.path(CACHE_DIR)
