"""The probe's NVSwitch fabric facts: the NVSwitches on the PCI bus, and whether the GPU
daemons (Fabric Manager, NVLSM, IMEX, persistenced) are installed, at which version, and
running. Read under the probe's root like the rest (a test's fake server has them as files);
what cannot be read is None, which Facts calls unknown."""

from __future__ import annotations

import re
from pathlib import Path

from steps.core.rootfs import RootFS
from steps.formats.facts import Daemon, NvSwitch
from steps.known.knowledge import knowledge

NVIDIA_VENDOR = "0x10de"
DPKG_STATUS = "/var/lib/dpkg/status"
# "580.95.05-1", "1:580.95.05-0ubuntu1": the upstream version, no epoch, no Debian revision
_UPSTREAM = re.compile(r"^(?:[0-9]+:)?([0-9]{1,4}\.[0-9]{1,4}(?:\.[0-9]{1,4})?)(?:[-+~].*)?$")


def nvswitches(fs: RootFS) -> list[NvSwitch] | None:
    """NVIDIA PCI functions of the NVSwitch class; None when the PCI bus cannot be read."""
    if not fs.exists("/sys/bus/pci/devices"):
        return None
    wanted = knowledge().fabric.nvswitch_class
    found = []
    for dev in fs.glob("/sys/bus/pci/devices/*"):
        target = fs.target(dev)
        if _sysfs(fs, f"{target}/vendor") != NVIDIA_VENDOR:
            continue
        if not (_sysfs(fs, f"{target}/class") or "").startswith(wanted):
            continue
        device = _sysfs(fs, f"{target}/device")
        valid = device if device and re.fullmatch(r"0x[0-9a-f]{4}", device) else None
        found.append(NvSwitch(pci_bus_id=Path(dev).name, pci_device_id=valid))
    return sorted(found, key=lambda s: s.pci_bus_id)


def daemons(fs: RootFS) -> dict[str, Daemon] | None:
    """Each daemon of assets/daemons.toml: its package (dpkg's status file) and process
    (/proc/PID/cmdline); None when the package database cannot be read (not a Debian-family
    system)."""
    status = fs.read_text(DPKG_STATUS)
    if status is None:
        return None
    packages = _installed_packages(status)
    running = _running(fs)
    out: dict[str, Daemon] = {}
    for name, row in knowledge().daemons.daemon.items():
        # the unsuffixed name (branch 580 on) or, driver-versioned, the branch's own
        # (nvidia-fabricmanager-570)
        suffixed = re.compile(rf"{re.escape(row.package)}-[0-9]+")
        found = [row.package] if row.package in packages else []
        if row.driver_versioned:
            found += [p for p in packages if suffixed.fullmatch(p)]
        out[name] = Daemon(
            installed=bool(found),
            version=next((v for p in found if (v := packages[p])), None),
            active=None if running is None else row.executable in running,
        )
    return out


def _installed_packages(status: str) -> dict[str, str | None]:
    """dpkg's installed packages -> their upstream version (None if it has no such form)."""
    out: dict[str, str | None] = {}
    for paragraph in status.split("\n\n"):
        fields = dict(
            line.split(":", 1) for line in paragraph.splitlines() if ":" in line and line[:1] != " "
        )
        if fields.get("Status", "").strip() != "install ok installed":
            continue
        m = _UPSTREAM.match(fields.get("Version", "").strip())
        out[fields.get("Package", "").strip()] = m.group(1) if m else None
    return out


def _running(fs: RootFS) -> set[str] | None:
    """The executables' names of the processes running (argv[0]'s last part); None when
    /proc cannot be read."""
    if not fs.exists("/proc"):
        return None
    names = set()
    for proc in fs.glob("/proc/[0-9]*"):
        try:
            argv0 = (Path(proc) / "cmdline").read_bytes().split(b"\0", 1)[0]
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if argv0:
            names.add(argv0.decode(errors="replace").rsplit("/", 1)[-1])
    return names


def _sysfs(fs: RootFS, target: str) -> str | None:
    text = fs.read_text(target)
    return text.strip().lower() if text else None
