"""The planner as data, pyinfra's way: each file in tests/fixtures/plans/ is one case, a recorded
machine (assets/machines/) with the top-level facts it changes, an answers file, and what the
plan must be: every step in the registry's order, its status and its actions (id and kind), and
the warnings; or, for answers the machine refuses, the exit-2 message.

The planner is pure (Facts + Answers -> Plan), so a case needs no machine, no uv and no root. A
change that means to alter plans regenerates the expectations, and the diff is the review:

    .venv/bin/python -m tests.test_plan_cases --regenerate

A new case: a file with "why", "machine", "facts" ({} for none), "answers" and an empty
"expect", then the command above."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from steps.core.errors import InputError
from steps.formats.answers import answers_from_toml
from steps.formats.facts import facts_from_json
from steps.planning import registry
from steps.planning.planner import make_plan
from tests.common import FIXTURES, MACHINES

CASES = sorted((FIXTURES / "plans").glob("*.json"))


def case_facts(case: dict[str, Any]) -> dict[str, Any]:
    """The recorded machine's facts with the case's top-level keys in their place."""
    return {**json.loads((MACHINES / case["machine"]).read_text()), **case["facts"]}


def planned(case: dict[str, Any]) -> dict[str, Any]:
    """What the planner makes of a case: its steps, actions and warnings, or its refusal."""
    facts = facts_from_json(json.dumps(case_facts(case)), case["machine"])
    try:
        answers = answers_from_toml("version = 1\n" + case["answers"], "case.toml")
        plan = make_plan(facts, answers)
    except InputError as exc:
        return {"refused": str(exc)}
    return {
        "steps": [
            {
                "name": step.name,
                "status": step.status,
                "actions": [f"{a.id} ({a.kind})" for a in step.actions],
            }
            for step in plan.steps
        ],
        "warnings": plan.warnings,
    }


@pytest.mark.parametrize("path", CASES, ids=[c.stem for c in CASES])
def test_each_case_plans_as_recorded(path: Path):
    case = json.loads(path.read_text())
    got = planned(case)
    if "steps" in got:  # every step, in the registry's order, whatever the case
        assert [s["name"] for s in got["steps"]] == list(registry.step_names())
    assert got == case["expect"], (
        f"{path.name}: the plan changed; if meant: .venv/bin/python -m tests.test_plan_cases "
        "--regenerate, and review the diff"
    )


def test_the_cases_cover_what_the_planner_decides_by():
    """At least one case each: a driver to install and one present, an NVSwitch box, WSL2, a
    container, Secure Boot, and answers refused."""
    cases = [json.loads(p.read_text()) for p in CASES]
    statuses = [
        {s["name"]: s["status"] for s in c["expect"]["steps"]}
        for c in cases
        if "steps" in c["expect"]
    ]
    assert {"pending", "satisfied"} <= {s["driver"] for s in statuses}
    assert any(s["fabric"] == "pending" for s in statuses)
    facts = [case_facts(c) for c in cases]
    assert {"wsl", "container"} <= {(f.get("environment") or {}).get("kind") for f in facts}
    assert any(f["secure_boot"] == "enabled" for f in facts)
    assert any("refused" in c["expect"] for c in cases)


def regenerate() -> None:
    for path in CASES:
        case = json.loads(path.read_text())
        case["expect"] = planned(case)
        path.write_text(json.dumps(case, indent=2, ensure_ascii=False) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        sys.exit("usage: python -m tests.test_plan_cases --regenerate")
    regenerate()
