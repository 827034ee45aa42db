"""Where a job is (``JobState``), in a module of its own: the console's first frame styles states
without loading the backends' records."""

from __future__ import annotations

import enum


class JobState(str, enum.Enum):
    """Where a job is, the same on every backend."""

    PENDING = "pending"
    """Submitted; workers are starting or waiting for resources."""
    QUEUED = "queued"
    """Waiting in a queue for admission (Kueue on a shared cluster): nothing of it runs yet."""
    RUNNING = "running"
    """At least one rank is training."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"
    """The backend cannot tell (state lost, cluster unreachable)."""

    @property
    def is_terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
