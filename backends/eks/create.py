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
import json
import os
import shutil
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from .session import AwsError, AwsSession, redact
from .access import ClusterRecord, connect, role_name
from .plan import (CLUSTER_TAG, GPU_TAINT, ClusterPlan, control_plane_price, made_by_torchdeck, s3_policy,
                       shipped_catalogue)
from ..errors import BackendError

POLICY = "arn:aws:iam::aws:policy/"
CLUSTER_POLICIES = (POLICY + "AmazonEKSClusterPolicy",)
NODE_POLICIES = (POLICY + "AmazonEKSWorkerNodePolicy", POLICY + "AmazonEKS_CNI_Policy",
                 POLICY + "AmazonEC2ContainerRegistryReadOnly", POLICY + "AmazonSSMManagedInstanceCore")
EFS_CSI_POLICY = POLICY + "service-role/AmazonEFSCSIDriverPolicy"
EFS_CSI_SERVICE_ACCOUNT = ("kube-system", "efs-csi-controller-sa")
ADDONS = ("aws-efs-csi-driver", "metrics-server")
OIDC_AUDIENCE = "sts.amazonaws.com"
# The root CA of EKS's OIDC endpoints; IAM no longer checks it for them, but older APIs require a value.
OIDC_THUMBPRINT = "9e99a48a9960b14926bb7f3b02e22da2b0ab7280"
POLL_S = 15.0
TIMEOUT_S = 45 * 60
NAT_GATEWAY_PER_HOUR = 0.045
HEARTBEAT_S = 60.0
"""A long wait says it is still waiting this often."""


@dataclass
class Progress:
    """One line of a create or delete: ``kind`` is step (torchdeck did or found something), event (a
    CloudFormation stack event), output (a line from eksctl), wait (still waiting) or done."""

    phase: str
    message: str
    elapsed: float
    kind: str = "step"


def _tags(name: str) -> dict[str, str]:
    return {CLUSTER_TAG: name}


def _iam_tags(name: str) -> list[dict[str, str]]:
    return [{"Key": CLUSTER_TAG, "Value": name}]


class _Clock:
    def __init__(self) -> None:
        self.start = time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() - self.start


def trust_service(service: str) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}]}


def trust_service_account(provider_arn: str, issuer: str, namespace: str, account: str) -> dict[str, Any]:
    """Only this service account's pods, presenting a token for STS, may take the role."""
    host = issuer.removeprefix("https://")
    return {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"Federated": provider_arn},
        "Action": "sts:AssumeRoleWithWebIdentity",
        "Condition": {"StringEquals": {f"{host}:sub": f"system:serviceaccount:{namespace}:{account}",
                                       f"{host}:aud": OIDC_AUDIENCE}}}]}


def _document(value: Any) -> Any:
    """IAM returns policy documents URL-encoded (as text) or already parsed, depending on the SDK."""
    if isinstance(value, str):
        try:
            return json.loads(urllib.parse.unquote(value))
        except ValueError:
            return value
    return value


async def ensure_role(aws: AwsSession, record: ClusterRecord, name: str, trust: dict[str, Any],
                      managed: tuple[str, ...] = (), inline: dict[str, Any] | None = None) -> tuple[str, bool]:
    """The role, made or found, with exactly this trust and these policies attached; (arn, made now)."""
    found = await aws.afind("iam", "get_role", RoleName=name)
    made = found is None
    if made:
        role = (await aws.acall("iam", "create_role", RoleName=name, AssumeRolePolicyDocument=json.dumps(trust),
                                Description=f"torchdeck: {record.name}", Tags=_iam_tags(record.name)))["Role"]
    else:
        role = found["Role"]
        tags = {t["Key"]: t["Value"] for t in (await aws.acall("iam", "list_role_tags", RoleName=name)).get("Tags", [])}
        if tags.get(CLUSTER_TAG) != record.name:
            raise BackendError(f"IAM role {name} exists and is not torchdeck's for cluster {record.name}",
                               "delete or rename that role, or pick another cluster name")
        if _document(role.get("AssumeRolePolicyDocument")) != trust:
            await aws.acall("iam", "update_assume_role_policy", RoleName=name, PolicyDocument=json.dumps(trust))
    record.note("iam-role", name, made, arn=role["Arn"])
    attached = {p["PolicyArn"] for p in await aws.apages("iam", "list_attached_role_policies", "AttachedPolicies",
                                                           RoleName=name)}
    for arn in managed:
        if arn not in attached:
            await aws.acall("iam", "attach_role_policy", RoleName=name, PolicyArn=arn)
    if inline is not None:
        have = None if made else await aws.afind("iam", "get_role_policy", RoleName=name, PolicyName="torchdeck")
        if have is None or _document(have.get("PolicyDocument")) != inline:
            await aws.acall("iam", "put_role_policy", RoleName=name, PolicyName="torchdeck",
                            PolicyDocument=json.dumps(inline))
    return role["Arn"], made


async def _wait(what: str, describe: Callable[[], Any], key: str, clock: _Clock, phase: str,
                poll_s: float, timeout_s: float, done: str = "ACTIVE",
                failed: tuple[str, ...] = ("FAILED", "CREATE_FAILED", "DEGRADED")) -> AsyncIterator[Progress]:
    """Poll until the thing's status is ``done``; a failed status is an error with AWS's reason."""
    started = said = time.monotonic()
    last = ""
    while True:
        answer = await describe()
        item = answer[key]
        status = item.get("status", "")
        if status == done:
            return
        if status in failed:
            issues = "; ".join(f"{i.get('code')}: {i.get('message')}" for i in
                               (item.get("health") or {}).get("issues", []))
            raise BackendError(f"{what} is {status}" + (f": {issues}" if issues else ""),
                               "see the EKS console for it; fix the cause, delete it, and run create again")
        if time.monotonic() - started > timeout_s:
            raise BackendError(f"{what} is still {status} after {timeout_s / 60:.0f} minutes",
                               "run create again later: it picks up where it stopped")
        if status != last or time.monotonic() - said >= HEARTBEAT_S:
            yield Progress(phase, f"{what} is {status}", clock(), "wait")
            last, said = status, time.monotonic()
        await asyncio.sleep(poll_s)


async def create_native(aws: AwsSession, plan: ClusterPlan, record: ClusterRecord,
                        kube: Callable[[Path, str], Any] | None = None, kubeconfig: Path | None = None,
                        poll_s: float = POLL_S, timeout_s: float = TIMEOUT_S) -> AsyncIterator[Progress]:
    """torchdeck's own path (no eksctl). ``kube(kubeconfig, context)`` gives the Kubernetes client for the
    last steps (default: the kubernetes backend on the context just written)."""
    clock = _Clock()
    name = plan.name
    if not plan.vpc_id:
        raise BackendError("without eksctl, torchdeck creates clusters in an existing VPC only",
                           "give --vpc-id and --subnet ZONE=ID in cluster init, or install eksctl to make a new VPC")
    efa = [ng.name for ng in plan.nodegroups if ng.efa]
    if efa:
        raise BackendError(f"EFA nodegroups ({', '.join(efa)}) need a launch template with EFA interfaces",
                           "install eksctl (it writes one), or drop efa for the native path")
    record.method, record.state = "native", "creating"
    # no credentials: say so before anything else
    record.account = (await aws.acall("sts", "get_caller_identity")).get("Account", "")
    record.save()
    hourly = nodegroup_costs(plan)

    yield Progress("roles", "IAM roles for the control plane and the nodes", clock())
    cluster_role, made = await ensure_role(aws, record, role_name(name, "cluster"), trust_service("eks.amazonaws.com"),
                                           CLUSTER_POLICIES)
    yield Progress("roles", f"{'created' if made else 'reusing'} {role_name(name, 'cluster')}", clock())
    node_role, made = await ensure_role(aws, record, role_name(name, "node"), trust_service("ec2.amazonaws.com"),
                                        NODE_POLICIES)
    yield Progress("roles", f"{'created' if made else 'reusing'} {role_name(name, 'node')}", clock())

    found = await aws.afind("eks", "describe_cluster", name=name)
    if found is None:
        yield Progress("cluster", f"creating EKS cluster {name} (Kubernetes {plan.version}); this takes 10-15 minutes",
                       clock())
        await aws.acall("eks", "create_cluster", name=name, version=plan.version, roleArn=cluster_role,
                        resourcesVpcConfig={"subnetIds": [plan.subnets[z] for z in sorted(plan.subnets)],
                                            "endpointPublicAccess": True, "endpointPrivateAccess": True},
                        accessConfig={"authenticationMode": "API_AND_CONFIG_MAP",
                                      "bootstrapClusterCreatorAdminPermissions": True},
                        tags=_tags(name))
        made = True
    else:
        _refuse_foreign(found["cluster"], name)
        made = False
        yield Progress("cluster", f"reusing cluster {name} ({found['cluster'].get('status')})", clock())
    async for p in _wait(f"cluster {name}", lambda: aws.acall("eks", "describe_cluster", name=name), "cluster",
                         clock, "cluster", poll_s, timeout_s):
        yield p
    cluster = (await aws.acall("eks", "describe_cluster", name=name))["cluster"]
    record.note("eks-cluster", name, made, hourly=control_plane_price(), arn=cluster.get("arn"))
    yield Progress("cluster", f"cluster {name} is ACTIVE at {cluster.get('endpoint')}", clock())

    issuer = (cluster.get("identity") or {}).get("oidc", {}).get("issuer", "")
    if not issuer:
        raise BackendError(f"cluster {name} has no OIDC issuer", "EKS gives every cluster one; try again in a minute")
    host = issuer.removeprefix("https://")
    providers = (await aws.acall("iam", "list_open_id_connect_providers")).get("OpenIDConnectProviderList", [])
    provider = next((p["Arn"] for p in providers if p["Arn"].endswith("oidc-provider/" + host)), None)
    made = provider is None
    if made:
        provider = (await aws.acall("iam", "create_open_id_connect_provider", Url=issuer, ClientIDList=[OIDC_AUDIENCE],
                                    ThumbprintList=[OIDC_THUMBPRINT], Tags=_iam_tags(name)))["OpenIDConnectProviderArn"]
    record.note("oidc-provider", provider, made)
    yield Progress("oidc", f"{'created' if made else 'reusing'} the OIDC provider for {host}", clock())

    s3_role = None
    if plan.s3_bucket:
        s3_role, made = await ensure_role(
            aws, record, role_name(name, "s3"),
            trust_service_account(provider, issuer, plan.namespace, plan.service_account),
            inline=s3_policy(plan.s3_bucket, plan.s3_prefix))
        yield Progress("oidc", f"{'created' if made else 'reusing'} {role_name(name, 's3')}: "
                       f"{plan.namespace}/{plan.service_account} may use s3://{plan.s3_bucket}/{plan.s3_prefix}",
                       clock())
    efs_role, made = await ensure_role(aws, record, role_name(name, "efs-csi"),
                                       trust_service_account(provider, issuer, *EFS_CSI_SERVICE_ACCOUNT),
                                       (EFS_CSI_POLICY,))

    subnets = [plan.subnets[z] for z in sorted(plan.subnets)]
    for ng in plan.nodegroups:
        found = await aws.afind("eks", "describe_nodegroup", clusterName=name, nodegroupName=ng.name)
        if found is None:
            params: dict[str, Any] = dict(
                clusterName=name, nodegroupName=ng.name, nodeRole=node_role, subnets=subnets,
                instanceTypes=[ng.instance_type], diskSize=ng.volume_gib,
                scalingConfig={"minSize": ng.min_size, "desiredSize": ng.desired, "maxSize": ng.max_size},
                amiType="AL2023_x86_64_NVIDIA" if ng.gpu else "AL2023_x86_64_STANDARD",
                capacityType="SPOT" if ng.spot else "ON_DEMAND",
                labels={"torchdeck.dev/nodegroup": ng.name, **({"torchdeck.dev/gpu": "true"} if ng.gpu else {}),
                        **ng.labels},
                tags=_tags(name))
            if ng.gpu:
                params["taints"] = [{"key": GPU_TAINT["key"], "value": GPU_TAINT["value"], "effect": "NO_SCHEDULE"}]
            await aws.acall("eks", "create_nodegroup", **params)
            yield Progress("nodegroups", f"creating nodegroup {ng.name}: {ng.desired} x {ng.instance_type}", clock())
        else:
            yield Progress("nodegroups", f"reusing nodegroup {ng.name} ({found['nodegroup'].get('status')})", clock())
        record.note("eks-nodegroup", f"{name}/{ng.name}", found is None, hourly=hourly.get(ng.name, 0.0))
    for ng in plan.nodegroups:
        async for p in _wait(f"nodegroup {ng.name}",
                             lambda ng=ng: aws.acall("eks", "describe_nodegroup", clusterName=name,
                                                     nodegroupName=ng.name),
                             "nodegroup", clock, "nodegroups", poll_s, timeout_s):
            yield p
        yield Progress("nodegroups", f"nodegroup {ng.name} is ACTIVE", clock())

    for addon in ADDONS:
        found = await aws.afind("eks", "describe_addon", clusterName=name, addonName=addon)
        if found is None:
            params = dict(clusterName=name, addonName=addon, resolveConflicts="OVERWRITE", tags=_tags(name))
            if addon == "aws-efs-csi-driver":
                params["serviceAccountRoleArn"] = efs_role
            await aws.acall("eks", "create_addon", **params)
        record.note("eks-addon", f"{name}/{addon}", found is None)
        async for p in _wait(f"add-on {addon}",
                             lambda addon=addon: aws.acall("eks", "describe_addon", clusterName=name, addonName=addon),
                             "addon", clock, "add-ons", poll_s, timeout_s, failed=("CREATE_FAILED",)):
            yield p
        yield Progress("add-ons", f"{addon} is ACTIVE", clock())

    path, context = await _connect(aws, name, record, kubeconfig)
    yield Progress("kubeconfig", f"context {context} in {path} (exec authentication, mode 0600)", clock())

    client = kube(path, context) if kube else _kubernetes(path, context)
    if s3_role:
        await asyncio.to_thread(ensure_service_account, client, plan.namespace, plan.service_account, s3_role, name)
        yield Progress("kubernetes", f"service account {plan.namespace}/{plan.service_account} -> {s3_role}", clock())
    if any(ng.gpu for ng in plan.nodegroups):
        await asyncio.to_thread(ensure_object, client, device_plugin(name))
        yield Progress("kubernetes", "NVIDIA device plugin on the GPU nodes", clock())
    yield _created(record, context, clock)


def nodegroup_costs(plan: ClusterPlan) -> dict[str, float]:
    """Each nodegroup's on-demand price per hour at its desired size (0 where the type has no price)."""
    catalogue = shipped_catalogue()
    return {ng.name: ng.desired * ((catalogue.get(ng.instance_type).price or 0.0)
                                   if ng.instance_type in catalogue else 0.0) for ng in plan.nodegroups}


def _kubernetes(kubeconfig: Path, context: str):
    from ..kubernetes.backend import KubernetesBackend
    return KubernetesBackend(kubeconfig, context)


KIND_PATHS = {
    "Namespace": "api/v1/namespaces",
    "ServiceAccount": "api/v1/namespaces/{ns}/serviceaccounts",
    "PersistentVolumeClaim": "api/v1/namespaces/{ns}/persistentvolumeclaims",
    "PersistentVolume": "api/v1/persistentvolumes",
    "StorageClass": "apis/storage.k8s.io/v1/storageclasses",
    "DaemonSet": "apis/apps/v1/namespaces/{ns}/daemonsets",
    "Job": "apis/batch/v1/namespaces/{ns}/jobs",
    "ConfigMap": "api/v1/namespaces/{ns}/configmaps",
}
"""Where the API server keeps each kind torchdeck creates outside a training job."""


def object_path(obj: dict[str, Any]) -> str:
    """The API path of one object (its collection, then its name)."""
    meta = obj["metadata"]
    return KIND_PATHS[obj["kind"]].format(ns=meta.get("namespace", "default")) + "/" + meta["name"]


def ensure_object(kube: Any, obj: dict[str, Any]) -> bool:
    """Create an object, or merge-patch it where it is; True if made now."""
    from ..kubernetes.client import ApiError

    path = object_path(obj)
    try:
        kube.request("POST", path.rsplit("/", 1)[0], body=obj)
        return True
    except ApiError as exc:
        if exc.status != 409:
            raise
    kube.request("PATCH", path, body=obj)
    return False


def ensure_service_account(kube: Any, namespace: str, account: str, role_arn: str, cluster: str) -> None:
    if namespace != "default":
        ensure_object(kube, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    ensure_object(kube, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {
        "name": account, "namespace": namespace,
        "labels": {"app.kubernetes.io/managed-by": "torchdeck", "torchdeck.dev/cluster": cluster},
        "annotations": {"eks.amazonaws.com/role-arn": role_arn}}})


def device_plugin(cluster: str) -> dict[str, Any]:
    """NVIDIA's device plugin DaemonSet (what eksctl installs), on GPU nodes only, tolerating their taint."""
    import yaml
    from importlib import resources

    text = (resources.files("torchdeck") / "manifests" / "eks" / "nvidia-device-plugin.yaml").read_text()
    obj = yaml.safe_load(text)
    obj["metadata"].setdefault("labels", {})["torchdeck.dev/cluster"] = cluster
    return obj


# -- the eksctl path ----------------------------------------------------------------------

_PHASES = (("nodegroup", "nodegroups"), ("addon", "add-ons"), ("iamserviceaccount", "oidc"), ("oidc", "oidc"),
           ("kubeconfig", "kubeconfig"), ("cluster", "cluster"), ("vpc", "cluster"))


def phase_of(line: str, current: str) -> str:
    """eksctl's phase from its output line (it names what it works on)."""
    lowered = line.lower()
    return next((phase for word, phase in _PHASES if word in lowered), current)


def eksctl_path() -> str | None:
    return shutil.which("eksctl")


async def _stack_events(aws: AwsSession, prefix: str, seen: set[str]) -> list[dict[str, Any]]:
    """New CloudFormation events of the stacks whose names start with ``prefix``, oldest first."""
    try:
        stacks = [s["StackName"] for s in await aws.apages("cloudformation", "describe_stacks", "Stacks")
                  if s["StackName"].startswith(prefix)]
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


def _event_line(event: dict[str, Any]) -> str:
    reason = event.get("ResourceStatusReason") or ""
    return (f"{event.get('StackName')}: {event.get('LogicalResourceId')} {event.get('ResourceStatus')}"
            + (f" ({reason})" if reason else ""))


async def run_eksctl(aws: AwsSession, argv: list[str], stack_prefix: str, clock: _Clock,
                     poll_s: float) -> AsyncIterator[Progress]:
    """One eksctl command: its output lines and the stacks' events, interleaved as they come."""
    queue: asyncio.Queue = asyncio.Queue()
    seen: set[str] = set()
    await _stack_events(aws, stack_prefix, seen)  # what earlier runs did is not news
    try:
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.STDOUT, env=os.environ.copy())
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
    phase, tail = "eksctl", []
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
        raise BackendError(f"eksctl {' '.join(argv[1:3])} failed (exit {code}): {tail[-1] if tail else 'no output'}",
                           "read its output above; run create again to continue, or delete to clean up")


async def create_with_eksctl(aws: AwsSession, plan: ClusterPlan, plan_file: Path, record: ClusterRecord,
                             eksctl: str = "eksctl", kubeconfig: Path | None = None,
                             poll_s: float = POLL_S) -> AsyncIterator[Progress]:
    """eksctl on the saved config; where the cluster exists already, only what is missing (nodegroups,
    service accounts) is added. Then torchdeck's own kubeconfig context."""
    clock = _Clock()
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
        yield Progress("cluster", f"cluster {plan.name} exists ({found['cluster'].get('status')}): adding what is "
                       "missing", clock())
        commands = [[eksctl, "create", "nodegroup", "--config-file", str(plan_file)],
                    [eksctl, "create", "addon", "--config-file", str(plan_file)]]
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
            cost = hourly.get(group, 0.0) if group else (NAT_GATEWAY_PER_HOUR if stack_name.endswith("-cluster")
                                                         and not plan.vpc_id else 0.0)
            record.note("cloudformation-stack", stack_name, True, hourly=cost)
    path, context = await _connect(aws, plan.name, record, kubeconfig)
    yield Progress("kubeconfig", f"context {context} in {path} (exec authentication, mode 0600)", clock())
    yield _created(record, context, clock)


def create_cluster(aws: AwsSession, plan: ClusterPlan, plan_file: Path, state_dir: Path, path: str,
                   eksctl: str | None = None, kubeconfig: Path | None = None,
                   poll_s: float = POLL_S) -> AsyncIterator[Progress]:
    """The create the CLI and the wizard start: the plan's record opened, then the chosen path."""
    record = ClusterRecord.open(state_dir, plan.name, plan.region)
    record.plan_file = str(plan_file.resolve())
    if path == "eksctl":
        return create_with_eksctl(aws, plan, plan_file, record, eksctl or "eksctl", kubeconfig, poll_s=poll_s)
    return create_native(aws, plan, record, kubeconfig=kubeconfig, poll_s=poll_s)


def _refuse_foreign(cluster: dict[str, Any], name: str) -> None:
    if not made_by_torchdeck(cluster, name):
        raise BackendError(f"a cluster named {name} exists and torchdeck did not make it",
                           f"pick another name, or use it as it is: torchdeck cluster connect --name {name}")


async def _connect(aws: AwsSession, name: str, record: ClusterRecord, kubeconfig: Path | None) -> tuple[Path, str]:
    path, context = await asyncio.to_thread(connect, aws, name, kubeconfig)
    record.kubeconfig, record.context = str(path), context
    record.save()
    return path, context


def _created(record: ClusterRecord, context: str, clock: _Clock) -> Progress:
    record.state = "created"
    record.save()
    return Progress("done", f"cluster {record.name} is ready: torchdeck --backend kubernetes --context {context}",
                    clock(), "done")


def pick_path(requested: str | None) -> tuple[str, str | None]:
    """(path, eksctl binary): "eksctl" where it is on the PATH (or asked for), else "native"."""
    binary = eksctl_path()
    if requested == "eksctl" and binary is None:
        raise BackendError("eksctl is not on the PATH", "install it (https://eksctl.io) or use --native")
    if requested == "native":
        return "native", None
    return ("eksctl", binary) if binary else ("native", None)

