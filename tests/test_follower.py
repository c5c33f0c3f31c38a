"""app/follower.py: the one loop `mlsetup apply`/`attach` and the wizard follow a detached run
with, against a real event log, the real apply lock and real threads."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from app.follower import RunFollower
from steps.apply.engine import ApplyLock
from steps.core.paths import Paths
from steps.core.rootfs import RootFS
from steps.formats import events as ev


def _run(tmp_path: Path, run_id: str = "20261201-120000-1") -> tuple[RootFS, ev.EventLog]:
    fs = RootFS(tmp_path)
    paths = Paths(fs)
    log = ev.EventLog(paths.run_dir(run_id) / "events.jsonl")
    paths.current_run.unlink(missing_ok=True)
    paths.current_run.symlink_to(paths.run_dir(run_id))
    return fs, log


def _started(ticket: str | None) -> ev.RunStarted:
    return ev.RunStarted(run_id="r", pid=1, dry_run=False, resumed=False, ticket=ticket)


def test_it_follows_its_own_start_to_the_finish_while_the_engine_holds_the_lock(tmp_path):
    fs, log = _run(tmp_path)
    lock = ApplyLock(Paths(fs).lock)
    lock.acquire()
    log(_started("someone-else"))  # an earlier start's events are not this viewer's
    log(ev.Notice(text="not mine"))

    def engine() -> None:
        time.sleep(0.3)  # the viewer is already waiting: the rest arrives live
        log(_started("mine"))
        log(ev.Notice(text="mine"))
        log(ev.Finished(code=0, result="done", summary="ok"))
        log(ev.Notice(text="after the end"))

    writer = threading.Thread(target=engine)
    writer.start()
    follower = RunFollower(fs, "mine", lock_handed=True, poll=0.02)
    seen = list(follower.events())
    writer.join()
    lock.release()
    assert [type(e).__name__ for e in seen] == ["RunStarted", "Notice", "Finished"]
    assert [e.text for e in seen if isinstance(e, ev.Notice)] == ["mine"]
    assert follower.started and follower.finished is not None and follower.finished.code == 0


def test_an_engine_that_never_started_is_told_with_its_own_output(tmp_path):
    fs, _log = _run(tmp_path)
    (Paths(fs).log_dir / "engine.log").write_text("Traceback: boom\nImportError: no pynvml\n")
    # the starter handed the engine the lock and nobody holds it: the engine is gone
    follower = RunFollower(fs, "mine", lock_handed=True, poll=0.02)
    assert list(follower.events()) == []
    assert not follower.started and follower.finished is None
    assert follower.lost() == (
        "the engine did not start; its output:\n  | Traceback: boom\n  | ImportError: no pynvml"
    )


def test_a_killed_engine_is_lost_with_the_resume_command(tmp_path):
    fs, log = _run(tmp_path)
    log(_started(None))
    log(ev.Notice(text="working"))  # then the engine dies: no Finished, no lock holder
    follower = RunFollower(fs, None, poll=0.02)
    assert [type(e).__name__ for e in follower.events()] == ["RunStarted", "Notice"]
    assert follower.lost() == (
        "the engine stopped without finishing (killed?); continue with: sudo mlsetup apply --resume"
    )


def test_the_wizard_stops_following_when_it_is_cancelled(tmp_path):
    fs, _log = _run(tmp_path)
    cancel = threading.Event()
    # the wizard's engine takes the lock itself: before its start only cancel or timeout end it
    follower = RunFollower(fs, "mine", cancelled=cancel.is_set, poll=0.02)
    threading.Timer(0.2, cancel.set).start()
    began = time.monotonic()
    assert list(follower.events()) == []
    assert time.monotonic() - began < 5


def test_a_new_start_passes_over_the_previous_runs_events_unparsed(tmp_path):
    """The run before a second apply can hold a whole build's output (tens of thousands of
    events): a viewer of a new start reads past them without decoding one (a line that would not
    even decode shows it; tests/bench/bench_second_apply.py times it)."""
    fs, log = _run(tmp_path)
    lock = ApplyLock(Paths(fs).lock)
    lock.acquire()
    log(_started("the-build"))
    for i in range(20_000):
        log(ev.Output(action="extensions.flash-attn.build", line=f"[{i}/73] nvcc ..."))
    with (Paths(fs).current_events).open("a") as stream:
        stream.write('{"kind":"output","action":"x","line":\n')  # cut short by a full disk
    log(_started("mine"))
    log(ev.Finished(code=0, result="done", summary="ok"))
    follower = RunFollower(fs, "mine", lock_handed=True, poll=0.02)
    seen = list(follower.events())
    lock.release()
    assert [type(e).__name__ for e in seen] == ["RunStarted", "Finished"]


def test_a_finish_written_just_before_the_engine_lets_go_of_the_lock_is_still_read(tmp_path):
    """The race CI hit under load (2 cores): the follower reads to the end, the engine writes
    its Finished and releases the lock, then the follower finds the lock free. It must read
    what was written before it calls the run lost."""
    fs, log = _run(tmp_path)
    lock = ApplyLock(Paths(fs).lock)
    lock.acquire()
    log(_started("mine"))
    log(ev.Notice(text="working"))
    checks = []

    def cancelled() -> bool:  # the front end's check runs first in every stop(): the window
        if len(checks) == 1:  # the follower is at the end of the stream
            log(ev.Finished(code=0, result="done", summary="ok"))
            lock.release()
        checks.append(True)
        return False

    follower = RunFollower(fs, "mine", lock_handed=True, cancelled=cancelled, poll=0.02)
    seen = [type(e).__name__ for e in follower.events()]
    assert seen == ["RunStarted", "Notice", "Finished"]
    assert follower.finished is not None and follower.finished.code == 0
