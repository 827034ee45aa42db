"""A table of as many rows as a cluster has (its nodes, its queues' waiting workloads), with a row
cursor: a Line API widget, as the rank table is, rather than a DataTable.

A DataTable measures every cell of every row it is given, through Rich, before its next frame, and
reads a plain string cell as markup: filled with 1,000 nodes it held the event loop about half a
second at each refresh (every 5 s), and a ``[...]`` in a taint's or a queue's words would have been
taken as style. Here the columns' widths are the cells' lengths, worked out once a fill; only the
rows on screen are drawn, each as one line of text; a string is shown as it is."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.cells import cell_len
from rich.console import OverflowMethod
from rich.segment import Segment
from rich.text import Text
from textual.binding import Binding
from textual.events import Click
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from .line_styles import LineStyles

Cell = str | Text
GAP = 2
"""Spaces between two columns."""
WIDEST = 60
"""The widest a column is made (its cells are cut); the last one takes what is left."""
NARROWEST = 12
"""Where the columns are wider than the table, the widest are narrowed a cell at a time, down to
this (or their header; never the first, the row's name): each keeps its start in sight, and the
last (a node's trouble, a workload's reason) is not cut to a few letters. The line under the
table says the cursor's row whole."""


class BoardTable(LineStyles, ScrollView, can_focus=True):
    """Rows by key under a header that stays put; the cursor is a row, moved with the arrow, page,
    home and end keys or a click; enter selects it. ``RowHighlighted`` says the cursor moved to
    another row, ``RowSelected`` that enter (or a click on the cursor's row) chose it."""

    BINDINGS = [
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "move_to(0)", "First", show=False),
        Binding("end", "move_to(-1)", "Last", show=False),
        Binding("enter", "select", "Select", show=False),
    ]
    COMPONENT_CLASSES = {"board-table--header", "board-table--stripe", "board-table--cursor"}
    DEFAULT_CSS = """
    BoardTable { height: 1fr; overflow-x: hidden; scrollbar-size-vertical: 1; }
    BoardTable > .board-table--header { text-style: bold; color: $text-accent; }
    BoardTable > .board-table--stripe { background: $boost; }
    BoardTable > .board-table--cursor { background: $block-cursor-blurred-background; }
    BoardTable:focus > .board-table--cursor {
        background: $block-cursor-background; color: $block-cursor-foreground; text-style: bold;
    }
    """

    class RowHighlighted(Message):
        def __init__(self, table: BoardTable, key: str) -> None:
            super().__init__()
            self.table, self.key = table, key

    class RowSelected(Message):
        def __init__(self, table: BoardTable, key: str) -> None:
            super().__init__()
            self.table, self.key = table, key

    def __init__(
        self,
        columns: Sequence[str],
        *,
        ascii_only: bool = False,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.columns = tuple(columns)
        self._cut: OverflowMethod = "crop" if ascii_only else "ellipsis"
        """How a cell too wide for its column ends (an ellipsis is not ASCII)."""
        self._keys: list[str] = []
        self._rows: list[tuple[Cell, ...]] = []
        self._widths = [cell_len(c) for c in self.columns]
        self._filled = 0
        """Fills so far (the columns' fitted widths are kept until the next, or another width)."""
        self._fit: tuple[tuple[int, int], list[int]] = ((-1, -1), [])
        self.cursor_row = 0

    # -- what it holds ---------------------------------------------------------------

    @property
    def row_count(self) -> int:
        return len(self._rows)

    def get_row_at(self, index: int) -> list[str]:
        """The cells of one row, as text."""
        return [c.plain if isinstance(c, Text) else c for c in self._rows[index]]

    @property
    def selected(self) -> str | None:
        """The key of the cursor's row (None: no rows)."""
        return self._keys[self.cursor_row] if self._keys else None

    def fill(self, rows: Mapping[str, Sequence[Cell]]) -> None:
        """The rows, by key, in order; the cursor stays on the same row where it is still there."""
        was = self.selected
        self._keys = list(rows)
        self._rows = [tuple(cells) for cells in rows.values()]
        widths = [cell_len(c) for c in self.columns]
        for cells in self._rows:
            for i, cell in enumerate(cells):
                n = cell.cell_len if isinstance(cell, Text) else cell_len(cell)
                if n > widths[i]:
                    widths[i] = n
        self._widths = [min(w, WIDEST) for w in widths]
        self._filled += 1
        self.virtual_size = Size(self.size.width, len(self._rows) + 1)
        at = max(
            0, self._keys.index(was) if was is not None and was in rows else min(self.cursor_row, len(self._keys) - 1)
        )
        self._move(at, say=was != (self._keys[at] if self._keys else None))  # (the old row may be past the new end)
        self.refresh()

    # -- the cursor --------------------------------------------------------------------

    def _move(self, row: int, say: bool = True) -> None:
        if not self._rows:
            self.cursor_row = 0
            return
        row = max(0, min(row, len(self._rows) - 1))
        moved = row != self.cursor_row
        self.cursor_row = row
        top, shown = int(self.scroll_offset.y), max(1, self.scrollable_content_region.height - 1)
        if row < top:
            self.scroll_to(y=row, animate=False, immediate=True)
        elif row >= top + shown:
            self.scroll_to(y=row - shown + 1, animate=False, immediate=True)
        self.refresh()
        if moved or say:
            self.post_message(self.RowHighlighted(self, self._keys[row]))

    def move_cursor(self, row: int) -> None:
        self._move(row, say=False)

    def action_move(self, by: int) -> None:
        self._move(self.cursor_row + by, say=False)

    def action_page(self, by: int) -> None:
        self._move(self.cursor_row + by * max(1, self.scrollable_content_region.height - 1), say=False)

    def action_move_to(self, row: int) -> None:
        self._move(row if row >= 0 else len(self._rows) - 1, say=False)

    def action_select(self) -> None:
        if self._keys:
            self.post_message(self.RowSelected(self, self._keys[self.cursor_row]))

    def on_click(self, event: Click) -> None:
        if event.y < 1:  # the header
            return
        row = int(self.scroll_offset.y) + event.y - 1
        if 0 <= row < len(self._rows):
            if row == self.cursor_row:
                self.action_select()
            else:
                self._move(row, say=False)

    # -- drawing -------------------------------------------------------------------------

    def _fitted(self, width: int) -> list[int]:
        """The columns' widths in ``width`` cells: as wide as their cells where they fit, else the
        widest narrowed a cell at a time (never the first column: the row's name)."""
        if self._fit[0] == (width, self._filled):
            return self._fit[1]
        widths = list(self._widths)
        floors = [max(NARROWEST, cell_len(c)) for c in self.columns]
        excess = sum(widths) + GAP * (len(widths) - 1) - width
        while excess > 0:
            narrowable = [i for i in range(1, len(widths)) if widths[i] > floors[i]]
            if not narrowable:
                break
            widths[max(narrowable, key=lambda n: widths[n])] -= 1
            excess -= 1
        self._fit = ((width, self._filled), widths)
        return widths

    def _line(self, cells: Sequence[Cell], width: int) -> Text:
        line = Text(no_wrap=True, overflow="crop", end="")
        widths = self._fitted(width)
        last = len(widths) - 1
        for i, cell in enumerate(cells):
            w = max(0, width - line.cell_len) if i == last else widths[i]
            text = cell.copy() if isinstance(cell, Text) else Text(cell)
            text.truncate(w, overflow=self._cut, pad=True)
            line.append_text(text)
            if i < last:
                line.append(" " * GAP)
        return line

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        if y == 0:
            style = self.line_style("board-table--header")
            text = self._line(self.columns, width)
            return Strip([Segment(text.plain, style)]).extend_cell_length(width, style).crop(0, width)
        index = int(self.scroll_offset.y) + y - 1
        if index >= len(self._rows):
            return Strip.blank(width, self.line_style())
        if index == self.cursor_row:
            base = self.line_style("board-table--cursor")
        else:
            base = self.line_style("board-table--stripe" if index % 2 else "")
        text = self._line(self._rows[index], width)
        segments = [Segment(seg.text, base + seg.style if seg.style else base) for seg in text.render(self.app.console)]
        return Strip(segments).extend_cell_length(width, base).crop(0, width)
