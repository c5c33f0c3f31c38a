"""The one stack's resolution: `uv pip compile` runs until one lock satisfies everything, and the
facts of that lock read from what uv resolved.

Who runs uv: root never runs a package's code, so a resolution run as root has `--no-build`. An
sdist whose metadata only its build backend can give (deepspeed, sqlitedict) is resolved by the
venv's owner (or, for a recorded machine, the invoking account) with builds allowed, each run in
a fresh directory of that account's; root only reads the lock it writes, bounded and without
following links. The pins that have no wheel are named (`Lock.sources`): the owner builds them at
the sync. With nobody to build as (plain root, a venv of root's), a requested package whose newest
release has only source is refused, not locked to an old release that has a wheel
(steps.stack.heldback.source_only_above).

What the lock is: the torch build from the distribution (its local version, else the CUDA runtime
its wheel requires); the packages that decided torch from uv itself (a probe asks for a newer
torch with everything else pinned, and uv names who refuses it); the venv's Python, when
"auto" has to pick one the system lacks, from resolutions for each candidate with wheels only.
Every refusal names the cause uv reports (steps.stack.uvfailure) and the index it used.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version

from steps.core import tomlcompat as tomllib
from steps.core.accounts import Account, lookup_account
from steps.core.errors import InputError, show_value
from steps.core.rootfs import RootFS
from steps.core.safefs import read_bounded
from steps.formats.answers import Answers
from steps.formats.facts import Facts
from steps.formats.lock import (
    MAX_LOCK_BYTES,
    Lock,
    Pins,
    Requirements,
    build_of_pins,
    parse_requirements,
)
from steps.formats.plan import Action
from steps.run.index import index_args, index_label, local_index, per_build_index
from steps.run.runner import Result
from steps.stack.check import lock_problems
from steps.stack.commands import compile_argv
from steps.stack.heldback import Answer, Probe, Scan, source_only_above
from steps.stack.inputs import TORCH_FAMILY, StackInputs, requirement_name
from steps.stack.refusal import Attempts, Refusals, StackUnavailable
from steps.stack.releases import check_extension_releases
from steps.stack.uvfailure import (
    OFFLINE_MARKERS,
    Failure,
    NeedsBuild,
    NoPythonWheel,
    Unreachable,
    read_failure,
    torch_dependents,
    torch_pin,
)

RunCommand = Callable[[Action], Result | None]
_TORCH_PIN = re.compile(r"^torch==(\d+\.\d+)", re.M)


@dataclass(frozen=True)
class Resolver:
    """Who runs uv for the resolution: `account` (None: this process's own) and whether builds
    are allowed (never when that is root)."""

    account: Account | None
    builds: bool

    @property
    def who(self) -> str:
        if self.account is not None:
            return self.account.name
        return "root" if os.geteuid() == 0 else "this account"


def resolver_for(fs: RootFS, owner: str | None, on_machine: bool) -> Resolver:
    """The venv's owner on the machine being set up (`owner`: its account, None for root); for a
    recorded machine the account that asked (SUDO_USER, an account of `fs`), or this process's
    own if it is not root. Nobody to build as: root, with builds off."""
    if os.geteuid() != 0:
        return Resolver(None, True)
    name = owner if on_machine else os.environ.get("SUDO_USER")
    account = lookup_account(fs, name) if name else None
    if account is None or account.uid == 0:
        return Resolver(None, False)
    return Resolver(account, True)


@dataclass(frozen=True)
class _Sandbox:
    path: Path  # as uv is told it
    fd: int  # the directory root made, whatever is at `path` later
    owner: int  # the uid whose files root reads back from it


@contextmanager
def _sandbox(account: Account | None, files: dict[str, str]) -> Iterator[_Sandbox]:
    """A fresh directory holding `files`, then handed to `account`: root wrote the files before
    anyone else could touch the directory, and reads back only through its descriptor files
    that account owns (not a link to, or a hard link of, a file of root's)."""
    directory = Path(tempfile.mkdtemp(prefix="mlsetup-resolve-"))
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for name, text in files.items():
            (directory / name).write_text(text)
            (directory / name).chmod(0o644)
        if account is not None:
            os.fchown(fd, account.uid, account.gid)
        yield _Sandbox(directory, fd, account.uid if account else os.geteuid())
    finally:
        os.close(fd)
        shutil.rmtree(directory, ignore_errors=True)


RESOLVE = "Resolve torch, the packages and the build requirements"


@dataclass(frozen=True)
class _Ask:
    """One `uv pip compile`: its action, for which Python, what, into which file; `builds`:
    allowed if the resolver may; `offline`: from uv's cache alone."""

    action: str
    title: str
    python: str
    requirements: list[str]
    out: str = "lock.txt"
    constraints: tuple[str, ...] = ()
    builds: bool = True
    offline: bool = False
    unbounded: bool = False  # without the extensions' bounds on torch (StackInputs.bounds)
    no_deps: bool = False


@dataclass(frozen=True)
class _Compiled:
    """One `uv pip compile`'s result and the file it wrote (None: it failed)."""

    result: Result
    text: str | None


@dataclass(frozen=True)
class _Python:
    """The venv's Python a resolution settled on, and why (when "auto" chose it)."""

    version: str
    reason: str


class Resolution:
    """One resolution of the stack for `facts` and `answers`."""

    def __init__(
        self,
        facts: Facts,
        answers: Answers,
        inputs: StackInputs,
        run: RunCommand,
        resolver: Resolver,
    ) -> None:
        self.facts = facts
        self.answers = answers
        self.inputs = inputs
        self.run = run
        self.resolver = resolver
        self.per_build = per_build_index(answers, inputs.configured)
        self.local = local_index(answers, inputs.configured)
        self.refuse = Refusals(facts, answers, inputs, resolver.who)

    def lock(self) -> Lock:
        python = self._python()
        builds = self.inputs.builds if self.per_build else self.inputs.builds[:1]
        self._check_extension_releases(python.version, builds[0])
        attempts = Attempts()
        for build in builds:
            ask = _Ask(f"venv.resolve-{build}", RESOLVE, python.version, self.inputs.requirements)
            compiled = self._compile(ask, build)
            if compiled.text is not None:
                self._taken_as_data(compiled.text)  # the owner's output refused as itself
                scan = Scan(
                    partial(self._probe, build=build, python=python.version),
                    ask.requirements,
                    [n for r in self.answers.torch.packages if (n := _may_walk_back(r))],
                    _asked(self.answers),
                )
                text, held = scan.settle(compiled.text)
                if not self.resolver.builds and (
                    old := source_only_above(scan.ask, text, scan.requested)
                ):
                    raise InputError(self.refuse.source_only(old, build, python.version))
                return self._lock_from(text, build, python, attempts, held)
            failure = read_failure(compiled.result.tail, self.local)
            pin = torch_pin(failure)
            if pin is not None and len(builds) > 1:
                attempts.notes.append(
                    f"the {build} build has no torch{pin.spec} on its index"
                    + (f" (required by {pin.by})" if pin.by != "torch.version" else "")
                )
                if pin.by != "torch.version":
                    attempts.pinned_by.append(requirement_name(pin.by))
                attempts.torch_spec = pin.spec
                continue
            raise self.refuse.of(failure, build, python.version, f"venv.resolve-{build}")
        raise InputError(self.refuse.no_build_has_it(attempts, builds))

    # -- uv runs ------------------------------------------------------------------------------

    def _probe(self, probe: Probe, build: str, python: str) -> Answer:
        """A question about the resolved stack. From the index (uv's cache keeps it cheap): an
        offline resolution takes what the cache happens to hold and can "succeed" with a release
        older than the index's newest; only the newest releases alone (`no_deps`, which needs
        the pages the resolution just fetched) are asked of the cache first."""
        ask = _Ask(
            probe.action,
            probe.title,
            python,
            probe.requirements,
            "probe.txt",
            probe.constraints,
            offline=probe.no_deps,
            no_deps=probe.no_deps,
        )
        compiled = self._compile(ask, build)
        if compiled.text is None and _from_cache_only(compiled.result):
            compiled = self._compile(replace(ask, offline=False), build)
        return Answer(compiled.text, compiled.result.tail)

    def _compile(self, ask: _Ask, build: str) -> _Compiled:
        """One `uv pip compile` in a fresh sandbox."""
        files = {"requirements.in": "\n".join(ask.requirements) + "\n"}
        bounds = [] if ask.unbounded else self.inputs.bound_constraints
        every = [*self.inputs.constraints, *bounds, *ask.constraints]
        if every:
            files["constraints.txt"] = "\n".join(every) + "\n"
        with _sandbox(self.resolver.account, files) as box:
            where = box.path
            argv = compile_argv(
                str(where / "requirements.in"),
                str(where / ask.out),
                ask.python,
                self.inputs.platform,
                index_args(self.answers, build, self.inputs.configured),
                ask.builds and self.resolver.builds,
                str(where / "constraints.txt") if every else None,
                ask.offline,
                ask.no_deps,
            )
            account = self.resolver.account
            action = Action(
                id=ask.action,
                kind="resolve",
                target=build,
                title=f"{ask.title} ({build}, Python {ask.python}, as {self.resolver.who})",
                argv=argv,
                user=account.name if account else None,
                # the account's own cache, not one root was given (it could not write there)
                env={"UV_CACHE_DIR": _cache_of(account, where)} if account else {},
            )
            result = self.run(action)
            if result is None:
                raise StackUnavailable("uv could not be started to resolve the stack")
            if result.ended:  # the account it ran as held it up: root does not wait
                raise StackUnavailable(
                    f"uv pip compile, run as {self.resolver.who}, {result.ended}: ended it",
                    ask.action,
                )
            if result.exit_code != 0:
                return _Compiled(result, None)
            try:
                data = read_bounded(ask.out, MAX_LOCK_BYTES, dir_fd=box.fd, owner=box.owner)
            except OSError as exc:
                raise StackUnavailable(
                    f"uv's {ask.out} cannot be read: {exc}", ask.action
                ) from None
            # uv names the input file by its path, which differs between runs: the lock must not
            text = data.decode("utf-8", "replace")
            return _Compiled(
                result, text.replace(str(where / "requirements.in"), "requirements.in")
            )

    def _python(self) -> _Python:
        """The venv's Python: as chosen, or (auto, with a download) the first candidate every
        package of the stack has a wheel for, checked by resolving with builds off."""
        choice = self.inputs.python
        if not choice.candidates:
            return _Python(choice.version, choice.reason)
        build = self.inputs.builds[0]
        skipped: list[str] = []
        for python in choice.candidates:
            ask = _Ask(
                f"venv.resolve-check-python-{python}",
                "Check that every package of the stack has a wheel for this Python",
                python,
                self.inputs.requirements,
                builds=False,
            )
            compiled = self._compile(ask, build)
            if compiled.text is not None:
                lacking = f" ({'; '.join(skipped)})" if skipped else ""
                return _Python(
                    python,
                    f"{choice.reason.partition('; of those')[0]}; every package of the stack "
                    f"has a wheel for Python {python}{lacking}",
                )
            failure = read_failure(compiled.result.tail, self.local)
            if isinstance(failure, Unreachable):
                action = f"venv.resolve-check-python-{python}"
                raise self.refuse.of(failure, build, python, action)
            if not isinstance(failure, (NoPythonWheel, NeedsBuild)):
                break  # not a question of the Python: the resolution proper names the cause
            skipped.append(f"{python}: {_lacking(failure)}")
        return _Python(
            choice.candidates[0],
            f"{choice.reason}; no Python has a wheel of every package of the stack "
            f"({'; '.join(skipped) or 'see the resolution'})",
        )

    def check_releases(self) -> None:
        """The extension releases alone (the wizard's field), as lock() checks them first."""
        choice = self.inputs.python
        python = choice.candidates[0] if choice.candidates else choice.version
        self._check_extension_releases(python, self.inputs.builds[0])

    def _check_extension_releases(self, python: str, build: str) -> None:
        """The extension releases asked for are on the index (steps.stack.releases)."""

        def ask(action: str, title: str, requirement: str) -> Result:
            question = _Ask(action, title, python, [requirement], builds=False, no_deps=True)
            return self._compile(question, build).result

        check_extension_releases(self.answers, ask, self.local, self.refuse, build, python)

    # -- the lock -----------------------------------------------------------------------------

    def _taken_as_data(self, text: str) -> Requirements:
        """A lock uv wrote, by the account uv ran as: parsed as any lock root is handed, before
        anything (the scan for packages held back included) reads it."""
        who = self.resolver.who
        fix = f"look at what runs as {who} (ps -u {who}), then: sudo mlsetup plan"
        return parse_requirements(text, f"the lock uv wrote as {who}", fix)

    def _lock_from(
        self, text: str, build: str, python: _Python, attempts: Attempts, held: tuple[str, ...]
    ) -> Lock:
        body = self._taken_as_data(text)
        pins = body.pins
        if "torch" not in pins.versions:
            raise StackUnavailable("uv's lock has no torch in it")
        locked = build_of_pins(pins.versions)
        lock = Lock(
            text=body.text,
            python=python.version,
            platform=self.inputs.platform,
            build=locked,
            key=self.inputs.key,
            resolved_by=self.resolver.who,
            packages=pins.versions,
            index=index_label(self.answers, build, self.inputs.configured),
            python_reason=python.reason,
        )
        # the Python is the resolution's own choice (uv downloads it): the torch must run here
        problems = [p for p in lock_problems(self.facts, self.answers, lock) if p.kind != "python"]
        if problems:
            raise InputError(self.refuse.unrunnable(lock, problems))
        notes = []
        if attempts.notes:
            notes = [*attempts.notes, f"{locked} has torch {lock.torch}"]
        decided = tuple(dict.fromkeys(attempts.pinned_by)) or self._decider(
            pins, build, python.version
        )
        bounds = [b for b in self.inputs.bounds if b.extension in decided]
        note = "; ".join([*notes, *(b.why for b in bounds)])
        sources = self._sources(pins, build, python.version) if self.resolver.builds else ()
        return replace(lock, decided_by=decided, note=note, sources=sources, held_back=held)

    def _decider(self, pins: Pins, build: str, python: str) -> tuple[str, ...]:
        """The packages whose requirement keeps a newer torch out, as uv names them when asked
        for one with every other pin held; () when torch is the newest the index has."""
        if self.answers.torch.version != "auto":
            return (f"torch.version {self.answers.torch.version}",)
        pinned = [r for r in self.answers.torch.packages if requirement_name(r) == "torch"]
        if any(r.strip() != "torch" for r in pinned):
            return tuple(f"torch.packages {r}" for r in pinned)
        if self.inputs.constraints:  # one build per release: those of torch.cuda or the branch
            key = (
                f"torch.cuda {self.answers.torch.cuda}"
                if self.answers.torch.cuda != "auto"
                else f"driver.branch {self.answers.driver.branch}"
            )
            return (f"{key} ({', '.join(self.inputs.constraints)})",)
        followers = _followers(pins)
        held = [f"{n}=={v}" for n, v in pins.versions.items() if n not in followers]
        newer = f"torch>{Version(pins.versions['torch']).public}"
        asked = [r for r in self.inputs.requirements if requirement_name(r) != "torch"]
        ask = _Ask(
            "venv.resolve-check-torch",
            "Ask uv which package keeps a newer torch out",
            python,
            [*asked, newer],
            "probe.txt",
            tuple(held),
            offline=True,  # the pins' metadata is in the cache: only a newer torch's may not be
            # the extensions' bounds aside: when only they keep the newer torch out, they decided
            unbounded=True,
        )
        probe = self._compile(ask, build)
        if probe.text is None and _from_cache_only(probe.result):
            probe = self._compile(replace(ask, offline=False), build)
        if probe.text is not None:
            # a newer torch fits the packages: the extensions' builds kept it out, or nothing did
            # (uv preferred this one)
            fits = _TORCH_PIN.search(probe.text)  # only its version is read from the probe
            series = ".".join(fits.group(1).split(".")[:2]) if fits else ""
            kept = [b.extension for b in self.inputs.bounds if series and b.excludes(series)]
            return tuple(dict.fromkeys(kept))
        names = [canonicalize_name(n) for n in torch_dependents(probe.result.tail)]
        return tuple(dict.fromkeys(n for n in names if n not in followers))

    def _sources(self, pins: Pins, build: str, python: str) -> tuple[str, ...]:
        """The pins that have no wheel for the target, from uv's PEP 751 lock of the same pins
        (uv lists a package's wheels there): the owner builds them at the sync."""
        held = [f"{name}=={version}" for name, version in pins.versions.items()]
        ask = _Ask(
            "venv.resolve-check-sources",
            "List the locked packages that have no wheel",
            python,
            self.inputs.requirements,
            "pylock.toml",
            tuple(held),
            offline=True,  # the same pins, just resolved: all of it is in uv's cache
        )
        pylock = self._compile(ask, build).text
        if pylock is None:
            return ()
        try:
            packages = tomllib.loads(pylock).get("packages", [])
        except tomllib.TOMLDecodeError:
            return ()
        return tuple(
            f"{p.get('name')} {p.get('version')}"
            for p in packages
            if isinstance(p, dict) and not p.get("wheels")
        )


def _followers(pins: Pins) -> set[str]:
    """The torch family and whatever only they require: they follow torch, never decide it."""
    follow = {n for n in pins.versions if n in TORCH_FAMILY or n.startswith(("nvidia-", "cuda-"))}
    changed = True
    while changed:
        changed = False
        for name, sources in pins.via.items():
            if name in follow or not sources or any(s.startswith("-r ") for s in sources):
                continue
            if all(canonicalize_name(s) in follow for s in sources):
                follow.add(name)
                changed = True
    return follow


def _asked(answers: Answers) -> str:
    """The answers that decide the stack, as a refusal names them."""
    pinned = answers.torch.version
    return f"torch.packages {answers.torch.packages}" + (
        f" with torch.version = {show_value(pinned)}" if pinned != "auto" else ""
    )


def _may_walk_back(req: str) -> str:
    """The canonical name of a requested package whose release the resolution chooses (not
    pinned exactly, not of the torch family); "" for the others."""
    name = requirement_name(req)
    exact = "==" in req and "*" not in req
    return "" if exact or name in TORCH_FAMILY else name


def _cache_of(account: Account, sandbox: Path) -> str:
    """uv's cache for `account`: its own (~/.cache/uv), or the sandbox's when it has no home."""
    home = Path(account.home)
    if home.is_dir() and home.stat().st_uid == account.uid:
        return str(home / ".cache" / "uv")
    return str(sandbox / "cache")


def _from_cache_only(result: Result) -> bool:
    """An offline run that needed something uv's cache lacks."""
    return any(marker in line for line in result.tail for marker in OFFLINE_MARKERS)


def _lacking(failure: Failure) -> str:
    if isinstance(failure, NoPythonWheel):
        return f"{failure.package} has no {failure.tag} wheel"
    if isinstance(failure, NeedsBuild):
        return f"{', '.join(failure.packages)}: source only"
    return "see the resolution"
