"""The monitor's loss chart, drawn by torchdeck itself (tui/widgets/loss_chart.py): what it shows,
read back from the lines it makes."""

from __future__ import annotations

import math
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from torchdeck.tui.widgets.loss_chart import build_chart


def text(strips) -> list[str]:
    return ["".join(segment.text for segment in strip) for strip in strips]


def plot_rows(lines: list[str]) -> list[str]:
    """The rows inside the frame, without the axis labels and the frame."""
    return [line.split("┤" if "┤" in line else "│", 1)[1][:-1] for line in lines[1:-3]]


def test_a_falling_loss_runs_from_the_top_left_to_the_bottom_right_with_its_axes():
    steps = list(range(1, 101))
    strips, drawn = build_chart({0: (steps, [2.0 - s / 100 for s in steps])}, 60, 14, "braille")
    lines = text(strips)
    assert drawn == 1 and len(lines) == 14 and {strip.cell_length for strip in strips} == {60}
    rows = plot_rows(lines)
    assert len(rows) == 10
    top, bottom = rows[0], rows[-1]
    assert top[0] != " " and bottom[-1] != " "  # the first step at the top, the last at the bottom
    assert top.rstrip().endswith("r0")  # the legend
    assert all(" " == ch for ch in bottom[: len(bottom) // 2])  # nothing low early on
    labels = [float(line.split("┤")[0]) for line in lines[1:-3] if "┤" in line]
    assert labels[0] == 1.99 and labels[-1] == 1.0 and labels == sorted(labels, reverse=True)
    ticks = [int(t) for t in lines[-2].split()]
    assert len(ticks) == 5 and ticks[0] == 1 and ticks[-1] == 100 and ticks == sorted(ticks)
    assert lines[-1].strip() == "step"


def test_ranks_get_a_legend_and_colours_up_to_eight_and_none_past():
    steps = [1, 2, 3]
    eight = {r: (steps, [1.0 + r, 0.5 + r, 0.2 + r]) for r in range(8)}
    strips, drawn = build_chart(eight, 60, 16, "braille")
    lines = text(strips)
    assert drawn == 8
    assert [re.search(r"⢕⢕ (r\d+) ", line)[1] for line in lines[1:9]] == [f"r{r}" for r in range(8)]
    colours = {seg.style.color.name for strip in strips for seg in strip if seg.style and seg.style.color}
    assert len(colours) >= 8
    strips, drawn = build_chart({r: (steps, [1.0, 0.5, 0.2]) for r in range(9)}, 60, 16, "braille")
    assert drawn == 9 and not any(" r0" in line for line in text(strips))


def test_a_diverged_loss_is_left_out_and_the_axes_stay_readable():
    steps = list(range(1, 11))
    loss = [2.0, 1.5, float("nan"), 1.2, float("inf"), 1.0, 0.9, float("-inf"), 0.8, 0.7]
    strips, drawn = build_chart({0: (steps, loss)}, 40, 10, "braille")
    lines = text(strips)
    assert drawn == 1
    labels = [float(line.split("┤")[0]) for line in lines if "┤" in line]
    assert labels and all(math.isfinite(v) for v in labels) and max(labels) == 2.0 and min(labels) == 0.7
    strips, drawn = build_chart({0: ([1, 2], [float("nan"), float("nan")])}, 40, 10, "braille")
    assert drawn == 0 and "waiting for the first step" in text(strips)[0]


def test_ascii_terminals_get_stars_and_no_box_drawing():
    steps = list(range(1, 51))
    strips, drawn = build_chart({0: (steps, [1 / s for s in steps]), 1: (steps, [2 / s for s in steps])}, 50, 12, "*")
    lines = text(strips)
    assert drawn == 2 and all(line.isascii() for line in lines)
    assert sum(line.count("*") for line in lines) > 50
    assert "** r0" in lines[0] and "** r1" in lines[1]
    assert all(line.isascii() for line in text(build_chart({}, 30, 6, "*")[0]))


def test_one_step_a_flat_loss_and_nothing_yet():
    for curves in ({0: ([5], [1.0])}, {0: ([1, 2, 3], [0.5, 0.5, 0.5])}):
        strips, drawn = build_chart(curves, 40, 8, "braille")
        assert drawn == 1 and len(strips) == 8
        assert any(ch not in " ⢕" and 0x2800 < ord(ch) <= 0x28FF for row in plot_rows(text(strips)) for ch in row)
    strips, drawn = build_chart({}, 40, 8, "braille")
    assert drawn == 0 and text(strips)[0].strip() == "waiting for the first step"


finite = st.floats(allow_nan=True, allow_infinity=True, width=32)


@settings(max_examples=150, deadline=None)
@given(
    curves=st.dictionaries(
        st.integers(0, 1023),
        st.lists(st.tuples(st.floats(-1e6, 1e9, allow_nan=False), finite), max_size=300),
        max_size=12,
    ),
    width=st.integers(8, 240),
    height=st.integers(5, 70),
    marker=st.sampled_from(["braille", "*"]),
)
def test_any_curves_fill_exactly_the_box_they_are_given(curves, width, height, marker):
    data = {rank: ([x for x, _ in sorted(points)], [y for _, y in sorted(points)]) for rank, points in curves.items()}
    strips, drawn = build_chart(data, width, height, marker)
    assert len(strips) == height
    assert {strip.cell_length for strip in strips} == {width}
    assert drawn <= len(data)
