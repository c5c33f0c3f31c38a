"""How long `mlsetup probe --json` takes, as a whole process (target: under 1 s).

    .venv/bin/python tests/bench/bench_probe.py [runs]

Prints each run and the median; run it on the machine you want the figure for.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 11
    exe = shutil.which("mlsetup") or sys.argv[0]
    cmd = (
        [exe, "probe", "--json"]
        if shutil.which("mlsetup")
        else [sys.executable, "-m", "app.cli", "probe", "--json"]
    )
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    print(" ".join(f"{t * 1000:.0f}" for t in times), "ms")
    print(
        f"RESULT probe_median_ms={statistics.median(times) * 1000:.0f} "
        f"min_ms={min(times) * 1000:.0f} max_ms={max(times) * 1000:.0f} runs={runs}"
    )


if __name__ == "__main__":
    main()
