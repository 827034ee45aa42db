"""The EKS cluster's life against moto's server mode (a real HTTP endpoint,
tests/support/aws_server.py) and a kmock API server standing in for the cluster's
own (tests/support/kube_cluster.py): preflight, both create paths, idempotence and
resuming, connect with exec authentication, status, delete, throttling, and
credentials that never leak."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import stat
import subprocess
import sys
import urllib.parse
from typing import Any

import pytest
import yaml
from eks_support import REGION, cli, make_plan
from local_runs import run_cli
from shims import path_with
from trainer_runs import REPO

from torchdeck.backends.eks.access import ClusterRecord, eks_token
from torchdeck.backends.eks.cluster import delete_cluster
from torchdeck.backends.eks.create import NODE_POLICIES, create_native
from torchdeck.backends.eks.plan import NodegroupPlan, plan_to_yaml, to_eksctl
from torchdeck.backends.eks.preflight import preflight
from torchdeck.backends.eks.session import AwsError, AwsSession
from torchdeck.backends.errors import BackendError
from torchdeck.backends.kubernetes.backend import KubernetesBackend
from torchdeck.backends.ledger import Ledger

TAG = "torchdeck:cluster"
STANDIN = REPO / "tests" / "support" / "standin" / "eksctl"


def run_all(progress) -> list[Any]:
    async def collect():
        return [p async for p in progress]

    return asyncio.run(collect())


def creates(gaps) -> dict[str, int]:
    return {
        f"{svc}.{action}": n
        for (svc, action), n in gaps.calls.items()
        if action.startswith(("Create", "Attach", "Put")) and n
    }


def tagged_everywhere(name: str) -> list[str]:
    """Every IAM role, OIDC provider, launch template and EKS cluster carrying torchdeck:cluster=NAME."""
    aws = AwsSession(REGION)
    found = []
    for role in aws.pages("iam", "list_roles", "Roles"):
        if {"Key": TAG, "Value": name} in aws.call("iam", "list_role_tags", RoleName=role["RoleName"])["Tags"]:
            found.append("role " + role["RoleName"])
    for provider in aws.call("iam", "list_open_id_connect_providers")["OpenIDConnectProviderList"]:
        tags = aws.call("iam", "list_open_id_connect_provider_tags", OpenIDConnectProviderArn=provider["Arn"])["Tags"]
        if {"Key": TAG, "Value": name} in tags:
            found.append("oidc " + provider["Arn"])
    for template in aws.call("ec2", "describe_launch_templates")["LaunchTemplates"]:
        if {"Key": TAG, "Value": name} in template.get("Tags", []):
            found.append("launch template " + template["LaunchTemplateName"])
    for cluster in aws.call("eks", "list_clusters")["clusters"]:
        if aws.call("eks", "describe_cluster", name=cluster)["cluster"].get("tags", {}).get(TAG) == name:
            found.append("cluster " + cluster)
    return found


# -- validation and preflight -----------------------------------------------------------


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"name": ""}, "name: must not be empty"),
        ({"name": "-demo"}, "must start with a letter"),
        ({"name": "my_cluster"}, "has '_'"),
        ({"name": "a" * 101}, "is 101 characters"),
        ({"name": "démo"}, "non-ASCII"),
        ({"nodegroups": [NodegroupPlan("w", "m5.large", 3, 3, 2)]}, "3 is more than max_size 2"),
        ({"nodegroups": [NodegroupPlan("w", "m5.large", 1, 1, 1, gpu=True)]}, "m5.large has no GPU"),
        ({"public_access_cidrs": ["203.0.113.300/32"]}, "is not a CIDR block"),
        ({"public_access_cidrs": ["203.0.113.7/24"]}, "has host bits set"),
        ({"public_access_cidrs": ["*"]}, "is not a CIDR block"),
        ({"public_access_cidrs": ["2001:db8::/32"]}, "IPv4"),
        ({"public_access_cidrs": ["203.0.113.7/32"], "private_endpoint": True}, "private-only endpoint"),
    ],
)
def test_a_bad_plan_is_one_line_and_nothing_reaches_aws(tmp_path, aws_env, moto_gaps, changes, words):
    config: Any = to_eksctl(make_plan())
    bad = make_plan(**changes)
    config["metadata"]["name"] = bad.name
    config["managedNodeGroups"] = [
        {
            "name": g.name,
            "instanceType": g.instance_type,
            "minSize": g.min_size,
            "desiredCapacity": g.desired,
            "maxSize": g.max_size,
            **({"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]} if g.gpu else {}),
        }
        for g in bad.nodegroups
    ]
    if bad.public_access_cidrs:
        config["vpc"] = {"publicAccessCIDRs": bad.public_access_cidrs}
    if bad.private_endpoint:
        config.setdefault("vpc", {})["clusterEndpoints"] = {"publicAccess": False, "privateAccess": True}
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(config, allow_unicode=True))
    for command in ("plan", "create"):
        extra = ["--yes"] if command == "create" else []
        code, out, err = cli("cluster", command, "--file", str(tmp_path / "cluster.yaml"), *extra, state=tmp_path)
        assert code == 2 and words in err and err.count("\n") == 1, (command, err)
    assert sum(moto_gaps.calls.values()) == 0


def test_preflight_names_the_zone_that_lacks_a_type_and_the_quota_short(aws_env, moto_gaps):
    moto_gaps.quotas.update({"L-417A185B": 96, "L-1216C47A": 64})
    plan = make_plan(
        zones=[f"{REGION}a", f"{REGION}f"],
        nodegroups=[
            NodegroupPlan("system", "m5.large", 1, 2, 2),
            NodegroupPlan("p4d", "p4d.24xlarge", 0, 2, 2, gpu=True, efa=True),
        ],
    )
    report = preflight(AwsSession(REGION), plan)
    text = {f.level + ": " + f.text for f in report.findings}
    assert "ok: credentials: arn:aws:sts::123456789012:user/moto (account 123456789012)" in text
    assert "error: p4d: p4d.24xlarge is not offered in us-east-1f" in text
    assert "error: the plan needs 192 vCPUs of on-demand P instances; the quota is 96" in text
    assert "ok: on-demand Standard (A, C, D, H, I, M, R, T, Z) instances: 4 vCPUs needed at most, quota 64" in text
    assert "ok: no cluster named demo in us-east-1 yet" in text
    assert not report.ok and report.total_per_hour == pytest.approx(0.10 + 2 * 0.096 + 2 * 32.773)


@pytest.mark.slow
def test_cluster_plan_prints_the_checks_and_the_cost(tmp_path, aws_env, moto_gaps, vpc):
    moto_gaps.quotas.update({"L-DB2E81BA": 8, "L-1216C47A": 64})
    (tmp_path / "cluster.yaml").write_text(plan_to_yaml(make_plan(vpc)))
    code, out, err = cli("cluster", "plan", "--file", str(tmp_path / "cluster.yaml"), state=tmp_path)
    assert code == 0, err
    assert "ok    gpu: g5.xlarge is offered in every zone" in out
    assert f"ok    VPC {vpc[0]}: subnets in us-east-1a, us-east-1b" in out
    assert "estimated total                              $1.30/h" in out


def eks_cluster_made_elsewhere(aws: AwsSession, vpc, tags: dict[str, str] | None = None) -> None:
    """A cluster "demo" made straight through the EKS API (torchdeck's tag only where ``tags`` has it)."""
    subnets = {"subnetIds": list(vpc[1].values())}
    role = "arn:aws:iam::123456789012:role/x"
    aws.call("eks", "create_cluster", name="demo", roleArn=role, resourcesVpcConfig=subnets, tags=tags or {})


@pytest.mark.slow
def test_a_cluster_torchdeck_did_not_make_is_neither_reused_nor_deleted(tmp_path, aws_env, vpc):
    aws = AwsSession(REGION)
    eks_cluster_made_elsewhere(aws, vpc)
    report = preflight(aws, make_plan(vpc))
    assert any(f.level == "error" and "not made by torchdeck" in f.text for f in report.findings)
    record = ClusterRecord.open(tmp_path, "demo", REGION)
    with pytest.raises(BackendError, match="exists and torchdeck did not make it"):
        run_all(create_native(aws, make_plan(vpc), record, kube=lambda *_: None, poll_s=0.01))
    with pytest.raises(BackendError, match="not made by torchdeck"):
        run_all(delete_cluster(aws, "demo", record, poll_s=0.01))
    assert aws.call("eks", "describe_cluster", name="demo")["cluster"]["status"] == "ACTIVE"


# -- the native path ----------------------------------------------------------------------


@pytest.mark.slow
def test_native_create_makes_the_cluster_its_roles_and_the_irsa_role(tmp_path, aws_env, moto_gaps, vpc, kube):
    aws = AwsSession(REGION)
    record = ClusterRecord.open(tmp_path / "state", "demo", REGION)
    kubeconfig = tmp_path / "kubeconfig"
    progress = run_all(create_native(aws, make_plan(vpc), record, kubeconfig=kubeconfig, poll_s=0.01))
    phases = [p.phase for p in progress]
    assert (
        phases.index("roles")
        < phases.index("cluster")
        < phases.index("oidc")
        < phases.index("nodegroups")
        < phases.index("add-ons")
        < phases.index("kubeconfig")
        < phases.index("kubernetes")
        < phases.index("done")
    )
    assert all(b.elapsed >= a.elapsed for a, b in zip(progress, progress[1:]))

    cluster = aws.call("eks", "describe_cluster", name="demo")["cluster"]
    assert cluster["status"] == "ACTIVE" and cluster["tags"] == {TAG: "demo"}
    assert cluster["roleArn"].endswith(":role/torchdeck-demo-cluster")
    groups = {
        g: aws.call("eks", "describe_nodegroup", clusterName="demo", nodegroupName=g)["nodegroup"]
        for g in ("system", "gpu")
    }
    assert groups["gpu"]["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
    assert groups["gpu"]["amiType"] == "AL2023_x86_64_NVIDIA" and groups["system"]["scalingConfig"]["desiredSize"] == 2
    assert groups["gpu"]["nodeRole"].endswith(":role/torchdeck-demo-node")

    def policies(role: str) -> set[str]:
        return {
            p["PolicyArn"].rsplit("/", 1)[-1]
            for p in aws.call("iam", "list_attached_role_policies", RoleName=role)["AttachedPolicies"]
        }

    assert policies("torchdeck-demo-cluster") == {"AmazonEKSClusterPolicy"}
    assert policies("torchdeck-demo-node") == {arn.rsplit("/", 1)[-1] for arn in NODE_POLICIES}
    assert policies("torchdeck-demo-efs-csi") == {"AmazonEFSCSIDriverPolicy"}

    issuer = cluster["identity"]["oidc"]["issuer"].removeprefix("https://")
    (provider,) = aws.call("iam", "list_open_id_connect_providers")["OpenIDConnectProviderList"]
    described = aws.call("iam", "get_open_id_connect_provider", OpenIDConnectProviderArn=provider["Arn"])
    assert described["ClientIDList"] == ["sts.amazonaws.com"] and {"Key": TAG, "Value": "demo"} in described["Tags"]
    trust = aws.call("iam", "get_role", RoleName="torchdeck-demo-s3")["Role"]["AssumeRolePolicyDocument"]
    trust = json.loads(urllib.parse.unquote(trust)) if isinstance(trust, str) else trust
    (statement,) = trust["Statement"]
    assert statement["Principal"] == {"Federated": provider["Arn"]}
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert statement["Condition"] == {
        "StringEquals": {
            f"{issuer}:sub": "system:serviceaccount:default:torchdeck-s3",
            f"{issuer}:aud": "sts.amazonaws.com",
        }
    }
    inline = aws.call("iam", "get_role_policy", RoleName="torchdeck-demo-s3", PolicyName="torchdeck")
    document = inline["PolicyDocument"]
    document = json.loads(urllib.parse.unquote(document)) if isinstance(document, str) else document
    assert document["Statement"][0]["Resource"] == "arn:aws:s3:::torchdeck-models/cifar10/*"
    addons = aws.call("eks", "list_addons", clusterName="demo")["addons"]
    assert addons == ["aws-efs-csi-driver", "metrics-server"]
    efs = aws.call("eks", "describe_addon", clusterName="demo", addonName="aws-efs-csi-driver")["addon"]
    assert efs["serviceAccountRoleArn"].endswith(":role/torchdeck-demo-efs-csi")

    # the Kubernetes side, through the context create wrote (exec authentication against kmock)
    backend = KubernetesBackend(kubeconfig, "torchdeck-demo")
    account = backend.client.request("GET", "api/v1/namespaces/default/serviceaccounts/torchdeck-s3")
    assert account["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/torchdeck-demo-s3"
    }
    plugin = backend.client.request(
        "GET", "apis/apps/v1/namespaces/kube-system/daemonsets/nvidia-device-plugin-daemonset"
    )
    assert plugin["spec"]["template"]["spec"]["nodeSelector"] == {"torchdeck.dev/gpu": "true"}

    saved = json.loads(record.path.read_text())
    assert saved["state"] == "created" and saved["method"] == "native" and saved["context"] == "torchdeck-demo"
    assert "resources" not in saved  # what was made lives in the ledger only
    assert {r.kind for r in Ledger(tmp_path / "state").resources(scope="demo")} == {
        "iam-role",
        "eks-cluster",
        "oidc-provider",
        "eks-nodegroup",
        "eks-addon",
        "ec2-launch-template",
    }
    # Issue 16 row 12: pods cannot reach the node role through IMDS (IMDSv2 only, hop limit 1)
    for group in groups.values():
        template = group["launchTemplate"]
        (version,) = aws.call("ec2", "describe_launch_template_versions", LaunchTemplateId=template["id"])[
            "LaunchTemplateVersions"
        ]
        options = version["LaunchTemplateData"]["MetadataOptions"]
        assert options["HttpTokens"] == "required" and options["HttpPutResponseHopLimit"] == 1
        assert version["LaunchTemplateData"]["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == 100
    assert cluster["resourcesVpcConfig"]["endpointPublicAccess"] is True
    assert Ledger(tmp_path / "state").place("torchdeck-demo").scope == "demo"  # jobs on its context are its
    assert stat.S_IMODE(record.path.stat().st_mode) == 0o600


@pytest.mark.slow
def test_a_second_create_changes_nothing(tmp_path, aws_env, moto_gaps, vpc, kube):
    aws = AwsSession(REGION)
    record = ClusterRecord.open(tmp_path / "state", "demo", REGION)
    run_all(create_native(aws, make_plan(vpc), record, kubeconfig=tmp_path / "kc", poll_s=0.01))
    moto_gaps.calls.clear()
    progress = run_all(create_native(aws, make_plan(vpc), record, kubeconfig=tmp_path / "kc", poll_s=0.01))
    assert creates(moto_gaps) == {}
    said = [p.message for p in progress]
    assert "reusing torchdeck-demo-cluster" in said and "reusing cluster demo (ACTIVE)" in said
    assert "reusing nodegroup gpu (ACTIVE)" in said and said[-1].startswith("cluster demo is ready")


@pytest.mark.slow
def test_an_interrupted_create_resumes_where_it_stopped(tmp_path, aws_env, moto_gaps, vpc, kube):
    aws = AwsSession(REGION)
    record = ClusterRecord.open(tmp_path / "state", "demo", REGION)
    moto_gaps.fail("eks", "CreateNodegroup", "InvalidParameterException", message="subnet has no free addresses")
    with pytest.raises(BackendError, match="subnet has no free addresses"):
        run_all(create_native(aws, make_plan(vpc), record, kubeconfig=tmp_path / "kc", poll_s=0.01))
    saved = ClusterRecord.load(tmp_path / "state", "demo")
    assert saved.state == "creating" and saved.of_type("eks-cluster") == ["demo"] and not saved.of_type("eks-nodegroup")

    # and a Ctrl-C (the generator closed) between two steps
    async def stop_after_first_nodegroup():
        progress = create_native(aws, make_plan(vpc), record, kubeconfig=tmp_path / "kc", poll_s=0.01)
        async for p in progress:
            if p.message.startswith("creating nodegroup"):
                await progress.aclose()
                return

    asyncio.run(stop_after_first_nodegroup())

    run_all(create_native(aws, make_plan(vpc), record, kubeconfig=tmp_path / "kc", poll_s=0.01))
    assert moto_gaps.calls[("eks", "CreateCluster")] == 1
    assert moto_gaps.calls[("iam", "CreateRole")] == 4  # cluster, node, s3, efs-csi: each once
    assert moto_gaps.calls[("iam", "CreateOpenIDConnectProvider")] == 1
    assert moto_gaps.calls[("eks", "CreateNodegroup")] == 3  # the refused one, system, then gpu on the re-run
    assert ClusterRecord.load(tmp_path / "state", "demo").state == "created"


@pytest.mark.slow
def test_delete_leaves_nothing_tagged_and_runs_twice(tmp_path, aws_env, moto_gaps, vpc, kube):
    aws = AwsSession(REGION)
    record = ClusterRecord.open(tmp_path / "state", "demo", REGION)
    kubeconfig = tmp_path / "kc"
    run_all(create_native(aws, make_plan(vpc), record, kubeconfig=kubeconfig, poll_s=0.01))
    assert len(tagged_everywhere("demo")) == 8  # 4 roles, the OIDC provider, 2 launch templates, the cluster
    progress = run_all(delete_cluster(aws, "demo", record, poll_s=0.01))
    order = [p.phase for p in progress if p.kind == "step"]
    assert (
        order.index("add-ons")
        < order.index("nodegroups")
        < order.index("cluster")
        < order.index("oidc")
        < order.index("roles")
    )
    assert tagged_everywhere("demo") == []
    assert aws.call("eks", "list_clusters")["clusters"] == []
    assert "torchdeck-demo" not in kubeconfig.read_text()
    saved = ClusterRecord.load(tmp_path / "state", "demo")
    assert saved.state == "deleted" and Ledger(tmp_path / "state").resources(scope="demo") == []
    again = run_all(delete_cluster(aws, "demo", record, poll_s=0.01))
    assert [p.kind for p in again] == ["done"]


@pytest.mark.slow
def test_the_endpoint_can_be_narrowed_or_private_and_pods_kept_from_imds(tmp_path, aws_env, moto_gaps, vpc, kube):
    """Issue 16 row 12: the public endpoint takes publicAccessCidrs (or none at all), and the
    metadata hop limit is 1 unless pods are let through on purpose."""
    aws = AwsSession(REGION)
    record = ClusterRecord.open(tmp_path / "state", "demo", REGION)
    plan = make_plan(vpc, public_access_cidrs=["203.0.113.7/32", "198.51.100.0/24"], pod_imds=True)
    run_all(create_native(aws, plan, record, kubeconfig=tmp_path / "kc", poll_s=0.01))
    config = aws.call("eks", "describe_cluster", name="demo")["cluster"]["resourcesVpcConfig"]
    assert config["publicAccessCidrs"] == ["203.0.113.7/32", "198.51.100.0/24"]
    group = aws.call("eks", "describe_nodegroup", clusterName="demo", nodegroupName="gpu")["nodegroup"]
    (version,) = aws.call("ec2", "describe_launch_template_versions", LaunchTemplateId=group["launchTemplate"]["id"])[
        "LaunchTemplateVersions"
    ]
    assert version["LaunchTemplateData"]["MetadataOptions"]["HttpPutResponseHopLimit"] == 2  # asked for
    private = make_plan(vpc, name="inside", private_endpoint=True)
    run_all(
        create_native(
            aws,
            private,
            ClusterRecord.open(tmp_path / "state", "inside", REGION),
            kubeconfig=tmp_path / "kc2",
            poll_s=0.01,
        )
    )
    config = aws.call("eks", "describe_cluster", name="inside")["cluster"]["resourcesVpcConfig"]
    assert config["endpointPublicAccess"] is False and config["endpointPrivateAccess"] is True


# -- AWS's failures -----------------------------------------------------------------------


@pytest.mark.slow
def test_throttling_is_retried_a_bounded_number_of_times(aws_env, moto_gaps, vpc):
    aws = AwsSession(REGION, max_attempts=4)
    moto_gaps.fail("ec2", "DescribeSubnets", "RequestLimitExceeded", times=2)
    assert len(aws.call("ec2", "describe_subnets", SubnetIds=list(vpc[1].values()))["Subnets"]) == 2
    assert moto_gaps.calls[("ec2", "DescribeSubnets")] == 3
    moto_gaps.calls.clear()
    moto_gaps.fail("eks", "DescribeCluster", "ThrottlingException", times=10, message="Rate exceeded")
    with pytest.raises(AwsError) as err:
        aws.call("eks", "describe_cluster", name="demo")
    assert moto_gaps.calls[("eks", "DescribeCluster")] == 4
    assert str(err.value) == (
        "AWS kept throttling eks.describe_cluster (4 attempts): Rate exceeded (hint: AWS is "
        "rate-limiting this account; wait a minute and run it again (it resumes))"
    )


def test_no_credentials_is_one_line_with_a_hint(tmp_path, aws_env, monkeypatch):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    (tmp_path / "cluster.yaml").write_text(plan_to_yaml(make_plan()))
    code, out, err = cli("cluster", "plan", "--file", str(tmp_path / "cluster.yaml"), state=tmp_path)
    assert code == 1 and err == (
        "torchdeck: error: no AWS credentials found (hint: run `aws configure` or `aws sso "
        "login`, or set AWS_PROFILE (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY))\n"
    )


# -- connect and the token ----------------------------------------------------------------


@pytest.mark.slow
def test_connect_writes_an_exec_context_and_the_backend_works_on_it(tmp_path, aws_env, vpc, kube):
    aws = AwsSession(REGION)
    eks_cluster_made_elsewhere(aws, vpc, tags={TAG: "demo"})
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "other",
                "contexts": [{"name": "other", "context": {"cluster": "o", "user": "o"}}],
                "clusters": [{"name": "o", "cluster": {"server": "https://o"}}],
                "users": [{"name": "o", "user": {"token": "kept"}}],
            }
        )
    )
    code, out, err = cli(
        "cluster", "connect", "--name", "demo", "--region", REGION, "--kubeconfig", str(kubeconfig), state=tmp_path
    )
    assert code == 0, err
    assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
    config = yaml.safe_load(kubeconfig.read_text())
    assert config["current-context"] == "torchdeck-demo"
    assert {c["name"] for c in config["contexts"]} == {"other", "torchdeck-demo"}
    user = next(u["user"] for u in config["users"] if u["name"] == "torchdeck-demo")
    assert set(user) == {"exec"} and user["exec"]["args"][-5:] == ["token", "--name", "demo", "--region", REGION]
    assert "testing" not in kubeconfig.read_text()  # no key, no secret

    # the official client runs the exec command, gets a token, and the backend lists runs on the cluster
    from kubernetes import client
    from kubernetes import config as kube_config

    cfg = client.Configuration()
    kube_config.load_kube_config(config_file=str(kubeconfig), context="torchdeck-demo", client_configuration=cfg)
    assert cfg.api_key["BearerToken"].startswith("Bearer k8s-aws-v1.")
    assert KubernetesBackend(kubeconfig, "torchdeck-demo").list() == []


def test_the_token_is_a_presigned_sts_call_bound_to_the_cluster(aws_env):
    credential: Any = eks_token(AwsSession(REGION), "demo")
    assert credential["kind"] == "ExecCredential" and credential["apiVersion"] == "client.authentication.k8s.io/v1beta1"
    token = credential["status"]["token"]
    assert token.startswith("k8s-aws-v1.")
    body = token.removeprefix("k8s-aws-v1.")
    url = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    assert query["Action"] == ["GetCallerIdentity"] and query["X-Amz-Expires"] == ["60"]
    assert "x-k8s-aws-id" in query["X-Amz-SignedHeaders"][0].split(";")


# -- the whole life from the command line, with canary credentials ----------------------------


@pytest.mark.slow
def test_the_command_line_life_of_a_cluster_leaks_no_credential(tmp_path, aws_env, moto_gaps, vpc, kube, monkeypatch):
    canaries = {
        "AWS_ACCESS_KEY_ID": "AKIACANARY0000000001",
        "AWS_SECRET_ACCESS_KEY": "canary-secret-9f8e7d6c5b4a",
        "AWS_SESSION_TOKEN": "canary-session-token-1a2b3c4d5e",
    }
    for key, value in canaries.items():
        monkeypatch.setenv(key, value)
    moto_gaps.quotas.update({"L-DB2E81BA": 64, "L-1216C47A": 64})
    state, kubeconfig, plan_file = tmp_path / "state", tmp_path / "kubeconfig", tmp_path / "cluster.yaml"
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    env = {
        **os.environ,
        "TORCHDECK_STATE_DIR": str(state),
        "TORCHDECK_AWS_POLL_S": "0.05",
        "PATH": "/usr/bin:/bin",
    }  # no eksctl: the native path
    outputs = []

    def run(*argv: str) -> subprocess.CompletedProcess:
        done = run_cli(argv, env, tmp_path, timeout=120)
        outputs.append(done.stdout + done.stderr)
        return done

    subnet_args = [f"--subnet={zone}={sid}" for zone, sid in vpc[1].items()]
    done = run(
        "cluster",
        "init",
        "--name",
        "demo",
        "--region",
        REGION,
        "--zones",
        f"{REGION}a,{REGION}b",
        "--vpc-id",
        vpc[0],
        *subnet_args,
        "--worker",
        "gpu:g5.xlarge:0:1:2:gpu",
        "--bucket",
        "torchdeck-models",
    )
    assert done.returncode == 0, done.stderr
    done = run("cluster", "create", "--yes")
    assert done.returncode == 0, done.stderr
    assert "with native" in done.stdout and "] kubernetes       service account default/torchdeck-s3" in done.stdout
    # nodes join (kmock: posted the way kubelets register), then status shows their readiness
    for name, ready in (("ip-10-0-1-10", "True"), ("ip-10-0-2-20", "False")):
        KubernetesBackend(kubeconfig, "torchdeck-demo").client.request(
            "POST",
            "api/v1/nodes",
            body={
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {"eks.amazonaws.com/nodegroup": "gpu", "node.kubernetes.io/instance-type": "g5.xlarge"},
                },
                "status": {
                    "allocatable": {"nvidia.com/gpu": "1"},
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": ready,
                            "message": "" if ready == "True" else "container runtime is down",
                        }
                    ],
                },
            },
        )
    done = run("cluster", "status")
    assert done.returncode == 0, done.stderr
    assert "cluster demo  ACTIVE  Kubernetes 1.31  us-east-1  (made by torchdeck)" in done.stdout
    assert "nodes     1/2 ready" in done.stdout and "(container runtime is down)" in done.stdout
    assert "add-ons   aws-efs-csi-driver ACTIVE, metrics-server ACTIVE" in done.stdout
    done = run("--backend", "kubernetes", "--context", "torchdeck-demo", "jobs")
    assert done.returncode == 0, done.stderr
    done = run("cluster", "delete", "--yes")
    assert done.returncode == 0, done.stderr
    assert "cluster demo and everything torchdeck made for it are deleted" in done.stdout
    done = run("cluster", "status")
    assert done.returncode == 1 and "no cluster demo in us-east-1 (deleted)" in done.stderr

    files = [p for p in [*state.rglob("*"), kubeconfig, plan_file] if p.is_file()]
    assert any(p.suffix == ".json" for p in files) and any(p.suffix == ".sqlite" for p in files)
    for secret in canaries.values():
        for text in outputs:
            assert secret not in text
        for path in files:  # the ledger is SQLite: compare bytes
            assert secret.encode() not in path.read_bytes(), path


# -- the eksctl path ------------------------------------------------------------------------


@pytest.mark.slow
def test_the_eksctl_path_streams_its_output_and_the_stack_events(tmp_path, aws_env, moto_gaps, kube):
    bin_dir = path_with(tmp_path / "bin", {"eksctl": [sys.executable, str(STANDIN)]})
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "TORCHDECK_STATE_DIR": str(tmp_path / "state"),
        "TORCHDECK_AWS_POLL_S": "0.05",
        "KUBECONFIG": str(tmp_path / "kubeconfig"),
        "STANDIN_EKSCTL_LOG": str(tmp_path / "eksctl.log"),
        "STANDIN_EKSCTL_FAIL": "nodegroup",
    }
    moto_gaps.quotas.update({"L-DB2E81BA": 64, "L-1216C47A": 64})
    (tmp_path / "cluster.yaml").write_text(plan_to_yaml(make_plan(s3_bucket=None)))

    def run(*argv: str) -> subprocess.CompletedProcess:
        return run_cli(argv, env, tmp_path, timeout=120)

    done = run("cluster", "create", "--yes")
    assert done.returncode == 1
    assert "with eksctl" in done.stdout
    assert "  |  " in done.stdout and 'building cluster stack "eksctl-demo-cluster"' in done.stdout
    assert "cfn  eksctl-demo-cluster: eksctl-demo-cluster CREATE_COMPLETE" in done.stdout
    assert done.stderr.startswith("torchdeck: error: eksctl create cluster failed (exit 1)")
    env.pop("STANDIN_EKSCTL_FAIL")
    done = run("cluster", "create", "--yes")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert not any("eksctl-demo-cluster CREATE" in line for line in lines)  # the first run's events are not news
    assert any(" nodegroups  " in line and "eksctl-demo-nodegroup-gpu" in line for line in lines)
    assert any("cfn  eksctl-demo-nodegroup-system:" in line for line in lines)
    assert "context torchdeck-demo" in done.stdout
    log = (tmp_path / "eksctl.log").read_text().splitlines()
    assert log == [
        "create cluster --config-file cluster.yaml",
        "create nodegroup --config-file cluster.yaml",
        "create addon --config-file cluster.yaml",
    ]
    record = json.loads((tmp_path / "state" / "clusters" / "demo.json").read_text())
    assert record["method"] == "eksctl" and record["state"] == "created"
    assert "eksctl-demo-cluster" in ClusterRecord.load(tmp_path / "state", "demo").of_type("cloudformation-stack")

    done = run("cluster", "delete", "--yes")
    assert done.returncode == 0, done.stderr
    assert "$ delete cluster --name demo --region us-east-1 --wait" in done.stdout
    aws = AwsSession(REGION)
    assert aws.call("eks", "list_clusters")["clusters"] == []
    live = [
        s["StackName"]
        for s in aws.call("cloudformation", "describe_stacks")["Stacks"]
        if s["StackStatus"] != "DELETE_COMPLETE"
    ]
    assert live == []


def test_a_broken_kubeconfig_is_named_without_its_contents(tmp_path):
    """Issue 16 row 8: the YAML error quoted the file's lines, the token with them."""
    from torchdeck.backends.eks.access import remove_context

    kubeconfig = tmp_path / "config"
    kubeconfig.write_text("users:\n- name: me\n  user:\n    token: SECRET-TOKEN-123\n  bad: [unclosed\n")
    with pytest.raises(BackendError) as caught:
        remove_context(kubeconfig, "demo")
    assert "not a readable kubeconfig" in str(caught.value) and "SECRET-TOKEN" not in str(caught.value)
    kubeconfig.write_bytes(b"token: SECRET-TOKEN-123\n\xff\xfe")
    with pytest.raises(BackendError) as caught:
        remove_context(kubeconfig, "demo")
    assert "SECRET-TOKEN" not in str(caught.value) and "not text (UTF-8)" in str(caught.value)


@pytest.mark.parametrize(
    "content",
    [
        b"users:\n- name: me\n  user:\n    token: SECRET-TOKEN-123\n  bad: [unclosed\n",
        b"token: SECRET-TOKEN-123\n\xff\xfe",
    ],
    ids=["yaml", "binary"],
)
def test_the_kubernetes_backend_names_a_broken_kubeconfig_in_one_line(tmp_path, content):
    """Issue 16 rows 8 and 13: the official client's loader quoted YAML's lines over three lines, and an
    undecodable file came back as 'cannot reach the cluster' wrapping the kubeconfig's own error."""
    from torchdeck.backends.kubernetes.backend import KubernetesBackend

    kubeconfig = tmp_path / "config"
    kubeconfig.write_bytes(content)
    with pytest.raises(BackendError) as caught:
        KubernetesBackend(kubeconfig).list()
    said = str(caught.value)
    assert said.startswith("cannot use the kubeconfig: ") and "\n" not in said, said
    assert "SECRET-TOKEN" not in said and "cannot reach the cluster" not in said
