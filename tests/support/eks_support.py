"""What the EKS tests share: a kmock API server that moto's clusters point
at (``kube``), a VPC with two subnets (``vpc``), a plan in it, a cluster
made from it on the native path (``cluster``), and the stand-in docker
client on the PATH with an engine that answers (``standin_docker``)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
from pathlib import Path
from typing import Any

import pytest
from kube_cluster import start_cluster, stop_cluster

from torchdeck.backends.eks.access import ClusterRecord
from torchdeck.backends.eks.create import create_native
from torchdeck.backends.eks.plan import ClusterPlan, NodegroupPlan
from torchdeck.backends.eks.session import AwsSession
from torchdeck.cli.main import main as torchdeck_main

REGION = "us-east-1"


@pytest.fixture
def kube(tmp_path: Path, moto_gaps):
    """A kmock API server that the clusters moto makes point at."""
    (tmp_path / "kmock").mkdir()
    server, thread = start_cluster(tmp_path / "kmock")
    moto_gaps.cluster_endpoint = server.url
    yield server
    stop_cluster(server, thread)


@pytest.fixture
def vpc(aws_env) -> tuple[str, dict[str, str]]:
    aws = AwsSession(REGION)
    vpc_id = aws.call("ec2", "create_vpc", CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = {
        zone: aws.call("ec2", "create_subnet", VpcId=vpc_id, CidrBlock=cidr, AvailabilityZone=zone)["Subnet"][
            "SubnetId"
        ]
        for zone, cidr in ((f"{REGION}a", "10.0.1.0/24"), (f"{REGION}b", "10.0.2.0/24"))
    }
    return vpc_id, subnets


def make_plan(vpc: tuple[str, dict[str, str]] | None = None, name: str = "demo", **changes: Any) -> ClusterPlan:
    vpc_id, subnets = vpc or (None, {})
    base: dict[str, Any] = dict(
        name=name,
        region=REGION,
        zones=sorted(subnets) or [f"{REGION}a", f"{REGION}b"],
        vpc_id=vpc_id,
        subnets=subnets,
        s3_bucket="torchdeck-models",
        s3_prefix="cifar10/",
        nodegroups=[NodegroupPlan("system", "m5.large", 1, 2, 2), NodegroupPlan("gpu", "g5.xlarge", 0, 1, 2, gpu=True)],
    )
    base.update(changes)
    return ClusterPlan(**base)


def run_progress(progress) -> list[Any]:
    """Every event of an async Progress stream, in order."""

    async def collect():
        return [p async for p in progress]

    return asyncio.run(collect())


@pytest.fixture
def eks_cluster(tmp_path, aws_env, moto_gaps, vpc, kube) -> ClusterRecord:
    """A cluster made on the native path, its kubeconfig context written; its record in tmp_path/state."""
    record = ClusterRecord.open(tmp_path / "state", "demo", REGION)
    run_progress(create_native(AwsSession(REGION), make_plan(vpc), record, kubeconfig=tmp_path / "kc", poll_s=0.01))
    return record


@pytest.fixture
def standin_docker(tmp_path, monkeypatch) -> Path:
    """tests/support/standin/docker first on the PATH, its engine answering; returns its call log."""
    log = tmp_path / "docker.log"
    standin = Path(__file__).parent / "standin"
    monkeypatch.setenv("PATH", f"{standin}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_DOCKER_LOG", str(log))
    monkeypatch.setenv("STANDIN_DOCKER_ENGINE", "1")
    return log


def cli(*argv: str, state: Path) -> tuple[int, str, str]:
    """torchdeck in this process (moto's server is in it too); (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    os.environ["TORCHDECK_STATE_DIR"] = str(state)
    os.environ["TORCHDECK_AWS_POLL_S"] = "0.05"
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = torchdeck_main(list(argv))
    finally:
        os.environ.pop("TORCHDECK_STATE_DIR")
        os.environ.pop("TORCHDECK_AWS_POLL_S")
    return code, out.getvalue(), err.getvalue()


def everything_left(aws: AwsSession) -> list[str]:
    """What torchdeck could have made that is still in moto."""
    left = [f"cluster {c}" for c in aws.call("eks", "list_clusters")["clusters"]]
    left += [f"role {r['RoleName']}" for r in aws.pages("iam", "list_roles", "Roles")]
    left += [f"oidc {p['Arn']}" for p in aws.call("iam", "list_open_id_connect_providers")["OpenIDConnectProviderList"]]
    left += [
        f"sg {g['GroupName']}"
        for g in aws.pages("ec2", "describe_security_groups", "SecurityGroups")
        if g["GroupName"] != "default"
    ]
    left += [f"efs {f['FileSystemId']}" for f in aws.call("efs", "describe_file_systems")["FileSystems"]]
    left += [f"fsx {f['FileSystemId']}" for f in aws.call("fsx", "describe_file_systems")["FileSystems"]]
    left += [f"bucket {b['Name']}" for b in aws.call("s3", "list_buckets")["Buckets"]]
    left += [
        f"launch template {t['LaunchTemplateName']}"
        for t in aws.call("ec2", "describe_launch_templates")["LaunchTemplates"]
    ]
    left += [f"ecr {r['repositoryName']}" for r in aws.call("ecr", "describe_repositories")["repositories"]]
    left += [f"stack {s['StackName']}" for s in aws.pages("cloudformation", "describe_stacks", "Stacks")]
    return left
