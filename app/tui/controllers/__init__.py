"""One controller per screen (no Textual here): what each screen shows and what its keys do
to the Session. The screens are thin views over these, as subiquity's are."""

from app.tui.controllers.confirm import ConfirmController
from app.tui.controllers.machine import MachineController
from app.tui.controllers.resume import ResumeController
from app.tui.controllers.review import ReviewController
from app.tui.controllers.step import StepController, controller_for
from app.tui.controllers.summary import SummaryController

__all__ = [
    "ConfirmController",
    "MachineController",
    "ResumeController",
    "ReviewController",
    "StepController",
    "SummaryController",
    "controller_for",
]
