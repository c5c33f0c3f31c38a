"""Where the `assets` package is, wherever mlsetup is installed (wheel, sdist, editable). pip
and uv never install it zipped, so its resources are files on disk: the driver step hands one
to `install` and Textual reads the stylesheet by path. A leaf: the wizard's first screen finds
its stylesheet without loading the tables (steps.known.knowledge)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

ASSETS_DIR = Path(str(resources.files("assets")))
