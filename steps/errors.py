"""Errors the front ends turn into exit codes, and readable validation messages."""

from __future__ import annotations

import json

from pydantic import ValidationError


class MlsetupError(Exception):
    """Base for errors with a contract exit code."""

    exit_code = 1


class InputError(MlsetupError):
    """Invalid answers, facts or usage: nothing was run (exit 2)."""

    exit_code = 2


class NeedsRootError(MlsetupError):
    exit_code = 3


class AlreadyRunningError(MlsetupError):
    exit_code = 4


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
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if not _is_union_tag(p))
        where = key_path(loc)
        if err["type"] == "extra_forbidden":
            lines.append(f"  {where}: unknown key; remove it or fix its spelling")
        elif err["type"] == "missing":
            lines.append(f"  {where}: required key is missing")
        else:
            lines.append(f"  {where} = {_show(err['input'])}: {_allowed(err)}")
    return "\n".join(lines)


def _is_union_tag(part: int | str) -> bool:
    # pydantic puts the union member's type name into loc ("str", "list[str]", function names)
    return isinstance(part, str) and (
        part in {"str", "int", "float", "bool", "list[str]", "dict[str,int]"}
        or part.startswith(("function-", "literal[", "list[", "constrained-"))
    )


def _show(value: object) -> str:
    """A value as the user wrote it in TOML/JSON ("x", true), not as Python prints it."""
    return json.dumps(value, default=str)


def _allowed(err: dict) -> str:
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    return msg[0].lower() + msg[1:] if msg else msg
