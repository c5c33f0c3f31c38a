"""The planner: Facts + Answers (+ what is in the venv and the wheel cache) in, Plan out.

`make_plan` is pure. It asks each step of the registry (steps.planning.registry), in its order,
whether the step is satisfied and, if not, which actions would satisfy it.
"""

from __future__ import annotations

from collections.abc import Mapping

from steps.building.wheels import find_wheels
from steps.core.errors import InputError
from steps.core.rootfs import RootFS
from steps.decide.choices import Choices, check_on_machine, choose
from steps.formats.answers import Answers
from steps.formats.facts import Facts
from steps.formats.lock import Lock, PlannedStack
from steps.formats.plan import Plan, Step
from steps.known.knowledge import knowledge
from steps.planning import registry
from steps.planning.apt import NVIDIA_REPO
from steps.planning.extensions import wanted_wheels
from steps.probing.probe import probe
from steps.stack.obtain import lock_for_plan
from steps.stack.venvstate import VenvState, probe_venv


def make_plan(
    facts: Facts,
    answers: Answers,
    venv: VenvState | None = None,
    wheels: Mapping[str, str] | None = None,
    lock: Lock | None = None,
    notes: tuple[str, ...] = (),
) -> Plan:
    """`venv`: what the venv already holds; `wheels`: cache key -> directory of a wheel built
    earlier (steps.building.wheels.find_wheels). Both None for a machine that is not this one.
    `lock`: the resolved stack whose torch every step follows; None plans from knowledge."""
    inputs = plan_inputs(facts, answers, venv, wheels, lock)
    steps = _share_repo_setup(own_steps(inputs))
    _check_reboot_policy(facts, answers, steps)
    return Plan(
        warnings=[*notes, *(w.text for w in inputs.choices.warnings)],
        steps=steps,
        lock=lock.summary() if lock else None,
    )


def plan_inputs(
    facts: Facts,
    answers: Answers,
    venv: VenvState | None = None,
    wheels: Mapping[str, str] | None = None,
    lock: Lock | None = None,
) -> registry.PlanInputs:
    """What every step plans from: the decisions made once for all steps among them."""
    choices: Choices = choose(facts, answers, lock)
    check_on_machine(choices, answers, None)
    return registry.PlanInputs(facts, answers, choices, venv, wheels or {})


def own_steps(inputs: registry.PlanInputs) -> list[Step]:
    """Each step as its own planner has it, named after its registry entry (a step module names
    no step): every step that needs NVIDIA's repo still has the actions that set it up."""
    return [spec.plan(inputs).named(spec.name) for spec in registry.STEPS]


def _check_reboot_policy(facts: Facts, answers: Answers, steps: list[Step]) -> None:
    """reboot.policy = "auto" is refused where the reboot needs the operator first: a driver
    installed under Secure Boot loads only once its signing key is enrolled (MOK), which is
    `mokutil --import` before the reboot and the console during it; an automatic reboot
    comes back without the driver."""
    if answers.reboot.policy != "auto" or facts.secure_boot != "enabled":
        return
    driver = next((s for s in steps if s.name == "driver"), None)
    if driver is None or not any(a.reboot_after for a in driver.actions):
        return
    key = knowledge().driver.mok_key_for(facts.os.id)
    raise InputError(
        'reboot.policy = "auto": Secure Boot is on and the driver is installed, so its '
        "modules load only after their signing key is enrolled, which needs you before and "
        f"during the reboot: run `sudo mokutil --import {key}` and choose a one-time password, "
        "reboot, and at the console pick 'Enroll MOK' and type it; an automatic reboot would "
        'come back without the driver. allowed: "ask" (the run pauses for the reboot: the '
        'wizard asks, an unattended apply exits 10) or "never"'
    )


def _share_repo_setup(steps: list[Step]) -> list[Step]:
    """NVIDIA's repo is set up once, by the first pending step that needs it."""
    seen: set[str] = set()
    out = []
    for step in steps:
        kept = [a for a in step.actions if not (a.target == NVIDIA_REPO and a.id in seen)]
        seen.update(a.id for a in kept)
        out.append(step.model_copy(update={"actions": kept}))
    return out


def plan_for(
    fs: RootFS, facts: Facts, answers: Answers, on_machine: bool, stack: PlannedStack
) -> Plan:
    """The plan every front end shows (`mlsetup plan`, the wizard, a dry run) for `facts`
    following `stack`. `on_machine`: the facts are this machine's, so its accounts, its venv and
    the wheels built earlier are looked at too; a recorded machine's cannot be."""
    if not on_machine:
        return make_plan(facts, answers, lock=stack.lock, notes=stack.notes)
    choices = choose(facts, answers, stack.lock)
    check_on_machine(choices, answers, fs)  # before root looks into the venv directory
    venv = probe_venv(fs, choices.venv_path)
    passed_over: list[str] = []
    wheels = find_wheels(
        fs,
        answers.build.wheelhouse,
        wanted_wheels(choices, venv),
        choices.owner.run_as,
        passed_over,
    )
    return make_plan(facts, answers, venv, wheels, stack.lock, (*stack.notes, *passed_over))


def resolve_and_plan(fs: RootFS, facts: Facts, answers: Answers, on_machine: bool) -> Plan:
    """`mlsetup plan`: resolve the stack first (metadata only) when the index can be reached."""
    return plan_for(fs, facts, answers, on_machine, lock_for_plan(fs, facts, answers, on_machine))


def observe_and_plan(fs: RootFS, answers: Answers, stack: PlannedStack) -> tuple[Facts, Plan]:
    """Probe this machine (its venv and the wheels built earlier too) and plan for it."""
    facts = probe(fs).facts
    return facts, plan_for(fs, facts, answers, True, stack)
