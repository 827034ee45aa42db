"""The nodes and queues screens' table (BoardTable): a cluster's thousand rows, a cursor kept on its row
through a refill, the keys and a click, and a cell's words shown as they are (never read as markup)."""

from __future__ import annotations

import asyncio

from rich.text import Text
from textual.app import App, ComposeResult
from tui_support import screen_lines, wait_for

from torchdeck.tui.widgets.board_table import BoardTable

COLUMNS = ("node", "state", "why")


class Board(App[None]):
    def __init__(self) -> None:
        super().__init__()
        self.highlighted: list[str] = []
        self.chosen: list[str] = []

    def compose(self) -> ComposeResult:
        yield BoardTable(COLUMNS, id="t")

    def on_board_table_row_highlighted(self, event: BoardTable.RowHighlighted) -> None:
        self.highlighted.append(event.key)

    def on_board_table_row_selected(self, event: BoardTable.RowSelected) -> None:
        self.chosen.append(event.key)


def rows(n: int, first: int = 0) -> dict[str, tuple[str | Text, ...]]:
    return {
        f"node-{i:04d}": (
            f"node-{i:04d}",
            Text("ready", style="green"),
            "[bold]taint[/bold] says [x]" if i == 3 else "",
        )
        for i in range(first, first + n)
    }


def test_a_thousand_rows_a_cursor_that_stays_on_its_row_and_words_shown_as_they_are():
    async def scenario():
        app = Board()
        async with app.run_test(size=(80, 12)) as pilot:
            table = app.query_one(BoardTable)
            table.focus()
            table.fill(rows(1000))
            await pilot.pause()
            assert table.row_count == 1000 and table.selected == "node-0000"
            assert table.get_row_at(3) == ["node-0003", "ready", "[bold]taint[/bold] says [x]"]
            drawn = screen_lines(app)
            assert "node  " in drawn.splitlines()[0]  # the header, first
            assert "[bold]taint[/bold] says [x]" in drawn  # a string is its words, not markup
            await pilot.press("down", "down", "down", "down", "down")
            assert table.selected == "node-0005"
            await pilot.press("pagedown")
            assert table.cursor_row > 5
            await pilot.press("end")
            assert table.selected == "node-0999"
            await wait_for(pilot, lambda: "node-0999" in screen_lines(app), what="the last row in sight")
            await pilot.press("home")
            assert table.selected == "node-0000"
            await pilot.press("down", "down")
            table.fill(rows(990, first=1))  # a refill, with the first row gone: the cursor stays on its row
            assert table.selected == "node-0002" and table.cursor_row == 1
            await pilot.press("end")
            table.fill(rows(5, first=900))  # fewer rows than the cursor's place, its row gone: the last row
            assert table.selected == "node-0904" and table.cursor_row == 4
            await pilot.press("enter")
            await pilot.pause()
            assert app.chosen == ["node-0904"]
            await pilot.press("home", "down", "down")
            table.fill({})
            assert table.row_count == 0 and table.selected is None
            table.fill(rows(3))
            assert table.selected == "node-0000"
            await pilot.press("enter")
            await pilot.pause()
            assert app.chosen == ["node-0904", "node-0000"]
            await pilot.click(BoardTable, offset=(2, 3))  # the third row: the cursor moves there
            await pilot.pause()
            assert table.selected == "node-0002" and app.highlighted[-1] == "node-0002"
            await pilot.click(BoardTable, offset=(2, 3))  # and a click on the cursor's row chooses it
            await pilot.pause()
            assert app.chosen == ["node-0904", "node-0000", "node-0002"]

    asyncio.run(scenario())
