#!/usr/bin/env bash
# The one-stack acceptance on the H200 server (no index reachable): the image's torch
# 2.11.0+cu130 (/opt/torch/.venv) re-packed into a local index with the carried wheels
# (.device/stack/*.whl: torchvision 0.26.0 cp312, pillow 13.0.0 cp312, numpy if the image has
# none), then `mlsetup apply` with torch.packages = ["torchvision"] into a new venv: the plan and
# the report show the lock, torch stays 2.11.0+cu130, and the stack smoke test runs on the GPU.
# Carried too, as for h200.sh: .whl/ (pydantic, distro, uv wheels).
#
#   tests/device/stack_h200.sh          writes plan, apply, second apply, report and lock to $OUT
set -euo pipefail
shopt -s nullglob  # .device/stack/ may carry nothing: the image has torchvision already
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT:-/tmp/out}
work=/tmp/mlsetup-stack
index=$work/index
mkdir -p "$work" "$out"

python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$repo"/.whl/*.whl
export PYTHONPATH=/tmp/site:$repo PATH=/tmp/site/bin:$PATH UV_OFFLINE=1 PYTHONUNBUFFERED=1
export UV_DEFAULT_INDEX=$index  # everything, not only the torch family, from the local index

[ -d "$index" ] || /usr/bin/time -f "index built in %e s" \
    python3 "$repo/tests/device/venv_index.py" /opt/torch/.venv "$index" "$repo"/.device/stack/*.whl

cat > "$work/answers.toml" <<TOML
version = 1
[venv]
path = "$work/venv"
[torch]
index_url = "$index"
packages = ["torchvision"]
[reboot]
policy = "never"
TOML

mlsetup() { python3 -m app.cli "$@"; }
mlsetup plan --answers "$work/answers.toml" | tee "$out/stack-plan.txt"
/usr/bin/time -f "apply wall %e s" python3 -m app.cli apply --answers "$work/answers.toml" --foreground \
    2>&1 | tee "$out/stack-apply.txt"
cp /var/lib/mlsetup/report.json "$out/stack-report.json"
cp /var/lib/mlsetup/stack.lock "$out/stack.lock"
/usr/bin/time -f "second apply wall %e s" python3 -m app.cli apply --answers "$work/answers.toml" \
    --foreground 2>&1 | tee "$out/stack-second-apply.txt"
"$work/venv/bin/python" -c "import torch, torchvision; print(torch.__version__, torchvision.__version__)" \
    | tee "$out/stack-versions.txt"
# the smoke test by hand as well: the GPU, then gloo on 2 CPU processes
"$work/venv/bin/python" "$repo/assets/smoke_stack.py" --torch 2.11.0+cu130 --gpus 1 \
    | tee "$out/stack-smoke-gpu.txt"
"$work/venv/bin/python" "$repo/assets/smoke_stack.py" --cpu | tee "$out/stack-smoke-cpu.txt"
