"""What the monitor knows about one run, built from its metric events:
per-rank progress and loss curves (downsampled, so memory stays bounded
however long the run), eval accuracy per epoch, throughput, restarts, an ETA,
and which ranks straggle or have gone quiet.

Plain Python, no Textual: the monitor screen draws ``snapshot()`` at a
bounded rate while a worker thread calls ``ingest()``; ``torchdeck train``
prints the same snapshot as text."""

from __future__ import annotations

import statistics
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from torchdeck.backends.base import JobState, JobStatus, MetricEvent, NodeMetrics
from torchdeck.backends.events import step_after
from torchdeck.backends.step_times import StepFigures, StepGaps, relative_scores
from torchdeck.terminal import printable

SILENT_FLOOR_S = 5.0
"""A rank is flagged silent after this long without a line, at least (or
five of its usual step intervals, if longer)."""


class Series:
    """A curve kept at most ``cap`` points long: points are averaged in runs
    of ``stride``, and the stride doubles (halving the stored points) when
    the curve fills up.

    The points are kept in ``array('d')`` buffers, not lists of floats: a run's
    curves live for hours while the lines they come from live for milliseconds,
    and a long-lived float in each of the allocator's pools kept those pools,
    and the memory around them, from ever being given back (the metric
    reader's memory crept up about 1 MB a minute). A snapshot's curves pickle as
    two buffers each, not 800 floats."""

    __slots__ = ("cap", "stride", "xs", "ys", "_sum", "_n", "_last_x")

    def __init__(self, cap: int = 400):
        self.cap, self.stride = cap, 1
        self.xs = array("d")
        self.ys = array("d")
        self._sum, self._n, self._last_x = 0.0, 0, 0.0

    def add(self, x: float, y: float) -> None:
        self._sum += y
        self._n += 1
        self._last_x = x
        if self._n < self.stride:
            return
        self.xs.append(x)
        self.ys.append(self._sum / self._n)
        self._sum, self._n = 0.0, 0
        if len(self.xs) >= self.cap:
            self.xs = self.xs[1::2]
            ys = self.ys
            self.ys = array("d", ((ys[i] + ys[i + 1]) / 2 for i in range(0, len(ys) - 1, 2)))
            self.stride *= 2

    def points(self) -> tuple[array, array]:
        """The stored points plus the partial run at the end (copies)."""
        xs, ys = array("d", self.xs), array("d", self.ys)
        if self._n:
            xs.append(self._last_x)
            ys.append(self._sum / self._n)
        return xs, ys


@dataclass
class RankView:
    """One rank, as of its latest line."""

    rank: int
    step: int = 0
    epoch: int = 0
    loss: float | None = None
    samples_per_s: float | None = None
    """Smoothed (exponential average) images per second."""
    steps_per_s: float | None = None
    """Smoothed steps (a progress bar's it/s) per second, where the rank says no samples/s."""
    last_time: float = 0.0
    """Trainer clock (unix s) of its latest line."""
    step_interval: float | None = None
    """Smoothed seconds between its step lines."""
    step_time: float | None = None
    """Trainer clock of its latest step line."""
    restarts: int = 0
    finished: bool = False
    error: str = ""
    host: str = ""
    gpu_util: float | None = None
    cpu_util: float | None = None
    """The rank's own CPU use, percent of a core, where its lines say (the built-in trainer's do)."""
    data_share: float | None = None
    """The part of each step spent waiting for the next batch (``data_s`` / ``step_s``), smoothed."""
    """GPU utilization (%) the rank itself reports (NVML in the trainer), as of its latest step."""
    loss_curve: Series = field(default_factory=Series)
    gaps: StepGaps = field(default_factory=StepGaps)
    """Its recent seconds per step: the straggler scores (``backends/step_times.py``)."""
    logged_loss: bool = False
    """A logger file gives this rank's training loss: the curve is the logger's."""


@dataclass
class RankRow:
    """One rank for display."""

    rank: int
    step: int
    epoch: int
    loss: float | None
    samples_per_s: float | None
    seen_ago_s: float
    flag: str
    """"", "slow", "silent", "error", "done" or "left" (a rank the run's newest attempt has no place
    for: an elastic run gone on with fewer ranks)."""
    detail: str = ""
    relative: float | None = None
    """The fastest rank's median seconds per step over this rank's (1.0: the fastest)."""
    individual: float | None = None
    """Its own best stretch over its newest (1.0: as fast as it has been)."""
    step_s_median: float | None = None
    step_s_p95: float | None = None


@dataclass
class MonitorSnapshot:
    """Everything a frame draws, copied out under the lock."""

    world_size: int
    ranks: list[RankRow]
    curves: dict[int, tuple[array, array]]
    """Steps and losses of the charted ranks, as ``array('d')`` (see ``Series``)."""
    evals: list[tuple[int, float]]
    best_accuracy: float | None
    epoch: int
    epochs: int | None
    step: int
    total_steps: int | None
    eta_s: float | None
    restarts: int
    events: int
    stragglers: list[int]
    silent: list[int]
    quiet_s: float | None
    """Seconds since any rank wrote, when the whole job has gone quiet."""
    info: dict[str, Any]
    done: dict[str, Any] | None
    errors: list[str]
    gpu_by_host: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    """(rank, GPU utilization %) the ranks report, by the host they run on."""
    val_losses: list[tuple[int | None, float]] = field(default_factory=list)
    """(epoch, loss) of the validation or test losses, newest last."""
    speed_unit: str = "img/s"
    """What the ranks' speed counts: img/s (the built-in trainer), smp/s, or it/s (a bar's steps)."""
    checkpoint_step: int | None = None
    """The step of the newest checkpoint the run said it wrote: where a resume starts."""
    world_most: int = 0
    """The most ranks an attempt of the run had: above ``world_size`` where an elastic run went on
    with fewer."""

    @property
    def fraction(self) -> float:
        if not self.total_steps:
            return 0.0
        return min(1.0, self.step / self.total_steps)


class MonitorState:
    """Ingests metric events (any thread) and hands out snapshots."""

    def __init__(self, straggler_ratio: float = 0.75, curve_points: int = 400, clock: Callable[[], float] = time.time):
        self.straggler_ratio = straggler_ratio
        self.curve_points = curve_points
        self.clock = clock
        self.version = 0
        self.events = 0
        self._lock = threading.Lock()
        self.ranks: dict[int, RankView] = {}
        self.info: dict[str, Any] = {}
        self.evals: dict[int, float] = {}
        self.val_losses: dict[object, tuple[int | None, float]] = {}
        """A run's validation losses by the rank and step each was taken at (a script's printed
        evaluation and its logger's record of it are one point), the newest 64."""
        """(epoch, loss) of the validation or test losses reported, newest last."""
        self.world_size = 0
        self.world_most = 0
        self.epochs: int | None = None
        self.total_steps: int | None = None
        self.restarts = 0
        self.checkpoint_step: int | None = None
        self.done: dict[str, Any] | None = None
        self.errors: list[str] = []
        self._progress: deque[tuple[float, int]] = deque(maxlen=64)

    def _rank(self, rank: int) -> RankView:
        view = self.ranks.get(rank)
        if view is None:
            view = self.ranks[rank] = RankView(rank, loss_curve=Series(self.curve_points))
        return view

    def ingest(self, events: Iterable[MetricEvent]) -> int:
        """Fold a batch of events in; returns how many there were. The words a rank wrote (its host,
        its error and hint) are made printable here, once: every view of the state (the monitor, the
        progress block ``train`` draws on the raw terminal, the JSON summary) shows them as kept."""
        n = 0
        with self._lock:
            for ev in events:
                n += 1
                rec = ev.record
                view = self._rank(ev.rank)
                if ev.time > view.last_time:
                    view.last_time = ev.time
                kind = ev.event
                if kind == "step":
                    step = rec.get("step") or 0
                    loss = rec.get("loss")
                    logged = rec.get("source") == "logger"
                    if logged and loss is not None and not view.logged_loss:
                        # a logger file's curve replaces the printed one (a bar's postfix is rounded)
                        view.logged_loss, view.loss_curve = True, Series(self.curve_points)
                    if loss is not None and (logged or not view.logged_loss):
                        view.loss_curve.add(step, loss)
                    if not logged and isinstance(step, int):
                        view.gaps.feed(ev.time, step, rec.get("compute_s"))
                    if view.step_time is not None and step > view.step:
                        gap = (ev.time - view.step_time) / (step - view.step)
                        view.step_interval = gap if view.step_interval is None else 0.8 * view.step_interval + 0.2 * gap
                    view.step_time = ev.time
                    view.step = step_after(view.step, rec)
                    view.epoch = rec.get("epoch") or view.epoch
                    view.loss = loss if loss is not None else view.loss
                    view.gpu_util = rec.get("gpu_util")
                    view.cpu_util = rec.get("cpu_util", view.cpu_util)
                    data_s, step_s = rec.get("data_s"), rec.get("step_s")
                    if isinstance(data_s, (int, float)) and isinstance(step_s, (int, float)) and step_s > 0:
                        share = min(1.0, data_s / step_s)
                        view.data_share = share if view.data_share is None else 0.8 * view.data_share + 0.2 * share
                    if view.gpu_util is not None:
                        view.host = said(rec.get("host"), 253) or view.host
                    sps = rec.get("samples_per_s")
                    if sps is not None:
                        view.samples_per_s = sps if view.samples_per_s is None else 0.8 * view.samples_per_s + 0.2 * sps
                    its = rec.get("steps_per_s")
                    if its is not None:
                        view.steps_per_s = its if view.steps_per_s is None else 0.8 * view.steps_per_s + 0.2 * its
                    if not self._progress or step > self._progress[-1][1]:
                        self._progress.append((ev.time, step))
                    if "total_steps" in rec:  # a user script's "step N/M"
                        self.total_steps = rec["total_steps"] or self.total_steps
                    if "epochs" in rec:  # and "epoch N/M"
                        self.epochs = rec["epochs"] or self.epochs
                elif kind == "start":
                    self.info = {k: said(v, 253) if isinstance(v, str) else v for k, v in rec.items()}
                    self.world_size = rec.get("world_size") or self.world_size
                    self.world_most = max(self.world_most, self.world_size)
                    self.epochs = rec.get("epochs") or self.epochs
                    self.total_steps = rec.get("total_steps") or self.total_steps
                    view.restarts = rec.get("restart_count") or 0
                    self.restarts = max(self.restarts, view.restarts)
                    view.finished, view.error = False, ""
                    view.host = said(rec.get("host"), 253) or view.host
                    view.step_time = None
                elif kind == "epoch":
                    view.epoch = rec.get("epoch") or view.epoch
                if rec.get("val_loss") is not None:  # validation or test: a series of its own
                    at = (ev.rank, rec.get("step") or (rec.get("epoch"), len(self.val_losses)))
                    self.val_losses.pop(at, None)
                    self.val_losses[at] = (rec.get("epoch"), rec["val_loss"])
                    if len(self.val_losses) > 64:
                        del self.val_losses[next(iter(self.val_losses))]
                if kind == "eval":
                    acc = rec.get("accuracy")
                    if acc is not None and rec.get("epoch") is not None:
                        self.evals[int(rec["epoch"])] = acc
                    elif acc is not None and ev.rank == 0:  # a user script's accuracy line with no epoch: in turn
                        self.evals[max(self.evals, default=0) + 1] = acc
                elif kind == "resume":
                    self.restarts = max(self.restarts, rec.get("restart_count") or 0)
                elif kind == "checkpoint" and isinstance(rec.get("step"), int):
                    self.checkpoint_step = max(self.checkpoint_step or 0, rec["step"])
                elif kind == "done":
                    view.finished = True
                    if ev.rank == 0 or self.done is None:
                        self.done = rec
                elif kind == "error":
                    view.error = said(rec.get("message")) or "error"
                    hint = said(rec.get("hint"))
                    text = f"rank {ev.rank}: {view.error}" + (f" ({hint})" if hint else "")
                    if text not in self.errors:
                        self.errors.append(text)
            self.events += n
            self.version += 1
        return n

    def _charted(self, rows: list[RankRow], most: int, pick: list[int] | None) -> list[int]:
        """The ranks whose curves a snapshot carries: those ``pick`` names, else the flagged ones
        first, then the lowest ranks; ``most`` at most."""
        if pick:
            return [r for r in pick if r in self.ranks][:most]
        chosen = [r.rank for r in rows if r.flag in ("slow", "silent", "error")][:most]
        flagged = set(chosen)  # (a list searched once a rank was quadratic at 1,024 flagged ranks)
        return (chosen + [r.rank for r in rows[: most + len(flagged)] if r.rank not in flagged])[:most]

    def snapshot(
        self, curve_ranks: int = 8, now: float | None = None, pick: list[int] | None = None
    ) -> MonitorSnapshot:
        """A copy of what to draw; curves for at most ``curve_ranks`` ranks: those ``pick`` names
        (the user's choice, in its order), else the flagged ones first, then the lowest ranks."""
        now = self.clock() if now is None else now
        with self._lock:
            views = sorted(self.ranks.values(), key=lambda v: v.rank)
            speeds = [v.samples_per_s for v in views if v.samples_per_s and not v.finished]
            median_speed = statistics.median(speeds) if len(speeds) >= 2 else None
            intervals = [v.step_interval for v in views if v.step_interval]
            typical = statistics.median(intervals) if intervals else 1.0
            threshold = max(SILENT_FLOOR_S, 5 * typical)
            freshest = max((v.last_time for v in views), default=0.0)
            figures = {v.rank: f for v in views if not v.finished and (f := v.gaps.figures()) is not None}
            relative = relative_scores(figures) if len(figures) >= 2 else {}
            rows, stragglers, silent = [], [], []
            for v in views:
                flag, detail = "", ""
                fig, rel = figures.get(v.rank), relative.get(v.rank)
                if v.error:
                    flag, detail = "error", v.error
                elif v.finished:
                    flag = "done"
                elif self.world_size and v.rank >= self.world_size:
                    flag, detail = "left", f"not in the run's newest attempt: it goes on with {self.world_size}"
                elif freshest - v.last_time > threshold:
                    flag, detail = "silent", f"no line for {freshest - v.last_time:.0f} s"
                    silent.append(v.rank)
                elif (rel is not None and rel < self.straggler_ratio) or (
                    rel is None  # a speed a line says: its latest step's alone, so only where no scores are made yet
                    and median_speed
                    and v.samples_per_s is not None
                    and v.samples_per_s < self.straggler_ratio * median_speed
                ):
                    flag = "slow"
                    detail = slow_words(v, views, fig, rel, median_speed, figures)
                    stragglers.append(v.rank)
                rows.append(
                    RankRow(
                        v.rank,
                        v.step,
                        v.epoch,
                        v.loss,
                        v.samples_per_s if v.samples_per_s is not None else v.steps_per_s,
                        max(0.0, now - v.last_time) if v.last_time else 0.0,
                        flag,
                        detail,
                        rel,
                        fig.individual if fig else None,
                        fig.median_s if fig else None,
                        fig.p95_s if fig else None,
                    )
                )
            curves = {r: self.ranks[r].loss_curve.points() for r in self._charted(rows, curve_ranks, pick)}
            # the run's step is the lowest rank's (rank 0's), as `status` and `jobs` say it; the rank
            # table shows each rank's own
            lowest = min(views, key=lambda v: v.rank, default=None)
            step, epoch = (lowest.step, lowest.epoch) if lowest is not None else (0, 0)
            eta = None
            if self.total_steps and len(self._progress) >= 2:
                (t0, s0), (t1, s1) = self._progress[0], self._progress[-1]
                if t1 > t0 and s1 > s0:
                    eta = max(0.0, (self.total_steps - step) * (t1 - t0) / (s1 - s0))
            gpu_by_host: dict[str, list[tuple[int, float]]] = {}
            for v in views:
                if v.gpu_util is not None and not v.finished:
                    gpu_by_host.setdefault(v.host, []).append((v.rank, v.gpu_util))
            running = any(not v.finished and not v.error for v in views)
            quiet = now - freshest if running and freshest and now - freshest > threshold else None
            return MonitorSnapshot(
                world_size=self.world_size or len(views),
                world_most=max(self.world_most, self.world_size or len(views)),
                ranks=rows,
                curves=curves,
                evals=sorted(self.evals.items()),
                best_accuracy=max(self.evals.values(), default=None),
                epoch=epoch,
                epochs=self.epochs,
                step=step,
                total_steps=self.total_steps,
                eta_s=None if self.done else eta,
                restarts=self.restarts,
                events=self.events,
                stragglers=stragglers,
                silent=silent,
                quiet_s=quiet,
                info=dict(self.info),
                done=dict(self.done) if self.done else None,
                errors=list(self.errors),
                gpu_by_host=gpu_by_host,
                val_losses=list(self.val_losses.values()),
                speed_unit=self._speed_unit(views),
                checkpoint_step=self.checkpoint_step,
            )

    def _speed_unit(self, views: list[RankView]) -> str:
        """What the rank table's speed column counts: images for the built-in trainer (its start names
        its dataset), samples where a script says samples/s, steps where it says only it/s."""
        if self.info.get("dataset"):
            return "img/s"
        if any(v.samples_per_s is not None for v in views) or not any(v.steps_per_s is not None for v in views):
            return "smp/s"
        return "it/s"


SAID_CHARS = 500
"""Of a rank's error or hint, what the monitor keeps: the line it shows, not a log."""


def said(value: object, cap: int = SAID_CHARS) -> str:
    """What a rank wrote, as text that drives no terminal (``printable``), at most ``cap`` characters."""
    if value is None:
        return ""
    return printable(str(value)[:cap])[:cap]


def status_cells(s: JobStatus, now: float) -> tuple[str, ...]:
    """A run as one row of the runs table (`torchdeck jobs`, the runs screen): run, state, ranks,
    epoch, step, loss, accuracy, age, cost (``?`` where its price is unknown). A cluster run found by
    its label alone (no record of torchdeck making it here) says so by its id."""
    return (
        f"{s.run_id} (label only)" if s.found_by_label and not s.made_by else s.run_id,
        s.state.value,
        str(s.world_size),
        f"{s.epoch}/{s.epochs}" if s.epochs else str(s.epoch),
        f"{s.step}/{s.total_steps}" if s.total_steps else str(s.step),
        "-" if s.loss is None else f"{s.loss:.3f}",
        "-" if s.accuracy is None else f"{s.accuracy * 100:.1f}%",
        format_duration(now - s.submitted_at) if s.submitted_at else "-",
        "-" if s.cost is None else s.cost.cell(),
    )


def place_cells(s: JobStatus) -> tuple[str, str, str]:
    """A cluster job's place in the runs table: where (namespace/Kind), its queue, and who made it
    (torchdeck, or who the cluster says made a job torchdeck did not)."""
    return (
        f"{s.namespace}/{s.kind}" if s.kind else "-",
        s.queue.local_queue if s.queue is not None else "-",
        s.made_by or "torchdeck",
    )


@dataclass(frozen=True)
class RowFilter:
    """Which rows of the runs table show (``jobs --namespace --mine --queue --state``, the runs
    screen's ``/``): every condition given must hold. Words as typed: ``ns:team-a mine
    queue:gpu state:running``."""

    namespace: str = ""
    mine: bool = False
    """Only torchdeck's runs (not the jobs others made)."""
    queue: str = ""
    state: str = ""

    def keeps(self, s: JobStatus) -> bool:
        if self.namespace and s.namespace != self.namespace:
            return False
        if self.mine and s.made_by:
            return False
        if self.queue and (s.queue is None or s.queue.local_queue != self.queue):
            return False
        return not self.state or s.state.value == self.state

    @classmethod
    def parse(cls, text: str) -> RowFilter:
        """The filter a person typed; ValueError, with what was not understood, for anything else."""
        fields: dict[str, str | bool] = {}
        states = {state.value for state in JobState}
        for word in text.split():
            key, colon, value = word.partition(":")
            if word == "mine":
                fields["mine"] = True
            elif colon and key in ("ns", "namespace") and value:
                fields["namespace"] = value
            elif colon and key == "queue" and value:
                fields["queue"] = value
            elif colon and key == "state" and value in states:
                fields["state"] = value
            elif word in states:
                fields["state"] = word
            else:
                raise ValueError(
                    f"{word!r}: filters are ns:NAME, mine, queue:NAME, state:STATE ({', '.join(sorted(states))})"
                )
        return cls(**fields)  # type: ignore[arg-type]

    def words(self) -> str:
        said = [f"ns:{self.namespace}"] if self.namespace else []
        said += ["mine"] if self.mine else []
        said += [f"queue:{self.queue}"] if self.queue else []
        return " ".join(said + ([f"state:{self.state}"] if self.state else []))


SORTS: dict[str, Callable[[JobStatus], tuple[object, ...]]] = {
    "age": lambda s: (-s.submitted_at,),
    "name": lambda s: (s.run_id,),
    "state": lambda s: (s.state.is_terminal, s.state.value, -s.submitted_at),
    "namespace": lambda s: (s.namespace, -s.submitted_at),
    "queue": lambda s: (s.queue is None, s.queue.local_queue if s.queue else "", -s.submitted_at),
}
"""The runs table's orders (``jobs --sort``, the runs screen's ``o``): the newest first within each."""


CHART_RANKS = 8
"""Curves the loss chart draws at most: more are not told apart in a terminal."""


def parse_ranks(text: str) -> list[int]:
    """Ranks as a person types them: ``0,8,16-23`` (spaces allowed); empty means the automatic
    choice ([]). Raises ValueError with a message for anything else, or more than CHART_RANKS."""
    ranks: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(f"{part!r} is not a rank or a range like 16-23")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise ValueError(f"{part!r} runs backwards")
        ranks += [r for r in range(first, min(last, first + CHART_RANKS) + 1) if r not in ranks]
        if len(ranks) > CHART_RANKS:
            raise ValueError(f"at most {CHART_RANKS} ranks can be told apart on the chart")
    return ranks


def format_duration(seconds: float | None) -> str:
    """3725 -> "1h02m", 125 -> "2m05s", 9 -> "9s"."""
    if seconds is None:
        return "-"
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


BUSY_PERCENT = 20.0
"""A rank's process above this much of a core (or a GPU above this utilization) is working, not hung."""
UNREAD_AFTER_S = 60.0
"""How long a running job may go without one readable metric line before the monitor says so."""
READ_FORMATS = (
    "loss lines (loss: 1.23, loss=1.23), progress bars (tqdm, Lightning, rich), schema-1 JSON (torchdeck.report)"
)


def slow_words(
    v: RankView,
    views: list[RankView],
    fig: StepFigures | None,
    rel: float | None,
    median_speed: float | None,
    figures: dict[int, StepFigures],
) -> str:
    """Why a rank is flagged slow, with its numbers and what differs from the others: its pace
    against the fastest and against its own best, its GPU's and CPU's utilisation, the part of
    each step it waits on its data loader, its node (``figures``: every rank's, as the snapshot made them)."""
    said = []
    computes = [f for rank, f in figures.items() if rank != v.rank and f.compute_s]
    if rel is not None and fig is not None and fig.compute_s and computes:
        top = min(computes, key=lambda f: f.compute_s or 0.0)
        fastest, spread = top.compute_s or 0.0, top.compute_p95_s or 0.0
        upto = f", up to {spread:.3g} s" if spread > fastest else ""  # what is within its spread holds none back
        said.append(
            f"its compute holds each step back {1 - rel:.0%} ({fig.compute_s:.3g} s a forward pass, the "
            f"fastest rank's {fastest:.3g} s{upto}, in steps of {fig.median_s:.3g} s)"
        )
    elif rel is not None and fig is not None:
        said.append(f"{rel:.0%} of the fastest pace ({fig.median_s:.3g} s/step, p95 {fig.p95_s:.3g} s)")
        said.append(f"{fig.individual:.0%} of its own best")
    elif median_speed and v.samples_per_s is not None:
        said.append(f"{v.samples_per_s / median_speed:.0%} of the median")
    others = [o for o in views if o.rank != v.rank and not o.finished]
    gpus = [o.gpu_util for o in others if o.gpu_util is not None]
    if v.gpu_util is not None and gpus and abs(v.gpu_util - statistics.median(gpus)) >= 20:
        said.append(f"GPU {v.gpu_util:.0f}% (others {statistics.median(gpus):.0f}%)")
    cpus = [o.cpu_util for o in others if o.cpu_util is not None]
    if v.cpu_util is not None and cpus and abs(v.cpu_util - statistics.median(cpus)) >= 30:
        said.append(f"CPU {v.cpu_util:.0f}% (others {statistics.median(cpus):.0f}%)")
    waits = [o.data_share for o in others if o.data_share is not None]
    if v.data_share is not None and waits and v.data_share >= 0.2 and v.data_share >= 2 * statistics.median(waits):
        said.append(f"waits on its data loader {v.data_share:.0%} of each step (others {statistics.median(waits):.0%})")
    hosts = [o.host for o in others if o.host]
    if v.host and hosts and v.host not in hosts:
        said.append(f"the only rank on {v.host}")
    return "; ".join(said)


def quiet_words(quiet_s: float, nodes: list[NodeMetrics]) -> tuple[str, bool]:
    """What to say when no rank has written a metric line for ``quiet_s`` seconds, weighed by what
    the ranks are doing (the node figures torchdeck measures): (the words, whether it is an alarm).
    Ranks busy on the CPU or GPU are working through a long step or epoch; idle ranks may be stuck
    in a collective."""
    by_rank: dict[tuple[str, int], float] = {}  # a rank's processes together (a wrapper and its script)
    for n in nodes:
        for p in n.processes:
            by_rank[(n.name, p.rank)] = by_rank.get((n.name, p.rank), 0.0) + p.cpu_percent
    procs = list(by_rank.values())
    gpus = [g.util_percent for n in nodes for g in n.gpus]
    if not procs and not gpus:
        return f"no rank has written for {quiet_s:.0f} s (hung collective?)", True
    seen = []
    if procs:
        seen.append(f"{statistics.fmean(procs):.0f}% CPU")
    if gpus:
        seen.append(f"{statistics.fmean(gpus):.0f}% GPU")
    busy = (procs and statistics.fmean(procs) >= BUSY_PERCENT) or (gpus and statistics.fmean(gpus) >= BUSY_PERCENT)
    if busy:
        return f"no metric line for {quiet_s:.0f} s; ranks busy at {' and '.join(seen)}", False
    return f"no metric line for {quiet_s:.0f} s; ranks idle at {' and '.join(seen)} (hung collective?)", True


def unread_words(snap: MonitorSnapshot, now: float) -> str | None:
    """Words for a running job whose output has given no readable metric for ``UNREAD_AFTER_S``:
    what torchdeck looked for and how to help it; None otherwise."""
    started = snap.info.get("time") if snap.info else None
    if snap.step or snap.evals or not isinstance(started, (int, float)) or now - started < UNREAD_AFTER_S:
        return None
    return (
        f"nothing readable after {now - started:.0f} s: torchdeck reads {READ_FORMATS}; "
        "for another format set metrics.pattern in the spec"
    )
