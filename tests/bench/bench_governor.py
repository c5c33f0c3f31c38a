"""The memory governor against every static MAX_JOBS, on one real ninja build of synthetic jobs.

    .venv/bin/python tests/bench/bench_governor.py [--jobs 73] [--budget-gib 6 8 10]

Each job is a real process (tests/bench/synthetic_job.py) whose resident memory follows the shape
measured on the H200 server (tests/bench/data/flash-attn-2.8.3-sm90-16jobs-mem.txt: a front-end
peak, then a lower plateau), scaled to a small machine: a peak of about 1 GiB per job and a few
seconds per job. The same graph is built with `ninja -j N` for N = 1..16 (no governor) and under
the governor (ninja without -j, on its jobserver). For each: makespan, the peak total RSS of the
job tree (ninja and everything under it, sampled 20 times a second, independently of the
governor), and how far that went over the budget. Targets: the governor never goes over, and its
makespan is at most 0.75x that of the fastest static N that stays under.

Which static N is the fastest under a budget is a matter of luck when its peak lands near the
budget, so the governor is measured against several budgets (the static runs do not depend on
it), several times each, and the result is the worst of them: the smallest speedup, the largest
breach. Takes about 17 minutes on 2 cores. The last line is
`RESULT speedup=... over_budget_MiB=... jobs=...`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from steps.building.governor import Governor
from steps.core.sizes import GiB

HERE = Path(__file__).resolve().parent
PROFILE = HERE / "data" / "flash-attn-2.8.3-sm90-16jobs-mem.txt"
JOB = HERE / "synthetic_job.py"
NINJA = Path(sys.executable).parent / "ninja"

# From the 16-job build in docs/design.md: 30 of 73 objects in 530 s, one job ~16 * 530 / 30 s.
REAL_JOB_S = 16 * 530 / 30
REAL_JOBS = 16
REAL_RAMP_GUESS_S = 40.0  # the governor's default first guess at the time to a job's peak
# The governor's first guess at a job's peak, over the job's real peak: flash-attn's recipe says
# 6.5 GiB, what one job reached on the H200 (6.3-6.9 GiB, docs/benchmarks.md).
RECIPE_PEAK_RATIO = 1.0
SAMPLE_S = 0.05


@dataclass(frozen=True)
class Shape:
    """One job's memory over its life, as fractions: of its duration and of its peak."""

    ramp: float  # start → peak
    fall: float  # peak → plateau
    plateau_ratio: float  # plateau RSS / peak RSS


def measured_shape(path: Path) -> Shape:
    """The per-job shape from the H200 profile (`unix_time MemAvailable_kB cicc ptxas`)."""
    rows = [tuple(int(x) for x in line.split()) for line in path.read_text().splitlines()]
    base = rows[0][1]
    used = [(t, (base - avail) * 1024) for t, avail, _, _ in rows]
    start = next(t for t, _, cicc, _ in rows if cicc > 0)  # all 16 front ends begin together
    peak_t, peak = max(used, key=lambda u: u[1])
    # After the synchronized peak, the plateau: the median of everything from a minute later.
    plateau = statistics.median(u for t, u in used if t > peak_t + 60)
    settle = next(t for t, u in used if t > peak_t and u <= plateau)
    return Shape(
        ramp=(peak_t - start) / REAL_JOB_S,
        fall=(settle - peak_t) / REAL_JOB_S,
        plateau_ratio=plateau / peak,
    )


def write_graph(
    root: Path, jobs: int, shape: Shape, peak_mib: float, job_s: float, pool: Path
) -> None:
    """build.ninja with `jobs` independent synthetic compiles, peaks varied ±15% (seeded)."""
    rng = random.Random(7)
    lines = [
        "rule cc",
        f"  command = {sys.executable} {JOB} $out $peak {shape.ramp * job_s:.3f} "
        f"{shape.fall * job_s:.3f} $plateau {shape.plateau_ratio:.3f} {root / 'jobs.log'} "
        f"{pool} && touch $out",
        "",
    ]
    plateau_s = job_s * (1 - shape.ramp - shape.fall)
    for i in range(jobs):
        peak = peak_mib * rng.uniform(0.85, 1.15)
        lines += [f"build obj{i:02d}.o: cc", f"  peak = {peak:.0f}", f"  plateau = {plateau_s:.3f}"]
    (root / "build.ninja").write_text("\n".join(lines) + "\n")


def write_pool(path: Path, size: int) -> None:
    """The tmpfs file whose pages the jobs map (see synthetic_job.py), written once."""
    block = b"\1" * 2**20
    with path.open("wb") as f:
        for _ in range(size // len(block)):
            f.write(block)


class TreeSampler(threading.Thread):
    """Peak total RSS of a process and all its descendants, sampled every SAMPLE_S."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(SAMPLE_S):
            try:
                root = psutil.Process(self.pid)
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            total = 0
            for p in procs:
                with contextlib.suppress(psutil.NoSuchProcess):
                    total += p.memory_info().rss
            self.peak = max(self.peak, total)


@dataclass(frozen=True)
class Run:
    label: str
    makespan: float
    peak: int
    decisions: int = 0


def build(root: Path, label: str, jobs: int | None, governor: Governor | None) -> Run:
    for f in root.glob("obj*.o"):
        f.unlink()
    for f in (".ninja_log", ".ninja_deps", "jobs.log"):
        (root / f).unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAX_JOBS")}
    argv = [str(NINJA), "-C", str(root)]
    if governor is not None:
        env |= governor.env()
        governor.start()
    else:
        argv += ["-j", str(jobs)]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
    sampler = TreeSampler(proc.pid)
    sampler.start()
    if governor is not None:
        governor.attach(proc.pid)
    assert proc.stdout is not None
    for line in proc.stdout:
        if governor is not None:
            governor.feed_line(line)
    rc = proc.wait()
    makespan = time.monotonic() - t0
    sampler.done.set()
    sampler.join()
    decisions = governor.stop().decisions if governor is not None else 0
    if rc != 0:
        raise SystemExit(f"{label}: ninja exited {rc}")
    return Run(label, makespan, sampler.peak, decisions)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # flash-attn 2.8.3's sm_90 build compiles 73 objects (ninja's [k/73] on the H200 server)
    ap.add_argument("--jobs", type=int, default=73)
    # A job's peak is 1 GiB here, so these budgets hold 6-10 peaks at once, as the H200's
    # 32 GiB held about 5 of flash-attn's 6.5 GiB: memory, not the 16-job ceiling, binds.
    ap.add_argument("--budget-gib", type=float, nargs="+", default=[6.0, 8.0, 10.0])
    ap.add_argument("--peak-gib", type=float, default=1.0, help="one job's peak RSS")
    ap.add_argument("--job-s", type=float, default=3.0, help="one job's duration")
    ap.add_argument("--max-static", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3, help="governed runs per budget")
    args = ap.parse_args()

    shape = measured_shape(PROFILE)
    scale = args.job_s / REAL_JOB_S
    budgets = ", ".join(f"{b:.1f}" for b in args.budget_gib)
    print(
        f"shape from {PROFILE.name}: ramp {shape.ramp:.0%}, fall {shape.fall:.0%} of a job, "
        f"plateau {shape.plateau_ratio:.0%} of the peak; here: {args.jobs} jobs of "
        f"{args.job_s:.1f} s, peak {args.peak_gib:.2f} GiB ±15%, budgets {budgets} GiB"
    )
    print(f"machine: {os.cpu_count()} cores, {psutil.virtual_memory().total / GiB:.1f} GiB RAM")
    root = Path(tempfile.mkdtemp(prefix="bench-governor-"))
    pool = Path(tempfile.mkdtemp(prefix="bench-governor-", dir="/dev/shm")) / "pool"
    try:
        write_pool(pool, int(args.peak_gib * 1.2 * GiB))
        write_graph(root, args.jobs, shape, args.peak_gib * 1024, args.job_s, pool)
        statics = [build(root, f"static -j {n}", n, None) for n in range(1, args.max_static + 1)]
        governed = [
            (
                budget,
                build(
                    root,
                    f"governor {budget:g}",
                    None,
                    Governor(
                        ceiling=args.max_static,
                        budget_bytes=int(budget * GiB),
                        reserve_bytes=2 * GiB,
                        # The governor's own first guesses, scaled like the jobs: the recipe's
                        # peak per job and its default time-to-peak.
                        peak_job_bytes=int(args.peak_gib * RECIPE_PEAK_RATIO * GiB),
                        ramp_s=REAL_RAMP_GUESS_S * scale,
                    ),
                ),
            )
            for budget in args.budget_gib
            for _ in range(args.repeat)
        ]
    finally:
        shutil.rmtree(root)
        shutil.rmtree(pool.parent)

    def over(run: Run, budget_gib: float) -> float:
        return max(0, run.peak - budget_gib * GiB) / 2**20

    print(f"{'run':<14} {'makespan_s':>10} {'peak_rss_GiB':>12}")
    for run in [*statics, *(run for _, run in governed)]:
        print(f"{run.label:<14} {run.makespan:>10.2f} {run.peak / GiB:>12.2f}")
    speedups, breaches = [], []
    for budget, run in governed:
        under = [r for r in statics if over(r, budget) == 0]
        best = min(under, key=lambda r: r.makespan)
        speedups.append(best.makespan / run.makespan)
        breaches.append(over(run, budget))
        print(
            f"budget {budget:4.1f} GiB: fastest static under it {best.label} "
            f"({best.makespan:.2f} s); governor {run.makespan:.2f} s = "
            f"{run.makespan / best.makespan:.2f}x, peak {run.peak / GiB:.2f} GiB, "
            f"over by {breaches[-1]:.0f} MiB, {run.decisions} decisions"
        )
    print(
        f"RESULT speedup={min(speedups):.2f} over_budget_MiB={max(breaches):.0f} jobs={args.jobs}"
    )


if __name__ == "__main__":
    main()
