"""The machine as the wizard's headings name it, in a leaf module: both the launch (before
anything is loaded) and the loaded session name it, and the launch loads the session."""

from __future__ import annotations

from pathlib import Path


def machine_label(facts_file: Path | None, root: Path) -> str:
    """The machine as the headings name it: the recorded file, this machine, or the root."""
    if facts_file is not None:
        return facts_file.name
    return "this machine" if root == Path("/") else f"the machine under {root}"
