"""Text from outside made inert before it reaches a terminal.

A build's output, a lock's header, a package's name in a diagnosis: any of them can hold
control characters, and a terminal obeys them (an OSC 52 sequence writes root's clipboard, a
carriage return hides what came before it on the line). Every renderer (the console, the plan
printer, the error messages, the wizard) shows text through `printable`: each C0 and C1 control
character but the tab and the newline, and DEL, is shown as its escape (ESC as `\\x1b`). Events
keep the text as it came; only what is shown is escaped.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

_CONTROLS = (*range(0x20), 0x7F, *range(0x80, 0xA0))
_ESCAPES = {c: f"\\x{c:02x}" for c in _CONTROLS if c not in (0x09, 0x0A)}

E = TypeVar("E")


def printable(text: str) -> str:
    return text.translate(_ESCAPES)


def _each_printable(value: Any) -> Any:
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, list):
        return [_each_printable(v) for v in value]
    if isinstance(value, dict):
        return {k: _each_printable(v) for k, v in value.items()}
    return value


def printable_event(event: E) -> E:
    """An event (a frozen dataclass) with every string in it printable, the plan's included."""
    assert dataclasses.is_dataclass(event) and not isinstance(event, type)
    changes = {f.name: _each_printable(getattr(event, f.name)) for f in dataclasses.fields(event)}
    return dataclasses.replace(event, **changes)
