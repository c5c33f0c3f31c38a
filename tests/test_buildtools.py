"""mlsetup's build tools (steps/building/buildtools.py, assets/buildtools/): the nvcc that compiles
only for the GPUs present, the ninja that starts the longest objects first, and what root keeps of a
build for the next one. Real processes throughout: the tools run as a build runs them, a real nvcc
compiles where this machine has a CUDA toolkit, the venv's real ninja schedules the jobs."""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from steps.building.buildtools import (
    CXX,
    NINJA_DIR,
    NVCC,
    TOOLS,
    check_root_only,
    keep_ninja_log,
    lessons_log,
    tool_env,
    tools_of,
)
from steps.building.jobserver import Jobserver
from steps.building.wheels import BUILD_ROOT
from steps.core.errors import InputError
from steps.core.rootfs import RootFS
from steps.core.safefs import UnsafeFile
from steps.decide.cxxstd import build_standard, torch_bound
from steps.known.recipes import parse_recipes
from tests.common import FIXTURES, copy_fixture, skip_unless_others_reach
from tests.device.builds_figures import fatbin_archs as fatbin_headers
from tests.harness import USER_UID, FakeServer

NINJA = Path(sys.executable).parent / "ninja"  # the test venv's, as a build venv has one
REAL_CUDA = Path("/usr/local/cuda-13.0")  # the toolkit the fake server's cu130 torch builds with
FOUR = ("75", "80", "90", "120")
# causal-conv1d 1.7.0's setup.py with nvcc 13.0 (its sdist on PyPI)
CAUSAL_CONV1D = [
    arg
    for a in ("75", "80", "87", "90", "100", "120", "103", "110", "121")
    for arg in ("-gencode", f"arch=compute_{a},code=sm_{a}")
]


def gencode(*archs: str) -> list[str]:
    return [arg for a in archs for arg in ("-gencode", f"arch=compute_{a},code=sm_{a}")]


# -- mlsetup's nvcc --------------------------------------------------------------------------


@pytest.fixture
def standin_cuda(tmp_path: Path) -> Path:
    """A CUDA_HOME whose nvcc writes each argument it got on a line of its own to argv.txt."""
    (tmp_path / "bin").mkdir()
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {tmp_path}/argv.txt\n")
    nvcc.chmod(0o755)
    return tmp_path


def wrapped(cuda: Path, archs: str, *argv: str, **env: str) -> tuple[list[str], str]:
    """Run mlsetup's nvcc as ninja runs it; what the real nvcc got, and what the wrapper said."""
    done = subprocess.run(
        [str(NVCC), *argv],
        env={"PATH": "/usr/bin:/bin", "CUDA_HOME": str(cuda), "MLSETUP_CUDA_ARCHS": archs, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return (cuda / "argv.txt").read_text().splitlines(), done.stderr


def test_nvcc_keeps_only_the_targets_of_the_gpus_present_and_says_which_it_dropped(
    standin_cuda: Path,
):
    argv = ["-O3", *CAUSAL_CONV1D, "--threads", "4", "-c", "a b.cu", "-o", "x.o"]
    got, said = wrapped(standin_cuda, "90", *argv)
    assert got == ["-O3", *gencode("90"), "--threads", "4", "-c", "a b.cu", "-o", "x.o"]
    assert said.startswith("mlsetup nvcc: kept 1 of 9 targets")
    assert "arch=compute_75,code=sm_75" in said and "arch=compute_121,code=sm_121" in said
    # torch's own form, --generate-code, -arch, arch-specific and several codes in one target
    argv = [
        "-gencode=arch=compute_80,code=sm_80",
        "--generate-code=arch=compute_90a,code=sm_90a",
        "-arch=sm_120",
        "--gpu-architecture",
        "sm_75",
        "-gencode",
        "arch=compute_80,code=[sm_80,sm_90]",
        "-c",
        "k.cu",
    ]
    got, _ = wrapped(standin_cuda, "90", *argv)
    assert got == [
        "--generate-code=arch=compute_90a,code=sm_90a",
        "-gencode",
        "arch=compute_80,code=[sm_80,sm_90]",
        "-c",
        "k.cu",
    ]
    # an 8.6 GPU runs the sm_80 build (the recipe's arch_map) and its own sm_86
    got, _ = wrapped(standin_cuda, "80 86", *gencode("75", "80", "90"))
    assert got == gencode("80")


def test_nvcc_gives_the_threads_of_the_dropped_targets_to_the_one_left(standin_cuda: Path):
    """causal-conv1d hard-codes --threads 4 for its nine targets; with one left, nvcc >= 13.0
    (MLSETUP_NVCC_SPLIT) splits that target's optimizations over the four threads instead."""
    argv = [*CAUSAL_CONV1D, "--threads", "4", "-c", "k.cu"]
    got, said = wrapped(standin_cuda, "90", *argv, MLSETUP_NVCC_SPLIT="1")
    assert got == [*gencode("90"), "--threads", "4", "-c", "k.cu", "--split-compile=4"]
    assert "--split-compile=4 for the 4 threads of --threads" in said
    got, _ = wrapped(standin_cuda, "90", *argv)  # an older nvcc: not given
    assert "--split-compile=4" not in got
    got, _ = wrapped(standin_cuda, "80 90", *argv, MLSETUP_NVCC_SPLIT="1")  # two left: 2 each
    assert got[-1] == "--split-compile=2"
    split = [*argv, "--split-compile=8"]  # the package's own choice stays
    got, _ = wrapped(standin_cuda, "90", *split, MLSETUP_NVCC_SPLIT="1")
    assert got.count("--split-compile=8") == 1 and "--split-compile=4" not in got


def test_nvcc_leaves_a_command_whole_when_it_cannot_or_must_not_trim(standin_cuda: Path):
    # no target for these GPUs: trimming would compile nothing that runs here
    got, said = wrapped(standin_cuda, "100", *gencode("75", "90"))
    assert got == gencode("75", "90")
    assert "none of the 2 targets is for the architectures here (100)" in said
    # -arch with -code is one target in two halves; -arch=native names no architecture
    argv = ["-arch=compute_80", "-code=sm_80,sm_90", "-arch", "native", "-c", "k.cu"]
    got, said = wrapped(standin_cuda, "90", *argv)
    assert got == argv and said == ""
    # every target is for these GPUs (flash-attn's own arch variable narrowed them): silent
    got, said = wrapped(standin_cuda, "90", "-c", "k.cu", *gencode("90"))
    assert got == ["-c", "k.cu", *gencode("90")] and said == ""


def test_nvcc_rebuilds_8000_arguments_in_linear_time(standin_cuda: Path):
    """Each argument is looked at a bounded number of times: 8,000 arguments cost a tenth of a
    second of CPU, where appending each to "$@" took 19 s. The wrapper runs under a CPU limit,
    so a quadratic one fails instead of hanging the test."""
    odd = [f"-DNAME{n}='a b' \"$HOME\" `x` ${{y}} *" for n in range(7994)]
    argv = [*gencode("90", "100"), "--threads", "4", *odd]
    done = subprocess.run(
        [str(NVCC), *argv],
        env={"PATH": "/usr/bin:/bin", "CUDA_HOME": str(standin_cuda), "MLSETUP_CUDA_ARCHS": "90"},
        capture_output=True,
        text=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CPU, (10, 10)),
    )
    assert done.returncode == 0, f"the wrapper ran out of its 10 s of CPU: {done.returncode}"
    got = (standin_cuda / "argv.txt").read_text().split("\n")[:-1]
    assert got == [*gencode("90"), "--threads", "4", *odd]
    # the message names the first 16 targets dropped, and how many more
    got, said = wrapped(standin_cuda, "90", *gencode("90", *(str(n) for n in range(100, 140))))
    assert got == gencode("90")
    assert said.count("-gencode") == 16 and said.rstrip().endswith("sm_115 and 24 more")


def test_nvcc_caps_an_absurd_thread_count_with_a_word_not_a_shell_error(standin_cuda: Path):
    absurd = "--mlsetup-threads=99999999999999999999"
    argv = [*CAUSAL_CONV1D, "--threads", "4", "-c", "k.cu", absurd]
    got, said = wrapped(standin_cuda, "90", *argv, MLSETUP_NVCC_SPLIT="1")
    cores = len(os.sched_getaffinity(0))
    assert "--mlsetup-threads=99999999999999999999 is more threads than the" in said
    assert got[:-1] == [*gencode("90"), "--threads", "4", "-c", "k.cu"]
    assert got[-1] == f"--split-compile={max(4, cores)}"
    got, said = wrapped(standin_cuda, "90", *CAUSAL_CONV1D, "--threads", "99999999999999999999")
    assert "--threads=99999999999999999999 is more threads than the" in said
    assert "--threads" in got  # nvcc's own option goes on unchanged: nvcc answers for it
    got, said = wrapped(standin_cuda, "90", *CAUSAL_CONV1D, "--mlsetup-threads=lots")
    assert "--mlsetup-threads=lots is no count: ignored" in said
    assert "--mlsetup-threads=lots" not in got


def fatbin_archs(obj: Path) -> list[int]:
    """The architectures of the cubins in an object: cuobjdump --list-elf where the toolkit has
    it, else the fat binary's own entry headers."""
    cuobjdump = REAL_CUDA / "bin" / "cuobjdump"
    if cuobjdump.exists():
        listed = subprocess.run(
            [str(cuobjdump), "--list-elf", str(obj)], capture_output=True, text=True, check=True
        ).stdout
        return sorted(int(w.split("sm_")[1].split(".")[0]) for w in listed.split() if "sm_" in w)
    return fatbin_headers(obj)


@pytest.mark.skipif(not (REAL_CUDA / "bin" / "nvcc").exists(), reason=f"no {REAL_CUDA}/bin/nvcc")
def test_a_real_nvcc_through_the_wrapper_builds_only_the_present_arch(tmp_path: Path):
    source = FIXTURES / "archext" / "csrc" / "kernel.cu"
    env = {"PATH": "/usr/bin:/bin", "CUDA_HOME": str(REAL_CUDA), "MLSETUP_CUDA_ARCHS": "90"}
    for nvcc, name in ((NVCC, "trimmed.o"), (REAL_CUDA / "bin" / "nvcc", "all.o")):
        argv = [str(nvcc), "-c", str(source), "-o", str(tmp_path / name), *gencode(*FOUR)]
        subprocess.run(argv, env=env, check=True, capture_output=True)
    assert fatbin_archs(tmp_path / "trimmed.o") == [90]
    assert fatbin_archs(tmp_path / "all.o") == [75, 80, 90, 120]
    # the threads mlsetup's ninja plans for a long object: the real nvcc 13 gets
    # --split-compile=2 in place of mlsetup's own option, and compiles
    argv = [str(NVCC), "-c", str(source), "-o", str(tmp_path / "split.o"), *gencode("90")]
    done = subprocess.run(
        [*argv, "--mlsetup-threads=2"],
        env={**env, "MLSETUP_NVCC_SPLIT": "1"},
        check=True,
        capture_output=True,
        text=True,
    )
    assert "--split-compile=2 for the 2 threads mlsetup's ninja planned" in done.stderr
    assert fatbin_archs(tmp_path / "split.o") == [90]


# -- mlsetup's ninja ---------------------------------------------------------------------------


def write_manifest(where: Path, seconds: dict[str, float], extra: str = "") -> Path:
    """A build.ninja like torch's (one statement a source, absolute paths, under setuptools'
    build/temp.* directory) whose jobs log when they start and end; a profile with their times."""
    temp = where / "build" / "temp.linux-x86_64-cpython-312"
    (temp / "csrc").mkdir(parents=True)
    lines = [
        "rule job",
        f"  command = echo start $out >> {temp}/jobs.log && sleep 0.5 && "
        f"echo end $out >> {temp}/jobs.log && touch $out",
    ]
    for name in sorted(seconds):  # setuptools sorts the sources: ninja's order is by name
        (temp / "csrc" / f"{name}.cu").write_text("x" * 10)
        lines.append(f"build {temp}/csrc/{name}.o: job {temp}/csrc/{name}.cu")
    (temp / "build.ninja").write_text("\n".join(lines) + "\n" + extra)
    write_profile(where, seconds)
    return temp


def write_profile(where: Path, seconds: dict[str, float]) -> None:
    """where/profile.ninja_log: a recipe's profile giving each object (by source name) its time."""
    rows = [
        f"0\t{int(s * 1000)}\t0\t/elsewhere/temp.x/csrc/{Path(n).stem}.o\tab"
        for n, s in seconds.items()
    ]
    (where / "profile.ninja_log").write_text("# ninja log v7\n" + "\n".join(rows) + "\n")


def run_ninja(temp: Path, env: dict[str, str], shim: bool = True) -> subprocess.CompletedProcess:
    path = f"{NINJA_DIR}:{NINJA.parent}:/usr/bin:/bin" if shim else f"{NINJA.parent}:/usr/bin:/bin"
    return subprocess.run(
        ["ninja", "-v"],
        cwd=temp,
        env={"PATH": path, **env},
        capture_output=True,
        text=True,
        check=True,
    )


def started(temp: Path) -> list[str]:
    lines = (temp / "jobs.log").read_text().split("\n")
    return [Path(line.split()[1]).stem for line in lines if line.startswith("start")]


def two_jobs(temp: Path, env: dict[str, str], shim: bool) -> subprocess.CompletedProcess:
    jobserver = Jobserver(None)
    jobserver.set_jobs(2)
    try:
        return run_ninja(temp, {**jobserver.env(), **env}, shim=shim)
    finally:
        jobserver.close()


def in_pairs(names: list[str]) -> list[set[str]]:
    return [set(names[i : i + 2]) for i in range(0, len(names), 2)]


def test_ninja_starts_the_longest_objects_first_under_the_jobserver(tmp_path: Path):
    """Real ninja 1.13 on a jobserver FIFO with two tokens, as under the governor: with
    mlsetup's ninja first on PATH the heaviest objects start first and no more than two jobs run
    at once; without it ninja starts them in the order of build.ninja (by name)."""
    seconds = {"a_light": 40, "b_heavy": 389, "c_medium": 200, "d_heavier": 370, "e_tiny": 5}
    profile = {"MLSETUP_OBJECT_PROFILE": str(tmp_path / "profile.ninja_log")}
    temp = write_manifest(tmp_path, seconds)
    done = two_jobs(temp, profile, shim=True)
    # two at a time: which of a pair logs its start first is a race
    assert in_pairs(started(temp)) == in_pairs(
        ["b_heavy", "d_heavier", "c_medium", "a_light", "e_tiny"]
    )
    assert "5 objects ordered longest first (expected times: 5 from the recipe's profile)" in (
        done.stderr
    )
    running = peak = 0
    for line in (temp / "jobs.log").read_text().splitlines():
        running += 1 if line.startswith("start") else -1
        peak = max(peak, running)
    assert peak == 2  # the tokens, not ninja's default of #CPUs + 2

    shutil.rmtree(tmp_path / "build")
    temp = write_manifest(tmp_path, seconds)
    two_jobs(temp, profile, shim=False)
    assert in_pairs(started(temp)) == in_pairs(sorted(seconds))


def test_ninja_balances_the_longest_first_over_the_governors_job_slots(tmp_path: Path):
    """Two slots, objects of 3, 3, 2, 2 and 2 s: longest first ends at 7 s (3+2+2 on one slot),
    the plan at 6 (3+3 and 2+2+2), starting the second 3 s object third."""
    temp = write_manifest(tmp_path, {"a": 3, "b": 3, "c": 2, "d": 2, "e": 2})
    env = {"MLSETUP_OBJECT_PROFILE": str(tmp_path / "profile.ninja_log"), "MLSETUP_JOB_SLOTS": "2"}
    said = two_jobs(temp, env, shim=True).stderr
    assert build_order(temp) == ["a", "c", "d", "b", "e"]
    assert "longest first, balanced over 2 job slots" in said

    # The governor lets the second job go 2 s after the first (MLSETUP_JOB_STAGGER_S): the
    # second slot is planned from 2 s (3+2+2 on the first, 2 late + 3+2 on the second, both
    # ending at 7), so the second 3 s object is the second to start, not the fourth.
    shutil.rmtree(tmp_path / "build")
    temp = write_manifest(tmp_path, {"a": 3, "b": 3, "c": 2, "d": 2, "e": 2})
    two_jobs(temp, {**env, "MLSETUP_JOB_STAGGER_S": "2"}, shim=True)
    assert build_order(temp) == ["a", "b", "c", "d", "e"]


def build_order(temp: Path) -> list[str]:
    text = (temp / "build.ninja").read_text()
    return [
        Path(line.split(":")[0].split()[-1]).stem
        for line in text.splitlines()
        if line.startswith("build ")
    ]


def test_ninja_takes_this_trees_log_then_the_kept_one_then_the_profile_then_source_size(
    tmp_path: Path,
):
    seconds = {"a": 10, "b": 20, "c": 30, "d": 40}
    temp = write_manifest(tmp_path, seconds)
    (temp / "csrc" / "c.cu").write_text("x" * 10_000)  # the largest source
    profile = {"MLSETUP_OBJECT_PROFILE": str(tmp_path / "profile.ninja_log")}
    kept = tmp_path / "kept.ninja_log"  # root's copy of an earlier build: a 300 s
    kept.write_text("# ninja log v7\n0\t300000\t0\t/old/build/temp.y/csrc/a.o\tff\n")
    # this tree's own log: b took 500 s (the last entry of an output wins, as in ninja)
    own = f"# ninja log v7\n0\t1000\t0\t{temp}/csrc/b.o\tff\n0\t500000\t0\t{temp}/csrc/b.o\tff\n"
    (temp / ".ninja_log").write_text(own)
    said = run_ninja(temp, {**profile, "MLSETUP_OBJECT_LESSONS": str(kept)}).stderr
    assert build_order(temp) == ["b", "a", "d", "c"]
    assert "1 from this tree's earlier build, 1 from an earlier build kept by mlsetup" in said

    # nothing timed: the sources' sizes alone
    shutil.rmtree(tmp_path / "build")
    temp = write_manifest(tmp_path, seconds)
    (temp / "csrc" / "c.cu").write_text("x" * 10_000)
    said = run_ninja(temp, {}).stderr
    assert build_order(temp)[0] == "c" and "4 by source size" in said


def test_ninja_moves_only_independent_build_statements_and_nothing_else(tmp_path: Path):
    seconds = {"a": 1, "b": 2}
    link = "\nbuild lib.so: job {t}/csrc/a.o {t}/csrc/b.o\n  pool = console\ndefault lib.so\n"
    temp = write_manifest(tmp_path, seconds)
    (temp / "build.ninja").write_text((temp / "build.ninja").read_text() + link.format(t=temp))
    before = (temp / "build.ninja").read_text()
    run_ninja(temp, {"MLSETUP_OBJECT_PROFILE": str(tmp_path / "profile.ninja_log")})
    after = (temp / "build.ninja").read_text()
    assert build_order(temp) == ["b", "a", "lib"]  # the link keeps its place, with its binding
    assert sorted(before.splitlines()) == sorted(after.splitlines())
    assert after.endswith(link.format(t=temp))


def test_ninja_that_builds_nothing_or_cannot_read_the_manifest_just_runs_ninja(tmp_path: Path):
    env = {"PATH": f"{NINJA_DIR}:{NINJA.parent}:/usr/bin:/bin"}
    version = subprocess.run(["ninja", "--version"], env=env, capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith("1.") and version.stderr == ""
    (tmp_path / "build.ninja").write_bytes(b"build \xff\xfe: $\n")  # ninja's own error, not ours
    broken = subprocess.run(["ninja"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert broken.returncode != 0 and "ninja: error" in broken.stdout + broken.stderr
    assert "Traceback" not in broken.stderr


def torch_like_manifest(where: Path, seconds: dict[str, float], post: str) -> Path:
    """A build.ninja as torch 2.11's cpp_extension writes it with PYTORCH_NVCC set: `nvcc =`
    mlsetup's nvcc, CUDA objects by rule cuda_compile and C++ by rule compile; a profile with the
    objects' times. The real nvcc of CUDA_HOME (see `recording_cuda`) records each object's argv."""
    temp = where / "build" / "temp.linux-x86_64-cpython-312"
    (temp / "csrc").mkdir(parents=True)
    lines = [
        f"nvcc = {NVCC}",
        f"cuda_post_cflags = {post}",
        "rule compile",
        "  command = touch $out",
        "rule cuda_compile",
        "  command = $nvcc -c $in -o $out $cuda_post_cflags",
    ]
    for name in sorted(seconds):
        source = temp / "csrc" / (name if name.endswith(".cpp") else f"{name}.cu")
        source.write_text("x")
        rule = "compile" if name.endswith(".cpp") else "cuda_compile"
        lines.append(f"build {temp}/csrc/{Path(name).stem}.o: {rule} {source}")
    (temp / "build.ninja").write_text("\n".join(lines) + "\n")
    write_profile(where, seconds)
    return temp


@pytest.fixture
def recording_cuda(tmp_path: Path) -> Path:
    """A CUDA_HOME whose nvcc writes the arguments it got beside the object, one a line."""
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text(
        '#!/bin/sh\nout="" prev=""\nfor a; do [ "$prev" = -o ] && out=$a; prev=$a; done\n'
        'printf \'%s\\n\' "$@" > "$out.argv"\ntouch "$out"\n'
    )
    nvcc.chmod(0o755)
    return tmp_path / "cuda"


def test_an_object_that_outlasts_the_others_share_splits_over_the_idle_cores(
    tmp_path: Path, recording_cuda: Path
):
    """causal-conv1d 1.7.0 on the H200 (its 4 objects' times, 16 job slots): causal_conv1d_bwd.o
    is 181 s of 246, so it gets round(16 x 181 / 246) = 12 threads through a binding mlsetup's
    ninja writes and real ninja expands; the short CUDA objects keep the threads of --threads (4),
    the C++ object nothing; --mlsetup-threads never reaches the real nvcc."""
    seconds = {
        "causal_conv1d_bwd": 181,
        "causal_conv1d.cpp": 40,
        "causal_conv1d_fwd": 15,
        "causal_conv1d_update": 10,
    }
    post = " ".join([*CAUSAL_CONV1D, "--threads", "4"])
    env = {
        "MLSETUP_OBJECT_PROFILE": str(tmp_path / "profile.ninja_log"),
        "MLSETUP_JOB_SLOTS": "16",
        "MLSETUP_NVCC_SPLIT": "1",
        "MLSETUP_CUDA_ARCHS": "90",
        "CUDA_HOME": str(recording_cuda),
    }
    temp = torch_like_manifest(tmp_path, seconds, post)
    done = run_ninja(temp, env)
    said = done.stdout + done.stderr  # ninja prints each command's own output on its stdout

    def argv(name: str) -> list[str]:
        return (temp / "csrc" / f"{name}.o.argv").read_text().splitlines()

    assert "split over the idle cores: causal_conv1d_bwd.o: 12 threads" in said
    assert argv("causal_conv1d_bwd")[-1] == "--split-compile=12"
    assert "12 threads mlsetup's ninja planned for this object" in said
    for short in ("causal_conv1d_fwd", "causal_conv1d_update"):
        assert argv(short)[-1] == "--split-compile=4"
    for name in ("causal_conv1d_bwd", "causal_conv1d_fwd"):
        assert not any(a.startswith("--mlsetup-threads") for a in argv(name))
        assert gencode("90") == [a for a in argv(name) if "arch=" in a or a == "-gencode"]

    # An nvcc older than 13.0 (no MLSETUP_NVCC_SPLIT), or flags that choose --split-compile
    # themselves: no threads are planned, the statements stay as torch wrote them.
    for variant, flags in (({"MLSETUP_NVCC_SPLIT": ""}, post), ({}, post + " --split-compile=2")):
        shutil.rmtree(tmp_path / "build")
        temp = torch_like_manifest(tmp_path, seconds, flags)
        said = run_ninja(temp, {**env, **variant}).stderr
        assert "--mlsetup-threads" not in (temp / "build.ninja").read_text()
        assert "split over the idle cores" not in said


# -- what root keeps, what root hands out -----------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="makes files of another account: needs root")
def test_the_build_trees_ninja_log_is_kept_beside_it_for_the_same_accounts_next_build(
    tmp_path: Path,
):
    fs = RootFS(tmp_path)
    build_root = fs.path(BUILD_ROOT)
    temp = build_root / "ext-1.0" / "src" / "build" / "temp.linux-x86_64-cpython-312"
    temp.mkdir(parents=True)
    log = "# ninja log v7\n0\t5\t0\t/x/a.o\tff\n0\t9\t0\t/x/b.o\tff\n"
    (temp / ".ninja_log").write_text(log)
    for path in [build_root / "ext-1.0", *(build_root / "ext-1.0").rglob("*")]:
        os.chown(path, USER_UID, USER_UID, follow_symlinks=False)
    said = keep_ninja_log(fs, "ext-1.0", USER_UID)
    kept = build_root / "ext-1.0.by-1000.ninja_log"
    assert "2 objects" in said and kept.read_text() == log
    # that account's alone: its next build's ninja reads it, root's build never does
    assert kept.stat().st_uid == USER_UID and stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert lessons_log("ext", "1.0", USER_UID) == f"{BUILD_ROOT}/{kept.name}"
    assert lessons_log("ext", "1.0", 0) == f"{BUILD_ROOT}/ext-1.0.by-0.ninja_log"
    # a build killed early knows fewer objects: the fuller record stays
    (temp / ".ninja_log").write_text("# ninja log v7\n0\t5\t0\t/x/a.o\tff\n")
    assert "knows more objects" in keep_ninja_log(fs, "ext-1.0", USER_UID)
    assert kept.read_text() == log
    # a link the compiling account planted is not followed
    (temp / ".ninja_log").unlink()
    (temp / ".ninja_log").symlink_to("/etc/shadow")
    os.chown(temp / ".ninja_log", USER_UID, USER_UID, follow_symlinks=False)
    assert "no .ninja_log kept" in keep_ninja_log(fs, "ext-1.0", USER_UID)
    assert kept.read_text() == log


@pytest.mark.skipif(os.geteuid() != 0, reason="makes files of another account: needs root")
def test_tools_another_account_could_change_are_refused(tmp_path: Path):
    for tool in (NVCC, NINJA_DIR / "ninja", TOOLS / "order_ninja.py"):
        check_root_only(tool)  # this checkout, root's
    shared = tmp_path / "shared"
    shared.mkdir()
    tool = shared / "nvcc"
    tool.write_text("#!/bin/sh\n")
    os.chmod(tmp_path, 0o755)
    os.chmod(shared, 0o777)
    with pytest.raises(UnsafeFile, match="other than root"):
        check_root_only(tool)
    os.chmod(shared, 0o1777)  # sticky, as /tmp: nobody else can replace root's file
    check_root_only(tool)
    os.chown(tool, USER_UID, USER_UID)
    with pytest.raises(UnsafeFile, match="owner uid 1000"):
        check_root_only(tool)


# -- through the engine ------------------------------------------------------------------------


def install_archext(server: FakeServer, extra: str = "") -> Path:
    """tests/fixtures/archext, owned by the venv's account, with its recipe (plus `extra`)."""
    skip_unless_others_reach(TOOLS / "nvcc", "the build runs mlsetup's nvcc as uid 1000")
    src = server.base / "src" / "archext"
    copy_fixture("archext", src, USER_UID)
    recipe = (FIXTURES / "archext.toml").read_text().replace("@SOURCE@", str(src)) + extra
    (server.recipes / "archext.toml").write_text(recipe)
    server.machine.driver_loaded("580.105.08")
    server.write_answers(extension="archext")
    return src / "build-objects"


def compiled_archs(objects: Path) -> list[int]:
    """What the fixture's object was built for: its cubins, or where this machine has no
    toolkit, the targets its stand-in nvcc was given."""
    argv = objects / "kernel.o.argv"
    if argv.exists():
        words = argv.read_text().split()
        return sorted(int(w.rsplit("sm_", 1)[1]) for w in words if w.startswith("arch="))
    return fatbin_archs(objects / "kernel.o")


def test_an_extension_with_hard_coded_targets_builds_for_the_gpus_present(server: FakeServer):
    objects = install_archext(server)
    run = server.mlsetup("apply", "--answers", str(server.answers))
    assert run.returncode == 0, run.stdout + run.stderr
    assert compiled_archs(objects) == [90]  # the fake server's GPU is an H200
    build_log = next((server.root / "var/log/mlsetup").rglob("extensions.archext.build.log"))
    assert "mlsetup nvcc: kept 1 of 4 targets" in build_log.read_text()
    cached = [p.name for p in (server.root / "var/cache/mlsetup/wheels").iterdir()]
    assert len(cached) == 1 and "_archs-90_by-" in cached[0]


def test_a_recipe_that_opts_out_keeps_its_own_targets(server: FakeServer):
    objects = install_archext(server, extra="arch_trim = false\n")
    run = server.mlsetup("apply", "--answers", str(server.answers))
    assert run.returncode == 0, run.stdout + run.stderr
    assert compiled_archs(objects) == [75, 80, 90, 120]
    build_log = next((server.root / "var/log/mlsetup").rglob("extensions.archext.build.log"))
    assert "mlsetup nvcc" not in build_log.read_text()
    cached = [p.name for p in (server.root / "var/cache/mlsetup/wheels").iterdir()]
    assert len(cached) == 1 and "_archs-native_by-" in cached[0]


def test_recipes_name_the_key_of_a_bad_tool_setting():
    base = (FIXTURES / "archext.toml").read_text().replace("@SOURCE@", "/src")
    for text, key in (
        (base + 'arch_trim = "no"\n', "archext.arch_trim"),
        (base + 'object_profile = "../../etc/passwd"\n', "archext.object_profile"),
        (
            base.replace('arch_variable = ""', 'arch_variable = "MLSETUP_X"'),
            "archext.arch_variable",
        ),
    ):
        with pytest.raises(InputError, match=re.escape(key)):
            parse_recipes(text.encode(), "archext.toml")
    good = parse_recipes(
        (base + 'object_profile = "flash-attn-2.8.3-sm90.ninja_log"\n').encode(), "x.toml"
    )
    assert good["archext"].object_profile == "flash-attn-2.8.3-sm90.ninja_log"
    assert good["archext"].arch_trim and good["archext"].longest_first


# -- a recipe's compile_as_cxx: setup.py's -std replaced ----------------------------------------


@pytest.fixture
def cxx20_headers(tmp_path: Path) -> Path:
    """An include directory with the real first lines of torch 2.15.0's ATen.h (read from the
    wheel on PyPI: tests/fixtures/pypi/cxx/torch-2.15.0.json) and a file that includes it."""
    lines = json.loads((FIXTURES / "pypi/cxx/torch-2.15.0.json").read_text())["lines"]
    aten = tmp_path / "include/ATen/ATen.h"
    aten.parent.mkdir(parents=True)
    # its lines up to the #endif of the standard's check, and the #endif of the first line's #if
    # (the real file goes on to include the rest of ATen)
    head = [lines[str(n)] for n in sorted(map(int, lines))]
    head = head[: head.index("#endif") + 1]
    aten.write_text("\n".join(head) + "\n#endif\n")
    for name in ("ext.cpp", "ext.cu"):
        (tmp_path / name).write_text("#include <ATen/ATen.h>\nint ext() { return 20; }\n")
    return tmp_path


def _compile(tool: Path, headers: Path, source: str, **env: str) -> subprocess.CompletedProcess:
    # flash-attn 2.8.3's flags (its setup.py, lines 201 and 220)
    argv = [str(tool), "-O3", "-std=c++17", "-I", str(headers / "include"), "-c"]
    argv += [str(headers / source), "-o", str(headers / f"{source}.o")]
    run_env = {"PATH": "/usr/bin:/bin", "CUDA_HOME": str(REAL_CUDA), **env}
    return subprocess.run(argv, env=run_env, capture_output=True, text=True)


def test_mlsetups_cxx_compiles_a_cxx17_build_as_the_standard_the_recipe_opts_into(
    cxx20_headers: Path,
):
    """Without the opt-in the real compiler stops at ATen.h's #error; with compile_as_cxx = 20
    (MLSETUP_CXX_STD) mlsetup's c++ passes -std=c++20 instead and the file compiles."""
    refused = _compile(CXX, cxx20_headers, "ext.cpp", MLSETUP_CXX_STD="17")
    assert refused.returncode != 0
    assert "#error C++20 or later compatible compiler is required to use ATen." in refused.stderr
    built = _compile(CXX, cxx20_headers, "ext.cpp", MLSETUP_CXX_STD="20")
    assert built.returncode == 0, built.stderr
    assert (cxx20_headers / "ext.cpp.o").stat().st_size > 0


def test_mlsetups_nvcc_replaces_the_standard_only_when_the_recipe_opts_in(standin_cuda: Path):
    argv = ["-O3", "-std=c++17", "--use_fast_math", *gencode("90")]
    got, _ = wrapped(standin_cuda, "90", *argv)
    assert got == argv  # not by default
    got, _ = wrapped(standin_cuda, "90", *argv, MLSETUP_CXX_STD="20")
    assert got == ["-O3", "-std=c++20", "--use_fast_math", *gencode("90")]


@pytest.mark.skipif(not (REAL_CUDA / "bin" / "nvcc").exists(), reason=f"no {REAL_CUDA}/bin/nvcc")
def test_a_real_nvcc_through_the_wrapper_compiles_a_cxx17_build_as_cxx20(cxx20_headers: Path):
    refused = _compile(NVCC, cxx20_headers, "ext.cu")
    assert "#error C++20 or later compatible compiler is required to use ATen." in refused.stderr
    built = _compile(NVCC, cxx20_headers, "ext.cu", MLSETUP_CXX_STD="20")
    assert built.returncode == 0, built.stderr


def test_compile_as_cxx_opts_into_mlsetups_compilers_and_lifts_the_bound():
    base = (FIXTURES / "archext.toml").read_text().replace("@SOURCE@", "/src")
    plain = parse_recipes((base + "cxx_standard = 17\n").encode(), "x.toml")["archext"]
    opted = parse_recipes((base + "cxx_standard = 17\ncompile_as_cxx = 20\n").encode(), "x.toml")[
        "archext"
    ]
    env = tool_env(plain, "archext", "0.1.0", ["9.0"], "13.0")
    assert "CXX" not in env and "MLSETUP_CXX_STD" not in env  # never by default
    env = tool_env(opted, "archext", "0.1.0", ["9.0"], "13.0")
    assert env["CXX"] == str(CXX) and env["MLSETUP_CXX_STD"] == "20"
    assert env["PYTORCH_NVCC"] == str(NVCC) and CXX in tools_of(opted)
    needs = {"2.13": 17, "2.14": 20}
    bound = torch_bound("archext", "0.1.0", build_standard(plain), needs)
    assert bound is not None and bound.spec == "torch<2.14"
    assert torch_bound("archext", "0.1.0", build_standard(opted), needs) is None
    with pytest.raises(InputError, match=re.escape("archext.compile_as_cxx")):
        parse_recipes((base + 'compile_as_cxx = "20"\n').encode(), "x.toml")
