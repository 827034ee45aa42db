"""The training image: built from ``docker/Dockerfile.cpu`` or ``.gpu`` and
pushed to an ECR repository (scan on push, immutable tags), on one of two
paths that report through the same ``Progress`` events:

- **docker** where a Docker engine answers: ``docker buildx build --push``,
  logged in to ECR with ``get_authorization_token``. The password goes to
  ``docker login`` on its standard input, into a Docker config folder made
  for this build and removed after it: it is never printed or kept.
- **kaniko** where none does (a bastion host): the build context is
  uploaded to S3 and a Kaniko Job in the cluster builds and pushes it with
  its service account's IAM role, which may push to that repository and read
  that context only.

The tag is a digest of the build context, so an unchanged tree is not built
twice (immutable tags could not take it anyway); the pushed digest is written
into the job spec, so jobs pull exactly that image."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...trainer.s3url import S3Url
from ..errors import BackendError, SpecError
from ..files import read_text
from ..kubernetes.client import ensure_object
from ..names import check_cluster_name, check_code_path, check_namespace
from .access import ClusterRecord, cluster_kube, cluster_network
from .iam import ensure_role, ensure_service_account, oidc_provider, role_name, trust_service_account
from .plan import CLUSTER_TAG
from .progress import Clock, ImageRef, Progress
from .session import AwsError, AwsSession, redact

CONTEXT_PATHS = (
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "__init__.py",
    "__main__.py",
    "report.py",
    "trainer",
    "backends",
    "cli",
    "monitor",
    "tui",
    "manifests",
    "docker",
)
"""What the Dockerfiles COPY: the build context is these and nothing else."""
# Pinned by digest (the multi-platform index of v1.23.2, as three public manifests pin it), as
# every image torchdeck chooses; `crane digest gcr.io/kaniko-project/executor:TAG` when bumping.
KANIKO_IMAGE = (
    "gcr.io/kaniko-project/executor:v1.23.2@sha256:9e69fd4330ec887829c780f5126dd80edc663df6def362cd22e79bcdf00ac53f"
)
BUILDER_ACCOUNT = "torchdeck-image-builder"
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
TIMEOUT_S = 60 * 60


@dataclass
class ImagePlan:
    """What ``torchdeck image build`` makes."""

    cluster: str
    region: str
    variant: str = "cpu"
    """cpu or gpu: which Dockerfile."""
    repository: str = "torchdeck-trainer"
    builder: str = "auto"
    """auto (docker where an engine answers, else kaniko), docker or kaniko."""
    bucket: str | None = None
    """Kaniko: where the build context goes (default: the cluster's model bucket)."""
    prefix: str = "build-context/"
    namespace: str = "default"
    kaniko_image: str = KANIKO_IMAGE
    code: str | None = None
    """A folder of the user's code to build on top of the training image (``--code``)."""
    requirements: str | None = None
    """Its requirements file, relative to it (default: requirements.txt where there is one)."""

    @property
    def dockerfile(self) -> str:
        return f"docker/Dockerfile.{self.variant}"


CODE_IN_IMAGE = "/opt/code"
"""Where ``--code`` puts the user's code in the image (the spec's entrypoint.in_image)."""
CODE_DOCKERFILE = "Dockerfile.torchdeck"


def code_dockerfile(requirements: str | None) -> str:
    """The Dockerfile of a ``--code`` build: the user's folder and its requirements on the training
    image (BASE, pinned by digest), running as the image's own user."""
    # exec form, its words as JSON: a name with spaces or quotes is one argument, and no shell reads it
    run = json.dumps(["pip", "install", "--no-cache-dir", "-r", f"{CODE_IN_IMAGE}/{requirements}"])
    install = f"USER root\nRUN {run}\nUSER 1000:1000\n" if requirements else ""
    return (
        "# Written by torchdeck image build --code: your code on torchdeck's training image.\n"
        "ARG BASE\nFROM ${BASE}\n"
        f"COPY --chown=1000:1000 . {CODE_IN_IMAGE}\n{install}WORKDIR {CODE_IN_IMAGE}\n"
    )


def code_context(plan: ImagePlan) -> tuple[bytes, str, str]:
    """The build context of a ``--code`` build (the code folder as its bundle has it, .dockerignore
    honoured, plus the Dockerfile), the Dockerfile's name in it, and where the code is in the
    image. A folder with its own Dockerfile is built with that one instead (BASE is passed to it)."""
    from ..bundle import pack

    assert plan.code is not None
    packed = pack(plan.code)
    folder = Path(plan.code)
    own = folder / "Dockerfile"
    if os.path.lexists(own):  # the user's own Dockerfile, through the one reader (a FIFO, a link out)
        written = read_text(own, inside=folder, hint="make it the folder's Dockerfile, or remove it")
        workdirs = re.findall(r"(?im)^\s*WORKDIR\s+(\S+)", written)
        return packed.data, "Dockerfile", workdirs[-1] if workdirs else "/"
    requirements = plan.requirements or ("requirements.txt" if (folder / "requirements.txt").is_file() else None)
    if requirements and not (folder / requirements).is_file():
        raise SpecError("--requirements", f"{requirements!r} is not a file in {folder}", "name it relative to --code")
    text = code_dockerfile(requirements).encode()
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        with tarfile.open(fileobj=io.BytesIO(packed.data), mode="r:gz") as source:
            for member in source.getmembers():
                tar.addfile(member, source.extractfile(member))
        info = tarfile.TarInfo(CODE_DOCKERFILE)
        info.size, info.mode = len(text), 0o644
        tar.addfile(info, io.BytesIO(text))
    return buffer.getvalue(), CODE_DOCKERFILE, CODE_IN_IMAGE


def validate_image(plan: ImagePlan) -> ImagePlan:
    check_cluster_name(plan.cluster, "--cluster")
    if plan.requirements is not None:
        check_code_path(plan.requirements, "--requirements", "a requirements file in the --code folder")
    check_namespace(plan.namespace, "--namespace")
    if plan.variant not in ("cpu", "gpu"):
        raise SpecError("--variant", f"must be cpu or gpu, got {plan.variant!r}")
    if plan.builder not in ("auto", "docker", "kaniko"):
        raise SpecError("--builder", f"must be auto, docker or kaniko, got {plan.builder!r}")
    if (
        not re.match(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*\Z", plan.repository)
        or not 2 <= len(plan.repository) <= 256
    ):
        raise SpecError(
            "--repository",
            f"{plan.repository!r} is not an ECR repository name",
            "lower-case letters, digits, '.', '_', '-' and '/', e.g. torchdeck-trainer",
        )
    return plan


def source_root() -> Path:
    """The folder holding the Dockerfiles and what they copy (the clone torchdeck runs from)."""
    import torchdeck

    root = Path(torchdeck.__file__).resolve().parent
    missing = [p for p in CONTEXT_PATHS if not (root / p).exists()]
    if missing:
        raise BackendError(
            f"the build context is incomplete in {root}: no {', '.join(missing)}",
            "build from a clone of torchdeck (git clone, then ./scripts/start)",
        )
    return root


def context_archive(root: Path) -> bytes:
    """The build context as a gzipped tar, byte for byte the same for the same files (sorted, no
    times or owners), so its digest names the tree."""
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        files = []
        for entry in CONTEXT_PATHS:
            path = root / entry
            files += (
                [path]
                if path.is_file()
                else sorted(
                    p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
                )
            )
        for path in sorted(files):
            info = tarfile.TarInfo(str(path.relative_to(root)))
            data = path.read_bytes()
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def image_tag(archive: bytes, variant: str) -> str:
    return f"ctx-{hashlib.sha256(archive).hexdigest()[:12]}-{variant}"


@dataclass(frozen=True)
class BuildContext:
    """What a build from here would use: the Docker engine that answers (None: none, so Kaniko),
    the context's size, and the tag each image variant would get (the context's digest names it)."""

    engine: str | None
    size_kib: float
    tags: dict[str, str]


def build_context() -> BuildContext:
    archive = context_archive(source_root())
    return BuildContext(docker_engine(), len(archive) / 1024, {v: image_tag(archive, v) for v in ("cpu", "gpu")})


def docker_engine(docker: str | None = None) -> str | None:
    """The docker binary if an engine answers it, else None (no client, or a client without a daemon)."""
    docker = docker or shutil.which("docker")
    if not docker:
        return None
    try:
        done = subprocess.run(
            [docker, "version", "--format", "{{.Server.Version}}"], capture_output=True, text=True, timeout=15
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return docker if done.returncode == 0 and done.stdout.strip() else None


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
        if not (repo.get("imageScanningConfiguration") or {}).get("scanOnPush"):
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


# -- the docker path ------------------------------------------------------------------


class EcrLogin:
    """A Docker config folder for one build, logged in to ECR, removed on exit. The password reaches
    ``docker login`` on its standard input only."""

    def __init__(self, aws: AwsSession, docker: str):
        self.aws, self.docker = aws, docker
        self.folder: str | None = None
        self.secrets: list[str] = []

    async def __aenter__(self) -> EcrLogin:
        data = (await self.aws.acall("ecr", "get_authorization_token"))["authorizationData"][0]
        token = data["authorizationToken"]
        user, _, password = base64.b64decode(token).decode().partition(":")
        self.secrets = [token, password]
        self.folder = tempfile.mkdtemp(prefix="torchdeck-docker-")
        os.chmod(self.folder, 0o700)
        plugins = Path.home() / ".docker" / "cli-plugins"  # buildx lives there on many machines
        if plugins.is_dir():
            os.symlink(plugins, Path(self.folder) / "cli-plugins")
        registry = data["proxyEndpoint"]
        done = await asyncio.to_thread(
            subprocess.run,
            [self.docker, "--config", self.folder, "login", "--username", user, "--password-stdin", registry],
            input=password,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0:
            self.close()
            raise BackendError(
                f"docker login to {registry} failed: {self.clean(done.stderr.strip())[:200]}",
                "check that the identity may call ecr:GetAuthorizationToken",
            )
        return self

    def clean(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return redact(text)

    def close(self) -> None:
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    async def __aexit__(self, *exc: Any) -> None:
        self.close()


async def _stream(argv: list[str], login: EcrLogin, phase: str, clock: Clock, cwd: Path) -> AsyncIterator[Progress]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    tail: list[str] = []
    assert proc.stdout is not None
    async for raw in proc.stdout:
        line = login.clean(raw.decode(errors="replace").rstrip())
        if line:
            tail = (tail + [line])[-3:]
            yield Progress(phase, line, clock(), "output")
    if await proc.wait() != 0:
        raise BackendError(
            f"{' '.join(argv[3:5])} failed (exit {proc.returncode}): {tail[-1] if tail else ''}",
            "read the build output above; fix the Dockerfile or the network and build again",
        )


async def build_with_docker(
    aws: AwsSession,
    docker: str,
    root: Path,
    dockerfile: str,
    destination: str,
    clock: Clock,
    push: bool = True,
    build_args: tuple[str, ...] = (),
) -> AsyncIterator[Progress]:
    """docker buildx build (and push); the last event carries the image (``ImageRef``, its digest ''
    without a push)."""
    async with EcrLogin(aws, docker) as login:
        assert login.folder is not None
        yield Progress("login", f"logged in to {destination.split('/')[0]} (token kept in memory only)", clock())
        metadata = Path(login.folder) / "metadata.json"
        argv = [
            docker,
            "--config",
            login.folder,
            "buildx",
            "build",
            "--file",
            dockerfile,
            "--tag",
            destination,
            "--provenance=false",
            "--metadata-file",
            str(metadata),
            "--push" if push else "--load",
            *[x for arg in build_args for x in ("--build-arg", arg)],
            ".",
        ]
        yield Progress("build", "$ " + " ".join(["docker", *argv[3:]]), clock())
        async for p in _stream(argv, login, "build", clock, root):
            yield p
        digest = ""
        if push:
            try:
                digest = json.loads(metadata.read_text()).get("containerimage.digest", "")
            except (OSError, ValueError):
                digest = ""
        uri, _, tag = destination.rpartition(":")
        yield Progress(
            "build",
            f"built {destination}" + (f" ({digest})" if digest else ""),
            clock(),
            result=ImageRef(uri, tag, digest),
        )


async def push_image(aws: AwsSession, plan: ImagePlan, docker: str | None = None) -> AsyncIterator[Progress]:
    """Push what ``build_image(push=False)`` built here; the last Progress (kind done) carries the
    image with its digest, as ``build_image``'s does."""
    docker = docker or docker_engine()
    if docker is None:
        raise BackendError(
            "no Docker engine answers here, so there is no local image to push",
            "torchdeck image build builds and pushes in the cluster (Kaniko)",
        )
    clock = Clock()
    root = source_root()
    tag = image_tag(await asyncio.to_thread(context_archive, root), plan.variant)
    uri = (await aws.acall("ecr", "describe_repositories", repositoryNames=[plan.repository]))["repositories"][0][
        "repositoryUri"
    ]
    async with EcrLogin(aws, docker) as login:
        assert login.folder is not None
        argv = [docker, "--config", login.folder, "push", f"{uri}:{tag}"]
        async for p in _stream(argv, login, "push", clock, root):
            yield p
    digest = await pushed_digest(aws, plan.repository, tag)
    if not digest:
        raise BackendError(f"ECR has no image tagged {tag} after the push", "read the push output above")
    yield Progress("done", f"image {uri}@{digest}", clock(), "done", ImageRef(uri, tag, digest))


# -- the kaniko path ------------------------------------------------------------------


def render_kaniko(
    plan: ImagePlan,
    name: str,
    context_url: str,
    destination: str,
    dockerfile: str | None = None,
    build_args: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
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


def builder_policy(repository_arn: str, bucket: str, key: str) -> dict[str, Any]:
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


async def build_with_kaniko(
    aws: AwsSession,
    plan: ImagePlan,
    record: ClusterRecord,
    archive: bytes,
    tag: str,
    destination: str,
    clock: Clock,
    kube: Callable[[Path, str], Any] | None = None,
    poll_s: float = 2.0,
    timeout_s: float = TIMEOUT_S,
    dockerfile: str | None = None,
    build_args: tuple[str, ...] = (),
) -> AsyncIterator[Progress]:
    """The context to S3, the builder's role and service account, the Kaniko job, its output; the last
    event carries the image (``ImageRef``) with the digest Kaniko reported."""
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
    client = await asyncio.to_thread(cluster_kube, record, aws, kube)
    await asyncio.to_thread(ensure_service_account, client, plan.namespace, BUILDER_ACCOUNT, role, plan.cluster)
    record.note_object(
        {"kind": "ServiceAccount", "metadata": {"name": BUILDER_ACCOUNT, "namespace": plan.namespace}}, True, 3, "image"
    )
    name = f"torchdeck-build-{tag}"[:63].rstrip("-")
    for obj in render_kaniko(plan, name, str(S3Url(bucket, key)), destination, dockerfile, build_args):
        made = await asyncio.to_thread(ensure_object, client, obj)
        record.note_object(obj, made, 0, "image")
    yield Progress(
        "build", f"Kaniko job {plan.namespace}/{name} builds {dockerfile or plan.dockerfile} in the cluster", clock()
    )

    loop = asyncio.get_running_loop()
    said: asyncio.Queue[str] = asyncio.Queue()

    def on_wait(line: str) -> None:  # from the waiting thread
        loop.call_soon_threadsafe(said.put_nowait, line)

    waiting = asyncio.ensure_future(
        asyncio.to_thread(
            client.wait_task,
            name,
            plan.namespace,
            timeout_s,
            poll_s,
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
    for pod in await asyncio.to_thread(client.pods, name, plan.namespace):
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            message = ((status.get("state") or {}).get("terminated") or {}).get("message") or ""
            digest = (DIGEST.findall(message) or [digest])[-1]
    uri, _, tag = destination.rpartition(":")
    yield Progress(
        "build",
        f"Kaniko pushed {destination}" + (f" ({digest})" if digest else ""),
        clock(),
        result=ImageRef(uri, tag, digest),
    )


# -- the whole of it ------------------------------------------------------------------


def pick_builder(requested: str) -> tuple[str, str | None]:
    """(builder, docker binary): docker where an engine answers, else kaniko."""
    docker = docker_engine() if requested in ("auto", "docker") else None
    if requested == "docker" and docker is None:
        raise BackendError(
            "no Docker engine answers here (docker version shows no server)",
            "start Docker, or build in the cluster: --builder kaniko",
        )
    return ("docker", docker) if docker else ("kaniko", None)


async def build_image(
    aws: AwsSession,
    plan: ImagePlan,
    record: ClusterRecord,
    push: bool = True,
    kube: Callable[[Path, str], Any] | None = None,
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
    builder, found_docker = ("docker", docker) if docker else pick_builder(plan.builder)
    if builder == "kaniko" and not push:
        raise BackendError("a build in the cluster always pushes", "drop --no-push, or build where Docker runs")
    root = source_root()
    archive = await asyncio.to_thread(context_archive, root)
    tag = image_tag(archive, plan.variant)
    uri, made = await ensure_repository(aws, record, plan.repository)
    yield Progress(
        "repository",
        f"{'created' if made else 'reusing'} ECR repository {plan.repository} (scan on push, immutable tags)",
        clock(),
    )
    destination = f"{uri}:{tag}"
    digest = ""
    steps = build_and_check(
        aws, plan, record, builder, found_docker, archive, root, plan.dockerfile, tag, uri, clock, kube, poll_s,
        timeout_s, push=push, unchanged="the build context has not changed",
    )  # fmt: skip
    async for p in steps:
        digest = p.result.digest if isinstance(p.result, ImageRef) else digest
        yield p
    if not push:
        yield Progress(
            "done", f"built {destination} (not pushed): torchdeck image push", clock(), "done", ImageRef(uri, tag)
        )
        return
    if plan.code:
        code = build_code(
            aws, plan, record, f"{uri}@{digest}", uri, builder, found_docker, clock, kube, poll_s, timeout_s
        )
        async for p in code:
            yield p
        return
    yield Progress("done", f"image {uri}@{digest}", clock(), "done", ImageRef(uri, tag, digest or ""))


async def build_and_check(
    aws: AwsSession,
    plan: ImagePlan,
    record: ClusterRecord,
    builder: str,
    docker: str | None,
    archive: bytes,
    root: Path | None,
    dockerfile: str,
    tag: str,
    uri: str,
    clock: Clock,
    kube: Callable[[Path, str], Any] | None,
    poll_s: float,
    timeout_s: float,
    push: bool = True,
    build_args: tuple[str, ...] = (),
    phase: str = "build",
    unchanged: str = "",
) -> AsyncIterator[Progress]:
    """One image: not built where ECR holds its tag already, else built with docker (from ``root``,
    or the archive unpacked where there is no such folder) or Kaniko (from the archive), and its
    digest checked against ECR. Events carry ``ImageRef`` results; the last one's is the image."""
    destination = f"{uri}:{tag}"
    digest = await pushed_digest(aws, plan.repository, tag) if push else None
    if digest:
        yield Progress(
            phase, f"{tag} is in ECR already ({unchanged}): not building", clock(), result=ImageRef(uri, tag, digest)
        )
        return
    yield Progress(phase, f"building {dockerfile} as {tag} with {builder}", clock())
    with contextlib.ExitStack() as stack:
        if builder == "docker":
            assert docker is not None
            if root is None:  # a context that exists only as its archive
                root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="torchdeck-context-")))
                with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
                    tar.extractall(root, filter="data")
            steps = build_with_docker(aws, docker, root, dockerfile, destination, clock, push, build_args)
        else:
            steps = build_with_kaniko(
                aws, plan, record, archive, tag, destination, clock, kube, poll_s, timeout_s, dockerfile, build_args
            )
        async for p in steps:
            digest = p.result.digest if isinstance(p.result, ImageRef) else digest
            yield p
    if not push:
        return
    in_ecr = await pushed_digest(aws, plan.repository, tag)
    if digest and in_ecr and digest != in_ecr:
        raise BackendError(
            f"the build reported {digest} but ECR holds {in_ecr} for {tag}",
            "build again; if it repeats, look at the repository in the ECR console",
        )
    if not (digest or in_ecr):
        raise BackendError(f"the build ended but ECR has no image tagged {tag}", "read the build output above")
    yield Progress(
        phase, f"{tag} is in ECR ({digest or in_ecr})", clock(), result=ImageRef(uri, tag, digest or in_ecr or "")
    )


async def build_code(
    aws: AwsSession,
    plan: ImagePlan,
    record: ClusterRecord,
    base: str,
    uri: str,
    builder: str,
    docker: str | None,
    clock: Clock,
    kube: Callable[[Path, str], Any] | None,
    poll_s: float,
    timeout_s: float,
) -> AsyncIterator[Progress]:
    """The user's code on the training image ``base`` (``--code``): built as the base was, tagged by
    the digest of its context and base, pushed; the last event carries it (``ImageRef.code_dir``)."""
    archive, dockerfile, workdir = await asyncio.to_thread(code_context, plan)
    tag = f"code-{hashlib.sha256(archive + base.encode()).hexdigest()[:12]}-{plan.variant}"
    digest = ""
    steps = build_and_check(
        aws, plan, record, builder, docker, archive, None, dockerfile, tag, uri, clock, kube, poll_s, timeout_s,
        build_args=(f"BASE={base}",), phase="code", unchanged="the code and the base have not changed",
    )  # fmt: skip
    async for p in steps:
        digest = p.result.digest if isinstance(p.result, ImageRef) else digest
        yield p
    yield Progress(
        "done", f"image {uri}@{digest} (your code at {workdir})", clock(), "done", ImageRef(uri, tag, digest, workdir)
    )


def write_image_to_spec(spec_file: Path, image: str, code_dir: str | None = None) -> None:
    """Set ``image:`` in the spec file (made with the defaults if absent), and where the image holds
    the user's code (``entrypoint.in_image``) for an image built with --code."""
    from ..spec import update_spec_file

    changes: dict[str, Any] = {"image": image}
    if code_dir:
        changes["entrypoint.in_image"] = code_dir
    update_spec_file(spec_file, changes)
