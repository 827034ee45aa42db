"""Shared storage and the model bucket for an EKS cluster, against moto's
server mode and a kmock API server (tests/support/eks_support.py): EFS with its
security group, mount targets and claim; FSx for Lustre and its deadline;
the bucket's privacy and policies; the manifests against golden files.
Regenerate those after a deliberate change with TORCHDECK_UPDATE_GOLDEN=1."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from eks_support import REGION
from eks_support import run_progress as run_all

from torchdeck.backends.eks.access import ClusterRecord
from torchdeck.backends.eks.progress import FileSystemReady, StorageReady
from torchdeck.backends.eks.session import AwsSession
from torchdeck.backends.eks.storage import create_storage, render_storage
from torchdeck.backends.eks.storage_plan import StoragePlan
from torchdeck.backends.eks.storage_state import storage_state
from torchdeck.backends.errors import BackendError, SpecError
from torchdeck.backends.kubernetes.backend import KubernetesBackend
from torchdeck.backends.ledger import Ledger

pytestmark = pytest.mark.slow  # the fast lane (./scripts/test --fast) leaves these out

GOLDEN = Path(__file__).parent.parent / "data" / "golden"


def storage(record: ClusterRecord, **changes: Any) -> list[Any]:
    plan = StoragePlan("demo", REGION, **changes)
    return run_all(create_storage(AwsSession(REGION), plan, record, poll_s=0.01, timeout_s=5))


def kube_object(kube, path: str) -> dict[str, Any] | None:
    """The object at an API path, through kmock's own kubeconfig; None if there is none."""
    from torchdeck.backends.kubernetes.client import ApiError

    try:
        return KubernetesBackend(kube.kubeconfig).client.request("GET", path)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def test_efs_has_a_mount_target_per_node_subnet_and_admits_nfs_from_the_cluster_only(eks_cluster, vpc, kube):
    progress = storage(eks_cluster)
    aws = AwsSession(REGION)
    (fs,) = aws.call("efs", "describe_file_systems")["FileSystems"]
    assert fs["Encrypted"] is True and fs["LifeCycleState"] == "available"
    targets = aws.call("efs", "describe_mount_targets", FileSystemId=fs["FileSystemId"])["MountTargets"]
    _, subnets = vpc
    assert sorted(t["SubnetId"] for t in targets) == sorted(subnets.values())

    cluster_sg = aws.call("eks", "describe_cluster", name="demo")["cluster"]["resourcesVpcConfig"][
        "clusterSecurityGroupId"
    ]
    (group,) = aws.call(
        "ec2", "describe_security_groups", Filters=[{"Name": "group-name", "Values": ["torchdeck-demo-efs"]}]
    )["SecurityGroups"]
    rules = group["IpPermissions"]
    assert [(r["IpProtocol"], r["FromPort"], r["ToPort"]) for r in rules] == [("tcp", 2049, 2049)]
    assert [p["GroupId"] for p in rules[0]["UserIdGroupPairs"]] == [cluster_sg]
    assert not rules[0].get("IpRanges") and not rules[0].get("Ipv6Ranges")
    for target in targets:
        sgs = aws.call("efs", "describe_mount_target_security_groups", MountTargetId=target["MountTargetId"])
        assert sgs["SecurityGroups"] == [group["GroupId"]]

    pvc = kube_object(kube, "api/v1/namespaces/default/persistentvolumeclaims/shared")
    pv = kube_object(kube, "api/v1/persistentvolumes/torchdeck-demo-efs")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"] and pvc["spec"]["volumeName"] == "torchdeck-demo-efs"
    assert pv["spec"]["csi"] == {"driver": "efs.csi.aws.com", "volumeHandle": fs["FileSystemId"]}
    assert kube_object(kube, "apis/storage.k8s.io/v1/storageclasses/torchdeck-efs")["provisioner"] == "efs.csi.aws.com"
    assert progress[-1].kind == "done" and "--set cluster.pvc=shared" in progress[-1].message

    kinds = sorted({r.kind for r in Ledger(eks_cluster.path.parent.parent).resources(scope="demo")})
    assert {"efs-filesystem", "efs-mount-target", "ec2-security-group", "k8s-object"} <= set(kinds)
    state = storage_state(aws, eks_cluster)
    assert state.problems == [] and [(f.kind, f.ident, f.state, f.encrypted) for f in state.file_systems] == [
        ("efs", fs["FileSystemId"], "available", True)
    ]
    assert len(state.file_systems[0].mount_targets) == len(targets)
    assert [(r.protocol, r.low, r.high, r.source) for r in state.security_groups[0].rules] == [
        ("tcp", 2049, 2049, cluster_sg)
    ]
    assert progress[-1].result == StorageReady("demo", {"cluster.pvc": "shared"})


def test_a_second_storage_create_makes_nothing_and_puts_back_a_widened_rule(eks_cluster, moto_gaps):
    storage(eks_cluster)
    aws = AwsSession(REGION)
    (group,) = aws.call(
        "ec2", "describe_security_groups", Filters=[{"Name": "group-name", "Values": ["torchdeck-demo-efs"]}]
    )["SecurityGroups"]
    aws.call(
        "ec2",
        "authorize_security_group_ingress",
        GroupId=group["GroupId"],
        IpPermissions=[{"IpProtocol": "tcp", "FromPort": 2049, "ToPort": 2049, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}],
    )
    moto_gaps.calls.clear()
    storage(eks_cluster)
    made = {k for k, n in moto_gaps.calls.items() if k[1].startswith("Create") and n}
    assert made == set()
    rules = aws.call("ec2", "describe_security_groups", GroupIds=[group["GroupId"]])["SecurityGroups"][0][
        "IpPermissions"
    ]
    assert all(not r.get("IpRanges") for r in rules)


def test_the_bucket_is_private_encrypted_and_the_policies_name_only_the_bucket_and_prefix(eks_cluster):
    storage(eks_cluster, kind="none", bucket="torchdeck-models-demo", prefix="cifar10")
    aws = AwsSession(REGION)
    block = aws.call("s3", "get_public_access_block", Bucket="torchdeck-models-demo")["PublicAccessBlockConfiguration"]
    assert block == {
        "BlockPublicAcls": True,
        "IgnorePublicAcls": True,
        "BlockPublicPolicy": True,
        "RestrictPublicBuckets": True,
    }
    rules = aws.call("s3", "get_bucket_encryption", Bucket="torchdeck-models-demo")[
        "ServerSideEncryptionConfiguration"
    ]["Rules"]
    assert rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"

    bucket_policy = json.loads(aws.call("s3", "get_bucket_policy", Bucket="torchdeck-models-demo")["Policy"])
    role_policy = aws.call("iam", "get_role_policy", RoleName="torchdeck-demo-s3", PolicyName="torchdeck")[
        "PolicyDocument"
    ]
    for policy in (bucket_policy, role_policy):
        resources = [
            res
            for st in policy["Statement"]
            for res in ([st["Resource"]] if isinstance(st["Resource"], str) else st["Resource"])
        ]
        assert resources and "*" not in resources
        assert all(
            res in ("arn:aws:s3:::torchdeck-models-demo", "arn:aws:s3:::torchdeck-models-demo/cifar10/*")
            for res in resources
        ), resources
    role_arn = aws.call("iam", "get_role", RoleName="torchdeck-demo-s3")["Role"]["Arn"]
    principals = {st["Sid"]: st["Principal"] for st in bucket_policy["Statement"]}
    # Issue 16 row 7: plain HTTP is refused to everyone, not only to the role
    assert principals == {"TrainingObjects": {"AWS": role_arn}, "TrainingList": {"AWS": role_arn}, "TlsOnly": "*"}
    controls = aws.call("s3", "get_bucket_ownership_controls", Bucket="torchdeck-models-demo")["OwnershipControls"]
    assert controls == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}  # no ACLs: the account owns all


def test_every_s3_call_on_a_bucket_names_the_account_that_must_own_it(eks_cluster, tmp_path):
    """Issue 16 row 7: bucket names are global; a call on a bucket someone else re-made must fail,
    so each request carries x-amz-expected-bucket-owner (seen on the wire, as S3 receives it)."""
    aws = AwsSession(REGION)
    sent: list[tuple[str, str | None]] = []

    def record(model, params, **_):
        if "owned-bucket" in params["url_path"] or "owned-bucket" in params["url"]:
            sent.append((model.name, params["headers"].get("x-amz-expected-bucket-owner")))

    aws.client("s3").meta.events.register("before-call.s3", record)
    run_all(
        create_storage(aws, StoragePlan("demo", REGION, kind="none", bucket="owned-bucket"), eks_cluster, poll_s=0.01)
    )
    aws.call("s3", "put_object", Bucket="owned-bucket", Key="models/m.pt", Body=b"x")
    aws.call("s3", "download_file", Bucket="owned-bucket", Key="models/m.pt", Filename=str(tmp_path / "m.pt"))
    account = aws.call("sts", "get_caller_identity")["Account"]
    operations = {name for name, _ in sent}
    assert {
        "HeadBucket",
        "CreateBucket",
        "PutBucketPolicy",
        "PutBucketOwnershipControls",
        "PutObject",
        "GetObject",
    } <= operations
    assert [name for name, owner in sent if owner != account] == ["CreateBucket"], sent  # the one call without it


def test_a_bucket_torchdeck_did_not_make_is_used_as_it_is_and_kept(eks_cluster):
    aws = AwsSession(REGION)
    aws.call("s3", "create_bucket", Bucket="someone-elses")
    progress = storage(eks_cluster, kind="none", bucket="someone-elses")
    assert any("torchdeck did not make it" in p.message for p in progress)
    assert aws.find("s3", "get_public_access_block", Bucket="someone-elses") is None  # untouched
    assert aws.find("s3", "get_bucket_policy", Bucket="someone-elses") is None
    (row,) = [r for r in Ledger(eks_cluster.path.parent.parent).resources() if r.kind == "s3-bucket"]
    assert row.made is False


def test_fsx_waits_for_available_and_renders_its_volume(eks_cluster, moto_gaps, kube):
    progress = storage(eks_cluster, kind="fsx", fsx_deployment="PERSISTENT_2", fsx_capacity_gib=2400)
    aws = AwsSession(REGION)
    (fs,) = aws.call("fsx", "describe_file_systems")["FileSystems"]
    assert fs["LustreConfiguration"]["DeploymentType"] == "PERSISTENT_2"
    assert fs["LustreConfiguration"]["PerUnitStorageThroughput"] == 125
    assert any(p.kind == "wait" and "CREATING" in p.message for p in progress)
    pv = kube_object(kube, "api/v1/persistentvolumes/torchdeck-demo-fsx")
    assert pv["spec"]["csi"]["volumeAttributes"] == {
        "dnsname": fs["DNSName"],
        "mountname": fs["LustreConfiguration"]["MountName"],
    }
    assert aws.call("eks", "describe_addon", clusterName="demo", addonName="aws-fsx-csi-driver")["addon"][
        "serviceAccountRoleArn"
    ].endswith("role/torchdeck-demo-fsx-csi")
    assert attached(aws, "torchdeck-demo-fsx-csi") == {"AmazonFSxReadOnlyAccess"}  # static volumes: it only reads
    (row,) = [r for r in Ledger(eks_cluster.path.parent.parent).resources() if r.kind == "fsx-filesystem"]
    assert row.cost_per_hour == pytest.approx(2400 * 0.145 / 730)


def attached(aws: AwsSession, role: str) -> set[str]:
    return {
        p["PolicyArn"].rsplit("/", 1)[-1]
        for p in aws.call("iam", "list_attached_role_policies", RoleName=role)["AttachedPolicies"]
    }


def test_the_fsx_driver_role_loses_the_full_access_an_earlier_torchdeck_gave_it(eks_cluster, kube):
    """Issue 16 row 6: AmazonFSxFullAccess let the driver delete any file system in the account."""
    aws = AwsSession(REGION)
    storage(eks_cluster, kind="fsx")
    role = "torchdeck-demo-fsx-csi"
    aws.call("iam", "attach_role_policy", RoleName=role, PolicyArn="arn:aws:iam::aws:policy/AmazonFSxFullAccess")
    aws.call("iam", "attach_role_policy", RoleName=role, PolicyArn="arn:aws:iam::aws:policy/CloudWatchReadOnlyAccess")
    storage(eks_cluster, kind="fsx")
    assert attached(aws, role) == {"AmazonFSxReadOnlyAccess", "CloudWatchReadOnlyAccess"}  # a person's own stays


def test_a_wait_that_never_ends_stops_at_its_deadline_with_a_message(eks_cluster, moto_gaps):
    moto_gaps.fsx_ready_after = None
    with pytest.raises(BackendError) as caught:
        run_all(
            create_storage(
                AwsSession(REGION), StoragePlan("demo", REGION, kind="fsx"), eks_cluster, poll_s=0.01, timeout_s=0.3
            )
        )
    assert "is still CREATING after 0 s" in caught.value.message
    assert "picks up where it stopped" in caught.value.hint


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"kind": "nfs"}, "--kind: must be efs, fsx or none"),
        ({"kind": "fsx", "fsx_capacity_gib": 1000}, "1000 GiB is not a capacity SCRATCH_2 offers"),
        ({"kind": "fsx", "fsx_deployment": "PERSISTENT_1", "fsx_throughput": 125}, "offers 50, 100, 200 MB/s"),
        ({"kind": "fsx", "fsx_s3_link": "https://x"}, "is not an s3:// URL"),
        (
            {"kind": "fsx", "fsx_deployment": "PERSISTENT_2", "fsx_s3_link": "s3://data-bucket/x"},
            "data repository associations",
        ),
        ({"bucket": "My_Bucket"}, "is not a valid bucket name"),
        ({"bucket": "192.168.1.1"}, "must not look like an IP address"),
        ({"prefix": "/models"}, "no leading '/'"),
        ({"kind": "none"}, "nothing to make"),
    ],
)
def test_bad_storage_plans_are_one_line_before_any_call(tmp_path, aws_env, moto_gaps, changes, words):
    record = ClusterRecord.open(tmp_path, "demo", REGION)
    with pytest.raises(SpecError, match=words.replace("(", r"\(")):
        run_all(create_storage(AwsSession(REGION), StoragePlan("demo", REGION, **changes), record))
    assert sum(moto_gaps.calls.values()) == 0


@pytest.mark.parametrize("kind", ["efs", "fsx"])
def test_storage_manifests_match_the_golden_files(kind):
    fs = FileSystemReady("fs-0123456789abcdef0", "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com", "abcdefgh")
    objects = render_storage(StoragePlan("demo", REGION, kind=kind, namespace="training"), fs)
    text = yaml.safe_dump_all(objects, sort_keys=False)
    path = GOLDEN / f"storage-{kind}.yaml"
    if os.environ.get("TORCHDECK_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"storage-{kind} rendering changed; review it, then TORCHDECK_UPDATE_GOLDEN=1"


@pytest.mark.parametrize("prefix", ["", "*", "a?/", "${aws:username}/", "/models/", "a/../b/", "team//x/", "x y/"])
def test_a_prefix_that_would_widen_the_grants_is_refused(prefix):
    """Issue 16 row 5: '' granted bucket/* and s3:prefix ['*']; '?' and ${...} are IAM wildcards."""
    from torchdeck.backends.eks.storage_plan import validate_storage

    with pytest.raises(SpecError, match="--prefix: .*a key prefix is letters, digits"):
        validate_storage(StoragePlan("demo", REGION, bucket="torchdeck-models-demo", prefix=prefix))
    assert validate_storage(
        StoragePlan("demo", REGION, bucket="torchdeck-models-demo", prefix="team/models")
    ).prefix == ("team/models/")


def test_storage_status_reads_one_way_in_the_cli_and_the_screen():
    """Issue 30: the CLI printed ``tcp/2049-2049`` where the screen said ``tcp/2049``; both now
    render ``StorageState.lines``."""
    from torchdeck.backends.eks.storage_state import (
        BucketState,
        ClaimState,
        FileSystemState,
        IngressRule,
        MountTargetState,
        SecurityGroupState,
        StorageState,
    )

    state = StorageState(
        "demo",
        file_systems=[FileSystemState("efs", "fs-1", "available", True, 1.5,
                                      mount_targets=[MountTargetState("fsmt-1", "subnet-1", "us-west-2a", "available")])],
        security_groups=[SecurityGroupState("sg-1", [IngressRule("tcp", 2049, 2049, "sg-nodes"),
                                                     IngressRule("tcp", 988, 1023, "sg-nodes")])],
        buckets=[BucketState("models-1", True, True)],
        claims=[ClaimState("PersistentVolumeClaim", "shared", "Bound")],
        problems=["the claim is not bound"],
    )  # fmt: skip
    lines = state.lines()
    texts = [line.text for line in lines]
    assert "security group sg-1: tcp/2049 from sg-nodes, tcp/988-1023 from sg-nodes" in texts
    assert texts[0].startswith("EFS fs-1: available, encrypted") and lines[0].kind == "heading"
    assert lines[-1].kind == "problem" and texts[-1] == "problem: the claim is not bound"
