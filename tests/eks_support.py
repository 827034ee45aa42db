"""What the EKS tests share: a kmock API server that moto's clusters point
at (``kube``), a VPC with two subnets (``vpc``), a plan in it, a cluster
made from it on the native path (``cluster``), and the stand-in docker
client on the PATH with an engine that answers (``standin_docker``)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from kube_cluster import start_cluster, stop_cluster

from torchdeck.backends.eks.access import ClusterRecord
from torchdeck.backends.eks.create import create_native
from torchdeck.backends.eks.plan import ClusterPlan, NodegroupPlan
from torchdeck.backends.eks.session import AwsSession

REGION = "us-east-1"


@pytest.fixture
def kube(tmp_path: Path, moto_gaps):
    """A kmock API server that the clusters moto makes point at."""
    (tmp_path / "kmock").mkdir()
    cluster, thread = start_cluster(tmp_path / "kmock")
    moto_gaps.cluster_endpoint = cluster.url
    yield cluster
    stop_cluster(cluster, thread)


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
    base = dict(
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
def cluster(tmp_path, aws_env, moto_gaps, vpc, kube) -> ClusterRecord:
    """A cluster made on the native path, its kubeconfig context written; its record in tmp_path/state."""
    record = ClusterRecord.open(tmp_path / "state", "demo", REGION)
    run_progress(create_native(AwsSession(REGION), make_plan(vpc), record, kubeconfig=tmp_path / "kc", poll_s=0.01))
    return record


@pytest.fixture
def standin_docker(tmp_path, monkeypatch) -> Path:
    """tests/standin/docker first on the PATH, its engine answering; returns its call log."""
    log = tmp_path / "docker.log"
    standin = Path(__file__).parent / "standin"
    monkeypatch.setenv("PATH", f"{standin}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_DOCKER_LOG", str(log))
    monkeypatch.setenv("STANDIN_DOCKER_ENGINE", "1")
    return log
