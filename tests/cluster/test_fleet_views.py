"""Issue 55 on the real cluster: the nodes view reads the real nodes (their allocatable from the
kubelets, the use from metrics-server, the pods the scheduler bound to them and what they ask) and
says a cordoned node is bad, as ``kubectl cordon`` left it. (The fleet is tried on a PyTorchJob
made with kubectl and the queues on Kueue's own visibility API in test_real_kinds.py; a namespace's
user who may not see nodes or ClusterQueues, there too.)"""

from __future__ import annotations

import json

from real_cluster import SMALL, TRAIN, launched, status_of, wait


def nodes_view(on_cluster) -> dict:
    done = on_cluster("nodes", "--output", "json")
    assert done.returncode == 0, done.stderr
    return {n["name"]: n for n in json.loads(done.stdout)["nodes"]}


def test_the_nodes_view_reads_the_real_nodes_their_training_pods_their_use_and_a_cordon(
    real_cluster, trainer_image, volume, on_cluster
):
    run_id = launched(on_cluster, "--image", trainer_image, *TRAIN, *SMALL, "--nodes", "2", "--max-steps", "2000",
                      "--batch-size", "32", "--name", "nodesview")  # fmt: skip
    try:
        wait(lambda: status_of(on_cluster, run_id)["step"] >= 1, "the run past step 1", 600, every=2)
        nodes = nodes_view(on_cluster)
        assert set(real_cluster.workers()) <= set(nodes), nodes.keys()
        placed = {name: n for name, n in nodes.items() if run_id in n["jobs"]}
        pods = real_cluster.placed(run_id, 2)
        assert set(placed) == {p["spec"]["nodeName"] for p in pods}, (placed.keys(), pods)
        for node in placed.values():  # each rank's pod asks 500m (SMALL): at least that much is requested there
            assert node["state"] == "ready" and node["cpu"]["allocatable"] > 0 and node["cpu"]["requested"] >= 0.5, node
            assert node["memory"]["requested"] >= 1500 * 2**20, node

        # metrics-server measures every 15 s: each node's use shows once it has
        def measured() -> dict | None:
            now = nodes_view(on_cluster)
            return now if all(n["cpu"]["used"] is not None for n in now.values()) else None

        used = wait(measured, "metrics-server's use of every node", 180, every=5)
        assert all(n["memory"]["used"] > 0 for n in used.values()), used
        worker = sorted(placed)[0]
        real_cluster.kubectl("cordon", worker)
        try:
            shown = nodes_view(on_cluster)[worker]
            assert shown["state"] == "bad" and "cordoned" in shown["trouble"], shown
            bad = on_cluster("nodes", "--bad")
            assert bad.returncode == 0 and worker in bad.stdout and "cordoned" in bad.stdout, bad.stdout
        finally:
            real_cluster.kubectl("uncordon", worker)
        assert nodes_view(on_cluster)[worker]["state"] == "ready"
    finally:
        assert on_cluster("stop", run_id).returncode == 0
