"""Creating an EKS cluster from a plan, on one of two paths that report
through the same ``Progress`` events (phase, elapsed time, latest events):

- **eksctl** on the PATH runs on the saved ClusterConfig; its output and the
  CloudFormation events of its ``eksctl-NAME-*`` stacks stream as they come.
- **native**, without eksctl, for an existing VPC: IAM roles for the cluster
  and its nodes with the AWS managed policies, the cluster (waited to
  ACTIVE), the OIDC provider, the IRSA roles (S3, EFS CSI driver), managed
  nodegroups, the add-ons, then the kubeconfig context, the Kubernetes
  service account and the NVIDIA device plugin on GPU clusters.

Both are idempotent: every step first looks for what it would make, reuses
it, and records it (``ClusterRecord``) as soon as it exists, so a re-run
after a failure or Ctrl-C continues where the last one stopped. Everything
created carries the tag ``torchdeck:cluster=NAME``."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Mapping
from functools import partial
from pathlib import Path

from ..errors import BackendError
from ..kubernetes.client import ensure_object
from .access import ClusterRecord, KubeFactory, cluster_kube, cluster_tags, connect
from .aws_objects import Answer
from .iam import (
    CLUSTER_POLICIES,
    EFS_CSI_POLICY,
    EFS_CSI_SERVICE_ACCOUNT,
    NODE_POLICIES,
    OIDC_AUDIENCE,
    OIDC_THUMBPRINT,
    ensure_role,
    ensure_service_account,
    iam_tags,
    role_name,
    trust_service,
    trust_service_account,
)
from .plan import (
    GPU_TAINT,
    ClusterPlan,
    NodegroupPlan,
    control_plane_price,
    made_by_torchdeck,
    s3_policy,
    shipped_catalogue,
)
from .progress import Clock, ClusterReady, Progress, wait_for_status
from .session import AwsError, AwsSession, redact

ADDONS = ("aws-efs-csi-driver", "metrics-server")
# The root CA of EKS's OIDC endpoints; IAM no longer checks it for them, but older APIs require a value.
POLL_S = 15.0
TIMEOUT_S = 45 * 60
NAT_GATEWAY_PER_HOUR = 0.045


def endpoint_config(plan: ClusterPlan) -> dict[str, object]:
    """The API server's endpoints: public (narrowed to ``public_access_cidrs`` where given) and
    private, or private only."""
    config: dict[str, object] = {
        "subnetIds": [plan.subnets[z] for z in sorted(plan.subnets)],
        "endpointPublicAccess": not plan.private_endpoint,
        "endpointPrivateAccess": True,
    }
    if plan.public_access_cidrs:
        config["publicAccessCidrs"] = list(plan.public_access_cidrs)
    return config


def metadata_options(plan: ClusterPlan) -> dict[str, object]:
    """Instance metadata as eksctl's disableIMDSv1/disablePodIMDS make it: IMDSv2 only, and a hop
    limit of 1 unless pods may use it (a pod's request crosses one more hop than the node's)."""
    return {"HttpTokens": "required", "HttpPutResponseHopLimit": 2 if plan.pod_imds else 1, "HttpEndpoint": "enabled"}


async def ensure_launch_template(aws: AwsSession, record: ClusterRecord, plan: ClusterPlan, ng: NodegroupPlan) -> str:
    """The nodegroup's launch template (metadata options, root volume); its id. A managed nodegroup
    takes its disk size from here once it has a launch template."""
    name = f"torchdeck-{plan.name}-{ng.name}"
    found = await aws.afind("ec2", "describe_launch_templates", LaunchTemplateNames=[name])
    templates = Answer(found).children("LaunchTemplates")
    if templates:
        template_id = templates[0].text("LaunchTemplateId")
    else:
        made = await aws.acall(
            "ec2",
            "create_launch_template",
            LaunchTemplateName=name,
            LaunchTemplateData={
                "MetadataOptions": metadata_options(plan),
                "BlockDeviceMappings": [
                    {
                        "DeviceName": "/dev/xvda",
                        "Ebs": {"VolumeSize": ng.volume_gib, "VolumeType": "gp3", "Encrypted": True},
                    }
                ],
            },
            TagSpecifications=[
                {
                    "ResourceType": "launch-template",
                    "Tags": [{"Key": k, "Value": v} for k, v in cluster_tags(plan.name).items()],
                }
            ],
        )
        template_id = made["LaunchTemplate"]["LaunchTemplateId"]
    record.note("ec2-launch-template", template_id, not templates, made=True, name=name)
    return template_id


class NativeCreate:
    """One run of the native path: its steps in order, each an async generator of ``Progress``
    that leaves what later steps need (the roles, the OIDC provider) on the instance."""

    def __init__(
        self, aws: AwsSession, plan: ClusterPlan, record: ClusterRecord, poll_s: float, timeout_s: float
    ) -> None:
        self.aws, self.plan, self.record = aws, plan, record
        self.name = plan.name
        self.poll_s, self.timeout_s = poll_s, timeout_s
        self.clock = Clock()
        self.hourly: dict[str, float] = {}
        self.cluster_role = self.node_role = self.efs_role = self.provider = self.issuer = ""
        self.s3_role: str | None = None

    def refuse_what_it_cannot_make(self) -> None:
        """The native path makes no VPC and no EFA launch template: said before anything is made."""
        if not self.plan.vpc_id:
            raise BackendError(
                "without eksctl, torchdeck creates clusters in an existing VPC only",
                "give --vpc-id and --subnet ZONE=ID in cluster init, or install eksctl to make a new VPC",
            )
        efa = [ng.name for ng in self.plan.nodegroups if ng.efa]
        if efa:
            raise BackendError(
                f"EFA nodegroups ({', '.join(efa)}) need a launch template with EFA interfaces",
                "install eksctl (it writes one), or drop efa for the native path",
            )

    async def open_record(self) -> None:
        self.record.method, self.record.state = "native", "creating"
        # no credentials: say so before anything else
        self.record.account = (await self.aws.acall("sts", "get_caller_identity")).get("Account", "")
        self.record.save()
        self.hourly = nodegroup_costs(self.plan)

    async def roles(self) -> AsyncIterator[Progress]:
        """The control plane's and the nodes' IAM roles, with AWS's managed policies."""
        aws, record, name, clock = self.aws, self.record, self.name, self.clock
        yield Progress("roles", "IAM roles for the control plane and the nodes", clock())
        self.cluster_role, made = await ensure_role(
            aws, record, role_name(name, "cluster"), trust_service("eks.amazonaws.com"), CLUSTER_POLICIES
        )
        yield Progress("roles", f"{'created' if made else 'reusing'} {role_name(name, 'cluster')}", clock())
        self.node_role, made = await ensure_role(
            aws, record, role_name(name, "node"), trust_service("ec2.amazonaws.com"), NODE_POLICIES
        )
        yield Progress("roles", f"{'created' if made else 'reusing'} {role_name(name, 'node')}", clock())

    async def cluster(self) -> AsyncIterator[Progress]:
        """The EKS cluster (made, or torchdeck's own reused), waited to ACTIVE; its OIDC issuer."""
        aws, plan, name, clock = self.aws, self.plan, self.name, self.clock
        found = await aws.afind("eks", "describe_cluster", name=name)
        if found is None:
            yield Progress(
                "cluster", f"creating EKS cluster {name} (Kubernetes {plan.version}); this takes 10-15 minutes", clock()
            )
            await aws.acall(
                "eks",
                "create_cluster",
                name=name,
                version=plan.version,
                roleArn=self.cluster_role,
                resourcesVpcConfig=endpoint_config(plan),
                accessConfig={
                    "authenticationMode": "API_AND_CONFIG_MAP",
                    "bootstrapClusterCreatorAdminPermissions": True,
                },
                tags=cluster_tags(name),
            )
        else:
            _refuse_foreign(found["cluster"], name)
            yield Progress("cluster", f"reusing cluster {name} ({found['cluster'].get('status')})", clock())
        async for p in wait_for_status(
            f"cluster {name}",
            lambda: aws.acall("eks", "describe_cluster", name=name),
            "cluster",
            clock,
            "cluster",
            self.poll_s,
            self.timeout_s,
        ):
            yield p
        cluster = (await aws.acall("eks", "describe_cluster", name=name))["cluster"]
        self.record.note("eks-cluster", name, found is None, hourly=control_plane_price(), arn=cluster.get("arn"))
        yield Progress("cluster", f"cluster {name} is ACTIVE at {cluster.get('endpoint')}", clock())
        self.issuer = Answer(cluster).text("identity", "oidc", "issuer")
        if not self.issuer:
            raise BackendError(
                f"cluster {name} has no OIDC issuer", "EKS gives every cluster one; try again in a minute"
            )

    async def oidc(self) -> AsyncIterator[Progress]:
        """The cluster's OIDC provider in IAM, which the service accounts' roles trust."""
        aws, issuer = self.aws, self.issuer
        host = issuer.removeprefix("https://")
        providers = (await aws.acall("iam", "list_open_id_connect_providers")).get("OpenIDConnectProviderList", [])
        provider = next((p["Arn"] for p in providers if p["Arn"].endswith("oidc-provider/" + host)), None)
        made = provider is None
        if provider is None:
            provider = (
                await aws.acall(
                    "iam",
                    "create_open_id_connect_provider",
                    Url=issuer,
                    ClientIDList=[OIDC_AUDIENCE],
                    ThumbprintList=[OIDC_THUMBPRINT],
                    Tags=iam_tags(self.name),
                )
            )["OpenIDConnectProviderArn"]
        self.provider = provider
        self.record.note("oidc-provider", provider, made)
        yield Progress("oidc", f"{'created' if made else 'reusing'} the OIDC provider for {host}", self.clock())

    async def service_roles(self) -> AsyncIterator[Progress]:
        """The IRSA roles: S3 for the jobs' service account (where the plan has a bucket), the EFS CSI driver's."""
        aws, record, plan, name = self.aws, self.record, self.plan, self.name
        if plan.s3_bucket:
            self.s3_role, made = await ensure_role(
                aws,
                record,
                role_name(name, "s3"),
                trust_service_account(self.provider, self.issuer, plan.namespace, plan.service_account),
                inline=s3_policy(plan.s3_bucket, plan.s3_prefix),
            )
            yield Progress(
                "oidc",
                f"{'created' if made else 'reusing'} {role_name(name, 's3')}: "
                f"{plan.namespace}/{plan.service_account} may use s3://{plan.s3_bucket}/{plan.s3_prefix}",
                self.clock(),
            )
        self.efs_role, _ = await ensure_role(
            aws,
            record,
            role_name(name, "efs-csi"),
            trust_service_account(self.provider, self.issuer, *EFS_CSI_SERVICE_ACCOUNT),
            (EFS_CSI_POLICY,),
        )

    async def nodegroups(self) -> AsyncIterator[Progress]:
        """The managed nodegroups (each with its launch template), then each waited to ACTIVE."""
        aws, plan, name, clock = self.aws, self.plan, self.name, self.clock
        for ng in plan.nodegroups:
            found = await aws.afind("eks", "describe_nodegroup", clusterName=name, nodegroupName=ng.name)
            if found is None:
                template = await ensure_launch_template(aws, self.record, plan, ng)
                await aws.acall("eks", "create_nodegroup", **nodegroup_request(plan, ng, self.node_role, template))
                yield Progress(
                    "nodegroups", f"creating nodegroup {ng.name}: {ng.desired} x {ng.instance_type}", clock()
                )
            else:
                yield Progress(
                    "nodegroups", f"reusing nodegroup {ng.name} ({found['nodegroup'].get('status')})", clock()
                )
            self.record.note("eks-nodegroup", f"{name}/{ng.name}", found is None, hourly=self.hourly.get(ng.name, 0.0))
        for ng in plan.nodegroups:
            async for p in wait_for_status(
                f"nodegroup {ng.name}",
                partial(aws.acall, "eks", "describe_nodegroup", clusterName=name, nodegroupName=ng.name),
                "nodegroup",
                clock,
                "nodegroups",
                self.poll_s,
                self.timeout_s,
            ):
                yield p
            yield Progress("nodegroups", f"nodegroup {ng.name} is ACTIVE", clock())

    async def addons(self) -> AsyncIterator[Progress]:
        """EKS's add-ons (the EFS CSI driver with its role, metrics-server), each waited to ACTIVE."""
        aws, name, clock = self.aws, self.name, self.clock
        for addon in ADDONS:
            found = await aws.afind("eks", "describe_addon", clusterName=name, addonName=addon)
            if found is None:
                role = {"serviceAccountRoleArn": self.efs_role} if addon == "aws-efs-csi-driver" else {}
                await aws.acall(
                    "eks",
                    "create_addon",
                    clusterName=name,
                    addonName=addon,
                    resolveConflicts="OVERWRITE",
                    tags=cluster_tags(name),
                    **role,
                )
            self.record.note("eks-addon", f"{name}/{addon}", found is None)
            async for p in wait_for_status(
                f"add-on {addon}",
                partial(aws.acall, "eks", "describe_addon", clusterName=name, addonName=addon),
                "addon",
                clock,
                "add-ons",
                self.poll_s,
                self.timeout_s,
                failed=("CREATE_FAILED",),
            ):
                yield p
            yield Progress("add-ons", f"{addon} is ACTIVE", clock())

    async def kubernetes(self, kube: KubeFactory | None, kubeconfig: Path | None) -> AsyncIterator[Progress]:
        """The kubeconfig context, then on the cluster: the jobs' service account and, on GPU clusters,
        NVIDIA's device plugin."""
        plan, clock = self.plan, self.clock
        path, context = await _connect(self.aws, self.name, self.record, kubeconfig)
        yield Progress("kubeconfig", f"context {context} in {path} (exec authentication, mode 0600)", clock())
        cluster_backend = await asyncio.to_thread(cluster_kube, self.record, self.aws, kube)
        if self.s3_role:
            await asyncio.to_thread(
                ensure_service_account,
                cluster_backend.client,
                plan.namespace,
                plan.service_account,
                self.s3_role,
                self.name,
            )
            yield Progress(
                "kubernetes", f"service account {plan.namespace}/{plan.service_account} -> {self.s3_role}", clock()
            )
        if any(ng.gpu for ng in plan.nodegroups):
            await asyncio.to_thread(ensure_object, cluster_backend.client, device_plugin(self.name))
            yield Progress("kubernetes", "NVIDIA device plugin on the GPU nodes", clock())
        yield _created(self.record, context, clock)


def nodegroup_request(plan: ClusterPlan, ng: NodegroupPlan, node_role: str, template: str) -> dict[str, object]:
    """create_nodegroup's parameters for one nodegroup of the plan."""
    params: dict[str, object] = dict(
        clusterName=plan.name,
        nodegroupName=ng.name,
        nodeRole=node_role,
        subnets=[plan.subnets[z] for z in sorted(plan.subnets)],
        instanceTypes=[ng.instance_type],
        launchTemplate={"id": template, "version": "$Default"},
        scalingConfig={"minSize": ng.min_size, "desiredSize": ng.desired, "maxSize": ng.max_size},
        amiType="AL2023_x86_64_NVIDIA" if ng.gpu else "AL2023_x86_64_STANDARD",
        capacityType="SPOT" if ng.spot else "ON_DEMAND",
        labels={
            "torchdeck.dev/nodegroup": ng.name,
            **({"torchdeck.dev/gpu": "true"} if ng.gpu else {}),
            **ng.labels,
        },
        tags=cluster_tags(plan.name),
    )
    if ng.gpu:
        params["taints"] = [{"key": GPU_TAINT["key"], "value": GPU_TAINT["value"], "effect": "NO_SCHEDULE"}]
    return params


async def create_native(
    aws: AwsSession,
    plan: ClusterPlan,
    record: ClusterRecord,
    kube: KubeFactory | None = None,
    kubeconfig: Path | None = None,
    poll_s: float = POLL_S,
    timeout_s: float = TIMEOUT_S,
) -> AsyncIterator[Progress]:
    """torchdeck's own path (no eksctl). ``kube(kubeconfig, context)`` gives the Kubernetes backend for the
    last steps (default: the kubernetes backend on the context just written)."""
    create = NativeCreate(aws, plan, record, poll_s, timeout_s)
    create.refuse_what_it_cannot_make()
    await create.open_record()
    steps = (create.roles(), create.cluster(), create.oidc(), create.service_roles(), create.nodegroups(),
             create.addons(), create.kubernetes(kube, kubeconfig))  # fmt: skip
    for step in steps:
        async for p in step:
            yield p


def nodegroup_costs(plan: ClusterPlan) -> dict[str, float]:
    """Each nodegroup's on-demand price per hour at its desired size (0 where the type has no price)."""
    catalogue = shipped_catalogue()
    return {
        ng.name: ng.desired * (catalogue[ng.instance_type].price or 0.0 if ng.instance_type in catalogue else 0.0)
        for ng in plan.nodegroups
    }


def device_plugin(cluster: str) -> dict[str, object]:
    """NVIDIA's device plugin DaemonSet (what eksctl installs), on GPU nodes only, tolerating their taint."""
    from importlib import resources

    import yaml

    text = (resources.files("torchdeck") / "manifests" / "eks" / "nvidia-device-plugin.yaml").read_text()
    obj = yaml.safe_load(text)
    obj["metadata"].setdefault("labels", {})["torchdeck.dev/cluster"] = cluster
    return obj


# -- the eksctl path ----------------------------------------------------------------------

_PHASES = (
    ("nodegroup", "nodegroups"),
    ("addon", "add-ons"),
    ("iamserviceaccount", "oidc"),
    ("oidc", "oidc"),
    ("kubeconfig", "kubeconfig"),
    ("cluster", "cluster"),
    ("vpc", "cluster"),
)


def phase_of(line: str, current: str) -> str:
    """eksctl's phase from its output line (it names what it works on)."""
    lowered = line.lower()
    return next((phase for word, phase in _PHASES if word in lowered), current)


def eksctl_path() -> str | None:
    return shutil.which("eksctl")


async def _stack_events(aws: AwsSession, prefix: str, seen: set[str]) -> list[Mapping[str, object]]:
    """New CloudFormation events of the stacks whose names start with ``prefix``, oldest first."""
    try:
        stacks = [
            s["StackName"]
            for s in await aws.apages("cloudformation", "describe_stacks", "Stacks")
            if s["StackName"].startswith(prefix)
        ]
    except AwsError:
        return []
    fresh = []
    for stack in stacks:
        try:
            events = await aws.apages("cloudformation", "describe_stack_events", "StackEvents", StackName=stack)
        except AwsError:
            continue
        for event in events:
            if event["EventId"] not in seen:
                seen.add(event["EventId"])
                fresh.append(event)
    return sorted(fresh, key=lambda e: str(e.get("Timestamp", "")))


def _event_line(event: Mapping[str, object]) -> str:
    reason = event.get("ResourceStatusReason") or ""
    return f"{event.get('StackName')}: {event.get('LogicalResourceId')} {event.get('ResourceStatus')}" + (
        f" ({reason})" if reason else ""
    )


async def run_eksctl(
    aws: AwsSession, argv: list[str], stack_prefix: str, clock: Clock, poll_s: float
) -> AsyncIterator[Progress]:
    """One eksctl command: its output lines and the stacks' events, interleaved as they come."""
    queue: asyncio.Queue = asyncio.Queue()
    seen: set[str] = set()
    await _stack_events(aws, stack_prefix, seen)  # what earlier runs did is not news
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=os.environ.copy()
        )
    except OSError as exc:
        raise BackendError(f"cannot run {argv[0]}: {exc}", "check that eksctl is installed and executable") from None

    async def read() -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            await queue.put(("output", raw.decode(errors="replace").rstrip()))
        await queue.put(("eof", ""))

    async def poll() -> None:
        while True:
            for event in await _stack_events(aws, stack_prefix, seen):
                await queue.put(("event", _event_line(event)))
            await asyncio.sleep(poll_s)

    reader, poller = asyncio.create_task(read()), asyncio.create_task(poll())
    phase, tail = "eksctl", list[str]()
    try:
        while True:
            kind, line = await queue.get()
            if kind == "eof":
                break
            line = redact(line)
            if kind == "output":
                phase = phase_of(line, phase)
                tail = (tail + [line])[-5:]
            if line:
                yield Progress(phase, line, clock(), kind)
        code = await proc.wait()
        for event in await _stack_events(aws, stack_prefix, seen):
            yield Progress(phase, _event_line(event), clock(), "event")
    finally:
        poller.cancel()
        reader.cancel()
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()
    if code != 0:
        raise BackendError(
            f"eksctl {' '.join(argv[1:3])} failed (exit {code}): {tail[-1] if tail else 'no output'}",
            "read its output above; run create again to continue, or delete to clean up",
        )


async def create_with_eksctl(
    aws: AwsSession,
    plan: ClusterPlan,
    plan_file: Path,
    record: ClusterRecord,
    eksctl: str = "eksctl",
    kubeconfig: Path | None = None,
    poll_s: float = POLL_S,
) -> AsyncIterator[Progress]:
    """eksctl on the saved config; where the cluster exists already, only what is missing (nodegroups,
    service accounts) is added. Then torchdeck's own kubeconfig context."""
    clock = Clock()
    record.method, record.state, record.plan_file = "eksctl", "creating", str(plan_file)
    record.account = (await aws.acall("sts", "get_caller_identity")).get("Account", "")
    record.save()
    hourly = nodegroup_costs(plan)
    found = await aws.afind("eks", "describe_cluster", name=plan.name)
    if found is not None:
        _refuse_foreign(found["cluster"], plan.name)
    if found is None:
        commands = [[eksctl, "create", "cluster", "--config-file", str(plan_file)]]
    else:
        yield Progress(
            "cluster", f"cluster {plan.name} exists ({found['cluster'].get('status')}): adding what is missing", clock()
        )
        commands = [
            [eksctl, "create", "nodegroup", "--config-file", str(plan_file)],
            [eksctl, "create", "addon", "--config-file", str(plan_file)],
        ]
        if plan.s3_bucket:
            commands.append([eksctl, "create", "iamserviceaccount", "--config-file", str(plan_file), "--approve"])
    for argv in commands:
        yield Progress("eksctl", "$ " + " ".join(argv[1:]), clock())
        async for p in run_eksctl(aws, argv, f"eksctl-{plan.name}-", clock, poll_s):
            yield p
    cluster = (await aws.acall("eks", "describe_cluster", name=plan.name))["cluster"]
    record.note("eks-cluster", plan.name, found is None, hourly=control_plane_price(), arn=cluster.get("arn"))
    for stack in await aws.apages("cloudformation", "describe_stacks", "Stacks"):
        stack_name = stack["StackName"]
        if stack_name.startswith(f"eksctl-{plan.name}-"):
            # eksctl's nodegroup stacks hold the instances; its cluster stack a new VPC's NAT gateway
            group = stack_name.rsplit("-nodegroup-", 1)[1] if "-nodegroup-" in stack_name else None
            cost = (
                hourly.get(group, 0.0)
                if group
                else (NAT_GATEWAY_PER_HOUR if stack_name.endswith("-cluster") and not plan.vpc_id else 0.0)
            )
            record.note("cloudformation-stack", stack_name, True, hourly=cost)
    path, context = await _connect(aws, plan.name, record, kubeconfig)
    yield Progress("kubeconfig", f"context {context} in {path} (exec authentication, mode 0600)", clock())
    yield _created(record, context, clock)


def create_cluster(
    aws: AwsSession,
    plan: ClusterPlan,
    plan_file: Path,
    state_dir: Path,
    path: str,
    eksctl: str | None = None,
    kubeconfig: Path | None = None,
    poll_s: float = POLL_S,
) -> AsyncIterator[Progress]:
    """The create the CLI and the wizard start: the plan's record opened, then the chosen path."""
    record = ClusterRecord.open(state_dir, plan.name, plan.region)
    record.plan_file = str(plan_file.resolve())
    if path == "eksctl":
        return create_with_eksctl(aws, plan, plan_file, record, eksctl or "eksctl", kubeconfig, poll_s=poll_s)
    return create_native(aws, plan, record, kubeconfig=kubeconfig, poll_s=poll_s)


def _refuse_foreign(cluster: Mapping[str, object], name: str) -> None:
    if not made_by_torchdeck(cluster, name):
        raise BackendError(
            f"a cluster named {name} exists and torchdeck did not make it",
            f"pick another name, or use it as it is: torchdeck cluster connect --name {name}",
        )


async def _connect(aws: AwsSession, name: str, record: ClusterRecord, kubeconfig: Path | None) -> tuple[Path, str]:
    path, context = await asyncio.to_thread(connect, aws, name, kubeconfig)
    record.kubeconfig, record.context = str(path), context
    record.save()
    return path, context


def _created(record: ClusterRecord, context: str, clock: Clock) -> Progress:
    record.state = "created"
    record.save()
    return Progress(
        "done",
        f"cluster {record.name} is ready: torchdeck --backend kubernetes --context {context}",
        clock(),
        "done",
        ClusterReady(record.name, context, record.kubeconfig),
    )


def pick_path(requested: str | None) -> tuple[str, str | None]:
    """(path, eksctl binary): "eksctl" where it is on the PATH (or asked for), else "native"."""
    binary = eksctl_path()
    if requested == "eksctl" and binary is None:
        raise BackendError("eksctl is not on the PATH", "install it (https://eksctl.io) or use --native")
    if requested == "native":
        return "native", None
    return ("eksctl", binary) if binary else ("native", None)
