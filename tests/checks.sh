#!/usr/bin/env bash
# The static checks: tests/run.sh runs them all before pytest, .pre-commit-config.yaml one hook
# each. `tests/checks.sh` runs every check, `tests/checks.sh mypy yamllint` the ones named. Each
# prints its own findings, then a line with its name, ok or FAILED, and its time; the exit status
# is 1 when one failed. The tools are the test extras in .venv (tests/run.sh makes it).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=$PWD/.venv/bin
all=(ruff-check ruff-format mypy import-linter yamllint ansible-lint)

run_check() {
    case $1 in
    ruff-check) "$bin/ruff" check . ;;
    ruff-format) "$bin/ruff" format --check . ;;
    mypy) "$bin/mypy" ;; # files and strictness: [tool.mypy] in pyproject.toml
    # the layers and forbidden imports: [tool.importlinter] in pyproject.toml; --no-cache: its
    # cache folder (.import_linter_cache) would be one more thing in the tree
    import-linter) "$bin/lint-imports" --no-cache ;;
    yamllint) (cd assets/ansible && "$bin/yamllint" --strict .) ;; # rules: assets/ansible/.yamllint
    # The role from its own directory (site.yml, the role, its defaults). --offline: no Galaxy
    # lookup, CI reaches only the package registries. ansible-lint runs ansible from its PATH.
    ansible-lint) (cd assets/ansible && PATH=$bin:$PATH "$bin/ansible-lint" --offline --nocolor) ;;
    esac
}

names=("$@")
[ ${#names[@]} -gt 0 ] || names=("${all[@]}")
for name in "${names[@]}"; do
    case " ${all[*]} " in
    *" $name "*) ;;
    *) echo "checks.sh: no check named '$name'; the checks are: ${all[*]}" >&2; exit 2 ;;
    esac
done
if [ ! -x "$bin/mypy" ]; then
    echo "checks.sh: no $bin/mypy; make the venv first: ./tests/run.sh --co -q" >&2
    exit 2
fi

failed=()
for name in "${names[@]}"; do
    start=${EPOCHREALTIME//[.,]/}
    if run_check "$name"; then result=ok; else result=FAILED; failed+=("$name"); fi
    tenths=$(((${EPOCHREALTIME//[.,]/} - start) / 100000))
    echo "checks.sh: $name $result ($((tenths / 10)).$((tenths % 10)) s)"
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "checks.sh: FAILED: ${failed[*]} (their findings are above)" >&2
    exit 1
fi
