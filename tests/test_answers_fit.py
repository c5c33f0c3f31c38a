"""Answers checked against the machine and the index at plan time (issue 31): each answer the
model accepts but the machine cannot use is exit 2 in `mlsetup plan --facts`, naming the key,
the value and a value that works; the wizard refuses it on its field with the same words
(tests/tui/test_wizard_fit.py replays this table there)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.tui.controllers.confirm import ConfirmController
from app.tui.session import Session, _set_key
from steps.core.rootfs import RootFS
from steps.formats.answers import Answers, answers_from_toml
from steps.formats.facts import load_facts
from steps.planning.planner import make_plan
from tests.common import MACHINES, run_cli
from tests.pkgindex import PackageIndex, standard_index

FLASH_ATTN = '[[extensions]]\nname = "flash-attn"\nversion = "2.8.3"\n'
PREFIX = "mlsetup: input error (answers): "


@dataclass(frozen=True)
class Bad:
    """An answer the model takes that the machine refuses: `key` set to `value` over the
    answers `base` on the recorded `machine`, and what its refusal must name."""

    machine: str
    base: str
    key: str
    value: Any
    names: tuple[str, ...]

    def answers(self) -> Answers:
        data = answers_from_toml(f"version = 1\n{self.base}", "base").model_dump(mode="json")
        _set_key(data, self.key, self.value)
        return Answers.model_validate(data)


BAD = [
    # a pinned CUDA the branch cannot run: the branch, the CUDA, the branch it needs, a build
    Bad(
        "fresh-h100x8-ubuntu2204", '[torch]\ncuda = "cu132"\n', "driver.branch", "575",
        ('driver.branch = "575"', "needs CUDA 13.2", "driver branch 595 or newer",
         'driver.branch = "595" or newer', 'torch.cuda = "cu126", which branch 575 runs'),
    ),
    Bad(
        "fresh-h100x8-ubuntu2204", '[torch]\nversion = "==2.15.0"\n', "driver.branch", "575",
        ('driver.branch = "575"', 'torch.version = "==2.15.0"', "driver branch 595 or newer",
         'torch.version = "==2.14.*" with torch.cuda = "cu126"'),
    ),
    Bad(
        "h200-ubuntu2404", FLASH_ATTN, "extensions[0].archs", ["8.6"],
        ('extensions[0].archs = ["8.6"]', "NVIDIA H200, compute capability 9.0",
         '["9.0"] (the GPUs here)', "build.for_other_machines = true"),
    ),
    Bad(
        "h200-ubuntu2404", FLASH_ATTN, "build.memory_limit", "200GiB",
        ('build.memory_limit = "200GiB"', "this machine has 125.9 GiB of RAM",
         'a size up to 125GiB, such as "62GiB"'),
    ),
    Bad(
        "fresh-h100x8-ubuntu2204", FLASH_ATTN, "build.memory_limit", "4000GiB",
        ('build.memory_limit = "4000GiB"', "this machine has 2016.0 GiB of RAM",
         "a size up to 2015GiB"),
    ),
    Bad(
        "h200-ubuntu2404", FLASH_ATTN, "build.memory_reserve", "150GiB",
        ('build.memory_reserve = "150GiB"', "this machine has 125.9 GiB of RAM",
         'such as "12GiB", or a percentage such as "10%"'),
    ),
    # Secure Boot on, a driver to install: the key is enrolled at the console, by a person
    Bad(
        "fresh-h100x8-ubuntu2204", "", "reboot.policy", "auto",
        ('reboot.policy = "auto"', "Secure Boot is on",
         "sudo mokutil --import /var/lib/shim-signed/mok/MOK.der", "'Enroll MOK'",
         'allowed: "ask"'),
    ),
]  # fmt: skip


def plan_refusal(machine: Path, answers: Answers, tmp_path: Path, **env: str) -> str:
    """`mlsetup plan --facts` exits 2 without a traceback: its message, on one line."""
    path = tmp_path / "answers.toml"
    path.write_text(answers.to_toml())
    run = run_cli("plan", "--facts", str(machine), "--answers", str(path), env=env)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" not in run.stderr and run.stdout == ""
    return " ".join(run.stderr.split())


@pytest.mark.parametrize("bad", BAD, ids=lambda b: f"{b.machine}:{b.key}={b.value}")
def test_an_answer_the_machine_cannot_use_is_exit_2_naming_what_works(bad: Bad, tmp_path):
    message = plan_refusal(MACHINES / f"{bad.machine}.json", bad.answers(), tmp_path)
    assert message.startswith(PREFIX + bad.names[0]), message
    for name in bad.names:
        assert name in message, (name, message)


def facts_with(tmp_path: Path, machine: str, **changes: Any) -> Path:
    """A recorded machine with some of its facts changed ("memory", each GPU's "gpus")."""
    data = json.loads((MACHINES / f"{machine}.json").read_text())
    for key, value in changes.items():
        if key == "gpus":
            for gpu in data["gpus"]:
                gpu.update(value)
        else:
            data[key] = value
    path = tmp_path / f"{machine}-changed.json"
    path.write_text(json.dumps(data))
    return path


def test_on_torch_auto_the_cuda_follows_an_older_branch():
    """driver.branch 575 on a Hopper box: not 2.15's cu132 (595 and newer) but the newest torch
    with a build 575 runs, its toolkit, and no warning that the two disagree."""
    plan = make_plan(
        load_facts(MACHINES / "fresh-h100x8-ubuntu2204.json"),
        answers_from_toml('version = 1\n[driver]\nbranch = "575"\n', "test"),
    )
    sync = next(a for a in plan.actions if a.id == "venv.sync")
    assert sync.argv[sync.argv.index("--torch-backend") + 1] == "cu126"
    assert [a.argv[-1] for a in plan.actions if a.id.startswith("toolkit.install")] == [
        "cuda-toolkit-12-6"
    ]
    assert any(a.title == "Pin driver branch 575" for a in plan.actions)
    assert not any("595" in w for w in plan.warnings)


def test_archs_for_other_machines_are_built_when_the_answers_say_so():
    answers = answers_from_toml(
        "version = 1\n[build]\nfor_other_machines = true\n"
        + FLASH_ATTN
        + 'archs = ["8.6", "9.0"]\n',
        "test",
    )
    plan = make_plan(load_facts(MACHINES / "h200-ubuntu2404.json"), answers)
    build = next(a for a in plan.actions if a.id == "extensions.flash-attn.build")
    assert build.env["FLASH_ATTN_CUDA_ARCHS"] == "80;90"


def test_a_job_peak_above_the_builds_ram_is_a_warning_and_the_confirmation_agrees(tmp_path):
    """An 8 GiB box, one flash-attn job peaking at 6.5 GiB, build.max_jobs = 4: the plan warns
    with the figures and what to do; the confirmation says the one job the RAM holds."""
    gib = 1024**3
    small = facts_with(
        tmp_path,
        "h200-ubuntu2404",
        memory={"total_bytes": 8 * gib, "available_bytes": 7 * gib, "swap_total_bytes": 0},
    )
    answers = answers_from_toml("version = 1\n[build]\nmax_jobs = 4\n" + FLASH_ATTN, "test")
    plan = make_plan(load_facts(small), answers)
    warning = next(w for w in plan.warnings if "peaks at" in w)
    assert "one compile job peaks at about 6.5 GiB, above the 6.2 GiB a build may use" in warning
    assert "add swap" in warning and "prebuilt wheel" in warning

    session = Session(RootFS(tmp_path), load_facts(small), answers, dry_run=True, facts_file=small)
    builds = dict(ConfirmController(session).sections())["Builds"]
    assert "RAM up to 6 GiB" in builds[0] and "1 job at once" in builds[0], builds
    assert "up to 4 jobs" not in builds[0]


# -- refusals that come from the index: a local one, offline --------------------------------


@pytest.fixture
def index(tmp_path: Path) -> PackageIndex:
    return fit_index(tmp_path)


def fit_index(tmp_path: Path) -> PackageIndex:
    """The stack tests' local index with flash-attn (2.8.3, 2.8.3.post2: source only), its
    build requirements and a package that has only source."""
    index = standard_index(tmp_path / "pkgs")
    for name in ("pip", "packaging", "wheel", "ninja", "psutil", "setuptools", "einops"):
        index.add("pypi", name, "1.0")  # flash-attn's build and run-time requirements
    for version in ("2.8.3", "2.8.3.post2"):
        index.add_sdist("pypi", "flash-attn", version, tmp_path / "never-built.log")
    index.add_sdist("pypi", "srconly", "1.0", tmp_path / "never-built.log")
    return index


def index_answers(index: PackageIndex, torch: str = "", extensions: str = "") -> Answers:
    return answers_from_toml(
        f'version = 1\n[torch]\nindex_url = "{index.torch_url}"\n{torch}\n{extensions}', "test"
    )


def test_an_extension_release_the_index_lacks_names_the_newest_it_has(index, tmp_path):
    rtx = MACHINES / "rtx-pro-6000-ubuntu2404.json"
    env = {"UV_DEFAULT_INDEX": index.default_url}
    wrong = FLASH_ATTN.replace("2.8.3", "9.9.9")
    message = plan_refusal(rtx, index_answers(index, extensions=wrong), tmp_path, **env)
    assert message == (
        f'{PREFIX}extensions[0].version = "9.9.9": no flash-attn 9.9.9 on {index.root}/cu130 '
        f"(then {index.default_url}); the newest release there is 2.8.3.post2 (its recipe was "
        'checked against 2.8.3.post2); allowed: a release that index has, such as "2.8.3.post2"'
    )
    # a release it has, only as source, is planned (its build comes at apply)
    path = tmp_path / "good.toml"
    path.write_text(index_answers(index, extensions=FLASH_ATTN).to_toml())
    run = run_cli("plan", "--facts", str(rtx), "--answers", str(path), "--json", env=env)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "never-built.log").exists() is False  # nothing of it ran


def test_a_partial_mirror_without_the_extension_is_refused_at_plan_naming_it(tmp_path):
    """The index answers (torch, the build requirements) but has no flash-attn at all: exit 2
    at plan naming that index and one that has it, not a failed source fetch at apply."""
    index = standard_index(tmp_path / "pkgs")
    for name in ("pip", "packaging", "wheel", "ninja", "psutil", "setuptools", "einops"):
        index.add("pypi", name, "1.0")
    rtx = MACHINES / "rtx-pro-6000-ubuntu2404.json"
    env = {"UV_DEFAULT_INDEX": index.default_url}
    message = plan_refusal(rtx, index_answers(index, extensions=FLASH_ATTN), tmp_path, **env)
    assert message == (
        f'{PREFIX}extensions[0].version = "2.8.3": {index.root}/cu130 (then '
        f"{index.default_url}) answers but has no flash-attn at all (a partial mirror?); "
        'allowed: an index that has it, such as PyPI ("https://pypi.org/simple" has flash-attn '
        "2.8.3.post2, the release its recipe was checked against), as torch.index_url or the "
        "default index (UV_DEFAULT_INDEX, pip's index-url), or this extension left out"
    )


def test_a_build_the_index_lacks_blames_torch_cuda_and_names_the_one_it_has(index, tmp_path):
    """One index with one build per release: torch 2.9.0 there is cu128, torch.cuda asks cu130.
    The key to change is torch.cuda, not the version."""
    answers = answers_from_toml(
        f'version = 1\n[torch]\nindex_url = "{index.root}/cu128"\nversion = "==2.9.0"\n'
        'cuda = "cu130"\n',
        "test",
    )
    message = plan_refusal(
        MACHINES / "rtx-pro-6000-ubuntu2404.json",
        answers,
        tmp_path,
        UV_DEFAULT_INDEX=index.default_url,
    )
    assert message.startswith(f'{PREFIX}torch.cuda = "cu130": torch 2.9.0+cu128 from'), message
    assert 'allowed: torch.cuda = "cu128" or "auto"' in message
    assert 'torch.index_url = "auto" (PyTorch\'s index' in message and "as cu130" in message


def test_a_torch_without_kernels_for_volta_names_the_newest_that_has_them(index, tmp_path):
    v100 = facts_with(
        tmp_path,
        "h200-ubuntu2404",
        gpus={"name": "Tesla V100-SXM2-32GB", "compute_capability": "7.0"},
    )
    answers = answers_from_toml(f'version = 1\n[torch]\nindex_url = "{index.root}/cu130"\n', "test")
    message = plan_refusal(v100, answers, tmp_path, UV_DEFAULT_INDEX=index.default_url)
    assert "has no kernels for compute capability 7.0" in message
    assert (
        'What would: torch.version = "==2.14.*" with torch.cuda = "cu126" and torch.index_url '
        '= "auto"'
    ) in message, message


@pytest.mark.skipif(os.geteuid() != 0, reason="as an ordinary account the build is allowed")
def test_a_source_only_package_does_not_blame_a_venv_user_that_is_ordinary(index, tmp_path):
    """The recorded box's venv account (ml) is an ordinary one: what ran as root is this
    resolution, for a machine whose accounts are not this one's."""
    answers = answers_from_toml(
        f'version = 1\n[torch]\nindex_url = "{index.torch_url}"\npackages = ["srconly"]\n', "t"
    )
    message = plan_refusal(
        MACHINES / "rtx-pro-6000-ubuntu2404.json",
        answers,
        tmp_path,
        UV_DEFAULT_INDEX=index.default_url,
        SUDO_USER="",
    )
    assert "srconly has no wheel" in message and "this resolution ran as root" in message
    assert "set venv.user" not in message
    assert "as ml does on the machine itself" in message


def test_on_one_index_of_pypi_builds_the_torch_follows_an_older_branch(tmp_path):
    """An index with one torch build per release (PyPI, a mirror of it): driver.branch 575 runs
    CUDA up to 12.9, so the releases whose wheel is a newer CUDA are left out (torch 2.11 is
    cu130 there), and the lock says the branch decided it."""
    index = PackageIndex(tmp_path / "pkgs")
    for version, build, cuda in (("2.9.0", "cu128", "12.8"), ("2.11.0", "cu130", "13.0")):
        index.add_file("pypi", "torch", index.add_torch(version, build, cuda))
    answers = tmp_path / "answers.toml"
    answers.write_text('version = 1\n[driver]\nbranch = "575"\n')
    run = run_cli(
        "plan", "--facts", str(MACHINES / "fresh-h100x8-ubuntu2204.json"),
        "--answers", str(answers), "--json", env={"UV_DEFAULT_INDEX": index.default_url},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    plan = json.loads(run.stdout)
    assert plan["lock"]["torch"] == "2.9.0+cu128" and plan["lock"]["build"] == "cu128"
    assert plan["lock"]["decided_by"] == ["driver.branch 575 (torch<2.11)"]
    installs = [a["argv"][-1] for s in plan["steps"] for a in s["actions"]]
    assert "cuda-toolkit-12-8" in installs and "nvidia-driver-pinning-575" in " ".join(installs)
