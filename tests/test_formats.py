"""docs/formats.md describes every key of Facts, Plan and the report, from their models: its
keys, their types (the step names and action kinds among them) and the step order it states."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import BaseModel

from steps.apply.report import Report
from steps.formats.facts import Facts
from steps.formats.plan import Plan
from steps.planning import registry
from tests.common import REPO

DOC = REPO / "docs" / "formats.md"


def _type(s: dict[str, Any]) -> str:
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


def test_the_report_table_is_the_one_its_model_generates():
    doc = DOC.read_text()
    report = doc[doc.index("## report") :]
    missing = [row for row in model_rows(Report) if row not in report]
    assert not missing, f"regenerate the report table of docs/formats.md: {missing}"


SECTIONS: dict[type[BaseModel], str] = {Facts: "Facts:", Plan: "Plan:", Report: "report:"}


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split(" | ")]


@pytest.mark.parametrize("model", [Facts, Plan, Report])
def test_each_documented_type_is_the_models(model: type[BaseModel]):
    """The type column says what the model accepts: the step names and the action kinds are
    the schema's enums (the registry's order, `ActionKind`), so a new step or kind that the
    doc does not list fails here. "(optional)" marks a key a Facts reader may lack."""
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


def test_the_step_order_the_doc_states_is_the_registrys():
    doc = DOC.read_text()
    names = list(registry.step_names())
    said = re.search(r"Steps are in the order of `steps/planning/registry.py`: ([a-z, \n]+)", doc)
    assert said and re.split(r",\s*", said.group(1).strip()) == names, said
    failure = next(line for line in doc.splitlines() if line.startswith("| `failure.step` |"))
    assert f"({', '.join(names)};" in failure, failure
