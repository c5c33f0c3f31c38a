"""How long mlsetup takes to lock a stack, against `uv pip compile` on the same inputs.

    .venv/bin/python tests/bench/bench_resolve.py [--index URL] [--as-user NAME] [--runs N]
                                                 [--table]

By default the forty everyday packages of issue 20 on the 2x RTX PRO 6000 box (Python 3.12),
against the recorded copy of PyPI (tests/recorded_pypi.py) served on 127.0.0.1; `--index
https://pypi.org/simple` resolves against PyPI itself. One cold run fills uv's cache, then
`--runs` warm ones (target: the forty under 30 s warm). Each run times `mlsetup lock` (its own
resolution plus the probe for the deciding package and the list of source-only pins) and plain
`uv pip compile` with the requirements mlsetup gives uv, and checks both locked the same
versions. `--table` does it once (warm) for every stack of issue 20's list and prints the table
of the closing note: stack, torch and build, deciding package, message, seconds, uv's seconds.

uv may build an sdist's metadata (deepspeed's), so both run as an ordinary account: run the
bench as one, or as root with --as-user NAME (mlsetup gets it as SUDO_USER).
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import re
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.recorded_pypi import FORTY, RecordedIndex  # noqa: E402

MACHINES = REPO / "assets" / "machines"
RTX = MACHINES / "rtx-pro-6000-ubuntu2404.json"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", re.M)


@dataclass(frozen=True)
class Stack:
    name: str
    packages: list[str]
    torch: str = ""  # the answers' [torch] keys beyond packages
    machine: Path = RTX


STACKS = [
    Stack("vllm (latest)", ["vllm"]),
    Stack("vllm==0.11.2", ["vllm==0.11.2"]),
    Stack("vllm==0.9.2", ["vllm==0.9.2"]),
    Stack("sglang", ["sglang"]),
    Stack("transformers+accelerate+deepspeed", ["transformers", "accelerate", "deepspeed"]),
    Stack("  the same, torch.cuda cu130", ["transformers", "accelerate", "deepspeed"],
          'cuda = "cu130"'),
    Stack("vllm==0.33.0+xformers==0.0.30", ["vllm==0.33.0", "xformers==0.0.30"]),
    Stack("vllm==0.33.0+sglang==0.5.23", ["vllm==0.33.0", "sglang==0.5.23"]),
    Stack("torch==2.9.0+torchvision+torchaudio", ["torch==2.9.0", "torchvision", "torchaudio"]),
    Stack("torch.version ==2.3.1", [], 'version = "==2.3.1"'),
    Stack("no-such-package-mlsetup", ["no-such-package-mlsetup"]),
    Stack("transformers==99.0", ["transformers==99.0"]),
    Stack("transformers, GPU-less box", ["transformers"],
          machine=MACHINES / "gpu-less-debian12.json"),
    Stack("the forty", FORTY),
]  # fmt: skip


def pins(text: str) -> dict[str, str]:
    return {m.group(1).lower().replace("_", "-"): m.group(2) for m in PIN.finditer(text)}


class Bench:
    def __init__(self, index: str, account: pwd.struct_passwd | None, work: Path) -> None:
        self.index, self.account, self.work = index, account, work

    def _env(self) -> dict[str, str]:
        env = {**os.environ, "UV_OFFLINE": "0", "UV_DEFAULT_INDEX": self.index}
        if self.account:
            env["SUDO_USER"] = self.account.pw_name
        return env

    def mlsetup(self, stack: Stack) -> tuple[float, int, dict, str]:
        """(seconds, exit code, the lock's summary or {}, the message)."""
        answers = self.work / "answers.toml"
        answers.write_text(
            f"version = 1\n[torch]\npackages = {json.dumps(stack.packages)}\n{stack.torch}\n"
        )
        out = self.work / "stack.lock"
        argv = [sys.executable, "-m", "app.cli", "lock", "--facts", str(stack.machine)]
        argv += ["--answers", str(answers), "-o", str(out), "--json"]
        start = time.perf_counter()
        done = subprocess.run(argv, env=self._env(), cwd=REPO, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        summary = json.loads(done.stdout) if done.returncode == 0 else {}
        message = " ".join(done.stderr.removeprefix("mlsetup: ").split())
        return seconds, done.returncode, summary, message

    def uv(self, requirements: list[str], python: str) -> tuple[float, int, dict[str, str]]:
        """`uv pip compile` as a user runs it on the same requirements, for the same target."""
        from uv import find_uv_bin

        where = Path(tempfile.mkdtemp(dir=self.work))
        (where / "requirements.in").write_text("\n".join(requirements) + "\n")
        if self.account:
            os.chown(where, self.account.pw_uid, self.account.pw_gid)
        argv = [find_uv_bin(), "pip", "compile", "--no-header", "--generate-hashes"]
        argv += ["--no-python-downloads", "--python-version", python]
        argv += ["--python-platform", "x86_64-manylinux_2_35", "--default-index", self.index]
        argv += ["-o", str(where / "out.txt"), str(where / "requirements.in")]
        env = {"PATH": os.environ["PATH"], "UV_NO_CONFIG": "1"}
        if self.account:
            env["HOME"] = self.account.pw_dir
            env["UV_CACHE_DIR"] = f"{self.account.pw_dir}/.cache/uv"  # the one mlsetup uses
        start = time.perf_counter()
        done = subprocess.run(
            argv, env={**os.environ, **env}, cwd=where, capture_output=True, text=True,
            user=self.account.pw_uid if self.account else None,
            group=self.account.pw_gid if self.account else None,
            extra_groups=[] if self.account else None,
        )  # fmt: skip
        seconds = time.perf_counter() - start
        out = where / "out.txt"
        return seconds, done.returncode, pins(out.read_text()) if out.exists() else {}


def requirements_of(stack: Stack) -> list[str]:
    """What mlsetup asks uv for: the packages, then torch (steps.stack.inputs.requirements)."""
    torch = stack.torch.split('"')[1] if stack.torch.startswith("version") else ""
    names = [re.split(r"[<>=!~\[; ]", p, maxsplit=1)[0].lower() for p in stack.packages]
    return [*stack.packages] + ([f"torch{torch}"] if "torch" not in names or torch else [])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", help="an index URL (default: the recorded copy of PyPI)")
    parser.add_argument("--as-user", help="the account uv builds as (when run as root)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--table", action="store_true", help="every stack once, as a table")
    args = parser.parse_args()
    if os.geteuid() == 0 and not args.as_user:
        parser.error("uv may run an sdist's build backend: run as an ordinary account or --as-user")
    account = pwd.getpwnam(args.as_user) if args.as_user else None
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="bench-resolve-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)
        index = args.index or stack.enter_context(RecordedIndex()).url
        bench = Bench(index, account, work)
        where = args.index or f"the recorded copy of PyPI ({index})"
        if args.table:
            return table(bench, where)
        return forty(bench, where, args.runs)


def forty(bench: Bench, where: str, runs: int) -> int:
    stack = STACKS[-1]
    reqs = requirements_of(stack)
    print(f"the forty on {stack.machine.name}, against {where}")
    cold = bench.mlsetup(stack)
    print(f"cold: mlsetup lock {cold[0]:.1f} s (exit {cold[1]})")
    ours, theirs, same = [], [], True
    for _ in range(runs):
        seconds, code, summary, message = bench.mlsetup(stack)
        uv_seconds, uv_code, uv_pins = bench.uv(reqs, summary.get("python", "3.12"))
        ours.append(seconds)
        theirs.append(uv_seconds)
        same = same and code == uv_code == 0 and summary["packages"] == uv_pins
        print(
            f"warm: mlsetup lock {seconds:.1f} s -> torch {summary.get('torch')} "
            f"({summary.get('build')}), vllm {summary.get('packages', {}).get('vllm')}, "
            f"decided by {summary.get('decided_by')}; uv pip compile {uv_seconds:.1f} s -> "
            f"torch {uv_pins.get('torch')}, vllm {uv_pins.get('vllm')}; "
            f"same pins: {summary.get('packages') == uv_pins}" + (f" ({message})" if code else "")
        )
    print(
        f"RESULT forty_lock_median_s={statistics.median(ours):.1f} "
        f"uv_compile_median_s={statistics.median(theirs):.1f} same_answer={same} runs={runs} "
        f"target_s=30"
    )
    return 0 if same else 1


def table(bench: Bench, where: str) -> int:
    print(f"against {where}; each stack resolved once cold, then timed warm\n")
    print("| stack | torch (build) | decided by | message | mlsetup s | uv pip compile |")
    print("|---|---|---|---|---|---|")
    for stack in STACKS:
        bench.mlsetup(stack)  # cold: fills the cache
        seconds, code, summary, message = bench.mlsetup(stack)
        python = (
            summary.get("python")
            or json.loads(stack.machine.read_text())["pythons"][0]["version"].rsplit(".", 1)[0]
        )
        uv_seconds, uv_code, uv_pins = bench.uv(requirements_of(stack), python)
        if code == 0:
            torch = f"{summary['torch']} ({summary['build']})"
            decided = ", ".join(summary["decided_by"]) or "(the newest torch)"
            said = "; ".join(summary["sources"]) and f"source only: {', '.join(summary['sources'])}"
        else:
            torch, decided, said = "refused (exit 2)", "", message[:300]
        if uv_code == 0:
            agree = summary.get("packages") == uv_pins
            theirs = f"{uv_seconds:.1f} s, torch {uv_pins.get('torch')}" + (
                ", same pins" if agree else ", other pins"
            )
        else:
            theirs = f"{uv_seconds:.1f} s, exit {uv_code} (no lock)"
        print(f"| {stack.name} | {torch} | {decided} | {said} | {seconds:.1f} | {theirs} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
