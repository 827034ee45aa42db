"""What workers tell screens, in the past tense. Widgets render them.

The messages are also the console's one door for text a run, a cluster or AWS wrote (a failure
reason, a hint, a stack event, a build's output line): each passes ``terminal.as_shown`` as the
message is made, so no escape sequence in it reaches the terminal the console draws on (a
reason holding ``ESC [2J`` once blanked the runs screen)."""

from __future__ import annotations

import dataclasses
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from textual.message import Message

from torchdeck.terminal import as_shown

if TYPE_CHECKING:  # the records' modules load with what makes them (a worker), not before the first frame
    from torchdeck.backends.base import JobStatus, NodeMetrics, Plan, TestResult
    from torchdeck.backends.eks.preflight import Catalogue, PreflightReport
    from torchdeck.backends.eks.progress import Progress
    from torchdeck.backends.ledger import Resource
    from torchdeck.backends.triage import Triage
    from torchdeck.monitor.compare import Row


def shown_status(status: JobStatus) -> JobStatus:
    """The status with its run-written text as a terminal would leave it."""
    if not (status.reason or status.hint or status.bad_nodes):
        return status
    return dataclasses.replace(
        status,
        reason=as_shown(status.reason),
        hint=as_shown(status.hint),
        bad_nodes={as_shown(node): as_shown(why) for node, why in status.bad_nodes.items()},
    )


@dataclass
class RunsListed(Message):
    statuses: list[JobStatus]
    unseen: list[str] = field(default_factory=list)
    """What the listing could not see (``Backend.unseen``), a line each."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.statuses = [shown_status(s) for s in self.statuses]


@dataclass
class JobSubmitted(Message):
    run_id: str


@dataclass
class PlanMade(Message):
    """What a launch would apply (the launch form's preview); its text is escaped where it is drawn."""

    plan: Plan


@dataclass
class StatusChanged(Message):
    status: JobStatus

    def __post_init__(self) -> None:
        super().__post_init__()
        self.status = shown_status(self.status)


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
class TriageMade(Message):
    """A hang triage's verdict (``backend.triage``); ``auto``: asked because the run went quiet."""

    triage: Triage
    auto: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        self.triage = dataclasses.replace(self.triage, summary=as_shown(self.triage.summary))


@dataclass
class RunResumed(Message):
    """The run that continues the one on screen has started (``backend.resume``)."""

    run_id: str


@dataclass
class RunStopped(Message):
    status: JobStatus

    def __post_init__(self) -> None:
        super().__post_init__()
        self.status = shown_status(self.status)


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

    def __post_init__(self) -> None:
        super().__post_init__()
        self.progress = dataclasses.replace(
            self.progress, phase=as_shown(self.progress.phase), message=as_shown(self.progress.message)
        )


@dataclass
class LedgerRead(Message):
    """What torchdeck made that exists (ledger rows), and the cost per hour now and so far."""

    resources: list[Resource]
    per_hour: float
    so_far: float


@dataclass
class RunsCompared(Message):
    """A comparison read or brought up to date (``monitor/compare.py``): its table's rows, headings
    and curves as the screen draws them."""

    heads: list[str]
    rows: list[Row]
    curves: dict[int, tuple[array, array]]
    legend: dict[int, str]
    running: int
    """Runs in it still running (they keep updating)."""
    recovered: list[str] = field(default_factory=list)
    """Each recovery inside a run, a line each (``Comparison.recovery_lines``)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.heads = [as_shown(h) for h in self.heads]
        self.rows = [
            dataclasses.replace(r, name=as_shown(r.name), cells=[as_shown(c) for c in r.cells]) for r in self.rows
        ]
        self.legend = {k: as_shown(v) for k, v in self.legend.items()}
        self.recovered = [as_shown(line) for line in self.recovered]
