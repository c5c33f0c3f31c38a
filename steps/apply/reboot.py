"""The driver's reboot as a pause: recorded before it, checked when the run resumes.

With `reboot.policy = "auto"` on a systemd machine a one-shot unit resumes the run at boot;
otherwise the run stops with exit 10 and the command to resume. After the reboot the run
checks that the machine really rebooted and that the expected driver is loaded (loading the
module by hand once if not)."""

from __future__ import annotations

import logging

from steps.apply.actions import ActionRunner
from steps.apply.applyrun import ApplyRun, Fault, Finish, Stopped
from steps.apply.diagnose import Diagnosis, diagnose
from steps.apply.service import RESUME_UNIT, resume_unit, systemd_booted
from steps.core.exitcodes import EXIT_REBOOT
from steps.core.nextcommands import RESUME_COMMAND
from steps.decide.choices import choose
from steps.formats.events import Notice, RebootNeeded
from steps.formats.facts import Facts
from steps.formats.plan import Action
from steps.formats.state import RebootRecord, write_atomic

log = logging.getLogger("mlsetup.reboot")

REBOOT = Action(
    id="reboot", kind="reboot", title="Reboot to load the NVIDIA driver", argv=["reboot"]
)
ENABLE_UNIT = Action(
    id="resume-unit.enable",
    kind="resume-unit",
    title="Resume mlsetup after the reboot",
    argv=["systemctl", "enable", RESUME_UNIT],
)
DISABLE_UNIT = Action(
    id="resume-unit.disable",
    kind="resume-unit",
    title="Remove the one-shot resume unit",
    argv=["systemctl", "disable", RESUME_UNIT],
)
LOAD_DRIVER = Action(
    id="driver.load",
    kind="load-driver",
    title="Load the NVIDIA kernel module",
    argv=["modprobe", "nvidia"],
)


class RebootResume:
    def __init__(self, run: ApplyRun, actions: ActionRunner, finish: Finish) -> None:
        self.run = run
        self.actions = actions
        self.finish = finish

    @property
    def _policy(self) -> str:
        return self.run.req.answers.reboot.policy

    def reboot(self, action: Action, facts: Facts) -> None:
        """`action` needs a reboot: a dry run says so and goes on; a real one pauses here."""
        if self.run.req.dry_run:
            self.run.emit(
                RebootNeeded(
                    action=action.id,
                    policy=self._policy,
                    next="dry run: the machine would reboot here",
                )
            )
            return
        state = self.run.state
        assert state is not None
        state.phase = "reboot"
        state.reboot = RebootRecord(
            action=action.id,
            boot_id=facts.boot_id,
            driver_branch=choose(facts, self.run.req.answers, self.run.lock).driver_branch,
        )
        if self._policy == "auto" and systemd_booted(self.run.fs):
            self._reboot_now(action)
        self.run.save()
        log.info("%s needs a reboot; policy %s: pausing for the operator", action.id, self._policy)
        why = (
            "systemd is not running here, so nothing resumes by itself: "
            if self._policy == "auto"
            else ""
        )
        self.run.emit(
            RebootNeeded(
                action=action.id,
                policy=self._policy,
                next=f"{why}reboot (sudo reboot), then run: {RESUME_COMMAND}",
            )
        )
        raise Stopped(
            self.finish(
                EXIT_REBOOT, "reboot", "paused: reboot to load the NVIDIA driver, then resume"
            )
        )

    def _reboot_now(self, action: Action) -> None:
        assert self.run.state is not None and self.run.state.reboot is not None
        log.info(
            "%s needs a reboot; policy auto on systemd: installing the resume unit and rebooting",
            action.id,
        )
        self._install_resume_unit()
        self.run.state.reboot.unit_installed = True
        self.run.save()
        self.run.emit(
            RebootNeeded(
                action=action.id,
                policy=self._policy,
                next="rebooting now; mlsetup resumes by itself after boot "
                "(follow it with: sudo mlsetup attach)",
            )
        )
        code = self.finish(EXIT_REBOOT, "reboot", "rebooting to load the NVIDIA driver")
        self.actions.command("reboot", REBOOT)
        raise Stopped(code)

    def _install_resume_unit(self) -> None:
        write_atomic(
            self.run.fs.path(f"/etc/systemd/system/{RESUME_UNIT}"), resume_unit(), mode=0o644
        )
        self.actions.command("reboot", ENABLE_UNIT)

    def remove_resume_unit(self) -> None:
        """The run is over (done or failed): the one-shot unit goes, if this run installed it."""
        state = self.run.state
        if state is None or state.reboot is None or not state.reboot.unit_installed:
            return
        log.info("the run is over: removing the resume unit")
        self.actions.command("reboot", DISABLE_UNIT)
        self.run.fs.path(f"/etc/systemd/system/{RESUME_UNIT}").unlink(missing_ok=True)
        state.reboot.unit_installed = False

    def after_reboot(self) -> None:
        """Resuming after a reboot: did the machine really reboot, and is the driver loaded?"""
        assert self.run.state is not None and self.run.state.reboot is not None
        record = self.run.state.reboot
        facts = self.run.facts()
        if record.boot_id and facts.boot_id == record.boot_id:
            log.info("resume: boot id %s is unchanged: the machine has not rebooted", facts.boot_id)
            self.run.emit(
                RebootNeeded(
                    action=record.action,
                    policy=self._policy,
                    next=f"the machine has not rebooted yet: sudo reboot, then {RESUME_COMMAND}",
                )
            )
            raise Stopped(self.finish(EXIT_REBOOT, "reboot", "still waiting for the reboot"))
        if record.driver_branch and not _driver_ok(facts, record.driver_branch):
            log.info(
                "resume: rebooted, but driver branch %s is not loaded: loading it",
                record.driver_branch,
            )
            facts = self._driver_not_loaded(facts, record.driver_branch)
        log.info(
            "resume: rebooted (boot id %s); driver %s",
            facts.boot_id,
            facts.driver.version if facts.driver else None,
        )
        self.run.emit(
            Notice(
                text=f"rebooted; NVIDIA driver {facts.driver.version} is loaded"
                if facts.driver
                else "rebooted"
            )
        )

    def _driver_not_loaded(self, facts: Facts, branch: int) -> Facts:
        """Load the module by hand: the machine as it is then if that worked; otherwise fail
        with why it did not load (Secure Boot, say)."""
        result = self.actions.command("driver", LOAD_DRIVER)
        again = self.run.facts()
        if result is not None and result.exit_code == 0 and _driver_ok(again, branch):
            return again
        found = (
            f"driver {facts.driver.version} is loaded"
            if facts.driver and facts.driver.loaded
            else "no NVIDIA driver is loaded"
        )
        log_path = self.run.action_log(LOAD_DRIVER.id)
        tail, code = (result.tail, result.exit_code) if result else ([], None)
        self.run.fail(
            Fault(
                "driver",
                f"after the reboot {found}; expected branch {branch}",
                action=LOAD_DRIVER,
                exit_code=code,
                log=log_path,
                diagnosis=diagnose(tail, code, str(log_path), self.run.req.answers_path)
                or Diagnosis(
                    "driver-not-loaded",
                    "The kernel did not load the NVIDIA module after the reboot.",
                    "Look at `sudo dmesg | grep -i -E 'nvidia|nouveau'` and `dkms status`; then: "
                    + RESUME_COMMAND,
                ),
                tail=tail,
            )
        )


def _driver_ok(facts: Facts, branch: int) -> bool:
    return bool(facts.driver and facts.driver.loaded and facts.driver.branch >= branch)
