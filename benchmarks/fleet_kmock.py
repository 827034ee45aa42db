"""Issue 55, the kmock side of ``fleet_scale.py``: the same objects in the emulator the fast tests use
(kmock, with tests/support/kube_cluster.py's gaps closed), run in a process of its own, and the same
``jobs``, ``queues`` and ``nodes`` commands and screens measured against it. kmock runs no operator,
scheduler or Kueue: what they would make is made here as they make it (each running job's pods,
owned by it, bound to a simulated node; a pending Workload for each queued job, owned by it), from
the same shapes and counts fleet_scale.py gives the real API server: NODES nodes, JOBS jobs across
30 namespaces, 10 ClusterQueues with a LocalQueue of each everywhere, one job of 1,024 pods.

    .venv/bin/python benchmarks/fleet_kmock.py [--nodes 1000] [--jobs 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fleet_scale import BIG, BIG_NS, KUEUE, NAMESPACES, cli_times, jobs, node, pytorchjob, queues, screen_times
from host import calibration

REPO = Path(__file__).resolve().parent.parent
PLURAL = {"Node": "nodes", "Pod": "pods", "PyTorchJob": "pytorchjobs", "MPIJob": "mpijobs", "JobSet": "jobsets",
          "ClusterQueue": "clusterqueues", "LocalQueue": "localqueues", "ResourceFlavor": "resourceflavors",
          "Workload": "workloads"}  # fmt: skip
WAITING = "couldn't assign flavors to pod set: insufficient unused quota for cpu in flavor kwok, 1 more needed"


def path_of(obj: dict) -> str:
    """Where an object is made: its API group's path, its namespace's where it has one."""
    version = obj["apiVersion"]
    base = f"api/{version}" if "/" not in version else f"apis/{version}"
    ns = obj["metadata"].get("namespace")
    return f"{base}/namespaces/{ns}/{PLURAL[obj['kind']]}" if ns else f"{base}/{PLURAL[obj['kind']]}"


def pods_of(job: dict, count: int, first_node: int) -> list[dict]:
    """The pods an operator makes of ``job``: labelled with its name, owned by it, bound and running."""
    meta = job["metadata"]
    owner = {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": meta["name"], "uid": meta["uid"],
             "controller": True}  # fmt: skip
    label = "jobset.sigs.k8s.io/jobset-name" if job["kind"] == "JobSet" else "training.kubeflow.org/job-name"
    return [
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": f"{meta['name']}-{i}", "namespace": meta["namespace"], "ownerReferences": [owner],
                      "labels": {label: meta["name"], "training.kubeflow.org/replica-index": str(i)}},
         "spec": {"nodeName": f"kwok-node-{(first_node + i) % 1000:04d}", "containers": [
             {"name": "trainer", "image": "bench/none:1", "resources": {"requests": {"cpu": "1", "memory": "256Mi"}}}]},
         "status": {"phase": "Running", "containerStatuses": [
             {"name": "trainer", "ready": True, "restartCount": 0, "state": {"running": {"startedAt": "2026-11-28T06:00:00Z"}}}]}}
        for i in range(count)
    ]  # fmt: skip


def pending(job: dict) -> dict:
    """The Workload Kueue makes of a queued job, waiting on quota."""
    meta = job["metadata"]
    return {"apiVersion": KUEUE, "kind": "Workload",
            "metadata": {"name": f"{job['kind'].lower()}-{meta['name']}", "namespace": meta["namespace"],
                         "ownerReferences": [{"apiVersion": job["apiVersion"], "kind": job["kind"], "name": meta["name"],
                                              "uid": meta["uid"], "controller": True}]},
            "spec": {"queueName": meta["labels"]["kueue.x-k8s.io/queue-name"], "podSets": []},
            "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                       "message": WAITING, "lastTransitionTime": "2026-11-28T06:00:00Z"}]}}  # fmt: skip


def serve(tmp: str, nodes: int, count: int) -> None:
    """The emulator, and every object, in this child process; the kubeconfig on stdout."""
    sys.path.insert(0, str(REPO / "tests" / "support"))
    from kube_cluster import start_cluster

    from torchdeck.backends.kubernetes import crds
    from torchdeck.backends.kubernetes.backend import KubernetesBackend

    cluster, _ = start_cluster(Path(tmp))
    client = KubernetesBackend(cluster.kubeconfig).client
    crd_path = "apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    for name in ("pytorchjob-trainer-v1.9.4.yaml", "mpijob-mpi-operator-v0.8.2.yaml", "clusterqueues-kueue-v0.19.2.yaml",
                 "localqueues-kueue-v0.19.2.yaml", "resourceflavors-kueue-v0.19.2.yaml", "workloads-kueue-v0.19.2.yaml"):  # fmt: skip
        client.request("POST", crd_path, body=crds.crd(name))
    # (no JobSet CRD is kept in manifests/crds: kmock serves a kind once a CRD of its name exists)
    client.request("POST", crd_path, body={"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                                           "metadata": {"name": "jobsets.jobset.x-k8s.io"}})  # fmt: skip
    cluster.emulator.namespaces.update([*NAMESPACES, BIG_NS])
    made = 0
    for obj in [node(i) for i in range(nodes)] + queues():
        client.request("POST", path_of(obj), body=obj)
        made += 1
    for i, job in enumerate([*jobs(count), pytorchjob(BIG_NS, BIG, 1023, None, cpu="100m")]):
        queued = "kueue.x-k8s.io/queue-name" in job["metadata"]["labels"] and i % 3 != 0  # about 200 wait
        job = client.request("POST", path_of(job), body=job)
        made += 1
        for obj in [pending(job)] if queued else pods_of(job, 1024 if job["metadata"]["name"] == BIG else 2, 2 * i):
            client.request("POST", path_of(obj), body=obj)
            made += 1
    print(json.dumps({"kubeconfig": str(cluster.kubeconfig), "objects": made}), flush=True)
    sys.stdin.read()  # until the benchmark is done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--serve", metavar="TMP", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.nodes, args.jobs)
        return
    print(calibration())
    with tempfile.TemporaryDirectory() as tmp:
        t = time.monotonic()
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", tmp, "--nodes", str(args.nodes), "--jobs", str(args.jobs)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert server.stdin is not None and server.stdout is not None
        try:
            info = json.loads(server.stdout.readline())
            print(f"kmock: {info['objects']} objects made in {time.monotonic() - t:.0f} s")
            state = Path(tempfile.mkdtemp(prefix="fleet-kmock-state-"))
            print("torchdeck jobs / queues / nodes (s, median of 3):", json.dumps(cli_times(info["kubeconfig"], state)))
            print("screens (s):", json.dumps(asyncio.run(screen_times(info["kubeconfig"], state))))
        finally:
            server.stdin.close()
            server.wait(30)


if __name__ == "__main__":
    main()
