"""The memory governor's policy: each sample, which parked compile jobs are let go, which growing
ones are frozen, and how many jobs are allowed (each change a `Throttle` event with its reason).

- A job is let go when the worst moment of the next time-to-peak fits the budget, as the learned
  shape predicts it (climb to the usual peak, fall to the learned plateau, then stay), and a
  stagger interval has passed since the previous one: staggered jobs peak one after another.
- Hard stop: should jobs outgrow that estimate and the memory left under the budget, less what
  the growing jobs will add by the next sample at their current pace, fall into the guard band,
  the newest growing jobs are frozen and let go again when memory recovers. The last running
  job is never frozen, and there is never a sample with no job running.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import psutil

from steps.building.lessons import Learned
from steps.building.processtree import Job, Reading
from steps.core.sizes import MiB, gib
from steps.formats.events import EventSink, Throttle

# The budget share kept free at all times, for growth between two samples and the measurement's
# slack; freezing starts when half of it is used up.
GUARD_FRACTION = 0.03
# System-wide pressure (PSI `some avg10`, %) or swap growth that blocks new jobs.
PSI_PRESSURE = 10.0
SWAP_GROWTH_BYTES = 64 * MiB
PREDICTION_STEPS = 8  # the next time-to-peak and a half, looked at in this many steps


@dataclass(frozen=True)
class Decision:
    t: float
    jobs_from: int
    jobs_to: int
    reason: str


class Throttler:
    """Decides how many of one build's jobs run, within `ceiling` jobs and `budget` bytes of
    RSS, leaving `reserve` bytes of the machine's RAM free whatever the budget."""

    def __init__(
        self, *, ceiling: int, budget: int, reserve: int, learned: Learned, emit: EventSink
    ) -> None:
        self.ceiling, self.budget, self.reserve = ceiling, budget, reserve
        self.guard = int(budget * GUARD_FRACTION)
        self._learned = learned
        self._emit = emit
        # The start: as many jobs as fit if all peaked at once (what a static MAX_JOBS would
        # pick); decisions move it from there.
        self.allowed = self.fit_at_peak()
        self.decisions: list[Decision] = []
        self.freezes = 0
        self._swap_at_start = psutil.swap_memory().used
        self._next_admit = 0.0  # the stagger: no job is let go before this time

    def decide(self, now: float, r: Reading, jobs: Iterable[Job]) -> None:
        """One sample's decision on the build's jobs."""
        jobs = sorted(jobs, key=lambda j: j.seen)
        running = [j for j in jobs if j.running]
        waiting = [j for j in jobs if j.stopped]
        headroom = min(self.budget - r.tree_rss, r.available - self.reserve)
        peak = self._learned.typical_peak or self._learned.peak_job
        # What is left under the budget at the next sample if the jobs grow as they just did:
        # several front ends climbing at once can eat the guard band within one sample.
        ahead = headroom - sum(j.growth for j in running)
        if not running and waiting:
            # Never zero jobs: the oldest runs whatever memory says, or the build never ends.
            waiting[0].resume(now)
        elif ahead < self.guard / 2 and len(running) > 1:
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

    def fit_at_peak(self) -> int:
        fit = (self.budget - self.guard) // max(self._learned.peak_job, 1)
        return max(1, min(self.ceiling, fit))

    def stagger_s(self) -> float:
        """The seconds between two jobs let go: the peaks the budget holds, spread over one
        time-to-peak."""
        return self._learned.ramp_s / self.fit_at_peak()

    def token_jobs(self) -> int:
        """The jobs the jobserver's tokens allow: the ceiling, from the start. ninja (1.13)
        takes tokens only when it starts and when a job ends, so the jobs it starts first are
        all there are until the first one ends; with the longest objects first that is minutes
        (flash-attn's first fourteen take 278 s and more on the H200). A started job is parked
        at once and costs next to nothing until the governor lets it go, which it does only as
        memory allows, so every job the ceiling allows can wait parked, ready."""
        return self.ceiling

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
            if ahead >= self.guard / 2 or left == 1:
                break
            job.freeze(now)
            self.freezes += 1
            ahead += job.growth
            left -= 1
        if left < len(running):
            frozen = len(running) - left
            self._decide_jobs(
                now,
                left,
                f"RAM {r.ram_pct}%, build {gib(r.tree_rss)} of {gib(self.budget)}, "
                f"{gib(max(headroom, 0))} left and jobs still growing → froze the newest "
                + ("job" if frozen == 1 else f"{frozen} jobs"),
            )

    def _admit(
        self, now: float, r: Reading, running: list[Job], job: Job, headroom: int, peak: int
    ) -> None:
        """Let the oldest waiting job run if its peak fits and the stagger interval has passed."""
        need = 0 if job.past_peak else max(peak - job.rss, 0)
        free = headroom - self._worst_growth(now, [*running, job], peak) + need - self.guard
        pressure = self._pressure(r)
        if pressure or need > free:
            if len(running) < self.allowed:
                why = pressure or (
                    f"build {gib(r.tree_rss)} of {gib(self.budget)}, "
                    f"{gib(max(free, 0))} free after running jobs peak, "
                    f"next job needs {gib(need)}"
                )
                self._decide_jobs(now, len(running), why)
            return
        if now < self._next_admit:
            return
        if len(running) >= self.allowed:
            if len(running) >= self.ceiling:
                return
            self._decide_jobs(
                now,
                len(running) + 1,
                f"build {gib(r.tree_rss)} of {gib(self.budget)}, "
                f"room for a {gib(need or peak)} peak",
            )
        job.resume(now)
        # Stagger: the peaks the budget holds, spread evenly over one time-to-peak, so starts
        # never bunch up and the memory a job gives back after its peak is used by the next.
        # Counted from the previous slot rather than from now, so that starts keep the pace
        # even when the interval is not a whole number of samples.
        stagger = self.stagger_s()
        self._next_admit = max(self._next_admit, now - stagger) + stagger

    def _worst_growth(self, now: float, jobs: list[Job], peak: int) -> int:
        """The most `jobs` will hold beyond what they hold now, over the next time-to-peak and a
        half, as the learned shape predicts: staggered jobs peak one after the other, and a job
        past its front end gives memory back, so the worst moment is what must fit, not all
        peaks. A job not yet let go counts from where it stands (a frozen one has run a while)."""
        ramp = self._learned.ramp_s
        worst = 0
        for step in range(PREDICTION_STEPS + 1):
            ahead = ramp * 1.5 * step / PREDICTION_STEPS
            total = sum(self._learned.predict(j, j.ran_s(now) + ahead, peak) - j.rss for j in jobs)
            worst = max(worst, total)
        return worst

    def _pressure(self, r: Reading) -> str | None:
        if r.psi_some_avg10 is not None and r.psi_some_avg10 >= PSI_PRESSURE:
            return f"memory pressure: PSI some avg10 {r.psi_some_avg10:.0f}%"
        grown = r.swap_used - self._swap_at_start
        if grown > SWAP_GROWTH_BYTES:
            return f"swapping: {gib(grown)} more swap in use than at the start"
        return None

    def _decide_jobs(self, now: float, to: int, why: str) -> None:
        to = max(1, min(to, self.ceiling))
        if to == self.allowed:
            return
        decision = Decision(now, self.allowed, to, f"{why} → jobs {self.allowed} → {to}")
        self.allowed = to
        self.decisions.append(decision)
        self._emit(Throttle(decision.jobs_from, decision.jobs_to, decision.reason))
