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
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    import torch.distributed as dist

MAX_PAIRS = 120
"""Node pairs swept at most (16 nodes): beyond, each node with the next (a ring), which finds a slow link too."""
NODE_NAME_ENV = "TORCHDECK_NODE_NAME"
"""The Kubernetes node a pod runs on (the downward API's ``spec.nodeName``), where the gate's pods say it."""


class DcgmFacts(TypedDict, total=False):
    """DCGM's diagnostics as the report says them: whether it ran, why not, what failed."""

    ran: bool
    note: str
    error: str
    results: int
    failed: list[dict[str, str]]
    version: str
    level: int


class EfaFacts(TypedDict):
    """The EFA devices a pod sees, libfabric's count of endpoints, and the interfaces it asked for."""

    devices: list[str]
    fi_info_endpoints: int | None
    asked: int


class GpuFacts(TypedDict, total=False):
    """A node's GPUs through NVML, or why there are none (``note``)."""

    count: int
    note: str
    gpus: list[dict[str, object]]
    xids: list[int]
    xid_watch: bool


class Timing(TypedDict):
    """One all-reduce size's time (the slowest member's mean) and nccl-tests' bandwidths."""

    bytes: int
    time_s: float
    algbw_gbps: float
    busbw_gbps: float


class RankPlace(TypedDict):
    """Where a rank runs: its node (by index and name), its host and local rank."""

    rank: int
    node_index: int
    local_rank: int
    host: str
    node: str


class NodeReport(TypedDict, total=False):
    """A node in the report: its ranks, its own links' timing and what its first rank found."""

    index: int
    node: str
    host: str
    ranks: list[int]
    intra: Timing | None
    gpus: GpuFacts
    dcgm: DcgmFacts
    efa: EfaFacts
    compute: Compute


class PairReport(TypedDict):
    """Two nodes' first ranks and the timing of the link between them."""

    a: str
    b: str
    a_host: str
    b_host: str
    result: Timing | None


class Compute(TypedDict):
    """A node's own arithmetic: matrix products on its first rank's device, timed alone."""

    gflops: float
    seconds: float


class LeaderReport(TypedDict, total=False):
    """What a rank measured that rank 0 did not see (the groups it led), and what its node is."""

    node_index: int
    intra: Timing | None
    pairs: list[tuple[int, Timing]]
    gpus: GpuFacts
    dcgm: DcgmFacts
    efa: EfaFacts
    compute: Compute


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


def parse_dcgm(text: str) -> DcgmFacts:
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
    metadata = doc.get("metadata")
    version = (metadata.get("version") if isinstance(metadata, dict) else None) or top.get("version") or ""
    return {"ran": True, "results": results, "failed": failed, "version": str(version)}


def dcgm_facts(level: int) -> DcgmFacts:
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


def efa_facts(sysfs: Path = Path("/sys/class/infiniband"), asked: int = 0) -> EfaFacts:
    """The EFA devices the pod sees (``rdmap*`` under /sys/class/infiniband), and libfabric's count
    of EFA endpoints where ``fi_info`` is in the image; ``asked``: the interfaces the pod asked for."""
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
    return {"devices": devices, "fi_info_endpoints": endpoints, "asked": asked}


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

    def facts(self) -> GpuFacts:
        nvml = self.nvml
        if nvml is None:
            return {"count": 0, "note": self.note}
        gpus = []
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            gpu: dict[str, object] = {"index": i, "name": _text(nvml.nvmlDeviceGetName(handle))}
            gpu["ecc_uncorrected"] = _nvml(
                partial(
                    nvml.nvmlDeviceGetTotalEccErrors,
                    handle,
                    nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                    nvml.NVML_VOLATILE_ECC,
                )
            )
            pending = _nvml(partial(nvml.nvmlDeviceGetRetiredPagesPendingStatus, handle))
            gpu["retired_pages_pending"] = None if pending is None else bool(pending)
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


def _nvml(read: Callable[[], object]) -> object:
    try:
        return read()
    except Exception:  # NVMLError_NotSupported and kin: a figure this GPU does not give
        return None


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# -- the sweeps --------------------------------------------------------------------------------------


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m torchdeck.trainer.check")
    p.add_argument("--max-bytes", type=int, default=16 << 20)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument(
        "--dcgm-level", type=int, default=1, help="dcgmi diag -r LEVEL where dcgmi is in the image (0: none)"
    )
    p.add_argument("--efa", type=int, default=0, help="the EFA interfaces each pod asked for (vpc.amazonaws.com/efa)")
    return p.parse_args(argv)


class Sweep:
    """This rank in the gate's process group: the all-reduces it times, and the groups it joins."""

    def __init__(self, args: argparse.Namespace) -> None:
        import torch
        import torch.distributed as dist

        self.args, self.torch, self.dist = args, torch, dist
        self.gpu = torch.cuda.is_available()
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.watch = GpuWatch() if self.local_rank == 0 else None
        dist.init_process_group("nccl" if self.gpu else "gloo")
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.device = torch.device("cuda", self.local_rank) if self.gpu else torch.device("cpu")
        if self.gpu:
            torch.cuda.set_device(self.device)

    def _synchronize(self) -> None:
        if self.gpu:
            self.torch.cuda.synchronize()

    def timed(self, size: int, group: dist.ProcessGroup | None, members: int) -> Timing:
        """The all-reduce of ``size`` bytes in ``group``: the slowest member's mean time, and its bandwidths."""
        torch, dist, args = self.torch, self.dist, self.args
        tensor = torch.ones(size // 4, dtype=torch.float32, device=self.device)
        for _ in range(args.warmup):
            dist.all_reduce(tensor, group=group)
        self._synchronize()
        started = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(tensor, group=group)
        self._synchronize()
        took = torch.tensor([(time.perf_counter() - started) / args.iters], dtype=torch.float64, device=self.device)
        dist.all_reduce(took, op=dist.ReduceOp.MAX, group=group)  # the slowest member's: the collective's own time
        seconds = float(took.item())
        algbw = size / seconds / 1e9
        return {"bytes": size, "time_s": seconds, "algbw_gbps": algbw, "busbw_gbps": bus_bandwidth(algbw, members)}

    def places(self) -> list[RankPlace]:
        """Every rank's place (node, host), gathered from all."""
        here: RankPlace = {
            "rank": self.rank,
            "node_index": int(os.environ.get("GROUP_RANK", "0")),
            "local_rank": self.local_rank,
            "host": socket.gethostname(),
            "node": os.environ.get(NODE_NAME_ENV) or socket.gethostname(),
        }
        ranks: list[RankPlace | None] = [None] * self.world
        self.dist.all_gather_object(ranks, here)
        return [r for r in ranks if r is not None]

    def node_sweeps(
        self, by_node: dict[int, list[int]], places: list[RankPlace], mine: LeaderReport
    ) -> list[NodeReport]:
        """Each node's own links, one node at a time (every rank makes every group)."""
        nodes: list[NodeReport] = []
        biggest = sizes(self.args.max_bytes)[-1]
        for index in sorted(by_node):
            members = sorted(by_node[index])
            group = self.dist.new_group(members)
            first = next(r for r in places if r["rank"] == members[0])
            nodes.append(
                {"index": index, "node": first["node"], "host": first["host"], "ranks": members, "intra": None}
            )
            if len(members) > 1 and self.rank in members:
                measured = self.timed(biggest, group, len(members))
                if self.rank == members[0]:
                    mine["intra"] = measured
            self.dist.barrier()
        return nodes

    def pair_sweeps(
        self, by_node: dict[int, list[int]], nodes: list[NodeReport], mine: LeaderReport
    ) -> list[PairReport]:
        """The link between the first ranks of each pair of nodes, one pair at a time."""
        order = sorted(by_node)
        biggest = sizes(self.args.max_bytes)[-1]
        pairs: list[PairReport] = []
        for i, (a, b) in enumerate(node_pairs(len(order)) if len(order) > 1 else []):
            members = sorted({by_node[order[a]][0], by_node[order[b]][0]})
            group = self.dist.new_group(members)
            if self.rank in members:
                measured = self.timed(biggest, group, 2)
                if self.rank == members[0]:
                    mine.setdefault("pairs", []).append((i, measured))
            self.dist.barrier()
            pairs.append({"a": nodes[a]["node"], "b": nodes[b]["node"], "a_host": nodes[a]["host"],
                          "b_host": nodes[b]["host"], "result": None})  # fmt: skip
        return pairs

    def compute(self, rounds: int = 8, round_s: float = 0.06) -> Compute | None:
        """Matrix products on this rank's device, in ``rounds`` short rounds every node's first rank
        runs at once (a barrier of every rank before each): the best round's GFLOP/s (None on a rank
        that leads no node). The best, not the mean: a healthy node on a busy host gets its share in
        some round; a throttled or sick one reaches its fraction in every round."""
        torch = self.torch
        n = 2048 if self.gpu else 256
        a = b = None
        threads = torch.get_num_threads()
        if not self.gpu:  # one core's arithmetic: threads that outnumber the cores wait on each other
            torch.set_num_threads(1)
        if self.watch is not None:
            a = torch.randn(n, n, device=self.device)
            b = torch.randn(n, n, device=self.device)
            torch.mm(a, b)  # warm
            self._synchronize()
        best, spent = 0.0, 0.0
        for _ in range(rounds):
            self.dist.barrier()
            if a is None or b is None:
                continue
            done, started = 0, time.perf_counter()
            while True:
                torch.mm(a, b)
                done += 1
                self._synchronize()
                took = time.perf_counter() - started
                if took >= round_s:
                    break
            best, spent = max(best, 2 * n**3 * done / took / 1e9), spent + took
        torch.set_num_threads(threads)
        return {"gflops": best, "seconds": spent} if a is not None else None

    def node_facts(self, mine: LeaderReport) -> None:
        """What a node's first rank finds about its node: its arithmetic, GPUs, DCGM, EFA."""
        compute = self.compute()  # every rank takes part: its rounds' barriers
        if compute is not None:
            mine["compute"] = compute
        if self.watch is not None:
            mine["gpus"] = self.watch.facts()
            mine["dcgm"] = dcgm_facts(self.args.dcgm_level)
            mine["efa"] = efa_facts(asked=self.args.efa)

    def gathered(self, mine: LeaderReport) -> list[LeaderReport]:
        said: list[LeaderReport | None] = [None] * self.world
        self.dist.all_gather_object(said, mine)
        return [got for got in said if got is not None]


def _merge(said: list[LeaderReport], nodes: list[NodeReport], pairs: list[PairReport]) -> None:
    """Each leader's measurements and facts into the nodes and pairs rank 0 reports."""
    for got in said:
        node = next(n for n in nodes if n["index"] == got["node_index"])
        if "gpus" in got:
            node["gpus"] = got["gpus"]
        if "dcgm" in got:
            node["dcgm"] = got["dcgm"]
        if "efa" in got:
            node["efa"] = got["efa"]
        if "compute" in got:
            node["compute"] = got["compute"]
        if got.get("intra") is not None:
            node["intra"] = got["intra"]
        for i, result in got.get("pairs", []):
            pairs[i]["result"] = result


def main(argv: list[str] | None = None) -> int:
    from .metrics import tool_line

    sweep = Sweep(_arguments(argv))
    rows = [sweep.timed(size, None, sweep.world) for size in sizes(sweep.args.max_bytes)]
    places = sweep.places()
    by_node: dict[int, list[int]] = {}
    for r in places:
        by_node.setdefault(r["node_index"], []).append(r["rank"])
    mine: LeaderReport = {"node_index": int(os.environ.get("GROUP_RANK", "0")), "intra": None, "pairs": []}
    nodes = sweep.node_sweeps(by_node, places, mine)
    pairs = sweep.pair_sweeps(by_node, nodes, mine)
    sweep.node_facts(mine)
    said = sweep.gathered(mine)
    if sweep.rank == 0:
        _merge(said, nodes, pairs)
        hosts = [r["host"] for r in places]
        result = {"backend": "nccl" if sweep.gpu else "gloo", "world_size": sweep.world, "hosts": hosts, "rows": rows,
                  "nodes": nodes, "pairs": pairs}  # fmt: skip
        print(tool_line("check", result), flush=True)
    sweep.dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
