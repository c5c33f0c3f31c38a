#!/usr/bin/env bash
# The whole test suite from a fresh clone: a venv in .venv with the project and its test
# extras, the static checks, then pytest (which exits non-zero when a test fails or none ran).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The real-host tests (tests/realhost) boot Debian 12 containers with systemd-nspawn: as root
# (CI starts from a bare image) install what they need from this machine's apt archive;
# without root they skip and say why.
realhost_tools="debootstrap systemd-container openssh-client"
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1 &&
    ! { command -v debootstrap && command -v systemd-nspawn && command -v ssh; } >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086
    apt-get install -y -q $realhost_tools >/dev/null ||
        { apt-get update -q >/dev/null && apt-get install -y -q $realhost_tools >/dev/null; } ||
        echo "run.sh: could not install $realhost_tools; the real-host tests will skip" >&2
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
