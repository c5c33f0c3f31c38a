"""What the operator must still do by hand: the reboot, MOK enrolment on a Secure Boot box,
the line that activates the venv. Shared by the Apply confirmation and the Summary."""

from __future__ import annotations

from app.tui.session import Session
from steps.formats.plan import Plan
from steps.known.knowledge import knowledge


def reboots(plan: Plan) -> bool:
    return any(a.reboot_after for a in plan.actions)


def reboot_lines(session: Session) -> list[str]:
    """After the driver install: how the reboot happens, MOK, and how the setup continues."""
    policy = session.answers.reboot.policy
    how = {
        "ask": "you are asked to reboot once the driver is installed",
        "auto": "the machine reboots by itself once the driver is installed",
        "never": "mlsetup stops after the driver install; you reboot (sudo reboot)",
    }[policy]
    out = [f"Reboot (reboot.policy {policy}): {how}."]
    if session.facts.secure_boot == "enabled":
        key = knowledge().driver.mok_key_for(session.facts.os.id)
        out.append(
            f"Secure Boot is on: before the reboot run sudo mokutil --import {key} and choose a "
            "one-time password; at the console during boot pick 'Enroll MOK' and type it, or "
            "the driver will not load."
        )
    resume = "the setup resumes by itself" if policy == "auto" else "log in and run: sudo mlsetup"
    out.append(f"After the reboot {resume} (it opens on the Resume screen).")
    return out


def activate_line(session: Session) -> str:
    return f"source {session.choices().venv_path}/bin/activate"
