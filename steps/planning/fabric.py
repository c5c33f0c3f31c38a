"""The fabric step, between the driver and the toolkit: what an NVSwitch board needs before
CUDA starts, and the GPU daemons a server runs.

- An NVSwitch board (HGX/DGX 8-GPU) gets NVIDIA Fabric Manager at the driver's exact version,
  from the same branch pin as the driver (an upgrade moves both or neither); a Blackwell HGX
  (B200, B300) also NVLSM and the ib_umad module. Without it CUDA fails with error 802.
- A GB200/GB300 NVL compute tray gets the IMEX daemon, never a host Fabric Manager (the switch
  trays run theirs).
- nvidia-persistenced runs on every server install (`persistenced_wanted`).
Each daemon is enabled and started here, before the venv step's smoke test. The step is
satisfied when each one wanted runs, the driver-versioned ones at the loaded driver's version.
Knowledge: assets/fabric.toml (the boards), assets/daemons.toml (the daemons: packages, units,
labels, which ones run only at the driver's version).
"""

from __future__ import annotations

from typing import Literal

from steps.core.assetdir import ASSETS_DIR
from steps.decide.choices import Choices
from steps.formats.answers import Answers
from steps.formats.facts import Facts
from steps.formats.plan import Action, Outcome, pending, satisfied
from steps.known.knowledge import knowledge
from steps.planning import driver
from steps.planning.apt import apt_install, no_repo_reason, nvidia_repo_actions

Board = Literal["nvswitch", "nvl-tray", "none", "unknown"]
MODULES_LOAD = "/etc/modules-load.d/mlsetup-nvlsm.conf"
# the daemons this step decides on, by their names in assets/daemons.toml
FABRIC_MANAGER = "nvidia-fabricmanager"
NVLSM = "nvlsm"
IMEX = "nvidia-imex"
PERSISTENCED = "nvidia-persistenced"


def board(facts: Facts) -> Board:
    """What the GPUs sit on, as far as the facts tell: "unknown" only for facts that do not
    say whether there are NVSwitches (recorded before the key) on a board of SXM parts."""
    table = knowledge().fabric
    devices = [g.pci_device_id for g in facts.gpus]
    if any(d in table.nvl_tray_devices for d in devices):
        return "nvl-tray"
    if facts.nvswitches:
        return "nvswitch"
    sxm = sum(1 for d in devices if d in table.nvswitch_board_devices)
    if facts.nvswitches is None and sxm >= table.nvswitch_board_gpus:
        return "unknown"
    return "none"


def needs_nvlsm(facts: Facts) -> bool:
    """A Blackwell HGX: Fabric Manager needs the NVLink Subnet Manager and ib_umad."""
    wanted = knowledge().fabric.nvlsm_devices
    return board(facts) == "nvswitch" and any(g.pci_device_id in wanted for g in facts.gpus)


def persistenced_wanted(facts: Facts) -> bool:
    """nvidia-persistenced runs on every server install: a machine with NVIDIA GPUs whose
    driver mlsetup manages (where the driver is the host's, it is not ours to run)."""
    return bool(facts.gpus) and not facts.driver_is_hosts()


def plan(facts: Facts, answers: Answers, choices: Choices) -> Outcome:
    if not facts.gpus:
        return satisfied("no NVIDIA GPU: no fabric or GPU daemons")
    if answers.driver.action == "skip":
        return satisfied("skipped: driver.action is skip (the driver's daemons come with it)")
    if facts.driver_is_hosts():
        return satisfied(
            f"the driver is the host's ({facts.environment_label()}): so are its Fabric Manager "
            "and daemons"
        )
    kind = board(facts)
    if kind == "unknown":
        n = len(facts.gpus)
        return pending(
            f"these facts do not say whether the {n} SXM GPUs sit on NVSwitches (recorded "
            "before mlsetup read them): Fabric Manager is decided at apply, by the probe",
            [],
        )
    wanted = _wanted(facts, kind)
    missing = [name for name in wanted if not _runs(facts, name)]
    if not missing:
        return satisfied(_satisfied_reason(facts, kind, wanted))
    actions = _actions(facts, answers, choices, kind, missing)
    if actions is None:
        return pending(no_repo_reason(facts), [])
    return pending(_pending_reason(facts, kind, missing), actions)


def leaves(facts: Facts, answers: Answers, choices: Choices) -> list[str]:
    kind = board(facts)
    if not facts.gpus or answers.driver.action == "skip" or facts.driver_is_hosts():
        return []
    if kind == "unknown":  # decided at apply
        return []
    missing = [name for name in _wanted(facts, kind) if not _runs(facts, name)]
    return [f"{_label(name)} enabled and running" for name in missing]


def _wanted(facts: Facts, kind: Board) -> list[str]:
    wanted: list[str] = []
    if kind == "nvswitch":
        wanted.append(FABRIC_MANAGER)
    elif kind == "nvl-tray":
        wanted.append(IMEX)
    persistenced = facts.daemon(PERSISTENCED)
    # elsewhere it comes with the driver's packages: enabled once they have put it there
    if persistenced_wanted(facts) and (
        kind != "none" or (persistenced is not None and persistenced.installed)
    ):
        wanted.append(PERSISTENCED)
    return wanted


def _runs(facts: Facts, name: str) -> bool:
    """It runs, and a driver-versioned one at the loaded driver's version."""
    daemon = facts.daemon(name)
    if daemon is None or not daemon.installed or daemon.active is not True:
        return False
    if not _driver_versioned(name):
        return True
    return (
        facts.driver is not None and facts.driver.loaded and daemon.version == facts.driver.version
    )


def _driver_versioned(name: str) -> bool:
    return knowledge().daemons.daemon[name].driver_versioned


def _branch(facts: Facts, answers: Answers, choices: Choices) -> int:
    """The branch the driver step leaves: the loaded one it keeps, or the one it installs."""
    keeps = driver.satisfied_reason(facts, answers, choices) is not None
    return facts.driver.branch if keeps and facts.driver else choices.driver_branch


def _actions(
    facts: Facts, answers: Answers, choices: Choices, kind: Board, missing: list[str]
) -> list[Action] | None:
    table = knowledge().daemons
    branch = _branch(facts, answers, choices)
    # a driver-versioned daemon not at the driver's version is installed again (the pin gives
    # the driver's); any other only when it is not installed at all
    install = [
        n
        for n in missing
        if not (_installed_at_driver(facts, n) if _driver_versioned(n) else _installed(facts, n))
    ]
    if FABRIC_MANAGER in install and needs_nvlsm(facts):
        install.insert(install.index(FABRIC_MANAGER) + 1, NVLSM)
    packages = [table.package(n, branch) for n in install]
    actions: list[Action] = []
    if packages:
        repo = nvidia_repo_actions(facts)
        if repo is None:
            return None
        pin = knowledge().repo.driver_packages(branch, choices.driver_modules)[0]
        actions += repo
        actions.append(
            apt_install(
                "fabric.pin",
                f"Pin driver branch {branch}: its Fabric Manager moves with the driver",
                [pin],
            )
        )
        actions.append(
            apt_install(
                "fabric.install",
                f"Install {', '.join(packages)} of driver branch {branch}",
                packages,
            )
        )
    if FABRIC_MANAGER in missing and needs_nvlsm(facts):
        actions += _nvlsm_modules()
    for name in missing:
        actions += _start(name)
    return actions


def _nvlsm_modules() -> list[Action]:
    modules = knowledge().fabric.nvlsm_modules
    return [
        Action(
            id="fabric.modules-load",
            kind="config-file",
            title=f"Load {', '.join(modules)} at every boot (NVLSM needs it)",
            argv=[
                "install",
                "-m",
                "0644",
                str(ASSETS_DIR / "modules-load-nvlsm.conf"),
                MODULES_LOAD,
            ],
        ),
        Action(
            id="fabric.modprobe",
            kind="load-driver",
            title=f"Load {', '.join(modules)} now",
            argv=["modprobe", "-a", *modules],
        ),
    ]


def _start(name: str) -> list[Action]:
    """Enabled for every boot, and (re)started now: a daemon left at an old version by a
    driver upgrade runs the new one."""
    unit = knowledge().daemons.daemon[name].unit
    assert unit, f"{name} has no unit of its own in assets/daemons.toml"
    return [
        Action(
            id=f"fabric.enable-{name}",
            kind="service",
            title=f"Enable {_label(name)} at boot",
            argv=["systemctl", "enable", unit],
            target=name,
        ),
        Action(
            id=f"fabric.start-{name}",
            kind="service",
            title=f"Start {_label(name)}",
            argv=["systemctl", "restart", unit],
            target=name,
        ),
    ]


def _label(name: str) -> str:
    return knowledge().daemons.daemon[name].label


def _where(facts: Facts, kind: Board) -> str:
    if kind == "nvswitch":
        n = len(facts.nvswitches or [])
        return f"{n} NVSwitch{'es' if n != 1 else ''}"
    if kind == "nvl-tray":
        return "a GB200/GB300 NVL tray (its switch trays run Fabric Manager)"
    return "no NVSwitch: no Fabric Manager needed"


def _satisfied_reason(facts: Facts, kind: Board, wanted: list[str]) -> str:
    if not wanted:
        return _where(facts, kind)
    version = facts.driver.version if facts.driver else "?"
    runs = [
        f"{_label(n)} runs" + (f" at the driver's {version}" if _driver_versioned(n) else "")
        for n in wanted
    ]
    return f"{_where(facts, kind)}; {'; '.join(runs)}"


def _pending_reason(facts: Facts, kind: Board, missing: list[str]) -> str:
    parts = []
    for name in missing:
        daemon = facts.daemon(name)
        if daemon is None:
            state = "not known to run"
        elif not daemon.installed:
            state = "not installed"
        elif _driver_versioned(name) and facts.driver and daemon.version != facts.driver.version:
            state = f"at {daemon.version}, not the driver's {facts.driver.version}"
        else:
            state = "not running"
        parts.append(f"{_label(name)} is {state}")
    todo = "enable and start it before the smoke test"
    if any(not _installed_at_driver(facts, n) for n in missing if _driver_versioned(n)) or any(
        not _installed(facts, n) for n in missing
    ):
        extra = " with NVLSM and ib_umad (Blackwell HGX)" if needs_nvlsm(facts) else ""
        todo = f"install{extra} at the driver's exact version (its branch pin), then {todo}"
    return f"{_where(facts, kind)}: {'; '.join(parts)}: {todo}"


def _installed(facts: Facts, name: str) -> bool:
    daemon = facts.daemon(name)
    return daemon is not None and daemon.installed


def _installed_at_driver(facts: Facts, name: str) -> bool:
    daemon = facts.daemon(name)
    return (
        daemon is not None
        and daemon.installed
        and facts.driver is not None
        and daemon.version == facts.driver.version
    )
