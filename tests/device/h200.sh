#!/usr/bin/env bash
# What CI cannot show, run on the H200 GPU server (the `device` tool) from a copy of this repo,
# with .whl/ (pydantic, distro, uv wheels) and .device/flash_attn-2.8.3.tar.gz carried along.
#
#   tests/device/h200.sh e2e              mlsetup's extensions step builds tests/fixtures/cudaext
#                                          for the arch the probe found, installs it, runs it on
#                                          the GPU; a second apply runs nothing
#   tests/device/h200.sh wheelhouse       HERE, not on the server: build mlsetup's wheel and fetch
#                                          the dependency wheels the image lacks (cp312 manylinux)
#                                          into .device/wheelhouse, for wheel-e2e
#   tests/device/h200.sh wheel-e2e        the e2e through the BUILT wheel, not the checkout: a fresh
#                                          venv with .device/wheelhouse/mlsetup-*.whl and its
#                                          dependencies (.whl, .device/wheelhouse), run from
#                                          another directory: probe, plan, apply, a second apply
#   tests/device/h200.sh wizard SECONDS   the installed wheel's wizard attached to a flash-attn
#                                          compile for SECONDS: Run-screen SVGs in wizard-shots.tgz
#   tests/device/h200.sh governed SECONDS flash-attn 2.8.3 through mlsetup, memory governor,
#                                          memory_limit 32GiB, stopped after SECONDS
#   tests/device/h200.sh static SECONDS   the same compile with flash-attn's own rule for 32 GiB
#                                          (MAX_JOBS = min(cpus/2, 32/9) = 3), stopped after SECONDS
#   tests/device/h200.sh resume SECONDS   the governed compile killed (-9, compilers too) after
#                                          SECONDS, then `apply --resume` for SECONDS: the build
#                                          tree keeps the objects, ninja goes on from there
#
# Writes logs and one-line-a-second memory profiles (tests/bench/sample_memory.py) to $OUT.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT:-/tmp/out}
mode=$1
seconds=${2:-450}
work=/tmp/mlsetup-device
venv=/opt/torch/.venv  # the image's own venv: torch 2.11.0+cu130 is already there
wheelhouse=$repo/.device/wheelhouse

if [ "$mode" = wheelhouse ]; then
    # The image has python 3.12 with psutil, packaging, ninja and nvidia-ml-py in /opt/torch/.venv,
    # which a fresh venv does not see; the rest (textual, pydantic, distro, uv and theirs) is in
    # .whl already. The versions are the ones the suite runs with here.
    rm -rf "$wheelhouse" && mkdir -p "$wheelhouse"
    "$repo/.venv/bin/python" -m build --no-isolation --wheel --outdir "$wheelhouse" "$repo"
    pins=$("$repo/.venv/bin/python" -m pip list --format=freeze --disable-pip-version-check \
        | grep -iE '^(psutil|nvidia-ml-py|packaging|ninja)==')
    # shellcheck disable=SC2086  # one argument per pin
    "$repo/.venv/bin/python" -m pip download -q --disable-pip-version-check --no-deps \
        --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux_2_12_x86_64 \
        --platform manylinux2010_x86_64 -d "$wheelhouse" $pins
    ls -l "$wheelhouse"
    exit 0
fi

mkdir -p "$work/recipes" "$out"
export UV_OFFLINE=1 PYTHONUNBUFFERED=1 MLSETUP_EXTENSIONS_DIR=$work/recipes
if [ "$mode" = wheel-e2e ] || [ "$mode" = wizard ]; then
    # the installed product alone: nothing of the checkout on sys.path, run from elsewhere
    installed=/tmp/mlsetup-wheel
    rm -rf "$installed"
    python3 -m venv --without-pip "$installed"
    python3 -m pip --python "$installed/bin/python" install -q --no-index --no-compile \
        --disable-pip-version-check --find-links "$repo/.whl" --find-links "$wheelhouse" \
        "$wheelhouse"/mlsetup-*.whl
    PATH=$installed/bin:$PATH
    cd "$work"
else
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$repo"/.whl/*.whl
    export PYTHONPATH=/tmp/site:$repo PATH=/tmp/site/bin:$PATH
fi
sed "s#@SOURCE@#$repo/tests/fixtures/cudaext#" "$repo/tests/fixtures/cudaext.toml" \
    > "$work/recipes/cudaext.toml"
if [ "$mode" = wheel-e2e ]; then
    rm -f "$work/recipes/flash-attn.toml"  # only cudaext's recipe: an earlier mode's would stay
else
    # flash-attn's recipe as shipped, but from the carried sdist: the server reaches no index
    python3 - "$repo" "$work/recipes/flash-attn.toml" <<'PY'
import json, sys, tomllib
repo, dest = sys.argv[1], sys.argv[2]
recipe = tomllib.load(open(f"{repo}/assets/extensions.toml", "rb"))["flash-attn"]
recipe["requirement"] = f"{repo}/.device/flash_attn-2.8.3.tar.gz"
def value(v):
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list):  # [[flash-attn.variant]] tables too, as inline tables
        return "[" + ", ".join(value(x) for x in v) + "]"
    return json.dumps(v)
open(dest, "w").write("[flash-attn]\n" + "".join(f"{k} = {value(v)}\n" for k, v in recipe.items()))
PY
fi

answers() {  # answers for the image's venv and torch; $1: extensions tables
    cat > "$work/answers.toml" <<TOML
version = 1
[venv]
path = "$venv"
python = "3.12"
[torch]
version = "==2.11.*"
cuda = "cu130"
[build]
memory_limit = "32GiB"
[reboot]
policy = "never"
$1
TOML
}

if [ "$mode" != wheel-e2e ] && [ "$mode" != wizard ]; then
    mlsetup() { python3 -m app.cli "$@"; }
fi

flash_attn_tree=/var/cache/mlsetup/build/flash-attn-2.8.3

start_flash_attn() {  # answers that build flash-attn, and the memory sampler ($1: its file's prefix)
    answers $'[[extensions]]\nname = "flash-attn"\nversion = "2.8.3"\nsource = "build"'
    python3 "$repo/tests/bench/sample_memory.py" "$out/$1-mem.txt" "$flash_attn_tree/src/build" &
    sampler=$!
}

stop_compilers() {
    pkill -9 -f 'pip wheel' || true
    for p in ninja nvcc cicc ptxas cc1plus; do pkill -9 -x $p || true; done
}

case $mode in
wizard)
    # the wizard of the installed wheel attached to a real flash-attn compile: SVG shots of the
    # Run screen while the gauge moves (tests/device/wizard_screens.py), packed in one file
    rm -rf /var/lib/mlsetup /var/log/mlsetup "$flash_attn_tree" /tmp/shots
    start_flash_attn wizard
    setsid mlsetup apply --answers "$work/answers.toml" > "$out/wizard-apply.txt" 2>&1 < /dev/null &
    "$installed/bin/python" "$repo/tests/device/wizard_screens.py" --out /tmp/shots \
        --seconds "$seconds" --every 30 --sizes 120x40,80x24 || echo "wizard_screens exit $?"
    kill $sampler || true; stop_compilers
    tar -czf "$out/wizard-shots.tgz" -C /tmp/shots .
    ;;
e2e)
    mlsetup probe | tee "$out/e2e-probe.txt"
    answers $'[[extensions]]\nname = "cudaext"\nversion = "0.1.0"'
    mlsetup plan --answers "$work/answers.toml" | tee "$out/e2e-plan.txt"
    /usr/bin/time -f "apply wall %e s, max RSS %M kB" \
        python3 -m app.cli apply --answers "$work/answers.toml" --foreground 2>&1 | tee "$out/e2e-apply.txt"
    cp /var/lib/mlsetup/report.json "$out/e2e-report.json"
    mlsetup apply --answers "$work/answers.toml" --foreground | tee "$out/e2e-second-apply.txt"
    ;;
wheel-e2e)
    # a run of the e2e before this one on the same machine would leave nothing to do
    rm -rf /var/lib/mlsetup /var/log/mlsetup /var/cache/mlsetup/build/cudaext-*
    uv pip uninstall --python "$venv/bin/python" cudaext >/dev/null 2>&1 || true
    { echo "mlsetup: $(command -v mlsetup), $(mlsetup --version)"
      echo "imported from: $(python -c 'import app, assets; print(app.__file__, assets.__file__)')"
      echo "working directory: $PWD"; } | tee "$out/wheel-e2e-where.txt"
    timed() {  # $1: a name for $out; the rest: the mlsetup command line
        local name=$1 start=$EPOCHREALTIME code
        shift
        set +e
        mlsetup "$@" 2>&1 | tee "$out/wheel-e2e-$name.txt"
        code=${PIPESTATUS[0]}
        set -e
        awk -v n="$name" -v c="$code" -v s="$start" -v e="$EPOCHREALTIME" \
            'BEGIN { printf "%-14s exit %s in %.2f s\n", n, c, e - s }' \
            | tee -a "$out/wheel-e2e-times.txt"
    }
    answers $'[[extensions]]\nname = "cudaext"\nversion = "0.1.0"'
    timed probe probe --json
    timed plan plan --answers "$work/answers.toml"
    timed apply apply --answers "$work/answers.toml" --foreground
    cp /var/lib/mlsetup/report.json "$out/wheel-e2e-report.json"
    timed second-apply apply --answers "$work/answers.toml" --foreground
    grep -q "plan: 0 step(s) to do, 0 action(s)" "$out/wheel-e2e-second-apply.txt" \
        && echo "second apply: nothing run" | tee -a "$out/wheel-e2e-times.txt"
    ;;
governed)
    start_flash_attn governed
    timeout -s TERM "$seconds" python3 -m app.cli apply --answers "$work/answers.toml" \
        --foreground > "$out/governed.txt" 2>&1 || echo "stopped after ${seconds}s (exit $?)"
    kill $sampler; stop_compilers
    grep -v '"kind":"output"' /var/log/mlsetup/current/events.jsonl > "$out/governed-events.jsonl"
    tail -c 2000000 "$(ls -S /var/log/mlsetup/current/*.log | head -1)" > "$out/governed-build-log.txt"
    ;;
resume)
    start_flash_attn resume
    timeout -s KILL "$seconds" python3 -m app.cli apply --answers "$work/answers.toml" \
        --foreground > "$out/resume-first.txt" 2>&1 || echo "engine killed after ${seconds}s"
    stop_compilers
    objects=$(find "$flash_attn_tree/src/build" -name '*.o' | wc -l)
    echo "objects after the kill: $objects" | tee "$out/resume-summary.txt"
    timeout -s TERM "$seconds" python3 -m app.cli apply --resume --foreground \
        > "$out/resume-second.txt" 2>&1 || echo "stopped after ${seconds}s"
    kill $sampler; stop_compilers
    log=$(ls -t /var/log/mlsetup/current/extensions.flash-attn.build.log)
    { echo "objects at the end: $(find "$flash_attn_tree/src/build" -name '*.o' | wc -l)"
      echo "ninja progress lines in the build log (both runs append to it):"
      grep -oE '^\[[0-9]+/[0-9]+\]' "$log" | uniq | tr '\n' ' '; echo; } | tee -a "$out/resume-summary.txt"
    ;;
static)
    src=$work/static-src
    rm -rf "$src" && mkdir -p "$work/unpack" && tar -xzf "$repo/.device/flash_attn-2.8.3.tar.gz" -C "$work/unpack"
    mv "$work/unpack"/flash_attn-2.8.3 "$src"
    python3 "$repo/tests/bench/sample_memory.py" "$out/static-mem.txt" "$src/build" &
    sampler=$!
    CUDA_HOME=/usr/local/cuda-13.0 PATH=/usr/local/cuda-13.0/bin:$venv/bin:$PATH \
    FLASH_ATTN_CUDA_ARCHS=90 NVCC_THREADS=4 MAX_JOBS=3 FLASH_ATTENTION_FORCE_BUILD=TRUE \
        timeout -s TERM "$seconds" "$venv/bin/python" -m pip wheel -v --no-build-isolation \
        --no-deps -w "$work/static-wheels" "$src" > "$out/static.txt" 2>&1 \
        || echo "stopped after ${seconds}s (exit $?)"
    kill $sampler; stop_compilers
    ;;
esac
