"""The Kaniko path of an image build, where no Docker engine answers (a bastion host): the build
context is uploaded to S3 and a Kaniko Job in the cluster builds and pushes it with its service
account's IAM role, which may push to that repository and read that context only."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from ...trainer.s3url import S3Url
from ..errors import BackendError
from ..kubernetes.client import ensure_object
from .access import cluster_kube, cluster_network
from .aws_objects import Answer
from .iam import ensure_role, ensure_service_account, oidc_provider, role_name, trust_service_account
from .image_plan import BUILDER_ACCOUNT, DIGEST, TIMEOUT_S, Builder, ImageBuild, ImagePlan
from .progress import ImageRef, Progress


def render_kaniko(
    plan: ImagePlan,
    name: str,
    context_url: str,
    destination: str,
    dockerfile: str | None = None,
    build_args: tuple[str, ...] = (),
) -> list[dict[str, object]]:
    """The Kaniko ConfigMap and Job, rendered from manifests/kaniko.yaml.j2."""
    import yaml

    from ..kubernetes.manifests import template_environment

    labels = {
        "app.kubernetes.io/managed-by": "torchdeck",
        "torchdeck.dev/task": "image-build",
        "torchdeck.dev/cluster": plan.cluster,
        "torchdeck.dev/run": name,
    }
    text = (
        template_environment()
        .get_template("kaniko.yaml.j2")
        .render(
            name=name,
            namespace=plan.namespace,
            labels=labels,
            registry=destination.split("/")[0],
            service_account=BUILDER_ACCOUNT,
            kaniko_image=plan.kaniko_image,
            context_url=context_url,
            dockerfile=dockerfile or plan.dockerfile,
            build_args=list(build_args),
            destination=destination,
            region=plan.region,
            memory="8Gi" if plan.variant == "gpu" else "4Gi",
            deadline_s=int(TIMEOUT_S),
        )
    )
    return [o for o in yaml.safe_load_all(text) if o]


def builder_policy(repository_arn: str, bucket: str, key: str) -> dict[str, object]:
    """Push to one repository and read one build context. ECR's login call takes no resource but '*'."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "Login", "Effect": "Allow", "Action": "ecr:GetAuthorizationToken", "Resource": "*"},
            {
                "Sid": "Push",
                "Effect": "Allow",
                "Resource": repository_arn,
                "Action": [
                    "ecr:BatchCheckLayerAvailability",
                    "ecr:BatchGetImage",
                    "ecr:CompleteLayerUpload",
                    "ecr:GetDownloadUrlForLayer",
                    "ecr:InitiateLayerUpload",
                    "ecr:PutImage",
                    "ecr:UploadLayerPart",
                ],
            },
            {"Sid": "Context", "Effect": "Allow", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{bucket}/{key}"},
        ],
    }


async def build_with_kaniko(builder: Builder, image: ImageBuild) -> AsyncIterator[Progress]:
    """The context to S3, the builder's role and service account, the Kaniko job, its output; the last
    event carries the image (``ImageRef``) with the digest Kaniko reported."""
    aws, plan, record, clock, tag = builder.aws, builder.plan, builder.record, builder.clock, image.tag
    archive, dockerfile, destination = image.archive, image.dockerfile, f"{builder.uri}:{image.tag}"
    bucket = plan.bucket or (record.storage.bucket if record.storage else None)
    if not bucket:
        raise BackendError(
            "building in the cluster needs a bucket for the build context",
            f"make the model bucket (torchdeck storage create --cluster {plan.cluster} --bucket NAME) or pass --bucket",
        )
    key = f"{plan.prefix.rstrip('/')}/{tag}.tar.gz"
    await aws.acall("s3", "put_object", Bucket=bucket, Key=key, Body=archive)
    record.note("s3-object", f"{bucket}/{key}", True)
    yield Progress(
        "context", f"uploaded the build context ({len(archive) / 1024:.0f} KiB) to s3://{bucket}/{key}", clock()
    )

    net = await cluster_network(aws, plan.cluster)
    provider = await oidc_provider(aws, net.issuer)
    repo = (await aws.acall("ecr", "describe_repositories", repositoryNames=[plan.repository]))["repositories"][0]
    role, _ = await ensure_role(
        aws,
        record,
        role_name(plan.cluster, "image-builder"),
        trust_service_account(provider, net.issuer, plan.namespace, BUILDER_ACCOUNT),
        inline=builder_policy(repo["repositoryArn"], bucket, key),
    )
    cluster_backend = await asyncio.to_thread(cluster_kube, record, aws, builder.kube)
    await asyncio.to_thread(
        ensure_service_account, cluster_backend.client, plan.namespace, BUILDER_ACCOUNT, role, plan.cluster
    )
    record.note_object(
        {"kind": "ServiceAccount", "metadata": {"name": BUILDER_ACCOUNT, "namespace": plan.namespace}}, True, 3, "image"
    )
    name = f"torchdeck-build-{tag}"[:63].rstrip("-")
    for obj in render_kaniko(plan, name, str(S3Url(bucket, key)), destination, dockerfile, image.build_args):
        made = await asyncio.to_thread(ensure_object, cluster_backend.client, obj)
        record.note_object(obj, made, 0, "image")
    yield Progress("build", f"Kaniko job {plan.namespace}/{name} builds {dockerfile} in the cluster", clock())

    loop = asyncio.get_running_loop()
    said: asyncio.Queue[str] = asyncio.Queue()

    def on_wait(line: str) -> None:  # from the waiting thread
        loop.call_soon_threadsafe(said.put_nowait, line)

    waiting = asyncio.ensure_future(
        asyncio.to_thread(
            cluster_backend.tasks.wait,
            name,
            plan.namespace,
            builder.timeout_s,
            builder.poll_s,
            on_wait,
        )
    )
    last = ""
    while not waiting.done() or not said.empty():
        try:
            line = await asyncio.wait_for(said.get(), timeout=0.2)
        except asyncio.TimeoutError:
            continue
        if line != last:
            yield Progress("build", line, clock(), "wait")
            last = line
    output = waiting.result()
    for line in output.splitlines()[-5:]:
        yield Progress("build", line, clock(), "output")
    digest = ""
    for pod in await asyncio.to_thread(cluster_backend.pods, name, plan.namespace):
        for status in Answer(pod).children("status", "containerStatuses"):
            message = status.text("state", "terminated", "message")
            digest = (DIGEST.findall(message) or [digest])[-1]
    yield Progress(
        "build",
        f"Kaniko pushed {destination}" + (f" ({digest})" if digest else ""),
        clock(),
        result=ImageRef(builder.uri, tag, digest),
    )
