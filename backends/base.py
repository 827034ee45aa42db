"""The Backend interface every place a job can run implements (local
torchrun, Kubernetes, EKS), and the plain dataclasses it returns. Each
backend maps its own states onto ``JobState`` so no screen asks which
backend it has."""

from __future__ import annotations

import abc
import builtins
import shlex
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict, cast

from .cost import RunCost
from .errors import BackendError, RunIdTaken
from .states import JobState as JobState  # re-exported: where every caller finds it
from .triage import Triage

if TYPE_CHECKING:  # the spec's module is read when a job is planned, not for a listing
    from .spec import JobKindName, JobSpec


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


def as_test_result(data: dict[str, Any]) -> TestResult:
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
    bad_nodes: dict[str, str] = field(default_factory=dict)
    """An ended run's nodes that the cluster marks bad (NotReady, a spot interruption notice, gone,
    evictions), each with why: ``torchdeck resume RUN --avoid-node NODE`` keeps the next run off them."""

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["bad_nodes"] = dict(self.bad_nodes)
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
    payload: Any = field(default=None, repr=False, compare=False)
    """What the backend needs to apply it that the user does not read (a code bundle's bytes)."""

    def text(self) -> str:
        """The plan as the user reads it: comments, then the objects as YAML or the command line."""
        lines = [f"# plan: run {self.run_id} on the {self.backend} backend"]
        fixes = self.fixes + [""] * (len(self.findings) - len(self.fixes))
        lines += [f"# preflight: {f}" + (f" (fix: {fix})" if fix else "") for f, fix in zip(self.findings, fixes)]
        if self.objects and not self.findings:
            lines.append("# preflight: the cluster can run it")
        lines += [f"# {n}" for n in self.notes]
        if self.target:
            lines.append(f"# written for {self.target}")
        if self.code:
            lines.append(f"# your code goes to {self.code}")
        head = "\n".join(lines) + "\n"
        if self.objects:
            import yaml

            return head + yaml.safe_dump_all(self.objects, sort_keys=False, width=120)
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        where = f"# in {self.cwd}\n" if self.cwd else ""
        return head + where + (env + " " if env else "") + shlex.join(self.command) + "\n"


class Backend(abc.ABC):
    """Where jobs run. Every method may raise BackendError.

    A backend pickles to a working copy of itself (drop clients and caches
    in ``__getstate__``): the console follows a run's metrics from a copy in
    a child process, so that parsing them never slows its frames."""

    name: str = ""

    @property
    def scope(self) -> str:
        """Which runs this backend sees, in a word: where what is kept of its runs (digests) goes."""
        return self.name

    @abc.abstractmethod
    def plan(self, spec: JobSpec) -> Plan:
        """What submitting ``spec`` would do, found out without doing it (a run id free now, the
        objects or command, what the preflight finds)."""

    @abc.abstractmethod
    def apply(self, plan: Plan) -> str:
        """Do exactly what ``plan`` says; its run id. RunIdTaken where another submit took the id
        since the plan was made (nothing of it was made); BackendError where the plan has findings."""

    def submit(self, spec: JobSpec | Plan) -> str:
        """Start the job (a spec: planned now; a plan: exactly it); returns its run id at once."""
        if isinstance(spec, Plan):
            return self.apply(spec)
        for _ in range(5):
            try:
                return self.apply(self.plan(spec))
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

    def set_budget(self, run_id: str, amount: float) -> JobStatus:
        """Change a running run's budget (``torchdeck budget RUN AMOUNT``): past it, the run stops
        as it would at the budget it was submitted with."""
        raise BackendError(
            f"a running run's budget cannot be changed on the {self.name} backend yet",
            "stop it, set budget in the spec, and resume it",
        )

    def discard(self, run_id: str, trust_label: bool = False) -> builtins.list[str]:
        """Remove what a run that has ended keeps on its backend (on a cluster: its job object, pods,
        Services), as ``stop`` does for a running one; what was removed, in words. A local run's
        folder is its record and is kept: nothing of it runs or bills."""
        return []

    def adopt(
        self,
        kind: JobKindName,
        name: str,
        namespace: str | None = None,
        keep: Callable[[JobSpec], None] = lambda spec: None,
    ) -> tuple[JobSpec, builtins.list[str], str]:
        """Follow a job made elsewhere as a run of its own (``torchdeck import KIND/NAME``): the spec
        read from it (``keep`` gets it before the job is changed), a note for each thing the spec
        could not carry, and the run's id. Only a cluster's backend has such jobs."""
        raise BackendError(
            f"the {self.name} backend has no jobs made elsewhere to follow",
            f"a job in a cluster: torchdeck --backend kubernetes import {kind}/{name}",
        )

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
    def node_metrics(self, run_id: str) -> builtins.list[NodeMetrics]:
        """CPU, memory and GPU of the machines the run uses, and of its rank processes."""

    @abc.abstractmethod
    def prepare_data(
        self, spec: JobSpec, on_wait: Callable[[str], None] = lambda line: None, source: str | None = None
    ) -> dict[str, Any]:
        """Put CIFAR-10 where the spec's jobs read it (a folder here, the
        shared volume on a cluster): the official archive, checked against its
        md5, or a copy from ``source`` (an s3:// prefix); ``on_wait`` gets the
        progress lines. Returns what is there (path, image counts)."""

    @abc.abstractmethod
    def model_file_of(self, run_id: str) -> tuple[JobSpec, str]:
        """A run's spec (as far as the backend keeps it) and where its trained model is."""

    def triage(self, run_id: str, wait_s: float = 5.0) -> Triage:
        """Ask every rank of a running run where it is and say which is not where the others are
        (``backends/triage.py``); the verdict is kept with the run and shown by ``status``."""
        raise BackendError(
            f"hang triage is not available on the {self.name} backend yet",
            "py-spy dump --pid PID on each rank's process shows where it is",
        )

    def check(
        self,
        spec: JobSpec | None = None,
        max_bytes: int = 16 << 20,
        on_wait: Callable[[str], None] = lambda line: None,
        timeout_s: float = 900.0,
        dcgm_level: int = 1,
    ) -> dict:
        """The health gate (``trainer/check.py``) on what a run of ``spec`` would use: an all-reduce
        bus-bandwidth sweep between its ranks, then per node and per pair of nodes, and what each
        node is (GPUs, DCGM, EFA): ``{"backend", "world_size", "hosts", "rows": [{"bytes", "time_s",
        "algbw_gbps", "busbw_gbps"}], "nodes", "pairs", "short": {node: why}}``."""
        raise BackendError(
            f"the health gate does not run on the {self.name} backend yet",
            "run it on this machine (torchdeck check), or nccl-tests as a job of your own on the cluster",
        )

    def run_spec(self, run_id: str) -> JobSpec:
        """The spec the run was started from, as far as the backend keeps it (a comparison's rows)."""
        return self.model_file_of(run_id)[0]

    def resume(self, run_id: str, avoid_nodes: Sequence[str] = (), trust_label: bool = False) -> tuple[str, JobSpec]:
        """Start the run that continues ``run_id`` (once, however many consoles ask), kept off
        ``avoid_nodes``: its id and spec. The new run's spec names ``run_id`` (``resumes``)."""
        spec = self.resume_spec(run_id, avoid_nodes, trust_label)
        return self.submit(spec), spec

    def resume_spec(self, run_id: str, avoid_nodes: Sequence[str] = (), trust_label: bool = False) -> JobSpec:
        """The spec that continues an ended ``run_id`` from its newest checkpoint (``torchdeck resume``)."""
        raise BackendError(
            f"resuming a run is not available on the {self.name} backend",
            "submit the same spec (same name) again: it resumes from the newest checkpoint in its folder",
        )

    def fetch_model(
        self,
        run_id: str,
        via: Callable[[JobSpec], str],
        on_wait: Callable[[str], None] = lambda line: None,
        location: str | None = None,
    ) -> str:
        """Where the run's trained model (or the file at ``location`` where the run ran) can be
        copied from on this machine: a path, or an s3:// URL. A backend whose models stay on a
        cluster's volume first copies it to ``via(spec)`` (an S3 prefix) and returns that."""
        return location or self.model_file_of(run_id)[1]

    @abc.abstractmethod
    def test_model(
        self, spec: JobSpec, model_file: str | None = None, on_wait: Callable[[str], None] = lambda line: None
    ) -> TestResult:
        """Evaluate the trained model on the CIFAR-10 test batch where the job ran."""
