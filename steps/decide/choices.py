"""Decisions every step shares, made once from Facts + Answers (pure).

Which torch build and release, which CUDA, which toolkits, which driver branch
and kernel modules, whose venv. Each step module reads these instead of
deciding again, so the steps cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Literal

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from steps.core.accounts import lookup_account
from steps.core.errors import InputError, show_value
from steps.core.rootfs import RootFS
from steps.core.sizes import GiB, gib
from steps.decide.cxxstd import check_torch_bounds, torch_bounds
from steps.decide.planwarnings import StepWarning, machine_warnings
from steps.formats.answers import Answers, ExtensionAnswers, unsafe_directory
from steps.formats.facts import Facts
from steps.formats.lock import Lock
from steps.known.knowledge import ExtensionRecipe, TorchRelease, knowledge
from steps.known.recipes import arch_number, compute_capability_of


@dataclass(frozen=True)
class VenvOwner:
    name: str
    home: str

    @property
    def run_as(self) -> str | None:
        """The account venv actions run as; None is root."""
        return None if self.name == "root" else self.name


@dataclass(frozen=True)
class BuildTarget:
    """One extension to build, with every decision its build environment needs."""

    recipe: ExtensionRecipe
    answer: ExtensionAnswers
    compute_capabilities: list[str]
    cuda_home: str
    max_jobs: int  # MAX_JOBS: build.max_jobs, else what the cores and the RAM hold
    jobs_at_once: int  # what the governor lets run: the jobs whose peaks the RAM holds

    @property
    def arch_value(self) -> str:
        """The arch variable's value ("90;120"), "" when the recipe compiles a fixed list."""
        return (
            self.recipe.arch_value(self.compute_capabilities) or ""
            if self.recipe.arch_variable
            else ""
        )


@dataclass(frozen=True)
class Choices:
    torch_build: str  # "cu130", or "cpu"
    torch_requirement: str  # "torch==2.11.0"
    cuda: str | None  # the CUDA torch is built with, "13.0"; None for the CPU build
    toolkits: tuple[str, ...]  # toolkit versions the machine should have
    driver_ok: bool  # the loaded driver can run `cuda`
    driver_branch: int
    driver_modules: Literal["open", "proprietary"]
    owner: VenvOwner
    venv_path: str
    build_targets: tuple[BuildTarget, ...]
    warnings: tuple[StepWarning, ...]  # each with the step it is about
    python: str = "3.12"  # the venv's Python, major.minor
    python_system: bool = True  # the machine has it (else uv downloads it)
    lock: Lock | None = None  # the resolved stack; None = planned from knowledge
    python_reason: str = ""  # why that Python, when "auto" chose one the machine lacks

    @property
    def venv_python(self) -> str:
        return f"{self.venv_path}/bin/python"


def choose(facts: Facts, answers: Answers, lock: Lock | None = None) -> Choices:
    """The decisions; with `lock` (the resolved stack) its torch is the one everything follows."""
    k = knowledge()
    refuse_where_the_driver_is_not_ours(facts, answers)
    warnings: list[StepWarning] = machine_warnings(facts)

    torch = choose_torch(facts, answers, warnings)
    build, release = torch.build, torch.release
    if lock is not None:
        build, release = lock.build, release_of(lock.torch)
    cuda = k.torch.build(build).cuda
    driver_ok = bool(
        facts.driver
        and facts.driver.loaded
        and (cuda is None or k.cuda.driver_runs(facts.driver.version, facts.driver.cuda_max, cuda))
    )
    if lock is not None:
        requirement = f"torch=={lock.torch}"
    elif answers.torch.version != "auto":
        requirement = f"torch{answers.torch.version}"  # exact as written: ==2.8.0 stays exact
    elif release is not None:
        requirement = release.requirement
    else:
        requirement = "torch"
    python = (
        PythonChoice(lock.python, has_python(facts, lock.python), lock.python_reason)
        if lock
        else choose_python(facts, answers, release)
    )

    if answers.toolkit.versions == "auto":
        toolkits: tuple[str, ...] = (cuda,) if cuda else ()
    else:
        toolkits = tuple(answers.toolkit.versions)
        if cuda and answers.extensions and not any(_same_major(t, cuda) for t in toolkits):
            warnings.append(
                StepWarning(
                    "toolkit",
                    f"torch is built with CUDA {cuda} but toolkit.versions {list(toolkits)} has "
                    f"no CUDA {cuda.split('.')[0]}.x: torch refuses to build extensions with a "
                    "different CUDA major.",
                )
            )

    owner = venv_owner(facts, answers)
    path = answers.venv.path
    if path == "~" or path.startswith("~/"):
        path = owner.home.rstrip("/") + path[1:]

    branch, modules = _driver_target(facts, answers, cuda, warnings)
    if branch_installed(facts, answers, driver_ok):
        _check_branch_runs(facts, answers, build, cuda, branch, lock)
    targets = tuple(
        t for a in answers.extensions if (t := _build_target(facts, answers, cuda, a, warnings))
    )
    check_memory_answers(facts, answers)
    warnings += _peak_warnings(facts, answers, targets)
    warnings += _machine_warnings(facts, answers, toolkits, driver_ok, cuda, path)
    return Choices(
        torch_build=build,
        torch_requirement=requirement,
        cuda=cuda,
        toolkits=toolkits,
        driver_ok=driver_ok,
        driver_branch=branch,
        driver_modules=modules,
        owner=owner,
        venv_path=path,
        build_targets=targets,
        warnings=tuple(warnings),
        python=python.version,
        python_system=python.system,
        lock=lock,
        python_reason=python.reason,
    )


def release_of(torch_version: str) -> TorchRelease | None:
    series = ".".join(torch_version.split("+")[0].split(".")[:2])
    return next((r for r in knowledge().torch.releases if r.series == series), None)


def has_python(facts: Facts, version: str) -> bool:
    return any(".".join(p.version.split(".")[:2]) == version for p in facts.pythons)


@dataclass(frozen=True)
class PythonChoice:
    """The venv's Python: `version` (major.minor), whether the machine has it, why (when
    "auto" chose one it lacks), and the `candidates` a resolution may pick from instead (the
    first of them every package of the stack has a wheel for)."""

    version: str
    system: bool
    reason: str = ""
    candidates: tuple[str, ...] = ()


def choose_python(facts: Facts, answers: Answers, release: TorchRelease | None) -> PythonChoice:
    """The venv's Python. "auto": the system Python when the torch release has wheels for it;
    else one uv downloads: the Pythons the release supports in the order the ecosystem's wheels
    cover them (assets/pythons.toml), the first of them until a resolution says which one the
    whole stack installs from wheels for."""
    wanted = answers.venv.python
    supported = release.pythons if release else ()
    if wanted != "auto":
        if supported and wanted not in supported:
            raise InputError(
                f"venv.python = {wanted!r}: torch {release.series if release else ''} has no "
                f'wheels for Python {wanted}; allowed: {", ".join(supported)} (or "auto")'
            )
        return PythonChoice(wanted, has_python(facts, wanted))
    system = sorted(
        {".".join(p.version.split(".")[:2]) for p in facts.pythons}, key=Version, reverse=True
    )
    for version in system:
        if not supported or version in supported:
            return PythonChoice(version, True)
    coverage = knowledge().pythons
    candidates = tuple(p for p in coverage if not supported or p in supported)
    if not candidates:
        candidates = tuple(sorted(supported, key=Version, reverse=True)) or (coverage[0],)
    have = ", ".join(system) or "none"
    torch = f"torch {release.series}" if release else "torch"
    return PythonChoice(
        candidates[0],
        False,
        f"{torch} has no wheels for the system's Python ({have}); of those it has, "
        f"{candidates[0]} is the one most packages have wheels for",
        candidates,
    )


def _same_major(a: str, b: str) -> bool:
    return a.split(".")[0] == b.split(".")[0]


def _candidate_releases(answers: Answers) -> list[TorchRelease]:
    bounds = torch_bounds(answers)
    releases = [
        r for r in knowledge().torch.releases if not any(b.excludes(r.series) for b in bounds)
    ]
    if answers.torch.version == "auto":
        # the newest releases with wheels for the venv's Python (2.15 has none for 3.10)
        return [r for r in releases if answers.venv.python in r.pythons] or releases
    spec = SpecifierSet(answers.torch.version)
    return [r for r in releases if r.matches(spec)]


@dataclass(frozen=True)
class TorchChoice:
    """The torch the knowledge picks: its build ("cu130", "cpu") and release (None: a
    torch.version outside the releases mlsetup knows)."""

    build: str
    release: TorchRelease | None


def choose_torch(facts: Facts, answers: Answers, warnings: list[StepWarning]) -> TorchChoice:
    """The torch build ("auto" = newest build the GPUs and, if kept, the driver run) and release."""
    k = knowledge()
    check_torch_bounds(answers)
    releases = _candidate_releases(answers)
    if answers.torch.version != "auto" and not releases:
        warnings.append(
            StepWarning(
                "venv",
                f"torch {answers.torch.version} is newer or older than the releases mlsetup "
                "knows; the CUDA build cannot be checked against it.",
            )
        )

    build = answers.torch.cuda
    if build == "auto":
        build = _auto_build(facts, answers, releases, warnings)
    elif build != "cpu":
        ccs = facts.compute_capabilities
        bad = [cc for cc in ccs if not k.torch.build(build).runs_on(cc, facts.os.arch)]
        if bad:
            # a torch that cannot run on the GPUs is no choice on a GPU box: only "cpu" says so
            runs = _builds_that_run(facts, releases or list(k.torch.releases))
            raise InputError(
                f"torch.cuda = {show_value(build)}: torch's {build} build has no kernels for "
                f"{_gpus_of(facts, bad)}, so torch could not use them; allowed: "
                + ", ".join(show_value(b) for b in ["auto", *runs])
                + ' or "cpu" (torch on the CPU only)'
            )
    release = next((r for r in releases if build in r.builds or build == "cpu"), None)
    return TorchChoice(build, release)


def _auto_build(
    facts: Facts, answers: Answers, releases: list[TorchRelease], warnings: list[StepWarning]
) -> str:
    k = knowledge()
    if not facts.gpus:
        return "cpu"
    ccs = facts.compute_capabilities
    machine = facts.os.arch
    gpu_ok: list[str] = []
    # the newest release with a build for these GPUs (2.15 dropped cu126, the last with Volta)
    for builds in [r.builds for r in releases] or [tuple(k.torch.builds)]:
        by_cuda = sorted(builds, key=lambda b: Version(torch_cuda(b)), reverse=True)
        gpu_ok = [b for b in by_cuda if all(k.torch.build(b).runs_on(cc, machine) for cc in ccs)]
        if gpu_ok:
            break
    if not gpu_ok:
        # never a silent CPU torch on a GPU box: say what would run (torch.toml's builds)
        raise InputError(_no_build_runs(facts, answers))
    drv = facts.driver
    if drv and drv.loaded and answers.driver.action != "install":
        # Prefer a build the driver runs natively; minor-version compatibility is the fallback.
        native = [b for b in gpu_ok if k.cuda.driver_runs_natively(drv.cuda_max, torch_cuda(b))]
        compatible = [
            b for b in gpu_ok if k.cuda.driver_runs(drv.version, drv.cuda_max, torch_cuda(b))
        ]
        if native or compatible:
            return (native or compatible)[0]
        if driver_is_kept(facts, answers):
            why = "it is the host's" if facts.driver_is_hosts() else "driver.action is skip"
            older = _newest_build_the_driver_runs(facts, releases)
            if older is not None:
                warnings.append(
                    StepWarning(
                        "venv",
                        f"driver {drv.version} runs none of the newest torch's CUDA builds "
                        f"({', '.join(gpu_ok)}) and {why}: torch is the newest release with a "
                        f"build it runs ({older}).",
                    )
                )
                return older
            warnings.append(
                StepWarning(
                    "driver",
                    f"driver {drv.version} runs none of torch's CUDA builds "
                    f"({', '.join(gpu_ok)}) and {why}: torch will not see the GPUs.",
                )
            )
            return gpu_ok[0]
    # A driver will be installed: the newest build that the branch to install runs natively.
    if answers.driver.branch == "auto":
        branch_cuda = k.cuda.newest_supported_by_branch(k.driver.recommended_branch)
        fits = [b for b in gpu_ok if k.cuda.driver_runs_natively(branch_cuda, torch_cuda(b))]
        return (fits or gpu_ok)[0]
    # An explicit branch: the CUDA follows it, the newest torch with a build it runs (575 on a
    # Hopper box: not 2.15's cu132, which needs 595, but 2.14's cu126); none (a torch.version
    # only newer CUDA builds have): the newest, which _check_branch_runs refuses naming both.
    runs = _builds_the_branch_runs(facts, releases or list(k.torch.releases), answers)
    return runs[0] if runs else gpu_ok[0]


def _builds_the_branch_runs(
    facts: Facts, releases: list[TorchRelease], answers: Answers
) -> list[str]:
    """The CUDA builds of the newest of `releases` that has one the GPUs and the explicit
    driver.branch run natively, newest CUDA first."""
    k = knowledge()
    branch_cuda = k.cuda.newest_supported_by_branch(int(answers.driver.branch))
    for release in releases:
        runs = [
            b
            for b in _builds_that_run(facts, [release])
            if k.cuda.driver_runs_natively(branch_cuda, torch_cuda(b))
        ]
        if runs:
            return runs[::-1]
    return []


def _newest_build_the_driver_runs(facts: Facts, releases: list[TorchRelease]) -> str | None:
    """For a driver that stays (the host's, or driver.action skip): the newest CUDA build, of
    the newest release that has one, with kernels for these GPUs that the driver runs."""
    k = knowledge()
    drv = facts.driver
    if drv is None:
        return None
    for release in releases:
        fits = [
            b
            for b in sorted(release.builds, key=lambda b: Version(torch_cuda(b)), reverse=True)
            if all(k.torch.build(b).runs_on(cc, facts.os.arch) for cc in facts.compute_capabilities)
            and k.cuda.driver_runs(drv.version, drv.cuda_max, torch_cuda(b))
        ]
        if fits:
            return fits[0]
    return None


def _builds_that_run(facts: Facts, releases: list[TorchRelease]) -> list[str]:
    """The CUDA builds of `releases` with kernels for every GPU here, oldest CUDA first."""
    k = knowledge()
    names = {b for r in releases for b in r.builds}
    return sorted(
        (
            b
            for b in names
            if all(k.torch.build(b).runs_on(cc, facts.os.arch) for cc in facts.compute_capabilities)
        ),
        key=lambda b: Version(torch_cuda(b)),
    )


def _no_build_runs(facts: Facts, answers: Answers) -> str:
    """Why no CUDA torch fits these GPUs (and torch.version or venv.python), and what would:
    the newest release mlsetup knows with a build for them, else only the CPU build."""
    gpus = _gpus_of(facts, facts.compute_capabilities)
    on = f"{gpus} on {facts.os.arch}" if facts.os.arch == "aarch64" else gpus
    newest = next((r for r in knowledge().torch.releases if _builds_that_run(facts, [r])), None)
    cpu = 'torch.cuda = "cpu" (torch on the CPU only)'
    if newest is None:
        return f'torch.cuda = "auto": no torch build mlsetup knows runs on {on}; allowed: {cpu}'
    builds = ", ".join(_builds_that_run(facts, [newest]))
    has = f"the newest torch with one is {newest.series} ({builds})"
    if answers.torch.version != "auto":
        return (
            f"torch.version = {show_value(answers.torch.version)}: no CUDA build of that "
            f"torch runs on {on}; {has}; allowed: a torch.version it matches, such as "
            f'"=={newest.series}.*", or {cpu}'
        )
    # torch.version auto: only the releases with wheels for the venv's Python were candidates
    return (
        f"venv.python = {show_value(answers.venv.python)}: no torch release with wheels for "
        f"it has a CUDA build that runs on {on}; {has}, for Python "
        f"{', '.join(newest.pythons)}; allowed: one of those, or {cpu}"
    )


def _gpu_count(facts: Facts, ccs: list[str]) -> int:
    return sum(1 for g in facts.gpus if g.compute_capability in ccs)


def _gpus_of(facts: Facts, ccs: list[str]) -> str:
    """'8 GPUs (Tesla V100-SXM2-32GB, compute capability 7.0)' for the GPUs with these."""
    kinds: dict[tuple[str, str], int] = {}
    for g in facts.gpus:
        if g.compute_capability in ccs:
            kind = (g.name or "unknown", g.compute_capability)
            kinds[kind] = kinds.get(kind, 0) + 1
    return ", ".join(
        f"{n} GPU{'s' if n > 1 else ''} ({name}, compute capability {cc})"
        for (name, cc), n in kinds.items()
    )


def torch_cuda(build: str) -> str:
    return knowledge().torch.build(build).cuda or "0"


def venv_owner(facts: Facts, answers: Answers) -> VenvOwner:
    wanted = answers.venv.user
    if wanted == "auto" or (facts.user and facts.user.name == wanted):
        if facts.user is None:
            return VenvOwner("root", "/root")
        return VenvOwner(facts.user.name, facts.user.home)
    # An account other than the invoking one: its home is the conventional one.
    return VenvOwner(wanted, "/root" if wanted == "root" else f"/home/{wanted}")


def check_on_machine(choices: Choices, answers: Answers, fs: RootFS | None) -> None:
    """What the answers name on the machine being set up, once "~" and "auto" are known: the
    venv's account exists (NSS, steps.core.accounts) and its directory is not a system one. `fs`
    None: a recorded machine, whose facts are trusted (its accounts cannot be asked)."""
    wanted = answers.venv.user
    if fs is not None and wanted != "auto" and lookup_account(fs, wanted) is None:
        where = "this machine" if fs.is_host else f"the machine under {fs.root}"
        raise InputError(
            f"answers: venv.user = {show_value(wanted)}: no such account on {where}; "
            'allowed: "auto" or an account that `getent passwd NAME` finds'
        )
    path = choices.venv_path.rstrip("/")
    reason = unsafe_directory(path) or (
        f"it is {choices.owner.name}'s home itself"
        if path == choices.owner.home.rstrip("/")
        else None
    )
    if reason:
        raise InputError(
            f"answers: venv.path = {show_value(answers.venv.path)} is {choices.venv_path}: "
            f"not a venv directory: {reason}; allowed: a directory of its own, such as ~/ml-env"
        )


# -- where the driver is not mlsetup's: a Jetson's BSP, a container's or WSL's host -------------


def refuse_where_the_driver_is_not_ours(facts: Facts, answers: Answers) -> None:
    """A Tegra board is refused: its driver and CUDA come with the JetPack BSP (L4T) and its
    torch from NVIDIA's Jetson builds, none of which mlsetup's repository and PyPI builds are
    (a PyPI torch on an Orin does not see the GPU). In a container or WSL the driver is the
    host's: an answer that asks to install one is refused."""
    if facts.tegra:
        l4t = f", L4T {facts.l4t_release}" if facts.l4t_release else ""
        raise InputError(
            f"facts: tegra = true (a Jetson or other Tegra board{l4t}): the JetPack BSP "
            "provides the driver and CUDA, and PyTorch for its integrated GPU comes from "
            "NVIDIA's Jetson builds, not from the CUDA repository and the PyTorch builds mlsetup "
            "installs; allowed: a machine with a discrete NVIDIA GPU (on a Jetson, JetPack: "
            "sudo apt-get install nvidia-jetpack)",
            kind="facts",
        )
    if facts.driver_is_hosts() and answers.driver.action == "install":
        raise InputError(
            f'answers: driver.action = "install": the NVIDIA driver in {facts.environment_label()} '
            "is the host's; a driver installed here would break it (NVIDIA's CUDA on WSL guide: "
            'never a Linux driver inside WSL 2); allowed: "auto" or "skip" (update the driver on '
            "the host)",
            kind="answers",
        )


def driver_is_kept(facts: Facts, answers: Answers) -> bool:
    """The driver stays as it is, so torch's build must be one it runs: driver.action is skip,
    or the driver is the host's."""
    return answers.driver.action == "skip" or facts.driver_is_hosts()


def _driver_target(
    facts: Facts, answers: Answers, cuda: str | None, warnings: list[StepWarning]
) -> tuple[int, Literal["open", "proprietary"]]:
    k = knowledge()
    needed = 0
    if cuda and (rel := k.cuda.release(cuda)):
        needed = int(rel.min_driver.split(".")[0])
    # Maxwell, Pascal and Volta: no driver branch after R580 supports them
    limits = [
        (g, last)
        for g in facts.gpus
        if (last := k.driver.last_branch_for(g.compute_capability)) is not None
    ]
    ceiling = min((last for _, last in limits), default=None)
    if answers.driver.branch == "auto":
        branch = max(k.driver.recommended_branch, needed, k.repo.min_driver_branch)
        if ceiling is not None and branch > ceiling:
            branch = ceiling
            warnings.append(
                StepWarning(
                    "driver",
                    f"CUDA {cuda} needs driver branch {needed}, but {_gpu_names(limits)} "
                    f"{'is' if len(limits) == 1 else 'are'} supported only up to branch "
                    f"{ceiling}: installing {ceiling}; set torch.cuda to a build that branch runs.",
                )
            )
    else:
        branch = int(answers.driver.branch)
        if ceiling is not None and branch > ceiling:
            raise InputError(
                f"driver.branch = {answers.driver.branch!r}: {_gpu_names(limits)} "
                f"(compute capability below {k.driver.open_modules_min_compute_capability}) "
                f"{'is' if len(limits) == 1 else 'are'} supported by no driver after branch "
                f'{ceiling}; allowed: "auto" or a branch up to "{ceiling}"'
            )

    ccs = [Version(cc) for cc in facts.compute_capabilities]
    open_min = Version(k.driver.open_modules_min_compute_capability)
    modules: Literal["open", "proprietary"]
    if answers.driver.modules == "auto":
        modules = "proprietary" if any(cc < open_min for cc in ccs) else "open"
    else:
        modules = answers.driver.modules
        old = [cc for cc in facts.compute_capabilities if Version(cc) < open_min]
        if modules == "open" and old:
            raise InputError(
                f'driver.modules = "open": {_gpus_of(facts, old)} '
                f"{'is' if _gpu_count(facts, old) == 1 else 'are'} older than Turing (compute "
                f"capability {open_min}) and work only with the proprietary kernel modules; "
                'allowed: "auto" or "proprietary"'
            )
        need_open = [
            g
            for g in facts.gpus
            if k.driver.requires_open_modules(g.compute_capability, g.pci_device_id)
        ]
        if modules == "proprietary" and need_open:
            raise InputError(
                f'driver.modules = "proprietary": {_gpu_names([(g, 0) for g in need_open])} '
                "(Grace Hopper and Blackwell) work only with the open kernel modules; "
                'allowed: "auto" or "open"'
            )
    only_open = k.driver.open_modules_only_from_branch
    if modules == "proprietary" and branch >= only_open:
        chosen = (
            f"driver.branch = {answers.driver.branch!r}"
            if answers.driver.branch != "auto"
            else f"driver branch {branch} (CUDA {cuda} needs it)"
        )
        raise InputError(
            f'driver.modules = "proprietary" with {chosen}: from R{only_open} NVIDIA ships only '
            f'the open kernel modules; allowed: driver.modules "open" or "auto", or a '
            f'driver.branch below {only_open} (e.g. "{k.driver.recommended_branch}")'
        )
    if end := k.driver.ended(branch, date.today()):
        warnings.append(
            StepWarning(
                "driver",
                f"driver branch {branch} reached its end of life in {end} (NVIDIA): no more "
                f"fixes for it; the long-term branch {k.driver.recommended_branch} is supported.",
            )
        )
    return branch, modules


def branch_installed(facts: Facts, answers: Answers, driver_ok: bool) -> bool:
    """Whether the plan installs the driver of driver.branch (the answers name one, and it is
    installed: by driver.action, or because the loaded driver cannot run torch's CUDA)."""
    if answers.driver.branch == "auto" or not facts.gpus or driver_is_kept(facts, answers):
        return False
    return answers.driver.action == "install" or not driver_ok


def _check_branch_runs(
    facts: Facts, answers: Answers, build: str, cuda: str | None, branch: int, lock: Lock | None
) -> None:
    """An explicit driver.branch older than torch's CUDA needs is refused (a driver that cannot
    run that torch would be installed, then a reboot), naming what decided the CUDA and what
    would work: a branch new enough, or a torch the branch runs."""
    k = knowledge()
    rel = k.cuda.release(cuda) if cuda else None
    needed = int(rel.min_driver.split(".")[0]) if rel else 0
    if branch >= needed:
        return
    if answers.torch.cuda != "auto":
        decided = f"torch.cuda = {show_value(answers.torch.cuda)}"
    elif answers.torch.version != "auto":
        decided = f"torch.version = {show_value(answers.torch.version)}"
    elif lock is not None:
        decided = f"torch {lock.torch} of the stack, decided by " + (
            ", ".join(lock.decided_by) or "the resolution"
        )
    else:
        decided = 'torch.cuda = "auto"'
    alternatives = [f'driver.branch = "{needed}" or newer (or "auto")']
    newest = next(
        (r for r in k.torch.releases if _builds_the_branch_runs(facts, [r], answers)), None
    )
    candidates = _candidate_releases(answers)
    if runs := _builds_the_branch_runs(facts, candidates, answers):
        alternatives.append(f"torch.cuda = {show_value(runs[0])}, which branch {branch} runs")
    elif newest is not None:
        builds = _builds_the_branch_runs(facts, [newest], answers)
        alternatives.append(
            f'torch.version = "=={newest.series}.*" with torch.cuda = {show_value(builds[0])} '
            '(or "auto"), the newest torch with a build branch '
            f"{branch} runs"
        )
    raise InputError(
        f"driver.branch = {show_value(answers.driver.branch)}: torch's {build} build "
        f"({decided}) needs CUDA {cuda}, which needs driver branch {needed} or newer; "
        f"allowed: {'; or '.join(alternatives)}"
    )


def _gpu_names(gpus: list) -> str:
    """'GPU 0 (Tesla V100-SXM2-32GB, 7.0)' for each (gpu, _) pair."""
    return ", ".join(
        f"GPU {g.index} ({g.name or 'unknown'}, {g.compute_capability})" for g, _ in gpus
    )


def _machine_warnings(
    facts: Facts,
    answers: Answers,
    toolkits: tuple[str, ...],
    driver_ok: bool,
    cuda: str | None,
    venv_path: str,
) -> list[StepWarning]:
    k = knowledge()
    out = []
    drv = facts.driver
    if drv and cuda and not driver_ok and answers.driver.action != "skip":
        then = (
            f"the driver is the host's: update it there ({facts.environment_label()} cannot)"
            if facts.driver_is_hosts()
            else "a newer driver is installed, then a reboot"
        )
        out.append(
            StepWarning(
                "driver",
                f"driver {drv.version} supports CUDA up to {drv.cuda_max or 'unknown'}, older "
                f"than torch's CUDA {cuda}: {then}.",
            )
        )
    missing = [t for t in toolkits if facts.toolkit(t) is None]
    free = facts.disk_free_bytes.get("/usr/local")
    need = len(missing) * k.cuda.install_bytes
    if missing and free is not None and free < need:
        out.append(
            StepWarning(
                "toolkit",
                f"/usr/local has {gib(free)} free; CUDA {', '.join(missing)} needs about "
                f"{gib(need, 0)}.",
            )
        )
    home_free = facts.disk_free_bytes.get("/home" if venv_path.startswith("/home/") else "/")
    if cuda and home_free is not None and home_free < k.torch.cuda_venv_bytes:
        out.append(
            StepWarning(
                "venv",
                f"{venv_path} is on a filesystem with {gib(home_free)} free; a CUDA torch "
                f"venv takes about {gib(k.torch.cuda_venv_bytes, 0)}.",
            )
        )
    return out


def build_ram(facts: Facts, answers: Answers) -> int | None:
    """The RAM a build may use here: what is free less build.memory_reserve, at most
    build.memory_limit (None: the machine's memory is unknown). The one figure the job
    ceiling, the warnings and the confirmation use."""
    available = facts.memory.available_bytes
    if available is None:
        return None
    usable = available - answers.build.reserve_bytes(facts.memory.total_bytes or available)
    if (limit := answers.build.limit_bytes()) is not None:
        usable = min(usable, limit)
    return max(0, usable)


def jobs_that_fit(facts: Facts, answers: Answers, recipe: ExtensionRecipe) -> int:
    """The compile jobs the RAM a build may use holds at their peak, within the cores and
    build.max_jobs (at least one: the governor always lets one run)."""
    usable = build_ram(facts, answers)
    ceiling = answers.build.max_jobs
    cores = facts.cpu.logical or 1
    if usable is None:
        return ceiling if ceiling != "auto" else max(1, cores // 2)
    fit = max(1, min(cores, int(usable // (recipe.job_peak_gib * GiB))))
    return fit if ceiling == "auto" else min(fit, ceiling)


def static_max_jobs(facts: Facts, answers: Answers, recipe: ExtensionRecipe) -> int:
    """A ceiling on compile jobs: build.max_jobs, else the cores and the RAM a build may use ÷
    the per-job peak (what runs without the governor; the governor never exceeds it)."""
    if answers.build.max_jobs != "auto":
        return answers.build.max_jobs
    return jobs_that_fit(facts, answers, recipe)


def check_memory_answers(facts: Facts, answers: Answers) -> None:
    """build.memory_limit and a build.memory_reserve size above the machine's RAM are refused,
    naming its figure (a limit no build can reach, a reserve that leaves nothing)."""
    total = facts.memory.total_bytes
    if total is None:
        return
    build = answers.build
    if (limit := build.limit_bytes()) is not None and limit > total:
        raise InputError(
            f"build.memory_limit = {show_value(build.memory_limit)}: this machine has "
            f'{gib(total)} of RAM; allowed: "auto" (all but the reserve) or a size up to '
            f'{total // GiB}GiB, such as "{_size(total // 2)}"'
        )
    reserve = build.reserve_bytes(total)
    if not build.memory_reserve.strip().endswith("%") and reserve >= total:
        raise InputError(
            f"build.memory_reserve = {show_value(build.memory_reserve)}: this machine has "
            f"{gib(total)} of RAM, so nothing would be left for a build; allowed: a size "
            f'below that, such as "{_size(total // 10)}", or a percentage such as "10%"'
        )


def _size(n: int) -> str:
    """Bytes as an answers size, whole GiB ("12GiB"), MiB under one GiB."""
    return f"{n // GiB}GiB" if n >= GiB else f"{max(1, n // (1024 * 1024))}MiB"


def _peak_warnings(
    facts: Facts, answers: Answers, targets: tuple[BuildTarget, ...]
) -> list[StepWarning]:
    """A build whose one compile job peaks above the RAM it may use: the figure and what to
    do before it runs out of memory; one whose peak nobody measured: how it is counted."""
    usable = build_ram(facts, answers)
    out = []
    for t in targets:
        if t.recipe.peak_job_gib is None:  # no figure to compare: say how it is counted
            out.append(
                StepWarning(
                    "extensions",
                    f"{t.answer.name} {t.answer.version}: one compile job's peak is unknown (the "
                    f"recipe has no peak_job_gib): counted as {t.recipe.job_peak_gib:g} GiB until "
                    "the memory governor learns it from the build's own jobs, kept for its next "
                    "run",
                )
            )
            continue
        if usable is None or t.recipe.peak_job_gib * GiB <= usable:
            continue
        swap = facts.memory.swap_total_bytes
        out.append(
            StepWarning(
                "extensions",
                f"{t.answer.name} {t.answer.version}: one compile job peaks at about "
                f"{t.recipe.peak_job_gib:g} GiB, above the {gib(usable)} a build may use here "
                f"({gib(facts.memory.available_bytes)} free, less build.memory_reserve "
                f"{_budget_text(answers)}; swap {gib(swap) if swap else 'none'}): add swap, free "
                "RAM or lower build.memory_reserve, keep build.max_jobs at 1, or install a "
                "prebuilt wheel instead (the build.wheelhouse of a machine that built it, with "
                'source = "wheel")',
            )
        )
    return out


def _budget_text(answers: Answers) -> str:
    """build.memory_reserve, and the limit when there is one, as a warning quotes them."""
    limit = answers.build.memory_limit
    return answers.build.memory_reserve + ("" if limit == "auto" else f", limit {limit}")


def _build_target(
    facts: Facts,
    answers: Answers,
    cuda: str | None,
    answer: ExtensionAnswers,
    warnings: list[StepWarning],
) -> BuildTarget | None:
    # the arch list can depend on the extension's release and on nvcc's (= torch's) CUDA
    recipe = knowledge().extensions[answer.name].for_build(answer.version, cuda)
    ccs = facts.compute_capabilities if answer.archs == "auto" else list(answer.archs)
    label = f"{answer.name} {answer.version}"
    if cuda is None:
        warnings.append(
            StepWarning(
                "extensions",
                f"{label} skipped: torch is the CPU build, so no CUDA extension can run.",
            )
        )
        return None
    if not ccs:
        warnings.append(
            StepWarning(
                "extensions",
                f"{label} skipped: no GPU with a known compute capability; set extensions.archs.",
            )
        )
        return None
    if answer.archs != "auto":
        where = next(i for i, e in enumerate(answers.extensions) if e is answer)
        _check_suffixes_known(recipe, answer, f"extensions[{where}].archs")
        if not answers.build.for_other_machines:
            _check_archs_run_here(facts, recipe, answer, f"extensions[{where}].archs")
    bad = recipe.unsupported(ccs)
    if bad:
        warnings.append(
            StepWarning(
                "extensions",
                f"{label} skipped: it runs on compute capability {recipe.min_compute_capability} "
                f"and newer ({', '.join(recipe.arch_map)}); these GPUs are {', '.join(bad)}.",
            )
        )
        return None
    return BuildTarget(
        recipe=recipe,
        answer=answer,
        compute_capabilities=ccs,
        cuda_home=knowledge().repo.toolkit_path_for(cuda),
        max_jobs=static_max_jobs(facts, answers, recipe),
        jobs_at_once=jobs_that_fit(facts, answers, recipe),
    )


def _check_suffixes_known(recipe: ExtensionRecipe, answer: ExtensionAnswers, key: str) -> None:
    """An arch- or family-specific target ("9.0a") is built only where the recipe says how to
    ask its setup.py for it (arch_map has "9.0a"): else it is refused, not built as plain 9.0."""
    unknown = [
        a for a in answer.archs if a != compute_capability_of(a) and a not in recipe.arch_map
    ]
    if not unknown:
        return
    plain = list(dict.fromkeys(compute_capability_of(a) for a in answer.archs))
    raise InputError(
        f"{key} = {show_value(list(answer.archs))}: {answer.name}'s recipe has no arch_map entry "
        f"for {', '.join(unknown)} (it builds for {', '.join(recipe.arch_map)}); allowed: "
        f"{show_value(plain)} (its setup.py picks the code for those GPUs), or a recipe whose "
        f'arch_map has "{unknown[0]}" (such as "{unknown[0]}" = "{unknown[0]}" for '
        "TORCH_CUDA_ARCH_LIST)"
    )


def _check_archs_run_here(
    facts: Facts, recipe: ExtensionRecipe, answer: ExtensionAnswers, key: str
) -> None:
    """Explicit archs whose build some GPU here cannot run (its compute capability compiles to
    an arch the list lacks) are refused, unless build.for_other_machines says the wheel is
    meant for other machines as well."""
    # by number: sm_90a's code runs on the 9.0 GPU, sm_100f's on the 10.x family
    built = {arch_number(recipe.arch_map[cc]) for cc in answer.archs if cc in recipe.arch_map}
    # a GPU the recipe does not support at all is left out whatever the archs (a warning)
    missed = [
        cc
        for cc in facts.compute_capabilities
        if cc in recipe.arch_map and arch_number(recipe.arch_map[cc]) not in built
    ]
    if not missed:
        return
    present = list(dict.fromkeys(facts.compute_capabilities))
    works = [cc for cc in present if cc in recipe.arch_map]
    where = (
        f"the GPUs here: {_gpus_of(facts, missed)}"
        if set(missed) == set(present)
        else f"{_gpus_of(facts, missed)} of the GPUs here ({_gpus_of(facts, present)})"
    )
    wider = list(dict.fromkeys([*answer.archs, *works]))
    allowed = (
        f'{show_value(works)} (the GPUs here), {show_value(wider)} (those too), "auto", or '
        if works
        else '"auto", or '
    )
    raise InputError(
        f"{key} = {show_value(list(answer.archs))}: {answer.name} built for those would not "
        f"run on {where}; allowed: {allowed}build.for_other_machines = true when the build is "
        "meant for other machines too"
    )
