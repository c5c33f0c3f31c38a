"""Reading an operator's input file (answers, recorded facts): the file boundary.

A file named on the command line may be anything: a FIFO that never ends, /dev/zero, a
directory, a symbolic link into root's own files, binary, gigabytes, text nested a hundred
thousand levels deep, a number with a million digits. Each is refused with an InputError
(exit 2) naming the file, and the line where there is one, without reading more than
`MAX_INPUT_BYTES + 1` bytes or waiting on anything (steps.safefs).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from steps.errors import InputError
from steps.safefs import UnsafeFile, read_bounded
from steps.units import MiB

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Ubuntu 22.04's Python 3.10
    import tomli as tomllib

MAX_INPUT_BYTES = MiB
# Python refuses to turn a longer digit string into an int (CVE-2020-10735): tomllib and json
# then raise a bare ValueError without a position.
_LONG_NUMBER = re.compile(r"[0-9_]{4000,}")
_ALLOWED_FILE = "allowed: a regular UTF-8 text file of at most 1 MiB"


def read_input(path: Path, what: str) -> str:
    """The text of the input file at `path` ("answers file", "facts file")."""
    try:
        data = read_bounded(path, MAX_INPUT_BYTES)
    except UnsafeFile as exc:
        hint = ""
        if exc.strerror == "is a symbolic link":
            hint = f" (name the file itself: {os.path.realpath(path)})"
        raise InputError(f"{path}: {what} {exc.strerror}{hint}; {_ALLOWED_FILE}") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read {what}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(
            f"{path}: line {line}: {what} is not UTF-8 text (byte 0x{data[exc.start]:02x}); "
            f"{_ALLOWED_FILE}"
        ) from None
    if "\0" in text:
        line = text.count("\n", 0, text.index("\0")) + 1
        raise InputError(f"{path}: line {line}: {what} holds a NUL byte; {_ALLOWED_FILE}")
    return text


def parse_toml(text: str, origin: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        where = ""
        if "at end of document" in str(exc):  # tomllib gives no line there: the last one
            where = f" (line {max(1, len(text.rstrip().splitlines()))} is the last)"
        raise InputError(f"{origin}: not valid TOML: {exc}{where}") from None
    except (ValueError, RecursionError) as exc:  # a huge integer, or nesting past the stack
        raise InputError(_unparsable(text, origin, "TOML", exc)) from None


def parse_json(text: str, origin: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{origin}: not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise InputError(_unparsable(text, origin, "JSON", exc)) from None


def _unparsable(text: str, origin: str, kind: str, exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return (
            f"{origin}: line {_deepest_line(text)}: {kind} nested too deeply; "
            "allowed: the answers and facts layouts, a few levels deep"
        )
    m = _LONG_NUMBER.search(text)
    line = text.count("\n", 0, m.start()) + 1 if m else 1
    return f"{origin}: line {line}: a number with thousands of digits; allowed: ordinary numbers"


def _deepest_line(text: str, limit: int = 100) -> int:
    """The line where brackets first open past `limit` levels (strings not excluded: this
    only points the reader at the spot)."""
    depth = 0
    for i, ch in enumerate(text):
        if ch in "[{":
            depth += 1
            if depth > limit:
                return text.count("\n", 0, i) + 1
        elif ch in "]}":
            depth -= 1
    return 1
