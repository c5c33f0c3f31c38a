#!/usr/bin/env bash
# What CI cannot show, run on the H200 GPU server (the `device` tool) from a copy of this repo,
# with .whl/ (pydantic, distro, uv wheels) and .device/flash_attn-2.8.3.tar.gz carried along.
#
# Issue 24 (builds at the hardware limit), one sequence, about 25 of the session's 30 device
# minutes; every figure and ninja log ends up in $OUT (figures.txt says what was met):
#
#   1. HERE, once, in the checkout the device tool sends (after the merge):
#                       tests/device/h200.sh wheelhouse
#      (.device/: mlsetup's wheel built from this checkout with every dependency for cp312
#      x86_64 from PyPI, the causal-conv1d 1.7.0 and flash-attn 2.8.3 sdists copied from
#      $SHARED_DATA, default /work/shared/data; 31 MB, under the 64 MiB a call carries)
#   2. device call 1:   run(kind="nvidia-h200", carry=[".device"], timeout_s=600,
#                           command="tests/device/h200.sh builds-start")
#      installs the wheel into /tmp/mlsetup-wheel (offline), builds causal-conv1d 1.7.0 with its
#      shipped recipe to its smoke test (mlsetup's nvcc keeps sm_90 only; at most 5 min, then
#      it is stopped and the sequence goes on), times 5 detached and 3 foreground second applies,
#      then starts flash-attn 2.8.3 at build.memory_limit = "48GiB" detached (setsid) and returns.
#   3. device calls 2+: run(kind="nvidia-h200", carry=[".device"], timeout_s=600,
#                           command="tests/device/h200.sh builds-poll")
#      BACK TO BACK (the machine goes back 30 s after a call, and the build with it): each
#      waits up to 9 min for the flash-attn apply and copies everything so far to $OUT; repeat
#      until it prints "builds: done" (expected: 2-3 polls, the compile about 17-18 min).
#   Then: figures.txt in the last call's files, and builds-results.tgz (the ninja logs as
#   *-ninja_log.txt, memory profiles, console outputs, reports) and builds-logs.tgz (event
#   streams, build logs) beside it; $OUT brings back at most 8 files of 16 MiB.
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
#   tests/device/h200.sh builds-start      issue 24's sequence, above (through the BUILT wheel)
#   tests/device/h200.sh builds-poll [S]   wait up to S seconds (540) for its flash-attn apply
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
shared_data=${SHARED_DATA:-/work/shared/data}  # the measured data and sdists, on this side

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
    # Every dependency of the wheel for the server's Python (cp312, x86_64), so that a checkout
    # without .whl/ still installs it offline; and the sdists the builds need (it reaches no
    # index).
    "$repo/.venv/bin/python" -m pip download -q --disable-pip-version-check \
        --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d "$wheelhouse" "$wheelhouse"/mlsetup-*.whl
    for sdist in causal_conv1d-1.7.0.tar.gz flash_attn-2.8.3.tar.gz; do
        [ -f "$repo/.device/$sdist" ] || cp "$shared_data/$sdist" "$repo/.device/$sdist"
    done
    ls -l "$wheelhouse" "$repo/.device"
    du -sh "$repo/.device"
    exit 0
fi

mkdir -p "$work/recipes" "$out"
export UV_OFFLINE=1 PYTHONUNBUFFERED=1 MLSETUP_EXTENSIONS_DIR=$work/recipes
installed=/tmp/mlsetup-wheel
if [ "$mode" = wheel-e2e ] || [ "$mode" = wizard ] || [ "$mode" = builds-start ]; then
    # the installed product alone: nothing of the checkout on sys.path, run from elsewhere
    rm -rf "$installed"
    python3 -m venv --without-pip "$installed"
    python3 -m pip --python "$installed/bin/python" install -q --no-index \
        --disable-pip-version-check --find-links "$repo/.whl" --find-links "$wheelhouse" \
        "$wheelhouse"/mlsetup-*.whl
    PATH=$installed/bin:$PATH
    cd "$work"
elif [ "$mode" = builds-poll ]; then
    PATH=$installed/bin:$PATH
    cd "$work"
else
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$repo"/.whl/*.whl
    export PYTHONPATH=/tmp/site:$repo PATH=/tmp/site/bin:$PATH
fi
sed "s#@SOURCE@#$repo/tests/fixtures/cudaext#" "$repo/tests/fixtures/cudaext.toml" \
    > "$work/recipes/cudaext.toml"
shipped_recipe() {  # $1: a recipe of assets/extensions.toml, as shipped but from the carried sdist
    python3 - "$repo" "$1" "$2" "$work/recipes/$1.toml" <<'PY'
import json, sys, tomllib
repo, name, sdist, dest = sys.argv[1:]
recipe = tomllib.load(open(f"{repo}/assets/extensions.toml", "rb"))[name]
recipe["requirement"] = f"{repo}/.device/{sdist}"
def value(v):
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list):  # [[name.variant]] tables too, as inline tables
        return "[" + ", ".join(value(x) for x in v) + "]"
    return json.dumps(v)
open(dest, "w").write(f"[{name}]\n" + "".join(f"{k} = {value(v)}\n" for k, v in recipe.items()))
PY
}
if [ "$mode" = wheel-e2e ]; then
    rm -f "$work/recipes/flash-attn.toml"  # only cudaext's recipe: an earlier mode's would stay
elif [ "$mode" != builds-poll ]; then
    # flash-attn's recipe as shipped, but from the carried sdist: the server reaches no index
    shipped_recipe flash-attn flash_attn-2.8.3.tar.gz
fi

answers() {  # answers for the image's venv and torch; $1: extensions tables; $2: the file
    cat > "${2:-$work/answers.toml}" <<TOML
version = 1
[venv]
path = "$venv"
python = "3.12"
[torch]
version = "==2.11.*"
cuda = "cu130"
[build]
memory_limit = "${memory_limit:-32GiB}"
[reboot]
policy = "never"
$1
TOML
}

case $mode in
wheel-e2e | wizard | builds-start | builds-poll) ;;
*) mlsetup() { python3 -m app.cli "$@"; } ;;
esac

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

# -- issue 24: builds-start / builds-poll (the header says how to run them) ----------------------
results=$work/builds  # on the server, across the calls of one session; copied to $OUT by each
tree_of() { echo "/var/cache/mlsetup/build/$1"; }

to_out() {  # the figures, and everything so far packed in two files: $OUT takes 8 of 16 MiB
    python3 "$repo/tests/device/builds_figures.py" "$results" > /dev/null 2>&1 \
        || echo "builds_figures.py failed: exit $?" | tee -a "$results/notes.txt"
    cp "$results/figures.txt" "$out/figures.txt" 2>/dev/null || true
    # the ninja logs, memory profiles, console outputs, reports (small) apart from the event
    # streams and build logs (large), so that the first always comes back
    tar -czf "$out/builds-results.tgz" -C "$results" --exclude='*-events.jsonl' \
        --exclude='*-build-log.txt' . 2>/dev/null || true
    (cd "$results" && find . -maxdepth 1 \( -name '*-events.jsonl' -o -name '*-build-log.txt' \) \
        -print0 | tar -czf "$out/builds-logs.tgz" --null -T -) 2>/dev/null || true
    ls -l "$out"
}

keep_run() {  # $1: a build's name; the run's events, its ninja logs and build log into $results
    local name=$1 tree
    tree=$(tree_of "$1-$2")
    cp /var/log/mlsetup/current/events.jsonl "$results/$name-events.jsonl" 2>/dev/null || true
    cp /var/log/mlsetup/current/extensions."$name".build.log "$results/$name-build-log.txt" \
        2>/dev/null || true
    cp "$tree"/src/build/temp.*/.ninja_log "$results/$name-ninja_log.txt" 2>/dev/null \
        || echo "$name: no .ninja_log in $tree" | tee -a "$results/notes.txt"
    cp "$tree.ninja_log" "$results/$name-kept-ninja_log.txt" 2>/dev/null || true
    cp "$tree.governor.json" "$results/$name-governor.json" 2>/dev/null || true
    cp "$tree"/src/build/temp.*/build.ninja "$results/$name-build.ninja" 2>/dev/null || true
    cp /var/lib/mlsetup/report.json "$results/$name-report.json" 2>/dev/null || true
}

end_engine() {  # the engine of the current run (its pid from its first event) and its compilers
    local pid
    pid=$(head -1 /var/log/mlsetup/current/events.jsonl 2>/dev/null \
        | python3 -c 'import json, sys; print(json.loads(sys.stdin.read())["pid"])' 2>/dev/null) \
        || true
    if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; fi
    stop_compilers
}

second_applies() {  # $1: answers; 5 detached (as users run it) and 3 --foreground, each timed
    local i began ended code how flag
    for i in 1 2 3 4 5 6 7 8; do
        how=detached flag=()
        if [ "$i" -gt 5 ]; then how=foreground flag=(--foreground); fi
        code=0
        began=$EPOCHREALTIME
        mlsetup apply --answers "$1" "${flag[@]}" > "$results/second-apply-$i.txt" 2>&1 || code=$?
        ended=$EPOCHREALTIME
        cp /var/log/mlsetup/current/events.jsonl "$results/second-apply-$i-events.jsonl" || true
        grep -q "plan: 0 step(s) to do" "$results/second-apply-$i.txt" \
            || echo "second apply $i (exit $code) ran something: second-apply-$i.txt" \
            | tee -a "$results/notes.txt"
        awk -v m="$how" -v b="$began" -v e="$ended" -v f="$results/second-apply-$i-events.jsonl" \
            'BEGIN { printf "%s %.3f %s\n", m, e - b, f }' >> "$results/second-apply.txt"
    done
    cat "$results/second-apply.txt"
}

builds_start() {
    set +e # from here every step says what failed and the sequence goes on: no second chance
    rm -rf "$results" /var/lib/mlsetup /var/log/mlsetup /var/cache/mlsetup
    mkdir -p "$results"
    uv pip uninstall --python "$venv/bin/python" causal-conv1d flash-attn > /dev/null 2>&1 || true
    {
        echo "mlsetup: $(command -v mlsetup), $(mlsetup --version)"
        echo "imported from: $("$installed/bin/python" -c 'import app; print(app.__file__)')"
        echo "nvcc: $(/usr/local/cuda-13.0/bin/nvcc --version | tail -2 | tr '\n' ' ')"
        echo "ninja: $("$venv/bin/ninja" --version), torch: $("$venv/bin/python" -c \
            'import torch; print(torch.__version__)' 2>/dev/null)"
        echo "cores: $(nproc), memory: $(free -g | awk '/Mem:/ {print $2}') GiB"
    } | tee "$results/machine.txt"
    export memory_limit=48GiB

    # 1. causal-conv1d 1.7.0, its shipped recipe: mlsetup's nvcc compiles sm_90 alone
    shipped_recipe causal-conv1d causal_conv1d-1.7.0.tar.gz
    answers $'[[extensions]]\nname = "causal-conv1d"\nversion = "1.7.0"\nsource = "build"' \
        "$work/answers-causal.toml"
    "$installed/bin/python" "$repo/tests/bench/sample_memory.py" "$results/causal-conv1d-mem.txt" \
        "$(tree_of causal-conv1d-1.7.0)/src/build" &
    local sampler=$! began=$SECONDS code=0
    timeout -s TERM 300 mlsetup apply --answers "$work/answers-causal.toml" \
        > "$results/causal-conv1d-apply.txt" 2>&1 || code=$?
    echo "causal-conv1d apply: exit $code after $((SECONDS - began)) s" | tee -a "$results/notes.txt"
    if [ "$code" = 124 ]; then end_engine; sleep 2; fi
    kill "$sampler" 2>/dev/null || true
    keep_run causal-conv1d 1.7.0
    grep -h "mlsetup nvcc\|mlsetup ninja" "$results/causal-conv1d-build-log.txt" | head -5 || true
    local so cuobjdump
    so=$(find "$venv/lib" -name 'causal_conv1d_cuda*.so' 2> /dev/null | head -1) || true
    cuobjdump=$(command -v cuobjdump || echo /usr/local/cuda-13.0/bin/cuobjdump)
    if [ -n "$so" ] && [ -x "$cuobjdump" ]; then  # the archs in the wheel's library: sm_90 alone
        "$cuobjdump" --list-elf "$so" > "$results/causal-conv1d-cuobjdump.txt" 2>&1 || true
        cat "$results/causal-conv1d-cuobjdump.txt"
    elif [ -n "$so" ]; then
        python3 "$repo/tests/device/builds_figures.py" --archs "$so" \
            | tee "$results/causal-conv1d-cuobjdump.txt" || true
    fi

    # 2. the second apply, everything satisfied (without causal-conv1d if its build failed)
    if [ "$code" = 0 ]; then
        second_applies "$work/answers-causal.toml"
    else
        answers "" "$work/answers-none.toml"
        second_applies "$work/answers-none.toml"
    fi

    # 3. flash-attn 2.8.3 at 48 GiB, detached: builds-poll follows it
    answers $'[[extensions]]\nname = "flash-attn"\nversion = "2.8.3"\nsource = "build"' \
        "$work/answers-flash-attn.toml"
    # each in a session of its own, to outlive this call; each writes its own pid (whether
    # setsid forks or not), then becomes the program
    setsid bash -c 'echo $$ > "$0"; exec "$@"' "$results/flash-attn-sampler.pid" \
        "$installed/bin/python" "$repo/tests/bench/sample_memory.py" \
        "$results/flash-attn-mem.txt" "$(tree_of flash-attn-2.8.3)/src/build" \
        > /dev/null 2>&1 < /dev/null &
    date +%s > "$results/flash-attn-started"
    setsid bash -c 'echo $$ > "$0"; exec "$@"' "$results/flash-attn-viewer.pid" \
        "$installed/bin/mlsetup" apply --answers "$work/answers-flash-attn.toml" \
        > "$results/flash-attn-apply.txt" 2>&1 < /dev/null &
    sleep 5
    head -20 "$results/flash-attn-apply.txt"
    to_out
    echo "builds: flash-attn started; now run tests/device/h200.sh builds-poll, back to back"
}

builds_poll() { # $1: how long to wait, in seconds
    set +e
    if [ ! -f "$results/flash-attn-viewer.pid" ]; then
        echo "builds: no flash-attn run on this machine (was it given back between calls?)"
        exit 1
    fi
    local viewer deadline=$((SECONDS + $1)) started
    viewer=$(cat "$results/flash-attn-viewer.pid")
    started=$(cat "$results/flash-attn-started")
    if ! kill -0 "$viewer" 2>/dev/null && ! grep -q '"kind":"end"' \
        /var/log/mlsetup/current/events.jsonl 2>/dev/null; then
        echo "builds: the flash-attn viewer (pid $viewer) is gone and its run has no end:" \
            "the engine may still run; waiting on the apply lock's holder instead" \
            | tee -a "$results/notes.txt"
    fi
    while { kill -0 "$viewer" 2>/dev/null || ! grep -q '"kind":"end"' \
        /var/log/mlsetup/current/events.jsonl 2>/dev/null; } && [ "$SECONDS" -lt "$deadline" ]; do
        sleep 15
        echo "$(($(date +%s) - started)) s: $(grep -oE '\[[0-9]+/[0-9]+\]' \
            /var/log/mlsetup/current/extensions.flash-attn.build.log 2>/dev/null | tail -1)" \
            "$(tail -1 "$results/flash-attn-mem.txt" 2>/dev/null | awk '{printf "used %.1f GiB", $3 / 2^20}')"
    done
    if ! grep -q '"kind":"end"' /var/log/mlsetup/current/events.jsonl 2>/dev/null; then
        tail -3 "$results/flash-attn-apply.txt"
        to_out
        echo "builds: still compiling after $(($(date +%s) - started)) s; run builds-poll again now"
        return
    fi
    kill "$(cat "$results/flash-attn-sampler.pid")" 2>/dev/null || true
    keep_run flash-attn 2.8.3
    tail -15 "$results/flash-attn-apply.txt"
    to_out
    cat "$results/figures.txt"
    echo "builds: done"
}

case $mode in
builds-start) builds_start ;;
builds-poll) builds_poll "${2:-540}" ;;
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
