"""The image repository in ECR: made once (scan on push, immutable tags), and the digest a
tag was pushed as."""

from __future__ import annotations

from .access import ClusterRecord
from .aws_objects import Answer
from .plan import CLUSTER_TAG
from .session import AwsError, AwsSession


async def ensure_repository(aws: AwsSession, record: ClusterRecord, name: str) -> tuple[str, bool]:
    """The ECR repository, scanning on push with immutable tags; (its URI, made now)."""
    found = await aws.afind("ecr", "describe_repositories", repositoryNames=[name])
    if found is None:
        repo = (
            await aws.acall(
                "ecr",
                "create_repository",
                repositoryName=name,
                imageTagMutability="IMMUTABLE",
                imageScanningConfiguration={"scanOnPush": True},
                encryptionConfiguration={"encryptionType": "AES256"},
                tags=[{"Key": CLUSTER_TAG, "Value": record.name}],
            )
        )["repository"]
        made = True
    else:
        repo, made = found["repositories"][0], False
        if not Answer(repo).flag("imageScanningConfiguration", "scanOnPush"):
            await aws.acall(
                "ecr",
                "put_image_scanning_configuration",
                repositoryName=name,
                imageScanningConfiguration={"scanOnPush": True},
            )
        if repo.get("imageTagMutability") != "IMMUTABLE":
            await aws.acall("ecr", "put_image_tag_mutability", repositoryName=name, imageTagMutability="IMMUTABLE")
    tags = (await aws.acall("ecr", "list_tags_for_resource", resourceArn=repo["repositoryArn"])).get("tags", [])
    ours = any(t.get("Key") == CLUSTER_TAG and t.get("Value") == record.name for t in tags)
    record.note("ecr-repository", name, made, made=ours or made, uri=repo["repositoryUri"])
    return repo["repositoryUri"], made


async def pushed_digest(aws: AwsSession, repository: str, tag: str) -> str | None:
    try:
        found = await aws.acall("ecr", "describe_images", repositoryName=repository, imageIds=[{"imageTag": tag}])
    except AwsError as exc:
        if exc.not_found or exc.code == "ImageNotFoundException":
            return None
        raise
    images = found.get("imageDetails") or []
    return images[0].get("imageDigest") if images else None
