"""The real single-node cluster (scripts/kube-cluster.sh) measured, side by side in one run:

- its cold cost: how long each program took to build from its Go module, as the script recorded it
  when it built it (the cache's build-seconds), and its warm start (every program cached): stop,
  then start, timed;
- submit to first step: the same 2-rank built-in trainer job (5 steps on the CIFAR-10 subset) as a
  PyTorchJob of 2 pods on the cluster and on the local backend, alternating, from the submit to a
  step line of both ranks as torchdeck reads them (the cluster's from the pods' logs);
- the monitor following the real pods: the kubernetes backend's follow (what the console's monitor
  reads) for a run of 2 pods, its process's CPU (% of one core) and memory over --seconds.

It leaves the cluster running if it found it running, stopped otherwise. It needs the trainer image
loaded (the cluster tests load it): --image NAME, default the newest torchdeck-trainer image on the node.

    .venv/bin/python benchmarks/real_cluster.py [--repeats 2] [--seconds 30] [--image NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from host import calibration

from torchdeck.backends.kubernetes.backend import KubernetesBackend
from torchdeck.backends.local import LocalBackend
from torchdeck.backends.spec import ClusterOptions, JobSpec, Resources, TrainerOptions

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "kube-cluster.sh"
CACHE = Path(os.environ.get("TORCHDECK_CLUSTER_CACHE", Path.home() / ".cache" / "torchdeck" / "cluster"))
NAMESPACE = "bench"


def script(*args: str, timeout: float = 3600) -> str:
    done = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        sys.exit(f"kube-cluster.sh {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


async def first_steps(backend, run_id: str, t0: float, ranks: int) -> float:
    seen: dict[int, float] = {}
    async for batch in backend.metrics(run_id, follow=True):
        for event in batch:
            if event.event == "step" and event.rank not in seen:
                seen[event.rank] = time.perf_counter() - t0
        if len(seen) == ranks:
            return max(seen.values())
    raise RuntimeError(f"{run_id} ended before every rank stepped: {backend.status(run_id)}")


def follow_load(backend: KubernetesBackend, run_id: str, seconds: float) -> tuple[float, float, int]:
    """CPU (% of one core) and peak RSS (MB) of this process while it follows ``run_id``."""
    me = psutil.Process()
    lines = 0

    async def follow() -> None:
        nonlocal lines
        async for events, logs in backend.follow(run_id):
            lines += len(events) + len(logs)

    async def bounded() -> None:
        try:
            await asyncio.wait_for(follow(), seconds)
        except TimeoutError:
            pass

    before, t0, peak = me.cpu_times(), time.perf_counter(), 0

    async def sample() -> None:
        nonlocal peak
        while True:
            peak = max(peak, me.memory_info().rss)
            await asyncio.sleep(0.5)

    async def both() -> None:
        sampler = asyncio.create_task(sample())
        await bounded()
        sampler.cancel()

    asyncio.run(both())
    after, wall = me.cpu_times(), time.perf_counter() - t0
    cpu = (after.user + after.system - before.user - before.system) / wall * 100
    return cpu, peak / 2**20, lines


def newest_image() -> str:
    listed = script("ctr", "images", "ls", "-q").split()
    found = sorted(n for n in listed if n.startswith("docker.io/library/torchdeck-trainer:ctx-"))
    if not found:
        sys.exit("no torchdeck-trainer image on the node: run the cluster tests first, or pass --image")
    return found[-1].removeprefix("docker.io/library/")


def main() -> int:
    print(calibration(), flush=True)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data" / "cifar10-subset"))
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--image")
    a = p.parse_args()

    was_running = subprocess.run([str(SCRIPT), "status"], capture_output=True).returncode == 0
    print("cold: each program's build from its Go module, when the cache was filled:")
    for folder in sorted(CACHE.glob("*/bin")):
        seconds = folder / "build-seconds"
        if seconds.is_file():
            print(f"  {folder.parent.name}: {int(seconds.read_text())} s")
    script("stop")
    t0 = time.perf_counter()
    kubeconfig = script("start").strip().rpartition("KUBECONFIG=")[2]
    print(f"warm start (every program cached; stop, then start): {time.perf_counter() - t0:.1f} s", flush=True)
    image = a.image or newest_image()

    volume = Path(tempfile.mkdtemp(prefix="torchdeck-bench-", dir="/var/tmp"))
    volume.chmod(0o777)
    subprocess.run(["cp", "-r", f"{a.data_dir}/cifar-10-batches-py", str(volume)], check=True)
    script("kubectl", "create", "namespace", NAMESPACE)
    pv = {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "torchdeck-bench"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(volume)}},
    }  # fmt: skip
    pvc = {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": NAMESPACE},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": "torchdeck-bench",
                 "resources": {"requests": {"storage": "1Gi"}}},
    }  # fmt: skip
    for obj in (pv, pvc):
        subprocess.run([str(SCRIPT), "kubectl", "apply", "-f", "-"], input=json.dumps(obj), text=True, check=True,
                       capture_output=True)  # fmt: skip
    while "Bound" not in script("kubectl", "get", "pvc", "-n", NAMESPACE, "data", "-o", "jsonpath={.status.phase}"):
        time.sleep(0.5)  # the PersistentVolume controller binds it on its next pass
    cluster = KubernetesBackend(kubeconfig)
    pods = JobSpec(
        name="bench",
        image=image,
        namespace=NAMESPACE,
        nodes=2,
        nproc_per_node=1,
        max_restarts=0,
        trainer=TrainerOptions(epochs=1, max_steps=5),
        resources=Resources(cpu="500m", memory="1500Mi", shm_size="256Mi"),
        cluster=ClusterOptions(pvc="data", mount_path="/shared", data_dir="/shared"),
    )
    here = JobSpec(name="bench", data_dir=a.data_dir, nproc_per_node=2, max_restarts=0,
                   trainer=TrainerOptions(epochs=1, max_steps=5))  # fmt: skip
    times: dict[str, list[float]] = {"cluster (PyTorchJob, 2 pods)": [], "local (torchrun, 2 ranks)": []}
    with tempfile.TemporaryDirectory() as state:
        local = LocalBackend(state)
        for repeat in range(a.repeats):
            for label, backend, spec, ranks in zip(times, (cluster, local), (pods, here), (2, 2)):
                # a name of its own each time: runs of one name share a snapshot folder on the claim,
                # and a second would resume the first's (and step no more)
                spec = JobSpec(**{**spec.__dict__, "name": f"bench{repeat}"})
                t0 = time.perf_counter()
                run_id = backend.submit(spec)
                times[label].append(asyncio.run(first_steps(backend, run_id, t0, ranks)))
                print(f"  {label}: {run_id}: both ranks stepped at {times[label][-1]:.2f} s", flush=True)
                backend.cancel(run_id)
    for label, found in times.items():
        print(f"submit to first step, {label}: median {statistics.median(found):.2f} s, max {max(found):.2f} s "
              f"({a.repeats} runs)")  # fmt: skip
    long = JobSpec(**{**pods.__dict__, "name": "follow", "trainer": TrainerOptions(epochs=50)})
    run_id = cluster.submit(long)
    asyncio.run(first_steps(cluster, run_id, time.perf_counter(), 2))
    cpu, rss, lines = follow_load(cluster, run_id, a.seconds)
    cluster.cancel(run_id)
    print(f"the monitor's follow of 2 real pods for {a.seconds:.0f} s: {lines} lines, CPU {cpu:.1f}% of one core, "
          f"peak RSS {rss:.0f} MB")  # fmt: skip
    script("kubectl", "delete", "namespace", NAMESPACE, "--wait=false")
    script("kubectl", "delete", "pv", "torchdeck-bench", "--wait=false")
    subprocess.run(["rm", "-rf", str(volume)], check=False)
    if not was_running:
        script("stop")
    return 0


if __name__ == "__main__":
    sys.exit(main())
