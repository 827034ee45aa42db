"""Kueue (kubernetes-sigs/kueue) on a shared cluster: before a job is submitted through a queue
(``cluster.queue``), whether Kueue serves its API here, whether the LocalQueue is in the job's
namespace, and what it draws on: its ClusterQueue (not stopped, with quota for what the job asks)
and that queue's resource flavours. The job itself is rendered suspended with Kueue's
``kueue.x-k8s.io/queue-name`` label (``manifests.context``), so that Kueue admits it."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..base import QueueWait
from ..spec import JobSpec
from .client import ApiError, ApiKind, api_path, quantity
from .crds import operator_releases
from .diagnosis import Finding
from .kinds import JOB_KINDS, job_kind_of
from .objects import (
    ClusterQueue,
    ConfigMap,
    LocalQueue,
    ObjectMeta,
    PendingWorkload,
    ServedVersions,
    Workload,
    items,
    true_condition,
)

if TYPE_CHECKING:
    from .client import KubeClient

GROUP = "kueue.x-k8s.io"
VERSIONS = ("v1beta2", "v1beta1")
"""Kueue's API versions torchdeck reads, newest first: v1beta2 from Kueue 0.15, v1beta1 before."""
INSTALL = (
    "install Kueue (kubectl apply --server-side -f "
    f"https://github.com/kubernetes-sigs/kueue/releases/download/{operator_releases()['kueue']}/manifests.yaml), "
    "or drop --queue"
)


@dataclass
class QueueView:
    """What a LocalQueue draws on, as the preflight found it."""

    version: str
    local_queue: str
    cluster_queue: str = ""
    flavors: list[str] = field(default_factory=list)
    covered: set[str] = field(default_factory=set)
    unread: str = ""
    """The Kueue integration torchdeck could not confirm (its configuration not readable here)."""
    notes: list[str] = field(default_factory=list)
    """What else could not be read (a ClusterQueue a namespace's user may not get)."""

    def line(self) -> str:
        flavors = ", ".join(self.flavors) or "none"
        line = f"queue {self.local_queue}: ClusterQueue {self.cluster_queue}, flavours {flavors} (Kueue {self.version})"
        for note in self.notes:
            line += f"; {note}"
        if self.unread:
            line += (
                f"; could not read Kueue's configuration ({CONFIG_MAP[0]}/{CONFIG_MAP[1]}) to tell whether it "
                f"manages {self.unread}: where it does not, the job runs at once, past the queue's quota "
                f"(ask your admin whether integrations.frameworks lists {self.unread})"
            )
        return line


def kueue_kind(version: str, plural: str, namespaced: bool = True) -> ApiKind:
    """Where Kueue's API server keeps ``plural`` at ``version``: ``api_path`` quotes every name."""
    return ApiKind.of_group(GROUP, version, plural, namespaced)


CONFIG_MAP = ("kueue-system", "kueue-manager-config")
"""Where Kueue's manifests keep its configuration (``controller_manager_config.yaml``)."""
CONFIG_KEY = "controller_manager_config.yaml"


def managed_frameworks(client: KubeClient) -> list[str] | None:
    """The job kinds Kueue manages here (its configuration's ``integrations.frameworks``, e.g.
    ``kubeflow.org/pytorchjob``); None where the configuration cannot be read (a namespace's user
    may not read kueue-system) or says nothing of them (then Kueue's own defaults, which change
    between releases, apply)."""
    from ..errors import SpecError
    from ..files import parse_yaml

    try:
        config_map = client.request("GET", api_path("ConfigMap", CONFIG_MAP[0], CONFIG_MAP[1]))
    except ApiError:
        return None
    text = ConfigMap.from_api(config_map).data.get(CONFIG_KEY) if isinstance(config_map, Mapping) else None
    if text is None:
        return None
    try:
        config = parse_yaml(text, f"{CONFIG_MAP[0]}/{CONFIG_MAP[1]}")
    except SpecError:
        return None
    integrations = config.get("integrations") if isinstance(config, dict) else None
    frameworks = integrations.get("frameworks") if isinstance(integrations, dict) else None
    if not isinstance(frameworks, list):
        return None
    return [f for f in frameworks if isinstance(f, str)]


VERSION_CACHE_S = 60.0
"""How long the version Kueue serves is kept: the runs list asks for each queued job every refresh."""
_versions: dict[tuple[str | None, str | None], tuple[float, str | None]] = {}


def kueue_version(client: KubeClient, fresh: bool = False) -> str | None:
    """The newest of Kueue's API versions this cluster serves (None: Kueue is not installed); what
    was found is kept VERSION_CACHE_S per client, unless ``fresh`` (the preflight asks anew)."""
    key = (client.kubeconfig, client.context)  # the cluster, as the client reaches it
    kept = _versions.get(key)
    if kept and not fresh and time.monotonic() - kept[0] < VERSION_CACHE_S:
        return kept[1]
    try:
        crd = client.request("GET", api_path("CustomResourceDefinition", name=f"localqueues.{GROUP}"))
    except ApiError as exc:
        if exc.status == 403:  # a namespace's user may not read CRDs: the group's discovery, anyone's to read
            version = _discovered(client)
        elif exc.status != 404:
            raise
        else:
            version = None
    else:
        served = ServedVersions.from_api(crd).versions
        version = next((v for v in VERSIONS if v in served), "")
    _versions[key] = (time.monotonic(), version)
    return version


def _discovered(client: KubeClient) -> str | None:
    """The newest of Kueue's API versions the API group's discovery lists (None: not served)."""
    try:
        group = client.request("GET", f"apis/{GROUP}")
    except ApiError as exc:
        if exc.status != 404:
            raise
        return None
    served = ServedVersions.from_group(group).versions
    return next((v for v in VERSIONS if v in served), "")


VISIBILITY = f"visibility.{GROUP}"
VISIBILITY_VERSIONS = ("v1beta2", "v1beta1", "v1alpha1")
"""The versions of Kueue's visibility API torchdeck reads, newest first (their pending workloads
have the same fields): v1alpha1 came with Kueue 0.6, v1beta1 with 0.9, v1beta2 with 0.15. A
cluster's Kueue serves it at a version of its own, not always its main API's (0.6 to 0.8: v1beta1
objects, a v1alpha1 visibility API)."""
_visibility: dict[tuple[str | None, str | None], tuple[float, str | None]] = {}


def visibility_version(client: KubeClient) -> str | None:
    """The newest version of Kueue's visibility API this cluster serves, from its group's discovery
    (None: not served, or not this identity's to read); kept ``VERSION_CACHE_S`` per cluster and
    context. Another error (its extension API server restarting: 503) is not kept: the next
    read asks again."""
    key = (client.kubeconfig, client.context)
    kept = _visibility.get(key)
    if kept and time.monotonic() - kept[0] < VERSION_CACHE_S:
        return kept[1]
    try:
        served = ServedVersions.from_group(client.request("GET", f"apis/{VISIBILITY}")).versions
    except ApiError as exc:  # 404: no visibility API (an extension API server Kueue may run without); 403: not ours
        if exc.status not in (403, 404):
            return None
        version = None
    else:
        version = next((v for v in VISIBILITY_VERSIONS if v in served), None)
    _visibility[key] = (time.monotonic(), version)
    return version


def queue_findings(client: KubeClient, spec: JobSpec) -> tuple[list[Finding], QueueView | None]:
    """What would keep a job submitted to ``spec.cluster.queue`` from ever being admitted, each with its
    fix, and what the queue draws on (None where it could not be read)."""
    queue, ns = spec.cluster.queue, spec.namespace
    assert queue is not None
    version = kueue_version(client, fresh=True)
    if version is None:
        return [Finding(queue, f"Kueue is not installed on this cluster (no CRD localqueues.{GROUP})", INSTALL)], None
    if not version:
        return [
            Finding(queue, f"Kueue here serves none of {', '.join(VERSIONS)}", "upgrade Kueue to 0.15 or later")
        ], None
    try:
        local = client.request("GET", api_path(kueue_kind(version, "localqueues"), ns, queue))
    except ApiError as exc:
        if exc.status != 404:
            raise
        there = sorted(
            ObjectMeta.from_api(q).name
            for q in items(client.request("GET", api_path(kueue_kind(version, "localqueues"), ns)))
        )
        hint = f"the LocalQueues in {ns}: {', '.join(there)}" if there else f"ask your cluster's admin for one in {ns}"
        return [Finding(queue, f"no LocalQueue {queue} in namespace {ns}", hint)], None
    view = QueueView(version, queue, LocalQueue.from_api(local).cluster_queue)
    framework = JOB_KINDS[spec.cluster.kind].kueue_framework
    frameworks = managed_frameworks(client)
    if frameworks is None:
        view.unread = framework
    elif framework not in frameworks:
        return [
            Finding(
                queue,
                f"Kueue here does not manage {framework} (its integrations.frameworks: "
                f"{', '.join(frameworks) or 'none'}): a job sent to {queue} would run at once, past the quota",
                f"ask your cluster's admin to add {framework} to {CONFIG_MAP[0]}/{CONFIG_MAP[1]}, "
                "or submit without --queue",
            )
        ], view
    try:
        cluster_queue = ClusterQueue.from_api(
            client.request(
                "GET", api_path(kueue_kind(version, "clusterqueues", namespaced=False), name=view.cluster_queue)
            )
        )
    except ApiError as exc:
        if exc.status == 403:  # cluster-scoped: a namespace's user often may not read it
            view.notes.append(
                f"could not read ClusterQueue {view.cluster_queue} (not this identity's to read): "
                "its quota and flavours were not checked"
            )
            return [], view
        if exc.status != 404:
            raise
        problem = f"LocalQueue {queue} points at ClusterQueue {view.cluster_queue}, which does not exist"
        return [Finding(queue, problem, "ask your cluster's admin to create it or fix the LocalQueue")], view
    found: list[Finding] = []
    for group in cluster_queue.groups:
        view.covered.update(group.covered)
        view.flavors += [f.name for f in group.flavors]
    if cluster_queue.stop_policy in ("Hold", "HoldAndDrain"):
        found.append(
            Finding(
                queue,
                f"ClusterQueue {view.cluster_queue} is stopped ({cluster_queue.stop_policy}): it admits nothing",
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
    found += quota_findings(spec, view, cluster_queue)
    return found, view


def job_requests(spec: JobSpec) -> dict[str, float]:
    """What the whole job asks of a queue's quota: every pod's requests (an MPIJob's launcher too)."""
    pods = spec.nodes
    asked = {
        "cpu": quantity(spec.resources.cpu) * pods if spec.resources.cpu else 0.0,
        "memory": quantity(spec.resources.memory) * pods if spec.resources.memory else 0.0,
        "nvidia.com/gpu": float(spec.resources.gpus * pods),
    }
    launcher = JOB_KINDS[spec.cluster.kind].extra_requests
    if launcher:  # an MPIJob's launcher pod asks too
        asked = {name: value + quantity(launcher[name]) if value and name in launcher else value
                 for name, value in asked.items()}  # fmt: skip
    return {name: value for name, value in asked.items() if value}


def quota_findings(spec: JobSpec, view: QueueView, cluster_queue: ClusterQueue) -> list[Finding]:
    """A job that asks more than its ClusterQueue can ever admit: more than any flavour's nominal
    quota plus what it may borrow. A queue in a cohort that may borrow without a limit is not judged
    (what the cohort lends is not the queue's to say)."""
    cohort = cluster_queue.cohort
    most: dict[str, float] = {}
    for group in cluster_queue.groups:
        for flavor in group.flavors:
            for resource in flavor.resources:
                name, limit = resource.name, resource.borrowing_limit
                if cohort and limit is None:
                    most[name] = float("inf")
                    continue
                can = quantity(resource.nominal) + (quantity(limit) if cohort and limit else 0.0)
                most[name] = max(most.get(name, 0.0), can)
    found = []
    for name, value in job_requests(spec).items():
        if name in most and value > most[name]:
            found.append(
                Finding(
                    spec.cluster.queue or "",
                    f"the job asks {shown(name, value)} in all, more than ClusterQueue {view.cluster_queue} "
                    f"can ever admit ({shown(name, most[name])}): it would wait forever",
                    "ask for less (--nodes, resources.*), or submit to a queue with more quota",
                )
            )
    return found


def shown(resource: str, value: float) -> str:
    """A quantity of a resource as a person reads it: 1.5 cpu, 3.0 GiB memory, 2 nvidia.com/gpu."""
    if resource == "memory":
        return f"{value / 2**30:.1f} GiB memory"
    if resource == "cpu":
        return f"{value:g} cpu"
    return f"{value:g} {resource}"


JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
"""The label Kueue puts on the Workload it makes of a job: the job's uid."""


def suspended(obj: Mapping[str, object]) -> bool:
    """Whether the job is held suspended, where its kind keeps the flag (``JobKind.suspend_at``)."""
    kind = job_kind_of(obj)
    return kind.is_suspended(obj) if kind is not None else False


def queue_wait(client: KubeClient, obj: Mapping[str, object], queue: str) -> QueueWait:
    """Where a job submitted through ``queue`` stands with Kueue: its Workload's admission (when, to
    which ClusterQueue), its eviction (preempted, and why), Kueue's reason while it waits, and its
    position where the cluster serves Kueue's visibility API. What cannot be read is left out."""
    meta = ObjectMeta.from_api(obj)
    ns, uid = meta.namespace or "default", meta.uid
    wait = QueueWait(queue)
    version = kueue_version(client)
    if not version:
        return wait
    try:
        workloads = [
            Workload.from_api(w)
            for w in items(
                client.request(
                    "GET",
                    api_path(kueue_kind(version, "workloads"), ns),
                    query={"labelSelector": f"{JOB_UID_LABEL}={uid}"},
                )
            )
        ]
    except ApiError:
        return wait
    # the job's own Workload (Kueue makes it owned by the job): one merely labelled with its uid is not
    mine = [w for w in workloads if uid and any(o.uid == uid for o in w.meta.owners)]
    if not mine:
        if suspended(obj):
            wait.reason = "waiting for Kueue to take it in (no Workload yet)"
            return wait
        kind = job_kind_of(obj)
        framework = kind.kueue_framework if kind else str(obj.get("kind", ""))
        frameworks = managed_frameworks(client)
        why = (
            f"Kueue here does not manage {framework}"
            if frameworks is not None and framework not in frameworks
            else f"Kueue made no Workload of it (does it manage {framework} here?)"
        )
        wait.outside, wait.reason = True, f"not queued: {why}; it runs outside {queue}'s quota"
        return wait
    workload = mine[0]
    wait.cluster_queue = workload.admitted_to
    if not wait.cluster_queue:  # not admitted: the ClusterQueue its LocalQueue draws on
        try:
            local = client.request("GET", api_path(kueue_kind(version, "localqueues"), ns, queue))
            wait.cluster_queue = LocalQueue.from_api(local).cluster_queue
        except ApiError:
            pass
    admitted = true_condition(workload.conditions, "Admitted")
    if admitted is not None and not suspended(obj):
        wait.admitted_at = admitted.since
        return wait
    evicted = true_condition(workload.conditions, "Evicted")
    if evicted is not None:
        wait.preempted = evicted.reason == "Preempted"
        wait.reason = f"{'preempted' if wait.preempted else 'evicted'} by Kueue: {evicted.message}"
    for c in workload.conditions:
        if c.type == "QuotaReserved" and c.status == "False" and c.message:
            wait.reason = (wait.reason + "; waits: " if evicted else "") + c.message
    seen = visibility_version(client)
    try:
        pending = (
            [
                PendingWorkload.from_api(item)
                for item in items(
                    client.request(
                        "GET",
                        api_path(ApiKind.of_group(VISIBILITY, seen, "localqueues"), ns, queue, "pendingworkloads"),
                    )
                )
            ]
            if seen
            else []
        )
    except ApiError:  # the visibility API is optional (an extension API server): no position then
        pending = []
    for item in pending:
        if item.name == workload.meta.name:
            wait.position = item.in_local_queue  # "3rd", 1e400, [1]: unknown
            wait.cluster_position = item.in_cluster_queue
    return wait


def wait_words(wait: QueueWait) -> str:
    """A queued job's state in words: where it waits, its place, and Kueue's reason."""
    where = f"queued in {wait.local_queue}"
    if wait.cluster_queue:
        where += f" (ClusterQueue {wait.cluster_queue})"
    if wait.position is not None:
        where += f", position {wait.position + 1}"
    return where + (f": {wait.reason}" if wait.reason else "")
