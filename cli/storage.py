"""``torchdeck storage create|status|delete``: the storage screen without
the screen: EFS or FSx for Lustre for a cluster's jobs and the bucket for
its models."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from torchdeck.backends.errors import BackendError
from torchdeck.trainer.metrics import strict_json

from .cluster import open_cloud
from .output import Commands, confirm, stream

if TYPE_CHECKING:
    from torchdeck.settings import Settings


def cluster_args(p: argparse.ArgumentParser) -> None:
    """--cluster, --region and --profile, as every cloud command takes them."""
    p.add_argument("--cluster", help="the EKS cluster (default: the only one torchdeck knows)")
    p.add_argument("--region", help="its region (default: from torchdeck's record of it)")
    p.add_argument("--profile", help="AWS profile (default: $AWS_PROFILE)")


def add_storage_parser(sub: Commands) -> None:
    p = sub.add_parser("storage", help="shared storage (EFS or FSx for Lustre) and the model bucket for a cluster")
    ssub = p.add_subparsers(dest="storage_command", metavar="COMMAND", required=True)
    c = ssub.add_parser("create", help="make the file system, its driver and claim, and the bucket")
    cluster_args(c)
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
    cluster_args(c)
    c.add_argument("--output", choices=("text", "json"), default="text")
    c = ssub.add_parser("delete", help="delete the storage torchdeck made for a cluster (the data with it)")
    cluster_args(c)
    c.add_argument("--keep-bucket", action="store_true", help="leave the model bucket and what is in it")
    c.add_argument("--yes", action="store_true")


def dispatch_storage(args: argparse.Namespace, settings: Settings) -> int:
    return {"create": cmd_storage_create, "status": cmd_storage_status, "delete": cmd_storage_delete}[
        args.storage_command
    ](args, settings)


def cmd_storage_create(args: argparse.Namespace, settings: Settings) -> int:
    from torchdeck.backends.eks.storage_plan import StoragePlan, validate_storage

    cloud = open_cloud(settings, args.profile)
    record = cloud.pick_cluster(args.cluster, args.region)
    plan = validate_storage(
        StoragePlan(
            record.name,
            record.region,
            kind=args.kind,
            fsx_deployment=args.fsx_deployment,
            fsx_capacity_gib=args.fsx_capacity,
            fsx_throughput=args.fsx_throughput,
            fsx_s3_link=args.fsx_s3_link,
            bucket=args.bucket,
            prefix=args.prefix,
            namespace=args.namespace,
            pvc=args.pvc,
            service_account=args.service_account,
        )
    )
    what = {
        "efs": "EFS (encrypted, elastic throughput; $0.30 per GB-month stored)",
        "fsx": f"FSx for Lustre {plan.fsx_deployment} {plan.fsx_capacity_gib} GiB (about ${plan.fsx_per_hour:.3f}/h)",
        "none": "no file system",
    }[plan.kind]
    print(
        f"cluster {plan.cluster} in {plan.region}: {what}"
        + (f", bucket {plan.bucket} for s3://{plan.bucket}/{plan.prefix}" if plan.bucket else "")
    )
    confirm(f"create this storage for cluster {plan.cluster}?", args.yes)
    last = stream(cloud.create_storage(plan))
    if args.spec:
        from torchdeck.backends.eks.progress import StorageReady
        from torchdeck.backends.spec import update_spec_file

        ready = last.result if last is not None else None
        if not isinstance(ready, StorageReady):  # the create ends with its typed result, or raised
            raise BackendError("storage create ended without its result", "run it again; it resumes")
        settings_for_spec = ready.spec_settings
        path = Path(args.spec)
        update_spec_file(path, settings_for_spec)
        print(f"{path}: " + ", ".join(f"{k}={v}" for k, v in settings_for_spec.items()))
    return 0


def cmd_storage_status(args: argparse.Namespace, settings: Settings) -> int:
    cloud = open_cloud(settings, args.profile)
    state = cloud.storage_state(cloud.pick_cluster(args.cluster, args.region))
    if args.output == "json":
        print(strict_json(state.to_dict(), indent=2))
    else:
        if state.empty:
            print(f"no storage for cluster {state.cluster}")
        for line in state.lines():  # the storage screen logs the same lines
            print(line.text)
    return 1 if state.problems and not state.empty else 0


def cmd_storage_delete(args: argparse.Namespace, settings: Settings) -> int:
    cloud = open_cloud(settings, args.profile)
    record = cloud.pick_cluster(args.cluster, args.region)
    steps = cloud.storage_steps(record, args.keep_bucket)
    if not [s for s in steps if s.action == "delete"]:
        print(f"no storage of cluster {record.name} to delete")
        return 0
    for step in steps:
        print(step.line())
    confirm(f"delete the storage of cluster {record.name}, and the data on it?", args.yes)
    stream(cloud.delete_storage(record, steps))
    return 0
