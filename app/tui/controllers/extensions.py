"""Extensions: each one asked for, what it is built for, adding and removing one, the build's
jobs and RAM."""

from __future__ import annotations

from app.tui.controllers.answerfields import select, text
from app.tui.controllers.buildtime import build_time, jobs_text, slow_builds
from app.tui.controllers.step import StepController
from app.tui.session import parse_value
from app.tui.widgets.fields import FieldSpec
from steps.core.sizes import gib
from steps.decide.choices import BuildTarget, build_ram
from steps.formats.answers import BuildAnswers
from steps.formats.plan import Step
from steps.known.knowledge import knowledge


class ExtensionsController(StepController):
    def fields(self) -> list[FieldSpec]:
        specs = []
        for i, ext in enumerate(self.session.answers.extensions):
            specs += [
                text(f"extensions[{i}].version", ext.name),
                text(f"extensions[{i}].archs", "  archs", "list"),
                select(f"extensions[{i}].source", "  source"),
            ]
        return [
            *specs,
            text("build.max_jobs", "Max jobs", "jobs"),
            text("build.memory_reserve", "RAM reserve"),
            text("build.memory_limit", "RAM limit"),
        ]

    def set(self, spec: FieldSpec, raw: str) -> str | None:
        if spec.key == "build.memory_reserve" and parse_value(raw, spec.kind) == "auto":
            default = BuildAnswers.model_fields["memory_reserve"].default  # auto as elsewhere
            return self.session.set_value(spec.key, default)
        return super().set(spec, raw)

    def warnings(self) -> list[str]:
        # a release the index lacks is found by the resolution (a worker): said here too
        refused = self.session.stack_refused() or ""
        about_these = [refused] if refused.startswith("extensions[") else []
        return about_these + super().warnings() + slow_builds(self.session)

    def field_note(self, spec: FieldSpec) -> str:
        check = self.session.release_check()  # the index being asked about this release
        return check.note if check is not None and check.field == spec.key else ""

    def back_to(self, spec: FieldSpec) -> str | None:
        """The value before the edit the index is being asked about (Esc enters it again)."""
        check = self.session.release_check()
        return check.back_to if check is not None and check.field == spec.key else None

    def left_out(self) -> list[str]:
        built = {t.answer.name for t in self.session.choices().build_targets}
        return [
            f"{e.name} {e.version}" for e in self.session.answers.extensions if e.name not in built
        ]

    def addable(self) -> list[str]:
        have = {e.name for e in self.session.answers.extensions}
        return [n for n in knowledge().extensions if n not in have]

    @staticmethod
    def known_version(name: str) -> str:
        """The release its recipe was checked against: what the Add box starts with."""
        return knowledge().extensions[name].checked

    def add(self, name: str, version: str) -> str | None:
        if not version.strip():
            return (
                f"extensions: {name} needs a version, e.g. {self.known_version(name)} "
                "(the release its recipe was checked against)"
            )
        return self.session.add_extension(name, version.strip())

    def remove(self, index: int) -> None:
        self.session.remove_extension(index)

    def existing(self) -> list[str]:
        s = self.session
        f, c = s.facts, s.choices()
        out = []
        if not s.answers.extensions:
            out.append("No extension chosen: add one below (a to add), or continue.")
        for t in c.build_targets:
            out.append(
                f"{t.answer.name} {t.answer.version}: compute {', '.join(t.compute_capabilities)}, "
                f"CUDA_HOME {t.cuda_home}, up to {jobs_text(t.max_jobs)}."
            )
        out.append(
            f"{f.cpu.logical or '?'} cores, {gib(f.memory.available_bytes)} RAM free: a live "
            "governor keeps the compile from running the machine out of memory."
        )
        return out

    def help(self) -> str:
        return (
            "Extensions are built for the torch and the CUDA toolkit chosen before, and only "
            "for the GPUs here (archs auto), which saves most of the compile time.\n\n"
            "source: auto uses a wheel built earlier or the project's release wheel if one "
            "matches, else compiles; build always compiles; wheel never compiles.\n"
            "Max jobs auto: a live governor starts compile jobs only while RAM allows, and "
            "RAM reserve is never given to them.\n"
            "An extension that cannot run here is refused, with why, above the commands."
        )

    def confirm_section(self, step: Step) -> tuple[str, list[str]] | None:
        s = self.session
        usable = self._build_ram()
        lines = [
            f"{t.answer.name} {t.answer.version} for compute "
            f"{', '.join(t.compute_capabilities)}: {build_time(t, s.facts.cpu.logical)}; "
            f"RAM up to {usable}, {self._jobs(t)}"
            for t in s.choices().build_targets
        ]
        return ("Builds", lines or [step.reason])

    def _build_ram(self) -> str:
        usable = build_ram(self.session.facts, self.session.answers)
        if usable is None:
            return "what the governor allows"
        reserve = self.session.answers.build.memory_reserve
        return f"{gib(usable, digits=0)} (the governor keeps {reserve} free)"

    def _jobs(self, target: BuildTarget) -> str:
        """How many jobs run at once, as the governor will let them: those whose peaks the RAM
        holds, within build.max_jobs (4 jobs of 6.5 GiB are not "up to 4" in 5 GiB)."""
        fit = target.jobs_at_once
        known = target.recipe.peak_job_gib
        peak = (
            f"one job peaks at about {known:g} GiB"
            if known is not None
            else f"one job's peak is unknown: counted as {target.recipe.job_peak_gib:g} GiB "
            "until the governor learns it from the build"
        )
        if fit < target.max_jobs:
            return (
                f"{jobs_text(fit)} at once ({peak}; build.max_jobs {target.max_jobs} is the "
                "ceiling)"
            )
        return f"up to {jobs_text(target.max_jobs)} at once ({peak})"
