"""The Kubernetes objects torchdeck reads, as typed views made once where the API's answer enters:
pods, nodes, events, metrics-server's node usage, Kueue's LocalQueues, ClusterQueues and Workloads
(and the few other answers read: a claim's phase, an access review, a CRD's served versions, a
ConfigMap's data, a watch's events). The training jobs themselves are ``kind_objects.py``'s.

Each view is a small frozen dataclass of the fields torchdeck reads, and its ``from_api`` is the
only place that reads the API's dict by key: inside, nothing walks ``(x.get(..) or {}).get(..)``
(STYLE 28). A field of the wrong shape (another user's object on a shared cluster may say
anything) reads as empty, never as a traceback.

Why our own views rather than a library's models (lightkube's, or the official ``kubernetes``
client's): those carry every field of the API, and importing them costs time that the console's
first frame cannot pay (the official client's models are thousands of classes; lightkube is not a
dependency). A view of the fields read is also the record of what torchdeck depends on: a field
not here is one torchdeck does not read."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from ..schema import count

Api = Mapping[str, object]
T = TypeVar("T")
"""An object as the API server's JSON answer holds it (what ``from_api`` takes)."""

EMPTY: Mapping[str, object] = {}


# -- reading the API's JSON, tolerantly ------------------------------------------------------


def as_map(value: object) -> Api:
    """``value`` where it is a JSON object; anything else (absent, null, another shape) reads as empty."""
    return value if isinstance(value, Mapping) else EMPTY


def as_list(value: object) -> list[object]:
    """``value`` where it is a JSON array; anything else reads as empty."""
    return value if isinstance(value, list) else []


def _maps(value: object) -> list[Api]:
    return [item for item in as_list(value) if isinstance(item, Mapping)]


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _strings(value: object) -> dict[str, str]:
    """A map of strings (labels, annotations, a ConfigMap's data); other entries left out."""
    return {k: v for k, v in as_map(value).items() if isinstance(k, str) and isinstance(v, str)}


def _quantity_text(value: object) -> str:
    """A quantity as the API writes it ("500m", "8Gi", 2): its text, "" where it is none."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return ""


def _quantities(value: object) -> dict[str, str]:
    return {k: text for k, v in as_map(value).items() if isinstance(k, str) and (text := _quantity_text(v))}


def timestamp(text: object) -> float | None:
    """An RFC 3339 time as the API writes it ("2026-11-22T06:00:00Z"), in seconds; None where it
    is missing or not one."""
    if not isinstance(text, str) or not text:
        return None
    return _seconds(text)


@functools.lru_cache(maxsize=4096)
def _seconds(text: str) -> float | None:
    """(Kept: a list of 1,000 nodes holds 5,000 conditions' times, most of them the same few
    seconds; parsed each, they were a tenth of the nodes screen's read.)"""
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def items(answer: object) -> list[Api]:
    """The objects of a list answer (``{"items": [...]}``)."""
    return _maps(as_map(answer).get("items"))


LISTED_AGAIN = "torchdeck/listed-again"
"""Marks a page of ``KubeClient.list_pages`` that is the whole list read again (the continue token
had expired): what earlier pages gave is to be dropped."""


def read_pages(pages: Iterable[Api], read: Callable[[Api], T]) -> list[T]:
    """Every object of a list's pages, read into a view a page at a time; a page that is the list
    read again (``LISTED_AGAIN``) drops what came before it."""
    out: list[T] = []
    for page in pages:
        if page.get(LISTED_AGAIN):
            out = []
        out += [read(obj) for obj in items(page)]
    return out


# -- what every object has -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OwnerRef:
    """One of ``metadata.ownerReferences``: who made the object."""

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool

    @classmethod
    def from_api(cls, obj: Api) -> OwnerRef:
        return cls(
            _text(obj.get("apiVersion")),
            _text(obj.get("kind")),
            _text(obj.get("name")),
            _text(obj.get("uid")),
            obj.get("controller") is True,
        )


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    """An object's ``metadata``, as read: for any kind (a job's annotations, a Workload's owners)."""

    name: str = ""
    namespace: str = ""
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    owners: tuple[OwnerRef, ...] = ()
    created: float | None = None
    deleting: float | None = None
    """When its deletion was asked for (``deletionTimestamp``), where it was."""
    resource_version: str = ""
    manager: str = ""
    """Who wrote it first (``managedFields``' first manager of the object itself, not of its
    status): ``kubectl-client-side-apply``, ``kubectl-create``, a pipeline's or an SDK's client."""

    @classmethod
    def from_api(cls, obj: Api) -> ObjectMeta:
        """The metadata of ``obj`` (the whole object, as the API answered it)."""
        meta = as_map(obj.get("metadata"))
        return cls(
            name=_text(meta.get("name")),
            namespace=_text(meta.get("namespace")),
            uid=_text(meta.get("uid")),
            labels=_strings(meta.get("labels")),
            annotations=_strings(meta.get("annotations")),
            owners=tuple(OwnerRef.from_api(r) for r in _maps(meta.get("ownerReferences"))),
            created=timestamp(meta.get("creationTimestamp")),
            deleting=timestamp(meta.get("deletionTimestamp")),
            resource_version=_text(meta.get("resourceVersion")),
            manager=next(
                (_text(f.get("manager")) for f in _maps(meta.get("managedFields")) if not f.get("subresource")), ""
            ),
        )

    def controllers(self) -> list[OwnerRef]:
        """Its controller references (``controller: true``, with a uid), as every operator writes
        them for what it makes; another owner reference is no claim to the object."""
        return [ref for ref in self.owners if ref.controller and ref.uid]


@dataclass(frozen=True, slots=True)
class Condition:
    """One of ``status.conditions`` (a pod's, a node's, a Workload's)."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    since: float | None = None
    """``lastTransitionTime``."""

    @classmethod
    def from_api(cls, obj: Api) -> Condition:
        return cls(
            _text(obj.get("type")),
            _text(obj.get("status")),
            _text(obj.get("reason")),
            _text(obj.get("message")),
            timestamp(obj.get("lastTransitionTime")),
        )

    @property
    def is_true(self) -> bool:
        return self.status == "True"


def conditions_of(status: Api) -> tuple[Condition, ...]:
    """The conditions of an object's ``status``."""
    return tuple(Condition.from_api(c) for c in _maps(status.get("conditions")))


def true_condition(conditions: Iterable[Condition], kind: str) -> Condition | None:
    """The condition of type ``kind`` whose status is True, where there is one."""
    return next((c for c in conditions if c.type == kind and c.is_true), None)


# -- pods ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Terminated:
    """A container's ``state.terminated`` (or ``lastState.terminated``)."""

    reason: str = ""
    exit_code: int | None = None
    finished_at: float | None = None

    @classmethod
    def from_api(cls, obj: Api) -> Terminated:
        code = obj.get("exitCode")
        return cls(
            _text(obj.get("reason")),
            code if isinstance(code, int) and not isinstance(code, bool) else None,
            timestamp(obj.get("finishedAt")),
        )


@dataclass(frozen=True, slots=True)
class ContainerStatus:
    """One of a pod's ``containerStatuses`` (or ``initContainerStatuses``)."""

    name: str = ""
    image: str = ""
    restarts: int = 0
    running: bool = False
    waiting_reason: str = ""
    waiting_message: str = ""
    terminated: Terminated | None = None
    last_terminated: Terminated | None = None
    """How it ended the time before (``lastState.terminated``): a CrashLoopBackOff's exit."""

    @classmethod
    def from_api(cls, obj: Api) -> ContainerStatus:
        state, last = as_map(obj.get("state")), as_map(obj.get("lastState"))
        waiting = as_map(state.get("waiting"))
        restarts = obj.get("restartCount")
        return cls(
            name=_text(obj.get("name")),
            image=_text(obj.get("image")),
            restarts=restarts if isinstance(restarts, int) and not isinstance(restarts, bool) else 0,
            running="running" in state,
            waiting_reason=_text(waiting.get("reason")),
            waiting_message=_text(waiting.get("message")),
            terminated=Terminated.from_api(as_map(state.get("terminated"))) if "terminated" in state else None,
            last_terminated=Terminated.from_api(as_map(last["terminated"])) if "terminated" in last else None,
        )


@dataclass(frozen=True, slots=True)
class Resources:
    """What one container of a pod's spec asks for (``resources.requests``) and is held to
    (``resources.limits``), as quantities' text."""

    requests: Mapping[str, str]
    limits: Mapping[str, str]

    def asked(self, resource: str) -> str:
        """The request for ``resource``, else its limit (a limit alone is the request too); ""."""
        return self.requests.get(resource) or self.limits.get(resource) or ""


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod, as torchdeck reads it: whose it is, where it runs, how its containers fare."""

    meta: ObjectMeta
    node: str = ""
    """``spec.nodeName``: "" until it is bound."""
    phase: str = ""
    reason: str = ""
    """``status.reason`` (Evicted)."""
    message: str = ""
    started: float | None = None
    """``status.startTime``."""
    conditions: tuple[Condition, ...] = ()
    containers: tuple[ContainerStatus, ...] = ()
    init_containers: tuple[ContainerStatus, ...] = ()
    resources: tuple[Resources, ...] = ()
    """The spec's containers' requests and limits."""

    @classmethod
    def from_api(cls, obj: Api) -> Pod:
        spec, status = as_map(obj.get("spec")), as_map(obj.get("status"))
        return cls(
            meta=ObjectMeta.from_api(obj),
            node=_text(spec.get("nodeName")),
            phase=_text(status.get("phase")),
            reason=_text(status.get("reason")),
            message=_text(status.get("message")),
            started=timestamp(status.get("startTime")),
            conditions=conditions_of(status),
            containers=tuple(ContainerStatus.from_api(c) for c in _maps(status.get("containerStatuses"))),
            init_containers=tuple(ContainerStatus.from_api(c) for c in _maps(status.get("initContainerStatuses"))),
            resources=tuple(
                Resources(_quantities(r.get("requests")), _quantities(r.get("limits")))
                for c in _maps(spec.get("containers"))
                for r in [as_map(c.get("resources"))]
            ),
        )

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def labels(self) -> Mapping[str, str]:
        return self.meta.labels

    @property
    def has_started(self) -> bool:
        """Whether a container of the pod has run (so it has a log to read)."""
        return any(cs.running or cs.terminated is not None for cs in self.containers)

    @property
    def restarts(self) -> int:
        """Its containers' most restarts: the attempt its log is of."""
        return max((cs.restarts for cs in self.containers), default=0)

    @property
    def ended(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


# -- nodes, events, metrics ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    effect: str = ""


@dataclass(frozen=True, slots=True)
class Node:
    """A node, as torchdeck reads it: its labels (instance type, zone, purchase option), whether
    it may take pods, and what it has."""

    meta: ObjectMeta
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    conditions: tuple[Condition, ...] = ()
    allocatable: Mapping[str, str] = field(default_factory=dict)
    capacity: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_api(cls, obj: Api) -> Node:
        spec, status = as_map(obj.get("spec")), as_map(obj.get("status"))
        return cls(
            meta=ObjectMeta.from_api(obj),
            unschedulable=bool(spec.get("unschedulable")),
            taints=tuple(Taint(str(t.get("key")), _text(t.get("effect"))) for t in _maps(spec.get("taints"))),
            conditions=conditions_of(status),
            allocatable=_quantities(status.get("allocatable")),
            capacity=_quantities(status.get("capacity")),
        )

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def labels(self) -> Mapping[str, str]:
        return self.meta.labels

    @property
    def resources(self) -> Mapping[str, str]:
        """What pods may take of it: its allocatable, else (a node that does not say) its capacity."""
        return self.allocatable or self.capacity


@dataclass(frozen=True, slots=True)
class Event:
    """An event about an object (the scheduler's FailedScheduling, the kubelet's FailedMount)."""

    reason: str
    message: str = ""

    @classmethod
    def from_api(cls, obj: Api) -> Event:
        return cls(_text(obj.get("reason")), _text(obj.get("message")))


@dataclass(frozen=True, slots=True)
class NodeUsage:
    """What a node uses now, as metrics-server says (``metrics.k8s.io`` NodeMetrics)."""

    name: str
    cpu: str = ""
    memory: str = ""

    @classmethod
    def from_api(cls, obj: Api) -> NodeUsage:
        usage = as_map(obj.get("usage"))
        return cls(ObjectMeta.from_api(obj).name, _quantity_text(usage.get("cpu")), _quantity_text(usage.get("memory")))


# -- the other answers read ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClaimPhase:
    """A PersistentVolumeClaim's ``status.phase`` (Bound, Pending, Lost)."""

    phase: str

    @classmethod
    def from_api(cls, obj: Api) -> ClaimPhase:
        return cls(_text(as_map(obj.get("status")).get("phase")))


@dataclass(frozen=True, slots=True)
class AccessReview:
    """A SelfSubjectAccessReview's answer."""

    allowed: bool

    @classmethod
    def from_api(cls, obj: Api) -> AccessReview:
        return cls(bool(as_map(obj.get("status")).get("allowed")))


@dataclass(frozen=True, slots=True)
class SubjectReview:
    """A SelfSubjectReview's answer: who the API server says the caller is."""

    username: str

    @classmethod
    def from_api(cls, obj: Api) -> SubjectReview:
        user = as_map(as_map(obj.get("status")).get("userInfo"))
        return cls(_text(user.get("username")))


@dataclass(frozen=True, slots=True)
class ServedVersions:
    """The versions a CustomResourceDefinition marks ``served: true``."""

    versions: frozenset[str]

    @classmethod
    def from_api(cls, obj: Api) -> ServedVersions:
        spec = as_map(obj.get("spec"))
        return cls(frozenset(_text(v.get("name")) for v in _maps(spec.get("versions")) if v.get("served")))

    @classmethod
    def from_group(cls, obj: Api) -> ServedVersions:
        """The versions an API group's discovery document (``/apis/GROUP``) lists: what is served."""
        return cls(frozenset(_text(v.get("version")) for v in _maps(obj.get("versions"))))


@dataclass(frozen=True, slots=True)
class ConfigMap:
    data: Mapping[str, str]

    @classmethod
    def from_api(cls, obj: Api) -> ConfigMap:
        return cls(_strings(obj.get("data")))


@dataclass(frozen=True, slots=True)
class PodList:
    """A list of pods, and the resourceVersion a watch goes on from."""

    pods: list[Pod]
    resource_version: str | None

    @classmethod
    def from_api(cls, obj: Api) -> PodList:
        return cls.from_pages([obj])

    @classmethod
    def from_pages(cls, pages: Iterable[Api]) -> PodList:
        """The pods of a list's pages (``KubeClient.list_pages``): the resourceVersion is the list's
        (every page of one list is read at the same version)."""
        pods: list[Pod] = []
        version: object = None
        for page in pages:
            if page.get(LISTED_AGAIN):
                pods, version = [], None
            pods += [Pod.from_api(p) for p in items(page)]
            version = as_map(page.get("metadata")).get("resourceVersion") or version
        return cls(pods, version if isinstance(version, str) and version else None)


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One line of a pod watch: ADDED, MODIFIED, DELETED, BOOKMARK with its pod, or ERROR with the
    API's status (410: the resourceVersion expired)."""

    type: str
    pod: Pod
    code: int = 0
    error: str = ""

    @classmethod
    def from_api(cls, obj: Api) -> WatchEvent:
        kind, body = _text(obj.get("type")), as_map(obj.get("object"))
        if kind == "ERROR":
            code = body.get("code")
            return cls(
                kind,
                Pod(ObjectMeta()),
                code if isinstance(code, int) and not isinstance(code, bool) else 0,
                _text(body.get("message")) or str(dict(body)),
            )
        return cls(kind, Pod.from_api(body))


# -- Kueue ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LocalQueue:
    name: str
    cluster_queue: str

    @classmethod
    def from_api(cls, obj: Api) -> LocalQueue:
        return cls(ObjectMeta.from_api(obj).name, _text(as_map(obj.get("spec")).get("clusterQueue")))


@dataclass(frozen=True, slots=True)
class ResourceQuota:
    """One resource of a flavour in a ClusterQueue: its nominal quota and what it may borrow."""

    name: str
    nominal: str = ""
    borrowing_limit: str | None = None
    """None: no limit (within a cohort, as much as the cohort lends)."""


@dataclass(frozen=True, slots=True)
class FlavorQuotas:
    name: str
    resources: tuple[ResourceQuota, ...] = ()


@dataclass(frozen=True, slots=True)
class ResourceGroup:
    covered: tuple[str, ...] = ()
    flavors: tuple[FlavorQuotas, ...] = ()


@dataclass(frozen=True, slots=True)
class ClusterQueue:
    """A ClusterQueue, as the preflight reads it: its flavours' quotas, its cohort, its stop."""

    groups: tuple[ResourceGroup, ...] = ()
    stop_policy: str = ""
    cohort: str = ""
    used: Mapping[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    """``status.flavorsUsage``: (flavour, resource) -> (total, borrowed), as quantities' text."""
    admitted: int | None = None
    """``status.admittedWorkloads``, where Kueue says it."""
    pending: int | None = None
    """``status.pendingWorkloads``."""

    @classmethod
    def from_api(cls, obj: Api) -> ClusterQueue:
        spec, status = as_map(obj.get("spec")), as_map(obj.get("status"))
        used = {
            (_text(f.get("name")), _text(r.get("name"))): (
                _quantity_text(r.get("total")),
                _quantity_text(r.get("borrowed")),
            )
            for f in _maps(status.get("flavorsUsage"))
            for r in _maps(f.get("resources"))
        }
        return cls(
            groups=tuple(
                ResourceGroup(
                    tuple(_text(r) for r in as_list(group.get("coveredResources"))),
                    tuple(_flavor(f) for f in _maps(group.get("flavors"))),
                )
                for group in _maps(spec.get("resourceGroups"))
            ),
            stop_policy=_text(spec.get("stopPolicy")),
            cohort=_text(spec.get("cohortName")) or _text(spec.get("cohort")),
            used=used,
            admitted=count(status.get("admittedWorkloads")),
            pending=count(status.get("pendingWorkloads")),
        )


def _flavor(obj: Api) -> FlavorQuotas:
    quotas = []
    for resource in _maps(obj.get("resources")):
        limit = resource.get("borrowingLimit")
        quotas.append(
            ResourceQuota(
                _text(resource.get("name")),
                _quantity_text(resource.get("nominalQuota")) or "0",
                None if limit is None else _quantity_text(limit),
            )
        )
    return FlavorQuotas(_text(obj.get("name")), tuple(quotas))


@dataclass(frozen=True, slots=True)
class Workload:
    """The Workload Kueue makes of a job: who owns it, where it was admitted, its conditions."""

    meta: ObjectMeta
    admitted_to: str = ""
    """``status.admission.clusterQueue``: "" until admitted."""
    conditions: tuple[Condition, ...] = ()
    queue_name: str = ""
    """``spec.queueName``: the LocalQueue it was submitted to."""
    priority: int = 0
    """``spec.priority`` (0 where none, or no whole number)."""

    @classmethod
    def from_api(cls, obj: Api) -> Workload:
        status, spec = as_map(obj.get("status")), as_map(obj.get("spec"))
        priority = spec.get("priority")
        return cls(
            ObjectMeta.from_api(obj),
            _text(as_map(status.get("admission")).get("clusterQueue")),
            conditions_of(status),
            _text(spec.get("queueName")),
            priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        )


@dataclass(frozen=True, slots=True)
class PendingWorkload:
    """A Workload's place, as Kueue's visibility API says it (from 0; None where it says nonsense)."""

    name: str
    in_local_queue: int | None = None
    in_cluster_queue: int | None = None

    @classmethod
    def from_api(cls, obj: Api) -> PendingWorkload:
        return cls(
            ObjectMeta.from_api(obj).name,
            count(obj.get("positionInLocalQueue")),
            count(obj.get("positionInClusterQueue")),
        )
