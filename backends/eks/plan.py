"""An EKS cluster plan: what ``torchdeck cluster init`` asks for, checked
field by field, written as the eksctl ClusterConfig (``eksctl.io/v1alpha5``)
that eksctl accepts and read back from it, with the cost per hour from the
instance catalogue torchdeck ships (``manifests/eks/instance-types.yaml``).

The plan asks for OIDC, an IAM service account that may use one S3 bucket
and prefix only, the add-ons training needs (EFS CSI driver, metrics-server;
eksctl installs the NVIDIA device plugin on GPU nodegroups itself), a system
nodegroup and worker nodegroups, GPU workers tainted ``nvidia.com/gpu``."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

import yaml

from ..errors import SpecError
from ..files import load_yaml, replace_text
from ..names import (
    check_bucket_name,
    check_cidr,
    check_cluster_name,
    check_namespace,
    check_s3_prefix,
    check_service_account,
)
from .aws_objects import Answer

CLUSTER_TAG = "torchdeck:cluster"
"""Every AWS resource torchdeck creates for a cluster carries it (value: the cluster name)."""
EKS_VERSIONS = ("1.29", "1.30", "1.31", "1.32", "1.33")
DEFAULT_VERSION = "1.31"
# EKS: 1-100 characters, a letter or digit first, then letters, digits, '-'
# and '_'. eksctl names its CloudFormation stacks eksctl-NAME-cluster, and a
# stack name allows letters, digits and '-' only, starting with a letter.
# Together: a letter first, then letters, digits and '-', 100 at most.
NODEGROUP_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}\Z")
REGION_RE = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d\Z")
INSTANCE_RE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9]+\Z")
ID_RE = {"vpc": re.compile(r"^vpc-[0-9a-f]{8,17}\Z"), "subnet": re.compile(r"^subnet-[0-9a-f]{8,17}\Z")}


def made_by_torchdeck(resource: Mapping[str, object], name: str) -> bool:
    """Whether an EKS resource (as describe_* returns it) carries torchdeck's tag for this cluster."""
    return Answer(resource).value("tags", CLUSTER_TAG) == name


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}


@dataclass(frozen=True)
class InstanceType:
    """One EC2 instance type as the planner sees it."""

    name: str
    vcpus: int
    memory_gib: float
    price: float | None = None
    """On-demand USD per hour (us-east-1), where the shipped table has it."""
    gpus: int = 0
    gpu_model: str = ""
    gpu_memory_gib: float = 0.0
    efa: bool = False


@functools.lru_cache(maxsize=1)
def _catalogue_file() -> tuple[dict[str, InstanceType], float]:
    """The shipped manifests/eks/instance-types.yaml, read once: its types, and EKS's hourly price."""
    data = yaml.safe_load((resources.files("torchdeck") / "manifests" / "eks" / "instance-types.yaml").read_text())
    types = {name: InstanceType(name, **values) for name, values in data["types"].items()}
    return types, float(data["eks_control_plane_per_hour"])


def shipped_catalogue() -> dict[str, InstanceType]:
    """The instance types torchdeck knows without asking EC2."""
    return dict(_catalogue_file()[0])


def control_plane_price() -> float:
    return _catalogue_file()[1]


@dataclass
class NodegroupPlan:
    """One managed nodegroup."""

    name: str
    instance_type: str
    min_size: int = 1
    desired: int = 1
    max_size: int = 1
    volume_gib: int = 100
    spot: bool = False
    gpu: bool = False
    """A GPU nodegroup: its type must have GPUs; its nodes get the nvidia.com/gpu taint."""
    efa: bool = False
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class ClusterPlan:
    """Everything ``eksctl create cluster`` (or torchdeck's own path) needs."""

    name: str
    region: str
    zones: list[str] = field(default_factory=list)
    version: str = DEFAULT_VERSION
    vpc_id: str | None = None
    """An existing VPC; None: eksctl makes a new one."""
    subnets: dict[str, str] = field(default_factory=dict)
    """Existing private subnets, zone -> subnet id (with vpc_id)."""
    nodegroups: list[NodegroupPlan] = field(default_factory=list)
    s3_bucket: str | None = None
    s3_prefix: str = "torchdeck/"
    service_account: str = "torchdeck-s3"
    namespace: str = "default"
    public_access_cidrs: list[str] = field(default_factory=list)
    """Who may reach the API server's public endpoint; empty: every address (AWS's default; IAM
    still authenticates each request)."""
    private_endpoint: bool = False
    """The API server only inside the VPC (no public endpoint): for a bastion host there."""
    pod_imds: bool = False
    """Pods may reach the nodes' instance metadata, and so the node role's credentials. Off: IMDSv2
    only, hop limit 1 (the node's own processes reach it, a pod's one hop more does not); pods get
    AWS credentials through their service account (IRSA) instead."""


MAX_PUBLIC_CIDRS = 40  # EKS's limit on publicAccessCidrs


def _fail(field_name: str, message: str, hint: str = "") -> NoReturn:
    raise SpecError(field_name, message, hint)


def _check_endpoint(plan: ClusterPlan) -> None:
    cidrs = plan.public_access_cidrs
    if not isinstance(cidrs, list) or not all(isinstance(c, str) for c in cidrs):
        _fail("public_access_cidrs", "must be a list of CIDR blocks", "e.g. 203.0.113.7/32")
    if plan.private_endpoint and cidrs:
        _fail("public_access_cidrs", "a private-only endpoint has no public access to narrow", "drop one of the two")
    if len(cidrs) > MAX_PUBLIC_CIDRS:
        _fail("public_access_cidrs", f"{len(cidrs)} blocks; EKS takes {MAX_PUBLIC_CIDRS}", "merge them into wider ones")
    for cidr in cidrs:
        check_cidr(cidr, "public_access_cidrs")


def answers_every_address(plan: ClusterPlan) -> bool:
    """Whether the public endpoint takes requests from anywhere: no block given (AWS's default),
    or a block that holds every address (0.0.0.0/0 said out loud)."""
    if plan.private_endpoint:
        return False
    return not plan.public_access_cidrs or any(check_cidr(c).prefixlen == 0 for c in plan.public_access_cidrs)


def validate_plan(plan: ClusterPlan, catalogue: dict[str, InstanceType] | None = None) -> ClusterPlan:
    """Check every field, naming the first bad one and why; returns the plan."""
    catalogue = shipped_catalogue() if catalogue is None else catalogue
    check_cluster_name(plan.name)
    check_namespace(plan.namespace, "namespace")
    check_service_account(plan.service_account, "service_account")
    _check_endpoint(plan)
    if not isinstance(plan.region, str) or not REGION_RE.match(plan.region):
        _fail("region", f"{plan.region!r} is not an AWS region", "e.g. us-west-2")
    for zone in plan.zones:
        if not zone.startswith(plan.region) or len(zone) != len(plan.region) + 1 or not zone[-1].isalpha():
            _fail("zones", f"{zone!r} is not a zone of {plan.region}", f"e.g. {plan.region}a")
    if plan.zones and len(set(plan.zones)) < 2:
        _fail("zones", "EKS needs subnets in at least two availability zones", f"e.g. {plan.region}a,{plan.region}b")
    if plan.version not in EKS_VERSIONS:
        _fail(
            "version", f"{plan.version!r} is not a Kubernetes version EKS offers", f"one of {', '.join(EKS_VERSIONS)}"
        )
    if plan.vpc_id is not None:
        if not ID_RE["vpc"].match(plan.vpc_id):
            _fail("vpc_id", f"{plan.vpc_id!r} is not a VPC id", "vpc- and 8 or 17 hex digits")
        if len(plan.subnets) < 2:
            _fail("subnets", "an existing VPC needs private subnets in two zones at least", "zone=subnet-...")
        for zone, subnet in plan.subnets.items():
            if not ID_RE["subnet"].match(subnet):
                _fail("subnets", f"{subnet!r} (zone {zone}) is not a subnet id", "subnet- and 8 or 17 hex digits")
    elif plan.subnets:
        _fail("subnets", "subnets are for an existing VPC", "set vpc_id too, or leave both out for a new VPC")
    if not plan.nodegroups:
        _fail("nodegroups", "a cluster needs one nodegroup at least", "a system nodegroup, and workers")
    seen: set[str] = set()
    for i, ng in enumerate(plan.nodegroups):
        where = f"nodegroups[{ng.name or i}]"
        if not isinstance(ng.name, str) or not NODEGROUP_NAME_RE.match(ng.name):
            _fail(f"{where}.name", f"{ng.name!r}: 1-63 letters, digits, '-' or '_', a letter or digit first")
        if ng.name in seen:
            _fail(f"{where}.name", f"{ng.name!r} is used twice", "give each nodegroup its own name")
        seen.add(ng.name)
        if not INSTANCE_RE.match(ng.instance_type or ""):
            _fail(f"{where}.instance_type", f"{ng.instance_type!r} is not an instance type", "e.g. m5.xlarge")
        for key in ("min_size", "desired", "max_size"):
            value = getattr(ng, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                _fail(f"{where}.{key}", f"must be a whole number >= 0, got {value!r}")
        if ng.min_size > ng.max_size:
            _fail(f"{where}.min_size", f"{ng.min_size} is more than max_size {ng.max_size}", "min <= desired <= max")
        if not ng.min_size <= ng.desired <= ng.max_size:
            _fail(f"{where}.desired", f"{ng.desired} is outside {ng.min_size}..{ng.max_size}", "min <= desired <= max")
        if ng.max_size < 1:
            _fail(f"{where}.max_size", "must be 1 at least")
        if not isinstance(ng.volume_gib, int) or not 20 <= ng.volume_gib <= 16384:
            _fail(f"{where}.volume_gib", f"must be 20..16384 GiB, got {ng.volume_gib!r}")
        info = catalogue.get(ng.instance_type)
        if info is not None:
            if ng.gpu and not info.gpus:
                _fail(
                    f"{where}.instance_type",
                    f"{ng.instance_type} has no GPU, and the nodegroup is for GPUs",
                    "pick a GPU type (g5.xlarge, g4dn.xlarge, p4d.24xlarge), or drop --gpu",
                )
            if not ng.gpu and info.gpus:
                _fail(
                    f"{where}.instance_type",
                    f"{ng.instance_type} has {info.gpus} GPU(s) and the nodegroup asks for none",
                    "mark it a GPU nodegroup (gpu: true), or pick a CPU type such as m5.xlarge",
                )
            if ng.efa and not info.efa:
                _fail(
                    f"{where}.efa",
                    f"{ng.instance_type} does not support EFA",
                    "drop efa, or pick an EFA type (p4d.24xlarge, g5.48xlarge, c5n.18xlarge)",
                )
        for key, value in ng.labels.items():
            if not re.match(r"^([a-z0-9.-]+/)?[A-Za-z0-9][-A-Za-z0-9_.]{0,62}\Z", key) or not re.match(
                r"^([A-Za-z0-9][-A-Za-z0-9_.]{0,61}[A-Za-z0-9]|[A-Za-z0-9]?)\Z", str(value)
            ):
                _fail(f"{where}.labels", f"{key}={value} is not a valid Kubernetes label")
    if plan.s3_bucket is not None:
        check_bucket_name(plan.s3_bucket, "s3_bucket")
    plan.s3_prefix = check_s3_prefix(plan.s3_prefix, "s3_prefix")
    return plan


def s3_policy(bucket: str, prefix: str) -> dict[str, object]:
    """Read and write objects under one prefix of one bucket, and list that prefix; nothing else."""
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ObjectsUnderPrefix",
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
                "Resource": f"arn:aws:s3:::{bucket}/{prefix}*",
            },
            {
                "Sid": "ListThePrefix",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": f"arn:aws:s3:::{bucket}",
                "Condition": {"StringLike": {"s3:prefix": [f"{prefix}*"]}},
            },
        ],
    }


def to_eksctl(plan: ClusterPlan) -> dict[str, object]:
    """The plan as eksctl's ClusterConfig."""
    validate_plan(plan)
    tags = {CLUSTER_TAG: plan.name}
    config: dict[str, object] = {
        "apiVersion": "eksctl.io/v1alpha5",
        "kind": "ClusterConfig",
        "metadata": {"name": plan.name, "region": plan.region, "version": plan.version, "tags": dict(tags)},
    }
    if plan.zones:
        config["availabilityZones"] = list(plan.zones)
    vpc: dict[str, Any] = {}
    if plan.vpc_id:
        vpc["id"] = plan.vpc_id
        vpc["subnets"] = {"private": {zone: {"id": sid} for zone, sid in sorted(plan.subnets.items())}}
    if plan.private_endpoint:
        vpc["clusterEndpoints"] = {"publicAccess": False, "privateAccess": True}
    if plan.public_access_cidrs:
        vpc["publicAccessCIDRs"] = list(plan.public_access_cidrs)
    if vpc:
        config["vpc"] = vpc
    iam: dict[str, Any] = {"withOIDC": True}
    if plan.s3_bucket:
        iam["serviceAccounts"] = [
            {
                "metadata": {
                    "name": plan.service_account,
                    "namespace": plan.namespace,
                    "labels": {"app.kubernetes.io/managed-by": "torchdeck"},
                },
                "attachPolicy": s3_policy(plan.s3_bucket, plan.s3_prefix),
                "tags": dict(tags),
            }
        ]
    config["iam"] = iam
    groups = []
    for ng in plan.nodegroups:
        group: dict[str, Any] = {
            "name": ng.name,
            "instanceType": ng.instance_type,
            "minSize": ng.min_size,
            "desiredCapacity": ng.desired,
            "maxSize": ng.max_size,
            "volumeSize": ng.volume_gib,
            "privateNetworking": True,
            "disableIMDSv1": True,
            "disablePodIMDS": not plan.pod_imds,
            "labels": {"torchdeck.dev/nodegroup": ng.name, **ng.labels},
            "tags": dict(tags),
        }
        if ng.spot:
            group["spot"] = True
        if ng.efa:
            group["efaEnabled"] = True
        if ng.gpu:
            group["taints"] = [dict(GPU_TAINT)]
        groups.append(group)
    config["managedNodeGroups"] = groups
    config["addons"] = [
        {"name": "aws-efs-csi-driver", "wellKnownPolicies": {"efsCSIController": True}},
        {"name": "metrics-server"},
    ]
    return config


def plan_to_yaml(plan: ClusterPlan) -> str:
    return (
        "# eksctl create cluster -f THIS_FILE (or torchdeck cluster create); written by torchdeck cluster init\n"
        + yaml.safe_dump(to_eksctl(plan), sort_keys=False, width=120)
    )


def _given(value: object, default: object) -> Any:
    """A field of a ClusterConfig as written (its check is ``validate_plan``'s), else ``default``."""
    return default if value is None else value


def from_eksctl(config: object, source: str = "") -> ClusterPlan:
    """A ClusterConfig (as written by ``to_eksctl``, or by hand) back as a plan, checked."""
    if not isinstance(config, dict) or config.get("kind") != "ClusterConfig":
        raise SpecError(
            "", "not an eksctl ClusterConfig (kind: ClusterConfig)", "write one with torchdeck cluster init", source
        )
    meta, vpc = Answer(config).child("metadata"), Answer(config).child("vpc")
    private = Answer(config).child("vpc", "subnets", "private").data
    subnets = {zone: Answer(s).text("id") for zone, s in private.items()}
    accounts = Answer(config).children("iam", "serviceAccounts")
    bucket, prefix, sa, ns = None, "torchdeck/", "torchdeck-s3", "default"
    if accounts:
        sa = accounts[0].text("metadata", "name", default=sa)
        ns = accounts[0].text("metadata", "namespace", default=ns)
        for statement in accounts[0].children("attachPolicy", "Statement"):
            m = re.match(r"^arn:aws:s3:::([^/]+)/(.*)\*\Z", str(statement.value("Resource") or ""))
            if m:
                bucket, prefix = m.group(1), m.group(2)
    groups = []
    pod_imds = False
    for g in config.get("managedNodeGroups") or []:
        pod_imds = pod_imds or g.get("disablePodIMDS") is False
        given = g.get("labels")
        labels = {k: v for k, v in (given.items() if isinstance(given, dict) else ()) if k != "torchdeck.dev/nodegroup"}
        groups.append(
            NodegroupPlan(
                name=g.get("name", ""),
                instance_type=g.get("instanceType", ""),
                min_size=g.get("minSize", 1),
                desired=g.get("desiredCapacity", g.get("minSize", 1)),
                max_size=g.get("maxSize", 1),
                volume_gib=g.get("volumeSize", 100),
                spot=bool(g.get("spot")),
                efa=bool(g.get("efaEnabled")),
                gpu=any(t.get("key") == "nvidia.com/gpu" for t in g.get("taints") or []),
                labels=labels,
            )
        )
    plan = ClusterPlan(
        name=_given(meta.value("name"), ""),
        region=_given(meta.value("region"), ""),
        zones=list(config.get("availabilityZones") or []),
        version=str(_given(meta.value("version"), "")),
        vpc_id=_given(vpc.value("id"), None),
        subnets=subnets,
        nodegroups=groups,
        s3_bucket=bucket,
        s3_prefix=prefix,
        service_account=sa,
        namespace=ns,
        public_access_cidrs=list(_given(vpc.value("publicAccessCIDRs"), None) or []),
        private_endpoint=vpc.value("clusterEndpoints", "publicAccess") is False,
        pod_imds=pod_imds,
    )
    try:
        return validate_plan(plan)
    except SpecError as exc:
        raise SpecError(exc.field, exc.reason, exc.hint, source) from None


def load_plan(path: str | Path) -> ClusterPlan:
    path = Path(path)
    try:
        config = load_yaml(path, hint="a plan is the YAML file cluster init writes")
    except FileNotFoundError:
        raise SpecError("", "no such file", "write one with torchdeck cluster init", str(path)) from None
    return from_eksctl(config, str(path))


@dataclass
class CostLine:
    what: str
    count: int
    each: float | None

    @property
    def total(self) -> float | None:
        return None if self.each is None else self.count * self.each


def apply_labels(groups: list[NodegroupPlan], items: list[str], field_name: str = "--label") -> None:
    """Set node labels from ``NODEGROUP:KEY=VALUE`` items on the named nodegroups."""
    by_name = {g.name: g for g in groups}
    for item in items:
        group, sep, pair = item.partition(":")
        key, eq, value = pair.partition("=")
        if not sep or not eq or group not in by_name:
            raise SpecError(
                field_name,
                f"{item!r}: expected NODEGROUP:KEY=VALUE with a nodegroup of this plan",
                f"nodegroups: {', '.join(by_name)}",
            )
        by_name[group].labels[key] = value


def cost_per_hour(
    plan: ClusterPlan, catalogue: dict[str, InstanceType] | None = None
) -> tuple[list[CostLine], float, list[str]]:
    """Lines (control plane, each nodegroup at its desired size), the total,
    and notes (types without a price, spot priced at on-demand)."""
    catalogue = shipped_catalogue() if catalogue is None else catalogue
    lines = [CostLine("EKS control plane", 1, control_plane_price())]
    notes = ["on-demand prices for us-east-1; other regions cost up to ~30% more"]
    if plan.vpc_id is None:
        notes.append("a new VPC adds a NAT gateway (about $0.045/h, plus data processed)")
    if answers_every_address(plan):
        notes.append(
            "the API endpoint answers every address (IAM still authenticates); --endpoint-cidr YOUR.IP/32 narrows it"
        )
    for ng in plan.nodegroups:
        info = catalogue.get(ng.instance_type)
        price = info.price if info else None
        lines.append(
            CostLine(
                f"{ng.name}: {ng.desired} x {ng.instance_type}" + (" (spot)" if ng.spot else ""), ng.desired, price
            )
        )
        if price is None:
            notes.append(f"{ng.instance_type} is not in the shipped price table: not counted")
        if ng.spot:
            notes.append(f"{ng.name} is spot: counted at the on-demand price, spot is usually 60-70% less")
    total = sum(line.total or 0.0 for line in lines)
    return lines, total, notes


def parse_nodegroup(text: str, field_name: str = "--worker") -> NodegroupPlan:
    """``NAME:TYPE:MIN:DESIRED:MAX[:gpu,spot,efa]`` as a nodegroup (the CLI's --worker, the wizard's rows)."""
    parts = text.strip().split(":")
    if len(parts) not in (5, 6):
        raise SpecError(
            field_name,
            f"{text!r}: expected NAME:TYPE:MIN:DESIRED:MAX[:gpu,spot,efa]",
            "e.g. gpu-workers:g5.xlarge:0:2:4:gpu",
        )
    name, kind, *sizes = parts[:5]
    try:
        low, desired, high = (int(x) for x in sizes)
    except ValueError:
        raise SpecError(field_name, f"{text!r}: MIN, DESIRED and MAX are whole numbers", "e.g. 0:2:4") from None
    flags = {f.strip() for f in parts[5].split(",")} - {""} if len(parts) == 6 else set()
    unknown = flags - {"gpu", "spot", "efa"}
    if unknown:
        raise SpecError(field_name, f"{text!r}: unknown flag {sorted(unknown)[0]!r}", "flags: gpu, spot, efa")
    return NodegroupPlan(name, kind, low, desired, high, gpu="gpu" in flags, spot="spot" in flags, efa="efa" in flags)


def format_nodegroup(ng: NodegroupPlan) -> str:
    """The inverse of ``parse_nodegroup``."""
    flags = ",".join(f for f, on in (("gpu", ng.gpu), ("spot", ng.spot), ("efa", ng.efa)) if on)
    return f"{ng.name}:{ng.instance_type}:{ng.min_size}:{ng.desired}:{ng.max_size}" + (f":{flags}" if flags else "")


def parse_subnets(items: list[str]) -> dict[str, str]:
    """``ZONE=SUBNET`` items as a mapping."""
    subnets = {}
    for item in items:
        zone, sep, subnet = item.partition("=")
        if not sep or not zone.strip() or not subnet.strip():
            raise SpecError("subnets", f"{item!r}: expected ZONE=SUBNET", "e.g. us-west-2a=subnet-0abc1234")
        subnets[zone.strip()] = subnet.strip()
    return subnets


def save_plan(plan: ClusterPlan, path: str | Path, *, replace: bool = True) -> str:
    """Validate, then write the ClusterConfig atomically (a bad plan writes nothing); returns the text.
    ``replace=False``: only where nothing is at ``path`` yet (FileExistsError)."""
    text = plan_to_yaml(plan)
    replace_text(Path(path), text, replace=replace)
    return text
