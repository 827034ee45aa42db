"""Planning an EKS cluster offline: every field checked with its reason,
the eksctl ClusterConfig (golden file) and reading it back, the S3 policy
limited to one bucket and prefix, the cost per hour, and
``torchdeck cluster init``. Regenerate the golden file after a deliberate
change with TORCHDECK_UPDATE_GOLDEN=1."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from torchdeck.backends.eks.plan import (
    ClusterPlan,
    NodegroupPlan,
    cost_per_hour,
    from_eksctl,
    load_plan,
    plan_to_yaml,
    to_eksctl,
    validate_plan,
)
from torchdeck.backends.errors import SpecError
from torchdeck.cli.main import main

GOLDEN = Path(__file__).parent.parent / "data" / "golden" / "eks-cluster.yaml"


def plan(**changes) -> ClusterPlan:
    base: dict[str, Any] = dict(
        name="torchdeck-demo",
        region="us-west-2",
        zones=["us-west-2a", "us-west-2b"],
        nodegroups=[
            NodegroupPlan("system", "m5.large", 1, 2, 2, labels={"role": "system"}),
            NodegroupPlan("gpu-workers", "g5.xlarge", 0, 2, 4, gpu=True),
        ],
        s3_bucket="torchdeck-models",
        s3_prefix="cifar10/",
    )
    base.update(changes)
    return ClusterPlan(**base)


def group(**changes) -> NodegroupPlan:
    base: dict[str, Any] = dict(name="workers", instance_type="m5.2xlarge", min_size=1, desired=2, max_size=4)
    base.update(changes)
    return NodegroupPlan(**base)


@pytest.mark.parametrize(
    "name, words",
    [
        ("", "must not be empty"),
        ("-demo", "must start with a letter"),
        ("my_cluster", "has '_'"),
        ("a" * 101, "is 101 characters; EKS allows 100"),
        ("démo", "non-ASCII"),
        ("demo.1", "characters EKS refuses: ."),
    ],
)
def test_bad_cluster_names_say_why(name, words):
    with pytest.raises(SpecError) as err:
        validate_plan(plan(name=name))
    assert err.value.field == "name" and words in str(err.value) and "\n" not in str(err.value)


def test_a_100_character_name_is_fine():
    validate_plan(plan(name="a" * 100))


@pytest.mark.parametrize(
    "changes, field, words",
    [
        ({"region": "oregon"}, "region", "not an AWS region"),
        ({"zones": ["us-east-1a", "us-west-2b"]}, "zones", "not a zone of us-west-2"),
        ({"zones": ["us-west-2a"]}, "zones", "two availability zones"),
        ({"version": "1.12"}, "version", "not a Kubernetes version EKS offers"),
        ({"vpc_id": "vpc-xyz"}, "vpc_id", "not a VPC id"),
        ({"vpc_id": "vpc-0abc1234", "subnets": {"us-west-2a": "subnet-0abc1234"}}, "subnets", "two zones"),
        ({"subnets": {"us-west-2a": "subnet-0abc1234"}}, "subnets", "existing VPC"),
        ({"nodegroups": []}, "nodegroups", "one nodegroup at least"),
        (
            {"nodegroups": [group(min_size=3, desired=3, max_size=2)]},
            "nodegroups[workers].min_size",
            "3 is more than max_size 2",
        ),
        ({"nodegroups": [group(desired=5)]}, "nodegroups[workers].desired", "outside 1..4"),
        (
            {"nodegroups": [group(instance_type="m5.xlarge", gpu=True)]},
            "nodegroups[workers].instance_type",
            "m5.xlarge has no GPU",
        ),
        (
            {"nodegroups": [group(instance_type="g5.xlarge")]},
            "nodegroups[workers].instance_type",
            "g5.xlarge has 1 GPU(s) and the nodegroup asks for none",
        ),
        ({"nodegroups": [group(efa=True)]}, "nodegroups[workers].efa", "does not support EFA"),
        ({"nodegroups": [group(), group()]}, "nodegroups[workers].name", "used twice"),
        ({"nodegroups": [group(instance_type="big")]}, "nodegroups[workers].instance_type", "not an instance type"),
        ({"nodegroups": [group(volume_gib=5)]}, "nodegroups[workers].volume_gib", "20..16384"),
        ({"s3_bucket": "My_Bucket"}, "s3_bucket", "is not a valid bucket name"),
        ({"s3_prefix": "/models/*"}, "s3_prefix", "no leading '/'"),
    ],
)
def test_every_field_is_checked_with_its_reason(changes, field, words):
    with pytest.raises(SpecError) as err:
        validate_plan(plan(**changes))
    assert err.value.field == field and words in str(err.value)


def test_the_plan_is_an_eksctl_cluster_config():
    text = plan_to_yaml(plan())
    if os.environ.get("TORCHDECK_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "the ClusterConfig changed; review it, then TORCHDECK_UPDATE_GOLDEN=1"
    config = yaml.safe_load(text)
    assert (config["apiVersion"], config["kind"]) == ("eksctl.io/v1alpha5", "ClusterConfig")
    assert config["metadata"]["tags"] == {"torchdeck:cluster": "torchdeck-demo"}
    assert config["iam"]["withOIDC"] is True
    system, gpu = config["managedNodeGroups"]
    assert "taints" not in system and gpu["taints"] == [
        {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
    ]
    assert all(g["tags"] == {"torchdeck:cluster": "torchdeck-demo"} for g in config["managedNodeGroups"])
    assert {a["name"] for a in config["addons"]} == {"aws-efs-csi-driver", "metrics-server"}
    assert "&id" not in text  # no YAML anchors: plain to read and to diff


def test_the_service_account_may_use_one_bucket_prefix_only():
    config: Any = to_eksctl(plan())
    (account,) = config["iam"]["serviceAccounts"]
    assert account["metadata"] == {
        "name": "torchdeck-s3",
        "namespace": "default",
        "labels": {"app.kubernetes.io/managed-by": "torchdeck"},
    }
    objects, listing = account["attachPolicy"]["Statement"]
    assert objects["Resource"] == "arn:aws:s3:::torchdeck-models/cifar10/*"
    assert "s3:*" not in objects["Action"] and set(objects["Action"]) >= {"s3:GetObject", "s3:PutObject"}
    assert listing == {
        "Sid": "ListThePrefix",
        "Effect": "Allow",
        "Action": "s3:ListBucket",
        "Resource": "arn:aws:s3:::torchdeck-models",
        "Condition": {"StringLike": {"s3:prefix": ["cifar10/*"]}},
    }


def test_the_config_reads_back_into_the_same_plan(tmp_path):
    original = plan(
        vpc_id="vpc-0abc1234",
        subnets={"us-west-2a": "subnet-0aaa1111", "us-west-2b": "subnet-0bbb2222"},
        nodegroups=[
            NodegroupPlan("system", "m5.large", 1, 2, 2, labels={"role": "system"}),
            NodegroupPlan("big", "p4d.24xlarge", 0, 1, 2, gpu=True, efa=True, spot=True),
        ],
    )
    assert from_eksctl(to_eksctl(original)) == original
    path = tmp_path / "cluster.yaml"
    path.write_text(plan_to_yaml(original))
    assert load_plan(path) == original
    path.write_text(plan_to_yaml(original).replace("minSize: 0", "minSize: 5"))
    with pytest.raises(SpecError) as err:
        load_plan(path)
    assert str(path) in str(err.value) and "nodegroups[big].min_size" in str(err.value)


def test_cost_per_hour_from_the_shipped_table():
    lines, total, notes = cost_per_hour(plan())
    assert [line.what for line in lines] == ["EKS control plane", "system: 2 x m5.large", "gpu-workers: 2 x g5.xlarge"]
    assert total == pytest.approx(0.10 + 2 * 0.096 + 2 * 1.006)
    assert any("NAT gateway" in n for n in notes)
    unknown = plan(nodegroups=[group(instance_type="x9.large")])
    lines, total, notes = cost_per_hour(unknown)
    assert lines[1].total is None and total == pytest.approx(0.10)
    assert any("x9.large is not in the shipped price table" in n for n in notes)


def test_cluster_init_writes_the_plan_and_its_cost(tmp_path, capsys):
    path = tmp_path / "cluster.yaml"
    argv = [
        "cluster",
        "init",
        "--file",
        str(path),
        "--name",
        "demo",
        "--region",
        "us-west-2",
        "--zones",
        "us-west-2a,us-west-2b",
        "--worker",
        "gpu-workers:g5.xlarge:0:2:4:gpu",
        "--bucket",
        "my-models",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "wrote" in out and "gpu-workers: 2 x g5.xlarge" in out and "$2.30/h" in out
    assert load_plan(path).nodegroups[1].gpu is True
    assert main(argv) == 1 and "exists; pass --force" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    for extra, words in (
        (["--worker", "gpu:m5.large:0:1:2:gpu"], "m5.large has no GPU"),
        (["--worker", "w:m5.large:a:1:2"], "whole numbers"),
        (["--worker", "w:m5.large:0:1:2:fast"], "unknown flag 'fast'"),
    ):
        code = main(["cluster", "init", "--file", str(bad), "--name", "demo", "--region", "us-west-2", *extra])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and words in err
        assert not bad.exists()  # a bad plan writes nothing


EKSCTL_SCHEMA = Path(__file__).parent.parent / "data" / "eksctl" / "schema.json"


@pytest.mark.parametrize(
    "changes",
    [{}, {"public_access_cidrs": ["203.0.113.7/32", "198.51.100.0/24"]}, {"private_endpoint": True, "pod_imds": True}],
    ids=["default", "narrowed", "private"],
)
def test_the_cluster_config_passes_eksctls_own_schema_and_reads_back(changes):
    """Checked against eksctl's schema (tests/data/eksctl/SOURCES.json), not one written here: its
    additionalProperties: false catches a misspelled key such as publicAccessCidrs."""
    import jsonschema
    from eks_support import make_plan

    from torchdeck.backends.eks.plan import from_eksctl

    validator = jsonschema.Draft7Validator(json.loads(EKSCTL_SCHEMA.read_text()))
    plan = make_plan(**changes)
    config = json.loads(json.dumps(to_eksctl(plan)))
    assert [e.message for e in validator.iter_errors(config)] == []
    misspelled = {**config, "vpc": {"publicAccessCidrs": ["203.0.113.7/32"]}}
    assert list(validator.iter_errors(misspelled))  # the schema is strict enough to catch it
    groups = config["managedNodeGroups"]
    assert all(g["disableIMDSv1"] is True and g["disablePodIMDS"] is (not plan.pod_imds) for g in groups)
    again = from_eksctl(config)
    assert (again.public_access_cidrs, again.private_endpoint, again.pod_imds) == (
        plan.public_access_cidrs,
        plan.private_endpoint,
        plan.pod_imds,
    )
