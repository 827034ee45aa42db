"""The comparison screen: marked runs side by side. Their loss curves overlaid (one line a run,
its ranks averaged; ``r`` each rank; ``v`` the validation losses), and a table of how each did and
what differs in their specs, the best of a row in bold green. Running runs keep updating: each is
followed in a worker of its own, and the screen redraws once a second at most."""

from __future__ import annotations

import threading
import time

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Static

from torchdeck.backends.run_digest import DigestStore, fold_run
from torchdeck.monitor.compare import ComparedRun, Comparison, load_run, unique_best
from torchdeck.monitor.state import CHART_RANKS

from ..messages import RunsCompared
from ..widgets.loss_chart import LossChart
from .base import DeckScreen

VIEWS = ("mean", "ranks", "val")
TITLES = {"mean": "loss, ranks averaged", "ranks": "loss per rank", "val": "validation loss"}


class CompareScreen(DeckScreen[None]):
    CSS_PATH = "compare.tcss"
    BINDINGS = [
        Binding("r", "view('ranks')", "Per rank"),
        Binding("a", "view('mean')", "Averaged"),
        Binding("v", "view('val')", "Val loss"),
        Binding("escape", "app.pop_screen", "Back"),
        Binding("question_mark", "app.help", "Help"),
    ]

    def __init__(self, run_ids: list[str]):
        super().__init__()
        self.run_ids = run_ids
        self.comparison: Comparison | None = None
        self.view = "mean"
        self.fold_lock = threading.Lock()
        """Held while a follower folds events into a digest and while the screen reads them."""
        self.versions: tuple[int, ...] = ()
        self.reads = 0
        """Comparisons drawn so far (tests wait on it)."""

    def compose(self) -> ComposeResult:
        yield Static(f"comparing {len(self.run_ids)} runs...", id="compare-title")
        yield LossChart(self.app.glyphs, id="compare-chart")
        yield DataTable(id="compare-table", cursor_type="row", zebra_stripes=True)
        yield Static(id="compare-recovered")  # each recovery inside a run, a line each
        yield self.app.footer()

    def on_mount(self) -> None:
        self.load()
        self.set_interval(1.0, self._redraw_if_grown)
        self.set_interval(5.0, self._restatus)

    @work(thread=True, exclusive=True, group="compare", exit_on_error=False)
    def load(self) -> None:
        backend, store = self.app.backend, DigestStore(self.app.settings.state_dir)
        runs = [load_run(backend, store, run_id, live=True) for run_id in self.run_ids]
        self.comparison = Comparison(runs)
        for run in runs:
            if not run.status.state.is_terminal:
                self.follow(run)
        self.post_message(self._read())

    @work(thread=True, group="compare-follow", exit_on_error=False)
    def follow(self, run: ComparedRun) -> None:
        fold_run(self.app.backend, run.status.run_id, run.digest, follow=True, lock=self.fold_lock)

    def _read(self) -> RunsCompared:
        """The comparison as drawn now (under the lock: followers may be folding into it)."""
        comparison = self.comparison
        assert comparison is not None
        with self.fold_lock:
            comparison.now = time.time()  # a running run's wall time: until now
            self.versions = tuple(r.digest.events for r in comparison.runs)
            rows = comparison.rows()
            recovered = comparison.recovery_lines()
            if self.view == "ranks":
                curves, names = comparison.rank_curves(CHART_RANKS)
                legend = dict(enumerate(names))
            else:
                curves = comparison.val_curves() if self.view == "val" else comparison.mean_curves()
                legend = {i: r.label for i, r in enumerate(comparison.runs)}
        running = sum(not r.status.state.is_terminal for r in comparison.runs)
        return RunsCompared([r.label for r in comparison.runs], rows, curves, legend, running, recovered)

    def _redraw_if_grown(self) -> None:
        comparison = self.comparison
        if comparison is not None and tuple(r.digest.events for r in comparison.runs) != self.versions:
            self.post_message(self._read())

    @work(thread=True, exclusive=True, group="compare-status", exit_on_error=False)
    def _restatus(self) -> None:
        """The running runs' states and costs, again (a run that ends keeps its last figures)."""
        comparison = self.comparison
        if comparison is None or all(r.status.state.is_terminal for r in comparison.runs):
            return
        for run in comparison.runs:
            if not run.status.state.is_terminal:
                run.status = self.app.backend.status(run.status.run_id)
        self.post_message(self._read())

    def on_runs_compared(self, message: RunsCompared) -> None:
        chart = self.query_one("#compare-chart", LossChart)
        chart.labels, chart.title = message.legend, TITLES[self.view]
        chart.show(message.curves, len(message.curves))
        table = self.query_one("#compare-table", DataTable)
        table.clear(columns=True)
        table.add_column("", key="name")
        for i, head in enumerate(message.heads):
            table.add_column(head, key=f"run{i}")
        for row in message.rows:
            best = unique_best(row)
            name = Text(row.name, style="italic" if row.spec else "bold")
            cells = [Text(c, style="bold green" if i == best else "") for i, c in enumerate(row.cells)]
            table.add_row(name, *cells)
        live = f"  {message.running} running: updating" if message.running else ""
        title = Text.assemble(
            ("compare ", "bold"), f"{len(message.heads)} runs{live}", ("  r: per rank  a: averaged  v: val loss", "dim")
        )
        self.query_one("#compare-title", Static).update(title)
        recovered = Text()
        for line in message.recovered:  # a run that came back inside itself: how
            recovered.append("\n" if recovered.plain else "")
            recovered.append("recovered ", style="bold yellow")
            recovered.append(line)
        pane = self.query_one("#compare-recovered", Static)
        pane.update(recovered)
        pane.set_class(bool(message.recovered), "-shown")
        self.reads += 1

    def action_view(self, view: str) -> None:
        if view in VIEWS and self.comparison is not None:
            self.view = view
            self.post_message(self._read())
