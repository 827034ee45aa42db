"""A stop, acting only on what this cluster made: each component whose pid and start time are the ones
recorded when it started, the processes in its own cgroup root, the mounts that were not in the
mount table at start, the fixed paths it recorded as it made them; it puts back the global sysctls
the kubelet changes and removes the namespace and the state folder (its logs kept in the cache)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from kubecluster.host import records
from kubecluster.layout import CGROUP_ROOT, Cluster
from kubecluster.owned import cgroup_hierarchies, mounts_since, owned_pid, stop_owned
from kubecluster.processes import NoCluster, say

END_GRACE_S = 3
"""How long a component has after SIGTERM before SIGKILL. Nothing of a stopped cluster is kept (its
state folder goes), and two of them never end by themselves in time: Kubeflow Trainer's controller
and the API server with etcd both took the whole 15 s this once was (30 s of every stop)."""


def end(cluster: Cluster, *names: str) -> None:
    """The components still running as started: SIGTERM, then SIGKILL after END_GRACE_S; a pid file
    whose pid is now another process's is passed over."""
    stop_owned(END_GRACE_S, [cluster.pid_file(name) for name in names])


def cgroups(under: str = "") -> list[Path]:
    """The folders of the cgroup UNDER (by default all) in the cluster's own cgroup root, in every
    hierarchy, deepest first."""
    found = []
    for hierarchy in cgroup_hierarchies():
        top = hierarchy / CGROUP_ROOT / under if under else hierarchy / CGROUP_ROOT
        if top.is_dir():
            found += [Path(folder) for folder, _, _ in os.walk(top)]
    return sorted(found, key=lambda path: len(str(path)), reverse=True)


def kill_cgroup(under: str, spare: int | None = None) -> None:
    """SIGKILL every process in the cluster's cgroup UNDER but SPARE, until none is left."""
    for _ in range(50):
        pids = set()
        for folder in cgroups(under):
            try:
                pids |= {int(pid) for pid in (folder / "cgroup.procs").read_text().split()}
            except OSError:
                continue
        pids.discard(spare or 0)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        time.sleep(0.2)


def our_mounts(cluster: Cluster) -> list[str]:
    """The mounts the cluster made, deepest first: where it mounts, not in the table at start; with no
    table (a start cut short before it), only those under its own folders."""
    if cluster.mounts_before.is_file():
        return mounts_since(cluster.mounts_before.read_text().splitlines(), cluster.mount_roots)
    return mounts_since([], [cluster.state, *(node.containerd_root for node in cluster.nodes)])


def remove_made(path: Path) -> None:
    """A fixed path start made, unless something is still mounted under it."""
    if mounts_since([], [path]):
        say(f"kept {path}: something is still mounted under it")
        return
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()


def thaw(cluster: Cluster) -> None:
    """Every frozen cgroup of the cluster's thawed (a frozen process takes no signal, SIGKILL included)."""
    for folder in cgroups():
        state = folder / "freezer.state"
        if state.is_file() and state.read_text().strip() != "THAWED":
            state.write_text("THAWED")


def stop(cluster: Cluster) -> None:
    if os.geteuid() != 0:
        raise NoCluster("not root")
    nodes = cluster.nodes
    thaw(cluster)
    end(cluster, "kwok", "kueue", "mpi-operator", "trainer", "jobset", "training-operator", "metrics-server", "coredns",
        "registry-forward", "registry", *(n.component("kube-proxy") for n in nodes), "kube-scheduler",
        "kube-controller-manager", *(n.component("kubelet") for n in nodes), "forward")  # fmt: skip
    # every process in the pods' cgroups (the containers), then the shims beside containerd in its
    # cgroup, then containerd; then whatever is left under the cluster's cgroup root
    for node in nodes:
        kill_cgroup(f"{node.cgroup.partition('/')[2]}/kubepods")
    for node in nodes:
        containerd = owned_pid(cluster.pid_file(node.component("containerd")))
        kill_cgroup(f"{node.cgroup.partition('/')[2]}/containerd", containerd)
    end(cluster, *(n.component("containerd") for n in nodes), "kube-apiserver", "etcd",
        *(n.component("node-mounts") for n in nodes))  # fmt: skip
    kill_cgroup("")
    for mount in our_mounts(cluster):
        if subprocess.run(["umount", mount], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", mount], capture_output=True)
    for _ in range(25):
        left = cgroups()
        if not left:
            break
        for folder in left:
            try:
                folder.rmdir()
            except OSError:
                pass
        time.sleep(0.2)
    for node in reversed(nodes):
        subprocess.run(["ip", "netns", "del", node.netns], capture_output=True)
    for kind, name, value in records(cluster):
        if kind == "sysctl":
            subprocess.run(["sysctl", "-qw", f"{name}={value}"], check=False)
        elif kind == "made":
            remove_made(Path(name))
    if cluster.logs.is_dir():
        last = cluster.cache / "last-logs"
        shutil.rmtree(last, ignore_errors=True)
        shutil.copytree(cluster.logs, last)
    if mounts_since([], [cluster.state]):
        raise NoCluster(f"something is still mounted under {cluster.state}")
    shutil.rmtree(cluster.state, ignore_errors=True)
