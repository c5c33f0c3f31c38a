#!/usr/bin/env bash
# The whole test suite from a fresh clone or a release tarball, before or after install.sh, as
# root or as a normal user: a venv in .venv with the project and its test extras, the static
# checks, then pytest (which exits non-zero when a test fails or none ran).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { echo "run.sh: $*" >&2; }

# What the suite needs from the system: python3's venv (Debian and Ubuntu ship python3 without
# ensurepip until python3-venv is installed) and git (tests/realhost clones the checkout). The
# tools some tests drive: systemd-nspawn containers for tests/realhost, zsh for the completion
# test, groff and man for the manual page; without them those tests skip and say why.
needed="python3-venv git"
test_tools="debootstrap systemd-container openssh-client zsh groff man-db"
has_venv() { python3 -c 'import ensurepip, venv' >/dev/null 2>&1; }
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1 &&
    ! { has_venv && command -v git && command -v debootstrap && command -v systemd-nspawn &&
        command -v ssh && command -v zsh && command -v groff && command -v man; } >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    say "installing $needed $test_tools (apt-get)"
    # shellcheck disable=SC2086
    apt-get install -y -q $needed $test_tools >/dev/null ||
        { apt-get update -q >/dev/null && apt-get install -y -q $needed $test_tools >/dev/null; } ||
        say "could not install $test_tools; the tests that need them will skip"
fi
if ! has_venv; then
    # a normal user cannot install it; the one command that does:
    say "python3 has no venv module (ensurepip): run 'sudo apt-get install python3-venv' and again"
    exit 1
fi
command -v git >/dev/null || say "no git: tests/realhost's new-user test skips ('sudo apt-get install git')"

# A release tarball extracted as root keeps git-archive's modes (0775, 0664), and mlsetup's own
# trust rules refuse code that another account could change (its nvcc wrapper, the fixtures it
# builds as root): the checkout's files lose group and other write, as install.sh's copy does.
writable=$(find . -path ./.venv -prune -o -path ./.git -prune -o -perm /022 ! -type l -print | wc -l)
if [ "$writable" -gt 0 ]; then
    say "removing group and other write from $writable files of the checkout (mlsetup runs no code other accounts can change)"
    find . -path ./.venv -prune -o -path ./.git -prune -o -perm /022 ! -type l -exec chmod go-w {} +
fi

# A half-made venv (python3 -m venv without ensurepip leaves bin/python and no pip) is made
# anew: testing for bin/python alone kept the broken one for every retry.
if ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
    [ -e .venv ] && say "rebuilding .venv (it has no working pip)"
    rm -rf .venv
    say "creating .venv with $(python3 --version)"
    python3 -m venv .venv
fi
say "installing mlsetup and its test extras into .venv (about a minute the first time)"
# pip brings uv (the bound mlsetup itself depends on, read from pyproject.toml), and uv installs
# the rest: it downloads in parallel, pip one wheel at a time (a fresh box: about 10 s against 45,
# and minutes through a slow proxy). The venv keeps its pip: tests build and install with it.
# uv trusts the system's certificates, as pip does (a proxy that re-signs TLS is common on
# company networks; uv's own roots would refuse it), unless the caller chose otherwise.
[ -n "${UV_NATIVE_TLS:-}" ] || export UV_SYSTEM_CERTS=${UV_SYSTEM_CERTS:-true}
uv_requirement=$(sed -n 's/^ *"\(uv[<>=][^"]*\)",$/\1/p' pyproject.toml)
.venv/bin/python -m pip install --quiet --disable-pip-version-check "${uv_requirement:-uv}" >&2 ||
    { say "could not install uv into .venv (above)"; exit 1; }
.venv/bin/uv pip install --quiet --python .venv/bin/python -e '.[test]' ||
    { say "the install into .venv failed (above)"; exit 1; }
.venv/bin/python -c 'import app, steps, pytest, xdist' || { say "the install into .venv failed (above)"; exit 1; }

# ruff, ruff format, mypy, yamllint and ansible-lint (tests/checks.sh, also the pre-commit hooks),
# then pytest even when one failed, so one run shows everything; either failing fails the run.
checks=0
./tests/checks.sh || checks=$?
pytest=0
# 3 workers; the modules that share a fixture across tests (a fleet, a wheel, containers) keep
# to one worker each (their xdist_group)
.venv/bin/python -m pytest -n 3 --dist loadgroup "$@" || pytest=$?
[ "$checks" -eq 0 ] || say "a static check FAILED (checks.sh's findings, above pytest's)"
exit $((pytest ? pytest : checks))
