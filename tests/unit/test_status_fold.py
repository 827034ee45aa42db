"""Issue 30: one status fold (``backends.events.fold_progress``) for every backend, tested here
once; tests/kube/test_kubernetes_backend.py and the local backend's tests drive it through each."""

from __future__ import annotations

from torchdeck.backends.base import JobState, JobStatus, MetricEvent
from torchdeck.backends.events import fold_progress


def event(kind: str, **record: object) -> MetricEvent:
    return MetricEvent(kind, 0, 0.0, {"schema": 1, "event": kind, "rank": 0, **record})


def test_the_fold_reads_starts_steps_epoch_summaries_evals_and_errors() -> None:
    status = JobStatus("r", "r", "local", JobState.RUNNING, 2, 0.0)
    error = fold_progress(
        status,
        [
            event("start", epochs=3, total_steps=30, restart_count=1),
            event("step", step=9, epoch=0, loss=1.5),
            event("epoch", step=10, epoch=1, loss=1.4),  # a summary: the step and epoch move, the loss stays
            event("eval", epoch=1, accuracy=0.41),
            event("error", message="CUDA out of memory", hint="lower the batch size"),
            event("start", restart_count=2),  # a restart keeps what the first start said
            event("step", step=11, epoch=1, loss=1.3, total_steps=40),
        ],
    )
    assert (status.epochs, status.total_steps, status.restarts) == (3, 40, 2)
    assert (status.step, status.epoch, status.loss, status.accuracy) == (11, 1, 1.3, 0.41)
    assert error is not None and error["message"] == "CUDA out of memory"
    assert fold_progress(status, []) is None and status.step == 11  # nothing new changes nothing
