"""The planner: Facts + Answers (+ what is in the venv and the wheel cache) in, Plan out.

`make_plan` is pure. It asks each step of the registry (steps.registry), in its order, whether
the step is satisfied and, if not, which actions would satisfy it.
"""

from __future__ import annotations

from collections.abc import Mapping

from steps import registry
from steps import venv as venv_step
from steps.answers import Answers
from steps.choices import Choices, check_on_machine, choose
from steps.extensions import wanted_wheels
from steps.facts import Facts
from steps.lock import Lock
from steps.plan import Plan, Step
from steps.probe import probe
from steps.rootfs import RootFS
from steps.venvstate import VenvState, probe_venv
from steps.wheels import find_wheels


def make_plan(
    facts: Facts,
    answers: Answers,
    venv: VenvState | None = None,
    wheels: Mapping[str, str] | None = None,
    lock: Lock | None = None,
    notes: tuple[str, ...] = (),
) -> Plan:
    """`venv`: what the venv already holds; `wheels`: cache key -> directory of a wheel built
    earlier (steps.wheels.find_wheels). Both None for a machine that is not this one. `lock`:
    the resolved stack whose torch every step follows; None plans from knowledge."""
    choices: Choices = choose(facts, answers, lock)
    check_on_machine(choices, answers, None)
    inputs = registry.PlanInputs(facts, answers, choices, venv, wheels or {})
    steps = _share_repo_setup([spec.plan(inputs) for spec in registry.STEPS])
    return Plan(
        warnings=[*notes, *(w.text for w in choices.warnings)],
        steps=steps,
        lock=lock.summary() if lock else None,
    )


def _share_repo_setup(steps: list[Step]) -> list[Step]:
    """NVIDIA's repo is set up once, by the first pending step that needs it."""
    seen: set[str] = set()
    out = []
    for step in steps:
        kept = [a for a in step.actions if not (a.kind == "repo-setup" and a.id in seen)]
        seen.update(a.id for a in kept)
        out.append(step.model_copy(update={"actions": kept}))
    return out


def observe_and_plan(
    fs: RootFS, answers: Answers, lock: Lock | None = None, resolve: bool = False
) -> tuple[Facts, Plan]:
    """Probe this machine (its venv and the wheels built earlier too) and plan for it; with
    `resolve` (mlsetup plan), resolve the stack first when the index can be reached."""
    facts = probe(fs).facts
    notes: tuple[str, ...] = ()
    if resolve and lock is None:
        lock, why = venv_step.lock_for_plan(fs, facts, answers)
        notes = (why,) if why else ()
    choices = choose(facts, answers, lock)
    check_on_machine(choices, answers, fs)  # before root looks into the venv directory
    venv = probe_venv(fs, choices.venv_path)
    wheels = find_wheels(
        fs, answers.build.wheelhouse, wanted_wheels(choices, venv), choices.owner.run_as
    )
    return facts, make_plan(facts, answers, venv, wheels, lock, notes)
