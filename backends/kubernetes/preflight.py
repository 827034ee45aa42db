"""What would stop a job on this cluster, before anything is created:
a verb the kubeconfig's identity may not use on what the job makes or reads
(``access.py``), the operator's CRD missing or serving no version torchdeck renders (or one
that would drop or refuse a field of the job), a missing namespace, claim or
service account, or no node with the GPUs asked for; for a job submitted
through Kueue, the queue's own findings (``queues.py``). Each finding says how
to fix it."""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import BackendError
from ..spec import JobSpec
from . import crds
from .access import access_findings
from .client import ApiError, KubeClient, api_path, quantity
from .diagnosis import Finding
from .kinds import JOB_KINDS
from .manifests import Rendered
from .objects import ClaimPhase, ObjectMeta
from .queues import queue_findings


def preflight(client: KubeClient, spec: JobSpec, rendered: Rendered, crd: Mapping[str, object] | None) -> list[Finding]:
    """What would stop the job on this cluster, each with its fix. ``crd``: the cluster's definition
    of the job's kind (None: not installed; empty: this kubeconfig may not read it)."""
    found = access_findings(client, rendered)
    if found:  # what the rest would read may be refused too: the access says it first
        return found
    info = JOB_KINDS[rendered.kind]
    ns = spec.namespace
    if not info.builtin:
        definition = crd
        if definition is None:
            found.append(
                Finding(
                    rendered.kind,
                    f"{info.kind} is not installed on this cluster (no CRD {info.crd_name})",
                    f"install {info.operator}: {info.install}, or use --kind job (needs nothing)",
                )
            )
        elif definition:  # (empty: this kubeconfig may not read CRDs; the create says what is wrong)
            found += served_findings(rendered, definition)
    if not namespace_exists(client, ns):
        found.append(Finding(ns, f"namespace {ns} does not exist", f"kubectl create namespace {ns}"))
        return found
    c = spec.cluster
    if c.pvc:
        try:
            phase = ClaimPhase.from_api(client.request("GET", api_path("PersistentVolumeClaim", ns, c.pvc))).phase
            if phase != "Bound":
                found.append(
                    Finding(
                        c.pvc,
                        f"PersistentVolumeClaim {c.pvc} is {phase or 'not bound'}",
                        "kubectl describe pvc " + c.pvc + " (storage class, CSI driver, capacity); "
                        "torchdeck storage creates a bound one",
                    )
                )
        except ApiError as exc:
            if exc.status != 404:
                raise
            found.append(
                Finding(
                    c.pvc,
                    f"PersistentVolumeClaim {c.pvc} does not exist in {ns}",
                    "create it (torchdeck storage create), or fix cluster.pvc",
                )
            )
    if c.service_account and not client.exists(api_path("ServiceAccount", ns, c.service_account)):
        found.append(
            Finding(
                c.service_account,
                f"service account {c.service_account} does not exist in {ns}",
                "create it (for S3 on EKS: eksctl create iamserviceaccount ...), or fix cluster.service_account",
            )
        )
    if spec.resources.gpus and not c.queue:  # a queue's flavours place the job (queues.queue_findings)
        found += gpu_findings(client, spec)
    if c.queue:
        found += queue_findings(client, spec)[0]
    return found


def namespace_exists(client: KubeClient, ns: str) -> bool:
    """Whether the namespace is there; True where this identity may not read it (a namespace's user
    on a shared cluster, whose Role grants nothing on the namespace object): the rest of the
    preflight still runs, in the namespace its rights are in, and the create says if it is not."""
    try:
        return client.exists(api_path("Namespace", name=ns))
    except ApiError as exc:
        if exc.status != 403:
            raise
        return True


def served_findings(rendered: Rendered, definition: Mapping[str, object]) -> list[Finding]:
    """What the cluster's own CRD says of the rendered job: a version it does not serve, a field
    it would drop, a value it refuses."""
    info = JOB_KINDS[rendered.kind]
    try:
        info.target_for(definition)
    except BackendError as exc:
        return [Finding(rendered.kind, exc.message, exc.hint)]
    version = rendered.main["apiVersion"].rpartition("/")[2]
    schema = crds.schema_of(definition, version)
    if schema is None:
        return []
    problems = crds.check(rendered.main, schema).problems
    return (
        [
            Finding(
                f"{info.kind} {rendered.name}",
                f"{problems[0]} (the cluster's CRD {ObjectMeta.from_api(definition).name})"
                + (f", and {len(problems) - 1} more" if len(problems) > 1 else ""),
                f"torchdeck renders for {info.supported}; torchdeck render --validate shows every problem",
            )
        ]
        if problems
        else []
    )


def gpu_findings(client: KubeClient, spec: JobSpec) -> list[Finding]:
    """No node that matches the job's node selector has the GPUs it asks for."""
    wanted = spec.resources.gpus
    selector = spec.cluster.node_selector
    nodes = client.read_nodes()
    matching = [n for n in nodes if all(n.labels.get(k) == v for k, v in selector.items())]
    with_gpus = [n for n in matching if quantity(n.allocatable.get("nvidia.com/gpu", "0")) >= wanted]
    if with_gpus:
        return []
    where = f"{len(matching)}/{len(nodes)} nodes match cluster.node_selector" if selector else f"{len(nodes)} nodes"
    return [
        Finding(
            "resources.gpus",
            f"no node can take a pod with {wanted} GPU(s): {where}, none with {wanted} nvidia.com/gpu allocatable",
            "add a GPU nodegroup (and the NVIDIA device plugin), point cluster.node_selector at it, "
            "or set resources.gpus: 0",
        )
    ]
