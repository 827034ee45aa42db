"""Per-rank loss curves, drawn by plotext."""

from __future__ import annotations

from textual_plotext import PlotextPlot

from ..glyphs import Glyphs


class LossChart(PlotextPlot):
    """Loss against step, one line per shown rank."""

    DEFAULT_CSS = """
    LossChart { min-height: 6; }
    """

    def __init__(self, glyphs: Glyphs, **kwargs):
        super().__init__(**kwargs)
        self.glyphs = glyphs
        self.shown = 0
        self.total = 0

    def on_mount(self) -> None:
        self.show({}, 0)

    def show(self, curves: dict[int, tuple[list[float], list[float]]], total_ranks: int) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        if self.glyphs.plot_marker == "*":
            plt.frame(False)
        drawn = 0
        for rank, (xs, ys) in sorted(curves.items()):
            if xs:
                plt.plot(xs, ys, marker=self.glyphs.plot_marker, label=f"r{rank}" if len(curves) <= 8 else None)
                drawn += 1
        if not drawn:
            plt.title("waiting for the first step")
        plt.xlabel("step")
        self.shown, self.total = drawn, total_ranks
        more = f" ({drawn} of {total_ranks} ranks)" if total_ranks > drawn else ""
        self.border_title = f"loss per rank{more}"
        self.refresh()
