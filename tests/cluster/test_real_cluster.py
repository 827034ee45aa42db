"""Issue 41: torchdeck against a real Kubernetes cluster (``scripts/kube-cluster.sh``): a real
kube-scheduler places the pods, a real kubelet runs them on containerd, the Kubeflow Training
Operator (v1.9, out of the cluster, its own CRDs and webhook) makes the PyTorchJob's pods, Services
and environment, CoreDNS resolves the master's name, metrics-server measures the node. Every run
goes through the CLI as a user types it, and the console is driven as a user drives it."""

from __future__ import annotations

import asyncio
import json
import re
import time

from hangs import hang_script
from real_cluster import NAMESPACE, SMALL, TRAIN, ended, fault, launched, status_of, wait

from torchdeck.backends.kubernetes.backend import KubernetesBackend


def objects_of(real_cluster, run_id: str) -> list[str]:
    found = []
    for kind in ("pods", "services", "configmaps", "pytorchjobs.kubeflow.org"):
        listed = real_cluster.get(kind, "-n", NAMESPACE, "-l", f"torchdeck.dev/run={run_id}")
        found += [f"{kind}/{item['metadata']['name']}" for item in listed["items"]]
    return found


def test_a_pytorchjob_of_two_real_pods_trains_on_the_claim_and_reports_both_ranks(
    real_cluster, trainer_image, volume, on_cluster
):
    run_id = launched(on_cluster, "--image", trainer_image, *TRAIN, *SMALL, "--nodes", "2", "--max-steps", "12",
                      "--batch-size", "32", "--name", "builtin")  # fmt: skip
    # the operator's pods, placed by the real scheduler, with the operator's environment and Service
    pods = wait(lambda: (p := real_cluster.get("pods", "-n", NAMESPACE, "-l", f"torchdeck.dev/run={run_id}")["items"])
                and len(p) == 2 and p, "the operator's two pods", 120)  # fmt: skip
    assert sorted(p["metadata"]["labels"]["training.kubeflow.org/replica-type"] for p in pods) == ["master", "worker"]
    master = next(p for p in pods if p["metadata"]["labels"]["training.kubeflow.org/replica-type"] == "master")
    env = {e["name"]: e.get("value") for e in master["spec"]["containers"][0]["env"]}
    assert env["MASTER_ADDR"] == f"{run_id}-master-0" and env["PET_NNODES"] == "2" and env["WORLD_SIZE"] == "2"
    services = real_cluster.get("services", "-n", NAMESPACE)["items"]
    assert f"{run_id}-master-0" in [s["metadata"]["name"] for s in services]
    final = ended(on_cluster, run_id)
    assert final["state"] == "succeeded", final
    assert sorted(r["rank"] for r in final["ranks"]) == [0, 1] and all(r["step"] == 12 for r in final["ranks"])
    assert all(r["loss"] is not None for r in final["ranks"])
    # the snapshot and the model went to the claim (the folder here behind it), under the job's name
    kept = volume / "runs" / "builtin"
    assert (kept / "ckpt-00000012.pt").is_file() and (kept / "model.pt").is_file()
    logs = on_cluster("logs", run_id, "--rank", "1")  # rank 1's pod log, in words
    assert logs.returncode == 0 and "epoch 1 step 12" in logs.stdout and "done: accuracy" in logs.stdout, logs.stdout


def test_the_console_monitors_a_real_pytorchjob_with_node_cpu_from_metrics_server_and_stop_leaves_nothing(
    real_cluster, trainer_image, volume, on_cluster, tmp_path
):
    from textual.widgets import Static
    from tui_support import wait_for

    from torchdeck.settings import Settings
    from torchdeck.tui.app import make_app
    from torchdeck.tui.screens.monitor import MonitorScreen

    run_id = launched(on_cluster, "--image", trainer_image, *TRAIN, *SMALL, "--nodes", "2", "--epochs", "50",
                      "--batch-size", "32", "--name", "watched")  # fmt: skip
    backend = KubernetesBackend(str(real_cluster.kubeconfig))
    # node CPU as metrics-server measures it (its first figures come a resolution after the pods start)
    node = wait(lambda: [n for n in backend.node_metrics(run_id) if n.cpu_percent is not None],
                "metrics-server's figures for the node", 180, every=3)[0]  # fmt: skip
    assert node.name in real_cluster.workers() and 0 < node.cpu_percent <= 100 and node.mem_used_mb > 0
    settings = Settings(backend="kubernetes", state_dir=tmp_path / "console-state", refresh_hz=4)

    async def scenario():
        app = make_app(settings, backend, run_id)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, MonitorScreen), what="the monitor")
            screen = app.screen
            table = screen.query_one("#ranks")
            await wait_for(pilot, lambda: table.row_count == 2, what="both ranks' rows", timeout=300)
            await wait_for(
                pilot,
                lambda: all(int(table.get_row_at(i)[1] or 0) >= 3 for i in range(2)),
                what="both ranks past step 3",
                timeout=300,
            )
            line = str(screen.query_one("#status-line", Static).render())
            assert run_id in line and "RUNNING" in line and "world 2" in line
            nodes = str(screen.query_one("#nodes", Static).render())
            assert node.name.split(".")[0] in nodes and "cpu" in nodes.lower()  # (its host part: EKS names)

    asyncio.run(scenario())
    the_nodes_view_reads_the_real_nodes_their_training_pods_their_use_and_a_cordon(real_cluster, on_cluster, run_id)
    stopped = on_cluster("stop", run_id)
    assert stopped.returncode == 0, stopped.stderr
    wait(lambda: not objects_of(real_cluster, run_id), "every object of the run to go", 120)
    # a stop deletes the job with its pods, as kubectl delete does; what it said last was kept first
    gone = on_cluster("status", run_id)
    assert gone.returncode == 0 and "cancelled" in gone.stdout and "stopped by the user at" in gone.stdout, gone
    cleanup = on_cluster("cleanup", "--no-orphans", "--dry-run")  # the ledger's plan: nothing of the run is left
    assert cleanup.returncode == 0 and run_id not in cleanup.stdout, cleanup.stdout + cleanup.stderr


def nodes_view(on_cluster) -> dict:
    done = on_cluster("nodes", "--output", "json")
    assert done.returncode == 0, done.stderr
    return {n["name"]: n for n in json.loads(done.stdout)["nodes"]}


def the_nodes_view_reads_the_real_nodes_their_training_pods_their_use_and_a_cordon(real_cluster, on_cluster, run_id):
    """Issue 55: the nodes view reads the real nodes (their allocatable from the kubelets, the use
    from metrics-server, the pods the scheduler bound to them and what they ask) and says a cordoned
    node is bad, as ``kubectl cordon`` left it, while ``run_id`` (two pods) runs. (The fleet is tried
    on a PyTorchJob made with kubectl and the queues on Kueue's own visibility API in
    test_real_kinds.py; a namespace's user who may not see nodes or ClusterQueues, there too.)"""
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


USER_SCRIPT = """\
import os, time
import torch
import torch.distributed as dist
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

dist.init_process_group("gloo")
rank = dist.get_rank()
writer = SummaryWriter(os.path.join(os.environ.get("TB_DIR", "tb"), f"rank{rank}"))
steps = 16
for step in tqdm(range(1, steps + 1), total=steps, desc=f"rank {rank}", mininterval=0):
    loss = torch.tensor(2.0 / step)
    dist.all_reduce(loss)
    writer.add_scalar("train/loss", loss.item() / dist.get_world_size(), step)
    writer.flush()
    time.sleep(0.2)
writer.close()
dist.destroy_process_group()
"""


def test_a_users_script_from_the_code_bundle_prints_a_tqdm_bar_and_writes_tensorboard(
    real_cluster, user_image, volume, on_cluster, tmp_path
):
    code = tmp_path / "project"
    code.mkdir()
    (code / "train.py").write_text(USER_SCRIPT)
    run_id = launched(on_cluster, "train.py", "--image", user_image, *TRAIN, *SMALL, "--nodes", "2",
                      "--set", "env.TB_DIR=/tmp/tb", cwd=code)  # fmt: skip
    # the code went as a ConfigMap (no bucket here), named by its digest, unpacked by an init container
    pods = wait(lambda: real_cluster.get("pods", "-n", NAMESPACE, "-l", f"torchdeck.dev/run={run_id}")["items"],
                "the pods", 120)  # fmt: skip
    (bundle,) = {v["configMap"]["name"] for p in pods for v in p["spec"]["volumes"] if "configMap" in v}
    assert real_cluster.get("configmap", "-n", NAMESPACE, bundle)["immutable"] is True
    final = ended(on_cluster, run_id)
    assert final["state"] == "succeeded", final
    ranks = {r["rank"]: r for r in final["ranks"]}
    assert sorted(ranks) == [0, 1] and all(r["step"] == 16 for r in ranks.values()), final["ranks"]
    assert final["total_steps"] == 16


HANG = hang_script(rank=1, step=3, pause=0.2)


def test_a_hung_pytorchjob_is_explained_from_what_each_ranks_probe_said_in_its_pods_log(
    real_cluster, user_image, volume, on_cluster, tmp_path
):
    """Issue 44 on a real cluster: two pods, rank 1 sleeps before its all-reduce at step 3. Each
    rank's probe (in the bundle) dumps where it is into its pod's log once its main thread has been
    still (3 s here, by the spec's env); torchdeck triage names rank 1, its line, the collective
    rank 0 waits in, and the pod and node rank 1 runs on."""
    code = tmp_path / "project"
    code.mkdir()
    (code / "hang.py").write_text(HANG)
    run_id = launched(on_cluster, "hang.py", "--image", user_image, *TRAIN, *SMALL, "--nodes", "2",
                      "--set", 'env.TORCHDECK_TRIAGE_AFTER_S="3"', "--name", "hung", cwd=code)  # fmt: skip
    try:
        wait(lambda: status_of(on_cluster, run_id)["step"] >= 2, "step 2", 300, every=2)

        def asked():  # each probe dumps 3 s after its rank went still: one may be in its log before the other
            done = on_cluster("triage", run_id, "--output", "json")
            verdict = json.loads(done.stdout) if done.returncode == 0 else None
            return verdict if verdict and not verdict["missing"] else None

        verdict = wait(asked, "both ranks' dumps in their logs", 120, every=3)
        assert verdict["outliers"] == [1], verdict["summary"]
        ranks = {r["rank"]: r for r in verdict["ranks"]}
        assert ranks[1]["where"] == "hang.py:10" and ranks[0]["waiting_in"] == "all_reduce"
        assert ranks[0]["collective"]["seq"] == 3 and ranks[1]["collective"]["seq"] == 2
        assert ranks[1]["node"].startswith(f"pod {run_id}-worker-0 on node ") and not ranks[1]["node"].endswith("?")
        assert status_of(on_cluster, run_id)["triage"]["summary"] == verdict["summary"]
    finally:
        on_cluster("stop", run_id)


def test_a_rank_pod_deleted_mid_run_is_restarted_by_the_operator_and_resumes_from_its_checkpoint(
    real_cluster, trainer_image, volume, on_cluster
):
    # long enough that the pod goes mid-run: a run of 24 steps (10 a second here) had ended once
    # before its deleted pod stopped, and nothing was restarted (its ranks now stop at the next step)
    run_id = launched(on_cluster, "--image", trainer_image, *TRAIN, *SMALL, "--nodes", "2", "--max-steps", "120",
                      "--batch-size", "32", "--set", "trainer.checkpoint_every=3", "--name", "restarted")  # fmt: skip
    wait(lambda: (s := status_of(on_cluster, run_id))["step"] >= 6 and s, "step 6", 600, every=2)
    worker = f"{run_id}-worker-0"
    real_cluster.kubectl("delete", "pod", "-n", NAMESPACE, worker, "--wait=false")
    final = ended(on_cluster, run_id)
    logs = on_cluster("logs", run_id).stdout
    assert final["state"] == "succeeded" and final["step"] == 120, (final, logs[-3000:])
    assert final["restarts"] >= 1, (final, logs[-3000:])
    assert "resum" in logs.lower(), logs[-3000:]


def test_a_job_asking_for_more_cpu_than_the_node_has_says_the_schedulers_reason(
    real_cluster, trainer_image, volume, on_cluster
):
    run_id = launched(on_cluster, "--image", trainer_image, *TRAIN, "--set", "resources.cpu=64", "--name", "toobig")
    status = wait(lambda: "Insufficient cpu" in (s := status_of(on_cluster, run_id))["reason"] and s,
                  "the scheduler's reason", 120, every=2)  # fmt: skip
    assert status["state"] == "pending" and "0/3 nodes are available" in status["reason"], status
    shown = on_cluster("status", run_id)
    assert "Insufficient cpu" in shown.stdout
    assert on_cluster("stop", run_id).returncode == 0


def test_an_image_not_on_the_node_with_pull_policy_never_is_said_in_plain_words(real_cluster, volume, on_cluster):
    image = "torchdeck.local/absent:1"
    run_id = launched(on_cluster, "--image", image, *TRAIN, *SMALL, "--set", "cluster.image_pull_policy=Never",
                      "--name", "absent")  # fmt: skip
    status = wait(lambda: "imagePullPolicy: Never" in (s := status_of(on_cluster, run_id))["reason"] and s,
                  "the reason for the missing image", 300, every=2,
                  shown=lambda: real_cluster.kubectl("describe", "pods", "-n", NAMESPACE, check=False).stdout
                  + on_cluster("status", run_id).stdout)  # fmt: skip
    assert re.search(rf"the image {re.escape(image)} is not on ip-10-244-\d-1\.ec2\.internal", status["reason"])
    assert on_cluster("stop", run_id).returncode == 0


def test_the_console_in_a_real_terminal_lists_and_monitors_a_real_pytorchjob(
    real_cluster, trainer_image, volume, on_cluster
):
    """`torchdeck --backend kubernetes` as a user starts it on a bastion, in tmux: the runs screen
    lists the cluster's run, the monitor follows both pods' ranks, and its stop key ends the job."""
    import subprocess
    import sys

    from trainer_runs import REPO

    run_id = launched(on_cluster, "--image", trainer_image, *TRAIN, *SMALL, "--nodes", "2", "--epochs", "50",
                      "--batch-size", "32", "--name", "terminal")  # fmt: skip
    # each console gets a tmux server of its own: a server whose last session was killed exits, and a
    # new session asked of it in that moment fails ("server exited unexpectedly")
    servers: list[str] = []
    tmux: list[str] = []
    session = "runs"
    exports = " ".join(f"{k}={v!r}" for k, v in on_cluster.env.items()
                       if k.startswith(("TORCHDECK_", "PATH", "HOME", "KUBECONFIG", "AWS_")))  # fmt: skip

    def screen() -> str:
        return subprocess.run([*tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout

    def console(*args: str) -> None:
        command = f"cd {REPO} && env {exports} {sys.executable} -m torchdeck --backend kubernetes {' '.join(args)}"
        servers.append(f"torchdeck-e2e-{time.monotonic_ns()}")
        tmux[:] = ["tmux", "-L", servers[-1]]
        subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "110", "-y", "30", command], check=True)

    try:
        console()
        shown = wait(lambda: run_id in (s := screen()) and s, "the run on the runs screen", 60, every=0.3)
        assert "kubernetes" in shown
        subprocess.run([*tmux, "kill-server"], check=False)
        session = "monitor"
        console("--ascii", "monitor", run_id)
        wait(lambda: "RUNNING" in (s := screen()) and " r1 " in s and s, "both ranks in the monitor", 300, every=0.5)
        subprocess.run([*tmux, "send-keys", "-t", session, "s"], check=True)
        wait(lambda: "Stop " in screen(), "the stop question", 30, every=0.2)
        subprocess.run([*tmux, "send-keys", "-t", session, "y"], check=True)
        wait(lambda: "CANCELLED" in screen(), "the run cancelled", 120, every=0.5)
    finally:
        for server in servers:
            subprocess.run(["tmux", "-L", server, "kill-server"], check=False, capture_output=True)
    wait(lambda: not objects_of(real_cluster, run_id), "every object of the run to go", 120)


def test_a_stopped_run_resumed_off_a_node_lands_on_the_other_and_continues_from_its_checkpoint(
    real_cluster, trainer_image, volume, on_cluster
):
    """``torchdeck resume --avoid-node`` on two live workers: the real scheduler honours the affinity.
    Kept off one worker, the resumed run's pods both land on the other and the trainer resumes from the
    stopped run's snapshot on the claim; kept off both, it waits Pending and status says why."""
    workers = real_cluster.workers()
    run_id = launched(on_cluster, "--image", trainer_image, *TRAIN, *SMALL, "--nodes", "2", "--max-steps", "240",
                      "--batch-size", "32", "--set", "trainer.checkpoint_every=3", "--name", "moved")  # fmt: skip
    first = wait(lambda: real_cluster.placed(run_id, 2), "the pods placed", 120)
    off = first[0]["spec"]["nodeName"]
    (other,) = [w for w in workers if w != off]
    wait(lambda: (s := status_of(on_cluster, run_id))["step"] >= 6 and s, "step 6", 600, every=2)
    assert on_cluster("stop", run_id).returncode == 0  # its job is deleted: resume reads the kept spec
    wait(lambda: not objects_of(real_cluster, run_id), "the stopped run's objects to go", 120)
    saved = max(int(p.stem.split("-")[1]) for p in (volume / "runs" / "moved").glob("ckpt-*.pt"))
    assert saved >= 3

    resumed = on_cluster("resume", run_id, "--avoid-node", off, "--detach")
    assert resumed.returncode == 0, resumed.stderr
    new_id = resumed.stdout.strip()
    assert f"{new_id} resumes {run_id} from" in resumed.stderr and f"kept off {off}" in resumed.stderr
    job = real_cluster.get(f"pytorchjobs.kubeflow.org/{new_id}", "-n", NAMESPACE)
    assert job["metadata"]["labels"]["torchdeck.dev/resumes"] == run_id
    pods = wait(lambda: real_cluster.placed(new_id, 2), "the resumed pods placed", 120)
    for pod in pods:  # the operator carried the affinity to each pod, and the scheduler placed it elsewhere
        terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [off]
        assert pod["spec"]["nodeName"] == other
    wait(lambda: (s := status_of(on_cluster, new_id))["step"] > saved and s, "the resumed run's steps", 600, every=2)
    said = re.search(r"resumed from /shared/runs/moved/ckpt-\d+\.pt at epoch \d+ step (\d+)",
                     on_cluster("logs", new_id, "--rank", "0").stdout)  # fmt: skip
    assert said and int(said[1]) >= saved  # from the stopped run's newest snapshot (or one written as it stopped)
    assert on_cluster("stop", new_id).returncode == 0
    # both jobs deleted: their last status and curves were kept at stop, and compare draws them as one line
    kept = status_of(on_cluster, run_id)
    assert kept["state"] == "cancelled" and kept["step"] >= 6, kept
    compared = on_cluster("compare", new_id, run_id, "--output", "json")
    assert compared.returncode == 0, compared.stderr
    line, old = json.loads(compared.stdout)["runs"]
    assert old["state"] == "cancelled" and old["steps"] >= kept["step"], old  # its curve, kept: its pods' logs are gone
    assert line["restarts"] == [run_id] and line["steps_lost"] == max(0, old["steps"] - int(said[1])), (line, old)

    nowhere = on_cluster("resume", run_id, *(a for w in workers for a in ("--avoid-node", w)), "--detach")
    assert nowhere.returncode == 0, nowhere.stderr
    waiting_id = nowhere.stdout.strip()
    status = wait(lambda: "node affinity" in (s := status_of(on_cluster, waiting_id))["reason"] and s,
                  "the scheduler's reason", 120, every=2)  # fmt: skip
    assert status["state"] == "pending" and "the nodes it avoids" in status["reason"], status
    assert on_cluster("stop", waiting_id).returncode == 0


def test_the_health_gate_runs_as_the_runs_own_pytorchjob_and_a_gated_train_follows_it(
    real_cluster, trainer_image, volume, on_cluster
):
    """torchdeck check on the real cluster: a PyTorchJob of the run's image, kind and placement runs
    the sweep between its two pods (gloo), each pod's node named by the downward API; its answer is
    read back and the gate deleted. train --check runs the gate first, then the run."""
    gate = ("--image", trainer_image, *TRAIN, *SMALL, "--nodes", "2", "--max-bytes", "65536")
    done = on_cluster("check", *gate, "--output", "json", timeout=600)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (
        result["backend"] == "gloo" and result["world_size"] == 2 and [r["bytes"] for r in result["rows"]][-1] == 65536
    )
    # spec.nodeName, per pod: a worker each (the control plane's node takes no pods)
    assert {n["node"] for n in result["nodes"]} <= set(real_cluster.workers()) and len(result["nodes"]) == 2
    assert {n["host"] for n in result["nodes"]} == {f"{result['gate']}-master-0", f"{result['gate']}-worker-0"}
    (link,) = result["pairs"]
    assert link["result"]["bytes"] == 65536 and link["result"]["busbw_gbps"] > 0
    assert all(n["gpus"]["count"] == 0 and n["dcgm"]["note"] == "dcgmi is not in the image" for n in result["nodes"])
    assert result["short"] == {} and not objects_of(real_cluster, result["gate"])
    assert all(n["compute"]["gflops"] > 0 for n in result["nodes"])  # each node's own arithmetic

    # one worker held to a fifth of a CPU: its link is as slow for both ends, its own arithmetic names it;
    # --cordon --yes cordons it, and a command says when it is open again
    victim = sorted(n["node"] for n in result["nodes"])[0]
    fault(victim, "slow", "20")
    try:
        slowed = on_cluster("check", *gate, "--cordon", "--yes", timeout=600)
    finally:
        fault(victim, "unslow")
    assert slowed.returncode == 0, slowed.stderr
    assert f"falls short: {victim}: its arithmetic reaches " in slowed.stdout, slowed.stdout
    assert "under half the other node's" in slowed.stdout and f"cordoned {victim}" in slowed.stdout
    assert real_cluster.get("node", victim)["spec"]["unschedulable"] is True
    opened = on_cluster("check", "--uncordon", victim)
    assert opened.stdout.strip() == f"uncordoned {victim}: new pods may be scheduled there again", opened
    assert not real_cluster.get("node", victim)["spec"].get("unschedulable")

    started = on_cluster("train", "--detach", "--check", *gate[:-2], "--max-steps", "4", "--batch-size", "32",
                         "--name", "gated", timeout=600)  # fmt: skip
    assert started.returncode == 0, started.stderr
    assert "health gate: every node passed" in started.stderr
    final = ended(on_cluster, started.stdout.strip().splitlines()[-1])
    assert final["state"] == "succeeded", final
