"""The TOML reader: the standard library's tomllib from Python 3.11, tomli (the same code,
published separately) on Ubuntu 22.04's Python 3.10."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    from tomllib import TOMLDecodeError, load, loads
else:  # pragma: no cover - Ubuntu 22.04's Python 3.10
    from tomli import TOMLDecodeError, load, loads

__all__ = ["TOMLDecodeError", "load", "loads"]
