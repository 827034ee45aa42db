"""The monitor: one run, live. Workers follow the run's metric stream (folded
in a child process, see ``metric_feed``), its logs, its nodes and its
status; a self-paced timer draws what they gathered at a bounded rate,
however fast lines arrive."""

from __future__ import annotations

import contextlib
import time
from array import array
from collections.abc import Callable

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.timer import Timer
from textual.widgets import Static
from textual.worker import get_current_worker

from torchdeck.backends.base import Backend, JobState, JobStatus, NodeMetrics
from torchdeck.backends.capabilities import HangTriage, NodeMeasures
from torchdeck.backends.cost import dollars
from torchdeck.backends.triage import Triage
from torchdeck.monitor.feed import MetricFeed
from torchdeck.monitor.state import MonitorSnapshot, MonitorState, format_duration, quiet_words, unread_words

from ..glyphs import STATE_STYLE, bar
from ..messages import (
    LogsArrived,
    MetricsArrived,
    NodesMeasured,
    RunResumed,
    RunStopped,
    StatusChanged,
    TriageMade,
)
from ..widgets.log_pane import LogPane
from ..widgets.loss_chart import LossChart
from ..widgets.node_bars import NodeBars
from ..widgets.rank_table import RankTable
from .base import PACE, DeckScreen
from .confirm import ConfirmScreen, by_label

DRAW_EVERY_S = 0.25
"""The status lines, the rank table and the logs are drawn at most four times a second, on the
same frame, so that Textual's compositor makes one pass of them (5-6 ms on a 2-core host). Drawn
as they changed, the step counter on every 20 Hz frame and the logs on frames of their own, they
took twice as many passes: 0.03 of a core of the cluster monitor's 0.14, for numbers no one reads
twenty times a second."""
SNAPSHOT_EVERY_S = 0.1
"""The metric reader sends a snapshot at most ten times a second: more than twice the rate the
screen draws them, and each is pickled there and unpickled here (40 KB for 128 ranks)."""
CHART_EVERY_S = 0.5
"""The loss chart: twice a second."""
FRAMES_KEPT = 512
"""Frame start times kept for the benchmarks: 17 s at 30 Hz, and they read every 0.25 s."""


RETRY_TRIAGE_S = 30.0
"""A quiet spell whose triage failed is asked again this long after."""
STATUS_S = 2.0
"""The run's status is read again this often, or ``PACE`` times what the last read took where that
is longer. (Its nodes' figures are read again as often as the backend has new ones:
``NodeMeasures.every_s``.)"""


class MonitorScreen(DeckScreen[None]):
    CSS_PATH = "monitor.tcss"
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Runs"),
        Binding("s", "stop", "Stop"),
        Binding("l", "focus_logs", "Logs"),
        Binding("slash", "search", "Search"),
        Binding("c", "pick_ranks", "Chart"),
        Binding("t", "triage", "Triage"),
        Binding("r", "resume", "Resume"),
        Binding("question_mark", "app.help", "Help"),
    ]

    def __init__(self, run_id: str):
        super().__init__()
        self.run_id = run_id
        self.snap: MonitorSnapshot = MonitorState().snapshot()
        """The newest snapshot of the run's metrics."""
        self.status: JobStatus | None = None
        self._lost_shown = False
        """The pane says a node was lost under the run (it goes when the cluster no longer says so)."""
        self._recoveries_told: set[str] | None = None
        """The attempts after the first already said (a notice each; those before the monitor opened
        are not news: None until the first status)."""
        self.nodes: list[NodeMetrics] = []
        """The newest node figures (CPU, GPU, the ranks' processes)."""
        self.frame_times = array("d")
        """When each frame tick began, the last FRAMES_KEPT or more (the benchmark reads the
        intervals). Plain doubles: a float object a frame, each kept for minutes among the
        short-lived objects of every frame, would pin the allocator's arenas."""
        self.frames_drawn = 0
        self._logs_dirty = False
        self._chart_at = 0.0
        self._drawn_at = 0.0
        self._shown: dict[str, Text] = {}
        self._last_draw = 0.0
        self._dirty = True
        self._polls: dict[str, Timer] = {}
        """The timer of each poll's next read (``_again``)."""
        self.polled: dict[str, tuple[int, float]] = {}
        """Each poll's asks so far and the CPU seconds they took in their thread (what a benchmark
        reports of where the console's time goes)."""
        self._feed: MetricFeed | None = None
        self.picked: list[int] = []
        """The ranks the user asked the chart for ([]: the automatic choice)."""
        self.triage: Triage | None = None
        """The newest hang triage shown (asked here, or kept with the run)."""
        self._triaged_at: float | None = None
        """When this quiet spell was triaged by itself (None: not yet). Once a spell; again after
        ``RETRY_TRIAGE_S`` where it failed (on a cluster the ranks say where they are only after
        a minute on one line)."""
        self._triage_failed = False

    @property
    def backend(self) -> Backend:
        return self.app.backend

    def compose(self) -> ComposeResult:
        g = self.app.glyphs
        yield Static(id="status-line")
        yield Static(id="progress-line")
        yield Static(id="triage")
        yield Static(id="offer")
        with Horizontal(id="top"):
            yield LossChart(g, id="chart")
            with Vertical(id="side"):
                yield RankTable(id="ranks")
                yield Static(id="evals")
        yield NodeBars(g, id="nodes")
        yield LogPane(id="logs")
        yield self.app.footer()

    def on_mount(self) -> None:
        self.query_one("#chart").border_title = "loss per rank"
        self.query_one("#ranks").border_title = "ranks"
        self.query_one("#logs").border_title = "logs"
        self.query_one("#nodes").border_title = "nodes"
        self.follow_metrics()
        if not self.backend.logs_carry_metrics:
            self.follow_logs()  # else the metric reader sends the log lines too
        self.poll_status()
        self.measure_nodes()
        self._frame()

    # -- workers -----------------------------------------------------------------

    @work(thread=True, exclusive=True, group="metrics", exit_on_error=False)
    def follow_metrics(self, replay: bool = False) -> None:
        """The run's metrics, folded by the metric reader. ``replay``: the stream has been read
        once and ended, and is read again for another choice of charted ranks (its log lines
        are in the pane already)."""
        worker = get_current_worker()
        settings = self.app.settings
        with MetricFeed(
            self.backend,
            self.run_id,
            straggler_ratio=settings.straggler_ratio,
            period_s=max(1.0 / settings.refresh_hz, SNAPSHOT_EVERY_S),
        ) as feed:
            self._feed = feed
            if self.picked:
                feed.pick(self.picked)
            pane = self.query_one(LogPane)
            for snap in feed.snapshots():
                if worker.is_cancelled:
                    return
                lines = feed.take_lines()
                if lines and not replay:
                    pane.add_lines(lines)
                    self.post_message(LogsArrived(len(lines)))
                if snap is not None:
                    self.snap = snap
                    self.post_message(MetricsArrived(snap.events))
            self._feed = None  # the stream ended; a new choice of ranks reads it again

    @work(thread=True, exclusive=True, group="logs", exit_on_error=False)
    def follow_logs(self) -> None:
        worker = get_current_worker()
        pane = self.query_one(LogPane)
        for batch in self.backend.logs(self.run_id, follow=True):
            if worker.is_cancelled:
                return
            if batch:
                pane.add_lines(batch)
                self.post_message(LogsArrived(len(batch)))

    @work(thread=True, exclusive=True, group="nodes", exit_on_error=False)
    def measure_nodes(self) -> None:
        measures = self.backend.require(NodeMeasures)
        began = time.thread_time()
        try:
            self.post_message(NodesMeasured(measures.node_metrics(self.run_id)))
        finally:
            self._again("nodes", measures.every_s, time.thread_time() - began, self.measure_nodes)

    @work(thread=True, exclusive=True, group="status", exit_on_error=False)
    def poll_status(self) -> None:
        began = time.thread_time()
        try:
            self.post_message(StatusChanged(self.backend.status(self.run_id)))
        finally:
            self._again("status", STATUS_S, time.thread_time() - began, self.poll_status)

    def _again(self, poll: str, every_s: float, spent_s: float, ask: Callable[[], object]) -> None:
        """Ask again (from a worker's thread) in ``every_s``, or ``PACE`` times the CPU seconds the
        last ask took where that is longer: one timer a poll, whoever asked last."""

        def schedule() -> None:
            asked, spent = self.polled.get(poll, (0, 0.0))
            self.polled[poll] = (asked + 1, spent + spent_s)
            timer = self._polls.pop(poll, None)
            if timer is not None:
                timer.stop()
            self._polls[poll] = self.set_timer(max(every_s, PACE * spent_s), ask)

        with contextlib.suppress(RuntimeError):  # the console is closing
            self.app.call_from_thread(schedule)

    @work(thread=True, exclusive=True, group="triage", exit_on_error=False)
    def triage_run(self, auto: bool = False) -> None:
        """Ask the run's ranks where they are (``backend.triage``): by the key, or by itself once a
        quiet spell looks like a hang."""
        self.post_message(TriageMade(self.backend.require(HangTriage).triage(self.run_id), auto))

    @work(thread=True, exclusive=True, group="resume", exit_on_error=False)
    def resume_run(self, avoid: list[str], trust: bool) -> None:
        """Start the run that continues this one (``backend.resume``), kept off ``avoid``; ``trust``:
        the question said it was found by its label alone, and the user said yes."""
        run_id, _ = self.backend.resume(self.run_id, avoid, trust)
        self.post_message(RunResumed(run_id))

    @work(thread=True, exclusive=True, group="stop", exit_on_error=False)
    def stop_run(self, trust: bool) -> None:
        """Stop the run; ``trust``: the question said it was found by its label alone, and the user said yes."""
        self.post_message(RunStopped(self.backend.cancel(self.run_id, trust)))

    # -- messages ----------------------------------------------------------------

    def on_status_changed(self, message: StatusChanged) -> None:
        self.status = message.status
        self._dirty = True
        kept = message.status.triage
        if kept is not None and (self.triage is None or kept.time > self.triage.time):
            self.show_triage(kept)  # made elsewhere (torchdeck triage), or before this monitor opened
        told = self._recoveries_told
        for line in message.status.recovery:  # an attempt back in the run while the monitor is open: said once
            if told is not None and line not in told:
                self.notify(line, title="recovered", timeout=30)
        self._recoveries_told = (told or set()) | set(message.status.recovery)
        if message.status.state.is_terminal and message.status.bad_nodes:
            self.show_offer(message.status)
        elif message.status.bad_nodes or message.status.coming_back:
            self.show_lost(message.status)
        elif self._lost_shown:
            self._lost_shown = False
            self.query_one("#offer", Static).set_class(False, "-shown")

    def show_lost(self, status: JobStatus) -> None:
        """A node lost under the running run, as soon as the cluster says so: which, since when, the
        ranks it held (the pane goes when the cluster no longer says it)."""
        text = Text()
        if status.bad_nodes:
            text.append("node lost ", style="bold red")
            text.append("; ".join(f"{node}: {why}" for node, why in status.bad_nodes.items()))
        for line in status.coming_back:
            text.append("\n" if text.plain else "")
            text.append("coming back ", style="bold yellow")
            text.append(line)
        pane = self.query_one("#offer", Static)
        pane.update(text)
        pane.set_class(True, "-shown")
        self._lost_shown = True

    def show_offer(self, status: JobStatus) -> None:
        """A run that ended on nodes the cluster marks bad: which, why, and the resume that avoids them."""
        from torchdeck.backends.run_digest import restart_words

        nodes = "; ".join(f"{node}: {why}" for node, why in status.bad_nodes.items())
        text = Text()
        text.append(f"{status.state.value} on a bad node ", style="bold red")
        text.append(nodes)
        text.append("\nr resumes it on other nodes ", style="bold")
        text.append(restart_words(self.snap.step, self.snap.checkpoint_step))
        pane = self.query_one("#offer", Static)
        pane.update(text)
        pane.set_class(True, "-shown")

    def on_run_resumed(self, message: RunResumed) -> None:
        self.notify(f"{message.run_id} resumes {self.run_id}", title="resumed")
        self.app.switch_screen(MonitorScreen(message.run_id))

    def on_triage_made(self, message: TriageMade) -> None:
        self.show_triage(message.triage)
        if not message.auto:
            self.notify("the verdict is under the progress line", title="triage")

    def show_triage(self, triage: Triage) -> None:
        self.triage = triage
        self._triage_failed = False
        when = time.strftime("%H:%M:%S", time.localtime(triage.time))
        text = Text()
        text.append(f"triage {when} ", style="bold")
        text.append(triage.summary, style="bold red" if triage.outliers else "yellow")
        pane = self.query_one("#triage", Static)
        pane.update(text)
        pane.set_class(True, "-shown")

    def worker_failed(self, group: str, text: str) -> None:
        if group == "triage":  # said where the verdict goes (a cluster whose ranks have not said yet)
            self._triage_failed = True
            pane = self.query_one("#triage", Static)
            pane.update(Text(f"triage: {text}", style="yellow"))
            pane.set_class(True, "-shown")
            return
        super().worker_failed(group, text)

    def on_nodes_measured(self, message: NodesMeasured) -> None:
        self.nodes = message.nodes  # what the ranks are doing weighs a quiet spell (busy, or hung)
        nodes = self.query_one(NodeBars)
        nodes.show(message.nodes, self.size.width, self.snap.gpu_by_host)

    def on_run_stopped(self, message: RunStopped) -> None:
        self.status = message.status
        self._dirty = True
        self.notify(f"{self.run_id} {message.status.state.value}", title="stopped")

    def on_metrics_arrived(self, message: MetricsArrived) -> None:
        self._dirty = True  # drawn by the next frame, not now: see draw()

    def on_logs_arrived(self, message: LogsArrived) -> None:
        self._logs_dirty = True

    # -- drawing -----------------------------------------------------------------

    def _frame(self) -> None:
        """Draw, then come back one period after this frame began. (A plain
        interval timer drops a tick that is a little late, as ticks are when
        a worker thread holds the GIL, and the screen would stall for a
        whole period.)"""
        began = time.perf_counter()
        self.frame_times.append(began)
        if len(self.frame_times) > 2 * FRAMES_KEPT:
            del self.frame_times[:-FRAMES_KEPT]
        if self.draw():
            self.frames_drawn += 1
        period = 1.0 / self.app.settings.refresh_hz
        self.set_timer(max(0.002, period - (time.perf_counter() - began)), self._frame)

    def draw(self) -> bool:
        """One frame: fold in what arrived since the last drawing, at most every DRAW_EVERY_S.
        Skipped when nothing changed, except once a second for the clocks."""
        now = time.monotonic()
        if now - self._drawn_at < DRAW_EVERY_S:
            return False
        figures = self._dirty or now - self._last_draw >= 1.0
        if not (figures or self._logs_dirty):
            return False
        self._drawn_at = now
        if self._logs_dirty:
            self._logs_dirty = False
            self.query_one(LogPane).flush()
        if not figures:
            return True
        self._dirty = False
        self._last_draw = now
        snap = self.snap
        self._draw_status(snap)
        self._draw_evals(snap)
        self.query_one(RankTable).show(snap.ranks, snap.speed_unit)  # only its rows on screen are drawn
        if now - self._chart_at >= CHART_EVERY_S:  # built in a worker thread, drawn when done
            self._chart_at = now
            self.query_one(LossChart).show(snap.curves, len(snap.ranks))
        return True

    def draw_all(self) -> None:
        """Draw a whole frame now: the status, the evals, the chart and the rank table, whether they
        are due or not (a snapshot or a screenshot wants them all)."""
        now = time.monotonic()
        snap = self.snap
        self._dirty, self._last_draw = False, now
        self._chart_at = now
        self._draw_status(snap)
        self._draw_evals(snap)
        self.query_one(LossChart).show(snap.curves, len(snap.ranks))
        self.query_one(RankTable).show(snap.ranks, snap.speed_unit)

    def _show(self, selector: str, text: Text) -> None:
        """Update a line only when it reads differently: a repaint costs more than the comparison."""
        if self._shown.get(selector) != text:
            self._shown[selector] = text
            self.query_one(selector, Static).update(text, layout=False)

    def _draw_status(self, snap: MonitorSnapshot) -> None:
        g = self.app.glyphs
        if snap.quiet_s is None:  # written again: the next quiet spell is triaged anew
            self._triaged_at = None
        status = self.status
        state = status.state if status else JobState.UNKNOWN
        line = Text()
        line.append(f" {self.run_id} ", style="bold reverse")
        line.append(f" {state.value.upper()} ", style=STATE_STYLE[state])
        if status is not None and status.made_by:  # another's job: nothing here changes it
            line.append(f" READ-ONLY (made by {status.made_by}) ", style="bold yellow")
        epochs = f"{snap.epoch}/{snap.epochs}" if snap.epochs else str(snap.epoch)
        steps = f"{snap.step}/{snap.total_steps}" if snap.total_steps else str(snap.step)
        line.append(
            f" epoch {epochs}  step {steps}  ETA {format_duration(snap.eta_s)}  "
            f"restarts {max(snap.restarts, status.restarts if status else 0)}  world {snap.world_size}"
            + (f" of {snap.world_most}" if snap.world_most > snap.world_size else "")
        )
        cost = status.cost if status else None
        if cost is not None:  # the running total, and the budget's share where there is one
            share = cost.share
            style = "" if share is None else "bold red" if share >= 1 else "yellow" if share >= 0.8 else ""
            spent = cost.cell() if cost.amount is not None else "? (price unknown)"
            line.append(f"  cost {spent}" + (f" of {dollars(cost.budget)}" if cost.budget else ""), style=style)
        self._show("#status-line", line)
        progress = Text()
        fraction = 1.0 if state is JobState.SUCCEEDED else snap.fraction  # a run that said no total, done
        progress.append(bar(fraction, 20, g), style="green")
        progress.append(f" {fraction * 100:3.0f}% ")
        if snap.info:  # the built-in trainer says all of these; a user script's start only its name
            info = snap.info
            device = "/".join(str(info[k]) for k in ("device", "backend") if info.get(k))
            said = [str(v) for v in (info.get("model"), device, info.get("precision")) if v]
            progress.append(f" {' '.join(said)} ", style="dim")
        if status and status.reason and state is not JobState.RUNNING:
            progress.append(f" {g.warn} {status.reason}", style="bold red" if state is JobState.FAILED else "yellow")
        elif snap.quiet_s is not None:
            words, alarm = quiet_words(snap.quiet_s, self.nodes)
            progress.append(f" {g.warn} {words}", style="bold red" if alarm else "yellow")
            now = time.monotonic()
            due = self._triaged_at is None or (self._triage_failed and now - self._triaged_at >= RETRY_TRIAGE_S)
            if alarm and due and state is JobState.RUNNING:
                self._triaged_at = now  # which rank, which line, which collective: asked once a spell
                self._triage_failed = False
                self.triage_run(auto=True)
        elif state in (JobState.RUNNING, JobState.PENDING) and (unread := unread_words(snap, time.time())):
            progress.append(f" {g.warn} {unread}", style="yellow")
        elif snap.silent or snap.stragglers:
            parts = [f"rank {r} silent" for r in snap.silent] + [f"rank {r} slow" for r in snap.stragglers]
            progress.append(
                f" {g.warn} " + ", ".join(parts[:4]) + (" ..." if len(parts) > 4 else ""), style="bold yellow"
            )
        elif snap.errors:
            progress.append(f" {g.bad} {snap.errors[-1]}", style="bold red")
        self._show("#progress-line", progress)

    def _draw_evals(self, snap: MonitorSnapshot) -> None:
        text = Text()
        if snap.evals:
            best_epoch, best = max(snap.evals, key=lambda e: e[1])
            text.append(f"best {best * 100:.1f}% (epoch {best_epoch})\n", style="bold")
            text.append("  ".join(f"{e}:{a * 100:.1f}" for e, a in snap.evals[-12:]))
        if snap.val_losses:  # a script's validation or test loss: its own series, never the training loss
            epoch, last = snap.val_losses[-1]
            low = min(v for _, v in snap.val_losses)
            text.append(("\n" if snap.evals else "") + f"val loss {last:.4g}", style="bold")
            text.append((f" (epoch {epoch})" if epoch is not None else "") + f"  best {low:.4g}")
        if not snap.evals and not snap.val_losses:
            built_in = bool(snap.info.get("dataset"))
            text.append("eval accuracy: after the first epoch" if built_in else "no evaluation reported", style="dim")
        self._show("#evals", text)

    # -- actions -----------------------------------------------------------------

    def action_triage(self) -> None:
        if self.status and self.status.made_by:
            self.notify(
                f"{self.run_id} is not torchdeck's: shown read-only; a on the runs screen imports it",
                severity="warning",
            )
            return
        if self.status and self.status.state.is_terminal:
            self.notify(f"{self.run_id} has {self.status.state.value}: only a running run's ranks can be asked")
            return
        self.notify("asking every rank where it is...", title="triage")
        self.triage_run()

    def action_resume(self) -> None:
        if self.status and self.status.made_by:
            self.notify(
                f"{self.run_id} is not torchdeck's: shown read-only; a on the runs screen imports it",
                severity="warning",
            )
            return
        if not (self.status and self.status.state.is_terminal):
            self.notify(f"{self.run_id} is still running: a run is resumed once it has ended (s stops it)")
            return
        if self.status.state is JobState.SUCCEEDED:
            self.notify(f"{self.run_id} succeeded: there is nothing left to resume")
            return
        self.plan_resume(list(self.status.bad_nodes), self.status)

    @work(thread=True, exclusive=True, group="resume", exit_on_error=False)
    def plan_resume(self, avoid: list[str], status: JobStatus) -> None:
        """What resuming would submit (``backend.resume_spec``: the spec kept at submit, its code
        folder, kept off ``avoid``), to ask about it; a refusal is said as any worker's failure.
        ``status``: the run as the question will show it (found by label or not)."""
        from torchdeck.backends.run_digest import restart_words, resume_plan_lines

        spec = self.backend.resume_spec(self.run_id, avoid, status.found_by_label)  # nothing is made yet
        where = restart_words(self.snap.step, self.snap.checkpoint_step)
        lines = resume_plan_lines(spec, where) or [where]  # (a local run: its own folder and command)
        self.app.call_from_thread(self.ask_resume, avoid, lines, status)

    def ask_resume(self, avoid: list[str], plan: list[str], status: JobStatus) -> None:
        def confirmed(yes: bool | None) -> None:
            if yes:
                self.notify(f"resuming {self.run_id}...")
                self.resume_run(avoid, status.found_by_label)  # trusted only as the question said

        question = f"Resume {self.run_id}?\n" + "\n".join(plan) + by_label(status)
        self.app.push_screen(ConfirmScreen(question), confirmed)

    def action_stop(self) -> None:
        if self.status and self.status.made_by:
            self.notify(
                f"{self.run_id} is not torchdeck's: shown read-only; a on the runs screen imports it",
                severity="warning",
            )
            return
        if self.status and self.status.state.is_terminal:
            self.notify(f"{self.run_id} has already {self.status.state.value}")
            return

        status = self.status
        trust = bool(status and status.found_by_label)  # trusted only as the question says

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.notify(f"stopping {self.run_id}...")
                self.stop_run(trust)

        self.app.push_screen(
            ConfirmScreen(f"Stop {self.run_id} and every process it started?{by_label(status)}"), confirmed
        )

    def action_focus_logs(self) -> None:
        self.query_one("#log-rank").focus()

    def action_search(self) -> None:
        self.query_one("#log-search").focus()

    def action_pick_ranks(self) -> None:
        from .pick_ranks import PickRanksScreen

        def picked(ranks: list[int] | None) -> None:
            if ranks is None:
                return
            self.picked = ranks
            self.query_one(LossChart).picked = bool(ranks)
            if self._feed is not None:
                self._feed.pick(ranks)
            else:
                self.follow_metrics(replay=True)
            self.notify(f"charting ranks {', '.join(map(str, ranks))}" if ranks else "charting the automatic choice")

        self.app.push_screen(PickRanksScreen(self.picked), picked)
