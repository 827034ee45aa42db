"""The whole cluster as a shared cluster's user needs it (``torchdeck nodes``, ``torchdeck queues``):
each node's room and use, the training pods on it, and why it is bad; each ClusterQueue's quota and
usage, its admitted and waiting workloads in order, and Kueue's reason for each. Every figure is
read with one list request a kind (nodes, pods, node metrics; ClusterQueues, LocalQueues,
Workloads; the visibility API's version, kept a minute, and its answer once a queue), whatever the
number of nodes or pods."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from ..errors import BackendError
from ..views import Amounts, NodeRow, NodesView, QueueRow, QueuesView, Usage, Waiting
from .client import ApiError, ApiKind, api_path, quantity
from .diagnosis import node_trouble
from .fleet import job_ref
from .kinds import JOB_KINDS, KEY_BY_KIND, LISTED_ALONE
from .manifests import RUN_LABEL
from .objects import (
    Api,
    ClusterQueue,
    LocalQueue,
    Node,
    NodeUsage,
    ObjectMeta,
    Pod,
    Workload,
    items,
    read_pages,
    true_condition,
)
from .queues import VISIBILITY, kueue_kind, kueue_version, visibility_version

if TYPE_CHECKING:
    from .client import KubeClient

GPU = "nvidia.com/gpu"
LIVE = "status.phase!=Succeeded,status.phase!=Failed"
"""The pods that hold a node's room: bound and not ended."""
OPERATOR_NAME = "training.kubeflow.org/operator-name"
"""What the Kubeflow operators call themselves on the pods they make."""
ZONE = "topology.kubernetes.io/zone"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"


def pod_job(pod: Pod) -> str:
    """The training job a pod is of: a torchdeck run's id, another job's reference, or "" (not a
    training pod). Kinds that label their pods alike (a PyTorchJob's and an MPIJob's) are told
    apart by the pod's controller where it is the job itself, else by the operator the pod names
    (``kinds.JobKind.operator_name``: an MPIJob's launcher is a batch Job's pod); a pod a JobSet made (a TrainJob's
    too) is its JobSet's; else the first kind whose label it bears."""
    run = pod.labels.get(RUN_LABEL)
    if run:
        return run
    ns = pod.meta.namespace or "default"
    owners = {ref.kind for ref in pod.meta.controllers()}
    operator = pod.labels.get(OPERATOR_NAME)
    guess = ""
    for kind in JOB_KINDS.values():
        name = pod.labels.get(kind.pod_label) if kind.pod_label and not kind.builtin else None
        if name and (kind.kind in owners or (operator and operator == kind.operator_name)):
            return job_ref(kind.key, ns, name)  # its controller says which, or its operator
        if name and not guess and kind.pod_label not in {listed.pod_label for listed in LISTED_ALONE}:
            guess = job_ref(kind.key, ns, name)
    for listed in LISTED_ALONE:  # a JobSet's pods (a TrainJob's too: its JobSet bears its name)
        name = pod.labels.get(listed.pod_label)
        if name:
            return job_ref(listed.key, ns, name)
    return guess


def _asked(pod: Pod, resource: str) -> float:
    return sum(quantity(r.asked(resource)) for r in pod.resources if r.asked(resource))


def read_nodes_view(
    client: KubeClient,
    marked: Mapping[str, str],
    namespace: str | None = None,
    early: Callable[[NodesView], None] | None = None,
) -> NodesView:
    """Every node: allocatable, requested (by the pods bound to it and not ended) and used (from
    metrics-server) CPU, memory and GPUs; the training jobs with pods on it; and why it is bad (what
    ``status`` says of a run's node, and the health gate's ``marked`` nodes). The nodes are read
    first, and handed to ``early`` (where given) before the pods are. One list after another: on
    1,000 nodes and 1,700 pods (benchmarks/fleet_scale.py's cluster, side by side, 16 reads each)
    the three at once in threads took 0.73 s (median) and one after another 0.82, but the nodes
    came in 0.25 s rather than 0.6: the rows on screen a third of a second sooner are worth a
    tenth at the end (the API server shares the cores, and parsing threads hold the interpreter
    from the reading ones)."""
    try:
        nodes = client.read_nodes()
    except ApiError as exc:
        if exc.status != 403:
            raise
        raise BackendError(
            "may not list the cluster's nodes (nodes are cluster-wide: this identity's role does not reach them)",
            "ask your admin for a ClusterRole that may get and list nodes; your runs' own nodes show in their status",
        ) from None
    if early is not None:
        early(NodesView(_sorted(_node_row(node, [], None, marked) for node in nodes), pods_read=False))
    notes: list[str] = []
    pods = _live_pods(client, namespace, notes)
    usage = _node_usage(client, notes)
    by_node: dict[str, list[Pod]] = {}
    for pod in pods:
        if pod.node:
            by_node.setdefault(pod.node, []).append(pod)
    rows = _sorted(_node_row(node, by_node.get(node.name, []), usage.get(node.name), marked) for node in nodes)
    return NodesView(rows, tuple(notes))


def _sorted(rows: Iterable[NodeRow]) -> tuple[NodeRow, ...]:
    """The bad nodes first, then by name."""
    return tuple(sorted(rows, key=lambda r: (r.state == "ready", r.name)))


def _live_pods(client: KubeClient, namespace: str | None, notes: list[str]) -> list[Pod]:
    """The pods bound and not ended in every namespace; in the user's own where they may not list them all."""

    def live(where: str | None) -> list[Pod]:
        return read_pages(client.list_pages(api_path("Pod", where), {"fieldSelector": LIVE}), Pod.from_api)

    try:
        return live(None)
    except ApiError as exc:
        if exc.status != 403:
            raise
    where = namespace or client.context_namespace or "default"
    notes.append(f"may not list pods in every namespace: requests and jobs count those in {where} only")
    return live(where)


def _node_usage(client: KubeClient, notes: list[str]) -> dict[str, NodeUsage]:
    """Each node's use now, from metrics-server (none, and a note, where it is not there or not this identity's)."""
    try:
        listed = items(client.request("GET", api_path("NodeMetrics")))
    except ApiError as exc:
        notes.append(
            "node use is not this identity's to read (metrics.k8s.io: forbidden)"
            if exc.status == 403
            else "no metrics-server: install it for each node's use now"
        )
        return {}
    return {u.name: u for u in (NodeUsage.from_api(i) for i in listed)}


def _node_row(node: Node, pods: list[Pod], used: NodeUsage | None, marked: Mapping[str, str]) -> NodeRow:
    ready = true_condition(node.conditions, "Ready") is not None
    trouble = "; ".join(w for w in (node_trouble(node), marked.get(node.name, "")) if w)
    room = node.resources
    jobs = sorted({job for job in (pod_job(p) for p in pods) if job})
    return NodeRow(
        name=node.name,
        ready=ready,
        trouble=trouble,
        instance_type=node.labels.get(INSTANCE_TYPE, ""),
        zone=node.labels.get(ZONE, ""),
        cpu=Amounts(
            quantity(room.get("cpu", "0")),
            sum(_asked(p, "cpu") for p in pods),
            quantity(used.cpu) if used is not None and used.cpu else None,
        ),
        memory=Amounts(
            quantity(room.get("memory", "0")),
            sum(_asked(p, "memory") for p in pods),
            quantity(used.memory) if used is not None and used.memory else None,
        ),
        gpus=Amounts(quantity(room.get(GPU, "0")), sum(_asked(p, GPU) for p in pods)),
        pods=len(pods),
        jobs=tuple(jobs),
    )


# -- queues --------------------------------------------------------------------------------


def _workload_job(workload: Workload) -> tuple[str, str]:
    """(the job a Workload is of, as a reference; its uid) from its controller reference."""
    for ref in workload.meta.controllers():
        key = KEY_BY_KIND.get(ref.kind)
        if key is not None:
            return job_ref(key, workload.meta.namespace or "default", ref.name), ref.uid
    return "", ""


def read_queues_view(client: KubeClient, ours: Mapping[str, str], namespace: str | None = None) -> QueuesView:
    """Every ClusterQueue this identity may read, with its LocalQueues, quota and usage, admitted,
    waiting (in order, with Kueue's reason) and preempted workloads. ``ours``: the uids of the jobs
    torchdeck made here, by uid -> run id (their workloads are the user's)."""
    version = kueue_version(client)
    if not version:
        return QueuesView(notes=("Kueue is not installed here (no kueue.x-k8s.io API): jobs are not queued",))
    notes: list[str] = []
    cluster_queues = _listed(client, kueue_kind(version, "clusterqueues", namespaced=False), notes)
    local_queues = _listed(client, kueue_kind(version, "localqueues"), notes, namespace)
    workloads = [Workload.from_api(w) for w in _listed(client, kueue_kind(version, "workloads"), notes, namespace)]
    on_queue: dict[str, list[str]] = {}
    for lq in local_queues:
        meta = ObjectMeta.from_api(lq)
        on_queue.setdefault(LocalQueue.from_api(lq).cluster_queue, []).append(f"{meta.namespace}/{meta.name}")
    lq_target = {
        (ObjectMeta.from_api(lq).namespace, ObjectMeta.from_api(lq).name): LocalQueue.from_api(lq).cluster_queue
        for lq in local_queues
    }
    visible = True
    rows = []
    for cq in cluster_queues:
        name = ObjectMeta.from_api(cq).name
        mine = [w for w in workloads if _cluster_queue_of(w, lq_target) == name]
        waiting, seen = _waiting(client, name, mine, ours)
        visible = visible and seen
        rows.append(_queue_row(ClusterQueue.from_api(cq), name, mine, waiting, sorted(on_queue.get(name, []))))
    ordered_by = (
        "Kueue's visibility API"
        if visible
        else "priority, then creation time (Kueue's StrictFIFO order; its visibility API is not served here, "
        "so this is torchdeck's reckoning, not Kueue's word)"
    )
    return QueuesView(tuple(rows), ordered_by if rows else "", tuple(notes))


def _listed(client: KubeClient, kind: ApiKind, notes: list[str], namespace: str | None = None) -> list[Api]:
    """Every object of a Kueue kind this identity may list: in every namespace, else (a namespaced
    kind) in its own namespace, said in a note; none, said, where it may not list them at all."""
    try:
        return items(client.request("GET", api_path(kind)))
    except ApiError as exc:
        if exc.status != 403:
            raise
    where = namespace or client.context_namespace or "default"
    if kind.namespaced:
        try:
            found = items(client.request("GET", api_path(kind, where)))
        except ApiError as exc:
            if exc.status != 403:
                raise
        else:
            notes.append(f"may not list Kueue's {kind.plural} in every namespace: those in {where} only")
            return found
    notes.append(f"may not list Kueue's {kind.plural} here: those are left out")
    return []


def _cluster_queue_of(workload: Workload, lq_target: Mapping[tuple[str, str], str]) -> str:
    if workload.admitted_to:
        return workload.admitted_to
    return lq_target.get((workload.meta.namespace, workload.queue_name), "")


def _queue_row(
    view: ClusterQueue, name: str, mine: list[Workload], waiting: list[Waiting], local: list[str]
) -> QueueRow:
    usage = [
        Usage(
            flavor.name,
            q.name,
            quantity(q.nominal),
            *(quantity(v or 0) for v in view.used.get((flavor.name, q.name), ("", ""))),
        )
        for group in view.groups
        for flavor in group.flavors
        for q in flavor.resources
    ]
    admitted = [w for w in mine if true_condition(w.conditions, "Admitted") is not None]
    preempted = [
        w
        for w in mine
        if (e := true_condition(w.conditions, "Evicted")) is not None and e.reason == "Preempted" and w not in admitted
    ]
    return QueueRow(
        name=name,
        cohort=view.cohort,
        stopped=view.stop_policy if view.stop_policy not in ("", "None") else "",
        usage=tuple(usage),
        admitted=view.admitted if view.admitted is not None else len(admitted),
        pending=view.pending if view.pending is not None else len(waiting),
        preempted=len(preempted),
        local_queues=tuple(local),
        waiting=tuple(waiting),
    )


def _waiting(
    client: KubeClient, queue: str, workloads: list[Workload], ours: Mapping[str, str]
) -> tuple[list[Waiting], bool]:
    """The queue's waiting workloads in order: Kueue's visibility API's (True), else priority then
    creation time (False)."""
    pending = [w for w in workloads if true_condition(w.conditions, "Admitted") is None and not _finished(w)]
    by_name = {(w.meta.namespace, w.meta.name): w for w in pending}
    order: list[tuple[str, str]] = []
    served = visibility_version(client)
    seen = served is not None
    try:
        if served is not None:
            path = api_path(ApiKind.of_group(VISIBILITY, served, "clusterqueues", False), None, queue)
            for item in items(client.request("GET", path + "/pendingworkloads", query={"limit": 1000})):
                meta = ObjectMeta.from_api(item)
                order.append((meta.namespace, meta.name))
    except ApiError:
        seen = False
    if not seen:
        pending.sort(key=lambda w: (-w.priority, w.meta.created or 0.0, w.meta.name))
        order = [(w.meta.namespace, w.meta.name) for w in pending]
    out = []
    for place, key in enumerate(order, start=1):
        w = by_name.get(key)
        if w is None:
            continue
        job, uid = _workload_job(w)
        out.append(
            Waiting(
                position=place,
                workload=w.meta.name,
                namespace=w.meta.namespace,
                local_queue=w.queue_name,
                job=ours.get(uid, job),
                priority=w.priority,
                since=w.meta.created,
                reason=_reason(w),
                mine=uid in ours,
            )
        )
    return out, seen


def _finished(w: Workload) -> bool:
    return true_condition(w.conditions, "Finished") is not None


def _reason(w: Workload) -> str:
    """Kueue's words for why it waits: its QuotaReserved condition's, or its eviction's."""
    for c in w.conditions:
        if c.type == "QuotaReserved" and c.status == "False" and c.message:
            return c.message
    evicted = true_condition(w.conditions, "Evicted")
    return f"evicted ({evicted.reason}): {evicted.message}" if evicted is not None else ""
