"""What workers tell screens, in the past tense. Widgets render them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.message import Message

from torchdeck.backends.base import JobStatus, NodeMetrics


@dataclass
class RunsListed(Message):
    statuses: list[JobStatus]


@dataclass
class JobSubmitted(Message):
    run_id: str


@dataclass
class StatusChanged(Message):
    status: JobStatus


@dataclass
class MetricsArrived(Message):
    count: int


@dataclass
class LogsArrived(Message):
    count: int


@dataclass
class NodesMeasured(Message):
    nodes: list[NodeMetrics]


@dataclass
class RunStopped(Message):
    status: JobStatus


@dataclass
class ModelTested(Message):
    run_id: str
    result: dict


@dataclass
class TestProgressed(Message):
    line: str


@dataclass
class CatalogueLoaded(Message):
    """The instance types of a region's zones, from EC2 (an eks_preflight.Catalogue)."""
    catalogue: Any


@dataclass
class PreflightChecked(Message):
    """A cluster plan's preflight (an eks_preflight.PreflightReport); create follows where it passed."""
    report: Any
    then_create: bool = False


@dataclass
class ClusterProgressed(Message):
    """One line of a cluster create (an eks_create.Progress)."""
    progress: Any


@dataclass
class StepProgressed(Message):
    """One line of a storage create or delete, an image build or a data copy (an eks_create.Progress),
    from the worker ``group``."""
    progress: Any
    group: str


@dataclass
class LedgerRead(Message):
    """What torchdeck made that exists (ledger rows), and the cost per hour now and so far."""
    resources: list
    per_hour: float
    so_far: float
