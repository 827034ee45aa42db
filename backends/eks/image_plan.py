"""What an image build is asked for and what it builds from: the plan and its checks, the
build context (the files the Dockerfiles copy, or the user's ``--code`` folder with its own
Dockerfile or one written for it) and the tag that names the context."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ..errors import BackendError, SpecError
from ..files import read_text
from ..names import check_cluster_name, check_code_path, check_namespace

if TYPE_CHECKING:
    from ..engine import Engine
    from .access import ClusterRecord, KubeFactory
    from .progress import Clock
    from .session import AwsSession

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
URL_RE = re.compile(r"^https?://[^\s\"'$`\\]{1,2000}\Z")
"""A URL handed to pip in the build: http(s), no spaces, quotes or shell characters."""
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
    torch_index: str | None = None
    """Where pip finds torch in the build (TORCH_INDEX_URL): a mirror's or proxy's index; default
    PyTorch's CPU index (cpu) or PyPI (gpu), as the Dockerfiles say."""
    torch_find_links: str | None = None
    """A find-links page holding torch's wheel (TORCH_FIND_LINKS), searched beside the index."""
    torch_wheels: str | None = None
    """A wheel folder here holding torch and what the image installs beside it (numpy, setuptools,
    wheel): served to the build (``local_image.serve_wheels``), which then runs on the host's network
    and takes every package from it."""
    network: str | None = None
    """The build's network (``--network``: host, none, or the engine's default)."""
    mpi: bool = False
    """``--mpi``: with OpenMPI and an SSH server run by the image's user, for MPIJobs
    (``docker/mpi/install.sh``)."""

    @property
    def build_args(self) -> tuple[str, ...]:
        """The Dockerfiles' build arguments this plan sets (none: their defaults)."""
        args: tuple[str, ...] = (f"TORCH_INDEX_URL={self.torch_index}",) if self.torch_index else ()
        args += ("MPI=1",) if self.mpi else ()
        return args + ((f"TORCH_FIND_LINKS={self.torch_find_links}",) if self.torch_find_links else ())

    @property
    def flavour(self) -> str:
        """What the image's tag ends with: its variant, and -mpi with ``--mpi``."""
        return f"{self.variant}-mpi" if self.mpi else self.variant

    @property
    def dockerfile(self) -> str:
        return f"docker/Dockerfile.{self.variant}"


WHEELS_NEEDED = ("torch", "numpy", "setuptools", "wheel")
"""What the Dockerfiles install from a ``--torch-wheels`` folder, which is then pip's only source:
torch, numpy beside it, and torchdeck's own build backend (pyproject.toml's build-system); the GPU
image nvidia-ml-py as well."""

MPI_PACKAGES = "openmpi-bin openssh-server openssh-client"
"""What ``--mpi`` installs from Debian (``docker/mpi/install.sh`` says the same)."""
CODE_IN_IMAGE = "/opt/code"
"""Where ``--code`` puts the user's code in the image (the spec's entrypoint.in_image)."""
CODE_DOCKERFILE = "Dockerfile.torchdeck"


def code_dockerfile(requirements: str | None) -> str:
    """The Dockerfile of a ``--code`` build: the user's folder and its requirements on the training
    image (BASE, pinned by digest), running as the image's own user."""
    # exec form, its words as JSON: a name with spaces or quotes is one argument, and no shell reads it
    run = json.dumps(["pip", "install", "--no-cache-dir", "-r", f"{CODE_IN_IMAGE}/{requirements}"])
    install = f"USER 0\nRUN {run}\nUSER 1000:1000\n" if requirements else ""
    return (
        "# Written by torchdeck image build --code: your code on torchdeck's training image.\n"
        "ARG BASE\nFROM ${BASE}\n"
        # a wheel folder served to the build (--torch-wheels) is pip's one source for the requirements
        "ARG PIP_FIND_LINKS\nARG PIP_NO_INDEX\n"
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
    for flag, url in (("--torch-index", plan.torch_index), ("--torch-find-links", plan.torch_find_links)):
        if url is not None and not URL_RE.match(url):
            raise SpecError(
                flag,
                f"{url!r} is not an http(s) URL",
                "e.g. https://pypi.example.com/simple (a folder here: --torch-wheels)",
            )
    if plan.torch_wheels is not None:
        folder = Path(plan.torch_wheels).expanduser()
        if not folder.is_dir() or not any(folder.glob("torch-*.whl")):
            raise SpecError("--torch-wheels", f"{plan.torch_wheels} is not a folder holding a torch-*.whl", "")
        needed = WHEELS_NEEDED + (("nvidia_ml_py",) if plan.variant == "gpu" else ())
        lacking = [name for name in needed if not any(folder.glob(f"{name}-*.whl"))]
        if lacking:
            raise SpecError(
                "--torch-wheels",
                f"{plan.torch_wheels} holds no wheel of {', '.join(lacking)} (the build takes every package from it)",
                f"fill it once: pip download --dest {plan.torch_wheels} {' '.join(n.replace('_', '-') for n in lacking)}",
            )
        if plan.builder == "kaniko":
            raise SpecError("--torch-wheels", "a folder here cannot reach a build in the cluster", "use --torch-index")
        if plan.mpi and not ((folder / "Packages").is_file() and any(folder.glob("openmpi-bin_*.deb"))):
            raise SpecError(
                "--torch-wheels",
                f"{plan.torch_wheels} holds no Debian packages for --mpi (the build takes every package from it)",
                f"fill it once: scripts/fetch-debs.sh {plan.torch_wheels} {MPI_PACKAGES}",
            )
    if plan.network is not None and not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z", plan.network):
        raise SpecError("--network", f"{plan.network!r} is not a network name", "host, none, or a network docker knows")
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


def image_tag(archive: bytes, variant: str, build_args: tuple[str, ...] = ()) -> str:
    """The context's digest (and the build arguments', where any are set) names the image."""
    digest = hashlib.sha256(archive + "\n".join(build_args).encode()).hexdigest()[:12]
    return f"ctx-{digest}-{variant}"


@dataclass(frozen=True)
class BuildContext:
    """What a build from here would use: the Docker engine that answers (None: none, so Kaniko),
    the context's size, and the tag each image variant would get (the context's digest names it)."""

    engine: str | None
    size_kib: float
    tags: dict[str, str]


def build_context() -> BuildContext:
    from ..engine import docker_engine

    archive = context_archive(source_root())
    return BuildContext(docker_engine(), len(archive) / 1024, {v: image_tag(archive, v) for v in ("cpu", "gpu")})


BuilderKind = Literal["docker", "kaniko"]
"""The path of a build: here on a container engine (docker, its plain builder, podman), or Kaniko."""


@dataclass(frozen=True)
class Builder:
    """What every image of one ``image build`` shares: the account, the repository ``uri``, the
    path (``kind``, with the docker binary on the docker path), whether it pushes, and the waits."""

    aws: AwsSession
    plan: ImagePlan
    record: ClusterRecord
    uri: str
    clock: Clock
    kind: BuilderKind
    engine: Engine | None = None
    kube: KubeFactory | None = None
    poll_s: float = 2.0
    timeout_s: float = TIMEOUT_S
    push: bool = True


@dataclass(frozen=True)
class ImageBuild:
    """One image to build: its context as an archive (and the folder it came from, where there is
    one), its Dockerfile, tag and build arguments; ``unchanged`` says why a tag ECR holds is reused."""

    archive: bytes
    root: Path | None
    dockerfile: str
    tag: str
    build_args: tuple[str, ...] = ()
    phase: str = "build"
    unchanged: str = ""
