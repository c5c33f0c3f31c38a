"""The engine's memory across kills and reboots: `/var/lib/mlsetup/state.json`.

Written atomically (temporary file, fsync, rename, fsync of the directory) and
readable by root only, so a kill at any instant leaves either the old state or
the new one. A state file that cannot be read is set aside, never overwritten.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from steps.core.errors import InputError
from steps.core.safefs import read_bounded
from steps.core.sizes import MiB

STATE_SCHEMA: Final = "mlsetup.state/1"
# A real state is a few KiB (the plan and one record per action); past these it is not ours.
STATE_LIMIT = MiB
STATE_MAX_DEPTH = 32
# new_run_id()'s shape; it names a directory under /var/log/mlsetup, so nothing else (no "/",
# no "..") may come back from a file as a run id.
RUN_ID_PATTERN = r"^\d{8}-\d{6}-\d+$"


class ActionRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: str
    status: Literal["running", "done", "failed"]
    started: float
    ended: float | None = None
    exit_code: int | None = None
    log: str
    pid: int | None = None  # while running: the process, in case the engine dies first
    # ... and what makes it that process, not another one given its pid later: its start time
    # (psutil's create_time) and its uid
    pid_started: float | None = None
    pid_uid: int | None = None


class RebootRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: str
    boot_id: str | None  # the boot before the reboot: after it, this must differ
    driver_branch: int | None  # the driver expected to be loaded after it
    unit_installed: bool = False  # a resume unit runs `mlsetup apply --resume` at boot


class State(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: Literal["mlsetup.state/1"] = Field(alias="schema", default=STATE_SCHEMA)
    run_id: str = Field(pattern=RUN_ID_PATTERN)
    phase: Literal["running", "reboot", "failed", "done"]
    answers_toml: str
    answers_path: str | None
    # The environment the run started in (steps.run.runner.carried_environment), restored when it
    # resumes: the resume unit after a reboot starts with systemd's bare one.
    environment: dict[str, str] = Field(default_factory=dict)
    plan: dict | None = None
    actions: dict[str, ActionRecord] = Field(default_factory=dict)
    reboot: RebootRecord | None = None
    updated: float = Field(default_factory=time.time)

    def done(self, action_id: str) -> bool:
        record = self.actions.get(action_id)
        return record is not None and record.status == "done"


class CorruptState(InputError):
    """state.json is not a state this version wrote: it was moved aside (exit 2)."""

    def __init__(self, path: Path, kept_at: Path | None, why: str) -> None:
        where = (
            f"moved it to {kept_at}; the next apply starts fresh: sudo mlsetup apply --answers FILE"
            if kept_at
            else f"it could not be moved aside either: move it away yourself (sudo mv {path} "
            f"{path}.bad), then: sudo mlsetup apply --answers FILE"
        )
        super().__init__(f"state file {path} is unusable ({why}); {where}", kind="state")
        self.kept_at = kept_at


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"-{os.getpid()}"


def load_state(path: Path) -> State | None:
    """The saved state, None if there is none. Anything else at `path` (a link, a directory, a
    FIFO, binary or huge or deeply nested data, another schema, a run id that is not a plain
    name) is moved aside with a timestamp and reported (CorruptState); a reader without the
    right to read it (not root) gets the PermissionError."""
    try:
        data = read_bounded(path, STATE_LIMIT)
    except FileNotFoundError:
        return None
    except PermissionError:
        raise
    except OSError as exc:  # safefs.UnsafeFile included: not a regular file, too large
        raise _set_aside(path, exc.strerror or str(exc)) from exc
    try:
        value = json.loads(data.decode("utf-8"))
        _check_depth(value)
        return State.model_validate(value)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise _set_aside(path, f"{where}: {err['msg']}") from exc
    except UnicodeDecodeError as exc:
        raise _set_aside(path, f"binary data, not UTF-8 JSON (byte {exc.start})") from exc
    except RecursionError as exc:
        raise _set_aside(path, f"nested deeper than {STATE_MAX_DEPTH} levels") from exc
    except ValueError as exc:  # json.JSONDecodeError and _check_depth
        raise _set_aside(path, str(exc)) from exc


def peek_state(path: Path) -> State | None:
    """The saved state if there is a usable one, else None; unlike load_state it moves
    nothing aside (for what a message advises, not for a run to go on from)."""
    try:
        return State.model_validate_json(read_bounded(path, STATE_LIMIT))
    except (OSError, ValueError):  # a ValidationError is a ValueError
        return None


def _check_depth(value: object) -> None:
    """Refuse JSON nested deeper than a state ever is (the parser itself stops near 1000)."""
    level = [value]
    for _ in range(STATE_MAX_DEPTH):
        level = [
            child
            for item in level
            if isinstance(item, (dict, list))
            for child in (item.values() if isinstance(item, dict) else item)
        ]
        if not level:
            return
    raise ValueError(f"nested deeper than {STATE_MAX_DEPTH} levels")


def _set_aside(path: Path, why: str) -> CorruptState:
    """Move whatever is at `path` (the name itself, never what a link points to) out of the
    way, so that the next apply starts fresh and nothing of it is lost."""
    kept: Path | None = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
    assert kept is not None
    for n in range(1, 100):  # two set aside within one second keep both
        if not os.path.lexists(kept):
            break
        kept = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}-{n}")
    try:
        os.rename(path, kept)
    except FileNotFoundError:
        pass  # another reader moved it meanwhile: the next apply starts fresh all the same
    except OSError:
        kept = None
    return CorruptState(path, kept, why)


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
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if exc.filename is None:  # a failed write() names no file: a full disk must say which
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
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


def remove_temporaries(directory: Path) -> None:
    """Remove what `write_atomic` left in `directory` of the state, the report and the
    governor's record of stopped jobs (steps.building.governor) when their writer was killed between
    the temporary file and the rename. Only the apply lock's holder calls this: no live writer
    of those files exists then."""
    for name in ("state.json", "report.json", "governed-build.json"):
        for tmp in directory.glob(f".{name}.*"):
            with contextlib.suppress(OSError):
                if tmp.is_file() and not tmp.is_symlink():
                    tmp.unlink()


def save_state(path: Path, state: State) -> None:
    state.updated = time.time()
    write_atomic(path, state.model_dump_json(by_alias=True, indent=2) + "\n")


def resume_or_new(
    old: State | None, answers_toml: str, answers_path: str | None
) -> tuple[State, bool, str]:
    """The run an apply goes on with: the saved one `old` if it is unfinished and had the same
    answers, else a new one. The state, True if resumed, and why (for decisions.log)."""
    if old and old.phase != "done" and old.answers_toml == answers_toml:
        why = f"resuming run {old.run_id} (phase {old.phase}): same answers, unfinished"
        return old, True, why
    new = State(
        run_id=new_run_id(), phase="running", answers_toml=answers_toml, answers_path=answers_path
    )
    why = "new run: " + (
        "no earlier run"
        if old is None
        else f"run {old.run_id} is done"
        if old.phase == "done"
        else f"run {old.run_id} had other answers"
    )
    return new, False, why
