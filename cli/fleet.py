"""``torchdeck nodes`` and ``torchdeck queues``: the shared cluster beside the runs (its nodes' room,
use and trouble; its queues' usage and waiting lines), headless, as their screens show them."""

from __future__ import annotations

import argparse
import time

from torchdeck.backends.base import Backend
from torchdeck.backends.capabilities import ClusterViews
from torchdeck.backends.views import NodesView, QueuesView, node_cells
from torchdeck.settings import Settings
from torchdeck.terminal import printable
from torchdeck.trainer.metrics import strict_json

from .output import Commands, say


def add_fleet_commands(sub: Commands) -> None:
    p = sub.add_parser(
        "nodes",
        help="every node of the cluster: allocatable, requested and used CPU, memory and GPUs, the "
        "training jobs on it, and why it is bad",
    )
    p.add_argument("--bad", action="store_true", help="only the nodes something says are bad")
    p.add_argument("--output", choices=("text", "json"), default="text")
    p = sub.add_parser(
        "queues",
        help="every Kueue queue you may read: quota and usage per flavour, admitted and waiting "
        "workloads in order with Kueue's reason, and what is ahead of your runs",
    )
    p.add_argument("--waiting", type=int, default=10, metavar="N", help="the first N waiting workloads a queue")
    p.add_argument("--output", choices=("text", "json"), default="text")


def cmd_nodes(args: argparse.Namespace, settings: Settings, backend: Backend) -> int:
    view = backend.require(ClusterViews).nodes_view()
    if args.bad:
        view = NodesView(tuple(n for n in view.nodes if n.trouble), view.notes)
    for note in view.notes:
        say(f"note: {note}")
    if args.output == "json":
        print(strict_json(view.to_dict(), indent=2))
        return 0
    print(format_nodes(view))
    return 0


def cmd_queues(args: argparse.Namespace, settings: Settings, backend: Backend) -> int:
    view = backend.require(ClusterViews).queues_view()
    for note in view.notes:
        say(f"note: {note}")
    if args.output == "json":
        print(strict_json(view.to_dict(), indent=2))
        return 0
    print(format_queues(view, args.waiting))
    return 0


NODE_HEAD = ("NODE", "STATE", "CPU", "MEMORY", "GPU", "PODS", "TRAINING JOBS", "WHY")


def format_nodes(view: NodesView) -> str:
    if not view.nodes:
        return "no nodes in this cluster"
    ready = sum(1 for n in view.nodes if n.state == "ready")
    bad = sum(1 for n in view.nodes if n.trouble)
    lines = [
        table([NODE_HEAD, *node_cells(view)]),
        f"{len(view.nodes)} nodes: {ready} ready, {bad} bad. CPU and memory: requested/allocatable (used now)",
    ]
    return "\n".join(lines)


def table(rows: list[tuple[str, ...]]) -> str:
    """Columns padded to their widest cell; the last one as it is (a reason's words)."""
    clean = [tuple(printable(c) for c in row) for row in rows]
    widths = [max(len(r[i]) for r in clean) for i in range(len(clean[0]) - 1)]
    return "\n".join(("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1]).rstrip() for r in clean)


def format_queues(view: QueuesView, first: int = 10) -> str:
    if not view.queues:
        return "no ClusterQueue this identity may read"
    now = time.time()
    out: list[str] = []
    for q in view.queues:
        head = f"ClusterQueue {q.name}" + (f" (cohort {q.cohort})" if q.cohort else "")
        head += f": {q.admitted} admitted, {q.pending} waiting" + (f", {q.preempted} preempted" if q.preempted else "")
        out.append(head + (f"; STOPPED ({q.stopped}): nothing is admitted" if q.stopped else ""))
        if q.local_queues:
            out.append("  local queues: " + ", ".join(q.local_queues))
        for u in q.usage:
            borrowed = f", {u.shown(u.borrowed)} borrowed" if u.borrowed else ""
            out.append(f"  {u.flavor} {u.resource}: {u.shown(u.used)} of {u.shown(u.quota)} in use{borrowed}")
        for w in q.waiting[:first]:
            waited = f"{(now - w.since) / 60:.0f} min" if w.since else "?"
            mine = " (yours)" if w.mine else ""
            job = w.job or f"{w.namespace}/{w.workload}"
            out.append(
                printable(f"  {w.position:>3}. {job}{mine} in {w.local_queue}, waited {waited}: {w.reason or '-'}")
            )
        if len(q.waiting) > first:
            out.append(f"  ... {len(q.waiting) - first} more waiting (--waiting N shows more)")
    for q in view.queues:
        for w in q.waiting:
            if w.mine:  # Kueue's place: the workloads ahead are those before it, seen here or not
                out.append(f"your run {w.job}: place {w.position} in {q.name}, {w.position - 1} ahead of it")
    out.append(f"order: {view.ordered_by}")
    return "\n".join(out)
