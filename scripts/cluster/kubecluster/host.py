"""What the cluster changes on the host, each change recorded as it is made so that a stop puts back
or removes exactly that: the global sysctls the kubelet sets, the mounts there before start, the
fixed paths it makes (recorded before any component could make them), its own cgroup root, the
network namespace."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from kubecluster.layout import CGROUP_ROOT, FIXED_PATHS, SERVICE_CIDR, SYSCTLS, Cluster
from kubecluster.owned import cgroup_hierarchies, mount_table
from kubecluster.processes import NoCluster, run


def _record(cluster: Cluster, line: str) -> None:
    with cluster.before.open("a") as file:
        file.write(line + "\n")


def records(cluster: Cluster) -> list[tuple[str, str, str]]:
    """(kind, name, value) for each line of the record: ("sysctl", NAME, VALUE) and ("made", PATH, "")."""
    if not cluster.before.is_file():
        return []
    found = []
    for line in cluster.before.read_text().splitlines():
        kind, _, rest = line.partition(" ")
        name, _, value = rest.partition(" ") if kind == "sysctl" else (rest, "", "")
        found.append((kind, name, value))
    return found


def made(cluster: Cluster, path: Path) -> bool:
    """PATH, or a folder it is in, was made by this start."""
    ours = {Path(name) for kind, name, _ in records(cluster) if kind == "made"}
    return any(p in ours for p in (path, *path.parents) if p != Path("/"))


def make_fixed(cluster: Cluster, path: Path) -> None:
    """A folder at a fixed path and the parents it lacks, each recorded as made here (no exist_ok: where
    someone makes it first, it is theirs and the mkdir fails)."""
    absent: list[Path] = []
    while not path.exists() and not path.is_symlink():
        absent.insert(0, path)
        path = path.parent
    for folder in absent:
        try:
            folder.mkdir()
        except OSError as error:
            raise NoCluster(f"could not make {folder} ({error.strerror})") from None
        _record(cluster, f"made {folder}")


def place_fixed(cluster: Cluster, folder: Path, *files: Path) -> None:
    """FILES copied into a fixed folder, never over one the cluster did not make."""
    make_fixed(cluster, folder)
    for file in files:
        target = folder / file.name
        if (target.exists() or target.is_symlink()) and not made(cluster, target):
            raise NoCluster(f"{target} is there and not the cluster's (it would be overwritten)")
        shutil.copyfile(file, target)
        if not made(cluster, target):
            _record(cluster, f"made {target}")


def make_cgroup(path: str) -> None:
    """The cgroup PATH (relative to each hierarchy's top) and its parents in every hierarchy; a new
    cpuset cgroup starts with no CPUs and no memory nodes, so each level takes its parent's."""
    for hierarchy in cgroup_hierarchies():
        parent = hierarchy
        for part in path.strip("/").split("/"):
            folder = parent / part
            folder.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if (parent / name).is_file() and not (folder / name).read_text().strip():
                    (folder / name).write_text((parent / name).read_text())
            parent = folder


def make_cgroup_root(cluster: Cluster) -> None:
    """The kubelet checks that its cgroupRoot exists in every hierarchy: each node's subtree, with the
    node's own processes (kubelet, containerd, kube-proxy) in its system cgroup."""
    make_cgroup(CGROUP_ROOT)
    for node in cluster.nodes:
        make_cgroup(f"{node.cgroup}/system")


def sysctl(name: str) -> str:
    return Path("/proc/sys", name.replace(".", "/")).read_text().strip()


def remember_host(cluster: Cluster) -> None:
    """What a stop must put back (the sysctls the kubelet sets) and what it may take away: the mounts
    not in the table now, the fixed paths made here, the cluster's cgroup root."""
    cluster.mounts_before.write_text("".join(entry + "\n" for entry in mount_table()))
    cluster.before.write_text("".join(f"sysctl {name} {sysctl(name)}\n" for name in SYSCTLS))
    for path in FIXED_PATHS:
        make_fixed(cluster, Path(path))
    make_cgroup_root(cluster)


def make_namespace(cluster: Cluster) -> None:
    """The network namespaces: the cluster's (the control plane, the first node), and one per other
    node, joined by a bridge (the fabric) in the cluster's, each node's pod range routed to its fabric
    address. Each node has a bridge for its pods with its own address and no route out but the pods'
    and the service range's, which the node itself reaches Services by (kube-proxy's DNAT in OUTPUT),
    as a controller in a pod would."""
    for node in cluster.nodes:
        ns = node.netns
        run(["ip", "netns", "add", ns])
        run(["ip", "-n", ns, "link", "set", "lo", "up"])
        run(["ip", "-n", ns, "link", "add", "cni0", "type", "bridge"])
        run(["ip", "-n", ns, "addr", "add", f"{node.ip}/24", "dev", "cni0"])
        run(["ip", "-n", ns, "link", "set", "cni0", "up"])
        run(["ip", "-n", ns, "route", "add", SERVICE_CIDR, "dev", "cni0", "src", node.ip])
        settings = ["net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"]
        run(in_ns(ns, ["sysctl", "-qw", *settings]))
        subprocess.run(in_ns(ns, ["sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1"]), capture_output=True)
    if len(cluster.nodes) > 1:
        make_fabric(cluster)


def make_fabric(cluster: Cluster) -> None:
    control = cluster.control
    run(["ip", "-n", control.netns, "link", "add", "fabric0", "type", "bridge"])
    run(["ip", "-n", control.netns, "addr", "add", f"{control.fabric_ip}/24", "dev", "fabric0"])
    run(["ip", "-n", control.netns, "link", "set", "fabric0", "up"])
    for node in cluster.nodes[1:]:
        run(["ip", "-n", control.netns, "link", "add", node.link, "type", "veth", "peer", "name", "eth0",
             "netns", node.netns])  # fmt: skip
        run(["ip", "-n", control.netns, "link", "set", node.link, "master", "fabric0", "up"])
        run(["ip", "-n", node.netns, "addr", "add", f"{node.fabric_ip}/24", "dev", "eth0"])
        run(["ip", "-n", node.netns, "link", "set", "eth0", "up"])
    for node in cluster.nodes:
        device = "eth0" if node is not control else "fabric0"
        for other in cluster.nodes:
            if other is not node:
                run(["ip", "-n", node.netns, "route", "add", other.pod_cidr, "via", other.fabric_ip, "dev", device])


def in_ns(netns: str, command: list[str]) -> list[str]:
    return ["nsenter", f"--net=/run/netns/{netns}", *command]
