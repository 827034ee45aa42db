"""Reading the trainer's metric lines (schema 1, written by
``torchdeck.trainer.metrics``) into ``MetricEvent`` s, folding them into a
run's ``JobStatus`` (``fold_progress``), and saying them in words for log
views. Every backend gets its lines differently (files, pod logs) and parses
and folds them here, so a run's status reads the same on each."""

from __future__ import annotations

import json
from collections.abc import Iterable
from math import isfinite
from typing import Any

from torchdeck.trainer.metrics import SCHEMA_VERSION, parse_line

from .base import JobStatus, MetricEvent, RankProgress
from .step_times import StepFigures, StepGaps, relative_scores

try:  # five times faster than json on metric lines; the monitor ingests tens of thousands a second
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - orjson is a dependency, but a missing wheel must not break the console
    _loads = json.loads  # type: ignore[assignment]


NUMBERS = frozenset(
    {
        "step", "epoch", "epochs", "total_steps", "steps_per_epoch", "restart_count", "world_size",
        "loss", "val_loss", "accuracy", "best_accuracy", "lr", "samples_per_s", "steps_per_s",
        "step_s", "data_s", "epoch_s", "elapsed_s", "train_s", "save_s", "gpu_util", "gpu_mem_mb",
    }
)  # fmt: skip
"""The figures of a schema-1 record that every reader takes as numbers: one of another type in a
line (a run's own files are written by the user's code) is dropped where the line is read, once."""
TEXTS = frozenset({"message", "hint", "signal", "path", "model", "model_file", "source"})
"""Its words, which every reader takes as text."""
FIGURES = frozenset({int, float})
"""What a figure may be (a bool's type is bool, so ``true`` is none). orjson reads neither NaN nor
an infinity (``1e999`` is no JSON it takes: the line is skipped)."""
MAX_RANK = 1 << 20


def parse_metric_lines(lines: Iterable[bytes]) -> list[MetricEvent]:
    """The events among these lines (as read from a file or a pod's log,
    without their newlines), skipping human text, torn lines and other
    schemas. The monitor's hot path: a line costs about a microsecond and a
    half here, half of what a call per line through
    ``torchdeck.trainer.metrics.parse_line`` costs."""
    events: list[MetricEvent] = []
    append, loads = events.append, _loads
    for line in lines:
        if line[:1] != b"{":
            line = line.strip()
            if line[:1] != b"{":
                continue
        try:
            record = loads(line)
        except ValueError:
            continue
        if type(record) is dict and record.get("schema") == SCHEMA_VERSION:
            try:
                event = record["event"]
                if type(event) is not str:
                    continue
                figures = NUMBERS.intersection(record)
                if not FIGURES.issuperset(map(type, map(record.__getitem__, figures))):  # rare: look closer
                    for key in figures:  # "step": "x", true, [1]: that figure unknown, the line kept
                        if type(record[key]) not in FIGURES:
                            del record[key]
                words = TEXTS.intersection(record)
                if words and not all(type(record[k]) is str for k in words):
                    for key in words:
                        record[key] = record[key] if type(record[key]) is str else str(record[key])[:1000]
                rank, when = record["rank"], record.get("time") or 0.0
                if type(rank) is not int or not 0 <= rank < MAX_RANK or type(when) not in (int, float):
                    continue
                append(MetricEvent(event, rank, float(when) if isfinite(when) else 0.0, record))
            except (KeyError, TypeError, ValueError, OverflowError):
                pass
    return events


def parse_metric_line(line: str | bytes) -> MetricEvent | None:
    """The event on one line, or None for anything else."""
    events = parse_metric_lines([line.encode() if isinstance(line, str) else line])
    return events[0] if events else None


def step_after(step: int, record: dict[str, Any]) -> int:
    """Where a rank is after ``record``: the step it names; a logger file's scalar (read a poll
    later than the lines around it, at the step its logger counted) never moves it back."""
    said = record.get("step") or step
    return max(step, said) if record.get("source") == "logger" else said


def fold_progress(status: JobStatus, events: Iterable[MetricEvent]) -> dict[str, Any] | None:
    """Fold one rank's events, oldest first, into ``status``: epochs and total steps from its
    start (and a restart count), epoch, step and loss from its steps and epoch summaries (a text
    line's ``step 3/20`` brings a total too), accuracy and validation loss from its evals and its
    end. Returns the last error record among them (each backend words the reason its own way:
    where the rank is). The one fold for every backend: the local and cluster copies had drifted
    (the cluster's read neither epoch summaries nor restart counts)."""
    error = None
    for event in events:
        r = event.record
        count = r.get("restart_count")
        if isinstance(count, int) and not isinstance(count, bool):  # on the start, and on every line after a restart
            status.restarts = max(status.restarts, count)
        if event.event == "start":
            status.epochs = r.get("epochs") or status.epochs
            status.total_steps = r.get("total_steps") or status.total_steps
        elif event.event in ("step", "epoch"):
            status.step = step_after(status.step, r)
            status.epoch = r.get("epoch") or status.epoch
            status.loss = r["loss"] if event.event == "step" and r.get("loss") is not None else status.loss
            status.total_steps = r.get("total_steps") or status.total_steps
            status.epochs = r.get("epochs") or status.epochs
        elif event.event == "error":
            error = r
        if event.event in ("eval", "done") and r.get("accuracy") is not None:
            status.accuracy = r["accuracy"]
        if r.get("val_loss") is not None:
            status.val_loss = r["val_loss"]
    return error


def fold_ranks(events: Iterable[MetricEvent], ranks: dict[int, RankProgress] | None = None) -> dict[int, RankProgress]:
    """Each rank's progress from its events, oldest first (added to ``ranks`` where given): its step,
    epoch, training and validation loss, speed, when it last reported, and how it ended."""
    ranks = {} if ranks is None else ranks
    clocks: dict[int, StepGaps] = {}
    for event in events:
        r, view = event.record, ranks.get(event.rank)
        if view is None:
            view = ranks[event.rank] = RankProgress(event.rank)
        view.last_report = max(view.last_report or 0.0, event.time) or None
        if event.event == "start":
            view.state, view.error = "running", ""
        elif event.event in ("step", "epoch"):
            view.step = step_after(view.step, r)
            view.epoch = r.get("epoch") or view.epoch
            if event.event == "step":
                if r.get("source") != "logger" and isinstance(r.get("step"), int):  # a logger's step is its own count
                    clocks.setdefault(event.rank, StepGaps()).feed(event.time, r["step"], r.get("compute_s"))
                view.loss = r.get("loss") if r.get("loss") is not None else view.loss
                view.samples_per_s = r.get("samples_per_s") or view.samples_per_s
                view.steps_per_s = r.get("steps_per_s") or view.steps_per_s
        elif event.event == "done":
            view.state = "done"
        elif event.event == "stopped":
            view.state = "stopped"
        elif event.event == "error":
            view.state, view.error = "error", str(r.get("message") or "error")
        if r.get("val_loss") is not None:
            view.val_loss = r["val_loss"]
    score_ranks(ranks, clocks)
    return ranks


def score_ranks(ranks: dict[int, RankProgress], clocks: dict[int, StepGaps]) -> None:
    """Each rank's step-time figures from the step lines just folded (the newest ``WINDOW`` of
    them: the local backend reads a run's recent lines), and its relative score among the ranks."""
    for rank, clock in clocks.items():
        f = clock.figures()
        if f is not None:
            view = ranks[rank]
            view.step_s_median, view.step_s_p95 = round(f.median_s, 6), round(f.p95_s, 6)
            view.compute_s_median = round(f.compute_s, 6) if f.compute_s else None
            view.compute_s_p95 = round(f.compute_p95_s, 6) if f.compute_p95_s else None
            view.individual_score = round(f.individual, 3)
    relate_ranks(ranks)


def relate_ranks(ranks: dict[int, RankProgress]) -> None:
    """Each rank's relative score among all of ``ranks`` (call again once ranks folded apart, a
    pod's log each, are together)."""
    figures = {
        rank: StepFigures(v.step_s_median, v.step_s_p95 or v.step_s_median, 1.0, v.compute_s_median, v.compute_s_p95)
        for rank, v in ranks.items()
        if v.step_s_median
    }
    for rank, score in relative_scores(figures).items():
        ranks[rank].relative_score = round(score, 3)


def tool_result(output: str) -> dict[str, Any] | None:
    """What a trainer tool answered (``torchdeck.trainer.metrics.tool_line``): its result, or its
    error raised as a BackendError with the tool's own message and hint; None where the output
    holds neither (the tool crashed before it could say, or it is no tool)."""
    from .errors import BackendError

    for line in reversed(output.splitlines()):
        record = parse_line(line)
        if record is None or record.get("event") not in ("result", "error") or "tool" not in record:
            continue
        if record["event"] == "error":
            raise BackendError(str(record.get("message") or f"{record['tool']} failed"), str(record.get("hint") or ""))
        result = record.get("result")
        if isinstance(result, dict):
            return result
    return None


def _num(value: object, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def describe_record(record: dict[str, Any]) -> str:
    """A metric record as one readable line, for log panes and ``torchdeck logs``."""
    event = record.get("event")
    r = record.get
    if event == "step":
        return (
            f"epoch {r('epoch')} step {r('step')}  loss {_num(r('loss'), '.4f')}  lr {_num(r('lr'), '.4g')}  "
            f"{_num(r('samples_per_s'), '.0f')} img/s"
        )
    if event == "epoch":
        return (
            f"epoch {r('epoch')} done: mean loss {_num(r('loss'), '.4f')}, "
            f"{_num(r('samples_per_s'), '.0f')} img/s, {_num(r('epoch_s'), '.1f')} s"
        )
    if event == "eval":
        acc = r("accuracy")
        return f"eval after epoch {r('epoch')}: accuracy {_num(None if acc is None else acc * 100, '.2f')}%"
    if event == "start":
        return (
            f"start: {r('model')} ({r('recipe')}) on {r('device')}/{r('backend')} {r('precision')}, "
            f"world {r('world_size')}, {r('epochs')} epochs x {r('steps_per_epoch')} steps, "
            f"restart {r('restart_count')}"
        )
    if event == "checkpoint":
        return f"checkpoint at step {r('step')}: {r('path')} ({_num(r('save_s'), '.2f')} s)"
    if event == "resume":
        return f"resumed from {r('path')} at epoch {r('epoch')} step {r('step')} (restart {r('restart_count')})"
    if event == "done":
        acc, best = r("accuracy"), r("best_accuracy")
        return (
            f"done: accuracy {_num(None if acc is None else acc * 100, '.2f')}%, best "
            f"{_num(None if best is None else best * 100, '.2f')}%, model {r('model_file')}"
        )
    if event == "stopped":
        return f"stopped at step {r('step')} ({r('signal')}): a snapshot for a resume"
    if event == "restarting":
        return (
            f"left at step {r('step')} for a restart: {r('ranks_stopped')} rank(s) were stopped (a pod deleted "
            "or evicted), not the run; the next attempt resumes from this step's snapshot"
        )
    if event == "error":
        hint = r("hint")
        return f"error: {r('message')}" + (f" ({hint})" if hint else "")
    return json.dumps(record)
