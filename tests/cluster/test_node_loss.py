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
import subprocess

import pytest
from real_cluster import SCRIPT, SMALL, TRAIN, launched, status_of, wait


def fault(node: str, what: str) -> None:
    done = subprocess.run([str(SCRIPT), "node", node, what], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


UNDO = {"crash": "start", "freeze": "thaw", "cut": "join"}


@pytest.mark.parametrize("what", list(UNDO))
def test_a_lost_worker_is_named_live_and_a_run_with_node_loss_set_comes_back_by_itself(
    what, real_cluster, trainer_image, volume, on_cluster
):
    """cluster.node_loss: the pods tolerate a lost node for seconds, not 300; Kueue's failure recovery
    deletes the pod stuck on the dead node; the operator makes it again, the scheduler puts it on the
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
    fault(victim, what)
    try:
        crashed_at = status_of(on_cluster, run_id)["step"]
        status = wait(lambda: victim in (s := status_of(on_cluster, run_id)).get("bad_nodes", {}) and s,
                      "the lost node named", 180, every=2)  # fmt: skip
        said = status["bad_nodes"][victim]
        assert said.startswith("NotReady since ") and f"it held rank 1 (pod {run_id}-worker-0)" in said, said
        assert status["state"] in ("running", "pending"), status  # live: the master waits for its peer
        text = on_cluster("status", run_id).stdout
        assert f"node lost: {victim}: NotReady since" in text and "resume:" not in text, text
        assert f"node lost under {run_id}: {victim}: NotReady since" in on_cluster("jobs").stdout

        moved = wait(lambda: (p := real_cluster.placed(run_id, 2)) and all(x["spec"]["nodeName"] == survivor for x in p)
                     and p, "the lost pod made again on the healthy node", 420, every=2)  # fmt: skip
        assert {p["metadata"]["name"] for p in moved} == set(by_pod)
        status = wait(lambda: (s := status_of(on_cluster, run_id))["step"] > crashed_at + every and s,
                      "both ranks stepping again", 420, every=2)  # fmt: skip
        assert status["state"] == "running" and victim not in status.get("bad_nodes", {}), status
        logs = on_cluster("logs", run_id, "--rank", "1").stdout
        pattern = rf"resumed from /shared/runs/lost-{what}/ckpt-\d+\.pt at epoch \d+ step (\d+)"
        resumed = [int(m) for m in re.findall(pattern, logs)]
        assert resumed and crashed_at - resumed[-1] <= every + 2, (crashed_at, resumed)  # at most one interval lost
    finally:
        fault(victim, UNDO[what])
        assert on_cluster("stop", run_id).returncode == 0
    wait(lambda: any(c["type"] == "Ready" and c["status"] == "True"
                     for c in real_cluster.get("node", victim)["status"]["conditions"]), "the node back", 180)  # fmt: skip
