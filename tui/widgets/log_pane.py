"""Every rank's output in one pane, filtered by rank and searched. Lines
are kept in a bounded buffer; the pane shows the newest matching ones."""

from __future__ import annotations

import threading
from collections import deque

from rich.segment import Segment
from rich.style import Style
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.geometry import Size
from textual.reactive import Reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Input

from torchdeck.backends.base import LogLine
from torchdeck.terminal import as_shown

from .line_styles import LineStyles

BUFFER_LINES = 20_000
SHOWN_LINES = 1_000

Kept = tuple[int, str, int]
"""A line kept: its rank, its text as the rank wrote it, its attempt (as ``LogLine``). A plain tuple
of a number and a string, which the garbage collector stops tracking: 20,000 of them kept as objects
were a fifth of what each of the console's full collections went through."""
Row = tuple[str, str, bool]
"""A line as the view shows it: its prefix (``r3/1 ``), its text made printable, whether it reads as
an error. Drawn into a Strip only when on screen: a thousand Strips kept (each with seven caches of
its own) were a third of what each full collection went through, and held the monitor's frames."""

PREFIX = Style(dim=True)
ERROR = Style(color="red")
FOUND = Style(reverse=True)


class LogView(LineStyles, ScrollView, can_focus=True):
    """The shown lines, newest last, drawn a row at a time (the Line API): a flush of many lines
    costs one size update, and only the rows on screen are ever rendered. (RichLog rendered each
    line through a Rich console as it was written, copied its whole buffer once it was full and
    scrolled once per line: on a cluster job that was most of the console's time.)

    Its growth does not lay the screen out again either: ScrollView's virtual size asks for a
    whole-screen layout when it changes, and a layout is needed only when a scrollbar must appear
    or go; otherwise the scrollbars are updated alone."""

    DEFAULT_CSS = """
    LogView { overflow-x: hidden; }
    """

    virtual_size: Reactive[Size] = Reactive(Size(0, 0), layout=False)

    def __init__(
        self,
        max_lines: int = SHOWN_LINES,
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.rows: deque[Row] = deque(maxlen=max_lines)
        self.search = ""
        """What the rows' text is searched for (lower case): shown reversed where found."""

    @property
    def lines(self) -> list[Strip]:
        """Every row, drawn (the rows on screen are drawn alone, by ``render_line``)."""
        return [row_strip(row, self.search) for row in self.rows]

    def watch_virtual_size(self, old: Size, new: Size) -> None:
        width, height = self.container_size
        if (old.height > height) != (new.height > height) or (old.width > width) != (new.width > width):
            self.refresh(layout=True)
        else:
            self._scroll_update(new)

    def write_lines(self, rows: list[Row]) -> None:
        """Add lines at the end; the view follows them when it was at the end already."""
        if not rows:
            return
        following = self.scroll_y >= self.max_scroll_y
        self.rows.extend(rows)
        self.virtual_size = Size(self.scrollable_content_region.width, len(self.rows))
        if following:
            if self.show_vertical_scrollbar:  # the new end is known now, and drawn in this same pass
                self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)
            else:  # the scrollbar comes with the next layout; a scroll now would be held at 0
                self.scroll_end(animate=False, immediate=False, x_axis=False)
        self.refresh()

    def clear(self) -> None:
        self.rows.clear()
        self.virtual_size = Size(self.scrollable_content_region.width, 0)
        self.scroll_to(y=0, animate=False)
        self.refresh()

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        index = int(self.scroll_offset.y) + y
        base = self.line_style()
        if index >= len(self.rows):
            return Strip.blank(width, base)
        return row_strip(self.rows[index], self.search).crop_extend(0, width, base).apply_style(base)


def row(line: Kept) -> Row:
    """How a kept line shows: its rank (and attempt), its text made printable, whether an error."""
    rank, text, attempt = line
    body = as_shown(text)
    return (f"r{rank}/{attempt} " if attempt else f"r{rank} ", body, "error" in body.lower() or "Traceback" in body)


def row_strip(shown: Row, search: str) -> Strip:
    """A row drawn, with what ``search`` found in it reversed."""
    prefix, body, error = shown
    style = ERROR if error else None
    segments = [Segment(prefix, PREFIX)]
    lower = body.lower() if search else ""
    if search and search in lower:
        at, n = 0, len(search)
        while (found := lower.find(search, at)) >= 0:
            segments += [
                Segment(body[at:found], style),
                Segment(body[found : found + n], (style or Style()) + FOUND),
            ]
            at = found + n
        segments.append(Segment(body[at:], style))
    else:
        segments.append(Segment(body, style))
    return Strip(segments)


class LogPane(Vertical):
    DEFAULT_CSS = """
    LogPane { height: 1fr; }
    LogPane > Horizontal { height: 1; }
    LogPane Input { border: none; height: 1; padding: 0 1; }
    LogPane Input:focus { border: none; background: $boost; }
    LogPane #log-rank { width: 16; }
    LogPane #log-search { width: 1fr; }
    LogPane LogView { height: 1fr; background: $surface; }
    """

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.buffer: deque[Kept] = deque(maxlen=BUFFER_LINES)
        self._pending: list[LogLine] = []
        self._lock = threading.Lock()
        self.rank: int | None = None
        self.search = ""
        self._caught_up = False

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield Input(placeholder="rank (all)", id="log-rank", restrict=r"[0-9]*")
            yield Input(placeholder="search logs", id="log-search")
        yield LogView(max_lines=SHOWN_LINES, id="log-lines")

    def add_lines(self, lines: list[LogLine]) -> None:
        """Queue lines from any thread; ``flush`` shows them."""
        with self._lock:
            self._pending.extend(lines)

    def _matches(self, line: Kept) -> bool:
        return (self.rank is None or line[0] == self.rank) and (not self.search or self.search in line[1].lower())

    def flush(self) -> int:
        """Move queued lines into the buffer and the view; returns how many."""
        with self._lock:
            pending, self._pending = self._pending, []
        if not pending:
            return 0
        kept = [(line.rank, line.text, line.attempt) for line in pending]
        self.buffer.extend(kept)
        view = self.query_one(LogView)
        # Once the pane has caught up, lines that would scroll out of sight
        # within this same flush are not drawn (hundreds of ranks write faster
        # than anyone reads, and drawing a line costs tens of microseconds);
        # they stay in the buffer, for the rank filter and the search.
        room = SHOWN_LINES if not self._caught_up else max(1, view.size.height)
        self._caught_up = True
        shown = [line for line in kept if self._matches(line)][-room:]
        view.write_lines([row(line) for line in shown])
        return len(pending)

    def refilter(self) -> None:
        view = self.query_one(LogView)
        view.clear()
        view.search = self.search
        shown = [line for line in self.buffer if self._matches(line)][-SHOWN_LINES:]
        view.write_lines([row(line) for line in shown])

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "log-rank":
            self.rank = int(event.value) if event.value else None
        else:
            self.search = event.value.strip().lower()
        self.refilter()
