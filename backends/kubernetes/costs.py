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
from typing import Any

from ..cost import NodeUse
from ..errors import BackendError
from .client import KubeClient, api_path
from .jobs import timestamp

INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
CAPACITY_LABELS = {
    "eks.amazonaws.com/capacityType": {"ON_DEMAND": "on-demand", "SPOT": "spot"},
    "karpenter.sh/capacity-type": {"on-demand": "on-demand", "spot": "spot"},
}
ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")
COST_ANNOTATION = "torchdeck.dev/cost"
"""An ended run's cost, kept on its job: its pods, and the nodes' labels, may be gone later."""
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


def _requested(pod: dict[str, Any], resource: str) -> float:
    total = 0.0
    for container in (pod.get("spec") or {}).get("containers") or []:
        res = container.get("resources") or {}
        total += _quantity((res.get("requests") or {}).get(resource) or (res.get("limits") or {}).get(resource))
    return total


def node_share(pod: dict[str, Any], node: dict[str, Any] | None) -> float:
    """The part of ``node`` the pod asked for: its GPUs of the node's, else its CPU of the node's
    allocatable CPU; the whole node where it asked for neither or the node is not known."""
    if node is None:
        return 1.0
    allocatable = (node.get("status") or {}).get("allocatable") or (node.get("status") or {}).get("capacity") or {}
    gpus, node_gpus = _requested(pod, "nvidia.com/gpu"), _quantity(allocatable.get("nvidia.com/gpu"))
    if gpus and node_gpus:
        return min(1.0, gpus / node_gpus)
    cpu, node_cpu = _requested(pod, "cpu"), _quantity(allocatable.get("cpu"))
    if cpu and node_cpu:
        return min(1.0, cpu / node_cpu)
    return 1.0


def _bound_at(pod: dict[str, Any]) -> float | None:
    status = pod.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            return timestamp(condition.get("lastTransitionTime"))
    return timestamp(status.get("startTime"))


def _ended_at(pod: dict[str, Any], job_ended: float | None) -> float | None:
    status = pod.get("status") or {}
    ends = [
        timestamp(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for cs in status.get("containerStatuses") or []
    ]
    if status.get("phase") in ("Succeeded", "Failed") and any(ends):
        return max(e for e in ends if e)
    deleting = timestamp((pod.get("metadata") or {}).get("deletionTimestamp"))
    return job_ended or deleting


def node_uses(pods: list[dict[str, Any]], nodes: dict[str, dict[str, Any]], job_ended: float | None) -> list[NodeUse]:
    """Each bound pod's hold on its node."""
    uses = []
    for pod in pods:
        name = (pod.get("spec") or {}).get("nodeName")
        started = _bound_at(pod)
        if not name or started is None:
            continue  # not bound yet: it holds nothing
        node = nodes.get(name)
        labels = ((node or {}).get("metadata") or {}).get("labels") or {}
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
        self._read: tuple[float, dict[str, dict[str, Any]]] = (0.0, {})

    def nodes(self, client: KubeClient) -> dict[str, dict[str, Any]]:
        when, nodes = self._read
        if time.monotonic() - when < NODES_TTL_S and when:
            return nodes
        try:
            items = client.request("GET", api_path("Node")).get("items") or []
        except BackendError:  # nodes forbidden to this user: priced by the spec or settings alone
            items = []
        nodes = {n["metadata"]["name"]: n for n in items}
        self._read = (time.monotonic(), nodes)
        return nodes

    def __getstate__(self) -> dict:
        return {"_read": (0.0, {})}


def annotate(
    client: KubeClient, path: str, values: dict[str, dict[str, Any]], patch: dict[str, Any] | None = None
) -> None:
    """Keep each value on the job at ``path`` as JSON under its annotation, with ``patch`` (a
    suspension) in the same JSON merge patch."""
    notes = {key: json.dumps(value, sort_keys=True, separators=(",", ":")) for key, value in values.items()}
    client.request("PATCH", path, body={**(patch or {}), "metadata": {"annotations": notes}})


def read_annotation(obj: dict[str, Any], key: str) -> dict[str, Any] | None:
    """A JSON annotation torchdeck kept on the job; None where it is missing or not JSON."""
    text = ((obj.get("metadata") or {}).get("annotations") or {}).get(key)
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
