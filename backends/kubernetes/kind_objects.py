"""Training job objects as they come in, read once into typed views: a job of any kind as the
cluster returns it (its metadata, the replica counts and ranks its kind keeps, its conditions and
suspend flag), and a manifest's pod templates as ``torchdeck import`` reads them (containers, env,
volumes, placement). This is the edge for job objects (tests/support/house.py's EDGE): the only
module besides the client's and ``objects.py`` that reads them by key; everything past it reads
fields. Small frozen dataclasses of the fields torchdeck reads rather than a library's full models:
an object from another operator release, or a hand-written manifest, carries fields no model knows,
and torchdeck must read what it understands and say what it left out, never fail on the rest.

Where a value has the wrong type for its field, a view raises TypeError or ValueError: the
importer turns those into one line; the cluster's own objects always have the right types."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from .objects import Api as Json
from .objects import Condition


def mapping(value: object) -> Json:
    """``value`` where it is a JSON object; an absent or null one reads as empty."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a mapping, got {type(value).__name__}")
    return value


def items(value: object) -> list[object]:
    """``value`` where it is a JSON array; an absent or null one reads as empty."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return value


def text(value: object, default: str = "") -> str:
    """A string field (None: ``default``); numbers are written out, as YAML may hand them in."""
    return default if value is None else str(value)


def optional_text(value: object) -> str | None:
    return None if value is None else str(value)


def whole(value: object, default: int) -> int:
    """A count field (None: ``default``), as ``int()`` reads it (a manifest may quote it)."""
    if value is None:
        return default
    if isinstance(value, (int, str, float)):
        return int(value)
    raise TypeError(f"expected a number, got {type(value).__name__}")


def at(obj: object, path: Sequence[str]) -> object:
    """The value at ``path`` (keys, outermost first), or None where any step is missing."""
    for part in path:
        obj = obj.get(part) if isinstance(obj, Mapping) else None
    return obj


@dataclass(frozen=True)
class JobConditions:
    """What a job's status says: its conditions, the pods its controller counts active, when it ended."""

    conditions: tuple[Condition, ...] = ()
    active: int = 0
    completion_time: str | None = None

    def holding(self) -> dict[str, Condition]:
        """The conditions that hold now, by type."""
        return {c.type: c for c in self.conditions if c.is_true}

    @classmethod
    def read(cls, data: object) -> JobConditions:
        st = mapping(data)
        return cls(
            tuple(Condition.from_api(mapping(c)) for c in items(st.get("conditions"))),
            whole(st.get("active"), 0),
            optional_text(st.get("completionTime")),
        )


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str | None
    """None: from a ConfigMap, Secret or field (``valueFrom``)."""


@dataclass(frozen=True)
class Container:
    """A container of a pod template, as far as torchdeck reads one."""

    name: str = ""
    image: str | None = None
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[EnvVar, ...] = ()
    requests: Mapping[str, object] = field(default_factory=dict)
    limits: Mapping[str, object] = field(default_factory=dict)
    working_dir: str | None = None
    image_pull_policy: str | None = None
    mounts: Mapping[str, str] = field(default_factory=dict)
    """Where each volume is mounted, by the volume's name."""

    @classmethod
    def read(cls, data: object) -> Container:
        c = mapping(data)
        resources = mapping(c.get("resources"))
        env = []
        for e in items(c.get("env")):
            if isinstance(e, Mapping):
                env.append(EnvVar(text(e.get("name")), optional_text(e["value"]) if "value" in e else None))
        mounts = {text(m.get("name")): text(m.get("mountPath")) for m in map(mapping, items(c.get("volumeMounts")))}
        return cls(
            text(c.get("name")),
            optional_text(c.get("image")),
            tuple(str(a) for a in items(c.get("command"))),
            tuple(str(a) for a in items(c.get("args"))),
            tuple(env),
            mapping(resources.get("requests")),
            mapping(resources.get("limits")),
            optional_text(c.get("workingDir")),
            optional_text(c.get("imagePullPolicy")),
            mounts,
        )


@dataclass(frozen=True)
class Volume:
    name: str
    source: str
    """Its kind of source (persistentVolumeClaim, emptyDir, configMap...)."""
    claim: str | None = None
    in_memory: bool = False
    """A memory-backed emptyDir."""
    size_limit: str | None = None

    @classmethod
    def read(cls, data: object) -> Volume:
        v = mapping(data)
        empty = mapping(v.get("emptyDir"))
        claim = mapping(v.get("persistentVolumeClaim")) if "persistentVolumeClaim" in v else None
        return cls(
            text(v.get("name")),
            next((str(k) for k in v if k != "name"), "?"),
            text(claim["claimName"]) if claim is not None else None,
            empty.get("medium") == "Memory",
            optional_text(empty.get("sizeLimit")),
        )


@dataclass(frozen=True)
class PodTemplate:
    """A pod template of a job (or a TrainJob's override), as far as torchdeck reads one."""

    containers: tuple[Container, ...]
    service_account: str | None = None
    node_selector: Mapping[str, object] = field(default_factory=dict)
    tolerations: tuple[str | None, ...] = ()
    """The keys of its tolerations."""
    affinity: Json | None = None
    volumes: tuple[Volume, ...] = ()
    toleration_seconds: Mapping[str, int] = field(default_factory=dict)
    """key -> ``tolerationSeconds``, of its tolerations that say how long (a lost node's taints)."""

    def container(self, names: Sequence[str]) -> Container:
        """The training container: the first named one of ``names``, else the first."""
        named = [c for c in self.containers if c.name in names]
        return (named or list(self.containers) or [Container()])[0]

    @classmethod
    def read_spec(cls, data: object) -> PodTemplate:
        """From a pod spec (a template's ``spec``)."""
        pod = mapping(data)
        affinity = pod.get("affinity")
        return cls(
            tuple(Container.read(c) for c in items(pod.get("containers"))),
            optional_text(pod.get("serviceAccountName")) or None,
            mapping(pod.get("nodeSelector")),
            tuple(optional_text(mapping(t).get("key")) for t in items(pod.get("tolerations"))),
            mapping(affinity) if affinity else None,
            tuple(Volume.read(v) for v in items(pod.get("volumes"))),
            {
                str(key): int(seconds)
                for t in items(pod.get("tolerations"))
                if isinstance(key := mapping(t).get("key"), str)
                and isinstance(seconds := mapping(t).get("tolerationSeconds"), int)
                and not isinstance(seconds, bool)
            },
        )

    @classmethod
    def read(cls, data: object) -> PodTemplate | None:
        """From a pod template (``{metadata, spec}``); None where there is none."""
        if not isinstance(data, Mapping):
            return None
        return cls.read_spec(data.get("spec"))


@dataclass(frozen=True)
class ReplicaSpec:
    """One role of a job (Master, Worker, Launcher): how many pods, from which template."""

    replicas: int = 1
    template: PodTemplate | None = None

    @classmethod
    def read(cls, data: object) -> ReplicaSpec:
        r = mapping(data)
        return cls(whole(r.get("replicas"), 1), PodTemplate.read(r.get("template")))


@dataclass(frozen=True)
class JobObject:
    """A training job of any kind, as far as torchdeck reads one. Where a kind keeps its replica
    specs, its run policy and its size is its ``JobKind``'s to say (``JobKind.view``): this view reads
    what the kind points it at."""

    kind: str
    name: str
    namespace: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    spec: Json
    """The job's spec, for what its kind reads of it (``JobKind`` methods take this view)."""
    status: JobConditions
    replica_specs: Mapping[str, ReplicaSpec]
    """By role, where the kind keeps them (empty: a kind without replica specs)."""
    run_policy: Json
    """Kubeflow's ``runPolicy`` (backoff limit, clean-pod policy, TTL, suspend); empty elsewhere."""

    def field(self, *path: str) -> object:
        """The value at ``path`` in the job's spec (None where any step is missing)."""
        return at(self.spec, path)

    def count(self, *path: str, default: int = 1) -> int:
        """A count at ``path`` in the job's spec (``default`` where it is not given)."""
        return whole(at(self.spec, path), default)

    def replicas(self, role: str) -> int:
        """The pods of ``role`` (1 where the role is not given, as the operators default it)."""
        found = self.replica_specs.get(role)
        return found.replicas if found is not None else 1

    def string_lists(self) -> Iterator[list[str]]:
        """Every list of strings in the job's spec: its containers' commands and args."""
        yield from string_lists(self.spec)

    @classmethod
    def read(cls, data: object, replicas_at: str = "") -> JobObject:
        obj = mapping(data)
        meta, spec = mapping(obj.get("metadata")), mapping(obj.get("spec"))
        roles = mapping(spec.get(replicas_at)) if replicas_at else {}
        return cls(
            text(obj.get("kind")),
            text(meta.get("name")),
            text(meta.get("namespace")),  # empty: not given (a manifest may leave it to kubectl)
            {str(k): str(v) for k, v in mapping(meta.get("labels")).items()},
            {str(k): str(v) for k, v in mapping(meta.get("annotations")).items()},
            spec,
            JobConditions.read(obj.get("status")),
            {str(role): ReplicaSpec.read(r) for role, r in roles.items()},
            mapping(spec.get("runPolicy") or spec.get("RunPolicy")),
        )


def string_lists(node: object) -> Iterator[list[str]]:
    """Every list of strings in a JSON value."""
    if isinstance(node, Mapping):
        for value in node.values():
            yield from string_lists(value)
    elif isinstance(node, list):
        if node and all(isinstance(v, str) for v in node):
            yield node
        for value in node:
            yield from string_lists(value)


def _spread_only(anti: object) -> bool:
    """No pod anti-affinity, or only the preferred one-a-node spread torchdeck renders by itself."""
    if anti is None:
        return True
    preferred = mapping(anti).get("preferredDuringSchedulingIgnoredDuringExecution")
    if set(mapping(anti)) != {"preferredDuringSchedulingIgnoredDuringExecution"} or not isinstance(preferred, list):
        return False
    terms = [mapping(mapping(t).get("podAffinityTerm")) for t in preferred]
    return all(t.get("topologyKey") == "kubernetes.io/hostname" for t in terms)


def avoided_nodes(affinity: Json) -> list[str] | None:
    """The nodes an affinity keeps pods off, where it says only that (the shape ``cluster.avoid_nodes``
    renders: one required term, ``metadata.name NotIn [...]``); None for any other affinity."""
    if not set(affinity) <= {"nodeAffinity", "podAntiAffinity"} or not _spread_only(affinity.get("podAntiAffinity")):
        return None
    if "nodeAffinity" not in affinity:
        return []  # only the spread a run of several nodes renders by itself
    node_affinity = affinity.get("nodeAffinity")
    if set(mapping(node_affinity)) != {"requiredDuringSchedulingIgnoredDuringExecution"}:
        return None
    terms = at(node_affinity, ("requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"))
    if not isinstance(terms, list) or len(terms) != 1 or set(mapping(terms[0])) != {"matchFields"}:
        return None
    fields = mapping(terms[0])["matchFields"]
    if not isinstance(fields, list) or not fields:
        return None
    found: list[str] = []
    for requirement in fields:  # one a node (the API takes one value for metadata.name)
        term = mapping(requirement)
        values = term.get("values")
        if term.get("key") != "metadata.name" or term.get("operator") != "NotIn" or not isinstance(values, list):
            return None
        found += [str(v) for v in values]
    return found
