"""Venv: where it is, whose it is, the torch and the packages resolved with it."""

from __future__ import annotations

import time

from app.tui.controllers.answerfields import select, text
from app.tui.controllers.step import StepController
from app.tui.session import parse_value
from app.tui.widgets.fields import FieldSpec
from steps.formats.plan import Step


class VenvController(StepController):
    SHOWS_RESOLUTION = True

    def fields(self) -> list[FieldSpec]:
        return [
            text("venv.path", "Venv path"),
            text("venv.python", "Python"),
            text("venv.user", "Owner"),
            text("torch.version", "torch version"),
            select("torch.cuda", "torch build"),
            text("torch.packages", "More packages", "strlist"),
            text("torch.index_url", "Index URL"),
        ]

    def set(self, spec: FieldSpec, raw: str) -> str | None:
        value = parse_value(raw, spec.kind)
        if (
            spec.key == "torch.cuda"
            and value not in ("auto", "cpu")
            and not self.session.facts.gpus
        ):
            # the probe's own warning says torch is the CPU build here: keep the plan saying so
            return (
                f'torch.cuda = "{value}": no NVIDIA GPU on this machine, so a CUDA build could '
                "not use one; allowed here: auto, cpu (an answers file for GPU servers may name "
                f"{value})"
            )
        return super().set(spec, raw)

    def existing(self) -> list[str]:
        s = self.session
        f, c = s.facts, s.choices()
        venv = s.venv()
        out = [f"Venv {c.venv_path}, owned by {c.owner.name}."]
        if s.facts_file is not None:
            out.append("Recorded machine: its venv cannot be looked at.")
        elif venv is None:
            out.append("It does not exist yet.")
        else:
            torch = venv.version_of("torch")
            out.append(
                f"It exists: Python {venv.python_version or '?'}, torch {torch or 'not installed'}."
            )
        out.append(self.resolution())
        if not f.gpus and c.cuda:
            out.append(
                f"No NVIDIA GPU here: the {c.torch_build} build installs, but torch runs on "
                "the CPU until a GPU and its driver are there."
            )
        pythons = ", ".join(p.version for p in f.pythons) or "none"
        out.append(f"Pythons on the machine: {pythons}.")
        return out

    def resolution(self) -> str:
        """Where uv's resolution of these answers stands: going on (for how long), the torch
        and build it locked and what held a newer torch back, why it could not run, or uv's
        refusal."""
        s, c = self.session, self.session.choices()
        torch = f"torch: {c.torch_requirement} ({c.torch_build} build)"
        if refused := s.stack_refused():
            return f"uv refused these answers: {refused}"
        stack = s.stack()
        if stack is not None and stack.lock is not None:
            lock = stack.lock
            why = f", held back by {', '.join(lock.decided_by)}" if lock.decided_by else ""
            note = f" ({lock.note})" if lock.note else ""
            return f"{torch}, locked by uv{why}, on Python {lock.python}{note}."
        if stack is not None:
            return f"{torch}, from mlsetup's knowledge: {stack.note}."
        since = s.resolving_since()
        if since is not None:
            seconds = max(0, int(time.time() - since))
            return f"{torch} for now: uv is resolving ({seconds} s so far)."
        return f"{torch}."

    def field_note(self, spec: FieldSpec) -> str:
        """uv's refusal under the field that caused it: the packages when there are some,
        else the torch version."""
        refused = self.session.stack_refused()
        key = "torch.packages" if self.session.answers.torch.packages else "torch.version"
        return f"uv: {refused}" if refused and spec.key == key else ""

    def help(self) -> str:
        c = self.session.choices()
        return (
            f"The venv {c.venv_path} belongs to {c.owner.name}, who will use it; every "
            "command in it runs as that account.\n\n"
            f"torch build: auto picks the newest build the GPUs and the driver run (here "
            f"{c.torch_build}); cpu for no GPU.\n"
            "More packages are resolved together with torch into one lock, so none of "
            "them can replace the torch the extensions are built for."
        )

    def confirm_section(self, step: Step) -> tuple[str, list[str]] | None:
        c = self.session.choices()
        return (f"The venv {c.venv_path} (as {c.owner.name})", [a.title for a in step.actions])
