"""The wizard's model: the machine, the answers being edited, and what the engine was asked.

Plain Python, no Textual: the screens read and change a `Session`; the engine is only ever
driven through `steps` (the same answers model and planner as `mlsetup apply`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from app.tui.machinelabel import machine_label
from app.tui.releasecheck import ReleaseCheck, ReleaseChecks
from steps.apply.engine import ApplyLock
from steps.core.errors import InputError, describe_validation_error, refusal
from steps.core.paths import STATE_DIR, Paths
from steps.core.rootfs import RootFS
from steps.core.safefs import replace_file
from steps.core.settings import settings
from steps.decide.choices import Choices, choose
from steps.formats.answers import Answers, load_answers
from steps.formats.facts import Facts, load_facts
from steps.formats.lock import PlannedStack
from steps.formats.plan import Plan
from steps.formats.state import CorruptState, State, load_state, write_atomic
from steps.planning.planner import plan_for
from steps.probing.probe import probe
from steps.run.asaccount import call_as
from steps.stack.obtain import check_extension_releases, lock_for_plan, release_index
from steps.stack.venvstate import VenvState, probe_venv

APPLY_ANSWERS = f"{STATE_DIR}/answers.toml"
DEFAULT_SAVE = "./mlsetup-answers.toml"
WRITE_LIMIT_S = 60.0  # an answers file written as the invoking account: a moment, not longer
Opening = Literal["wizard", "attach", "resume"]
STACK_INDIFFERENT = ("build", "reboot")  # answers sections no resolution of the stack reads


def parse_value(raw: str, kind: str) -> Any:
    """What a person typed into a field, as the answers model expects it."""
    text = raw.strip()
    if kind == "list":
        if text == "auto":
            return "auto"
        return [w for w in text.replace(",", " ").split() if w]
    if kind == "strlist":
        return [w for w in text.replace(",", " ").split() if w]
    if kind == "jobs":
        return int(text) if text.isdigit() else text
    return text


def show_value(value: Any) -> str:
    """An answers value as it is shown in a field (the inverse of `parse_value`)."""
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def get_key(data: dict[str, Any], key: str) -> Any:
    node: Any = data
    for part in _parts(key):
        node = node[part]
    return node


def _parts(key: str) -> list[str | int]:
    """'extensions[1].archs' -> ['extensions', 1, 'archs']."""
    out: list[str | int] = []
    for word in key.split("."):
        name, _, rest = word.partition("[")
        out.append(name)
        if rest:
            out.append(int(rest.rstrip("]")))
    return out


def _set_key(data: dict[str, Any], key: str, value: Any) -> None:
    parts = _parts(key)
    node: Any = data
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = value


@dataclass
class Session:
    fs: RootFS
    facts: Facts
    answers: Answers
    dry_run: bool
    facts_file: Path | None = None
    answers_file: Path | None = None
    notes: list[str] = field(default_factory=list)
    is_root: bool = field(default_factory=lambda: os.geteuid() == 0)
    # the stack resolved for each stack's inputs seen (`stack_key`), for those uv refused why,
    # and when the resolution of those being resolved now started
    stacks: dict[str, PlannedStack] = field(default_factory=dict)
    refused: dict[str, InputError] = field(default_factory=dict)
    resolving: dict[str, float] = field(default_factory=dict)
    # the extension releases an edit named, asked of the index first (app.tui.releasecheck)
    checks: ReleaseChecks = field(default_factory=ReleaseChecks)
    # called after an accepted change of the answers: the app resolves their stack again
    on_change: Callable[[], None] | None = None

    @classmethod
    def load(
        cls,
        root: Path = Path("/"),
        answers: Path | None = None,
        facts: Path | None = None,
        dry_run: bool = False,
    ) -> Session:
        fs = RootFS(root)
        if facts is not None:
            found, notes = load_facts(facts), []
        else:
            result = probe(fs)
            found, notes = result.facts, result.notes
        session = cls(
            fs=fs,
            facts=found,
            answers=load_answers(answers),
            dry_run=dry_run,
            facts_file=facts,
            answers_file=answers,
            notes=notes,
        )
        # answers this machine refuses (a branch its GPUs lack, no such venv.user): exit 2 now
        session.plan()
        return session

    # -- what the engine would do -------------------------------------------------------------

    def choices(self) -> Choices:
        stack = self.stack()
        return choose(self.facts, self.answers, stack.lock if stack else None)

    def venv(self) -> VenvState | None:
        if self.facts_file is not None:  # a recorded machine: its venv cannot be looked at
            return None
        return probe_venv(self.fs, self.choices().venv_path)

    @property
    def on_machine(self) -> bool:
        """The facts are this machine's (not a recorded one's)."""
        return self.facts_file is None

    def stack_key(self, answers: Answers | None = None) -> str:
        """The answers a resolution of the stack reads: all but how the builds are run (jobs,
        RAM) and the reboot policy, so changing those keeps the stack resolved."""
        data = (answers or self.answers).model_dump(mode="json")
        for section in STACK_INDIFFERENT:
            data.pop(section, None)
        return json.dumps(data, sort_keys=True)

    def stack(self) -> PlannedStack | None:
        """The stack resolved for the answers as they are now; None: not (yet) resolved."""
        return self.stacks.get(self.stack_key())

    def stack_refused(self) -> str | None:
        """Why uv refused the answers as they are now (their packages do not resolve here)."""
        exc = self.refused.get(self.stack_key())
        return str(exc) if exc is not None else None

    def refused_as_cli(self) -> str | None:
        """The refusal as `mlsetup plan` prints it for these answers (it exits 2)."""
        exc = self.refused.get(self.stack_key())
        return f"mlsetup: {refusal(exc)}" if exc is not None else None

    def resolving_since(self) -> float | None:
        """When the resolution of the answers as they are now started (time.time()); None:
        none is going on."""
        return self.resolving.get(self.stack_key())

    def needs_resolution(self) -> bool:
        """No resolution is known or going on for the answers as they are now, and none waits
        for the index's answer about a release they name."""
        key = self.stack_key()
        done = key in self.stacks or key in self.refused or key in self.resolving
        return not done and key not in self.checks.asking

    def release_check(self) -> ReleaseCheck | None:
        """The index being asked about an extension release these answers name; None: none."""
        return self.checks.asking.get(self.stack_key())

    def needs_release_check(self) -> bool:
        key = self.stack_key()
        return key in self.checks.asking and key not in self.checks.started

    def check_releases(self, key: str) -> None:
        """Ask the index about the releases of the check of `key` (`needs_release_check`), as
        `mlsetup plan` does before it resolves: uv, seconds, or its network timeout where the
        index hangs, so the app calls this in a worker thread, then `releases_checked`."""
        check = self.checks.asking[key]
        try:
            check_extension_releases(self.fs, self.facts, check.answers, self.on_machine)
        except InputError as exc:
            self.checks.answered(key, check, exc)
        else:
            self.checks.answered(key, check, None)

    def releases_checked(self, key: str) -> ReleaseCheck | None:
        """The check of `key` was answered: it lands if the answers are still those it asked
        about (a refusal sets the versions back, `refusal` says why); None when a newer edit
        superseded it."""
        check = self.checks.asking.pop(key, None)
        if check is None or key != self.stack_key():
            return None
        error = self.checks.refused.get(key)
        if error is not None:
            check.refusal = str(error)
            self.answers = check.set_back(self.answers)
        return check

    def resolve_stack(self) -> None:
        """Resolve the stack for the answers as they are now, as `mlsetup plan` does (uv,
        metadata only, nothing written): seconds to a minute, so the app calls this in a
        worker thread and shows the plan again when it returns."""
        answers = self.answers
        key = self.stack_key(answers)
        self.resolving.setdefault(key, time.time())
        try:
            self.stacks[key] = lock_for_plan(self.fs, self.facts, answers, self.on_machine)
        except InputError as exc:
            self.refused[key] = exc
        finally:
            self.resolving.pop(key, None)

    def plan(self) -> Plan:
        """The plan `mlsetup plan` prints for these answers (steps.planning.planner.plan_for, on the
        facts probed when the wizard opened) once their stack is resolved; until then, and
        when uv refused them (the reason first), planned from knowledge."""
        refused = self.stack_refused()
        stack = PlannedStack(None, refused) if refused else self.stack() or PlannedStack(None)
        return plan_for(self.fs, self.facts, self.answers, self.on_machine, stack)

    @property
    def machine_label(self) -> str:
        return machine_label(self.facts_file, self.fs.root)

    # -- editing the answers ------------------------------------------------------------------

    def value(self, key: str) -> Any:
        return get_key(self.answers.model_dump(mode="json"), key)

    def set_value(self, key: str, value: Any) -> str | None:
        """Change one answer; the reason it is refused (key, value, what is allowed), or None."""
        data = self.answers.model_dump(mode="json")
        _set_key(data, key, value)
        return self._replace(data, key)

    def add_extension(self, name: str, version: str) -> str | None:
        data = self.answers.model_dump(mode="json")
        data["extensions"].append({"name": name, "version": version})
        return self._replace(data)

    def remove_extension(self, index: int) -> None:
        data = self.answers.model_dump(mode="json")
        del data["extensions"][index]
        self._replace(data)

    def _replace(self, data: dict[str, Any], key: str = "") -> str | None:
        try:
            answers = Answers.model_validate(data)
        except ValidationError as exc:
            lines = describe_validation_error("", exc).splitlines()[1:]
            return "\n".join(line.strip() for line in lines)
        before, self.answers = self.answers, answers
        # answers the model takes but the planner cannot use on this machine (a branch past what
        # its GPUs support, proprietary modules on GH200) are refused the same way
        try:
            self.plan()
            # the releases it names that the index was not asked about: asked next
            self.checks.after_edit(
                (before, self.stack_key(before)),
                (answers, self.stack_key()),
                lambda: release_index(self.fs, self.facts, answers),
            )
        except InputError as exc:
            self.answers = before
            return str(exc)
        except ValueError as exc:
            self.answers = before
            value = get_key(data, key) if key else ""
            return f"{key} = {json.dumps(value)}: {' '.join(str(exc).split())}"
        if self.on_change is not None:
            self.on_change()
        return None

    # -- files --------------------------------------------------------------------------------

    def save_answers(self, path: Path) -> Saved:
        """Write the answers for `mlsetup apply --answers` / `mlsetup --answers` elsewhere.
        Under sudo the file is written by the invoking account, so it is that account's (not
        a root-owned file in their checkout) and root writes nothing in a directory another
        account controls; OSError says why it could not be written."""
        path = path.expanduser().absolute()
        text = self.answers.to_toml()
        account = invoking_account()
        if account is None:  # root logged in as root, or a normal user: the same rules
            replace_file(path, text.encode(), 0o600, create_parents=True)
            return Saved(path, None)
        name, uid, gid = account
        write_as(uid, gid, path, text)
        return Saved(path, name)

    def write_apply_answers(self) -> Path:
        """The answers the detached engine is started with: root-only, atomically written."""
        path = self.fs.path(APPLY_ANSWERS)
        write_atomic(path, self.answers.to_toml(), mode=0o600)
        return path

    def why_not_apply(self) -> str | None:
        """Why this session cannot apply (None: it can)."""
        if refused := self.stack_refused():
            return refused
        if check := self.release_check():
            return f"{check.note} Apply waits for its answer"
        if unseen := self.checks.unseen:
            return unseen.refusal
        if self.dry_run:
            return None
        if self.facts_file is not None:
            return "--facts shows a recorded machine: it can only be dry-run (add --dry-run)"
        if not self.is_root:
            return (
                "applying changes the system and needs root: quit (ctrl+q), save your answers "
                "first if you changed any (ctrl+s), then run: sudo mlsetup"
            )
        return None

    # -- what is going on already -------------------------------------------------------------

    def apply_running(self) -> int | None:
        try:
            return ApplyLock(Paths(self.fs).lock).holder()
        except OSError:  # not root: the lock is root-only
            return None

    def saved_state(self) -> State | None:
        try:
            return load_state(Paths(self.fs).state)
        except CorruptState as exc:
            self.notes.append(str(exc))
            return None
        except OSError:
            return None

    def report(self) -> dict[str, Any] | None:
        try:
            return json.loads(Paths(self.fs).report.read_text())
        except (OSError, ValueError):
            return None

    def opening(self) -> tuple[Opening, State | None]:
        """Which screen the wizard opens on: attached to a running apply, Resume, or Machine."""
        if self.dry_run:
            return "wizard", None
        if self.apply_running() is not None:
            return "attach", None
        state = self.saved_state()
        if state is not None and state.phase in ("reboot", "failed", "running"):
            return "resume", state
        return "wizard", None

    def reprobe(self) -> Facts:
        """The machine again (after a reboot): driver loaded, which version."""
        if self.facts_file is None:
            self.facts = probe(self.fs).facts
        return self.facts


@dataclass(frozen=True)
class Saved:
    path: Path
    owner: str | None  # the account that wrote it under sudo; None: this process's own

    def __str__(self) -> str:
        return f"{self.path} (owned by {self.owner})" if self.owner else str(self.path)


def write_as(uid: int, gid: int, path: Path, text: str) -> None:
    """Write `path` in a child that has become the account (uid, gid): its own permissions
    decide, the file is its own, readable by it only (it may name a mirror with credentials),
    and nothing planted there is written through (steps.core.safefs.replace_file). A write the
    account holds up (keeps stopped) is ended (steps.run.asaccount). OSError with the child's
    reason when it could not."""
    data = text.encode()
    call_as(
        uid,
        gid,
        lambda: replace_file(path, data, 0o600, create_parents=True),
        min(settings().account_timeout, WRITE_LIMIT_S),
    )


def invoking_account() -> tuple[str, int, int] | None:
    """(name, uid, gid) of the account that ran `sudo mlsetup`; None when not under sudo."""
    if os.geteuid() != 0:
        return None
    try:
        uid, gid = int(os.environ["SUDO_UID"]), int(os.environ["SUDO_GID"])
    except (KeyError, ValueError):
        return None
    return (os.environ.get("SUDO_USER") or str(uid), uid, gid) if uid != 0 else None


def default_save_path() -> str:
    return DEFAULT_SAVE if os.access(".", os.W_OK) else str(Path.home() / "mlsetup-answers.toml")
