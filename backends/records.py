"""The plain dataclasses the backends return and take (a run's status, its metric and log lines,
its machines, a plan and its steps): what crosses from ``backends/`` to the front ends. Each
backend maps its own states onto ``JobState`` so no screen asks which backend it has."""

from __future__ import annotations

import builtins
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict, cast

from .cost import RunCost
from .errors import BackendError
from .states import JobState as JobState  # re-exported: where every caller finds it
from .triage import Triage

if TYPE_CHECKING:  # the spec's module is read when a job is planned, not for a listing
    from .spec import JobSpec

Progress = Callable[[str], None]
"""Where a long call says what it waits for, a line at a time (the CLI's stderr, a screen's log)."""


def silent(line: str) -> None:
    """A ``Progress`` that says nothing."""


class ClassScore(TypedDict):
    accuracy: float  # 0..1
    images: int


class TestResult(TypedDict):
    """A model test's result (``trainer.evaluate``'s JSON, as the backends return it)."""

    model: str
    model_file: str
    images: int
    accuracy: float  # 0..1
    loss: float
    per_class: dict[str, ClassScore]


def as_test_result(data: dict[str, object]) -> TestResult:
    """The trainer's JSON as a TestResult; a BackendError where a key is missing."""
    missing = sorted(TestResult.__required_keys__ - data.keys())
    if missing:
        raise BackendError(f"the model test answered without {', '.join(missing)}", "see the test job's log")
    return cast(TestResult, data)


@dataclass
class RankProgress:
    """One rank's progress as its metric lines left it (``status`` and ``jobs --output json``)."""

    rank: int
    step: int = 0
    epoch: int = 0
    loss: float | None = None
    val_loss: float | None = None
    samples_per_s: float | None = None
    steps_per_s: float | None = None
    last_report: float | None = None
    """When the rank last wrote a metric line (seconds since the epoch)."""
    state: str = "running"
    """running, done, stopped (asked to, after a snapshot), or error (with ``error``, its message)."""
    error: str = ""
    step_s_median: float | None = None
    """Seconds per step over its recent steps (``backends/step_times.py``): the median and the 95th
    percentile, its relative score (the fastest rank's median over its own: 1.0 is the fastest) and
    its individual score (its own best stretch over its newest: 1.0 is as fast as it has been)."""
    step_s_p95: float | None = None
    compute_s_median: float | None = None
    """The median of its own compute seconds a step (the built-in trainer's forward pass), where its
    lines say them: the relative score is made from these where every rank has them."""
    compute_s_p95: float | None = None
    """Their 95th percentile (a rank whose median is under the fastest rank's p95 is not slower)."""
    relative_score: float | None = None
    individual_score: float | None = None


@dataclass
class QueueWait:
    """Where a job submitted through a queue (Kueue) stands with it (``kubernetes/queues.queue_wait``)."""

    local_queue: str
    cluster_queue: str = ""
    """The ClusterQueue it was admitted to, or that its LocalQueue draws on."""
    reason: str = ""
    """Kueue's words while it waits (no quota, preempted by whom)."""
    position: int | None = None
    """Its place in its LocalQueue, from 0, where the cluster serves Kueue's visibility API."""
    cluster_position: int | None = None
    admitted_at: float | None = None
    preempted: bool = False
    outside: bool = False
    """It carries a queue's label, yet Kueue made no Workload of it and it is not held: it runs
    outside the queue's quota (a kind this Kueue does not manage), and was never admitted."""


@dataclass
class JobStatus:
    """One run as the backend sees it now."""

    run_id: str
    name: str
    backend: str
    state: JobState
    world_size: int
    submitted_at: float
    finished_at: float | None = None
    exit_code: int | None = None
    reason: str = ""
    """Why it is in this state, in words (failure reason, what it waits for)."""
    hint: str = ""
    restarts: int = 0
    epoch: int = 0
    epochs: int | None = None
    step: int = 0
    total_steps: int | None = None
    loss: float | None = None
    accuracy: float | None = None
    """The latest eval accuracy (0..1)."""
    location: str = ""
    """Where the run's files live (a folder, a namespace)."""
    val_loss: float | None = None
    """The latest validation or test loss (a series of its own, never the training loss)."""
    queue: QueueWait | None = None
    """A job submitted through a queue (Kueue): where it stands with it."""
    trainer_status: dict[str, Any] | None = None
    """A TrainJob's ``status.trainerStatus`` as Kubeflow Trainer keeps it (``progressPercentage``,
    ``estimatedRemainingSeconds``, ``metrics``, ``lastUpdatedTime``), where the controller has one."""
    ranks: list[RankProgress] = field(default_factory=list)
    """Each rank's progress, where the backend read it; the run's own step, epoch and loss are the
    lowest rank's (rank 0's), as the monitor's header shows them."""
    cost: RunCost | None = None
    """What it has cost so far (node-hours times prices, ``backends/cost.py``), with its budget."""
    warnings: list[str] = field(default_factory=list)
    """What torchdeck refused or could not read while working the status out, a line each (a pid
    file that names a process which is not the run's launcher)."""
    triage: Triage | None = None
    """The newest hang triage of the run (``backends/triage.py``): which rank is elsewhere, at which
    line, in which collective the others wait; where one was made."""

    found_by_label: bool = False
    """A cluster run torchdeck has no record of making here (made from another machine, or by
    someone else with torchdeck's labels): shown, followed, and stopped or resumed only when the
    user says it is theirs."""
    made_by: str = ""
    """A cluster's training job torchdeck did not make (no torchdeck label): who did, as far as
    the cluster says (``kubectl``, a pipeline's or an SDK's client; ``someone else``). Such a job
    is shown and followed read-only under its reference, ``kind/namespace/name``; "" for a run."""
    namespace: str = ""
    """A cluster job's namespace ("" on this machine)."""
    kind: str = ""
    """A cluster job's kind as Kubernetes names it (PyTorchJob, TrainJob, ...; "" on this machine)."""
    recovery: list[str] = field(default_factory=list)
    """How the run came back inside itself, a line each, oldest first: each attempt after the first
    (where its ranks moved, the step it resumed from, the steps lost), as far back as the status
    reads its ranks' events (``backends/recovery.py``)."""
    coming_back: list[str] = field(default_factory=list)
    """A live run's ranks on their way back, a line each: a pod made again on another node, not yet
    in the run."""
    bad_nodes: dict[str, str] = field(default_factory=dict)
    """An ended run's nodes that the cluster marks bad (NotReady, a spot interruption notice, gone,
    evictions), each with why: ``torchdeck resume RUN --avoid-node NODE`` keeps the next run off them."""

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["bad_nodes"] = dict(self.bad_nodes)
        out["recovery"] = list(self.recovery)
        out["coming_back"] = list(self.coming_back)
        out["state"] = self.state.value
        out["ranks"] = [dict(r.__dict__) for r in self.ranks]
        out["cost"] = self.cost.to_dict() if self.cost is not None else None
        out["queue"] = dict(self.queue.__dict__) if self.queue is not None else None
        out["triage"] = self.triage.to_dict() if self.triage is not None else None
        return out


@dataclass(slots=True)
class MetricEvent:
    """One line of the trainer's metric stream (schema 1, see
    ``torchdeck.trainer.metrics``); ``record`` is the whole parsed line."""

    event: str
    rank: int
    time: float
    record: dict[str, Any]


@dataclass(slots=True)
class LogLine:
    """One line a rank wrote (stdout and stderr together, in order)."""

    rank: int
    text: str
    attempt: int = 0
    """0 for the first try, N for torchrun's N-th restart."""


@dataclass
class GpuMetrics:
    index: int
    name: str
    util_percent: float
    mem_used_mb: float
    mem_total_mb: float


@dataclass
class ProcessMetrics:
    """One rank's process."""

    rank: int
    pid: int
    cpu_percent: float
    rss_mb: float


@dataclass
class NodeMetrics:
    """One machine the job runs on, now."""

    name: str
    cpu_percent: float
    cpu_count: int
    mem_used_mb: float
    mem_total_mb: float
    gpus: list[GpuMetrics] = field(default_factory=list)
    gpu_note: str = ""
    """Why there are no GPU figures ("no GPU"), when there are none."""
    processes: list[ProcessMetrics] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    """Hostnames of the run's workers on this machine (pod names on a
    cluster): the trainer's lines name their host, so the monitor can put
    the GPU utilization the ranks report on the right node."""


class PlanPayload:
    """What a backend needs to apply its plan that the user does not read (the rendered objects and
    code bundle on a cluster, the launcher's record here): each backend's own subclass, which its
    ``start`` asks for, so a plan made by another backend is refused."""

    def summary(self) -> builtins.list[str]:
        """What the person reading the plan should see of it, a line each (a code bundle's files and size)."""
        return []


@dataclass(frozen=True)
class GateStep:
    """The health gate as the plan's first step (``cluster.health_gate``, ``train --check``):
    ``trainer/check.py`` on what the run would use, before anything of the run is made. On a
    cluster the nodes that fall short are kept off (added to ``cluster.avoid_nodes``, the objects
    written again under the same run id); here the verdict is said and the run goes on."""

    max_bytes: int = 16 << 20
    dcgm_level: int = 1
    timeout_s: float = 900.0
    keeps_off: bool = True
    """Whether the nodes that fall short are kept off (a cluster's), or only said (one machine)."""

    def words(self) -> str:
        if self.keeps_off:
            return (
                "health gate first: torchdeck check runs on the nodes with this image, kind and node selection; "
                "the nodes that fall short are kept off (cluster.avoid_nodes), and the objects below are written "
                "again for that, under the same run id"
            )
        return "health gate first: torchdeck check measures the all-reduce between the run's ranks here, and says it"


@dataclass
class Plan:
    """What a submit will do, made before it does it (``Backend.plan``): the user reads it
    (``train --dry-run``, ``render``, the launch form's preview) and ``Backend.submit`` applies
    exactly it; tests compare what reached the API server or the launcher with it. (TorchX's
    ``submit_dryrun`` and ``schedule``.)"""

    backend: str
    run_id: str
    spec: JobSpec
    """The spec as the backend will run it (its checks applied, paths made absolute)."""
    objects: builtins.list[dict[str, Any]] = field(default_factory=builtins.list)
    """Clusters: the objects to create, in order."""
    command: builtins.list[str] = field(default_factory=builtins.list)
    """Local: the command the run's launcher starts."""
    env: dict[str, str] = field(default_factory=dict)
    """Local: the environment it adds (``TORCHDECK_JOB_STARTED_AT`` is the submit's time, added then)."""
    cwd: str = ""
    """Local: the folder it starts in."""
    target: str = ""
    """Clusters: the operator release the objects are written for (empty: built-in kinds)."""
    code: str = ""
    """Where the user's code goes, in words (``configmap NS/NAME``, ``s3://...``; empty: none sent)."""
    findings: builtins.list[str] = field(default_factory=builtins.list)
    """What stops it, found before anything is made (``submit`` refuses a plan with any)."""
    notes: builtins.list[str] = field(default_factory=builtins.list)
    """What the user should know and that stops nothing (a queue's state, a check not run)."""
    fixes: builtins.list[str] = field(default_factory=builtins.list)
    """Each finding's fix, in the same order."""
    gate: GateStep | None = None
    """The health gate, run first by ``apply`` (the spec asks for it)."""
    payload: PlanPayload | None = field(default=None, repr=False, compare=False)
    """What the backend needs to apply it that the user does not read (a code bundle's bytes)."""

    def text(self, full: bool = False) -> str:
        """The plan as the user reads it: comments, then the objects as YAML or the command line. A
        code bundle's ConfigMap shows as its files and size; ``full`` writes every object whole
        (``--output yaml``, the preview's ``f`` key)."""
        lines = [f"# plan: run {self.run_id} on the {self.backend} backend"]
        fixes = self.fixes + [""] * (len(self.findings) - len(self.fixes))
        lines += [f"# preflight: {f}" + (f" (fix: {fix})" if fix else "") for f, fix in zip(self.findings, fixes)]
        if self.objects and not self.findings and not any(n.startswith("preflight not run") for n in self.notes):
            lines.append("# preflight: the cluster can run it")
        lines += [f"# {n}" for n in self.notes]
        if self.target:
            lines.append(f"# written for {self.target}")
        if self.gate is not None:
            lines.append(f"# {self.gate.words()}")
        if self.code:
            lines.append(f"# your code goes to {self.code}")
        lines += [f"# {line}" for line in (self.payload.summary() if self.payload is not None else [])]
        head = "\n".join(lines) + "\n"
        if self.objects:
            import yaml

            shown = self.objects if full else [_briefly(obj) for obj in self.objects]
            return head + yaml.safe_dump_all(shown, sort_keys=False, width=120)
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        where = f"# in {self.cwd}\n" if self.cwd else ""
        return head + where + (env + " " if env else "") + shlex.join(self.command) + "\n"


def _briefly(obj: dict[str, Any]) -> dict[str, Any]:
    """An object as a plan shows it to a person: a ConfigMap's data (the code bundle's base64, a
    hundred lines of it) as a count of its keys and bytes."""
    if obj.get("kind") != "ConfigMap":
        return obj
    shown = dict(obj)
    for key in ("data", "binaryData"):
        values = obj.get(key)
        if isinstance(values, dict) and values:
            size = sum(len(str(v)) for v in values.values())
            shown[key] = f"<{len(values)} key(s), {size:,} characters: --output yaml shows them>"
    return shown
