"""The console's monitor on a cluster job: 128 worker pods, each streaming
20 metric lines/s through the Kubernetes API (kmock, in its own process,
with the gaps closed by tests/support/kube_cluster.py), followed by the real
kubernetes backend through a kubeconfig. We report whether every rank's
curve kept updating, how much CPU the console used (its process and its
metric reader together, not the API server), and its memory. Targets:
every curve updates; under half of one core; bounded memory.

    .venv/bin/python benchmarks/kube_monitor.py [--pods 128] [--rate 20] [--seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from console_procs import console_processes
from host import calibration

REPO = Path(__file__).resolve().parent.parent
NS = "training"
CAUGHT_UP_S = 10.0
"""A monitor has caught up once every rank's newest line it has read is at most this old."""


def serve(tmp: str, pods: int, rate: float, seconds: float) -> None:
    """The API server side (run in a child process): a PyTorchJob's 128 pods and their logs."""
    sys.path.insert(0, str(REPO / "tests" / "support"))
    from kube_cluster import start_cluster

    from torchdeck.backends.kubernetes import crds
    from torchdeck.backends.kubernetes.backend import KubernetesBackend
    from torchdeck.backends.kubernetes.kinds import JOB_KINDS
    from torchdeck.backends.spec import spec_from_dict

    cluster, _ = start_cluster(Path(tmp))
    cluster.emulator.namespaces.add(NS)
    backend = KubernetesBackend(cluster.kubeconfig)
    # the Training Operator's own CRD, as its release publishes it (manifests/crds/)
    crd = crds.crd(JOB_KINDS["pytorchjob"].targets[-1].crd_file)
    backend.client.request("POST", "apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=crd)
    spec = spec_from_dict(
        {"name": "bench", "nodes": pods, "nproc_per_node": 1, "namespace": NS, "image": "repo/torchdeck:1"}
    )
    run_id = backend.submit(spec)
    lines = int(rate * seconds)
    start = time.time()
    job = backend.client.request("GET", f"apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs/{run_id}")
    owner = {  # as the Training Operator makes them: its pods are the job's (torchdeck follows no others)
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "name": run_id,
        "uid": job["metadata"]["uid"],
        "controller": True,
    }
    for i in range(pods):
        name = f"{run_id}-worker-{i}"
        log = [
            json.dumps(
                {
                    "schema": 1,
                    "event": "step",
                    "rank": i,
                    "world_size": pods,
                    "time": start + s / rate,
                    "epoch": 1,
                    "step": s,
                    "loss": 2.3 * 0.999**s + i * 1e-4,
                    "samples_per_s": 900.0 + i % 7,
                }
            )
            for s in range(1, lines + 1)
        ]
        cluster.call(cluster.emulator.script_log, NS, name, log, rate=rate, ended=False)
        backend.client.request(
            "POST",
            f"api/v1/namespaces/{NS}/pods",
            body={
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "ownerReferences": [owner],
                    "labels": {
                        "torchdeck.dev/run": run_id,
                        "training.kubeflow.org/replica-type": "worker",
                        "training.kubeflow.org/replica-index": str(i),
                    },
                },
                "spec": {
                    "nodeName": f"node-{i // 8}",
                    "containers": [{"name": "pytorch", "image": "repo/torchdeck:1"}],
                },
                "status": {
                    "phase": "Running",
                    "containerStatuses": [{"name": "pytorch", "restartCount": 0, "state": {"running": {}}}],
                },
            },
        )
    with FullCollections() as collections:  # the server's own
        print(json.dumps({"kubeconfig": str(cluster.kubeconfig), "run_id": run_id}), flush=True)
        sys.stdin.read()  # until the benchmark is done
    print(
        json.dumps(
            {
                "log requests": dict(cluster.emulator.log_requests),
                "full collections": len(collections.pauses),
                "longest s": round(max(collections.pauses, default=0.0), 3),
            }
        ),
        flush=True,
    )


class FullCollections:
    """This process's full (generation 2) garbage collections while entered: how long each held
    the interpreter, in seconds."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self._began = 0.0

    def _timed(self, phase: str, info: dict) -> None:
        if info["generation"] == 2:
            if phase == "start":
                self._began = time.perf_counter()
            else:
                self.pauses.append(time.perf_counter() - self._began)

    def __enter__(self) -> FullCollections:
        gc.callbacks.append(self._timed)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._timed)


def console_usage(me: psutil.Process) -> tuple[float, int, float, int]:
    """CPU seconds and RSS of the console and its metric reader (not the API server),
    and the reader's CPU seconds and RSS alone."""
    procs = console_processes(me)
    cpu, rss, reader, reader_rss = 0.0, 0, 0.0, 0
    for p in procs:
        try:
            t = p.cpu_times()
            cpu += t.user + t.system
            reader += 0.0 if p is me else t.user + t.system
            rss += p.memory_info().rss
            reader_rss += 0 if p is me else p.memory_info().rss
        except psutil.Error:
            pass
    return cpu, rss, reader, reader_rss


async def measure(
    kubeconfig: str,
    run_id: str,
    pods: int,
    seconds: float,
    refresh_hz: float = 20.0,
    warm_s: float = 15.0,
    server_pid: int | None = None,
) -> dict:
    from torchdeck.backends.kubernetes.backend import KubernetesBackend
    from torchdeck.settings import Settings
    from torchdeck.tui.app import make_app
    from torchdeck.tui.screens.monitor import MonitorScreen

    me = psutil.Process()
    server = psutil.Process(server_pid) if server_pid else None

    def server_cpu() -> float:
        return sum(server.cpu_times()[:2]) if server else 0.0

    app = make_app(
        Settings(backend="kubernetes", state_dir=Path(tempfile.mkdtemp()), refresh_hz=refresh_hz),
        KubernetesBackend(kubeconfig),
        run_id,
    )
    async with app.run_test(size=(120, 40)) as pilot:
        while not isinstance(app.screen, MonitorScreen):
            await pilot.pause(0.05)
        screen = app.screen
        t_start = time.perf_counter()
        while len(screen.snap.ranks) < pods and time.perf_counter() - t_start < 60:
            await pilot.pause(0.1)
        ranks_seen_s = time.perf_counter() - t_start
        # past the catch-up (a monitor opened on a running job reads every pod's log from its start:
        # the longer the job has run, the longer that takes): every rank's newest line is recent
        while max((r.seen_ago_s for r in screen.snap.ranks), default=0.0) > CAUGHT_UP_S:
            if time.perf_counter() - t_start > 900:
                break
            await pilot.pause(1.0)
        caught_up_s = time.perf_counter() - t_start
        await pilot.pause(warm_s)
        cpu0, rss0, reader0, reader_rss0 = console_usage(me)
        polled0 = dict(screen.polled)
        t0 = time.perf_counter()
        steps0 = {r.rank: r.step for r in screen.snap.ranks}
        events0 = screen.snap.events
        samples, updated_all, trace, stalls = [], 0, [(rss0, reader_rss0)], []
        server_trace, server_at, server_t = [], server_cpu(), time.perf_counter()
        last = dict(steps0)
        with FullCollections() as collections:  # the console's: they hold its frames
            while time.perf_counter() - t0 < seconds:
                await pilot.pause(2.0)
                if len(samples) % 15 == 14:  # every 30 s
                    trace.append(console_usage(me)[1::2])
                    busy, now_t = server_cpu(), time.perf_counter()
                    server_trace.append((busy - server_at) / (now_t - server_t))
                    server_at, server_t = busy, now_t
                now = {r.rank: r.step for r in screen.snap.ranks}
                moved = sum(1 for r, s in now.items() if s > last.get(r, 0))
                samples.append(moved)
                updated_all += moved == pods
                if moved < pods:
                    stalls.append(f"{time.perf_counter() - t0:.0f} s: {moved}")
                last = now
        t1 = time.perf_counter()
        cpu1, rss1, reader1, reader_rss = console_usage(me)
        events1 = screen.snap.events
        polls = {
            poll: f"{asked - polled0.get(poll, (0, 0.0))[0]} asks, {(spent - polled0.get(poll, (0, 0.0))[1]) / (t1 - t0):.3f} cores"
            for poll, (asked, spent) in screen.polled.items()
        }
    return {
        "pods": pods,
        "all_ranks_seen_after_s": round(ranks_seen_s, 1),
        "caught_up_after_s": round(caught_up_s, 1),
        "seconds": round(t1 - t0, 1),
        "lines_per_s": round((events1 - events0) / (t1 - t0)),
        "ranks_updated_per_2s": f"min {min(samples)} of {pods}",
        "windows_all_updated": f"{updated_all}/{len(samples)}",
        "stalls": stalls,
        "console_cores": round((cpu1 - cpu0) / (t1 - t0), 3),
        "reader_cores": round((reader1 - reader0) / (t1 - t0), 3),
        "polls": polls,
        "rss_mb": round(rss1 / 2**20, 1),
        "reader_rss_mb": round(reader_rss / 2**20, 1),
        "rss_growth_mb": round((rss1 - rss0) / 2**20, 1),
        "rss_trace_mb": [f"{rss / 2**20:.1f} ({reader / 2**20:.1f})" for rss, reader in trace],
        "server_cores": [f"{c:.2f}" for c in server_trace],
        "console_collections": sorted(collections.pauses),
        "tracked_objects": f"{len(gc.get_objects())} tracked, {gc.get_freeze_count()} frozen",
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pods", type=int, default=128)
    p.add_argument("--rate", type=float, default=20.0, help="metric lines per second per pod")
    p.add_argument("--seconds", type=float, default=30.0, help="how long to measure")
    p.add_argument("--refresh-hz", type=float, default=30.0, help="the console's frame rate (its default: 30)")
    p.add_argument(
        "--warm", type=float, default=15.0, help="seconds after every rank is on screen before measuring (buffers fill)"
    )
    p.add_argument("--serve", metavar="TMP", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.serve:
        serve(a.serve, a.pods, a.rate, a.seconds + a.warm + 90)
        return 0
    print(calibration(), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        server = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--serve",
                tmp,
                "--pods",
                str(a.pods),
                "--rate",
                str(a.rate),
                "--seconds",
                str(a.seconds),
                "--warm",
                str(a.warm),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            info = json.loads(server.stdout.readline())
            result = asyncio.run(
                measure(info["kubeconfig"], info["run_id"], a.pods, a.seconds, a.refresh_hz, a.warm, server.pid)
            )
        finally:
            server.stdin.close()
            served = server.stdout.readline()
            server.wait(10)
    print(
        f"monitor on a cluster job: {a.pods} pods x {a.rate:g} metric lines/s through the API (kmock), "
        f"console at 120x40 drawn at up to {a.refresh_hz:g} Hz, headless"
    )
    print(
        f"  every rank on screen after {result['all_ranks_seen_after_s']} s, caught up after {result['caught_up_after_s']} s; over {result['seconds']} s: "
        f"{result['lines_per_s']:,} lines/s taken in"
    )
    print(
        f"  ranks whose step moved in each 2 s window: {result['ranks_updated_per_2s']}; "
        f"windows with all {a.pods} moving: {result['windows_all_updated']}   (target: every curve updates)"
    )
    if result["stalls"]:
        print(
            f"  windows in which not every rank moved, by their end (ranks that moved): {', '.join(result['stalls'])}"
        )
    print(
        f"  console CPU {result['console_cores']} cores: its process and its metric reader "
        f"({result['reader_cores']} of them)   (target: < 0.25 at 128 pods x 20 lines/s, < 0.5 at 512 x 5)"
    )
    print(f"  the console's polls, in their threads: {json.dumps(result['polls'])}")
    print(
        f"  console memory {result['rss_mb']} MB (its metric reader {result['reader_rss_mb']} MB), "
        f"grew {result['rss_growth_mb']} MB while measuring, after a {a.warm:g} s warm-up   "
        "(target: < 150 MB, flat once warm)"
    )
    pauses = result["console_collections"]
    if pauses:
        print(
            f"  the console's full garbage collections: {len(pauses)}, one every "
            f"{result['seconds'] / len(pauses):.1f} s; each held it {1000 * pauses[len(pauses) // 2]:.0f} ms "
            f"(median), {1000 * pauses[-1]:.0f} ms at most; objects the collector scans: {result['tracked_objects']}"
        )
    if len(result["rss_trace_mb"]) > 2:
        print(f"  console memory every 30 s, MB (its metric reader's): {', '.join(result['rss_trace_mb'])}")
        print(f"  the API server's (kmock's) CPU in each 30 s, cores: {', '.join(result['server_cores'])}")
    if served.strip():
        print(f"  the API server (kmock): {served.strip()}")
    totals = [float(cell.split()[0]) for cell in result["rss_trace_mb"]]
    if len(totals) > 40:  # over 20 minutes: the growth in each 10 minutes (20 samples 30 s apart)
        spans = [f"{(totals[min(i + 20, len(totals) - 1)] - totals[i]):+.1f}" for i in range(0, len(totals) - 1, 20)]
        print(f"  growth in each 10 minutes after the warm-up, MB (the last span may be shorter): {', '.join(spans)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
