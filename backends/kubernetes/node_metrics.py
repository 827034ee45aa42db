"""Node figures for a run's pods on a cluster: CPU and memory from metrics-server, GPU
utilization and memory from the DCGM exporter's metrics (read through the API server's pod
proxy) where one runs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..base import GpuMetrics, NodeMetrics
from ..errors import BackendError
from .client import ApiError, KubeClient, api_path, quantity
from .objects import NodeUsage, Pod, items

DCGM_SELECTOR = "app.kubernetes.io/name=dcgm-exporter"
DCGM_PORT = 9400


def dcgm_gpus(client: KubeClient, nodes: set[str]) -> dict[str, list[GpuMetrics]]:
    """Per node, its GPUs as the DCGM exporter pod on it reports them
    (through the API server's pod proxy); nothing where none runs."""
    try:
        exporters = client.read_pods(None, DCGM_SELECTOR)
    except BackendError:
        return {}
    found: dict[str, list[GpuMetrics]] = {}
    for pod in exporters:
        node = pod.node
        if node not in nodes or pod.phase != "Running":
            continue
        if not any(ref.kind == "DaemonSet" for ref in pod.meta.controllers()):
            continue  # the exporter runs as a DaemonSet (the GPU Operator's, NVIDIA's chart): a lone pod is no exporter
        try:
            text = client.request(
                "GET",
                api_path("Pod", pod.meta.namespace or "default", f"{pod.name}:{DCGM_PORT}", "proxy/metrics"),
                stream=True,
                timeout=5,
            ).data
        except BackendError:
            continue
        found[node] = parse_dcgm(text.decode(errors="replace"))
    return found


def measure_nodes(client: KubeClient, pods: Sequence[Pod]) -> list[NodeMetrics]:
    """The nodes the pods run on: CPU and memory from metrics-server, GPUs from the DCGM exporter
    where one runs (else what the API says they have)."""
    views = list(pods)
    node_names: list[str] = sorted({p.node for p in views if p.node})
    if not node_names:
        return []
    usage: dict[str, NodeUsage] = {}
    note = ""
    try:
        for item in items(client.request("GET", api_path("NodeMetrics"))):
            used = NodeUsage.from_api(item)
            usage[used.name] = used
    except ApiError as exc:
        note = (
            "node CPU and memory are not this identity's to read (metrics.k8s.io nodes: forbidden)"
            if exc.status == 403
            else "no metrics-server: install it for node CPU and memory"
        )
    dcgm = dcgm_gpus(client, set(node_names))
    read, _ = client.nodes_named(node_names)
    out = []
    for node_name in node_names:
        node = read.get(node_name)
        if node is None:
            continue
        alloc = node.allocatable
        cpu_total = quantity(alloc.get("cpu", "0"))
        mem_total = quantity(alloc.get("memory", "0"))
        used = usage.get(node_name, NodeUsage(node_name))
        gpus = int(quantity(alloc.get("nvidia.com/gpu", "0")))
        # The API has GPU counts, not utilization: that comes from a DCGM
        # exporter where one runs (else from the trainer's own gpu_util).
        measured = dcgm.get(node_name, [])
        gpu_note = (
            "" if measured else f"{gpus} GPU(s) allocatable; no DCGM exporter for utilization" if gpus else "no GPU"
        )
        out.append(
            NodeMetrics(
                name=node_name,
                cpu_percent=100.0 * quantity(used.cpu or "0") / cpu_total if cpu_total else 0.0,
                cpu_count=int(cpu_total) or 1,
                mem_used_mb=quantity(used.memory or "0") / 2**20,
                mem_total_mb=mem_total / 2**20,
                gpus=measured,
                gpu_note="; ".join(n for n in (gpu_note, note) if n),
                hosts=sorted(p.name for p in views if p.node == node_name),
            )
        )
    return out


def parse_dcgm(text: str) -> list[GpuMetrics]:
    """GPU utilization and framebuffer memory from a DCGM exporter's
    Prometheus text (DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_FB_USED/FREE, in MiB)."""
    gpus: dict[int, dict[str, Any]] = {}
    for line in text.splitlines():
        if not line.startswith("DCGM_FI_DEV_") or "{" not in line:
            continue
        metric, rest = line.split("{", 1)
        labels_text, _, value = rest.rpartition("}")
        labels = dict(re.findall(r'(\w+)="([^"]*)"', labels_text))
        try:
            index, number = int(labels.get("gpu", "0")), float(value.split()[0])
        except (ValueError, IndexError):
            continue
        gpu = gpus.setdefault(index, {"name": labels.get("modelName", "GPU")})
        gpu[metric] = number
    return [
        GpuMetrics(
            i,
            g["name"],
            g.get("DCGM_FI_DEV_GPU_UTIL", 0.0),
            g.get("DCGM_FI_DEV_FB_USED", 0.0),
            g.get("DCGM_FI_DEV_FB_USED", 0.0) + g.get("DCGM_FI_DEV_FB_FREE", 0.0),
        )
        for i, g in sorted(gpus.items())
    ]
