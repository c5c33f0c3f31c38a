"""What a wizard screen may use of the app that shows it, as protocols: the screens are typed
against these, not against `WizardApp`, which imports every screen (no import circle)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # the first screen is drawn before these are imported (app.tui.app)
    from app.tui.glyphs import Glyphs
    from app.tui.launch import Launch
    from app.tui.runmodel import RunModel
    from app.tui.session import Session


class Navigation(Protocol):
    def next_from(self, where: str) -> None: ...
    def can_jump(self) -> bool: ...
    def jump(self, step: str) -> None: ...
    def retry(self) -> None: ...
    def show_summary(self) -> None: ...


class Runs(Protocol):
    def ask_to_apply(self) -> None: ...
    def start_resume(self) -> None: ...


class Wizard(Protocol):
    launch: Launch  # what the command line said: all there is before `loaded`
    session: Session  # once `loaded`
    glyphs: Glyphs
    clock: Callable[[], float]  # what "running 2m10s" counts from (tests pin it)
    save_path: str  # the file the answers were saved to last ("": not yet)

    @property
    def loaded(self) -> bool: ...
    @property
    def model(self) -> RunModel: ...
    @property
    def nav(self) -> Navigation: ...
    @property
    def runs(self) -> Runs: ...
    def mode_label(self) -> str: ...
