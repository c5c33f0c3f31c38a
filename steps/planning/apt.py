"""apt actions shared by the steps, and NVIDIA's apt repository."""

from __future__ import annotations

import fcntl
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path

from steps.core.paths import CACHE_DIR
from steps.core.rootfs import RootFS
from steps.formats.facts import Facts
from steps.formats.plan import Action
from steps.known.knowledge import knowledge

APT_ENV = {"DEBIAN_FRONTEND": "noninteractive"}
# --no-remove: apt aborts instead of removing anything (an old driver, say) to make room;
# mlsetup never removes what it did not install. The conffile options keep a local config
# without a prompt that would hang an unattended run.
APT_INSTALL = [
    "apt-get",
    "install",
    "-y",
    "--no-remove",
    "-o",
    "Dpkg::Options::=--force-confdef",
    "-o",
    "Dpkg::Options::=--force-confold",
]
DOWNLOAD_TOOLS = ("ca-certificates", "curl")  # the keyring's download (nvidia_repo_actions)
NVIDIA_REPO = "nvidia-repo"  # the target of the actions that set NVIDIA's repository up


def apt_install(
    action_id: str,
    title: str,
    packages: list[str],
    reboot_after: bool = False,
    target: str | None = None,
) -> Action:
    return Action(
        id=action_id,
        kind="packages",
        target=target,
        title=title,
        argv=[*APT_INSTALL, *packages],
        env=dict(APT_ENV),
        reboot_after=reboot_after,
    )


def apt_update(action_id: str, title: str, target: str | None = None) -> Action:
    return Action(
        id=action_id,
        kind="package-index",
        target=target,
        title=title,
        argv=["apt-get", "update"],
        env=dict(APT_ENV),
    )


def nvidia_repo_actions(facts: Facts) -> list[Action] | None:
    """Add NVIDIA's CUDA repo (keyring for this distro and arch); None if it has none.

    It brings what it runs: the keyring comes over HTTPS with curl, which a bare Debian or
    Ubuntu (a minimal image, a container) lacks, and the packages come fresh from lists just
    refreshed. Whichever step sets the repo up first (the driver's, else the toolkit's) runs
    these; the same ids in a later plan are done already (steps.planning.planner)."""
    repo = knowledge().repo
    base = (
        repo.wsl_url_for(facts.os.id, facts.os.arch)
        if in_wsl(facts)
        else repo.url_for(facts.os.id, facts.os.version_id, facts.os.arch)
    )
    if base is None:
        return None
    keyring = f"{CACHE_DIR}/{repo.keyring_package}"
    actions = [
        apt_update("nvidia-repo.apt-update", "Refresh package lists"),
        apt_install(
            "nvidia-repo.tools",
            "Install what fetches NVIDIA's keyring (ca-certificates, curl)",
            list(DOWNLOAD_TOOLS),
        ),
        Action(
            id="nvidia-repo.keyring-download",
            kind="repo-setup",
            title="Download NVIDIA's CUDA repository keyring",
            argv=["curl", "-fsSL", "--retry", "3", "-o", keyring, base + repo.keyring_package],
        ),
        Action(
            id="nvidia-repo.keyring-install",
            kind="repo-setup",
            title="Install NVIDIA's CUDA repository keyring",
            argv=["dpkg", "-i", keyring],
            env=dict(APT_ENV),
        ),
        apt_update("nvidia-repo.update", "Refresh package lists with NVIDIA's repository"),
    ]
    # what they are for: the repository, set up once for the steps that need it
    return [a.model_copy(update={"target": NVIDIA_REPO}) for a in actions]


def in_wsl(facts: Facts) -> bool:
    """WSL 2: NVIDIA's repository there is wsl-ubuntu, toolkits without a driver."""
    return facts.environment is not None and facts.environment.kind == "wsl"


def no_repo_reason(facts: Facts) -> str:
    repo = knowledge().repo
    if in_wsl(facts):
        return (
            f"NVIDIA publishes no CUDA apt repository for {facts.os.id} ({facts.os.arch}) in "
            f"WSL; its {repo.wsl.repo} repository serves {', '.join(repo.wsl.distros)} on "
            f"{', '.join(repo.wsl.arch)}."
        )
    return (
        f"NVIDIA publishes no CUDA apt repository for {facts.os.id} {facts.os.version_id} "
        f"({facts.os.arch}); supported: {', '.join(repo.repo)} on {', '.join(repo.arch)}."
    )


DPKG_LOCKS = ("/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock")
PACKAGE_TOOLS = ("apt-get", "apt", "dpkg")


def uses_dpkg(action: Action) -> bool:
    return action.argv[0] in PACKAGE_TOOLS


def dpkg_interrupted(fs: RootFS) -> bool:
    """dpkg left pending work (`dpkg --configure -a` needed): its updates directory is not empty."""
    updates = fs.path("/var/lib/dpkg/updates")
    return updates.is_dir() and any(updates.iterdir())


def dpkg_lock_holder(fs: RootFS) -> int | None:
    """The pid holding a dpkg lock (0 if held by an unknown process), or None if it is free."""
    for target in DPKG_LOCKS:
        path = fs.path(target)
        if not path.exists():
            continue
        try:  # opened for the lock's sake, never written; never through a link
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue  # not dpkg's own lock file: dpkg, when it runs, says what is wrong
        try:
            # F_GETLK reports a conflicting lock without taking one (struct flock on Linux:
            # short type, short whence, off_t start, off_t len, pid_t pid).
            probe = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
            result = fcntl.fcntl(fd, fcntl.F_GETLK, probe)
            l_type, _, _, _, pid = struct.unpack("hhqqi4x", result)
            if l_type != fcntl.F_UNLCK:
                return pid or 0
        finally:
            os.close(fd)
    return None


def wait_for_dpkg(
    fs: RootFS, timeout: float, on_wait: Callable[[str], None], poll: float = 0.5
) -> str | None:
    """Wait until no one holds the dpkg lock: None once it is free, or, when it is still held
    after `timeout`, who holds it (its name, pid and command line)."""
    deadline = time.monotonic() + timeout
    announced = False
    while (holder := dpkg_lock_holder(fs)) is not None:
        if time.monotonic() >= deadline:
            return _process_name(holder, command=True)
        if not announced:
            who = _process_name(holder)
            on_wait(f"the dpkg lock is held by {who}; waiting up to {timeout:.0f}s for it")
            announced = True
        time.sleep(poll)
    return None


CMDLINE_SHOWN = 300  # characters of the holder's command line a message shows


def _process_name(pid: int, command: bool = False) -> str:
    """The process as a message names it, "unattended-upgr (pid 1234)"; with `command`, its
    command line too."""
    if not pid:
        return "another process"
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return f"pid {pid}"
    if not command:
        return f"{name} (pid {pid})"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read(CMDLINE_SHOWN + 1).rstrip(b"\0").replace(b"\0", b" ")
    except OSError:
        return f"{name} (pid {pid})"
    shown = argv.decode("utf-8", "replace")
    shown = shown if len(shown) <= CMDLINE_SHOWN else shown[:CMDLINE_SHOWN] + " ..."
    return f"{name} (pid {pid}: {shown})"
