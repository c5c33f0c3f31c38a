"""The governed build as the memory governor samples it: the machine's memory (`Reading`) and
the build's process tree, whose jobs are ninja's children (`Job`), each in a process group of its
own, so that one signal parks, freezes or continues a whole job."""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

import psutil

# 20 samples a second: a compiler front end grows by ~0.1 GiB/s on the H200 server, the
# benchmark's scaled jobs by ~2 GiB/s; a look costs well under a millisecond per process.
SAMPLE_INTERVAL_S = 0.05


@dataclass(frozen=True)
class Reading:
    """One sample of the machine and of the build's process tree."""

    t: float
    total: int
    available: int
    swap_used: int
    psi_some_avg10: float | None
    tree_rss: int

    @property
    def ram_pct(self) -> int:
        return round(100 * (self.total - self.available) / self.total)


@dataclass
class Job:
    """One ninja edge: a direct child of ninja and its subtree (one process group)."""

    pid: int
    seen: float
    rss: int = 0
    growth: int = 0  # how much its RSS grew since the previous sample
    peak: int = 0
    ran_to_peak_s: float = 0.0  # how long it had run when it reached its peak
    admitted: float | None = None  # None while parked, before it first runs
    stopped: bool = False  # parked or frozen: SIGSTOP sent
    frozen_at: float | None = None  # when the hard stop froze it, while it is frozen
    frozen_s: float = 0.0  # time spent frozen since it was let go, thawed spells only
    past_peak: bool = False

    @property
    def running(self) -> bool:
        return self.admitted is not None and not self.stopped

    def ran_s(self, now: float) -> float:
        """How long it has run since it was let go: a frozen job does not progress, so its
        frozen time counts neither in its time to peak nor in where it is on its shape."""
        if self.admitted is None:
            return 0.0
        frozen = self.frozen_s + (now - self.frozen_at if self.frozen_at is not None else 0.0)
        return now - self.admitted - frozen

    def park(self) -> None:
        """Stop a job that has not run yet, before it has allocated much."""
        signal_group(self.pid, signal.SIGSTOP)
        self.stopped = True

    def freeze(self, now: float) -> None:
        """Stop a running job (the hard stop); its frozen time does not count as running."""
        signal_group(self.pid, signal.SIGSTOP)
        self.stopped, self.frozen_at = True, now

    def resume(self, now: float) -> None:
        """Let a parked job go for the first time, or thaw a frozen one."""
        signal_group(self.pid, signal.SIGCONT)
        self.stopped = False
        if self.admitted is None:
            self.admitted = now
        elif self.frozen_at is not None:
            self.frozen_s += now - self.frozen_at
            self.frozen_at = None


@dataclass(frozen=True)
class Scan:
    """What one look at the build's process tree found."""

    tree_rss: int  # the whole tree's RSS, ninja and pip included
    ended: list[Job]  # jobs gone since the previous look
    measured: list[Job]  # the live jobs, their RSS updated; new ones already parked


class BuildTree:
    """The process tree under the build command (`root`: pip, setup.py or ninja) and its jobs.

    Every new job is parked the moment it is first seen; the governor's decisions let it go."""

    def __init__(self) -> None:
        self.root: int | None = None
        self.jobs: dict[int, Job] = {}
        self._started_at: dict[int, float] = {}  # pid -> its start time, against pid reuse

    def scan(self, now: float) -> Scan:
        """Total RSS of the build tree; refreshes the jobs (ninja's children) and their RSS."""
        if self.root is None:
            return Scan(0, [], [])
        parent, name, rss = self._processes(self.root)
        job_rss: dict[int, int] = {}
        for pid in rss:
            job = _job_of(pid, parent, name)
            if job is not None:
                job_rss[job] = job_rss.get(job, 0) + rss[pid]
        ended = [self.jobs.pop(pid) for pid in list(self.jobs) if pid not in job_rss]
        measured = [self._measure(pid, total, now) for pid, total in job_rss.items()]
        return Scan(sum(rss.values()), ended, measured)

    def stopped(self) -> dict[int, float]:
        """The job groups stopped now (parked or frozen), each with its start time (0: unknown)."""
        return {pid: self._started_at.get(pid, 0.0) for pid, j in self.jobs.items() if j.stopped}

    def continue_all(self) -> None:
        """Continue every stopped job: the governor lets go of the build."""
        for job in self.jobs.values():
            if job.stopped:
                signal_group(job.pid, signal.SIGCONT)
                job.stopped = False

    def _measure(self, pid: int, total: int, now: float) -> Job:
        job = self.jobs.get(pid)
        if job is None:
            job = self.jobs[pid] = Job(pid=pid, seen=now)
            with contextlib.suppress(psutil.Error):
                self._started_at[pid] = psutil.Process(pid).create_time()
            job.park()  # at once; the governor lets it go when its turn comes
        job.growth = max(total - job.rss, 0) if job.running else 0
        job.rss = total
        if total > job.peak:
            job.peak, job.ran_to_peak_s = total, job.ran_s(now)
        return job

    @staticmethod
    def _processes(root_pid: int) -> tuple[dict[int, int], dict[int, str], dict[int, int]]:
        """Each process of the tree under `root_pid`: its parent, its name and its RSS."""
        try:
            root = psutil.Process(root_pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            procs = []
        parent: dict[int, int] = {}
        name: dict[int, str] = {}
        rss: dict[int, int] = {}
        for p in procs:
            try:
                with p.oneshot():
                    parent[p.pid], name[p.pid], rss[p.pid] = p.ppid(), p.name(), p.memory_info().rss
            except psutil.NoSuchProcess:
                continue  # ended between the listing and the read
        return parent, name, rss


def _job_of(pid: int, parent: dict[int, int], name: dict[int, str]) -> int | None:
    """The ninja child `pid` belongs to (itself included), or None outside any job."""
    while pid in parent:
        up = parent[pid]
        if name.get(up) == "ninja" and name.get(pid) != "ninja":
            return pid
        pid = up
    return None


def sample(now: float, tree: BuildTree) -> tuple[Reading, Scan]:
    """The machine's memory and the build tree, now."""
    vm = psutil.virtual_memory()
    scan = tree.scan(now)
    reading = Reading(
        t=now,
        total=vm.total,
        available=vm.available,
        swap_used=psutil.swap_memory().used,
        psi_some_avg10=psi_some_avg10(),
        tree_rss=scan.tree_rss,
    )
    return reading, scan


def psi_some_avg10() -> float | None:
    """The kernel's memory pressure (PSI `some avg10`, %); None on a kernel without PSI."""
    try:
        first = Path("/proc/pressure/memory").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    fields_ = dict(part.split("=", 1) for part in first.split()[1:])
    return float(fields_["avg10"])


def signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the process group `pid` leads, else the process alone. ninja starts each job in
    its own process group: one signal reaches the whole subtree, including children forked a
    moment ago."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
