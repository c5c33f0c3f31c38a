"""One controller per screen (no Textual here): what each screen shows and what its keys do
to the Session. The screens are thin views over these."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from app.tui.runmodel import RunModel
from app.tui.session import Session, parse_value, show_value
from app.tui.widgets.fields import FieldSpec
from steps.engine import RESUME_COMMAND
from steps.facts import Facts
from steps.knowledge import knowledge
from steps.paths import Paths
from steps.plan import Action, Plan, Step
from steps.runner import Runner, RunnerError
from steps.state import State
from steps.warnings import machine_warnings

GIB = 2**30


def gib(n: int | None) -> str:
    return "unknown" if n is None else f"{n / GIB:.1f} GiB"


class MachineController:
    def __init__(self, session: Session) -> None:
        self.session = session

    def rows(self) -> list[tuple[str, str]]:
        f: Facts = self.session.facts
        rows = [
            ("System", f"{f.os.pretty or f.os.id or 'unknown OS'} ({f.os.arch or '?'})"),
            ("Kernel", f"{f.kernel.release or 'unknown'}"),
        ]
        if f.gpus:
            counts = Counter(
                (
                    g.name or f"unknown NVIDIA GPU {g.pci_device_id}",
                    g.compute_capability,
                    g.memory_bytes,
                )
                for g in f.gpus
            )
            for (name, cc, mem), n in counts.items():
                size = f", {gib(mem)}" if mem else ""
                rows.append(
                    (
                        "GPUs" if len(rows) == 2 else "",
                        f"{n} \u00d7 {name} (compute {cc or '?'}{size})",
                    )
                )
        else:
            rows.append(("GPUs", "none found"))
        d = f.driver
        if d:
            state = "loaded" if d.loaded else "installed, not loaded"
            rows.append(
                (
                    "Driver",
                    f"{d.version} ({d.modules or '?'} modules, {state}), "
                    f"CUDA up to {d.cuda_max or 'unknown'}",
                )
            )
        else:
            rows.append(("Driver", "none loaded"))
        rows.append(
            ("Toolkits", ", ".join(f"CUDA {t.version} ({t.path})" for t in f.toolkits) or "none")
        )
        m = f.memory
        swap = "no swap" if not m.swap_total_bytes else f"{gib(m.swap_total_bytes)} swap"
        rows.append(
            (
                "CPU, RAM",
                f"{f.cpu.logical or '?'} cores, {gib(m.total_bytes)} RAM "
                f"({gib(m.available_bytes)} free), {swap}",
            )
        )
        rows.append(("Disk free", ", ".join(f"{p} {gib(v)}" for p, v in f.disk_free_bytes.items())))
        rows.append(("Secure Boot", f.secure_boot))
        if f.user:
            rows.append(("User", f"{f.user.name} ({f.user.home})"))
        return rows

    def warnings(self) -> list[str]:
        seen: list[str] = []
        for w in [
            *machine_warnings(self.session.facts),
            *self.session.notes,
            *self.session.plan().warnings,
        ]:
            if w not in seen:
                seen.append(w)
        return seen


STEP_TITLES = {
    "driver": "NVIDIA driver",
    "toolkit": "CUDA toolkit(s)",
    "venv": "Python venv with PyTorch",
    "extensions": "CUDA extensions",
}


class StepController:
    """A step screen: what is already there, the answers it takes, the exact commands."""

    def __init__(self, session: Session, step: str) -> None:
        self.session = session
        self.name = step

    @property
    def title(self) -> str:
        return STEP_TITLES[self.name]

    def step(self) -> Step:
        return self.session.plan().step(self.name)

    def fields(self) -> list[FieldSpec]:
        k = knowledge()
        if self.name == "driver":
            return [
                FieldSpec("driver.action", "Install", "select", ("auto", "install", "skip")),
                FieldSpec("driver.branch", "Branch", hint='"auto" or e.g. 580'),
                FieldSpec(
                    "driver.modules", "Kernel modules", "select", ("auto", "open", "proprietary")
                ),
                FieldSpec("reboot.policy", "Reboot", "select", ("ask", "auto", "never")),
            ]
        if self.name == "toolkit":
            return [
                FieldSpec("toolkit.versions", "CUDA versions", "list", hint="auto, or 12.8, 13.0")
            ]
        if self.name == "venv":
            return [
                FieldSpec("venv.path", "Venv path", hint="~/ml-env"),
                FieldSpec("venv.python", "Python", hint="3.12"),
                FieldSpec("venv.user", "Owner", hint="auto = the sudo user"),
                FieldSpec("torch.version", "torch version", hint='auto, or "==2.8.0"'),
                FieldSpec("torch.cuda", "torch build", "select", ("auto", *k.torch.build_names)),
                FieldSpec("torch.packages", "More packages", "strlist", hint="comma separated"),
                FieldSpec("torch.index_url", "Index URL", hint="auto"),
            ]
        specs = []
        for i, ext in enumerate(self.session.answers.extensions):
            specs += [
                FieldSpec(f"extensions[{i}].version", f"{ext.name} version"),
                FieldSpec(f"extensions[{i}].archs", "  archs", "list", hint="auto, or 9.0, 12.0"),
                FieldSpec(
                    f"extensions[{i}].source", "  source", "select", ("auto", "wheel", "build")
                ),
            ]
        specs += [
            FieldSpec("build.max_jobs", "Max jobs", "jobs", hint="auto, or a number"),
            FieldSpec("build.memory_reserve", "RAM reserve", hint='"10%" or "8GiB"'),
            FieldSpec("build.memory_limit", "RAM limit", hint='auto, or "32GiB"'),
        ]
        return specs

    def value(self, spec: FieldSpec) -> str:
        return show_value(self.session.value(spec.key))

    def set(self, spec: FieldSpec, raw: str) -> str | None:
        """Apply what was typed; the reason it is refused, or None."""
        return self.session.set_value(spec.key, parse_value(raw, spec.kind))

    def addable(self) -> list[str]:
        have = {e.name for e in self.session.answers.extensions}
        return [n for n in knowledge().extensions if n not in have]

    def add(self, name: str, version: str) -> str | None:
        if not version.strip():
            return f"extensions: {name} needs a version, e.g. 2.8.3 for flash-attn"
        return self.session.add_extension(name, version.strip())

    def remove(self, index: int) -> None:
        self.session.remove_extension(index)

    def existing(self) -> list[str]:
        """What is already on the machine for this step, in plain words."""
        s = self.session
        f = s.facts
        c = s.choices()
        if self.name == "driver":
            out = []
            if not f.gpus:
                out.append("No NVIDIA GPU: no driver is needed.")
            elif f.driver:
                out.append(
                    f"Driver {f.driver.version} ({f.driver.modules or '?'} modules) is "
                    f"{'loaded' if f.driver.loaded else 'installed but not loaded'}; it runs CUDA "
                    f"up to {f.driver.cuda_max or 'unknown'}."
                )
            else:
                out.append("No NVIDIA driver is loaded.")
            if f.gpus:
                out.append(
                    f"Wanted: branch {c.driver_branch} or newer, {c.driver_modules} modules, "
                    f"to run torch's CUDA {c.cuda or '(CPU build)'}."
                )
            if f.nouveau_loaded:
                out.append("nouveau is loaded: it is blacklisted, then a reboot.")
            if f.secure_boot == "enabled" and f.gpus:
                out.append("Secure Boot is on: the module's key must be enrolled at next boot.")
            return out
        if self.name == "toolkit":
            have = ", ".join(f"CUDA {t.version} at {t.path}" for t in f.toolkits) or "none"
            want = ", ".join(c.toolkits) or "none (torch is the CPU build)"
            return [f"Installed: {have}.", f"Wanted: {want}; torch is built with CUDA {c.cuda}."]
        if self.name == "venv":
            venv = s.venv()
            out = [f"Venv {c.venv_path}, owned by {c.owner.name}."]
            if s.facts_file is not None:
                out.append("Recorded machine: its venv cannot be looked at.")
            elif venv is None:
                out.append("It does not exist yet.")
            else:
                torch = venv.version_of("torch")
                out.append(
                    f"It exists: Python {venv.python_version or '?'}, "
                    f"torch {torch or 'not installed'}."
                )
            out.append(f"torch: {c.torch_requirement} ({c.torch_build} build).")
            pythons = ", ".join(p.version for p in f.pythons) or "none"
            out.append(f"Pythons on the machine: {pythons}.")
            return out
        out = []
        if not s.answers.extensions:
            out.append("No extension chosen: add one below (a to add), or continue.")
        for t in c.build_targets:
            out.append(
                f"{t.answer.name} {t.answer.version}: compute {', '.join(t.compute_capabilities)}, "
                f"CUDA_HOME {t.cuda_home}, up to {t.max_jobs} jobs."
            )
        out.append(
            f"{f.cpu.logical or '?'} cores, {gib(f.memory.available_bytes)} RAM free: a live "
            "governor keeps the compile from running the machine out of memory."
        )
        return out


class ReviewController:
    def __init__(self, session: Session) -> None:
        self.session = session

    def plan(self) -> Plan:
        return self.session.plan()

    def plan_json(self) -> dict[str, Any]:
        return json.loads(self.plan().to_json())

    def why_not(self) -> str | None:
        return self.session.why_not_apply()


class ResumeController:
    """After a reboot or a dropped session: what is done, what the reboot was for and whether
    it worked (the machine probed again), what is next."""

    def __init__(self, session: Session, state: State) -> None:
        self.session = session
        self.state = state

    def done(self) -> list[str]:
        return [a for a, r in self.state.actions.items() if r.status == "done"]

    def pending(self) -> list[str]:
        plan = self.state.plan or {"steps": []}
        done = set(self.done())
        return [a["id"] for s in plan["steps"] for a in s["actions"] if a["id"] not in done]

    def headline(self) -> str:
        return {
            "reboot": "The setup paused for a reboot.",
            "failed": "The last run stopped at a failure.",
            "running": "The last run was interrupted (the session or the engine was stopped).",
        }.get(self.state.phase, f"The last run is {self.state.phase}.")

    def reboot_lines(self) -> list[str]:
        record = self.state.reboot
        if record is None:
            return []
        facts = self.session.reprobe()
        out = [f"The reboot was for {record.action}: load NVIDIA driver {record.driver_branch}."]
        rebooted = record.boot_id is None or facts.boot_id != record.boot_id
        out.append(
            "The machine has rebooted."
            if rebooted
            else "The machine has NOT rebooted yet: reboot first (sudo reboot)."
        )
        d = facts.driver
        if d and d.loaded:
            ok = record.driver_branch is None or d.branch >= record.driver_branch
            out.append(
                f"Driver {d.version} is loaded ({d.modules or '?'} modules), CUDA up to "
                f"{d.cuda_max or '?'}: " + ("it worked." if ok else "an older branch than wanted.")
            )
        elif rebooted:
            out.append(
                "No NVIDIA driver is loaded: continuing loads it by hand to find out why "
                "(Secure Boot, say)."
            )
        return out

    def failure_lines(self) -> list[str]:
        report = self.session.report() or {}
        failure = report.get("failure") if report.get("run_id") == self.state.run_id else None
        if not failure:
            return []
        return [
            f"Failed: {failure['what']}",
            f"Why: {failure['why']}",
            f"Next: {failure['next']}",
        ] + ([f"Log: {failure['log']}"] if failure.get("log") else [])


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
                f"Dry run complete: {n} action(s) would run, nothing was executed (exit {f.code})."
            )
        return f"{f.result}: {f.summary} (exit {f.code})"

    def logs(self) -> str | None:
        if self.model.dry_run or not self.model.run_id:
            return None
        return str(Paths(self.session.fs).log_dir / self.model.run_id)

    def activate(self) -> str:
        return f"source {self.session.choices().venv_path}/bin/activate"

    def next_step(self) -> str | None:
        m = self.model
        if m.failed is not None:
            return m.failed.next
        if m.finished is not None and m.finished.code == 10:
            return "sudo reboot, then: sudo mlsetup (it opens on the Resume screen)"
        if m.lost:
            return RESUME_COMMAND
        return None

    def smoke_imports(self) -> list[str]:
        return [t.recipe.import_name for t in self.session.choices().build_targets]

    def engine_smoke(self) -> list[str]:
        """The engine's own smoke actions (an extension imported and run in the venv)."""
        out = []
        for a in self.model.actions.values():
            if not a.id.endswith(".smoke") or a.status in ("pending", "dry-run"):
                continue
            last = next((line for line in reversed(a.lines) if line.strip()), "")
            mark = "✓" if a.status in ("done", "already-done") else "✗"
            out.append(f"{mark} {a.title}" + (f": {last.strip()}" if last else ""))
        return out

    def smoke(self) -> list[str]:
        """Run the smoke test in the venv (as its owner, through the runner): torch sees the
        GPUs, each extension imports. Returns lines to show."""
        m = self.model
        if m.dry_run or self.session.dry_run:
            return ["Dry run: torch and each extension are tried in the venv here."]
        if m.finished is None or m.finished.code != 0:
            return ["The smoke test runs once every step is done."]
        return self._torch_smoke() + self.engine_smoke()

    def _torch_smoke(self) -> list[str]:
        choices = self.session.choices()
        imports = [] if self.engine_smoke() else self.smoke_imports()
        action = Action(
            id="smoke-test",
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
            out.append(f"✗ torch does not import: {data['torch_error']}")
        else:
            gpus = data.get("gpus", 0)
            want = len(self.session.facts.gpus)
            mark = "✓" if gpus == want else "✗"
            out.append(f"{mark} torch {data.get('torch')} sees {gpus} of {want} GPU(s)")
        for name in imports:
            status = data.get(name, "not run")
            out.append(f"✓ {name} imports" if status == "ok" else f"✗ {name}: {status}")
        return out

    def save(self, raw: str) -> tuple[Path | None, str]:
        path = Path(raw.strip() or "./mlsetup-answers.toml")
        try:
            saved = self.session.save_answers(path)
        except OSError as exc:
            return None, f"cannot write {path}: {exc.strerror}"
        return saved, (
            f"Saved to {saved}. Replay it elsewhere: sudo mlsetup apply --answers {saved}"
        )
