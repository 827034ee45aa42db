"""A node: containerd (CRI) with runc and the CNI bridge plugin, the two small images it needs with no
registry (pause, the operator's init container), its kubelet and kube-proxy. Every config file is
written from data; each node's are its own (Node.conf)."""

from __future__ import annotations

import json
import os
import subprocess
from functools import partial
from pathlib import Path

from kubecluster.api import Kubectl
from kubecluster.control_plane import as_flags
from kubecluster.formats import Data, toml_text, write_file, yaml_text
from kubecluster.layout import (
    INIT_IMAGE,
    NODE_FIXED_PATHS,
    PACK_IMAGE,
    PAUSE_IMAGE,
    POD_NETWORK,
    SERVICE_CIDR,
    Cluster,
    Node,
)
from kubecluster.processes import NoCluster, in_netns, in_node, run, start_component, succeeds, wait_for

BUSYBOX_LINKS = ("sh", "nslookup", "seq", "sleep", "echo", "sed")
"""What the Training Operator's init-container command runs."""


def ctr(cluster: Cluster, node: Node) -> list[str]:
    """The node's containerd client, in the namespace Kubernetes' images live in."""
    return [str(cluster.programs.containerd / "ctr"), "--address", str(node.containerd_socket), "-n", "k8s.io"]


def cni_config(cluster: Cluster, node: Node) -> dict[str, Data]:
    ipam = {
        "type": "host-local",
        "dataDir": str(node.state / "cni-ipam"),
        "ranges": [[{"subnet": node.pod_cidr, "gateway": node.ip}]],
        "routes": [{"dst": POD_NETWORK}, {"dst": SERVICE_CIDR}],
    }
    return {
        "cniVersion": "1.0.0",
        "name": "torchdeck",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False, "hairpinMode": True, "ipam": ipam},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def containerd_config(cluster: Cluster, node: Node) -> dict[str, Data]:
    """containerd 2's config (version 3): its root in the cache (the images stay between runs), its
    cgroup under the cluster's root; no CAP_SYS_RESOURCE here (restrict_oom_score_adj); pods' network
    namespaces under its own state folder."""
    programs = cluster.programs
    runtime = {
        "restrict_oom_score_adj": True,
        "netns_mounts_under_state_dir": True,
        "enable_cdi": False,
        "containerd": {"runtimes": {"runc": {"options": {
            "BinaryName": str(programs.runc / "runc"),
            "Root": str(node.containerd_dir / "runc"),
            "SystemdCgroup": False}}}},
        "cni": {"bin_dirs": [str(programs.cni)], "conf_dir": str(node.conf / "cni")},
    }  # fmt: skip
    return {
        "version": 3,
        "root": str(node.containerd_root),
        "state": str(node.containerd_dir / "state"),
        "cgroup": {"path": f"/{node.cgroup}/containerd"},
        "grpc": {"address": str(node.containerd_socket)},
        "ttrpc": {"address": f"{node.containerd_socket}.ttrpc"},
        "plugins": {
            "io.containerd.cri.v1.images": {"snapshotter": "overlayfs", "pinned_images": {"sandbox": PAUSE_IMAGE}},
            "io.containerd.cri.v1.runtime": runtime,
            "io.containerd.grpc.v1.cri": {"stream_server_address": "127.0.0.1"},
            "io.containerd.nri.v1.nri": {"disable": True},
        },
    }


def kubelet_config(cluster: Cluster, node: Node) -> dict[str, Data]:
    """The node's KubeletConfiguration: cgroup v1 (cgroupfs) under its own subtree of the cluster's
    cgroup root, images kept (no GC: the trainer image is loaded once), its API on the node's address
    only; in a cluster of several nodes the control plane's node takes no pods (as on EKS, where the
    control plane is not a node at all)."""
    taints = [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(cluster.pki / "ca.crt")}},
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{node.cgroup}",
        "failSwapOn": False,
        "protectKernelDefaults": False,
        "makeIPTablesUtilChains": False,
        "containerRuntimeEndpoint": f"unix://{node.containerd_socket}",
        "podLogsDir": str(node.state / "pod-logs"),
        "clusterDomain": "cluster.local",
        "clusterDNS": [cluster.control.ip],
        "resolvConf": str(node.conf / "resolv.conf"),
        "address": node.ip,
        "healthzBindAddress": "127.0.0.1",
        "readOnlyPort": 0,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "imageMinimumGCAge": "87600h",
        "serializeImagePulls": False,
        "localStorageCapacityIsolation": False,
        "registerWithTaints": taints if node is cluster.control and len(cluster.nodes) > 1 else [],
    }  # fmt: skip


def kube_proxy_config(cluster: Cluster, node: Node) -> dict[str, Data]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(cluster.admin_kubeconfig)},
        "mode": "iptables",
        "clusterCIDR": POD_NETWORK,
        "hostnameOverride": node.name,
        "bindAddress": "127.0.0.1",
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }


def import_small_images(cluster: Cluster, node: Node) -> None:
    """The pause and init-container images, packed and imported at every start (a second or less; a
    changed one retags)."""
    busybox = ["/bin/busybox=/bin/busybox", *(f"/bin/{name}->busybox" for name in BUSYBOX_LINKS)]
    for name, entrypoint, entries in (
        (PAUSE_IMAGE, "/pause", [f"{cluster.programs.pause / 'pause'}=/pause"]),
        (INIT_IMAGE, "/bin/sh", busybox),
    ):
        packed = subprocess.run(
            ["python3", str(PACK_IMAGE), name, entrypoint, *entries], capture_output=True, check=True
        )
        imported = subprocess.run(
            [*ctr(cluster, node), "images", "import", "-"], input=packed.stdout, capture_output=True
        )
        if imported.returncode != 0:
            raise NoCluster(f"containerd could not import {name}: {imported.stderr.decode().strip()[-200:]}")


def node_ready(cluster: Cluster, node: Node) -> bool:
    return Kubectl(cluster).condition("node", node.name, "Ready")


def kubelet_kubeconfig(cluster: Cluster, node: Node) -> Path:
    """The node's kubelet credentials (system:node:NAME, which the Node authorizer and NodeRestriction
    hold it to): kubeadm's for the control plane's node, one made the same way for each other."""
    if node is cluster.control:
        return cluster.pki / "kubelet.conf"
    folder = node.state / "pki"
    folder.mkdir(parents=True, exist_ok=True)
    run(in_netns(cluster, [cluster.programs.kube, "kubeadm", "init", "phase", "kubeconfig", "kubelet",
                           "--cert-dir", cluster.pki, "--kubeconfig-dir", folder,
                           "--apiserver-advertise-address", cluster.control.ip, "--node-name", node.name,
                           "--kubernetes-version", cluster.versions.kubernetes]))  # fmt: skip
    return folder / "kubelet.conf"


def start_node_mounts(cluster: Cluster, node: Node) -> None:
    """The node's mount namespace, held by a process of its own (a follower of the host's mounts), with
    the node's copies of the fixed paths bound over them; it goes when its last process does."""
    holder = node.component("node-mounts")
    start_component(cluster, holder, ["nsenter", f"--net=/run/netns/{node.netns}", "unshare", "--mount",
                                      "--propagation", "slave", "sleep", "infinity"], node=node, wrapped=True)  # fmt: skip

    def entered() -> bool:  # the holder has unshared (its mount namespace is no longer the host's)
        pid = (cluster.pid_file(holder).read_text().split() or ["0"])[0]
        return os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")

    wait_for(cluster, 10, f"{node.name}'s mount namespace", entered)
    for path in NODE_FIXED_PATHS:
        own = node.fixed / path.strip("/").replace("/", "-")
        own.mkdir(parents=True, exist_ok=True)
        run(in_node(cluster, node, ["mount", "--bind", own, path]))


def start_node(cluster: Cluster, node: Node) -> None:
    """NODE's processes started (in its namespaces and cgroup); node_ready says when it has joined."""
    programs = cluster.programs
    for folder in (node.conf / "cni", node.containerd_dir, node.state / "kubelet", node.state / "pod-logs"):
        folder.mkdir(parents=True, exist_ok=True)
    node.containerd_root.mkdir(parents=True, exist_ok=True)
    start_node_mounts(cluster, node)
    write_file(node.conf / "cni" / "10-bridge.conflist", json.dumps(cni_config(cluster, node), indent=1))
    write_file(node.conf / "containerd.toml", toml_text(containerd_config(cluster, node)))
    path = f"{programs.containerd}:{programs.runc}:{os.environ.get('PATH', '')}"
    start_component(cluster, node.component("containerd"),
                    [programs.containerd / "containerd", "--config", node.conf / "containerd.toml"],
                    env={"PATH": path}, node=node)  # fmt: skip
    wait_for(cluster, 30, "containerd", lambda: succeeds([*ctr(cluster, node), "version"]))
    import_small_images(cluster, node)
    write_file(node.conf / "kubelet.yaml", yaml_text(kubelet_config(cluster, node)))
    write_file(node.conf / "resolv.conf", f"nameserver {cluster.control.ip}\n")
    labels = ",".join(f"{key}={value}" for key, value in node.labels.items())
    start_component(cluster, node.component("kubelet"), [programs.kube, "kubelet", *as_flags({
        "config": node.conf / "kubelet.yaml", "kubeconfig": kubelet_kubeconfig(cluster, node),
        "root-dir": node.state / "kubelet", "cert-dir": node.state / "kubelet-pki",
        "node-ip": node.ip, "hostname-override": node.name, "node-labels": labels})], node=node)  # fmt: skip
    write_file(node.conf / "kube-proxy.yaml", yaml_text(kube_proxy_config(cluster, node)))
    start_component(cluster, node.component("kube-proxy"),
                    [programs.kube, "kube-proxy", "--config", node.conf / "kube-proxy.yaml"], node=node)  # fmt: skip


def start_nodes(cluster: Cluster) -> None:
    """Every node started, then each waited for until Ready; the control plane's node labelled as
    kubeadm labels it (its kubelet may not label itself node-role.kubernetes.io)."""
    for node in cluster.nodes:
        start_node(cluster, node)
    for node in cluster.nodes:
        wait_for(cluster, 90, f"the node {node.name}", partial(node_ready, cluster, node))
    if len(cluster.nodes) > 1:
        Kubectl(cluster)("label", "node", cluster.control.name, "node-role.kubernetes.io/control-plane=", "--overwrite")
