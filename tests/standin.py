"""One stand-in for the system commands mlsetup runs, installed under each command's name.

It records every call (start and end) in calls.jsonl and changes the fake machine the way
the real command would: apt-get installs a toolkit into /usr/local/cuda-X.Y, the driver
package makes the next (simulated) boot load the driver, reboot changes the boot id, etc.
Scripted behaviour for a test lives in script.json: {"<command> <first package or arg>":
{"exit": N, "output": "...", "sleep": S}}. Paths in arguments are paths on the fake machine.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

BIN = Path(os.path.abspath(sys.argv[0])).parent
CONFIG = json.loads((BIN / "standin.json").read_text())
ROOT = Path(CONFIG["root"])
STATE = Path(CONFIG["state"])
NAME = Path(sys.argv[0]).name
ARGS = sys.argv[1:]
DRIVER_VERSIONS = {"580": "580.105.08", "590": "590.48.01", "595": "595.45.04"}
# The GPU daemons' packages (NVIDIA's CUDA repo), assets/daemons.toml's rows as the harness
# hands them over: package, driver_versioned, unit, executable. Installed, each is in dpkg's
# status at the version of the driver package (the branch pin moves both; machine.json's
# "repository": {package: version} plays a repository that lags the driver) with a stand-in
# daemon as its executable; where a real systemd runs it (units_dir) its unit too, as the package
# would. Without one this systemctl starts and stops the daemon itself, its output kept as the
# unit's journal.
DAEMONS: list[dict] = CONFIG["daemons"]
DAEMON_UNIT = """[Unit]
Description=stand-in {package} {version} (mlsetup tests)

[Service]
Type=forking
ExecStart={executable}

[Install]
WantedBy=multi-user.target
"""
# A daemon as its package's unit runs it (Type=forking: the parent returns once it runs).
# A driver-versioned one first checks the loaded driver and aborts at another version, with
# Fabric Manager's line (assets/diagnoses.toml, fabric-manager-version). The daemon runs as
# its executable's name (/proc/PID/cmdline) and shows itself in the fake root's /proc, a link
# to its real entry, where mlsetup's probe looks.
DAEMON = """#!{python}
import os, re, sys, time

ROOT, PACKAGE, VERSION, NAME = {root!r}, {package!r}, {version!r}, {name!r}
print(f"{{NAME}} {{PACKAGE}} version {{VERSION}}", flush=True)
if {driver_versioned!r}:
    try:
        with open(f"{{ROOT}}/proc/driver/nvidia/version") as f:
            loaded = re.search(r"  ([0-9][0-9.]+)  ", f.read()).group(1)
    except (OSError, AttributeError):
        loaded = "none"
    if loaded != VERSION:
        print(
            f"fabric manager NVIDIA GPU driver interface version {{VERSION}} don't match with "
            f"driver version {{loaded}}. Please update with matching NVIDIA driver package.",
            file=sys.stderr,
        )
        sys.exit(1)
pid = os.fork()
if pid:  # Type=forking: the parent returns once the daemon runs, under its own name in /proc
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        with open(f"/proc/{{pid}}/cmdline", "rb") as f:
            if f.read().split(b"\\0")[0] == NAME.encode():
                sys.exit(0)
        time.sleep(0.01)
    sys.exit(1)
os.setsid()
link = f"{{ROOT}}/proc/{{os.getpid()}}"
if os.path.lexists(link):
    os.unlink(link)
os.symlink(f"/proc/{{os.getpid()}}", link)
# it runs until its fake machine is gone: a server no test stopped (FakeServer.stop_daemons)
# leaves no daemon behind its removed directory
os.execv("/bin/sh", [NAME, "-c", 'while [ -d "$0" ]; do sleep 1; done', ROOT])
"""


def at(target: str) -> Path:
    """A path on the fake machine (mlsetup hands its own directories over already resolved)."""
    if target.startswith(f"{ROOT}/"):
        return Path(target)
    return ROOT / target.lstrip("/")


def log(kind: str, **extra: object) -> None:
    with (STATE / "calls.jsonl").open("a") as f:
        f.write(
            json.dumps(
                {
                    "kind": kind,
                    "cmd": NAME,
                    "args": ARGS,
                    "pid": os.getpid(),
                    "t": time.time(),
                    **extra,
                }
            )
            + "\n"
        )


def machine() -> dict:
    path = STATE / "machine.json"
    return json.loads(path.read_text()) if path.exists() else {}


def save_machine(data: dict) -> None:
    (STATE / "machine.json").write_text(json.dumps(data))


def scripted() -> dict:
    script = (
        json.loads((STATE / "script.json").read_text()) if (STATE / "script.json").exists() else {}
    )
    words = [a for a in ARGS if not a.startswith("-") and "=" not in a]
    for key in (f"{NAME} {' '.join(words)}", f"{NAME} {words[-1] if words else ''}", NAME):
        if key in script:
            return script[key]
    return {}


def apt_get() -> int:
    if ARGS and ARGS[0] == "update":
        print("Hit:1 http://archive.ubuntu.com/ubuntu noble InRelease")
        print("Reading package lists...")
        return 0
    assert "--no-remove" in ARGS, "mlsetup must never let apt remove packages"
    packages = [a for a in ARGS[1:] if not a.startswith("-") and "::" not in a]
    m = machine()
    for pkg in packages:
        print(f"Setting up {pkg} ...")
        if pkg.startswith("cuda-toolkit-"):
            major, minor = pkg.removeprefix("cuda-toolkit-").split("-")
            home = at(f"/usr/local/cuda-{major}.{minor}")
            (home / "bin").mkdir(parents=True, exist_ok=True)
            (home / "version.json").write_text(
                json.dumps({"cuda": {"version": f"{major}.{minor}.1"}})
            )
        elif pkg.startswith("nvidia-driver-pinning-"):
            m["pinned"] = pkg.removeprefix("nvidia-driver-pinning-")
        elif pkg in ("nvidia-open", "cuda-drivers"):
            m["driver"] = {
                "version": DRIVER_VERSIONS[m.get("pinned", "580")],
                "open": pkg == "nvidia-open",
            }
        elif (daemon := daemon_of(pkg)) is not None:
            install_daemon(m, pkg, daemon)
        elif pkg.startswith("linux-headers-"):
            at(f"/usr/src/{pkg}").mkdir(parents=True, exist_ok=True)
        elif pkg == "curl" and not (BIN / "curl").exists():
            (BIN / "curl").symlink_to("standin.py")  # on PATH, as apt puts /usr/bin/curl
        m.setdefault("installed", []).append(pkg)
    save_machine(m)
    return 0


def daemon_of(package: str) -> dict | None:
    """The daemon a package installs: its own name, or a driver-versioned one's of a branch
    (nvidia-fabricmanager-570)."""
    for daemon in DAEMONS:
        name = daemon["package"]
        if package == name or (
            daemon["driver_versioned"] and re.fullmatch(rf"{re.escape(name)}-[0-9]+", package)
        ):
            return daemon
    return None


def install_daemon(m: dict, package: str, daemon: dict) -> None:
    """The version the pin gives, or the one machine.json's "repository" holds (it lags)."""
    version = m.get("repository", {}).get(package) or (
        m["driver"]["version"] if m.get("driver") else DRIVER_VERSIONS[m.get("pinned", "580")]
    )
    dpkg_status(package, version)
    unit, name = daemon["unit"], daemon["executable"]
    executable = at(f"/usr/bin/{name}")
    executable.parent.mkdir(parents=True, exist_ok=True)
    executable.write_text(
        DAEMON.format(
            python=sys.executable,
            root=str(ROOT),
            package=package,
            version=version,
            name=name,
            driver_versioned=daemon["driver_versioned"],
        )
    )
    executable.chmod(0o755)
    units = units_dir(m)
    if units is None or not unit:
        return
    unit_file = units / f"{unit}.service"
    unit_file.parent.mkdir(parents=True, exist_ok=True)
    unit_file.write_text(
        DAEMON_UNIT.format(package=package, version=version, executable=executable)
    )
    subprocess.run(["systemctl", "daemon-reload"], check=True)  # as the package's postinst


def units_dir(m: dict) -> Path | None:
    """Where a daemon package's unit goes for a real systemd to run it: the fake root's
    /etc/systemd/system where machine.json's "systemd_units" says a real systemd reads it (bound
    over the container's), or, in a container whose own systemctl the fake server uses (no
    stand-in systemctl: tests/realhost's container servers), the container's, as the real
    package there would; None: this stand-in's systemctl runs the daemon itself."""
    if m.get("systemd_units"):
        return at("/etc/systemd/system")
    if not (BIN / "systemctl").exists() and Path("/run/systemd/container").exists():
        return Path("/etc/systemd/system")
    return None


def dpkg_status(package: str, version: str) -> None:
    """The package installed at `version` in dpkg's status file (replacing an older one)."""
    status = at("/var/lib/dpkg/status")
    status.parent.mkdir(parents=True, exist_ok=True)
    text = status.read_text() if status.exists() else ""
    kept = [p for p in text.split("\n\n") if p.strip() and f"Package: {package}\n" not in p + "\n"]
    kept.append(
        f"Package: {package}\nStatus: install ok installed\nArchitecture: amd64\n"
        f"Version: {version}-1\nDescription: {package} (stand-in)"
    )
    status.write_text("\n\n".join(kept) + "\n\n")


def reboot() -> int:
    """The machine comes back: new boot id; the installed driver loads unless Secure Boot
    refuses it; a blacklisted nouveau stays unloaded."""
    m = machine()
    at("/proc/sys/kernel/random/boot_id").write_text(str(uuid.uuid4()) + "\n")
    modules = [
        line
        for line in at("/proc/modules").read_text().splitlines()
        if not line.startswith(("nvidia ", "nouveau "))
    ]
    if not at("/etc/modprobe.d/mlsetup-blacklist-nouveau.conf").exists() and m.get(
        "nouveau_at_boot"
    ):
        modules.append("nouveau 2220032 0 - Live 0xffffffffc0a00000")
    if m.get("driver") and not m.get("mok_not_enrolled"):
        load_driver(m["driver"])
        modules.append("nvidia 14299136 0 - Live 0xffffffffc0400000 (O)")
    at("/proc/modules").write_text("\n".join(modules) + "\n")
    m["boots"] = m.get("boots", 0) + 1
    save_machine(m)
    return 0


def load_driver(driver: dict) -> None:
    flavour = "Open Kernel Module for x86_64" if driver["open"] else "x86_64 Kernel Module"
    path = at("/proc/driver/nvidia/version")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"NVRM version: NVIDIA UNIX {flavour}  {driver['version']}  Release Build\n")


def modprobe() -> int:
    m = machine()
    if ARGS[-1] != "nvidia":
        return 0
    if not m.get("driver"):
        print("modprobe: FATAL: Module nvidia not found in directory /lib/modules/6.8.0-49-generic")
        return 1
    if m.get("mok_not_enrolled"):
        print("modprobe: ERROR: could not insert 'nvidia': Key was rejected by service")
        return 1
    load_driver(m["driver"])
    return 0


def systemd_run() -> int:
    """A transient unit: the command runs detached, from /, in the environment systemd gives a
    service (its default PATH and what --setenv says), none of the caller's."""
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    argv = list(ARGS)
    while argv and argv[0].startswith("--"):
        option = argv.pop(0)
        if option.startswith("--setenv="):
            key, _, value = option.removeprefix("--setenv=").partition("=")
            env[key] = value
    subprocess.Popen(
        argv,
        env=env,
        cwd="/",
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return 0


def systemctl() -> int:
    """enable/disable: the unit's link for the next boot; start/restart/stop: its stand-in
    daemon, as systemd would run it (a unit no installed package brings is not found)."""
    verb, unit = ARGS[0], ARGS[-1].removesuffix(".service")
    wants = at(f"/etc/systemd/system/multi-user.target.wants/{ARGS[-1]}")
    if verb == "enable":
        wants.parent.mkdir(parents=True, exist_ok=True)
        wants.write_text(ARGS[-1])
    elif verb == "disable":
        wants.unlink(missing_ok=True)
    elif verb in ("start", "restart", "stop"):
        daemon = next((d for d in DAEMONS if d["unit"] == unit), None)
        executable = at(f"/usr/bin/{daemon['executable']}") if daemon else None
        if executable is None or not executable.exists():
            print(f"Failed to {verb} {unit}.service: Unit {unit}.service not found.")
            return 5
        if verb != "start":
            stop_daemon(executable.name)
        if verb != "stop":
            return start_daemon(unit, executable)
    return 0


def start_daemon(unit: str, executable: Path) -> int:
    """The unit's ExecStart (Type=forking: back once the daemon runs), its output the unit's
    journal (STATE/journal/UNIT.log, which journalctl -u UNIT prints)."""
    journal = STATE / "journal" / f"{unit}.log"
    journal.parent.mkdir(exist_ok=True)
    with journal.open("a") as out:
        started = subprocess.run([executable], stdout=out, stderr=out, stdin=subprocess.DEVNULL)
    if started.returncode != 0:
        print(
            f"Job for {unit}.service failed because the control process exited with error "
            f'code.\nSee "systemctl status {unit}.service" and "journalctl -xeu {unit}.service" '
            "for details."
        )
        return 1
    return 0


def stop_daemon(name: str) -> None:
    """Ends the stand-in daemons running as `name` (those the fake root's /proc shows)."""
    for link in ROOT.glob("proc/[0-9]*"):
        if not link.is_symlink():
            continue
        pid = int(link.name)
        try:
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
        except OSError:
            argv0 = b""
        if argv0.decode(errors="replace") == name:
            os.kill(pid, signal.SIGKILL)
        if argv0.decode(errors="replace") in (name, ""):
            link.unlink()


def journalctl() -> int:
    """`journalctl ... -u UNIT`: what the unit's stand-in daemon said, its last 20 lines."""
    unit = ARGS[-1].removesuffix(".service") if "-u" in ARGS else None
    journal = STATE / "journal" / f"{unit}.log"
    if unit and journal.exists():
        print("\n".join(journal.read_text().splitlines()[-20:]))
    return 0


def main() -> int:
    log("start")
    behaviour = scripted()
    time.sleep(behaviour.get("sleep", 0))
    if "exit" in behaviour:
        print(behaviour.get("output", f"{NAME}: scripted failure"))
        code = behaviour["exit"]
    elif NAME == "apt-get":
        code = apt_get()
    elif NAME == "dpkg":
        print(f"Unpacking {ARGS[-1]} ...")
        code = 0
    elif NAME == "curl":
        dest = ARGS[ARGS.index("-o") + 1]
        at(dest).parent.mkdir(parents=True, exist_ok=True)
        at(dest).write_bytes(b"!<arch>\n")
        code = 0
    elif NAME == "install":
        src, dest = ARGS[-2], ARGS[-1]
        at(dest).parent.mkdir(parents=True, exist_ok=True)
        at(dest).write_text(Path(src).read_text())
        code = 0
    elif NAME == "reboot":
        code = reboot()
    elif NAME == "systemd-run":
        code = systemd_run()
    elif NAME == "modprobe":
        code = modprobe()
    elif NAME == "mokutil":
        print("SecureBoot enabled" if machine().get("secure_boot") else "SecureBoot disabled")
        code = 0
    elif NAME == "systemctl":
        code = systemctl()
    elif NAME == "journalctl":
        code = journalctl()
    elif NAME == "nvidia-smi":
        version = at("/proc/driver/nvidia/version")
        if not version.exists():
            print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
            code = 9
        else:
            print("NVIDIA-SMI " + version.read_text().split()[-3])
            code = 0
    else:  # update-initramfs, nvcc and the like: recorded, nothing to change
        code = 0
    log("end", exit=code)
    return code


if __name__ == "__main__":
    sys.exit(main())
