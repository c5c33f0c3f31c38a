"""The planner on recorded machines: docs/design.md's failures, decided before anything runs."""

from __future__ import annotations

import json
import re
from datetime import date
from typing import get_args

import pytest

from steps.building.buildtools import cuda_archs
from steps.core.sizes import GiB
from steps.decide.choices import choose
from steps.formats.answers import answers_from_toml
from steps.formats.facts import load_facts
from steps.formats.lock import Lock
from steps.formats.plan import ActionKind, Plan
from steps.known.knowledge import knowledge
from steps.known.recipes import UNKNOWN_PEAK_JOB_GIB, parse_recipes
from steps.planning import registry
from steps.planning.extensions import wanted_wheels
from steps.planning.planner import make_plan
from steps.stack.venvstate import VenvState
from tests.common import MACHINES, run_cli

RTX = MACHINES / "rtx-pro-6000-ubuntu2404.json"
H200 = MACHINES / "h200-ubuntu2404.json"
FRESH = MACHINES / "fresh-h100x8-ubuntu2204.json"
GPULESS = MACHINES / "gpu-less-debian12.json"

FLASH_ATTN = """
[[extensions]]
name = "flash-attn"
version = "2.8.3"
"""


def plan_for(machine, answers_toml: str = "", venv: VenvState | None = None, lock=None):
    return make_plan(
        load_facts(machine), answers_from_toml(answers_toml, "test.toml"), venv, lock=lock
    )


def backend_of(plan) -> str:
    """The torch build the venv's one install step takes (uv's --torch-backend)."""
    sync = next(a for a in plan.actions if a.id == "venv.sync")
    return sync.argv[sync.argv.index("--torch-backend") + 1]


def test_rtx_pro_6000_cu128_installs_12_8_beside_13_1_and_builds_for_sm120_only():
    plan = plan_for(RTX, '[torch]\ncuda = "cu128"\n' + FLASH_ATTN)
    assert [s.name for s in plan.steps] == list(registry.step_names())

    driver = plan.step("driver")
    assert driver.status == "satisfied" and "590.48.01" in driver.reason

    toolkit = plan.step("toolkit")
    assert toolkit.status == "pending"
    installs = [a for a in toolkit.actions if a.id.startswith("toolkit.install")]
    assert [a.argv[-1] for a in installs] == ["cuda-toolkit-12-8"]
    assert "beside CUDA 13.1" in toolkit.reason
    assert not any(w in ("remove", "purge", "autoremove") for a in plan.actions for w in a.argv)

    build = next(a for a in plan.actions if a.id == "extensions.flash-attn.build")
    assert build.env["CUDA_HOME"] == "/usr/local/cuda-12.8"
    assert build.env["PATH"].startswith("/usr/local/cuda-12.8/bin:")
    assert build.env["FLASH_ATTN_CUDA_ARCHS"] == "120"
    assert build.env["NVCC_THREADS"] == "4"
    assert "FLASH_ATTENTION_FORCE_BUILD" not in build.env  # cu12 release wheels exist: may fetch
    assert build.env["MAX_JOBS"].isdigit() and 1 <= int(build.env["MAX_JOBS"]) <= 128
    assert build.argv[1:4] == ["-m", "pip", "wheel"] and "--no-build-isolation" in build.argv
    assert build.argv[-1] == "/var/cache/mlsetup/build/flash-attn-2.8.3/src"  # kept between tries
    assert build.user == "ml"

    # prerequisites first, in the same venv; the source from PyPI, unpacked into the build tree;
    # after the last extension, the stack is checked again
    ids = [a.id.split(".")[-1] for a in plan.step("extensions").actions]
    assert ids == ["prerequisites", "source", "unpack", "build", "install", "smoke", "stack-check"]
    actions = {a.id.split(".")[-1]: a for a in plan.step("extensions").actions}
    for pkg in ("pip", "packaging", "wheel", "ninja", "psutil", "setuptools"):
        assert pkg in actions["prerequisites"].argv
    assert "--no-deps" in actions["prerequisites"].argv  # nothing but what it names
    assert actions["source"].argv[-1] == "flash-attn==2.8.3"
    install = actions["install"].argv
    assert install[-3:] == [
        "--find-links",
        "/var/cache/mlsetup/build/flash-attn-2.8.3/wheels",
        "flash-attn==2.8.3",
    ]
    # only that wheel, by the hash root pins once it has read it (steps.apply.frozen)
    assert {"--no-deps", "--no-index", "--require-hashes"} <= set(install)
    assert install[install.index("--constraint") + 1] == (
        "/var/cache/mlsetup/stack/flash-attn-2.8.3.wheel.txt"
    )
    assert "flash_attn_func" in actions["smoke"].argv[-1]
    check = actions["stack-check"].argv
    assert check[1:3] == ["/var/cache/mlsetup/stack/smoke_stack.py", "--recheck"]
    assert check[check.index("--imports") + 1 :] == ["flash_attn"]

    assert backend_of(plan) == "cu128"


def test_h200_server_is_satisfied_for_cu130_with_arch_90():
    """assets/machines/h200-ubuntu2404.json is `mlsetup probe --json` as run on the H200 server."""
    plan = plan_for(H200, FLASH_ATTN)
    assert plan.step("driver").status == "satisfied"
    assert plan.step("toolkit").status == "satisfied"
    assert backend_of(plan) == "cu130"
    build = next(a for a in plan.actions if a.id == "extensions.flash-attn.build")
    assert build.env["FLASH_ATTN_CUDA_ARCHS"] == "90"
    assert build.env["CUDA_HOME"] == "/usr/local/cuda-13.0"
    # flash-attn publishes cu12 wheels only: with a CUDA 13 torch it must compile, not guess
    assert build.env["FLASH_ATTENTION_FORCE_BUILD"] == "TRUE"


def test_source_wheel_never_compiles():
    plan = plan_for(H200, FLASH_ATTN + 'source = "wheel"\n')
    step = plan.step("extensions")
    assert step.status == "pending" and step.actions == []
    assert 'source = "wheel" but no wheel was built earlier' in step.reason


def test_h200_with_finished_venv_has_nothing_to_do():
    venv = VenvState(
        path="/root/ml-env",
        python_version="3.12.3",
        packages={"torch": "2.14.1+cu130", "flash-attn": "2.8.3", "ninja": "1.13.2"},
        torch_cuda="13.0",
        cuda_home="/usr/local/cuda-13.0",  # its activate names torch's toolkit
    )
    lock = Lock(
        text="torch==2.14.1+cu130\nninja==1.13.2\n",
        python="3.12",
        platform="x86_64-manylinux_2_35",
        build="cu130",
        key="k",
        packages={"torch": "2.14.1+cu130", "ninja": "1.13.2"},
    )
    plan = plan_for(H200, FLASH_ATTN, venv, lock)
    # the venv's steps have nothing to do (the recorded machine's own steps are its facts')
    assert plan.step("venv").status == plan.step("extensions").status == "satisfied"
    assert plan.step("venv").actions == plan.step("extensions").actions == []
    # and the machine as recorded: its driver, fabric and toolkit are there too
    assert {s.status for s in plan.steps if s.name in ("driver", "fabric", "toolkit")} == {
        "satisfied"
    }


def test_fresh_box_installs_pinned_open_driver_blacklists_nouveau_and_reboots():
    plan = plan_for(FRESH)
    driver = plan.step("driver")
    ids = [a.id for a in driver.actions]
    assert ids.index("driver.blacklist-nouveau") < ids.index("driver.install")
    assert (
        ids.index("nvidia-repo.keyring-install")
        < ids.index("driver.pin")
        < ids.index("driver.install")
    )
    install = driver.actions[-1]
    assert install.reboot_after is True
    assert install.argv[-1] == "nvidia-open"
    assert "--no-remove" in install.argv
    assert (
        next(a for a in driver.actions if a.id == "driver.pin").argv[-1]
        == "nvidia-driver-pinning-580"
    )
    prereq = next(a for a in driver.actions if a.id == "driver.prerequisites")
    assert "linux-headers-5.15.0-126-generic" in prereq.argv
    # the headers come from the lists just refreshed (the plan cases record the driver's own
    # actions apart from the repo's)
    assert ids.index("nvidia-repo.apt-update") < ids.index("driver.prerequisites")
    keyring = next(a for a in driver.actions if a.id == "nvidia-repo.keyring-download")
    assert keyring.argv[-1].startswith(
        "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/"
    )
    assert "mokutil --import" in driver.reason  # Secure Boot is on
    # the repo is set up once, by the driver step
    assert not any(a.id.startswith("nvidia-repo.") for a in plan.step("toolkit").actions)
    assert [a.argv[-1] for a in plan.step("toolkit").actions] == ["cuda-toolkit-13-0"]
    assert any("nouveau" in w for w in plan.warnings)
    assert all(
        a.env.get("DEBIAN_FRONTEND") == "noninteractive"
        for a in plan.actions
        if a.argv[0] in ("apt-get", "dpkg")
    )


def test_pre_turing_gpu_gets_proprietary_modules(tmp_path):
    data = json.loads(FRESH.read_text())
    for g in data["gpus"]:
        g.update(name="Tesla V100-SXM2-32GB", pci_device_id="0x1db5", compute_capability="7.0")
    path = tmp_path / "v100.json"
    path.write_text(json.dumps(data))
    plan = plan_for(path)
    assert plan.step("driver").actions[-1].argv[-1] == "cuda-drivers"
    assert backend_of(plan) == "cu126"  # newer builds have no Volta kernels


def test_gpu_less_box_gets_cpu_torch_and_no_driver_or_toolkit():
    plan = plan_for(GPULESS, FLASH_ATTN)
    assert plan.step("driver").status == "satisfied"
    assert plan.step("toolkit").status == "satisfied"
    assert backend_of(plan) == "cpu"
    assert plan.step("extensions").status == "satisfied"
    assert any("flash-attn 2.8.3 skipped" in w for w in plan.warnings)


def test_extension_refused_on_gpus_that_cannot_run_it(tmp_path):
    data = json.loads(H200.read_text())
    data["gpus"][0].update(name="Tesla T4", pci_device_id="0x1eb8", compute_capability="7.5")
    path = tmp_path / "t4.json"
    path.write_text(json.dumps(data))
    plan = plan_for(path, FLASH_ATTN)
    assert not any(a.id.startswith("extensions.") for a in plan.actions)
    warning = next(w for w in plan.warnings if "flash-attn" in w)
    assert "8.0" in warning and "7.5" in warning


def test_driver_too_old_for_every_build_plans_an_upgrade(tmp_path):
    data = json.loads(H200.read_text())
    data["driver"].update(version="470.256.02", cuda_max="11.4")
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    plan = plan_for(path)
    assert plan.step("driver").status == "pending"
    assert "470.256.02 cannot run CUDA 13.0" in plan.step("driver").reason
    assert any("older than torch's CUDA" in w for w in plan.warnings)


def test_small_disk_and_memory_ceiling(tmp_path):
    data = json.loads(FRESH.read_text())
    data["disk_free_bytes"]["/usr/local"] = 2 * 2**30
    data["memory"].update(total_bytes=32 * 2**30, available_bytes=30 * 2**30)
    path = tmp_path / "small.json"
    path.write_text(json.dumps(data))
    plan = plan_for(path, FLASH_ATTN)
    assert any("/usr/local has 2.0 GiB free" in w for w in plan.warnings)
    build = next(a for a in plan.actions if a.id == "extensions.flash-attn.build")
    # (30 GiB - 10% of 32 GiB) / 6.5 GiB per job = 4 jobs, although there are 224 cores
    assert build.env["MAX_JOBS"] == "4"


def test_a_wheel_built_earlier_is_installed_instead_of_compiling():
    facts = load_facts(H200)
    answers = answers_from_toml(FLASH_ATTN, "t")
    venv = VenvState(
        path="/root/ml-env",
        python_version="3.12.3",
        packages={"torch": "2.11.0+cu130"},
        torch_cuda="13.0",
    )
    (key,) = wanted_wheels(choose(facts, answers), venv)
    assert key == "flash-attn-2.8.3_torch-2.11.0+cu130_py3.12_archs-90_by-root"
    plan = make_plan(facts, answers, venv, {key: "/shared/wheels/" + key})
    ids = [a.id for a in plan.step("extensions").actions]
    assert ids == [
        "extensions.flash-attn.install-wheel",
        "extensions.flash-attn.smoke",
        "extensions.stack-check",
    ]
    assert plan.step("extensions").actions[0].argv[-3:] == [
        "--find-links",
        "/shared/wheels/" + key,
        "flash-attn==2.8.3",
    ]
    assert "from wheels built earlier" in plan.step("extensions").reason


def test_with_a_lock_every_install_after_the_sync_comes_from_it():
    """The build requirements at the lock's versions and hashes, the wheel against the lock as
    a constraint, nothing but what is named, and the stack check holding torch to the lock."""
    facts = load_facts(H200)
    answers = answers_from_toml(FLASH_ATTN, "t")
    pins = {
        "torch": "2.11.0+cu130",
        "einops": "0.8.1",
        "pip": "25.3",
        "packaging": "25.0",
        "wheel": "0.45.1",
        "ninja": "1.13.0",
        "psutil": "7.1.3",
        "setuptools": "80.9.0",
    }
    lock = Lock(
        text="".join(f"{n}=={v} \\\n    --hash=sha256:{'0' * 64}\n" for n, v in pins.items()),
        python="3.12",
        platform="x86_64-manylinux_2_35",
        build="cu130",
        key="k",
        packages=pins,
    )
    venv = VenvState(path="/root/ml-env", python_version="3.12.3", packages=dict(pins))
    plan = make_plan(facts, answers, venv, lock=lock)
    actions = {a.id.split(".")[-1]: a for a in plan.step("extensions").actions}
    prerequisites = actions["prerequisites"].argv
    assert prerequisites[:6] == ["uv", "pip", "install", "--no-config", "--no-deps", "--python"]
    assert prerequisites[-9:] == [
        "--require-hashes",
        "--constraint",
        "/var/cache/mlsetup/stack/requirements.txt",
        "pip==25.3",
        "packaging==25.0",
        "wheel==0.45.1",
        "ninja==1.13.0",
        "psutil==7.1.3",
        "setuptools==80.9.0",
    ]
    assert "--torch-backend" in prerequisites  # the same index options as the sync's
    install = actions["install"].argv
    constraints = [install[i + 1] for i, w in enumerate(install) if w == "--constraint"]
    assert constraints == [
        "/var/cache/mlsetup/stack/requirements.txt",
        "/var/cache/mlsetup/stack/flash-attn-2.8.3.wheel.txt",
    ]
    check = actions["stack-check"].argv
    assert check[2:] == [
        "--recheck",
        "--torch",
        "2.11.0+cu130",
        "--cuda",
        "13.0",
        "--lock",
        "/var/cache/mlsetup/stack/requirements.txt",
        "--imports",
        "flash_attn",
    ]


def test_flash_attns_runtime_requirement_is_resolved_with_the_stack():
    """Its wheel goes in --no-deps: einops (its setup.py install_requires) must be in the lock."""
    from steps.stack.inputs import stack_inputs

    reqs = stack_inputs(load_facts(H200), answers_from_toml(FLASH_ATTN, "t")).requirements
    assert "einops" in reqs and "pip" in reqs and "psutil" in reqs


def test_explicit_max_jobs_is_the_ceiling():
    plan = plan_for(H200, FLASH_ATTN + "[build]\nmax_jobs = 3\n")
    build = next(a for a in plan.actions if a.id == "extensions.flash-attn.build")
    assert build.env["MAX_JOBS"] == "3"


def test_plan_json_contract_from_cli():
    answers = MACHINES.parent / "answers.example.toml"
    out = run_cli("plan", "--facts", str(RTX), "--answers", str(answers), "--json")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["schema"] == "mlsetup.plan/1"
    # the contract: the registry's names, in its order
    assert [s["name"] for s in plan["steps"]] == list(registry.step_names())
    for step in plan["steps"]:
        assert set(step) == {"name", "status", "reason", "actions"}
        assert step["status"] in ("pending", "satisfied")
        for action in step["actions"]:
            # the keys of mlsetup.plan/1 (docs/design.md), and the ones added since: kind, target
            assert set(action) == {
                *("id", "title", "argv", "env", "user", "reboot_after"),
                *("kind", "target"),
            }
            assert action["kind"] in get_args(ActionKind)
            assert isinstance(action["argv"], list) and all(
                isinstance(w, str) for w in action["argv"]
            )


@pytest.mark.parametrize("machine", sorted(MACHINES.glob("*.json")), ids=lambda p: p.stem)
def test_every_shipped_machine_plans_and_prints_every_command(machine):
    out = run_cli(
        "plan", "--facts", str(machine), "--answers", str(MACHINES.parent / "answers.example.toml")
    )
    assert out.returncode == 0, out.stderr
    plan = make_plan(
        load_facts(machine),
        answers_from_toml((MACHINES.parent / "answers.example.toml").read_text(), "example"),
    )
    for action in plan.actions:
        assert action.argv[-1] in out.stdout


# Issue 11's acceptance: the knowledge of December 2026, planned on recorded machines.


def _machine(tmp_path, base, name: str, gpu: dict | None = None, **os_fields) -> object:
    data = json.loads(base.read_text())
    data["os"].update(os_fields)
    for g in data["gpus"]:
        g.update(gpu or {})
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def planned_torch(plan: Plan) -> tuple[str, str]:
    """(torch requirement, PyTorch build) the venv step plans from knowledge (no index for a
    recorded machine: the resolution happens at apply)."""
    found = re.search(r"torch==[0-9.]+\.\*", plan.step("venv").reason)
    assert found, plan.step("venv").reason
    sync = next(a for a in plan.actions if a.id == "venv.sync")
    return found.group(0), sync.argv[sync.argv.index("--torch-backend") + 1]


V100 = {"name": "Tesla V100-SXM2-32GB", "pci_device_id": "0x1db5", "compute_capability": "7.0"}
GH200 = {"name": "NVIDIA GH200 480GB", "pci_device_id": "0x2342", "compute_capability": "9.0"}


def test_h200_with_driver_580_and_auto_everywhere_plans_torch_2_15_cu130():
    plan = plan_for(H200)
    # planned from knowledge (no index for a recorded machine): torch 2.15, PyTorch's cu130 build
    assert "torch==2.15.*" in plan.step("venv").reason
    sync = next(a for a in plan.actions if a.id == "venv.sync")
    backend = sync.argv.index("--torch-backend")
    assert sync.argv[backend + 1] == "cu130"  # 580 runs 13.0 natively
    assert plan.step("driver").status == "satisfied" and plan.step("toolkit").status == "satisfied"


@pytest.mark.parametrize(
    ("os_fields", "repo"),
    [
        ({"id": "ubuntu", "version_id": "26.04", "codename": "resolute"}, "ubuntu2604/x86_64"),
        ({"id": "debian", "version_id": "13", "codename": "trixie"}, "debian13/x86_64"),
        (
            {"id": "debian", "version_id": "13", "codename": "trixie", "arch": "aarch64"},
            "debian13/sbsa",
        ),
    ],
)
def test_ubuntu_26_04_and_debian_13_fresh_boxes_plan_nvidias_repo(tmp_path, os_fields, repo):
    plan = plan_for(_machine(tmp_path, FRESH, "new-os", **os_fields))
    keyring = next(a for a in plan.actions if a.id == "nvidia-repo.keyring-download")
    assert keyring.argv[-1] == (
        f"https://developer.download.nvidia.com/compute/cuda/repos/{repo}/cuda-keyring_1.1-1_all.deb"
    )
    assert plan.step("driver").actions[-1].argv[-1] == "nvidia-open"


def test_ubuntu_26_04_has_no_arm_repository(tmp_path):
    facts = _machine(tmp_path, FRESH, "arm", id="ubuntu", version_id="26.04", arch="aarch64")
    driver = plan_for(facts).step("driver")
    assert driver.status == "pending" and not driver.actions


def test_debian_secure_boot_enrolls_dkms_own_key(tmp_path):
    facts = _machine(tmp_path, FRESH, "debian13", id="debian", version_id="13")
    reason = plan_for(facts).step("driver").reason
    assert "mokutil --import /var/lib/dkms/mok.pub" in reason
    assert (
        "mokutil --import /var/lib/shim-signed/mok/MOK.der" in plan_for(FRESH).step("driver").reason
    )


def test_v100_box_never_plans_a_branch_past_580(tmp_path):
    v100 = _machine(tmp_path, FRESH, "v100", V100)
    for answers in ("", '[torch]\ncuda = "cu126"\n', '[torch]\ncuda = "cpu"\n'):
        plan = plan_for(v100, answers)
        pin = next(a for a in plan.actions if a.id == "driver.pin")
        assert pin.argv[-1] == "nvidia-driver-pinning-580", answers
    # torch 2.15 has no build for Volta: auto takes the newest release that has (2.14, cu126)
    assert planned_torch(plan_for(v100)) == ("torch==2.14.*", "cu126")


def _refused(tmp_path, facts, answers_toml: str) -> str:
    """`mlsetup plan` and `mlsetup apply --dry-run` on these answers: both exit 2 before
    anything runs, with the same message (returned)."""
    answers = tmp_path / "refused.toml"
    answers.write_text("version = 1\n" + answers_toml)
    plan = run_cli("plan", "--facts", str(facts), "--answers", str(answers))
    assert plan.returncode == 2, plan.stdout + plan.stderr
    apply = run_cli("apply", "--dry-run", "--facts", str(facts), "--answers", str(answers))
    assert apply.returncode == 2, apply.stdout + apply.stderr
    assert apply.stderr == plan.stderr and "Traceback" not in plan.stderr
    return plan.stderr


def test_a_gpu_box_never_gets_a_torch_that_cannot_run_on_its_gpus(tmp_path):
    v100 = _machine(tmp_path, FRESH, "v100", V100)
    # torch 2.15 has no build with Volta kernels: no silent CPU torch, but what would work
    why = _refused(tmp_path, v100, '[torch]\nversion = "==2.15.0"\n')
    assert 'torch.version = "==2.15.0"' in why and "Tesla V100-SXM2-32GB" in why
    assert "the newest torch with one is 2.14 (cu126)" in why
    assert '"==2.14.*"' in why and 'torch.cuda = "cpu"' in why
    # the CPU build only when it is asked for
    plan = plan_for(v100, '[torch]\nversion = "==2.15.0"\ncuda = "cpu"\n')
    assert backend_of(plan) == "cpu"
    # an explicit build without kernels for the GPUs: cu126 stops at Hopper, GB10 is 12.1
    gb10 = {"name": "NVIDIA GB10", "pci_device_id": "0x2e12", "compute_capability": "12.1"}
    why = _refused(
        tmp_path,
        _machine(tmp_path, FRESH, "gb10", gb10, arch="aarch64"),
        '[torch]\ncuda = "cu126"\n',
    )
    assert 'torch.cuda = "cu126"' in why and "NVIDIA GB10, compute capability 12.1" in why
    assert '"auto", "cu128", "cu129", "cu130", "cu132" or "cpu"' in why
    why = _refused(tmp_path, v100, '[torch]\ncuda = "cu130"\n')
    assert 'torch.cuda = "cu130"' in why and '"auto", "cu118", "cu121", "cu124", "cu126"' in why


def test_pre_turing_gpus_refuse_open_kernel_modules(tmp_path):
    why = _refused(
        tmp_path, _machine(tmp_path, FRESH, "v100", V100), '[driver]\nmodules = "open"\n'
    )
    assert 'driver.modules = "open"' in why and "older than Turing" in why
    assert 'allowed: "auto" or "proprietary"' in why


def test_v100_box_refuses_driver_branch_590_naming_the_gpus(tmp_path):
    v100 = _machine(tmp_path, FRESH, "v100", V100)
    answers = tmp_path / "a.toml"
    answers.write_text('version = 1\n[driver]\nbranch = "590"\n')
    run = run_cli("plan", "--facts", str(v100), "--answers", str(answers))
    assert run.returncode == 2, run.stdout + run.stderr
    assert "driver.branch" in run.stderr and "'590'" in run.stderr
    assert "GPU 0 (Tesla V100-SXM2-32GB, 7.0)" in run.stderr and '"580"' in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize(
    "gpu",
    [GH200, {"name": "NVIDIA B200", "pci_device_id": "0x2901", "compute_capability": "10.0"}],
    ids=["gh200", "b200"],
)
def test_grace_hopper_and_blackwell_refuse_proprietary_modules(tmp_path, gpu):
    facts = _machine(tmp_path, FRESH, "gpu", gpu, arch="aarch64" if gpu is GH200 else "x86_64")
    answers = tmp_path / "a.toml"
    answers.write_text('version = 1\n[driver]\nmodules = "proprietary"\n')
    run = run_cli("plan", "--facts", str(facts), "--answers", str(answers))
    assert run.returncode == 2, run.stdout + run.stderr
    assert 'driver.modules = "proprietary"' in run.stderr and gpu["name"] in run.stderr
    assert "Traceback" not in run.stderr
    # auto gives them the open modules
    assert plan_for(facts).step("driver").actions[-1].argv[-1] == "nvidia-open"


def test_arm_t4g_gets_no_cuda_build(tmp_path):
    t4g = {"name": "NVIDIA T4G", "pci_device_id": "0x1eb8", "compute_capability": "7.5"}
    arm = _machine(tmp_path, FRESH, "t4g", t4g, arch="aarch64")
    why = _refused(tmp_path, arm, "")  # no silent CPU torch: the CPU build is asked for
    assert "no torch build mlsetup knows runs on 8 GPUs (NVIDIA T4G" in why and "aarch64" in why
    assert 'allowed: torch.cuda = "cpu"' in why
    assert backend_of(plan_for(arm, '[torch]\ncuda = "cpu"\n')) == "cpu"
    # the same GPU on x86_64 has CUDA builds
    x86 = plan_for(_machine(tmp_path, FRESH, "t4", t4g))
    assert planned_torch(x86)[1] != "cpu"


def _mamba(version: str) -> str:
    return f'[[extensions]]\nname = "mamba-ssm"\nversion = "{version}"\n'


def test_mamba_arch_list_depends_on_its_release_and_on_nvcc(tmp_path):
    v100 = _machine(tmp_path, FRESH, "v100", V100)
    # 2.3.2 dropped sm_70; 2.3.1 still builds it with nvcc <= 12.9 (cu126 for Volta)
    plan = plan_for(v100, _mamba("2.3.2"))
    assert not any(a.id.startswith("extensions.mamba-ssm") for a in plan.actions)
    assert any("mamba-ssm 2.3.2 skipped" in w and "7.0" in w for w in plan.warnings)
    plan = plan_for(v100, _mamba("2.3.1"))
    build = next(a for a in plan.actions if a.id == "extensions.mamba-ssm.build")
    assert build.env["CUDA_HOME"] == "/usr/local/cuda-12.6"
    # it hard-codes nvcc --threads 4: NVCC_THREADS would do nothing, so none is set
    assert "NVCC_THREADS" not in build.env
    b300 = {"name": "NVIDIA B300 SXM6 AC", "pci_device_id": "0x3182", "compute_capability": "10.3"}
    choices = choose(
        load_facts(_machine(tmp_path, FRESH, "b300", b300)),
        answers_from_toml(_mamba("2.3.2"), "t.toml"),
    )
    (target,) = choices.build_targets
    assert choices.cuda.startswith("13.") and target.recipe.arch_map["10.3"] == "103"
    assert target.recipe.threads == 4 and target.recipe.peak_job_gib == 1.5


def test_flash_attn_post1_may_fetch_its_cu13_release_wheel():
    # 2.8.3 guesses a cu12 wheel for a CUDA 13 torch: forced to build; post1 names cu13 wheels
    plain = next(a for a in plan_for(H200, FLASH_ATTN).actions if a.id.endswith(".build"))
    assert plain.env["FLASH_ATTENTION_FORCE_BUILD"] == "TRUE"
    post1 = FLASH_ATTN.replace('"2.8.3"', '"2.8.3.post1"')
    build = next(a for a in plan_for(H200, post1).actions if a.id.endswith(".build"))
    assert "FLASH_ATTENTION_FORCE_BUILD" not in build.env


@pytest.mark.parametrize("version", ["../../../etc", "2.8.3 --index-url=http://evil", "latest"])
def test_an_extension_version_that_is_no_release_is_refused(tmp_path, version):
    # it would become part of the build tree's path and an argv element of pip
    answers = tmp_path / "a.toml"
    answers.write_text(f'version = 1\n[[extensions]]\nname = "flash-attn"\nversion = "{version}"\n')
    run = run_cli("plan", "--facts", str(H200), "--answers", str(answers))
    assert run.returncode == 2 and "extensions[0].version" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


def test_auto_torch_is_the_newest_release_for_the_venvs_python():
    # Ubuntu 22.04's Python is 3.10, which torch 2.15 (requires-python >= 3.11) has no wheels for
    plan = plan_for(FRESH, '[venv]\npython = "3.10"\n')
    assert planned_torch(plan)[0] == "torch==2.14.*"
    assert not any("no wheels for Python" in w for w in plan.warnings)
    assert planned_torch(plan_for(FRESH))[0] == "torch==2.15.*"


def test_auto_python_from_knowledge_is_the_one_most_packages_have_wheels_for():
    # issue 26: the system's 3.10 is not one torch 2.15 has wheels for, so uv downloads a
    # Python; planned from knowledge (no index reached), the most widely covered one torch
    # supports (assets/pythons.toml), not the newest it lists (3.15)
    plan = plan_for(FRESH, '[torch]\npackages = ["vllm"]\n')
    create = next(a for a in plan.actions if a.id == "venv.create")
    assert create.argv[:4] == ["uv", "venv", "--python", "3.12"]
    assert "uv downloads CPython 3.12" in create.title
    assert "torch 2.15 has no wheels for the system's Python (3.10)" in create.title
    assert "3.12 is the one most packages have wheels for" in create.title


def test_branch_620_and_later_refuse_proprietary_modules(tmp_path):
    """From R620 NVIDIA ships only the open kernel modules (assets/driver.toml, its
    installation guide): proprietary with 620 is exit 2 naming both keys and what works."""
    answers = tmp_path / "a.toml"
    answers.write_text('version = 1\n[driver]\nbranch = "620"\nmodules = "proprietary"\n')
    run = run_cli("plan", "--facts", str(FRESH), "--answers", str(answers))
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" not in run.stderr and run.stdout == ""
    assert "driver.modules = \"proprietary\" with driver.branch = '620'" in run.stderr
    assert "from R620 NVIDIA ships only the open kernel modules" in run.stderr
    assert 'allowed: driver.modules "open" or "auto", or a driver.branch below 620' in run.stderr
    # the branch before it still has them; 620 with the open modules is planned
    answers.write_text('version = 1\n[driver]\nbranch = "595"\nmodules = "proprietary"\n')
    assert plan_for(FRESH, answers.read_text()).step("driver").actions[-1].argv[-1] == (
        "cuda-drivers"
    )
    answers.write_text('version = 1\n[driver]\nbranch = "620"\nmodules = "open"\n')
    assert run_cli("plan", "--facts", str(FRESH), "--answers", str(answers)).returncode == 0


def test_an_ended_driver_branch_is_named_with_its_end_of_life(tmp_path):
    """R535 ended in June 2026 (NVIDIA's lifecycle table, assets/driver.toml): a plan that
    installs it says so; R580 (until June 2028) is not named."""
    driver = knowledge().driver
    assert driver.ended(535, date(2026, 12, 3)) == "2026-06"
    assert driver.ended(535, date(2026, 6, 30)) is None  # its last month
    assert driver.ended(580, date(2026, 12, 3)) is None
    assert driver.ended(620, date(2029, 10, 1)) == "2029-09"


def test_a_venv_whose_activate_lacks_the_toolkit_gets_only_that_written():
    """The same finished venv, its activate without mlsetup's block (an older mlsetup, or
    edited): the venv step writes it, as the venv's owner, and nothing else."""
    venv = VenvState(
        path="/root/ml-env",
        python_version="3.12.3",
        packages={"torch": "2.14.1+cu130", "ninja": "1.13.2"},
        torch_cuda="13.0",
    )
    lock = Lock(
        text="torch==2.14.1+cu130\nninja==1.13.2\n",
        python="3.12",
        platform="x86_64-manylinux_2_35",
        build="cu130",
        key="k",
        packages={"torch": "2.14.1+cu130", "ninja": "1.13.2"},
    )
    step = plan_for(H200, "", venv, lock).step("venv")
    assert step.status == "pending" and "does not set CUDA_HOME=/usr/local/cuda-13.0" in step.reason
    (write,) = step.actions
    assert write.kind == "activate" and write.argv[-2:] == ["/root/ml-env", "/usr/local/cuda-13.0"]


UNMEASURED_RECIPE = """[unmeasured]
package = "unmeasured"
import_name = "unmeasured"
arch_variable = "TORCH_CUDA_ARCH_LIST"
arch_map = { "9.0" = "9.0" }
threads_variable = "NVCC_THREADS"
threads = 1
force_build_variable = "UNMEASURED_FORCE_BUILD"
build_requires = ["setuptools"]
prebuilt_cuda_majors = []
"""


def test_a_recipe_without_peak_job_gib_plans_with_the_unknown_peak_counted_and_said(tmp_path):
    """Nobody knows one job's peak before a build: a recipe may leave peak_job_gib out. The
    plan counts the conservative first guess and says the governor learns the real one."""
    recipes = tmp_path / "extensions.d"
    recipes.mkdir()
    (recipes / "unmeasured.toml").write_text(UNMEASURED_RECIPE)
    answers = tmp_path / "a.toml"
    answers.write_text('version = 1\n[[extensions]]\nname = "unmeasured"\nversion = "1.0"\n')
    run = run_cli(
        "plan", "--facts", str(H200), "--answers", str(answers), "--json",
        env={"MLSETUP_EXTENSIONS_DIR": str(recipes)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    plan = Plan.model_validate_json(run.stdout)
    (said,) = [w for w in plan.warnings if "unmeasured 1.0" in w]
    assert "peak is unknown" in said and "learns it from the build" in said
    facts = load_facts(H200)
    free = facts.memory.available_bytes
    reserve = answers_from_toml("", "t.toml").build.reserve_bytes(facts.memory.total_bytes)
    build = next(a for a in plan.actions if a.id == "extensions.unmeasured.build")
    fit = (free - reserve) // int(UNKNOWN_PEAK_JOB_GIB * GiB)
    assert fit < facts.cpu.logical and build.env["MAX_JOBS"] == str(fit)


ARCH_SPECIFIC_RECIPE = UNMEASURED_RECIPE.replace("unmeasured", "hopperext").replace(
    'arch_map = { "9.0" = "9.0" }',
    'arch_map = { "9.0" = "9.0", "9.0a" = "9.0a" }\npeak_job_gib = 1.0',
)


def _plan_with_recipe(tmp_path, recipe: str, extension: str, archs: str):
    recipes = tmp_path / "extensions.d"
    recipes.mkdir(exist_ok=True)
    (recipes / "mine.toml").write_text(recipe)
    answers = tmp_path / "a.toml"
    answers.write_text(
        f'version = 1\n[[extensions]]\nname = "{extension}"\nversion = "2.8.3"\narchs = {archs}\n'
    )
    env = {"MLSETUP_EXTENSIONS_DIR": str(recipes)}
    return run_cli("plan", "--facts", str(H200), "--answers", str(answers), "--json", env=env)


def test_an_arch_specific_target_reaches_the_builds_arch_list(tmp_path):
    """NVIDIA's "a" (sm_90a) and "f" (sm_100f) targets: a recipe's arch_map may name them and
    extensions.archs may ask for one; TORCH_CUDA_ARCH_LIST gets "9.0a", mlsetup's nvcc keeps 90."""
    run = _plan_with_recipe(tmp_path, ARCH_SPECIFIC_RECIPE, "hopperext", '["9.0a"]')
    assert run.returncode == 0, run.stderr
    build = next(a for a in Plan.model_validate_json(run.stdout).actions if a.id.endswith(".build"))
    assert build.env["TORCH_CUDA_ARCH_LIST"] == "9.0a"
    assert build.env["MLSETUP_CUDA_ARCHS"] == "90"


def test_an_arch_specific_target_the_recipe_lacks_is_refused_naming_what_works(tmp_path):
    # flash-attn's FLASH_ATTN_CUDA_ARCHS takes numbers only: "9.0a" is not built as plain 9.0
    run = _plan_with_recipe(tmp_path, "", "flash-attn", '["9.0a"]')
    assert run.returncode == 2, run.stdout + run.stderr
    assert 'extensions[0].archs = ["9.0a"]' in run.stderr and 'allowed: ["9.0"]' in run.stderr
    assert "Traceback" not in run.stderr


def test_suffixed_arch_values_sort_and_trim_by_their_number():
    (recipe,) = parse_recipes(GOOD_FLASH_LIKE.encode(), "mine.toml").values()
    assert recipe.arch_value(["12.0", "9.0", "10.0"]) == "90a;100f;120f"
    assert recipe.min_compute_capability == "9.0"
    assert cuda_archs(recipe, ["10.0", "9.0"]) == "90 100"


GOOD_FLASH_LIKE = UNMEASURED_RECIPE.replace(
    'arch_map = { "9.0" = "9.0" }',
    'arch_map = { "12.0" = "120f", "10.0" = "100f", "9.0" = "90a" }',
).replace("TORCH_CUDA_ARCH_LIST", "MINE_CUDA_ARCHS")
