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
        self.lines: deque[Strip] = deque(maxlen=max_lines)

    def watch_virtual_size(self, old: Size, new: Size) -> None:
        width, height = self.container_size
        if (old.height > height) != (new.height > height) or (old.width > width) != (new.width > width):
            self.refresh(layout=True)
        else:
            self._scroll_update(new)

    def write_lines(self, strips: list[Strip]) -> None:
        """Add lines at the end; the view follows them when it was at the end already."""
        if not strips:
            return
        following = self.scroll_y >= self.max_scroll_y
        self.lines.extend(strips)
        self.virtual_size = Size(self.scrollable_content_region.width, len(self.lines))
        if following:
            if self.show_vertical_scrollbar:  # the new end is known now, and drawn in this same pass
                self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)
            else:  # the scrollbar comes with the next layout; a scroll now would be held at 0
                self.scroll_end(animate=False, immediate=False, x_axis=False)
        self.refresh()

    def clear(self) -> None:
        self.lines.clear()
        self.virtual_size = Size(self.scrollable_content_region.width, 0)
        self.scroll_to(y=0, animate=False)
        self.refresh()

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        index = int(self.scroll_offset.y) + y
        base = self.line_style()
        if index >= len(self.lines):
            return Strip.blank(width, base)
        return self.lines[index].crop_extend(0, width, base).apply_style(base)


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
        self.buffer: deque[LogLine] = deque(maxlen=BUFFER_LINES)
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

    def _matches(self, line: LogLine) -> bool:
        return (self.rank is None or line.rank == self.rank) and (not self.search or self.search in line.text.lower())

    def _render_line(self, line: LogLine) -> Strip:
        restart = f"/{line.attempt}" if line.attempt else ""
        body = as_shown(line.text)
        lower = body.lower()
        style = ERROR if "error" in lower or "Traceback" in body else None
        segments = [Segment(f"r{line.rank}{restart} ", PREFIX)]
        if self.search and self.search in lower:
            at, n = 0, len(self.search)
            while (found := lower.find(self.search, at)) >= 0:
                segments += [
                    Segment(body[at:found], style),
                    Segment(body[found : found + n], (style or Style()) + FOUND),
                ]
                at = found + n
            segments.append(Segment(body[at:], style))
        else:
            segments.append(Segment(body, style))
        return Strip(segments)

    def flush(self) -> int:
        """Move queued lines into the buffer and the view; returns how many."""
        with self._lock:
            pending, self._pending = self._pending, []
        if not pending:
            return 0
        self.buffer.extend(pending)
        view = self.query_one(LogView)
        # Once the pane has caught up, lines that would scroll out of sight
        # within this same flush are not drawn (hundreds of ranks write faster
        # than anyone reads, and drawing a line costs tens of microseconds);
        # they stay in the buffer, for the rank filter and the search.
        room = SHOWN_LINES if not self._caught_up else max(1, view.size.height)
        self._caught_up = True
        shown = [line for line in pending if self._matches(line)][-room:]
        view.write_lines([self._render_line(line) for line in shown])
        return len(pending)

    def refilter(self) -> None:
        view = self.query_one(LogView)
        view.clear()
        shown = [line for line in self.buffer if self._matches(line)][-SHOWN_LINES:]
        view.write_lines([self._render_line(line) for line in shown])

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "log-rank":
            self.rank = int(event.value) if event.value else None
        else:
            self.search = event.value.strip().lower()
        self.refilter()
