"""The fields a step screen edits, read from the engine's answers model (steps.formats.answers): the
allowed values of a `Literal`, the hint from the field's description. No second list here."""

from __future__ import annotations

import typing
from typing import Any, Literal

from pydantic import BaseModel

from app.tui.widgets.fields import FieldSpec
from steps.formats.answers import Answers, ExtensionAnswers
from steps.known.knowledge import knowledge


def _field(key: str) -> tuple[Any, str]:
    """The annotation and description of an answers key such as "driver.action"."""
    model: type[BaseModel] = Answers
    section, _, name = key.rpartition(".")
    if section.startswith("extensions["):
        model = ExtensionAnswers
    elif section:
        model = Answers.model_fields[section].annotation  # type: ignore[assignment]
    info = model.model_fields[name]
    return info.annotation, info.description or ""


def allowed(key: str) -> tuple[str, ...]:
    """The string values a key takes ("auto", "install", "skip"), in the model's order."""
    if key == "torch.cuda":  # validated against the torch builds mlsetup knows
        return ("auto", *knowledge().torch.build_names)
    annotation, _ = _field(key)
    literals = (
        [annotation]
        if typing.get_origin(annotation) is Literal
        else [a for a in typing.get_args(annotation) if typing.get_origin(a) is Literal]
    )
    return tuple(v for lit in literals for v in typing.get_args(lit) if isinstance(v, str))


def hint(key: str) -> str:
    """The first clause of the field's description: what to type."""
    _, description = _field(key)
    return description.split(";")[0].split(" | ")[0].strip()


def select(key: str, label: str) -> FieldSpec:
    return FieldSpec(key, label, "select", allowed(key), hint=hint(key))


def text(key: str, label: str, kind: str = "text") -> FieldSpec:
    return FieldSpec(key, label, kind, hint=hint(key))
