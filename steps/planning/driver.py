"""The NVIDIA driver step."""

from __future__ import annotations

from steps.core.assetdir import ASSETS_DIR
from steps.decide.choices import Choices
from steps.formats.answers import Answers
from steps.formats.facts import Facts
from steps.formats.plan import Action, Outcome, pending, satisfied
from steps.known.knowledge import knowledge
from steps.planning.apt import apt_install, no_repo_reason, nvidia_repo_actions

NOUVEAU_BLACKLIST = "/etc/modprobe.d/mlsetup-blacklist-nouveau.conf"


def satisfied_reason(facts: Facts, answers: Answers, choices: Choices) -> str | None:
    """Why nothing needs doing, or None if the driver must be installed."""
    if answers.driver.action == "skip":
        return "skipped: driver.action is skip"
    if not facts.gpus:
        return "no NVIDIA GPU found: no driver needed"
    drv = facts.driver
    if answers.driver.action == "auto" and drv and choices.driver_ok:
        what = f"CUDA {choices.cuda}" if choices.cuda else "the CPU build of torch"
        return (
            f"driver {drv.version} ({drv.modules or 'unknown'} modules) is loaded and runs {what}"
        )
    return None


def plan(facts: Facts, answers: Answers, choices: Choices) -> Outcome:
    if facts.driver_is_hosts() and facts.gpus and answers.driver.action != "skip":
        return hosts_driver(facts, choices)
    reason = satisfied_reason(facts, answers, choices)
    if reason:
        return satisfied(reason)
    repo = nvidia_repo_actions(facts)
    if repo is None:
        return pending(no_repo_reason(facts), [])

    pin, package = knowledge().repo.driver_packages(choices.driver_branch, choices.driver_modules)
    # the repo's first two actions refresh the lists and install its download tools; DKMS
    # builds the module against the running kernel's headers, from the lists just refreshed
    actions = repo[:2]
    if facts.kernel.headers_installed is not True and facts.kernel.release:
        actions.append(
            apt_install(
                "driver.prerequisites",
                "Install the running kernel's headers (DKMS builds the module against them)",
                [f"linux-headers-{facts.kernel.release}"],
            )
        )
    actions += repo[2:]
    if facts.nouveau_loaded:
        actions += [
            Action(
                id="driver.blacklist-nouveau",
                kind="config-file",
                title="Blacklist nouveau",
                argv=[
                    "install",
                    "-m",
                    "0644",
                    str(ASSETS_DIR / "blacklist-nouveau.conf"),
                    NOUVEAU_BLACKLIST,
                ],
            ),
            Action(
                id="driver.initramfs",
                kind="initramfs",
                title="Rebuild the initramfs without nouveau",
                argv=["update-initramfs", "-u"],
            ),
        ]
    actions.append(apt_install("driver.pin", f"Pin driver branch {choices.driver_branch}", [pin]))
    actions.append(
        apt_install(
            "driver.install",
            f"Install NVIDIA driver {choices.driver_branch} ({choices.driver_modules} "
            "kernel modules)",
            [package],
            reboot_after=True,
        )
    )
    return pending(_why_install(facts, answers, choices), actions)


def leaves(choices: Choices) -> list[str]:
    return [
        f"NVIDIA driver {choices.driver_branch} ({choices.driver_modules} kernel modules), "
        "loaded after a reboot"
    ]


def _why_install(facts: Facts, answers: Answers, choices: Choices) -> str:
    drv = facts.driver
    target = f"driver {choices.driver_branch} ({choices.driver_modules} modules)"
    if answers.driver.action == "install":
        why = "driver.action is install"
    elif drv is None or not drv.loaded:
        why = "no NVIDIA driver is loaded"
    else:
        why = f"driver {drv.version} cannot run CUDA {choices.cuda}"
    text = f"{why}: install {target}, then reboot"
    if facts.secure_boot == "enabled":
        key = knowledge().driver.mok_key_for(facts.os.id)
        text += (
            ". Secure Boot is on: DKMS signs the modules with the machine owner key "
            f"{key}; before rebooting run `sudo mokutil --import {key}` and choose a one-time "
            "password, then on the console at boot pick 'Enroll MOK' and type it"
        )
    return text


# -- where the driver is the host's (a container, WSL) --------------------------------------------


def hosts_driver(facts: Facts, choices: Choices) -> Outcome:
    """In a container or WSL the driver is the host's: satisfied when it runs the chosen CUDA,
    else pending with no action (the run stops there and says what to do on the host). Nothing
    here touches kernel modules, the initramfs, Secure Boot or a reboot."""
    where = facts.environment_label()
    drv = facts.driver
    if drv is not None and drv.loaded and choices.driver_ok:
        what = f"CUDA {choices.cuda}" if choices.cuda else "the CPU build of torch"
        return satisfied(f"the host provides driver {drv.version} ({where}): it runs {what}")
    if drv is not None and drv.loaded:
        return pending(
            f"the host's driver {drv.version} ({where}) runs CUDA up to "
            f"{drv.cuda_max or 'unknown'}, older than torch's CUDA {choices.cuda}; mlsetup never "
            "installs a driver here: update the driver on the host, or set torch.cuda to a "
            "build it runs",
            [],
        )
    if facts.environment is not None and facts.environment.kind == "wsl":
        fix = (
            "install NVIDIA's Windows driver on the host (it brings CUDA into WSL through "
            "/usr/lib/wsl/lib), then run `wsl --shutdown` in Windows and open WSL again"
        )
    else:
        fix = (
            "start the container with the GPUs (the NVIDIA Container Toolkit: "
            "docker run --gpus all, podman run --device nvidia.com/gpu=all)"
        )
    return pending(
        f"no NVIDIA driver answers in {where}, where the driver is the host's and mlsetup "
        f"never installs one: {fix}",
        [],
    )
