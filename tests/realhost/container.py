"""Real hosts for the tests: Debian 12 containers that boot a real systemd (systemd-nspawn).

One root is made with debootstrap from the apt archive this machine is configured with, once,
and kept outside the checkout (CI clones afresh on the same machine, so the cache outlives the
clone). Each container boots an overlay of it (its writes go to an upper directory of its
own), runs sshd on a free 127.0.0.1 port (nspawn shares the host's network) with a generated
key, and is powered off, unmounted and removed after. A container that reboots itself
(`systemctl reboot`, ansible.builtin.reboot) makes nspawn exit 133; it is booted again, as a
machine comes back.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

CACHE = Path(os.environ.get("MLSETUP_REALHOST_CACHE", "/var/cache/mlsetup-tests"))
SUITE = "bookworm"  # Debian 12: systemd 252, Python 3.11
PACKAGES = ("systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "python3-venv", "sudo")
FALLBACK_MIRROR = "http://deb.debian.org/debian"
# The host's CA bundle goes into each container: behind a TLS-inspecting proxy (as here, and
# on many servers) pip and uv in the container must trust what the host trusts.
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
REBOOT_EXIT = 133  # systemd-nspawn's exit code when the container rebooted
BOOT_TIMEOUT = 90.0
SSH_OPTIONS = (
    "-o",
    "StrictHostKeyChecking=no",
    "-o",
    "UserKnownHostsFile=/dev/null",
    "-o",
    "BatchMode=yes",
    "-o",
    "LogLevel=ERROR",
    "-o",
    "ConnectTimeout=5",
)


class CannotBoot(Exception):
    """This machine cannot run the containers (the reason is the message)."""


def tool(name: str) -> str | None:
    """A program on PATH, or in the sbin directories a non-login root shell may lack."""
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


def why_not() -> str | None:
    """Why real-host tests cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return "systemd-nspawn and debootstrap need root (CI runs the suite as root)"
    for program, package in (
        ("debootstrap", "debootstrap"),
        ("systemd-nspawn", "systemd-container"),
        ("ssh", "openssh-client"),
    ):
        if tool(program) is None:
            return (
                f"{program} is not installed (apt-get install {package}; tests/run.sh does as root)"
            )
    return None


def apt_mirror() -> str:
    """The Debian archive this machine's apt uses (deb822 .sources or one-line lists)."""
    uris: list[str] = []
    sources = Path("/etc/apt")
    for path in [sources / "sources.list", *sorted((sources / "sources.list.d").glob("*"))]:
        with contextlib.suppress(OSError):
            text = path.read_text()
            if path.suffix == ".sources":
                for line in re.findall(r"^URIs:\s*(.+)$", text, re.M):
                    uris += line.split()
            elif path.suffix == ".list" or path.name == "sources.list":
                uris += re.findall(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)", text, re.M)
    debian = [u for u in uris if "debian" in u and "security" not in u]
    return debian[0] if debian else FALLBACK_MIRROR


def image_key(mirror: str) -> str:
    recipe = f"{SUITE} {mirror} {' '.join(PACKAGES)} v1"
    return hashlib.sha256(recipe.encode()).hexdigest()[:12]


def build_image(log: Path | None = None) -> tuple[Path, float]:
    """The cached root (built now if missing); and the seconds building it took (0: cached)."""
    mirror = apt_mirror()
    image = CACHE / f"debian12-{image_key(mirror)}"
    CACHE.mkdir(parents=True, exist_ok=True, mode=0o700)
    with (CACHE / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build, whoever else runs the suite meanwhile
        if (image / "ready").exists():
            return image / "root", 0.0
        start = time.monotonic()
        work = CACHE / f".build-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        out = (log or work / "debootstrap.log").open("ab")
        with out:
            done = subprocess.run(
                [
                    str(tool("debootstrap")),
                    "--variant=minbase",
                    f"--include={','.join(PACKAGES)}",
                    SUITE,
                    str(work / "root"),
                    mirror,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=1500,
            )
        if done.returncode != 0:
            tail = (log or work / "debootstrap.log").read_text(errors="replace")[-2000:]
            shutil.rmtree(work, ignore_errors=True)
            raise CannotBoot(f"debootstrap {SUITE} from {mirror} failed:\n{tail}")
        root = work / "root"
        for debs in (root / "var/cache/apt/archives").glob("*.deb"):
            debs.unlink()
        (root / "etc/ssh/sshd_config.d").mkdir(parents=True, exist_ok=True)
        shutil.rmtree(image, ignore_errors=True)
        work.rename(image)
        elapsed = time.monotonic() - start
        (image / "ready").write_text(f"{mirror} {elapsed:.0f}s\n")
        return image / "root", elapsed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Container:
    """One booted copy of the image: `ssh()` runs a command in it as root over real SSH."""

    def __init__(
        self, image: Path, name: str, base: Path, key: Path, binds: tuple[Path, ...] = ()
    ) -> None:
        self.image = image
        self.name = name
        self.base = base / name
        self.key = key
        self.binds = binds
        self.port = free_port()
        self.root = self.base / "merged"
        self.console = self.base / "console.log"
        self.boots = 0
        # a fault to play: the container powers off at its next reboot and stays down (until
        # come_back), as a server that does not come back from its reboot
        self.stay_down_at_reboot = False
        self._proc: subprocess.Popen | None = None
        self._stopping = threading.Event()
        self._keeper: threading.Thread | None = None

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> None:
        for sub in ("upper", "work", "merged"):
            (self.base / sub).mkdir(parents=True)
        subprocess.run(
            [
                "mount",
                "-t",
                "overlay",
                "overlay",
                "-o",
                f"lowerdir={self.image},upperdir={self.base}/upper,workdir={self.base}/work",
                str(self.root),
            ],
            check=True,
            capture_output=True,
        )
        self._configure()
        self._keeper = threading.Thread(target=self._keep_booted, daemon=True)
        self._keeper.start()
        self.wait_ssh()

    def _configure(self) -> None:
        ssh_dir = self.root / "root/.ssh"
        ssh_dir.mkdir(mode=0o700, exist_ok=True)
        (ssh_dir / "authorized_keys").write_text(Path(f"{self.key}.pub").read_text())
        (ssh_dir / "authorized_keys").chmod(0o600)
        (self.root / "etc/ssh/sshd_config.d/mlsetup-tests.conf").write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nPermitRootLogin prohibit-password\n"
            "UseDNS no\n"
        )
        (self.root / "etc/hostname").write_text(f"{self.name}\n")
        if CA_BUNDLE.is_file():
            dest = self.root / str(CA_BUNDLE).lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(CA_BUNDLE, dest)
            (self.root / "etc/pip.conf").write_text(f"[global]\ncert = {CA_BUNDLE}\n")
        pip_cache = CACHE / "pip"  # warm runs install the containers' packages from here
        pip_cache.mkdir(exist_ok=True, mode=0o700)
        (self.root / "root/.cache/pip").mkdir(parents=True, exist_ok=True)

    def _argv(self) -> list[str]:
        argv = [
            str(tool("systemd-nspawn")),
            "-D",
            str(self.root),
            "-b",
            "--register=no",
            "--keep-unit",
            f"--machine={self.name}",
            "--console=read-only",
            f"--bind={CACHE / 'pip'}:/root/.cache/pip",
        ]
        argv += [f"--bind={path}" for path in self.binds]  # the same path inside
        return argv

    def _keep_booted(self) -> None:
        with self.console.open("ab") as console:
            while not self._stopping.is_set():
                self.boots += 1
                self._proc = subprocess.Popen(
                    self._argv(), stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT
                )
                if self._proc.wait() != REBOOT_EXIT or self.stay_down_at_reboot:
                    return

    def wait_ssh(self, timeout: float = BOOT_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self._keeper is not None and not self._keeper.is_alive():
                raise CannotBoot(f"{self.name} stopped while booting:\n{self.console_tail()}")
            ready = self.ssh("systemctl is-system-running --wait", timeout=30, check=False)
            if ready.returncode == 0 or ready.stdout.strip() in ("running", "degraded"):
                return
            if time.monotonic() > deadline:
                raise CannotBoot(
                    f"{self.name}: no SSH after {timeout:.0f}s:\n{ready.stderr}\n"
                    f"{self.console_tail()}"
                )
            time.sleep(0.5)

    def reboot(self) -> None:
        """`systemctl reboot` in the container; returns once it is up again (a new PID 1)."""
        boots = self.boots
        self.ssh("systemctl reboot", check=False)
        deadline = time.monotonic() + BOOT_TIMEOUT
        while self.boots == boots:
            assert time.monotonic() < deadline, f"{self.name} did not reboot"
            time.sleep(0.2)
        self.wait_ssh()

    def come_back(self) -> None:
        """Boot the container that stayed down at its reboot again; returns once it is up."""
        assert self._keeper is not None and not self._keeper.is_alive()
        self.stay_down_at_reboot = False
        self._keeper = threading.Thread(target=self._keep_booted, daemon=True)
        self._keeper.start()
        self.wait_ssh()

    def processes(self) -> list[int]:
        """Every process of the container: those in the PID namespace of nspawn's child."""
        if self._proc is None or self._proc.poll() is not None:
            return []
        children = Path(f"/proc/{self._proc.pid}/task/{self._proc.pid}/children")
        init = children.read_text().split()
        if not init:
            return []
        namespace = os.readlink(f"/proc/{init[0]}/ns/pid")
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(entry / "ns/pid") == namespace:
                        found.append(int(entry.name))
        return found

    def freeze(self) -> list[int]:
        """SIGSTOP every process of the container (its systemd, sshd, mlsetup), as a host
        that hangs; again until no new one appears (one may fork meanwhile). The stopped pids."""
        stopped: set[int] = set()
        while True:
            new = set(self.processes()) - stopped
            if not new:
                return sorted(stopped)
            for pid in new:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
            stopped |= new

    def thaw(self, pids: list[int]) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def stop(self) -> None:
        """Power off (SIGTERM makes nspawn ask the container's systemd to), unmount, remove:
        no process and no mount is left behind."""
        self._stopping.set()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._keeper is not None:
            self._keeper.join(timeout=60)
        if os.path.ismount(self.root):
            subprocess.run(["umount", str(self.root)], check=True)
        shutil.rmtree(self.base / "upper", ignore_errors=True)
        shutil.rmtree(self.base / "work", ignore_errors=True)

    def leftovers(self) -> list[str]:
        """What of this container is still there after stop(): processes and mounts."""
        found = []
        if self._proc is not None and self._proc.poll() is None:
            found.append(f"systemd-nspawn pid {self._proc.pid}")
        mounts = Path("/proc/self/mounts").read_text()
        found += [line for line in mounts.splitlines() if str(self.base) in line]
        return found

    def console_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.console.read_text(errors="replace").splitlines()[-lines:])
        return ""

    # -- using it -----------------------------------------------------------------------------

    def ssh_argv(self, command: str) -> list[str]:
        return [
            "ssh",
            "-i",
            str(self.key),
            "-p",
            str(self.port),
            *SSH_OPTIONS,
            "root@127.0.0.1",
            command,
        ]

    def ssh(
        self,
        command: str,
        timeout: float = 300,
        check: bool = True,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess:
        """A shell command line on the container, with `env` set for it."""
        command = with_env(command, env)
        done = subprocess.run(
            self.ssh_argv(command),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"{self.name}$ {command}\nexit {done.returncode}\n"
                f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
            )
        return done

    def ssh_popen(self, command: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        return subprocess.Popen(
            self.ssh_argv(with_env(command, env)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            stdin=subprocess.DEVNULL,
        )


def with_env(command: str, env: dict[str, str] | None) -> str:
    """The remote command line with `env` set for it (sshd passes none of the caller's)."""
    if not env:
        return command
    return "env " + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()) + f" {command}"


def make_key(directory: Path) -> Path:
    key = directory / "id_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "mlsetup-tests", "-f", str(key)],
        check=True,
    )
    return key
