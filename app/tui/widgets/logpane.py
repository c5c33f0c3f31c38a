"""The live log pane: one action's output as it is produced, bounded, searchable.

Lines arrive in batches (`append`), at most a screenful of work per tick however fast the
compiler prints; the pane keeps its last `max_lines` (the whole output is in the action's log
file, named in the pane's title). `/` searches (matches highlighted, `n`/`N` jump), `f` asks
the screen to show the pane full-screen, `end` follows the output again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from rich.highlighter import Highlighter
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Input, Log, Static
from typing_extensions import Self

MAX_LINES = 2000


class SearchHighlighter(Highlighter):
    def __init__(self) -> None:
        self.term = ""

    def highlight(self, text: Text) -> None:
        if self.term:
            text.highlight_words([self.term], style="reverse", case_sensitive=False)


class LogView(Log):
    """The scrolling text itself (Textual's line-based Log, with search highlights). Lines
    longer than the pane are wrapped, the rest of a line indented under its start, so the
    end of a long line (a path, an error) is never cut off; a resize wraps them again."""

    DEFAULT_CSS = "LogView { height: 1fr; overflow-x: hidden; }"
    INDENT = "  "

    def __init__(self, max_lines: int, **kwargs) -> None:
        # the view holds wrapped rows: room for each kept line to wrap a few times
        super().__init__(max_lines=max_lines * 4, highlight=True, **kwargs)
        self.highlighter: SearchHighlighter = SearchHighlighter()
        self.source: deque[str] = deque(maxlen=max_lines)  # the lines as they came
        self.wrap_width = 0
        self.tail_y = 0  # where following the output last put the view

    @property
    def at_tail(self) -> bool:
        """The view is where following put it, or at the end. Log itself follows only while
        the offset equals the end exactly; a pane made shorter (the gauge appears, a wrapped
        batch arrives with a resize) moves the end past the offset and Log stops following
        for good. Only the operator moves the view above where following left it."""
        return self.scroll_offset.y >= self.tail_y or self.is_vertical_scroll_end

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        # A taller pane (80x24 -> 120x40, the gauge or the failure box changing) clamps the
        # offset to the new, smaller end without `follow`. Where the view is at the end, that
        # is where following is now: else a pane made shorter again before the next batch (the
        # gauge's throttle line wrapping, a second resize) leaves the offset below a `tail_y`
        # kept from the shorter pane and above the end, and following stopped for good (the
        # H200 Run screen stuck at the first lines of a flash-attn build).
        super().watch_scroll_y(old_value, new_value)
        if round(new_value) >= self.max_scroll_y:
            self.tail_y = self.max_scroll_y

    def follow(self) -> None:
        self.scroll_end(animate=False, immediate=True, x_axis=False)
        self.tail_y = self.max_scroll_y

    def write_lines(self, lines: Iterable[str], scroll_end: bool | None = None) -> Self:
        raw = [part for line in lines for part in (line.splitlines() or [""])]
        self.source.extend(raw)
        follow = (self.auto_scroll if scroll_end is None else scroll_end) and self.at_tail
        super().write_lines(self._wrapped(raw), scroll_end=False)
        if follow and not self.is_vertical_scrollbar_grabbed:
            self.follow()
        return self

    def clear(self) -> Self:
        self.source.clear()
        self.tail_y = 0
        return super().clear()

    def _wrapped(self, lines: list[str]) -> list[str]:
        width = self.wrap_width
        if width < 20:
            return lines
        out: list[str] = []
        for line in lines:
            if "\t" in line:
                line = line.expandtabs()
            # at a space in the second half of the row when there is one, else at the edge;
            # slicing, not textwrap: a compiler prints thousands of long lines a second
            while len(line) > width:
                cut = line.rfind(" ", width // 2, width + 1)
                cut = cut if cut > 0 else width
                out.append(line[:cut])
                line = self.INDENT + line[cut:].lstrip(" ")
            out.append(line)
        return out

    def on_resize(self) -> None:
        width = self.scrollable_content_region.width - 1  # room for the vertical scrollbar
        follow = self.auto_scroll and self.at_tail
        if width != self.wrap_width:
            self.wrap_width = width
            kept = list(self.source)
            super().clear()
            super().write_lines(self._wrapped(kept), scroll_end=False)
        if follow:
            self.follow()

    def _update_size(self, updates: int, lines: list[str]) -> None:  # type: ignore[override]
        # Log measures each batch's widest line in a thread of its own; with thousands of lines
        # a second that thread competes with key presses for the GIL. The character count is
        # enough for the horizontal scroll range of compiler output.
        if lines:
            self._update_maximum_width(updates, max(map(len, lines)))


class LogPane(Vertical):
    BINDINGS = [  # noqa: RUF012
        Binding("slash", "search", "Search", show=False),
        Binding("n", "next_match", "Next match", show=False),
        Binding("N", "previous_match", "Previous match", show=False),
        Binding("f", "full_screen", "Full log", show=False),
        Binding("end", "follow", "Follow", show=False),
    ]

    class FullScreen(Message):
        """The operator asked to see the log full-screen (or back)."""

        def __init__(self, pane: LogPane) -> None:
            super().__init__()
            self.pane = pane

    class Searched(Message):
        def __init__(self, pane: LogPane, term: str, matches: int) -> None:
            super().__init__()
            self.pane = pane
            self.term = term
            self.matches = matches

    def __init__(self, max_lines: int = MAX_LINES, **kwargs) -> None:
        super().__init__(**kwargs)
        self.max_lines = max_lines
        self.action_id: str | None = None
        self.dropped = 0
        self._match = -1

    def on_mount(self) -> None:
        self.border_title = "Log"

    def compose(self) -> ComposeResult:
        yield Static("", id="log-title", markup=False)
        yield LogView(self.max_lines, id="log-view")
        yield Input(placeholder="search the log, Enter to find, Esc to close", id="log-search")
        yield Static("", id="log-status", markup=False)

    @property
    def view(self) -> LogView:
        return self.query_one(LogView)

    def show(self, action_id: str, title: str, lines: list[str], log: str = "") -> None:
        """Switch the pane to an action: its title, log file and the lines kept of it."""
        self.action_id = action_id
        self.dropped = 0
        self._match = -1
        self.set_title(title, log)
        view = self.view
        view.clear()
        view.write_lines(lines[-self.max_lines :])
        view.auto_scroll = True
        view.follow()
        self.call_after_refresh(view.follow)
        self._status()

    def set_title(self, title: str, log: str = "") -> None:
        where = f"  (full log: {log})" if log else ""
        self.query_one("#log-title", Static).update(f"{title}{where}")

    def append(self, lines: list[str], dropped: int = 0) -> None:
        self.dropped += dropped
        if dropped:
            note = f"... {dropped} line(s) skipped here to keep up; they are in the log file"
            lines = [note, *lines]
        self.view.write_lines(lines)
        self._status()

    @property
    def lines(self) -> list[str]:
        """The lines kept, as they came (the view shows them wrapped)."""
        return list(self.view.source)

    def _status(self, extra: str = "") -> None:
        term = self.view.highlighter.term
        parts = [f"{len(self.view.source)} line(s) shown"]
        if term:
            parts.append(f"search {term!r}: {len(self._matches(term))} match(es)")
        if extra:
            parts.append(extra)
        self.query_one("#log-status", Static).update(" - ".join(parts))

    # -- search -------------------------------------------------------------------------------

    def _matches(self, term: str) -> list[int]:
        low = term.lower()
        return [i for i, line in enumerate(self.view.lines) if low in line.lower()]

    def action_search(self) -> None:
        box = self.query_one("#log-search", Input)
        box.add_class("-open")
        box.focus()

    @on(Input.Submitted, "#log-search")
    def _submitted(self, event: Input.Submitted) -> None:
        """The box closes once it has searched: the matches stay highlighted, n and N go
        through them, and Esc is the screen's again (not a box still open under the log)."""
        event.stop()
        self.search(event.value)
        self.query_one("#log-search", Input).remove_class("-open")
        self.view.focus()

    def on_key(self, event) -> None:
        if event.key == "escape" and self.query_one("#log-search", Input).has_focus:
            event.stop()
            self.query_one("#log-search", Input).remove_class("-open")
            self.view.focus()

    def search(self, term: str) -> int:
        self.view.highlighter.term = term
        self._match = -1
        matches = self._matches(term) if term else []
        self.view.refresh()
        if matches:
            self._jump(matches, forward=True)
        self._status()
        self.post_message(LogPane.Searched(self, term, len(matches)))
        return len(matches)

    def _jump(self, matches: list[int], forward: bool) -> None:
        if forward:
            after = [m for m in matches if m > self._match]
            self._match = after[0] if after else matches[0]
        else:
            before = [m for m in matches if m < self._match]
            self._match = before[-1] if before else matches[-1]
        self.view.auto_scroll = False
        self.view.scroll_to(x=0, y=max(0, self._match - 2), animate=False, immediate=True)

    def action_next_match(self) -> None:
        term = self.view.highlighter.term
        if term and (matches := self._matches(term)):
            self._jump(matches, forward=True)

    def action_previous_match(self) -> None:
        term = self.view.highlighter.term
        if term and (matches := self._matches(term)):
            self._jump(matches, forward=False)

    def action_follow(self) -> None:
        self.view.auto_scroll = True
        self.view.follow()

    def action_full_screen(self) -> None:
        self.post_message(LogPane.FullScreen(self))
