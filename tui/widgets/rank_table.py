"""One row per rank: step, loss, samples/s and its flag (slow, silent, error), or where it has none
its relative straggler score (1.00: the fastest rank's pace).

A Line API widget rather than a DataTable: with hundreds of ranks whose
cells all change several times a second, DataTable's per-cell updates and
re-rendering cost tens of milliseconds a frame on the event loop. Here a
frame formats only the rows on screen (1,024 ranks' cells, made at each
snapshot, were most of what the table cost), each as a single line of text.
The header stays put while the rows scroll."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from torchdeck.monitor.state import RankRow

from .line_styles import LineStyles

COLUMNS = (("rank", 4), ("step", 6), ("loss", 6), ("img/s", 5), ("flag", 6))
WIDTH = sum(w for _, w in COLUMNS) + len(COLUMNS) - 1

FLAG_STYLE = {
    "SLOW": Style(color="yellow", bold=True),
    "SILENT": Style(color="red", bold=True),
    "ERROR": Style(color="red", bold=True),
    "done": Style(color="green"),
    "left": Style(dim=True),
}


def row_cells(row: RankRow) -> tuple[str, ...]:
    return (
        str(row.rank),
        str(row.step),
        "-" if row.loss is None else f"{row.loss:.4f}",
        "-" if row.samples_per_s is None else f"{row.samples_per_s:.0f}",
        row.flag.upper() if row.flag in ("slow", "silent", "error") else row.flag or score(row.relative),
    )


def score(relative: float | None) -> str:
    """A running rank's relative score (the fastest rank's pace over its own: 1.00 is the fastest)."""
    return "" if relative is None else f"{min(relative, 9.99):.2f}"


def _line(cells: tuple[str, ...]) -> str:
    """Numbers right-aligned under their headers, the flag left-aligned."""
    parts = [cell.rjust(width) if name != "flag" else cell.ljust(width) for (name, width), cell in zip(COLUMNS, cells)]
    return " ".join(parts)


def header(unit: str = "img/s") -> str:
    """The header line, with the speed column named for what the run counts (img/s, smp/s, it/s)."""
    names = [(unit if name == "img/s" else name, width) for name, width in COLUMNS]
    return " ".join(name.rjust(width) if name != "flag" else name.ljust(width) for name, width in names)


HEADER = header()


class RankTable(LineStyles, ScrollView, can_focus=True):
    """The ranks, scrolled with the arrow and page keys."""

    COMPONENT_CLASSES = {"rank-table--header", "rank-table--stripe"}
    DEFAULT_CSS = """
    RankTable { height: 1fr; scrollbar-size-vertical: 1; overflow-x: hidden; }
    RankTable > .rank-table--header { text-style: bold; color: $text-accent; }
    RankTable > .rank-table--stripe { background: $boost; }
    """

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._rows: list[RankRow] = []
        self._header = HEADER
        self.virtual_size = Size(WIDTH, 1)

    @property
    def row_count(self) -> int:
        return len(self._rows)

    def get_row_at(self, index: int) -> list[str]:
        """The cells of one row, as shown (rank, step, loss, img/s, flag)."""
        return list(row_cells(self._rows[index]))

    def show(self, rows: list[RankRow], unit: str = "img/s") -> None:
        """A snapshot's rows (a new one each time: its ranks' clocks moved)."""
        if rows is self._rows and self._header == header(unit):
            return
        self._header = header(unit)
        if len(rows) != len(self._rows):
            self.virtual_size = Size(WIDTH, len(rows) + 1)
        self._rows = rows
        self.refresh()

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        if y == 0:
            style = self.line_style("rank-table--header")
            return Strip([Segment(self._header, style)]).extend_cell_length(width, style).crop(0, width)
        index = int(self.scroll_offset.y) + y - 1
        if index >= len(self._rows):
            return Strip.blank(width, self.line_style())
        base = self.line_style("rank-table--stripe" if index % 2 else "")
        cells = row_cells(self._rows[index])
        text = _line(cells)
        flag = cells[-1]
        split = len(text) - COLUMNS[-1][1]
        segments = [Segment(text[:split], base)]
        segments.append(Segment(text[split:], base + FLAG_STYLE[flag] if flag in FLAG_STYLE else base))
        return Strip(segments).extend_cell_length(width, base).crop(0, width)
