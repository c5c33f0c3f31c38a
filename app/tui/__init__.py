"""The Textual wizard (`mlsetup` with no subcommand). `steps/` never imports this."""

from __future__ import annotations

import argparse


def wizard(args: argparse.Namespace) -> int:
    """Open the wizard for the CLI's top-level flags: --answers, --facts, --dry-run, --root."""
    from app.tui.app import run_wizard
    from app.tui.session import Session

    session = Session.load(
        root=args.root, answers=args.answers, facts=args.facts, dry_run=args.dry_run
    )
    return run_wizard(session)
