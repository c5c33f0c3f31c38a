"""Real stacks against the recorded copy of PyPI (tests/recorded_pypi.py, recorded 2026-12-01):
what torch each locks to, its build as its wheel says, the package that decided it, and the
message a user acts on when there is none.

Each test runs `mlsetup lock` or `plan` for a recorded machine (assets/machines/: the 2x RTX PRO
6000 box unless said otherwise) as root with SUDO_USER=mluser, the fake server's account, so a
package that has only an sdist (deepspeed) is resolved by that account, never by root. uv's only
index is the recorded copy on 127.0.0.1; every other request would go to a proxy that refuses
and records it, and none may.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from steps.stack.uvfailure import OFFLINE_DETAIL, Unreachable, read_failure
from tests.common import MACHINES
from tests.harness import FakeServer
from tests.recorded_pypi import FORTY, ProxyTrap, RecordedIndex
from tests.test_stack import setup, started, toolkits

RTX = MACHINES / "rtx-pro-6000-ubuntu2404.json"  # compute capability 12.0, driver 590, Py 3.12
UBUNTU_2204 = MACHINES / "fresh-h100x8-ubuntu2204.json"  # Python 3.10, no driver yet
GPU_LESS = MACHINES / "gpu-less-debian12.json"  # Python 3.11, no NVIDIA GPU


@pytest.fixture(scope="module")
def pypi() -> Iterator[RecordedIndex]:
    with RecordedIndex() as index:
        yield index


@pytest.fixture
def trap() -> Iterator[ProxyTrap]:
    with ProxyTrap() as proxy:
        yield proxy
    assert proxy.requests == [], "uv fetched from outside the index it was given"


def answers(server: FakeServer, packages: list[str], torch: str = "", venv: str = "") -> str:
    server.answers.write_text(
        f"version = 1\n[venv]\n{venv}\n[torch]\npackages = {json.dumps(packages)}\n{torch}\n"
    )
    return str(server.answers)


def env(pypi: RecordedIndex, trap: ProxyTrap, **extra: str) -> dict[str, str]:
    return {"UV_OFFLINE": "0", "UV_DEFAULT_INDEX": pypi.url, **trap.env(), **extra}


def lock(
    server: FakeServer,
    pypi: RecordedIndex,
    trap: ProxyTrap,
    packages: list[str],
    machine: Path = RTX,
    torch: str = "",
    venv: str = "",
) -> dict:
    """`mlsetup lock` for the machine: the lock's summary (exit 0 asserted)."""
    out = server.base / "stack.lock"
    run = server.mlsetup(
        "lock", "--facts", str(machine), "--answers", answers(server, packages, torch, venv),
        "-o", str(out), "--json", timeout=600, **env(pypi, trap),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert out.read_text().startswith("# mlsetup-lock: ") and "--hash=sha256:" in out.read_text()
    return json.loads(run.stdout)


def refused(
    server: FakeServer,
    pypi: RecordedIndex,
    trap: ProxyTrap,
    packages: list[str],
    machine: Path = RTX,
    torch: str = "",
) -> str:
    """`mlsetup plan` for the machine refuses (exit 2, no traceback): its message."""
    run = server.mlsetup(
        "plan", "--facts", str(machine), "--answers", answers(server, packages, torch),
        timeout=600, **env(pypi, trap),
    )  # fmt: skip
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" not in run.stderr and run.stdout == ""
    return " ".join(run.stderr.split())


def test_vllm_latest_locks_the_torch_it_pins_and_says_so(server, pypi, trap):
    summary = lock(server, pypi, trap, ["vllm"])
    assert summary["packages"]["vllm"] == "0.33.0" and summary["torch"] == "2.14.0"
    # PyPI's wheel has no local tag: its build is the CUDA its wheel requires
    assert summary["build"] == "cu130" and summary["packages"]["cuda-toolkit"] == "13.0.3.0"
    assert summary["decided_by"] == ["vllm"]  # not the other ten that depend on torch
    assert summary["index"] == pypi.url and summary["sources"] == []


def test_a_pinned_vllm_plans_its_own_torch_and_toolkit_on_a_laptop(server, pypi, trap):
    """plan --facts resolves (metadata only) with the recorded machine's Python and platform."""
    run = server.mlsetup(
        "plan", "--facts", str(RTX), "--answers", answers(server, ["vllm==0.11.2"]), "--json",
        timeout=600, **env(pypi, trap),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    plan = json.loads(run.stdout)
    assert plan["lock"]["torch"] == "2.9.0" and plan["lock"]["build"] == "cu128"
    assert plan["lock"]["packages"]["nvidia-cuda-runtime-cu12"] == "12.8.90"
    assert plan["lock"]["decided_by"] == ["vllm"]
    assert toolkits(plan) == ["cuda-toolkit-12-8"]


def test_an_old_vllm_is_refused_its_torch_has_no_kernels_for_blackwell(server, pypi, trap):
    message = refused(server, pypi, trap, ["vllm==0.9.2"])
    assert f"torch 2.7.0 from {pypi.url} is the cu126 build" in message
    assert "nvidia-cuda-runtime-cu12==12.6.77" in message
    assert "no kernels for compute capability 12.0" in message


def test_sglang_locks_the_torch_it_pins(server, pypi, trap):
    summary = lock(server, pypi, trap, ["sglang"])
    assert summary["torch"] == "2.14.1" and summary["build"] == "cu130"
    assert summary["decided_by"] == ["sglang"]


def test_deepspeed_is_resolved_by_the_account_from_its_sdist_and_a_cuda_build_is_honoured(
    server, pypi, trap
):
    """deepspeed publishes only an sdist: its metadata comes from its setup.py, run as mluser."""
    stack = ["transformers", "accelerate", "deepspeed"]
    summary = lock(server, pypi, trap, stack)
    assert summary["torch"] == "2.15.0" and summary["build"] == "cu132"  # cuda-toolkit 13.2
    assert summary["packages"]["deepspeed"] == "0.19.8"  # not 0.3.1.dev5, its last wheel
    assert summary["sources"] == ["deepspeed 0.19.8"] and summary["decided_by"] == []
    assert (server.home / ".cache" / "uv").is_dir()  # the account's cache, not root's

    # PyPI's torch 2.14.1 is the CUDA 13.0 build: torch.cuda = "cu130" gets it
    cu130 = lock(server, pypi, trap, stack, torch='cuda = "cu130"')
    assert cu130["torch"] == "2.14.1" and cu130["build"] == "cu130"
    assert cu130["decided_by"] == ["torch.cuda cu130 (torch>=2.11,<2.15)"]


def test_deepspeed_resolved_by_plain_root_is_refused_not_locked_to_an_old_wheel(server, pypi, trap):
    """Plain root (no SUDO_USER) has nobody to build deepspeed's sdist as: uv, with builds off,
    took 0.3.1.dev3, deepspeed's last wheel its requirements allow (0.3.1.dev4 and dev5 need
    cpufeature, which has none), where 0.19.8 is the newest. Refused naming both and what works;
    the old release pinned is taken knowingly."""
    stack = ["transformers", "accelerate", "deepspeed"]
    out = server.base / "stack.lock"
    run = server.mlsetup(
        "lock", "--facts", str(RTX), "--answers", answers(server, stack), "-o", str(out),
        timeout=600, **env(pypi, trap, SUDO_USER=""),
    )  # fmt: skip
    assert run.returncode == 2, run.stdout + run.stderr
    message = " ".join(run.stderr.split())
    assert (
        "deepspeed would lock to 0.3.1.dev3, far below 0.19.8, its newest release, which has no "
        f"wheel on {pypi.url} for Python 3.12, only source" in message
    ), message
    assert "run it as an ordinary account of this machine (without sudo" in message
    assert '"deepspeed==0.3.1.dev3" in torch.packages' in message
    assert "Traceback" not in run.stderr and not out.exists()

    pinned = ["transformers", "accelerate", "deepspeed==0.3.1.dev3"]
    run = server.mlsetup(
        "lock", "--facts", str(RTX), "--answers", answers(server, pinned), "-o", str(out),
        "--json", timeout=600, **env(pypi, trap, SUDO_USER=""),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    summary = json.loads(run.stdout)
    assert summary["packages"]["deepspeed"] == "0.3.1.dev3"


def test_vllm_with_an_old_xformers_names_both_and_torch(server, pypi, trap):
    message = refused(server, pypi, trap, ["vllm==0.33.0", "xformers==0.0.30"])
    assert "cannot be installed together" in message
    assert "vllm>=0.33.0 requires torch==2.14.0" in message
    assert "xformers<=0.0.30 requires torch==2.7.0" in message
    assert "none of those runs here" not in message


def test_vllm_with_sglang_names_both_and_the_shared_dependency(server, pypi, trap):
    """uv names the pin they disagree on (humming-kernels, with its extra, in the order the
    stack is given: by name, whatever the answers' order)."""
    message = refused(server, pypi, trap, ["vllm==0.33.0", "sglang==0.5.23"])
    assert "vllm>=0.33.0 requires humming-kernels==0.1.19" in message
    assert "sglang requires humming-kernels==0.1.12" in message
    assert "no torch" not in message and "uv finds no torch" not in message


def test_torch_pinned_in_the_packages_keeps_its_vision_and_audio(server, pypi, trap):
    summary = lock(server, pypi, trap, ["torch==2.9.0", "torchvision", "torchaudio"])
    assert summary["torch"] == "2.9.0" and summary["build"] == "cu128"
    assert summary["packages"]["torchvision"] == "0.24.0"
    assert summary["decided_by"] == ["torch.packages torch==2.9.0"]


def test_a_package_or_version_that_does_not_exist_is_named_once(server, pypi, trap):
    message = refused(server, pypi, trap, ["no-such-package-mlsetup"])
    assert message.count("no-such-package-mlsetup on") == 1
    assert f"no no-such-package-mlsetup on {pypi.url}" in message
    assert "GPU" not in message and "build" not in message
    asked = [p for _, p, _ in pypi.log if "no-such-package" in p]
    assert asked == ["/simple/no-such-package-mlsetup/"]  # once, not per build

    message = refused(server, pypi, trap, ["transformers==99.0"])
    assert f"no transformers==99.0 on {pypi.url}" in message


def test_an_old_torch_version_is_judged_by_its_wheel_not_called_the_cpu_build(server, pypi, trap):
    message = refused(server, pypi, trap, [], torch='version = "==2.3.1"')
    assert message.startswith(
        "mlsetup: input error (answers): torch.version = '==2.3.1': torch 2.3.1"
    )
    assert "the cu121 build (its wheel requires nvidia-cuda-runtime-cu12==12.1.105)" in message
    assert "no kernels for compute capability 12.0" in message and "CPU" not in message


def test_the_forty_lock_to_the_newest_vllm_as_uv_does(server, pypi, trap):
    summary = lock(server, pypi, trap, FORTY)
    assert summary["packages"]["vllm"] == "0.33.0" and summary["torch"] == "2.14.0"
    assert summary["build"] == "cu130" and summary["decided_by"] == ["vllm"]
    assert "deepspeed 0.19.8" in summary["sources"] and "sqlitedict 2.1.0" in summary["sources"]


def test_a_gpu_less_box_gets_no_cuda_torch_and_no_toolkit(server, pypi, trap):
    """PyPI serves torch for Linux only as CUDA builds: a box without an NVIDIA GPU is told how
    to point torch.index_url at CPU builds, and nothing is installed."""
    message = refused(server, pypi, trap, ["transformers"], machine=GPU_LESS)
    assert "this machine has no NVIDIA GPU, but torch 2.15.0" in message
    assert "is the cu132 build (its wheel requires cuda-toolkit==13.2.2)" in message
    assert (
        'torch.index_url to an index of CPU builds, e.g. "https://download.pytorch.org/whl/cpu"'
        in (message)
    )
    message = refused(server, pypi, trap, ["transformers"], machine=GPU_LESS, torch='cuda = "cpu"')
    assert "no NVIDIA GPU" in message and "download.pytorch.org/whl/cpu" in message

    setup(server, gpu=None)  # the fake server itself, GPU-less: apply refuses before any step
    answers(server, ["transformers"])
    run = server.mlsetup("apply", "--answers", str(server.answers), **env(pypi, trap))
    assert run.returncode == 2, run.stdout
    assert "this machine has no NVIDIA GPU" in run.stdout
    assert server.calls() == [] and not server.venv.exists()
    assert not [a for a in started(server) if a.startswith(("toolkit", "driver"))]


@pytest.mark.parametrize(
    "where", ["torch.index_url", "UV_DEFAULT_INDEX", "pip.conf", "uv.toml", "uv.toml [pip]"]
)
def test_a_mirror_that_has_nothing_is_the_only_index_asked(server, trap, where):
    """A mirror answering 404 for everything: exit 2 naming it and the package it lacks; no
    request went anywhere else (the trap saw none, the mirror saw them all). The system's
    uv.toml counts although mlsetup runs uv with --no-config (which alone skipped it: PyPI)."""
    setup(server)
    server.pip_conf.unlink()  # no default index but the one the test names
    with RecordedIndex(missing=True) as mirror:
        extra: dict[str, str] = {"UV_OFFLINE": "0", **trap.env()}
        torch = ""
        if where == "torch.index_url":
            torch = f'index_url = "{mirror.url}"'
        elif where == "UV_DEFAULT_INDEX":
            extra["UV_DEFAULT_INDEX"] = mirror.url
        elif where == "pip.conf":
            server.pip_conf.write_text(f"[global]\nindex-url = {mirror.url}\n")
        else:
            uv_toml = server.root / "etc/uv/uv.toml"
            uv_toml.parent.mkdir(parents=True, exist_ok=True)
            uv_toml.write_text(
                f'[[index]]\nurl = "{mirror.url}"\ndefault = true\n'
                if where == "uv.toml"
                else f'[pip]\nindex-url = "{mirror.url}"\n'
            )
        answers(server, ["vllm"], torch)
        plan = server.mlsetup(
            "plan", "--facts", str(RTX), "--answers", str(server.answers), **extra
        )
        assert plan.returncode == 2, plan.stdout + plan.stderr
        assert f"no vllm on {mirror.url}" in plan.stderr
        run = server.mlsetup("apply", "--answers", str(server.answers), **extra)
        assert run.returncode == 2, run.stdout
        assert f"no vllm on {mirror.url}" in run.stdout
        assert mirror.log and all(path.startswith("/simple/") for _, path, _ in mirror.log)
    assert server.calls() == []


def test_a_closed_port_as_the_index_is_exit_2_naming_it(server, trap):
    setup(server)
    server.pip_conf.unlink()
    answers(server, ["vllm"], 'index_url = "http://127.0.0.1:9/simple"')
    extra = {"UV_OFFLINE": "0", "UV_HTTP_RETRIES": "0", **trap.env()}
    run = server.mlsetup("apply", "--answers", str(server.answers), **extra)
    assert run.returncode == 2, run.stdout
    assert "http://127.0.0.1:9/simple/vllm/ failed" in run.stdout
    assert server.report()["failure"]["diagnosis"] == "index-unreachable"
    assert server.calls() == [] and not server.venv.exists()


def test_auto_python_on_ubuntu_2204_is_one_the_whole_stack_has_wheels_for(server, pypi, trap):
    """The system's 3.10 is older than torch 2.15 supports: auto picks, by resolution, the
    Python every locked package has a wheel for (not the newest torch lists, 3.15)."""
    run = server.mlsetup(
        "plan", "--facts", str(UBUNTU_2204), "--answers", answers(server, ["vllm"]), "--json",
        timeout=600, **env(pypi, trap),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    plan = json.loads(run.stdout)
    assert plan["lock"]["python"] == "3.12" and plan["lock"]["sources"] == []
    create = next(a for s in plan["steps"] for a in s["actions"] if a["id"] == "venv.create")
    assert create["argv"][:4] == ["uv", "venv", "--python", "3.12"]
    assert "uv downloads CPython 3.12" in create["title"]
    assert "torch 2.15 has no wheels for the system's Python (3.10)" in create["title"]
    assert "every package of the stack has a wheel for Python 3.12" in create["title"]


def test_an_explicit_python_is_obeyed_and_what_builds_from_source_is_named(server, pypi, trap):
    stack = ["transformers", "accelerate", "nvtx"]
    run = server.mlsetup(
        "plan", "--facts", str(UBUNTU_2204), "--answers",
        answers(server, stack, venv='python = "3.15"'), "--json", timeout=600, **env(pypi, trap),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    plan = json.loads(run.stdout)
    assert plan["lock"]["python"] == "3.15" and plan["lock"]["torch"] == "2.15.0"
    assert plan["lock"]["sources"] == ["nvtx 0.2.17"]  # no cp315 wheel: built from its sdist
    sync = next(a for s in plan["steps"] for a in s["actions"] if a["id"] == "venv.sync")
    assert "source only, built as ops at apply: nvtx 0.2.17" in sync["title"]


def test_a_lock_written_ahead_installs_through_venv_lock(server, pypi, trap):
    """A fleet's controller resolves once without a GPU: `mlsetup lock` for a host's facts
    writes the file venv.lock takes there, and that host resolves nothing."""
    summary = lock(server, pypi, trap, ["vllm==0.11.2"])
    handed = server.root / "srv/stack.lock"
    handed.parent.mkdir(parents=True)
    shutil.copy(server.base / "stack.lock", handed)
    answers(server, ["vllm==0.11.2"], venv='lock = "/srv/stack.lock"')
    asked = len(pypi.log)
    run = server.mlsetup(
        "plan", "--facts", str(RTX), "--answers", str(server.answers), "--json",
        **env(pypi, trap),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    plan = json.loads(run.stdout)
    assert plan["lock"]["torch"] == summary["torch"] == "2.9.0"
    assert plan["lock"]["packages"] == summary["packages"]
    assert len(pypi.log) == asked  # nothing resolved: the lock is the stack


def test_offline_the_index_is_unreachable_whatever_uvs_cache_happens_to_hold(
    tmp_path, pypi, trap, uv_binary
):
    """uv offline names whichever package its cache lacked first, so its prose changes with
    the cache (root's, shared by every run): the cause mlsetup reports must not."""
    compile_ = [str(uv_binary), "pip", "compile", "--no-config", "--no-header", "-"]
    wanted = "accelerate\ntransformers\n"
    warm = {"UV_CACHE_DIR": str(tmp_path / "warm"), "UV_DEFAULT_INDEX": pypi.url, **trap.env()}
    online = subprocess.run(  # a cache that now holds accelerate's metadata, not the rest
        compile_, input="accelerate\n", text=True, capture_output=True,
        env={**os.environ, **warm, "UV_OFFLINE": "0"}, timeout=120,
    )  # fmt: skip
    assert online.returncode == 0, online.stderr
    outputs = []
    for cache in (tmp_path / "cold", tmp_path / "warm"):
        run = subprocess.run(
            compile_, input=wanted, text=True, capture_output=True, timeout=120,
            env={**os.environ, **warm, "UV_CACHE_DIR": str(cache), "UV_OFFLINE": "1"},
        )  # fmt: skip
        assert run.returncode != 0
        outputs.append(run.stderr.splitlines())
    assert " ".join(outputs[0]) != " ".join(outputs[1])  # uv says different things
    assert read_failure(outputs[0]) == read_failure(outputs[1]) == Unreachable(None, OFFLINE_DETAIL)


FLASH_ATTN = '\n[[extensions]]\nname = "flash-attn"\nversion = "2.8.3"\n'


def test_flash_attn_keeps_torch_below_the_series_whose_headers_need_cxx20(server, pypi, trap):
    """flash-attn 2.8.3's setup.py passes -std=c++17; torch 2.14's ATen.h stops with "#error
    C++20 or later compatible compiler is required to use ATen.": the plan locks torch 2.13,
    decided by flash-attn, and says why (before: torch 2.15.0, and a compile that fails)."""
    run = server.mlsetup(
        "plan", "--facts", str(RTX), "--answers", answers(server, [], torch=FLASH_ATTN),
        "--json", timeout=600, **env(pypi, trap),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    plan = json.loads(run.stdout)
    assert plan["lock"]["torch"].startswith("2.13.") and plan["lock"]["build"] == "cu130"
    assert plan["lock"]["decided_by"] == ["flash-attn"]
    assert plan["lock"]["note"] == "flash-attn 2.8.3 builds with C++17; torch >= 2.14 needs C++20"
    venv = next(s for s in plan["steps"] if s["name"] == "venv")
    assert "decided by flash-attn" in venv["reason"] and "needs C++20" in venv["reason"]
    build = next(a for s in plan["steps"] for a in s["actions"] if a["kind"] == "build")
    assert build["target"] == "flash-attn"


def test_a_torch_pinned_past_what_flash_attn_builds_with_is_exit_2_naming_both(server, pypi, trap):
    message = refused(server, pypi, trap, [], torch='version = "==2.15.0"' + FLASH_ATTN)
    assert message.startswith('mlsetup: input error (answers): torch.version = "==2.15.0": ')
    assert "flash-attn 2.8.3 builds with C++17; torch >= 2.14 needs C++20" in message
    assert 'What would work: torch.version = "<2.14" (torch 2.13,' in message
    assert "a release of flash-attn whose build is C++20" in message
    # the same pin in the packages
    message = refused(server, pypi, trap, ["torch==2.15.0"], torch=FLASH_ATTN)
    assert message.startswith('mlsetup: input error (answers): torch.packages "torch==2.15.0": ')
    assert "torch >= 2.14 needs C++20" in message and 'torch.version = "<2.14"' in message


def test_a_lock_handed_over_with_a_torch_flash_attn_cannot_build_against_is_exit_2(
    server, pypi, trap
):
    """venv.lock is a pin too: a lock of torch 2.15.0 with flash-attn asked for is refused at
    plan, naming the lock, the extension and what would work."""
    summary = lock(server, pypi, trap, ["transformers", "accelerate", "nvtx"])
    assert summary["torch"] == "2.15.0"
    handed = server.root / "srv/stack.lock"
    handed.parent.mkdir(parents=True)
    shutil.copy(server.base / "stack.lock", handed)
    answers(server, [], torch=FLASH_ATTN, venv='lock = "/srv/stack.lock"')
    run = server.mlsetup(
        "plan", "--facts", str(RTX), "--answers", str(server.answers), **env(pypi, trap)
    )
    assert run.returncode == 2, run.stdout + run.stderr
    message = " ".join(run.stderr.split())
    assert "venv.lock '/srv/stack.lock' does not fit this machine: its torch is 2.15.0, and " in (
        message
    )
    assert "flash-attn 2.8.3 builds with C++17; torch >= 2.14 needs C++20" in message
    assert 'torch.version = "<2.14"' in message and "Traceback" not in run.stderr


def test_the_lock_of_a_large_set_does_not_depend_on_its_order(server, pypi, trap):
    """The forty and torchaudio in three orders, one with the torch family first: one lock.
    The family follows torch (an unpinned torchvision decided first pinned torch to its newest,
    and vllm walked back to a release that accepted it), and each requested package locked in
    an older series than its newest is named with what holds it back."""
    stack = [*FORTY, "torchaudio"]
    orders = [stack, stack[::-1], sorted(stack, key=lambda n: (not n.startswith("torch"), n))]
    locks = [lock(server, pypi, trap, packages) for packages in orders]
    assert locks[0] == locks[1] == locks[2]
    summary = locks[0]
    torch, vllm = summary["torch"], summary["packages"]["vllm"]
    # torchvision and torchaudio are the releases made for the torch the rest decided
    assert summary["packages"]["torchvision"] == {"2.14.0": "0.29.0", "2.13.0": "0.28.0"}[torch]
    assert "torchvision" not in summary["decided_by"] and "torchaudio" not in summary["decided_by"]
    assert vllm in ("0.33.0", "0.31.0")  # the newest the recorded copy has, or the one before
    if vllm != "0.33.0":
        assert any(
            h.startswith(f"vllm {vllm} (newest 0.33.0): held back by")
            for h in (summary["held_back"])
        ), summary["held_back"]


def test_the_lock_of_a_large_set_with_flash_attn_does_not_depend_on_its_order(server, pypi, trap):
    """A set other than the forty: the forty, torchaudio and flash-attn (whose C++17 build keeps
    torch below 2.14) in three orders, one with the torch family first: one lock. vllm 0.31.0,
    the newest whose torch flash-attn builds against, decides torch 2.13.0 and holds back
    transformers; the family follows torch; flash-attn's run-time requirement is locked."""
    stack = [*FORTY, "torchaudio"]
    orders = [stack, stack[::-1], sorted(stack, key=lambda n: (not n.startswith("torch"), n))]
    locks = [lock(server, pypi, trap, packages, torch=FLASH_ATTN) for packages in orders]
    assert locks[0] == locks[1] == locks[2]
    summary = locks[0]
    assert summary["torch"] == "2.13.0" and summary["build"] == "cu130"
    assert summary["packages"]["vllm"] == "0.31.0" and summary["decided_by"] == ["vllm"]
    assert summary["packages"]["torchvision"] == "0.28.0" and "torchaudio" in summary["packages"]
    assert "einops" in summary["packages"]  # flash-attn's runtime_requires, from the lock
    assert (
        "transformers 5.17.0 (newest 5.24.0): held back by vllm==0.31.0 requires "
        "transformers>=5.10.4,<5.18.0"
    ) in summary["held_back"]
