"""Read the machine into Facts: NVML, /proc, /sys, os-release, toolkits, Pythons, the user.

Everything is read under a root prefix (`RootFS`), so tests hand the probe a
directory laid out like a server. Nothing here needs root, and nothing fails
the probe: what cannot be read is `None`, and the reason goes into `notes`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import distro
import psutil

from steps.core.accounts import account_by_uid, lookup_account
from steps.core.errors import InputError, input_kind
from steps.core.rootfs import RootFS
from steps.core.settings import NVML_SNAPSHOT, settings_from
from steps.formats.facts import (
    DRIVER_IS_HOSTS,
    CpuInfo,
    DriverInfo,
    Environment,
    Facts,
    Gpu,
    KernelInfo,
    KernelModules,
    MemoryInfo,
    OsInfo,
    PythonInfo,
    SecureBoot,
    Toolkit,
    UserInfo,
)
from steps.known.knowledge import knowledge
from steps.probing import fabric as fabric_probe
from steps.probing.nvml import NvmlReading, NvmlUnavailable, load_snapshot, read_nvml

NVIDIA_VENDOR = "0x10de"
DISPLAY_CLASSES = ("0x0300", "0x0302")  # VGA controller, 3D controller
SECURE_BOOT_VAR = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
DISK_PATHS = ("/", "/usr/local", "/home")
_DRIVER_VERSION = re.compile(r"Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)")
_PYTHON_NAME = re.compile(r"^python3\.\d+$")
_NVCC_RELEASE = re.compile(r"release (\d+\.\d+)")


@dataclass
class ProbeResult:
    facts: Facts
    notes: list[str] = field(default_factory=list)  # why a fact is unknown, how it was found


def probe(fs: RootFS | None = None, env: Mapping[str, str] | None = None) -> ProbeResult:
    fs = fs or RootFS()
    env = os.environ if env is None else env
    nvml_notes: list[str] = []
    nvml = _nvml(fs, env, nvml_notes)
    environment = _environment(fs)
    driver = _driver(fs, nvml, environment)
    gpus = _gpus(fs, nvml)
    tegra, l4t_release = _tegra(fs, gpus)
    facts = Facts(
        os=_os(fs),
        kernel=_kernel(fs),
        secure_boot=_secure_boot(fs),
        cpu=CpuInfo(logical=_cpu_count(fs)),
        memory=_memory(fs),
        disk_free_bytes={p: _disk_free(fs, p) for p in DISK_PATHS},
        gpus=gpus,
        driver=driver,
        nouveau_loaded=_module_loaded(fs, "nouveau"),
        toolkits=_toolkits(fs),
        pythons=_pythons(fs),
        user=_user(fs, env),
        boot_id=(fs.read_text("/proc/sys/kernel/random/boot_id") or "").strip() or None,
        environment=environment,
        tegra=tegra,
        l4t_release=l4t_release,
        nvswitches=fabric_probe.nvswitches(fs),
        daemons=fabric_probe.daemons(fs),
    )
    notes = []
    if nvml is None and (driver or facts.gpus):  # on a box with no NVIDIA GPU, NVML is moot
        notes += nvml_notes
        notes.append(
            "GPUs were read from PCI: names and compute capabilities are from mlsetup's table"
        )
    return ProbeResult(facts, notes)


def _nvml(fs: RootFS, env: Mapping[str, str], notes: list[str]) -> NvmlReading | None:
    snapshot = settings_from(env).nvml_snapshot
    try:
        if snapshot:
            return _snapshot(snapshot)
        if fs.is_host:
            return read_nvml()
    except NvmlUnavailable as exc:
        notes.append(str(exc))
    return None


@input_kind("settings")
def _snapshot(path: Path) -> NvmlReading:
    """A recorded NVML reading (MLSETUP_NVML_SNAPSHOT): input, so a bad one is exit 2."""
    try:
        return load_snapshot(path)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise InputError(
            f"environment: {NVML_SNAPSHOT}={str(path)!r}: not an NVML snapshot "
            f"({type(exc).__name__}: {str(exc)[:100]}); allowed: the JSON of "
            "tests/fixtures/h200-nvml.json"
        ) from None


def _os(fs: RootFS) -> OsInfo:
    d = distro.LinuxDistribution(include_lsb=False, include_uname=False, root_dir=str(fs.root))
    return OsInfo(
        id=d.id() or None,
        version_id=d.version(best=False) or None,
        codename=d.codename() or None,
        arch=os.uname().machine,
        pretty=d.name(pretty=True) or None,
    )


def _kernel(fs: RootFS) -> KernelInfo:
    release = (fs.read_text("/proc/sys/kernel/osrelease") or "").strip() or None
    if release is None:
        return KernelInfo(release=None, headers_installed=None)
    build = fs.path(f"/lib/modules/{release}/build")
    # `build` is usually a symlink to /usr/src/linux-headers-*: resolve it inside the root.
    target = os.readlink(build) if build.is_symlink() else None
    headers = (
        fs.exists(f"/usr/src/linux-headers-{release}")
        or (
            target is not None
            and fs.exists(target if target.startswith("/") else f"/lib/modules/{release}/{target}")
        )
        or (build.is_dir() and not build.is_symlink())
    )
    return KernelInfo(release=release, headers_installed=headers)


def _secure_boot(fs: RootFS) -> SecureBoot:
    if not fs.exists("/sys/firmware/efi"):
        return "disabled"  # booted by BIOS: Secure Boot cannot be on
    try:
        raw = fs.path(SECURE_BOOT_VAR).read_bytes()
        if len(raw) >= 5:  # 4 bytes of attributes, then the value
            return "enabled" if raw[4] == 1 else "disabled"
    except OSError:
        pass
    try:
        out = subprocess.run(["mokutil", "--sb-state"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    text = (out.stdout + out.stderr).lower()
    if "secureboot enabled" in text:
        return "enabled"
    if "secureboot disabled" in text or "not supported" in text:
        return "disabled"
    return "unknown"


def _cpu_count(fs: RootFS) -> int | None:
    cpuinfo = fs.read_text("/proc/cpuinfo")
    if cpuinfo is None:
        return None
    return sum(1 for line in cpuinfo.splitlines() if line.startswith("processor")) or None


def _meminfo(fs: RootFS) -> dict[str, int]:
    out = {}
    for line in (fs.read_text("/proc/meminfo") or "").splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0]) * 1024  # /proc/meminfo counts kB
    return out


def _memory(fs: RootFS) -> MemoryInfo:
    m = _meminfo(fs)
    return MemoryInfo(
        total_bytes=m.get("MemTotal"),
        available_bytes=m.get("MemAvailable"),
        swap_total_bytes=m.get("SwapTotal"),
    )


def _disk_free(fs: RootFS, target: str) -> int | None:
    path = fs.path(target)
    while not path.exists() and path != path.parent:
        path = path.parent  # /home may not exist yet: report the filesystem it would be on
    try:
        return psutil.disk_usage(str(path)).free
    except OSError:
        return None


def _bus_id(nvml_bus_id: str) -> str:
    """NVML's "00000000:00:06.0" as sysfs writes it, "0000:00:06.0"."""
    domain, _, rest = nvml_bus_id.lower().partition(":")
    return f"{int(domain, 16):04x}:{rest}"


def _gpus(fs: RootFS, nvml: NvmlReading | None) -> list[Gpu]:
    if nvml is not None:
        gpus = []
        for g in nvml.gpus:
            bus = _bus_id(g.pci_bus_id)
            device = g.pci_device_id or _sysfs(fs, f"/sys/bus/pci/devices/{bus}/device")
            gpus.append(
                Gpu(
                    index=g.index,
                    name=g.name,
                    pci_device_id=device,
                    pci_bus_id=bus,
                    compute_capability=g.compute_capability,
                    memory_bytes=g.memory_bytes,
                    source="nvml",
                )
            )
        return gpus
    table = knowledge().gpus
    found = []
    for dev in fs.glob("/sys/bus/pci/devices/*"):
        target = fs.target(dev)
        if _sysfs(fs, f"{target}/vendor") != NVIDIA_VENDOR:
            continue
        if not (_sysfs(fs, f"{target}/class") or "").startswith(DISPLAY_CLASSES):
            continue
        device = _sysfs(fs, f"{target}/device")
        model = table.get(device or "")
        found.append((Path(dev).name, device, model))
    return [
        Gpu(
            index=i,
            name=model.name if model else None,
            pci_device_id=device,
            pci_bus_id=bus,
            compute_capability=model.compute_capability if model else None,
            memory_bytes=None,
            source="pci",
        )
        for i, (bus, device, model) in enumerate(sorted(found, key=lambda f: f[0]))
    ]


def _sysfs(fs: RootFS, target: str) -> str | None:
    text = fs.read_text(target)
    return text.strip().lower() if text else None


def _driver(
    fs: RootFS, nvml: NvmlReading | None, environment: Environment | None
) -> DriverInfo | None:
    text = fs.read_text("/proc/driver/nvidia/version")
    if text is None and nvml is None:
        return None
    m = _DRIVER_VERSION.search(text or "")
    version = nvml.driver_version if nvml else (m.group(1) if m else None)
    if version is None:
        return None
    modules: KernelModules | None = None
    if text is not None:
        modules = "open" if "Open Kernel Module" in text else "proprietary"
    cuda_max = nvml.cuda_max if nvml else knowledge().cuda.newest_supported_by_driver(version)
    # WSL has no /proc/driver/nvidia (its kernel is Microsoft's, the driver Windows'), and a
    # container may hide it: where the driver is the host's, its answering NVML is "loaded"
    hosts = environment is not None and environment.kind in DRIVER_IS_HOSTS and nvml is not None
    return DriverInfo(
        version=version, cuda_max=cuda_max, modules=modules, loaded=text is not None or hosts
    )


def _module_loaded(fs: RootFS, name: str) -> bool | None:
    modules = fs.read_text("/proc/modules")
    if modules is None:
        return None
    return any(line.split(" ", 1)[0] == name for line in modules.splitlines())


def _toolkits(fs: RootFS) -> list[Toolkit]:
    found = {}
    for local in fs.glob("/usr/local/cuda-*"):
        path = Path(local)
        if path.is_symlink() or not re.fullmatch(r"cuda-\d+\.\d+", path.name):
            continue  # /usr/local/cuda-13 points at a versioned directory
        version = _toolkit_version(path)
        if version:
            found[version] = Toolkit(version=version, path=fs.target(path))
    return [found[v] for v in sorted(found, key=lambda v: tuple(map(int, v.split("."))))]


def _toolkit_version(path: Path) -> str | None:
    try:
        full = json.loads((path / "version.json").read_text())["cuda"]["version"]
        return ".".join(full.split(".")[:2])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        out = subprocess.run(
            [str(path / "bin" / "nvcc"), "--version"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = _NVCC_RELEASE.search(out.stdout)
    return m.group(1) if m else None


def _pythons(fs: RootFS) -> list[PythonInfo]:
    seen: set[str] = set()
    out = []
    for local in fs.glob("/usr/bin/python3.*") + fs.glob("/usr/local/bin/python3.*"):
        path = Path(local)
        real = os.path.realpath(path)
        if not _PYTHON_NAME.match(path.name) or real in seen or not os.access(path, os.X_OK):
            continue
        seen.add(real)
        try:
            out_ = subprocess.run(
                [str(path), "-I", "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                capture_output=True,
                text=True,
                timeout=10,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out_.returncode == 0 and out_.stdout.strip():
            out.append(PythonInfo(version=out_.stdout.strip(), path=fs.target(path)))
    return out


def _user(fs: RootFS, env: Mapping[str, str]) -> UserInfo | None:
    """The invoking user: $SUDO_USER under sudo, else whoever runs mlsetup (NSS on this
    machine, so directory users count: steps.core.accounts)."""
    wanted_name = env.get("SUDO_USER")
    account = lookup_account(fs, wanted_name) if wanted_name else account_by_uid(fs, os.getuid())
    if account is None:
        return None
    try:
        home = os.path.normpath(account.home) if account.home.startswith("/") else account.home
        return UserInfo(name=account.name, home=home, uid=account.uid)
    except ValueError:  # an account name or home no answers file could name: no user
        return None


# -- the environment: bare metal, a VM, a container, WSL; a Tegra board -------------------------
# What systemd-detect-virt(1) reads (src/basic/virt.c): the kernel's release naming Microsoft or
# WSL; /run/systemd/container and PID 1's container= variable (set by docker, podman, LXC,
# systemd-nspawn); /run/.containerenv (podman) and /.dockerenv (docker). WSL also mounts the
# Windows driver's libraries at /usr/lib/wsl/lib (NVIDIA's CUDA on WSL User Guide,
# https://docs.nvidia.com/cuda/wsl-user-guide/, "CUDA Support for WSL 2").
_WSL_KERNEL = re.compile(r"[Mm]icrosoft|WSL")
_CONTAINER_FILES = (("/run/.containerenv", "podman"), ("/.dockerenv", "docker"))
_HYPERVISOR_FLAG = re.compile(r"^flags\s*:.*\bhypervisor\b", re.MULTILINE)
_VIRT_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")


def _environment(fs: RootFS) -> Environment | None:
    """Where this system runs; None when nothing said (a root without /proc)."""
    kernel = (fs.read_text("/proc/sys/kernel/osrelease") or "") + (
        fs.read_text("/proc/version") or ""
    )
    if _WSL_KERNEL.search(kernel) or fs.exists("/usr/lib/wsl/lib"):
        return Environment(kind="wsl", name="wsl")
    container = _container(fs)
    if container is not None:
        return container
    if fs.is_host and (vm := _detect_vm()) is not None:
        return vm
    cpuinfo = fs.read_text("/proc/cpuinfo")
    if cpuinfo is None or "flags" not in cpuinfo:
        return None  # an arm64 CPU has no hypervisor flag to read: only systemd can tell
    return Environment(kind="vm" if _HYPERVISOR_FLAG.search(cpuinfo) else "bare-metal")


def _container(fs: RootFS) -> Environment | None:
    said = (fs.read_text("/run/systemd/container") or "").strip()
    if not said:
        environ = fs.read_text("/proc/1/environ") or ""  # root-only: None without root
        said = next(
            (v.partition("=")[2] for v in environ.split("\0") if v.startswith("container=")), ""
        )
    if said:
        return Environment(kind="container", name=said if _VIRT_NAME.match(said) else None)
    for marker, name in _CONTAINER_FILES:
        if fs.exists(marker):
            return Environment(kind="container", name=name)
    return None


def _detect_vm() -> Environment | None:
    """systemd-detect-virt --vm on this machine (CPUID and DMI, which no file here shows)."""
    try:
        out = subprocess.run(
            ["systemd-detect-virt", "--vm"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    name = out.stdout.strip()
    if name == "none":
        return Environment(kind="bare-metal")
    if out.returncode == 0 and _VIRT_NAME.match(name):
        return Environment(kind="vm", name=name)
    return None


# A Tegra board: /etc/nv_tegra_release, the L4T BSP's own ("# R36 (release), REVISION: 4.3, ...";
# Jetson Linux Developer Guide, "Quick Start": `cat /etc/nv_tegra_release`), else the device
# tree's "nvidia,tegra234"-style compatible string, else the integrated GPU's name as NVML gives
# it ("Orin (nvgpu)" on JetPack 6, "NVIDIA Thor" on JetPack 7).
_L4T = re.compile(r"#\s*R(\d{1,3})\s*\(release\),\s*REVISION:\s*(\d{1,3}(?:\.\d{1,3})?)\b")
_TEGRA_GPU = re.compile(r"\(nvgpu\)|\bTegra\b|\bThor\b")


def _tegra(fs: RootFS, gpus: list[Gpu]) -> tuple[bool, str | None]:
    """(a Tegra board, its L4T release)."""
    release = fs.read_text("/etc/nv_tegra_release")
    if release is not None:
        m = _L4T.search(release)
        return True, f"{m.group(1)}.{m.group(2)}" if m else None
    compatible = fs.read_text("/proc/device-tree/compatible") or ""
    named = any(g.name and _TEGRA_GPU.search(g.name) for g in gpus)
    return "nvidia,tegra" in compatible or named, None
