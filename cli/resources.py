"""``torchdeck model get``, ``torchdeck cleanup`` and ``torchdeck
resources``: a trained model fetched here, and what torchdeck made (the
ledger) listed with its cost, or torn down in order."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from torchdeck.backends.capabilities import CifarTasks
from torchdeck.backends.errors import BackendError
from torchdeck.trainer.metrics import strict_json
from torchdeck.trainer.s3url import S3Url

from .cluster import open_cloud
from .output import Commands, confirm, say, stream

if TYPE_CHECKING:
    from torchdeck.backends.ledger import Resource
    from torchdeck.settings import Settings


def add_resource_parsers(sub: Commands) -> None:
    p = sub.add_parser("model", help="the trained model")
    msub = p.add_subparsers(dest="model_command", metavar="COMMAND", required=True)
    c = msub.add_parser("get", help="copy a trained model here (from S3, a run, or the cluster's volume)")
    c.add_argument("--run", metavar="RUN", help="the run whose model to fetch")
    c.add_argument(
        "--from",
        dest="source",
        metavar="LOCATION",
        help="an s3:// URL or a path (with --run: a path where the run ran, on its volume for a cluster)",
    )
    c.add_argument(
        "--via",
        metavar="S3_URL",
        help="cluster volume: the S3 prefix to pass it through (default: the model bucket's prefix)",
    )
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


def dispatch_resources(args: argparse.Namespace, settings: Settings) -> int:
    return {"model": cmd_model_get, "cleanup": cmd_cleanup, "resources": cmd_resources}[args.command](args, settings)


def cmd_model_get(args: argparse.Namespace, settings: Settings) -> int:
    """A model from S3 or a path straight here; one on a cluster's volume through a model-copy job and
    S3 (the training service account may write the model prefix)."""
    import shutil

    from torchdeck.backends import open_backend

    location = args.source
    if args.run:  # the run's model, or with --from a file where the run ran (its volume, on a cluster)
        backend = open_backend(settings.backend, settings)
        location = backend.require(CifarTasks).fetch_model(
            args.run,
            lambda spec: args.via or open_cloud(settings, args.profile).model_prefix(spec),
            progress=say,
            location=location,
        )
    if not location:
        raise BackendError("which model? no --run and no --from", "torchdeck model get --run RUN, or --from s3://...")
    out = Path(args.output).expanduser()
    if S3Url.is_s3(location):
        open_cloud(settings, args.profile).download(location, out, args.region)
    else:
        source = Path(location).expanduser()
        if not source.is_file():
            raise BackendError(f"no model file at {source}", "did the run finish? torchdeck status RUN")
        shutil.copyfile(source, out)
    print(f"{location} -> {out} ({out.stat().st_size / 1e6:.1f} MB); test it: torchdeck test --model-file {out}")
    return 0


def cmd_cleanup(args: argparse.Namespace, settings: Settings) -> int:
    import os

    cloud = open_cloud(settings, args.profile)
    regions: set[str] | None = None
    if not args.no_orphans:
        regions = set(args.region) | {r.region for r in cloud.resources(scope=args.cluster) if r.region}
        default = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if default:
            regions.add(default)
        if not regions:
            raise BackendError("which region should cleanup look in for leftovers?", "pass --region (repeatable)")
    steps = cloud.cleanup_plan(
        args.cluster, tuple(regions) if regions is not None else None, keep_buckets=args.keep_buckets
    )
    if args.output == "json":
        print(
            strict_json(
                [{"action": s.action, "orphan": s.orphan, "why": s.why, **s.resource.to_dict()} for s in steps],
                indent=2,
            )
        )
    else:
        if not steps:
            print("nothing to clean up: nothing torchdeck made exists, and nothing tagged torchdeck was found")
            return 0
        per_hour = sum(s.resource.cost_per_hour for s in steps if s.action != "keep")
        print(
            f"teardown plan ({len([s for s in steps if s.action != 'keep'])} to delete, "
            f"${per_hour:.3f}/h while they exist), in order:"
        )
        for step in steps:
            print("  " + step.line())
    deleting = [s for s in steps if s.action != "keep"]
    if args.dry_run or not deleting or (not args.yes and not sys.stdin.isatty()):
        if deleting and args.output == "text":
            print("dry run: nothing was deleted; torchdeck cleanup --yes deletes it")
        return 0
    confirm(f"delete these {len(deleting)} resources?", args.yes)
    stream(cloud.teardown(steps))
    return 0


def resource_rows(
    resources: list[Resource], now: float | None = None
) -> list[tuple[str, str, str, str, str, str, str]]:
    """KIND, NAME, CLUSTER, REGION, AGE, $/H, SO FAR: the rows ``torchdeck resources`` prints."""
    from torchdeck.monitor.state import format_duration

    now = time.time() if now is None else now
    rows: list[tuple[str, str, str, str, str, str, str]] = []
    for r in resources:
        age = format_duration((r.deleted_at or now) - r.created_at)
        rows.append(
            (
                r.kind,
                r.ident if len(r.ident) < 48 else "..." + r.ident[-45:],
                r.scope or "-",
                r.region or "-",
                age + ("" if r.live else " (deleted)"),
                f"{r.cost_per_hour:.3f}" if r.cost_per_hour else "-",
                f"{r.cost_so_far(now):.2f}",
            )
        )
    return rows


def cmd_resources(args: argparse.Namespace, settings: Settings) -> int:
    cloud = open_cloud(settings)
    found = cloud.resources(live_only=not args.all)
    per_hour, so_far = cloud.costs()
    if args.output == "json":
        print(
            strict_json({"per_hour": per_hour, "so_far": so_far, "resources": [r.to_dict() for r in found]}, indent=2)
        )
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
