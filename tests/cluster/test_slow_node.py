"""Issue 54: a slow node on the real cluster of three nodes, and no false alarm on a healthy run. A
2-pod PyTorchJob of the built-in trainer, a pod a worker: its ranks step together (the fast one waits
in the all-reduce for the slow one), so their paces cannot tell them apart; each rank's own compute
(its forward pass, ``compute_s``) does. Healthy, no rank scores under the straggler ratio; with one
worker's whole cgroup subtree held to a fifth of a CPU (``kube-cluster.sh node NAME slow 20``), the
rank on it does, and the other stays the fastest."""

from __future__ import annotations

from real_cluster import SMALL, TRAIN, fault, launched, status_of, wait

RATIO = 0.75
"""The monitor's straggler ratio (settings.straggler_ratio's default)."""


def scores(status: dict) -> dict[int, float]:
    return {r["rank"]: r["relative_score"] for r in status.get("ranks", []) if r.get("relative_score") is not None}


def test_a_slowed_worker_is_named_by_its_ranks_own_compute_and_a_healthy_run_flags_no_rank(
    real_cluster, trainer_image, volume, on_cluster
):
    # a thread a rank: the three nodes share this machine's two cores, and two ranks of two threads
    # each would take turns on them unevenly (a node of its own has its own cores)
    run_id = launched(on_cluster, "--image", trainer_image, *TRAIN, *SMALL, "--nodes", "2", "--max-steps", "100000",
                      "--batch-size", "32", "--set", 'env.OMP_NUM_THREADS="1"', "--name", "slowed")  # fmt: skip
    pods = wait(lambda: real_cluster.placed(run_id, 2), "the pods placed", 120)
    victim = next(p["spec"]["nodeName"] for p in pods if p["metadata"]["name"] == f"{run_id}-worker-0")
    try:
        # healthy: every rank's compute scored (a few dozen steps), none under the ratio, poll after poll
        healthy: list[dict[int, float]] = []
        while len(healthy) < 5:
            s = wait(lambda: (s := status_of(on_cluster, run_id)) and len(scores(s)) == 2 and s["step"] >= 30 and s,
                     "both ranks scored", 600, every=2)  # fmt: skip
            assert all(r.get("compute_s_median") for r in s["ranks"]), s["ranks"]
            healthy.append(scores(s))
        assert all(min(h.values()) >= RATIO for h in healthy), (healthy, s["ranks"])

        at = status_of(on_cluster, run_id)["step"]
        fault(victim, "slow", "20")
        slowed = wait(lambda: (s := status_of(on_cluster, run_id))["step"] > at and scores(s).get(1, 1.0) < RATIO and s,
                      "rank 1 (on the slowed worker) under the ratio", 600, every=3)  # fmt: skip
        assert scores(slowed)[0] == 1.0, slowed["ranks"]  # the rank that waits for it is the fastest
    finally:
        fault(victim, "unslow")
        assert on_cluster("stop", run_id).returncode == 0
