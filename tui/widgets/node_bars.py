"""Per-node CPU, memory and GPU gauges, and each rank process's share."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from torchdeck.backends.base import NodeMetrics

from ..glyphs import Glyphs, bar


def _level(percent: float) -> str:
    return "red" if percent >= 90 else "yellow" if percent >= 70 else "green"


class NodeBars(Static):
    DEFAULT_CSS = """
    NodeBars { height: auto; max-height: 8; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(
        self, glyphs: Glyphs, *, name: str | None = None, id: str | None = None, classes: str | None = None
    ) -> None:
        super().__init__("measuring nodes...", name=name, id=id, classes=classes)
        self.glyphs = glyphs
        self._lines = 1

    def show(
        self, nodes: list[NodeMetrics], width: int, reported: dict[str, list[tuple[int, float]]] | None = None
    ) -> None:
        """``reported``: (rank, GPU %) the ranks' own lines give, by host, for
        nodes whose GPUs nothing else measures (no NVML here, no DCGM there)."""
        g = self.glyphs
        gauge = 10 if width < 100 else 16
        text = Text(no_wrap=True, overflow="ellipsis")
        if not nodes:
            text.append("no node figures yet: no pod of the run is on a node", style="dim")
        names = [short_node_name(node.name) for node in nodes]
        column = max(14, min(24, max(map(len, names), default=0)))
        for i, node in enumerate(nodes):
            if i:
                text.append("\n")
            mem = node.mem_used_mb / node.mem_total_mb * 100 if node.mem_total_mb else 0.0
            text.append(f"{names[i][:column]:<{column}} ", style="bold")
            text.append("cpu ")
            text.append(bar(node.cpu_percent / 100, gauge, g), style=_level(node.cpu_percent))
            text.append(f" {node.cpu_percent:3.0f}%  mem ")
            text.append(bar(mem / 100, gauge, g), style=_level(mem))
            text.append(f" {node.mem_used_mb / 1024:.1f}/{node.mem_total_mb / 1024:.0f}G  ")
            if node.gpus:
                for gpu in node.gpus:
                    gmem = gpu.mem_used_mb / gpu.mem_total_mb * 100 if gpu.mem_total_mb else 0.0
                    text.append(f"gpu{gpu.index} ")
                    text.append(bar(gpu.util_percent / 100, 6, g), style=_level(gpu.util_percent))
                    text.append(f" {gpu.util_percent:3.0f}% {gmem:3.0f}%mem  ")
            elif reported and (ranks := sorted(r for host in node.hosts for r in reported.get(host, ()))):
                mean = sum(u for _, u in ranks) / len(ranks)
                text.append("gpu ")
                text.append(bar(mean / 100, 6, g), style=_level(mean))
                text.append(f" {mean:3.0f}% ")
                text.append(
                    "(as the ranks report: "
                    + " ".join(f"r{r} {u:.0f}%" for r, u in ranks[:6])
                    + (" ..." if len(ranks) > 6 else "")
                    + ")",
                    style="dim",
                )
            else:
                text.append(node.gpu_note or "no GPU", style="dim")
            if node.processes:
                text.append("\n" + " " * (column + 1))
                parts = [f"r{p.rank} {p.cpu_percent:3.0f}% {p.rss_mb:4.0f}M" for p in node.processes[:8]]
                more = f"  +{len(node.processes) - 8} ranks" if len(node.processes) > 8 else ""
                text.append("  ".join(parts) + more, style="dim")
        lines = text.plain.count("\n") + 1
        self.update(text, layout=lines != self._lines)  # a new layout only when the height changes
        self._lines = lines


def short_node_name(name: str) -> str:
    """A node's name without its DNS domain, as EKS names nodes by their private address
    (ip-192-168-12-34.ec2.internal, ip-10-0-1-7.us-west-2.compute.internal): the host part is what
    tells two nodes apart, and a cut at a fixed width would keep only their common prefix."""
    host = name.split(".", 1)[0]
    return name if not host or host.isdigit() else host  # (a node named by its IP address keeps it whole)
