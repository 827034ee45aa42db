"""Shared storage for an EKS cluster, and the bucket for its models.

- **EFS** (the default): a security group that admits NFS (2049) from the
  cluster's security group only, an encrypted file system, a mount target in
  every zone the nodes' subnets cover (waited until available), the EFS CSI
  driver add-on, and the StorageClass, PersistentVolume and ReadWriteMany
  claim the jobs mount.
- **FSx for Lustre** (the fast option): deployment type, capacity and an
  optional S3 data repository link, its security group (Lustre's ports from
  the cluster group and itself), the FSx CSI driver add-on, a PV and a claim.
- **S3**: a bucket for models with public access blocked and encryption on;
  the training service account's IRSA role and the bucket policy allow that
  bucket and prefix only.

Everything is looked up before it is made, tagged ``torchdeck:cluster=NAME``
and recorded in the cluster's record and the ledger as soon as it exists.
Every wait has a deadline and ends with a message that says what to do.

This module makes it; what is asked for and its checks are ``storage_plan.py``,
what exists now is ``storage_state.py``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Any

from ...trainer.s3url import S3Url
from ..errors import BackendError
from ..kubernetes.client import ensure_object
from .access import (
    ClusterNetwork,
    ClusterRecord,
    KubeFactory,
    StorageChoice,
    cluster_kube,
    cluster_network,
    cluster_tags,
)
from .aws_objects import Answer
from .iam import (
    EFS_CSI_POLICY,
    EFS_CSI_SERVICE_ACCOUNT,
    FSX_CSI_POLICY,
    FSX_CSI_SERVICE_ACCOUNT,
    ensure_role,
    ensure_service_account,
    oidc_provider,
    role_name,
    trust_service_account,
)
from .plan import CLUSTER_TAG, s3_policy
from .progress import Clock, FileSystemReady, Progress, StorageReady, wait_until
from .session import AwsError, AwsSession
from .storage_plan import StoragePlan, validate_storage

if TYPE_CHECKING:
    from ..kubernetes.backend import KubernetesBackend

POLL_S = 15.0
TIMEOUT_S = 30 * 60
NFS_PORT = 2049
LUSTRE_PORTS = ((988, 988), (1018, 1023))
LABELS = {"app.kubernetes.io/managed-by": "torchdeck"}


# -- what the cluster tells us --------------------------------------------------------


def one_subnet_per_zone(subnets: dict[str, str]) -> dict[str, str]:
    """EFS allows one mount target per zone: the first node subnet of each (zone -> subnet)."""
    chosen: dict[str, str] = {}
    for subnet, zone in subnets.items():
        chosen.setdefault(zone, subnet)
    return chosen


# -- waiting, always with an end ------------------------------------------------------


# -- the pieces -----------------------------------------------------------------------


def _ec2_tags(cluster: str, purpose: str, name: str) -> list[dict[str, object]]:
    return [
        {"Key": CLUSTER_TAG, "Value": cluster},
        {"Key": "torchdeck:purpose", "Value": purpose},
        {"Key": "Name", "Value": name},
    ]


async def ensure_security_group(
    aws: AwsSession,
    record: ClusterRecord,
    net: ClusterNetwork,
    purpose: str,
    ports: tuple[tuple[int, int], ...],
    self_too: bool,
) -> tuple[str, bool]:
    """A group in the cluster's VPC admitting ``ports`` from the cluster's group only (and from itself,
    for Lustre's servers); an existing one's rules are set back to exactly that."""
    name = f"torchdeck-{record.name}-{purpose}"
    found = (
        await aws.acall(
            "ec2",
            "describe_security_groups",
            Filters=[{"Name": "vpc-id", "Values": [net.vpc_id]}, {"Name": "group-name", "Values": [name]}],
        )
    )["SecurityGroups"]
    if found:
        group = found[0]
        if {t["Key"]: t["Value"] for t in group.get("Tags", [])}.get(CLUSTER_TAG) != record.name:
            raise BackendError(
                f"security group {name} exists and is not torchdeck's", "delete or rename it, then run again"
            )
        sg, made = group["GroupId"], False
    else:
        sg = (
            await aws.acall(
                "ec2",
                "create_security_group",
                GroupName=name,
                VpcId=net.vpc_id,
                Description=f"torchdeck {purpose} for EKS cluster {record.name}",
                TagSpecifications=[{"ResourceType": "security-group", "Tags": _ec2_tags(record.name, purpose, name)}],
            )
        )["GroupId"]
        group, made = {"IpPermissions": []}, True
    record.note("ec2-security-group", sg, made, vpc=net.vpc_id)
    sources = [net.cluster_sg] + ([sg] if self_too else [])
    wanted = [
        {
            "IpProtocol": "tcp",
            "FromPort": low,
            "ToPort": high,
            "UserIdGroupPairs": [{"GroupId": g, "Description": "torchdeck: from the cluster"} for g in sources],
        }
        for low, high in ports
    ]
    have = group.get("IpPermissions", [])
    if ingress_rules(have) != ingress_rules(wanted):
        if have:
            await aws.acall("ec2", "revoke_security_group_ingress", GroupId=sg, IpPermissions=have)
        await aws.acall("ec2", "authorize_security_group_ingress", GroupId=sg, IpPermissions=wanted)
    return sg, made


def ingress_rules(perms: Iterable[object]) -> set[tuple[str, int, int, str]]:
    """A security group's ingress (EC2's IpPermissions) as (protocol, from, to, source) rules."""
    out: set[tuple[str, int, int, str]] = set()
    for perm in map(Answer, perms):
        rule = (perm.text("IpProtocol"), perm.whole("FromPort"), perm.whole("ToPort"))
        for pair in perm.children("UserIdGroupPairs"):
            out.add((*rule, pair.text("GroupId")))
        for r in perm.children("IpRanges") + perm.children("Ipv6Ranges"):
            out.add((*rule, r.text("CidrIp") or r.text("CidrIpv6")))
    return out


async def ensure_csi_addon(
    aws: AwsSession,
    record: ClusterRecord,
    net: ClusterNetwork,
    addon: str,
    purpose: str,
    account: tuple[str, str],
    policy: str,
    clock: Clock,
    poll_s: float,
    timeout_s: float,
) -> AsyncIterator[Progress]:
    """The CSI driver as an EKS add-on, with its IRSA role; waited to ACTIVE."""
    name = record.name
    found = await aws.afind("eks", "describe_addon", clusterName=name, addonName=addon)
    # The role is ensured even where the add-on exists, so a rerun narrows what an older torchdeck granted.
    provider = await oidc_provider(aws, net.issuer)
    role, _ = await ensure_role(
        aws, record, role_name(name, purpose), trust_service_account(provider, net.issuer, *account), (policy,)
    )
    if found is None:
        await aws.acall(
            "eks",
            "create_addon",
            clusterName=name,
            addonName=addon,
            serviceAccountRoleArn=role,
            resolveConflicts="OVERWRITE",
            tags=cluster_tags(name),
        )
        yield Progress("csi", f"installing the {addon} add-on", clock())
    record.note("eks-addon", f"{name}/{addon}", found is None)

    def status() -> str:
        return aws.call("eks", "describe_addon", clusterName=name, addonName=addon)["addon"].get("status", "")

    async for p in wait_until(
        f"add-on {addon}", status, clock, "csi", poll_s, timeout_s, ("ACTIVE",), ("CREATE_FAILED", "DEGRADED")
    ):
        yield p
    yield Progress("csi", f"{addon} is ACTIVE", clock())


async def create_efs(
    aws: AwsSession, record: ClusterRecord, net: ClusterNetwork, clock: Clock, poll_s: float, timeout_s: float
) -> AsyncIterator[Progress]:
    """The security group, the encrypted file system and a mount target per node zone; the last event
    carries the file system (``FileSystemReady``)."""
    sg, made = await ensure_security_group(aws, record, net, "efs", ((NFS_PORT, NFS_PORT),), self_too=False)
    yield Progress(
        "efs", f"{'created' if made else 'reusing'} security group {sg}: NFS from {net.cluster_sg} only", clock()
    )
    token = f"torchdeck-{record.name}-efs"
    found = (await aws.acall("efs", "describe_file_systems", CreationToken=token))["FileSystems"]
    if found:
        fs, made = found[0]["FileSystemId"], False
    else:
        fs = (
            await aws.acall(
                "efs",
                "create_file_system",
                CreationToken=token,
                Encrypted=True,
                PerformanceMode="generalPurpose",
                ThroughputMode="elastic",
                Tags=_ec2_tags(record.name, "efs", token),
            )
        )["FileSystemId"]
        made = True
    record.note("efs-filesystem", fs, made)
    yield Progress("efs", f"{'created' if made else 'reusing'} encrypted file system {fs}", clock())

    def fs_state() -> str:
        return aws.call("efs", "describe_file_systems", FileSystemId=fs)["FileSystems"][0]["LifeCycleState"]

    async for p in wait_until(
        f"file system {fs}", fs_state, clock, "efs", poll_s, timeout_s, ("available",), ("error", "deleting", "deleted")
    ):
        yield p
    have = {
        m["SubnetId"]: m for m in await aws.apages("efs", "describe_mount_targets", "MountTargets", FileSystemId=fs)
    }
    zones_with = {m.get("AvailabilityZoneName") or net.node_subnets.get(m["SubnetId"]) for m in have.values()}
    targets = []
    for zone, subnet in sorted(one_subnet_per_zone(net.node_subnets).items()):
        if subnet in have:
            target, made = have[subnet]["MountTargetId"], False
        elif zone in zones_with:
            continue  # a mount target in another subnet of this zone serves it
        else:
            target = (
                await aws.acall("efs", "create_mount_target", FileSystemId=fs, SubnetId=subnet, SecurityGroups=[sg])
            )["MountTargetId"]
            made = True
        record.note("efs-mount-target", target, made, file_system=fs, subnet=subnet)
        targets.append(target)
        yield Progress("efs", f"{'created' if made else 'reusing'} mount target {target} in {subnet} ({zone})", clock())
    for target in targets:

        def mt_state(target: str = target) -> str:
            return aws.call("efs", "describe_mount_targets", MountTargetId=target)["MountTargets"][0]["LifeCycleState"]

        async for p in wait_until(
            f"mount target {target}",
            mt_state,
            clock,
            "efs",
            poll_s,
            timeout_s,
            ("available",),
            ("error", "deleting", "deleted"),
        ):
            yield p
    yield Progress("efs", f"{len(targets)} mount target(s) available", clock(), result=FileSystemReady(fs))


async def create_fsx(
    aws: AwsSession,
    plan: StoragePlan,
    record: ClusterRecord,
    net: ClusterNetwork,
    clock: Clock,
    poll_s: float,
    timeout_s: float,
) -> AsyncIterator[Progress]:
    """The security group and the Lustre file system; the last event carries it (``FileSystemReady``,
    with the DNS and mount names its volume needs)."""
    sg, made = await ensure_security_group(aws, record, net, "fsx", LUSTRE_PORTS, self_too=True)
    yield Progress(
        "fsx", f"{'created' if made else 'reusing'} security group {sg}: Lustre from {net.cluster_sg}", clock()
    )
    mine = [
        f
        for f in await aws.apages("fsx", "describe_file_systems", "FileSystems")
        if {t["Key"]: t["Value"] for t in f.get("Tags", [])}.get(CLUSTER_TAG) == record.name
        and f.get("FileSystemType") == "LUSTRE"
    ]
    if mine:
        fs, made = mine[0], False
    else:
        lustre: dict[str, Any] = {"DeploymentType": plan.fsx_deployment}
        if plan.fsx_throughput:
            lustre["PerUnitStorageThroughput"] = plan.fsx_throughput
        if plan.fsx_s3_link:
            lustre.update(ImportPath=plan.fsx_s3_link.rstrip("/"), ExportPath=plan.fsx_s3_link.rstrip("/"))
            if plan.fsx_deployment != "SCRATCH_1":
                lustre["AutoImportPolicy"] = "NEW_CHANGED_DELETED"
        subnet = sorted(net.node_subnets)[0]
        fs = (
            await aws.acall(
                "fsx",
                "create_file_system",
                FileSystemType="LUSTRE",
                StorageCapacity=plan.fsx_capacity_gib,
                StorageType="SSD",
                SubnetIds=[subnet],
                SecurityGroupIds=[sg],
                LustreConfiguration=lustre,
                ClientRequestToken=f"torchdeck-{record.name}-fsx",
                Tags=_ec2_tags(record.name, "fsx", f"torchdeck-{record.name}-fsx"),
            )
        )["FileSystem"]
        made = True
    fs_id = fs["FileSystemId"]
    record.note("fsx-filesystem", fs_id, made, hourly=plan.fsx_per_hour)
    yield Progress(
        "fsx",
        f"{'created' if made else 'reusing'} FSx for Lustre {fs_id}: {plan.fsx_capacity_gib} GiB "
        f"{plan.fsx_deployment}" + (f", linked to {plan.fsx_s3_link}" if plan.fsx_s3_link else ""),
        clock(),
    )

    def state() -> str:
        return aws.call("fsx", "describe_file_systems", FileSystemIds=[fs_id])["FileSystems"][0].get("Lifecycle", "")

    async for p in wait_until(
        f"FSx {fs_id}", state, clock, "fsx", poll_s, timeout_s, ("AVAILABLE",), ("FAILED", "MISCONFIGURED", "DELETING")
    ):
        yield p
    described = (await aws.acall("fsx", "describe_file_systems", FileSystemIds=[fs_id]))["FileSystems"][0]
    yield Progress(
        "fsx",
        f"FSx {fs_id} is AVAILABLE",
        clock(),
        result=FileSystemReady(
            fs_id, described.get("DNSName", ""), Answer(described).text("LustreConfiguration", "MountName")
        ),
    )


def bucket_policy(bucket: str, prefix: str, role_arn: str) -> dict[str, object]:
    """The training role may read and write under the prefix and list it; and nobody at all (any
    principal, not only the role) over plain HTTP.
    Every resource is the bucket or the prefix: no '*'."""
    objects = f"arn:aws:s3:::{bucket}/{prefix}*"
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "TrainingObjects",
                "Effect": "Allow",
                "Principal": {"AWS": role_arn},
                "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
                "Resource": objects,
            },
            {
                "Sid": "TrainingList",
                "Effect": "Allow",
                "Principal": {"AWS": role_arn},
                "Action": "s3:ListBucket",
                "Resource": f"arn:aws:s3:::{bucket}",
                "Condition": {"StringLike": {"s3:prefix": [f"{prefix}*"]}},
            },
            {
                "Sid": "TlsOnly",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": [f"arn:aws:s3:::{bucket}", objects],
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            },
        ],
    }


async def ensure_bucket(aws: AwsSession, record: ClusterRecord, bucket: str, clock: Clock) -> AsyncIterator[Progress]:
    """The bucket, private and encrypted; one that exists and is not torchdeck's is used as it is."""
    found = await aws.afind("s3", "head_bucket", Bucket=bucket)
    if found is not None:
        tags = await aws.afind("s3", "get_bucket_tagging", Bucket=bucket)
        ours = {t.text("Key"): t.text("Value") for t in Answer(tags).children("TagSet")}.get(CLUSTER_TAG) == record.name
        if not ours:
            record.note("s3-bucket", bucket, False, made=False, ours=False)
            yield Progress(
                "s3", f"using bucket {bucket} as it is (torchdeck did not make it, and cleanup keeps it)", clock()
            )
            return
    else:
        params: dict[str, Any] = {"Bucket": bucket}
        if aws.region and aws.region != "us-east-1":
            params["CreateBucketConfiguration"] = {"LocationConstraint": aws.region}
        try:
            await aws.acall("s3", "create_bucket", **params)
        except AwsError as exc:
            if exc.code == "BucketAlreadyExists":
                raise BackendError(
                    f"bucket name {bucket} is taken by another AWS account",
                    "bucket names are global: pick another --bucket",
                ) from None
            raise
    record.note("s3-bucket", bucket, found is None, made=True, ours=True)
    await aws.acall(
        "s3",
        "put_public_access_block",
        Bucket=bucket,
        PublicAccessBlockConfiguration={
            "BlockPublicAcls": True,
            "IgnorePublicAcls": True,
            "BlockPublicPolicy": True,
            "RestrictPublicBuckets": True,
        },
    )
    await aws.acall(
        "s3",
        "put_bucket_encryption",
        Bucket=bucket,
        ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}, "BucketKeyEnabled": True}]
        },
    )
    # ACLs off: every object belongs to the bucket's account, whoever wrote it.
    await aws.acall(
        "s3",
        "put_bucket_ownership_controls",
        Bucket=bucket,
        OwnershipControls={"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]},
    )
    await aws.acall(
        "s3", "put_bucket_tagging", Bucket=bucket, Tagging={"TagSet": [{"Key": CLUSTER_TAG, "Value": record.name}]}
    )
    yield Progress(
        "s3",
        f"{'created' if found is None else 'reusing'} bucket {bucket}: public access blocked, encrypted (SSE-S3), "
        "owner-enforced",
        clock(),
    )


# -- the whole of it ------------------------------------------------------------------


def render_storage(plan: StoragePlan, file_system: FileSystemReady) -> list[dict[str, object]]:
    """The StorageClass/PV/PVC for the file system, rendered from manifests/storage/."""
    import yaml

    from ..kubernetes.manifests import template_environment

    labels = {**LABELS, "torchdeck.dev/cluster": plan.cluster}
    ctx = dict(
        labels=labels,
        pv=f"torchdeck-{plan.cluster}-{plan.kind}",
        pvc=plan.pvc,
        namespace=plan.namespace,
        file_system_id=file_system.file_system_id,
        storage_class="torchdeck-efs",
        size=plan.size,
    )
    if plan.kind == "fsx":
        ctx.update(size=f"{plan.fsx_capacity_gib}Gi", dns_name=file_system.dns_name, mount_name=file_system.mount_name)
    text = template_environment().get_template(f"storage/{plan.kind}.yaml.j2").render(**ctx)
    return [o for o in yaml.safe_load_all(text) if o]


OBJECT_RANK = {"Job": 0, "PersistentVolumeClaim": 1, "PersistentVolume": 2, "StorageClass": 3, "ServiceAccount": 3}


class StorageCreate:
    """One ``storage create``: its steps, each an async generator of ``Progress``, sharing the cluster's
    network and (once made) its Kubernetes client."""

    def __init__(
        self,
        aws: AwsSession,
        plan: StoragePlan,
        record: ClusterRecord,
        kube: KubeFactory | None,
        poll_s: float,
        timeout_s: float,
    ) -> None:
        self.aws, self.plan, self.record, self.kube = aws, plan, record, kube
        self.poll_s, self.timeout_s = poll_s, timeout_s
        self.clock = Clock()
        self.net = ClusterNetwork("", "", {}, "")
        self._cluster_backend: KubernetesBackend | None = None

    async def cluster_backend(self) -> KubernetesBackend:
        """The Kubernetes client on the cluster's context, made once."""
        if self._cluster_backend is None:
            self._cluster_backend = await asyncio.to_thread(cluster_kube, self.record, self.aws, self.kube)
        return self._cluster_backend

    async def network(self) -> AsyncIterator[Progress]:
        """The account (where the record lacks it), and the cluster's VPC, security group and node subnets."""
        aws, record = self.aws, self.record
        if not record.account:
            record.account = (await aws.acall("sts", "get_caller_identity")).get("Account", "")
            record.save()
        net = self.net = await cluster_network(aws, self.plan.cluster)
        yield Progress(
            "cluster",
            f"cluster {self.plan.cluster}: VPC {net.vpc_id}, security group {net.cluster_sg}, "
            f"node subnets {', '.join(f'{s} ({z})' for s, z in sorted(net.node_subnets.items()))}",
            self.clock(),
        )

    async def file_system(self) -> AsyncIterator[Progress]:
        """EFS or FSx, its CSI driver, and the StorageClass, volume and claim the jobs mount."""
        aws, plan, record, net, clock = self.aws, self.plan, self.record, self.net, self.clock
        steps = (
            create_efs(aws, record, net, clock, self.poll_s, self.timeout_s)
            if plan.kind == "efs"
            else create_fsx(aws, plan, record, net, clock, self.poll_s, self.timeout_s)
        )
        file_system = FileSystemReady("")
        async for p in steps:
            file_system = p.result if isinstance(p.result, FileSystemReady) else file_system
            yield p
        addon, purpose, account, policy = (
            ("aws-efs-csi-driver", "efs-csi", EFS_CSI_SERVICE_ACCOUNT, EFS_CSI_POLICY)
            if plan.kind == "efs"
            else ("aws-fsx-csi-driver", "fsx-csi", FSX_CSI_SERVICE_ACCOUNT, FSX_CSI_POLICY)
        )
        async for p in ensure_csi_addon(
            aws, record, net, addon, purpose, account, policy, clock, self.poll_s, self.timeout_s
        ):
            yield p
        objects = render_storage(plan, file_system)
        if not objects:
            return
        cluster_backend = await self.cluster_backend()
        for obj in objects:
            made = await asyncio.to_thread(ensure_object, cluster_backend.client, obj)
            kind, name = Answer(obj).text("kind"), Answer(obj).text("metadata", "name")
            record.note_object(obj, made, OBJECT_RANK[kind], "storage")
            yield Progress("kubernetes", f"{'applied' if made else 'updated'} {kind} {name}", clock())

    async def model_bucket(self, bucket: str) -> AsyncIterator[Progress]:
        """The bucket for models, and the jobs' service account with a role that may use its prefix only."""
        aws, plan, record, net = self.aws, self.plan, self.record, self.net
        async for p in ensure_bucket(aws, record, bucket, self.clock):
            yield p
        provider = await oidc_provider(aws, net.issuer)
        role, _ = await ensure_role(
            aws,
            record,
            role_name(plan.cluster, "s3"),
            trust_service_account(provider, net.issuer, plan.namespace, plan.service_account),
            inline=s3_policy(bucket, plan.prefix),
        )
        bucket_row = record.ledger.find("s3-bucket", bucket, record.region)
        if bucket_row and bucket_row.detail.get("ours"):  # never someone else's bucket
            await aws.acall(
                "s3", "put_bucket_policy", Bucket=bucket, Policy=json.dumps(bucket_policy(bucket, plan.prefix, role))
            )
        on_cluster = await self.cluster_backend()
        await asyncio.to_thread(
            ensure_service_account, on_cluster.client, plan.namespace, plan.service_account, role, plan.cluster
        )
        record.note_object(
            {"kind": "ServiceAccount", "metadata": {"name": plan.service_account, "namespace": plan.namespace}},
            True,
            3,
            "storage",
        )
        yield Progress(
            "s3",
            f"{plan.namespace}/{plan.service_account} ({role.rsplit('/', 1)[-1]}) may use "
            f"s3://{bucket}/{plan.prefix} and nothing else",
            self.clock(),
        )

    def chosen(self) -> Progress:
        """The choice kept on the cluster's record, and the settings a job spec needs to use it."""
        plan, record = self.plan, self.record
        record.storage = StorageChoice(
            kind=plan.kind,  # type: ignore[arg-type]  # validate_storage let only efs, fsx and none through
            pvc=plan.pvc,
            namespace=plan.namespace,
            bucket=plan.bucket,
            prefix=plan.prefix,
            service_account=plan.service_account,
        )
        record.save()
        settings = spec_settings(record)
        return Progress(
            "done",
            "storage ready; jobs use it with " + " ".join(f"--set {k}={v}" for k, v in settings.items()),
            self.clock(),
            "done",
            StorageReady(plan.cluster, settings),
        )


async def create_storage(
    aws: AwsSession,
    plan: StoragePlan,
    record: ClusterRecord,
    kube: KubeFactory | None = None,
    poll_s: float = POLL_S,
    timeout_s: float = TIMEOUT_S,
) -> AsyncIterator[Progress]:
    """EFS or FSx with its driver and claim, and the model bucket, for the cluster; idempotent."""
    validate_storage(plan)
    create = StorageCreate(aws, plan, record, kube, poll_s, timeout_s)
    async for p in create.network():
        yield p
    if plan.kind in ("efs", "fsx"):
        async for p in create.file_system():
            yield p
    if plan.bucket:
        async for p in create.model_bucket(plan.bucket):
            yield p
    yield create.chosen()


def spec_settings(record: ClusterRecord) -> dict[str, str]:
    """What a job spec needs to use the cluster's storage (from the last storage create)."""
    choice = record.storage
    if choice is None:
        return {}
    out: dict[str, str] = {}
    if choice.kind in ("efs", "fsx"):
        out["cluster.pvc"] = choice.pvc
    if choice.bucket:
        out["cluster.service_account"] = choice.service_account
        out["model_file"] = str(S3Url(choice.bucket, choice.prefix).join("model.pt"))
    return out
