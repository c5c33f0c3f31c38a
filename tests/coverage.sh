#!/usr/bin/env bash
# Line coverage of app/ and steps/ over the test suite, the processes the tests start included:
# the detached engine (the console script or `python -m app.cli`), the governor's watchdog
# (`python -m steps.building.governor`), every CLI run. Not part of tests/run.sh: it makes the suite
# slower. Arguments go to pytest (e.g. tests/test_engine.py); the total is printed at the end.
#
# The engine passes on only a filtered environment to what it starts (steps/run/runner.py), so
# coverage's own subprocess support, which travels in an environment variable, loses those
# processes. Instead, for the length of this run, a .pth file in the test venv starts coverage
# in every Python process of that venv, with the data directory written into it; it is removed
# on exit. Processes ended by SIGKILL (the fault tests kill engines on purpose) leave no data.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd)

[ -x .venv/bin/python ] || ./tests/run.sh --collect-only -q >/dev/null
.venv/bin/python -c 'import coverage' 2>/dev/null ||
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'

site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
data=$(mktemp -d "${TMPDIR:-/tmp}/mlsetup-coverage.XXXXXX")
chmod 1777 "$data"  # a test may run a venv Python as another account
starter=$site/mlsetup_coverage_start.py
pth=$site/mlsetup-coverage.pth
cleanup() { rm -f "$pth" "$starter"; }
trap cleanup EXIT

cat >"$starter" <<PY
# Written by tests/coverage.sh for one run; removed when it ends.
import os

if os.path.isdir("$data"):
    try:
        import coverage

        coverage.Coverage(
            data_file="$data/.coverage",
            data_suffix=True,
            auto_data=True,
            config_file="$repo/pyproject.toml",
        ).start()
    except Exception:  # a process that cannot measure still runs as it would
        pass
PY
echo "import mlsetup_coverage_start" >"$pth"

status=0
.venv/bin/python -m pytest "$@" || status=$?
cleanup

files=$(find "$data" -maxdepth 1 -name '.coverage.*' | wc -l)
.venv/bin/coverage combine --quiet --data-file="$repo/.coverage" "$data"
echo "coverage: $files data files combined (the suite and the processes it started)"
.venv/bin/coverage report --data-file="$repo/.coverage" --sort=cover
echo "coverage: TOTAL $(.venv/bin/coverage report --data-file="$repo/.coverage" --format=total)%" \
    "(pytest exit $status)"
rm -rf "$data"
exit "$status"
