"""What workers tell screens, in the past tense. Widgets render them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message

from torchdeck.backends.base import JobStatus, NodeMetrics, TestResult
from torchdeck.backends.ledger import Resource

if TYPE_CHECKING:  # the EKS types load with the cloud screens, not with the console's first frame
    from torchdeck.backends.eks.preflight import Catalogue, PreflightReport
    from torchdeck.backends.eks.progress import Progress


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
    result: TestResult


@dataclass
class TestProgressed(Message):
    line: str


@dataclass
class CatalogueLoaded(Message):
    """The instance types of a region's zones, from EC2."""

    catalogue: Catalogue


@dataclass
class PreflightChecked(Message):
    """A cluster plan's preflight; create follows where it passed."""

    report: PreflightReport
    then_create: bool = False


@dataclass
class StepProgressed(Message):
    """One event of a cluster create, a storage create or delete, or an image build, from the worker ``group``."""

    progress: Progress
    group: str


@dataclass
class LedgerRead(Message):
    """What torchdeck made that exists (ledger rows), and the cost per hour now and so far."""

    resources: list[Resource]
    per_hour: float
    so_far: float
