"""The stack's smoke test, run with the venv's Python after the lock is installed.

    python smoke_stack.py --torch 2.11.0+cu130 --gpus 1      # what mlsetup runs after the sync
    python smoke_stack.py --cpu                              # gloo on 2 CPU processes
    python smoke_stack.py --recheck --torch 2.11.0+cu130 --cuda 13.0 --lock requirements.txt \
        --imports flash_attn --packages vllm transformers    # ... and after the last extension

torch must import with exactly the locked version and see every GPU; each GPU runs a matmul
(checked against float64 on the CPU); with more than one GPU, one process per GPU all-reduces
over NCCL and must get 1 + 2 + ... + N. Without GPUs the same runs on the CPU: 2 processes,
gloo. `--recheck` (after the extensions, whose own smoke tests ran on the GPUs) runs no kernel:
torch's version and CUDA build, every package of `--lock` at its locked version, and each of
`--imports` importing. `--packages` (the packages asked for, by distribution name): each of their
top-level modules, read from the installed wheel's metadata (top_level.txt, else RECORD), must
import after torch (a wheel built for another CUDA major than torch's fails only there), in the
first run too when no extension follows. The last line is `MLSETUP_SMOKE {json}`, which mlsetup
puts in report.json. Exit 0 only when everything passed. Standard library and torch only: it
runs in any venv.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import re
import socket
import sys
import time

MARK = "MLSETUP_SMOKE "
TIMEOUT_S = 300
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")


def _moved(lock_file: str) -> list[str]:
    """Each package of the lock (a requirements file: `name==version` lines) that the venv holds
    at another version, or not at all."""
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:  # the build requirements bring packaging; without it, exact text
        Version, InvalidVersion = str, ValueError  # type: ignore[misc,assignment]
    out = []
    with open(lock_file, encoding="utf-8") as f:
        pins = [m.groups() for line in f if (m := _PIN.match(line))]
    for name, locked in pins:
        try:
            have = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out.append(f"{name} (locked {locked}) is not installed")
            continue
        try:
            same = Version(have) == Version(locked)
        except InvalidVersion:
            same = have == locked
        if not same:
            out.append(f"{name} is {have}, the lock says {locked}")
    return out


# Top-level directories some wheels ship by mistake: not the package's own modules.
_NOT_MODULES = {"test", "tests", "docs", "doc", "examples", "benchmarks", "bin"}


def _top_level(name: str) -> list[str]:
    """The modules a distribution installs at the top level, from its metadata: top_level.txt
    when the wheel has one, else the first part of each path in RECORD."""
    dist = importlib.metadata.distribution(name)
    listed = dist.read_text("top_level.txt")
    if listed:
        names = [line.strip() for line in listed.splitlines()]
    else:
        names = []
        for file in dist.files or ():
            first = file.parts[0]
            if len(file.parts) > 1 and file.suffix == ".py":
                names.append(first)
            elif len(file.parts) == 1 and first.endswith(".py"):
                names.append(first[: -len(".py")])
    return sorted(
        {n for n in names if n.isidentifier() and not n.startswith("__") and n not in _NOT_MODULES}
    )


def _import_packages(packages: list[str], result: dict) -> list[str]:
    """Import each top-level module of each package; the problems found."""
    problems = []
    result["packages"] = {}
    for name in packages:
        try:
            modules = _top_level(name)
        except importlib.metadata.PackageNotFoundError:
            result["packages"][name] = "not installed"
            problems.append(f"{name} is not installed")
            continue
        for module in modules:
            try:
                importlib.import_module(module)
                result["packages"][f"{name}: {module}"] = "ok"
            except Exception as exc:  # reported: which package, which module, why
                why = f"{type(exc).__name__}: {exc}"
                result["packages"][f"{name}: {module}"] = why
                problems.append(f"import {module} (from {name}): {why}")
    return problems


def _recheck(torch, args: argparse.Namespace, result: dict) -> int:
    """After the extensions: nothing moved, everything imports."""
    problems = []
    if args.cuda is not None and (result["cuda"] or "none") != args.cuda:
        problems.append(f"torch is built for CUDA {result['cuda'] or 'none'}, not {args.cuda}")
    if args.lock:
        problems += _moved(args.lock)
    result["imports"] = {}
    for name in args.imports:
        try:
            importlib.import_module(name)
            result["imports"][name] = "ok"
        except Exception as exc:  # reported: the parent says which import failed and why
            result["imports"][name] = f"{type(exc).__name__}: {exc}"
            problems.append(f"import {name}: {type(exc).__name__}: {exc}")
    problems += _import_packages(args.packages, result)
    what = f"torch {torch.__version__} (CUDA {result['cuda'] or 'none'})"
    if problems:
        result["summary"] = f"after the extensions, {what}: " + "; ".join(problems)
        return _done(result)
    held = ", every locked version held" if args.lock else ""
    imported = f", {', '.join([*args.imports, *args.packages])} import"
    imported = imported if args.imports or args.packages else ""
    result.update(ok=True, summary=f"after the extensions: {what}{held}{imported}")
    return _done(result)


def _matmul(torch, device: str) -> float:
    """Max relative error of a 512x512 matmul on `device` against float64 on the CPU."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(512, 512, generator=gen)
    b = torch.randn(512, 512, generator=gen)
    got = (a.to(device) @ b.to(device)).cpu().double()
    want = a.double() @ b.double()
    return float(((got - want).abs().max() / want.abs().max()).item())


def _worker(rank: int, world: int, port: int, backend: str, queue) -> None:
    import torch
    import torch.distributed as dist

    device = f"cuda:{rank}" if backend == "nccl" else "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
    out = {"rank": rank, "device": device}
    try:
        out["name"] = torch.cuda.get_device_name(rank) if backend == "nccl" else "cpu"
        out["matmul_rel_err"] = _matmul(torch, device)
        if world > 1:
            dist.init_process_group(
                backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
            )
            t = torch.full((4,), float(rank + 1), device=device)
            dist.all_reduce(t)
            out["all_reduce"] = float(t[0].item())
            dist.destroy_process_group()
    except Exception as exc:  # reported, not raised: the parent judges every rank
        out["error"] = f"{type(exc).__name__}: {exc}"
    queue.put(out)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ranks(world: int, backend: str) -> list[dict]:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")  # CUDA is never initialised in a forked child
    queue = ctx.Queue()
    port = _free_port()
    procs = [
        ctx.Process(target=_worker, args=(r, world, port, backend, queue)) for r in range(world)
    ]
    for p in procs:
        p.start()
    results = []
    deadline = time.monotonic() + TIMEOUT_S
    for _ in procs:
        try:
            results.append(queue.get(timeout=max(1.0, deadline - time.monotonic())))
        except Exception:
            break
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    return sorted(results, key=lambda r: r["rank"])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch", default="", help="the locked torch version; '' = any")
    parser.add_argument("--gpus", type=int, default=None, help="GPUs torch must see")
    parser.add_argument("--cpu", action="store_true", help="test on the CPU with gloo")
    parser.add_argument("--recheck", action="store_true", help="versions and imports only")
    parser.add_argument("--cuda", default=None, help="torch.version.cuda must be this ('none')")
    parser.add_argument("--lock", default="", help="a lock whose versions must all hold")
    parser.add_argument("--imports", nargs="*", default=[], help="modules that must import")
    parser.add_argument(
        "--packages", nargs="*", default=[], help="distributions whose modules must import"
    )
    args = parser.parse_args(argv)
    # count GPUs through NVML: the parent never initialises CUDA
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    result: dict = {"expected_torch": args.torch, "ok": False}
    try:
        import torch
    except Exception as exc:
        result["summary"] = f"torch does not import: {type(exc).__name__}: {exc}"
        return _done(result)
    result["torch"] = torch.__version__
    try:
        result["cuda"] = getattr(importlib.import_module("torch.version"), "cuda", None)
    except Exception:
        result["cuda"] = None
    # PyPI's own CUDA wheels carry no local tag in their metadata (the lock pins "2.11.0") while
    # torch.__version__ says "2.11.0+cu130" (seen on the H200 image): the tag counts only where
    # the lock has one
    found = torch.__version__ if "+" in args.torch else torch.__version__.partition("+")[0]
    if args.torch and found != args.torch:
        result["summary"] = f"torch is {torch.__version__}, the lock says {args.torch}"
        return _done(result)
    if args.recheck:
        return _recheck(torch, args, result)
    if getattr(torch, "FAKE", False):  # mlsetup's own test stand-in (tests/pkgindex.py)
        if problems := _import_packages(args.packages, result):
            result["summary"] = f"torch {torch.__version__} imports, but: " + "; ".join(problems)
            return _done(result)
        result.update(
            ok=True,
            fake=True,
            summary=f"torch {torch.__version__} imports (a "
            "test stand-in: no matmul or all-reduce can run)",
        )
        return _done(result)
    gpus = 0 if args.cpu else torch.cuda.device_count()
    result["gpus"] = gpus
    if args.gpus is not None and not args.cpu and gpus != args.gpus:
        result["summary"] = f"torch sees {gpus} GPU(s); the machine has {args.gpus}"
        return _done(result)
    backend, world = ("nccl", gpus) if gpus else ("gloo", 2)
    result["backend"] = backend
    ranks = _run_ranks(world, backend)
    result["ranks"] = ranks
    want = world * (world + 1) / 2
    errors = [r["error"] for r in ranks if "error" in r]
    if len(ranks) != world:
        errors.append(f"{world - len(ranks)} of {world} processes never answered")
    bad = [r for r in ranks if r.get("matmul_rel_err", 1.0) > 1e-2]
    errors += [f"rank {r['rank']}: matmul error {r.get('matmul_rel_err')}" for r in bad]
    if world > 1:
        errors += [
            f"rank {r['rank']}: all-reduce gave {r.get('all_reduce')}, not {want}"
            for r in ranks
            if r.get("all_reduce") != want
        ]
    where = f"{gpus} GPU(s)" if gpus else "the CPU"
    if errors:
        result["summary"] = f"torch {torch.__version__} on {where}: " + "; ".join(errors)
        return _done(result)
    problems = _import_packages(args.packages, result)
    if problems:
        result["summary"] = f"torch {torch.__version__} on {where} works, but: " + "; ".join(
            problems
        )
        return _done(result)
    reduce = f", {backend} all-reduce over {world} processes = {want:g}" if world > 1 else ""
    worst = max(r["matmul_rel_err"] for r in ranks)
    result.update(
        ok=True,
        summary=f"torch {torch.__version__} on {where}: matmul on each "
        f"(max rel. error {worst:.1e}){reduce}",
    )
    return _done(result)


def _done(result: dict) -> int:
    print(result.get("summary", ""), flush=True)
    print(MARK + json.dumps(result, sort_keys=True), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
