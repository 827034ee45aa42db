"""``python -m torchdeck.trainer.check``, under torchrun: the health gate. Every rank all-reduces
float32 tensors from 4 KiB to ``--max-bytes`` (NCCL where there are GPUs, gloo on CPUs); each
size's time is the slowest rank's mean over ``--iters`` runs after ``--warmup``, and its
bandwidths are nccl-tests' (``algbw`` = bytes / time; ``busbw`` = algbw * 2(n-1)/n, what each link
carried). With several nodes it then sweeps the largest size between the ranks of each node
(its own links: NVLink, PCIe, shared memory) and between the first ranks of each pair of nodes (the
network between them: the slow link), one at a time. The first rank of each node reports what the
node is: its GPUs through NVML (count, uncorrected ECC errors, retired pages pending, NVLink links
down, XID errors raised during the check), DCGM's diagnostics where ``dcgmi`` is in the image, and
the EFA devices the pod sees. Rank 0 prints it all as the tool's last line (``metrics.tool_line``)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

MAX_PAIRS = 120
"""Node pairs swept at most (16 nodes): beyond, each node with the next (a ring), which finds a slow link too."""
NODE_NAME_ENV = "TORCHDECK_NODE_NAME"
"""The Kubernetes node a pod runs on (the downward API's ``spec.nodeName``), where the gate's pods say it."""


def sizes(max_bytes: int) -> list[int]:
    """4 KiB, then each four times the last, up to ``max_bytes``."""
    out, size = [], 4096
    while size <= max_bytes:
        out.append(size)
        size *= 4
    return out or [max_bytes]


def bus_bandwidth(algbw: float, world: int) -> float:
    """What each link carried in a ring all-reduce of ``world`` ranks (nccl-tests' busbw)."""
    return algbw * 2 * (world - 1) / world if world > 1 else algbw


def node_pairs(nodes: int) -> list[tuple[int, int]]:
    """Every pair of nodes, or each node with the next where there are too many pairs."""
    every = [(a, b) for a in range(nodes) for b in range(a + 1, nodes)]
    if len(every) <= MAX_PAIRS:
        return every
    return [(a, (a + 1) % nodes) for a in range(nodes)]


# -- what a node is --------------------------------------------------------------------------------


def parse_dcgm(text: str) -> dict[str, Any]:
    """``dcgmi diag -j``'s answer: how many results, and the ones that did not pass. Both of DCGM's
    shapes: 3.x (``DCGM GPU Diagnostic``, a result per ``gpu_ids`` with warnings as text) and 4.x
    (``DCGM Diagnostic``, a result per entity with warnings as records)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return {"ran": True, "error": f"dcgmi printed no JSON: {text.strip()[:200]}"}
    try:
        doc = json.loads(text[start : end + 1])
    except ValueError as exc:
        return {"ran": True, "error": f"dcgmi's JSON does not read: {exc}"}
    top = doc.get("DCGM GPU Diagnostic") or doc.get("DCGM Diagnostic")
    if not isinstance(top, dict):
        return {"ran": True, "error": "dcgmi's JSON has no diagnostic in it"}
    failed: list[dict[str, str]] = []
    results = 0
    for category in top.get("test_categories") or []:
        for test in category.get("tests") or []:
            for result in test.get("results") or []:
                results += 1
                status = str(result.get("status", "")).lower()
                if status in ("pass", "skip", "skipped", "not run", "warn"):
                    continue
                where = result.get("gpu_ids", result.get("gpu_id", result.get("entity_id", "")))
                said = [w.get("warning", "") if isinstance(w, dict) else str(w) for w in result.get("warnings") or []]
                failed.append({"test": str(test.get("name", "?")), "gpu": str(where), "warning": "; ".join(said)[:300]})
    if top.get("runtime_error"):
        failed.append({"test": "runtime", "gpu": "", "warning": str(top["runtime_error"])[:300]})
    version = (doc.get("metadata") or {}).get("version") or top.get("version") or ""
    return {"ran": True, "results": results, "failed": failed, "version": str(version)}


def dcgm_facts(level: int) -> dict[str, Any]:
    """DCGM's diagnostics at ``level`` (1: seconds, 2: about two minutes), where ``dcgmi`` is in the image."""
    if level <= 0:
        return {"ran": False, "note": "not asked for"}
    if shutil.which("dcgmi") is None:
        return {"ran": False, "note": "dcgmi is not in the image"}
    try:
        done = subprocess.run(["dcgmi", "diag", "-r", str(level), "-j"], capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"ran": True, "error": f"dcgmi diag did not finish: {exc}"}
    found = parse_dcgm(done.stdout)
    found["level"] = level
    return found


def parse_fi_info(text: str) -> int:
    """How many EFA endpoints ``fi_info -p efa -t FI_EP_RDM`` lists (a ``provider: efa`` line each)."""
    return sum(1 for line in text.splitlines() if line.strip().replace(" ", "") == "provider:efa")


def efa_facts(sysfs: Path = Path("/sys/class/infiniband")) -> dict[str, Any]:
    """The EFA devices the pod sees (``rdmap*`` under /sys/class/infiniband), and libfabric's count
    of EFA endpoints where ``fi_info`` is in the image."""
    try:
        devices = sorted(p.name for p in sysfs.iterdir() if p.name.startswith(("rdmap", "efa")))
    except OSError:
        devices = []
    endpoints = None
    if shutil.which("fi_info"):
        try:
            listed = subprocess.run(
                ["fi_info", "-p", "efa", "-t", "FI_EP_RDM"], capture_output=True, text=True, timeout=60
            )
            endpoints = parse_fi_info(listed.stdout)
        except (OSError, subprocess.TimeoutExpired):
            endpoints = None
    return {"devices": devices, "fi_info_endpoints": endpoints}


class GpuWatch:
    """The node's GPUs through NVML, and the XID errors they raise while the check runs (an NVML
    event set registered before the sweep, read after it). Without NVML (no driver, no GPU, no
    nvidia-ml-py) it says why, and the node has no GPU facts."""

    def __init__(self) -> None:
        self.nvml: Any = None
        self.note = ""
        self.events: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
        except Exception as exc:  # ImportError, or NVMLError (no driver): both say there is no NVML here
            self.note = f"NVML not loaded: {str(exc) or type(exc).__name__}"
            return
        try:
            self.events = pynvml.nvmlEventSetCreate()
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, self.events)
        except pynvml.NVMLError:
            self.events = None  # XID events not supported here: said as such

    def facts(self) -> dict[str, Any]:
        nvml = self.nvml
        if nvml is None:
            return {"count": 0, "note": self.note}
        gpus = []
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            gpu: dict[str, Any] = {"index": i, "name": _text(nvml.nvmlDeviceGetName(handle))}
            gpu["ecc_uncorrected"] = _nvml(
                lambda h=handle: nvml.nvmlDeviceGetTotalEccErrors(
                    h, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
                )
            )
            gpu["retired_pages_pending"] = _nvml(lambda h=handle: bool(nvml.nvmlDeviceGetRetiredPagesPendingStatus(h)))
            up = down = 0
            for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
                try:
                    active = nvml.nvmlDeviceGetNvLinkState(handle, link)
                except nvml.NVMLError:
                    break  # no such link (or no NVLink at all)
                up, down = (up + 1, down) if active else (up, down + 1)
            gpu["nvlink_up"], gpu["nvlink_down"] = up, down
            gpus.append(gpu)
        xids: list[int] = []
        if self.events is not None:
            while True:
                try:
                    event = nvml.nvmlEventSetWait(self.events, 0)
                except nvml.NVMLError:
                    break  # timed out: no more events
                xids.append(int(event.eventData))
        return {"count": len(gpus), "gpus": gpus, "xids": xids, "xid_watch": self.events is not None}


def _nvml(read: Any) -> Any:
    try:
        return read()
    except Exception:  # NVMLError_NotSupported and kin: a figure this GPU does not give
        return None


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# -- the sweeps --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    from .metrics import tool_line

    p = argparse.ArgumentParser(prog="python -m torchdeck.trainer.check")
    p.add_argument("--max-bytes", type=int, default=16 << 20)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument(
        "--dcgm-level", type=int, default=1, help="dcgmi diag -r LEVEL where dcgmi is in the image (0: none)"
    )
    p.add_argument("--efa", type=int, default=0, help="the EFA interfaces each pod asked for (vpc.amazonaws.com/efa)")
    args = p.parse_args(argv)
    import torch
    import torch.distributed as dist

    gpu = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    watch = GpuWatch() if local_rank == 0 else None
    dist.init_process_group("nccl" if gpu else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)

    def timed(size: int, group: Any, members: int) -> dict[str, float]:
        """The all-reduce of ``size`` bytes in ``group``: the slowest member's mean time, and its bandwidths."""
        tensor = torch.ones(size // 4, dtype=torch.float32, device=device)
        for _ in range(args.warmup):
            dist.all_reduce(tensor, group=group)
        if gpu:
            torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(tensor, group=group)
        if gpu:
            torch.cuda.synchronize()
        took = torch.tensor([(time.perf_counter() - started) / args.iters], dtype=torch.float64, device=device)
        dist.all_reduce(took, op=dist.ReduceOp.MAX, group=group)  # the slowest member's: the collective's own time
        seconds = float(took.item())
        algbw = size / seconds / 1e9
        return {"bytes": size, "time_s": seconds, "algbw_gbps": algbw, "busbw_gbps": bus_bandwidth(algbw, members)}

    rows = [timed(size, None, world) for size in sizes(args.max_bytes)]
    biggest = sizes(args.max_bytes)[-1]
    here = {
        "rank": rank,
        "node_index": int(os.environ.get("GROUP_RANK", "0")),
        "local_rank": local_rank,
        "host": socket.gethostname(),
        "node": os.environ.get(NODE_NAME_ENV) or socket.gethostname(),
    }
    ranks: list[dict[str, Any] | None] = [None] * world
    dist.all_gather_object(ranks, here)
    by_node: dict[int, list[int]] = {}
    for r in ranks:
        assert r is not None
        by_node.setdefault(r["node_index"], []).append(r["rank"])
    order = sorted(by_node)
    nodes: list[dict[str, Any]] = []
    mine: dict[str, Any] = {"node_index": here["node_index"], "intra": None, "pairs": []}
    """What this rank measured that rank 0 did not see (the groups it led), and what its node is."""
    for index in order:  # each node's own links, one node at a time (every rank makes every group)
        members = sorted(by_node[index])
        group = dist.new_group(members)
        first = next(r for r in ranks if r is not None and r["rank"] == members[0])
        nodes.append({"index": index, "node": first["node"], "host": first["host"], "ranks": members, "intra": None})
        if len(members) > 1 and rank in members:
            measured = timed(biggest, group, len(members))
            if rank == members[0]:
                mine["intra"] = measured
        dist.barrier()
    pairs: list[dict[str, Any]] = []
    for i, (a, b) in enumerate(node_pairs(len(order)) if len(order) > 1 else []):
        members = sorted({by_node[order[a]][0], by_node[order[b]][0]})
        group = dist.new_group(members)
        if rank in members:
            measured = timed(biggest, group, 2)
            if rank == members[0]:
                mine["pairs"].append((i, measured))
        dist.barrier()
        pairs.append({"a": nodes[a]["node"], "b": nodes[b]["node"], "a_host": nodes[a]["host"],
                      "b_host": nodes[b]["host"], "result": None})  # fmt: skip
    if watch is not None:
        mine["gpus"] = watch.facts()
        mine["dcgm"] = dcgm_facts(args.dcgm_level)
        mine["efa"] = efa_facts() | {"asked": args.efa}
    said: list[dict[str, Any] | None] = [None] * world
    dist.all_gather_object(said, mine)
    if rank == 0:
        for got in said:
            if got is None:
                continue
            node = next(n for n in nodes if n["index"] == got["node_index"])
            for key in ("gpus", "dcgm", "efa"):
                if key in got:
                    node[key] = got[key]
            if got["intra"] is not None:
                node["intra"] = got["intra"]
            for i, result in got["pairs"]:
                pairs[i]["result"] = result
        hosts = [r["host"] for r in ranks if r is not None]
        result = {"backend": "nccl" if gpu else "gloo", "world_size": world, "hosts": hosts, "rows": rows,
                  "nodes": nodes, "pairs": pairs}  # fmt: skip
        print(tool_line("check", result), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
