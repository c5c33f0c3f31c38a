"""What a build's compile jobs teach the memory governor: how large a job's peak is, how long it
takes to reach it and what it holds after it (`Learned`), kept beside the build tree between runs
(`Lessons`), so that a build resumed after a kill, or retried after an OOM, starts from what this
very build showed instead of the recipe's guess."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from steps.building.processtree import SAMPLE_INTERVAL_S, Job
from steps.core.safefs import read_bounded
from steps.formats.state import write_atomic

# A job is past its peak once it has been near the learned peak and fallen back by a fifth.
PEAK_NEAR = 0.5
PEAK_FALLBACK = 0.8
PEAK_SAFETY = 1.05  # learned peak = the largest job peak seen, plus this margin
# The shape a job is predicted to follow after its front-end peak: down to the plateau over half
# the time it took to climb, the plateau first guessed at half the peak (docs/design.md: the
# measured flash-attn build fell by half after its front end), then learned from jobs past it.
FALL_RATIO = 0.5
PLATEAU_GUESS = 0.5
LESSONS_KEPT = 16  # the most recent job peaks and ramps the typical values come from
# Bounds a kept lesson must be within to be believed (a job of 1 TiB, a front end of a day).
MAX_SANE_PEAK = 2**40
MAX_SANE_RAMP_S = 86400.0
LESSONS_LIMIT = 64 * 1024  # a lessons file is under 2 KiB


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
        return lessons if lessons.believable() else None

    def believable(self) -> bool:
        sizes = (self.largest_peak, *self.peaks)
        return bool(
            self.peaks
            and all(0 < p <= MAX_SANE_PEAK for p in sizes)
            and all(0 < r <= MAX_SANE_RAMP_S for r in self.ramps)  # NaN fails both
            and 0 < self.plateau <= 1
        )


@dataclass
class Learned:
    """What finished front ends taught: the per-job peak and how long it takes to reach.

    `lessons_file`: where they are kept (beside the build tree), rewritten each time a job
    passes its peak, so that even a killed run leaves them."""

    peak_job: int
    ramp_s: float
    lessons_file: Path | None = None
    typical_peak: int = 0
    plateau: float = PLATEAU_GUESS
    largest_peak: int = 0
    peaks: list[int] = field(default_factory=list)
    ramps: list[float] = field(default_factory=list)
    settled: list[Job] = field(default_factory=list)  # past their peak: they teach the plateau

    @classmethod
    def starting_from(cls, peak_job: int, ramp_s: float, lessons_file: Path | None) -> Learned:
        """The recipe's guesses, or what an earlier run of the same build learned."""
        learned = cls(peak_job=peak_job, ramp_s=ramp_s, lessons_file=lessons_file)
        lessons = Lessons.load(lessons_file) if lessons_file else None
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

    def observe(self, job: Job) -> None:
        """A job just measured: one already larger than the estimate corrects it at once,
        before its peak; one that has fallen back from near the peak has passed it."""
        self.peak_job = max(self.peak_job, job.rss)
        if (
            not job.past_peak
            and job.peak >= PEAK_NEAR * self.peak_job
            and job.rss <= PEAK_FALLBACK * job.peak
        ):
            job.past_peak = True
            self._learn_from(job)

    def job_ended(self, job: Job) -> None:
        # A job that never fell back from its peak still taught us that peak.
        if not job.past_peak and job.peak >= PEAK_NEAR * self.peak_job:
            self._learn_from(job)

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

    def _learn_from(self, job: Job) -> None:
        self.peaks.append(job.peak)
        self.settled.append(job)
        if job.admitted is not None:
            self.ramps.append(max(job.ran_to_peak_s, SAMPLE_INTERVAL_S))
        self._update()
        lessons = self.lessons()
        if self.lessons_file is not None and lessons is not None:
            with contextlib.suppress(OSError):  # a lesson not kept costs a guess, not the build
                lessons.save(self.lessons_file)

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
