"""The Backend interface every place a job can run implements (local torchrun, Kubernetes, EKS):
its core, which every backend does; what only some do are the capabilities of
``backends/capabilities.py``. The dataclasses it returns are in ``backends/records.py`` (and are
found here too, where every caller has always found them)."""

from __future__ import annotations

import abc
import builtins
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

from .capabilities import HealthGate
from .errors import BackendError, RunIdTaken
from .records import ClassScore as ClassScore
from .records import GateStep as GateStep
from .records import GpuMetrics as GpuMetrics
from .records import JobState as JobState
from .records import JobStatus as JobStatus
from .records import LogLine as LogLine
from .records import MetricEvent as MetricEvent
from .records import NodeMetrics as NodeMetrics
from .records import Plan as Plan
from .records import PlanPayload as PlanPayload
from .records import ProcessMetrics as ProcessMetrics
from .records import Progress as Progress
from .records import QueueWait as QueueWait
from .records import RankProgress as RankProgress
from .records import TestResult as TestResult
from .records import as_test_result as as_test_result
from .records import silent

if TYPE_CHECKING:
    from .health import GateResult
    from .spec import JobSpec
    from .spec_options import Where

C = TypeVar("C")


class Backend(abc.ABC):
    """Where jobs run: the core every backend does (plan, apply, list, status, follow, logs, stop,
    resume). What only some do is a capability (``backends/capabilities.py``) that a backend
    declares by subclassing it, and a front end asks for by type: ``backend.capability(HealthGate)``
    (None where it has not) or ``backend.require(HealthGate)`` (a BackendError that says so).
    Every method may raise BackendError.

    A backend pickles to a working copy of itself (drop clients and caches
    in ``__getstate__``): the console follows a run's metrics from a copy in
    a child process, so that parsing them never slows its frames."""

    name: str = ""
    fields: Where = "all"
    """Which spec fields it reads besides those every backend does (``Option.where``): a local
    backend's (``local``) or a cluster's (``cluster``). The launch form shows those."""

    @property
    def scope(self) -> str:
        """Which runs this backend sees, in a word: where what is kept of its runs (digests) goes."""
        return self.name

    def capability(self, kind: type[C]) -> C | None:
        """This backend as ``kind`` (a capability class), where it has it; None where it has not."""
        return self if isinstance(self, kind) else None

    def require(self, kind: type[C]) -> C:
        """This backend as ``kind``; a BackendError in the capability's own words where it has not."""
        if isinstance(self, kind):
            return self
        what = getattr(kind, "what", kind.__name__)
        hint = getattr(kind, "elsewhere", "")
        raise BackendError(f"{what} is not available on the {self.name} backend", hint)

    @abc.abstractmethod
    def plan(self, spec: JobSpec) -> Plan:
        """What submitting ``spec`` would do, found out without doing it (a run id free now, the
        objects or command, the health gate where the spec asks for it, what the preflight finds)."""

    def apply(self, plan: Plan, progress: Progress = silent) -> str:
        """Do exactly what ``plan`` says, step by step: the health gate where it has one, then the run
        (``start``); its run id. RunIdTaken where another submit took the id since the plan was
        made (nothing of it was made); BackendError where the plan has findings or is another
        backend's. ``progress`` hears what each step waits for."""
        if plan.backend != self.name:
            raise BackendError(f"this plan was not made by the {self.name} backend", "make it with plan(spec)")
        if plan.findings:
            more = f" (and {len(plan.findings) - 1} more: torchdeck train --dry-run lists them)"
            raise BackendError(plan.findings[0] + (more if len(plan.findings) > 1 else ""), plan.fixes[0])
        if plan.gate is not None:
            result = self.require(HealthGate).check(plan.spec, plan.gate, progress)
            plan = self.gated(plan, result, progress)
        return self.start(plan, progress)

    def gated(self, plan: Plan, result: GateResult, progress: Progress) -> Plan:
        """``plan`` after its health gate answered ``result``: here the verdict is said and the plan
        stays as it is; a cluster's backend keeps the run off the nodes that fell short."""
        progress(f"health gate: peak bus bandwidth {result.peak_busbw():.3f} GB/s; " + result.verdict())
        return plan

    @abc.abstractmethod
    def start(self, plan: Plan, progress: Progress) -> str:
        """Make the run ``plan`` says (its gate passed): claim its id, create its objects or start its
        launcher; its run id."""

    def submit(self, spec: JobSpec | Plan, progress: Progress = silent) -> str:
        """Start the job (a spec: planned now; a plan: exactly it); returns its run id once it is made."""
        if isinstance(spec, Plan):
            return self.apply(spec, progress)
        for _ in range(5):
            try:
                return self.apply(self.plan(spec), progress)
            except RunIdTaken:
                continue  # another console took this id between the plan and the create: plan again
        raise BackendError(f"no free run id for {spec.name!r}: five were taken as they were tried", "submit again")

    @abc.abstractmethod
    def status(self, run_id: str) -> JobStatus:
        """The run's state now. ``run_id`` may be a unique prefix."""

    @abc.abstractmethod
    def list(self) -> list[JobStatus]:
        """Every run this backend knows, newest first."""

    def unseen(self) -> builtins.list[str]:
        """What the listings so far could not see (on a shared cluster: a kind this identity may not
        list in every namespace), one line each, for the front end to say beside the runs."""
        return []

    @abc.abstractmethod
    def cancel(self, run_id: str, trust_label: bool = False) -> JobStatus:
        """Stop the run and everything it started; returns the final status. ``trust_label``: the
        user said a run found by its label alone (``JobStatus.found_by_label``) is theirs."""

    def discard(self, run_id: str, trust_label: bool = False) -> builtins.list[str]:
        """Remove what a run that has ended keeps on its backend (on a cluster: its job object, pods,
        Services), as ``stop`` does for a running one; what was removed, in words. A local run's
        folder is its record and is kept: nothing of it runs or bills."""
        return []

    @abc.abstractmethod
    def logs(
        self, run_id: str, rank: int | None = None, follow: bool = False, poll_s: float = 0.2
    ) -> Iterator[builtins.list[LogLine]]:
        """Batches of log lines, one rank or all. With ``follow`` it keeps
        going until the run ends, yielding an empty batch when idle so the
        caller can stop between batches."""

    @abc.abstractmethod
    def metrics(
        self, run_id: str, follow: bool = True, poll_s: float = 0.1
    ) -> AsyncIterator[builtins.list[MetricEvent]]:
        """The run's metric events from the start, in batches; with
        ``follow`` it ends after the run ends and the stream is drained."""

    logs_carry_metrics: bool = False
    """True where metric lines and log lines come from one source (pod logs):
    ``follow`` then yields both from it, and nobody needs to open the logs twice."""

    async def follow(self, run_id: str) -> AsyncIterator[tuple[builtins.list[MetricEvent], builtins.list[LogLine]]]:
        """The run's metric events, and its log lines where ``logs_carry_metrics``,
        in batches until the run ends."""
        async for batch in self.metrics(run_id, follow=True):
            yield batch, []

    @abc.abstractmethod
    def run_spec(self, run_id: str) -> JobSpec:
        """The spec the run was started from, as far as the backend keeps it (a comparison's rows)."""

    def resume(
        self, run_id: str, avoid_nodes: Sequence[str] = (), trust_label: bool = False, progress: Progress = silent
    ) -> tuple[str, JobSpec]:
        """Start the run that continues ``run_id`` (once, however many consoles ask), kept off
        ``avoid_nodes``: its id and spec. The new run's spec names ``run_id`` (``resumes``)."""
        spec = self.resume_spec(run_id, avoid_nodes, trust_label)
        return self.submit(spec, progress), spec

    @abc.abstractmethod
    def resume_spec(self, run_id: str, avoid_nodes: Sequence[str] = (), trust_label: bool = False) -> JobSpec:
        """The spec that continues an ended ``run_id`` from its newest checkpoint (``torchdeck resume``)."""
