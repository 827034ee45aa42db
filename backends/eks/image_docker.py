"""The docker path of an image build, where a container engine answers: ``docker buildx build
--push`` (or the plain builder's or podman's build, then ``push``), logged in to ECR with
``get_authorization_token``. The password goes to ``docker
login`` on its standard input, into a Docker config folder made for this build and removed after
it: it is never printed or kept."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..engine import Engine, find_engine, no_engine_hint
from ..errors import BackendError
from .ecr import ensure_repository, pushed_digest
from .image_plan import ImagePlan, context_archive, image_tag, source_root
from .progress import Clock, ImageRef, Progress
from .session import AwsSession, redact

if TYPE_CHECKING:
    from .access import ClusterRecord


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

    async def __aexit__(self, *exc: object) -> None:
        self.close()


async def stream_command(
    argv: list[str], login: EcrLogin | None, phase: str, clock: Clock, cwd: Path, env: dict[str, str] | None = None
) -> AsyncIterator[Progress]:
    """A build's or push's output as it comes (secrets masked), and BackendError with its last line
    where it fails. Shared with the local builds (``local_image``), which log in nowhere."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    tail: list[str] = []
    assert proc.stdout is not None
    async for raw in proc.stdout:
        line = raw.decode(errors="replace").rstrip()
        line = login.clean(line) if login else redact(line)
        if line:
            tail = (tail + [line])[-3:]
            yield Progress(phase, line, clock(), "output")
    if await proc.wait() != 0:
        words = [a for a in argv[1:] if a in ("buildx", "build", "push")]
        raise BackendError(
            f"{' '.join(words[:2])} failed (exit {proc.returncode}): {tail[-1] if tail else ''}",
            "read the build output above; fix the Dockerfile or the network and build again",
        )


async def build_with_docker(
    aws: AwsSession,
    engine: Engine,
    root: Path,
    dockerfile: str,
    destination: str,
    clock: Clock,
    push: bool = True,
    build_args: tuple[str, ...] = (),
    network: str | None = None,
) -> AsyncIterator[Progress]:
    """The build (and push) on ``engine``; the last event carries the image (``ImageRef``, its digest
    '' without a push)."""
    async with EcrLogin(aws, engine.binary) as login:
        assert login.folder is not None
        yield Progress("login", f"logged in to {destination.split('/')[0]} (token kept in memory only)", clock())
        metadata = Path(login.folder) / "metadata.json"
        argv = engine.build_argv(
            dockerfile, destination, build_args, network, login.folder, str(metadata), push and engine.kind == "buildx"
        )
        yield Progress("build", "$ " + " ".join([Path(argv[0]).name, *argv[3:]]), clock())
        async for p in stream_command(argv, login, "build", clock, root, engine.env):
            yield p
        digest = ""
        if push and engine.kind == "buildx":
            try:
                digest = json.loads(metadata.read_text()).get("containerimage.digest", "")
            except (OSError, ValueError):
                digest = ""
        elif push:  # the plain builder and podman build here; the push is its own step
            async for p in stream_command(
                [engine.binary, "--config", login.folder, "push", destination], login, "push", clock, root
            ):
                digest = match.group(0) if (match := DIGEST_IN_PUSH.search(p.message)) else digest
                yield p
        uri, _, tag = destination.rpartition(":")
        yield Progress(
            "build",
            f"built {destination}" + (f" ({digest})" if digest else ""),
            clock(),
            result=ImageRef(uri, tag, digest),
        )


DIGEST_IN_PUSH = re.compile(r"sha256:[0-9a-f]{64}")
"""``docker push`` ends with ``TAG: digest: sha256:... size: N``."""


async def push_image(
    aws: AwsSession, plan: ImagePlan, record: ClusterRecord, docker: str | None = None
) -> AsyncIterator[Progress]:
    """Push what ``image build --no-push`` built here (``plan.repository:TAG``, the tag its context
    names): the ECR repository made where it is not, the image tagged for it and pushed; the last
    Progress (kind done) carries the image with its digest, as ``build_image``'s does."""
    engine = find_engine(docker)
    if engine is None:
        raise BackendError("no container engine answers here, so there is no local image to push", no_engine_hint())
    clock = Clock()
    root = source_root()
    tag = image_tag(await asyncio.to_thread(context_archive, root), plan.flavour, plan.build_args)
    local = f"{plan.repository}:{tag}"
    if not await asyncio.to_thread(engine.image_id, local):
        raise BackendError(
            f"no image {local} here (the context has changed since, or it was never built)",
            "torchdeck image build --no-push (with the same --gpu and --torch-* options), then push",
        )
    uri, made = await ensure_repository(aws, record, plan.repository)
    if made:
        yield Progress(
            "repository", f"created ECR repository {plan.repository} (scan on push, immutable tags)", clock()
        )
    tagged = await asyncio.to_thread(
        subprocess.run, [engine.binary, "tag", local, f"{uri}:{tag}"], capture_output=True, text=True, timeout=60
    )
    if tagged.returncode != 0:
        raise BackendError(f"docker tag {local} failed: {tagged.stderr.strip()[:200]}", "")
    async with EcrLogin(aws, engine.binary) as login:
        assert login.folder is not None
        argv = [engine.binary, "--config", login.folder, "push", f"{uri}:{tag}"]
        async for p in stream_command(argv, login, "push", clock, root):
            yield p
    digest = await pushed_digest(aws, plan.repository, tag)
    if not digest:
        raise BackendError(f"ECR has no image tagged {tag} after the push", "read the push output above")
    yield Progress("done", f"image {uri}@{digest}", clock(), "done", ImageRef(uri, tag, digest))
