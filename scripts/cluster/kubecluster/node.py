"""A node: containerd (CRI) with runc and the CNI bridge plugin, the two small images it needs with no
registry (pause, the operator's init container), its kubelet and kube-proxy. Every config file is
written from data; each node's are its own (Node.conf)."""

from __future__ import annotations

import json
import os
import subprocess

from kubecluster.api import Kubectl
from kubecluster.control_plane import as_flags
from kubecluster.formats import Data, toml_text, write_file, yaml_text
from kubecluster.layout import CGROUP_ROOT, INIT_IMAGE, PACK_IMAGE, PAUSE_IMAGE, SERVICE_CIDR, Cluster, Node
from kubecluster.processes import NoCluster, start_component, succeeds, wait_for

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
        "routes": [{"dst": node.pod_cidr}, {"dst": SERVICE_CIDR}],
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
        "cgroup": {"path": f"/{CGROUP_ROOT}/{node.component('containerd')}"},
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
    """The node's KubeletConfiguration: cgroup v1 (cgroupfs) under the cluster's own root, images kept
    (no GC: the trainer image is loaded once), its API on the node's address only."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(cluster.pki / "ca.crt")}},
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{CGROUP_ROOT}",
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
    }  # fmt: skip


def kube_proxy_config(cluster: Cluster, node: Node) -> dict[str, Data]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(cluster.admin_kubeconfig)},
        "mode": "iptables",
        "clusterCIDR": node.pod_cidr,
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


def start_node(cluster: Cluster, node: Node) -> None:
    programs = cluster.programs
    for folder in (node.conf / "cni", node.containerd_dir, node.state / "kubelet", node.state / "pod-logs"):
        folder.mkdir(parents=True, exist_ok=True)
    node.containerd_root.mkdir(parents=True, exist_ok=True)
    write_file(node.conf / "cni" / "10-bridge.conflist", json.dumps(cni_config(cluster, node), indent=1))
    write_file(node.conf / "containerd.toml", toml_text(containerd_config(cluster, node)))
    path = f"{programs.containerd}:{programs.runc}:{os.environ.get('PATH', '')}"
    start_component(cluster, node.component("containerd"),
                    [programs.containerd / "containerd", "--config", node.conf / "containerd.toml"],
                    env={"PATH": path})  # fmt: skip
    wait_for(cluster, 30, "containerd", lambda: succeeds([*ctr(cluster, node), "version"]))
    import_small_images(cluster, node)
    write_file(node.conf / "kubelet.yaml", yaml_text(kubelet_config(cluster, node)))
    write_file(node.conf / "resolv.conf", f"nameserver {cluster.control.ip}\n")
    start_component(cluster, node.component("kubelet"), [programs.kube, "kubelet", *as_flags({
        "config": node.conf / "kubelet.yaml", "kubeconfig": cluster.pki / "kubelet.conf",
        "root-dir": node.state / "kubelet", "cert-dir": node.state / "kubelet-pki",
        "node-ip": node.ip, "hostname-override": node.name})])  # fmt: skip
    write_file(node.conf / "kube-proxy.yaml", yaml_text(kube_proxy_config(cluster, node)))
    start_component(cluster, node.component("kube-proxy"),
                    [programs.kube, "kube-proxy", "--config", node.conf / "kube-proxy.yaml"])  # fmt: skip
    wait_for(cluster, 90, f"the node {node.name}", lambda: node_ready(cluster, node))
