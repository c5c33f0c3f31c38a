"""A temporary directory laid out like a server's root, for the probe and the engine.

Files are the ones the real probe reads (/etc/os-release, /proc, /sys, /usr/local/cuda-*),
with the content real machines have; nothing in mlsetup knows this is not `/`.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

SECURE_BOOT_VAR = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"

OS_RELEASE = {
    ("ubuntu", "24.04"): 'PRETTY_NAME="Ubuntu 24.04.3 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\n'
    'VERSION="24.04.3 LTS (Noble Numbat)"\nVERSION_CODENAME=noble\nID=ubuntu\nID_LIKE=debian\n'
    "UBUNTU_CODENAME=noble\n",
    ("ubuntu", "22.04"): 'PRETTY_NAME="Ubuntu 22.04.5 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\n'
    'VERSION="22.04.5 LTS (Jammy Jellyfish)"\nVERSION_CODENAME=jammy\nID=ubuntu\nID_LIKE=debian\n'
    "UBUNTU_CODENAME=jammy\n",
    ("debian", "12"): 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\n'
    'VERSION_ID="12"\nVERSION="12 (bookworm)"\nVERSION_CODENAME=bookworm\nID=debian\n',
}


class FakeMachine:
    def __init__(
        self,
        root: Path,
        distro: tuple[str, str] = ("ubuntu", "24.04"),
        kernel: str = "6.8.0-49-generic",
        cpus: int = 16,
        mem_gib: int = 64,
    ) -> None:
        self.root = root
        self.kernel = kernel
        self.write("etc/os-release", OS_RELEASE[distro])
        self.write("proc/sys/kernel/osrelease", kernel + "\n")
        self.write("proc/sys/kernel/random/boot_id", str(uuid.uuid4()) + "\n")
        self.write(
            "proc/cpuinfo",
            "".join(f"processor\t: {i}\nmodel name\t: Fake CPU\n\n" for i in range(cpus)),
        )
        kb = mem_gib * 1024 * 1024
        self.write(
            "proc/meminfo",
            f"MemTotal:       {kb} kB\nMemFree:        {kb - 1024} kB\n"
            f"MemAvailable:   {kb - 2048} kB\nSwapTotal:             0 kB\n",
        )
        self.write("proc/modules", "ext4 1081344 1 - Live 0x0000000000000000\n")
        self.write(
            "etc/passwd",
            "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000:Alice:/home/alice:/bin/bash\n",
        )
        (root / "home/alice").mkdir(parents=True, exist_ok=True)
        (root / "usr/local").mkdir(parents=True, exist_ok=True)

    def write(self, rel: str, text: str) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def user(self, name: str, uid: int, home: Path) -> None:
        """An account whose home is a real directory outside the root (so real tools such as
        uv can use it), reachable at the same path inside the root too."""
        with (self.root / "etc/passwd").open("a") as f:
            f.write(f"{name}:x:{uid}:{uid}:{name}:{home}:/bin/bash\n")
        home.mkdir(parents=True, exist_ok=True)
        os.chown(home, uid, uid)
        inside = self.root / str(home).lstrip("/")
        inside.parent.mkdir(parents=True, exist_ok=True)
        inside.symlink_to(home)

    def pci_device(self, bus: str, vendor: str, device: str, cls: str) -> None:
        base = f"sys/bus/pci/devices/{bus}"
        self.write(f"{base}/vendor", vendor + "\n")
        self.write(f"{base}/device", device + "\n")
        self.write(f"{base}/class", cls + "\n")

    def gpu(self, bus: str = "0000:00:06.0", device: str = "0x2335") -> None:
        self.pci_device(bus, "0x10de", device, "0x030200")

    def nvswitch(self, bus: str, device: str = "0x22a3") -> None:
        """An NVSwitch as sysfs shows it: NVIDIA, class "Bridge, other" (0x22a3: H100's)."""
        self.pci_device(bus, "0x10de", device, "0x068000")

    def dpkg_installed(self, package: str, version: str) -> None:
        """A package in dpkg's status file, installed."""
        status = self.root / "var/lib/dpkg/status"
        status.parent.mkdir(parents=True, exist_ok=True)
        with status.open("a") as f:
            f.write(
                f"Package: {package}\nStatus: install ok installed\nPriority: optional\n"
                f"Architecture: amd64\nVersion: {version}\nDescription: {package}\n\n"
            )

    def process(self, pid: int, *argv: str) -> None:
        """A running process as /proc shows it."""
        self.write(f"proc/{pid}/cmdline", "\0".join(argv) + "\0")

    def driver_loaded(self, version: str = "580.159.04", open_modules: bool = True) -> None:
        flavour = "Open Kernel Module for x86_64" if open_modules else "x86_64 Kernel Module"
        self.write(
            "proc/driver/nvidia/version",
            f"NVRM version: NVIDIA UNIX {flavour}  {version}  Release Build  (dvs-builder@U)\n"
            "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n",
        )
        self.load_module("nvidia")

    def load_module(self, name: str) -> None:
        with (self.root / "proc/modules").open("a") as f:
            f.write(f"{name} 14299136 0 - Live 0xffffffffc0400000 (O)\n")

    def kernel_headers(self) -> None:
        (self.root / f"usr/src/linux-headers-{self.kernel}").mkdir(parents=True, exist_ok=True)
        build = self.root / f"lib/modules/{self.kernel}/build"
        build.parent.mkdir(parents=True, exist_ok=True)
        build.symlink_to(f"/usr/src/linux-headers-{self.kernel}")

    def secure_boot(self, enabled: bool) -> None:
        path = self.root / SECURE_BOOT_VAR
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\x06\x00\x00\x00" + (b"\x01" if enabled else b"\x00"))

    def toolkit(self, version: str, full: str | None = None) -> Path:
        path = self.root / f"usr/local/cuda-{version}"
        self.write(
            f"usr/local/cuda-{version}/version.json",
            json.dumps({"cuda": {"name": "CUDA SDK", "version": full or f"{version}.0"}}),
        )
        return path

    def nvml_snapshot(
        self, path: Path, gpus: list[dict], driver: str = "580.159.04", cuda_driver: int = 13000
    ) -> Path:
        path.write_text(json.dumps({"driver": driver, "cuda_driver": cuda_driver, "gpus": gpus}))
        return path

    # -- where the driver is not the machine's own: WSL, a container, a Jetson ------------------

    def wsl(self) -> None:
        """WSL 2 as it looks from inside: Microsoft's kernel, the Windows driver's libraries
        under /usr/lib/wsl/lib, no /proc/driver/nvidia and no GPU on PCI."""
        self.write("proc/sys/kernel/osrelease", "6.6.87.2-microsoft-standard-WSL2\n")
        self.write(
            "proc/version",
            "Linux version 6.6.87.2-microsoft-standard-WSL2 (root@439a258ad544) (gcc (GCC) "
            "11.2.0, GNU ld (GNU Binutils) 2.37) #1 SMP PREEMPT_DYNAMIC Thu Jun  5 18:30:46 UTC "
            "2025\n",
        )
        for lib in ("libcuda.so.1", "libnvidia-ml.so.1", "libdxcore.so"):
            self.write(f"usr/lib/wsl/lib/{lib}", "")

    def docker(self) -> None:
        """Inside a Docker container: /.dockerenv (the host's /proc/driver/nvidia shows through
        when the container has the GPUs)."""
        self.write(".dockerenv", "")

    def podman(self) -> None:
        """Inside a Podman container: /run/.containerenv, and PID 1's container=podman."""
        self.write("run/.containerenv", 'engine="podman-4.9.3"\nname="ml"\nrootless=0\n')
        self.write("proc/1/environ", "PATH=/usr/bin:/bin\0container=podman\0HOME=/root\0")

    def jetson(self, release: str = "# R36 (release), REVISION: 4.3") -> None:
        """A Jetson Orin: the L4T BSP's release file and the device tree's Tegra SoC."""
        self.write(
            "etc/nv_tegra_release",
            f"{release}, GCID: 38968081, BOARD: generic, EABI: aarch64, DATE: Wed Jan  8 "
            "01:49:37 UTC 2025\n# KERNEL_VARIANT: oot\nTARGET_USERSPACE_LIB_DIR=nvidia\n",
        )
        self.write(
            "proc/device-tree/compatible",
            "nvidia,p3737-0000+p3701-0005\0nvidia,p3701-0005\0nvidia,tegra234\0",
        )
