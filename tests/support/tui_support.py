"""Helpers for the console's tests.

``FixedNodesBackend`` is the real LocalBackend with one gap closed for
snapshots: node metrics (this machine's CPU and memory right now) are
replaced by fixed figures so that a frame is the same on every run. Every
other call reads the real run folders."""

from __future__ import annotations

import html
import re
import shutil
import time
from pathlib import Path

from torchdeck.backends.base import NodeMetrics, ProcessMetrics
from torchdeck.backends.capabilities import ClusterViews
from torchdeck.backends.local import LocalBackend
from torchdeck.backends.spec_options import Where
from torchdeck.settings import Settings
from torchdeck.tui.app import make_app
from torchdeck.tui.screens.monitor import MonitorScreen

RECORDED = Path(__file__).parent.parent / "data" / "recorded-runs"
RECORDED_RUN = "recorded-1122-044521"


class FixedNodesBackend(LocalBackend):
    def node_metrics(self, run_id: str) -> list[NodeMetrics]:
        self.resolve(run_id)
        return [
            NodeMetrics(
                name="node-0",
                cpu_percent=62.0,
                cpu_count=2,
                mem_used_mb=3 * 1024,
                mem_total_mb=24 * 1024,
                gpu_note="no GPU",
                processes=[ProcessMetrics(0, 101, 97.0, 410.0), ProcessMetrics(1, 102, 95.0, 405.0)],
            )
        ]


def recorded_state(tmp_path: Path) -> Path:
    """A state directory holding the recorded run (a real 2-rank run with
    rank 1 killed once and restarted)."""
    state = tmp_path / "state"
    shutil.copytree(RECORDED, state / "runs")
    return state


def settings_for(state: Path, **kw) -> Settings:
    return Settings(state_dir=state, spec_file=state / "torchdeck.yaml", ascii=kw.pop("ascii", False), **kw)


async def wait_for(pilot, condition, timeout: float = 20.0, what: str = "condition") -> None:
    """Let the app run until ``condition()`` holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)


def screen_lines(app) -> str:
    """What the terminal shows now, as plain text: the text of Textual's own SVG screenshot, a line per row."""
    rows: dict[float, list[str]] = {}
    for y, text in re.findall(r'<text [^>]*?y="([0-9.]+)"[^>]*>(.*?)</text>', app.export_screenshot()):
        rows.setdefault(float(y), []).append(html.unescape(text).replace("\xa0", " "))
    return "\n".join("".join(parts) for _, parts in sorted(rows.items()))


def text_of(screen, selector: str) -> str:
    """What a Static shows now."""
    from textual.widgets import Static

    return str(screen.query_one(selector, Static).render())


async def type_into(pilot, screen, field: str, text: str) -> None:
    """Clear the form field ``#f-FIELD`` and type ``text`` into it, key by key."""
    from textual.widgets import Input

    widget = screen.query_one(f"#f-{field}", Input)
    widget.value = ""
    widget.focus()
    await pilot.pause()
    await pilot.press(*text)
    await pilot.pause()


class SnapshotBackend(FixedNodesBackend):
    """For the model test's picture: the recorded run's model test answers a fixed result (the
    recorded run kept no model; the test itself is exercised by the backends' own tests)."""

    ended_on: tuple = ()
    """(state, bad nodes) the pictures' runs are shown with: the resume offer's picture shows the
    recorded run as a cluster run that failed on a lost node is shown (``()``: as it ended)."""

    def status(self, run_id: str):
        status = super().status(run_id)
        if self.ended_on:
            status.state, status.bad_nodes = self.ended_on[0], dict(self.ended_on[1])
        return status

    def model_file_of(self, run_id: str):
        from torchdeck.backends.spec import JobSpec

        return JobSpec(), str(self.resolve(run_id) / "model.pt")

    def test_model(self, spec, model_file=None, progress=lambda line: None):
        classes = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
        scores = (0.71, 0.78, 0.47, 0.41, 0.55, 0.49, 0.74, 0.69, 0.80, 0.72)
        return {
            "model": "resnet-fast",
            "model_file": model_file or "",
            "images": 1000,
            "accuracy": sum(scores) / len(scores),
            "loss": 0.93,
            "per_class": {c: {"accuracy": a, "images": 100} for c, a in zip(classes, scores, strict=True)},
        }


def fixed_context_cloud(state: Path):
    """The real EksCloud, with one gap closed for pictures: the build context (whose tags hash
    this repository's files, and whose engine is whatever answers here) is a fixed one."""
    from torchdeck.backends.eks.cloud import EksCloud
    from torchdeck.backends.eks.image_plan import BuildContext

    class FixedContextCloud(EksCloud):
        def build_context(self) -> BuildContext:
            return BuildContext(None, 812.0, {"cpu": "cpu-3f9c2a71d0", "gpu": "gpu-3f9c2a71d0"})

    return FixedContextCloud(state)


RECORDED_LINES = sum(len(p.read_bytes().splitlines()) for p in (RECORDED / RECORDED_RUN / "metrics").glob("*.jsonl"))
LOG_LINES = sum(len(p.read_bytes().splitlines()) for p in (RECORDED / RECORDED_RUN / "logs").rglob("stdout.log"))


def recorded_app(tmp_path, monitor: bool = True, **settings):
    state = recorded_state(tmp_path)
    return make_app(settings_for(state, **settings), FixedNodesBackend(state), RECORDED_RUN if monitor else None)


async def monitor_ready(pilot) -> MonitorScreen:
    """Wait until the monitor has read the whole recorded stream, its logs,
    status and nodes, and has drawn them."""
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, MonitorScreen), what="the monitor")
    screen = pilot.app.screen
    await wait_for(pilot, lambda: screen.snap.events == RECORDED_LINES, what="all metric lines")
    await wait_for(pilot, lambda: screen.status is not None, what="the status")
    await wait_for(pilot, lambda: len(screen.query_one("#logs").buffer) == LOG_LINES, what="the logs")
    await pilot.pause(0.5)  # two frames at least, and the chart's own rate
    chart = screen.query_one("#chart")
    builds = chart.builds
    screen.draw_all()
    await wait_for(pilot, lambda: chart.builds > builds and chart.shown == 2, what="the chart")
    await pilot.pause(0.2)
    return screen


COMPARED_RUN = "recorded-1122-050000"


def compared_state(tmp_path: Path) -> Path:
    """The recorded run and a second run made from it, for the comparison screen: a larger batch,
    its first 60 metric lines of each rank, failed (a comparison takes any state, any length)."""
    state = recorded_state(tmp_path)
    first, second = state / "runs" / RECORDED_RUN, state / "runs" / COMPARED_RUN
    shutil.copytree(first, second)
    spec = (second / "spec.yaml").read_text().replace("batch_size: null", "batch_size: 256")
    (second / "spec.yaml").write_text(spec.replace("name: recorded", "name: recorded"))
    for path in (second / "metrics").glob("rank-*.jsonl"):
        path.write_text("".join(path.read_text().splitlines(keepends=True)[:60]))
    exit_file = second / "exit.json"
    exit_file.write_text(exit_file.read_text().replace('"exit_code": 0', '"exit_code": 1'))
    return state


def recorded_notices(app) -> list[str]:
    """Every notification the app shows from now on, as its message (the toasts go on as well)."""
    said: list[str] = []
    notify = app.notify

    def noting(message: str, **kw) -> None:
        said.append(message)
        notify(message, **kw)

    app.notify = noting
    return said


class FleetSnapshotBackend(SnapshotBackend, ClusterViews):
    """For the pictures of the cluster views: the recorded run beside two jobs others made (as the
    kubernetes backend lists them: tests/kube/test_fleet.py), and fixed nodes and queues views in
    the kubernetes backend's words (tests/kube/test_fleet.py, test_kueue.py hold those to kmock)."""

    name = "kubernetes"
    fields: Where = "cluster"

    def list(self):
        from torchdeck.backends.records import JobState, JobStatus, QueueWait

        rows = super().list()
        for row in rows:
            row.namespace, row.kind = "ml-team", "PyTorchJob"
        started = rows[0].submitted_at if rows else 0.0
        theirs = [
            ("pytorchjob/vision/resnet152-sweep-3", JobState.RUNNING, 16, "vision", "PyTorchJob", "gpu-a", "kubectl"),
            ("trainjob/nlp/llama-ft", JobState.QUEUED, 64, "nlp", "TrainJob", "gpu-a", "kubeflow-sdk"),
            ("mpijob/vision/horovod-bench", JobState.SUCCEEDED, 8, "vision", "MPIJob", "-", "argo-workflows"),
        ]
        for i, (ref, state, ranks, ns, kind, queue, by) in enumerate(theirs):
            status = JobStatus(ref, ref.rsplit("/", 1)[1], "kubernetes", state, ranks, started - 600 * (i + 1))
            status.namespace, status.kind, status.made_by, status.found_by_label = ns, kind, by, True
            status.queue = None if queue == "-" else QueueWait(queue)
            rows.append(status)
        return rows

    def nodes_view(self, early=None):
        from torchdeck.backends.views import Amounts, NodeRow, NodesView

        gib = 2**30
        rows = [
            NodeRow("ip-10-0-3-41.ec2.internal", False, "NotReady since 14:02:11 (312 s) (Kubelet stopped posting node status.)",
                    "p4d.24xlarge", "us-west-2b", Amounts(95, 64, None), Amounts(1100 * gib, 512 * gib), Amounts(8, 8), 9,
                    ("pytorchjob/vision/resnet152-sweep-3",)),
            NodeRow("ip-10-0-1-7.ec2.internal", True, "cordoned; fell short in torchdeck's health gate (2026-11-28 13:40): "
                    "all-reduce 3.1 GB/s, under half the others'", "p4d.24xlarge", "us-west-2a",
                    Amounts(95, 2, 1.2), Amounts(1100 * gib, 4 * gib, 9 * gib), Amounts(8, 0), 3),
            NodeRow("ip-10-0-1-12.ec2.internal", True, "", "p4d.24xlarge", "us-west-2a", Amounts(95, 64, 58.3),
                    Amounts(1100 * gib, 512 * gib, 610 * gib), Amounts(8, 8), 9, (RECORDED_RUN,)),
            NodeRow("ip-10-0-2-30.ec2.internal", True, "", "p4d.24xlarge", "us-west-2b", Amounts(95, 64, 61.0),
                    Amounts(1100 * gib, 512 * gib, 590 * gib), Amounts(8, 8), 9, ("pytorchjob/vision/resnet152-sweep-3",)),
            NodeRow("ip-10-0-0-5.ec2.internal", True, "", "m5.xlarge", "us-west-2a", Amounts(3.92, 1.35, 0.4),
                    Amounts(15 * gib, 2 * gib, 3 * gib), Amounts(0, 0), 12),
        ]  # fmt: skip
        return NodesView(tuple(rows))

    def queues_view(self):
        from torchdeck.backends.views import QueueRow, QueuesView, Usage, Waiting

        now = time.time()
        gpu = "nvidia.com/gpu"
        waiting = (
            Waiting(1, "trainjob-llama-ft-7c1e2", "nlp", "gpu-a", "trainjob/nlp/llama-ft", 100, now - 2400,
                    "couldn't assign flavors to pod set node: insufficient unused quota for nvidia.com/gpu in flavor "
                    "p4d, 64 more needed"),
            Waiting(2, "pytorchjob-ablation-3-1b9f0", "vision", "gpu-a", "pytorchjob/vision/ablation-3", 0, now - 1500,
                    "couldn't assign flavors to pod set worker: insufficient unused quota for nvidia.com/gpu in "
                    "flavor p4d, 16 more needed"),
            Waiting(3, "pytorchjob-cifar10-2f7a", "ml-team", "gpu-a", RECORDED_RUN, 0, now - 300,
                    "couldn't assign flavors to pod set worker: insufficient unused quota for nvidia.com/gpu in "
                    "flavor p4d, 8 more needed", mine=True),
        )  # fmt: skip
        queues = (
            QueueRow("gpu-a", "research", "", (Usage("p4d", gpu, 32, 24), Usage("p4d", "cpu", 380, 192)), 2, 3, 1,
                     ("ml-team/gpu-a", "nlp/gpu-a", "vision/gpu-a"), waiting),
            QueueRow("cpu-batch", "research", "", (Usage("m5", "cpu", 64, 12),), 4, 0, 0, ("ml-team/cpu",)),
        )  # fmt: skip
        return QueuesView(queues, "Kueue's visibility API")
