"""The health gate's verdict: which nodes fall short, and why, from what ``trainer/check.py``
measured (the bandwidth of each node's own links and of each pair of nodes; each node's GPUs
through NVML, DCGM's diagnostics, its EFA devices), compared with the other nodes and with what
the node's instance type should reach (``manifests/eks/health.yaml``, its sources in the file).
Pure functions over the check's result; the backends run the check and keep the verdict."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from ..trainer.check import DcgmFacts, GpuFacts, NodeReport, PairReport, Timing
from .errors import BackendError
from .files import write_atomically
from .records import GateStep
from .spec import JobSpec

INSTANCE_LABEL = "node.kubernetes.io/instance-type"


@dataclass
class GateResult:
    """The health gate's answer (``trainer/check.py``'s result), with its verdict: the sweep between
    every rank, each node's own links and each pair's, and ``short``: the nodes that fall short,
    each with why. ``to_dict`` is ``check --output json`` and what the state folder keeps."""

    backend: str
    world_size: int
    hosts: list[str]
    rows: list[Timing]
    nodes: list[NodeReport] = field(default_factory=list)
    pairs: list[PairReport] = field(default_factory=list)
    short: dict[str, str] = field(default_factory=dict)
    instance_types: dict[str, str] = field(default_factory=dict)
    """Each node's instance type (its label), on a cluster."""
    dropped: int = 0
    """Node entries and pairs that named a node none of the gate's pods ran on (``only_on``)."""
    gate: str = ""
    """The gate's run id, on a cluster."""
    time: float = 0.0

    @classmethod
    def from_tool(cls, answer: Mapping[str, object]) -> GateResult:
        """The check tool's result line; a BackendError where it is not one (a pod printed something else)."""
        rows, hosts, world = answer.get("rows"), answer.get("hosts"), answer.get("world_size")
        if not isinstance(rows, list) or not rows or not isinstance(world, int) or not isinstance(hosts, list):
            raise BackendError("the health gate answered without its sweep", "run torchdeck check again")
        nodes, pairs = answer.get("nodes"), answer.get("pairs")
        return cls(
            backend=str(answer.get("backend") or ""),
            world_size=world,
            hosts=[str(h) for h in hosts],
            rows=[row for row in rows if isinstance(row, dict)],  # type: ignore[misc]  # the tool's own rows
            nodes=[n for n in nodes if isinstance(n, dict)] if isinstance(nodes, list) else [],  # type: ignore[misc]
            pairs=[p for p in pairs if isinstance(p, dict)] if isinstance(pairs, list) else [],  # type: ignore[misc]
        )

    def only_on(self, ran_on: set[str]) -> GateResult:
        """The answer with only the nodes the gate's pods ran on (their ``spec.nodeName``): a node entry
        or a pair that names any other (a name a pod made up, or another node of the cluster) is
        dropped, and counted in ``dropped``, so nothing a pod prints can get a node cordoned or avoided."""
        import dataclasses

        nodes = [n for n in self.nodes if node_name(n.get("node")) in ran_on]
        pairs = [p for p in self.pairs if node_name(p.get("a")) in ran_on and node_name(p.get("b")) in ran_on]
        dropped = len(self.nodes) - len(nodes) + len(self.pairs) - len(pairs)
        return dataclasses.replace(self, nodes=nodes, pairs=pairs, dropped=dropped)

    def peak(self) -> Timing:
        return max(self.rows, key=lambda r: r["busbw_gbps"])

    def peak_busbw(self) -> float:
        return self.peak()["busbw_gbps"]

    def verdict(self) -> str:
        """The nodes that fell short, with why, in a line; or that every node passed."""
        return "; ".join(f"{n}: {why}" for n, why in self.short.items()) or "this machine passed"

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


@cache
def expectations() -> dict[str, Any]:
    """``manifests/eks/health.yaml``: the floors and each instance type's figures."""
    from importlib import resources

    import yaml

    return yaml.safe_load((resources.files("torchdeck") / "manifests" / "eks" / "health.yaml").read_text())


GATE_SUFFIX = "-gate"
GATE_WORKDIR = "/tmp"
"""The gate's working folder in the pods (its program is in the image: torchdeck's own module)."""


def gate_spec(spec: JobSpec, step: GateStep = GateStep()) -> JobSpec:
    """The run's spec as the health gate: the same image, kind, nodes, ranks, resources, node
    selection, queue and namespace, running ``python -m torchdeck.trainer.check`` (which the
    image has: torchdeck's images carry the trainer) once, with no restarts, nothing kept."""
    import dataclasses

    from .spec import Entrypoint, MetricsOptions

    args = ["--max-bytes", str(step.max_bytes), "--dcgm-level", str(step.dcgm_level)]
    args += ["--efa", str(spec.resources.efa)] if spec.resources.efa else []
    return dataclasses.replace(
        spec,
        name=spec.name[: 40 - len(GATE_SUFFIX)].rstrip("-") + GATE_SUFFIX,
        entrypoint=Entrypoint(module="torchdeck.trainer.check", args=args, in_image=GATE_WORKDIR),
        metrics=MetricsOptions(),
        max_restarts=0,
        budget=None,
        resumes=None,
        cluster=dataclasses.replace(spec.cluster, backoff_limit=0, min_nodes=None, max_nodes=None, health_gate=False),
    )


def _busbw(measured: Timing | None) -> float | None:
    value = measured.get("busbw_gbps") if measured else None
    return float(value) if isinstance(value, (int, float)) else None


def _figure(table: Mapping[str, object], instance_type: str, key: str) -> float | None:
    """An instance type's figure in manifests/eks/health.yaml (its NVLink or network rate); None where unknown."""
    row = table.get(instance_type)
    value = row.get(key) if isinstance(row, dict) else None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None  # as the file says it


def _whole(value: object) -> int:
    """A count from a node's report (an int; anything else counts as none)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def node_problems(node: NodeReport, instance_type: str | None) -> list[str]:
    """What a node's own report says is wrong: its GPUs (count, ECC, retired pages, NVLink, XIDs),
    DCGM's failed tests, EFA missing on an instance that has it."""
    said: list[str] = []
    from .eks.plan import shipped_catalogue  # the planner's instance catalogue: GPUs, EFA

    known = shipped_catalogue().get(instance_type or "")
    gpus: GpuFacts = node.get("gpus") or {}
    wanted = known.gpus if known is not None else 0
    count = int(gpus.get("count") or 0)
    if wanted and count < wanted:
        why = f" ({gpus['note']})" if gpus.get("note") else ""
        said.append(f"{count} of the {wanted} GPUs a {instance_type} has{why}")
    for gpu in gpus.get("gpus") or []:
        name = f"GPU {gpu.get('index')}"
        if gpu.get("ecc_uncorrected"):
            said.append(f"{name}: {gpu['ecc_uncorrected']} uncorrected ECC errors")
        if gpu.get("retired_pages_pending"):
            said.append(f"{name}: retired memory pages pending (the GPU needs a reset)")
        down, up = _whole(gpu.get("nvlink_down")), _whole(gpu.get("nvlink_up"))
        if down:
            said.append(f"{name}: {down} of {down + up} NVLink links down")
    if gpus.get("xids"):
        said.append(f"XID errors during the check: {', '.join(str(x) for x in gpus['xids'])}")
    dcgm: DcgmFacts = node.get("dcgm") or {}
    if dcgm.get("error"):
        said.append(f"DCGM diagnostics: {dcgm['error']}")
    for failed in dcgm.get("failed") or []:
        where = f" on GPU {failed['gpu']}" if failed.get("gpu") not in (None, "") else ""
        words = f": {failed['warning']}" if failed.get("warning") else ""
        said.append(f"DCGM level {dcgm.get('level', '?')} {failed['test']} failed{where}{words}")
    efa = node.get("efa")
    asked = int(efa.get("asked") or 0) if efa else 0
    seen = len(efa.get("devices") or []) if efa else 0
    if asked and seen < asked:
        said.append(
            f"its pod asks for {asked} EFA interface(s) and sees {seen}: NCCL falls back to TCP sockets "
            "(check the EFA device plugin on the node, and the nodegroup's EFA interfaces)"
        )
    elif known is not None and known.efa and efa is not None and not seen:
        said.append(
            f"no EFA device in the pod on an EFA instance ({instance_type}): NCCL falls back to TCP sockets "
            "(ask for them: resources.efa)"
        )
    return said


def judge(result: GateResult, instance_types: Mapping[str, str] | None = None) -> dict[str, str]:
    """The nodes that fall short, each with why ("" nowhere: a healthy node is not named)."""
    types = dict(instance_types or {})
    rules = expectations()
    floors, table = rules["floors"], rules["types"]
    nccl = result.backend == "nccl"
    nodes = result.nodes
    found: dict[str, list[str]] = {str(n["node"]): node_problems(n, types.get(str(n["node"]))) for n in nodes}

    # a node's own links: against the other nodes, and (NCCL) against its GPUs' NVLink
    own = {str(n["node"]): _busbw(n.get("intra")) for n in nodes}
    measured = {k: v for k, v in own.items() if v is not None}
    for name, value in measured.items():
        others = [v for k, v in measured.items() if k != name]
        if len(others) >= 2 and value < floors["against_others"] * statistics.median(others):
            found[name].append(
                f"its own all-reduce reaches {value:.2f} GB/s, under half the other nodes' {statistics.median(others):.2f}"
            )
        nvlink = _figure(table, types.get(name, ""), "nvlink_gbs")
        if nccl and nvlink and value < floors["nvlink_share"] * nvlink:
            found[name].append(
                f"its own all-reduce reaches {value:.1f} GB/s, under {floors['nvlink_share']:.0%} of its GPUs' "
                f"{nvlink} GB/s NVLink"
            )

    # a node's own arithmetic, against the others' (two nodes: the other's): a throttled or sick machine
    arithmetic = {str(n["node"]): float(c["gflops"]) for n in nodes if (c := n.get("compute")) and c.get("gflops")}
    for name, value in arithmetic.items():
        others = [v for k, v in arithmetic.items() if k != name]
        if others and value < floors["against_others"] * statistics.median(others):
            whose = "the other nodes'" if len(others) > 1 else "the other node's"
            found[name].append(
                f"its arithmetic reaches {value:.1f} GFLOP/s, under half {whose} {statistics.median(others):.1f}"
            )

    # the links between nodes: a node in most of the slow pairs is the one; a lone slow pair names both ends
    pairs: list[tuple[str, str, float]] = []
    for p in result.pairs:
        link = _busbw(p.get("result"))
        if link is not None:
            pairs.append((str(p["a"]), str(p["b"]), link))
    values = [v for _, _, v in pairs]
    slow: list[tuple[str, str, float, str]] = []
    for a, b, value in pairs:
        others = [v for x, y, v in pairs if (x, y) != (a, b)]
        if len(others) >= 2 and value < floors["against_others"] * statistics.median(others):
            slow.append((a, b, value, f"under half the other links' {statistics.median(others):.2f} GB/s"))
            continue
        rates = [_figure(table, types.get(n, ""), "network_gbps") for n in (a, b)]
        if nccl and all(rates):
            line = min(float(r) for r in rates if r)
            if value < floors["network_share"] * line / 8:
                slow.append((a, b, value, f"under {floors['network_share']:.0%} of the {line:g} Gbps both have"))
    if slow:
        ends: dict[str, int] = {}
        for a, b, _, _ in slow:
            ends[a], ends[b] = ends.get(a, 0) + 1, ends.get(b, 0) + 1
        busiest = max(ends.values())
        blamed = {n for n, c in ends.items() if c == busiest} if len(values) > 2 and busiest > 1 else set(ends)
        for a, b, value, why in slow:
            for name in (a, b):
                if name in blamed:
                    other = b if name == a else a
                    found.setdefault(name, []).append(f"its link to {other} reaches {value:.2f} GB/s, {why}")
    return {name: "; ".join(said) for name, said in found.items() if said}


def node_name(value: object) -> str | None:
    """A Kubernetes node's name (a DNS-1123 subdomain), or None for anything that is not one."""
    from .names import SUBDOMAIN_RE

    return value if isinstance(value, str) and len(value) <= 253 and SUBDOMAIN_RE.match(value) else None


def save(folder: Path, result: GateResult) -> None:
    """Keep a gate's result (with its verdict) as ``latest.json`` in ``folder``: what status reads
    for nodes the gate marked bad. A failure to write only means status will not say so."""
    import json

    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_atomically(folder / "latest.json", json.dumps(result.to_dict()))
    except OSError:
        pass


def gate_marked(folder: Path) -> dict[str, str]:
    """The nodes the newest gate named (``save``), each with why and when."""
    import json
    import time

    from .files import read_bytes

    try:
        kept = json.loads(read_bytes(Path(folder) / "latest.json", 4 << 20))
        short = kept.get("short")
        if not isinstance(short, dict):
            return {}
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(kept.get("time") or 0)))
        return {
            k: f"fell short in torchdeck's health gate ({when}): {str(v)[:500]}"
            for k, v in short.items()
            if node_name(k) is not None
        }
    except (OSError, ValueError, AttributeError, TypeError):
        return {}
