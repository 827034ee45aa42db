"""The training image, the data, the model download and the teardown,
against moto's server mode and a kmock API server (tests/support/eks_support.py):

- the docker path with a stand-in docker client (tests/support/standin/docker; this
  machine has no engine) and the ECR token that must never show;
- the Kaniko path, the tests acting as the Job controller and the kubelet;
- CIFAR-10 copied from an S3 prefix by the real data tool, a model fetched;
- a whole create -> status -> cleanup cycle that leaves nothing in moto, a
  cleanup interrupted half-way that resumes, orphans found by tag after the
  ledger is lost, and deleting what is already gone.

Golden files regenerate with TORCHDECK_UPDATE_GOLDEN=1."""

from __future__ import annotations

import base64
import io
import json
import os
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from eks_support import REGION, cli, everything_left
from eks_support import run_progress as run_all
from tinydata import write_tiny_cifar

from torchdeck.backends.eks.access import ClusterRecord
from torchdeck.backends.eks.image import build_image
from torchdeck.backends.eks.image_kaniko import render_kaniko
from torchdeck.backends.eks.image_plan import ImagePlan
from torchdeck.backends.eks.progress import ImageRef
from torchdeck.backends.eks.session import AwsSession
from torchdeck.backends.eks.storage import create_storage
from torchdeck.backends.eks.storage_plan import StoragePlan
from torchdeck.backends.eks.teardown import Teardown, plan_cleanup
from torchdeck.backends.kubernetes.backend import KubernetesBackend
from torchdeck.backends.kubernetes.manifests import render
from torchdeck.backends.ledger import Ledger, Resource, resource_kind
from torchdeck.backends.spec import load_spec
from torchdeck.cli.main import main

pytestmark = pytest.mark.slow  # the fast lane (./scripts/test --fast) leaves these out

GOLDEN = Path(__file__).parent.parent / "data" / "golden"
PASSWORD = "123456789012-auth-token"  # what moto's get_authorization_token hands out
TOKEN = base64.b64encode(f"AWS:{PASSWORD}".encode()).decode()


def docker_calls(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def build_everything(record: ClusterRecord, tmp_path: Path) -> None:
    """Storage (EFS and the bucket) and an image pushed with docker, for a cluster."""
    run_all(
        create_storage(
            AwsSession(REGION),
            StoragePlan("demo", REGION, bucket="torchdeck-models-demo"),
            record,
            poll_s=0.01,
            timeout_s=5,
        )
    )
    run_all(build_image(AwsSession(REGION), ImagePlan("demo", REGION), record, poll_s=0.01))


# -- the image --------------------------------------------------------------------------


def test_docker_build_pushes_pins_the_digest_and_never_shows_the_token(eks_cluster, tmp_path, standin_docker):
    state = eks_cluster.path.parent.parent
    spec = tmp_path / "torchdeck.yaml"
    code, out, err = cli("image", "build", "--cluster", "demo", "--spec", str(spec), state=state)
    assert code == 0, err
    aws = AwsSession(REGION)
    repo = aws.call("ecr", "describe_repositories", repositoryNames=["torchdeck-trainer"])["repositories"][0]
    assert repo["imageTagMutability"] == "IMMUTABLE" and repo["imageScanningConfiguration"]["scanOnPush"] is True
    (image,) = aws.call("ecr", "describe_images", repositoryName="torchdeck-trainer")["imageDetails"]
    pinned = yaml.safe_load(spec.read_text())["image"]
    assert pinned == f"{repo['repositoryUri']}@{image['imageDigest']}"

    calls = docker_calls(standin_docker)
    assert [c["argv"][2] for c in calls if c["config"]] == ["login", "buildx"]
    login = next(c["argv"] for c in calls if "login" in c["argv"])
    assert "--password-stdin" in login
    folders = {c["config"] for c in calls if c["config"]}
    assert len(folders) == 1 and not Path(folders.pop()).exists()  # the login went with the build
    everything = [out, err, standin_docker.read_text(), spec.read_text()]
    everything += [p.read_bytes().decode(errors="replace") for p in state.rglob("*") if p.is_file()]
    for text in everything:
        assert PASSWORD not in text and TOKEN not in text

    code, out, _ = cli("image", "build", "--cluster", "demo", "--spec", str(spec), state=state)
    assert code == 0 and "is in ECR already" in out
    assert [c["argv"][2] for c in docker_calls(standin_docker)[len(calls) :] if c["config"]] == []


def test_code_is_built_on_the_pinned_training_image_and_the_spec_runs_the_images_copy(
    eks_cluster, tmp_path, standin_docker
):
    state = eks_cluster.path.parent.parent
    code_dir = tmp_path / "project"
    (code_dir / "data").mkdir(parents=True)
    (code_dir / "train.py").write_text("print('loss: 1.0')\n")
    (code_dir / "requirements.txt").write_text("tqdm\n")
    (code_dir / "data" / "big.bin").write_bytes(b"x" * 100)
    (code_dir / ".dockerignore").write_text("data\n")
    spec = code_dir / "torchdeck.yaml"
    assert main(["init", str(spec), "--script", str(code_dir / "train.py")]) == 0
    code, out, err = cli(
        "image", "build", "--cluster", "demo", "--spec", str(spec), "--code", str(code_dir), state=state
    )
    assert code == 0, err
    images = AwsSession(REGION).call("ecr", "describe_images", repositoryName="torchdeck-trainer")["imageDetails"]
    by_tag = {i["imageTags"][0]: i["imageDigest"] for i in images}
    (base_tag,) = [t for t in by_tag if t.startswith("ctx-")]
    (code_tag,) = [t for t in by_tag if t.startswith("code-")]
    builds = [c for c in docker_calls(standin_docker) if c["argv"][2:4] == ["buildx", "build"]]
    assert len(builds) == 2
    base = builds[0]["argv"][builds[0]["argv"].index("--tag") + 1].rsplit(":", 1)[0] + "@" + by_tag[base_tag]
    argv = builds[1]["argv"]
    assert argv[argv.index("--build-arg") + 1] == f"BASE={base}"  # on the pinned training image
    assert builds[1]["context"] == [
        ".dockerignore",
        "Dockerfile.torchdeck",
        "requirements.txt",
        "train.py",
    ]
    assert (
        "FROM ${BASE}" in builds[1]["dockerfile"]
        and 'RUN ["pip", "install", "--no-cache-dir", "-r", "/opt/code/requirements.txt"]' in builds[1]["dockerfile"]
    )
    written = load_spec(spec)
    assert written.image.endswith("@" + by_tag[code_tag]) and written.entrypoint.in_image == "/opt/code"
    rendered = render(written, "train-1")
    assert [o["kind"] for o in rendered.objects] == ["PyTorchJob"]  # no bundle: the image has the code
    assert "/opt/code/train.py" in rendered.to_yaml()
    code, out, _ = cli("image", "build", "--cluster", "demo", "--spec", str(spec), "--code", str(code_dir), state=state)
    assert code == 0 and "is in ECR already (the code and the base have not changed)" in out
    (code_dir / "Dockerfile").write_text("ARG BASE\nFROM ${BASE}\nCOPY . /srv/app\nWORKDIR /srv/app\n")
    code, out, err = cli(
        "image", "build", "--cluster", "demo", "--spec", str(spec), "--code", str(code_dir), state=state
    )
    assert code == 0, err
    last = [c for c in docker_calls(standin_docker) if c["argv"][2:4] == ["buildx", "build"]][-1]
    assert (
        last["argv"][last["argv"].index("--file") + 1] == "Dockerfile" and "Dockerfile.torchdeck" not in last["context"]
    )
    assert load_spec(spec).entrypoint.in_image == "/srv/app"


def test_a_local_build_is_pushed_later_and_pinned(eks_cluster, tmp_path, standin_docker):
    state = eks_cluster.path.parent.parent
    spec = tmp_path / "torchdeck.yaml"
    code, out, err = cli("image", "build", "--cluster", "demo", "--no-push", "--spec", str(spec), state=state)
    assert code == 0, err
    assert "not pushed; run a job in it: torchdeck train --in-image torchdeck-trainer:ctx-" in out
    assert not spec.exists()
    ecr = AwsSession(REGION).call("ecr", "describe_repositories")["repositories"]
    assert ecr == []  # --no-push touched no AWS API: no repository
    assert [c["config"] for c in docker_calls(standin_docker)] == [None] * len(docker_calls(standin_docker))  # no login
    code, out, err = cli("image", "push", "--cluster", "demo", "--spec", str(spec), state=state)
    assert code == 0, err
    (image,) = AwsSession(REGION).call("ecr", "describe_images", repositoryName="torchdeck-trainer")["imageDetails"]
    assert yaml.safe_load(spec.read_text())["image"].endswith("@" + image["imageDigest"])
    calls = [c for c in docker_calls(standin_docker) if c["config"]]
    assert [c["argv"][2] for c in calls] == ["login", "push"]
    assert not any(Path(c["config"]).exists() for c in calls)
    built = [c for c in docker_calls(standin_docker) if c["argv"][:2] == ["buildx", "build"]]
    assert len(built) == 1 and "--load" in built[0]["argv"]


def test_without_an_engine_auto_builds_in_the_cluster_and_docker_is_refused(
    eks_cluster, tmp_path, standin_docker, monkeypatch
):
    monkeypatch.setenv("STANDIN_DOCKER_ENGINE", "0")
    state = eks_cluster.path.parent.parent
    code, _, err = cli("image", "build", "--cluster", "demo", "--builder", "docker", state=state)
    assert code == 1 and "no container engine answers here" in err and "--builder kaniko" in err
    code, _, err = cli("image", "build", "--cluster", "demo", state=state)  # auto: kaniko, which needs a bucket
    assert code == 1 and "needs a bucket for the build context" in err and err.count("\n") == 1


def be_kaniko(kube, digest_holder: dict[str, str], prefix: str = "torchdeck-build-") -> threading.Thread:
    """The Job controller and the kubelet for the next image-build Job: push an image into ECR as Kaniko
    would, then end the pod with the digest in its termination message."""
    api = KubernetesBackend(kube.kubeconfig).client

    def run() -> None:
        deadline = time.monotonic() + 300  # a bound on a hang, not on the host's speed
        jobs: list[dict[str, Any]] = []
        while not jobs:
            assert time.monotonic() < deadline, f"no image-build Job named {prefix}* was submitted in 300 s"
            jobs = api.request(
                "GET",
                "apis/batch/v1/namespaces/default/jobs",
                query={"labelSelector": "torchdeck.dev/task=image-build"},
            ).get("items", [])
            jobs = [j for j in jobs if j["metadata"]["name"].startswith(prefix)]
            time.sleep(0.05)
        job = jobs[0]
        digest_holder["args"] = job["spec"]["template"]["spec"]["containers"][0]["args"]
        args = job["spec"]["template"]["spec"]["containers"][0]["args"]
        destination = next(a for a in args if a.startswith("--destination="))[len("--destination=") :]
        repository, tag = destination.split("/", 1)[1].split(":")
        aws = AwsSession(REGION)
        digest = aws.call(
            "ecr",
            "put_image",
            repositoryName=repository,
            imageTag=tag,
            imageManifest=json.dumps(
                {
                    "schemaVersion": 2,
                    "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                    "config": {"digest": "sha256:" + "1" * 64},
                    "layers": [],
                }
            ),
        )["image"]["imageId"]["imageDigest"]
        digest_holder["digest"] = digest
        name = job["metadata"]["name"]
        api.request(
            "POST",
            "api/v1/namespaces/default/pods",
            body={
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{name}-abcde", "labels": job["spec"]["template"]["metadata"]["labels"]},
                "spec": {"containers": [{"name": "kaniko", "image": "kaniko"}]},
                "status": {
                    "phase": "Succeeded",
                    "containerStatuses": [
                        {
                            "name": "kaniko",
                            "restartCount": 0,
                            "state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": digest}},
                        }
                    ],
                },
            },
        )
        api.request(
            "PATCH",
            f"apis/batch/v1/namespaces/default/jobs/{name}/status",
            body={"status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}},
        )

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_kaniko_builds_in_the_cluster_from_a_context_in_s3(eks_cluster, tmp_path, kube):
    aws = AwsSession(REGION)
    run_all(
        create_storage(
            aws, StoragePlan("demo", REGION, kind="none", bucket="torchdeck-models-demo"), eks_cluster, poll_s=0.01
        )
    )
    got: dict[str, str] = {}
    thread = be_kaniko(kube, got)
    progress = run_all(
        build_image(aws, ImagePlan("demo", REGION, builder="kaniko"), eks_cluster, poll_s=0.05, timeout_s=20)
    )
    thread.join(5)
    assert progress[-1].message.endswith("@" + got["digest"])
    assert isinstance(progress[-1].result, ImageRef) and progress[-1].result.digest == got["digest"]
    keys = [o["Key"] for o in aws.call("s3", "list_objects_v2", Bucket="torchdeck-models-demo")["Contents"]]
    assert len(keys) == 1 and keys[0].startswith("build-context/ctx-") and keys[0].endswith("-cpu.tar.gz")
    policy = aws.call("iam", "get_role_policy", RoleName="torchdeck-demo-image-builder", PolicyName="torchdeck")[
        "PolicyDocument"
    ]
    resources = {s["Sid"]: s["Resource"] for s in policy["Statement"]}
    assert resources["Context"] == f"arn:aws:s3:::torchdeck-models-demo/{keys[0]}"
    assert resources["Push"].endswith(":repository/torchdeck-trainer")
    account = KubernetesBackend(kube.kubeconfig).client.request(
        "GET", "api/v1/namespaces/default/serviceaccounts/torchdeck-image-builder"
    )
    assert account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].endswith(
        "role/torchdeck-demo-image-builder"
    )


def test_kaniko_builds_the_users_code_on_the_image_it_built_first(eks_cluster, tmp_path, kube):
    aws = AwsSession(REGION)
    run_all(
        create_storage(
            aws, StoragePlan("demo", REGION, kind="none", bucket="torchdeck-models-demo"), eks_cluster, poll_s=0.01
        )
    )
    code_dir = tmp_path / "project"
    code_dir.mkdir()
    (code_dir / "train.py").write_text("print('loss: 1.0')\n")
    base: dict[str, str] = {}
    built: dict[str, str] = {}
    threads = [be_kaniko(kube, base, "torchdeck-build-ctx-"), be_kaniko(kube, built, "torchdeck-build-code-")]
    plan = ImagePlan("demo", REGION, builder="kaniko", code=str(code_dir))
    progress = run_all(build_image(aws, plan, eks_cluster, poll_s=0.05, timeout_s=20))
    for thread in threads:
        thread.join(5)
    result = progress[-1].result
    assert isinstance(result, ImageRef) and result.digest == built["digest"] and result.code_dir == "/opt/code"
    uri = result.uri
    assert f"--build-arg=BASE={uri}@{base['digest']}" in built["args"]
    assert "--dockerfile=Dockerfile.torchdeck" in built["args"]
    keys = sorted(o["Key"] for o in aws.call("s3", "list_objects_v2", Bucket="torchdeck-models-demo")["Contents"])
    (code_key,) = [k for k in keys if "/code-" in k]
    context = aws.call("s3", "get_object", Bucket="torchdeck-models-demo", Key=code_key)["Body"].read()
    names = tarfile.open(fileobj=io.BytesIO(context)).getnames()
    assert names == ["train.py", "Dockerfile.torchdeck"]


def test_the_kaniko_job_matches_its_golden_file():
    objects = render_kaniko(
        ImagePlan("demo", "us-east-1", namespace="builds"),
        "torchdeck-build-ctx-0123456789ab-cpu",
        "s3://torchdeck-models/build-context/ctx-0123456789ab-cpu.tar.gz",
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/torchdeck-trainer:ctx-0123456789ab-cpu",
    )
    text = yaml.safe_dump_all(objects, sort_keys=False)
    path = GOLDEN / "kaniko.yaml"
    if os.environ.get("TORCHDECK_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), "the Kaniko job changed; review it, then TORCHDECK_UPDATE_GOLDEN=1"


# -- data and the model -------------------------------------------------------------------


def test_data_prepare_copies_cifar10_from_an_s3_prefix_with_progress(tmp_path, aws_env):
    source = tmp_path / "source"
    write_tiny_cifar(source, per_batch=10)
    aws = AwsSession(REGION)
    aws.call("s3", "create_bucket", Bucket="datasets")
    for path in sorted((source / "cifar-10-batches-py").iterdir()):
        aws.call(
            "s3",
            "put_object",
            Bucket="datasets",
            Key=f"cifar10/cifar-10-batches-py/{path.name}",
            Body=path.read_bytes(),
        )
    # a planted key that climbs out of the folder (issue 16, row 2): it is not copied
    escape = "cifar10/cifar-10-batches-py/../../../../escaped.txt"
    aws.call("s3", "put_object", Bucket="datasets", Key=escape, Body=b"out")
    target = tmp_path / "data"
    code, out, err = cli(
        "data", "prepare", "--data-dir", str(target), "--from-s3", "s3://datasets/cifar10/", state=tmp_path / "state"
    )
    assert code == 0, err
    assert "50 training and 10 test images" in out
    assert "copied 7/7 objects" in err or "copied 6/6 objects" in err
    assert sorted(p.name for p in (target / "cifar-10-batches-py").iterdir()) == sorted(
        p.name for p in (source / "cifar-10-batches-py").iterdir()
    )
    assert [p for p in tmp_path.parent.rglob("escaped.txt")] == []

    code, _, err = cli(
        "data",
        "prepare",
        "--data-dir",
        str(tmp_path / "other"),
        "--from-s3",
        "s3://datasets/none/",
        state=tmp_path / "state",
    )
    assert code == 1 and "holds neither cifar-10-python.tar.gz nor cifar-10-batches-py/" in err


def test_model_get_copies_a_model_from_s3(tmp_path, aws_env):
    aws = AwsSession(REGION)
    aws.call("s3", "create_bucket", Bucket="models")
    aws.call("s3", "put_object", Bucket="models", Key="cifar10/model.pt", Body=b"weights" * 1000)
    out_file = tmp_path / "here" / "model.pt"
    code, out, err = cli(
        "model", "get", "--from", "s3://models/cifar10/model.pt", "-o", str(out_file), state=tmp_path / "state"
    )
    assert code == 0, err
    assert out_file.read_bytes() == b"weights" * 1000 and "torchdeck test --model-file" in out
    code, _, err = cli("model", "get", "--from", "s3://models/none.pt", "-o", str(out_file), state=tmp_path / "state")
    assert code == 1 and err.count("\n") == 1 and out_file.read_bytes() == b"weights" * 1000


# -- the ledger and cleanup ---------------------------------------------------------------


def test_a_whole_cycle_leaves_nothing_in_moto(eks_cluster, tmp_path, standin_docker, moto_gaps):
    state = eks_cluster.path.parent.parent
    build_everything(eks_cluster, tmp_path)
    code, out, err = cli("resources", state=state)
    assert code == 0, err
    for kind in (
        "eks-cluster",
        "eks-nodegroup",
        "iam-role",
        "oidc-provider",
        "efs-filesystem",
        "efs-mount-target",
        "ec2-security-group",
        "s3-bucket",
        "ecr-repository",
        "k8s-object",
    ):
        assert kind in out, kind
    assert "/h now" in out
    code, out, err = cli("storage", "status", "--cluster", "demo", state=state)
    assert code == 0 and "public access blocked" in out, err

    code, out, err = cli("cleanup", state=state)  # no terminal: a dry run
    assert code == 0 and "dry run: nothing was deleted" in out
    assert everything_left(AwsSession(REGION)) != []
    plan = out.splitlines()
    order = [
        next(i for i, line in enumerate(plan) if kind in line)
        for kind in (
            "k8s-object",
            "efs-mount-target",
            "efs-filesystem",
            "ec2-security-group",
            "ecr-repository",
            "s3-bucket",
            "eks-cluster",
        )
    ]
    assert order == sorted(order), plan

    code, out, err = cli("cleanup", "--yes", state=state)
    assert code == 0, err
    assert everything_left(AwsSession(REGION)) == []
    assert Ledger(state).resources() == []
    per_hour, so_far = Ledger(state).costs()
    assert per_hour == 0 and so_far > 0
    code, out, _ = cli("cleanup", "--yes", state=state)
    assert code == 0 and "nothing to clean up" in out


def test_storage_delete_takes_the_storage_and_leaves_the_cluster_and_image(eks_cluster, tmp_path, standin_docker):
    state = eks_cluster.path.parent.parent
    build_everything(eks_cluster, tmp_path)
    code, out, err = cli("storage", "delete", "--cluster", "demo", "--yes", state=state)
    assert code == 0, err
    left = everything_left(AwsSession(REGION))
    assert not [x for x in left if x.startswith(("efs", "bucket", "sg torchdeck-demo-efs"))], left
    assert "cluster demo" in left and "ecr torchdeck-trainer" in left and "role torchdeck-demo-s3" in left
    kinds = {r.kind for r in Ledger(state).resources()}
    assert {"eks-cluster", "ecr-repository"} <= kinds and not kinds & {"efs-filesystem", "s3-bucket"}
    code, out, _ = cli("storage", "status", "--cluster", "demo", state=state)
    assert code == 0 and "no storage for cluster demo" in out


def test_an_interrupted_cleanup_resumes_where_it_stopped(eks_cluster, tmp_path, standin_docker, moto_gaps):
    state = eks_cluster.path.parent.parent
    build_everything(eks_cluster, tmp_path)
    moto_gaps.fail("efs", "DeleteFileSystem", "BadRequest", message="not allowed today")
    code, _, err = cli("cleanup", "--yes", state=state)
    assert code == 1 and "not allowed today" in err and err.count("\n") == 1
    live = {r.kind for r in Ledger(state).resources()}
    assert "efs-mount-target" not in live and "k8s-object" not in live  # done before the failure, and recorded
    assert {"efs-filesystem", "ec2-security-group", "eks-cluster"} <= live

    moto_gaps.calls.clear()
    code, out, err = cli("cleanup", "--yes", state=state)
    assert code == 0, err
    assert moto_gaps.calls[("efs", "DeleteMountTarget")] == 0  # not done twice
    assert everything_left(AwsSession(REGION)) == []


def test_orphans_are_found_by_tag_when_the_ledger_is_lost(eks_cluster, tmp_path, standin_docker):
    state = eks_cluster.path.parent.parent
    build_everything(eks_cluster, tmp_path)
    (state / "ledger.sqlite").unlink()
    for record in (state / "clusters").glob("*.json"):
        record.unlink()
    code, out, err = cli("cleanup", "--region", REGION, state=state)
    assert code == 0, err
    for kind in (
        "eks-cluster",
        "efs-filesystem",
        "ec2-security-group",
        "s3-bucket",
        "ecr-repository",
        "iam-role",
        "oidc-provider",
    ):
        assert any(kind in line and "(found by tag)" in line for line in out.splitlines()), kind
    code, out, err = cli("cleanup", "--region", REGION, "--yes", state=state)
    assert code == 0, err
    assert everything_left(AwsSession(REGION)) == []


def test_deleting_what_is_already_gone_is_not_an_error(tmp_path, aws_env):
    aws = AwsSession(REGION)
    gone = [
        Resource(resource_kind(kind), ident, REGION, scope="demo", created_at=time.time())
        for kind, ident in (
            ("efs-mount-target", "fsmt-12345678"),
            ("efs-filesystem", "fs-12345678"),
            ("fsx-filesystem", "fs-0123456789abcdef0"),
            ("ec2-security-group", "sg-12345678"),
            ("ecr-repository", "nothing-here"),
            ("s3-object", "no-bucket/key"),
            ("s3-bucket", "no-such-bucket"),
            ("eks-addon", "demo/metrics-server"),
            ("eks-nodegroup", "demo/gpu"),
            ("oidc-provider", "arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/X"),
            ("iam-role", "torchdeck-demo-s3"),
            ("eks-cluster", "demo"),
        )
    ]
    ledger = Ledger(tmp_path)
    for r in gone:
        ledger.add(r.kind, r.ident, region=REGION, scope="demo")
    steps = plan_cleanup(ledger.resources())
    progress = run_all(Teardown(tmp_path, lambda region: aws, poll_s=0.01, timeout_s=2).run(steps))
    said = [p.message for p in progress]
    assert any("fs-12345678: already gone" in m for m in said) and any(
        "no-such-bucket: already gone" in m for m in said
    )
    assert ledger.resources() == []
