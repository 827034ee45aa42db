"""The control plane, on the cluster's first node: its certificates and kubeconfigs (kubeadm's
phases), etcd, kube-apiserver behind the host's forwarder, kube-controller-manager, kube-scheduler."""

from __future__ import annotations

import json
from pathlib import Path

from kubecluster.api import Kubectl, cluster_role_binding
from kubecluster.formats import write_file, yaml_text
from kubecluster.layout import SERVICE_CIDR, Cluster
from kubecluster.processes import in_netns, run, start_component, start_forwarder, wait_for

CLUSTER_NAME = "torchdeck-kube"


def make_pki(cluster: Cluster) -> None:
    """kubeadm's certificate and kubeconfig phases, told the version (else it asks dl.k8s.io), inside
    the namespace (no route out); then the host's kubeconfig."""
    kube, pki, node, version = cluster.programs.kube, cluster.pki, cluster.control, cluster.versions.kubernetes
    run(in_netns(cluster, [kube, "kubeadm", "init", "phase", "certs", "all", "--cert-dir", pki,
                           "--apiserver-advertise-address", node.ip,
                           "--apiserver-cert-extra-sans", f"127.0.0.1,localhost,{node.name}",
                           "--service-cidr", SERVICE_CIDR, "--kubernetes-version", version]))  # fmt: skip
    run(in_netns(cluster, [kube, "kubeadm", "init", "phase", "kubeconfig", "all", "--cert-dir", pki,
                           "--kubeconfig-dir", pki, "--apiserver-advertise-address", node.ip,
                           "--node-name", node.name, "--kubernetes-version", version]))  # fmt: skip
    write_host_kubeconfig(cluster)


def write_host_kubeconfig(cluster: Cluster) -> None:
    """The super-admin's credentials, as kubeadm wrote them, for the API server on the host's
    127.0.0.1:port (the forwarder), under the cluster's own name."""
    admin = Kubectl(cluster, cluster.admin_kubeconfig)
    view = json.loads(admin("config", "view", "--raw", "-o", "json"))
    (server,) = view["clusters"]
    (user,) = view["users"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CLUSTER_NAME, "cluster": {
            "certificate-authority-data": server["cluster"]["certificate-authority-data"],
            "server": f"https://127.0.0.1:{cluster.port}"}}],
        "users": [{"name": user["name"], "user": {
            "client-certificate-data": user["user"]["client-certificate-data"],
            "client-key-data": user["user"]["client-key-data"]}}],
        "contexts": [{"name": CLUSTER_NAME, "context": {"cluster": CLUSTER_NAME, "user": user["name"]}}],
        "current-context": CLUSTER_NAME,
        "preferences": {},
    }  # fmt: skip
    write_file(cluster.kubeconfig, yaml_text(config), mode=0o600)


def _kube_apiserver(cluster: Cluster) -> list[str | Path]:
    pki = cluster.pki
    flags: dict[str, str | Path] = {
        "etcd-servers": "http://127.0.0.1:2379",
        "advertise-address": cluster.control.ip,
        "bind-address": "0.0.0.0",
        "secure-port": "6443",
        "service-cluster-ip-range": SERVICE_CIDR,
        "allow-privileged": "true",
        "authorization-mode": "Node,RBAC",
        "enable-admission-plugins": "NodeRestriction",
        "client-ca-file": pki / "ca.crt",
        "tls-cert-file": pki / "apiserver.crt",
        "tls-private-key-file": pki / "apiserver.key",
        "kubelet-client-certificate": pki / "apiserver-kubelet-client.crt",
        "kubelet-client-key": pki / "apiserver-kubelet-client.key",
        "kubelet-preferred-address-types": "InternalIP",
        "service-account-key-file": pki / "sa.pub",
        "service-account-signing-key-file": pki / "sa.key",
        "service-account-issuer": "https://kubernetes.default.svc.cluster.local",
        "proxy-client-cert-file": pki / "front-proxy-client.crt",
        "proxy-client-key-file": pki / "front-proxy-client.key",
        "requestheader-client-ca-file": pki / "front-proxy-ca.crt",
        "requestheader-allowed-names": "front-proxy-client",
        "requestheader-extra-headers-prefix": "X-Remote-Extra-",
        "requestheader-group-headers": "X-Remote-Group",
        "requestheader-username-headers": "X-Remote-User",
        "enable-aggregator-routing": "true",
        "profiling": "false",
        "event-ttl": "2h",
    }
    return [cluster.programs.kube, "kube-apiserver", *as_flags(flags)]


def as_flags(flags: dict[str, str | Path]) -> list[str]:
    """--NAME=VALUE for each flag (one argument each: a value never splits or joins another)."""
    return [f"--{name}={value}" for name, value in flags.items()]


def start_control_plane(cluster: Cluster) -> None:
    kube, pki, node = cluster.programs.kube, cluster.pki, cluster.control
    start_component(cluster, "etcd", [kube, "etcd", *as_flags({
        "name": node.name, "data-dir": cluster.state / "etcd",
        "listen-client-urls": "http://127.0.0.1:2379", "advertise-client-urls": "http://127.0.0.1:2379",
        "listen-peer-urls": "http://127.0.0.1:2380", "initial-advertise-peer-urls": "http://127.0.0.1:2380",
        "initial-cluster": f"{node.name}=http://127.0.0.1:2380", "listen-metrics-urls": "http://127.0.0.1:2381",
        "quota-backend-bytes": "2147483648"})])  # fmt: skip
    start_component(cluster, "kube-apiserver", _kube_apiserver(cluster))
    start_forwarder(cluster, "forward", cluster.port, f"{node.ip}:6443", "TORCHDECK_KUBE_PORT")
    kubectl = Kubectl(cluster)
    wait_for(cluster, 60, "the API server", lambda: kubectl("get", "--raw", "/readyz").strip() == "ok")
    # what kubeadm's init binds: the API server's kubelet client may use the kubelet's API (logs, exec,
    # metrics), and admin.conf's group is cluster-admin
    kubectl.create([
        cluster_role_binding("kubeadm:apiserver-kubelet-client", "system:kubelet-api-admin", "User",
                             "kube-apiserver-kubelet-client"),
        cluster_role_binding("kubeadm:cluster-admins", "cluster-admin", "Group", "kubeadm:cluster-admins"),
    ])  # fmt: skip
    manager = pki / "controller-manager.conf"
    start_component(cluster, "kube-controller-manager", [kube, "kube-controller-manager", *as_flags({
        "kubeconfig": manager, "authentication-kubeconfig": manager, "authorization-kubeconfig": manager,
        "bind-address": "127.0.0.1", "leader-elect": "false", "use-service-account-credentials": "true",
        "cluster-signing-cert-file": pki / "ca.crt", "cluster-signing-key-file": pki / "ca.key",
        "root-ca-file": pki / "ca.crt", "service-account-private-key-file": pki / "sa.key",
        "requestheader-client-ca-file": pki / "front-proxy-ca.crt", "service-cluster-ip-range": SERVICE_CIDR,
        "controllers": "*,bootstrapsigner,tokencleaner", "profiling": "false"})])  # fmt: skip
    scheduler = pki / "scheduler.conf"
    start_component(cluster, "kube-scheduler", [kube, "kube-scheduler", *as_flags({
        "kubeconfig": scheduler, "authentication-kubeconfig": scheduler, "authorization-kubeconfig": scheduler,
        "bind-address": "127.0.0.1", "leader-elect": "false", "profiling": "false"})])  # fmt: skip
