"""Issue 55: torchdeck at the size users run, on a real API server. The real cluster of
scripts/kube-cluster.sh with KWOK (sigs.k8s.io/kwok, built from its module) simulating nodes:

- NODES simulated nodes (1,000; 96 CPUs, 8 GPUs each), labelled type=kwok, beside the real ones;
- 30 namespaces, 10 ClusterQueues (a LocalQueue of each in every namespace) whose quota admits few;
- 300 training jobs across them, each 2 pods on the simulated nodes: PyTorchJobs through the real
  Training Operator, MPIJobs through the real MPI Operator, JobSets through the real JobSet
  controller; most through a queue (Kueue keeps about 200 waiting), 10 of them torchdeck's;
- one PyTorchJob of 128 nodes x 8 ranks as 1,024 pods (nproc 1 a pod), whose logs KWOK serves from
  files a writer appends a step line to each second (every rank's steps move).

Measured, side by side in one run: ``jobs``, ``queues`` and ``nodes`` (their wall time, median of
three); the runs, queues and nodes screens (headless, 120x40: the first frame, and the time until
the table holds the listing); the monitor of the 1,024-pod job (kube_monitor.measure: CPU and memory
of the console and its reader, every rank's step moving); and the load on the API server, from its
own metrics (apiserver_request_total by verb and resource, less the same window with nothing of
torchdeck's running), against anchors run the same way: ``kubectl get pods -w`` (a watch) and a
LIST of the pods every 2 s (k9s's refresh). It leaves KWOK's objects in place (``--clean``
deletes them) and the cluster running.

    .venv/bin/python benchmarks/fleet_scale.py [--nodes 1000] [--jobs 300] [--seconds 60] [--clean]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import psutil
from host import calibration
from kube_monitor import measure

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "kube-cluster.sh"
BIG_NS, BIG = "bench-big", "big"
NAMESPACES = [f"bench-{i:02d}" for i in range(30)]
QUEUES = [f"cq-{i}" for i in range(10)]
KWOK_NODE = {"type": "kwok"}
KUEUE = "kueue.x-k8s.io/v1beta2"


def kubectl(*args: str, input: str | None = None, check: bool = True) -> str:  # noqa: A002
    done = subprocess.run([str(SCRIPT), "kubectl", *args], input=input, capture_output=True, text=True, timeout=600)
    if check and done.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args[:3])}: {done.stderr.strip()[-500:]}")
    return done.stdout


def create(objects: list[dict], chunk: int = 200) -> None:
    """Objects made through the API server, a List at a time (server-side apply: made again, unchanged)."""
    for i in range(0, len(objects), chunk):
        body = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects[i : i + chunk]})
        kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=body)


def node(i: int) -> dict:
    room = {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": f"kwok-node-{i:04d}", "labels": {**KWOK_NODE, "kubernetes.io/hostname": f"kwok-node-{i:04d}",
                                                                    "topology.kubernetes.io/zone": f"zone-{i % 3}"},
                         "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "status": {"allocatable": room, "capacity": room}}  # fmt: skip


def pod_template(container: str, cpu: str = "100m") -> dict:
    return {"spec": {"nodeSelector": KWOK_NODE, "containers": [
        {"name": container, "image": "bench/none:1", "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]}}  # fmt: skip


def pytorchjob(ns: str, name: str, workers: int, queue: str | None, cpu: str = "1") -> dict:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    replicas = {"Master": {"replicas": 1, "template": pod_template("pytorch", cpu)}}
    if workers:
        replicas["Worker"] = {"replicas": workers, "template": pod_template("pytorch", cpu)}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"pytorchReplicaSpecs": replicas, "runPolicy": {"suspend": bool(queue)}}}  # fmt: skip


def mpijob(ns: str, name: str, queue: str | None) -> dict:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"slotsPerWorker": 1, "runPolicy": {"suspend": bool(queue)}, "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": pod_template("launcher", "1")},
                "Worker": {"replicas": 1, "template": pod_template("worker", "1")}}}}  # fmt: skip


def jobset(ns: str, name: str, queue: str | None) -> dict:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    job = {"parallelism": 2, "completions": 2, "template": pod_template("trainer", "1")}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"suspend": bool(queue), "replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": job}}]}}  # fmt: skip


def queues() -> list[dict]:
    """10 ClusterQueues, each admitting about 4 two-pod jobs (8 CPUs), a LocalQueue of each everywhere."""
    out: list[dict] = [{"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "kwok"},
                        "spec": {"nodeLabels": KWOK_NODE}}]  # fmt: skip
    for cq in QUEUES:
        out.append({"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": cq}, "spec": {
            "namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [
                {"name": "kwok", "resources": [{"name": "cpu", "nominalQuota": "8"},
                                               {"name": "memory", "nominalQuota": "64Gi"}]}]}]}})  # fmt: skip
    for ns in NAMESPACES:
        out += [{"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"name": cq, "namespace": ns},
                 "spec": {"clusterQueue": cq}} for cq in QUEUES]  # fmt: skip
    return out


def jobs(count: int) -> list[dict]:
    """COUNT jobs across the namespaces: PyTorchJobs, MPIJobs and JobSets, 9 in 10 through a queue."""
    out = []
    for i in range(count):
        ns, queue = NAMESPACES[i % len(NAMESPACES)], None if i % 10 == 9 else QUEUES[i % len(QUEUES)]
        kind = i % 10
        if kind == 7:
            out.append(mpijob(ns, f"mpi-{i:03d}", queue))
        elif kind == 8:
            out.append(jobset(ns, f"jobset-{i:03d}", queue))
        else:
            out.append(pytorchjob(ns, f"ddp-{i:03d}", 1, queue))
    return out


def big_pods(workers: int) -> list[str]:
    return [f"{BIG}-master-0", *(f"{BIG}-worker-{i}" for i in range(workers))]


def log_file(folder: Path, pod: str) -> Path:
    """A pod's log file, in a folder of its own as a kubelet keeps it (/var/log/pods/NS_POD_UID/C/0.log):
    KWOK follows each file with inotify on its folder, and 1,024 files in one folder sent each of the
    1,024 watches every file's writes (their queues overflowed, and the streams ended)."""
    return folder / pod / "0.log"


def addressed(kubeconfig: str) -> int:
    """Every KWOK node with its InternalIP (KWOK's own, one for all its nodes), where one has none;
    how many were given it. KWOK's node-initialize stage sets it once, for a node not yet Ready; a
    KWOK started again over Ready nodes (a second run) wrote their status without it, and the API
    server could not reach their pods' logs ("no preferred addresses found"): 650 of 1,024 streams
    failed, asked for again 50 times a second."""
    from torchdeck.backends.kubernetes.backend import KubernetesBackend

    client = KubernetesBackend(kubeconfig).client
    nodes = [n for n in client.request("GET", "api/v1/nodes", query={"labelSelector": "type=kwok"})["items"]]
    known = [a for n in nodes for a in (n["status"].get("addresses") or []) if a["type"] == "InternalIP"]
    given = 0
    for n in nodes if known else ():
        if not any(a["type"] == "InternalIP" for a in n["status"].get("addresses") or []):
            addresses = [*(n["status"].get("addresses") or []), known[0]]
            client.request(
                "PATCH", f"api/v1/nodes/{n['metadata']['name']}/status", body={"status": {"addresses": addresses}}
            )
            given += 1
    return given


def writer(folder: Path, pods: list[str]) -> None:
    """A step line a second in each pod's log file, as the built-in trainer writes it (rank = pod),
    until stdin closes. Run as a process of its own (``--write``): its CPU is not the console's."""
    files = [(rank, log_file(folder, pod).open("a", buffering=1)) for rank, pod in enumerate(pods)]
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    step = 0
    while not stop.is_set():
        step += 1
        now = time.time()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e9):09d}Z"
        for rank, handle in files:  # as the kubelet keeps a container's log (CRI: time, stream, tag, line)
            handle.write(f"{stamp} stdout F " + json.dumps({"schema": 1, "event": "step", "rank": rank, "world_size": len(pods), "time": now,
                                     "epoch": 1, "step": step, "loss": 2.3 * 0.999**step + rank * 1e-5,
                                     "samples_per_s": 900.0}) + "\n")  # fmt: skip
        stop.wait(1.0)


REQUESTS = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<n>[0-9.e+]+)$", re.M)


def requests() -> Counter:
    """The API server's request counts so far, by (verb, resource)."""
    counts: Counter = Counter()
    for m in REQUESTS.finditer(kubectl("get", "--raw", "/metrics")):
        labels = dict(part.split("=", 1) for part in re.findall(r'\w+="[^"]*"', m.group("labels")))
        labels = {k: v.strip('"') for k, v in labels.items()}
        counts[(labels.get("verb", "?"), labels.get("resource", "?"))] += float(m.group("n"))
    return counts


LONG = re.compile(r"^apiserver_longrunning_requests\{(?P<labels>[^}]*)\} (?P<n>[0-9.e+]+)$", re.M)


def open_now() -> dict[str, int]:
    """The long-running requests open now (watches, followed logs), by verb and resource: the API
    server counts a request in apiserver_request_total only once it ends."""
    counts: Counter = Counter()
    for m in LONG.finditer(kubectl("get", "--raw", "/metrics")):
        labels = {k: v.strip('"') for k, v in (p.split("=", 1) for p in re.findall(r'\w+="[^"]*"', m.group("labels")))}
        where = labels.get("resource", "?") + (f"/{labels['subresource']}" if labels.get("subresource") else "")
        counts[f"{labels.get('verb', '?')} {where}"] += int(float(m.group("n")))
    return {k: v for k, v in sorted(counts.items()) if v}


def during(seconds: float, work):
    """WORK() while the open long-running requests are read halfway through it: (its result, them)."""
    seen: dict[str, int] = {}
    timer = threading.Timer(seconds / 2, lambda: seen.update(open_now()))
    timer.start()
    try:
        return work(), seen
    finally:
        timer.cancel()


def rates(before: Counter, after: Counter, seconds: float, baseline: dict | None = None) -> dict[str, float]:
    """Requests per second by VERB resource over the window, less the baseline's."""
    out = {}
    for key in set(after) | set(before):
        rate = (after[key] - before[key]) / seconds - (baseline or {}).get(f"{key[0]} {key[1]}", 0.0)
        if rate > 0.02:
            out[f"{key[0]} {key[1]}"] = round(rate, 2)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def window(seconds: float, action=None) -> dict[str, float]:
    before, t = requests(), time.monotonic()
    if action is not None:
        action(seconds)
    else:
        time.sleep(seconds)
    return rates(before, requests(), time.monotonic() - t)


def cli_times(kubeconfig: str, state: Path) -> dict[str, float]:
    env = {"KUBECONFIG": kubeconfig, "TORCHDECK_STATE_DIR": str(state), "PATH": "/usr/bin:/bin", "HOME": str(state)}
    out = {}
    for command in (("jobs",), ("queues",), ("nodes",)):
        times = []
        for _ in range(3):
            t = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "torchdeck", "--backend", "kubernetes", *command],
                                  capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
            times.append(time.perf_counter() - t)
            if done.returncode != 0:
                raise SystemExit(f"torchdeck {command[0]}: {done.stderr.strip()[-300:]}")
        out[command[0]] = round(statistics.median(times), 2)
        out[f"{command[0]} rows"] = done.stdout.count("\n")
    return out


async def screen_times(kubeconfig: str, state: Path) -> dict[str, float]:
    """The runs, queues and nodes screens, headless at 120x40: the first frame, and the table filled."""
    from torchdeck.backends.kubernetes.backend import KubernetesBackend
    from torchdeck.settings import Settings
    from torchdeck.tui.app import make_app
    from torchdeck.tui.screens.board import BoardScreen, NodesScreen, QueuesScreen
    from torchdeck.tui.widgets.board_table import BoardTable

    seen: dict[str, list[float]] = {}

    def timed(method, what: str):
        def call(self, *args):
            method(self, *args)
            seen.setdefault(what, []).append(time.perf_counter())

        return call

    BoardScreen.read = timed(BoardScreen.read, "shown")  # first called once the first frame is drawn
    for kind in (NodesScreen, QueuesScreen):
        kind.draw = timed(kind.draw, "drawn")
    out: dict[str, float] = {}
    t = time.perf_counter()
    app = make_app(Settings(backend="kubernetes", state_dir=state), KubernetesBackend(kubeconfig))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0)
        out["runs first frame s"] = round(time.perf_counter() - t, 2)
        while app.screen.table is None or app.screen.table.row_count == 0:
            await pilot.pause(0.05)
        out["runs listed s"] = round(time.perf_counter() - t, 2)
        for key, kind, name in (("w", QueuesScreen, "queues"), ("m", NodesScreen, "nodes")):
            await pilot.press("escape") if not app.screen.__class__.__name__ == "HomeScreen" else None
            seen.clear()
            t = time.perf_counter()
            await pilot.press(key)
            while not isinstance(app.screen, kind) or app.screen.reads == 0:
                await pilot.pause(0.02)
            # when they happened in the console, not when this loop saw them (its pauses wait for
            # the app to be idle, which it is not while the read's thread parses)
            out[f"{name} first frame s"] = round(seen["shown"][0] - t, 2)  # (its "reading..." frame)
            out[f"{name} first rows s"] = round(seen["drawn"][0] - t, 2)  # (the nodes', before their pods)
            out[f"{name} filled s"] = round(seen["drawn"][-1] - t, 2)
            out[f"{name} rows"] = app.screen.query_one("#board-table", BoardTable).row_count
            t = time.perf_counter()
            reads = app.screen.reads
            app.screen.read()
            while app.screen.reads == reads:
                await pilot.pause(0.05)
            out[f"{name} refresh s"] = round(time.perf_counter() - t, 2)
            await pilot.press("escape")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--big-workers", type=int, default=1023)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--clean", action="store_true", help="delete what the benchmark made, and stop KWOK")
    parser.add_argument(
        "--again", action="store_true", help="measure again on what the last run left in place (no setting up)"
    )
    parser.add_argument("--write", metavar="FOLDER", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write:
        writer(Path(args.write), big_pods(args.big_workers))
        return
    print(calibration())
    if args.clean:
        for ns in [*NAMESPACES, BIG_NS]:
            kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)
        kubectl("delete", "nodes", "-l", "type=kwok", "--wait=false", check=False)
        subprocess.run([str(SCRIPT), "kwok", "stop"], check=False)
        return
    kubeconfig = subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True, check=True).stdout
    kubeconfig = kubeconfig.strip().splitlines()[-1].removeprefix("KUBECONFIG=")
    pods = big_pods(args.big_workers)
    earlier = sorted(Path(tempfile.gettempdir()).glob("fleet-logs-*"), key=lambda p: p.stat().st_mtime)
    if args.again and not earlier:
        sys.exit("no earlier run's logs to write to: run it without --again first")
    logs = earlier[-1] if args.again else Path(tempfile.mkdtemp(prefix="fleet-logs-"))
    if not args.again:  # (the files first: the writer opens each as it starts)
        logs.chmod(0o755)
        listing = logs / "pods.txt"
        listing.write_text("".join(f"{BIG_NS} {pod} {log_file(logs, pod)}\n" for pod in pods))
        for pod in pods:
            log_file(logs, pod).parent.mkdir(mode=0o755)
            log_file(logs, pod).touch()
    writing = subprocess.Popen(
        [sys.executable, __file__, "--write", str(logs), "--big-workers", str(args.big_workers)], stdin=subprocess.PIPE
    )
    if args.again:  # KWOK serves the logs the writer appends to still
        measure_all(args, kubeconfig, pods, writing)
        return
    t = time.monotonic()
    subprocess.run([str(SCRIPT), "kwok", "start", str(listing)], check=True)
    create([node(i) for i in range(args.nodes)])
    create([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in [*NAMESPACES, BIG_NS]])
    create(queues())
    create(jobs(args.jobs))
    create([pytorchjob(BIG_NS, BIG, args.big_workers, None, cpu="100m")])
    print(f"set up in {time.monotonic() - t:.0f} s: {args.nodes} nodes, {args.jobs} jobs, 1 job of {len(pods)} pods")
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        running = kubectl("get", "pods", "-n", BIG_NS, "--field-selector=status.phase=Running", "-o", "name").count(
            "\n"
        )
        if running >= len(pods):
            break
        time.sleep(5)
    print(f"the big job's pods running: {running} of {len(pods)} after {time.monotonic() - t:.0f} s")
    print(f"KWOK nodes given their InternalIP: {addressed(kubeconfig)}")
    pending = json.loads(kubectl("get", "workloads", "-A", "-o", "json"))["items"]
    waiting = sum(1 for w in pending if not (w.get("status") or {}).get("admission"))
    print(f"workloads: {len(pending)}, waiting {waiting}")
    measure_all(args, kubeconfig, pods, writing)


def measure_all(args: argparse.Namespace, kubeconfig: str, pods: list[str], writing: subprocess.Popen) -> None:
    """What the benchmark measures, on the cluster as set up (the writer appending to the big job's logs)."""
    state = Path(tempfile.mkdtemp(prefix="fleet-state-"))
    idle = window(30.0)
    print("API server, idle (what the controllers, KWOK and the kubelets ask), req/s:", json.dumps(idle))
    print("torchdeck jobs / queues / nodes (s, median of 3):", json.dumps(cli_times(kubeconfig, state)))
    print("screens (s):", json.dumps(asyncio.run(screen_times(kubeconfig, state))))
    baseline_open = open_now()
    before, t0 = requests(), time.monotonic()
    monitor, opened = during(
        args.seconds + 30,
        lambda: asyncio.run(measure(kubeconfig, f"pytorchjob/{BIG_NS}/{BIG}", len(pods), args.seconds)),
    )
    load = rates(before, requests(), time.monotonic() - t0, idle)
    print("monitor of the 1,024-pod job:", json.dumps({k: v for k, v in monitor.items() if k != "console_collections"}))
    pauses = monitor.get("console_collections") or []
    print(f"  full collections in the console: {len(pauses)}, longest {max(pauses, default=0):.2f} s")
    print("API server, the monitor's window less idle, ended requests/s:", json.dumps(load))
    print("API server, long-running requests open, idle:", json.dumps(baseline_open))
    print("API server, long-running requests open, during the monitor:", json.dumps(opened))
    watch = subprocess.Popen([str(SCRIPT), "kubectl", "get", "pods", "-n", BIG_NS, "-w"], stdout=subprocess.DEVNULL)
    time.sleep(5)
    print("anchor kubectl get pods -w: long-running requests open:", json.dumps(open_now()))
    watch.terminate()

    def k9s(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            kubectl("get", "pods", "-n", BIG_NS, "-o", "name")
            time.sleep(2.0)

    anchor_list = {k: round(v - idle.get(k, 0.0), 2) for k, v in window(30.0, k9s).items() if k.startswith("LIST")}
    print("anchor a LIST of the pods every 2 s (k9s's refresh), req/s:", json.dumps(anchor_list))
    assert writing.stdin is not None
    writing.stdin.close()
    writing.wait(10)
    print(f"console process: {psutil.Process().memory_info().rss >> 20} MiB now")


if __name__ == "__main__":
    main()
