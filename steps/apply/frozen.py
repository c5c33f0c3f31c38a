"""After the sync, torch is frozen: what an extension's wheel may bring into the venv.

The venv step installs the lock in one `uv pip sync`. Every install after it names all it
installs (--no-deps) at the lock's versions and hashes (steps.planning.extensions builds those
argvs). What no argv can say is what an extension's wheel itself requires, and which bytes it is. So
root reads each wheel before it goes in (one built earlier when the extensions step starts, the
one just built before its install): a wheel whose Requires-Dist the lock does not satisfy (it
needs another torch, or a package the lock does not hold) is refused with exit 2, naming the
package, its requirement and the locked torch, before anything of it is installed; otherwise
root pins the sha256 of the bytes it read in a constraint file beside the lock
(extensions.wheel_pin), so uv installs exactly those bytes or nothing. An extension's source
from the index is pinned the same way, by the hash the index publishes (extensions.SOURCES).
"""

from __future__ import annotations

import hashlib
import logging
import os
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from typing import NoReturn

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from steps.apply.actions import ActionRunner
from steps.apply.applyrun import ApplyRun, Fault
from steps.apply.diagnose import Diagnosis
from steps.building.wheels import (
    BUILD_ROOT,
    WHEEL_CACHE,
    WHEEL_LIMIT,
    _is_wheel_of,
    find_wheels,
    tree_name,
)
from steps.core.accounts import lookup_account
from steps.core.exitcodes import EXIT_INPUT
from steps.core.nextcommands import RESUME_COMMAND
from steps.core.safefs import open_dir, open_regular, trusted_dir, walk
from steps.core.sizes import MiB
from steps.decide.choices import BuildTarget, Choices
from steps.formats.events import Notice
from steps.formats.lock import SHARED_DIR, make_shared_dir
from steps.formats.plan import Action, Step
from steps.formats.state import write_atomic
from steps.planning.extensions import (
    SOURCES,
    build_requirements,
    usable_keys,
    wheel_pin,
)
from steps.run.index import configured, index_args, local_index
from steps.stack.uvfailure import Missing, read_failure
from steps.stack.venvstate import VenvState, probe_venv

log = logging.getLogger("mlsetup.frozen")

SOURCES_IN = f"{SHARED_DIR}/sources.in"  # what uv resolves the sources' hashes from
METADATA_LIMIT = MiB  # a wheel's METADATA is a few KiB; its long description at most this


@dataclass(frozen=True)
class WheelFile:
    """One wheel as root read it: its name, the sha256 of those bytes, what it requires."""

    name: str
    sha256: str
    requires: tuple[str, ...]


class WheelUnreadable(Exception):
    """The wheel is not one root can read safely or make sense of."""


def read_wheel(fd: int, name: str) -> WheelFile:
    """The wheel open at `fd` (which this closes): hashed and its METADATA read from the same
    bytes, bounded."""
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as f:
        size = 0
        while chunk := f.read(MiB):
            size += len(chunk)
            if size > WHEEL_LIMIT:
                raise WheelUnreadable(f"{name} is larger than {WHEEL_LIMIT} bytes")
            digest.update(chunk)
        f.seek(0)
        try:
            with zipfile.ZipFile(f) as zf:
                metadata = [
                    i
                    for i in zf.infolist()
                    if i.filename.count("/") == 1 and i.filename.endswith(".dist-info/METADATA")
                ]
                if len(metadata) != 1 or metadata[0].file_size > METADATA_LIMIT:
                    raise WheelUnreadable(f"{name} has no single readable .dist-info/METADATA")
                with zf.open(metadata[0]) as m:
                    text = m.read(METADATA_LIMIT + 1).decode("utf-8", "replace")
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            raise WheelUnreadable(f"{name} is not a readable wheel: {exc}") from None
    requires = HeaderParser().parsestr(text).get_all("Requires-Dist") or []
    return WheelFile(name, digest.hexdigest(), tuple(str(r).strip() for r in requires))


def unmet(requires: tuple[str, ...], stack: Mapping[str, str], python: str) -> list[str]:
    """Each requirement (Requires-Dist) that `stack` (canonical name -> version: the lock, or
    the venv kept unlocked) does not satisfy, as the refusal names it; markers are judged for
    the venv's Python on this machine."""
    env: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    env["extra"] = ""
    if python:
        env["python_full_version"] = python
        env["python_version"] = ".".join(python.split(".")[:2])
    out = []
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            out.append(f"{line!r} (not a requirement mlsetup can read)")
            continue
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        have = stack.get(canonicalize_name(req.name))
        if have is None:
            out.append(f"{req} (the lock has no {req.name})")
            continue
        try:
            ok = req.specifier.contains(Version(have), prereleases=True)
        except InvalidVersion:
            ok = False
        if not ok:
            out.append(f"{req} (the lock has {req.name} {have})")
    return out


class FrozenStack:
    """The engine's checks that keep the extensions step inside the lock."""

    def __init__(self, run: ApplyRun, actions: ActionRunner) -> None:
        self.run = run
        self.actions = actions

    def before_run(self) -> None:
        """Before any step changes the machine: a wheel built earlier for the locked torch that
        the extensions step would install must fit the lock (exit 2 if not: nothing installed)."""
        choices, fs = self.run.choices, self.run.fs
        lock = choices.lock
        if lock is None:
            return
        venv = probe_venv(fs, choices.venv_path)
        # the venv as the sync will leave it: the wheel cache's key follows the lock's torch
        synced = VenvState(choices.venv_path, lock.python, {"torch": lock.torch})
        for target in choices.build_targets:
            package, version = target.recipe.package, target.answer.version
            if venv and venv.version_of(package) == version:
                continue
            key = self._earlier(target, synced)
            if key is not None:
                self._check(target, None, key)

    def before_step(self, step: Step) -> None:
        """Before the extensions step runs anything: every build requirement is in the lock,
        every wheel built earlier that is about to be installed fits it (exit 2 if not), and the
        sources it downloads are pinned."""
        lock = self.run.choices.lock
        for target in self.run.choices.build_targets:
            missing = [n for n in build_requirements(target) if lock and n not in lock.packages]
            if missing and any(
                a.kind == "build" and a.target == target.answer.name for a in step.actions
            ):
                self._refuse(
                    None,
                    f"{target.answer.name}'s build needs {', '.join(missing)}, which the lock "
                    "does not hold (a venv.lock resolved without this extension?); every install "
                    "after the sync comes from the lock, so nothing was installed",
                    "Resolve the lock with this extension in the answers (leave venv.lock empty, "
                    "or make the lock on a host with the same extensions), then run the apply "
                    "again.",
                )
        for action in step.actions:
            if action.kind == "install-wheel":
                self._check(self._target(action), action, self._key(action))
        self._pin_sources(step)

    def before_install(self, action: Action) -> None:
        """Right before an extension's wheel is installed: it fits the lock, and the hash of the
        bytes root read is pinned where the install's argv reads it."""
        target = self._target(action)
        wheels = self._check(target, action, self._key(action))
        pin = wheel_pin(target.recipe.package, target.answer.version)
        hashes = " ".join(f"--hash=sha256:{w.sha256}" for w in wheels)
        make_shared_dir(self.run.fs.path(SHARED_DIR))
        write_atomic(
            self.run.fs.path(pin),
            f"{target.recipe.package}=={target.answer.version} {hashes}\n",
            mode=0o644,
        )
        log.info("%s: pinned %s in %s", action.id, [(w.name, w.sha256) for w in wheels], pin)

    # -- the sources --------------------------------------------------------------------------

    def _pin_sources(self, step: Step) -> None:
        """The sdists this step downloads, pinned by the hashes their index publishes: uv
        resolves each release alone (--no-deps: metadata from the index page only, no build
        backend runs) from the same index as the lock, into SOURCES, which the download reads
        as a constraint with --require-hashes."""
        choices, fs, state = self.run.choices, self.run.fs, self.run.state
        wanted = {f"extensions.{t.answer.name}.source": t for t in choices.build_targets}
        reqs = [
            wanted[a.id].recipe.requirement_for(wanted[a.id].answer.version)
            for a in step.actions
            if a.id in wanted and not (state and state.done(a.id))  # a resume: downloaded
        ]
        if not reqs:
            return
        make_shared_dir(self.run.fs.path(SHARED_DIR))
        write_atomic(fs.path(SOURCES_IN), "\n".join(reqs) + "\n", mode=0o644)
        fs.path(SOURCES).unlink(missing_ok=True)  # no earlier run's pins stand in for these
        lock = choices.lock
        action = Action(
            id="extensions.source-hashes",
            kind="source-hashes",
            title=f"Resolve the hashes of {', '.join(reqs)}'s source on the index",
            argv=[
                "uv",
                "pip",
                "compile",
                "--no-config",
                "--no-deps",
                "--generate-hashes",
                "--no-header",
                "--no-annotate",
                "--no-python-downloads",
                "--python-version",
                lock.python if lock else choices.python,
                *index_args(
                    self.run.req.answers,
                    lock.build if lock else choices.torch_build,
                    configured(),
                ),
                "--output-file",
                SOURCES,
                SOURCES_IN,
            ],
        )
        result = self.actions.command("extensions", action)
        if result is not None and result.exit_code == 0:
            log.info("source hashes: %s", fs.read_text(SOURCES))
            return
        said = " ".join(result.tail[-6:]) if result else "uv could not be started"
        if result is not None and isinstance(
            read_failure(result.tail, local_index(self.run.req.answers, configured())), Missing
        ):
            self._refuse(
                None,
                f"the index has no {', '.join(reqs)} (or none for Python "
                f"{lock.python if lock else choices.python}): uv says: {said}",
                "Set the extension's version to a release its index has, then run the apply again.",
            )
        self.run.fail(
            Fault(
                "extensions",
                f"uv could not resolve the hashes of {', '.join(reqs)}: {said}",
                exit_code=result.exit_code if result else None,
                diagnosis=Diagnosis(
                    "index-unreachable",
                    "uv could not reach the package index for the extensions' sources.",
                    "Check the network, proxy and index settings (UV_DEFAULT_INDEX, "
                    f"torch.index_url), then: {RESUME_COMMAND}",
                ),
            )
        )

    # -- reading the wheels -------------------------------------------------------------------

    def _check(
        self, target: BuildTarget, action: Action | None, key: str | None
    ) -> list[WheelFile]:
        """The target's wheels (built earlier under `key`; None: just built), read; exit 2 unless
        every one fits the lock."""
        choices = self.run.choices
        venv = probe_venv(self.run.fs, choices.venv_path)
        where, wheels = self._read(target, action, key)
        if not wheels:
            self.run.fail(
                Fault(
                    "extensions",
                    f"no wheel of {target.recipe.package} {target.answer.version} in {where}",
                    action=action,
                )
            )
        stack, python = _stack(choices, venv)
        problems = {w.name: found for w in wheels if (found := unmet(w.requires, stack, python))}
        if problems:
            torch = stack.get("torch", "none")
            named = "; ".join(f"{name} requires {', '.join(p)}" for name, p in problems.items())
            self._refuse(
                action,
                f"{target.answer.name} {target.answer.version}: its wheel in {where}: {named}. "
                f"Nothing installed after the sync may change the locked stack (torch "
                f"{torch}): nothing of {target.answer.name} was installed",
                _next_for(target, torch, problems),
            )
        log.info("%s: %s fit the lock", target.answer.name, [w.name for w in wheels])
        return wheels

    def _target(self, action: Action) -> BuildTarget:
        return next(t for t in self.run.choices.build_targets if t.answer.name == action.target)

    def _key(self, action: Action) -> str | None:
        """The wheel cache key an install-wheel action takes its wheel by; None: just built."""
        if action.kind != "install-wheel":
            return None
        venv = probe_venv(self.run.fs, self.run.choices.venv_path)
        return self._earlier(self._target(action), venv) or ""

    def _earlier(self, target: BuildTarget, venv: VenvState | None) -> str | None:
        """The key of the wheel built earlier that the venv gets (as extensions._actions picks
        it: its owner's, else root's), None when there is none."""
        choices = self.run.choices
        wanted = {
            k: (target.recipe.package, target.answer.version)
            for _, k in usable_keys(target, choices, venv)
        }
        found = find_wheels(
            self.run.fs, self.run.req.answers.build.wheelhouse, wanted, choices.owner.run_as
        )
        return next((k for k in wanted if k in found), None)

    def _read(
        self, target: BuildTarget, action: Action | None, key: str | None
    ) -> tuple[str, list[WheelFile]]:
        """Where the install takes the target's wheel from, and each of its wheels there."""
        package, version = target.recipe.package, target.answer.version
        try:
            where, dir_fd, file_owner = (
                self._open_built(target) if key is None else self._open_earlier(target, key)
            )
        except OSError as exc:
            self.run.fail(
                Fault("extensions", f"refused to read {package}'s wheel: {exc}", action=action)
            )
        try:
            out = []
            for name in sorted(os.listdir(dir_fd)):
                if not _is_wheel_of(name, package, version):
                    continue
                try:
                    fd = open_regular(name, dir_fd=dir_fd, owner=file_owner)
                except OSError as exc:  # a link, a FIFO, another's file: its hash is not pinned
                    self.run.emit(Notice(text=f"did not read {where}/{name}: {exc.strerror}"))
                    continue
                out.append(read_wheel(fd, name))
        except (OSError, WheelUnreadable) as exc:
            self.run.fail(Fault("extensions", f"refused {where}: {exc}", action=action))
        finally:
            os.close(dir_fd)
        return where, out

    def _open_earlier(self, target: BuildTarget, key: str) -> tuple[str, int, int | None]:
        """The directory of the wheel built earlier under `key` (the machine's cache, else the
        wheelhouse), trusted as find_wheels trusts it."""
        fs, choices = self.run.fs, self.run.choices
        wheelhouse = self.run.req.answers.build.wheelhouse
        wanted = {key: (target.recipe.package, target.answer.version)} if key else {}
        where = find_wheels(fs, wheelhouse, wanted, choices.owner.run_as).get(key, "")
        if not where:
            raise FileNotFoundError(0, "no wheel built earlier any more", key)
        me = os.geteuid()
        if where == f"{WHEEL_CACHE}/{key}":  # the machine's cache is root's alone
            base, owners = fs.path(WHEEL_CACHE), {me}
        else:
            owner = lookup_account(fs, choices.owner.run_as) if choices.owner.run_as else None
            base, owners = Path(wheelhouse), {me, owner.uid if owner else me}
        base_fd = trusted_dir(base, owners, mode=None)
        try:
            # a trusted directory: only root or the operator put its files there
            return where, trusted_dir(key, owners, dir_fd=base_fd, mode=None), None
        finally:
            os.close(base_fd)

    def _open_built(self, target: BuildTarget) -> tuple[str, int, int | None]:
        """The wheels directory of the target's build tree: the compiling account's, walked
        without following a link, its files that account's."""
        fs, choices = self.run.fs, self.run.choices
        owner = lookup_account(fs, choices.owner.run_as) if choices.owner.run_as else None
        builder = owner.uid if owner else os.geteuid()
        tree = tree_name(target.answer.name, target.answer.version)
        root_fd = open_dir(fs.path(BUILD_ROOT), owner=os.geteuid())
        try:
            return (
                f"{BUILD_ROOT}/{tree}/wheels",
                walk(root_fd, f"{tree}/wheels", owner=builder),
                builder,
            )
        finally:
            os.close(root_fd)

    # -- the refusal and the shared directory -------------------------------------------------

    def _refuse(self, action: Action | None, what: str, nxt: str) -> NoReturn:
        self.run.fail(
            Fault(
                "extensions",
                what,
                action=action,
                diagnosis=Diagnosis(
                    "outside-the-lock",
                    "Every install after the sync must fit the lock: torch, and everything built "
                    "against it, never moves.",
                    nxt,
                ),
                code=EXIT_INPUT,
            )
        )


def _stack(choices: Choices, venv: VenvState | None) -> tuple[dict[str, str], str]:
    """What the wheel must fit (the lock; a venv kept unlocked: what it holds), and the venv's
    Python."""
    python = (venv.python_version if venv else None) or choices.python
    if choices.lock is not None:
        return dict(choices.lock.packages), python
    return (dict(venv.packages) if venv else {}), python


def _next_for(target: BuildTarget, torch: str, problems: Mapping[str, list[str]]) -> str:
    name = target.answer.name
    if any(p.startswith("torch") for found in problems.values() for p in found):
        return (
            f"Use a release of {name} whose wheel allows torch {torch} (extensions.version), or "
            f"remove that wheel so it is built against this torch; or set torch.version to one "
            f"{name} allows, so the lock is resolved for it. Then run the apply again."
        )
    return (
        f"Add what {name} requires to torch.packages (or to its recipe's runtime_requires), so "
        "the lock is resolved with it; then run the apply again."
    )
