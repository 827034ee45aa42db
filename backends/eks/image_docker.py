"""The docker path of an image build, where a Docker engine answers: ``docker buildx build
--push``, logged in to ECR with ``get_authorization_token``. The password goes to ``docker
login`` on its standard input, into a Docker config folder made for this build and removed after
it: it is never printed or kept."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from ..errors import BackendError
from .ecr import pushed_digest
from .image_plan import ImagePlan, context_archive, docker_engine, image_tag, source_root
from .progress import Clock, ImageRef, Progress
from .session import AwsSession, redact


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
