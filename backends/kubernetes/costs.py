"""What a run on a cluster held, for its cost (``backends/cost.py`` prices it): each pod's node,
from when the pod was bound there until it ended, and the part of the node it asked for; and the
budget's stop, which suspends the job (its pods get SIGTERM: the built-in trainer writes a
snapshot) and keeps the job, with why, on the cluster.

A node's instance type and purchase option are its well-known labels: ``node.kubernetes.io/
instance-type``, and ``eks.amazonaws.com/capacityType`` (managed nodegroups) or
``karpenter.sh/capacity-type`` (Karpenter)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence

from ..cost import NodeUse
from ..errors import BackendError
from .client import KubeClient
from .objects import Node, ObjectMeta, Pod

INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
CAPACITY_LABELS = {
    "eks.amazonaws.com/capacityType": {"ON_DEMAND": "on-demand", "SPOT": "spot"},
    "karpenter.sh/capacity-type": {"on-demand": "on-demand", "spot": "spot"},
}
ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")
COST_ANNOTATION = "torchdeck.dev/cost"
"""An ended run's cost, kept on its job: its pods, and the nodes' labels, may be gone later."""
PROGRESS_ANNOTATION = "torchdeck.dev/progress"
"""An ended run's last epoch, step, loss and accuracy, kept on its job: a listing's row says how it
finished after its pods and their logs are gone."""
RECOVERY_ANNOTATION = "torchdeck.dev/recovery"
"""What the run's status has learnt of its attempts (``recovery.RecoveryLog``), kept on its job: a
status reads only the newest lines of each pod's log, and an attempt's start scrolls out of them in
seconds."""
STOPPED_ANNOTATION = "torchdeck.dev/stopped"
"""Why torchdeck stopped the job (its budget), kept on the job it suspended."""
NODES_TTL_S = 30.0


def _quantity(text: object) -> float:
    """A CPU or GPU count as Kubernetes writes it (``2``, ``500m``); 0.0 where it is not one."""
    value = str(text or "").strip()
    try:
        return float(value[:-1]) / 1000.0 if value.endswith("m") else float(value)
    except ValueError:
        return 0.0


def _requested(pod: Pod, resource: str) -> float:
    return sum((_quantity(container.asked(resource)) for container in pod.resources), 0.0)


def node_share(pod: Pod, node: Node | None) -> float:
    """The part of ``node`` the pod asked for: its GPUs of the node's, else its CPU of the node's
    allocatable CPU; the whole node where it asked for neither or the node is not known."""
    if node is None:
        return 1.0
    allocatable = node.resources
    gpus, node_gpus = _requested(pod, "nvidia.com/gpu"), _quantity(allocatable.get("nvidia.com/gpu"))
    if gpus and node_gpus:
        return min(1.0, gpus / node_gpus)
    cpu, node_cpu = _requested(pod, "cpu"), _quantity(allocatable.get("cpu"))
    if cpu and node_cpu:
        return min(1.0, cpu / node_cpu)
    return 1.0


def _bound_at(pod: Pod) -> float | None:
    for condition in pod.conditions:
        if condition.type == "PodScheduled" and condition.is_true:
            return condition.since
    return pod.started


def _ended_at(pod: Pod, job_ended: float | None) -> float | None:
    ends = [cs.terminated.finished_at if cs.terminated is not None else None for cs in pod.containers]
    if pod.ended and any(ends):
        return max(e for e in ends if e)
    return job_ended or pod.meta.deleting


def node_uses(pods: Sequence[Pod], nodes: Mapping[str, Node], job_ended: float | None) -> list[NodeUse]:
    """Each bound pod's hold on its node."""
    uses = []
    for pod in pods:
        name = pod.node
        started = _bound_at(pod)
        if not name or started is None:
            continue  # not bound yet: it holds nothing
        node = nodes.get(name)
        labels = node.labels if node is not None else {}
        capacity = ""
        for label, values in CAPACITY_LABELS.items():
            if label in labels:
                capacity = values.get(labels[label], labels[label].lower())
        uses.append(
            NodeUse(
                node=name,
                started_at=started,
                ended_at=_ended_at(pod, job_ended),
                instance_type=next((labels[k] for k in INSTANCE_TYPE_LABELS if labels.get(k)), ""),
                capacity=capacity,
                zone=next((labels[k] for k in ZONE_LABELS if labels.get(k)), ""),
                share=node_share(pod, node),
            )
        )
    return uses


class NodeBook:
    """The cluster's nodes by name, listed at most every ``NODES_TTL_S`` (a listing of runs prices
    every run from one request)."""

    def __init__(self) -> None:
        self._read: tuple[float, dict[str, Node]] = (0.0, {})

    def nodes(self, client: KubeClient) -> dict[str, Node]:
        when, nodes = self._read
        if time.monotonic() - when < NODES_TTL_S and when:
            return nodes
        try:
            listed = client.read_nodes()
        except BackendError:  # nodes forbidden to this user: priced by the spec or settings alone
            listed = []
        nodes = {n.name: n for n in listed}
        self._read = (time.monotonic(), nodes)
        return nodes

    def __getstate__(self) -> dict[str, object]:
        return {"_read": (0.0, {})}


def annotate(
    client: KubeClient,
    path: str,
    values: Mapping[str, Mapping[str, object]],
    patch: Mapping[str, object] | None = None,
) -> None:
    """Keep each value on the job at ``path`` as JSON under its annotation, with ``patch`` (a
    suspension) in the same JSON merge patch."""
    notes = {key: json.dumps(value, sort_keys=True, separators=(",", ":")) for key, value in values.items()}
    client.request("PATCH", path, body={**(patch or {}), "metadata": {"annotations": notes}})


def read_annotation(obj: Mapping[str, object], key: str) -> dict[str, object] | None:
    """A JSON annotation torchdeck kept on the job (``obj``, as the API answered it); None where it
    is missing or not JSON."""
    text = ObjectMeta.from_api(obj).annotations.get(key)
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
