"""The shared cluster beside the runs: the nodes screen (each node's room, use, training jobs and
why it is bad) and the queues screen (each ClusterQueue's usage, and every waiting workload in
order with Kueue's reason; the user's own marked). Both read every few seconds through the
backend's ``ClusterViews``; a backend without it says so on the screen. Enter on a job opens it in
the monitor (read-only where torchdeck did not make it)."""

from __future__ import annotations

import time

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from torchdeck.backends.capabilities import ClusterViews
from torchdeck.backends.views import NodesView, QueuesView, node_cells
from torchdeck.terminal import as_shown

from ..widgets.board_table import BoardTable, Cell
from .base import DeckScreen

REFRESH_S = 5.0
"""How often the views are read again: each is a few list requests, whatever the cluster's size."""


class BoardScreen(DeckScreen[None]):
    """What the nodes and queues screens share: a title, a summary, a table, a detail line."""

    CSS_PATH = "board.tcss"
    BINDINGS = [
        Binding("enter", "open", "Monitor"),
        Binding("r", "refresh", "Refresh"),
        Binding("escape", "app.pop_screen", "Back"),
        Binding("question_mark", "app.help", "Help"),
    ]
    TITLE_WORDS = ""
    COLUMNS: tuple[str, ...] = ()

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        """Whole views drawn so far (an early view of the nodes alone is not counted; tests wait on it)."""
        self.jobs: dict[str, str] = {}
        """Row key -> the job Enter opens ("" for none)."""

    def compose(self) -> ComposeResult:
        yield Static(Text.assemble((self.TITLE_WORDS, "bold"), ("  reading...", "dim")), id="board-title")
        yield Static(id="board-summary")
        yield BoardTable(self.COLUMNS, ascii_only=self.app.settings.ascii, id="board-table")
        yield Static(id="board-detail")
        yield self.app.footer()

    def on_mount(self) -> None:
        views = self.app.backend.capability(ClusterViews)
        if views is None:  # a screen that cannot do its job says why
            self.query_one("#board-title", Static).update(
                Text.assemble(
                    (self.TITLE_WORDS, "bold"),
                    f"  {ClusterViews.what} are not the {self.app.backend_name} backend's",
                    (f"\n{ClusterViews.elsewhere}", "dim"),
                )
            )
            return
        self.query_one("#board-table", BoardTable).focus()
        # once the first frame is drawn: the read's thread (megabytes of JSON on 1,000 nodes) would
        # hold the interpreter that frame is drawn with, and the screen would open a second late
        self.call_after_refresh(self.read)
        self.set_interval(REFRESH_S, self.read)

    @work(thread=True, exclusive=True, group="board", exit_on_error=False)
    def read(self) -> None:
        views = self.app.backend.require(ClusterViews)
        self.app.call_from_thread(self.drawn, self.fetch(views))

    def drawn(self, view: NodesView | QueuesView) -> None:
        self.draw(view)
        self.reads += 1

    def fetch(self, views: ClusterViews) -> NodesView | QueuesView:
        raise NotImplementedError

    def draw(self, view: NodesView | QueuesView) -> None:
        raise NotImplementedError

    def fill(self, rows: dict[str, tuple[Cell, ...]]) -> None:
        """The table's rows, by key, the cursor kept on the same row where it is still there."""
        self.query_one("#board-table", BoardTable).fill(rows)

    def selected(self) -> str | None:
        return self.query_one("#board-table", BoardTable).selected

    def action_refresh(self) -> None:
        self.read()

    def action_open(self) -> None:
        job = self.jobs.get(self.selected() or "", "")
        if job:
            self.app.open_monitor(job)
        elif not self.reads:  # the nodes alone so far: which jobs are on them is still being read
            self.notify("still reading which training jobs are on it", severity="warning")
        else:
            self.notify("no training job on this row", severity="warning")

    def on_board_table_row_selected(self, event: BoardTable.RowSelected) -> None:
        self.action_open()

    def on_board_table_row_highlighted(self, event: BoardTable.RowHighlighted) -> None:
        self.show_detail()

    def show_detail(self) -> None:
        pass

    def notes(self, notes: tuple[str, ...]) -> str:
        return "\n".join(f"note: {n}" for n in notes)


class NodesScreen(BoardScreen):
    TITLE_WORDS = "nodes"
    COLUMNS = ("node", "state", "cpu", "memory", "gpu", "pods", "training jobs", "why")

    def __init__(self) -> None:
        super().__init__()
        self.view = NodesView()

    def fetch(self, views: ClusterViews) -> NodesView:
        if self.reads:
            return views.nodes_view()
        # the first read: the nodes drawn as they come, a second before their pods on 1,000 nodes
        return views.nodes_view(early=lambda view: self.app.call_from_thread(self.draw_early, view))

    def draw_early(self, view: NodesView) -> None:
        """The nodes alone, unless a whole view is drawn already (a read started after this one,
        by ``r`` or the timer, can end before it)."""
        if not self.reads:
            self.draw(view)

    def draw(self, view: NodesView | QueuesView) -> None:
        assert isinstance(view, NodesView)
        self.view = view
        ready = sum(1 for n in view.nodes if n.state == "ready")
        bad = [n for n in view.nodes if n.trouble]
        self.query_one("#board-title", Static).update(
            Text.assemble(
                ("nodes", "bold"),
                f"  {len(view.nodes)} in the cluster: {ready} ready, ",
                (f"{len(bad)} bad", "bold red" if bad else ""),
                (
                    "  cpu and memory: requested/allocatable (used now)" if view.pods_read else "  reading pods...",
                    "dim",
                ),
            )
        )
        self.query_one("#board-summary", Static).update(as_shown(self.notes(view.notes)))
        rows: dict[str, tuple[Cell, ...]] = {}
        for node, cells in zip(view.nodes, node_cells(view), strict=True):
            style = "bold red" if node.trouble else "green" if node.state == "ready" else "yellow"
            rows[node.name] = (cells[0], Text(cells[1], style=style), *(as_shown(c) for c in cells[2:]))
            self.jobs[node.name] = node.jobs[0] if node.jobs else ""
        self.fill(rows)
        self.show_detail()

    def show_detail(self) -> None:
        node = next((n for n in self.view.nodes if n.name == self.selected()), None)
        detail = self.query_one("#board-detail", Static)
        if node is None:
            detail.update("")
            return
        text = Text()
        text.append(node.name, style="bold")
        where = " ".join(w for w in (node.instance_type, node.zone) if w)
        text.append(f"  {where}" if where else "", style="dim")
        if node.trouble:
            text.append(f"\n{as_shown(node.trouble)}", style="red")
        if node.jobs:
            text.append(f"\ntraining jobs: {as_shown(', '.join(node.jobs))}")
            text.append("\nenter opens the first in the monitor", style="dim")
        detail.update(text)


class QueuesScreen(BoardScreen):
    TITLE_WORDS = "queues"
    COLUMNS = ("queue", "place", "training job", "local queue", "waited", "why it waits")

    def __init__(self) -> None:
        super().__init__()
        self.view = QueuesView()

    def fetch(self, views: ClusterViews) -> QueuesView:
        return views.queues_view()

    def draw(self, view: QueuesView | NodesView) -> None:

        assert isinstance(view, QueuesView)
        self.view = view
        waiting = sum(len(q.waiting) for q in view.queues)
        self.query_one("#board-title", Static).update(
            Text.assemble(
                ("queues", "bold"),
                f"  {len(view.queues)} ClusterQueues, {waiting} workloads waiting",
                (f"  order: {view.ordered_by}" if view.ordered_by else "", "dim"),
            )
        )
        summary = Text()
        for q in view.queues:
            summary.append(f"{q.name}", style="bold red" if q.stopped else "bold")
            summary.append(f" {q.admitted} admitted, {q.pending} waiting")
            summary.append(f", {q.preempted} preempted" if q.preempted else "")
            for u in q.usage[:3]:
                summary.append(f"  {u.resource} {u.shown(u.used)}/{u.shown(u.quota)}", style="dim")
            summary.append("\n")
        summary.append(self.notes(view.notes), style="yellow")
        self.query_one("#board-summary", Static).update(summary)
        now = time.time()
        rows: dict[str, tuple[Cell, ...]] = {}
        for q in view.queues:
            for w in q.waiting:
                key = f"{w.namespace}/{w.workload}"
                job = w.job or key
                rows[key] = (
                    q.name,
                    str(w.position),
                    Text(as_shown(job) + (" (yours)" if w.mine else ""), style="bold" if w.mine else ""),
                    as_shown(w.local_queue),
                    f"{(now - w.since) / 60:.0f} min" if w.since else "?",
                    as_shown(w.reason or "-"),
                )
                self.jobs[key] = w.job
        self.fill(rows)
        self.show_detail()

    def show_detail(self) -> None:
        key = self.selected() or ""
        found = [(q, w) for q in self.view.queues for w in q.waiting if f"{w.namespace}/{w.workload}" == key]
        detail = self.query_one("#board-detail", Static)
        if not found:
            detail.update("" if self.view.queues else "no ClusterQueue this identity may read")
            return
        queue, w = found[0]
        text = Text()
        text.append(as_shown(w.job or key), style="bold")
        text.append(f"  place {w.position} in {queue.name}, {w.position - 1} ahead of it, priority {w.priority}")
        if w.reason:
            text.append(f"\n{as_shown(w.reason)}", style="yellow")
        detail.update(text)
