#!/usr/bin/env bash
# How causal-conv1d 1.7.0's longest object (csrc/causal_conv1d_bwd.cu for sm_90, torch 2.11.0's
# exact flags as its build.ninja has them) compiles with nvcc 13's --split-compile at each
# thread count given, alone on the H200 server, one after another: wall and CPU seconds, the
# largest RSS of one process, and nvcc's own phase times (--time), into $OUT/split-N.csv and
# $OUT/split-scaling.txt. From the checkout the device tool sends, with the sdist carried:
#   run(kind="nvidia-h200", carry=[".device"], command="tests/device/split_scaling.sh 16 12")
# (.device/causal_conv1d-1.7.0.tar.gz: tests/device/h200.sh wheelhouse copies it there)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT:-/tmp/out}
cuda=/usr/local/cuda-13.0
torch=${TORCH_DIR:-/opt/torch/.venv/lib/python3.12/site-packages/torch}
python_include=${PYTHON_INCLUDE:-/usr/include/python3.12}
source=${SOURCE:-csrc/causal_conv1d_bwd.cu}  # another file: to try the script elsewhere
src=/tmp/split-scaling
mkdir -p "$out"
rm -rf "$src" && mkdir -p "$src"
tar -xzf "$repo/.device/causal_conv1d-1.7.0.tar.gz" -C "$src"
cd "$src/causal_conv1d-1.7.0"
flags=(
    -Icsrc -I"$torch/include" -I"$torch/include/torch/csrc/api/include" -I"$cuda/include"
    -I"$python_include"
    -D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_BFLOAT16_CONVERSIONS__
    -D__CUDA_NO_HALF2_OPERATORS__ --expt-relaxed-constexpr --compiler-options -fPIC -O3
    -U__CUDA_NO_HALF_OPERATORS__ -U__CUDA_NO_HALF_CONVERSIONS__ -U__CUDA_NO_BFLOAT16_OPERATORS__
    -U__CUDA_NO_BFLOAT16_CONVERSIONS__ -U__CUDA_NO_BFLOAT162_OPERATORS__
    -U__CUDA_NO_BFLOAT162_CONVERSIONS__ --expt-extended-lambda --use_fast_math
    --ptxas-options=-v -lineinfo -gencode arch=compute_90,code=sm_90
    -DTORCH_API_INCLUDE_EXTENSION_H -DTORCH_EXTENSION_NAME=causal_conv1d_cuda -std=c++17
)
echo "cores: $(nproc); nvcc: $("$cuda/bin/nvcc" --version | tail -1)" | tee "$out/split-scaling.txt"
for n in "$@"; do
    python3 - "$n" "$out" "$source" "$cuda/bin/nvcc" "${flags[@]}" <<'PY' | tee -a "$out/split-scaling.txt"
import resource, subprocess, sys, time
n, out, source, nvcc, *flags = sys.argv[1:]
argv = [nvcc, *flags, f"--split-compile={n}", "--time", f"{out}/split-{n}.csv",
        "-c", source, "-o", f"/tmp/split-{n}.o"]
began = time.monotonic()
done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
wall = time.monotonic() - began
use = resource.getrusage(resource.RUSAGE_CHILDREN)
phases = {}
for line in open(f"{out}/split-{n}.csv").read().splitlines()[1:]:
    fields = [f.strip() for f in line.split(",")]
    phases[fields[1]] = phases.get(fields[1], 0.0) + float(fields[6]) / 1000
top = ", ".join(f"{k} {v:.1f} s" for k, v in sorted(phases.items(), key=lambda kv: -kv[1])[:4])
print(f"--split-compile={n}: exit {done.returncode}, wall {wall:.1f} s, CPU "
      f"{use.ru_utime + use.ru_stime:.1f} s, largest process {use.ru_maxrss / 2**20:.2f} GiB; {top}")
PY
done
