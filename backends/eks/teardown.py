"""Tearing down what torchdeck made: the plan (from the ledger, plus
orphans found by their ``torchdeck:cluster`` tag when the ledger was lost),
then the deletes in dependency order: Kubernetes objects, file systems and
their mount targets, security groups, ECR repositories, buckets, and last
each cluster with its nodegroups, add-ons, OIDC provider and roles.

Every delete treats "already gone" as done and marks the ledger row as soon
as it is, so a cleanup that was interrupted resumes where it stopped and a
second run has nothing to do."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from ..errors import BackendError
from ..kubernetes.client import ApiError, KubeClient
from ..ledger import Ledger, Resource, ResourceKindName
from .access import ClusterRecord
from .aws_objects import Answer
from .cluster import delete_cluster
from .iam import delete_role
from .plan import CLUSTER_TAG
from .progress import Clock, Progress, TeardownDone, wait_gone
from .session import AwsError, AwsSession

POLL_S = 15.0
TIMEOUT_S = 30 * 60


@dataclass
class Step:
    """One line of the teardown plan."""

    resource: Resource
    action: str
    """delete, keep (torchdeck did not make it), or cluster (deleted with its cluster)."""
    why: str = ""
    orphan: bool = False
    """Found by its tag, not in the ledger."""

    def line(self) -> str:
        r = self.resource
        cost = f"  ${r.cost_per_hour:.3f}/h" if r.cost_per_hour else ""
        where = f"  [{r.scope or '-'} {r.region or '-'}]"
        mark = " (found by tag)" if self.orphan else ""
        verb = {"delete": "delete", "keep": "keep  ", "cluster": "  with"}[self.action]
        return f"{verb}  {r.kind:<20} {r.ident}{where}{cost}{mark}" + (f"  -- {self.why}" if self.why else "")


def teardown_key(r: Resource) -> tuple[int, float]:
    """Dependents first (the order of RESOURCE_KINDS); within a kind, the newest first."""
    return KIND_ORDER.get(r.kind, len(KIND_ORDER)), -r.created_at


def in_teardown_order(resources: Iterable[Resource]) -> list[Resource]:
    return sorted(resources, key=teardown_key)


def storage_steps(ledger: Ledger, cluster: str, keep_bucket: bool = False) -> list[Step]:
    """What ``storage delete`` takes: the file systems, their groups and mount targets, the claims,
    volumes and service account storage made, and the bucket (unless kept)."""
    rows = [
        r
        for r in ledger.resources(scope=cluster)
        if r.kind in STORAGE_KINDS and (r.kind != "k8s-object" or r.detail.get("purpose") == "storage")
    ]
    return plan_cleanup(rows, scope=cluster, keep_buckets=keep_bucket)


def plan_cleanup(
    resources: Iterable[Resource],
    orphans: Iterable[Resource] = (),
    scope: str | None = None,
    keep_buckets: bool = False,
    kinds: tuple[str, ...] | None = None,
) -> list[Step]:
    """The teardown plan in the order it runs. The rows of a cluster torchdeck made go with the cluster
    (one delete walks them in order); what torchdeck found and did not make is kept."""
    known = {(r.kind, r.ident, r.region) for r in resources}
    rows = [(r, False) for r in resources] + [(r, True) for r in orphans if (r.kind, r.ident, r.region) not in known]
    rows = [(r, o) for r, o in rows if (scope is None or r.scope == scope) and (kinds is None or r.kind in kinds)]
    own_clusters = {(r.scope, r.region) for r, _ in rows if r.kind == "eks-cluster" and r.made}
    steps = []
    for r, orphan in sorted(rows, key=lambda x: teardown_key(x[0])):
        if not r.made:
            steps.append(Step(r, "keep", "torchdeck did not make it", orphan))
        elif r.kind == "s3-bucket" and keep_buckets:
            steps.append(Step(r, "keep", "--keep-buckets", orphan))
        elif r.kind in CLUSTER_KINDS and r.kind != "eks-cluster" and (r.scope, r.region) in own_clusters:
            steps.append(Step(r, "cluster", f"deleted with cluster {r.scope}", orphan))
        else:
            steps.append(Step(r, "delete", "", orphan))
    return steps


# -- one delete per kind, each idempotent ----------------------------------------------


class Teardown:
    """Runs a plan: ``aws_for(region)`` gives the session for a row's region (default: one per region
    with ``profile``), ``kube(kubeconfig, context)`` the Kubernetes client for its objects (default:
    a ``KubeClient`` on that context). Each kind's delete is in ``RESOURCE_KINDS``."""

    def __init__(
        self,
        state_dir: Path,
        aws_for: Callable[[str], AwsSession] | None = None,
        kube: Callable[[str, str], KubeClient] | None = None,
        eksctl: str | None = None,
        poll_s: float = POLL_S,
        timeout_s: float = TIMEOUT_S,
        profile: str | None = None,
    ):
        sessions: dict[str, AwsSession] = {}

        def session(region: str) -> AwsSession:  # one per region, with the profile
            if region not in sessions:
                sessions[region] = AwsSession(region or None, profile)
            return sessions[region]

        self.state_dir, self.aws_for, self.kube_factory = Path(state_dir), aws_for or session, kube
        self.eksctl, self.poll_s, self.timeout_s = eksctl, poll_s, timeout_s
        self.ledger = Ledger(state_dir)
        self.clock = Clock()
        self._kubes: dict[tuple[str, str], KubeClient] = {}

    def _kube(self, kubeconfig: str, context: str) -> KubeClient:
        """One client per context for the whole teardown (each loads the kubeconfig and connects)."""
        if (kubeconfig, context) not in self._kubes:
            if self.kube_factory:
                self._kubes[kubeconfig, context] = self.kube_factory(kubeconfig, context)
            else:
                self._kubes[kubeconfig, context] = KubeClient(kubeconfig or None, context or None)
        return self._kubes[kubeconfig, context]

    async def run(self, steps: list[Step]) -> AsyncIterator[Progress]:
        done_clusters: set[tuple[str, str]] = set()
        for step in steps:
            r = step.resource
            if step.action == "keep":
                continue
            if step.orphan:  # remember it first: an interrupted run resumes from the ledger
                self.ledger.add(
                    r.kind,
                    r.ident,
                    region=r.region,
                    account=r.account,
                    scope=r.scope,
                    tags=r.tags,
                    detail=r.detail,
                    made=True,
                    cost_per_hour=r.cost_per_hour,
                )
            if step.action == "cluster":
                continue
            if r.kind == "eks-cluster":
                if (r.scope, r.region) not in done_clusters:
                    async for p in self._cluster(r):
                        yield p
                    done_clusters.add((r.scope, r.region))
                continue
            delete = KIND_TABLE[r.kind].delete
            assert delete is not None  # only a cluster has none, and it went above
            said = await delete(self, r)
            self.ledger.gone(r.kind, r.ident, r.region)
            yield Progress("cleanup", f"{r.kind} {r.ident}: {said}", self.clock())
        deleted = sum(1 for s in steps if s.action != "keep")
        # a partial plan (storage delete, one cluster) says what it did, not that nothing is left anywhere
        yield Progress(
            "done",
            f"all {deleted} in the plan are deleted" if deleted else "nothing to delete",
            self.clock(),
            "done",
            TeardownDone(deleted),
        )

    async def _cluster(self, r: Resource) -> AsyncIterator[Progress]:
        aws = self.aws_for(r.region)
        record = ClusterRecord.open(self.state_dir, r.scope, r.region)
        async for p in delete_cluster(aws, r.scope, record, self.eksctl, self.poll_s, self.timeout_s):
            if p.kind != "done":  # on the teardown's clock, not the cluster delete's own
                yield Progress(p.phase, p.message, self.clock(), p.kind)
        # delete_cluster walked the cluster's resources by listing and by tag: what is left in the ledger is gone
        for row in self.ledger.resources(scope=r.scope):
            if row.kind in CLUSTER_KINDS and row.region == r.region:
                self.ledger.gone(row.kind, row.ident, row.region)
        yield Progress(
            "cleanup", f"cluster {r.scope} and its nodegroups, add-ons, OIDC provider and roles are gone", self.clock()
        )

    async def _retry(self, what: str, call: Callable[[], object], busy: tuple[str, ...]) -> str:
        """Call until it succeeds, or AWS says it is gone; ``busy`` codes (a dependency still
        draining) are retried until the deadline."""
        started = time.monotonic()
        while True:
            try:
                await asyncio.to_thread(call)
                return "deleted"
            except AwsError as exc:
                if exc.not_found:
                    return "already gone"
                if exc.code not in busy:
                    raise
                if time.monotonic() - started > self.timeout_s:
                    raise BackendError(
                        f"{what} is still in use after {self.timeout_s:.0f} s: {exc.message}",
                        "run cleanup again later: it resumes",
                    ) from None
            await asyncio.sleep(self.poll_s)

    async def _wait_gone(self, what: str, gone: Callable[[], bool]) -> None:
        async for _ in wait_gone(what, gone, self.poll_s, self.timeout_s):
            pass

    async def delete_k8s_object(self, r: Resource) -> str:
        d = r.detail
        try:
            kube = self._kube(d.get("kubeconfig", ""), d.get("context", ""))
            await asyncio.to_thread(kube.request, "DELETE", d["path"], None, {"propagationPolicy": "Background"})
            return "deleted"
        except ApiError as exc:
            if exc.status == 404:
                return "already gone"
            raise
        except BackendError:  # unreachable, or the context is gone: fine if the cluster went first
            if r.region and await self._cluster_gone(r):
                return "gone with its cluster"
            raise

    async def _cluster_gone(self, r: Resource) -> bool:
        try:
            return await self.aws_for(r.region).afind("eks", "describe_cluster", name=r.scope) is None
        except AwsError:
            return False

    async def delete_fsx_filesystem(self, r: Resource) -> str:
        aws = self.aws_for(r.region)
        said = await self._retry(
            f"FSx {r.ident}", lambda: aws.call("fsx", "delete_file_system", FileSystemId=r.ident), ()
        )
        await self._wait_gone(
            f"FSx {r.ident}",
            lambda: (
                not Answer(aws.find("fsx", "describe_file_systems", FileSystemIds=[r.ident])).children("FileSystems")
            ),
        )
        return said

    async def delete_efs_mount_target(self, r: Resource) -> str:
        aws = self.aws_for(r.region)
        said = await self._retry(
            f"mount target {r.ident}", lambda: aws.call("efs", "delete_mount_target", MountTargetId=r.ident), ()
        )
        await self._wait_gone(
            f"mount target {r.ident}",
            lambda: (
                not Answer(aws.find("efs", "describe_mount_targets", MountTargetId=r.ident)).children("MountTargets")
            ),
        )
        return said

    async def delete_efs_filesystem(self, r: Resource) -> str:
        aws = self.aws_for(r.region)
        try:  # mount targets the ledger does not know (made by hand, or a lost ledger) go first
            targets = await aws.apages("efs", "describe_mount_targets", "MountTargets", FileSystemId=r.ident)
        except AwsError as exc:
            if exc.not_found:
                return "already gone"
            raise
        for mt in targets:
            await self.delete_efs_mount_target(Resource("efs-mount-target", mt["MountTargetId"], r.region))
        return await self._retry(
            f"EFS {r.ident}", lambda: aws.call("efs", "delete_file_system", FileSystemId=r.ident), ("FileSystemInUse",)
        )

    async def delete_ec2_security_group(self, r: Resource) -> str:
        aws = self.aws_for(r.region)
        # the mount targets' network interfaces linger for a while after the targets are gone
        return await self._retry(
            f"security group {r.ident}",
            lambda: aws.call("ec2", "delete_security_group", GroupId=r.ident),
            ("DependencyViolation", "InvalidGroup.InUse"),
        )

    async def delete_ec2_launch_template(self, r: Resource) -> str:
        aws = self.aws_for(r.region)
        return await self._retry(
            f"launch template {r.ident}",
            lambda: aws.call("ec2", "delete_launch_template", LaunchTemplateId=r.ident),
            ("InvalidLaunchTemplateId.InUse",),
        )

    async def delete_ecr_repository(self, r: Resource) -> str:
        aws = self.aws_for(r.region)
        return await self._retry(
            f"ECR repository {r.ident}",
            lambda: aws.call("ecr", "delete_repository", repositoryName=r.ident, force=True),
            (),
        )

    async def delete_s3_object(self, r: Resource) -> str:
        aws = self.aws_for(r.region)
        bucket, _, key = r.ident.partition("/")
        return await self._retry(f"s3://{r.ident}", lambda: aws.call("s3", "delete_object", Bucket=bucket, Key=key), ())

    async def delete_s3_bucket(self, r: Resource) -> str:
        aws = self.aws_for(r.region)

        def empty_and_delete() -> None:  # every version and delete marker first: S3 deletes only empty buckets
            batch = [
                {"Key": item["Key"], "VersionId": item.get("VersionId") or "null"}
                for key in ("Versions", "DeleteMarkers")
                for item in aws.pages("s3", "list_object_versions", key, Bucket=r.ident)
            ]
            for start in range(0, len(batch), 1000):
                aws.call(
                    "s3",
                    "delete_objects",
                    Bucket=r.ident,
                    Delete={"Objects": batch[start : start + 1000], "Quiet": True},
                )
            aws.call("s3", "delete_bucket", Bucket=r.ident)

        return await self._retry(f"bucket {r.ident}", empty_and_delete, ("BucketNotEmpty",))

    async def delete_cloudformation_stack(self, r: Resource) -> str:
        aws = self.aws_for(r.region)
        return await self._retry(
            f"stack {r.ident}", lambda: aws.call("cloudformation", "delete_stack", StackName=r.ident), ()
        )

    async def delete_eks_addon(self, r: Resource) -> str:
        aws = self.aws_for(r.region)
        cluster, _, addon = r.ident.partition("/")
        return await self._retry(
            f"add-on {addon}", lambda: aws.call("eks", "delete_addon", clusterName=cluster, addonName=addon), ()
        )

    async def delete_eks_nodegroup(self, r: Resource) -> str:
        aws = self.aws_for(r.region)
        cluster, _, group = r.ident.partition("/")
        said = await self._retry(
            f"nodegroup {group}",
            lambda: aws.call("eks", "delete_nodegroup", clusterName=cluster, nodegroupName=group),
            (),
        )
        await self._wait_gone(
            f"nodegroup {group}",
            partial(aws.gone, "eks", "describe_nodegroup", clusterName=cluster, nodegroupName=group),
        )
        return said

    async def delete_oidc_provider(self, r: Resource) -> str:
        aws = self.aws_for(r.region)
        return await self._retry(
            f"OIDC provider {r.ident}",
            lambda: aws.call("iam", "delete_open_id_connect_provider", OpenIDConnectProviderArn=r.ident),
            (),
        )

    async def delete_iam_role(self, r: Resource) -> str:
        return "deleted" if await delete_role(self.aws_for(r.region), r.ident) else "already gone"


@dataclass(frozen=True)
class ResourceKind:
    """One kind of thing torchdeck makes: its delete, and which teardowns take it."""

    name: ResourceKindName
    delete: Callable[[Teardown, Resource], Awaitable[str]] | None
    """None: deleted by walking its cluster (``delete_cluster``)."""
    with_cluster: bool = False
    """Goes when the cluster torchdeck made for it goes."""
    storage: bool = False
    """``storage delete`` takes it."""


RESOURCE_KINDS: tuple[ResourceKind, ...] = (
    # teardown order: a kind is deleted only after every kind listed before it (dependents first)
    ResourceKind("k8s-object", Teardown.delete_k8s_object, storage=True),  # jobs, claims, volumes, accounts
    ResourceKind("fsx-filesystem", Teardown.delete_fsx_filesystem, storage=True),
    ResourceKind("efs-mount-target", Teardown.delete_efs_mount_target, storage=True),
    ResourceKind("efs-filesystem", Teardown.delete_efs_filesystem, storage=True),
    ResourceKind("ec2-security-group", Teardown.delete_ec2_security_group, storage=True),  # EKS's go with it
    ResourceKind("ecr-repository", Teardown.delete_ecr_repository),
    ResourceKind("s3-object", Teardown.delete_s3_object),
    ResourceKind("s3-bucket", Teardown.delete_s3_bucket, storage=True),
    ResourceKind("cloudformation-stack", Teardown.delete_cloudformation_stack, with_cluster=True),
    ResourceKind("eks-addon", Teardown.delete_eks_addon, with_cluster=True),
    ResourceKind("eks-nodegroup", Teardown.delete_eks_nodegroup, with_cluster=True),
    ResourceKind("ec2-launch-template", Teardown.delete_ec2_launch_template, with_cluster=True),
    ResourceKind("eks-cluster", None, with_cluster=True),
    ResourceKind("oidc-provider", Teardown.delete_oidc_provider, with_cluster=True),
    ResourceKind("iam-role", Teardown.delete_iam_role, with_cluster=True),
)
KIND_TABLE = {kind.name: kind for kind in RESOURCE_KINDS}
KIND_ORDER = {kind.name: i for i, kind in enumerate(RESOURCE_KINDS)}
CLUSTER_KINDS = tuple(kind.name for kind in RESOURCE_KINDS if kind.with_cluster)
STORAGE_KINDS = tuple(kind.name for kind in RESOURCE_KINDS if kind.storage)


# -- orphans: found by tag when the ledger does not know them ---------------------------


def _tag_value(tags: object) -> str | None:
    """The cluster's tag in either of AWS's shapes: a map (EKS, EFS's describe) or Key/Value pairs."""
    if isinstance(tags, dict):
        found = tags.get(CLUSTER_TAG)
    else:
        pairs = map(Answer, tags if isinstance(tags, list) else [])
        found = next((t.value("Value") for t in pairs if t.value("Key") == CLUSTER_TAG), None)
    return found if isinstance(found, str) else None


async def find_orphans(aws: AwsSession, account: str = "") -> list[Resource]:
    """Everything in the session's region (and IAM, S3 buckets of that region) tagged
    ``torchdeck:cluster``: clusters, file systems, security groups, repositories, buckets, stacks,
    OIDC providers and roles."""
    region = aws.region or ""
    found: list[Resource] = []

    def add(kind: ResourceKindName, ident: str, scope: str, **detail: object) -> None:
        found.append(
            Resource(kind, ident, region, account, scope, {CLUSTER_TAG: scope}, detail, True, created_at=time.time())
        )

    for name in await aws.apages("eks", "list_clusters", "clusters"):
        cluster = (await aws.acall("eks", "describe_cluster", name=name))["cluster"]
        if _tag_value(cluster.get("tags")) == name:
            add("eks-cluster", name, name)
    for fs in await aws.apages("efs", "describe_file_systems", "FileSystems"):
        if scope := _tag_value(fs.get("Tags")):
            add("efs-filesystem", fs["FileSystemId"], scope)
    for fs in await aws.apages("fsx", "describe_file_systems", "FileSystems"):
        if scope := _tag_value(fs.get("Tags")):
            add("fsx-filesystem", fs["FileSystemId"], scope)
    for sg in await aws.apages(
        "ec2", "describe_security_groups", "SecurityGroups", Filters=[{"Name": "tag-key", "Values": [CLUSTER_TAG]}]
    ):
        if scope := _tag_value(sg.get("Tags")):
            add("ec2-security-group", sg["GroupId"], scope)
    for template in await aws.apages(
        "ec2", "describe_launch_templates", "LaunchTemplates", Filters=[{"Name": "tag-key", "Values": [CLUSTER_TAG]}]
    ):
        if scope := _tag_value(template.get("Tags")):
            add("ec2-launch-template", template["LaunchTemplateId"], scope)
    for repo in await aws.apages("ecr", "describe_repositories", "repositories"):
        tags = (await aws.acall("ecr", "list_tags_for_resource", resourceArn=repo["repositoryArn"])).get("tags", [])
        if scope := _tag_value(tags):
            add("ecr-repository", repo["repositoryName"], scope)
    for stack in await aws.apages("cloudformation", "describe_stacks", "Stacks"):
        if (scope := _tag_value(stack.get("Tags"))) and stack.get("StackStatus") != "DELETE_COMPLETE":
            add("cloudformation-stack", stack["StackName"], scope)
    for bucket in (await aws.acall("s3", "list_buckets")).get("Buckets", []):
        name = bucket["Name"]
        tags = await aws.afind("s3", "get_bucket_tagging", Bucket=name)
        if tags and (scope := _tag_value(tags.get("TagSet"))):
            where = (await aws.acall("s3", "get_bucket_location", Bucket=name)).get("LocationConstraint") or "us-east-1"
            if where == (region or "us-east-1"):
                add("s3-bucket", name, scope)
    for provider in (await aws.acall("iam", "list_open_id_connect_providers")).get("OpenIDConnectProviderList", []):
        tags = (
            await aws.acall("iam", "list_open_id_connect_provider_tags", OpenIDConnectProviderArn=provider["Arn"])
        ).get("Tags", [])
        if scope := _tag_value(tags):
            add("oidc-provider", provider["Arn"], scope)
    for role in await aws.apages("iam", "list_roles", "Roles"):
        tags = (await aws.acall("iam", "list_role_tags", RoleName=role["RoleName"])).get("Tags", [])
        if scope := _tag_value(tags):
            add("iam-role", role["RoleName"], scope)
    return in_teardown_order(found)
