"""Per-rank loss curves, drawn by plotext (textual-plotext's ``Plot``).

Building a plotext figure is the costliest thing on the monitor (tens of
milliseconds of pure Python for a large plot), so the figure is built and
cut into lines in a worker thread from a snapshot of the curves, and the
widget only hands out the finished lines: frames keep coming while a chart
is being drawn. (textual-plotext's own widget builds the figure in
``render``, on the event loop, which is why this is a plain Widget.)"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.text import Text
from textual import work
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget
from textual_plotext.plot import Plot

from ..glyphs import Glyphs

Curves = dict[int, tuple[list[float], list[float]]]


def build_chart(curves: Curves, width: int, height: int, marker: str) -> tuple[Text, int]:
    """The chart as styled text, and how many curves it shows."""
    plt = Plot()
    plt.theme("clear")  # the widget's own background shows through
    if marker == "*":
        plt.frame(False)
    drawn = 0
    room = max(16, 2 * width)  # no more points than there are dots across
    for rank, (xs, ys) in sorted(curves.items()):
        if len(xs) > room:
            stride = -(-len(xs) // room)
            xs, ys = xs[::stride] + xs[-1:], ys[::stride] + ys[-1:]
        if xs:
            plt.plot(xs, ys, marker=marker, label=f"r{rank}" if len(curves) <= 8 else None)
            drawn += 1
    if not drawn:
        plt.title("waiting for the first step")
    plt.xlabel("step")
    plt.plotsize(width, height)
    plt._set_size(width, height)
    return Text.from_ansi(plt.build(), no_wrap=True), drawn


class LossChart(Widget):
    """Loss against step, one line per shown rank."""

    @dataclass
    class Built(Message):
        strips: list[Strip]
        drawn: int
        size: tuple[int, int]

    DEFAULT_CSS = """
    LossChart { width: 1fr; height: 1fr; min-height: 6; }
    """

    def __init__(self, glyphs: Glyphs, **kwargs):
        super().__init__(**kwargs)
        self.glyphs = glyphs
        self.shown = 0
        self.total = 0
        self.picked = False
        """Whether the ranks drawn are the user's choice (the title says so)."""
        self.builds = 0
        """Charts drawn so far (tests wait on it)."""
        self._chart_curves: Curves = {}
        self._chart_strips: list[Strip] | None = None
        self._chart_console = Console(width=200, color_system="truecolor", force_terminal=True, legacy_windows=False)
        self._chart_size: tuple[int, int] = (0, 0)

    def on_mount(self) -> None:
        self.show({}, 0)

    def show(self, curves: Curves, total_ranks: int) -> None:
        """Draw these curves (in the background; the old chart stays until then)."""
        self._chart_curves, self.total = curves, total_ranks
        self._build(curves, self.size.width, self.size.height)

    @work(thread=True, exclusive=True, group="chart", exit_on_error=False)
    def _build(self, curves: Curves, width: int, height: int) -> None:
        if width < 8 or height < 4:
            return
        text, drawn = build_chart(curves, width, height, self.glyphs.plot_marker)
        # Cut into lines here too, so that the event loop only copies them out.
        lines = self._chart_console.render_lines(
            text, self._chart_console.options.update_dimensions(width, height), pad=True
        )
        self.post_message(self.Built([Strip(line, width) for line in lines], drawn, (width, height)))

    def on_loss_chart_built(self, message: Built) -> None:
        message.stop()
        self._chart_strips, self._chart_size, self.shown = message.strips, message.size, message.drawn
        self.builds += 1
        more = ""
        if self.picked:
            more = f" ({self.shown} of {self.total}, picked)"
        elif self.total > self.shown:
            more = f" ({self.shown} of {self.total}; c picks)"
        self.border_title = f"loss per rank{more}"
        self.refresh()

    def on_resize(self) -> None:
        self._build(self._chart_curves, self.size.width, self.size.height)

    def render_line(self, y: int) -> Strip:
        strips = self._chart_strips
        if strips is None or self._chart_size != (self.size.width, self.size.height) or y >= len(strips):
            return Strip.blank(self.size.width, self.rich_style)
        return strips[y].apply_style(self.rich_style)
