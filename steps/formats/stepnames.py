"""The registry's step names, for the JSON schemas of Plan and Report: steps.planning.registry hands
them over when it is loaded, steps.formats.plan reads them when a schema is made. A leaf of its own,
so that the registry imports no model (the wizard's trail reads it before anything is planned)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

_step_names: list[Callable[[], Sequence[str]]] = []


def name_the_steps(names: Callable[[], Sequence[str]]) -> None:
    _step_names[:] = [names]


def registered_step_names() -> list[str]:
    """The names the registry handed over, in its order (none before it is loaded)."""
    return [name for names in _step_names for name in names()]
