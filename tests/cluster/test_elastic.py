"""Issue 54: an elastic PyTorchJob (``cluster.min_nodes=1``, ``cluster.max_nodes=2``: Workers only,
with the operator's ``elasticPolicy`` and torchrun's c10d rendezvous, whose store the agent on
worker-0 holds) on the real cluster of three nodes. The node that holds worker-1 crashes: the run
goes on with one rank, from its newest checkpoint, without a person; the node comes back, worker-1's
pod (made again by the operator, waiting for a node its CPU fits) starts there, and the run grows
back to two ranks. ``status`` says each change of size while it happens."""

from __future__ import annotations

import re

from real_cluster import NAMESPACE, TRAIN, fault, launched, status_of, wait

ONE_A_NODE = ("--set", "resources.cpu=1200m", "--set", "resources.memory=1500Mi", "--set", "resources.shm_size=256Mi")
"""Two such pods never fit on one worker (two cores each): the rank of a lost node waits for a node."""


def stepping(on_cluster, run_id: str, world: int, past: int) -> dict | bool:
    """The status, once the run's newest attempt has WORLD ranks and is past step PAST."""
    s = status_of(on_cluster, run_id)
    return s["world_size"] == world and s["step"] > past and s["state"] == "running" and s


def test_an_elastic_run_goes_on_with_one_rank_when_a_node_is_lost_and_grows_back_when_it_returns(
    real_cluster, trainer_image, volume, on_cluster
):
    every = 10
    run_id = launched(on_cluster, "--image", trainer_image, *TRAIN, *ONE_A_NODE, "--nodes", "2",
                      "--set", "cluster.min_nodes=1", "--set", "cluster.max_nodes=2", "--max-steps", "100000",
                      "--batch-size", "32", "--set", f"trainer.checkpoint_every={every}",
                      "--set", "cluster.node_loss=5", "--name", "elastic")  # fmt: skip
    job = real_cluster.get("pytorchjob", "-n", NAMESPACE, run_id)
    assert job["spec"]["elasticPolicy"]["minReplicas"] == 1 and job["spec"]["elasticPolicy"]["maxReplicas"] == 2
    pods = wait(lambda: real_cluster.placed(run_id, 2), "the pods placed", 120)
    by_pod = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
    victim = by_pod[f"{run_id}-worker-1"]  # not worker-0: its agent holds the rendezvous store
    (survivor,) = [n for n in real_cluster.workers() if n != victim]
    wait(lambda: stepping(on_cluster, run_id, 2, 2 * every), "two ranks past two checkpoints", 600, every=2)
    said: list[str] = []

    def watched(world: int, past: int) -> dict | bool:
        s = status_of(on_cluster, run_id)
        for line in [*s.get("bad_nodes", {}).values(), *s.get("coming_back", []), *s.get("recovery", [])]:
            if line not in said:
                said.append(line)
        return s["world_size"] == world and s["step"] > past and s["state"] == "running" and s

    fault(victim, "crash")
    down = True
    try:
        lost_at = status_of(on_cluster, run_id)["step"]
        alone = wait(lambda: watched(1, 0), "the run going on with one rank", 300, every=2)
        at_one = alone["step"]
        alone = wait(lambda: watched(1, at_one + 2), "one rank stepping", 300, every=2)
        log = real_cluster.kubectl("logs", "-n", NAMESPACE, f"{run_id}-worker-0", "--tail", "400", check=False).stdout
        shrunk = [line for line in alone["recovery"] if "went on with 1 rank of 2" in line]
        assert shrunk and f"rank 1 left with node {victim}" in shrunk[-1], (alone["recovery"], log)
        # the snapshot's samples, in the one rank's batches: step S of two ranks is step 2S of one
        saved = re.search(
            r"resumed from step (\d+) \(its snapshot of step (\d+); the run got to (\d+): (\d+) steps? lost", shrunk[-1]
        )
        assert saved and int(saved[1]) == 2 * int(saved[2]) and int(saved[4]) <= every + 2, shrunk
        assert int(saved[3]) >= lost_at - 1, (lost_at, shrunk)
        fault(victim, "start")
        down = False
        at_two = wait(lambda: watched(2, 0), "the run back at two ranks", 420, every=2)["step"]
        grown = wait(lambda: watched(2, at_two + 2), "two ranks stepping", 300, every=2)
        back = [line for line in grown["recovery"] if "grew back to 2 ranks" in line]
        assert back and f"rank 1 on node {victim}" in back[-1], grown["recovery"]
        assert {r["rank"] for r in grown["ranks"]} == {0, 1}, grown["ranks"]
        # the rank's pod waited for a node its CPU fits: never the survivor's
        assert survivor not in " ".join(said), said
    finally:
        if down:
            fault(victim, "start")
        assert on_cluster("stop", run_id).returncode == 0
