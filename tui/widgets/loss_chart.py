"""Per-rank loss curves, drawn in braille dots (or ``*`` on an ASCII terminal).

The chart is drawn here rather than by a plotting library: plotext took 30-50 ms
of pure Python for a chart of eight ranks (a tenth of a core at two charts a
second, the monitor's largest cost on a cluster job); this takes a few. It is
still built in a worker thread from a snapshot of the curves, straight into
the lines the widget hands out, so frames keep coming while it is drawn."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from textual import work
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from ..glyphs import Glyphs
from .line_styles import LineStyles

Curves = Mapping[int, tuple[Sequence[float], Sequence[float]]]
"""Each rank's steps and losses: lists, or the monitor's ``array('d')`` buffers."""

PALETTE = tuple(
    Style(color=c)
    for c in ("bright_blue", "bright_green", "bright_red", "bright_cyan", "bright_magenta", "yellow", "white", "blue")
)
"""One colour per charted rank, in rank order (eight ranks at most are charted by default)."""
AXIS = Style(dim=True)
BRAILLE_BITS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))
"""The dot of a braille cell at (row, column) within its 4x2 grid."""
X_TICKS = 5


def _decimals(spacing: float) -> int:
    """Enough decimals that ticks ``spacing`` apart read differently."""
    if spacing <= 0 or not math.isfinite(spacing):
        return 2
    return max(0, min(6, 1 - math.floor(math.log10(spacing))))


def _segments(cells: list[str], colours: list[int]) -> list[Segment]:
    """One row of the plot as runs of one colour (-1: blank)."""
    out: list[Segment] = []
    start = 0
    for i in range(1, len(cells) + 1):
        if i == len(cells) or colours[i] != colours[start]:
            text = "".join(cells[start:i])
            c = colours[start]
            out.append(Segment(text, PALETTE[c % len(PALETTE)] if c >= 0 else None))
            start = i
    return out


def build_chart(
    curves: Curves, width: int, height: int, marker: str, names: Mapping[int, str] | None = None
) -> tuple[list[Strip], int]:
    """The chart as ``height`` lines of ``width`` cells, and how many curves it shows. Loss on
    the left axis, step along the bottom; a legend in the corner for up to eight curves, each
    named by ``names`` (a comparison's runs) or as its rank. Points that are not finite (a
    diverged loss) are left out."""
    braille = marker == "braille"
    points = _finite_points(curves, max(16, 2 * width))  # no more points than there are dots across
    if not points:
        return _empty(width, height, braille), 0
    x_lo, x_hi, y_lo, y_hi = _ranges(points)
    rows = max(1, height - (4 if braille else 2))  # frame above and below, tick labels, "step"
    tick_rows = set(range(0, rows, 2 if rows > 6 else 1)) | {rows - 1}
    decimals = _decimals((y_hi - y_lo) * (2 if rows > 6 else 1) / max(1, rows - 1))
    y_labels = [f"{y_hi - (y_hi - y_lo) * r / max(1, rows - 1):.{decimals}f}" for r in range(rows)]
    label_w = max(len(t) for t in y_labels)
    cols = max(1, width - label_w - (2 if braille else 1))
    bits, colour = _plot(points, rows, cols, (x_lo, x_hi, y_lo, y_hi), braille)
    legend = len(points) <= 8
    lines: list[list[Segment]] = []
    pad = " " * label_w
    if braille:
        lines.append([Segment(pad + "┌" + "─" * cols + "┐", AXIS)])
    for r in range(rows):
        cells = [chr(0x2800 + b) if b else " " for b in bits[r]] if braille else ["*" if b else " " for b in bits[r]]
        row_colour = colour[r]
        if legend and r < len(points):
            name = names.get(points[r][0], f"r{points[r][0]}") if names else f"r{points[r][0]}"
            key = ("⢕⢕ " if braille else "** ") + f"{name} "  # a blank after: apart from a curve
            for i, ch in enumerate(key[: max(0, cols - 1)]):
                cells[1 + i] = ch
                row_colour[1 + i] = r if i < 2 else -1
        label = y_labels[r].rjust(label_w) if r in tick_rows else pad
        edge = ("┤" if r in tick_rows else "│") if braille else " "
        line = [Segment(label, AXIS)]
        if braille:
            line.append(Segment(edge, AXIS))
        line += _segments(cells, row_colour)
        if braille:
            line.append(Segment("│", AXIS))
        lines.append(line)
    lines += _step_axis(points, cols, x_lo, x_hi, pad, braille)
    return [Strip(line).adjust_cell_length(width) for line in lines[:height]], len(points)


Points = list[tuple[int, list[float], list[float]]]
"""Each charted curve: its rank, and its finite steps and losses."""


def _finite_points(curves: Curves, room: int) -> Points:
    """Each curve thinned to at most about ``room`` points, without the points that are not finite."""
    points: Points = []
    for rank, (xs, ys) in sorted(curves.items()):
        if len(xs) > room:
            stride = -(-len(xs) // room)
            xs, ys = [*xs[::stride], xs[-1]], [*ys[::stride], ys[-1]]
        kept = [(x, y) for x, y in zip(xs, ys) if math.isfinite(x) and math.isfinite(y)]
        if kept:
            points.append((rank, [x for x, _ in kept], [y for _, y in kept]))
    return points


def _ranges(points: Points) -> tuple[float, float, float, float]:
    """The steps' and losses' ranges (x_lo, x_hi, y_lo, y_hi), widened where they are one value."""
    x_lo = min(p[1][0] for p in points)
    x_hi = max(p[1][-1] for p in points)
    y_lo = min(min(p[2]) for p in points)
    y_hi = max(max(p[2]) for p in points)
    if y_hi == y_lo:  # a flat curve: a band around it (wide enough to show at any magnitude)
        band = max(0.5, abs(y_lo) * 0.01)
        y_lo, y_hi = y_lo - band, y_hi + band
    if x_hi == x_lo:
        band = max(1.0, abs(x_lo) * 0.01)
        x_lo, x_hi = x_lo - band, x_hi + band
    return x_lo, x_hi, y_lo, y_hi


def _plot(
    points: Points, rows: int, cols: int, ranges: tuple[float, float, float, float], braille: bool
) -> tuple[list[list[int]], list[list[int]]]:
    """The curves as dots joined by straight runs: each cell's dot bits, and the curve that colours it."""
    x_lo, x_hi, y_lo, y_hi = ranges
    dots_x, dots_y = (2, 4) if braille else (1, 1)
    gx, gy = cols * dots_x, rows * dots_y
    bits = [[0] * cols for _ in range(rows)]
    colour = [[-1] * cols for _ in range(rows)]
    x_span, y_span = x_hi - x_lo, y_hi - y_lo
    sx = (gx - 1) / x_span if math.isfinite(x_span) else 0.0  # beyond a float's range: all at one edge
    sy = (gy - 1) / y_span if math.isfinite(y_span) else 0.0
    for n, (_rank, xs, ys) in enumerate(points):
        px = [round((x - x_lo) * sx) for x in xs]
        py = [round((y_hi - y) * sy) for y in ys]
        dots = {(px[0], py[0])}
        for i in range(1, len(px)):
            x0, y0, x1, y1 = px[i - 1], py[i - 1], px[i], py[i]
            steps = max(abs(x1 - x0), abs(y1 - y0))
            for k in range(1, steps + 1):
                dots.add((x0 + (x1 - x0) * k // steps, y0 + (y1 - y0) * k // steps))
        for dx, dy in dots:
            r, c = dy // dots_y, dx // dots_x
            bits[r][c] |= BRAILLE_BITS[dy % 4][dx % 2] if braille else 1
            colour[r][c] = n
    return bits, colour


def _step_axis(points: Points, cols: int, x_lo: float, x_hi: float, pad: str, braille: bool) -> list[list[Segment]]:
    """The bottom: the frame's edge with its ticks (braille), the steps at the ticks, and "step"."""
    lines: list[list[Segment]] = []
    frame_w = cols + (2 if braille else 1)
    ticks = [round(i * (cols - 1) / (X_TICKS - 1)) for i in range(X_TICKS)] if cols >= 20 else [0, cols - 1]
    step_decimals = 0 if all(float(x).is_integer() for p in points for x in p[1][:1] + p[1][-1:]) else 1
    if braille:
        bottom = ["─"] * cols
        for t in ticks:
            bottom[t] = "┬"
        lines.append([Segment(pad + "└" + "".join(bottom) + "┘", AXIS)])
    labels = [" "] * frame_w
    offset = 1
    said: set[str] = set()
    for i, t in enumerate(ticks):
        text = f"{x_lo + (x_hi - x_lo) * t / max(1, cols - 1):.{step_decimals}f}"
        if text in said:
            continue  # a short run: ticks closer than one step
        said.add(text)
        start = max(0, min(frame_w - len(text), offset + t - (len(text) // 2 if 0 < i < len(ticks) - 1 else 0)))
        if i == len(ticks) - 1:
            start = max(0, min(frame_w - len(text), offset + t - len(text) + 1))
        if all(c == " " for c in labels[max(0, start - 1) : start + len(text) + 1]):
            labels[start : start + len(text)] = text
    lines.append([Segment(pad + "".join(labels), AXIS)])
    lines.append([Segment(pad + "step".center(frame_w), AXIS)])
    return lines


def _empty(width: int, height: int, braille: bool) -> list[Strip]:
    """The frame with its title, before the first step."""
    title = "waiting for the first step".center(width)[:width]
    lines = [Strip([Segment(title, AXIS)])]
    inner = max(0, height - 3)
    if braille:
        lines.append(Strip([Segment("┌" + "─" * (width - 2) + "┐", AXIS)]))
        lines += [Strip([Segment("│" + " " * (width - 2) + "│", AXIS)]) for _ in range(max(0, inner - 1))]
        lines.append(Strip([Segment("└" + "─" * (width - 2) + "┘", AXIS)]))
    else:
        lines += [Strip.blank(width) for _ in range(inner + 1)]
    lines.append(Strip([Segment("step".center(width), AXIS)]))
    return [line.adjust_cell_length(width) for line in lines[:height]]


class LossChart(LineStyles, Widget):
    """Loss against step, one line per shown rank."""

    @dataclass
    class Built(Message):
        strips: list[Strip]
        drawn: int
        size: tuple[int, int]

    DEFAULT_CSS = """
    LossChart { width: 1fr; height: 1fr; min-height: 6; }
    """

    def __init__(
        self, glyphs: Glyphs, *, name: str | None = None, id: str | None = None, classes: str | None = None
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.glyphs = glyphs
        self.shown = 0
        self.total = 0
        self.picked = False
        """Whether the ranks drawn are the user's choice (the title says so)."""
        self.builds = 0
        """Charts drawn so far (tests wait on it)."""
        self._wanted: tuple[Curves, int, int] = ({}, 0, 0)
        """The curves and the size the next build draws. The worker reads them from here rather
        than taking them as arguments: Textual keeps a finished worker's arguments until the cyclic
        garbage collector frees the worker, and those were 6,400 floats a chart, twice a second."""
        self._chart_strips: list[Strip] | None = None
        self._chart_size: tuple[int, int] = (0, 0)
        self.labels: dict[int, str] = {}
        """Names of the curves in the legend (a comparison's runs); empty: ranks, ``r0``..."""
        self.title = "loss per rank"

    def on_mount(self) -> None:
        self.show({}, 0)

    def show(self, curves: Curves, total_ranks: int) -> None:
        """Draw these curves (in the background; the old chart stays until then)."""
        self.total = total_ranks
        self._wanted = (curves, self.size.width, self.size.height)
        self._build()

    @work(thread=True, exclusive=True, group="chart", exit_on_error=False)
    def _build(self) -> None:
        curves, width, height = self._wanted
        if width < 8 or height < 4:
            return
        strips, drawn = build_chart(curves, width, height, self.glyphs.plot_marker, self.labels)
        self.post_message(self.Built(strips, drawn, (width, height)))

    def on_loss_chart_built(self, message: Built) -> None:
        message.stop()
        self._chart_strips, self._chart_size, self.shown = message.strips, message.size, message.drawn
        self.builds += 1
        more = ""
        if self.picked:
            more = f" ({self.shown} of {self.total}, picked)"
        elif self.total > self.shown:
            more = f" ({self.shown} of {self.total}; c picks)"
        self.border_title = f"{self.title}{more}"
        self.refresh()

    @property
    def drawn(self) -> bool:
        """Whether a chart is drawn for the widget's size now (after a resize, the old one is not shown)."""
        return self._chart_strips is not None and self._chart_size == (self.size.width, self.size.height)

    def on_resize(self) -> None:
        self.show(self._wanted[0], self.total)

    def render_line(self, y: int) -> Strip:
        strips = self._chart_strips
        if strips is None or self._chart_size != (self.size.width, self.size.height) or y >= len(strips):
            return Strip.blank(self.size.width, self.line_style())
        return strips[y].apply_style(self.line_style())
