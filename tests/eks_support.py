"""What the EKS tests share: a kmock API server that moto's clusters point
at (``kube``), a VPC with two subnets (``vpc``), and a plan in it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from torchdeck.backends.aws import AwsSession
from torchdeck.backends.eks_plan import ClusterPlan, NodegroupPlan

from kube_cluster import start_cluster, stop_cluster

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
    subnets = {zone: aws.call("ec2", "create_subnet", VpcId=vpc_id, CidrBlock=cidr,
                              AvailabilityZone=zone)["Subnet"]["SubnetId"]
               for zone, cidr in ((f"{REGION}a", "10.0.1.0/24"), (f"{REGION}b", "10.0.2.0/24"))}
    return vpc_id, subnets


def make_plan(vpc: tuple[str, dict[str, str]] | None = None, name: str = "demo", **changes: Any) -> ClusterPlan:
    vpc_id, subnets = vpc or (None, {})
    base = dict(name=name, region=REGION, zones=sorted(subnets) or [f"{REGION}a", f"{REGION}b"], vpc_id=vpc_id,
                subnets=subnets, s3_bucket="torchdeck-models", s3_prefix="cifar10/",
                nodegroups=[NodegroupPlan("system", "m5.large", 1, 2, 2),
                            NodegroupPlan("gpu", "g5.xlarge", 0, 1, 2, gpu=True)])
    base.update(changes)
    return ClusterPlan(**base)


