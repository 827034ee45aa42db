"""The storage a cluster has now, read back from AWS and Kubernetes (``storage status`` and
the storage screen), and the one way it reads as text (``StorageState.lines``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

from ..errors import BackendError
from ..kubernetes.client import KubeClient
from .access import ClusterRecord
from .aws_objects import Answer
from .session import AwsSession
from .storage import ingress_rules
from .storage_plan import EFS_PER_GB_MONTH


@dataclass
class MountTargetState:
    ident: str
    subnet: str
    zone: str
    state: str


@dataclass
class FileSystemState:
    """An EFS or FSx file system as AWS reports it now."""

    kind: str
    """efs or fsx."""
    ident: str
    state: str
    encrypted: bool = False
    size_gib: float = 0.0
    """EFS: what is stored."""
    per_month: float = 0.0
    """EFS: what storing it costs a month."""
    capacity_gib: int = 0
    """FSx: the provisioned capacity."""
    deployment: str = ""
    dns_name: str = ""
    mount_targets: list[MountTargetState] = field(default_factory=list)


@dataclass
class IngressRule:
    protocol: str
    low: int
    high: int
    source: str
    """A security group id or a CIDR."""


@dataclass
class SecurityGroupState:
    ident: str
    rules: list[IngressRule] = field(default_factory=list)


@dataclass
class BucketState:
    name: str
    private: bool
    """Every public access block is on."""
    encrypted: bool


@dataclass
class ClaimState:
    """A PersistentVolumeClaim or PersistentVolume storage made, and its phase."""

    kind: str
    """persistentvolumeclaim or persistentvolume."""
    name: str
    phase: str


@dataclass
class StorageState:
    """What exists for the cluster now; ``problems`` are what is not right. ``lines`` is the one
    way it reads as text: ``storage status`` prints it and the storage screen logs it (their two
    formats had drifted apart: ``tcp/2049-2049`` in one, ``tcp/2049`` in the other)."""

    cluster: str
    file_systems: list[FileSystemState] = field(default_factory=list)
    security_groups: list[SecurityGroupState] = field(default_factory=list)
    buckets: list[BucketState] = field(default_factory=list)
    claims: list[ClaimState] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.file_systems or self.security_groups or self.buckets or self.claims)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def lines(self) -> list[StatusLine]:
        """A line per file system, mount target, security group, bucket, claim and problem."""
        out: list[StatusLine] = []
        for fs in self.file_systems:
            if fs.kind == "efs":
                out.append(StatusLine(
                    f"EFS {fs.ident}: {fs.state}, {'encrypted' if fs.encrypted else 'NOT encrypted'}, "
                    f"{fs.size_gib:.2f} GiB stored (${fs.per_month:.2f}/month)", "heading"))  # fmt: skip
            else:
                out.append(StatusLine(f"FSx {fs.ident}: {fs.state}, {fs.capacity_gib} GiB {fs.deployment}, "
                                      f"{fs.dns_name}", "heading"))  # fmt: skip
            out += [StatusLine(f"  mount target {mt.ident} in {mt.subnet} ({mt.zone}): {mt.state}")
                    for mt in fs.mount_targets]  # fmt: skip
        for sg in self.security_groups:
            ports = (f"{r.protocol}/{r.low}" if r.low == r.high else f"{r.protocol}/{r.low}-{r.high}" for r in sg.rules)
            sources = (r.source for r in sg.rules)
            out.append(StatusLine(f"security group {sg.ident}: "
                                  + ", ".join(f"{p} from {s}" for p, s in zip(ports, sources))))  # fmt: skip
        for bucket in self.buckets:
            out.append(StatusLine(f"bucket {bucket.name}: public access {'blocked' if bucket.private else 'NOT blocked'}, "
                                  f"encryption {'on' if bucket.encrypted else 'off'}"))  # fmt: skip
        out += [StatusLine(f"{claim.kind} {claim.name}: {claim.phase}") for claim in self.claims]
        out += [StatusLine(f"problem: {problem}", "problem") for problem in self.problems]
        return out


@dataclass(frozen=True)
class StatusLine:
    """One line of a status as text, and what kind of line it is (a front end styles it)."""

    text: str
    kind: Literal["heading", "detail", "problem"] = "detail"


def storage_state(aws: AwsSession, record: ClusterRecord, kube: KubeClient | None = None) -> StorageState:
    """The storage torchdeck made for the cluster (as the ledger knows it), read back from AWS and
    Kubernetes."""
    state = StorageState(record.name)
    rows = record.ledger.resources(scope=record.name)

    def live(kind: str) -> list[str]:
        return [r.ident for r in rows if r.kind == kind]

    for fs in live("efs-filesystem"):
        found = aws.find("efs", "describe_file_systems", FileSystemId=fs)
        if not found:
            state.problems.append(f"EFS {fs} is gone")
            continue
        info = found["FileSystems"][0]
        size = Answer(info).number("SizeInBytes", "Value")
        efs = FileSystemState(
            "efs", fs, info["LifeCycleState"], bool(info.get("Encrypted")), size / 2**30, size / 1e9 * EFS_PER_GB_MONTH
        )
        for mt in aws.pages("efs", "describe_mount_targets", "MountTargets", FileSystemId=fs):
            efs.mount_targets.append(
                MountTargetState(
                    mt["MountTargetId"], mt["SubnetId"], mt.get("AvailabilityZoneName", ""), mt["LifeCycleState"]
                )
            )
            if mt["LifeCycleState"] != "available":
                state.problems.append(f"mount target {mt['MountTargetId']} is {mt['LifeCycleState']}")
        state.file_systems.append(efs)
    for fs in live("fsx-filesystem"):
        found = aws.find("fsx", "describe_file_systems", FileSystemIds=[fs])
        if not found:
            state.problems.append(f"FSx {fs} is gone")
            continue
        info = found["FileSystems"][0]
        lustre = Answer(info).child("LustreConfiguration")
        state.file_systems.append(
            FileSystemState(
                "fsx",
                fs,
                info.get("Lifecycle", ""),
                True,
                capacity_gib=info.get("StorageCapacity", 0),
                deployment=lustre.text("DeploymentType"),
                dns_name=info.get("DNSName", ""),
            )
        )
    for sg in live("ec2-security-group"):
        found = aws.find("ec2", "describe_security_groups", GroupIds=[sg])
        if found:
            rules = sorted(ingress_rules(found["SecurityGroups"][0].get("IpPermissions", [])), key=str)
            state.security_groups.append(SecurityGroupState(sg, [IngressRule(*rule) for rule in rules]))
    for bucket in live("s3-bucket"):
        if aws.find("s3", "head_bucket", Bucket=bucket) is None:
            state.problems.append(f"bucket {bucket} is gone")
            continue
        settings = Answer(aws.find("s3", "get_public_access_block", Bucket=bucket)).value(
            "PublicAccessBlockConfiguration"
        )
        private = isinstance(settings, dict) and bool(settings) and all(settings.values())
        state.buckets.append(BucketState(bucket, private, bool(aws.find("s3", "get_bucket_encryption", Bucket=bucket))))
        if not private:
            state.problems.append(f"bucket {bucket} does not block public access")
    if kube is not None:
        for row in rows:
            path = row.detail.get("path", "") if row.kind == "k8s-object" else ""
            if "/persistentvolumeclaims/" in path or "/persistentvolumes/" in path:
                try:
                    phase = Answer(kube.request("GET", path)).text("status", "phase", default="no phase reported yet")
                except BackendError as exc:
                    phase = f"unreadable ({exc.message})"
                state.claims.append(ClaimState(path.rsplit("/", 2)[-2][:-1], path.rsplit("/", 1)[-1], phase))
    if state.empty and not state.problems:
        state.problems.append(f"no storage for cluster {record.name}: torchdeck storage create --cluster {record.name}")
    return state
