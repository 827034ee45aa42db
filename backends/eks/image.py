"""The training image: built from ``docker/Dockerfile.cpu`` or ``.gpu`` and
pushed to an ECR repository (scan on push, immutable tags), on one of two
paths that report through the same ``Progress`` events:

- **docker** where a container engine answers: ``docker buildx build --push``
  (the plain ``docker build`` where buildx is missing, or podman's, then a
  push), logged in to ECR with ``get_authorization_token``. The password goes to
  ``docker login`` on its standard input, into a Docker config folder made
  for this build and removed after it: it is never printed or kept.
- **kaniko** where none does (a bastion host): the build context is
  uploaded to S3 and a Kaniko Job in the cluster builds and pushes it with
  its service account's IAM role, which may push to that repository and read
  that context only.

The tag is a digest of the build context, so an unchanged tree is not built
twice (immutable tags could not take it anyway); the pushed digest is written
into the job spec, so jobs pull exactly that image.

This module runs a build end to end; the plan and context are ``image_plan.py``, the
repository ``ecr.py``, the two paths ``image_docker.py`` and ``image_kaniko.py``."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import tarfile
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from ..engine import Engine, find_engine, no_engine_hint
from ..errors import BackendError
from .access import ClusterRecord, KubeFactory
from .ecr import ensure_repository, pushed_digest
from .image_docker import build_with_docker
from .image_kaniko import build_with_kaniko
from .image_plan import (
    TIMEOUT_S,
    Builder,
    BuilderKind,
    ImageBuild,
    ImagePlan,
    code_context,
    context_archive,
    image_tag,
    source_root,
    validate_image,
)
from .progress import Clock, ImageRef, Progress
from .session import AwsSession


def pick_builder(requested: str) -> tuple[BuilderKind, Engine | None]:
    """(builder, engine): here where a container engine answers, else kaniko."""
    engine = find_engine() if requested in ("auto", "docker") else None
    if requested == "docker" and engine is None:
        raise BackendError("no container engine answers here (docker version shows no server)", no_engine_hint())
    return ("docker", engine) if engine else ("kaniko", None)


async def build_image(
    aws: AwsSession,
    plan: ImagePlan,
    record: ClusterRecord,
    push: bool = True,
    kube: KubeFactory | None = None,
    docker: str | None = None,
    poll_s: float = 2.0,
    timeout_s: float = TIMEOUT_S,
) -> AsyncIterator[Progress]:
    """Repository, build, push; the last Progress (kind done) carries the image (``ImageRef``: the
    repository, the tag, and the digest once pushed)."""
    validate_image(plan)
    clock = Clock()
    if not record.account:
        record.account = (await aws.acall("sts", "get_caller_identity")).get("Account", "")
        record.save()
    kind: BuilderKind
    engine = find_engine(docker) if docker else None
    kind, engine = ("docker", engine) if engine else pick_builder(plan.builder)
    if kind == "kaniko" and not push:
        raise BackendError("a build in the cluster always pushes", "drop --no-push, or build where Docker runs")
    root = source_root()
    archive = await asyncio.to_thread(context_archive, root)
    tag = image_tag(archive, plan.flavour, plan.build_args)
    uri, made = await ensure_repository(aws, record, plan.repository)
    yield Progress(
        "repository",
        f"{'created' if made else 'reusing'} ECR repository {plan.repository} (scan on push, immutable tags)",
        clock(),
    )
    builder = Builder(aws, plan, record, uri, clock, kind, engine, kube, poll_s, timeout_s, push)
    context = ImageBuild(
        archive, root, plan.dockerfile, tag, plan.build_args, unchanged="the build context has not changed"
    )
    digest = ""
    async for p in build_and_check(builder, context):
        digest = p.result.digest if isinstance(p.result, ImageRef) else digest
        yield p
    if not push:
        yield Progress(
            "done", f"built {uri}:{tag} (not pushed): torchdeck image push", clock(), "done", ImageRef(uri, tag)
        )
        return
    if plan.code:
        async for p in build_code(builder, f"{uri}@{digest}"):
            yield p
        return
    yield Progress("done", f"image {uri}@{digest}", clock(), "done", ImageRef(uri, tag, digest or ""))


async def build_and_check(builder: Builder, image: ImageBuild) -> AsyncIterator[Progress]:
    """One image: not built where ECR holds its tag already, else built with docker (from its folder,
    or the archive unpacked where there is no such folder) or Kaniko (from the archive), and its
    digest checked against ECR. Events carry ``ImageRef`` results; the last one's is the image."""
    b, clock, tag = builder, builder.clock, image.tag
    destination = f"{b.uri}:{tag}"
    digest = await pushed_digest(b.aws, b.plan.repository, tag) if b.push else None
    if digest:
        yield Progress(
            image.phase,
            f"{tag} is in ECR already ({image.unchanged}): not building",
            clock(),
            result=ImageRef(b.uri, tag, digest),
        )
        return
    yield Progress(image.phase, f"building {image.dockerfile} as {tag} with {b.kind}", clock())
    with contextlib.ExitStack() as stack:
        if b.kind == "docker":
            assert b.engine is not None
            root = image.root
            if root is None:  # a context that exists only as its archive
                root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="torchdeck-context-")))
                with tarfile.open(fileobj=io.BytesIO(image.archive), mode="r:gz") as tar:
                    tar.extractall(root, filter="data")
            steps = build_with_docker(
                b.aws, b.engine, root, image.dockerfile, destination, clock, b.push, image.build_args, b.plan.network
            )
        else:
            steps = build_with_kaniko(b, image)
        async for p in steps:
            digest = p.result.digest if isinstance(p.result, ImageRef) else digest
            yield p
    if not b.push:
        return
    in_ecr = await pushed_digest(b.aws, b.plan.repository, tag)
    if digest and in_ecr and digest != in_ecr:
        raise BackendError(
            f"the build reported {digest} but ECR holds {in_ecr} for {tag}",
            "build again; if it repeats, look at the repository in the ECR console",
        )
    if not (digest or in_ecr):
        raise BackendError(f"the build ended but ECR has no image tagged {tag}", "read the build output above")
    yield Progress(
        image.phase,
        f"{tag} is in ECR ({digest or in_ecr})",
        clock(),
        result=ImageRef(b.uri, tag, digest or in_ecr or ""),
    )


async def build_code(builder: Builder, base: str) -> AsyncIterator[Progress]:
    """The user's code on the training image ``base`` (``--code``): built as the base was, tagged by
    the digest of its context and base, pushed; the last event carries it (``ImageRef.code_dir``)."""
    plan, uri = builder.plan, builder.uri
    archive, dockerfile, workdir = await asyncio.to_thread(code_context, plan)
    tag = f"code-{hashlib.sha256(archive + base.encode()).hexdigest()[:12]}-{plan.flavour}"
    context = ImageBuild(
        archive, None, dockerfile, tag, (f"BASE={base}",), "code", "the code and the base have not changed"
    )
    digest = ""
    async for p in build_and_check(builder, context):
        digest = p.result.digest if isinstance(p.result, ImageRef) else digest
        yield p
    yield Progress(
        "done",
        f"image {uri}@{digest} (your code at {workdir})",
        builder.clock(),
        "done",
        ImageRef(uri, tag, digest, workdir),
    )


def write_image_to_spec(spec_file: Path, image: str, code_dir: str | None = None) -> None:
    """Set ``image:`` in the spec file (made with the defaults if absent), and where the image holds
    the user's code (``entrypoint.in_image``) for an image built with --code."""
    from ..spec import update_spec_file

    changes: dict[str, Any] = {"image": image}
    if code_dir:
        changes["entrypoint.in_image"] = code_dir
    update_spec_file(spec_file, changes)
