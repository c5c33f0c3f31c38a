"""`mlsetup apply` and `mlsetup attach`: start the engine detached, or follow it, and print."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from app.console import ConsolePrinter
from app.follower import RunFollower, unwritable_text
from steps.apply.applyrun import continue_command
from steps.apply.engine import UNWRITABLE, ApplyLock, ApplyRequest, Engine
from steps.apply.service import start_detached, take_handover, take_lock
from steps.core.errors import InputError, MlsetupError, NeedsRootError, input_kind
from steps.core.exitcodes import EXIT_FAILED, EXIT_OK
from steps.core.nextcommands import RESUME_COMMAND, answers_command
from steps.core.paths import Paths
from steps.core.printable import printable
from steps.core.rootfs import RootFS
from steps.core.settings import settings
from steps.decide.choices import check_on_machine, choose
from steps.formats.answers import answers_from_toml, read_answers
from steps.formats.facts import load_facts
from steps.formats.state import CorruptState, load_state
from steps.probing.probe import probe
from steps.run.runner import carried_environment


def _request(args: argparse.Namespace, fs: RootFS) -> ApplyRequest:
    if args.resume:
        if args.answers is not None:
            raise InputError(
                "--resume goes on with the answers the interrupted run saved; to go on with "
                f"the answers in {args.answers} instead, drop --resume: "
                f"{answers_command(str(args.answers.resolve()))} re-plans from them and "
                "goes on from what is done",
                kind="usage",
            )
        try:
            state = load_state(Paths(fs).state)
        except CorruptState as exc:
            raise InputError(f"--resume: {exc}") from exc
        if state is None or state.phase == "done":
            raise InputError(
                "--resume: there is no unfinished run to resume; "
                "start one with: sudo mlsetup apply --answers FILE",
                kind="state",
            )
        # The run goes on in the environment it started in (the invoking user, proxies,
        # mlsetup's settings), whoever resumes it: at boot, the resume unit has none of it.
        # Through the filter that took it at the start: the loader's and Python's variables
        # (LD_PRELOAD, PYTHONPATH) never come back from a file.
        os.environ.update(carried_environment(state.environment))
        text, origin = state.answers_toml, state.answers_path
        _say_if_edited(origin, text)
    elif args.answers is None:
        raise InputError(
            "apply needs --answers FILE (see assets/answers.example.toml), "
            "or --resume to continue an interrupted run",
            kind="usage",
        )
    else:
        text = read_answers(args.answers)
        origin = str(args.answers.resolve())
    if args.facts is not None and not args.dry_run:
        raise InputError("--facts plans for a recorded machine: it needs --dry-run", kind="usage")
    return ApplyRequest(
        answers=answers_from_toml(text, origin or "saved answers"),
        answers_toml=text,
        answers_path=origin,
        dry_run=args.dry_run,
        ticket=args.ticket,
        facts_file=args.facts,
        dpkg_lock_timeout=settings().dpkg_lock_timeout,
        interrupted_wait=settings().interrupted_wait,
    )


def _say_if_edited(origin: str | None, saved: str) -> None:
    """`--resume` after the answers file was edited goes on with the saved answers: say so, and
    which command would use the edited ones."""
    if origin is None:
        return
    try:
        now = read_answers(Path(origin))
    except (InputError, OSError):
        return  # gone, or unreadable: the saved answers are all there is
    if now != saved:
        sys.stderr.write(
            f"mlsetup: note: {origin} has changed since this run started; --resume goes on "
            "with the answers it started with. To go on with the edited ones: "
            f"{answers_command(origin)}\n"
        )


def _check_input(fs: RootFS, request: ApplyRequest) -> None:
    """The facts file and what the answers name on the machine, checked before the engine
    starts: bad input is exit 2 with nothing run and no state written."""
    with input_kind("answers"):  # what is not the facts file is the answers, on this machine
        if request.facts_file is not None:
            facts = load_facts(request.facts_file)
            check_on_machine(choose(facts, request.answers), request.answers, None)
        else:
            facts = probe(fs).facts
            check_on_machine(choose(facts, request.answers), request.answers, fs)


def apply(args: argparse.Namespace) -> int:
    fs = RootFS(args.root)
    # The detached engine: first the environment it was started in (or step aside for the
    # engine of the same start that took it).
    if args.ticket is not None and not take_handover(fs, args.ticket):
        sys.stderr.write(f"mlsetup: start {args.ticket[:8]} is already running elsewhere\n")
        return EXIT_OK
    # ... and the apply lock its starter took for it (None: it takes the lock itself).
    lock_fd = take_lock(fs, args.ticket) if args.ticket is not None else None
    request = _request(args, fs)
    request.lock_fd = lock_fd
    if request.dry_run:
        _check_input(fs, request)
        return Engine(fs, request, ConsolePrinter()).run()
    if os.geteuid() != 0:
        raise NeedsRootError(
            "apply changes the system: run it with sudo, e.g. "
            f"sudo mlsetup apply --answers {args.answers or 'FILE'}"
        )
    if args.ticket is None:  # a detached engine's starter checked them a moment ago
        _check_input(fs, request)
    if args.foreground:
        return Engine(fs, request, ConsolePrinter()).run()  # it takes the lock, or exits 4

    def then() -> str:  # what goes on from what is on disk, if this start gets no further
        return continue_command(Paths(fs), request.answers_toml, request.answers_path)

    engine_args = ["--root", str(args.root)] + (
        ["--resume"] if args.resume else ["--answers", request.answers_path or ""]
    )
    # The lock first, so that of two applies started at once exactly one gets past here; the
    # engine started below takes it over before this returns "started".
    lock = ApplyLock(Paths(fs).lock)
    try:
        lock.acquire()
        if not args.resume:
            load_state(Paths(fs).state)  # unusable: set aside, exit 2, before anything runs
        assert lock.fd is not None
        ticket = start_detached(fs, engine_args, lock.fd)
    except OSError as exc:
        if exc.errno not in UNWRITABLE:
            raise
        full = str(exc.filename or Paths(fs).state_dir)
        raise MlsetupError(unwritable_text(full, exc.errno, then())) from exc
    finally:
        lock.release()
    return _view(fs, ticket, then)


def _view(fs: RootFS, ticket: str | None, then: Callable[[], str] = lambda: RESUME_COMMAND) -> int:
    """Print the run's events until it ends; the run goes on if this viewer is killed. The
    engine it follows holds the apply lock its starter handed it (or, attached, its own).
    `then`: the command that goes on if the run is lost."""

    def leave(signum: int, _frame: object) -> None:
        sys.stderr.write(
            "\nmlsetup: the setup keeps running in the background; "
            "follow it again with: sudo mlsetup attach\n"
        )
        os._exit(128 + signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, leave)
    # a 20 ms look at the stream: a second apply ends within a fifth of a second of its
    # engine's last event, not half of one (the polls cost nothing next to a build)
    follower = RunFollower(fs, ticket, lock_handed=True, then=then, poll=0.02)
    printer = ConsolePrinter()
    for event in follower.events():
        printer(event)
    if follower.finished is not None:
        return follower.finished.code
    sys.stderr.write(f"mlsetup: {printable(follower.lost())}\n")
    return EXIT_FAILED


def attach(fs: RootFS) -> int:
    """Replay the current (or last) run from its start and follow it to the end."""
    paths = Paths(fs)
    if not paths.current_run.exists():
        if not os.access(paths.log_dir.parent, os.R_OK) or os.geteuid() != 0:
            raise NeedsRootError("the setup's logs are root-only: sudo mlsetup attach")
        sys.stderr.write("mlsetup: no apply has run on this machine yet\n")
        return EXIT_FAILED
    return _view(fs, None)
