"""The fabric step on a real systemd: a booted Debian 12 container runs the engine on a fake
HGX H200 board (8 GPUs and 4 NVSwitches on its PCI bus, tests/fakemachine.py), whose stand-in
packages nvidia-fabricmanager and nvidia-persistenced install real systemd units running
stand-in daemons (tests/standin.py): the container's own systemctl enables and starts them.

The fake root's /etc/systemd/system is bind-mounted over the container's, so the units the
stand-in packages drop there are the ones systemd runs, and the engine's `systemctl enable`
lands in the fake root too.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from steps.formats.events import ActionFinished, ActionStarted, Event, StepSatisfied, StepStarted
from tests.harness import FakeServer, wait_for
from tests.realhost.container import Container
from tests.realhost.hosts import (
    CONTAINER_PYTHON_VERSION,
    container_env,
    container_server,
    install_mlsetup,
)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("realhost")]
FM_UNIT = "nvidia-fabricmanager.service"
UNITS = (FM_UNIT, "nvidia-persistenced.service")
DRIVER = "580.105.08"  # what the stand-in driver package of branch 580 loads (tests/standin.py)
UPGRADED = "580.126.09"
# No extension: the fabric step and the smoke test are what this is about.
ANSWERS = """version = 1
[venv]
path = "~/ml-env"
python = "{python}"
[torch]
index_url = "{index}"
[reboot]
policy = "ask"
"""


@pytest.fixture(scope="module")
def host(boot, mlsetup_wheel: Path) -> Container:
    container = boot("fabric")
    install_mlsetup(container, mlsetup_wheel)
    return container


@pytest.fixture
def hgx(realhost_base: Path, uv_binary: Path, host: Container, request: pytest.FixtureRequest):
    """A fake HGX H200 whose /etc/systemd/system is the container's; torn down after."""
    fake = container_server(realhost_base / "shared" / request.node.name, uv_binary)
    for i in range(1, 8):  # the harness's H200 at 0000:00:06.0 and seven more
        fake.machine.gpu(f"0000:00:{6 + i:02x}.0", "0x2335")
    for i in range(4):
        fake.machine.nvswitch(f"0000:0{5 + i}:00.0")
    fake.machine.dpkg_installed("base-files", "12.4+deb12u8")  # a Debian box has a dpkg database
    fake.set_machine(systemd_units=True)
    fake.answers.write_text(ANSWERS.format(python=CONTAINER_PYTHON_VERSION, index=fake.index))
    systemd_dir = fake.root / "etc/systemd/system"
    systemd_dir.mkdir(parents=True)
    host.ssh(f"mount --bind {systemd_dir} /etc/systemd/system && systemctl daemon-reload")
    try:
        yield fake
    finally:
        host.ssh(
            f"systemctl stop {' '.join(UNITS)}; umount /etc/systemd/system; "
            "systemctl daemon-reload",
            check=False,
        )


def mlsetup(host: Container, fake: FakeServer, *args: str, code: int = 0) -> str:
    done = host.ssh(
        shlex.join(["mlsetup", *args, "--root", str(fake.root)]),
        check=False,
        env=container_env(fake, UV_NO_PROGRESS="1"),
        timeout=900,
    )
    out = done.stdout + done.stderr
    assert done.returncode == code, out[-6000:]
    return out


def position(events: list[Event], kind: type[ActionStarted | ActionFinished], action: str) -> int:
    return next(i for i, e in enumerate(events) if isinstance(e, kind) and e.action == action)


def systemctl(host: Container, *args: str) -> str:
    return host.ssh(shlex.join(["systemctl", *args]), check=False).stdout.strip()


def journal(host: Container, unit: str) -> str:
    return host.ssh(f"journalctl -b -o cat --no-pager -u {unit}").stdout


def logged(host: Container, unit: str, words: str) -> None:
    """Waits until the unit's journal holds `words` (journald writes it a moment after)."""
    wait_for(lambda: words in journal(host, unit), timeout=60)


def test_fabric_manager_runs_under_systemd_before_the_smoke_test_and_follows_the_driver(
    host: Container, hgx: FakeServer
):
    fake = hgx
    answers = str(fake.answers)
    mlsetup(host, fake, "apply", "--answers", answers, code=10)  # the driver's reboot
    fake.reboot()
    mlsetup(host, fake, "apply", "--resume")
    events = fake.events()
    fabric = next(e for e in events if isinstance(e, StepStarted) and e.step == "fabric")
    assert "4 NVSwitches" in fabric.reason, fabric.reason
    assert fabric.actions[-4:] == [
        "fabric.enable-nvidia-fabricmanager",
        "fabric.start-nvidia-fabricmanager",
        "fabric.enable-nvidia-persistenced",
        "fabric.start-nvidia-persistenced",
    ]
    started = position(events, ActionFinished, "fabric.start-nvidia-fabricmanager")
    assert any(
        isinstance(e, ActionFinished)
        and e.action == "fabric.start-nvidia-fabricmanager"
        and e.status == "done"
        for e in events
    )
    assert started < position(events, ActionStarted, "venv.smoke")
    # the packages follow the driver's pin (installed again just before them)
    ids = fabric.actions
    assert ids.index("fabric.pin") + 1 == ids.index("fabric.install")
    install = next(
        e for e in events if isinstance(e, ActionStarted) and e.action == "fabric.install"
    )
    assert install.command.endswith("nvidia-fabricmanager nvidia-persistenced"), install.command
    # the real systemd runs them, enabled for the next boot
    for unit in UNITS:
        assert systemctl(host, "is-active", unit) == "active", journal(host, unit)
        assert systemctl(host, "is-enabled", unit) == "enabled"
    pid = systemctl(host, "show", "-P", "MainPID", FM_UNIT)
    assert host.ssh(f"tr '\\0' ' ' < /proc/{pid}/cmdline").stdout.split()[0] == "nv-fabricmanager"
    logged(host, FM_UNIT, f"nvidia-fabricmanager version {DRIVER}")

    # a second apply finds every step satisfied: nothing runs
    mlsetup(host, fake, "apply", "--answers", answers)
    events = fake.events()
    assert not [e for e in events if isinstance(e, ActionStarted)]
    satisfied = next(e for e in events if isinstance(e, StepSatisfied) and e.step == "fabric")
    assert f"NVIDIA Fabric Manager runs at the driver's {DRIVER}" in satisfied.reason
    assert "nvidia-persistenced runs" in satisfied.reason

    # an unattended upgrade moves the driver but not Fabric Manager; at boot Fabric Manager
    # refuses the new driver with its own line
    fake.set_machine(driver={"version": UPGRADED, "open": True})
    fake.reboot()
    assert host.ssh(f"systemctl restart {FM_UNIT}", check=False).returncode != 0
    refused = (
        f"fabric manager NVIDIA GPU driver interface version {DRIVER} don't match with "
        f"driver version {UPGRADED}"
    )
    logged(host, FM_UNIT, refused)
    assert systemctl(host, "is-active", FM_UNIT) in ("failed", "inactive")
    # mlsetup sees it: the plan says why, and the commands that mend it
    plan = mlsetup(host, fake, "plan", "--answers", answers)
    assert f"NVIDIA Fabric Manager is at {DRIVER}, not the driver's {UPGRADED}" in plan, plan
    assert "[fabric.install] Install nvidia-fabricmanager of driver branch 580" in plan, plan
    assert "$ systemctl restart nvidia-fabricmanager" in plan, plan
    # applied while NVIDIA's repository still has only the old Fabric Manager: it is installed
    # again, refuses to start, and the failure reads why from its journal
    fake.set_machine(repository={"nvidia-fabricmanager": DRIVER})
    failed = mlsetup(host, fake, "apply", "--answers", answers, code=1)
    failure = fake.report()["failure"]
    assert failure["action"] == "fabric.start-nvidia-fabricmanager", failure
    assert failure["diagnosis"] == "fabric-manager-version", failure
    assert refused in "\n".join(failure["last_output"])
    assert f"Fabric Manager {DRIVER} refuses to run with the loaded driver {UPGRADED}" in failed
    assert "sudo systemctl restart nvidia-fabricmanager" in failure["next"]
    # the repository catches up; the operator does what the diagnosis says, and resumes
    fake.set_machine(repository={})
    host.ssh(
        f"{fake.bin}/apt-get install -y --no-remove nvidia-fabricmanager", env=container_env(fake)
    )
    mlsetup(host, fake, "apply", "--resume")
    assert systemctl(host, "is-active", FM_UNIT) == "active"
    logged(host, FM_UNIT, f"nvidia-fabricmanager version {UPGRADED}")
