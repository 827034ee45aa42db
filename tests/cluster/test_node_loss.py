"""Issue 54: a node lost under a run on the real cluster of three nodes (the control plane's and two
workers, each with its own network namespace, mount namespace and cgroup subtree), by the three
faults the cluster tool puts on a node (``kube-cluster.sh node NAME crash|freeze|cut``): every
process killed at once (a machine that loses its power), its whole cgroup subtree frozen (a hung
kernel, a GPU that stops answering), its link cut (a partition). For each, torchdeck says which
node, since when and which ranks it held, in ``status`` (text and JSON) while the run is live, as
soon as the cluster marks the node NotReady; and a run with ``cluster.node_loss`` set comes back by
itself on the healthy worker from its newest checkpoint."""

from __future__ import annotations

import re

import pytest
from real_cluster import SMALL, TRAIN, fault, launched, status_of, wait

UNDO = {"crash": "start", "freeze": "thaw", "cut": "join"}


@pytest.mark.parametrize("what", list(UNDO))
def test_a_lost_worker_is_named_live_and_a_run_with_node_loss_set_comes_back_by_itself(
    what, real_cluster, trainer_image, volume, on_cluster
):
    """cluster.node_loss: the pods tolerate a lost node for seconds, not 300; torchdeck (or Kueue's
    failure recovery a minute after) deletes the pod stuck on the dead node; the operator makes it again, the scheduler puts it on the
    healthy worker, the ranks agree on a new attempt (those stuck with a frozen or cut-off peer leave
    theirs) and resume from the newest checkpoint: at most one checkpoint interval lost."""
    every = 10
    run_id = launched(on_cluster, "--image", trainer_image, *TRAIN, *SMALL, "--nodes", "2", "--max-steps", "100000",
                      "--batch-size", "32", "--set", f"trainer.checkpoint_every={every}",
                      "--set", "cluster.node_loss=5", "--name", f"lost-{what}")  # fmt: skip
    pods = wait(lambda: real_cluster.placed(run_id, 2), "the pods placed", 120)
    for pod in pods:  # what the field renders, as the operator carried it to each pod
        assert pod["metadata"]["annotations"]["kueue.x-k8s.io/safe-to-forcefully-delete"] == "true"
        seconds = {t["key"]: t.get("tolerationSeconds") for t in pod["spec"]["tolerations"]}
        assert seconds["node.kubernetes.io/unreachable"] == seconds["node.kubernetes.io/not-ready"] == 5
    by_pod = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
    # one pod a worker: the spread torchdeck renders for a run of several nodes, honoured by the scheduler
    assert sorted(by_pod.values()) == real_cluster.workers(), by_pod
    victim = by_pod[f"{run_id}-worker-0"]
    (survivor,) = [n for n in real_cluster.workers() if n != victim]
    healthy = wait(lambda: (s := status_of(on_cluster, run_id))["step"] >= 2 * every and s, "two checkpoints", 600,
                   every=2)  # fmt: skip
    assert healthy.get("bad_nodes", {}) == {}  # a healthy run reads no node trouble
    said_live: list[str] = []  # every line status said while it recovered, in order, once each

    def watched() -> dict:
        s = status_of(on_cluster, run_id)
        for line in [*s.get("bad_nodes", {}).values(), *s.get("coming_back", []), *s.get("recovery", [])]:
            if line not in said_live:
                said_live.append(line)
        return s

    fault(victim, what)
    try:
        crashed_at = watched()["step"]
        status = wait(lambda: victim in (s := watched()).get("bad_nodes", {}) and s,
                      "the lost node named", 180, every=2)  # fmt: skip
        said = status["bad_nodes"][victim]
        assert said.startswith("NotReady since ") and f"it held rank 1 (pod {run_id}-worker-0)" in said, said
        assert status["state"] in ("running", "pending"), status  # live: the master waits for its peer
        # the text says the same: the node lost, or (torchdeck has already deleted the pod it held) the
        # rank's pod made again elsewhere, and where it was
        text = on_cluster("status", run_id).stdout
        said_live.append(text)  # this call may be the one that saw the eviction (and deleted the pod)
        assert f"node lost: {victim}: NotReady since" in text or f"(it was on node {victim}: NotReady since" in text, (
            text
        )
        assert "resume:" not in text, text

        # torchdeck's status, polled as the monitor does, deletes the evicted pod the dead node cannot end
        moved = wait(lambda: watched() and (p := real_cluster.placed(run_id, 2))
                     and all(x["spec"]["nodeName"] == survivor for x in p) and p,
                     "the lost pod made again on the healthy node", 420, every=2)  # fmt: skip
        assert {p["metadata"]["name"] for p in moved} == set(by_pod)
        status = wait(lambda: (s := watched())["step"] > crashed_at + every and s,
                      "both ranks stepping again", 420, every=2)  # fmt: skip
        assert status["state"] == "running" and victim not in status.get("bad_nodes", {}), status
        # each phase, live: the node lost, its pod evicted and deleted for good, the rank's pod made
        # again on the survivor and not back yet, then the attempt that moved it and the step it resumed from
        assert any(f"pod {run_id}-worker-0), evicted" in line for line in said_live), said_live
        assert any(f"torchdeck deleted pod {run_id}-worker-0 for good" in line for line in said_live), said_live
        assert any(f"rank 1's pod {run_id}-worker-0 made again on node {survivor} (it was on node {victim}" in line
                   for line in said_live), said_live  # fmt: skip
        (back,) = [line for line in status["recovery"] if f"rank 1 moved from node {victim} to node {survivor}" in line]
        assert "; resumed from step " in back and status["restarts"] >= 1, status
        logs = on_cluster("logs", run_id, "--rank", "1").stdout
        pattern = rf"resumed from /shared/runs/lost-{what}/ckpt-\d+\.pt at epoch \d+ step (\d+)"
        resumed = [int(m) for m in re.findall(pattern, logs)]
        assert resumed and crashed_at - resumed[-1] <= every + 2, (crashed_at, resumed)  # at most one interval lost
    finally:
        fault(victim, UNDO[what])
        assert on_cluster("stop", run_id).returncode == 0
    wait(lambda: any(c["type"] == "Ready" and c["status"] == "True"
                     for c in real_cluster.get("node", victim)["status"]["conditions"]), "the node back", 180)  # fmt: skip
