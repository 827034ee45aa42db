"""An EKS cluster's state (the cluster, its nodegroups and add-ons, and its
nodes' readiness from Kubernetes) and its deletion, in dependency order and
idempotent: add-ons, nodegroups, the cluster, then the OIDC provider and
the IAM roles, found both in the local record and by the
``torchdeck:cluster`` tag, so nothing torchdeck made is left billing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from ..errors import BackendError
from ..kubernetes.client import KubeClient
from ..ledger import ResourceKindName
from .access import ClusterRecord, remove_context
from .aws_objects import Answer
from .create import POLL_S, TIMEOUT_S, run_eksctl
from .iam import delete_role, tagged_oidc_providers, tagged_roles
from .plan import CLUSTER_TAG, made_by_torchdeck
from .progress import Clock, Progress, wait_gone
from .session import AwsError, AwsSession


@dataclass
class NodegroupState:
    name: str
    status: str
    instance_types: list[str]
    min_size: int
    desired: int
    max_size: int
    capacity: str = "ON_DEMAND"
    issues: list[str] = field(default_factory=list)


@dataclass
class NodeState:
    name: str
    ready: bool
    nodegroup: str
    instance_type: str
    gpus: int = 0
    reason: str = ""


@dataclass
class ClusterState:
    """What ``torchdeck cluster status`` shows."""

    name: str
    region: str
    status: str
    """ACTIVE, CREATING, DELETING, FAILED, UPDATING, or MISSING (no such cluster)."""
    version: str = ""
    endpoint: str = ""
    tagged: bool = False
    """Made by torchdeck (carries the torchdeck:cluster tag)."""
    nodegroups: list[NodegroupState] = field(default_factory=list)
    addons: dict[str, str] = field(default_factory=dict)
    nodes: list[NodeState] | None = None
    nodes_error: str = ""
    """Why node readiness is not known (no context yet, cluster unreachable)."""
    record: ClusterRecord | None = None


def cluster_state(
    aws: AwsSession, name: str, record: ClusterRecord | None = None, kube: KubeClient | None = None
) -> ClusterState:
    """The cluster as AWS sees it, and its nodes as Kubernetes does (where ``kube`` is given)."""
    found = aws.find("eks", "describe_cluster", name=name)
    if found is None:
        return ClusterState(name, aws.region or "", "MISSING", record=record)
    info = found["cluster"]
    state = ClusterState(
        name,
        aws.region or "",
        info.get("status", ""),
        info.get("version", ""),
        info.get("endpoint", ""),
        made_by_torchdeck(info, name),
        record=record,
    )
    for group in sorted(aws.pages("eks", "list_nodegroups", "nodegroups", clusterName=name)):
        ng = aws.find("eks", "describe_nodegroup", clusterName=name, nodegroupName=group)
        if ng is None:
            continue
        read = Answer(ng).child("nodegroup")
        state.nodegroups.append(
            NodegroupState(
                group,
                read.text("status"),
                read.texts("instanceTypes"),
                read.whole("scalingConfig", "minSize"),
                read.whole("scalingConfig", "desiredSize"),
                read.whole("scalingConfig", "maxSize"),
                read.text("capacityType", default="ON_DEMAND"),
                read.issues("health"),
            )
        )
    try:
        for addon in aws.pages("eks", "list_addons", "addons", clusterName=name):
            described = aws.find("eks", "describe_addon", clusterName=name, addonName=addon)
            state.addons[addon] = described["addon"].get("status", "") if described else "MISSING"
    except AwsError as exc:
        state.addons["?"] = exc.message
    if kube is None:
        state.nodes_error = "no kubeconfig context for it yet: torchdeck cluster connect"
    else:
        try:
            state.nodes = node_states(kube)
        except BackendError as exc:
            state.nodes_error = exc.message
    return state


def node_states(kube: KubeClient) -> list[NodeState]:
    """Every node: ready or not (and why), its nodegroup, type and GPUs."""
    from ..kubernetes.client import quantity

    nodes = []
    for node in kube.read_nodes():
        labels = node.labels
        ready = next((c for c in node.conditions if c.type == "Ready"), None)
        up = ready is not None and ready.status == "True"
        nodes.append(
            NodeState(
                node.name,
                up,
                labels.get("eks.amazonaws.com/nodegroup") or labels.get("torchdeck.dev/nodegroup", ""),
                labels.get("node.kubernetes.io/instance-type", ""),
                int(quantity(node.allocatable.get("nvidia.com/gpu") or 0)),
                "" if up else ((ready.message or ready.reason) if ready else "") or "not ready",
            )
        )
    return sorted(nodes, key=lambda n: (n.nodegroup, n.name))


# -- delete ---------------------------------------------------------------------------


async def _wait_gone(
    what: str, gone: Callable[[], bool], clock: Clock, phase: str, poll_s: float, timeout_s: float
) -> AsyncIterator[Progress]:
    """Wait until ``gone()``; says once that it waits."""
    said = False
    async for _ in wait_gone(what, gone, poll_s, timeout_s):
        if not said:
            yield Progress(phase, f"waiting for {what} to go", clock(), "wait")
            said = True


async def tagged_launch_templates(aws: AwsSession, name: str) -> list[str]:
    """Launch templates carrying torchdeck:cluster=NAME (found without the ledger)."""
    found = await aws.apages(
        "ec2",
        "describe_launch_templates",
        "LaunchTemplates",
        Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": [name]}],
    )
    return [t["LaunchTemplateId"] for t in found]


async def _delete_each(
    record: ClusterRecord,
    kind: ResourceKindName,
    idents: set[str],
    delete: Callable[[str], Awaitable[object]],
    done: Callable[[str], Progress],
) -> AsyncIterator[Progress]:
    """Delete each (one already gone is fine), say so, and take it out of the ledger."""
    for ident in sorted(idents):
        try:
            await delete(ident)
            yield done(ident)
        except AwsError as exc:
            if not exc.not_found:
                raise
        record.forget(kind, ident)


class ClusterDeletion:
    """One delete of a cluster: its steps in dependency order, each an async generator of ``Progress``."""

    def __init__(self, aws: AwsSession, name: str, record: ClusterRecord, poll_s: float, timeout_s: float) -> None:
        self.aws, self.name, self.record = aws, name, record
        self.poll_s, self.timeout_s = poll_s, timeout_s
        self.clock = Clock()

    async def eksctl_stacks(self, stacks: list[str], eksctl: str | None) -> AsyncIterator[Progress]:
        """eksctl deletes its own stacks (and what they hold) where it made the cluster."""
        if eksctl is None:
            raise BackendError(
                f"cluster {self.name} was made by eksctl ({len(stacks)} stacks) and eksctl is not on the PATH",
                "install eksctl and run delete again (torchdeck removes its stacks through it)",
            )
        argv = [eksctl, "delete", "cluster", "--name", self.name, "--region", self.aws.region or "", "--wait"]
        yield Progress("eksctl", "$ " + " ".join(argv[1:]), self.clock())
        async for p in run_eksctl(self.aws, argv, f"eksctl-{self.name}-", self.clock, self.poll_s):
            yield p
        for stack in stacks:
            self.record.forget("cloudformation-stack", stack)

    async def addons(self) -> AsyncIterator[Progress]:
        aws, name, clock = self.aws, self.name, self.clock
        for addon in await aws.apages("eks", "list_addons", "addons", clusterName=name):
            await aws.acall("eks", "delete_addon", clusterName=name, addonName=addon)
            yield Progress("add-ons", f"deleting add-on {addon}", clock())
            async for p in _wait_gone(
                f"add-on {addon}",
                partial(aws.gone, "eks", "describe_addon", clusterName=name, addonName=addon),
                clock,
                "add-ons",
                self.poll_s,
                self.timeout_s,
            ):
                yield p
            self.record.forget("eks-addon", f"{name}/{addon}")

    async def nodegroups(self) -> AsyncIterator[Progress]:
        """Every nodegroup's delete started, then each waited for."""
        aws, name, clock = self.aws, self.name, self.clock
        groups = await aws.apages("eks", "list_nodegroups", "nodegroups", clusterName=name)
        for group in groups:
            status = await aws.acall("eks", "describe_nodegroup", clusterName=name, nodegroupName=group)
            if status["nodegroup"].get("status") != "DELETING":
                await aws.acall("eks", "delete_nodegroup", clusterName=name, nodegroupName=group)
            yield Progress("nodegroups", f"deleting nodegroup {group}", clock())
        for group in groups:
            async for p in _wait_gone(
                f"nodegroup {group}",
                partial(aws.gone, "eks", "describe_nodegroup", clusterName=name, nodegroupName=group),
                clock,
                "nodegroups",
                self.poll_s,
                self.timeout_s,
            ):
                yield p
            self.record.forget("eks-nodegroup", f"{name}/{group}")
            yield Progress("nodegroups", f"nodegroup {group} is gone", clock())

    async def cluster(self, status: str) -> AsyncIterator[Progress]:
        """The EKS cluster itself (``status``: what describe_cluster said of it), waited for."""
        aws, name, clock = self.aws, self.name, self.clock
        if status != "DELETING":
            await aws.acall("eks", "delete_cluster", name=name)
        yield Progress("cluster", f"deleting cluster {name}; this takes a few minutes", clock())
        async for p in _wait_gone(
            f"cluster {name}",
            partial(aws.gone, "eks", "describe_cluster", name=name),
            clock,
            "cluster",
            self.poll_s,
            self.timeout_s,
        ):
            yield p
        yield Progress("cluster", f"cluster {name} is gone", clock())

    async def around_the_cluster(self) -> AsyncIterator[Progress]:
        """What lived beside the cluster, once the nodegroups that used it are gone: launch templates,
        the OIDC provider and the IAM roles (the ledger's and those carrying the cluster's tag)."""
        aws, name, record, clock = self.aws, self.name, self.record, self.clock
        record.forget("eks-cluster", name)
        for kind in ("eks-nodegroup", "eks-addon"):
            for ident in record.of_type(kind):
                record.forget(kind, ident)
        async for p in _delete_each(
            record,
            "ec2-launch-template",
            set(record.of_type("ec2-launch-template")) | set(await tagged_launch_templates(aws, name)),
            lambda t: aws.acall("ec2", "delete_launch_template", LaunchTemplateId=t),
            lambda t: Progress("nodegroups", f"deleted launch template {t}", clock()),
        ):
            yield p
        async for p in _delete_each(
            record,
            "oidc-provider",
            set(record.of_type("oidc-provider")) | set(await tagged_oidc_providers(aws, name)),
            lambda arn: aws.acall("iam", "delete_open_id_connect_provider", OpenIDConnectProviderArn=arn),
            lambda arn: Progress("oidc", f"deleted the OIDC provider {arn.rsplit('/', 1)[-1]}", clock()),
        ):
            yield p
        roles = set(record.of_type("iam-role")) | set(await tagged_roles(aws, name))
        for role in sorted(roles):
            if await delete_role(aws, role):
                yield Progress("roles", f"deleted IAM role {role}", clock())
            record.forget("iam-role", role)


async def delete_cluster(
    aws: AwsSession,
    name: str,
    record: ClusterRecord,
    eksctl: str | None = None,
    poll_s: float = POLL_S,
    timeout_s: float = TIMEOUT_S,
) -> AsyncIterator[Progress]:
    """Everything torchdeck made for the cluster, in dependency order. A cluster torchdeck did not make is
    refused. eksctl deletes its own stacks first where it made the cluster."""
    deletion = ClusterDeletion(aws, name, record, poll_s, timeout_s)
    clock = deletion.clock
    found = await aws.afind("eks", "describe_cluster", name=name)
    if found is not None and not made_by_torchdeck(found["cluster"], name):
        raise BackendError(
            f"cluster {name} was not made by torchdeck (no {CLUSTER_TAG} tag): not deleting it",
            "delete it the way it was made (eksctl delete cluster, or the EKS console)",
        )
    record.state = "deleting"
    record.save()
    stacks = [
        s["StackName"]
        for s in await aws.apages("cloudformation", "describe_stacks", "Stacks")
        if s["StackName"].startswith(f"eksctl-{name}-")
    ]
    if stacks:
        async for p in deletion.eksctl_stacks(stacks, eksctl):
            yield p
        found = await aws.afind("eks", "describe_cluster", name=name)
    if found is not None:
        for step in (deletion.addons(), deletion.nodegroups(), deletion.cluster(found["cluster"].get("status", ""))):
            async for p in step:
                yield p
    async for p in deletion.around_the_cluster():
        yield p
    if record.kubeconfig and remove_context(Path(record.kubeconfig), name):
        yield Progress("kubeconfig", f"removed context {record.context} from {record.kubeconfig}", clock())
    record.state, record.kubeconfig, record.context = "deleted", "", ""
    record.save()
    yield Progress("done", f"cluster {name} and everything torchdeck made for it are deleted", clock(), "done")
