"""Every rank's output in one pane, filtered by rank and searched. Lines
are kept in a bounded buffer; the pane shows the newest matching ones."""

from __future__ import annotations

import threading
from collections import deque

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.geometry import Size
from textual.reactive import Reactive
from textual.widgets import Input, RichLog

from torchdeck.backends.base import LogLine

BUFFER_LINES = 20_000
SHOWN_LINES = 1_000


class LogView(RichLog):
    """A RichLog whose growth does not lay the screen out again. RichLog sets its virtual size on
    every write, and that reactive asks for a layout of the whole screen (16 ms on the monitor,
    then a repaint of every widget): with lines arriving on every flush, that was most of the
    cluster monitor's CPU. Its own size is fixed by the layout; only its scrollbars depend on
    what it holds, and they are updated here, with a layout only when one must appear or go."""

    virtual_size: Reactive[Size] = Reactive(Size(0, 0), layout=False)

    def watch_virtual_size(self, old: Size, new: Size) -> None:
        width, height = self.container_size
        if (old.height > height) != (new.height > height) or (old.width > width) != (new.width > width):
            self.refresh(layout=True)
        else:
            self._scroll_update(new)


class LogPane(Vertical):
    DEFAULT_CSS = """
    LogPane { height: 1fr; }
    LogPane > Horizontal { height: 1; }
    LogPane Input { border: none; height: 1; padding: 0 1; }
    LogPane Input:focus { border: none; background: $boost; }
    LogPane #log-rank { width: 16; }
    LogPane #log-search { width: 1fr; }
    LogPane RichLog { height: 1fr; background: $surface; overflow-x: hidden; }
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
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
        yield LogView(max_lines=SHOWN_LINES, wrap=False, markup=False, highlight=False, id="log-lines")

    def add_lines(self, lines: list[LogLine]) -> None:
        """Queue lines from any thread; ``flush`` shows them."""
        with self._lock:
            self._pending.extend(lines)

    def _matches(self, line: LogLine) -> bool:
        return (self.rank is None or line.rank == self.rank) and (not self.search or self.search in line.text.lower())

    def _render_line(self, line: LogLine) -> Text:
        restart = f"/{line.attempt}" if line.attempt else ""
        text = Text(f"r{line.rank}{restart} ", style="dim")
        body = Text(line.text)
        if self.search:
            body.highlight_words([self.search], style="reverse", case_sensitive=False)
        if "error" in line.text.lower() or "Traceback" in line.text:
            body.stylize("red")
        return text + body

    def flush(self) -> int:
        """Move queued lines into the buffer and the view; returns how many."""
        with self._lock:
            pending, self._pending = self._pending, []
        if not pending:
            return 0
        self.buffer.extend(pending)
        view = self.query_one(RichLog)
        # Once the pane has caught up, lines that would scroll out of sight
        # within this same flush are not drawn (hundreds of ranks write faster
        # than anyone reads, and drawing a line costs tens of microseconds);
        # they stay in the buffer, for the rank filter and the search.
        room = SHOWN_LINES if not self._caught_up else max(1, view.size.height)
        self._caught_up = True
        shown = [line for line in pending if self._matches(line)][-room:]
        for line in shown:
            view.write(self._render_line(line))
        return len(pending)

    def refilter(self) -> None:
        view = self.query_one(RichLog)
        view.clear()
        shown = [line for line in self.buffer if self._matches(line)][-SHOWN_LINES:]
        for line in shown:
            view.write(self._render_line(line))

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "log-rank":
            self.rank = int(event.value) if event.value else None
        else:
            self.search = event.value.strip().lower()
        self.refilter()
