"""``torchdeck image build|push``: the image screen without the screen:
the training image built (Docker here, else Kaniko in the cluster), pushed
to ECR, and its digest pinned in the job spec."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from torchdeck.backends.errors import BackendError

from .cluster import open_cloud
from .output import Commands, stream
from .storage import cluster_args

if TYPE_CHECKING:
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
            c.add_argument("--no-push", action="store_true", help="docker: build here only")
            c.add_argument(
                "--code",
                metavar="DIR",
                help="also build your code (and its requirements.txt) on top of it, or DIR's own Dockerfile",
            )
            c.add_argument("--requirements", metavar="FILE", help="--code: the requirements file in DIR")


def cmd_image(args: argparse.Namespace, settings: Settings) -> int:
    from torchdeck.backends.eks.image import write_image_to_spec
    from torchdeck.backends.eks.image_plan import ImagePlan, validate_image
    from torchdeck.backends.eks.progress import ImageRef

    cloud = open_cloud(settings, args.profile)
    record = cloud.pick_cluster(args.cluster, args.region)
    plan = validate_image(
        ImagePlan(
            record.name,
            record.region,
            variant="gpu" if args.gpu else "cpu",
            repository=args.repository,
            builder=getattr(args, "builder", "docker"),
            bucket=getattr(args, "bucket", None),
            namespace=getattr(args, "namespace", "default"),
            code=str(Path(args.code).resolve()) if getattr(args, "code", None) else None,
            requirements=getattr(args, "requirements", None),
        )
    )
    if plan.code and args.image_command == "build" and args.no_push:
        raise BackendError("--code builds on the pushed training image", "drop --no-push")
    if args.image_command == "build":
        last = stream(cloud.build_image(plan, push=not args.no_push))
        if args.no_push:
            return 0
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
