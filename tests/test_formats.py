"""docs/formats.md describes every key of Facts, Plan and the report, from their models: its
keys and their types (the action kinds among them). Two parts of it are generated, the report
table (from `Report`'s JSON schema) and the line naming the steps in order (from the registry,
which the type "step name" refers to); after changing either:

    .venv/bin/python -m tests.test_formats --regenerate"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from pydantic import BaseModel

from steps.apply.report import Report
from steps.formats.facts import Facts
from steps.formats.plan import Plan
from steps.planning import registry
from tests.common import REPO

DOC = REPO / "docs" / "formats.md"
REGENERATE = ".venv/bin/python -m tests.test_formats --regenerate"
STEPS_LINE = "Steps are in the order of `steps/planning/registry.py`: "
STEP_NAME = "step name"  # the type of a step's name: one of the steps the doc's line names


def steps_line() -> str:
    """The doc's line naming each step, in order, with its title."""
    return STEPS_LINE + ", ".join(f"`{s.name}` ({s.title})" for s in registry.STEPS) + "."


def _type(s: dict[str, Any]) -> str:
    if s.get("enum") == list(registry.step_names()):
        return STEP_NAME
    if "$ref" in s:
        return "object"
    if "anyOf" in s:
        return " or ".join(_type(x) for x in s["anyOf"])
    if "enum" in s:
        return " \\| ".join(f'"{v}"' for v in s["enum"])
    if "const" in s:
        return f'"{s["const"]}"'
    if s.get("type") == "array":
        return f"list of {_type(s.get('items', {}))}"
    return str(s.get("type", "any"))


def _rows(schema: dict[str, Any], defs: dict[str, Any], prefix: str = "") -> list[str]:
    """One table row per key, `a.b` inside an object, `a[].b` inside a list's elements."""
    rows = []
    for name, s in schema.get("properties", {}).items():
        path = f"{prefix}{name}"
        rows.append(f"| `{path}` | {_type(s)} | {s.get('description', '')} |")
        for sub, sep in [(s, "."), (s.get("items", {}), "[].")] + [
            (x, ".") for x in s.get("anyOf", [])
        ]:
            if "$ref" in sub:
                rows += _rows(defs[sub["$ref"].split("/")[-1]], defs, path + sep)
                break
    return rows


def model_rows(model: type[BaseModel]) -> list[str]:
    schema = model.model_json_schema(mode="validation", by_alias=True)
    return _rows(schema, schema.get("$defs", {}))


@pytest.mark.parametrize("model", [Facts, Plan, Report])
def test_every_key_of_the_model_is_documented(model: type[BaseModel]):
    doc = DOC.read_text()
    missing = [row for row in model_rows(model) if row.split(" | ")[0] + " |" not in doc]
    assert not missing, f"docs/formats.md lacks {missing}"


def generated(doc: str) -> str:
    """`doc` with its generated parts as the models and the registry make them now."""
    lines = doc.split("\n")
    report = lines.index(next(line for line in lines if line.startswith("## report")))
    rows = [i for i, line in enumerate(lines) if i > report and line.startswith("| `")]
    lines[rows[0] : rows[-1] + 1] = model_rows(Report)
    said = [i for i, line in enumerate(lines) if line.startswith(STEPS_LINE)]
    assert len(said) == 1, f"docs/formats.md should have one line starting {STEPS_LINE!r}"
    lines[said[0]] = steps_line()
    return "\n".join(lines)


def test_the_generated_parts_of_the_doc_are_current():
    """The report table and the steps' line: a new key, step or title needs the command."""
    doc = DOC.read_text()
    assert doc == generated(doc), f"docs/formats.md is not current: {REGENERATE}"


SECTIONS: dict[type[BaseModel], str] = {Facts: "Facts:", Plan: "Plan:", Report: "report:"}


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split(" | ")]


@pytest.mark.parametrize("model", [Facts, Plan, Report])
def test_each_documented_type_is_the_models(model: type[BaseModel]):
    """The type column says what the model accepts: a step's name is a "step name" (the
    schema's enum is the registry's, which the doc's generated line names), the action kinds
    are `ActionKind`'s, so a new kind that the doc does not list fails here. "(optional)" marks
    a key a Facts reader may lack."""
    doc = DOC.read_text()
    section = doc[doc.index(f"## {SECTIONS[model]}") :].split("\n## ")[0]
    documented = {
        _cells(line)[0]: _cells(line)[1] for line in section.splitlines() if line[:3] == "| `"
    }
    wrong = [
        f"{key}: the model says {kind}, the doc {documented.get(key)}"
        for key, kind, *_ in map(_cells, model_rows(model))
        if documented.get(key, "").removesuffix(" (optional)") != kind
    ]
    assert not wrong, wrong


def test_the_doc_names_the_steps_in_one_place():
    """Nowhere else does the doc list the step names: a new step changes its one line."""
    doc = DOC.read_text().replace(steps_line(), "")
    first = registry.step_names()[:2]
    lists = (", ".join(first), " \\| ".join(f'"{n}"' for n in first))
    listed = [line for line in doc.splitlines() if any(x in line for x in lists)]
    assert not listed, listed
    assert f"| {STEP_NAME} |" in doc


def test_a_plan_schema_made_before_the_registry_is_loaded_refuses_no_step_name():
    """The step names' enum comes from the registry; a reader of the Plan model alone (a script
    that never plans) gets a plain string, not an enum of none."""
    code = (
        "import json\nfrom steps.formats.plan import Plan\n"
        "print(json.dumps(Plan.model_json_schema()))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, check=True)
    name = json.loads(out.stdout)["$defs"]["Step"]["properties"]["name"]
    assert name == {"title": "Name", "type": "string"}, name


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        sys.exit(f"usage: {REGENERATE}")
    DOC.write_text(generated(DOC.read_text()))
    print(f"wrote {DOC}")
