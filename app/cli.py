"""`mlsetup` command line. Exit codes are a contract (steps/core/exitcodes.py, the README):
0 done · 1 a step failed · 2 invalid input · 3 needs root · 4 another apply is running ·
10 paused for a reboot.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from steps.core.assetdir import ASSETS_DIR
from steps.core.errors import InputError, MlsetupError, input_kind, refusal
from steps.core.exitcodes import EXIT_BROKEN_PIPE, EXIT_INPUT, EXIT_INTERRUPTED, EXIT_OK, MEANINGS
from steps.core.machineroot import use_root
from steps.core.printable import printable
from steps.core.rootfs import RootFS
from steps.core.settings import settings

# Each command imports what it uses: the wizard's first screen is drawn before the models,
# the tables and the planners are loaded (app.tui.app).
if TYPE_CHECKING:
    from steps.formats.answers import Answers
    from steps.formats.facts import Facts
    from steps.formats.plan import Plan

# The options that mean the same before or after the subcommand, with their defaults. They are
# declared once, with no default (SUPPRESS), on the top-level parser and on every subparser:
# argparse lets a subparser's own default overwrite a value given before the subcommand, which
# turned `mlsetup --dry-run apply` into a real apply. The defaults are filled in after parsing.
GLOBAL_DEFAULTS: dict[str, object] = {
    "root": Path("/"),
    "dry_run": False,
    "answers": None,
    "facts": None,
}
# The global options each command has a use for (--root and --dry-run: every one). One given
# before a command that has no use for it is refused, as it is after it.
TAKES: dict[str | None, tuple[str, ...]] = {
    None: ("answers", "facts"),  # the wizard
    "plan": ("answers", "facts"),
    "lock": ("answers", "facts"),
    "apply": ("answers", "facts"),
    "probe": (),
    "attach": (),
    "answers": (),
}


class _Parser(argparse.ArgumentParser):
    """argparse's, with its usage errors worded as every other exit 2 (errors.refusal)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_INPUT, f"mlsetup: input error (usage): {self.prog}: {message}\n")


def _global_options(takes: tuple[str, ...]) -> _Parser:
    common = _Parser(add_help=False, argument_default=argparse.SUPPRESS)
    common.add_argument(
        "--root",
        type=Path,
        metavar="DIR",
        help="treat DIR as the machine's / (for tests and recorded machines)",
    )
    common.add_argument("--dry-run", action="store_true", help="do everything except run commands")
    if "answers" in takes:
        common.add_argument("--answers", type=Path, metavar="FILE", help="answers file (TOML)")
    if "facts" in takes:
        common.add_argument(
            "--facts",
            type=Path,
            metavar="FILE",
            help="a recorded machine (mlsetup probe --json) instead of this one; touches nothing",
        )
    return common


def _parser() -> argparse.ArgumentParser:
    def options(command: str | None) -> list[_Parser]:
        return [_global_options(TAKES[command])]

    p = _Parser(
        prog="mlsetup",
        parents=options(None),
        description="Take an Ubuntu/Debian GPU server to a working ML stack: NVIDIA driver, "
        "CUDA toolkit(s), a PyTorch venv, CUDA extensions such as flash-attn. "
        "Without a command: the wizard.",
        epilog="exit codes: " + ", ".join(f"{code} {what}" for code, what in MEANINGS.items()),
    )
    p.add_argument("--version", action="version", version=f"mlsetup {_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    probe = sub.add_parser("probe", parents=options("probe"), help="show what this machine has")
    probe.add_argument("--json", action="store_true", help="print Facts (mlsetup.facts/1)")

    plan = sub.add_parser("plan", parents=options("plan"), help="show what would be done, and why")
    plan.add_argument("--json", action="store_true", help="print the Plan (mlsetup.plan/1)")

    lock = sub.add_parser(
        "lock",
        parents=options("lock"),
        help="resolve the stack now and write its hashed lock (for venv.lock)",
        description="Resolve torch, the answers' packages and the extensions' build requirements "
        "for this machine, or with --facts for a recorded one (its Python and platform; metadata "
        "only, nothing is installed), and write the lock that venv.lock installs on a host.",
    )
    lock.add_argument("-o", "--output", type=Path, required=True, metavar="FILE")
    lock.add_argument("--json", action="store_true", help="print the lock's summary as JSON")

    apply = sub.add_parser(
        "apply",
        parents=options("apply"),
        help="run the plan unattended (the answers file is the consent)",
        description="Validate the answers, probe, plan and run every pending action. The work runs "
        "in its own session: a dropped SSH connection does not stop it "
        "(mlsetup attach follows it again).",
    )
    apply.add_argument(
        "--resume",
        action="store_true",
        help="continue the interrupted or rebooted run with its saved answers",
    )
    apply.add_argument(
        "--foreground",
        action="store_true",
        help="run the engine in this process (for systemd units and scripts)",
    )
    apply.add_argument("--ticket", help=argparse.SUPPRESS)

    sub.add_parser("attach", parents=options("attach"), help="follow the running (or last) apply")

    answers = sub.add_parser(
        "answers",
        parents=options("answers"),
        help="the answers file format",
        # the path on a line of its own, as written: argparse's wrapping broke it at the
        # hyphen of site-packages, and a path cut in two cannot be copied
        description="An answers file is TOML (version = 1); unknown keys are errors.\n"
        f"An example with every key:\n  {ASSETS_DIR / 'answers.example.toml'}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    answers.add_argument(
        "--schema", action="store_true", help="print the answers file's JSON Schema"
    )
    return p


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line, with each global option's value whichever side of the command it was."""
    parser = _parser()
    args = parser.parse_args(argv)
    for name, default in GLOBAL_DEFAULTS.items():
        if not hasattr(args, name):
            setattr(args, name, default)
    for name in ("answers", "facts"):
        if getattr(args, name) is not None and name not in TAKES[args.command]:
            parser.error(f"{args.command} does not take --{name}")
    return args


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mlsetup")
    except PackageNotFoundError:
        return "(not installed)"


def _plan(args: argparse.Namespace, answers: Answers) -> tuple[Facts, Plan]:
    from steps.formats.facts import load_facts
    from steps.planning.planner import resolve_and_plan
    from steps.probing.probe import probe

    fs = RootFS(args.root)
    if args.facts is not None:  # a recorded machine: no venv or wheel cache to look at
        facts = load_facts(args.facts)
        return facts, resolve_and_plan(fs, facts, answers, on_machine=False)
    facts = probe(fs).facts
    return facts, resolve_and_plan(fs, facts, answers, on_machine=True)


def _lock(args: argparse.Namespace, answers: Answers) -> int:
    """`mlsetup lock`: resolve now and write the lock file (as venv.lock reads it)."""
    from steps.core.safefs import replace_file
    from steps.formats.facts import load_facts
    from steps.probing.probe import probe
    from steps.stack.obtain import lock_ahead

    fs = RootFS(args.root)
    facts = load_facts(args.facts) if args.facts is not None else probe(fs).facts
    with input_kind("answers"):  # as for plan: a refused resolution is the answers' packages
        lock = lock_ahead(fs, facts, answers, on_machine=args.facts is None)
    try:
        replace_file(args.output, lock.file_text().encode(), 0o644)
    except OSError as exc:
        raise InputError(
            f"-o {str(args.output)!r}: cannot write the lock: {exc.strerror}", kind="usage"
        ) from None
    if args.json:
        print(json.dumps(lock.summary(), indent=2))
    else:
        sources = f"; built from source at apply: {', '.join(lock.sources)}" if lock.sources else ""
        decided = f", decided by {', '.join(lock.decided_by)}" if lock.decided_by else ""
        said = (
            f"{args.output}: torch {lock.torch} ({lock.build}) for Python {lock.python} on "
            f"{lock.platform}{decided}; {len(lock.packages)} packages pinned with hashes, from "
            f"{lock.index}{sources}{lock.held_back_text}"
        )
        print(printable(said))
    return EXIT_OK


def run(argv: list[str]) -> int:
    args = parse(argv)
    settings()  # MLSETUP_* are input too: a bad one is exit 2 before anything else
    if not args.root.is_dir():
        raise InputError(f"--root {str(args.root)!r}: not a directory", kind="usage")
    use_root(args.root)  # the operator's recipes are read from under --root
    if args.command is None:
        from app.tui import wizard

        return wizard(args)
    from app.console import facts_text, plan_text

    if args.command == "probe":
        from steps.probing.probe import probe

        result = probe(RootFS(args.root))
        sys.stdout.write(
            result.facts.to_json() if args.json else facts_text(result.facts, result.notes)
        )
        return EXIT_OK
    from steps.formats.answers import Answers, load_answers

    if args.command == "answers":
        if not args.schema:
            _parser().parse_args(["answers", "--help"])  # prints the help, exits 0
        print(json.dumps(Answers.model_json_schema(), indent=2))
        return EXIT_OK
    if args.command == "apply":
        from app.apply import apply

        return apply(args)
    if args.command == "attach":
        from app.apply import attach

        return attach(RootFS(args.root))
    answers = load_answers(args.answers)
    if args.command == "lock":
        return _lock(args, answers)
    with input_kind("answers"):  # a refusal of the resolution is one of the answers' packages
        facts, plan = _plan(args, answers)
    from steps.core.installation import warning

    untrusted = warning()
    if untrusted is not None:
        print(f"mlsetup: warning: {untrusted}", file=sys.stderr)
    if args.command == "plan" and args.json:
        sys.stdout.write(plan.to_json())
    else:
        sys.stdout.write(facts_text(facts, warnings=False) + "\n" + plan_text(plan))
    return EXIT_OK


def main(argv: list[str] | None = None) -> None:
    code: int | str | None
    try:
        try:
            code = run(sys.argv[1:] if argv is None else argv)
        except SystemExit as exc:  # argparse: --help, --version, a usage error
            code = exc.code
        # What is still buffered is written here, not at the interpreter's exit, where a reader
        # that went away would be reported as "Exception ignored ... BrokenPipeError" (a piped
        # stdout is block-buffered: all of `--help` is written only then).
        sys.stdout.flush()
    except MlsetupError as exc:
        print(f"mlsetup: {printable(refusal(exc))}", file=sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`mlsetup answers --schema | head -1`): nothing left to say to
        # it. Point stdout at /dev/null so that the interpreter's last flush is quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = EXIT_BROKEN_PIPE
    sys.exit(code)


if __name__ == "__main__":
    main()
