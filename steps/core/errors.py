"""Errors the front ends turn into exit codes, and readable validation messages."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:  # pydantic is imported where a model is: the wizard's first screen has none
    from pydantic import BaseModel, ValidationError
    from pydantic_core import ErrorDetails

from steps.core.exitcodes import EXIT_ALREADY_RUNNING, EXIT_FAILED, EXIT_INPUT, EXIT_NEEDS_ROOT


class MlsetupError(Exception):
    """Base for errors with a contract exit code."""

    exit_code = EXIT_FAILED


# Which input an exit 2 refused: the answers file, a facts file, the command line, the saved
# state (--resume with nothing to resume, an unusable state file), the MLSETUP_* environment,
# an extension recipe; "input" where the refusing code does not know.
InputKind = Literal["answers", "facts", "usage", "state", "settings", "recipes", "input"]


class InputError(MlsetupError):
    """Invalid input: nothing was run (exit 2). `kind` says which input; the CLI prints it as
    a stable prefix (`refusal`), so that a script tells the answers from the rest."""

    exit_code = EXIT_INPUT

    def __init__(self, message: str, kind: InputKind = "input") -> None:
        super().__init__(message)
        self.kind: InputKind = kind


class Refused(InputError):
    """Input root will not use as it stands (a lock holding more than pins, an index setting
    file another account could write): `why` in plain words and `fix`, the command that
    makes it usable, for the run's diagnosis."""

    def __init__(self, message: str, why: str, fix: str, kind: InputKind = "input") -> None:
        super().__init__(message, kind)
        self.why = why
        self.fix = fix


@contextmanager
def input_kind(kind: InputKind) -> Iterator[None]:
    """An InputError raised inside (a function, as a decorator) refused input of `kind`,
    unless code nearer to it already said which (a recipe read while checking the answers)."""
    try:
        yield
    except InputError as exc:
        if exc.kind == "input":
            exc.kind = kind
        raise


def refusal(exc: MlsetupError) -> str:
    """What the CLI prints after "mlsetup: ". An exit 2 starts with "input error (KIND): ", a
    contract as the exit code is (the Ansible role reads KIND)."""
    if isinstance(exc, InputError):
        return f"input error ({exc.kind}): {exc}"
    return str(exc)


class NeedsRootError(MlsetupError):
    exit_code = EXIT_NEEDS_ROOT


class AlreadyRunningError(MlsetupError):
    exit_code = EXIT_ALREADY_RUNNING


MAX_LISTED = 20  # problems listed per file: a generated file can have thousands


def key_path(loc: tuple[int | str, ...]) -> str:
    """('toolkit', 'versions', 1) -> 'toolkit.versions[1]'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def describe_validation_error(origin: str, exc: ValidationError) -> str:
    """One line per problem: the key path, the value given and what is allowed."""
    lines = [f"{origin}: {exc.error_count()} invalid value(s):"]
    errors = exc.errors(include_url=False)
    if len(errors) > MAX_LISTED:
        lines.append(f"  (the first {MAX_LISTED} of them)")
    for err in errors[:MAX_LISTED]:
        loc = tuple(p for p in err["loc"] if not _is_union_tag(p))
        where = key_path(loc)
        if err["type"] == "extra_forbidden":
            lines.append(f"  {where}: unknown key; remove it or fix its spelling")
        elif err["type"] == "missing":
            lines.append(f"  {where}: required key is missing")
        else:
            lines.append(f"  {where} = {show_value(err['input'])}: {_allowed(err)}")
    return "\n".join(lines)


M = TypeVar("M", bound="BaseModel")


def validate_strict(model: type[M], data: Any, origin: str) -> M:
    """`data` (parsed JSON or TOML) as `model`, strictly: those formats have real types, so
    `true` is not 1 and "16" is not a count; any problem is an InputError naming the key."""
    from pydantic import ValidationError

    try:
        return model.model_validate(data, strict=True)
    except ValidationError as exc:
        raise InputError(describe_validation_error(origin, exc)) from None


def _is_union_tag(part: int | str) -> bool:
    # pydantic puts the union member's type name into loc ("str", "list[str]", function names)
    return isinstance(part, str) and (
        part in {"str", "int", "float", "bool", "list[str]", "dict[str,int]"}
        or part.startswith(("function-", "literal[", "list[", "constrained-"))
    )


def show_value(value: object, width: int = 80) -> str:
    """A value as the user wrote it in TOML/JSON ("x", true), not as Python prints it; a long
    or deeply nested one cut short (an input may be a megabyte, or nested past the stack)."""
    text = _render(value, depth=3)
    return text if len(text) <= width else text[: width - 1] + "…"


def _render(value: object, depth: int) -> str:
    if isinstance(value, (list, tuple)):
        if depth == 0:
            return "[…]"
        return (
            "["
            + ", ".join(_render(v, depth - 1) for v in value[:8])
            + (", …]" if len(value) > 8 else "]")
        )
    if isinstance(value, dict):
        if depth == 0:
            return "{…}"
        items = [
            f"{_render(str(k), 0)}: {_render(v, depth - 1)}" for k, v in list(value.items())[:8]
        ]
        return "{" + ", ".join(items) + (", …}" if len(value) > 8 else "}")
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"(a number of about {int(value.bit_length() * 0.30103) + 1} digits)"
    if isinstance(value, str) and len(value) > 200:
        value = value[:200]
    return json.dumps(value, default=str)


def _allowed(err: ErrorDetails) -> str:
    if err["type"] == "string_pattern_mismatch":
        return f"allowed: text matching {err['ctx']['pattern']}"
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    return msg[0].lower() + msg[1:] if msg else msg
