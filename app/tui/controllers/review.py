"""Review: the whole plan, in order, before anything runs."""

from __future__ import annotations

import json
from typing import Any

from app.tui.controllers.buildtime import slow_builds
from app.tui.session import Session
from app.tui.trail import jump_keys
from steps.formats.plan import Plan


class ReviewController:
    def __init__(self, session: Session) -> None:
        self.session = session

    def plan(self) -> Plan:
        return self.session.plan()

    def plan_json(self) -> dict[str, Any]:
        return json.loads(self.plan().to_json())

    def warnings(self) -> list[str]:
        """The plan's refusals and warnings, and the builds this machine makes slow."""
        return [*self.plan().warnings, *slow_builds(self.session)]

    def refused(self) -> str | None:
        """The answers refused, as `mlsetup plan` says it (exit 2): Review then shows that
        and no plan (the one from the tables would be no plan mlsetup could run)."""
        return self.session.refused_as_cli()

    def provisional(self) -> str | None:
        """While uv resolves the stack for the answers as they are now: the plan shown is
        from mlsetup's tables (Review is drawn again when the resolution lands)."""
        s = self.session
        if s.stack() is None and s.stack_refused() is None and s.resolving_since() is not None:
            return (
                "Resolving the stack with uv\u2026 the plan below is from mlsetup's tables "
                "until it finishes."
            )
        return None

    def why_not(self) -> str | None:
        return self.session.why_not_apply()

    def help(self) -> str:
        plan = self.plan()
        n = len(plan.actions)
        pending = [s.name for s in plan.steps if s.status == "pending"]
        run = (
            "The dry run walks the whole plan and executes no command."
            if self.session.dry_run
            else "Apply first lists what will change on this machine and asks; Cancel is "
            "focused, so Enter alone starts nothing. The run goes on in the background if you "
            "quit or the SSH session drops (follow it again with: sudo mlsetup)."
        )
        return (
            f"The plan: {n} action(s) in the steps {', '.join(pending) or '(none)'}; the "
            "others are already satisfied. Each action shows the exact command, and the "
            "account it runs as (sudo -u).\n\n"
            f"{run}\n\nctrl+s saves the answers: sudo mlsetup apply --answers FILE replays "
            f"this plan on another server. A number key ({jump_keys()}) goes back to a step."
        )
