#!/usr/bin/env python3
"""Stress the wizard's log pane: 50,000 compiler lines streamed into the Run screen while keys
are pressed; report the worst key-press latency and the peak memory.

    python tests/bench/bench_logpane.py [--lines 50000] [--rate 0] [--keys-every 0.02]

--rate 0 streams at full speed (one thread calling the engine sink in a loop, as the engine's
runner does for each line a compiler prints); --rate N paces it to N lines a second.
Latency is measured from the moment the key event is created (as the terminal driver does) to
the end of the action it is bound to (`[` / `]`: switch the pane to another action and back,
which redraws the pane), so it includes the time the key waited behind output batches.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402
from textual import events  # noqa: E402
from textual._time import get_time  # noqa: E402

from app.tui.app import WizardApp  # noqa: E402
from app.tui.screens.run import RunScreen  # noqa: E402
from app.tui.session import Session  # noqa: E402
from steps.formats import events as ev  # noqa: E402

MIB = 2**20
ACTION = "extensions.flash-attn.build"


def line(i: int) -> str:
    return (
        f"[{i}/50000] /usr/local/cuda-13.0/bin/nvcc -ccbin g++ -I/home/ml/ml-env/lib/python3.12/"
        f"site-packages/torch/include -c csrc/flash_attn/src/flash_fwd_hdim{i % 256}_bf16_sm120.cu"
    )


async def bench(lines: int, rate: float, keys_every: float, quiet: bool = False) -> dict:
    session = Session.load(
        facts=REPO / "assets/machines/rtx-pro-6000-ubuntu2404.json", dry_run=True
    )
    app = WizardApp(session, opening="wizard", plain=False)
    latencies: list[float] = []
    original = RunScreen.action_show

    def timed_show(self: RunScreen, step: int) -> None:
        original(self, step)
        sent = pending.pop(0) if pending else None
        if sent is not None:
            latencies.append(get_time() - sent)

    RunScreen.action_show = timed_show  # type: ignore[method-assign]
    pending: list[float] = []
    proc = psutil.Process()
    peak = {"rss": 0}
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            peak["rss"] = max(peak["rss"], proc.memory_info().rss)
            time.sleep(0.005)

    try:
        async with app.run_test(size=(120, 40)) as pilot:
            app.runs.show_run()
            await pilot.pause()
            app.feed(
                ev.ActionStarted(
                    step="extensions",
                    action="extensions.flash-attn.prerequisites",
                    title="Install build requirements",
                    command="uv pip install",
                    log="",
                )
            )
            app.feed(
                ev.ActionFinished(
                    step="extensions",
                    action="extensions.flash-attn.prerequisites",
                    status="done",
                    exit_code=0,
                    elapsed=1.0,
                )
            )
            app.feed(
                ev.ActionStarted(
                    step="extensions",
                    action=ACTION,
                    title="Compile flash-attn",
                    command="uv pip install flash-attn",
                    log="/var/log/x.log",
                )
            )
            await pilot.pause(0.2)
            rss_before = proc.memory_info().rss
            done = threading.Event()

            def stream() -> None:
                start = time.perf_counter()
                for i in range(lines):
                    app.feed(ev.Output(action=ACTION, line=line(i)))
                    if rate:
                        ahead = (i + 1) / rate - (time.perf_counter() - start)
                        if ahead > 0.001:
                            time.sleep(ahead)
                done.set()

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            t0 = time.perf_counter()
            streamer = threading.Thread(target=stream, daemon=True)
            streamer.start()
            keys = 0
            while not done.is_set() or keys < 20:
                key = "left_square_bracket" if keys % 2 == 0 else "right_square_bracket"
                char = "[" if keys % 2 == 0 else "]"
                pending.append(get_time())
                app.post_message(events.Key(key, char))
                keys += 1
                await asyncio.sleep(keys_every)
            streamed = time.perf_counter() - t0
            # wait for the last keys and the last batch to be handled
            deadline = time.monotonic() + 10
            while (
                pending or app.model.actions[ACTION].total_lines < 1
            ) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            await pilot.pause(0.3)
            screen = app.screen
            assert isinstance(screen, RunScreen)
            pane_lines = len(screen.query_one("LogPane").lines)
            kept = app.model.actions[ACTION]
            sampling.set()
            sampler.join()
            result = {
                "lines": lines,
                "rate": rate or "full speed",
                "stream_seconds": round(streamed, 2),
                "keys": len(latencies),
                "worst_ms": round(1000 * max(latencies), 1),
                "p50_ms": round(1000 * statistics.median(latencies), 1),
                "p95_ms": round(1000 * sorted(latencies)[int(0.95 * (len(latencies) - 1))], 1),
                "lines_received": kept.total_lines,
                "lines_kept_in_memory": len(kept.lines),
                "pane_lines": pane_lines,
                "rss_before_mib": round(rss_before / MIB, 1),
                "rss_peak_mib": round(peak["rss"] / MIB, 1),
                "rss_growth_mib": round((peak["rss"] - rss_before) / MIB, 1),
                "maxrss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            }
    finally:
        RunScreen.action_show = original  # type: ignore[method-assign]
    if not quiet:
        for k, v in result.items():
            print(f"{k:22} {v}")
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lines", type=int, default=50_000)
    p.add_argument("--rate", type=float, default=0.0, help="lines a second; 0 = full speed")
    p.add_argument("--keys-every", type=float, default=0.02, help="seconds between key presses")
    args = p.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores")
    asyncio.run(bench(args.lines, args.rate, args.keys_every))
    return 0


if __name__ == "__main__":
    sys.exit(main())
