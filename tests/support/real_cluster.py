"""A real single-node Kubernetes cluster for the end-to-end tests: ``scripts/kube-cluster.sh`` builds
(once, cached outside the work tree) and starts etcd, the control plane, a kubelet on containerd and
runc, kube-proxy, CoreDNS, metrics-server, the Kubeflow Training Operator, Kubeflow Trainer v2 with
JobSet, the MPI Operator and Kueue in a network namespace
with no route out; the trainer image is built by the real Docker engine from the wheel folder
``scripts/test`` fills and loaded into the node's containerd, as Kubeflow's own e2e tests load images
into kind. The fixtures live as long as the session: the cluster tests run last (tests/conftest.py
orders them), so the cluster starts once, its images are built and loaded once, and it is stopped when
the session ends, the stop checked to leave nothing behind. ``scripts/test`` builds the cluster's
programs in the background from its first second; the first start waits for that build.

Where the machine cannot run a cluster (not root, no Go) the tests skip saying why, except where
``TORCHDECK_E2E_REQUIRED`` is set (CI): there a cluster that does not start fails them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from local_runs import cli_env, run_cli
from phases import phase
from trainer_runs import REPO

SCRIPT = REPO / "scripts" / "kube-cluster.sh"
ENGINE = REPO / "scripts" / "docker-engine.sh"
SHARED_DATA = Path(os.environ.get("TORCHDECK_TEST_DATA", REPO.parent / "shared" / "data" / "cifar10-subset"))
NAMESPACE = "e2e"
NODES = 3
"""The control plane's node (it takes no pods) and two workers, each a machine of its own (its network,
mount namespace and cgroup subtree): a rank on another node, a node lost under a run."""
CLAIM = "shared"
NO_AWS = {
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9",  # any AWS call fails at once
    "AWS_ACCESS_KEY_ID": "none",
    "AWS_SECRET_ACCESS_KEY": "none",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def unavailable(why: str) -> None:
    if os.environ.get("TORCHDECK_E2E_REQUIRED"):
        pytest.fail(f"the real cluster is required here (TORCHDECK_E2E_REQUIRED) and {why}")
    pytest.skip(why)


def host_state() -> dict[str, object]:
    """What a stopped cluster must leave as it found it."""
    sysctls = {name: Path("/proc/sys", name.replace(".", "/")).read_text().strip()
               for name in ("vm.overcommit_memory", "kernel.panic", "kernel.panic_on_oops")}  # fmt: skip
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return {
        "sysctls": sysctls,
        "namespaces": sorted(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else [],
        "mounts": sorted(m for m in mounts if m.startswith(("/var/lib/torchdeck-kube", "/var/lib/kubelet", "/run/containerd"))),
        "paths": sorted(p for p in ("/var/lib/torchdeck-kube", "/var/log/pods", "/var/log/containers", "/var/lib/cni",
                               "/run/containerd", "/run/nri", "/var/lib/kubelet", "/etc/kubernetes", "/etc/kueue",
                               "/visibility") if os.path.exists(p)),
    }  # fmt: skip


def cluster_cgroups() -> list[str]:
    """The cgroup root of the cluster's own (the kubelet's cgroupRoot, containerd's cgroup under it), in
    any hierarchy: a stop removes it."""
    return sorted(
        str(p) for pattern in ("torchdeck-kube", "*/torchdeck-kube") for p in Path("/sys/fs/cgroup").glob(pattern)
    )


@dataclass
class Cluster:
    kubeconfig: Path
    ours: bool = True
    """Started by this session (and stopped at its end), not a developer's left running."""

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:  # noqa: A002
        done = subprocess.run([str(SCRIPT), "kubectl", *args], input=input, capture_output=True, text=True, timeout=120)
        if check:
            assert done.returncode == 0, done.stdout + done.stderr
        return done

    def get(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", "-o", "json", *args).stdout)

    def workers(self) -> list[str]:
        """The nodes pods run on (all but the control plane's), by name."""
        nodes = self.get("nodes")["items"]
        labels = [(n["metadata"]["name"], n["metadata"].get("labels") or {}) for n in nodes]
        return sorted(name for name, label in labels if "node-role.kubernetes.io/control-plane" not in label)

    def placed(self, run_id: str, count: int) -> list[dict]:
        """The run's COUNT pods, once each is placed on a node."""
        pods = self.get("pods", "-n", NAMESPACE, "-l", f"torchdeck.dev/run={run_id}")["items"]
        placed = [p for p in pods if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")]
        return placed if len(placed) == count else []


def fault(node: str, *what: str) -> None:
    """``kube-cluster.sh node NODE WHAT...``: a fault put on the node (crash, freeze, cut, slow
    PERCENT), or taken off (start, thaw, join, unslow)."""
    done = subprocess.run([str(SCRIPT), "node", node, *what], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="session")
def real_cluster() -> Iterator[Cluster]:
    if os.geteuid() != 0 or shutil.which("go") is None:
        unavailable("a real cluster needs root and Go here (it is built from the upstream Go modules)")
    # a cluster someone started before the session stays up after it (a developer's, between runs);
    # one the session starts, it stops, and checks that nothing is left behind
    was_running = subprocess.run([str(SCRIPT), "status"], capture_output=True).returncode == 0
    before = host_state()
    with phase("cluster start (after its build, if under way)"):
        done = subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True, timeout=3600,
                              env={**os.environ, "TORCHDECK_KUBE_NODES": str(NODES)})  # fmt: skip
    if done.returncode == 3:
        unavailable(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, done.stdout + done.stderr
    kubeconfig = Path(done.stdout.strip().rpartition("KUBECONFIG=")[2])
    cluster = Cluster(kubeconfig, ours=not was_running)
    try:
        yield cluster
    finally:
        if not was_running:
            with phase("cluster stop"):
                stopped = subprocess.run([str(SCRIPT), "stop"], capture_output=True, text=True, timeout=300)
            assert stopped.returncode == 0, stopped.stdout + stopped.stderr
            after = host_state()
            assert after == before, (before, after)
            assert cluster_cgroups() == []
            leftover = subprocess.run(["pgrep", "-f", ".cache/torchdeck/cluster/"], capture_output=True, text=True)
            assert leftover.stdout == "", leftover.stdout


def wheel_folder() -> str:
    """The wheel folder the images are built from (``scripts/test`` fills it, outside the work tree)."""
    version = (REPO / "docker" / "torch-version").read_text().strip()
    return os.environ.get("TORCHDECK_IMAGE_WHEELS") or str(
        Path.home() / ".cache" / "torchdeck" / "wheels" / f"torch-{version}"
    )


def built(env: dict[str, str], *args: str) -> str:
    """``torchdeck image build --no-push ARGS`` from the wheel folder (an unchanged tree builds nothing)."""
    with phase(f"image build {' '.join(a for a in args if a.startswith('--'))}"):
        done = run_cli(
            ["image", "build", "--no-push", "--torch-wheels", wheel_folder(), *args], env, REPO, timeout=1800
        )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    (line,) = [line for line in done.stdout.splitlines() if "torchdeck train --in-image" in line]
    return line.split("--in-image ", 1)[1].split()[0]


def loaded(env: dict[str, str], *names: str) -> None:
    """The images moved into the node's containerd through the cluster's registry: only the layers the
    registry and the node lack move (a rebuilt image's top layers); an image the node holds is not
    moved again."""
    with phase("images loaded into the node"):
        done = subprocess.run([str(SCRIPT), "load", *names], capture_output=True, text=True, timeout=1800,
                              env={**os.environ, "DOCKER_HOST": env["DOCKER_HOST"]})  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="session")
def image_env(real_cluster: Cluster, tmp_path_factory) -> Iterator[dict[str, str]]:
    """The CLI's environment for image builds on the real Docker engine (started here, stopped at the
    session's end)."""
    with phase("engine start"):
        engine = subprocess.run([str(ENGINE), "start"], capture_output=True, text=True, timeout=900)
    if engine.returncode == 3:
        unavailable(engine.stderr.strip().splitlines()[-1])
    assert engine.returncode == 0, engine.stdout + engine.stderr
    host = engine.stdout.strip().rpartition("DOCKER_HOST=")[2]
    yield {**cli_env(tmp_path_factory.mktemp("image-state")), **NO_AWS, "DOCKER_HOST": host}
    subprocess.run([str(ENGINE), "stop"], capture_output=True, timeout=120)


@pytest.fixture(scope="session")
def images(image_env: dict[str, str], tmp_path_factory) -> tuple[str, str]:
    """Built by the real Docker engine and loaded into the node's containerd together (each 5 GB
    archive took minutes to load): the CPU training image with OpenMPI and its SSH server
    (``image build --mpi``, Debian's packages from the wheel folder), one image for every kind, the
    MPIJob's too; and a user's own image on it, with their requirements (tqdm, TensorBoard) from the
    wheel folder (``image build --code``; their code still goes to the pods as the bundle)."""
    code = tmp_path_factory.mktemp("requirements")
    (code / "requirements.txt").write_text("tqdm\ntensorboard\n")
    names = built(image_env, "--mpi"), built(image_env, "--mpi", "--code", str(code))
    loaded(image_env, *names)
    return names


@pytest.fixture(scope="session")
def trainer_image(images: tuple[str, str]) -> str:
    return images[0]


@pytest.fixture(scope="session")
def user_image(images: tuple[str, str]) -> str:
    return images[1]


@pytest.fixture(scope="session")
def volume(real_cluster: Cluster) -> Iterator[Path]:
    """A folder here as the claim ``shared`` in namespace e2e (a hostPath PersistentVolume): the
    CIFAR-10 subset at data/, the runs' checkpoints beside it, as EFS holds them on EKS."""
    if not (SHARED_DATA / "cifar-10-batches-py" / "test_batch").is_file():
        unavailable(f"the real CIFAR-10 subset is not at {SHARED_DATA}")
    real_cluster.kubectl("create", "namespace", NAMESPACE)  # first: where it is refused, no folder is left
    root = Path(tempfile.mkdtemp(prefix="torchdeck-e2e-", dir="/var/tmp"))
    shutil.copytree(SHARED_DATA / "cifar-10-batches-py", root / "data" / "cifar-10-batches-py")
    (root / "runs").mkdir()
    for path in (root, root / "runs", root / "data"):
        path.chmod(0o777)  # the pods run as uid 1000
    real_cluster.kubectl("apply", "-f", "-", input=f"""
apiVersion: v1
kind: PersistentVolume
metadata: {{name: torchdeck-e2e}}
spec:
  capacity: {{storage: 5Gi}}
  accessModes: [ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  hostPath: {{path: {root}, type: Directory}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: {CLAIM}, namespace: {NAMESPACE}}}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: ""
  volumeName: torchdeck-e2e
  resources: {{requests: {{storage: 5Gi}}}}
""")  # fmt: skip
    deadline = time.monotonic() + 60  # the PersistentVolume controller binds it on its next pass
    while real_cluster.get("pvc", "-n", NAMESPACE, CLAIM)["status"].get("phase") != "Bound":
        assert time.monotonic() < deadline, real_cluster.kubectl("describe", "pvc", "-n", NAMESPACE, CLAIM).stdout
        time.sleep(0.5)
    yield root
    if not real_cluster.ours:  # a developer's cluster stays up; the stop of one started here takes all
        real_cluster.kubectl("delete", "namespace", NAMESPACE, "--timeout=120s", check=False)
        real_cluster.kubectl("delete", "pv", "torchdeck-e2e", "--timeout=60s", check=False)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def on_cluster(real_cluster: Cluster, volume: Path, tmp_path: Path) -> Iterator:
    """``torchdeck --backend kubernetes ARGS`` against the real cluster, with a state folder of its own."""
    env = {**cli_env(tmp_path / "state"), **NO_AWS, "KUBECONFIG": str(real_cluster.kubeconfig), "HOME": str(tmp_path)}

    def torchdeck(*args: str, timeout: float = 120, cwd: Path = REPO) -> subprocess.CompletedProcess:
        return run_cli(["--backend", "kubernetes", *args], env, cwd, timeout)

    torchdeck.env = env  # type: ignore[attr-defined]
    yield torchdeck
    # a test that failed half way leaves its runs going; the next test on this one node would wait
    # behind them for CPU, so whatever a test left in the namespace is removed before the next starts
    real_cluster.kubectl("delete", ",".join(RUN_KINDS), "-n", NAMESPACE, "-l", "torchdeck.dev/run",
                         "--ignore-not-found", "--wait=true", "--timeout=180s", check=False)  # fmt: skip


RUN_KINDS = ("pytorchjobs.kubeflow.org", "mpijobs.kubeflow.org", "trainjobs.trainer.kubeflow.org",
             "jobsets.jobset.x-k8s.io", "jobs.batch", "pods")  # fmt: skip
"""Every kind a run's workload takes on the test cluster (the controllers' children go with them)."""


# -- what the end-to-end tests share ---------------------------------------------------------------

TRAIN = ("--namespace", NAMESPACE, "--set", f"cluster.pvc={CLAIM}", "--nproc-per-node", "1")
SMALL = ("--set", "resources.cpu=500m", "--set", "resources.memory=1500Mi", "--set", "resources.shm_size=256Mi")
"""Two pods of this fit the node's two cores beside the control plane."""


def wait(condition, what: str, timeout: float = 600, every: float = 1.0, shown=None):
    """``condition()`` until it is true; past ``timeout``, an error that says what ``shown()`` says then
    (what the cluster or torchdeck showed, for the one reading the failure)."""
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() > deadline:
            seen = f"\n{shown()}" if shown is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{seen}")
        time.sleep(every)


def status_of(torchdeck, run_id: str) -> dict:
    done = torchdeck("status", "--output", "json", run_id)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def launched(torchdeck, *args: str, cwd: Path | None = None) -> str:
    done = torchdeck("train", "--detach", *args, **({"cwd": cwd} if cwd else {}))
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip().splitlines()[-1]


def ended(torchdeck, run_id: str, timeout: float = 900) -> dict:
    return wait(lambda: (s := status_of(torchdeck, run_id))["state"] in ("succeeded", "failed", "cancelled") and s,
                f"run {run_id} to end", timeout, every=3)  # fmt: skip
