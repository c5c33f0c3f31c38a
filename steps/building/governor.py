"""The live memory governor for CUDA-extension compiles.

A static `MAX_JOBS` must be sized for the moment every job is in the compiler front end at once:
the real flash-attn 2.8.3 build (16 jobs, H200 server) peaked at 68 GiB in its first minute and
then sat at 20-37 GiB (docs/design.md). The governor instead decides, live, how many jobs run:

- It is a GNU make jobserver (`steps.building.jobserver`): the tokens it writes are a hard ceiling
on how
  many jobs ninja (>= 1.13, run without `-j`) starts.
- ninja reads tokens only when it starts and each time a job ends, and then takes every token
  there is, so tokens alone cannot stagger starts. Each new job is therefore *parked* (SIGSTOP
  on its process group, before it has allocated much; `steps.building.processtree`) and let go one
  at a time, only when the memory its peak will need is free and a stagger interval has passed, so
  jobs do not all peak together; growing jobs are frozen should memory run short anyway
  (`steps.building.throttle`, the policy and the reasons it gives).
- What the jobs taught (their peaks, time to peak and plateau) is kept in a file beside the build
  tree, so a build resumed after a kill, or retried after an OOM, starts from what this very
  build showed instead of the recipe's guess and does not start more jobs than fit
  (`steps.building.lessons`).
- Should the engine die while jobs are stopped, a watchdog process continues them and ends the
  build (`steps.building.orphans`). `stop()` thaws everything.

This module runs those parts together: a sampling thread, 20 looks a second, and the events a
front end shows (MemorySample, Throttle, BuildProgress). A build runs under it like this
(`steps/apply/engine.py` does it through the runner):

    with Governor(sink, ceiling=16, reserve_bytes=reserve, peak_job_bytes=int(4.5 * GiB)) as gov:
        proc = subprocess.Popen(argv, env={**env, **gov.env()}, stdout=PIPE, text=True)
        gov.attach(proc.pid)
        for line in proc.stdout:
            gov.feed_line(line)
        proc.wait()
    summary = gov.summary()
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import psutil

from steps.building.jobserver import Jobserver
from steps.building.lessons import Learned
from steps.building.orphans import Watchdog
from steps.building.processtree import SAMPLE_INTERVAL_S, BuildTree, Reading, sample
from steps.building.throttle import Decision, Throttler
from steps.core.sizes import GiB
from steps.formats.events import BuildProgress, Event, EventSink, MemorySample

EVENT_INTERVAL_S = 1.0  # MemorySample events: once a second is enough for a gauge

_PROGRESS = re.compile(r"^\s*\[(\d+)/(\d+)\]")


@dataclass(frozen=True)
class Summary:
    budget_bytes: int
    peak_rss_bytes: int  # the build tree's largest total RSS the governor saw
    over_budget_bytes: int  # the most it saw the tree above the budget (0: never)
    peak_jobs: int  # the most jobs running at once
    decisions: int
    freezes: int
    learned_peak_job_bytes: int


class Governor:
    """Decides, live, how many compile jobs of one build run; see the module docstring.

    `ceiling`: jobs never exceeded (answers build.max_jobs; None = the logical CPUs).
    `budget_bytes`: the most the build's process tree may hold (RSS; answers
    build.memory_limit); None = MemAvailable now minus `reserve_bytes`.
    `reserve_bytes`: RAM the machine keeps whatever the budget (build.memory_reserve).
    `peak_job_bytes`, `ramp_s`: first guesses at one job's peak RSS and at how long it takes
    to reach it (recipe.peak_job_gib; ~45 s measured for flash-attn), replaced by what the
    jobs of this build show.
    `lessons_file`: where this build's lessons are kept (beside its build tree): read at the
    start in place of those guesses when an earlier run left some, rewritten each time a
    job passes its peak, so that even a killed run leaves them.
    `jobserver_dir`: a directory only root writes where the jobserver FIFO is made
    (the engine's /run/mlsetup); None: a private one.
    `action`: the action the BuildProgress events name.
    `stopped_file`: a root-only file where the governor keeps which job groups it has
    stopped, with a watchdog process that continues them and ends the build should this
    process die without `stop()`; `end_orphaned_build` does it again at the next start,
    in case the watchdog died too.
    """

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
        self._sink = sink
        self._action = action
        self._learned = Learned.starting_from(peak_job_bytes, ramp_s, lessons_file)
        self._throttle = Throttler(
            ceiling=max(1, ceiling or os.cpu_count() or 1),
            budget=(
                budget_bytes
                if budget_bytes is not None
                else psutil.virtual_memory().available - reserve_bytes
            ),
            reserve=reserve_bytes,
            learned=self._learned,
            emit=self._emit,
        )
        self._jobserver = Jobserver(jobserver_dir)
        self._tree = BuildTree()
        self._watchdog = Watchdog(stopped_file) if stopped_file is not None else None
        self._peak_rss = self._peak_jobs = self._over = 0
        self._last_event = 0.0
        self._lock = threading.Lock()  # job state: the sampling thread vs stop()
        self._emit_lock = threading.Lock()  # the sink: sampling thread vs feed_line's caller
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memory-governor", daemon=True)

    @property
    def budget(self) -> int:
        return self._throttle.budget

    @property
    def allowed(self) -> int:
        """The jobs allowed to run now."""
        return self._throttle.allowed

    # -- the runner's interface -------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """Variables the build command needs so that its ninja obeys this governor, and what
        mlsetup's ninja plans its order by (steps/building/buildtools.py): the most jobs it lets
        run, and the seconds between two jobs let go, as it starts (the first jobs start that far
        apart)."""
        return {
            **self._jobserver.env(),
            "MLSETUP_JOB_SLOTS": str(self._throttle.ceiling),
            "MLSETUP_JOB_STAGGER_S": f"{self._throttle.stagger_s():.2f}",
        }

    def share_with(self, uid: int, gid: int) -> None:
        """Let the account the build runs as open the jobserver FIFO (it is private otherwise)."""
        self._jobserver.share_with(uid, gid)

    def start(self) -> None:
        """Issue the first tokens (before the build starts) and start sampling."""
        self._jobserver.set_jobs(self._throttle.token_jobs())
        if self._watchdog is not None:
            self._record_stopped()
            self._watchdog.start()
        self._thread.start()

    def attach(self, pid: int) -> None:
        """Govern the process tree under `pid` (the build command: pip, setup.py or ninja)."""
        self._tree.root = pid
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
            self._tree.continue_all()
        if self._watchdog is not None:
            self._watchdog.stop()
        self._jobserver.close()
        return self.summary()

    def summary(self) -> Summary:
        return Summary(
            budget_bytes=self.budget,
            peak_rss_bytes=self._peak_rss,
            over_budget_bytes=self._over,
            peak_jobs=self._peak_jobs,
            decisions=len(self._throttle.decisions),
            freezes=self._throttle.freezes,
            learned_peak_job_bytes=self._learned.peak_job,
        )

    @property
    def decisions(self) -> list[Decision]:
        return list(self._throttle.decisions)

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
        reading, scan = sample(now, self._tree)
        for job in scan.ended:
            self._learned.job_ended(job)
        for job in scan.measured:
            self._learned.observe(job)
        self._peak_rss = max(self._peak_rss, reading.tree_rss)
        self._over = max(self._over, reading.tree_rss - self.budget)
        self._throttle.decide(now, reading, self._tree.jobs.values())
        self._jobserver.set_jobs(self._throttle.token_jobs())
        self._record_stopped()
        running = sum(job.running for job in self._tree.jobs.values())
        self._peak_jobs = max(self._peak_jobs, running)
        if now - self._last_event >= EVENT_INTERVAL_S:
            self._last_event = now
            self._emit_sample(reading, running)

    def _emit_sample(self, reading: Reading, running: int) -> None:
        self._emit(
            MemorySample(
                used_bytes=reading.total - reading.available,
                total_bytes=reading.total,
                available_bytes=reading.available,
                swap_used_bytes=reading.swap_used,
                psi_some_avg10=reading.psi_some_avg10,
                jobs_running=running,
                jobs_allowed=self.allowed,
                jobs_frozen=sum(job.stopped for job in self._tree.jobs.values()),
                build_bytes=reading.tree_rss,
                budget_bytes=self.budget,
            )
        )

    def _record_stopped(self) -> None:
        """Keep the stopped groups and the build's root in the watchdog's record (called with
        the job lock held, or before the sampling starts)."""
        if self._watchdog is not None:
            self._watchdog.record(self._tree.root, self._tree.stopped())

    def _emit(self, event: Event) -> None:
        if self._sink is not None:
            with self._emit_lock:
                self._sink(event)
