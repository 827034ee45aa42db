"""What a shared cluster's nodes and queues look like now (``torchdeck nodes``, ``torchdeck
queues`` and their screens): rows a backend with the ``ClusterViews`` capability fills and every
front end formats. Figures a cluster does not say are None; what could not be read is a note."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Amounts:
    """One resource of a node: what pods may take, what they asked for, what they use now (CPU in
    cores, memory in bytes, GPUs in devices); None where the cluster does not say."""

    allocatable: float = 0.0
    requested: float = 0.0
    used: float | None = None

    def share(self) -> float | None:
        """Requested of allocatable (0..1+); None where nothing is allocatable."""
        return self.requested / self.allocatable if self.allocatable else None


@dataclass(frozen=True)
class NodeRow:
    name: str
    ready: bool
    trouble: str = ""
    """Why no new work should go there ("" where nothing says so): NotReady, a termination
    handler's taint, pressure, cordoned, the health gate's mark."""
    instance_type: str = ""
    zone: str = ""
    cpu: Amounts = Amounts()
    memory: Amounts = Amounts()
    gpus: Amounts = Amounts()
    pods: int = 0
    """Pods bound to it and not ended."""
    jobs: tuple[str, ...] = ()
    """The training jobs with pods on it: run ids (torchdeck's) and references (others')."""

    @property
    def state(self) -> str:
        """ready, bad (something says so) or notready."""
        if self.trouble:
            return "bad"
        return "ready" if self.ready else "notready"


@dataclass(frozen=True)
class NodesView:
    nodes: tuple[NodeRow, ...] = ()
    notes: tuple[str, ...] = ()
    """What could not be read (usage without metrics-server, pods of namespaces not this identity's)."""
    pods_read: bool = True
    """False in the early view (``ClusterViews.nodes_view``'s ``early``): the nodes alone, their
    requests, pods and jobs not read yet."""

    def to_dict(self) -> dict[str, object]:
        return {"nodes": [asdict(n) | {"state": n.state} for n in self.nodes], "notes": list(self.notes)}


@dataclass(frozen=True)
class Usage:
    """One resource of one flavour of a ClusterQueue: its nominal quota and what admitted
    workloads hold of it (Kueue's ``flavorsUsage``), in the resource's own unit."""

    flavor: str
    resource: str
    quota: float
    used: float
    borrowed: float = 0.0

    def shown(self, value: float) -> str:
        """An amount of this resource as a person reads it: memory in bytes' units, else as counted."""
        from .files import size_words

        return size_words(int(value)) if self.resource == "memory" else f"{value:g}"


@dataclass(frozen=True)
class Waiting:
    """A workload waiting in a queue: its place (from 1), the job it is of, and Kueue's reason."""

    position: int
    workload: str
    namespace: str
    local_queue: str
    job: str = ""
    """The job it is of: a run id (torchdeck's) or a reference (``kind/namespace/name``)."""
    priority: int = 0
    since: float | None = None
    reason: str = ""
    mine: bool = False
    """Of a run torchdeck made."""


@dataclass(frozen=True)
class QueueRow:
    """A ClusterQueue, with the LocalQueues that draw on it."""

    name: str
    cohort: str = ""
    stopped: str = ""
    """Its stop policy where it is stopped (Hold, HoldAndDrain): nothing is admitted."""
    usage: tuple[Usage, ...] = ()
    admitted: int = 0
    pending: int = 0
    preempted: int = 0
    """Its workloads evicted by preemption and not admitted again."""
    local_queues: tuple[str, ...] = ()
    """``namespace/name`` of each LocalQueue on it."""
    waiting: tuple[Waiting, ...] = ()
    """Its pending workloads in order, first first."""


@dataclass(frozen=True)
class QueuesView:
    queues: tuple[QueueRow, ...] = ()
    ordered_by: str = ""
    """Where the waiting order comes from: Kueue's visibility API, or (its fallback) priority then
    creation time, which is how Kueue's default StrictFIFO orders a queue."""
    notes: tuple[str, ...] = ()

    def ahead_of(self, job: str) -> list[Waiting]:
        """The workloads ahead of ``job``'s in its ClusterQueue (empty where it does not wait)."""
        for queue in self.queues:
            for place, waiting in enumerate(queue.waiting):
                if waiting.job == job:
                    return list(queue.waiting[:place])
        return []

    def to_dict(self) -> dict[str, object]:
        return {"queues": [asdict(q) for q in self.queues], "ordered_by": self.ordered_by, "notes": list(self.notes)}


def amount(a: Amounts, unit: str = "", asked: bool = True) -> str:
    """``requested/allocatable`` (and ``used``) in a cell: ``3.5/8 used 2.1``; memory in GiB; ``?``
    for the requested where the pods are not read yet (not ``asked``)."""
    scale = 2**30 if unit == "Gi" else 1

    def n(x: float) -> str:
        x /= scale
        return f"{x:.0f}" if x == int(x) or x >= 100 else f"{x:.1f}"

    cell = f"{n(a.requested) if asked else '?'}/{n(a.allocatable)}{unit}"
    return cell + (f" ({n(a.used)})" if a.used is not None else "")


def node_cells(view: NodesView) -> list[tuple[str, ...]]:
    """Each node as a row: name, state, CPU, memory and GPUs (requested/allocatable (used)), pods,
    the training jobs on it, and why it is bad."""
    rows: list[tuple[str, ...]] = []
    for n in view.nodes:
        jobs = ", ".join(n.jobs[:3]) + (f" +{len(n.jobs) - 3}" if len(n.jobs) > 3 else "")
        read = view.pods_read  # else what the pods say is still being read: "?" for it, not a count of none
        gpus = amount(n.gpus, asked=read) if n.gpus.allocatable else "-"
        cpu, memory = amount(n.cpu, asked=read), amount(n.memory, "Gi", asked=read)
        rows.append(
            (
                n.name,
                n.state,
                cpu,
                memory,
                gpus,
                str(n.pods) if read else "?",
                jobs or ("-" if read else "?"),
                n.trouble,
            )
        )
    return rows
