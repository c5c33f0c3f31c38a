#!/usr/bin/env bash
# The whole test suite from a fresh clone: a venv in .venv with the project and its test
# extras, ruff, then pytest (which exits non-zero when a test fails or none ran).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
.venv/bin/ruff check .
exec .venv/bin/python -m pytest "$@"
