"""Kueue (kubernetes-sigs/kueue) on a shared cluster: before a job is submitted through a queue
(``cluster.queue``), whether Kueue serves its API here, whether the LocalQueue is in the job's
namespace, and what it draws on: its ClusterQueue (not stopped, with quota for what the job asks)
and that queue's resource flavours. The job itself is rendered suspended with Kueue's
``kueue.x-k8s.io/queue-name`` label (``manifests.context``), so that Kueue admits it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..spec import JobSpec
from .client import ApiError, api_path
from .diagnosis import Finding

if TYPE_CHECKING:
    from .client import KubeClient

GROUP = "kueue.x-k8s.io"
VERSIONS = ("v1beta2", "v1beta1")
"""Kueue's API versions torchdeck reads, newest first: v1beta2 from Kueue 0.15, v1beta1 before."""
INSTALL = (
    "install Kueue (kubectl apply --server-side -f "
    "https://github.com/kubernetes-sigs/kueue/releases/download/v0.19.2/manifests.yaml), or drop --queue"
)


@dataclass
class QueueView:
    """What a LocalQueue draws on, as the preflight found it."""

    version: str
    local_queue: str
    cluster_queue: str = ""
    flavors: list[str] = field(default_factory=list)
    covered: set[str] = field(default_factory=set)

    def line(self) -> str:
        flavors = ", ".join(self.flavors) or "none"
        return f"queue {self.local_queue}: ClusterQueue {self.cluster_queue}, flavours {flavors} (Kueue {self.version})"


def kueue_version(client: KubeClient) -> str | None:
    """The newest of Kueue's API versions this cluster serves (None: Kueue is not installed)."""
    try:
        crd = client.request("GET", api_path("CustomResourceDefinition", name=f"localqueues.{GROUP}"))
    except ApiError as exc:
        if exc.status != 404:
            raise
        return None
    served = {v.get("name") for v in (crd.get("spec") or {}).get("versions") or [] if v.get("served")}
    return next((v for v in VERSIONS if v in served), "")


def queue_findings(client: KubeClient, spec: JobSpec) -> tuple[list[Finding], QueueView | None]:
    """What would keep a job submitted to ``spec.cluster.queue`` from ever being admitted, each with its
    fix, and what the queue draws on (None where it could not be read)."""
    queue, ns = spec.cluster.queue, spec.namespace
    assert queue is not None
    version = kueue_version(client)
    if version is None:
        return [Finding(queue, f"Kueue is not installed on this cluster (no CRD localqueues.{GROUP})", INSTALL)], None
    if not version:
        return [
            Finding(queue, f"Kueue here serves none of {', '.join(VERSIONS)}", "upgrade Kueue to 0.15 or later")
        ], None
    base = f"apis/{GROUP}/{version}"
    try:
        local = client.request("GET", f"{base}/namespaces/{ns}/localqueues/{queue}")
    except ApiError as exc:
        if exc.status != 404:
            raise
        there = sorted(
            (q.get("metadata") or {}).get("name", "")
            for q in client.request("GET", f"{base}/namespaces/{ns}/localqueues").get("items", [])
        )
        hint = f"the LocalQueues in {ns}: {', '.join(there)}" if there else f"ask your cluster's admin for one in {ns}"
        return [Finding(queue, f"no LocalQueue {queue} in namespace {ns}", hint)], None
    view = QueueView(version, queue, str((local.get("spec") or {}).get("clusterQueue") or ""))
    try:
        cluster_queue: dict[str, Any] = client.request("GET", f"{base}/clusterqueues/{view.cluster_queue}")
    except ApiError as exc:
        if exc.status != 404:
            raise
        problem = f"LocalQueue {queue} points at ClusterQueue {view.cluster_queue}, which does not exist"
        return [Finding(queue, problem, "ask your cluster's admin to create it or fix the LocalQueue")], view
    found: list[Finding] = []
    cq_spec = cluster_queue.get("spec") or {}
    for group in cq_spec.get("resourceGroups") or []:
        view.covered.update(group.get("coveredResources") or [])
        view.flavors += [f.get("name", "") for f in group.get("flavors") or []]
    if cq_spec.get("stopPolicy") in ("Hold", "HoldAndDrain"):
        found.append(
            Finding(
                queue,
                f"ClusterQueue {view.cluster_queue} is stopped ({cq_spec['stopPolicy']}): it admits nothing",
                "ask your cluster's admin to set its stopPolicy to None",
            )
        )
    asked = {"nvidia.com/gpu"} if spec.resources.gpus else set()
    asked |= {name for name, value in (("cpu", spec.resources.cpu), ("memory", spec.resources.memory)) if value}
    missing = sorted(asked - view.covered)
    if missing:
        found.append(
            Finding(
                queue,
                f"ClusterQueue {view.cluster_queue} has no quota for {', '.join(missing)}: the job would wait forever",
                f"submit to a queue with {', '.join(missing)} quota, or ask your cluster's admin to add it",
            )
        )
    return found, view
