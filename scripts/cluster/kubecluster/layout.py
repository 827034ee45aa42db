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
POD_NETWORK = "10.244.0.0/16"
"""Every node's pods: a /24 of it each."""
NODE_FIXED_PATHS = (
    "/var/lib/kubelet",
    "/var/log/pods",
    "/var/log/containers",
    "/var/lib/cni",
    "/run/containerd",
    "/run/nri",
    "/etc/kubernetes",
)
"""The fixed paths each node has a copy of, bound over them in its own mount namespace (two kubelets
would share /var/lib/kubelet/device-plugins, two containerds /run/containerd/s)."""
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
    """One node: its kubelet, kube-proxy and containerd, their folders, its address and the three things
    that make it a machine of its own here: a network namespace (NETNS; the first node's is the
    cluster's, where the control plane runs), a mount namespace (held by its "node-mounts" process; its
    own /var/lib/kubelet, /var/log/pods, /run/containerd, ...) and a cgroup subtree (CGROUP, the
    kubelet's cgroupRoot, its own processes in CGROUP/system). The first node keeps the component
    names status has always printed (kubelet, containerd, kube-proxy); another's carry its number."""

    name: str
    ip: str
    pod_cidr: str
    netns: str
    state: Path
    containerd_root: Path
    component_suffix: str = ""
    number: int = 1
    zone: str = "us-east-1a"
    instance_type: str = "m5.large"
    fabric_ip: str = ""
    """Its address on the fabric between the nodes' namespaces (none with one node)."""

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

    @property
    def cgroup(self) -> str:
        """The node's cgroup subtree under the cluster's root (the kubelet's cgroupRoot)."""
        return f"{CGROUP_ROOT}/node-{self.number}"

    @property
    def fixed(self) -> Path:
        """Where this node's copies of the fixed paths live (bound over them in its mount namespace)."""
        return self.state / "fixed"

    @property
    def link(self) -> str:
        """The veth end on the fabric bridge, in the cluster's namespace: cut, the node is partitioned."""
        return f"fab{self.number}"

    @property
    def labels(self) -> dict[str, str]:
        """What EKS's kubelets label a node with (the kubelet may set these on itself)."""
        return {
            "topology.kubernetes.io/region": "us-east-1",
            "topology.kubernetes.io/zone": self.zone,
            "node.kubernetes.io/instance-type": self.instance_type,
            "eks.amazonaws.com/nodegroup": "torchdeck-workers" if self.number > 1 else "torchdeck-system",
            "eks.amazonaws.com/capacityType": "ON_DEMAND",
        }


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
    def workers(self) -> tuple[Node, ...]:
        """The nodes pods run on: every node of a one-node cluster, else all but the control plane's."""
        return self.nodes[1:] or self.nodes

    def node(self, name: str) -> Node:
        """The node NAME (or its number), else ValueError naming those there are."""
        for node in self.nodes:
            if name in (node.name, str(node.number)):
                return node
        raise ValueError(f"no node {name} (the nodes: {', '.join(n.name for n in self.nodes)})")

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
            names += [
                node.component("node-mounts"),
                node.component("containerd"),
                node.component("kubelet"),
                node.component("kube-proxy"),
            ]
        names += ["registry", "registry-forward", "coredns", "metrics-server", "training-operator", "jobset"]
        return [*names, "trainer", "mpi-operator", "kueue"]


FABRIC = "10.243.0"
"""The nodes' link to each other: a bridge in the cluster's namespace, each node's veth on it."""
NODES_FILE = "node-count"


def default_nodes(state: Path, cache: Path, count: int = 1) -> tuple[Node, ...]:
    """COUNT nodes, one /24 of 10.244.0.0/16 each for its pods (its bridge's address is its own); the
    first keeps the folders, containerd root (the images loaded so far) and name of the single-node
    cluster and runs the control plane; the others are named as EKS names its workers
    (ip-10-244-1-1.ec2.internal), in two zones, each in namespaces of its own."""
    nodes = []
    for index in range(count):
        first = index == 0
        ip = f"10.244.{index}.1"
        nodes.append(
            Node(
                name="torchdeck-node" if first else f"ip-{ip.replace('.', '-')}.ec2.internal",
                ip=ip,
                pod_cidr=f"10.244.{index}.0/24",
                netns="torchdeck-kube" if first else f"torchdeck-kube-{index + 1}",
                state=state if first else state / "nodes" / f"node-{index + 1}",
                containerd_root=cache / ("containerd-root" if first else f"containerd-root-{index + 1}"),
                component_suffix="" if first else f"-{index + 1}",
                number=index + 1,
                zone="us-east-1a" if first or index % 2 == 1 else "us-east-1b",
                fabric_ip=f"{FABRIC}.{index + 1}" if count > 1 else "",
            )
        )
    return tuple(nodes)


def wanted_node_count() -> int:
    """The nodes a start makes: $TORCHDECK_KUBE_NODES, 1 by default."""
    text = os.environ.get("TORCHDECK_KUBE_NODES") or "1"
    if not text.isdigit() or not 1 <= int(text) <= 8:
        raise ValueError(f"TORCHDECK_KUBE_NODES={text}: a node count from 1 to 8")
    return int(text)


def node_count(state: Path) -> int:
    """The nodes of the cluster: as the one there was started with, else those a start would make."""
    try:
        recorded = (state / NODES_FILE).read_text().strip()
    except OSError:
        recorded = ""
    return int(recorded) if recorded.isdigit() and 1 <= int(recorded) <= 8 else wanted_node_count()


def cluster_from_environment() -> Cluster:
    """The cluster as this machine's environment names it: the cache ($TORCHDECK_CLUSTER_CACHE), the
    host's API server port ($TORCHDECK_KUBE_PORT) and registry port ($TORCHDECK_REGISTRY_PORT), its
    nodes (node_count)."""
    cache = Path(os.environ.get("TORCHDECK_CLUSTER_CACHE") or Path.home() / ".cache" / "torchdeck" / "cluster")
    return Cluster(
        programs=Programs(cache=cache, versions=read_versions()),
        port=int(os.environ.get("TORCHDECK_KUBE_PORT") or 16443),
        registry_port=int(os.environ.get("TORCHDECK_REGISTRY_PORT") or 16500),
        nodes=default_nodes(STATE, cache, node_count(STATE)),
    )
