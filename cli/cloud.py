"""``torchdeck storage|image|model|cleanup|resources``: the storage and
image screens, the model download, and the teardown, without a screen.
Progress prints one line per event, as ``torchdeck cluster`` does."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchdeck.backends.errors import BackendError

from .cluster import _confirm, _say, _session, stream

if TYPE_CHECKING:
    from torchdeck.settings import Settings


def _cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", help="the EKS cluster (default: the only one torchdeck knows)")
    p.add_argument("--region", help="its region (default: from torchdeck's record of it)")
    p.add_argument("--profile", help="AWS profile (default: $AWS_PROFILE)")


def add_cloud_parsers(sub: Any) -> None:
    p = sub.add_parser("storage", help="shared storage (EFS or FSx for Lustre) and the model bucket for a cluster")
    ssub = p.add_subparsers(dest="storage_command", metavar="COMMAND", required=True)
    c = ssub.add_parser("create", help="make the file system, its driver and claim, and the bucket")
    _cluster_args(c)
    c.add_argument("--kind", default="efs", help="efs (default), fsx (Lustre, faster) or none (a bucket only)")
    c.add_argument("--fsx-deployment", default="SCRATCH_2", help="SCRATCH_1, SCRATCH_2, PERSISTENT_1 or PERSISTENT_2")
    c.add_argument("--fsx-capacity", type=int, default=1200, metavar="GIB", help="1200, 2400, then steps of 2400")
    c.add_argument("--fsx-throughput", type=int, metavar="MBPS", help="PERSISTENT: MB/s per TiB")
    c.add_argument("--fsx-s3-link", metavar="S3_URL", help="a bucket prefix the file system imports and exports")
    c.add_argument("--bucket", help="the bucket for models (made if absent)")
    c.add_argument("--prefix", default="models/", help="the key prefix jobs may use (default: models/)")
    c.add_argument("--namespace", default="default", help="where the claim and the service account go")
    c.add_argument("--pvc", default="shared", help="the claim's name (default: shared)")
    c.add_argument("--service-account", default="torchdeck-s3", help="the training service account")
    c.add_argument("--spec", metavar="FILE", help="also set cluster.pvc, the service account and model_file in it")
    c.add_argument("--yes", action="store_true", help="do not ask")
    c = ssub.add_parser("status", help="the file systems, mount targets, rules, bucket and claims")
    _cluster_args(c)
    c.add_argument("--output", choices=("text", "json"), default="text")
    c = ssub.add_parser("delete", help="delete the storage torchdeck made for a cluster (the data with it)")
    _cluster_args(c)
    c.add_argument("--keep-bucket", action="store_true", help="leave the model bucket and what is in it")
    c.add_argument("--yes", action="store_true")

    p = sub.add_parser("image", help="build the training image and push it to ECR")
    isub = p.add_subparsers(dest="image_command", metavar="COMMAND", required=True)
    for name, text in (("build", "build docker/Dockerfile.cpu or .gpu (Docker here, else Kaniko in the cluster)"),
                       ("push", "push the image built here (docker) and pin its digest")):
        c = isub.add_parser(name, help=text)
        _cluster_args(c)
        c.add_argument("--gpu", action="store_true", help="the GPU image (default: CPU)")
        c.add_argument("--repository", default="torchdeck-trainer", help="the ECR repository")
        c.add_argument("--spec", metavar="FILE", help="write image: REPO@DIGEST here (default: $TORCHDECK_SPEC or "
                       "./torchdeck.yaml)")
        if name == "build":
            c.add_argument("--builder", default="auto", help="auto (default), docker or kaniko")
            c.add_argument("--bucket", help="Kaniko: where the build context goes (default: the model bucket)")
            c.add_argument("--namespace", default="default", help="Kaniko: where the build job runs")
            c.add_argument("--no-push", action="store_true", help="docker: build here only")

    p = sub.add_parser("model", help="the trained model")
    msub = p.add_subparsers(dest="model_command", metavar="COMMAND", required=True)
    c = msub.add_parser("get", help="copy a trained model here (from S3, a run, or the cluster's volume)")
    c.add_argument("--run", metavar="RUN", help="the run whose model to fetch")
    c.add_argument("--from", dest="source", metavar="LOCATION", help="an s3:// URL or a path")
    c.add_argument("--via", metavar="S3_URL", help="cluster volume: the S3 prefix to pass it through "
                   "(default: the model bucket's prefix)")
    c.add_argument("-o", "--output", default="model.pt", help="where it goes here (default: ./model.pt)")
    c.add_argument("--region", help="the bucket's region")
    c.add_argument("--profile", help="AWS profile")

    p = sub.add_parser("cleanup", help="delete everything torchdeck made (shows the plan first)")
    p.add_argument("--cluster", help="only what belongs to this cluster")
    p.add_argument("--region", action="append", default=[], help="also look here for orphans (repeat)")
    p.add_argument("--profile", help="AWS profile")
    p.add_argument("--dry-run", action="store_true", help="show the plan only (the default without a terminal)")
    p.add_argument("--yes", action="store_true", help="delete without asking")
    p.add_argument("--keep-buckets", action="store_true", help="leave the buckets and what is in them")
    p.add_argument("--no-orphans", action="store_true", help="the ledger only: do not look for tagged leftovers")
    p.add_argument("--output", choices=("text", "json"), default="text")

    p = sub.add_parser("resources", help="what torchdeck made that exists, and what it costs")
    p.add_argument("--all", action="store_true", help="deleted ones too")
    p.add_argument("--output", choices=("text", "json"), default="text")


def dispatch_cloud(args: argparse.Namespace, settings: Settings) -> int:
    if args.command == "storage":
        return {"create": cmd_storage_create, "status": cmd_storage_status,
                "delete": cmd_storage_delete}[args.storage_command](args, settings)
    if args.command == "image":
        return cmd_image(args, settings)
    if args.command == "model":
        return cmd_model_get(args, settings)
    if args.command == "cleanup":
        return cmd_cleanup(args, settings)
    return cmd_resources(args, settings)


def cluster_target(args: argparse.Namespace, settings: Settings):
    """The cluster's record (made if torchdeck has none yet) from --cluster/--region or the only record."""
    from torchdeck.backends.eks.access import ClusterRecord

    name, region = args.cluster, args.region
    if not name:
        known = [r.name for r in ClusterRecord.all(settings.state_dir)]
        if len(known) != 1:
            raise BackendError("which cluster?" + (f" torchdeck knows {', '.join(known)}" if known else ""),
                               "pass --cluster NAME (and --region)")
        name = known[0]
    record = ClusterRecord.load(settings.state_dir, name)
    region = region or (record.region if record else None)
    if not region:
        raise BackendError(f"which region is cluster {name} in?", "pass --region")
    return ClusterRecord.open(settings.state_dir, name, region)


# -- storage ----------------------------------------------------------------------------


def cmd_storage_create(args: argparse.Namespace, settings: Settings) -> int:
    from torchdeck.backends.eks.storage import StoragePlan, create_storage, spec_settings, validate_storage

    record = cluster_target(args, settings)
    plan = validate_storage(StoragePlan(
        record.name, record.region, kind=args.kind, fsx_deployment=args.fsx_deployment,
        fsx_capacity_gib=args.fsx_capacity, fsx_throughput=args.fsx_throughput, fsx_s3_link=args.fsx_s3_link,
        bucket=args.bucket, prefix=args.prefix, namespace=args.namespace, pvc=args.pvc,
        service_account=args.service_account))
    what = {"efs": "EFS (encrypted, elastic throughput; $0.30 per GB-month stored)",
            "fsx": f"FSx for Lustre {plan.fsx_deployment} {plan.fsx_capacity_gib} GiB "
                   f"(about ${plan.fsx_per_hour:.3f}/h)", "none": "no file system"}[plan.kind]
    print(f"cluster {plan.cluster} in {plan.region}: {what}"
          + (f", bucket {plan.bucket} for s3://{plan.bucket}/{plan.prefix}" if plan.bucket else ""))
    _confirm(f"create this storage for cluster {plan.cluster}?", args.yes)
    aws = _session(plan.region, args.profile)
    stream(create_storage(aws, plan, record, poll_s=settings.aws_poll_s))
    if args.spec:
        from torchdeck.backends.spec import JobSpec, load_spec, save_spec, with_overrides

        path = Path(args.spec)
        spec = load_spec(path) if path.exists() else JobSpec()
        save_spec(with_overrides(spec, spec_settings(record)), path)
        print(f"{path}: " + ", ".join(f"{k}={v}" for k, v in spec_settings(record).items()))
    return 0


def cmd_storage_status(args: argparse.Namespace, settings: Settings) -> int:
    from torchdeck.backends.eks.storage import storage_state

    record = cluster_target(args, settings)
    kube = None
    if record.context:
        from torchdeck.backends.kubernetes.backend import KubernetesBackend
        kube = KubernetesBackend(record.kubeconfig or None, record.context)
    state = storage_state(_session(record.region, args.profile), record, kube)
    if args.output == "json":
        print(json.dumps(state.to_dict(), indent=2))
    else:
        print("\n".join(state.lines) if state.lines else f"no storage for cluster {record.name}")
        for problem in state.problems:
            print(f"problem: {problem}")
    return 1 if state.problems and state.lines else 0


def teardown(settings: Settings, steps: list[Any], profile: str | None) -> None:
    from torchdeck.backends.eks.teardown import Teardown
    from torchdeck.backends.eks.create import eksctl_path

    stream(Teardown(settings.state_dir, eksctl=eksctl_path(), poll_s=settings.aws_poll_s, profile=profile).run(steps))


def cmd_storage_delete(args: argparse.Namespace, settings: Settings) -> int:
    from torchdeck.backends.eks.teardown import storage_steps
    from torchdeck.backends.ledger import Ledger

    record = cluster_target(args, settings)
    steps = storage_steps(Ledger(settings.state_dir), record.name, args.keep_bucket)
    if not [s for s in steps if s.action == "delete"]:
        print(f"no storage of cluster {record.name} to delete")
        return 0
    for step in steps:
        print(step.line())
    _confirm(f"delete the storage of cluster {record.name}, and the data on it?", args.yes)
    teardown(settings, steps, args.profile)
    record.storage = {}
    record.save()
    return 0


# -- image ------------------------------------------------------------------------------


def _spec_file(args: argparse.Namespace, settings: Settings) -> Path:
    return Path(args.spec) if args.spec else settings.spec_file


def cmd_image(args: argparse.Namespace, settings: Settings) -> int:
    from torchdeck.backends.eks.image import ImagePlan, build_image, push_image, validate_image, write_image_to_spec

    record = cluster_target(args, settings)
    plan = validate_image(ImagePlan(record.name, record.region, variant="gpu" if args.gpu else "cpu",
                                    repository=args.repository, builder=getattr(args, "builder", "docker"),
                                    bucket=getattr(args, "bucket", None),
                                    namespace=getattr(args, "namespace", "default")))
    aws = _session(record.region, args.profile)
    if args.image_command == "build":
        last = stream(build_image(aws, plan, record, push=not args.no_push, poll_s=min(settings.aws_poll_s, 2.0)))
        if args.no_push:
            return 0
    else:
        last = stream(push_image(aws, plan))
    image = last.message.removeprefix("image ")
    spec_file = _spec_file(args, settings)
    write_image_to_spec(spec_file, image)
    print(f"{spec_file}: image: {image} (jobs pull exactly this image)")
    return 0


# -- model ------------------------------------------------------------------------------


def cmd_model_get(args: argparse.Namespace, settings: Settings) -> int:
    """A model from S3 or a path straight here; one on a cluster's volume through a model-copy job and
    S3 (the training service account may write the model prefix)."""
    import shutil

    from torchdeck.backends import open_backend

    location, spec = args.source, None
    if args.run:
        backend = open_backend(settings.backend, settings)
        spec, saved = backend.model_file_of(args.run)
        location = location or saved
        if settings.backend != "local" and not location.startswith("s3://"):
            via = args.via or model_prefix(settings, spec)
            target = f"{via.rstrip('/')}/{args.run}/model.pt"
            _say(f"{location} is on the cluster's volume: copying it to {target} with a job")
            backend.copy_model(spec, location, target, on_wait=_say)
            location = target
    if not location:
        raise BackendError("which model? no --run and no --from", "torchdeck model get --run RUN, or --from s3://...")
    out = Path(args.output).expanduser()
    if location.startswith("s3://"):
        bucket, _, key = location[5:].partition("/")
        aws = _session(args.region, args.profile)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".part")
        aws.call("s3", "download_file", Bucket=bucket, Key=key, Filename=str(tmp))
        tmp.replace(out)
    else:
        source = Path(location).expanduser()
        if not source.is_file():
            raise BackendError(f"no model file at {source}", "did the run finish? torchdeck status RUN")
        shutil.copyfile(source, out)
    print(f"{location} -> {out} ({out.stat().st_size / 1e6:.1f} MB); test it: torchdeck test --model-file {out}")
    return 0


def model_prefix(settings: Settings, spec: Any) -> str:
    """The model prefix of the bucket beside the run's volume: the cluster whose storage made the
    claim (and service account) the run's spec names, never just the first cluster with a bucket."""
    from torchdeck.backends.eks.access import ClusterRecord

    c = spec.cluster
    with_bucket = [r for r in ClusterRecord.all(settings.state_dir) if r.storage.get("bucket")]
    matching = [r for r in with_bucket if r.storage.get("pvc") == c.pvc
                and r.storage.get("namespace", spec.namespace) == spec.namespace
                and (not c.service_account or r.storage.get("service_account") == c.service_account)]
    if len(matching) == 1:
        record = matching[0]
        return f"s3://{record.storage['bucket']}/{record.storage.get('prefix', '')}models"
    if matching:
        names = ", ".join(sorted(r.name for r in matching))
        raise BackendError(f"the claim {c.pvc} in {spec.namespace} belongs to several clusters' storage ({names})",
                           "pass --via s3://BUCKET/PREFIX")
    raise BackendError(f"the model is on the volume of claim {c.pvc or '(none)'} in {spec.namespace}, and no bucket "
                       "torchdeck made sits beside that claim",
                       "make one (torchdeck storage create --bucket NAME --spec) or pass --via s3://BUCKET/PREFIX")


# -- cleanup and resources ----------------------------------------------------------------


def cmd_cleanup(args: argparse.Namespace, settings: Settings) -> int:
    import asyncio
    import os

    from torchdeck.backends.eks.teardown import find_orphans, plan_cleanup
    from torchdeck.backends.ledger import Ledger

    ledger = Ledger(settings.state_dir)
    rows = ledger.resources(scope=args.cluster)
    orphans: list[Any] = []
    if not args.no_orphans:
        regions = set(args.region) | {r.region for r in rows if r.region}
        default = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if default:
            regions.add(default)
        if not regions:
            raise BackendError("which region should cleanup look in for leftovers?", "pass --region (repeatable)")
        found: dict[tuple[str, str], Any] = {}
        for region in sorted(regions):  # IAM is global: a role found from two regions is one role
            for orphan in asyncio.run(find_orphans(_session(region, args.profile))):
                found.setdefault((orphan.kind, orphan.ident), orphan)
        orphans = list(found.values())
    steps = plan_cleanup(rows, orphans, scope=args.cluster, keep_buckets=args.keep_buckets)
    if args.output == "json":
        print(json.dumps([{"action": s.action, "orphan": s.orphan, "why": s.why, **s.resource.to_dict()}
                          for s in steps], indent=2))
    else:
        if not steps:
            print("nothing to clean up: nothing torchdeck made exists, and nothing tagged torchdeck was found")
            return 0
        per_hour = sum(s.resource.cost_per_hour for s in steps if s.action != "keep")
        print(f"teardown plan ({len([s for s in steps if s.action != 'keep'])} to delete, "
              f"${per_hour:.3f}/h while they exist), in order:")
        for step in steps:
            print("  " + step.line())
    deleting = [s for s in steps if s.action != "keep"]
    if args.dry_run or not deleting or (not args.yes and not sys.stdin.isatty()):
        if deleting and args.output == "text":
            print("dry run: nothing was deleted; torchdeck cleanup --yes deletes it")
        return 0
    _confirm(f"delete these {len(deleting)} resources?", args.yes)
    teardown(settings, steps, args.profile)
    return 0


def resource_rows(resources: list[Any], now: float | None = None) -> list[tuple[str, ...]]:
    """KIND, NAME, CLUSTER, REGION, AGE, $/H, SO FAR: the rows ``torchdeck resources`` prints."""
    from torchdeck.monitor.state import format_duration

    now = time.time() if now is None else now
    rows = []
    for r in resources:
        age = format_duration((r.deleted_at or now) - r.created_at)
        rows.append((r.kind, r.ident if len(r.ident) < 48 else "..." + r.ident[-45:], r.scope or "-", r.region or "-",
                     age + ("" if r.live else " (deleted)"), f"{r.cost_per_hour:.3f}" if r.cost_per_hour else "-",
                     f"{r.cost_so_far(now):.2f}"))
    return rows


def cmd_resources(args: argparse.Namespace, settings: Settings) -> int:
    from torchdeck.backends.ledger import Ledger

    ledger = Ledger(settings.state_dir)
    found = ledger.resources(live_only=not args.all)
    per_hour, so_far = ledger.costs()
    if args.output == "json":
        print(json.dumps({"per_hour": per_hour, "so_far": so_far, "resources": [r.to_dict() for r in found]},
                         indent=2))
        return 0
    if not found:
        print("torchdeck has made nothing that exists now" + (f" (${so_far:.2f} spent so far)" if so_far else ""))
        return 0
    rows = [("KIND", "NAME", "CLUSTER", "REGION", "AGE", "$/H", "SO FAR")] + resource_rows(found)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    print(f"about ${per_hour:.3f}/h now, ${so_far:.2f} so far (estimates: on-demand prices, storage by size)")
    return 0
