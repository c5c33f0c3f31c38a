"""The Textual wizard (`mlsetup` with no subcommand). `steps/` never imports this."""

from __future__ import annotations

import argparse


def wizard(args: argparse.Namespace) -> int:
    """Open the wizard for the CLI's top-level flags: --answers, --facts, --dry-run, --root.
    Its first screen is drawn before the machine is probed (app.tui.launch)."""
    from app.tui.app import run_wizard
    from app.tui.launch import Launch

    return run_wizard(Launch(args.root, args.answers, args.facts, args.dry_run))
