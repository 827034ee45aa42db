"""The container engine on this machine, and how to build and run with it: ``docker buildx build``
where the buildx plugin answers, the plain ``docker build`` (its classic builder) where it does not
(Debian's and many distributions' Docker have no buildx), and ``podman build`` where podman is the
engine. Shared by the image builds (ECR and local) and the runs inside the training image."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from typing import Literal

EngineKind = Literal["buildx", "docker", "podman"]
PLAIN_BUILDER_ENV = {"DOCKER_BUILDKIT": "0"}
"""A docker client without its buildx plugin refuses ``docker build`` while BuildKit is on (the
default since Docker 23): the classic builder it falls back to needs it off."""


@dataclass(frozen=True)
class Engine:
    """A container engine that answers: its client binary and how it builds."""

    binary: str
    kind: EngineKind

    @property
    def words(self) -> str:
        return {"buildx": "docker buildx", "docker": "docker (the plain builder: no buildx here)", "podman": "podman"}[
            self.kind
        ]

    @property
    def env(self) -> dict[str, str]:
        """What the client's environment needs beside the caller's, for a build."""
        return dict(PLAIN_BUILDER_ENV) if self.kind == "docker" else {}

    def image_id(self, name: str) -> str:
        """The engine's id of the image ``name`` here ('' where it has none)."""
        done = subprocess.run(
            [self.binary, "image", "inspect", "--format", "{{.Id}}", name],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        return done.stdout.strip() if done.returncode == 0 else ""

    def build_argv(
        self,
        dockerfile: str,
        tag: str,
        build_args: tuple[str, ...] = (),
        network: str | None = None,
        config: str | None = None,
        metadata: str | None = None,
        push: bool = False,
    ) -> list[str]:
        """The build of ``.`` (the context) with ``dockerfile`` as ``tag``; with buildx, ``push``
        pushes it and ``metadata`` receives its digest. The other builders only build (and load):
        their push is ``docker push`` after it."""
        argv = [self.binary, *(["--config", config] if config else [])]
        if self.kind == "buildx":
            argv += ["buildx", "build", "--provenance=false", "--push" if push else "--load"]
            argv += ["--metadata-file", metadata] if metadata else []
        else:
            argv += ["build"]
        argv += ["--file", dockerfile, "--tag", tag]
        argv += ["--network", network] if network else []
        argv += [x for arg in build_args for x in ("--build-arg", arg)]
        return [*argv, "."]


def _answers(argv: list[str]) -> str:
    """What the command printed, where it succeeded and printed something; '' otherwise."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=15, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def docker_engine(docker: str | None = None) -> str | None:
    """The docker binary if an engine answers it, else None (no client, or a client without a daemon)."""
    docker = docker or shutil.which("docker")
    return docker if docker and _answers([docker, "version", "--format", "{{.Server.Version}}"]) else None


def find_engine(docker: str | None = None) -> Engine | None:
    """The engine that answers here: docker (with buildx where its plugin answers), else podman; None
    where neither has an engine behind it."""
    found = docker_engine(docker)
    if found:
        return Engine(found, "buildx" if _answers([found, "buildx", "version"]) else "docker")
    podman = shutil.which("podman")
    if podman and _answers([podman, "version", "--format", "{{.Version}}"]):
        return Engine(podman, "podman")
    return None


def no_engine_hint() -> str:
    return (
        "start Docker (or podman) here; on Debian, as root: apt-get install docker.io, then dockerd; "
        "or build in the cluster: --builder kaniko"
    )
