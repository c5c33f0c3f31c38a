"""One stack: uv resolves torch, the packages and the build requirements into one lock before
anything changes, and the venv gets exactly that lock.

Against a fake server (tests/harness.py) and a local package index of tiny real wheels
(tests/pkgindex.py): real uv resolutions, real venvs, real `uv pip sync`. One test resolves
against PyPI itself (metadata only; skipped, saying why, when PyPI cannot be reached); the real
stacks against the recorded copy of PyPI are in tests/test_pypi_stacks.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import pytest
from uv import find_uv_bin

from steps.core.rootfs import RootFS
from steps.formats.events import ActionStarted, Notice
from steps.stack.venvstate import probe_venv
from tests.common import MACHINES, run_cli
from tests.harness import FakeServer, install_extension, mode
from tests.pkgindex import PackageIndex, standard_index

PYTHON = "{}.{}".format(*sys.version_info[:2])
RTX_PRO_6000 = "0x2bb1"  # compute capability 12.0 (assets/gpus.toml)


def write_answers(
    server: FakeServer,
    index: PackageIndex | None,
    packages: list[str],
    torch: str = "",
    venv: str = "",
) -> None:
    url = index.torch_url if index else "https://pypi.org/simple"
    server.answers.write_text(
        f'version = 1\n[venv]\npath = "~/ml-env"\n{venv}\n'
        f'[torch]\nindex_url = "{url}"\npackages = {json.dumps(packages)}\n{torch}\n'
        '[reboot]\npolicy = "never"\n'
    )


def setup(server: FakeServer, gpu: str | None = "0x2335") -> PackageIndex:
    """The machine: its system Python at /usr/bin (as `venv.python = "auto"` finds it), the
    given GPU with a loaded 580 driver (or none), and the local index."""
    real = Path(os.path.realpath(sys.executable))
    link = server.root / f"usr/bin/python{PYTHON}"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(real)
    shutil.rmtree(server.root / "sys/bus/pci/devices")
    if gpu:
        server.machine.gpu("0000:00:06.0", gpu)
        server.machine.driver_loaded("580.105.08")
    return standard_index(server.base / "pkgs")


def env(index: PackageIndex) -> dict[str, str]:
    return {"UV_DEFAULT_INDEX": index.default_url}


def plan_json(server: FakeServer, index: PackageIndex) -> dict:
    run = server.mlsetup("plan", "--answers", str(server.answers), "--json", **env(index))
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads(run.stdout)


def step(plan: dict, name: str) -> dict:
    return next(s for s in plan["steps"] if s["name"] == name)


def action(plan: dict, action_id: str) -> dict:
    return next(a for s in plan["steps"] for a in s["actions"] if a["id"] == action_id)


def toolkits(plan: dict) -> list[str]:
    return [
        a["argv"][-1]
        for a in step(plan, "toolkit")["actions"]
        if a["id"].startswith("toolkit.install")
    ]


def started(server: FakeServer) -> list[str]:
    return [e.action for e in server.events() if isinstance(e, ActionStarted)]


def test_a_pinning_package_moves_torch_and_the_toolkit_before_anything_is_installed(
    server: FakeServer,
):
    index = setup(server)  # an H200 whose driver runs CUDA 13.0: cu130 would be the first choice
    write_answers(server, index, ["vllmish"])

    plan = plan_json(server, index)
    assert plan["lock"]["torch"] == "2.9.0+cu128" and plan["lock"]["build"] == "cu128"
    assert "vllmish" in plan["lock"]["decided_by"]
    assert "cu130 build has no torch" in plan["lock"]["note"]
    assert toolkits(plan) == ["cuda-toolkit-12-8"]
    assert action(plan, "venv.sync")["argv"][-3:-1] == ["--index", f"{index.root}/cu128"]
    assert "torch 2.9.0+cu128 (decided by" in step(plan, "venv")["reason"]
    assert server.calls() == [] and not server.venv.exists()  # a plan changes nothing

    run = server.mlsetup("apply", "--answers", str(server.answers), **env(index))
    assert run.returncode == 0, run.stdout + run.stderr
    order = started(server)
    # resolved first (cu130 tried and refused), then the toolkit the lock's torch needs
    resolves = [a for a in order if a.startswith("venv.resolve")]
    builds = [a for a in resolves if "-check-" not in a]  # the checks: who decided, sources
    assert builds[0] == "venv.resolve-cu130" and builds[-1] == "venv.resolve-cu128"
    assert order[: len(resolves)] == resolves
    assert "toolkit.install-12.8" in order and "toolkit.install-13.0" not in order
    assert "apt-get cuda-toolkit-12-8" in server.commands()
    venv = probe_venv(RootFS(server.root), str(server.venv))
    assert venv is not None
    assert venv.version_of("torch") == "2.9.0+cu128"
    assert venv.version_of("torchvision") == "0.24.0+cu128"  # the same build as torch
    assert venv.version_of("vllmish") == "0.1.0"

    report = server.report()
    assert report["lock"]["torch"] == "2.9.0+cu128"
    kept = server.root / "var/lib/mlsetup/stack.lock"
    assert kept.read_text() == report["lock"]["text"] and mode(kept) == 0o600
    assert "--hash=sha256:" in kept.read_text()
    smoke = report["smoke"]["stack"]
    assert smoke["ok"] and smoke["torch"] == "2.9.0+cu128"
    assert smoke["fake"] is True  # the stand-in says so: no matmul was claimed
    assert "stack smoke test: torch 2.9.0+cu128 imports (a test stand-in" in run.stdout

    # the same answers, the lock unchanged: satisfied, nothing resolved or run again
    again = server.mlsetup("apply", "--answers", str(server.answers), **env(index))
    assert again.returncode == 0, again.stdout
    assert server.report()["ran"] == []
    assert not any(a.startswith("venv.resolve") for a in started(server))


def test_a_package_that_forces_an_impossible_torch_exits_2_naming_it(server: FakeServer):
    index = setup(server, gpu=RTX_PRO_6000)  # compute capability 12.0: cu128 and newer only
    write_answers(server, index, ["oldpin"])

    plan = server.mlsetup("plan", "--answers", str(server.answers), **env(index))
    assert plan.returncode == 2, plan.stdout + plan.stderr
    for words in (
        "oldpin requires torch==2.6.0",
        "torch 2.6 is built for cu118, cu124, cu126",
        "compute capability 12.0",
        "What would: a release of oldpin",
    ):
        assert words in plan.stderr
    assert "Traceback" not in plan.stderr

    run = server.mlsetup("apply", "--answers", str(server.answers), **env(index))
    assert run.returncode == 2, run.stdout + run.stderr
    assert "oldpin requires torch==2.6.0" in run.stdout
    assert server.calls() == [] and not server.venv.exists()  # nothing ran
    assert server.report()["failure"]["diagnosis"] == "stack-unsatisfiable"


def test_torchvision_comes_from_torchs_build_and_auto_python_is_the_systems(server: FakeServer):
    index = setup(server)
    write_answers(server, index, ["torchvision"])
    plan = plan_json(server, index)
    lock = plan["lock"]
    assert lock["torch"] == "2.11.0+cu130" and lock["packages"]["torchvision"] == "0.26.0+cu130"
    assert lock["python"] == PYTHON
    create = action(plan, "venv.create")["argv"]
    assert create[2:6] == ["--python", PYTHON, "--python-preference", "only-system"]


def test_an_exact_pin_stays_exact(server: FakeServer):
    index = setup(server)
    index.add_torch("2.8.0", "cu128", "12.8")
    index.add_torch("2.8.1", "cu128", "12.8")
    write_answers(server, index, [], torch='version = "==2.8.0"')
    lock = plan_json(server, index)["lock"]
    assert lock["torch"] == "2.8.0+cu128"
    assert lock["decided_by"][0] == "torch.version ==2.8.0"

    # a recorded machine resolves too (metadata only), for its own Python and platform
    facts = str(MACHINES / "h200-ubuntu2404.json")
    recorded = run_cli("plan", "--facts", facts, "--answers", str(server.answers), "--json")
    assert recorded.returncode == 0, recorded.stderr
    lock = json.loads(recorded.stdout)["lock"]
    assert lock["torch"] == "2.8.0+cu128" and lock["python"] == "3.12"

    # with no index to reach, it plans from knowledge, naming the index that failed
    closed = server.answers.read_text().replace(index.torch_url, "http://127.0.0.1:9/{build}")
    server.answers.write_text(closed)
    closed_port = {"UV_OFFLINE": "0", "UV_HTTP_RETRIES": "0"}
    offline = run_cli("plan", "--facts", facts, "--answers", str(server.answers), env=closed_port)
    assert offline.returncode == 0, offline.stderr
    assert "the resolution happens at apply" in offline.stdout
    assert "http://127.0.0.1:9/cu129/torch/ failed" in offline.stdout  # 2.8 ships cu129 first
    assert "torch==2.8.0" in offline.stdout and "2.8.*" not in offline.stdout


def test_a_python_the_torch_release_lacks_is_exit_2(tmp_path: Path):
    answers = tmp_path / "a.toml"
    answers.write_text('version = 1\n[venv]\npython = "3.9"\n[torch]\nversion = "==2.11.0"\n')
    run = run_cli(
        "plan", "--facts", str(MACHINES / "h200-ubuntu2404.json"), "--answers", str(answers)
    )
    assert run.returncode == 2
    assert "venv.python = '3.9'" in run.stderr and "torch 2.11" in run.stderr
    assert "3.10, 3.11, 3.12, 3.13, 3.14" in run.stderr and "Traceback" not in run.stderr


def installed_set(server: FakeServer) -> dict[str, str]:
    """Each installed distribution's RECORD (what it put where, with hashes), by name."""
    sites = list(server.venv.glob("lib/python3*/site-packages"))
    return {d.name: (d / "RECORD").read_text() for d in sites[0].glob("*.dist-info")}


def test_two_hosts_from_one_lock_end_identical(server: FakeServer, uv_binary: Path):
    index = setup(server, gpu=None)  # GPU-less: the cpu build
    write_answers(server, index, ["torchvision", "helper"])
    first = server.mlsetup("apply", "--answers", str(server.answers), **env(index))
    assert first.returncode == 0, first.stdout + first.stderr
    assert server.report()["lock"]["torch"] == "2.11.0+cpu"
    assert "venv.smoke" in server.report()["ran"]

    base = Path(tempfile.mkdtemp(prefix="mlsetup-server-", dir="/tmp"))
    try:
        other = FakeServer(base, uv_binary)
        setup(other, gpu=None)
        handed = other.root / "srv/stack.lock"
        handed.parent.mkdir(parents=True)
        shutil.copy(server.root / "var/lib/mlsetup/stack.lock", handed)
        write_answers(other, index, ["torchvision", "helper"], venv='lock = "/srv/stack.lock"')
        second = other.mlsetup("apply", "--answers", str(other.answers), **env(index))
        assert second.returncode == 0, second.stdout + second.stderr
        assert not any(a.startswith("venv.resolve") for a in started(other))  # not resolved
        assert installed_set(other) == installed_set(server)
        assert "torch-2.11.0+cpu.dist-info" in installed_set(other)

        # a lock for another platform is refused before anything runs
        text = handed.read_text().replace("x86_64-manylinux", "aarch64-manylinux", 1)
        handed.write_text(text)
        shutil.rmtree(other.venv)
        third = other.mlsetup("apply", "--answers", str(other.answers), **env(index))
        assert third.returncode == 2, third.stdout
        assert "venv.lock '/srv/stack.lock' does not fit this machine" in third.stdout
        assert "aarch64-manylinux_2_35" in third.stdout and not other.venv.exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def pypi_reachable() -> str | None:
    """Why PyPI cannot be reached from here (None: it can)."""
    try:
        with urllib.request.urlopen("https://pypi.org/simple/vllm/", timeout=20) as response:
            response.read(1)
    except OSError as exc:
        return f"https://pypi.org/simple/vllm/: {getattr(exc, 'reason', exc)}"
    return None


def test_pypi_itself_vllm_resolves_to_the_torch_it_pins_and_the_toolkit_follows(
    server: FakeServer,
):
    """Real PyPI, metadata only (the recorded copy's tests say the rest): vllm 0.11.2 requires
    torch==2.9.0, whose PyPI wheel is the CUDA 12.8 build. Skipped when PyPI cannot be reached."""
    if why := pypi_reachable():
        pytest.skip(f"PyPI cannot be reached: {why}")
    setup(server)  # an H200 with a 580 driver: cu130 would be the first choice
    write_answers(server, None, ["vllm==0.11.2"])
    run = server.mlsetup(
        "plan", "--answers", str(server.answers), "--json", UV_OFFLINE="0", timeout=600
    )
    assert run.returncode == 0, run.stdout + run.stderr
    plan = json.loads(run.stdout)
    assert plan["lock"] is not None, f"PyPI could not be reached: {plan['warnings']}"
    lock = plan["lock"]
    assert lock["torch"] == "2.9.0" and lock["build"] == "cu128"  # from the wheel's runtime
    assert lock["packages"]["nvidia-cuda-runtime-cu12"].startswith("12.8.")
    assert lock["decided_by"] == ["vllm"] and lock["index"] == "https://pypi.org/simple"
    assert toolkits(plan) == ["cuda-toolkit-12-8"]
    assert not list(server.home.rglob("*.whl")), "the resolution downloaded wheels"


def test_pypi_itself_the_torch_family_listed_first_follows_the_torch_vllm_decides(
    server: FakeServer,
):
    """Real PyPI, metadata only: unpinned torchvision and torchaudio listed before vllm once
    pinned torch to torchvision's newest, and vllm walked back to 0.1.2 (2023). Now vllm is at
    its newest or the plan names what holds it back, and torchvision is the release of the
    locked torch. Skipped when PyPI cannot be reached."""
    if why := pypi_reachable():
        pytest.skip(f"PyPI cannot be reached: {why}")
    setup(server)
    write_answers(server, None, ["torchvision", "torchaudio", "vllm"])
    run = server.mlsetup(
        "plan", "--answers", str(server.answers), "--json", UV_OFFLINE="0", timeout=900
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lock = json.loads(run.stdout)["lock"]
    assert lock is not None
    vllm = lock["packages"]["vllm"]
    held = [h for h in lock["held_back"] if h.startswith(f"vllm {vllm} ")]
    assert tuple(map(int, vllm.split(".")[:2])) >= (0, 33) or held, lock["held_back"]
    assert lock["decided_by"] == ["vllm"]  # not torchvision, not torchaudio


def test_an_unreachable_index_keeps_a_venv_that_already_satisfies_the_answers(server: FakeServer):
    """An offline machine with torch in its venv already (an image): resolving cannot reach the
    index; the venv is kept unlocked. Without such a venv the apply fails with the reason."""
    index = setup(server, gpu=None)
    write_answers(server, index, ["helper"], torch='version = "==2.11.*"')
    assert server.mlsetup("apply", "--answers", str(server.answers), **env(index)).returncode == 0
    server.answers.write_text(
        server.answers.read_text().replace(index.torch_url, "http://127.0.0.1:9/{build}")
    )  # a closed port: nothing answers
    offline = {
        "UV_DEFAULT_INDEX": "http://127.0.0.1:9/pypi",
        "UV_HTTP_RETRIES": "0",
        "UV_NO_CACHE": "1",
    }
    run = server.mlsetup("apply", "--answers", str(server.answers), **offline)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "kept as it is, unlocked" in run.stdout and server.report()["ran"] == []
    # the failed resolution is named as excused, for the console and the wizard alike
    [note] = [e for e in server.events() if isinstance(e, Notice) and e.excuses]
    assert note.excuses.startswith("venv.resolve-") and "kept as it is, unlocked" in note.text
    assert f"! {note.excuses}: not a failure of the run" in run.stdout

    shutil.rmtree(server.venv)
    failed = server.mlsetup("apply", "--answers", str(server.answers), **offline)
    assert failed.returncode == 2, failed.stdout  # nothing ran: the index is the input to fix
    assert "http://127.0.0.1:9/" in failed.stdout
    assert server.report()["failure"]["diagnosis"] == "index-unreachable"
    assert not server.venv.exists()


def test_a_package_with_only_an_sdist_is_built_by_the_venv_owner_never_by_root(
    server: FakeServer,
):
    """Its metadata comes only from running its build backend (issue 21): root resolves with
    builds off, the venv's owner resolves and builds it, the plan says so; uid 0 never runs it,
    in the plan or the apply. A venv of root's is refused before anything runs."""
    index = setup(server)
    uids = server.base / "uids.log"
    uids.touch()
    uids.chmod(0o666)
    index.add_sdist("pypi", "uidprobe", "1.0", uids)
    write_answers(server, index, ["uidprobe"])

    plan = plan_json(server, index)
    assert plan["lock"]["sources"] == ["uidprobe 1.0"]
    sync = action(plan, "venv.sync")
    assert "source only, built as mluser at apply: uidprobe 1.0" in sync["title"]
    assert sync["user"] == "mluser" and "--no-build" not in sync["argv"]
    assert uids.read_text().split("\n")[:-1] == ["1000 metadata"]

    run = server.mlsetup("apply", "--answers", str(server.answers), **env(index))
    assert run.returncode == 0, run.stdout + run.stderr
    venv = probe_venv(RootFS(server.root), str(server.venv))
    assert venv is not None and venv.version_of("uidprobe") == "1.0"
    ran = uids.read_text().splitlines()
    assert "1000 wheel" in ran and all(line.startswith("1000 ") for line in ran), ran

    write_answers(server, index, ["uidprobe"], venv='user = "root"')
    refused = server.mlsetup("plan", "--answers", str(server.answers), **env(index))
    assert refused.returncode == 2, refused.stdout
    assert "uidprobe has no wheel" in refused.stderr
    assert "mlsetup never runs a package's build as root" in refused.stderr
    assert all(line.startswith("1000 ") for line in uids.read_text().splitlines())


def test_root_reads_the_lock_from_the_directory_it_made_not_where_the_account_points(
    server: FakeServer,
):
    """The account that resolves owns the directory uv writes into: after uv it swaps that
    directory for a link to one of root's, holding another lock.txt. Root reads back through
    the descriptor of the directory it made, and only files of that account's."""
    index = setup(server)
    write_answers(server, index, ["helper"])
    secret = server.base / "root-only"
    secret.mkdir(mode=0o700)
    for name in ("lock.txt", "probe.txt", "pylock.toml"):
        (secret / name).write_text("torch==6.6.6+secret \\\n    --hash=sha256:00\n")
    moved = server.base / "moved.txt"
    real = server.tools / "uv.real"
    (server.tools / "uv").rename(real)
    wrapper = server.tools / "uv"
    wrapper.write_text(
        f'#!/bin/sh\n"{real}" "$@"; code=$?\nout=""; prev=""\n'
        'for a in "$@"; do [ "$prev" = "--output-file" ] && out="$a"; prev="$a"; done\n'
        'if [ -n "$out" ] && [ "$(id -u)" = "1000" ]; then\n'
        f'  d=$(dirname "$out"); mv "$d" "$d.moved" && ln -s {secret} "$d" && '
        f'echo "$d" >> {moved}\nfi\nexit $code\n'
    )
    wrapper.chmod(0o755)
    moved.touch()
    moved.chmod(0o666)
    try:
        plan = plan_json(server, index)
        assert moved.read_text(), "the account's swap did not run"
        assert plan["lock"]["torch"] == "2.11.0+cu130"
        assert "6.6.6" not in json.dumps(plan)
    finally:
        for swapped in moved.read_text().split():
            Path(swapped).unlink(missing_ok=True)
            shutil.rmtree(f"{swapped}.moved", ignore_errors=True)


OFFLINE_EXT_SETUP = """
from setuptools import setup
setup(name="offext", version="0.1.0", packages=["offext"])
"""


def test_a_venv_kept_unlocked_gets_its_check_after_the_extensions(server: FakeServer):
    """An image's venv (torch already there, no index: kept unlocked) and an extension from the
    wheel cache: the stack check after the extensions runs (its script is placed for an
    unlocked venv too) and passes. Seen on the H200, where it failed: "can't open file
    '/var/cache/mlsetup/stack/smoke_stack.py'"."""
    server.machine.driver_loaded("580.105.08")
    install_extension(server, "offext", OFFLINE_EXT_SETUP)
    first = server.mlsetup("apply", "--answers", str(server.answers))
    assert first.returncode == 0, first.stdout + first.stderr
    # the image as it comes: no lock kept, no shared smoke test, the extension not installed
    shutil.rmtree(server.root / "var/cache/mlsetup/stack")
    (server.root / "var/lib/mlsetup/stack.lock").unlink()
    venv_python = str(server.venv / "bin/python")
    subprocess.run(
        [find_uv_bin(), "pip", "uninstall", "--python", venv_python, "offext"],
        check=True,
        capture_output=True,
    )
    closed = "http://127.0.0.1:9/whl/{build}"  # a closed port: nothing answers
    server.answers.write_text(server.answers.read_text().replace(str(server.index), closed))
    offline = {"UV_DEFAULT_INDEX": "http://127.0.0.1:9/pypi", "UV_HTTP_RETRIES": "0"}
    run = server.mlsetup("apply", "--answers", str(server.answers), **offline)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "kept as it is, unlocked" in run.stdout
    ran = server.report()["ran"]
    assert ran[-1] == "extensions.stack-check" and "extensions.offext.install-wheel" in ran, ran


def test_an_unreachable_index_is_quoted_from_a_word_boundary():
    """uv's long connection error is cut to its end for the warning, never mid-word (the
    warning read 'failed (t failed after 3 retries')."""
    from steps.stack.refusal import _tail

    detail = "error sending request for url " * 20 + "request failed after 3 retries"
    quoted = _tail(detail)
    assert quoted.startswith("…") and quoted.endswith("after 3 retries")
    assert quoted[1:].split(" ", 1)[0] in detail.split(" ") and len(quoted) <= 301


def test_the_venvs_activate_names_the_toolkit_of_torchs_cuda(server: FakeServer):
    """DeepSpeed's ops and cpp_extension.load compile at run time with CUDA_HOME's nvcc: the
    venv's activate exports the toolkit of the locked torch's CUDA and puts its bin right after
    the venv's own; a second apply finds it there and writes nothing, a block edited away is
    written again, once."""
    index = setup(server)  # the H200 with driver 580: torch 2.11.0+cu130
    write_answers(server, index, ["helper"])
    run = server.mlsetup("apply", "--answers", str(server.answers), **env(index))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "venv.activate" in server.report()["ran"]
    activate = server.venv / "bin/activate"
    sourced = subprocess.run(
        ["bash", "-c", f'. "{activate}" && echo "$CUDA_HOME" && echo "$PATH"'],
        capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    home, path = sourced.stdout.split()
    assert home == "/usr/local/cuda-13.0"  # torch 2.11.0+cu130
    assert path.split(":")[:3] == [f"{server.venv}/bin", "/usr/local/cuda-13.0/bin", "/usr/bin"]
    fish = (server.venv / "bin/activate.fish").read_text()
    assert "set -gx CUDA_HOME '/usr/local/cuda-13.0'" in fish
    venv_step = next(s for s in server.report()["steps"] if s["name"] == "venv")
    assert "activate sets CUDA_HOME=/usr/local/cuda-13.0" in venv_step["reason"]

    again = server.mlsetup("apply", "--answers", str(server.answers), **env(index))
    assert again.returncode == 0 and "venv.activate" not in server.report()["ran"]
    text = activate.read_text()
    activate.write_text(text.replace("export CUDA_HOME='/usr/local/cuda-13.0'", "true"))
    third = server.mlsetup("apply", "--answers", str(server.answers), **env(index))
    assert third.returncode == 0 and server.report()["ran"] == ["venv.activate"]
    assert activate.read_text().count("export CUDA_HOME=") == 1
    assert activate.read_text().count("# >>> mlsetup") == 1


def test_a_requested_package_that_does_not_import_fails_the_stack_smoke_test(server: FakeServer):
    """A wheel built for another CUDA than torch's installs and fails only at import: the smoke
    test after the sync imports each requested package's modules (read from its RECORD) after
    torch, and the run fails naming the package and the error."""
    index = setup(server)
    index.add(
        "pypi", "cu12only", "1.0",
        {"cu12only/__init__.py": "raise ImportError('libcudart.so.12: cannot open shared object')"},
    )  # fmt: skip
    write_answers(server, index, ["helper", "cu12only"])
    run = server.mlsetup("apply", "--answers", str(server.answers), **env(index))
    assert run.returncode == 1, run.stdout + run.stderr
    report = server.report()
    assert report["failure"]["action"] == "venv.smoke"
    smoke = report["smoke"]["stack"]
    assert smoke["ok"] is False
    assert smoke["packages"]["helper: _helper"] == "ok"
    assert "libcudart.so.12" in smoke["packages"]["cu12only: cu12only"]
    assert "import cu12only (from cu12only): ImportError: libcudart.so.12" in smoke["summary"]


def test_a_package_built_for_another_cuda_major_than_torch_is_refused_at_plan(
    server: FakeServer,
):
    """Its metadata says so: it requires a CUDA 12 library (nvidia-*-cu12) beside a CUDA 13
    torch, or its own version carries +cu126. Exit 2 naming it, before anything runs."""
    index = setup(server)  # torch 2.11.0+cu130
    index.add("pypi", "nvidia-cublas-cu12", "12.8.4.1")
    index.add("pypi", "cu12lib", "1.0", requires=("nvidia-cublas-cu12",))
    write_answers(server, index, ["helper", "cu12lib"])
    run = server.mlsetup("plan", "--answers", str(server.answers), **env(index))
    assert run.returncode == 2, run.stdout + run.stderr
    message = " ".join(run.stderr.split())
    assert "cu12lib requires nvidia-cublas-cu12 12.8.4.1 (CUDA 12)" in message
    assert "torch 2.11.0+cu130 is the cu130 build (CUDA 13)" in message
    assert "fails when it is imported" in message and "Traceback" not in run.stderr

    index.add("pypi", "localcu", "1.0+cu126")
    write_answers(server, index, ["helper", "localcu"])
    run = server.mlsetup("plan", "--answers", str(server.answers), **env(index))
    assert run.returncode == 2, run.stdout + run.stderr
    assert "localcu 1.0+cu126 is built for CUDA 12" in " ".join(run.stderr.split())
    assert server.calls() == [] and not server.venv.exists()


def test_a_release_older_than_the_torch_its_releases_are_made_for_is_refused_naming_it(
    server: FakeServer,
):
    """torch pinned to 2.11.0; `servelike` 2.0, its newest, requires torch==2.10.0 (on the same
    build's index), and 1.0 names no bound on torch, so uv locks 1.0: a release from before
    the ones made for torch 2.11 (vllm 0.1.2 beside torch 2.15.0 in issue 31), which "accepts"
    it only by naming none. Refused at plan naming the pin, both releases, the conflict and
    what would work; apply runs nothing. (The recorded PyPI copy cannot show it: vllm 0.1.x
    publish only sdists whose metadata needs torch and nvcc to build, and require xformers
    releases the copy lacks; a local index can.)"""
    index = setup(server)
    index.add_torch("2.10.0", "cu130", "13.0")
    index.add("pypi", "servelike", "1.0", requires=("torch",))
    index.add("pypi", "servelike", "2.0", requires=("torch==2.10.0",))
    write_answers(server, index, ["servelike"], torch='version = "==2.11.0"')
    plan = server.mlsetup("plan", "--answers", str(server.answers), **env(index))
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert "Traceback" not in plan.stderr and plan.stdout == ""
    message = " ".join(plan.stderr.split())
    assert message == (
        "mlsetup: input error (answers): torch.packages ['servelike'] with torch.version = "
        '"==2.11.0": servelike would lock to 1.0, older than the servelike releases made for '
        "torch 2.11.0+cu130: servelike 2.0, its newest, requires torch==2.10.0, and servelike "
        "1.0 accepts torch 2.11.0+cu130 only by naming no upper bound. servelike 2.0 cannot be "
        "had with the rest: servelike>=2.0 requires torch==2.10.0, the stack holds "
        "torch==2.11.0. What would: servelike==2.0 with that requirement changed to allow "
        "torch==2.10.0, or servelike left out"
    )
    run = server.mlsetup("apply", "--answers", str(server.answers), **env(index))
    assert run.returncode == 2, run.stdout + run.stderr
    assert server.calls() == [] and not server.venv.exists()


def test_a_package_without_a_wheel_for_the_python_names_the_python_that_has_one(
    server: FakeServer, tmp_path: Path
):
    """uv says which Pythons the wheels it found are for (its hint); the refusal names the
    newest of them as the venv.python that would work, not "a Python it has wheels for"."""
    index = setup(server)
    wheel = index.add("pypi", "oldwheels", "1.0")
    for tag in ("cp37-cp37m", "cp39-cp39"):
        shutil.copy(wheel, wheel.with_name(f"oldwheels-1.0-{tag}-manylinux_2_17_x86_64.whl"))
    wheel.unlink()
    index._write_project(wheel.parent)  # its page lists the files as they are now
    write_answers(server, index, ["oldwheels==1.0"])

    plan = server.mlsetup("plan", "--answers", str(server.answers), **env(index))
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert f"has no wheel for Python {PYTHON}" in plan.stderr, plan.stderr
    assert 'allowed: venv.python = "3.9" (the newest its wheels there are for: 3.7, 3.9;' in (
        plan.stderr
    )
    assert "Traceback" not in plan.stderr


def test_a_package_whose_newer_releases_are_source_only_is_not_locked_old_without_a_word(
    server: FakeServer,
):
    """Root resolves with builds off, and uv then sees only the releases with a wheel: deepspeed
    on PyPI (wheels up to 0.3.1.dev5, only sdists after it, up to 0.19.8) locked 0.3.1.dev3 with
    transformers and accelerate, without a word. Here srconly has wheels of 0.1.0 and 0.1.1
    (which the stack refuses) and only sdists of 2.0.0 and 2.1.0: a root venv, and a recorded
    machine resolved by plain root (no SUDO_USER: nobody to build as), are refused naming both
    releases and what works; nothing is built, and the old release pinned is taken."""
    index = setup(server)
    uids = server.base / "uids.log"
    uids.touch()
    uids.chmod(0o666)
    index.add("pypi", "srconly", "0.1.0")
    index.add("pypi", "srconly", "0.1.1", requires=("helper<1",))  # a wheel the stack refuses
    index.add_sdist("pypi", "srconly", "2.0.0", uids)
    index.add_sdist("pypi", "srconly", "2.1.0", uids)

    write_answers(server, index, ["srconly"], venv='user = "root"')
    run = server.mlsetup("plan", "--answers", str(server.answers), **env(index))
    assert run.returncode == 2, run.stdout + run.stderr
    message = " ".join(run.stderr.split())
    assert (
        "torch.packages ['srconly']: srconly would lock to 0.1.0, far below 2.1.0, its newest "
        f"release, which has no wheel on {index.root}/cu130 (then {index.default_url}) for "
        f"Python {PYTHON}, only source." in message
    ), message
    assert "this resolution ran as root" in message
    assert "set venv.user to an ordinary account" in message
    assert 'or "srconly==0.1.0" in torch.packages, to take the old release knowingly' in message
    assert "Traceback" not in run.stderr and run.stdout == ""

    facts = server.base / "facts.json"
    probed = server.mlsetup("probe", "--json")
    assert probed.returncode == 0, probed.stderr
    facts.write_text(probed.stdout)
    write_answers(server, index, ["srconly"])
    recorded = server.mlsetup(
        "plan", "--facts", str(facts), "--answers", str(server.answers), SUDO_USER="",
        **env(index),
    )  # fmt: skip
    assert recorded.returncode == 2, recorded.stdout + recorded.stderr
    assert "srconly would lock to 0.1.0" in recorded.stderr
    assert "run it as an ordinary account of this machine (without sudo" in recorded.stderr

    write_answers(server, index, ["srconly==0.1.0"], venv='user = "root"')
    assert plan_json(server, index)["lock"]["packages"]["srconly"] == "0.1.0"
    assert uids.read_text() == ""  # neither sdist's build ran, as anyone
