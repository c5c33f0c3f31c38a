#!/usr/bin/env bash
# The whole test suite from a fresh clone: a venv in .venv with the project and its test
# extras, the static checks, then pytest (which exits non-zero when a test fails or none ran).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Tools some tests drive, from this machine's apt archive when run as root (CI starts from a
# bare image): systemd-nspawn containers for tests/realhost, zsh for the completion test, groff
# and man for the manual page; without them (or without root) those tests skip and say why.
test_tools="debootstrap systemd-container openssh-client zsh groff man-db"
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1 &&
    ! { command -v debootstrap && command -v systemd-nspawn && command -v ssh &&
        command -v zsh && command -v groff && command -v man; } >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086
    apt-get install -y -q $test_tools >/dev/null ||
        { apt-get update -q >/dev/null && apt-get install -y -q $test_tools >/dev/null; } ||
        echo "run.sh: could not install $test_tools; the tests that need them will skip" >&2
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
# ruff, ruff format, mypy, yamllint and ansible-lint (tests/checks.sh, also the pre-commit hooks),
# then pytest even when one failed, so one run shows everything; either failing fails the run.
checks=0
./tests/checks.sh || checks=$?
pytest=0
# 3 workers; the modules that share a fixture across tests (a fleet, a wheel, containers) keep
# to one worker each (their xdist_group)
.venv/bin/python -m pytest -n 3 --dist loadgroup "$@" || pytest=$?
[ "$checks" -eq 0 ] || echo "run.sh: a static check FAILED (checks.sh's findings, above pytest's)" >&2
exit $((pytest ? pytest : checks))
