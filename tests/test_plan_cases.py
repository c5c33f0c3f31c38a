"""The planner as data, pyinfra's way: each file in tests/fixtures/plans/ is one case, a recorded
machine (assets/machines/) with the top-level facts it changes, an answers file, and what the
plan must be for what the case is about, and nothing else:

- `"steps"`: the steps it names, each with its status, its reason (what the operator reads),
  whether it needs NVIDIA's apt repository (`"nvidia_repo"`) and its own actions (id and kind)
  without the ones that set that repository up. The plan sets the repository up once, in the
  first pending step that needs it (steps.planning.planner), so which step holds those actions
  depends on the steps before it: a case records that a step needs the repository, never who
  set it up, and every case is checked for the sharing rule itself. A new step changes no case
  that does not name it;
- `"warnings"`: the plan's warnings;
- or `"refused"`: the exit-2 message for answers the machine refuses.

The planner is pure (Facts + Answers -> Plan), so a case needs no machine, no uv and no root.
Every step in the registry has at least one case: a new step's case file is its test. A change
that means to alter plans regenerates the expectations (of the keys and steps each case names),
and the diff is the review:

    .venv/bin/python -m tests.test_plan_cases --regenerate

A new case: a file with "why", "machine", "facts" ({} for none), "answers" and an "expect"
naming what it is about, e.g. {"steps": {"toolkit": {}}, "warnings": []}, then the command
above."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from steps.core.errors import InputError
from steps.formats.answers import answers_from_toml
from steps.formats.facts import facts_from_json
from steps.formats.plan import Action, Outcome, Plan, Step, pending, satisfied
from steps.planning import registry
from steps.planning.apt import NVIDIA_REPO, apt_install, nvidia_repo_actions
from steps.planning.planner import make_plan, own_steps, plan_inputs
from tests.common import FIXTURES, MACHINES

CASES = sorted((FIXTURES / "plans").glob("*.json"))
REGENERATE = ".venv/bin/python -m tests.test_plan_cases --regenerate"


def case_facts(case: dict[str, Any]) -> dict[str, Any]:
    """The recorded machine's facts with the case's top-level keys in their place."""
    return {**json.loads((MACHINES / case["machine"]).read_text()), **case["facts"]}


def _sets_up_repo(step: Step) -> list[str]:
    return [a.id for a in step.actions if a.target == NVIDIA_REPO]


def _step(step: Step, own: Step) -> dict[str, Any]:
    return {
        "status": step.status,
        "reason": step.reason,
        "nvidia_repo": bool(_sets_up_repo(own)),
        "actions": [f"{a.id} ({a.kind})" for a in step.actions if a.target != NVIDIA_REPO],
    }


def _check_repo_is_set_up_once(plan: Plan, own: list[Step]) -> None:
    """The plan sets NVIDIA's repo up once, with the first pending step whose planner needs it."""
    holders = [(s.name, _sets_up_repo(s)) for s in plan.steps if _sets_up_repo(s)]
    needing = [s for s in own if s.status == "pending" and _sets_up_repo(s)]
    assert holders == [(s.name, _sets_up_repo(s)) for s in needing[:1]], holders


def planned(case: dict[str, Any]) -> dict[str, Any]:
    """What the planner makes of a case, for what the case names: the steps of its "steps",
    "warnings" if it has them; or its refusal."""
    facts = facts_from_json(json.dumps(case_facts(case)), case["machine"])
    expect = case["expect"]
    try:
        answers = answers_from_toml("version = 1\n" + case["answers"], "case.toml")
        plan = make_plan(facts, answers)
    except InputError as exc:
        return {"refused": str(exc)}
    own = own_steps(plan_inputs(facts, answers))
    _check_repo_is_set_up_once(plan, own)
    got: dict[str, Any] = {}
    if "steps" in expect:
        # the steps it names, in the registry's order (a name the registry lacks: none, to fail)
        got["steps"] = {
            s.name: _step(s, o)
            for s, o in zip(plan.steps, own, strict=True)
            if s.name in expect["steps"]
        }
    if "warnings" in expect:
        got["warnings"] = plan.warnings
    return got


@pytest.mark.parametrize("path", CASES, ids=[c.stem for c in CASES])
def test_each_case_plans_as_recorded(path: Path):
    case = json.loads(path.read_text())
    assert case["expect"] and case["expect"].get("steps") != {}, (
        f"{path.name}: name what the case is about in its expect"
    )
    assert planned(case) == case["expect"], (
        f"{path.name}: the plan changed; if meant: {REGENERATE}, and review the diff"
    )


def steps_without_a_case() -> list[str]:
    named = {n for p in CASES for n in json.loads(p.read_text())["expect"].get("steps", {})}
    return [n for n in registry.step_names() if n not in named]


def test_every_step_in_the_registry_has_a_case():
    """A new step's case file is its test: facts and answers in, the step it plans out."""
    missing = steps_without_a_case()
    assert not missing, (
        f"no case in tests/fixtures/plans/ names {missing}: add one (see "
        f"tests/test_plan_cases.py) with 'expect': {{'steps': {{'{missing[0]}': {{}}}}}}, "
        f"then {REGENERATE}"
    )


def _dcgm_plan(i: registry.PlanInputs) -> Outcome:
    """A step as DCGM's would be: a package from NVIDIA's repo and its service, on GPU machines."""
    repo = nvidia_repo_actions(i.facts)
    if not i.facts.gpus or i.facts.driver_is_hosts() or repo is None:
        return satisfied("no GPU to watch here")
    start = Action(
        id="throwaway-dcgm.start",
        kind="service",
        title="Start DCGM",
        argv=["systemctl", "restart", "dcgm"],
    )
    return pending(
        "install DCGM", [*repo, apt_install("throwaway-dcgm.install", "DCGM", ["dcgm"]), start]
    )


def test_a_new_step_that_needs_nvidias_repo_changes_no_case(monkeypatch: pytest.MonkeyPatch):
    """Issue 35's exercise, a package and a service between the driver and the toolkit: it
    takes the repo's setup from the toolkit where the driver is satisfied
    (toolkit-beside-a-loaded-driver), and every case plans as recorded; what it lacks is a case
    of its own."""
    dcgm = registry.StepSpec("throwaway-dcgm", "DCGM", _dcgm_plan, None, lambda _i: ["DCGM"])
    at = registry.step_names().index("toolkit")
    monkeypatch.setattr(registry, "STEPS", (*registry.STEPS[:at], dcgm, *registry.STEPS[at:]))
    for path in CASES:
        case = json.loads(path.read_text())
        assert planned(case) == case["expect"], path.name
    assert "throwaway-dcgm" in steps_without_a_case()


def test_the_cases_cover_what_the_planner_decides_by():
    """At least one case each: a driver to install and one present, an NVSwitch box, a toolkit
    that needs NVIDIA's repo with the driver and without it, WSL2, a container, Secure Boot,
    the warnings, and answers refused."""
    cases = [json.loads(p.read_text()) for p in CASES]
    steps = [c["expect"].get("steps", {}) for c in cases]
    assert {"pending", "satisfied"} <= {s["driver"]["status"] for s in steps if "driver" in s}
    assert any(s.get("fabric", {}).get("status") == "pending" for s in steps)
    # NVIDIA's repo set up by the driver for the toolkit too, and by the toolkit itself
    repo = [
        (s["driver"]["nvidia_repo"], s["toolkit"]["nvidia_repo"]) for s in steps if "toolkit" in s
    ]
    assert {(True, True), (False, True)} <= set(repo)
    facts = [case_facts(c) for c in cases]
    assert {"wsl", "container"} <= {(f.get("environment") or {}).get("kind") for f in facts}
    assert any(f["secure_boot"] == "enabled" for f in facts)
    assert any(c["expect"].get("warnings") for c in cases)
    assert any("refused" in c["expect"] for c in cases)


def regenerate() -> None:
    for path in CASES:
        case = json.loads(path.read_text())
        case["expect"] = planned(case)
        path.write_text(json.dumps(case, indent=2, ensure_ascii=False) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        sys.exit(f"usage: {REGENERATE}")
    regenerate()
