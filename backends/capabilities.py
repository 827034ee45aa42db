"""What only some backends do, each a capability class a backend declares by subclassing it (its
methods are the capability; ``tests/unit/test_capabilities.py`` proves each backend that declares one
has every method of it) and a front end asks for by type, never by ``hasattr`` or a backend's
name: ``backend.capability(NodeCordon)`` is the backend as a ``NodeCordon``, or None;
``backend.require(NodeCordon)`` says in one line, with a hint, that this backend has not got it.
A new capability is one class here (its ``what`` and ``elsewhere`` are the words of that line),
its methods in the backends that have it, and the front ends that ask for it.
Images (build, push) are not a backend's: the cloud's front object (``EksCloud``) has them."""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from .records import GateStep, JobStatus, NodeMetrics, Progress, TestResult, silent
from .triage import Triage

if TYPE_CHECKING:
    from .health import GateResult
    from .spec import JobKindName, JobSpec
    from .views import NodesView, QueuesView


class HealthGate:
    """The health gate (``trainer/check.py``): the all-reduce sweep between a run's ranks, each
    node's own links and each pair's, what each node is (GPUs, DCGM, EFA), and the nodes that fall
    short. ``train --check`` runs it as the plan's first step (``GateStep``)."""

    what: ClassVar[str] = "the health gate"
    elsewhere: ClassVar[str] = "run it on this machine (torchdeck check), or nccl-tests as a job of your own"

    def check(
        self, spec: JobSpec | None = None, step: GateStep = GateStep(), progress: Progress = silent
    ) -> GateResult:
        """The gate on what a run of ``spec`` would use (``step``: how far it sweeps, DCGM's level,
        how long it may take), judged."""
        raise NotImplementedError  # each backend that declares the capability has its own


class NodeCordon:
    """Marking a node unschedulable (``kubectl cordon``): ``check --cordon`` on the nodes that fall short."""

    what: ClassVar[str] = "cordoning a node"
    elsewhere: ClassVar[str] = "--cordon is for a cluster's nodes (--backend kubernetes)"

    def cordon(self, node: str) -> None:
        """Nothing new is scheduled on ``node``; what runs there stays."""
        raise NotImplementedError  # each backend that declares the capability has its own

    def uncordon(self, node: str) -> bool:
        """New pods may be scheduled on ``node`` again; False where it was not cordoned."""
        raise NotImplementedError  # each backend that declares the capability has its own


class NodeMeasures:
    """CPU, memory and GPU of the machines a run uses, and of its rank processes (the monitor's nodes)."""

    what: ClassVar[str] = "measuring the run's machines"
    elsewhere: ClassVar[str] = "the run's own metric lines still show its progress"
    every_s: ClassVar[float] = 1.0
    """How often its figures are new (a front end that asks more often is shown the same ones)."""

    def node_metrics(self, run_id: str) -> builtins.list[NodeMetrics]:
        """Each machine the run uses, now."""
        raise NotImplementedError  # each backend that declares the capability has its own


@dataclass(frozen=True)
class DataReady:
    """Where CIFAR-10 is now (``data prepare``): its folder and image counts, as the trainer's data
    tool answered."""

    path: str
    train_images: int
    test_images: int
    classes: tuple[str, ...] = ()

    @classmethod
    def from_tool(cls, answer: dict[str, object]) -> DataReady:
        """The data tool's result; a BackendError where it answered without the counts."""
        from .errors import BackendError

        path, train, test = answer.get("path"), answer.get("train_images"), answer.get("test_images")
        if not isinstance(train, int) or not isinstance(test, int):
            raise BackendError("the data job answered without its image counts", "see the data job's log")
        classes = answer.get("classes")
        return cls(str(path), train, test, tuple(str(c) for c in classes) if isinstance(classes, list) else ())

    def to_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "train_images": self.train_images,
            "test_images": self.test_images,
            "classes": list(self.classes),
        }


class CifarTasks:
    """The built-in trainer's tasks beside training: CIFAR-10 put where the jobs read it, a trained
    model tested on its test batch, and the model file found and fetched."""

    what: ClassVar[str] = "data preparation and the model test"
    elsewhere: ClassVar[str] = "--backend local runs them on this machine"

    def prepare_data(self, spec: JobSpec, progress: Progress = silent, source: str | None = None) -> DataReady:
        """Put CIFAR-10 where the spec's jobs read it (a folder here, the shared volume on a cluster):
        the official archive, checked against its md5, or a copy from ``source`` (an s3:// prefix)."""
        raise NotImplementedError  # each backend that declares the capability has its own

    def test_model(self, spec: JobSpec, model_file: str | None = None, progress: Progress = silent) -> TestResult:
        """Evaluate the trained model on the CIFAR-10 test batch where the job ran."""
        raise NotImplementedError  # each backend that declares the capability has its own

    def model_file_of(self, run_id: str) -> tuple[JobSpec, str]:
        """A run's spec (as far as the backend keeps it) and where its trained model is."""
        raise NotImplementedError  # each backend that declares the capability has its own

    def fetch_model(
        self,
        run_id: str,
        via: Callable[[JobSpec], str],
        progress: Progress = silent,
        location: str | None = None,
    ) -> str:
        """Where the run's trained model (or the file at ``location`` where the run ran) can be
        copied from on this machine: a path, or an s3:// URL. A backend whose models stay on a
        cluster's volume first copies it to ``via(spec)`` (an S3 prefix) and returns that."""
        return location or self.model_file_of(run_id)[1]


class HangTriage:
    """Asking every rank of a running run where it is (``backends/triage.py``)."""

    what: ClassVar[str] = "hang triage"
    elsewhere: ClassVar[str] = "py-spy dump --pid PID on each rank's process shows where it is"

    def triage(self, run_id: str, wait_s: float = 5.0) -> Triage:
        """Which rank is not where the others are; the verdict is kept with the run."""
        raise NotImplementedError  # each backend that declares the capability has its own


class ClusterViews:
    """The whole shared cluster beside the runs: every node's room, use and trouble, and every
    queue's quota, usage and waiting line (``torchdeck nodes``, ``torchdeck queues``)."""

    what: ClassVar[str] = "the nodes and queues of a shared cluster"
    elsewhere: ClassVar[str] = "a cluster's: torchdeck --backend kubernetes nodes (or queues)"

    def nodes_view(self, early: Callable[[NodesView], None] | None = None) -> NodesView:
        """Every node now: allocatable, requested and used CPU, memory and GPUs, its training
        jobs, and why it is bad. ``early``, where given, is handed the nodes alone first (their room,
        state and trouble; ``pods_read`` False) while their pods are still being read: on 1,000
        nodes the rows come in a third of the whole read's time."""
        raise NotImplementedError  # each backend that declares the capability has its own

    def queues_view(self) -> QueuesView:
        """Every queue this identity may read, its usage and its waiting workloads in order."""
        raise NotImplementedError  # each backend that declares the capability has its own


class JobAdoption:
    """Following a job made elsewhere as a run of its own (``torchdeck import KIND/NAME``)."""

    what: ClassVar[str] = "following a job made elsewhere"
    elsewhere: ClassVar[str] = "a job in a cluster: torchdeck --backend kubernetes import KIND/NAME"

    def adopt(
        self,
        kind: JobKindName,
        name: str,
        namespace: str | None = None,
        keep: Callable[[JobSpec], None] = lambda spec: None,
    ) -> tuple[JobSpec, builtins.list[str], str]:
        """The spec read from the job (``keep`` gets it before the job is changed), a note for each
        thing the spec could not carry, and the run's id."""
        raise NotImplementedError  # each backend that declares the capability has its own


class BudgetChange:
    """Changing a running run's budget (``torchdeck budget RUN AMOUNT``)."""

    what: ClassVar[str] = "changing a running run's budget"
    elsewhere: ClassVar[str] = "stop it, set budget in the spec, and resume it"

    def set_budget(self, run_id: str, amount: float) -> JobStatus:
        """Past ``amount``, the run stops as it would at the budget it was submitted with."""
        raise NotImplementedError  # each backend that declares the capability has its own


CAPABILITIES: tuple[type, ...] = (
    HealthGate,
    NodeCordon,
    NodeMeasures,
    CifarTasks,
    HangTriage,
    JobAdoption,
    BudgetChange,
    ClusterViews,
)
"""Every capability, for the docs and the test that checks each backend declares what it does."""

__all__ = [*(c.__name__ for c in CAPABILITIES), "CAPABILITIES", "DataReady"]
