"""A stand-in compile job: resident memory shaped like one nvcc job of the flash-attn build.

    python synthetic_job.py NAME PEAK_MIB RAMP_S FALL_S PLATEAU_S PLATEAU_FRACTION LOG [POOL]

It grows to PEAK_MIB over RAMP_S (the compiler front end), gives memory back down to
PLATEAU_FRACTION of the peak over FALL_S, holds that for PLATEAU_S, and exits. It mostly sleeps,
so many of them can run on two cores. Progress is counted in sleep steps, not wall-clock
deadlines, so a job stopped with SIGSTOP resumes where it was, as a real compiler does. After
the peak, a step that woke late (a loaded machine) is made up by the next, up to LATE_CAP_S, so
that the job still takes about the time asked for. It appends `start NAME PID T` and
`end NAME PID T` (T = time.time()) to LOG.

Memory is private anonymous pages by default. With POOL (a file on tmpfs, at least PEAK_MIB long,
written once beforehand) the job maps that file's pages instead: each mapped page counts in the
job's RSS exactly as a private one would, but mapping it costs ~10x less CPU than having the
kernel zero fresh pages (~0.6 s per GiB on the 2-core dev VM), which is what lets a benchmark move
tens of GiB through two cores; and as the jobs share the pages, a static run far over the budget
cannot exhaust the machine.
"""

from __future__ import annotations

import mmap
import os
import sys
import time

CHUNK = 16 * 2**20
PAGE = mmap.PAGESIZE
STEP_S = 0.02
LATE_CAP_S = 0.1  # lateness made up; more is a stop (the governor's are 50 ms and longer)


class Pace:
    """Sleep steps that together take the time asked for, a stop excepted (see above)."""

    def __init__(self) -> None:
        self.mark = time.monotonic()
        self.late = 0.0

    def step(self, seconds: float) -> None:
        time.sleep(max(seconds - self.late, 0.0))
        now = time.monotonic()
        self.late = min(max(self.late + (now - self.mark) - seconds, 0.0), LATE_CAP_S)
        self.mark = now


def _log(path: str, what: str, name: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{what} {name} {os.getpid()} {time.time():.6f}\n".encode())
    finally:
        os.close(fd)


def _resident_chunk(index: int, pool: int | None) -> mmap.mmap:
    if pool is not None:
        # MAP_POPULATE maps every page of the chunk at once: resident in this process.
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0x8000)
        return mmap.mmap(pool, CHUNK, flags=flags, offset=index * CHUNK)
    # An anonymous mapping of its own, so that closing it really returns the memory (a large
    # malloc'd buffer may stay in the heap after free).
    m = mmap.mmap(-1, CHUNK)
    for offset in range(0, CHUNK, PAGE):
        m[offset] = 1  # touch every page: it becomes resident
    return m


def _paced(count: int, seconds: float) -> float:
    """Sleep per step so that `count` steps take about `seconds` of running time."""
    return max(seconds / max(count, 1), 0.0)


def main() -> None:
    name, peak_mib, ramp_s, fall_s, plateau_s, fraction, log = sys.argv[1:8]
    pool = os.open(sys.argv[8], os.O_RDWR) if len(sys.argv) > 8 else None
    peak_chunks = max(1, int(float(peak_mib) * 2**20) // CHUNK)
    plateau_chunks = int(peak_chunks * float(fraction))
    _log(log, "start", name)
    held: list[mmap.mmap] = []
    pause = _paced(peak_chunks, float(ramp_s))
    for index in range(peak_chunks):  # whole steps: each size, the peak too, is held a step
        held.append(_resident_chunk(index, pool))
        time.sleep(pause)
    pace = Pace()
    pause = _paced(peak_chunks - plateau_chunks, float(fall_s))
    while len(held) > plateau_chunks:
        held.pop().close()
        pace.step(pause)
    for _ in range(max(1, round(float(plateau_s) / STEP_S))):
        pace.step(STEP_S)
    _log(log, "end", name)


if __name__ == "__main__":
    main()
