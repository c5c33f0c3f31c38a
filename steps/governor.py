"""The live memory governor for CUDA-extension compiles.

A static `MAX_JOBS` must be sized for the moment every job is in the compiler front end at once:
the real flash-attn 2.8.3 build (16 jobs, H200 server) peaked at 68 GiB in its first minute and
then sat at 20-37 GiB (DESIGN.md). The governor instead decides, live, how many jobs run:

- It is a GNU make jobserver. ninja >= 1.13 run without `-j` under
  `MAKEFLAGS=--jobserver-auth=fifo:PATH` starts a job only while it holds a token from that FIFO,
  so the tokens the governor writes are a hard ceiling on how many jobs ninja starts.
- ninja reads tokens only when it starts and each time a job ends, and then takes every token
  there is, so tokens alone cannot stagger starts. Each new job is therefore *parked* (SIGSTOP
  on its process group, before it has allocated much) and let go one at a time, only when the
  memory its peak will need is free and a stagger interval has passed, so jobs do not all peak
  together.
- A job is let go when the worst moment of the next time-to-peak fits the budget, as the learned
  shape predicts it (climb to the usual peak, fall to the learned plateau, then stay): staggered
  jobs peak one after another, and the plateau after the front end is what lets more jobs run
  than a static count.
- What the jobs taught (their peaks, time to peak and plateau) is kept in a file beside the build
  tree, so a build resumed after a kill, or retried after an OOM, starts from what this very
  build showed instead of the recipe's guess and does not start more jobs than fit.
- Hard stop: should jobs outgrow that estimate and the memory left under the budget, less what
  the growing jobs will add by the next sample at their current pace, fall into the guard band,
  the newest growing jobs are frozen (SIGSTOP, whole subtree) and thawed when memory recovers.
  The last running job is never frozen, and `stop()` thaws everything.

A build runs under it like this (`steps/engine.py` does it through the runner):

    with Governor(sink, ceiling=16, reserve_bytes=reserve, peak_job_bytes=int(4.5 * GiB)) as gov:
        proc = subprocess.Popen(argv, env={**env, **gov.env()}, stdout=PIPE, text=True)
        gov.attach(proc.pid)
        for line in proc.stdout:
            gov.feed_line(line)
        proc.wait()
    summary = gov.summary()
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType

import psutil

from steps.events import BuildProgress, Event, EventSink, MemorySample, Throttle
from steps.safefs import open_dir, read_bounded, trusted_dir
from steps.state import write_atomic

GiB = 2**30

# torch.utils.cpp_extension turns a digits-only MAX_JOBS into `ninja -j N`, and flash-attn 2.8.3
# computes (and exports) its own digits-only MAX_JOBS only when the variable is unset. A set,
# non-digit value therefore leaves ninja without -j, which is what makes it obey the jobserver.
MAX_JOBS_UNDER_GOVERNOR = "governed"

# 20 samples a second: a compiler front end grows by ~0.1 GiB/s on the H200 server, the
# benchmark's scaled jobs by ~2 GiB/s; a look costs well under a millisecond per process.
SAMPLE_INTERVAL_S = 0.05
EVENT_INTERVAL_S = 1.0  # MemorySample events: once a second is enough for a gauge
# The budget share kept free at all times, for growth between two samples and the measurement's
# slack; freezing starts when half of it is used up.
GUARD_FRACTION = 0.03
# A job is past its peak once it has been near the learned peak and fallen back by a fifth.
PEAK_NEAR = 0.5
PEAK_FALLBACK = 0.8
PEAK_SAFETY = 1.05  # learned peak = the largest job peak seen, plus this margin
# The shape a job is predicted to follow after its front-end peak: down to the plateau over half
# the time it took to climb, the plateau first guessed at half the peak (DESIGN.md: the measured
# flash-attn build fell by half after its front end) and then learned from jobs past their peak.
FALL_RATIO = 0.5
PLATEAU_GUESS = 0.5
# System-wide pressure (PSI `some avg10`, %) or swap growth that blocks new jobs.
PSI_PRESSURE = 10.0
SWAP_GROWTH_BYTES = 64 * 2**20
LESSONS_KEPT = 16  # the most recent job peaks and ramps the typical values come from
# Bounds a kept lesson must be within to be believed (a job of 1 TiB, a front end of a day).
MAX_SANE_PEAK = 2**40
MAX_SANE_RAMP_S = 86400.0
LESSONS_LIMIT = 64 * 1024  # a lessons file is under 2 KiB

_PROGRESS = re.compile(r"^\s*\[(\d+)/(\d+)\]")


@dataclass(frozen=True)
class Reading:
    """One sample of the machine and of the build's process tree."""

    t: float
    total: int
    available: int
    swap_used: int
    psi_some_avg10: float | None
    tree_rss: int


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


@dataclass(frozen=True)
class Decision:
    t: float
    jobs_from: int
    jobs_to: int
    reason: str


@dataclass(frozen=True)
class Summary:
    budget_bytes: int
    peak_rss_bytes: int  # the build tree's largest total RSS the governor saw
    over_budget_bytes: int  # the most it saw the tree above the budget (0: never)
    peak_jobs: int  # the most jobs running at once
    decisions: int
    freezes: int
    learned_peak_job_bytes: int


@dataclass(frozen=True)
class Lessons:
    """What a build's jobs taught, as kept beside its build tree between runs."""

    largest_peak: int  # the largest job peak seen, bytes
    peaks: tuple[int, ...]  # recent job peaks, bytes
    ramps: tuple[float, ...]  # their times from start to peak, seconds
    plateau: float  # what a job holds after its peak, as a share of the peak

    def save(self, path: Path) -> None:
        # Not fsynced: it is written from the sampling thread, which must never wait on a busy
        # disk, and a record lost in a crash costs only a guess.
        write_atomic(path, json.dumps(asdict(self)) + "\n", durable=False)

    @classmethod
    def load(cls, path: Path) -> Lessons | None:
        """The lessons kept at `path`; None when there are none or the file is unusable (a
        guess is then as good as a damaged record)."""
        try:
            # root's file in root's directory, read as the trust rules read any file
            data = json.loads(read_bounded(path, LESSONS_LIMIT, owner=os.geteuid()))
            lessons = cls(
                largest_peak=int(data["largest_peak"]),
                peaks=tuple(int(p) for p in data["peaks"]),
                ramps=tuple(float(r) for r in data["ramps"]),
                plateau=float(data["plateau"]),
            )
        except (OSError, ValueError, TypeError, KeyError, ArithmeticError):
            return None
        sizes = (lessons.largest_peak, *lessons.peaks)
        usable = (
            lessons.peaks
            and all(0 < p <= MAX_SANE_PEAK for p in sizes)
            and all(0 < r <= MAX_SANE_RAMP_S for r in lessons.ramps)  # NaN fails both
            and 0 < lessons.plateau <= 1
        )
        return lessons if usable else None


@dataclass
class _Learned:
    """What finished front ends taught: the per-job peak and how long it takes to reach."""

    peak_job: int
    ramp_s: float
    typical_peak: int = 0
    plateau: float = PLATEAU_GUESS
    largest_peak: int = 0
    peaks: list[int] = field(default_factory=list)
    ramps: list[float] = field(default_factory=list)
    settled: list[Job] = field(default_factory=list)  # past their peak: they teach the plateau

    @classmethod
    def starting_from(cls, peak_job: int, ramp_s: float, lessons: Lessons | None) -> _Learned:
        """The recipe's guesses, or what an earlier run of the same build learned."""
        learned = cls(peak_job=peak_job, ramp_s=ramp_s)
        if lessons is not None:
            learned.peaks, learned.ramps = list(lessons.peaks), list(lessons.ramps)
            learned.largest_peak = lessons.largest_peak
            learned.plateau = lessons.plateau
            learned._update()
        return learned

    def lessons(self) -> Lessons | None:
        if not self.peaks:
            return None
        return Lessons(
            self.largest_peak,
            tuple(self.peaks[-LESSONS_KEPT:]),
            tuple(self.ramps[-LESSONS_KEPT:]),
            self.plateau,
        )

    def learn_plateau(self) -> None:
        shares = [j.rss / j.peak for j in self.settled[-LESSONS_KEPT:] if j.peak and j.rss]
        if len(shares) >= 4:
            self.plateau = min(1.0, statistics.median(shares) * PEAK_SAFETY)

    def predict(self, job: Job, age: float, peak: int) -> int:
        """A job's RSS once it has run `age` seconds: it climbs to its peak over the
        time-to-peak, falls to the plateau over half that, then stays."""
        if job.past_peak:
            return job.rss  # settled: it does not grow again
        top = max(peak, job.peak)
        ramp, fall = self.ramp_s, self.ramp_s * FALL_RATIO
        if age <= ramp:
            return max(job.rss, int(top * age / ramp))
        if age <= ramp + fall:
            return int(top - top * (1 - self.plateau) * (age - ramp) / fall)
        return int(top * self.plateau)

    def job_passed_peak(self, job: Job) -> None:
        self.peaks.append(job.peak)
        self.settled.append(job)
        if job.admitted is not None:
            self.ramps.append(max(job.ran_to_peak_s, SAMPLE_INTERVAL_S))
        self._update()

    def _update(self) -> None:
        # The largest peak ever seen bounds the hard cases; the recent ones give the usual one.
        self.largest_peak = max(self.largest_peak, *self.peaks)
        self.peak_job = int(self.largest_peak * PEAK_SAFETY)
        recent = self.peaks[-LESSONS_KEPT:]
        self.typical_peak = (
            int(statistics.median(recent) * PEAK_SAFETY) if len(recent) >= 4 else self.peak_job
        )
        if self.ramps:
            self.ramp_s = statistics.median(self.ramps[-LESSONS_KEPT:])


class _Jobserver:
    """The FIFO ninja takes tokens from; one byte is one job beyond ninja's implicit one.

    It lives in a directory of its own inside `runtime`, a directory only root can write (the
    engine's is /run/mlsetup; None: a private one made here), so no other account can rename or
    replace anything root later unlinks; only the FIFO itself is handed to the compiling
    account. That directory's descriptor holds an flock while the governor lives: the next
    governor to start removes the directories of those that died (kill -9), not of live ones."""

    def __init__(self, runtime: Path | None) -> None:
        self._private = runtime is None
        runtime = runtime or Path(tempfile.mkdtemp(prefix="mlsetup-governor-"))
        self._runtime_fd = trusted_dir(runtime, {os.geteuid()}, mode=0o711)
        os.fchmod(self._runtime_fd, 0o711)  # others pass through to their FIFO, list nothing
        self.name = f"jobserver-{secrets.token_hex(8)}"
        with _flocked(self._runtime_fd):  # no sweep between our mkdir and our lock
            _remove_dead_jobservers(self._runtime_fd)
            os.mkdir(self.name, 0o711, dir_fd=self._runtime_fd)
            self._dir_fd = open_dir(self.name, dir_fd=self._runtime_fd)
            fcntl.flock(self._dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.path = runtime / self.name / "fifo"
        os.mkfifo("fifo", 0o600, dir_fd=self._dir_fd)
        # Opened read-write by the governor itself: ninja's open never blocks waiting for a
        # peer, our writes never block, and ninja never sees end-of-file between jobs.
        self._fd = os.open(
            "fifo", os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self._dir_fd
        )
        self.issued = 0  # tokens in circulation: in the FIFO or held by ninja

    def share_with(self, uid: int, gid: int) -> None:
        os.fchown(self._fd, uid, gid)  # the FIFO alone: its directory stays root's

    def set_jobs(self, jobs: int) -> None:
        want = max(jobs - 1, 0)
        if want > self.issued:
            self.issued += os.write(self._fd, b"+" * (want - self.issued))
        elif want < self.issued:
            # A token can only be taken back while it sits in the FIFO (ninja returns each one
            # when its job ends, and takes it again at once if it has work), so reclaiming is
            # opportunistic: whatever is there now, the rest on a later call.
            with contextlib.suppress(BlockingIOError):
                self.issued -= len(os.read(self._fd, self.issued - want))

    def close(self) -> None:
        os.close(self._fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink("fifo", dir_fd=self._dir_fd)
        os.close(self._dir_fd)
        with contextlib.suppress(OSError):
            os.rmdir(self.name, dir_fd=self._runtime_fd)
        if self._private:
            with contextlib.suppress(OSError):
                os.rmdir(self.path.parent.parent)
        os.close(self._runtime_fd)


@contextlib.contextmanager
def _flocked(fd: int) -> Iterator[None]:
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _remove_dead_jobservers(runtime_fd: int) -> None:
    """Remove the jobserver directories in `runtime_fd` whose governor is gone (no flock)."""
    for name in os.listdir(runtime_fd):
        if not name.startswith("jobserver-"):
            continue
        try:
            fd = open_dir(name, dir_fd=runtime_fd)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            for entry in os.listdir(fd):
                os.unlink(entry, dir_fd=fd)  # never follows: only root could have put it there
            os.rmdir(name, dir_fd=runtime_fd)
        except OSError:  # locked: its governor is alive (or another start just removed it)
            pass
        finally:
            os.close(fd)


def _psi_some_avg10() -> float | None:
    try:
        first = Path("/proc/pressure/memory").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None  # kernel without PSI
    fields_ = dict(part.split("=", 1) for part in first.split()[1:])
    return float(fields_["avg10"])


def _gib(n: float) -> str:
    return f"{n / GiB:.1f} GiB"


class Governor:
    """Decides, live, how many compile jobs of one build run; see the module docstring."""

    def __init__(
        self,
        sink: EventSink | None = None,
        *,
        ceiling: int | None = None,
        budget_bytes: int | None = None,
        reserve_bytes: int = 0,
        peak_job_bytes: int = int(4.5 * GiB),
        ramp_s: float = 40.0,
        lessons_file: Path | None = None,
        jobserver_dir: Path | None = None,
        action: str = "build",
        stopped_file: Path | None = None,
    ) -> None:
        """`ceiling`: jobs never exceeded (answers build.max_jobs; None = the logical CPUs).
        `budget_bytes`: the most the build's process tree may hold (RSS; answers
        build.memory_limit); None = MemAvailable now minus `reserve_bytes`.
        `reserve_bytes`: RAM the machine keeps whatever the budget (build.memory_reserve).
        `peak_job_bytes`, `ramp_s`: first guesses at one job's peak RSS and at how long it takes
        to reach it (recipe.peak_job_gib; ~45 s measured for flash-attn), replaced by what the
        jobs of this build show.
        `lessons_file`: where this build's lessons are kept (beside its build tree): read at the
        start in place of those guesses when an earlier run left some, rewritten each time a
        job passes its peak, so that even a killed run leaves them.
        `stopped_file`: a root-only file where the governor keeps which job groups it has
        stopped, with a watchdog process that continues them and ends the build should this
        process die without `stop()`; `end_orphaned_build` does it again at the next start,
        in case the watchdog died too.

        `jobserver_dir`: a directory only root writes where the jobserver FIFO is made
        (the engine's /run/mlsetup); None: a private one."""
        self._sink = sink
        self.ceiling = max(1, ceiling or os.cpu_count() or 1)
        self.reserve = reserve_bytes
        self.budget = (
            budget_bytes
            if budget_bytes is not None
            else psutil.virtual_memory().available - reserve_bytes
        )
        self._guard = int(self.budget * GUARD_FRACTION)
        self._lessons_file = lessons_file
        self._learned = _Learned.starting_from(
            peak_job_bytes, ramp_s, Lessons.load(lessons_file) if lessons_file else None
        )
        self._action = action
        # The start: as many jobs as fit if all peaked at once (what a static MAX_JOBS would
        # pick); decisions move it from there.
        self.allowed = self._fit_at_peak()
        self._jobserver = _Jobserver(jobserver_dir)
        self._root: int | None = None
        self._jobs: dict[int, Job] = {}
        self._decisions: list[Decision] = []
        self._freezes = 0
        self._peak_rss = 0
        self._peak_jobs = 0
        self._over = 0
        self._swap_at_start = psutil.swap_memory().used
        self._next_admit = 0.0  # the stagger: no job is let go before this time
        self._last_event = 0.0
        self._lock = threading.Lock()  # job state: the sampling thread vs stop()
        self._emit_lock = threading.Lock()  # the sink: sampling thread vs feed_line's caller
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memory-governor", daemon=True)
        self._stopped_file = stopped_file
        self._recorded: dict[int, float] | None = None
        self._recorded_root: int | None = None
        self._started_at: dict[int, float] = {}  # pid -> its start time, against pid reuse
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._engine_started = psutil.Process().create_time()

    # -- the runner's interface -------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """Variables the build command needs so that its ninja obeys this governor."""
        return {
            "MAKEFLAGS": f"--jobserver-auth=fifo:{self._jobserver.path}",
            "MAX_JOBS": MAX_JOBS_UNDER_GOVERNOR,
        }

    def share_with(self, uid: int, gid: int) -> None:
        """Let the account the build runs as open the jobserver FIFO (it is private otherwise)."""
        self._jobserver.share_with(uid, gid)

    def start(self) -> None:
        """Issue the first tokens (before the build starts) and start sampling."""
        self._jobserver.set_jobs(self._token_jobs())
        if self._stopped_file is not None:
            self._record_stopped()
            self._watchdog = subprocess.Popen(
                [sys.executable, "-m", "steps.governor", str(self._stopped_file)],
                stdin=subprocess.PIPE,  # its end-of-file is this process's end, kill -9 included
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a signal to this process group must not reach it
                cwd="/",
            )
        self._thread.start()

    def attach(self, pid: int) -> None:
        """Govern the process tree under `pid` (the build command: pip, setup.py or ninja)."""
        self._root = pid
        with self._lock:
            self._record_stopped()

    def feed_line(self, line: str) -> None:
        """Called with each output line of the build; ninja's "[k/n] ..." lines are progress."""
        m = _PROGRESS.match(line)
        if m:
            self._emit(BuildProgress(self._action, int(m.group(1)), int(m.group(2))))

    def stop(self) -> Summary:
        """Stop sampling, thaw every stopped job, close the FIFO; what the build did."""
        if self._halt.is_set():
            return self.summary()
        self._halt.set()
        if self._thread.is_alive():
            self._thread.join()
        with self._lock:
            for job in self._jobs.values():
                if job.stopped:
                    self._signal(job, signal.SIGCONT)
                    job.stopped = False
        if self._stopped_file is not None:
            self._stopped_file.unlink(missing_ok=True)  # before the watchdog's end-of-file
        if self._watchdog is not None:
            assert self._watchdog.stdin is not None
            self._watchdog.stdin.close()
            self._watchdog.wait()
        self._jobserver.close()
        return self.summary()

    def summary(self) -> Summary:
        return Summary(
            budget_bytes=self.budget,
            peak_rss_bytes=self._peak_rss,
            over_budget_bytes=self._over,
            peak_jobs=self._peak_jobs,
            decisions=len(self._decisions),
            freezes=self._freezes,
            learned_peak_job_bytes=self._learned.peak_job,
        )

    @property
    def decisions(self) -> list[Decision]:
        return list(self._decisions)

    def __enter__(self) -> Governor:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- sampling -----------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._halt.wait(SAMPLE_INTERVAL_S):
            with self._lock:
                self._tick()

    def _tick(self) -> None:
        now = time.monotonic()
        reading = self._read(now)
        self._peak_rss = max(self._peak_rss, reading.tree_rss)
        self._over = max(self._over, reading.tree_rss - self.budget)
        self._decide(now, reading)
        self._record_stopped()
        running = sum(job.running for job in self._jobs.values())
        self._peak_jobs = max(self._peak_jobs, running)
        if now - self._last_event >= EVENT_INTERVAL_S:
            self._last_event = now
            self._emit(
                MemorySample(
                    used_bytes=reading.total - reading.available,
                    total_bytes=reading.total,
                    available_bytes=reading.available,
                    swap_used_bytes=reading.swap_used,
                    psi_some_avg10=reading.psi_some_avg10,
                    jobs_running=running,
                    jobs_allowed=self.allowed,
                    jobs_frozen=sum(job.stopped for job in self._jobs.values()),
                )
            )

    def _read(self, now: float) -> Reading:
        vm = psutil.virtual_memory()
        tree_rss = self._scan_tree(now) if self._root is not None else 0
        return Reading(
            t=now,
            total=vm.total,
            available=vm.available,
            swap_used=psutil.swap_memory().used,
            psi_some_avg10=_psi_some_avg10(),
            tree_rss=tree_rss,
        )

    def _scan_tree(self, now: float) -> int:
        """Total RSS of the build tree; refreshes the jobs (ninja's children) and their RSS."""
        assert self._root is not None
        try:
            root = psutil.Process(self._root)
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
        job_rss: dict[int, int] = {}
        for pid in rss:
            job = self._job_of(pid, parent, name)
            if job is not None:
                job_rss[job] = job_rss.get(job, 0) + rss[pid]
        for pid in list(self._jobs):
            if pid not in job_rss:
                self._job_ended(self._jobs.pop(pid))
        for pid, total in job_rss.items():
            job = self._jobs.get(pid)
            if job is None:
                job = self._jobs[pid] = Job(pid=pid, seen=now)
                with contextlib.suppress(psutil.Error):
                    self._started_at[pid] = psutil.Process(pid).create_time()
                # Park every new job at once; `_decide` lets it go when its turn comes.
                self._signal(job, signal.SIGSTOP)
                job.stopped = True
            job.growth = max(total - job.rss, 0) if job.running else 0
            job.rss = total
            if total > job.peak:
                job.peak, job.ran_to_peak_s = total, job.ran_s(now)
            # A job already larger than the estimate corrects it at once, before its peak.
            self._learned.peak_job = max(self._learned.peak_job, total)
            if (
                not job.past_peak
                and job.peak >= PEAK_NEAR * self._learned.peak_job
                and total <= PEAK_FALLBACK * job.peak
            ):
                job.past_peak = True
                self._learn_from(job)
        return sum(rss.values())

    @staticmethod
    def _job_of(pid: int, parent: dict[int, int], name: dict[int, str]) -> int | None:
        """The ninja child `pid` belongs to (itself included), or None outside any job."""
        while pid in parent:
            up = parent[pid]
            if name.get(up) == "ninja" and name.get(pid) != "ninja":
                return pid
            pid = up
        return None

    def _job_ended(self, job: Job) -> None:
        # A job that never fell back from its peak still taught us that peak.
        if not job.past_peak and job.peak >= PEAK_NEAR * self._learned.peak_job:
            self._learn_from(job)

    def _learn_from(self, job: Job) -> None:
        self._learned.job_passed_peak(job)
        lessons = self._learned.lessons()
        if self._lessons_file is not None and lessons is not None:
            with contextlib.suppress(OSError):  # a lesson not kept costs a guess, not the build
                lessons.save(self._lessons_file)

    # -- deciding -----------------------------------------------------------------------------

    def _decide(self, now: float, r: Reading) -> None:
        jobs = sorted(self._jobs.values(), key=lambda j: j.seen)
        running = [j for j in jobs if j.running]
        waiting = [j for j in jobs if j.stopped]
        headroom = min(self.budget - r.tree_rss, r.available - self.reserve)
        peak = self._learned.typical_peak or self._learned.peak_job

        # What is left under the budget at the next sample if the jobs grow as they just did:
        # several front ends climbing at once can eat the guard band within one sample.
        ahead = headroom - sum(j.growth for j in running)
        if not running and waiting:
            # Never zero jobs: the oldest runs whatever memory says, or the build never ends.
            self._resume(waiting[0], now)
        elif ahead < self._guard / 2 and len(running) > 1:
            self._freeze_growth(now, r, running, headroom, ahead)
        else:
            # The settled jobs' plateau, as they hold it now; then as many as fit and are due
            # this sample (the stagger can be shorter than a sample).
            self._learned.learn_plateau()
            for job in waiting:
                self._admit(now, r, running, job, headroom, peak)
                if job.stopped:
                    break
                running.append(job)
        self._jobserver.set_jobs(self._token_jobs())

    def _freeze_growth(
        self, now: float, r: Reading, running: list[Job], headroom: int, ahead: int
    ) -> None:
        """Hard stop: freeze the newest growing jobs (SIGSTOP) until what the others will add
        by the next sample fits; a job that is not growing is left to run (freezing it would
        only slow the build). The last running job is never frozen."""
        growing = sorted(
            (j for j in running if j.growth > 0),
            key=lambda j: j.admitted or 0.0,
            reverse=True,
        )
        left = len(running)
        for job in growing:
            if ahead >= self._guard / 2 or left == 1:
                break
            self._signal(job, signal.SIGSTOP)
            job.stopped, job.frozen_at = True, now
            self._freezes += 1
            ahead += job.growth
            left -= 1
        if left < len(running):
            frozen = len(running) - left
            self._decide_jobs(
                now,
                left,
                f"RAM {self._ram_pct(r)}%, build {_gib(r.tree_rss)} of {_gib(self.budget)}, "
                f"{_gib(max(headroom, 0))} left and jobs still growing → froze the newest "
                + ("job" if frozen == 1 else f"{frozen} jobs"),
            )

    def _admit(
        self, now: float, r: Reading, running: list[Job], job: Job, headroom: int, peak: int
    ) -> None:
        """Let the oldest waiting job run if its peak fits and the stagger interval has passed."""
        # What the running jobs and this one will hold over the next time-to-peak, as the
        # learned shape predicts: staggered jobs peak one after the other, and a job past its
        # front end gives memory back, so the worst moment is what must fit, not all peaks.
        # The job to be let go counts from where it stands (a frozen one has run a while).
        ramp = self._learned.ramp_s
        worst = 0
        for step in range(9):
            ahead = ramp * 1.5 * step / 8
            total = sum(
                self._learned.predict(j, j.ran_s(now) + ahead, peak) - j.rss
                for j in (*running, job)
            )
            worst = max(worst, total)
        need = 0 if job.past_peak else max(peak - job.rss, 0)
        free = headroom - worst + need - self._guard
        pressure = self._pressure(r)
        if pressure or need > free:
            if len(running) < self.allowed:
                why = pressure or (
                    f"build {_gib(r.tree_rss)} of {_gib(self.budget)}, "
                    f"{_gib(max(free, 0))} free after running jobs peak, "
                    f"next job needs {_gib(need)}"
                )
                self._decide_jobs(now, len(running), why)
            return
        # Stagger: the peaks the budget holds, spread evenly over one time-to-peak, so starts
        # never bunch up and the memory a job gives back after its peak is used by the next.
        if now < self._next_admit:
            return
        if len(running) >= self.allowed:
            if len(running) >= self.ceiling:
                return
            self._decide_jobs(
                now,
                len(running) + 1,
                f"build {_gib(r.tree_rss)} of {_gib(self.budget)}, "
                f"room for a {_gib(need or peak)} peak",
            )
        self._resume(job, now)
        # Counted from the previous slot rather than from now, so that starts keep the pace
        # even when the interval is not a whole number of samples.
        stagger = self._learned.ramp_s / self._fit_at_peak()
        self._next_admit = max(self._next_admit, now - stagger) + stagger

    def _resume(self, job: Job, now: float) -> None:
        self._signal(job, signal.SIGCONT)
        job.stopped = False
        if job.admitted is None:
            job.admitted = now
        elif job.frozen_at is not None:
            job.frozen_s += now - job.frozen_at
            job.frozen_at = None

    def _pressure(self, r: Reading) -> str | None:
        if r.psi_some_avg10 is not None and r.psi_some_avg10 >= PSI_PRESSURE:
            return f"memory pressure: PSI some avg10 {r.psi_some_avg10:.0f}%"
        grown = r.swap_used - self._swap_at_start
        if grown > SWAP_GROWTH_BYTES:
            return f"swapping: {_gib(grown)} more swap in use than at the start"
        return None

    def _decide_jobs(self, now: float, to: int, why: str) -> None:
        to = max(1, min(to, self.ceiling))
        if to == self.allowed:
            return
        decision = Decision(now, self.allowed, to, f"{why} → jobs {self.allowed} → {to}")
        self.allowed = to
        self._decisions.append(decision)
        self._emit(Throttle(decision.jobs_from, decision.jobs_to, decision.reason))

    def _fit_at_peak(self) -> int:
        fit = (self.budget - self._guard) // max(self._learned.peak_job, 1)
        return max(1, min(self.ceiling, fit))

    def _token_jobs(self) -> int:
        # Twice the allowed count: ninja only takes tokens when a job ends, so parked jobs must
        # already exist to be let go the moment memory allows; the ceiling is never exceeded.
        return min(self.ceiling, 2 * self.allowed)

    @staticmethod
    def _ram_pct(r: Reading) -> int:
        return round(100 * (r.total - r.available) / r.total)

    @staticmethod
    def _signal(job: Job, sig: signal.Signals) -> None:
        # ninja starts each job in its own process group: one signal reaches the whole subtree,
        # including children forked a moment ago.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getpgid(job.pid) == job.pid:
                os.killpg(job.pid, sig)
            else:
                os.kill(job.pid, sig)

    def _record_stopped(self) -> None:
        """Keep in the stopped file the groups stopped now, and the build's root process, when
        that changed (called with the job lock held, or before the sampling starts)."""
        if self._stopped_file is None:
            return
        stopped = {
            job.pid: self._started_at.get(job.pid, 0.0)
            for job in self._jobs.values()
            if job.stopped
        }
        if stopped == self._recorded and self._root == self._recorded_root:
            return
        root_started = 0.0
        if self._root is not None:
            with contextlib.suppress(psutil.Error):
                root_started = psutil.Process(self._root).create_time()
        record = {
            "engine": os.getpid(),
            "engine_started": self._engine_started,
            "root": self._root,
            "root_started": root_started,
            "stopped": {str(pid): t for pid, t in stopped.items()},
        }
        # Not fsynced: from the sampling thread; a record lost to a power cut has nothing to
        # continue anyway (the jobs went with the machine).
        with contextlib.suppress(OSError):
            write_atomic(self._stopped_file, json.dumps(record) + "\n", durable=False)
            self._recorded, self._recorded_root = stopped, self._root

    def _emit(self, event: Event) -> None:
        if self._sink is not None:
            with self._emit_lock:
                self._sink(event)


# -- after the engine that governed a build died ----------------------------------------------

END_GRACE_S = 5.0  # SIGTERM, then this long to end, then SIGKILL
# An engine killed with SIGKILL is a zombie within milliseconds of closing its files; one that
# closed the watchdog's pipe and is still running after this long was not killed (it exec'd,
# or a debugger holds it) and its governor is trusted to be at work.
WATCHDOG_ENGINE_EXIT_WAIT_S = 10.0


def end_orphaned_build(
    stopped_file: Path, engine_exit_wait: float = 0.0
) -> tuple[list[int], list[int]]:
    """Continue every job group a dead engine's governor had stopped (SIGCONT), then end its
    build: the build's output went to that engine, so nothing could use what it goes on to do,
    and a new build in the same tree must not run beside it (the objects already compiled
    stay). Returns (groups continued, processes ended); the record is removed.

    `engine_exit_wait`: how long to wait for the recorded engine to be gone before deciding
    that it lives on. The watchdog needs it: a killed process closes its files (the watchdog's
    end-of-file) a moment before it becomes a zombie, and in that moment it still looks alive."""
    try:
        record = json.loads(read_bounded(stopped_file, 1 << 20))
        stopped = {int(pid): float(t) for pid, t in dict(record["stopped"]).items()}
        root = int(record["root"]) if record.get("root") else None
        root_started = float(record.get("root_started") or 0.0)
        engine = int(record.get("engine") or 0)
        engine_started = float(record.get("engine_started") or 0.0)
    except FileNotFoundError:
        return [], []
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        stopped_file.unlink(missing_ok=True)  # damaged: nothing in it can be trusted
        return [], []
    if engine and engine != os.getpid():
        deadline = time.monotonic() + engine_exit_wait
        while _process(engine, engine_started) is not None:
            if time.monotonic() >= deadline:
                return [], []  # that engine lives on: its governor is still at work
            time.sleep(0.02)
    groups = [p for pid, t in stopped.items() if (p := _process(pid, t)) is not None]
    for p in groups:
        _signal_group(p.pid, signal.SIGCONT)
    tree = _process(root, root_started) if root is not None else None
    ended = end_process_tree(tree, groups)
    stopped_file.unlink(missing_ok=True)
    return [p.pid for p in groups], ended


def end_process_tree(
    root: psutil.Process | None,
    groups: list[psutil.Process] | None = None,
    grace: float = END_GRACE_S,
) -> list[int]:
    """End `root`, everything under it and under each of `groups`: continued first (a stopped
    process cannot act on SIGTERM), then SIGTERM (ninja removes the outputs of the jobs it
    interrupts), then SIGKILL for what still runs after `grace` seconds. The pids ended."""
    procs: dict[int, psutil.Process] = {}
    for top in [root, *(groups or [])]:
        if top is None:
            continue
        with contextlib.suppress(psutil.Error):
            for p in [top, *top.children(recursive=True)]:
                procs[p.pid] = p
    for p in procs.values():
        with contextlib.suppress(psutil.Error):
            p.resume()
    for p in procs.values():
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(list(procs.values()), timeout=grace)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=grace)
    return sorted(procs)


def _process(pid: int, started: float) -> psutil.Process | None:
    """The live process `pid`, if it is still the one that started at `started` (0: any)."""
    try:
        p = psutil.Process(pid)
        if started and abs(p.create_time() - started) > 0.01:
            return None  # the pid was reused
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        return p
    except psutil.Error:
        return None


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def _watch(stopped_file: Path) -> None:
    """The watchdog: wait for the governing engine to end (end-of-file on stdin); if it ended
    without stopping its governor (the record is still there), continue and end what it left."""
    while sys.stdin.buffer.read(4096):
        pass
    end_orphaned_build(stopped_file, engine_exit_wait=WATCHDOG_ENGINE_EXIT_WAIT_S)


if __name__ == "__main__":
    _watch(Path(sys.argv[1]))
