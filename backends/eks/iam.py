"""IAM for torchdeck's clusters: role names, trust policies (a service, or
one Kubernetes service account through the cluster's OIDC provider), roles
made or found with exactly the wanted trust and policies, the service
accounts that carry them (IRSA), and the deletes that undo them. Every role
and provider carries the ``torchdeck:cluster`` tag."""

from __future__ import annotations

import hashlib
import json
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..errors import BackendError
from ..kubernetes.client import KubeClient, ensure_object
from .plan import CLUSTER_TAG
from .session import AwsSession

if TYPE_CHECKING:
    from .access import ClusterRecord

POLICY = "arn:aws:iam::aws:policy/"
CLUSTER_POLICIES = (POLICY + "AmazonEKSClusterPolicy",)
NODE_POLICIES = (
    POLICY + "AmazonEKSWorkerNodePolicy",
    POLICY + "AmazonEKS_CNI_Policy",
    POLICY + "AmazonEC2ContainerRegistryReadOnly",
    POLICY + "AmazonSSMManagedInstanceCore",
)
EFS_CSI_POLICY = POLICY + "service-role/AmazonEFSCSIDriverPolicy"
EFS_CSI_SERVICE_ACCOUNT = ("kube-system", "efs-csi-controller-sa")
# torchdeck makes FSx file systems itself and gives the driver static volumes only:
# the driver never creates, changes or deletes a file system, so it reads (Describe*).
FSX_CSI_POLICY = POLICY + "AmazonFSxReadOnlyAccess"
RETIRED_POLICIES = frozenset({POLICY + "AmazonFSxFullAccess"})
"""Wider policies an earlier torchdeck attached to its roles: taken off when the role is next
ensured. Policies a person attached are theirs, and stay."""
FSX_CSI_SERVICE_ACCOUNT = ("kube-system", "fsx-csi-controller-sa")
OIDC_AUDIENCE = "sts.amazonaws.com"
# The root CA of EKS's OIDC endpoints; IAM no longer checks it for them, but older APIs require a value.
OIDC_THUMBPRINT = "9e99a48a9960b14926bb7f3b02e22da2b0ab7280"


def iam_tags(name: str) -> list[dict[str, str]]:
    """IAM's form of the ``torchdeck:cluster`` tag."""
    return [{"Key": CLUSTER_TAG, "Value": name}]


def trust_service(service: str) -> dict[str, object]:
    """A trust policy that lets an AWS service (EKS, EC2) take the role."""
    return {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
    }


def trust_service_account(provider_arn: str, issuer: str, namespace: str, account: str) -> dict[str, object]:
    """Only this service account's pods, presenting a token for STS, may take the role."""
    host = issuer.removeprefix("https://")
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Federated": provider_arn},
                "Action": "sts:AssumeRoleWithWebIdentity",
                "Condition": {
                    "StringEquals": {
                        f"{host}:sub": f"system:serviceaccount:{namespace}:{account}",
                        f"{host}:aud": OIDC_AUDIENCE,
                    }
                },
            }
        ],
    }


def policy_document(value: object) -> object:
    """IAM returns policy documents URL-encoded (as text) or already parsed, depending on the SDK."""
    if isinstance(value, str):
        try:
            return json.loads(urllib.parse.unquote(value))
        except ValueError:
            return value
    return value


async def ensure_role(
    aws: AwsSession,
    record: ClusterRecord,
    name: str,
    trust: Mapping[str, object],
    managed: tuple[str, ...] = (),
    inline: Mapping[str, object] | None = None,
) -> tuple[str, bool]:
    """The role, made or found, with exactly this trust and these policies attached; (arn, made now)."""
    found = await aws.afind("iam", "get_role", RoleName=name)
    made = found is None
    if made:
        role = (
            await aws.acall(
                "iam",
                "create_role",
                RoleName=name,
                AssumeRolePolicyDocument=json.dumps(trust),
                Description=f"torchdeck: {record.name}",
                Tags=iam_tags(record.name),
            )
        )["Role"]
    else:
        assert found is not None
        role = found["Role"]
        tags = {t["Key"]: t["Value"] for t in (await aws.acall("iam", "list_role_tags", RoleName=name)).get("Tags", [])}
        if tags.get(CLUSTER_TAG) != record.name:
            raise BackendError(
                f"IAM role {name} exists and is not torchdeck's for cluster {record.name}",
                "delete or rename that role, or pick another cluster name",
            )
        if policy_document(role.get("AssumeRolePolicyDocument")) != trust:
            await aws.acall("iam", "update_assume_role_policy", RoleName=name, PolicyDocument=json.dumps(trust))
    record.note("iam-role", name, made, arn=role["Arn"])
    attached = {
        p["PolicyArn"]
        for p in await aws.apages("iam", "list_attached_role_policies", "AttachedPolicies", RoleName=name)
    }
    for arn in managed:
        if arn not in attached:
            await aws.acall("iam", "attach_role_policy", RoleName=name, PolicyArn=arn)
    for arn in sorted((attached & RETIRED_POLICIES) - set(managed)):
        await aws.acall("iam", "detach_role_policy", RoleName=name, PolicyArn=arn)
    if inline is not None:
        have = None if made else await aws.afind("iam", "get_role_policy", RoleName=name, PolicyName="torchdeck")
        if have is None or policy_document(have.get("PolicyDocument")) != inline:
            await aws.acall(
                "iam", "put_role_policy", RoleName=name, PolicyName="torchdeck", PolicyDocument=json.dumps(inline)
            )
    return role["Arn"], made


def ensure_service_account(kube: KubeClient, namespace: str, account: str, role_arn: str, cluster: str) -> None:
    """The Kubernetes service account (and its namespace) whose pods take the IAM role (IRSA)."""
    if namespace != "default":
        ensure_object(kube, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    ensure_object(
        kube,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {
                "name": account,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/managed-by": "torchdeck", "torchdeck.dev/cluster": cluster},
                "annotations": {"eks.amazonaws.com/role-arn": role_arn},
            },
        },
    )


async def oidc_provider(aws: AwsSession, issuer: str) -> str:
    """The IAM OIDC provider of the cluster whose issuer this is."""
    host = issuer.removeprefix("https://")
    providers = (await aws.acall("iam", "list_open_id_connect_providers")).get("OpenIDConnectProviderList", [])
    arn = next((p["Arn"] for p in providers if host and p["Arn"].endswith("oidc-provider/" + host)), None)
    if arn is None:
        raise BackendError(
            "the cluster has no IAM OIDC provider, so service accounts cannot have IAM roles",
            "run torchdeck cluster create again (it adds one), or eksctl utils associate-iam-oidc-provider --approve",
        )
    return arn


def role_name(cluster: str, purpose: str) -> str:
    """IAM role names allow 64 characters; long cluster names keep a hash to stay unique."""
    name = f"torchdeck-{cluster}-{purpose}"
    if len(name) <= 64:
        return name
    digest = hashlib.sha1(cluster.encode()).hexdigest()[:8]
    return f"td-{cluster[: 63 - len(purpose) - 13]}-{digest}-{purpose}"


async def tagged_roles(aws: AwsSession, name: str) -> list[str]:
    """IAM roles carrying torchdeck:cluster=NAME."""
    roles = []
    for role in await aws.apages("iam", "list_roles", "Roles"):
        if not role["RoleName"].startswith(("torchdeck-", "td-")):
            continue  # torchdeck names its roles so; reading every role's tags would be slow on big accounts
        tags = (await aws.acall("iam", "list_role_tags", RoleName=role["RoleName"])).get("Tags", [])
        if {"Key": CLUSTER_TAG, "Value": name} in tags:
            roles.append(role["RoleName"])
    return roles


async def tagged_oidc_providers(aws: AwsSession, name: str) -> list[str]:
    found = []
    for provider in (await aws.acall("iam", "list_open_id_connect_providers")).get("OpenIDConnectProviderList", []):
        tags = (
            await aws.acall("iam", "list_open_id_connect_provider_tags", OpenIDConnectProviderArn=provider["Arn"])
        ).get("Tags", [])
        if {"Key": CLUSTER_TAG, "Value": name} in tags:
            found.append(provider["Arn"])
    return found


async def delete_role(aws: AwsSession, role: str) -> bool:
    """Detach, empty and delete one role; False if it was not there."""
    if await aws.afind("iam", "get_role", RoleName=role) is None:
        return False
    for policy in await aws.apages("iam", "list_attached_role_policies", "AttachedPolicies", RoleName=role):
        await aws.acall("iam", "detach_role_policy", RoleName=role, PolicyArn=policy["PolicyArn"])
    for policy in await aws.apages("iam", "list_role_policies", "PolicyNames", RoleName=role):
        await aws.acall("iam", "delete_role_policy", RoleName=role, PolicyName=policy)
    # EKS makes an instance profile for the node role's nodes; the role cannot go while one holds it
    for profile in await aws.apages("iam", "list_instance_profiles_for_role", "InstanceProfiles", RoleName=role):
        await aws.acall(
            "iam",
            "remove_role_from_instance_profile",
            InstanceProfileName=profile["InstanceProfileName"],
            RoleName=role,
        )
    await aws.acall("iam", "delete_role", RoleName=role)
    return True
