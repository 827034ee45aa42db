"""The home screen: every run the backend knows, with its state, and the
way into the launch form and the monitor."""

from __future__ import annotations

import time
from time import monotonic, thread_time  # (the pace's clocks: the wall clock, time.time, is another)
from typing import TYPE_CHECKING

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from torchdeck.backends.states import JobState
from torchdeck.terminal import as_shown

from ..glyphs import STATE_STYLE
from ..widgets.key_line import KeyLine
from .base import PACE, DeckScreen, shown_path
from .confirm import ConfirmScreen, by_label

if TYPE_CHECKING:
    from textual.widgets import DataTable

    from torchdeck.backends.base import JobStatus
    from torchdeck.monitor.state import RowFilter

    from ..messages import LedgerRead, RunsListed, RunStopped

COLUMNS = ("run", "state", "ranks", "epoch", "step", "loss", "acc", "age", "cost")
PLACE_COLUMNS = ("run", "state", "where", "queue", "by", *COLUMNS[2:])
"""A cluster's jobs also say where each is, its queue and who made it."""


def _styled(column: int, cell: str, status: JobStatus) -> str | Text:
    return Text(cell, style=STATE_STYLE[status.state]) if column == 1 else cell


class HomeScreen(DeckScreen[None]):
    CSS_PATH = "home.tcss"
    BINDINGS = [
        Binding("n", "app.launch", "New"),
        Binding("enter", "open", "Monitor"),
        Binding("s", "stop", "Stop"),
        Binding("t", "test", "Test"),
        Binding("space", "mark", "Mark", show=False),  # the footer is full at 80 columns: x says how to mark
        Binding("x", "compare", "Diff"),  # "Compare" did not fit the footer at 80 columns
        Binding("c", "app.cluster", "Cluster"),
        Binding("v", "app.storage", "Storage"),
        Binding("i", "app.image", "Image"),
        Binding("r", "refresh", "Refresh", show=False),  # it lists every 2 s anyway
        Binding("slash", "filter", "Filter", show=False),
        Binding("o", "sort", "Sort", show=False),
        Binding("w", "queues", "Queues", show=False),
        Binding("m", "nodes", "Nodes", show=False),
        Binding("a", "adopt", "Import", show=False),
        Binding("question_mark", "app.help", "Help"),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.statuses: dict[str, JobStatus] = {}
        self.marked: list[str] = []
        """Runs marked (space) for a comparison (x), in the order marked."""
        self._shown: dict[str, tuple[str, ...]] = {}
        """Each row's cells as last drawn, in table order."""
        self._list_failure = ""
        """The last listing's failure, notified once."""
        self._list_again_at = 0.0
        """When the 2-s timer lists the runs again: ``PACE`` times the last listing's CPU after it
        (``r``, and coming back to the screen, list them at once)."""
        self._said_unseen: set[str] = set()
        """What the listings could not see, each notified once."""
        self.table: DataTable | None = None
        """The runs table, mounted with the first listing: the first frame is drawn without it (it
        was most of the time the frame took) and no listing could fill it sooner anyway."""
        self._widths: list[int] = []
        self.filter: RowFilter | None = None
        """Which rows show (``/``; None: every one; its module is read after the first frame)."""
        self.sort = "age"
        """Their order (``o`` goes round SORTS)."""
        self.listed: list[JobStatus] = []
        """The last listing, before the filter."""
        self.columns: tuple[str, ...] = COLUMNS
        """The columns' widths as last drawn: set here, as the widest cell, because Textual's
        own measuring (on idle) leaves rows drawn before it at the headers' widths."""

    def compose(self) -> ComposeResult:
        yield Static(id="title")
        yield Static(id="detail")
        yield Static(id="cloud")
        yield KeyLine(palette=not self.app.settings.ascii)  # Textual's footer costs the first frame its time

    def on_mount(self) -> None:
        self.query_one("#title", Static).update(
            Text.assemble(
                ("torchdeck", "bold"),
                f"  runs on the {self.app.backend_name} backend",
                ("  n: new job  ?: help", "dim"),
            )
        )
        self.query_one("#detail", Static).update("reading runs...")
        self.set_interval(2.0, self._list_if_shown)
        self.set_interval(5.0, self._read_if_shown)

    # Under another screen (the monitor, most often) the runs are not listed: Textual 8 counts
    # the screen just below the top as showing through (``is_current`` is true there), and each
    # update of it repaints the whole of the one on top; and on a cluster a listing is API calls.
    # Showing it (the first time too) lists them at once.
    def _list_if_shown(self) -> None:
        if self.app.screen is self and monotonic() >= self._list_again_at:
            self.list_runs()

    def _read_if_shown(self) -> None:
        if self.app.screen is self:
            self.read_ledger()

    def on_screen_resume(self) -> None:
        # after the screen is drawn: the workers' threads (the backend opening, its modules loading)
        # would hold the interpreter the first frame is drawn with
        self.call_after_refresh(self.list_runs)
        self.call_after_refresh(self.read_ledger)

    @work(thread=True, exclusive=True, group="ledger", exit_on_error=False)
    def read_ledger(self) -> None:
        from torchdeck.backends.ledger import Ledger

        from ..messages import LedgerRead

        ledger = Ledger(self.app.settings.state_dir)
        per_hour, so_far = ledger.costs()
        self.post_message(LedgerRead(ledger.resources(), per_hour, so_far))

    def on_ledger_read(self, message: LedgerRead) -> None:
        """What torchdeck made in the cloud: counted by kind, with its cost per hour and so far."""
        cloud = self.query_one("#cloud", Static)
        if not message.resources and not message.so_far:
            cloud.update("")
            cloud.set_class(False, "-shown")
            return
        counts: dict[str, int] = {}
        for r in message.resources:
            counts[r.kind] = counts.get(r.kind, 0) + 1
        clusters = sorted({r.scope for r in message.resources if r.kind == "eks-cluster"})
        text = Text()
        text.append("cloud ", style="bold")
        if message.resources:
            text.append(f"{len(message.resources)} resources" + (f" in {', '.join(clusters)}" if clusters else ""))
            text.append(f"  about ${message.per_hour:.3f}/h now", style="bold yellow" if message.per_hour else "")
        else:
            text.append("nothing exists now")
        text.append(f"  ${message.so_far:.2f} so far")
        if counts:
            text.append("\n" + ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())), style="dim")
            text.append("\ntorchdeck resources lists them; torchdeck cleanup tears them down", style="dim")
        cloud.update(text)
        cloud.set_class(True, "-shown")

    @work(thread=True, exclusive=True, group="runs", exit_on_error=False)
    def list_runs(self) -> None:
        from ..messages import RunsListed

        began = thread_time()
        self._list_again_at = float("inf")  # not again from the timer while this one lasts
        try:
            statuses = self.app.backend.list()
            self.post_message(RunsListed(statuses, self.app.backend.unseen()))
        finally:  # (every job of a cluster of 300 is a second's CPU on a slow host: not every 2 s)
            self._list_again_at = monotonic() + PACE * (thread_time() - began)

    @work(thread=True, exclusive=True, group="stop", exit_on_error=False)
    def stop_run(self, run_id: str, trust_label: bool = False) -> None:
        from ..messages import RunStopped

        self.post_message(RunStopped(self.app.backend.cancel(run_id, trust_label)))

    def worker_failed(self, group: str, text: str) -> None:
        """A listing that failed (a backend that cannot open, a cluster out of reach) is said where
        the run's detail goes, until a listing succeeds, and notified once, not every 2 s."""
        if group != "runs":
            super().worker_failed(group, text)
            return
        self.query_one("#detail", Static).update(
            Text.assemble(
                ("cannot list runs: ", "bold red"),
                as_shown(text),
                ("\nr tries again; c, v and i work without it", "dim"),
            )
        )
        if text != self._list_failure:
            self._list_failure = text
            super().worker_failed(group, text)

    async def on_runs_listed(self, message: RunsListed) -> None:
        if self.table is None:
            from textual.widgets import DataTable

            table: DataTable = DataTable(id="runs", cursor_type="row", zebra_stripes=True)
            await self.mount(table, before="#detail")
            self.table = table
            if self.app.screen is self:  # under another screen, Textual focuses it when this one is back
                table.focus()
        for line in message.unseen:  # said once each, not every 2 s
            if line not in self._said_unseen:
                self._said_unseen.add(line)
                self.notify(line, title="not visible here", timeout=10)
        self.listed = message.statuses
        self.draw_listed()

    def draw_listed(self) -> None:
        """The last listing through the filter, in the chosen order."""
        from torchdeck.monitor.state import SORTS

        if self.table is None:  # nothing listed yet: the first listing draws it
            return
        shown = sorted((s for s in self.listed if self.filter is None or self.filter.keeps(s)), key=SORTS[self.sort])
        placed = PLACE_COLUMNS if any(s.kind for s in self.listed) else COLUMNS
        if placed != self.columns:
            self.columns, self._shown = placed, {}
            keys = (
                "  n: new  w: queues  m: nodes  /: filter  ?: help"
                if placed is PLACE_COLUMNS
                else "  n: new job  ?: help"
            )
            self.query_one("#title", Static).update(
                Text.assemble(("torchdeck", "bold"), f"  runs on the {self.app.backend_name} backend", (keys, "dim"))
            )
        self.draw(shown)

    def draw(self, statuses: list[JobStatus]) -> None:
        """The table, as little redrawn as can be: with the same runs in the same order (most
        refreshes), only the cells that changed; with thousands of runs, a rebuild every 2 s
        held the screen for about 90 ms."""
        table = self.table
        assert table is not None
        current = self.selected()
        self.statuses = {s.run_id: s for s in statuses}
        now = time.time()
        self.marked = [r for r in self.marked if r in self.statuses]
        shown = {s.run_id: self._cells(s, now) for s in statuses}
        widths = [len(name) for name in self.columns]
        for cells in shown.values():
            widths = [max(w, len(cell)) for w, cell in zip(widths, cells, strict=True)]
        if list(shown) == list(self._shown) and table.row_count == len(shown) and widths == self._widths:
            for run_id, cells in shown.items():
                before = self._shown[run_id]
                for column, (old, new) in enumerate(zip(before, cells, strict=True)):
                    if old != new:
                        table.update_cell(run_id, self.columns[column], _styled(column, new, self.statuses[run_id]))
        else:
            table.clear(columns=True)
            for name, width in zip(self.columns, widths, strict=True):
                table.add_column(name, width=width, key=name)
            self._widths = widths
            for run_id, cells in shown.items():
                status = self.statuses[run_id]
                table.add_row(*(_styled(i, cell, status) for i, cell in enumerate(cells)), key=run_id)
            if current in self.statuses:
                table.move_cursor(row=table.get_row_index(current))
        self._shown = shown
        self._list_failure = ""
        self.show_detail()

    def _cells(self, status: JobStatus, now: float) -> tuple[str, ...]:
        from torchdeck.monitor.state import (
            place_cells,
            status_cells,  # with the first listing, after the first frame
        )

        cells = status_cells(status, now)
        mark = "+ " if status.run_id in self.marked else ""
        placed = place_cells(status) if len(self.columns) > len(COLUMNS) else ()
        return (mark + cells[0], cells[1], *placed, *cells[2:])

    def action_mark(self) -> None:
        """Mark the run under the cursor for a comparison, or unmark it."""
        run_id = self.selected()
        if run_id is None:
            return
        if run_id in self.marked:
            self.marked.remove(run_id)
        else:
            self.marked.append(run_id)
        table = self.table
        assert table is not None  # a run is selected
        cells = self._cells(self.statuses[run_id], time.time())
        if len(cells[0]) > self._widths[0]:  # the mark widens the column: drawn again whole
            self._shown = {}
            self.draw(list(self.statuses.values()))
        else:
            table.update_cell(run_id, self.columns[0], cells[0])
            self._shown[run_id] = cells
        table.action_cursor_down()
        self.show_detail()

    def action_compare(self) -> None:
        """The marked runs side by side (with the one under the cursor where only one is marked)."""
        runs = list(self.marked)
        current = self.selected()
        if len(runs) == 1 and current and current not in runs:
            runs.append(current)
        if len(runs) < 2:
            self.notify("mark two runs or more with space, then press x", severity="warning")
            return
        from .compare import CompareScreen

        self.app.push_screen(CompareScreen(runs))

    def on_run_stopped(self, message: RunStopped) -> None:
        self.notify(f"{message.status.run_id} {message.status.state.value}", title="stopped")
        self.list_runs()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.show_detail()

    def selected_status(self) -> JobStatus | None:
        return self.statuses.get(self.selected() or "")

    def action_test(self) -> None:
        status = self.selected_status()
        if status is None:
            return
        run_id = status.run_id
        if status.state is not JobState.SUCCEEDED:
            self.notify(
                f"{run_id} has not finished training ({status.state.value}); test it when it has", severity="warning"
            )
            return
        from .model_test import ModelTestScreen

        self.app.push_screen(ModelTestScreen(run_id))

    def selected(self) -> str | None:
        from textual.widgets.data_table import CellDoesNotExist

        table = self.table
        if table is None or not table.row_count:
            return None
        try:
            return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        except CellDoesNotExist:  # no row under the cursor
            return None

    def show_detail(self) -> None:
        detail = self.query_one("#detail", Static)
        run_id = self.selected()
        if not self.statuses:
            detail.update("No runs yet. Press n to launch a job; it starts from torchdeck.yaml if there is one.")
            return
        s = self.statuses.get(run_id or "")
        if s is None:
            detail.update("")
            return
        text = Text()
        text.append(f"{s.run_id}", style="bold")
        text.append(f"  {s.state.value}", style=STATE_STYLE[s.state])
        if s.restarts:
            text.append(f"  restarts {s.restarts}")
        if s.reason:
            text.append(f"\n{s.reason}", style="red" if s.state is JobState.FAILED else "")
        if s.hint:
            text.append(f"\nhint: {s.hint}", style="dim")
        text.append(f"\n{shown_path(s.location)}", style="dim")
        if s.cost is not None:
            text.append(f"\ncost: {as_shown(s.cost.words())}", style="dim")
        if self.marked:
            text.append(f"\n{len(self.marked)} marked for a comparison: x compares them", style="bold")
        elif len(self.statuses) > 1:
            text.append("\nspace marks runs to compare side by side (x)", style="dim")
        detail.update(text)

    def action_open(self) -> None:
        run_id = self.selected()
        if run_id:
            self.app.open_monitor(run_id)

    def action_refresh(self) -> None:
        self.list_runs()

    def action_filter(self) -> None:
        """Ask which rows to show: ``ns:NAME mine queue:NAME state:STATE`` (empty: all)."""
        from torchdeck.monitor.state import RowFilter

        from .confirm import AskScreen

        def given(text: str | None) -> None:
            if text is None:
                return
            try:
                self.filter = RowFilter.parse(text)
            except ValueError as exc:
                self.notify(str(exc), title="filter", severity="error")
                return
            self.draw_listed()
            self.notify(f"showing {self.filter.words() or 'every job'}", title="filter")

        question = "Show only (empty: every job): ns:NAME  mine  queue:NAME  state:STATE"
        self.app.push_screen(AskScreen(question, self.filter.words() if self.filter else ""), given)

    def action_sort(self) -> None:
        from torchdeck.monitor.state import SORTS

        order = list(SORTS)
        self.sort = order[(order.index(self.sort) + 1) % len(order)]
        self._shown = {}
        self.draw_listed()
        self.notify(f"sorted by {self.sort}", title="sort")

    def action_queues(self) -> None:
        from .board import QueuesScreen

        self.app.push_screen(QueuesScreen())

    def action_nodes(self) -> None:
        from .board import NodesScreen

        self.app.push_screen(NodesScreen())

    def action_adopt(self) -> None:
        """Make the job under the cursor, one torchdeck did not make, a run of torchdeck's (as
        ``torchdeck import KIND/NAMESPACE/NAME`` does), once the user says so."""
        from torchdeck.backends.capabilities import JobAdoption

        status = self.selected_status()
        if status is None:
            return
        if not status.made_by:
            self.notify(f"{status.run_id} is torchdeck's already", severity="warning")
            return
        if self.app.backend.capability(JobAdoption) is None:
            self.notify(f"{JobAdoption.what}: {JobAdoption.elsewhere}", severity="warning")
            return
        question = (
            f"Import {status.run_id} (made by {status.made_by}) as a run of torchdeck's?\n\ntorchdeck adds its "
            "labels and its spec to the job; the job's spec and pods stay as they are. It can then be stopped "
            "and resumed from here."
        )

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.adopt_job(status.run_id)

        self.app.push_screen(ConfirmScreen(question), confirmed)

    @work(thread=True, exclusive=True, group="import", exit_on_error=False)
    def adopt_job(self, ref: str) -> None:
        from torchdeck.backends.capabilities import JobAdoption
        from torchdeck.backends.errors import BackendError
        from torchdeck.backends.spec import KINDS

        key, namespace, name = ref.split("/")
        kind = next((k for k in KINDS if k == key), None)
        if kind is None:
            raise BackendError(f"{key} jobs are listed, not imported", "torchdeck import reads the kinds it runs")
        run_id = self.app.backend.require(JobAdoption).adopt(kind, name, namespace)[2]
        self.app.call_from_thread(self.notify, f"{ref} is now followed as run {run_id}", title="imported")
        self.list_runs()

    def action_stop(self) -> None:
        status = self.selected_status()
        if status is None:
            return
        run_id = status.run_id
        if status.state.is_terminal:
            self.notify(f"{run_id} has already {status.state.value}")
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.notify(f"stopping {run_id}...")
                self.stop_run(run_id, status.found_by_label)  # the question said so, and the user said yes

        self.app.push_screen(ConfirmScreen(f"Stop {run_id} and every process it started?{by_label(status)}"), confirmed)
