"""A cluster run's figures from its pods' logs: each rank's progress and step times for ``status``
(the tails of its first pods' logs), a listed run's epoch, step, loss and accuracy for the rows of
``jobs`` and the runs screen, and an ended run's figures kept on its job once its pods (and their
logs) are gone. Raw pod-log lines are read here as metric events and log lines, the built-in
trainer's JSON lines and a user's own text lines alike (``log_lines``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

from ...trainer.textmetrics import RankedText
from ..base import JobState, JobStatus, LogLine, MetricEvent, RankProgress
from ..errors import BackendError
from ..events import describe_record, fold_progress, fold_ranks, parse_metric_lines, relate_ranks
from ..recovery import RecoveryLog
from .client import KubeClient, api_path
from .costs import PROGRESS_ANNOTATION, RECOVERY_ANNOTATION, annotate, read_annotation
from .diagnosis import coming_back
from .finding import RunJob
from .jobs import nproc_per_node, world_size
from .manifests import PATTERN_ANNOTATION, PROGRAM_ANNOTATION
from .objects import Pod
from .streams import has_started, node_ranks

PODS_READ = 16
"""Pods whose log tails ``status`` reads for each rank's progress (one request each)."""
ROW_READS = 32
"""The runs whose newest log lines one listing reads for their rows' figures (one request each), the
newest first; an ended run's are read once and kept on its job."""
ROW_FIGURES = ("epoch", "epochs", "step", "total_steps", "loss", "accuracy", "val_loss")
"""What a run's row shows of its progress (kept on an ended run's job)."""
TAIL_LINES = 200


def text_reader(job: RunJob) -> RankedText | None:
    """For a run of the user's code (its job says what it runs), the reader of its text lines."""
    notes = job.meta.annotations
    if PROGRAM_ANNOTATION not in notes:
        return None
    return RankedText(
        nproc_per_node(job.view),
        world_size(job.kind, job.view),
        notes.get(PATTERN_ANNOTATION),
        notes[PROGRAM_ANNOTATION],
    )


def log_lines(
    batch: list[tuple[int, int, bytes]], nproc: int, rank: int | None = None, reader: RankedText | None = None
) -> tuple[list[MetricEvent], list[LogLine]]:
    """Raw pod-log lines (node rank, attempt, line) as metric events and as log lines (metric lines
    in words). With a ``reader`` (a run of the user's code) each line says its rank and text lines
    are read too."""
    events: list[MetricEvent] = []
    lines: list[LogLine] = []
    for node, attempt, raw in batch:
        if reader is not None:
            r, raw, records = reader.read(node, raw)
            events += [MetricEvent(x["event"], r, float(x.get("time") or 0.0), x) for x in records]
            if rank is None or r == rank:
                lines.append(LogLine(r, raw.decode(errors="replace"), attempt))
            continue
        parsed = parse_metric_lines([raw]) if raw[:1] == b"{" else ()
        if parsed:
            events.append(parsed[0])
        r = parsed[0].rank if parsed else (node * nproc if node >= 0 else -1)
        if rank is None or r == rank:
            lines.append(
                LogLine(r, describe_record(parsed[0].record) if parsed else raw.decode(errors="replace"), attempt)
            )
    return events, lines


def tail_events(
    client: KubeClient, namespace: str, pod: str, rank: int, reader: RankedText | None
) -> list[MetricEvent] | None:
    """The events among a pod's newest ``TAIL_LINES`` lines (None where its log cannot be read)."""
    try:
        tail = client.request(
            "GET", api_path("Pod", namespace, pod, "log"), query={"tailLines": TAIL_LINES}, stream=True, timeout=10
        ).data
    except BackendError:
        return None
    if reader is not None:  # the user's code: its ranks' records among the pod's lines
        return log_lines([(rank, 0, line) for line in tail.splitlines()], 1, 0, reader)[0]
    return parse_metric_lines(tail.splitlines())


def read_progress(
    client: KubeClient,
    status: JobStatus,
    namespace: str,
    pods: Sequence[Pod],
    job: RunJob,
    node_trouble: Callable[[str], str],
) -> None:
    """Into ``status``: epoch, step, loss and accuracy from the tail of node 0's log (one small
    request), each rank's progress from the tails of the first ``PODS_READ`` pods' logs, and what
    its ranks' restarts and moves say (kept on its job, where it is torchdeck's)."""
    started = [p for p in pods if has_started(p)]
    ranks = node_ranks(started)
    ordered = sorted(started, key=lambda p: max(0, ranks[p.name]))[:PODS_READ]
    if not ordered:  # its pods gone (an ended run's, later): what was kept of it as it ended
        kept_figures(job, status)
        return
    reader = text_reader(job)
    per_rank: dict[int, RankProgress] = {}
    events: list[MetricEvent] = []
    kept = read_annotation(job.obj, RECOVERY_ANNOTATION)
    recovered = RecoveryLog.from_json(kept)
    for i, pod in enumerate(ordered):
        found = tail_events(client, namespace, pod.name, max(0, ranks[pod.name]), reader)
        if found is None:
            continue
        fold_ranks(found, per_rank)
        recovered.feed(found)
        if i == 0:
            lowest = min((e.rank for e in found), default=0)
            events = [e for e in found if e.rank == lowest]  # the lowest rank, as the local backend reads
    relate_ranks(per_rank)  # each pod's ranks were folded apart: the fastest among them all
    status.ranks = [per_rank[r] for r in sorted(per_rank)]
    error = fold_progress(status, events)
    recovered.recoveries()  # where ranks moved, or the world changed: worked out before it is kept
    learnt = recovered.to_json()
    if learnt != (kept or RecoveryLog().to_json()) and not status.found_by_label:
        with contextlib.suppress(BackendError):  # kept where it may be: else learnt again while the lines last
            annotate(client, job.path, {RECOVERY_ANNOTATION: learnt})
    status.restarts = max(status.restarts, recovered.attempt)
    status.world_size = recovered.world or status.world_size  # an elastic run's, as its newest attempt has it
    status.recovery = recovered.lines()
    status.coming_back = coming_back(recovered, pods, node_ranks(pods), nproc_per_node(job.view), node_trouble)
    if error is not None and (not status.reason or status.state is JobState.FAILED):
        status.reason, status.hint = f"rank 0: {error.get('message')}", error.get("hint") or status.hint
    keep_figures(client, job, status)


def keep_figures(client: KubeClient, job: RunJob, status: JobStatus) -> None:
    """An ended run's last figures, kept on its job once (its pods, and their logs, go later), for
    the rows of ``jobs`` and the runs screen to say how it finished."""
    if not status.state.is_terminal or status.found_by_label or not status.step:
        return
    if read_annotation(job.obj, PROGRESS_ANNOTATION) is None:
        with contextlib.suppress(BackendError):
            annotate(client, job.path, {PROGRESS_ANNOTATION: {k: getattr(status, k) for k in ROW_FIGURES}})


def kept_figures(job: RunJob, status: JobStatus) -> bool:
    """The figures kept on an ended run's job, into ``status``; False where none were kept."""
    kept = read_annotation(job.obj, PROGRESS_ANNOTATION)
    if kept is None:
        return False
    for key in ROW_FIGURES:
        value = kept.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            setattr(status, key, int(value) if key in ("epoch", "epochs", "step", "total_steps") else value)
    return True


def row_figures(client: KubeClient, job: RunJob, status: JobStatus, pods: Sequence[Pod], may_read: bool) -> bool:
    """A listed run's epoch, step, loss and accuracy, read as ``status`` reads them: an ended run's
    from what was kept on its job, else (``may_read``: at most ``ROW_READS`` a listing) from its
    lowest rank's newest lines, and then kept where it has ended. Whether it read a log."""
    if kept_figures(job, status):
        return False
    started = [p for p in pods if has_started(p)]
    if not started or not may_read:
        return False
    ranks = node_ranks(started)
    first = min(started, key=lambda p: max(0, ranks[p.name]))
    found = tail_events(client, job.namespace, first.name, max(0, ranks[first.name]), text_reader(job))
    lowest = min((e.rank for e in found or []), default=0)
    fold_progress(status, [e for e in found or [] if e.rank == lowest])
    keep_figures(client, job, status)
    return True
