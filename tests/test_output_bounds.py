"""What a command writes reaches the event stream and the terminal bounded and inert: a line
of any length is cut in linear time and bounded memory, control characters are escaped."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from steps.events import EventLog
from steps.plan import Action
from steps.rootfs import RootFS
from steps.runner import Runner
from tests.common import REPO

LINE_MIB = 128
# The engine's reader runs in a process of its own with this much CPU before the kernel ends it,
# so that a reader that is quadratic fails the test instead of hanging it.
CPU_LIMIT_S = 30
WRITER = "import sys\nfor _ in range({mib}):\n    sys.stdout.buffer.write(b'x' * (1 << 20))\n"


def read_one_long_line(base: str) -> None:
    """The engine's runner on a command that writes LINE_MIB MiB and no newline (the child)."""
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_LIMIT_S, CPU_LIMIT_S))
    events = EventLog(Path(base) / "events.jsonl")
    runner = Runner(RootFS(Path("/")), events, environ={"PATH": "/usr/bin:/bin"})
    argv = [sys.executable, "-c", WRITER.format(mib=LINE_MIB)]
    result = runner.run(
        Action(id="build.x", kind="build", title="a line", argv=argv), Path(base) / "log"
    )
    events.close()
    print(json.dumps({"exit": result.exit_code, "tail": result.tail}))


def test_a_line_of_128_mib_without_a_newline_is_cut_in_bounded_cpu_and_memory(
    tmp_path: Path,
):
    child = f"from tests.test_output_bounds import read_one_long_line as r; r({str(tmp_path)!r})"
    reader = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, cwd=REPO)
    assert reader.stdout is not None
    out = reader.stdout.read()
    _, status, usage = os.wait4(reader.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, (
        f"the reader did not finish within {CPU_LIMIT_S}s of CPU (a quadratic reader)"
    )
    result = json.loads(out)
    cut = LINE_MIB * 2**20 - 64 * 1024
    assert result["exit"] == 0 and len(result["tail"]) == 1
    # the line is kept to 64 KiB and says how much was cut; the command's log has all of it
    assert result["tail"][0] == "x" * 64 * 1024 + f" ... [{cut} bytes cut]"
    assert (tmp_path / "log").stat().st_size > LINE_MIB * 2**20
    longest = max(len(line) for line in (tmp_path / "events.jsonl").read_bytes().splitlines())
    assert longest < 70 * 1024
    # linear: a second or two of CPU (the writer's included), not the minutes of a quadratic join
    cpu_s = usage.ru_utime + usage.ru_stime
    assert cpu_s < 15, f"{cpu_s:.1f}s of CPU for one {LINE_MIB} MiB line"
    # bounded: the reader never holds the line (ru_maxrss: KiB on Linux)
    assert usage.ru_maxrss < 128 * 1024, f"peak RSS {usage.ru_maxrss // 1024} MiB"
