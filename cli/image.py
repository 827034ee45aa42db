"""``torchdeck image build|push``: the image screen without the screen:
the training image built (Docker here, else Kaniko in the cluster), pushed
to ECR, and its digest pinned in the job spec; with ``--no-push``, built and
tagged on this machine's engine only, with no AWS and no cluster."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from torchdeck.backends.errors import BackendError

from .cluster import open_cloud
from .output import Commands, stream
from .storage import cluster_args

if TYPE_CHECKING:
    from torchdeck.backends.eks.image_plan import ImagePlan
    from torchdeck.settings import Settings


def add_image_parser(sub: Commands) -> None:
    p = sub.add_parser("image", help="build the training image and push it to ECR")
    isub = p.add_subparsers(dest="image_command", metavar="COMMAND", required=True)
    for name, text in (
        ("build", "build docker/Dockerfile.cpu or .gpu (Docker here, else Kaniko in the cluster)"),
        ("push", "push the image built here (docker) and pin its digest"),
    ):
        c = isub.add_parser(name, help=text)
        cluster_args(c)
        c.add_argument("--gpu", action="store_true", help="the GPU image (default: CPU)")
        c.add_argument(
            "--mpi", action="store_true", help="with OpenMPI and an SSH server, for --kind mpijob (the MPI Operator)"
        )
        c.add_argument("--repository", default="torchdeck-trainer", help="the ECR repository")
        c.add_argument(
            "--spec",
            metavar="FILE",
            help="write image: REPO@DIGEST here (default: $TORCHDECK_SPEC or ./torchdeck.yaml)",
        )
        if name == "build":
            c.add_argument("--builder", default="auto", help="auto (default), docker or kaniko")
            c.add_argument("--bucket", help="Kaniko: where the build context goes (default: the model bucket)")
            c.add_argument("--namespace", default="default", help="Kaniko: where the build job runs")
            c.add_argument(
                "--no-push",
                action="store_true",
                help="build and tag here only: no AWS, no cluster (then: train --in-image)",
            )
            c.add_argument("--torch-index", metavar="URL", help="where pip finds torch (a mirror's or proxy's index)")
            c.add_argument("--torch-find-links", metavar="URL", help="a find-links page holding torch's wheel")
            c.add_argument(
                "--torch-wheels",
                metavar="DIR",
                help="a folder here holding torch's wheel (and, for --mpi, Debian's packages): served to the build",
            )
            c.add_argument("--network", help="the build's network: host, none (default: the engine's)")
            c.add_argument(
                "--code",
                metavar="DIR",
                help="also build your code (and its requirements.txt) on top of it, or DIR's own Dockerfile",
            )
            c.add_argument("--requirements", metavar="FILE", help="--code: the requirements file in DIR")


def image_plan(args: argparse.Namespace, cluster: str, region: str) -> ImagePlan:
    from torchdeck.backends.eks.image_plan import ImagePlan, validate_image

    return validate_image(
        ImagePlan(
            cluster,
            region,
            variant="gpu" if args.gpu else "cpu",
            repository=args.repository,
            builder=getattr(args, "builder", "docker"),
            bucket=getattr(args, "bucket", None),
            namespace=getattr(args, "namespace", "default"),
            code=str(Path(args.code).resolve()) if getattr(args, "code", None) else None,
            requirements=getattr(args, "requirements", None),
            torch_index=getattr(args, "torch_index", None),
            torch_find_links=getattr(args, "torch_find_links", None),
            torch_wheels=getattr(args, "torch_wheels", None),
            network=getattr(args, "network", None),
            mpi=args.mpi,
        )
    )


def cmd_image(args: argparse.Namespace, settings: Settings) -> int:
    from torchdeck.backends.eks.image import write_image_to_spec
    from torchdeck.backends.eks.progress import ImageRef

    if args.image_command == "build" and args.no_push:  # this machine's engine only: no AWS, no cluster
        from torchdeck.backends.local_image import build_local

        plan = image_plan(args, args.cluster or "local", args.region or "")
        if plan.builder == "kaniko":
            raise BackendError(
                "--no-push builds here; Kaniko builds in the cluster and pushes", "drop --builder kaniko"
            )
        stream(build_local(plan))
        return 0
    cloud = open_cloud(settings, args.profile)
    record = cloud.pick_cluster(args.cluster, args.region)
    plan = image_plan(args, record.name, record.region)
    if args.image_command == "build":
        last = stream(cloud.build_image(plan, push=True))
    else:
        last = stream(cloud.push_image(plan))
    if last is None or not isinstance(last.result, ImageRef) or not last.result.digest:
        raise BackendError("the build ended without an image digest", "read the build output above")
    image = last.result.reference
    spec_file = Path(args.spec) if args.spec else settings.spec_file
    write_image_to_spec(spec_file, image, last.result.code_dir or None)
    print(f"{spec_file}: image: {image} (jobs pull exactly this image)")
    if last.result.code_dir:
        print(f"{spec_file}: entrypoint.in_image: {last.result.code_dir} (the pods run the image's copy of your code)")
    return 0
