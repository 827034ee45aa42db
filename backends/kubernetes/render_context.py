"""What the manifest templates read (``manifests/*.yaml.j2``), as one typed object: the parts every
kind shares, worked out by ``manifests.context``, and the parts one kind adds, set by its ``JobKind``
(``kinds.py``). The objects it describes are what torchdeck sends, so their nested parts stay plain
JSON values: the templates write them out with ``tojson``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from ..spec import JobSpec

JsonObject = dict[str, object]
"""A nested part of a manifest as it is sent (a volume, an env entry, an init container)."""
Resources = dict[str, dict[str, str]]
"""A container's requests and limits."""


class MpiRole(NamedTuple):
    """One of an MPIJob's replica specs (mpijob.yaml.j2 unpacks these in this order)."""

    role: str
    replicas: int
    container: str
    command: list[str]
    args: list[str]
    resources: Resources
    ports: list[JsonObject]
    with_code: bool


@dataclass
class RenderContext:
    """Everything the templates need, worked out once (``vars()`` of it is what Jinja gets)."""

    name: str
    namespace: str
    labels: dict[str, str]
    job_labels: dict[str, str]
    suspend: bool
    selector: dict[str, str]
    image: str | None
    nodes: int
    nproc_per_node: int | str
    max_restarts: int
    min_nodes: int | None
    max_nodes: int | None
    elastic: bool
    backoff_limit: int
    clean_pod_policy: str
    ttl_seconds_after_finished: int | None
    restart_policy: str
    pod_restart_policy: str | None
    service_account: str | None
    image_pull_policy: str | None
    node_selector: dict[str, str]
    tolerations: list[JsonObject]
    affinity: JsonObject
    resources: Resources
    env: list[JsonObject]
    volume_mounts: list[JsonObject]
    volumes: list[JsonObject]
    runtime: str
    rdzv_port: int
    command: list[str]
    args: list[str]
    annotations: dict[str, str]
    pod_annotations: dict[str, str] = field(default_factory=dict)
    """On each pod (``cluster.node_loss``: safe for Kueue to delete by force on an unreachable node)."""
    container: str = "trainer"
    subdomain: str | None = None
    ports: list[JsonObject] = field(default_factory=list)
    init_containers: list[JsonObject] = field(default_factory=list)
    working_dir: str | None = None
    pod_overrides: str = ""
    """TrainJob: where its release takes the pods' settings (``crds.Target.pod_overrides``)."""
    replica_roles: list[tuple[str, int]] = field(default_factory=list)
    """PyTorchJob: its replica specs, (role, replicas)."""
    mpi_roles: list[MpiRole] = field(default_factory=list)
    ssh_auth_mount_path: str = ""
    etcd_image: str = ""
    """ElasticJob: its etcd rendezvous' image and labels."""
    etcd_labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class KindInputs:
    """What a kind's part of the context is made from, besides the shared context."""

    spec: JobSpec
    run_id: str
    torchrun: list[str]
    """torchrun's own options (ranks per node, restarts, ``--tee`` for the user's code)."""
    program: list[str]
    """What torchrun runs on every rank, with its arguments."""
    user_env: list[JsonObject]
    """The user's code's environment (empty for the built-in trainer)."""
    code_dir: str
    """Where the user's code is in the pods."""
