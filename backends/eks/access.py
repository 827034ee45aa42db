"""What torchdeck keeps about an EKS cluster on this machine, and how it
reaches one: the cluster's record (its region, path, kubeconfig context and
last storage choices; what was made for it is in the ledger, so a re-run
reuses it and delete finds it), the kubeconfig context with exec
authentication, the EKS token that exec prints, the Kubernetes client for
the cluster and its network (VPC, security group, node subnets).

No credential is written anywhere: the kubeconfig runs a command that signs a
short-lived token from whatever credentials the environment holds then."""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

import yaml

from ..errors import BackendError, SpecError
from ..files import load_json, load_yaml, write_atomically
from ..kubernetes.client import object_path
from ..ledger import Ledger, Resource, ResourceKindName
from ..names import (
    check_bucket_name,
    check_cluster_name,
    check_namespace,
    check_object_name,
    check_s3_prefix,
    check_service_account,
)
from .aws_objects import Answer
from .plan import CLUSTER_TAG
from .session import AwsSession, redact, translate

if TYPE_CHECKING:
    from botocore.awsrequest import AWSRequest

    from ..kubernetes.backend import KubernetesBackend

    pass

TOKEN_PREFIX = "k8s-aws-v1."
EXEC_API = "client.authentication.k8s.io/v1beta1"


def context_name(cluster: str) -> str:
    return f"torchdeck-{cluster}"


@dataclass(frozen=True)
class StorageChoice:
    """What the cluster's last ``storage create`` made for jobs: the kind of shared volume, its
    claim, the namespace, and the bucket, key prefix and service account for models."""

    kind: Literal["efs", "fsx", "none"]
    pvc: str
    namespace: str
    bucket: str | None
    prefix: str
    service_account: str

    @classmethod
    def from_dict(cls, data: object) -> StorageChoice | None:
        """One read back from a record's JSON, through the same checks it passed on the way in;
        SpecError naming the field. An empty mapping (none made, or deleted) is None."""
        if not data:
            return None
        if not isinstance(data, dict):
            raise SpecError("storage", "must be a mapping")
        kind = data.get("kind", "none")
        if kind not in ("efs", "fsx", "none"):
            raise SpecError("storage.kind", f"must be efs, fsx or none, got {kind!r:.40}")
        bucket = data.get("bucket") or None
        if bucket is not None:
            check_bucket_name(bucket, "storage.bucket")
        return cls(
            kind=kind,
            pvc=check_object_name(data.get("pvc", "shared"), "storage.pvc", "claim name"),
            namespace=check_namespace(data.get("namespace", "default"), "storage.namespace"),
            bucket=bucket,
            prefix=check_s3_prefix(data.get("prefix", "models/"), "storage.prefix"),  # "" would grant the bucket
            service_account=check_service_account(
                data.get("service_account", "torchdeck-s3"), "storage.service_account"
            ),
        )


KubeFactory = Callable[[Path, str], "KubernetesBackend"]
"""Makes the backend on a kubeconfig and context (the tests': on their API server)."""

RecordState = Literal["planned", "creating", "created", "deleting", "deleted"]
"""Where a cluster's create and delete have got to, as its record keeps it."""
RECORD_STATES: tuple[RecordState, ...] = get_args(RecordState)


@dataclass
class ClusterRecord:
    """``$STATE/clusters/NAME.json``: how torchdeck reaches one cluster and what it chose for it. What
    it made for the cluster lives in the ledger, under the cluster's name (``note``, ``made``)."""

    name: str
    region: str
    method: str = ""
    """eksctl or native: the path create took."""
    plan_file: str = ""
    state: RecordState = "planned"
    """Where create and delete have got to."""
    kubeconfig: str = ""
    context: str = ""
    account: str = ""
    """The AWS account the cluster lives in (for the ledger)."""
    storage: StorageChoice | None = None
    """The last storage create (None: none, or it was deleted)."""
    updated_at: float = 0.0
    path: Path | None = field(default=None, repr=False, compare=False)

    @classmethod
    def file_for(cls, state_dir: Path, name: str) -> Path:
        check_cluster_name(name, "cluster")  # the name becomes a file name under the state folder
        return Path(state_dir) / "clusters" / f"{name}.json"

    @classmethod
    def load(cls, state_dir: Path, name: str) -> ClusterRecord | None:
        path = cls.file_for(state_dir, name)
        try:
            data = load_json(path, hint="move it aside and run again")
        except FileNotFoundError:
            return None
        if not isinstance(data, dict):
            raise BackendError(f"{path}: not a cluster record (expected a mapping)", "move it aside and run again")
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "path"}
        if known.get("state", "planned") not in RECORD_STATES:
            raise BackendError(
                f"{path}: state must be one of {', '.join(RECORD_STATES)}, got {known['state']!r:.40}",
                "move it aside and run again",
            )
        try:  # read back as they were let in: a record edited by hand passes the same checks
            known["storage"] = StorageChoice.from_dict(known.get("storage"))
        except SpecError as exc:
            raise BackendError(f"{path}: {exc.message}", "move it aside and run again") from None
        return cls(**known, path=path)

    @classmethod
    def all(cls, state_dir: Path) -> list[ClusterRecord]:
        """Every cluster torchdeck keeps a record of and has not deleted, by name; an unreadable
        record is skipped (``load`` on it says why)."""
        found = []
        for path in sorted((Path(state_dir) / "clusters").glob("*.json")):
            try:
                record = cls.load(state_dir, path.stem)
            except BackendError:
                continue
            if record and record.state != "deleted":
                found.append(record)
        return found

    @classmethod
    def open(cls, state_dir: Path, name: str, region: str) -> ClusterRecord:
        record = cls.load(state_dir, name) or cls(name, region)
        record.path = cls.file_for(state_dir, name)
        return record

    @property
    def ledger(self) -> Ledger:
        assert self.path is not None
        return Ledger(self.path.parent.parent)

    def note(
        self,
        kind: ResourceKindName,
        ident: str,
        created: bool,
        hourly: float = 0.0,
        made: bool | None = None,
        **detail: object,
    ) -> None:
        """Record a resource (made now, or found and reused) in the ledger at once: a crash loses
        nothing. ``hourly`` is its estimated cost; ``made`` (default: ``created``) says whether
        torchdeck made it, and so whether cleanup deletes it."""
        self.ledger.add(
            kind,
            ident,
            region=self.region,
            account=self.account,
            scope=self.name,
            tags={CLUSTER_TAG: self.name},
            detail=detail,
            made=created if made is None else made,
            cost_per_hour=hourly,
        )

    def note_object(self, obj: Mapping[str, object], made: bool, rank: int, purpose: str) -> None:
        """A Kubernetes object in the ledger, with what deleting it needs; ``rank`` orders deletes
        (jobs 0, claims 1, volumes 2, classes and accounts 3); ``purpose`` (storage, image) says which
        delete takes it besides cleanup."""
        path = object_path(obj)
        self.note(
            "k8s-object",
            f"{self.context}/{path}",
            made,
            context=self.context,
            kubeconfig=self.kubeconfig,
            path=path,
            rank=rank,
            purpose=purpose,
        )

    def forget(self, kind: ResourceKindName, ident: str) -> None:
        """It is deleted (or was gone already)."""
        self.ledger.gone(kind, ident, self.region)

    def made(self, kind: ResourceKindName) -> list[Resource]:
        """What the ledger holds of ``kind`` for this cluster and still exists."""
        return self.ledger.resources(scope=self.name, kind=kind, region=self.region)

    def of_type(self, kind: ResourceKindName) -> list[str]:
        return [r.ident for r in self.made(kind)]

    def save(self) -> None:
        assert self.path is not None
        self.updated_at = time.time()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {k: v for k, v in asdict(self).items() if k != "path"}
        write_atomically(self.path, redact(json.dumps(data, indent=2, sort_keys=True)), 0o600)
        if self.context:  # what jobs make on its context belongs to the cluster
            self.ledger.set_place(self.context, self.name, self.region, self.account)


# -- the kubeconfig -------------------------------------------------------------------


def default_kubeconfig() -> Path:
    first = (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0]
    return Path(first).expanduser() if first else Path.home() / ".kube" / "config"


def exec_user(cluster: str, region: str, profile: str | None, use_aws_cli: bool) -> dict[str, object]:
    """The kubeconfig user: a command that prints an EKS token when kubectl needs one."""
    if use_aws_cli:
        command, args = "aws", ["eks", "get-token", "--cluster-name", cluster, "--region", region, "--output", "json"]
    else:
        command, args = sys.executable, ["-m", "torchdeck", "cluster", "token", "--name", cluster, "--region", region]
    user: dict[str, Any] = {
        "exec": {
            "apiVersion": EXEC_API,
            "command": command,
            "args": args,
            "interactiveMode": "Never",
            "provideClusterInfo": False,
        }
    }
    if profile:
        user["exec"]["env"] = [{"name": "AWS_PROFILE", "value": profile}]
    return user


def _replace(entries: object, name: str, body: Mapping[str, object] | None, key: str) -> list[object]:
    """A kubeconfig list (clusters, users, contexts) without ``name``'s entry, then with ``body`` as it."""
    kept = [e for e in (entries if isinstance(entries, list) else []) if Answer(e).value("name") != name]
    return kept + ([{"name": name, key: body}] if body is not None else [])


def write_context(
    path: Path,
    cluster: str,
    region: str,
    endpoint: str,
    ca_data: str,
    profile: str | None = None,
    use_aws_cli: bool = False,
) -> str:
    """Add (or refresh) the cluster's context in the kubeconfig, make it current; mode 0600. Returns the context."""
    context = context_name(cluster)
    config = _read_kubeconfig(path)
    config["clusters"] = _replace(
        config.get("clusters"), context, {"server": endpoint, "certificate-authority-data": ca_data}, "cluster"
    )
    config["users"] = _replace(config.get("users"), context, exec_user(cluster, region, profile, use_aws_cli), "user")
    config["contexts"] = _replace(config.get("contexts"), context, {"cluster": context, "user": context}, "context")
    config["current-context"] = context
    _write_kubeconfig(path, config)
    return context


def remove_context(path: Path, cluster: str) -> bool:
    """Take the cluster's entries out of the kubeconfig (after delete); True if there were any."""
    if not path.exists():
        return False
    context = context_name(cluster)
    config = _read_kubeconfig(path)
    found = any(c.value("name") == context for c in Answer(config).children("contexts"))
    for key, inner in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
        config[key] = _replace(config.get(key), context, None, inner)
    if config.get("current-context") == context:
        config["current-context"] = ""
    _write_kubeconfig(path, config)
    return found


def _read_kubeconfig(path: Path) -> dict[str, object]:
    try:
        config = load_yaml(path) or {}
    except FileNotFoundError:
        config = {}
    except SpecError as exc:
        raise BackendError(
            f"{path}: not a readable kubeconfig: {exc.reason}", "fix or move it, then connect again"
        ) from None
    if not isinstance(config, dict):
        raise BackendError(f"{path}: not a kubeconfig (expected a mapping)", "fix or move it, then connect again")
    config.setdefault("apiVersion", "v1")
    config.setdefault("kind", "Config")
    return config


def _write_kubeconfig(path: Path, config: Mapping[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, yaml.safe_dump(config, sort_keys=False), 0o600, follow_link=True)


def connect(
    aws: AwsSession, cluster: str, kubeconfig: Path | None = None, use_aws_cli: bool = False
) -> tuple[Path, str]:
    """Write the cluster's context (exec authentication) into the kubeconfig; returns (file, context)."""
    path = kubeconfig or default_kubeconfig()
    info = aws.call("eks", "describe_cluster", name=cluster)["cluster"]
    if info.get("status") != "ACTIVE" or not info.get("endpoint"):
        raise BackendError(
            f"cluster {cluster} is {info.get('status')}: no endpoint to connect to yet",
            "wait for it (torchdeck cluster status) and connect again",
        )
    context = write_context(
        path,
        cluster,
        aws.region or "",
        info["endpoint"],
        Answer(info).text("certificateAuthority", "data"),
        aws.profile,
        use_aws_cli,
    )
    return path, context


def eks_token(aws: AwsSession, cluster: str) -> dict[str, object]:
    """An ExecCredential holding an EKS bearer token: a presigned STS GetCallerIdentity URL for the cluster,
    valid 15 minutes (what ``aws eks get-token`` prints)."""
    sts = aws.client("sts")

    def add_cluster_header(request: AWSRequest, **_: object) -> None:
        request.headers["x-k8s-aws-id"] = cluster

    sts.meta.events.register_first(
        "before-sign.sts.GetCallerIdentity", add_cluster_header, unique_id="torchdeck-k8s-aws-id"
    )
    try:
        url = sts.generate_presigned_url("get_caller_identity", Params={}, ExpiresIn=60, HttpMethod="GET")
    except Exception as exc:
        raise translate(exc, "sts presign") from None
    token = TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
    expires = dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=14)
    return {
        "kind": "ExecCredential",
        "apiVersion": EXEC_API,
        "spec": {},
        "status": {"expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ"), "token": token},
    }


def cluster_tags(name: str) -> dict[str, str]:
    """The tag on everything torchdeck makes for a cluster (EKS's and S3's form)."""
    return {CLUSTER_TAG: name}


# -- what the cluster tells us ----------------------------------------------------------


@dataclass
class ClusterNetwork:
    """Where the storage goes: the cluster's VPC, its security group, and the subnets its nodes use."""

    vpc_id: str
    cluster_sg: str
    node_subnets: dict[str, str]
    """subnet id -> availability zone."""
    issuer: str


async def cluster_network(aws: AwsSession, name: str) -> ClusterNetwork:
    found = await aws.afind("eks", "describe_cluster", name=name)
    if found is None:
        raise BackendError(f"no cluster {name} in {aws.region}", "create it first: torchdeck cluster create")
    cluster = Answer(found).child("cluster")
    vpc = cluster.child("resourcesVpcConfig")
    cluster_sg = vpc.text("clusterSecurityGroupId")
    if not cluster_sg:
        raise BackendError(
            f"cluster {name} reports no cluster security group",
            "EKS gives every cluster one once it is ACTIVE; wait for it and run again",
        )
    subnets: list[str] = []
    for group in await aws.apages("eks", "list_nodegroups", "nodegroups", clusterName=name):
        ng = (await aws.acall("eks", "describe_nodegroup", clusterName=name, nodegroupName=group))["nodegroup"]
        subnets += [s for s in ng.get("subnets", []) if s not in subnets]
    if not subnets:
        subnets = vpc.texts("subnetIds")
    if not subnets:
        raise BackendError(f"cluster {name} has no subnets for nodes", "add a nodegroup, then run again")
    described = (await aws.acall("ec2", "describe_subnets", SubnetIds=subnets))["Subnets"]
    zones = {s["SubnetId"]: s["AvailabilityZone"] for s in described}
    vpc_id = vpc.text("vpcId") or (described[0]["VpcId"] if described else "")
    issuer = cluster.text("identity", "oidc", "issuer")
    return ClusterNetwork(vpc_id, cluster_sg, {s: zones[s] for s in subnets if s in zones}, issuer)


def cluster_kube(record: ClusterRecord, aws: AwsSession, kube: KubeFactory | None = None) -> KubernetesBackend:
    """The Kubernetes client on the cluster's context (connecting first where torchdeck has none);
    ``kube(kubeconfig, context)`` makes it where given (the tests' kmock)."""
    if not record.context:
        path, context = connect(aws, record.name, Path(record.kubeconfig) if record.kubeconfig else None)
        record.kubeconfig, record.context = str(path), context
        record.save()
    if kube:
        return kube(Path(record.kubeconfig), record.context)
    from ..kubernetes.backend import KubernetesBackend

    return KubernetesBackend(record.kubeconfig, record.context)
