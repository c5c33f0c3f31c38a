"""The wizard's screens in order, from the step registry (steps.planning.registry): Machine, each
step, Review (the number keys jump to these), then Run and Summary. Functions, not constants: a
step added to the registry with a screen (a controller) is on the trail and behind a number key
with nothing else changed; a step that asks nothing has no screen."""

from __future__ import annotations

from steps.planning import registry
from steps.planning.registry import screen_steps


def jumps() -> tuple[str, ...]:
    """The screens a number key jumps to: key 1 is Machine."""
    return ("machine", *screen_steps(), "review")


def trail() -> tuple[str, ...]:
    return (*jumps(), "run", "summary")


def jump_keys() -> str:
    """The number keys as the key bar and the help name them: "1-6"."""
    return f"1-{len(jumps())}"


def answers_screen(step: str) -> str:
    """The screen that edits the answers `step` is planned from (the registry's answers
    section: the fabric step follows the driver's); Review for a step with none."""
    section = next((s.answers for s in registry.STEPS if s.name == step), None)
    return section if section in jumps() else "review"
