"""The one stack's resolution: `uv pip compile` runs until one lock satisfies everything, and the
facts of that lock read from what uv resolved.

Who runs uv: root never runs a package's code, so a resolution run as root has `--no-build`. An
sdist whose metadata only its build backend can give (deepspeed, sqlitedict) is resolved by the
venv's owner (or, for a recorded machine, the invoking account) with builds allowed, each run in
a fresh directory of that account's; root only reads the lock it writes, bounded and without
following links. The pins that have no wheel are named (`Lock.sources`): the owner builds them at
the sync.

What the lock is: the torch build from the distribution (its local version, else the CUDA runtime
its wheel requires); the packages that decided torch from uv itself (a probe asks for a newer
torch with everything else pinned, and uv names who refuses it); the venv's Python, when
"auto" has to pick one the system lacks, from resolutions for each candidate with wheels only.
Every refusal names the cause uv reports (steps.uvfailure) and the index it used.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from steps.accounts import Account, lookup_account
from steps.answers import Answers
from steps.choices import PythonChoice, lock_problems
from steps.errors import InputError, MlsetupError
from steps.facts import Facts
from steps.knowledge import knowledge
from steps.lock import (
    MAX_LOCK_BYTES,
    Lock,
    build_of_pins,
    compile_argv,
    cuda_of_pins,
    index_args,
    index_label,
    local_index,
    parse_pins,
    per_build_index,
    requirement_name,
)
from steps.plan import Action
from steps.rootfs import RootFS
from steps.runner import Result
from steps.safefs import read_bounded
from steps.uvfailure import (
    BuildFailed,
    Conflict,
    Failure,
    Missing,
    NeedsBuild,
    NoPythonWheel,
    Unreachable,
    UvFailed,
    read_failure,
    torch_dependents,
    torch_pin,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Ubuntu 22.04's Python 3.10
    import tomli as tomllib

RunCommand = Callable[[Action], Result | None]
# The torch family follows torch: never "the package that decided torch"
TORCH_FAMILY = ("torch", "torchvision", "torchaudio", "triton", "pytorch-triton")


class StackUnavailable(MlsetupError):
    """uv could not resolve for a reason other than the requirements (no index, no network).
    `action`: the id of the resolution that failed, when one ran."""

    def __init__(self, message: str, action: str | None = None) -> None:
        super().__init__(message)
        self.action = action


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
class StackInputs:
    """What one resolution is asked: requirements in order, constraints (a range of torch for an
    explicit torch.cuda on a one-index mirror), the Python (or candidates to choose from), the
    platform, the builds to try best first, the configured index, and the key of all that."""

    requirements: list[str]
    constraints: list[str]
    python: PythonChoice
    platform: str
    builds: list[str]
    configured: str | None
    key: str


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


@dataclass
class _Attempts:
    notes: list[str] = field(default_factory=list)  # what was tried, for the lock's note
    pinned_by: list[str] = field(default_factory=list)  # who required a torch a build lacked
    torch_spec: str = ""


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

    def lock(self) -> Lock:
        python, reason = self._python()
        builds = self.inputs.builds if self.per_build else self.inputs.builds[:1]
        attempts = _Attempts()
        for build in builds:
            ask = _Ask(f"venv.resolve-{build}", RESOLVE, python, self.inputs.requirements)
            result, text = self._compile(ask, build)
            if text is not None:
                return self._lock_from(text, build, python, reason, attempts)
            failure = read_failure(result.tail, self.local)
            pin = torch_pin(failure)
            if pin is not None and len(builds) > 1:
                by, spec = pin
                attempts.notes.append(
                    f"the {build} build has no torch{spec} on its index"
                    + (f" (required by {by})" if by != "torch.version" else "")
                )
                if by != "torch.version":
                    attempts.pinned_by.append(requirement_name(by))
                attempts.torch_spec = spec
                continue
            raise self._refusal(failure, build, python, f"venv.resolve-{build}")
        raise InputError(self._no_build_has_it(attempts, builds))

    # -- uv runs ------------------------------------------------------------------------------

    def _compile(self, ask: _Ask, build: str) -> tuple[Result, str | None]:
        """One `uv pip compile` in a fresh sandbox: its result and the file it wrote (None when
        it failed)."""
        files = {"requirements.in": "\n".join(ask.requirements) + "\n"}
        every = [*self.inputs.constraints, *ask.constraints]
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
            if result.exit_code != 0:
                return result, None
            try:
                data = read_bounded(ask.out, MAX_LOCK_BYTES, dir_fd=box.fd, owner=box.owner)
            except OSError as exc:
                raise StackUnavailable(
                    f"uv's {ask.out} cannot be read: {exc}", ask.action
                ) from None
            # uv names the input file by its path, which differs between runs: the lock must not
            return result, data.decode("utf-8", "replace").replace(
                str(where / "requirements.in"), "requirements.in"
            )

    def _python(self) -> tuple[str, str]:
        """The venv's Python: as chosen, or (auto, with a download) the first candidate every
        package of the stack has a wheel for, checked by resolving with builds off."""
        choice = self.inputs.python
        if not choice.candidates:
            return choice.version, choice.reason
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
            result, text = self._compile(ask, build)
            if text is not None:
                lacking = f" ({'; '.join(skipped)})" if skipped else ""
                return python, (
                    f"{choice.reason.partition('; of those')[0]}; every package of the stack "
                    f"has a wheel for Python {python}{lacking}"
                )
            failure = read_failure(result.tail, self.local)
            if isinstance(failure, Unreachable):
                raise self._refusal(failure, build, python, f"venv.resolve-check-python-{python}")
            if not isinstance(failure, (NoPythonWheel, NeedsBuild)):
                break  # not a question of the Python: the resolution proper names the cause
            skipped.append(f"{python}: {_lacking(failure)}")
        first = choice.candidates[0]
        return first, (
            f"{choice.reason}; no Python has a wheel of every package of the stack "
            f"({'; '.join(skipped) or 'see the resolution'})"
        )

    # -- the lock -----------------------------------------------------------------------------

    def _lock_from(
        self, text: str, build: str, python: str, reason: str, attempts: _Attempts
    ) -> Lock:
        pins, via = parse_pins(text)
        if "torch" not in pins:
            raise StackUnavailable("uv's lock has no torch in it")
        locked = build_of_pins(pins)
        lock = Lock(
            text=text,
            python=python,
            platform=self.inputs.platform,
            build=locked,
            key=self.inputs.key,
            packages=pins,
            index=index_label(self.answers, build, self.inputs.configured),
            python_reason=reason,
        )
        problems = [p for p in lock_problems(self.facts, self.answers, lock) if "Python" not in p]
        if problems:
            raise InputError(self._unrunnable(lock, problems))
        note = ""
        if attempts.notes:
            note = "; ".join([*attempts.notes, f"{locked} has torch {pins['torch']}"])
        decided = tuple(dict.fromkeys(attempts.pinned_by)) or self._decider(
            pins, via, build, python
        )
        sources = self._sources(text, build, python) if self.resolver.builds else ()
        return Lock(
            text=text,
            python=python,
            platform=self.inputs.platform,
            build=locked,
            key=self.inputs.key,
            decided_by=decided,
            note=note,
            packages=pins,
            index=lock.index,
            sources=sources,
            python_reason=reason,
        )

    def _decider(
        self, pins: dict[str, str], via: dict[str, list[str]], build: str, python: str
    ) -> tuple[str, ...]:
        """The packages whose requirement keeps a newer torch out, as uv names them when asked
        for one with every other pin held; () when torch is the newest the index has."""
        if self.answers.torch.version != "auto":
            return (f"torch.version {self.answers.torch.version}",)
        pinned = [r for r in self.answers.torch.packages if requirement_name(r) == "torch"]
        if any(r.strip() != "torch" for r in pinned):
            return tuple(f"torch.packages {r}" for r in pinned)
        if self.inputs.constraints:  # torch.cuda on a one-index mirror: the releases of that build
            return (f"torch.cuda {self.answers.torch.cuda} ({', '.join(self.inputs.constraints)})",)
        followers = _followers(pins, via)
        held = [f"{name}=={version}" for name, version in pins.items() if name not in followers]
        newer = f"torch>{Version(pins['torch']).public}"
        asked = [r for r in self.inputs.requirements if requirement_name(r) != "torch"]
        ask = _Ask(
            "venv.resolve-check-torch",
            "Ask uv which package keeps a newer torch out",
            python,
            [*asked, newer],
            "probe.txt",
            tuple(held),
            offline=True,  # the pins' metadata is in the cache: only a newer torch's may not be
        )
        result, text = self._compile(ask, build)
        if text is None and _from_cache_only(result):
            result, text = self._compile(replace(ask, offline=False), build)
        if text is not None:
            return ()  # a newer torch fits as well: uv preferred this one, nothing refused it
        names = [canonicalize_name(n) for n in torch_dependents(result.tail)]
        return tuple(dict.fromkeys(n for n in names if n not in followers))

    def _sources(self, text: str, build: str, python: str) -> tuple[str, ...]:
        """The pins that have no wheel for the target, from uv's PEP 751 lock of the same pins
        (uv lists a package's wheels there): the owner builds them at the sync."""
        pins, _ = parse_pins(text)
        held = [f"{name}=={version}" for name, version in pins.items()]
        ask = _Ask(
            "venv.resolve-check-sources",
            "List the locked packages that have no wheel",
            python,
            self.inputs.requirements,
            "pylock.toml",
            tuple(held),
            offline=True,  # the same pins, just resolved: all of it is in uv's cache
        )
        _, pylock = self._compile(ask, build)
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

    # -- refusals -----------------------------------------------------------------------------

    def _label(self, build: str) -> str:
        return index_label(self.answers, build, self.inputs.configured)

    def _refusal(self, failure: Failure, build: str, python: str, action: str) -> MlsetupError:
        """The error for a failed resolution: StackUnavailable when the index cannot be
        reached, else InputError naming the cause."""
        label = self._label(build)
        packages = f"torch.packages {self.answers.torch.packages}"
        if isinstance(failure, Unreachable):
            return StackUnavailable(
                f"the package index cannot be reached: {failure.url or label} failed "
                f"({failure.detail[-300:]}); check torch.index_url, UV_DEFAULT_INDEX or pip's "
                "index-url, the network and the proxy",
                action=action,
            )
        if isinstance(failure, UvFailed):
            return StackUnavailable(f"uv could not resolve the stack: {failure.detail}", action)
        if isinstance(failure, Missing):
            what = failure.package + (failure.spec or "")
            by = f", which {failure.by} requires" if failure.by else ""
            return InputError(
                f"{packages}: no {what} on {label}{by}: check the name and the version "
                "on that index"
            )
        if isinstance(failure, Conflict) and failure.shared:
            (a, b), (want_a, want_b) = failure.sides, failure.wants
            return InputError(
                f"{packages}: {a} and {b} cannot be installed together: {a} requires {want_a} "
                f"and {b} requires {want_b}. What would: releases of the two that agree on "
                f"{failure.shared}, or one of them left out."
            )
        if isinstance(failure, NeedsBuild):
            names = ", ".join(failure.packages)
            return InputError(
                f"{packages}: {names} {'has' if len(failure.packages) == 1 else 'have'} no wheel "
                f"on {label} for Python {python}, only source, whose metadata comes from running "
                "its build; mlsetup never runs a package's build as root: set venv.user to an "
                "ordinary account (the build then runs as that account), or run `mlsetup lock` "
                "as one"
            )
        if isinstance(failure, NoPythonWheel):
            return InputError(
                f"venv.python = {self.answers.venv.python!r}: {failure.package} has no wheel "
                f"for Python {python} ({failure.tag}) on {label}; allowed: a Python it has "
                'wheels for ("auto" chooses one)'
            )
        if isinstance(failure, BuildFailed):
            return InputError(
                f"{packages}: {failure.package} {failure.version} has only source on {label}, "
                f"and building it to read its metadata failed (as {self.resolver.who}): "
                f"{failure.detail[-600:]}"
            )
        return InputError(
            f"{packages}: uv finds no versions that satisfy them together on {label} (Python "
            f"{python}, {self.inputs.platform}): {getattr(failure, 'detail', '')}"
        )

    def _no_build_has_it(self, attempts: _Attempts, builds: list[str]) -> str:
        """Every build's index lacked the torch a package requires: the package, the builds that
        torch exists in, and what would work."""
        ccs = self.facts.compute_capabilities
        driver = self.facts.driver.version if self.facts.driver else None
        tried = ", ".join(builds)
        package = attempts.pinned_by[0] if attempts.pinned_by else "torch.version"
        spec = attempts.torch_spec
        try:
            releases = [r for r in knowledge().torch.releases if r.matches(SpecifierSet(spec))]
        except InvalidSpecifier:
            releases = []
        shipped = "; ".join(
            f"torch {r.series} is built for {', '.join(r.builds)}" for r in releases
        )
        why = (
            f"{shipped}, and none of those runs here (GPUs: compute capability "
            f"{', '.join(ccs) or 'none'}; driver {driver or 'none'}; builds tried: {tried})"
            if shipped
            else f"no build tried ({tried}) has such a torch on its index"
        )
        hint = (
            f' or torch.cuda = "{releases[0].builds[-1]}" if the GPUs and driver run it'
            if releases
            else ""
        )
        return (
            f"torch.packages: {package} requires torch{spec}, which cannot be installed here: "
            f"{why}. What would: a release of {package} that allows a torch built for "
            f"{builds[0]}{hint}."
        )

    def _unrunnable(self, lock: Lock, problems: list[str]) -> str:
        """The resolved torch cannot run on this machine: what it is (from its wheel) and what
        to change."""
        label = lock.index
        cuda = cuda_of_pins(lock.packages)
        wheel = f" (its wheel requires {cuda[1]})" if cuda else ""
        what = f"torch {lock.torch} from {label} is the {lock.build} build{wheel}"
        cpu_hint = (
            'set torch.index_url to an index of CPU builds, e.g. "https://download.pytorch.org/'
            'whl/cpu" or a mirror of it'
        )
        if not self.facts.gpus and lock.build != "cpu":
            return (
                f"this machine has no NVIDIA GPU, but {what}: that index serves only CUDA builds "
                f"of torch here; {cpu_hint}"
            )
        if self.answers.torch.cuda == "cpu" and lock.build != "cpu":
            return f'torch.cuda = "cpu", but {what}: {cpu_hint}'
        version = self.answers.torch.version
        asked = (
            f"torch.version = {version!r}"
            if version != "auto"
            else f"torch.packages {self.answers.torch.packages}"
        )
        return f"{asked}: {what}, which cannot run here: " + "; ".join(problems)


def _followers(pins: dict[str, str], via: dict[str, list[str]]) -> set[str]:
    """The torch family and whatever only they require: they follow torch, never decide it."""
    follow = {n for n in pins if n in TORCH_FAMILY or n.startswith(("nvidia-", "cuda-"))}
    changed = True
    while changed:
        changed = False
        for name, sources in via.items():
            if name in follow or not sources or any(s.startswith("-r ") for s in sources):
                continue
            if all(canonicalize_name(s) in follow for s in sources):
                follow.add(name)
                changed = True
    return follow


def _cache_of(account: Account, sandbox: Path) -> str:
    """uv's cache for `account`: its own (~/.cache/uv), or the sandbox's when it has no home."""
    home = Path(account.home)
    if home.is_dir() and home.stat().st_uid == account.uid:
        return str(home / ".cache" / "uv")
    return str(sandbox / "cache")


def _from_cache_only(result: Result) -> bool:
    """An offline run that needed something uv's cache lacks."""
    return any("network was disabled" in line for line in result.tail)


def _lacking(failure: Failure) -> str:
    if isinstance(failure, NoPythonWheel):
        return f"{failure.package} has no {failure.tag} wheel"
    if isinstance(failure, NeedsBuild):
        return f"{', '.join(failure.packages)}: source only"
    return "see the resolution"
