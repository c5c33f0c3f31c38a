"""The log-pane stress test (tests/bench/bench_logpane.py) as a check: 50,000 lines at full
speed while keys are pressed; memory stays bounded and keys are answered (the figures for
docs/benchmarks.md come from running the script itself)."""

from __future__ import annotations

import importlib.util

from tests.common import REPO


async def test_50000_lines_at_full_speed_keep_keys_answered_and_memory_bounded():
    spec = importlib.util.spec_from_file_location(
        "bench_logpane", REPO / "tests" / "bench" / "bench_logpane.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = await bench.bench(50_000, 0, 0.02, quiet=True)
    print(
        f"log pane under 50,000 lines: {result['keys']} keys answered, worst "
        f"{result['worst_ms']:.0f} ms"
    )
    assert result["keys"] >= 20
    # Answered, not frozen: the latency target (100 ms, docs/benchmarks.md) is the benchmark's
    # to measure on a quiet machine; under a loaded CI runner a key took 1,017 ms once.
    assert result["worst_ms"] < 5000
    assert result["lines_kept_in_memory"] <= 2000 and result["pane_lines"] <= 2000
    assert result["rss_growth_mib"] < 100
