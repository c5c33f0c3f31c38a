"""A step screen (Driver, Toolkit, Venv, Extensions): what is already there, the answers it
takes, what was refused and why, the exact commands. Everything is read again from the
planner each time it is asked, so a screen shown after Back is current."""

from __future__ import annotations

from app.tui.controllers.answerfields import select, text
from app.tui.controllers.buildtime import jobs_text, slow_builds
from app.tui.session import Session, parse_value, show_value
from app.tui.widgets.fields import FieldSpec
from steps.answers import BuildAnswers
from steps.knowledge import knowledge
from steps.plan import Step
from steps.units import gib

STEP_TITLES = {
    "driver": "NVIDIA driver",
    "toolkit": "CUDA toolkit(s)",
    "venv": "Python venv with PyTorch",
    "extensions": "CUDA extensions",
}
# Which of the planner's warnings a step screen shows (all of them are on Review and Summary).
WARNING_WORDS = {
    "driver": ("driver", "nouveau", "Secure Boot", "kernel headers"),
    "toolkit": ("toolkit", "/usr/local"),
    "venv": ("torch", "venv", "Python"),
}


class StepController:
    def __init__(self, session: Session, step: str) -> None:
        self.session = session
        self.name = step

    @property
    def title(self) -> str:
        return STEP_TITLES[self.name]

    def step(self) -> Step:
        return self.session.plan().step(self.name)

    def fields(self) -> list[FieldSpec]:
        if self.name == "driver":
            return [
                select("driver.action", "Install"),
                text("driver.branch", "Branch"),
                select("driver.modules", "Kernel modules"),
                select("reboot.policy", "Reboot"),
            ]
        if self.name == "toolkit":
            return [text("toolkit.versions", "CUDA versions", "list")]
        if self.name == "venv":
            return [
                text("venv.path", "Venv path"),
                text("venv.python", "Python"),
                text("venv.user", "Owner"),
                text("torch.version", "torch version"),
                select("torch.cuda", "torch build"),
                text("torch.packages", "More packages", "strlist"),
                text("torch.index_url", "Index URL"),
            ]
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

    def value(self, spec: FieldSpec) -> str:
        return show_value(self.session.value(spec.key))

    def set(self, spec: FieldSpec, raw: str) -> str | None:
        """Apply what was typed; the reason it is refused, or None."""
        value = parse_value(raw, spec.kind)
        if spec.key == "build.memory_reserve" and value == "auto":
            value = BuildAnswers.model_fields["memory_reserve"].default  # auto as elsewhere
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
        return self.session.set_value(spec.key, value)

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

    def warnings(self) -> list[str]:
        """What the planner refused or warns about that this step decides, less what the
        step's own lines above it already say (the Driver screen said "no NVIDIA driver is
        loaded" twice)."""
        ws = self.session.plan().warnings
        if self.name == "extensions":
            names = [e.name for e in self.session.answers.extensions]
            mine = [w for w in ws if any(w.startswith(n + " ") for n in names)]
            return mine + slow_builds(self.session)
        words = WARNING_WORDS[self.name]
        said = " ".join(self.existing()).lower()
        return [
            w for w in ws if any(word in w for word in words) and w.rstrip(".").lower() not in said
        ]

    def skipped(self) -> list[str]:
        """Extensions asked for that the plan leaves out (each one's why is a warning)."""
        built = {t.answer.name for t in self.session.choices().build_targets}
        return [
            f"{e.name} {e.version}" for e in self.session.answers.extensions if e.name not in built
        ]

    def existing(self) -> list[str]:
        """What is already on the machine for this step, and what is wanted, in plain words."""
        return {
            "driver": self._driver,
            "toolkit": self._toolkit,
            "venv": self._venv,
            "extensions": self._extensions,
        }[self.name]()

    def _driver(self) -> list[str]:
        f, c = self.session.facts, self.session.choices()
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
            runs = f"torch's CUDA {c.cuda}" if c.cuda else "torch (the CPU build)"
            out.append(
                f"Wanted: branch {c.driver_branch} or newer, {c.driver_modules} modules, "
                f"to run {runs}."
            )
        return out  # nouveau, Secure Boot and missing headers: the warnings below say each

    def _toolkit(self) -> list[str]:
        f, c = self.session.facts, self.session.choices()
        have = ", ".join(f"CUDA {t.version} at {t.path}" for t in f.toolkits) or "none"
        built = f"torch is built with CUDA {c.cuda}" if c.cuda else "torch is the CPU build"
        want = ", ".join(c.toolkits) or "none"  # an empty list is refused at the answers
        return [f"Installed: {have}.", f"Wanted: {want}; {built}."]

    def _venv(self) -> list[str]:
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
        out.append(f"torch: {c.torch_requirement} ({c.torch_build} build).")
        if not f.gpus and c.cuda:
            out.append(
                f"No NVIDIA GPU here: the {c.torch_build} build installs, but torch runs on "
                "the CPU until a GPU and its driver are there."
            )
        pythons = ", ".join(p.version for p in f.pythons) or "none"
        out.append(f"Pythons on the machine: {pythons}.")
        return out

    def _extensions(self) -> list[str]:
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
        c = self.session.choices()
        if self.name == "driver":
            runs = f"CUDA {c.cuda}" if c.cuda else "no CUDA (torch is the CPU build)"
            return (
                f"The driver must run the CUDA torch is built with: here {runs}, so branch "
                f"{c.driver_branch} or newer with {c.driver_modules} kernel modules (open "
                "modules need Turing, compute 7.5+; Blackwell needs them).\n\n"
                "Install: auto installs only when the loaded driver cannot run that CUDA; "
                "install always; skip never (torch may then not see the GPUs).\n"
                "Reboot: a new driver loads after a reboot. ask = you are asked; auto = the "
                "machine reboots by itself and the setup resumes; never = you reboot later."
            )
        if self.name == "toolkit":
            want = ", ".join(c.toolkits) or "none"
            return (
                f"Extensions compile with nvcc, and torch refuses a toolkit whose CUDA major "
                f"differs from its own. Wanted here: {want}. auto = exactly the CUDA torch is "
                "built with; a list installs each beside the others (/usr/local/cuda-X.Y): "
                "nothing already installed is removed."
            )
        if self.name == "venv":
            return (
                f"The venv {c.venv_path} belongs to {c.owner.name}, who will use it; every "
                "command in it runs as that account.\n\n"
                f"torch build: auto picks the newest build the GPUs and the driver run (here "
                f"{c.torch_build}); cpu for no GPU.\n"
                "More packages are resolved together with torch into one lock, so none of "
                "them can replace the torch the extensions are built for."
            )
        return (
            "Extensions are built for the torch and the CUDA toolkit chosen before, and only "
            "for the GPUs here (archs auto), which saves most of the compile time.\n\n"
            "source: auto uses a wheel built earlier or the project's release wheel if one "
            "matches, else compiles; build always compiles; wheel never compiles.\n"
            "Max jobs auto: a live governor starts compile jobs only while RAM allows, and "
            "RAM reserve is never given to them.\n"
            "An extension that cannot run here is refused, with why, above the commands."
        )
