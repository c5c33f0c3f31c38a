"""The engine's memory across kills and reboots: `/var/lib/mlsetup/state.json`.

Written atomically (temporary file, fsync, rename, fsync of the directory) and
readable by root only, so a kill at any instant leaves either the old state or
the new one. A state file that cannot be read is set aside, never overwritten.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

STATE_SCHEMA = "mlsetup.state/1"


class ActionRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: str
    status: Literal["running", "done", "failed"]
    started: float
    ended: float | None = None
    exit_code: int | None = None
    log: str
    pid: int | None = None  # while running: the process, in case the engine dies first


class RebootRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: str
    boot_id: str | None  # the boot before the reboot: after it, this must differ
    driver_branch: int | None  # the driver expected to be loaded after it
    unit_installed: bool = False  # a resume unit runs `mlsetup apply --resume` at boot


class State(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: Literal["mlsetup.state/1"] = Field(alias="schema", default=STATE_SCHEMA)
    run_id: str
    phase: Literal["running", "reboot", "failed", "done"]
    answers_toml: str
    answers_path: str | None
    # The environment the run started in (steps.runner.carried_environment), restored when it
    # resumes: the resume unit after a reboot starts with systemd's bare one.
    environment: dict[str, str] = Field(default_factory=dict)
    plan: dict | None = None
    actions: dict[str, ActionRecord] = Field(default_factory=dict)
    reboot: RebootRecord | None = None
    updated: float = Field(default_factory=time.time)

    def done(self, action_id: str) -> bool:
        record = self.actions.get(action_id)
        return record is not None and record.status == "done"


class CorruptState(Exception):
    def __init__(self, kept_at: Path, why: str) -> None:
        super().__init__(f"state file was unreadable ({why}); kept it at {kept_at}")
        self.kept_at = kept_at


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"-{os.getpid()}"


def load_state(path: Path) -> State | None:
    """The saved state, None if there is none; a corrupt file is moved aside (CorruptState)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        return State.model_validate(json.loads(text))
    except (ValueError, ValidationError) as exc:
        kept = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
        os.replace(path, kept)
        why = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        raise CorruptState(kept, why) from exc


def write_atomic(path: Path, text: str, mode: int = 0o600, durable: bool = True) -> None:
    """Replace `path` with `text` so that a reader (or a crash) sees the old or the new file.
    `durable`: also fsync the file and its directory, so that a power loss keeps the new one."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if not durable:
        return
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def save_state(path: Path, state: State) -> None:
    state.updated = time.time()
    write_atomic(path, state.model_dump_json(by_alias=True, indent=2) + "\n")
