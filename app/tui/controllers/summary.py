"""Summary: the result, what the operator must still do, what was refused and why, the smoke
test, where the logs are, and Save answers."""

from __future__ import annotations

import json
from pathlib import Path

from app.tui.controllers.todo import activate_line, reboot_lines
from app.tui.runmodel import RunModel
from app.tui.session import DEFAULT_SAVE, Session
from app.tui.trail import answers_screen
from steps.core.exitcodes import EXIT_OK, EXIT_REBOOT
from steps.core.nextcommands import RESUME_COMMAND
from steps.core.paths import Paths
from steps.formats.plan import Action
from steps.planning import registry
from steps.run.runner import Runner, RunnerError

SMOKE_SCRIPT = """
import importlib, json, sys
out = {}
try:
    import torch
    out["torch"] = torch.__version__
    cuda = getattr(torch, "cuda", None)
    out["gpus"] = cuda.device_count() if cuda and cuda.is_available() else 0
except Exception as exc:
    out["torch_error"] = f"{type(exc).__name__}: {exc}"
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
        out[name] = "ok"
    except Exception as exc:
        out[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


class SummaryController:
    def __init__(self, session: Session, model: RunModel) -> None:
        self.session = session
        self.model = model

    def result(self) -> str:
        m = self.model
        if m.lost:
            return f"The engine stopped without finishing: {m.lost}"
        if m.finished is None:
            return "No run has finished in this session."
        f = m.finished
        if m.dry_run:
            n = sum(1 for a in m.actions.values() if a.status == "dry-run")
            return (
                f"Dry run complete: {n} {'action' if n == 1 else 'actions'} would run; none "
                f"ran and nothing was changed on this machine (exit {f.code})."
            )
        return f"{f.result}: {f.summary} (exit {f.code})"

    def logs(self) -> str | None:
        if self.model.dry_run or not self.model.run_id:
            return None
        return str(Paths(self.session.fs).log_dir / self.model.run_id)

    def activate(self) -> str | None:
        """The line that activates the venv, where there is one to use: after a real run that
        ended well, or a venv already on the machine (not after a dry run that made none)."""
        m = self.model
        done = m.finished is not None and m.finished.code == 0 and not m.dry_run
        if done or (not m.dry_run and self.session.venv() is not None):
            return activate_line(self.session)
        return None

    def would_leave(self) -> list[str]:
        """After a dry run: what a real apply of the same plan would leave on the machine (each
        pending step's lines, steps.planning.registry)."""
        if not self.model.dry_run or self.model.finished is None:
            return []
        s = self.session
        c, plan = s.choices(), s.plan()
        pending = {st.name for st in plan.steps if st.status == "pending"}
        out = registry.would_leave(registry.PlanInputs(s.facts, s.answers, c), pending)
        if "venv" in pending:
            out.append(f"then: {activate_line(s)}")
        return out or ["nothing new: every step is already satisfied here"]

    def todo(self) -> list[str]:
        """What the operator must still do, in order."""
        m = self.model
        if m.failed is not None:
            return [
                f"Fix it: {m.failed.next}",
                "Or change an answer: r goes back to the "
                f"{answers_screen(m.failed.step)} screen, then Apply again (done actions are not "
                "run again).",
            ]
        if m.lost:
            return [f"Follow or continue the setup: {RESUME_COMMAND}"]
        if m.finished is None:
            return []
        if m.finished.code == EXIT_REBOOT:
            return reboot_lines(self.session)
        if m.dry_run:
            return [
                "Nothing ran and nothing was changed. To apply this plan: sudo mlsetup, or "
                "save the answers (ctrl+s) and run: sudo mlsetup apply --answers FILE"
            ]
        return [f"Use the venv: {activate_line(self.session)}"]

    def refused(self) -> list[str]:
        """What the planner refused or warned about, with why (the Review's warnings)."""
        plan = self.model.plan
        if plan is not None:
            return list(plan.get("warnings", []))
        return self.session.plan().warnings

    def smoke_imports(self) -> list[str]:
        return [t.recipe.import_name for t in self.session.choices().build_targets]

    def engine_smoke(self, ok: str = "\u2713", bad: str = "\u2717") -> list[str]:
        """The engine's own smoke actions (an extension imported and run in the venv)."""
        out = []
        for a in self.model.actions.values():
            if a.kind != "smoke" or a.status in ("pending", "dry-run"):
                continue
            last = next((line for line in reversed(a.lines) if line.strip()), "")
            mark = ok if a.status in ("done", "already-done") else bad
            out.append(f"{mark} {a.title}" + (f": {last.strip()}" if last else ""))
        return out

    def smoke(self, ok: str = "\u2713", bad: str = "\u2717") -> list[str]:
        """Run the smoke test in the venv (as its owner, through the runner): torch sees the
        GPUs, each extension imports. Returns lines to show."""
        m = self.model
        if m.dry_run or self.session.dry_run:
            return ["Dry run: nothing was installed, so nothing is tried in the venv."]
        if m.finished is None or m.finished.code != EXIT_OK:
            return ["The smoke test runs once every step is done."]
        return self._torch_smoke(ok, bad) + self.engine_smoke(ok, bad)

    def _torch_smoke(self, ok: str, bad: str) -> list[str]:
        choices = self.session.choices()
        imports = [] if self.engine_smoke() else self.smoke_imports()
        action = Action(
            id="smoke-test",
            kind="smoke",
            title="Smoke test",
            argv=[choices.venv_python, "-c", SMOKE_SCRIPT, *imports],
            user=choices.owner.run_as,
        )
        log = Paths(self.session.fs).action_log(self.model.run_id or "wizard", action.id)
        try:
            result = Runner(self.session.fs, lambda _e: None).run(action, log)
        except RunnerError as exc:
            return [f"could not run the smoke test: {exc}"]
        if result.exit_code != 0 or not result.tail:
            return [f"the smoke test failed (exit {result.exit_code}); see {log}"]
        try:
            data = json.loads(result.tail[-1])
        except ValueError:
            return [f"the smoke test printed something unexpected; see {log}"]
        out = []
        if "torch_error" in data:
            out.append(f"{bad} torch does not import: {data['torch_error']}")
        else:
            gpus = data.get("gpus", 0)
            want = len(self.session.facts.gpus)
            mark = ok if gpus == want else bad
            out.append(f"{mark} torch {data.get('torch')} sees {gpus} of {want} GPU(s)")
        for name in imports:
            status = data.get(name, "not run")
            out.append(f"{ok} {name} imports" if status == "ok" else f"{bad} {name}: {status}")
        return out

    def save(self, raw: str) -> tuple[Path | None, str]:
        """Save the answers; (the path, what to say) or (None, why it could not)."""
        path = Path(raw.strip() or DEFAULT_SAVE)
        try:
            saved = self.session.save_answers(path)
        except OSError as exc:
            return None, f"cannot write {path}: {exc.strerror or exc}"
        return saved.path, (
            f"Saved to {saved}. Replay it elsewhere: sudo mlsetup apply --answers {saved.path}"
        )

    def help(self) -> str:
        return (
            "Result says how the run ended; Still to do is what only you can do (a reboot, "
            "MOK enrolment at the console, the line that activates the venv); Refused lists "
            "what the plan left out and why.\n\n"
            "The smoke test runs torch and each extension in the venv as its owner.\n"
            "Save answers writes the file that replays this setup elsewhere: "
            "sudo mlsetup apply --answers FILE. After a failure, r goes back to the failed "
            "step to change an answer and apply again."
        )
