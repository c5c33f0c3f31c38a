"""Plan steps as a person reads them: the reason, then each action's title and exact command
(a wrapped command stays indented under its title)."""

from __future__ import annotations

from rich.markup import escape
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.geometry import Size
from textual.widgets import Static

from app.tui.glyphs import Glyphs
from steps.core.printable import printable
from steps.formats.plan import Step


def wrap_command(command: str, width: int, indent: str = "  ") -> list[str]:
    """A command in lines of `width`, broken only between its words (a path, a URL, a package
    name stays whole for copying), the rest indented under its start. A script in it (`python
    -c` with lines of its own) keeps every line, each indented under the command and by its
    own indentation. A word longer than a whole line starts a line of its own and is broken
    after a "/" where it has one: the only split left, and only where no width could hold it
    (the keyring URL at 80 columns)."""
    out: list[str] = []
    for n, text in enumerate(command.split("\n")):
        body = text.lstrip(" ")
        lead = (indent if n else "") + " " * (len(text) - len(body))
        out += _wrap_line(body, max(width, 20), lead, lead if n else indent)
    return out


def _wrap_line(text: str, width: int, first: str, rest: str) -> list[str]:
    """One line of a command after `first`, continued after `rest`."""
    if len(first) + len(text) <= width:
        return [first + text]
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) <= width:
            line = f"{line} {word}"
            continue
        if line:
            lines.append(line)
        line = (rest if lines else first) + word
        while len(line) > width:  # a word no line holds
            cut = line.rfind("/", len(rest) + 1, width) + 1 or width
            lines.append(line[:cut])
            line = rest + line[cut:]
    lines.append(line)
    return lines


class CommandText(Static):
    """One exact command, wrapped by `wrap_command` for the width it is given."""

    DEFAULT_CSS = "CommandText { text-wrap: nowrap; text-overflow: clip; }"

    def __init__(self, command: str, **kwargs) -> None:
        super().__init__(command, markup=False, **kwargs)
        self.command = command

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(wrap_command(self.command, width))

    def render(self) -> Content:
        return Content("\n".join(wrap_command(self.command, self.content_region.width)))

    def on_resize(self) -> None:
        self.refresh(layout=True)


class PlanView(Vertical):
    DEFAULT_CSS = """
    PlanView { height: auto; }
    PlanView .step { height: auto; }
    PlanView .title { height: auto; padding-left: 2; text-style: bold; }
    PlanView .cmd { height: auto; padding-left: 4; color: $text-muted; }
    PlanView.-single .title { padding-left: 0; }
    PlanView.-single .cmd { padding-left: 2; }
    """

    def __init__(self, steps: list[Step], glyphs: Glyphs, numbered: bool = True, **kw) -> None:
        super().__init__(**kw)
        self.steps = steps
        self.glyphs = glyphs
        self.numbered = numbered
        self.set_class(not numbered, "-single")

    def compose(self) -> ComposeResult:
        yield from self._widgets()

    def _widgets(self) -> ComposeResult:
        g = self.glyphs
        for n, step in enumerate(self.steps, 1):
            head = f"{n}. [b]{step.name}[/] " if self.numbered else ""
            reason = escape(printable(step.reason))
            if step.status == "satisfied":
                yield Static(f"{head}[$success]{g['satisfied']}[/] {reason}", classes="step")
                continue
            yield Static(f"{head}[$warning]{g['arrow']}[/] {reason}", classes="step")
            for action in step.actions:
                reboot = "  [$warning](reboot after)[/]" if action.reboot_after else ""
                yield Static(f"{escape(printable(action.title))}{reboot}", classes="title")
                yield CommandText(f"$ {printable(action.command_line())}", classes="cmd")

    async def show(self, steps: list[Step]) -> None:
        self.steps = steps
        await self.remove_children()
        await self.mount_all(list(self._widgets()))
