"""``torchdeck cluster init|types|plan|create|connect|status|delete|token``:
the cluster wizard's steps without the screen. Progress prints one line per
event (phase, elapsed time, what happened), which reads the same on a
laptop, over SSH and in a CI log."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from torchdeck.backends.errors import BackendError
from torchdeck.trainer.metrics import strict_json

from .output import Commands, confirm, say, stream

if TYPE_CHECKING:  # the parser is built for every command, --help included: nothing heavy at import
    from torchdeck.backends.eks.cloud import EksCloud
    from torchdeck.backends.eks.plan import ClusterPlan
    from torchdeck.backends.eks.preflight import PreflightReport
    from torchdeck.settings import Settings

EXIT_ERROR = 1


def add_cluster_parser(sub: Commands) -> None:
    """``torchdeck cluster`` and its sub-commands, in the order --help lists them."""
    p = sub.add_parser("cluster", help="plan, check, create, connect to and delete an EKS cluster")
    csub = p.add_subparsers(dest="cluster_command", metavar="COMMAND", required=True)
    add_init_parser(csub)
    c = csub.add_parser("types", help="the instance types a region's zones offer: vCPUs, memory, GPUs, EFA, price")
    c.add_argument("--region", required=True)
    c.add_argument("--zones", help="only types offered in every one of these zones (comma-separated)")
    c.add_argument("--gpu", action="store_true", help="GPU types only")
    c.add_argument("--profile", help="AWS profile (default: $AWS_PROFILE)")
    c.add_argument("--output", choices=("text", "json"), default="text")

    add_step_parsers(csub)
    c = csub.add_parser("token", help="print an EKS token for kubectl (the kubeconfig's exec command runs it)")
    c.add_argument("--name", required=True)
    c.add_argument("--region", required=True)
    c.add_argument("--profile", help="AWS profile (default: $AWS_PROFILE)")


def add_init_parser(csub: Commands) -> None:
    """``cluster init``: the plan's every choice as a flag (nodegroups, network, access, storage)."""
    c = csub.add_parser("init", help="write an eksctl ClusterConfig for a training cluster, checked, with its cost")
    c.add_argument("--file", default="cluster.yaml", help="where the plan goes (default: cluster.yaml)")
    c.add_argument("--force", action="store_true", help="overwrite an existing file")
    c.add_argument("--name", required=True, help="cluster name: a letter first, then letters, digits and '-'")
    c.add_argument("--region", required=True, help="e.g. us-west-2")
    c.add_argument("--zones", help="availability zones, comma-separated (two at least)")
    c.add_argument("--version", default=None, help="Kubernetes version (default: 1.31)")
    c.add_argument("--vpc-id", help="an existing VPC (default: eksctl makes a new one)")
    c.add_argument(
        "--subnet",
        action="append",
        default=[],
        metavar="ZONE=SUBNET",
        help="a private subnet of the existing VPC (repeat, two zones at least)",
    )
    c.add_argument("--system-type", default="m5.large", help="instance type of the system nodegroup")
    c.add_argument("--system-nodes", type=int, default=2, help="nodes in the system nodegroup")
    c.add_argument(
        "--worker",
        action="append",
        default=[],
        metavar="NAME:TYPE:MIN:DESIRED:MAX[:gpu,spot,efa]",
        help="a worker nodegroup (repeat); default cpu-workers:m5.2xlarge:1:2:4",
    )
    c.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="NODEGROUP:KEY=VALUE",
        help="a Kubernetes label on a nodegroup's nodes (repeat)",
    )
    c.add_argument("--volume-gib", type=int, default=100, help="root volume per node")
    c.add_argument("--bucket", help="the S3 bucket the training service account may use")
    c.add_argument("--prefix", default="torchdeck/", help="the key prefix in it (default: torchdeck/)")
    c.add_argument("--service-account", default="torchdeck-s3", help="its Kubernetes service account")
    c.add_argument("--sa-namespace", default="default", help="the service account's namespace")
    c.add_argument(
        "--endpoint-cidr",
        action="append",
        default=[],
        metavar="CIDR",
        help="who may reach the API server's public endpoint (repeat; default: every address)",
    )
    c.add_argument(
        "--private-endpoint", action="store_true", help="no public API endpoint: reach it from inside the VPC"
    )
    c.add_argument(
        "--allow-pod-imds",
        action="store_true",
        help="let pods reach the nodes' instance metadata (and the node role); off by default",
    )


def add_step_parsers(csub: Commands) -> None:
    """``cluster plan|create|connect|status|delete``: the steps that act on a plan, with the flags
    they share (the plan's file, the cluster, the profile) and those of their own."""
    for name, text in (
        ("plan", "check a plan against AWS: credentials, zones, quotas, an existing cluster, cost"),
        ("create", "create the planned cluster (eksctl where installed, else torchdeck's own path)"),
        ("connect", "add the cluster to the kubeconfig (exec authentication, no stored keys)"),
        ("status", "the cluster, its nodegroups, add-ons and nodes"),
        ("delete", "delete the cluster and everything torchdeck made for it"),
    ):
        c = csub.add_parser(name, help=text)
        c.add_argument("--file", default="cluster.yaml", help="the plan (default: cluster.yaml)")
        if name != "plan":
            c.add_argument("--name", help="the cluster (default: the plan's)")
            c.add_argument("--region", help="its region (default: the plan's, or the record's)")
        c.add_argument("--profile", help="AWS profile (default: $AWS_PROFILE)")
        if name in ("create", "delete"):
            c.add_argument("--yes", action="store_true", help="do not ask for confirmation")
        if name == "create":
            way = c.add_mutually_exclusive_group()
            way.add_argument(
                "--eksctl",
                dest="path",
                action="store_const",
                const="eksctl",
                help="run eksctl on the plan (the default where eksctl is on the PATH)",
            )
            way.add_argument(
                "--native",
                dest="path",
                action="store_const",
                const="native",
                help="torchdeck's own path with boto3 (an existing VPC; the default without eksctl)",
            )
        if name in ("create", "connect"):
            c.add_argument(
                "--kubeconfig", help="the kubeconfig to add the context to (default: $KUBECONFIG or ~/.kube/config)"
            )
        if name == "connect":
            c.add_argument("--aws-cli", action="store_true", help="let `aws eks get-token` make the tokens")
        if name in ("plan", "status"):
            c.add_argument("--output", choices=("text", "json"), default="text")


def dispatch_cluster(args: argparse.Namespace, settings: Settings) -> int:
    command = args.cluster_command
    if command == "init":
        return cmd_init(args)
    return {
        "types": cmd_types,
        "plan": cmd_plan,
        "create": cmd_create,
        "connect": cmd_connect,
        "status": cmd_status,
        "delete": cmd_delete,
        "token": cmd_token,
    }[command](args, settings)


def cmd_init(args: argparse.Namespace) -> int:
    from torchdeck.backends.eks.plan import (
        DEFAULT_VERSION,
        ClusterPlan,
        NodegroupPlan,
        apply_labels,
        parse_nodegroup,
        parse_subnets,
        save_plan,
    )

    path = Path(args.file)
    if os.path.lexists(path) and not args.force:  # a link, dangling or not, is something there
        raise BackendError(f"{path} exists; pass --force to overwrite it (or --file another.yaml)")
    workers = [parse_nodegroup(w) for w in args.worker] or [NodegroupPlan("cpu-workers", "m5.2xlarge", 1, 2, 4)]
    for group in workers:
        group.volume_gib = args.volume_gib
    system = NodegroupPlan(
        "system",
        args.system_type,
        1,
        args.system_nodes,
        max(args.system_nodes, 2),
        volume_gib=args.volume_gib,
        labels={"role": "system"},
    )
    groups = {g.name: g for g in (system, *workers)}
    apply_labels(list(groups.values()), args.label)
    plan = ClusterPlan(
        name=args.name,
        region=args.region,
        zones=[z.strip() for z in args.zones.split(",")] if args.zones else [],
        version=args.version or DEFAULT_VERSION,
        vpc_id=args.vpc_id,
        subnets=parse_subnets(args.subnet),
        nodegroups=list(groups.values()),
        s3_bucket=args.bucket,
        s3_prefix=args.prefix,
        service_account=args.service_account,
        namespace=args.sa_namespace,
        public_access_cidrs=list(args.endpoint_cidr),
        private_endpoint=args.private_endpoint,
        pod_imds=args.allow_pod_imds,
    )
    save_plan(plan, path, replace=args.force)  # validates first: a bad field is one line, and nothing is written
    print(
        f"wrote {path}: cluster {plan.name} in {plan.region}, Kubernetes {plan.version}, "
        f"{len(plan.nodegroups)} nodegroups"
    )
    print_cost(plan)
    print(f"check it against AWS: torchdeck cluster plan --file {path}; then: torchdeck cluster create --file {path}")
    return 0


def print_cost(plan: ClusterPlan, width: int = 44) -> float:
    """The plan's cost per hour, a line per item, then the total and the notes; returns the total."""
    from torchdeck.backends.eks.plan import cost_per_hour

    lines, total, notes = cost_per_hour(plan)
    for line in lines:
        print(f"  {line.what:<{width}} " + ("price unknown" if line.total is None else f"${line.total:,.2f}/h"))
    print(f"  {'estimated total':<{width}} ${total:,.2f}/h (about ${total * 24 * 30:,.0f} a month)")
    for note in notes:
        print(f"  note: {note}")
    return total


def open_cloud(settings: Settings, profile: str | None = None) -> EksCloud:
    """The door to AWS and EKS for this state folder and profile."""
    from torchdeck.backends.eks.cloud import EksCloud

    return EksCloud(settings.state_dir, profile, poll_s=settings.aws_poll_s)


def _load_plan(args: argparse.Namespace) -> ClusterPlan:
    from torchdeck.backends.eks.plan import load_plan

    return load_plan(args.file)


def _target(args: argparse.Namespace, settings: Settings) -> tuple[str, str, ClusterPlan | None]:
    """(name, region, plan or None) from --name/--region, the plan file, or the local record."""
    from torchdeck.backends.eks.access import ClusterRecord

    name, region = args.name, args.region
    plan: ClusterPlan | None = None
    if (not name or not region) and Path(args.file).exists():
        plan = _load_plan(args)
        if name and plan.name != name:
            plan = None
    name = name or (plan.name if plan else None)
    region = region or (plan.region if plan else None)
    if not name:
        raise BackendError(
            "which cluster? no --name and no plan file",
            f"pass --name NAME --region REGION, or --file PLAN (there is no {args.file})",
        )
    if not region:
        record = ClusterRecord.load(settings.state_dir, name)
        region = record.region if record else None
    if not region:
        raise BackendError(f"which region is cluster {name} in?", "pass --region")
    return name, region, plan


def cmd_types(args: argparse.Namespace, settings: Settings) -> int:
    zones = [z.strip() for z in args.zones.split(",")] if args.zones else None
    catalogue = open_cloud(settings, args.profile).catalogue(args.region, zones)
    kinds = [t for t in catalogue.offered_everywhere() if t.gpus or not args.gpu]
    if args.output == "json":
        print(strict_json([{**t.__dict__, "zones": sorted(catalogue.zones_of.get(t.name, ()))} for t in kinds]))
        return 0
    print(f"{'type':<16}{'vCPUs':>6}{'memory':>9}  {'GPUs':<26}{'EFA':<5}{'$/h':>8}")
    for t in kinds:
        gpus = f"{t.gpus} x {t.gpu_model} {t.gpu_memory_gib:g} GiB" if t.gpus else "-"
        price = f"{t.price:.3f}" if t.price is not None else "?"
        print(f"{t.name:<16}{t.vcpus:>6}{t.memory_gib:>7g}Gi  {gpus:<26}{'yes' if t.efa else '-':<5}{price:>8}")
    print(f"{len(kinds)} types offered in {', '.join(catalogue.zones)}")
    return 0


def print_report(report: PreflightReport) -> None:
    marks = {"ok": "ok  ", "warn": "warn", "error": "FAIL"}
    for finding in report.findings:
        print(f"  {marks[finding.level]}  {finding.text}" + (f"  (hint: {finding.hint})" if finding.hint else ""))


def cmd_plan(args: argparse.Namespace, settings: Settings) -> int:
    plan = _load_plan(args)
    report = open_cloud(settings, args.profile).preflight(plan)
    if args.output == "json":
        print(
            strict_json(
                {
                    "ok": report.ok,
                    "account": report.account,
                    "identity": report.identity,
                    "findings": [f.__dict__ for f in report.findings],
                    "total_per_hour": report.total_per_hour,
                    "cost": [{"what": c.what, "count": c.count, "each": c.each} for c in report.cost],
                    "notes": report.notes,
                }
            )
        )
        return 0 if report.ok else EXIT_ERROR
    print(f"cluster {plan.name} in {plan.region}, Kubernetes {plan.version} ({args.file})")
    print_report(report)
    print("cost per hour:")
    print_cost(plan)
    if not report.ok:
        say("the plan cannot be created as it is: fix the FAIL lines above")
        return EXIT_ERROR
    print(f"create it: torchdeck cluster create --file {args.file}")
    return 0


def cmd_create(args: argparse.Namespace, settings: Settings) -> int:
    plan = _load_plan(args)
    cloud = open_cloud(settings, args.profile)
    path, eksctl = cloud.pick_path(args.path)
    report = cloud.preflight(plan)
    print(f"cluster {plan.name} in {plan.region} ({args.file}), with {path}")
    print_report(report)
    if not report.ok:
        raise BackendError("preflight failed: nothing was created", "fix the FAIL lines above and run it again")
    total = print_cost(plan)
    confirm(f"create cluster {plan.name} (about ${total:,.2f} an hour until you delete it)?", args.yes)
    kubeconfig = Path(args.kubeconfig).expanduser() if args.kubeconfig else None
    stream(cloud.create_cluster(plan, Path(args.file), path, eksctl, kubeconfig))
    print(f"delete it when done: torchdeck cluster delete --name {plan.name} --region {plan.region}")
    return 0


def cmd_connect(args: argparse.Namespace, settings: Settings) -> int:
    name, region, _ = _target(args, settings)
    path, context = open_cloud(settings, args.profile).connect(
        name, region, Path(args.kubeconfig).expanduser() if args.kubeconfig else None, args.aws_cli
    )
    print(f"context {context} written to {path} (mode 0600, exec authentication: no keys stored) and made current")
    print(f"train on it: torchdeck --backend kubernetes --context {context}")
    return 0


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    name, region, _ = _target(args, settings)
    state = open_cloud(settings, args.profile).cluster_state(name, region)
    record = state.record
    if args.output == "json":
        data = {k: v for k, v in state.__dict__.items() if k != "record"}
        data["nodegroups"] = [g.__dict__ for g in state.nodegroups]
        data["nodes"] = None if state.nodes is None else [n.__dict__ for n in state.nodes]
        print(strict_json(data))
        return 0 if state.status != "MISSING" else EXIT_ERROR
    if state.status == "MISSING":
        gone = record is not None and record.state == "deleted"
        raise BackendError(
            f"no cluster {name} in {region}" + (" (deleted)" if gone else ""),
            "plan one: torchdeck cluster init" if not gone else "",
        )
    owner = "made by torchdeck" if state.tagged else "not made by torchdeck"
    print(f"cluster {name}  {state.status}  Kubernetes {state.version}  {region}  ({owner})")
    print(f"  endpoint {state.endpoint}")
    for g in state.nodegroups:
        kinds = ",".join(g.instance_types)
        print(
            f"  nodegroup {g.name:<16} {g.status:<14} {kinds:<14} {g.desired} of {g.min_size}..{g.max_size}"
            f"  {g.capacity.lower()}"
        )
        for issue in g.issues:
            print(f"      issue: {issue}")
    if state.addons:
        print("  add-ons   " + ", ".join(f"{k} {v}" for k, v in sorted(state.addons.items())))
    if state.nodes is None:
        print(f"  nodes     unknown: {state.nodes_error}")
    elif not state.nodes:
        print("  nodes     none has joined yet (a nodegroup's nodes join a few minutes after it is ACTIVE)")
    else:
        ready = sum(n.ready for n in state.nodes)
        print(f"  nodes     {ready}/{len(state.nodes)} ready")
        for n in state.nodes:
            gpus = f" {n.gpus} GPU" if n.gpus else ""
            print(
                f"    {n.name:<40} {'Ready' if n.ready else 'NotReady':<9} {n.nodegroup:<16} {n.instance_type}{gpus}"
                + (f"  ({n.reason})" if n.reason else "")
            )
    return 0


def cmd_delete(args: argparse.Namespace, settings: Settings) -> int:
    from torchdeck.backends.eks.teardown import RESOURCE_KINDS

    name, region, _ = _target(args, settings)
    cloud = open_cloud(settings, args.profile)
    # storage, images and jobs in it go first: an EFS mount target keeps the VPC from being deleted
    inside_kinds = tuple(k.name for k in RESOURCE_KINDS if not k.with_cluster)
    inside = [s for s in cloud.cleanup_plan(scope=name, kinds=inside_kinds) if s.action == "delete"]
    also = f", and what torchdeck made in it ({len(inside)}: storage, images, jobs)" if inside else ""
    confirm(f"delete cluster {name} in {region}, its nodegroups, add-ons, OIDC provider and IAM roles{also}?", args.yes)
    if inside:
        stream(cloud.teardown(inside))
    stream(cloud.delete_cluster(name, region))
    return 0


def cmd_token(args: argparse.Namespace, settings: Settings) -> int:
    print(strict_json(open_cloud(settings, args.profile).token(args.name, args.region)))
    return 0
