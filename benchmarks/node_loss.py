"""A node lost under a run, on the real cluster of three nodes (scripts/kube-cluster.sh with
TORCHDECK_KUBE_NODES=3), measured: each drill (crash, freeze, cut) put on the worker holding rank 1
of a 2-pod PyTorchJob that checkpoints every 10 steps, several times, with cluster.node_loss set and
without it (Kubernetes' defaults: 300 s on a lost node, and no forced deletion). For each drill:

- named: from the fault to torchdeck's status naming the node (NotReady, the rank it held);
- back: from the fault to both ranks stepping again past the step the run had at the fault;
- lost: the steps between the furthest the run got (status read while the lost node held its pod)
  and the checkpoint it resumed from.

Each figure is from a poll of ``torchdeck status`` a second: up to a second late. A run not back
within --cap seconds is said so (without the field, the pod on the lost node stays Terminating until
a person acts). The cluster is started with three nodes where it is not running so (and stopped
again after); it needs the trainer image on the nodes (the cluster tests load it).

    .venv/bin/python benchmarks/node_loss.py [--repeats 2] [--faults crash,freeze,cut] [--cap 420]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from host import calibration

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "kube-cluster.sh"
NAMESPACE = "bench-nodes"
UNDO = {"crash": "start", "freeze": "thaw", "cut": "join"}
EVERY = 10


def script(*args: str, timeout: float = 3600, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"kube-cluster.sh {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def kubectl_json(*args: str) -> dict:
    return json.loads(script("kubectl", "get", "-o", "json", *args))


class Cli:
    def __init__(self, kubeconfig: str, state: str) -> None:
        self.env = {**os.environ, "KUBECONFIG": kubeconfig, "TORCHDECK_STATE_DIR": state,
                    "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "none",
                    "AWS_SECRET_ACCESS_KEY": "none", "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip

    def __call__(self, *args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "torchdeck", "--backend", "kubernetes", *args],
                              capture_output=True, text=True, env=self.env, timeout=120)  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"torchdeck {' '.join(args[:2])}: {done.stderr.strip()}")
        return done.stdout

    def status(self, run_id: str) -> dict:
        return json.loads(self("status", "--output", "json", run_id))


def placed(run_id: str) -> dict[str, str]:
    pods = kubectl_json("pods", "-n", NAMESPACE, "-l", f"torchdeck.dev/run={run_id}")["items"]
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in pods
            if not p["metadata"].get("deletionTimestamp")}  # fmt: skip


def wait(what: str, condition: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(1)
    raise RuntimeError(f"timed out waiting for {what}")


def drill(cli: Cli, image: str, fault: str, node_loss: int | None, name: str, cap: float) -> dict[str, object]:
    field = ["--set", f"cluster.node_loss={node_loss}"] if node_loss is not None else []
    run_id = cli("train", "--detach", "--image", image, "--namespace", NAMESPACE, "--set", "cluster.pvc=data",
                 "--nproc-per-node", "1", "--set", "resources.cpu=500m", "--set", "resources.memory=1500Mi",
                 "--set", "resources.shm_size=256Mi", "--nodes", "2", "--max-steps", "100000", "--batch-size", "32",
                 "--set", f"trainer.checkpoint_every={EVERY}", *field, "--name", name).strip().splitlines()[-1]  # fmt: skip
    pods = wait("both pods placed", lambda: (p := placed(run_id)) and len(p) == 2 and all(p.values()) and p, 120)
    victim = pods[f"{run_id}-worker-0"]
    wait("two checkpoints", lambda: cli.status(run_id)["step"] >= 2 * EVERY, 600)
    at_fault = cli.status(run_id)["step"]
    t0 = time.monotonic()
    script("node", victim, fault)
    found: dict[str, object] = {"fault": fault, "node_loss": node_loss}
    peak = at_fault  # the furthest the run got: it steps on for a moment after the fault (and status lags)
    try:
        while time.monotonic() - t0 < cap:
            status = cli.status(run_id)
            on = placed(run_id).values()
            if victim in on:
                peak = max(peak, status["step"])
            if "named" not in found and victim in status.get("bad_nodes", {}):
                found["named"] = time.monotonic() - t0
            if status["step"] > peak + 1 and status["state"] == "running" and len(on) == 2 and victim not in on:
                found["back"] = time.monotonic() - t0  # both pods placed again, off the lost node, and stepping
                break
            time.sleep(1)
        logs = cli("logs", run_id, "--rank", "1")
        resumed = [int(s) for s in re.findall(rf"resumed from \S+/{name}/ckpt-\d+\.pt at epoch \d+ step (\d+)", logs)]
        if "back" in found and resumed:
            found["lost"] = max(0, peak - resumed[-1])
    finally:
        script("node", victim, UNDO[fault])
        cli("stop", run_id)
        wait("the node back", lambda: any(c["type"] == "Ready" and c["status"] == "True"
                                          for c in kubectl_json("node", victim)["status"]["conditions"]), 300)  # fmt: skip
    return found


def main() -> int:
    print(calibration(), flush=True)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data" / "cifar10-subset"))
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--faults", default="crash,freeze,cut")
    p.add_argument("--cap", type=float, default=420, help="seconds a drill waits for the run to come back")
    p.add_argument("--without", choices=("yes", "no", "only"), default="yes",
                   help="also a drill without cluster.node_loss (Kubernetes' defaults), or only that")  # fmt: skip
    p.add_argument("--image")
    a = p.parse_args()
    faults = [f for f in a.faults.split(",") if f]
    if not set(faults) <= set(UNDO):
        sys.exit(f"--faults: of {', '.join(UNDO)}")

    was = subprocess.run([str(SCRIPT), "nodes"], capture_output=True, text=True)
    was_running = subprocess.run([str(SCRIPT), "status"], capture_output=True).returncode == 0
    kubeconfig = script("start", env={"TORCHDECK_KUBE_NODES": "3"}).strip().rpartition("KUBECONFIG=")[2]
    listed = script("ctr", "--node", "2", "images", "ls", "-q").split()
    images = sorted(n for n in listed if n.startswith("docker.io/library/torchdeck-trainer:ctx-"))
    image = a.image or (images[-1].removeprefix("docker.io/library/") if images else "")
    if not image:
        sys.exit("no torchdeck-trainer image on the workers: run the cluster tests first, or pass --image")
    volume = Path(tempfile.mkdtemp(prefix="torchdeck-bench-", dir="/var/tmp"))
    (volume / "data").mkdir()
    subprocess.run(["cp", "-r", f"{a.data_dir}/cifar-10-batches-py", str(volume / "data")], check=True)
    for path in (volume, volume / "data"):
        path.chmod(0o777)
    script("kubectl", "create", "namespace", NAMESPACE)
    claim = {"accessModes": ["ReadWriteMany"], "storageClassName": ""}
    objects = [
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "torchdeck-bench-nodes"},
         "spec": {**claim, "capacity": {"storage": "1Gi"}, "persistentVolumeReclaimPolicy": "Retain",
                  "hostPath": {"path": str(volume)}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": NAMESPACE},
         "spec": {**claim, "volumeName": "torchdeck-bench-nodes", "resources": {"requests": {"storage": "1Gi"}}}},
    ]  # fmt: skip
    for obj in objects:
        subprocess.run([str(SCRIPT), "kubectl", "apply", "-f", "-"], input=json.dumps(obj), text=True, check=True,
                       capture_output=True)  # fmt: skip
    wait("the claim bound", lambda: "Bound" in script("kubectl", "get", "pvc", "-n", NAMESPACE, "data", "-o",
                                                      "jsonpath={.status.phase}"), 60)  # fmt: skip
    try:
        modes = {"yes": (5, None), "no": (5,), "only": (None,)}[a.without]
        results = drills(kubeconfig, image, faults, modes, a.repeats, a.cap)
    finally:
        script("kubectl", "delete", "namespace", NAMESPACE, "--wait=false")
        script("kubectl", "delete", "pv", "torchdeck-bench-nodes", "--wait=false")
        subprocess.run(["rm", "-rf", str(volume)], check=False)
    report(results, faults, a.cap)
    if not was_running or "worker" not in was.stdout:
        script("stop")
    return 0


def drills(
    kubeconfig: str, image: str, faults: list[str], modes: tuple[int | None, ...], repeats: int, cap: float
) -> list[dict[str, object]]:
    results: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as state:
        cli = Cli(kubeconfig, state)
        count = 0
        for node_loss in modes:
            for fault in faults if node_loss is not None else faults[:1]:
                for _ in range(repeats if node_loss is not None else 1):
                    count += 1
                    found = drill(cli, image, fault, node_loss, f"drill{count}", cap)
                    results.append(found)
                    print(f"  {fault}, node_loss={node_loss}: " + ", ".join(
                        f"{k} {v:.0f} s" if isinstance(v, float) else f"{k} {v}"
                        for k, v in found.items() if k not in ("fault", "node_loss")), flush=True)  # fmt: skip
    return results


def report(results: list[dict[str, object]], faults: list[str], cap: float) -> None:
    for node_loss in (5, None):
        for fault in faults:
            rows = [r for r in results if r["fault"] == fault and r["node_loss"] == node_loss]
            if not rows:
                continue
            parts = []
            for key in ("named", "back", "lost"):
                values = [float(r[key]) for r in rows if key in r]  # type: ignore[arg-type]
                unit = "" if key == "lost" else " s"
                parts.append(f"{key} median {statistics.median(values):.0f}{unit}, max {max(values):.0f}{unit}"
                             if values else f"{key}: never within {cap:.0f} s")  # fmt: skip
            print(f"{fault}, cluster.node_loss={node_loss} ({len(rows)} drills): " + "; ".join(parts))


if __name__ == "__main__":
    sys.exit(main())
