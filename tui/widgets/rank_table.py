"""One row per rank: step, loss, samples/s and its flag (slow, silent, error)."""

from __future__ import annotations

from textual.widgets import DataTable

from ..monitor_state import RankRow

COLUMNS = (("rank", 4), ("step", 5), ("loss", 6), ("img/s", 5), ("flag", 6))


class RankTable(DataTable):
    """Cells are rewritten only when their text changes, so a frame with
    hundreds of ranks stays cheap."""

    DEFAULT_CSS = """
    RankTable { height: 1fr; }
    """

    def __init__(self, **kwargs):
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._cells: dict[int, tuple[str, ...]] = {}

    def on_mount(self) -> None:
        for name, width in COLUMNS:
            self.add_column(name, key=name, width=width)

    def show(self, rows: list[RankRow]) -> None:
        for row in rows:
            cells = (str(row.rank), str(row.step), "-" if row.loss is None else f"{row.loss:.4f}",
                     "-" if row.samples_per_s is None else f"{row.samples_per_s:.0f}",
                     row.flag.upper() if row.flag in ("slow", "silent", "error") else row.flag)
            old = self._cells.get(row.rank)
            if old is None:
                self.add_row(*cells, key=str(row.rank))
            elif old != cells:
                for (name, _), before, after in zip(COLUMNS, old, cells):
                    if before != after:
                        self.update_cell(str(row.rank), name, after)
            self._cells[row.rank] = cells
