"""Longest first against ninja's own order, on the fake server, at the same memory budget.

    .venv/bin/python tests/bench/bench_longest_first.py [--scale 10]     (as root: a fake server)

flash-attn 2.8.3's 73 objects as the H200 build timed them (assets/buildtools/profiles/
flash-attn-2.8.3-sm90.ninja_log: 45-411 s), each divided by --scale, become a synthetic
extension: a setup.py that writes a build.ninja the way torch's cpp_extension does (one
statement per source under build/temp.*, sorted by name as setuptools sorts the sources) and
runs `ninja -v` from PATH. Each job is tests/bench/synthetic_job.py: its memory climbs to a
front-end peak and falls to a plateau, the shape and sizes of the H200 build's jobs as its
governor learned them (shared data: h200-flash-attn-2.8.3-sm90-governor.json, peaks 3.6 GiB
typical, 6.6 GiB largest, plateau 22% of the peak) scaled to a 0.5 GiB typical peak; it mostly
sleeps, so 16 of them run on two cores. `mlsetup apply` builds it twice on the fake server of
tests/harness.py, with `build.max_jobs = 16` (the H200's cores) and the H200's 48 GiB limit
scaled the same way, its governor starting from those lessons both times (kept beside the build
tree, as a second build on a machine finds them): once with the recipe's `longest_first =
false` (ninja's order), once as shipped (mlsetup's ninja orders by the recipe's profile,
balanced over the 16 job slots). The memory governor decides how many jobs run in both.

The compile time is from the jobs' own log, the first start to the last end. The bound is
max(sum of the job times / 16, the longest job), twice: of the times the jobs took here (the
RESULT: a loaded 2-core machine stretches them, and time a job spent frozen by the governor is
in them, so this is what the order alone leaves to gain) and of their nominal times. The two
orders alternate, --repeat times each; medians. Target: longest first at most 1.08x the bound.
The last line is `RESULT longest_first_ratio=... ninja_order_ratio=... jobs=73`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from uv import find_uv_bin

from steps.building.buildtools import TOOLS
from steps.core.sizes import GiB
from tests.bench.bench_governor import PROFILE, measured_shape, write_pool
from tests.harness import USER_UID, FakeServer

HERE = Path(__file__).resolve().parent
JOB = HERE / "synthetic_job.py"
RECORDED = TOOLS / "profiles" / "flash-attn-2.8.3-sm90.ninja_log"
SLOTS = 16
# What the H200 build's governor learned of its jobs (shared data: h200-flash-attn-2.8.3-sm90-
# governor.json): the median and largest peak, the median time to peak, the plateau.
H200_TYPICAL_PEAK_GIB = 3.64
H200_LARGEST_PEAK_GIB = 6.57
H200_RAMP_S = 31.1
H200_PLATEAU = 0.216
H200_LIMIT_GIB = 48.0

SETUP = '''"""The synthetic extension of tests/bench/bench_longest_first.py: jobs.json's objects,
compiled as torch's cpp_extension compiles (a build.ninja under build/temp.*, `ninja -v`)."""
import json, subprocess, sys
from pathlib import Path
from setuptools import setup

here = Path(__file__).resolve().parent
spec = json.loads((here / "jobs.json").read_text())
temp = here / "build" / f"temp.linux-x86_64-cpython-{sys.version_info[0]}{sys.version_info[1]}"
temp.mkdir(parents=True, exist_ok=True)
lines = [
    "rule cc",
    f"  command = {sys.executable} {spec['job']} $out $peak $ramp $fall $plateau "
    f"{spec['fraction']} {spec['log']} {spec['pool']} && touch $out",
]
for key, job in sorted(spec["jobs"].items()):  # setuptools sorts the sources by name
    source = here / key.replace(".o", ".cu")
    source.parent.mkdir(parents=True, exist_ok=True)
    if not source.exists():  # a newer source would make ninja build its object again
        source.write_text("// synthetic\\n")
    (temp / key).parent.mkdir(parents=True, exist_ok=True)
    lines += [f"build {temp / key}: cc {source}"] + [f"  {k} = {v}" for k, v in job.items()]
if "bdist_wheel" in sys.argv:  # as torch's build_ext: not while pip reads the metadata
    (temp / "build.ninja").write_text("\\n".join(lines) + "\\n")
    subprocess.run(["ninja", "-v"], cwd=temp, check=True)
setup(name="skewext", version="0.1.0", packages=["skewext"])
'''

RECIPE = """[skewext]
package = "skewext"
import_name = "skewext"
arch_variable = ""
arch_map = {{ "9.0" = "90" }}
threads_variable = ""
threads = 1
force_build_variable = "SKEWEXT_FORCE_BUILD"
peak_job_gib = {peak}
build_requires = ["setuptools", "ninja"]
prebuilt_cuda_majors = []
requirement = "{source}"
object_profile = "flash-attn-2.8.3-sm90.ninja_log"
{extra}
"""


def recorded_seconds() -> dict[str, float]:
    """Object key (below build/temp.*) -> seconds, from the shipped H200 log."""
    out = {}
    for line in RECORDED.read_text().splitlines():
        if line.startswith("#"):
            continue
        start, end, _, path, _ = line.split("\t")
        out[path.split("/temp.linux-x86_64-cpython-312/", 1)[1]] = (int(end) - int(start)) / 1000
    return out


def write_extension(where: Path, seconds: dict[str, float], args: argparse.Namespace) -> None:
    shape = measured_shape(PROFILE)
    rng = random.Random(7)
    jobs = {}
    for key, s in seconds.items():
        peak = args.peak_gib * rng.uniform(0.85, 1.15)
        if s == max(seconds.values()):  # the H200's largest job peak, scaled
            peak = args.peak_gib * H200_LARGEST_PEAK_GIB / H200_TYPICAL_PEAK_GIB
        jobs[key] = {
            "peak": f"{peak * 1024:.0f}",
            "ramp": f"{shape.ramp * s:.3f}",
            "fall": f"{shape.fall * s:.3f}",
            "plateau": f"{s * (1 - shape.ramp - shape.fall):.3f}",
        }
    (where / "skewext").mkdir(parents=True)
    (where / "skewext" / "__init__.py").write_text("")
    (where / "setup.py").write_text(SETUP)
    spec = {
        "job": str(JOB),
        "fraction": f"{H200_PLATEAU:.3f}",
        "log": str(where / "jobs.log"),
        "pool": str(args.pool),
        "jobs": jobs,
    }
    (where / "jobs.json").write_text(json.dumps(spec))
    for path in [where, *where.rglob("*")]:
        os.chown(path, USER_UID, USER_UID)


def seed_lessons(server: FakeServer, args: argparse.Namespace) -> None:
    """What the H200 governor learned, scaled, beside the build tree: both builds start from it."""
    scale = args.peak_gib / H200_TYPICAL_PEAK_GIB
    rng = random.Random(11)
    peaks = [int(args.peak_gib * rng.uniform(0.95, 1.05) * GiB) for _ in range(16)]
    lessons = {
        "largest_peak": int(H200_LARGEST_PEAK_GIB * scale * GiB),
        "peaks": peaks,
        "ramps": [H200_RAMP_S / args.scale] * 16,
        "plateau": H200_PLATEAU,
    }
    build = server.root / "var/cache/mlsetup/build"
    build.mkdir(parents=True, exist_ok=True)
    (build / "skewext-0.1.0.governor.json").write_text(json.dumps(lessons) + "\n")


@dataclass(frozen=True)
class Built:
    name: str
    compile_s: float
    jobs_s: float  # what the jobs took in all, frozen time included
    longest_s: float
    most_jobs: int

    @property
    def ratio(self) -> float:
        """The compile time over the bound of the jobs' times as they ran here."""
        return self.compile_s / max(self.jobs_s / SLOTS, self.longest_s)


def build(server: FakeServer, name: str, seconds: dict[str, float], args, extra: str) -> Built:
    """One apply of the synthetic extension into a venv of its own; its compile time (s)."""
    args.builds = getattr(args, "builds", 0) + 1
    source = server.base / "src" / f"skewext-{args.builds}"
    write_extension(source, seconds, args)
    recipe = RECIPE.format(peak=args.peak_gib, source=source, extra=extra)
    (server.recipes / "skewext.toml").write_text(recipe)
    shutil.rmtree(server.root / "var/cache/mlsetup/wheels", ignore_errors=True)
    seed_lessons(server, args)
    budget = H200_LIMIT_GIB * args.peak_gib / H200_TYPICAL_PEAK_GIB
    limit = f'[build]\nmax_jobs = {SLOTS}\nmemory_limit = "{budget:.2f}GiB"\n'
    server.write_answers(extension="skewext", venv=f"~/env-{args.builds}", extra=limit)
    run = server.mlsetup("apply", "--answers", str(server.answers), timeout=3600)
    if run.returncode != 0:
        raise SystemExit(f"{name}: apply exit {run.returncode}\n{run.stdout[-3000:]}")
    began: dict[str, float] = {}
    took: dict[str, float] = {}
    running = most = 0
    for line in (source / "jobs.log").read_text().splitlines():
        what, job, _, t = line.split()
        if what == "start":
            began[job] = float(t)
        else:
            took[job] = float(t) - began[job]
        running += 1 if what == "start" else -1
        most = max(most, running)
    if args.keep:  # the jobs' log, and what the governor decided
        shutil.copy(source / "jobs.log", args.keep / f"{args.builds}-{name}.log")
        run = server.root / "var/log/mlsetup/current"
        throttles = [
            line for line in (run / "events.jsonl").read_text().splitlines() if '"throttle"' in line
        ]
        (args.keep / f"{args.builds}-{name}-throttle.jsonl").write_text("\n".join(throttles) + "\n")
    compile_s = max(began[j] + took[j] for j in took) - min(began.values())
    built = Built(name, compile_s, sum(took.values()), max(took.values()), most)
    print(
        f"{name:<14} compile {compile_s:6.1f} s, {len(took)} jobs, at most {most} at once; "
        f"the jobs took {built.jobs_s:.0f} s in all (nominal {sum(seconds.values()):.0f}): "
        f"{built.ratio:.3f}x their bound"
    )
    shutil.rmtree(source)
    return built


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=10.0, help="recorded seconds per job second")
    ap.add_argument("--peak-gib", type=float, default=0.5, help="a typical job's peak RSS")
    ap.add_argument("--repeat", type=int, default=2, help="builds of each order")
    ap.add_argument("--keep", type=Path, help="a directory to keep the jobs' logs in")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("runs mlsetup apply as root on a fake server: run it as root")
    seconds = {k: v / args.scale for k, v in recorded_seconds().items()}
    bound = max(sum(seconds.values()) / SLOTS, max(seconds.values()))
    budget = H200_LIMIT_GIB * args.peak_gib / H200_TYPICAL_PEAK_GIB
    print(
        f"{len(seconds)} jobs of {min(seconds.values()):.1f}-{max(seconds.values()):.1f} s "
        f"(the H200's / {args.scale:g}), sum {sum(seconds.values()):.0f} s, bound on "
        f"{SLOTS} slots {bound:.1f} s; memory limit {budget:.2f} GiB (the H200's 48 GiB, "
        f"scaled as its 3.6 GiB jobs to {args.peak_gib:g} GiB); machine: {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    base = Path(tempfile.mkdtemp(prefix="bench-longest-first-", dir="/tmp"))
    base.chmod(0o755)
    pool_dir = Path(tempfile.mkdtemp(prefix="bench-longest-first-", dir="/dev/shm"))
    pool_dir.chmod(0o755)
    args.pool = pool_dir / "pool"
    try:
        write_pool(args.pool, int(args.peak_gib * 2.2 * GiB))
        os.chown(args.pool, USER_UID, USER_UID)  # the jobs map it as the venv's owner
        (base / "server").mkdir()
        server = FakeServer(base / "server", Path(find_uv_bin()))
        server.machine.driver_loaded("580.105.08")
        runs: dict[str, list[Built]] = {"ninja-order": [], "longest-first": []}
        for _ in range(args.repeat):  # alternating: a machine's load drifts
            runs["ninja-order"].append(
                build(server, "ninja-order", seconds, args, "longest_first = false")
            )
            runs["longest-first"].append(build(server, "longest-first", seconds, args, ""))
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(pool_dir, ignore_errors=True)
    ratio = {k: statistics.median(b.ratio for b in v) for k, v in runs.items()}
    for name, built in runs.items():
        times = ", ".join(f"{b.compile_s:.1f}" for b in built)
        nominal = statistics.median(b.compile_s for b in built) / bound
        print(
            f"{name:<14} {times} s: median {ratio[name]:.3f}x the bound of the jobs' times "
            f"here, {nominal:.3f}x the nominal bound {bound:.1f} s"
        )
    print(
        f"RESULT longest_first_ratio={ratio['longest-first']:.3f} "
        f"ninja_order_ratio={ratio['ninja-order']:.3f} jobs={len(seconds)}"
    )


if __name__ == "__main__":
    main()
