"""Reading an operator's input file (answers, recorded facts): the file boundary.

A file named on the command line may be anything: a FIFO that never ends, /dev/zero, a
directory, a symbolic link into root's own files, binary, gigabytes, text nested a hundred
thousand levels deep, a number with a million digits. Each is refused with an InputError
(exit 2) naming the file, and the line where there is one, without reading more than
`MAX_INPUT_BYTES + 1` bytes or waiting on anything (steps.core.safefs).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from steps.core import tomlcompat as tomllib
from steps.core.errors import InputError
from steps.core.safefs import UnsafeFile, read_bounded
from steps.core.sizes import MiB

MAX_INPUT_BYTES = MiB
# Python refuses to turn a longer digit string into an int (CVE-2020-10735): tomllib and json
# then raise a bare ValueError without a position.
_LONG_NUMBER = re.compile(r"[0-9_]{4000,}")
_ALLOWED_FILE = "allowed: a regular UTF-8 text file of at most 1 MiB"
# The shape of TOML mlsetup reads (answers, recipes) is small: keys of a few parts, a few levels,
# a few hundred lines. tomllib builds each dotted key a part at a time (quadratic: a key of
# 20,000 parts took 6.7 s and 1.6 GB, one of 100,000 never ended) and spends tens of
# microseconds on each part, value and table, so the shape is bounded before it parses a byte.
MAX_KEY_PARTS = 16
MAX_NESTING = 32  # arrays and inline tables inside one another
# Brackets, separators and dots outside strings and comments: the largest real file
# (assets/torch.toml) has about 400; past this a file is not one mlsetup reads.
MAX_MARKS = 20_000
# Where the check looks next, by where it is: outside any string (string and comment openers,
# brackets, separators, dots), or inside one (what ends it; a quote after an odd number of
# backslashes in a basic string ends nothing).
_NEXT = {
    None: re.compile(r'"""|\'\'\'|["\'#\[\]{}=,.\n]'),
    '"': re.compile(r'["\n]'),
    '"""': re.compile(r'"""'),
    "'": re.compile(r"['\n]"),
    "'''": re.compile(r"\'\'\'"),
    "#": re.compile(r"\n"),
}
_SEPARATORS = frozenset("=,\n[]{}")


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
    check_toml_shape(text, origin)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        where = ""
        if "at end of document" in str(exc):  # tomllib gives no line there: the last one
            where = f" (line {max(1, len(text.rstrip().splitlines()))} is the last)"
        raise InputError(f"{origin}: not valid TOML: {exc}{where}") from None
    except (ValueError, RecursionError) as exc:  # a huge integer, or nesting past the stack
        raise InputError(_unparsable(text, origin, "TOML", exc)) from None


def check_toml_shape(text: str, origin: str) -> None:
    """Refuse (InputError) TOML whose shape is not one mlsetup reads: a key of more than
    MAX_KEY_PARTS dotted parts, arrays and inline tables nested deeper than MAX_NESTING, more than
    MAX_MARKS brackets, separators and dots. One pass, jumping over strings and comments."""
    dots = depth = marks = pos = 0
    inside: str | None = None  # the string or comment the scan is in: what opened it
    while (m := _NEXT[inside].search(text, pos)) is not None:
        mark, pos = m.group(), m.end()
        if inside is not None:
            if inside[0] == '"' and mark[0] == '"' and _escaped(text, m.start()):
                pos = m.start() + 1
            elif len(mark) == 3:  # a multi-line string may end in one or two more quotes
                after = text[pos : pos + 2]
                pos += len(after) - len(after.lstrip(mark[0]))
                inside = None
            else:  # its quote, or the end of the line (a one-line string there is refused)
                inside = None
            continue
        if mark in _NEXT:
            inside = mark
            continue
        marks += 1
        dots = dots + 1 if mark == "." else 0 if mark in _SEPARATORS else dots
        depth = depth + 1 if mark in "[{" else max(0, depth - 1) if mark in "]}" else depth
        if dots >= MAX_KEY_PARTS or depth > MAX_NESTING or marks > MAX_MARKS:
            line = text.count("\n", 0, m.start()) + 1
            raise InputError(f"{origin}: line {line}: {_too_large(dots, depth)}")


def _escaped(text: str, at: int) -> bool:
    """Whether the character at `at` follows an odd number of backslashes."""
    start = at
    while start > 0 and text[start - 1] == "\\":
        start -= 1
    return (at - start) % 2 == 1


def _too_large(dots: int, depth: int) -> str:
    if dots >= MAX_KEY_PARTS:
        return (
            f"a key of more than {MAX_KEY_PARTS} dotted parts; allowed: keys of a few parts, "
            "such as build.max_jobs"
        )
    if depth > MAX_NESTING:
        return f"nested more than {MAX_NESTING} levels deep; allowed: a few levels"
    return (
        f"more than {MAX_MARKS} keys, values and tables; allowed: an answers or recipe file "
        "of a few hundred lines"
    )


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
