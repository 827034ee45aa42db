"""The cluster as values: where its programs are (the cache, one folder per program and version), where
its state is, its network namespace and ports, and its nodes. A node is a value of its own (name,
address, namespace, folders, the containerd root it keeps images in) and the cluster holds a list of
them; it runs one by default, the control plane on the first."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from kubecluster.versions import Versions, read_versions

HERE = Path(__file__).resolve().parent
KUBE_SOURCE = HERE.parent / "kube"
"""The multi-call Go program of the Kubernetes components (etcd, kube-apiserver, ..., kubectl, kubeadm,
and `kube forward`): Go links them best, so it stays a Go program."""
PACK_IMAGE = HERE.parent / "pack-image"
PAUSE_SOURCE = HERE.parent / "pause.c"

STATE = Path("/var/lib/torchdeck-kube")
PAUSE_IMAGE = "torchdeck.local/pause:3.10"
INIT_IMAGE = "torchdeck.local/busybox:1.35"
"""The Training Operator's init container (it waits with sh and nslookup until the master's name
resolves; upstream's default is alpine from Docker Hub, which no registry here serves)."""
CGROUP_ROOT = "torchdeck-kube"
"""The kubelet's cgroupRoot, containerd's cgroup under it: never kubepods or k8s.io at the host's top."""
SERVICE_CIDR = "10.96.0.0/16"
SYSCTLS = ("vm.overcommit_memory", "kernel.panic", "kernel.panic_on_oops")
"""The global sysctls the kubelet changes, which a stop puts back."""
FIXED_PATHS = (
    "/var/log/pods",
    "/var/log/containers",
    "/var/lib/cni",
    "/run/containerd",
    "/run/nri",
    "/var/lib/kubelet",
    "/etc/kubernetes",
    "/etc/kueue",
    "/visibility",
)
"""Paths outside the state folder the components use at names they fix: a start makes those that are
missing and records each; a stop removes only the recorded ones."""


def kube_source_key() -> str:
    """The Go program is ours too: its folder is keyed by its source as well as the release."""
    names = ["go.mod", "go.sum", *sorted(p.name for p in KUBE_SOURCE.glob("*.go"))]
    digest = hashlib.sha256(b"".join((KUBE_SOURCE / name).read_bytes() for name in names))
    return digest.hexdigest()[:12]


@dataclass(frozen=True)
class Programs:
    """Where each built program lives: the cache's folder for its name and release."""

    cache: Path
    versions: Versions

    def folder(self, name: str, version: str) -> Path:
        return self.cache / f"{name}-{version}" / "bin"

    @property
    def kube_bin(self) -> Path:
        return self.folder("kubernetes", f"{self.versions.kubernetes}-{kube_source_key()}")

    @property
    def kube(self) -> Path:
        return self.kube_bin / "kube"

    @property
    def containerd(self) -> Path:
        return self.folder("containerd", self.versions.containerd)

    @property
    def runc(self) -> Path:
        return self.folder("runc", self.versions.runc)

    @property
    def cni(self) -> Path:
        return self.folder("cni-plugins", self.versions.cni_plugins)

    @property
    def coredns(self) -> Path:
        return self.folder("coredns", self.versions.coredns)

    @property
    def metrics_server(self) -> Path:
        return self.folder("metrics-server", self.versions.metrics_server)

    @property
    def training_operator(self) -> Path:
        return self.folder("training-operator", self.versions.training_operator)

    @property
    def trainer(self) -> Path:
        return self.folder("trainer", self.versions.trainer)

    @property
    def jobset(self) -> Path:
        return self.folder("jobset", self.versions.jobset)

    @property
    def mpi_operator(self) -> Path:
        return self.folder("mpi-operator", self.versions.mpi_operator)

    @property
    def kueue(self) -> Path:
        return self.folder("kueue", self.versions.kueue)

    @property
    def registry(self) -> Path:
        return self.folder("registry", self.versions.registry)

    @property
    def pause(self) -> Path:
        return self.folder("pause", "3.10")


@dataclass(frozen=True)
class Node:
    """One node: its kubelet, kube-proxy and containerd, their folders and its address. The first node
    keeps the component names status has always printed (kubelet, containerd, kube-proxy); another's
    carry its name."""

    name: str
    ip: str
    pod_cidr: str
    netns: str
    state: Path
    containerd_root: Path
    component_suffix: str = ""

    def component(self, program: str) -> str:
        """The name of this node's PROGRAM among the cluster's components (its pid file and log)."""
        return program + self.component_suffix

    @property
    def conf(self) -> Path:
        return self.state / "node"

    @property
    def containerd_dir(self) -> Path:
        return self.state / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd_dir / "containerd.sock"


@dataclass(frozen=True)
class Cluster:
    """The whole cluster: its programs, state, namespace, ports and nodes (the control plane runs on
    nodes[0], in that node's namespace)."""

    programs: Programs
    state: Path = STATE
    port: int = 16443
    registry_port: int = 16500
    nodes: tuple[Node, ...] = field(default_factory=tuple)

    @property
    def versions(self) -> Versions:
        return self.programs.versions

    @property
    def cache(self) -> Path:
        return self.programs.cache

    @property
    def control(self) -> Node:
        return self.nodes[0]

    @property
    def netns(self) -> str:
        return self.control.netns

    @property
    def pki(self) -> Path:
        return self.state / "pki"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def pids(self) -> Path:
        return self.state / "pids"

    @property
    def conf(self) -> Path:
        return self.control.conf

    @property
    def kubeconfig(self) -> Path:
        """The host's kubeconfig: the API server through the forwarder on 127.0.0.1:port."""
        return self.state / "kubeconfig"

    @property
    def admin_kubeconfig(self) -> Path:
        """The components' kubeconfig: the API server on the node's address, inside the namespace."""
        return self.pki / "super-admin.conf"

    @property
    def before(self) -> Path:
        """What a stop puts back and may remove: "sysctl NAME VALUE" and "made PATH" lines."""
        return self.state / "before"

    @property
    def mounts_before(self) -> Path:
        return self.state / "mounts-before"

    @property
    def mount_roots(self) -> tuple[Path, ...]:
        """Where mounts of the cluster's may be: a stop unmounts only those not there at start."""
        roots = {self.state, *(node.containerd_root for node in self.nodes)}
        fixed = (Path("/run/containerd"), Path("/var/lib/kubelet"), Path("/tmp/k8s-webhook-server"))
        return (*sorted(roots), *fixed)

    def pid_file(self, component: str) -> Path:
        return self.pids / component

    def component_names(self) -> list[str]:
        """Every process the cluster runs, in the order status prints them."""
        names = ["etcd", "kube-apiserver", "forward", "kube-controller-manager", "kube-scheduler"]
        for node in self.nodes:
            names += [node.component("containerd"), node.component("kubelet"), node.component("kube-proxy")]
        names += ["registry", "registry-forward", "coredns", "metrics-server", "training-operator", "jobset"]
        return [*names, "trainer", "mpi-operator", "kueue"]


def default_nodes(state: Path, cache: Path, count: int = 1) -> tuple[Node, ...]:
    """COUNT nodes on the bridge 10.244.0.0/16, one /24 of pods each; the first keeps the folders and
    containerd root (the images loaded so far) of the single-node cluster."""
    nodes = []
    for index in range(count):
        first = index == 0
        nodes.append(
            Node(
                name="torchdeck-node" if first else f"torchdeck-node-{index + 1}",
                ip=f"10.244.{index}.1",
                pod_cidr=f"10.244.{index}.0/24",
                netns="torchdeck-kube",
                state=state if first else state / "nodes" / f"node-{index + 1}",
                containerd_root=cache / ("containerd-root" if first else f"containerd-root-{index + 1}"),
                component_suffix="" if first else f"-{index + 1}",
            )
        )
    return tuple(nodes)


def cluster_from_environment() -> Cluster:
    """The cluster as this machine's environment names it: the cache ($TORCHDECK_CLUSTER_CACHE), the
    host's API server port ($TORCHDECK_KUBE_PORT) and registry port ($TORCHDECK_REGISTRY_PORT)."""
    cache = Path(os.environ.get("TORCHDECK_CLUSTER_CACHE") or Path.home() / ".cache" / "torchdeck" / "cluster")
    return Cluster(
        programs=Programs(cache=cache, versions=read_versions()),
        port=int(os.environ.get("TORCHDECK_KUBE_PORT") or 16443),
        registry_port=int(os.environ.get("TORCHDECK_REGISTRY_PORT") or 16500),
        nodes=default_nodes(STATE, cache),
    )
