"""apt actions shared by the steps, and NVIDIA's apt repository."""

from __future__ import annotations

from steps.facts import Facts
from steps.knowledge import knowledge
from steps.plan import Action

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
CACHE_DIR = "/var/cache/mlsetup"


def apt_install(
    action_id: str, title: str, packages: list[str], reboot_after: bool = False
) -> Action:
    return Action(
        id=action_id,
        title=title,
        argv=[*APT_INSTALL, *packages],
        env=dict(APT_ENV),
        reboot_after=reboot_after,
    )


def nvidia_repo_actions(facts: Facts) -> list[Action] | None:
    """Add NVIDIA's CUDA repo (keyring for this distro and arch); None if it has none."""
    repo = knowledge().repo
    base = repo.url_for(facts.os.id, facts.os.version_id, facts.os.arch)
    if base is None:
        return None
    keyring = f"{CACHE_DIR}/{repo.keyring_package}"
    return [
        Action(
            id="nvidia-repo.keyring-download",
            title="Download NVIDIA's CUDA repository keyring",
            argv=["curl", "-fsSL", "--retry", "3", "-o", keyring, base + repo.keyring_package],
        ),
        Action(
            id="nvidia-repo.keyring-install",
            title="Install NVIDIA's CUDA repository keyring",
            argv=["dpkg", "-i", keyring],
            env=dict(APT_ENV),
        ),
        Action(
            id="nvidia-repo.update",
            title="Refresh package lists with NVIDIA's repository",
            argv=["apt-get", "update"],
            env=dict(APT_ENV),
        ),
    ]


def no_repo_reason(facts: Facts) -> str:
    repo = knowledge().repo
    return (
        f"NVIDIA publishes no CUDA apt repository for {facts.os.id} {facts.os.version_id} "
        f"({facts.os.arch}); supported: {', '.join(repo.repo)} on {', '.join(repo.arch)}."
    )
