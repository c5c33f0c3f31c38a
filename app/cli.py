"""`mlsetup` command line. Exit codes are a contract (see README):
0 done · 1 a step failed · 2 invalid input · 3 needs root · 4 another apply is running ·
10 paused for a reboot.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from steps.answers import Answers, load_answers
from steps.errors import InputError, MlsetupError
from steps.facts import Facts, load_facts
from steps.plan import Plan
from steps.planner import make_plan, observe_and_plan
from steps.rootfs import RootFS

EXIT_INPUT = 2


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--root",
        type=Path,
        default=Path("/"),
        metavar="DIR",
        help="treat DIR as the machine's / (for tests and recorded machines)",
    )
    common.add_argument("--dry-run", action="store_true", help="do everything except run commands")

    p = argparse.ArgumentParser(
        prog="mlsetup",
        parents=[common],
        description="Take an Ubuntu/Debian GPU server to a working ML stack: NVIDIA driver, "
        "CUDA toolkit(s), a PyTorch venv, CUDA extensions such as flash-attn.",
        epilog="exit codes: 0 done, 1 a step failed, 2 invalid input, 3 needs root, "
        "4 another apply is running, 10 paused for a reboot",
    )
    p.add_argument("--answers", type=Path, metavar="FILE", help="pre-fill from an answers file")
    p.add_argument(
        "--facts",
        type=Path,
        metavar="FILE",
        help="a recorded machine (mlsetup probe --json) instead of this one",
    )
    p.add_argument("--version", action="version", version=f"mlsetup {_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    probe = sub.add_parser("probe", parents=[common], help="show what this machine has")
    probe.add_argument("--json", action="store_true", help="print Facts (mlsetup.facts/1)")

    plan = sub.add_parser("plan", parents=[common], help="show what would be done, and why")
    plan.add_argument(
        "--facts",
        type=Path,
        metavar="FILE",
        help="plan for a recorded machine (mlsetup probe --json); touches nothing",
    )
    plan.add_argument("--answers", type=Path, metavar="FILE", help="answers file (TOML)")
    plan.add_argument("--json", action="store_true", help="print the Plan (mlsetup.plan/1)")

    apply = sub.add_parser(
        "apply",
        parents=[common],
        help="run the plan unattended (the answers file is the consent)",
        description="Validate the answers, probe, plan and run every pending action. The work runs "
        "in its own session: a dropped SSH connection does not stop it "
        "(mlsetup attach follows it again).",
    )
    apply.add_argument("--answers", type=Path, metavar="FILE", help="answers file (TOML)")
    apply.add_argument(
        "--resume",
        action="store_true",
        help="continue the interrupted or rebooted run with its saved answers",
    )
    apply.add_argument(
        "--facts",
        type=Path,
        metavar="FILE",
        help="with --dry-run: a recorded machine instead of this one",
    )
    apply.add_argument(
        "--foreground",
        action="store_true",
        help="run the engine in this process (for systemd units and scripts)",
    )
    apply.add_argument("--ticket", help=argparse.SUPPRESS)

    sub.add_parser("attach", parents=[common], help="follow the running (or last) apply")

    answers = sub.add_parser("answers", parents=[common], help="the answers file format")
    answers.add_argument(
        "--schema", action="store_true", required=True, help="print the answers file's JSON Schema"
    )
    return p


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mlsetup")
    except PackageNotFoundError:
        return "(not installed)"


def _plan(args: argparse.Namespace, answers: Answers) -> tuple[Facts, Plan]:
    if args.facts is not None:  # a recorded machine: no venv or wheel cache to look at
        facts = load_facts(args.facts)
        return facts, make_plan(facts, answers)
    return observe_and_plan(RootFS(args.root), answers, resolve=True)


def run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if not args.root.is_dir():
        raise InputError(f"--root {str(args.root)!r}: not a directory")
    from app.console import facts_text, plan_text

    if args.command == "probe":
        from steps.probe import probe

        result = probe(RootFS(args.root))
        sys.stdout.write(
            result.facts.to_json() if args.json else facts_text(result.facts, result.notes)
        )
        return 0
    if args.command == "answers":
        print(json.dumps(Answers.model_json_schema(), indent=2))
        return 0
    if args.command == "apply":
        from app.apply import apply

        return apply(args)
    if args.command == "attach":
        from app.apply import attach

        return attach(RootFS(args.root))
    if args.command is None:
        from app.tui import wizard

        return wizard(args)
    answers = load_answers(args.answers)
    facts, plan = _plan(args, answers)
    if args.command == "plan" and args.json:
        sys.stdout.write(plan.to_json())
    else:
        sys.stdout.write(facts_text(facts, warnings=False) + "\n" + plan_text(plan))
    return 0


def main(argv: list[str] | None = None) -> None:
    try:
        code = run(sys.argv[1:] if argv is None else argv)
    except MlsetupError as exc:
        print(f"mlsetup: {exc}", file=sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    main()
