"""What a command writes reaches the event stream and the terminal bounded and inert: a line
of any length is cut in linear time and bounded memory, control characters are escaped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.common import REPO

LINE_MIB = 128
# The engine's reader run in a process of its own: the CPU it may spend before the kernel ends
# it (SIGXCPU), so a reader that is quadratic fails the test instead of hanging it.
CPU_LIMIT_S = 30
READER = """
import json, resource, sys
from pathlib import Path
from steps.events import EventLog
from steps.plan import Action
from steps.rootfs import RootFS
from steps.runner import Runner

resource.setrlimit(resource.RLIMIT_CPU, ({limit}, {limit}))
base = Path(sys.argv[1])
events = EventLog(base / "events.jsonl")
runner = Runner(RootFS(Path("/")), events, environ={{"PATH": "/usr/bin:/bin"}})
writer = "import sys\\nchunk = b'x' * (1 << 20)\\nfor _ in range({mib}):\\n    sys.stdout.buffer.write(chunk)\\n"
action = Action(id="build.line", kind="build", title="one line", argv=[sys.executable, "-c", writer])
result = runner.run(action, base / "build.log")
events.close()
print(json.dumps({{"exit": result.exit_code, "tail": [len(t) for t in result.tail], "last": result.tail[-1][-40:]}}))
"""


def test_a_line_of_128_mib_without_a_newline_is_cut_in_bounded_cpu_and_memory(
    tmp_path: Path,
):
    reader = subprocess.Popen(
        [sys.executable, "-c", READER.format(limit=CPU_LIMIT_S, mib=LINE_MIB), str(tmp_path)],
        stdout=subprocess.PIPE,
        cwd=REPO,
    )
    assert reader.stdout is not None
    out = reader.stdout.read()
    _, status, usage = os.wait4(reader.pid, 0)
    cpu_s = usage.ru_utime + usage.ru_stime
    assert os.waitstatus_to_exitcode(status) == 0, (
        f"the reader did not finish within {CPU_LIMIT_S}s of CPU (a quadratic reader)"
    )
    result = json.loads(out)
    assert result["exit"] == 0
    # the line is kept to 64 KiB and says how much was cut; the log has all of it
    assert result["tail"] == [64 * 1024 + len(f" ... [{LINE_MIB * 2**20 - 64 * 1024} bytes cut]")]
    assert result["last"].endswith(f"... [{LINE_MIB * 2**20 - 64 * 1024} bytes cut]")
    assert (tmp_path / "build.log").stat().st_size > LINE_MIB * 2**20
    longest = max(len(line) for line in (tmp_path / "events.jsonl").read_bytes().splitlines())
    assert longest < 70 * 1024
    # linear: reading 128 MiB is a second or two of CPU, not the minutes a quadratic join takes
    assert cpu_s < 15, f"{cpu_s:.1f}s of CPU for one {LINE_MIB} MiB line"
    # bounded: the reader never holds the line (ru_maxrss: KiB on Linux)
    assert usage.ru_maxrss < 128 * 1024, f"peak RSS {usage.ru_maxrss // 1024} MiB"
