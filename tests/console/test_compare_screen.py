"""The comparison in the console: runs marked on the runs screen (space) and compared (x), their
curves one line a run or a line a rank, the table's best marked, and its pictures at 80x24 and
120x40 (the recorded run and a failed run made from it, with a larger batch)."""

from __future__ import annotations

import asyncio

import pytest
from tui_support import COMPARED_RUN, RECORDED_RUN, FixedNodesBackend, compared_state, settings_for, wait_for

from torchdeck.tui.app import make_app
from torchdeck.tui.screens.compare import CompareScreen
from torchdeck.tui.screens.home import HomeScreen
from torchdeck.tui.widgets.loss_chart import LossChart

SIZES = {"80x24": (80, 24), "120x40": (120, 40)}


def app_for(tmp_path):
    state = compared_state(tmp_path)
    return make_app(settings_for(state, local_price_per_hour=0.40), FixedNodesBackend(state, local_price_per_hour=0.40))


async def compared(pilot, reads: int = 1) -> CompareScreen:
    await wait_for(
        pilot,
        lambda: isinstance(pilot.app.screen, CompareScreen) and pilot.app.screen.reads >= reads,
        what="the comparison",
    )
    chart = pilot.app.screen.query_one(LossChart)
    built = chart.builds
    # a chart of these curves, drawn at the size the widget has (one built before the layout settled is not shown)
    await wait_for(pilot, lambda: (chart.builds > built or chart.shown) and chart.drawn, what="its chart")
    await pilot.pause(0.3)
    return pilot.app.screen


def test_runs_marked_on_the_runs_screen_open_side_by_side(tmp_path):
    asyncio.run(marked_and_compared(tmp_path))


async def marked_and_compared(tmp_path):
    app = app_for(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen) and len(app.screen.statuses) == 2)
        await pilot.press("x")  # nothing marked: it says how
        await pilot.press("space")
        home = app.screen
        assert len(home.marked) == 1 and "1 marked" in str(home.query_one("#detail").render())
        await pilot.press("space", "x")
        screen = await compared(pilot)
        assert [r.status.run_id for r in screen.comparison.runs] == [COMPARED_RUN, RECORDED_RUN]
        rows = {r.name: r for r in screen.comparison.rows()}
        assert rows["state"].cells == ["failed", "succeeded"]
        assert rows["trainer.batch_size"].cells == ["256", "-"]
        assert rows["cost"].cells[1].startswith("$")  # this machine at $0.40 an hour
        chart = screen.query_one(LossChart)
        assert chart.title == "loss, ranks averaged" and set(chart.labels.values()) == {"050000", "044521"}

        await pilot.press("r")
        await compared(pilot, reads=2)
        assert chart.title == "loss per rank" and len(chart.labels) == 4
        assert sorted(chart.labels.values())[0] == "044521:r0"
        await pilot.press("v")
        await compared(pilot, reads=3)
        assert chart.title == "validation loss"
        await pilot.press("escape")
        assert isinstance(app.screen, HomeScreen)


@pytest.mark.parametrize("size", SIZES)
def test_comparison_picture(tmp_path, snap_compare, size):
    app = app_for(tmp_path)

    async def ready(pilot):
        app.push_screen(CompareScreen([RECORDED_RUN, COMPARED_RUN]))
        await compared(pilot)

    assert snap_compare(app, terminal_size=SIZES[size], run_before=ready)
